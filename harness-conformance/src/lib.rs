//! The shared conformance suite that certifies harness adapters, the way `tower-test` serves
//! tower: a crate every adapter's tests depend on.
//!
//! An adapter crate implements [`Knobs`] (a factory for fresh adapters, and requests that make
//! the adapter produce a [`Behaviour`] on demand) and calls [`certify`]:
//!
//! ```no_run
//! use harness_conformance::{Behaviour, Knobs, certify};
//! use harness_core::service::ExecutionRequest;
//! use harness_scripted::ScriptedAdapter;
//!
//! struct MyKnobs;
//! impl Knobs for MyKnobs {
//!     type Adapter = ScriptedAdapter;
//!     fn adapter(&self) -> ScriptedAdapter { ScriptedAdapter::quickstart() }
//!     fn request_for(&self, behaviour: &Behaviour) -> Option<ExecutionRequest> {
//!         // A request whose options make the adapter produce `behaviour`, or None.
//!         None
//!     }
//! }
//!
//! # async fn test() {
//! let report = certify(&MyKnobs).await;
//! println!("{report}"); // the table
//! std::fs::write("conformance.json", report.to_json()).unwrap();
//! report.assert_passed();
//! # }
//! ```
//!
//! Every fixture of [`FIXTURES`] has a stable id, a [`Group`] of the contract's conformance
//! list, and the capabilities it exercises. Every execution a fixture starts is cancelled
//! when the fixture ends, passed or failed, and every wait is bounded by [`Bounds`].
//!
//! # The capability gate
//!
//! Adapters narrow their descriptor per configuration in
//! [`evaluate`](harness_core::adapter::HarnessAdapter::evaluate) (an ACP agent without
//! reasoning, say), never widen it. So the levels that decide each fixture are those
//! `evaluate` reports for the configuration of [`Knobs::plain_request`] (its options and
//! conversation), taken within the descriptor's: a capability is usable only when both say
//! so (a report that widens the descriptor grants nothing, and `init.capability_report` fails
//! it). When `evaluate` fails (or panics, or hangs past [`Bounds::grace`]), the gate falls back
//! to the descriptor alone and [`Report::capability_gate`] says so. For each fixture:
//!
//! - when one of its capabilities is unusable for that configuration, the fixture
//!   checks that preflight ([`harness_layers::preflight::PreflightLayer`] over
//!   [`AdapterService`](harness_core::service::AdapterService)) refuses a request requiring it
//!   with `CAPABILITY_UNSUPPORTED`, before any runtime is created
//!   ([`FixtureOutcome::RefusedAtPreflight`]): never a silent skip;
//!   (the service checks requirements against `evaluate` too, so a capability the
//!   configuration lacks is refused even when the descriptor declares it);
//! - when they are usable, the fixture must pass; a fixture this suite version cannot
//!   test, or whose behaviour the knobs cannot produce, then *fails* ("not certifiable by suite
//!   version ...");
//! - fixtures tied to no capability are contract-level: they run for every adapter. Those that
//!   need a behaviour the knobs cannot produce are reported
//!   [`FixtureOutcome::NotExercised`] with the reason.
//!
//! # Groups 3 and 4: tools that really run
//!
//! For an adapter that runs the execution's portable tools (`tool.builtin` with
//! [`PORTABLE_TOOLS`](harness_core::capability::PORTABLE_TOOLS)), every service the suite
//! starts offers [the suite's own tools](tools), and the tool fixtures check what the tools
//! saw, not only what the log says:
//!
//! - `tool.success` / `tool.error`: the suite's [`tools::ECHO`] / [`tools::FAIL`] ran exactly
//!   once, and the call's `tool.call.completed` carries exactly what it returned;
//! - `tool.approval.*`: the approval is for [`tools::GATED`] (whose policy asks for it); the
//!   tool ran once per approved call with the proposed arguments, once per edited call with
//!   the caller's arguments ([`tools::EDITED_PATH`]), never for a rejected one;
//! - `tool.cancellation`: a call of [`tools::SLOW`] is in flight when the execution is
//!   cancelled: the run ends `run.cancelled` and the tool's future was dropped;
//! - `mcp.partial_failure`: with the provider [`tools::DOWN`] down, `tool.unavailable` names
//!   it once, [`tools::UP_ECHO`] runs, and the run succeeds;
//! - `mcp.caller_credential_isolation`: the request carries a caller's credential for
//!   [`tools::AUTH`] (in its extensions): [`tools::WHOAMI`], which needs it, succeeds; no
//!   other provider got it; no event holds it.
//!
//! For another adapter (an agent that runs its own tools), the tool fixtures check the log
//! alone, and the cancellation and MCP fixtures need their capabilities declared
//! unsupported (refused at preflight).
//!
//! # Group 5: sessions
//!
//! - `session.restart`: restart releases the runtime's clients and the next segment still runs;
//! - `session.multi_turn`: a later turn of a conversation sees what an earlier turn kept;
//!   another conversation does not. Through *one* adapter (one service), the suite runs
//!   [`Behaviour::Remember`] with a unique marker on a fresh conversation, then
//!   [`Behaviour::Recall`] on the same conversation, then [`Behaviour::Recall`] on a second
//!   one (the suite sets each request's conversation id). All three must succeed; the first
//!   recall's message text must contain the marker, and the second conversation's log must
//!   not hold it anywhere. The knobs' two recall requests must be alike and must not carry the
//!   marker: only the adapter's memory may tell the conversations apart. An adapter that
//!   declares `session.multi_turn` unusable (an ephemeral one) gets the preflight check;
//! - `session.clear`: a conversation remembers, its next turn recalls the marker, the
//!   service clears it ([`AdapterService::clear_session`](harness_core::service::AdapterService::clear_session)),
//!   and its next turn recalls nothing of it;
//! - `session.expired_state` (`thread.eviction_restore`): a conversation remembers on one
//!   replica, which then goes away with its adapter (runtimes, processes, in-memory maps);
//!   the next turn, on a second replica over the same store, must restore the marker or
//!   refuse with a `persistence` error: succeeding without it (silently starting afresh)
//!   fails. Then the provider's own state expires ([`Knobs::expire_native_state`]: an
//!   agent's saved sessions deleted): the next turn must again restore or refuse
//!   `persistence`;
//! - `session.cross_replica_resume`: a run pauses on a tool approval on replica `a`, which
//!   dies (its Tokio runtime shut down mid-flight: no lease released, nothing written
//!   after); replica `b` recovers the execution with its pending action
//!   ([`Recovery::Restored`](harness_core::service::Recovery::Restored)); the answer sent
//!   to `b` resumes the run there to `run.succeeded` with the calls completed, a second
//!   answer is refused, and the stored log is contiguous with one terminal event;
//! - `runtime.lease_fencing`: replica `a` runs an execution that hangs and is cut off from
//!   the store past its lease; `b` takes the execution over and ends it (`run.failed`,
//!   `OWNER_LOST`); when `a` reaches the store again it is fenced: its local run stops and
//!   the store keeps exactly one terminal event, `b`'s.
//!
//! - `runtime.eviction_recovery`: on a service whose pool of paused runtimes holds none
//!   (every pause evicted at once), a run on a fresh conversation pauses on a tool approval;
//!   its runtime must be evicted (the runtime says it can be restored), and the answer must
//!   resume the run on a fresh runtime that restores the pause, to `run.succeeded` with the
//!   calls completed and one `action.resolved`; a second answer is refused. One service, no
//!   store: the pause is restored from what the adapter kept (its thread state, the log).
//!
//! The replicas of these fixtures are services of their own over a fresh adapter each
//! ([`Knobs::adapter`]), sharing one [`MemoryStore`](harness_core::store::MemoryStore)
//! (executions and thread state) with a 300 ms lease.
//!
//! # The runtime contract's lifecycle rules
//!
//! Some rules are about what the service does with the adapter's runtimes; the suite checks
//! them with a wrapper between the two (its runtimes delegate to the adapter's):
//!
//! - `runtime.single_mutation` (contract-level): every mutating call (`stream` and
//!   `resume` until their terminal item, end or drop; `restart`; `cleanup`) marks its
//!   runtime busy; a call that finds it busy fails the fixture. Driven with two runs at
//!   once, a cancel while streaming, an answer and a cancel at once, two answers at once
//!   then a cancel while resumed, and a run cut by its turn deadline;
//! - `runtime.bounded_cleanup`: the adapter's cleanup returns within [`Bounds::grace`]
//!   after a hanging segment was given up and while a pause is open; and a runtime whose
//!   cleanup never returns is cut at the service's cleanup deadline: the run's outcome
//!   stands, the service logs the cut as a classified error (`timeout`, `TIMEOUT`), and
//!   the runtime (with the adapter's it holds) is dropped while the caller still holds the
//!   handle;
//! - `session.restart`: besides the runtime-boundary check (restart, then a segment runs),
//!   restart is called before every segment through the service: a conversation's later
//!   turn must recall what an earlier one kept, and a run paused on an approval, restarted
//!   before its answer, must still report the same pending interrupt and run to
//!   `run.succeeded` on the answer;
//! - `tool.builtin`: every `tool.call.started` completes exactly once; for an adapter that
//!   runs portable tools, [`tools::ECHO`] ran once with the arguments the log reports;
//! - `thread.durable_commit`: a turn's state is committed by its terminal event (its
//!   replica dropped at once, a fresh one over the same store recalls it), and two turns
//!   of one conversation at once each succeed or fail `persistence`, one at least
//!   succeeding.
//!
//! # Evidence per capability
//!
//! A passing fixture is evidence for the capabilities it is tied to:
//! [`FixtureResult::verifies`] lists them (empty for any other outcome), and
//! [`Report::verified_by`] answers which fixtures verified a capability. The text report
//! ends with one `verified <capability> by <fixtures>` line each.
//!
//! # Group 12: observability
//!
//! The harness's layers do the observing; what an adapter owes them is to keep its work where
//! they can see it. Each of these fixtures but the last runs on a thread of its own with a
//! current-thread Tokio runtime, a thread-local `metrics_util` `DebuggingRecorder` and a
//! thread-local `tracing` subscriber, so nothing is installed process-wide and no other
//! test's telemetry is seen:
//!
//! - `observability.metrics`: through the metrics layer, every execution (succeeded, failed
//!   and cancelled ones, as the knobs allow) is counted started and finished with the outcome
//!   (and category) its log ended with, has one duration sample, its events are counted by
//!   kind exactly as its log holds them, the in-flight gauge returns to zero, and no label
//!   carries an execution id;
//! - `observability.tracing`: each execution has one `harness.execution` span naming the
//!   adapter, the execution and its outcome, closed after the end; every runtime hook call and
//!   every poll of its streams happens inside it, and so does every tracing event emitted on
//!   the execution's runtime (work moved to an uninstrumented task is caught; what other
//!   threads log, a blocking pool's or the adapter's own, is not seen);
//! - `observability.trace_propagation`: the caller's W3C trace context reaches the runtime's
//!   turn as the child of the execution span, and the runtime propagates that context
//!   ([`Behaviour::EchoTraceContext`]);
//! - `observability.redaction`: with the redaction layer on, a secret planted in the client
//!   context and one the adapter produces ([`Behaviour::EmitSecret`]) reach no event, public
//!   error or span field (an adapter recording its prompt on a span of its own is caught);
//! - `observability.leaks.tasks`: no Tokio task outlives its executions, counted on the
//!   fixture's own runtime (the caller's may start and end work of its own meanwhile);
//! - `observability.leaks.fds_children`: no file descriptor or child process outlives its
//!   executions; these are counted for the whole process, so the fixture runs only when
//!   [`Knobs::process_isolated`] says the suite is alone in it (and `/proc` can tell), and is
//!   otherwise reported [`FixtureOutcome::NotExercised`].
//!
//! Those fixtures' runtimes are shut down when they end, waiting at most [`Bounds::grace`]
//! for work the adapter left behind (blocking tasks included).
//!
//! # Group 9: skills
//!
//! `skills.missing_blocked` builds a service whose catalog offers [`skills::SKILL`] (its
//! body holds [`skills::MARKER`]), a skill offered to another principal only, and a blocked
//! name. A request granted the skill ([`Behaviour::UseSkill`]) must succeed and its message
//! text must hold the marker: the harness saw the skill, not just the adapter. Then a missing
//! skill and the hidden one must be refused `SKILL_NOT_FOUND` with the same message (the
//! name aside), and the blocked one `SKILL_BLOCKED`, each `configuration`, naming the skill,
//! before the adapter creates any runtime. An adapter whose `skills` is unusable is checked
//! at preflight like any other.
//!
//! The sandbox's fixtures sit in group 12 too (the contract's list has no group of its own
//! for it; resource containment is closest to its leak checks), tied to
//! `runtime.sandbox_isolation`, so an adapter that does not claim it is checked at preflight:
//!
//! - `sandbox.escape`: the suite plants a file in a directory of its own (outside any
//!   workspace) and opens a listener on the host's `127.0.0.1`; the agent, asked
//!   ([`Behaviour::Escape`]) to read the file, write beside it and connect to the listener,
//!   must report each probe denied, the run must succeed, and the suite checks that no file
//!   appeared and the listener took no connection;
//! - `sandbox.limits`: a fork bomb ([`Behaviour::ForkBomb`]) must end the run `run.failed`
//!   with category `capacity`, within [`Bounds::run`].
//!
//! The [`Report`] names the adapter and its implementation version, the contract version, the
//! suite version and every fixture's outcome, with an evidence id derived from its content.
//! What a passing fixture records names nothing that changes from run to run (execution,
//! action or provider session ids, markers), so the same outcomes give the same evidence id.
#![warn(missing_docs)]

use std::fmt;
use std::time::Duration;

use harness_core::capability::CapabilityKey;
use harness_core::error::ErrorCategory;
use harness_core::service::ExecutionRequest;
use serde::Serialize;

mod contract;
mod files;
mod fixtures;
mod observe;
mod probe;
mod replicas;
mod report;
mod sequences;
mod sessions;
pub mod skills;
pub mod tools;

pub use report::{FixtureResult, GATE_EVALUATED, Report};

/// The version of this suite: the crate version. Evidence is valid for one suite version.
pub const SUITE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// A behaviour a fixture needs the adapter to produce on demand.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Behaviour {
    /// Stream assistant text (`message.delta`), then succeed.
    StreamText,
    /// Stream reasoning (`reasoning.delta`), then succeed.
    StreamReasoning,
    /// Report token usage, then succeed.
    StreamUsage,
    /// Run one tool call that succeeds, then succeed. An adapter that runs portable tools
    /// calls the suite's [`tools::ECHO`] with [`tools::arguments`].
    ToolSuccess,
    /// Run one tool call that fails, then end the run. An adapter that runs portable tools
    /// calls the suite's [`tools::FAIL`].
    ToolError,
    /// Pause on a tool approval over `calls` calls (ids distinct), then complete each call as
    /// decided and succeed. With `editable`, every call allows the `edit` decision. An
    /// adapter that runs portable tools calls the suite's [`tools::GATED`] `calls` times
    /// (its policy asks for the approval).
    ToolApproval {
        /// How many calls the approval covers (at least 1).
        calls: usize,
        /// Whether the calls allow `edit`.
        editable: bool,
    },
    /// Pause on a form (dismissible), then succeed.
    FormInput,
    /// Work until cancelled, never ending by itself.
    Hang,
    /// Fail with `category`; `diagnostic` is private detail that must never reach an event.
    Fail {
        /// The error category.
        category: ErrorCategory,
        /// Private detail (a canary the suite looks for).
        diagnostic: String,
    },
    /// Panic with `message` (a canary the suite looks for).
    ///
    /// For an adapter whose provider runs out of process (an agent, a model server), a
    /// "panic" is the provider's crash, mid-stream, with `message` in what it leaves behind:
    /// an agent process that panics (its stack trace, holding `message`, on its stderr, and
    /// an abnormal exit), or a model server that fails mid-response (the failure's text,
    /// holding `message`, in the truncated body). `faults.panic_sanitized` then requires the
    /// run to end `run.failed` classified (`unavailable`, or `internal` with a code of the
    /// adapter's), with `message` in no event and not in the public error; an in-process
    /// panic must be `internal/ADAPTER_PANICKED`.
    Panic {
        /// The panic message.
        message: String,
    },
    /// Produce output the contract or the provider's protocol forbids: an item after the
    /// terminal one (a runtime of one's own), or, from a provider behind an adapter, a message
    /// its protocol refuses (an ACP agent's line that is not JSON-RPC, a model server's
    /// stream event that is not JSON). A deliberate protocol
    /// fault, which must end the run `protocol` with one terminal.
    MalformedOrder,
    /// Stream, as message text, the W3C `traceparent` the runtime propagates to its provider
    /// for this turn (what it received in [`TurnInput::trace_context`]), then succeed.
    ///
    /// [`TurnInput::trace_context`]: harness_core::adapter::TurnInput::trace_context
    EchoTraceContext,
    /// Take until cancelled to `initialize` (a slow provider start), then stream text and
    /// succeed if ever initialized.
    SlowInitialize,
    /// Pause on a tool approval of one call; once answered, work until cancelled, never
    /// ending by itself.
    ApprovalThenHang,
    /// Pause on a tool approval of one call; once answered, pause on a second tool approval
    /// (another action, another call); once that is answered, succeed.
    SequentialApprovals,
    /// Produce `secret` in assistant text (a provider echoing a credential), then succeed.
    EmitSecret {
        /// The secret (a canary the suite looks for).
        secret: String,
    },
    /// One turn of a conversation (the suite sets the conversation id on the request) that
    /// the adapter must remember: succeed, keeping `marker` in the conversation's history.
    Remember {
        /// A unique string a later turn of the same conversation must recall.
        marker: String,
    },
    /// A later turn of a conversation: stream, as message text, what an earlier turn of the
    /// same conversation asked to remember (nothing if none), then succeed.
    Recall,
    /// Call the suite's [`tools::SLOW`] (which runs until cancelled), then succeed if it
    /// ever returns. For `tool.cancellation`.
    ToolSlow,
    /// Call [`tools::UP_ECHO`], the tool of a provider that is up while another
    /// ([`tools::DOWN`]) is down, then succeed. For `mcp.partial_failure`.
    ProviderTool,
    /// Call [`tools::WHOAMI`], whose provider takes the caller's credential, then succeed.
    /// For `mcp.caller_credential_isolation`.
    CredentialTool,
    /// Try each escape the suite set up, from where the adapter's agent runs, and report
    /// each as one line of message text, `<probe> ok` when it succeeded or `<probe> denied`
    /// (a reason may follow) when it did not; then succeed. The probes, in this order:
    /// `read:<read>` (a file the suite planted outside any workspace), `write:<write>` (a
    /// path beside it), `connect:<connect>` (a listener the suite opened on the host's
    /// `127.0.0.1`, which no sandbox profile of the knobs may allow). For
    /// `runtime.sandbox_isolation`.
    Escape {
        /// The file to read.
        read: std::path::PathBuf,
        /// The file to create.
        write: std::path::PathBuf,
        /// The port to connect to.
        connect: u16,
    },
    /// Start processes until something stops it, never ending by itself: the sandbox's
    /// process limit must end the run. For `runtime.sandbox_isolation`.
    ForkBomb,
    /// Use the skill `name`, which the suite grants (it sets the request's `skills`; its
    /// description is [`skills::DESCRIPTION`]): stream, as message text, what the harness
    /// sees of it, which must include the line of its body holding `marker`; then succeed.
    /// A model loop loads it with its skill tools; an agent reads it where it reads skill
    /// folders. For `skills`.
    UseSkill {
        /// The skill's name ([`skills::SKILL`]).
        name: String,
        /// The marker in its body ([`skills::MARKER`]).
        marker: String,
    },
}

impl Behaviour {
    /// The probes of [`Behaviour::Escape`], as the lines of its report begin.
    #[must_use]
    pub fn escape_probes(&self) -> Vec<String> {
        match self {
            Self::Escape {
                read,
                write,
                connect,
            } => vec![
                format!("read:{}", read.display()),
                format!("write:{}", write.display()),
                format!("connect:{connect}"),
            ],
            _ => Vec::new(),
        }
    }
}

impl fmt::Display for Behaviour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::StreamText => f.write_str("StreamText"),
            Self::StreamReasoning => f.write_str("StreamReasoning"),
            Self::StreamUsage => f.write_str("StreamUsage"),
            Self::ToolSuccess => f.write_str("ToolSuccess"),
            Self::ToolError => f.write_str("ToolError"),
            Self::ToolApproval { calls, editable } => {
                write!(f, "ToolApproval{{calls: {calls}, editable: {editable}}}")
            }
            Self::FormInput => f.write_str("FormInput"),
            Self::Hang => f.write_str("Hang"),
            Self::Fail { category, .. } => write!(f, "Fail({category:?})"),
            Self::Panic { .. } => f.write_str("Panic"),
            Self::MalformedOrder => f.write_str("MalformedOrder"),
            Self::EchoTraceContext => f.write_str("EchoTraceContext"),
            Self::SlowInitialize => f.write_str("SlowInitialize"),
            Self::ApprovalThenHang => f.write_str("ApprovalThenHang"),
            Self::SequentialApprovals => f.write_str("SequentialApprovals"),
            Self::EmitSecret { .. } => f.write_str("EmitSecret"),
            Self::Remember { .. } => f.write_str("Remember"),
            Self::Recall => f.write_str("Recall"),
            Self::ToolSlow => f.write_str("ToolSlow"),
            Self::ProviderTool => f.write_str("ProviderTool"),
            Self::CredentialTool => f.write_str("CredentialTool"),
            Self::Escape { .. } => f.write_str("Escape"),
            Self::ForkBomb => f.write_str("ForkBomb"),
            Self::UseSkill { .. } => f.write_str("UseSkill"),
        }
    }
}

/// Bounds on every wait of the suite. Waits are bounded, never asserted on: a fixture that
/// hits a bound fails naming it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// How long one execution (or one runtime segment) may take to end.
    pub run: Duration,
    /// How long a runtime's stream may keep going after its cancel hook, and how long one
    /// `initialize`, `cancel`, `restart` or `cleanup` call may take.
    pub grace: Duration,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            run: Duration::from_secs(10),
            grace: Duration::from_secs(5),
        }
    }
}

/// What an adapter crate gives the suite: fresh adapters, and requests that produce behaviours.
pub trait Knobs: Send + Sync {
    /// The adapter type.
    type Adapter: harness_core::adapter::HarnessAdapter;

    /// A fresh adapter (each fixture gets its own; `session.multi_turn` runs all its turns
    /// through one).
    fn adapter(&self) -> Self::Adapter;

    /// A request that makes the adapter produce `behaviour`, or `None` when it cannot on
    /// demand. The suite may add client context, a trace context and required capabilities
    /// to it.
    fn request_for(&self, behaviour: &Behaviour) -> Option<ExecutionRequest>;

    /// A request any run of the adapter accepts and that ends by itself; by default a short
    /// message with no options. Its configuration (options, conversation) is the one the
    /// capability gate evaluates (see the [crate docs](crate#the-capability-gate)).
    fn plain_request(&self) -> ExecutionRequest {
        ExecutionRequest::new("conformance: reply with one short sentence")
    }

    /// The bounds on the suite's waits.
    fn bounds(&self) -> Bounds {
        Bounds::default()
    }

    /// Makes the provider's native conversation state expire, as the provider's retention
    /// would: every session the adapter's provider keeps of its own, outside the service's
    /// thread state (an ACP agent's saved sessions, a hosted thread), is deleted on the
    /// provider's side. Returns whether it did; `false` (the default) says the provider keeps
    /// no native state of its own, all of it being in the thread state (which
    /// `session.expired_state` checks by losing a replica).
    ///
    /// With `true`, `session.expired_state` also checks that a conversation's next turn after
    /// the expiry restores what was kept or refuses with a `persistence` error, never
    /// silently starts afresh.
    fn expire_native_state(&self) -> bool {
        false
    }

    /// Whether the suite runs alone in its process, so that open file descriptors and child
    /// processes can be attributed to it (the leak fixture is otherwise reported
    /// not exercised). Tokio tasks are counted on a runtime of the fixture's own and need no
    /// isolation.
    fn process_isolated(&self) -> bool {
        false
    }
}

/// The twelve groups of the contract's conformance list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Group {
    /// 1. Initialization and cleanup idempotency.
    Lifecycle,
    /// 2. Text, reasoning and usage streaming and terminal ordering.
    Streaming,
    /// 3. Tool success, error, approval, edit, rejection and several calls.
    Tools,
    /// 4. MCP partial failure and caller credential isolation.
    Mcp,
    /// 5. Session restart, multi-turn history, cross-replica resume, clear and expired state.
    Sessions,
    /// 6. Form input and duplicate or conflicting resume.
    Actions,
    /// 7. Cancellation at every lifecycle boundary.
    Cancellation,
    /// 8. File modalities and limits.
    Files,
    /// 9. Skills, missing and blocked skills.
    Skills,
    /// 10. Subagents, mixed harnesses, namespaces, cycles and nested interrupts.
    Subagents,
    /// 11. Provider faults, malformed events, timeouts and sanitized errors.
    Faults,
    /// 12. Metrics, traces, redaction and resource leaks.
    Observability,
}

impl Group {
    /// The number of the group in the contract's list (1 to 12).
    #[must_use]
    pub fn number(self) -> u8 {
        self as u8 + 1
    }
}

/// One fixture of the suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fixture {
    /// The stable id (`group.rule`).
    pub id: &'static str,
    /// The contract group it belongs to.
    pub group: Group,
    /// The capabilities it exercises; empty for contract-level fixtures.
    pub capabilities: &'static [CapabilityKey],
    /// The rule it checks, in one line.
    pub rule: &'static str,
}

/// Every fixture of this suite version, in run order.
pub use fixtures::FIXTURES;

/// How one fixture ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum FixtureOutcome {
    /// The rule held; `evidence` says what was observed.
    Passed {
        /// What was observed.
        evidence: String,
    },
    /// The rule was broken (or could not be verified for a declared capability).
    Failed {
        /// The precise reason, naming the rule.
        reason: String,
    },
    /// The adapter declares the capabilities unusable, and preflight refused a request
    /// requiring them before any runtime was created.
    RefusedAtPreflight {
        /// The capabilities refused.
        capabilities: Vec<CapabilityKey>,
    },
    /// A contract-level fixture the adapter's knobs cannot drive; `reason` says why.
    NotExercised {
        /// Why.
        reason: String,
    },
}

impl FixtureOutcome {
    /// Whether this outcome breaks certification.
    #[must_use]
    pub fn is_failure(&self) -> bool {
        matches!(self, Self::Failed { .. })
    }

    /// The short status word (`passed`, `FAILED`, `refused`, `not exercised`).
    #[must_use]
    pub fn status(&self) -> &'static str {
        match self {
            Self::Passed { .. } => "passed",
            Self::Failed { .. } => "FAILED",
            Self::RefusedAtPreflight { .. } => "refused at preflight (declared)",
            Self::NotExercised { .. } => "not exercised",
        }
    }

    /// The evidence, reason or refused capabilities, as text.
    #[must_use]
    pub fn detail(&self) -> String {
        match self {
            Self::Passed { evidence } => evidence.clone(),
            Self::Failed { reason } | Self::NotExercised { reason } => reason.clone(),
            Self::RefusedAtPreflight { capabilities } => {
                let list: Vec<&str> = capabilities.iter().map(|c| c.as_str()).collect();
                format!("declared unsupported: {}", list.join(", "))
            }
        }
    }
}

/// Runs every fixture against adapters from `knobs` and returns the report.
///
/// Needs a Tokio runtime with the time driver (a `#[tokio::test]` has one).
pub async fn certify<K: Knobs>(knobs: &K) -> Report {
    let adapter = knobs.adapter();
    let descriptor = harness_core::manifest::Describe::descriptor(&adapter).clone();
    let gate = fixtures::gate(knobs, &adapter).await;
    let mut results = Vec::with_capacity(FIXTURES.len());
    for fixture in FIXTURES {
        let outcome = fixtures::run(knobs, fixture).await;
        results.push(FixtureResult::new(fixture, outcome));
    }
    let capability_gate = gate
        .fallback
        .unwrap_or_else(|| report::GATE_EVALUATED.to_owned());
    Report::new(&descriptor, capability_gate, results)
}

/// Runs one fixture by id (for focused tests); `None` for an unknown id.
pub async fn run_fixture<K: Knobs>(knobs: &K, id: &str) -> Option<FixtureResult> {
    let fixture = FIXTURES.iter().find(|f| f.id == id)?;
    let outcome = fixtures::run(knobs, fixture).await;
    Some(FixtureResult::new(fixture, outcome))
}
