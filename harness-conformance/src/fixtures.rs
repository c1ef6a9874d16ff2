//! The fixtures.

use std::collections::BTreeSet;

use harness_core::action::{
    ActionKind, ActionRequest, ActionResponse, ApprovalResponse, DecisionKind, FormResponse,
    ToolDecision,
};
use harness_core::adapter::{AdapterEvent, HarnessAdapter, ResumeDecision};
use harness_core::capability::CapabilityKey as K;
use harness_core::error::{ErrorCategory, ErrorCode};
use harness_core::event::{CancelReason, EventPayload, ToolCallOutcome};
use harness_core::manifest::Describe;
use harness_core::service::{CancelStatus, ExecutionRequest, Outcome};
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use harness_core::tool::{CallerCredentials, Credential};
use serde_json::{Value, json};

use crate::probe::Observed;
use crate::tools::{self, Seen};
use crate::{Behaviour, Fixture, FixtureOutcome, Group, Knobs, SUITE_VERSION};
use crate::{observe, probe, replicas, sequences, sessions};

macro_rules! fixture {
    ($id:literal, $group:ident, [$($cap:ident),*], $rule:literal) => {
        Fixture { id: $id, group: Group::$group, capabilities: &[$(K::$cap),*], rule: $rule }
    };
}

/// Every fixture of this suite version, in run order.
pub static FIXTURES: &[Fixture] = &[
    fixture!(
        "init.idempotent",
        Lifecycle,
        [],
        "initialize twice returns the same result"
    ),
    fixture!(
        "init.capability_report",
        Lifecycle,
        [],
        "evaluate answers, bounded, and never widens the descriptor's support"
    ),
    fixture!(
        "cleanup.idempotent",
        Lifecycle,
        [],
        "cleanup twice returns, bounded, without panicking"
    ),
    fixture!(
        "runtime.bounded_cleanup",
        Lifecycle,
        [RuntimeBoundedCleanup],
        "cleanup returns within its deadline after a hanging segment and while paused; a cleanup that hangs is cut at the service's deadline, the outcome stands, a classified error is reported and the runtime released"
    ),
    fixture!(
        "runtime.single_mutation",
        Lifecycle,
        [],
        "only one mutating stream, resume, restart or cleanup call runs on a runtime at a time, under concurrent runs, cancels and answers"
    ),
    fixture!(
        "stream.text",
        Streaming,
        [StreamText],
        "text streams as message.delta, then one terminal"
    ),
    fixture!(
        "stream.reasoning",
        Streaming,
        [StreamReasoning],
        "reasoning streams as reasoning.delta"
    ),
    fixture!(
        "stream.usage",
        Streaming,
        [StreamUsage],
        "usage is reported"
    ),
    fixture!(
        "stream.terminal_ordering",
        Streaming,
        [],
        "exactly one terminal event, last; no protocol failure"
    ),
    fixture!(
        "stream.sequence_contiguous",
        Streaming,
        [],
        "event sequence is contiguous from 1, one execution id"
    ),
    fixture!(
        "stream.segment_protocol",
        Streaming,
        [],
        "a runtime segment yields exactly one terminal item, last, then ends"
    ),
    fixture!(
        "tool.success",
        Tools,
        [],
        "a successful tool call is started then completed with success"
    ),
    fixture!(
        "tool.error",
        Tools,
        [],
        "a failing tool call completes with failure"
    ),
    fixture!(
        "tool.builtin",
        Tools,
        [ToolBuiltin],
        "each tool call started completes exactly once; a portable tool runs once through its handle with the arguments the log reports"
    ),
    fixture!(
        "tool.approval.approve",
        Tools,
        [InterruptToolApproval],
        "an approved call runs"
    ),
    fixture!(
        "tool.approval.edit",
        Tools,
        [InterruptToolApproval],
        "an edited call runs with the edited arguments"
    ),
    fixture!(
        "tool.approval.reject",
        Tools,
        [InterruptToolApproval],
        "a rejected call completes as rejected"
    ),
    fixture!(
        "tool.approval.multi",
        Tools,
        [InterruptToolApproval, InterruptMultiTool],
        "each call of one approval gets its own decision"
    ),
    fixture!(
        "tool.cancellation",
        Tools,
        [ToolCancellation],
        "cancelling the execution stops a tool call in flight"
    ),
    fixture!(
        "mcp.partial_failure",
        Mcp,
        [ToolMcp, ToolPartialAvailability],
        "an MCP server failure degrades, not fails, the run"
    ),
    fixture!(
        "mcp.caller_credential_isolation",
        Mcp,
        [ToolCallerCredentials],
        "caller credentials reach only their tool"
    ),
    fixture!(
        "session.restart",
        Sessions,
        [RuntimeRestart],
        "restart releases and the next segment still runs; durable conversation state survives it: a later turn recalls across a restart, and a restart while paused keeps the interrupt answerable"
    ),
    fixture!(
        "session.multi_turn",
        Sessions,
        [SessionMultiTurn],
        "a later turn of a conversation sees what an earlier turn kept; another conversation does not"
    ),
    fixture!(
        "session.cross_replica_resume",
        Sessions,
        [SessionCrossReplicaResume],
        "a paused run resumes on another replica"
    ),
    fixture!(
        "session.clear",
        Sessions,
        [SessionClear],
        "clearing a session forgets its turns"
    ),
    fixture!(
        "session.expired_state",
        Sessions,
        [ThreadEvictionRestore],
        "expired state (a replica lost with its runtimes; the provider's native session expired) is restored or refused persistence, never silently started afresh"
    ),
    fixture!(
        "thread.durable_commit",
        Sessions,
        [ThreadDurableCommit],
        "a turn's state is committed by its terminal event; concurrent turns of one conversation succeed or fail persistence"
    ),
    fixture!(
        "runtime.lease_fencing",
        Sessions,
        [RuntimeLeaseFencing],
        "a replica cut off past its lease is fenced: another ends the execution, the stale one stops"
    ),
    fixture!(
        "runtime.eviction_recovery",
        Sessions,
        [RuntimeEvictionRecovery, InterruptToolApproval],
        "a paused runtime evicted by the service's pool is restored when the answer comes, and the run resumes once"
    ),
    fixture!(
        "action.form_input",
        Actions,
        [InterruptFormInput],
        "a form pauses the run until it is answered"
    ),
    fixture!(
        "action.duplicate_resume",
        Actions,
        [InterruptToolApproval],
        "one decision resumes a runtime at most once"
    ),
    fixture!(
        "action.conflicting_resume",
        Actions,
        [InterruptToolApproval],
        "an answer to another action is refused and the action stays open"
    ),
    fixture!(
        "action.form_submit",
        Actions,
        [InterruptFormInput],
        "an invalid submission is refused naming the field and the action stays pending; a valid one is accepted once and the run continues"
    ),
    fixture!(
        "action.sequential_interrupts",
        Actions,
        [],
        "an interrupt raised after an answer is a new action; each is answered at most once, sequences contiguous"
    ),
    fixture!(
        "cancel.before_run",
        Cancellation,
        [],
        "cancel before any run is safe and idempotent"
    ),
    fixture!(
        "cancel.after_run",
        Cancellation,
        [],
        "cancel after the run is safe and idempotent"
    ),
    fixture!(
        "cancel.while_streaming",
        Cancellation,
        [RuntimeCancel],
        "cancel stops a running stream within grace"
    ),
    fixture!(
        "cancel.while_awaiting",
        Cancellation,
        [InterruptToolApproval],
        "cancel while awaiting an action ends as cancelled"
    ),
    fixture!(
        "cancel.during_initialize",
        Cancellation,
        [],
        "cancel while the runtime initializes: initialize returns within grace, one run.cancelled, one cleanup"
    ),
    fixture!(
        "cancel.during_resume",
        Cancellation,
        [],
        "cancel after an answer, while the resumed segment streams: it ends within grace, one run.cancelled, one cleanup"
    ),
    fixture!(
        "files.modalities",
        Files,
        [InputImages, InputDocuments],
        "an image and a document are accepted and read by the adapter after validation; too large, wrong type by content and too many are refused before anything runs, naming the file"
    ),
    fixture!(
        "skills.missing_blocked",
        Skills,
        [Skills],
        "a granted skill reaches the harness, which shows its body; a missing skill, one offered to other principals only (refused exactly as a missing one) and a blocked one are refused before anything runs, SKILL_NOT_FOUND and SKILL_BLOCKED, naming the skill"
    ),
    fixture!(
        "subagents.nested",
        Subagents,
        [Subagents, SubagentsMixedHarness],
        "subagents, namespaces, cycles and nested interrupts"
    ),
    fixture!(
        "faults.provider_error",
        Faults,
        [],
        "a provider error ends the run as failed with its category"
    ),
    fixture!(
        "faults.panic_sanitized",
        Faults,
        [],
        "a panic (in the adapter: internal/ADAPTER_PANICKED; of a provider out of process: its crash) ends the run classified, and its text stays private"
    ),
    fixture!(
        "faults.malformed_events",
        Faults,
        [],
        "events after the terminal end the run with protocol"
    ),
    fixture!(
        "faults.timeout",
        Faults,
        [],
        "past the turn deadline a hanging run fails with timeout, one terminal"
    ),
    fixture!(
        "faults.sanitized_error",
        Faults,
        [],
        "an error's diagnostic never reaches an event"
    ),
    fixture!(
        "observability.no_leaked_credential",
        Observability,
        [],
        "a credential in client context never reaches an event or public error"
    ),
    fixture!(
        "observability.metrics",
        Observability,
        [ObservabilityMetrics],
        "through the metrics layer every execution is counted started and finished with its outcome, timed, its events counted by kind, in-flight back to 0"
    ),
    fixture!(
        "observability.tracing",
        Observability,
        [ObservabilityTracing],
        "one execution span per run names adapter, id and outcome; the runtime's work and its tracing events happen inside it"
    ),
    fixture!(
        "observability.trace_propagation",
        Observability,
        [ObservabilityTracePropagation],
        "the caller's trace context reaches the runtime as the child of the execution span, and the runtime propagates it"
    ),
    fixture!(
        "observability.redaction",
        Observability,
        [ObservabilityRedaction],
        "with the redaction layer on, a secret planted in the request or produced by the adapter reaches no event, public error or span field"
    ),
    fixture!(
        "sandbox.escape",
        Observability,
        [RuntimeSandboxIsolation],
        "from inside its sandbox the agent cannot read or write outside its workspace or reach a host port its profile does not allow"
    ),
    fixture!(
        "sandbox.limits",
        Observability,
        [RuntimeSandboxIsolation],
        "a fork bomb inside the sandbox ends the run failed with capacity, bounded, one terminal"
    ),
    fixture!(
        "observability.leaks.tasks",
        Observability,
        [],
        "no Tokio task outlives its executions"
    ),
    fixture!(
        "observability.leaks.fds_children",
        Observability,
        [],
        "no file descriptor or child process outlives its executions"
    ),
];

/// One tool approval over one call, no edit: the behaviour most action fixtures pause on.
pub(crate) const ONE_APPROVAL: Behaviour = Behaviour::ToolApproval {
    calls: 1,
    editable: false,
};

/// Fixtures this suite version cannot test even when the capability is declared.
const UNCERTIFIABLE: &[&str] = &["subagents.nested"];

/// A credential-shaped canary the suite plants and looks for.
const CANARY: &str = "sk-conformance-canary-7f3e9a1c5b";

type Verdict = Result<String, String>;

/// The capability levels the gate decides on, and why they are not `evaluate`'s when they
/// are not.
pub(crate) struct Gate {
    /// `evaluate`'s report for the knobs' plain request, or the descriptor's on fallback.
    levels: harness_core::capability::CapabilityReport,
    /// Set when `evaluate` failed and the descriptor was used instead.
    pub(crate) fallback: Option<String>,
}

impl Gate {
    /// Whether `key` is usable: by the evaluated report *and* the descriptor (a report that
    /// widens the descriptor grants nothing; `init.capability_report` fails it).
    fn usable<A: HarnessAdapter>(&self, adapter: &A, key: K) -> bool {
        self.levels.level(key).is_usable()
            && adapter.descriptor().capabilities().level(key).is_usable()
    }

    fn level(&self, key: K) -> String {
        self.levels.level(key).to_string()
    }
}

/// The configuration of the knobs' plain request: the one the gate evaluates and
/// `init.capability_report` checks.
fn plain_config<Kn: Knobs>(knobs: &Kn) -> harness_core::adapter::AgentConfig {
    let plain = knobs.plain_request();
    harness_core::adapter::AgentConfig {
        conversation: plain.conversation(),
        options: plain.options,
        ..harness_core::adapter::AgentConfig::default()
    }
}

/// Evaluates `adapter` for the knobs' plain request (the configuration the suite runs),
/// falling back to its descriptor when `evaluate` fails.
pub(crate) async fn gate<Kn: Knobs>(knobs: &Kn, adapter: &Kn::Adapter) -> Gate {
    use harness_core::adapter::DeploymentContext;
    let config = plain_config(knobs);
    let deployment = DeploymentContext::default();
    let evaluated = probe::hook("evaluate", knobs.bounds().grace, || {
        adapter.evaluate(&config, &deployment)
    })
    .await;
    let fallback = |why: String| Gate {
        levels: adapter.descriptor().capabilities().clone(),
        fallback: Some(format!(
            "evaluate failed for the plain request ({why}): capabilities gated on the \
             descriptor"
        )),
    };
    match evaluated {
        Ok(Ok(levels)) => Gate {
            levels,
            fallback: None,
        },
        Ok(Err(e)) => fallback(format!("{}: {}", e.code().as_str(), e.message())),
        Err(e) => fallback(e),
    }
}

pub(crate) async fn run<Kn: Knobs>(knobs: &Kn, fixture: &Fixture) -> FixtureOutcome {
    let adapter = knobs.adapter();
    let gate = gate(knobs, &adapter).await;
    let unusable: Vec<K> = fixture
        .capabilities
        .iter()
        .copied()
        .filter(|k| !gate.usable(&adapter, *k))
        .collect();
    if !unusable.is_empty() {
        let request = knobs.plain_request();
        return match probe::check_refused(adapter, request, &unusable, knobs.bounds().grace).await {
            Ok(()) => FixtureOutcome::RefusedAtPreflight {
                capabilities: unusable,
            },
            Err(reason) => FixtureOutcome::Failed { reason },
        };
    }
    if UNCERTIFIABLE.contains(&fixture.id) {
        let declared: Vec<String> = fixture
            .capabilities
            .iter()
            .map(|k| format!("{} ({})", k.as_str(), gate.level(*k)))
            .collect();
        return FixtureOutcome::Failed {
            reason: format!(
                "declared {} but not certifiable by suite version {SUITE_VERSION}",
                declared.join(", ")
            ),
        };
    }
    match body(knobs, fixture.id).await {
        Ok(Ok(evidence)) => FixtureOutcome::Passed { evidence },
        Ok(Err(reason)) => FixtureOutcome::Failed { reason },
        Err(Skip::NoKnob(behaviour)) if fixture.capabilities.is_empty() => {
            FixtureOutcome::NotExercised {
                reason: format!("the adapter's knobs cannot produce {behaviour}"),
            }
        }
        Err(Skip::NotMeasurable(reason)) => FixtureOutcome::NotExercised { reason },
        Err(Skip::NoKnob(behaviour)) => FixtureOutcome::Failed {
            reason: format!(
                "declares {} usable but its knobs cannot produce {behaviour}: \
                 the suite cannot verify it",
                probe::names(fixture.capabilities)
            ),
        },
    }
}

/// Why a fixture body could not run.
enum Skip {
    /// The knobs cannot produce this behaviour.
    NoKnob(Behaviour),
    /// The quantity cannot be measured here.
    NotMeasurable(String),
}

fn req<Kn: Knobs>(knobs: &Kn, b: Behaviour) -> Result<ExecutionRequest, Skip> {
    knobs.request_for(&b).ok_or(Skip::NoKnob(b))
}

async fn body<Kn: Knobs>(knobs: &Kn, id: &str) -> Result<Verdict, Skip> {
    Ok(match id {
        "init.idempotent" => init_idempotent(knobs).await,
        "cleanup.idempotent" => cleanup_idempotent(knobs).await,
        "init.capability_report" => capability_report(knobs).await,
        "stream.text" => {
            let r = req(knobs, Behaviour::StreamText)?;
            streams(knobs, r, "message.delta", |p| {
                matches!(p, EventPayload::MessageDelta(_))
            })
            .await
        }
        "stream.reasoning" => {
            let r = req(knobs, Behaviour::StreamReasoning)?;
            streams(knobs, r, "reasoning.delta", |p| {
                matches!(p, EventPayload::ReasoningDelta(_))
            })
            .await
        }
        "stream.usage" => {
            let r = req(knobs, Behaviour::StreamUsage)?;
            streams(knobs, r, "usage", |p| matches!(p, EventPayload::Usage(_))).await
        }
        "stream.terminal_ordering" => terminal_ordering(knobs).await,
        "stream.sequence_contiguous" => sequence_contiguous(knobs).await,
        "stream.segment_protocol" => segment_protocol(knobs).await,
        "tool.success" => {
            let r = req(knobs, Behaviour::ToolSuccess)?;
            let ran = |seen: &Seen, obs: &Observed| {
                suite_call(seen.echo.load(SeqCst), tools::ECHO)?;
                completed_with(
                    obs,
                    &ToolCallOutcome::Success {
                        output: json!({"echo": "ping"}),
                    },
                )
            };
            tool_outcome(
                knobs,
                r,
                "success",
                |o| matches!(o, ToolCallOutcome::Success { .. }),
                ran,
            )
            .await
        }
        "tool.error" => {
            let r = req(knobs, Behaviour::ToolError)?;
            let ran = |seen: &Seen, obs: &Observed| {
                suite_call(seen.fail.load(SeqCst), tools::FAIL)?;
                completed_with(
                    obs,
                    &ToolCallOutcome::Failure {
                        message: tools::FAIL_MESSAGE.to_owned(),
                    },
                )
            };
            tool_outcome(
                knobs,
                r,
                "failure",
                |o| matches!(o, ToolCallOutcome::Failure { .. }),
                ran,
            )
            .await
        }
        "tool.builtin" => {
            crate::contract::tool_builtin(knobs, req(knobs, Behaviour::ToolSuccess)?).await
        }
        "runtime.single_mutation" => crate::contract::single_mutation(knobs).await,
        "runtime.bounded_cleanup" => observe::isolated(knobs.bounds().grace, |obs| {
            crate::contract::bounded_cleanup(knobs, obs)
        }),
        "thread.durable_commit" => {
            let marker = sessions::marker();
            let remember = req(
                knobs,
                Behaviour::Remember {
                    marker: marker.clone(),
                },
            )?;
            let recall = req(knobs, Behaviour::Recall)?;
            replicas::durable_commit(knobs, &marker, remember, recall).await
        }
        "tool.cancellation" => tool_cancellation(knobs, req(knobs, Behaviour::ToolSlow)?).await,
        "mcp.partial_failure" => partial_failure(knobs, req(knobs, Behaviour::ProviderTool)?).await,
        "mcp.caller_credential_isolation" => {
            credential_isolation(knobs, req(knobs, Behaviour::CredentialTool)?).await
        }
        "tool.approval.approve" => {
            let r = req(knobs, ONE_APPROVAL)?;
            approval(knobs, r, &[DecisionKind::Approve]).await
        }
        "tool.approval.edit" => {
            // An adapter whose approvals never offer edit cannot produce an editable one; the
            // fixture then checks that an edit answer to its approval is refused.
            let editable = Behaviour::ToolApproval {
                calls: 1,
                editable: true,
            };
            let r = match knobs.request_for(&editable) {
                Some(r) => r,
                None => req(knobs, ONE_APPROVAL)?,
            };
            approval(knobs, r, &[DecisionKind::Edit]).await
        }
        "tool.approval.reject" => {
            let r = req(knobs, ONE_APPROVAL)?;
            approval(knobs, r, &[DecisionKind::Reject]).await
        }
        "tool.approval.multi" => {
            let r = req(
                knobs,
                Behaviour::ToolApproval {
                    calls: 2,
                    editable: false,
                },
            )?;
            approval(knobs, r, &[DecisionKind::Approve, DecisionKind::Reject]).await
        }
        "session.restart" => restart(knobs).await,
        "session.multi_turn" => {
            let marker = sessions::marker();
            let turns = sessions::Turns {
                remember: req(
                    knobs,
                    Behaviour::Remember {
                        marker: marker.clone(),
                    },
                )?,
                recall: req(knobs, Behaviour::Recall)?,
                recall_other: req(knobs, Behaviour::Recall)?,
            };
            sessions::multi_turn(knobs, &marker, turns).await
        }
        "session.clear" | "session.expired_state" => {
            let marker = sessions::marker();
            let remember = req(
                knobs,
                Behaviour::Remember {
                    marker: marker.clone(),
                },
            )?;
            let recall = req(knobs, Behaviour::Recall)?;
            if id == "session.clear" {
                replicas::clear(knobs, &marker, remember, recall).await
            } else {
                expired_state(knobs, &marker, remember, recall).await
            }
        }
        "session.cross_replica_resume" => {
            replicas::cross_replica_resume(knobs, req(knobs, ONE_APPROVAL)?).await
        }
        "runtime.lease_fencing" => {
            replicas::lease_fencing(knobs, req(knobs, Behaviour::Hang)?).await
        }
        "runtime.eviction_recovery" => {
            replicas::eviction_recovery(knobs, req(knobs, ONE_APPROVAL)?).await
        }
        "action.form_input" => form_input(knobs, req(knobs, Behaviour::FormInput)?).await,
        "action.duplicate_resume" => {
            let r = req(knobs, ONE_APPROVAL)?;
            duplicate_resume(knobs, r).await
        }
        "action.conflicting_resume" => {
            let r = req(knobs, ONE_APPROVAL)?;
            conflicting_resume(knobs, r).await
        }
        "action.form_submit" => {
            sequences::form_submit(knobs, req(knobs, Behaviour::FormInput)?).await
        }
        "action.sequential_interrupts" => {
            let r = req(knobs, Behaviour::SequentialApprovals)?;
            sequences::sequential_interrupts(knobs, r).await
        }
        "cancel.during_initialize" => {
            let r = req(knobs, Behaviour::SlowInitialize)?;
            sequences::cancel_during_initialize(knobs, r).await
        }
        "cancel.during_resume" => {
            let r = req(knobs, Behaviour::ApprovalThenHang)?;
            sequences::cancel_during_resume(knobs, r).await
        }
        "cancel.before_run" => cancel_before(knobs).await,
        "files.modalities" => {
            crate::files::modalities(knobs, req(knobs, Behaviour::StreamText)?).await
        }
        "skills.missing_blocked" => {
            let use_skill = Behaviour::UseSkill {
                name: crate::skills::SKILL.to_owned(),
                marker: crate::skills::MARKER.to_owned(),
            };
            crate::skills::used_missing_blocked(knobs, req(knobs, use_skill)?).await
        }
        "cancel.after_run" => cancel_after(knobs).await,
        "cancel.while_streaming" => cancel_streaming(knobs, req(knobs, Behaviour::Hang)?).await,
        "cancel.while_awaiting" => {
            let r = req(knobs, ONE_APPROVAL)?;
            cancel_awaiting(knobs, r).await
        }
        "faults.provider_error" => {
            let category = ErrorCategory::Unavailable;
            let r = req(
                knobs,
                Behaviour::Fail {
                    category,
                    diagnostic: CANARY.to_owned(),
                },
            )?;
            faults_error(knobs, r, category, false).await
        }
        "faults.sanitized_error" => {
            let category = ErrorCategory::Unavailable;
            let r = req(
                knobs,
                Behaviour::Fail {
                    category,
                    diagnostic: CANARY.to_owned(),
                },
            )?;
            faults_error(knobs, r, category, true).await
        }
        "faults.panic_sanitized" => {
            let r = req(
                knobs,
                Behaviour::Panic {
                    message: CANARY.to_owned(),
                },
            )?;
            panic_sanitized(knobs, r).await
        }
        "faults.malformed_events" => malformed(knobs, req(knobs, Behaviour::MalformedOrder)?).await,
        "faults.timeout" => timeout(knobs, req(knobs, Behaviour::Hang)?).await,
        "observability.no_leaked_credential" => no_leaked_credential(knobs).await,
        "sandbox.escape" => sandbox_escape(knobs).await?,
        "sandbox.limits" => sandbox_limits(knobs, req(knobs, Behaviour::ForkBomb)?).await,
        "observability.metrics" => {
            observe::isolated(knobs.bounds().grace, |obs| observe::metrics(knobs, obs))
        }
        "observability.tracing" => observe::isolated(knobs.bounds().grace, |obs| {
            observe::tracing_spans(knobs, obs)
        }),
        "observability.trace_propagation" => {
            req(knobs, Behaviour::EchoTraceContext)?;
            observe::isolated(knobs.bounds().grace, |obs| {
                observe::trace_propagation(knobs, obs)
            })
        }
        "observability.redaction" => {
            req(
                knobs,
                Behaviour::EmitSecret {
                    secret: CANARY.to_owned(),
                },
            )?;
            observe::isolated(knobs.bounds().grace, |obs| {
                observe::redaction(knobs, CANARY, obs)
            })
        }
        // On a runtime of its own: the caller's runtime may run (and end) work of its own
        // meanwhile, which would blur the count either way.
        "observability.leaks.tasks" => {
            observe::isolated(knobs.bounds().grace, |_| leaks_tasks(knobs))
        }
        "observability.leaks.fds_children" => {
            if !knobs.process_isolated() {
                return Err(Skip::NotMeasurable(
                    "the suite does not run alone in its process (Knobs::process_isolated is false): \
                     file descriptors and child processes cannot be attributed to the adapter"
                        .to_owned(),
                ));
            }
            let (Some(fds), Some(kids)) = (fd_count(), children()) else {
                return Err(Skip::NotMeasurable(
                    "/proc/self/fd or /proc/self/task/*/children is not readable here".to_owned(),
                ));
            };
            leaks_fds(knobs, fds, &kids).await
        }
        other => Err(format!(
            "fixture {other} has no body in suite {SUITE_VERSION}"
        )),
    })
}

async fn init_idempotent<Kn: Knobs>(knobs: &Kn) -> Verdict {
    let b = knobs.bounds();
    let adapter = knobs.adapter();
    let d = probe::direct(&adapter, &knobs.plain_request(), b).await?;
    let first = probe::hook("initialize", b.grace, || d.runtime.initialize()).await?;
    let second = probe::hook("second initialize", b.grace, || d.runtime.initialize()).await?;
    let verdict = match (&first, &second) {
        // The evidence names no provider session id: ids differ from run to run, and the
        // evidence id must not.
        (Ok(a), Ok(b)) if a == b => Ok(format!(
            "initialize twice: Ok, same result ({})",
            if a.provider_session_id.is_some() {
                "the same provider session"
            } else {
                "no provider session"
            }
        )),
        (Ok(a), Ok(b)) => Err(format!(
            "initialize is not idempotent: first {a:?}, then {b:?}"
        )),
        (Err(a), Err(b)) if a.code() == b.code() && a.category() == b.category() => Ok(format!(
            "initialize twice: the same terminal error {}",
            a.code().as_str()
        )),
        _ => Err(format!(
            "initialize is not idempotent: first {}, then {}",
            ok_or_code(&first),
            ok_or_code(&second)
        )),
    };
    let _ = probe::hook("cleanup", b.grace, || d.runtime.cleanup()).await;
    verdict
}

fn ok_or_code<T>(r: &Result<T, harness_core::error::HarnessError>) -> String {
    match r {
        Ok(_) => "Ok".to_owned(),
        Err(e) => format!("Err({})", e.code().as_str()),
    }
}

async fn cleanup_idempotent<Kn: Knobs>(knobs: &Kn) -> Verdict {
    let b = knobs.bounds();
    let adapter = knobs.adapter();
    // After a run.
    let d = probe::direct(&adapter, &knobs.plain_request(), b).await?;
    let _ = probe::hook("initialize", b.grace, || d.runtime.initialize()).await?;
    let seg = probe::drain(|| d.runtime.stream(d.turn.clone()), b.run).await;
    drop(seg);
    probe::hook("cleanup", b.grace, || d.runtime.cleanup())
        .await
        .map_err(|e| format!("cleanup is not idempotent: {e}"))?;
    probe::hook("second cleanup", b.grace, || d.runtime.cleanup())
        .await
        .map_err(|e| format!("cleanup is not idempotent: {e}"))?;
    // Without any run.
    let fresh = probe::direct(&adapter, &knobs.plain_request(), b).await?;
    for what in [
        "cleanup of a fresh runtime",
        "second cleanup of a fresh runtime",
    ] {
        probe::hook(what, b.grace, || fresh.runtime.cleanup())
            .await
            .map_err(|e| format!("cleanup is not idempotent: {e}"))?;
    }
    Ok("cleanup twice after a run and on a fresh runtime: bounded, no panic".to_owned())
}

async fn streams<Kn: Knobs>(
    knobs: &Kn,
    request: ExecutionRequest,
    kind: &str,
    is: impl Fn(&EventPayload) -> bool,
) -> Verdict {
    let b = knobs.bounds();
    let obs = probe::run_to_end(&probe::service(knobs.adapter(), b), request, b).await?;
    obs.check_log()?;
    let n = obs.count(is);
    if n == 0 {
        return Err(format!(
            "capability claimed but not delivered: the run yielded no {kind} event (events: {})",
            obs.kinds().join(" ")
        ));
    }
    if !matches!(obs.outcome, Outcome::Succeeded(_)) {
        return Err(format!("the run did not succeed: {}", obs.ended()));
    }
    Ok(format!("{n} {kind}, run.succeeded"))
}

async fn segment_protocol<Kn: Knobs>(knobs: &Kn) -> Verdict {
    let b = knobs.bounds();
    let adapter = knobs.adapter();
    let mut requests = vec![knobs.plain_request()];
    requests.extend(knobs.request_for(&Behaviour::StreamText));
    let mut evidence = Vec::new();
    for request in requests {
        let d = probe::direct(&adapter, &request, b).await?;
        d.initialize(b).await?;
        let seg = probe::drain(|| d.runtime.stream(d.turn.clone()), b.run).await;
        let checked = seg.check_protocol();
        let _ = probe::hook("cleanup", b.grace, || d.runtime.cleanup()).await;
        checked?;
        evidence.push(format!("{} items", seg.items.len()));
    }
    Ok(format!(
        "one terminal item, last, stream ended ({})",
        evidence.join(", ")
    ))
}

/// `tool.success` and `tool.error`: the log shows the call started and completed as
/// expected; for an adapter that runs portable tools, `ran` checks that the suite's tool
/// really ran (once) and that its result is what the log reports.
async fn tool_outcome<Kn: Knobs>(
    knobs: &Kn,
    request: ExecutionRequest,
    what: &str,
    is: impl Fn(&ToolCallOutcome) -> bool,
    ran: impl Fn(&Seen, &Observed) -> Result<(), String>,
) -> Verdict {
    let b = knobs.bounds();
    let (builder, seen) = probe::tooled(knobs.adapter(), b);
    let obs = probe::run_to_end(&builder.build(), request, b).await?;
    obs.check_log()?;
    let started = obs.count(|p| matches!(p, EventPayload::ToolCallStarted(_)));
    let completed =
        obs.count(|p| matches!(p, EventPayload::ToolCallCompleted(c) if is(&c.outcome)));
    if started == 0 || completed == 0 {
        return Err(format!(
            "expected tool.call.started and a tool.call.completed with {what}; events: {}",
            obs.kinds().join(" ")
        ));
    }
    match seen {
        Some(seen) => {
            ran(&seen, &obs)?;
            Ok(format!(
                "the suite's tool ran once and its call completed with {what} as it returned"
            ))
        }
        None => Ok(format!("tool call started and completed with {what}")),
    }
}

/// The suite's tool `tool` ran exactly once (`calls` times).
fn suite_call(calls: usize, tool: &str) -> Result<(), String> {
    if calls == 1 {
        Ok(())
    } else {
        Err(format!(
            "the suite's tool {tool} ran {calls} time(s); the adapter was to call it once \
             (through its handle)"
        ))
    }
}

/// Exactly one `tool.call.completed`, with `outcome`.
fn completed_with(obs: &Observed, outcome: &ToolCallOutcome) -> Result<(), String> {
    let done: Vec<&ToolCallOutcome> = obs
        .events
        .iter()
        .filter_map(|e| match e.payload() {
            EventPayload::ToolCallCompleted(c) => Some(&c.outcome),
            _ => None,
        })
        .collect();
    if done.as_slice() == [outcome] {
        Ok(())
    } else {
        Err(format!(
            "the call's completion is {done:?}; the suite's tool returned {outcome:?}"
        ))
    }
}

/// `tool.cancellation`: a call of the suite's [`tools::SLOW`] is in flight when the
/// execution is cancelled; the run ends `run.cancelled` within the bounds and the tool's
/// future was dropped (the call was stopped, not left running).
async fn tool_cancellation<Kn: Knobs>(knobs: &Kn, request: ExecutionRequest) -> Verdict {
    let b = knobs.bounds();
    let (builder, seen) = probe::tooled(knobs.adapter(), b);
    let Some(seen) = seen else {
        return Err(
            "the adapter declares tool.cancellation but runs no portable tool: the suite \
             cannot verify it"
                .to_owned(),
        );
    };
    let service = builder.build();
    let handle = probe::start(&service, request).await?;
    let started = async {
        while seen.slow_started.load(SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    if tokio::time::timeout(b.run, started).await.is_err() {
        handle.cancel(CancelReason::new("conformance bound"));
        return Err(format!(
            "the suite's tool {} was not called within {:?}",
            tools::SLOW,
            b.run
        ));
    }
    handle.cancel(CancelReason::new(
        "conformance: cancel a tool call in flight",
    ));
    let obs = probe::finish(&handle, b).await?;
    obs.check_log()?;
    if !matches!(obs.outcome, Outcome::Cancelled(_)) {
        return Err(format!("the run did not end cancelled: {}", obs.ended()));
    }
    let dropped = seen.slow_dropped.load(SeqCst);
    if dropped != 1 {
        return Err(format!(
            "the tool call in flight was not stopped when the execution was cancelled \
             ({dropped} calls dropped)"
        ));
    }
    Ok("cancelled while the suite's tool ran: run.cancelled, the call stopped".to_owned())
}

/// `mcp.partial_failure`: with one tool provider down, the run goes on with the others:
/// `tool.unavailable` names the provider that is down, and the call of the other
/// provider's tool runs and the run succeeds.
async fn partial_failure<Kn: Knobs>(knobs: &Kn, request: ExecutionRequest) -> Verdict {
    let b = knobs.bounds();
    let (builder, seen) = probe::tooled(knobs.adapter(), b);
    let Some(seen) = seen else {
        return Err(
            "the adapter declares tool.mcp and tool.partial_availability but runs no portable \
             tool: the suite cannot verify them"
                .to_owned(),
        );
    };
    let obs = probe::run_to_end(&builder.build(), request, b).await?;
    obs.check_log()?;
    let reported =
        obs.count(|p| matches!(p, EventPayload::ToolUnavailable(u) if u.source == tools::DOWN));
    if reported != 1 {
        return Err(format!(
            "the provider that is down was reported {reported} time(s) as tool.unavailable \
             (once expected); events: {}",
            obs.kinds().join(" ")
        ));
    }
    suite_call(seen.up_echo.load(SeqCst), tools::UP_ECHO)?;
    if !matches!(obs.outcome, Outcome::Succeeded(_)) {
        return Err(format!(
            "the run did not go on with the provider that is up: {}",
            obs.ended()
        ));
    }
    Ok(format!(
        "{} down, reported tool.unavailable; {} ran; run.succeeded",
        tools::DOWN,
        tools::UP_ECHO
    ))
}

/// `mcp.caller_credential_isolation`: the caller's credential for one provider reaches
/// that provider (its tool, which needs it, runs), no other provider, and no event.
async fn credential_isolation<Kn: Knobs>(knobs: &Kn, mut request: ExecutionRequest) -> Verdict {
    let b = knobs.bounds();
    let (builder, seen) = probe::tooled(knobs.adapter(), b);
    let Some(seen) = seen else {
        return Err(
            "the adapter declares tool.caller_credentials but runs no portable tool: the \
             suite cannot verify it"
                .to_owned(),
        );
    };
    request
        .extensions
        .insert(CallerCredentials::new().with(tools::AUTH, Credential::new(CANARY)));
    let obs = probe::run_to_end(&builder.build(), request, b).await?;
    obs.check_log()?;
    suite_call(seen.whoami.load(SeqCst), tools::WHOAMI)?;
    let worked = obs.count(|p| {
        matches!(p, EventPayload::ToolCallCompleted(c) if matches!(c.outcome, ToolCallOutcome::Success { .. }))
    });
    if worked != 1 {
        return Err(
            "the tool that needs the caller's credential did not succeed: the credential \
             did not reach it"
                .to_owned(),
        );
    }
    for (provider, credential) in seen.credentials() {
        let expected = (provider == tools::AUTH).then_some(CANARY);
        if credential.as_deref() != expected {
            return Err(format!(
                "provider {provider} was given {:?} (expected {expected:?})",
                credential.map(|_| "a credential")
            ));
        }
    }
    if let Some(at) = obs.leaks(CANARY) {
        return Err(format!("the caller's credential reached {at}"));
    }
    Ok(format!(
        "the credential reached {} only (its tool ran); no event holds it",
        tools::AUTH
    ))
}

async fn approval<Kn: Knobs>(
    knobs: &Kn,
    request: ExecutionRequest,
    decisions: &[DecisionKind],
) -> Verdict {
    let b = knobs.bounds();
    let (builder, seen) = probe::tooled(knobs.adapter(), b);
    let service = builder.build();
    let handle = probe::start(&service, request).await?;
    let action = probe::wait_action(&handle, b).await?;
    let ActionKind::ToolApproval(approval) = &action.kind else {
        return Err("the action is not a tool approval".to_owned());
    };
    if approval.calls().len() < decisions.len() {
        return Err(format!(
            "asked for an approval of {} calls, got {}",
            decisions.len(),
            approval.calls().len()
        ));
    }
    let mut answers = Vec::new();
    let mut expect = Vec::new();
    // What the suite's tool must have run with: the proposed arguments when approved, the
    // caller's when edited, nothing when rejected.
    let mut runs = Vec::new();
    for (call, kind) in approval.calls().iter().zip(decisions) {
        if seen.is_some() && call.tool() != tools::GATED {
            handle.cancel(CancelReason::new("conformance: not the suite's tool"));
            return Err(format!(
                "the approval is for tool {:?}; the adapter was to call the suite's {}",
                call.tool(),
                tools::GATED
            ));
        }
        if !call.allows(*kind) {
            if *kind == DecisionKind::Edit && decisions.len() == 1 {
                // Offering edit is the adapter's choice (an ACP permission request cannot carry
                // edited arguments); what it must not do is accept an edit it did not offer.
                let edit = ToolDecision::edit(call.call_id().clone(), call.arguments().clone());
                let refused = handle
                    .respond(
                        ApprovalResponse::decide(action.id.clone(), action.revision, vec![edit])
                            .into(),
                    )
                    .await;
                match refused {
                    Err(e) if e.code() == &ErrorCode::ACTION_RESPONSE_INVALID => {}
                    Err(e) => {
                        return Err(format!(
                            "an edit the approval does not offer was refused with {} instead of ACTION_RESPONSE_INVALID",
                            e.code()
                        ));
                    }
                    Ok(()) => {
                        return Err("an edit the approval does not offer was accepted".to_owned());
                    }
                }
                handle.cancel(CancelReason::new("conformance: edit not offered"));
                let obs = probe::finish(&handle, b).await?;
                obs.check_log()?;
                return Ok(
                    "edit is not offered by this adapter's approvals; an edit answer was refused \
                     with ACTION_RESPONSE_INVALID and the action stayed open"
                        .to_owned(),
                );
            }
            return Err(format!("call {} does not allow {kind:?}", call.call_id()));
        }
        let edited = if seen.is_some() {
            json!({"path": tools::EDITED_PATH})
        } else {
            call.arguments().clone()
        };
        match kind {
            DecisionKind::Approve => runs.push(call.arguments().clone()),
            DecisionKind::Edit => runs.push(edited.clone()),
            DecisionKind::Reject => {}
        }
        answers.push(match kind {
            DecisionKind::Approve => ToolDecision::approve(call.call_id().clone()),
            DecisionKind::Reject => ToolDecision::reject(call.call_id().clone()),
            DecisionKind::Edit => ToolDecision::edit(call.call_id().clone(), edited),
        });
        expect.push((call.call_id().clone(), *kind));
    }
    handle
        .respond(ApprovalResponse::decide(action.id.clone(), action.revision, answers).into())
        .await
        .map_err(|e| format!("the answer was refused: {}", e.message()))?;
    let obs = probe::finish(&handle, b).await?;
    obs.check_log()?;
    for (call_id, kind) in &expect {
        let done: Vec<&ToolCallOutcome> = obs
            .events
            .iter()
            .filter_map(|e| match e.payload() {
                EventPayload::ToolCallCompleted(c) if &c.call_id == call_id => Some(&c.outcome),
                _ => None,
            })
            .collect();
        let ok = matches!(
            (done.as_slice(), kind),
            (
                [ToolCallOutcome::Success { .. }],
                DecisionKind::Approve | DecisionKind::Edit
            ) | ([ToolCallOutcome::Rejected { .. }], DecisionKind::Reject)
        );
        if !ok {
            return Err(format!(
                "call {call_id} decided {kind:?} completed as {done:?} \
                 (exactly one matching tool.call.completed expected)"
            ));
        }
    }
    if !matches!(obs.outcome, Outcome::Succeeded(_)) {
        return Err(format!("the run did not succeed: {}", obs.ended()));
    }
    if let Some(seen) = seen {
        let key = |v: &Value| v.to_string();
        let mut ran = seen.gated();
        ran.sort_by_key(key);
        runs.sort_by_key(key);
        if ran != runs {
            return Err(format!(
                "the suite's tool ran with {ran:?}; the caller's decisions allowed {runs:?}"
            ));
        }
        return Ok(format!(
            "{} call(s) of the suite's tool decided {:?}: it ran only as decided, with the \
             decided arguments",
            expect.len(),
            decisions
        ));
    }
    Ok(format!(
        "{} call(s) decided {:?} and completed accordingly",
        expect.len(),
        decisions
    ))
}

/// `session.expired_state`: a lost replica, then an expired native session.
async fn expired_state<Kn: Knobs>(
    knobs: &Kn,
    marker: &str,
    remember: ExecutionRequest,
    recall: ExecutionRequest,
) -> Verdict {
    let lost = replicas::expired_state(knobs, marker, remember, recall).await?;
    let marker = sessions::marker();
    let remember = knobs.request_for(&Behaviour::Remember {
        marker: marker.clone(),
    });
    let recall = knobs.request_for(&Behaviour::Recall);
    let (Some(remember), Some(recall)) = (remember, recall) else {
        return Err("the knobs stopped producing Remember and Recall".to_owned());
    };
    let native = match replicas::expired_native_state(knobs, &marker, remember, recall).await? {
        Some(native) => native,
        None => "no native state outside the thread state (Knobs::expire_native_state)".to_owned(),
    };
    Ok(format!("{lost}; {native}"))
}

async fn restart<Kn: Knobs>(knobs: &Kn) -> Verdict {
    let b = knobs.bounds();
    let adapter = knobs.adapter();
    let d = probe::direct(&adapter, &knobs.plain_request(), b).await?;
    d.first_segment(b).await?;
    probe::hook("restart", b.grace, || d.runtime.restart())
        .await?
        .map_err(|e| format!("restart failed: {}", e.message()))?;
    let seg = probe::drain(|| d.runtime.stream(d.turn.clone()), b.run).await;
    let _ = probe::hook("cleanup", b.grace, || d.runtime.cleanup()).await;
    seg.check_protocol()
        .map_err(|e| format!("after restart: {e}"))?;
    if let Some(Err(e)) = seg.terminal() {
        return Err(format!("the segment after restart failed: {}", e.message()));
    }
    let kept = crate::contract::restart_keeps_state(knobs).await?;
    if kept.is_empty() {
        return Ok("restart returned and the next segment ran to one terminal item".to_owned());
    }
    Ok(format!(
        "restart returned and the next segment ran to one terminal item; {kept}"
    ))
}

async fn form_input<Kn: Knobs>(knobs: &Kn, request: ExecutionRequest) -> Verdict {
    let b = knobs.bounds();
    let service = probe::service(knobs.adapter(), b);
    let handle = probe::start(&service, request).await?;
    let action = probe::wait_action(&handle, b).await?;
    if !matches!(action.kind, ActionKind::FormInput(_)) {
        return Err("the action is not a form".to_owned());
    }
    handle
        .respond(FormResponse::dismiss(action.id.clone(), action.revision).into())
        .await
        .map_err(|e| format!("dismissing the form was refused: {}", e.message()))?;
    let obs = probe::finish(&handle, b).await?;
    obs.check_log()?;
    let kinds = obs.kinds();
    for k in ["run.awaiting_input", "action.resolved"] {
        if !kinds.contains(&k) {
            return Err(format!("no {k} event; events: {}", kinds.join(" ")));
        }
    }
    if !matches!(obs.outcome, Outcome::Succeeded(_)) {
        return Err(format!(
            "the run did not succeed after the form: {}",
            obs.ended()
        ));
    }
    Ok("form opened, run.awaiting_input, answered, run.succeeded".to_owned())
}

/// At the runtime boundary: one interrupt per decision, one resume per decision.
async fn duplicate_resume<Kn: Knobs>(knobs: &Kn, request: ExecutionRequest) -> Verdict {
    let b = knobs.bounds();
    let adapter = knobs.adapter();
    let d = probe::direct(&adapter, &request, b).await?;
    let verdict = async {
        let seg = d.first_segment(b).await?;
        let Some(Ok(AdapterEvent::Action(interrupt))) = seg.terminal() else {
            return Err("the segment did not end on an interrupt".to_owned());
        };
        let pending = probe::hook("pending_action", b.grace, || d.runtime.pending_action()).await?;
        if pending.as_ref().map(|p| &p.id) != Some(&interrupt.id) {
            return Err("pending_action does not return the open interrupt".to_owned());
        }
        let kind: ActionKind = match &interrupt.kind {
            ActionKind::ToolApproval(a) => ActionKind::ToolApproval(a.clone()),
            ActionKind::FormInput(f) => ActionKind::FormInput(f.clone()),
        };
        let action = ActionRequest::new(kind).with_id(interrupt.id.clone());
        let response: ActionResponse = match &action.kind {
            ActionKind::ToolApproval(a) => ApprovalResponse::decide(
                action.id.clone(),
                action.revision,
                a.calls()
                    .iter()
                    .map(|c| ToolDecision::approve(c.call_id().clone())),
            )
            .into(),
            ActionKind::FormInput(_) => {
                FormResponse::dismiss(action.id.clone(), action.revision).into()
            }
        };
        let validated = action
            .validate(response)
            .map_err(|e| format!("the suite's answer did not validate: {e}"))?;
        let decision = ResumeDecision::new(validated);
        let first = probe::drain(|| d.runtime.resume(decision.clone()), b.run).await;
        first.check_protocol().map_err(|e| format!("resume: {e}"))?;
        let again = first.count(|e| matches!(e, AdapterEvent::Action(i) if i.id == interrupt.id));
        if again > 0 {
            return Err(format!(
                "action accepted twice: the runtime re-opened interrupt {} after it was answered",
                interrupt.id
            ));
        }
        let second = probe::drain(|| d.runtime.resume(decision), b.run).await;
        let accepted = second.items.iter().any(|i| {
            matches!(
                i,
                Ok(AdapterEvent::Content(_) | AdapterEvent::Completed(_) | AdapterEvent::Action(_))
            )
        });
        if accepted || !matches!(second.terminal(), Some(Err(_))) {
            return Err(format!(
                "action accepted twice: a second resume with the same decision \
                 yielded {} item(s) instead of an error",
                second.items.len()
            ));
        }
        Ok("one interrupt, one resume; the repeated decision was refused with an error".to_owned())
    }
    .await;
    let _ = probe::hook("cleanup", b.grace, || d.runtime.cleanup()).await;
    verdict
}

async fn conflicting_resume<Kn: Knobs>(knobs: &Kn, request: ExecutionRequest) -> Verdict {
    let b = knobs.bounds();
    let service = probe::service(knobs.adapter(), b);
    let handle = probe::start(&service, request).await?;
    let action = probe::wait_action(&handle, b).await?;
    let ActionKind::ToolApproval(approval) = &action.kind else {
        return Err("the action is not a tool approval".to_owned());
    };
    let decide = |id| {
        ApprovalResponse::decide(
            id,
            action.revision,
            approval
                .calls()
                .iter()
                .map(|c| ToolDecision::approve(c.call_id().clone())),
        )
    };
    let other = harness_core::id::ActionId::generate();
    match handle.respond(decide(other).into()).await {
        Err(e) if e.code() == &ErrorCode::ACTION_NOT_FOUND => {}
        other => {
            return Err(format!(
                "an answer to another action was not refused with ACTION_NOT_FOUND: {other:?}"
            ));
        }
    }
    if handle.pending_actions().first().map(|a| &a.id) != Some(&action.id) {
        return Err("the action did not stay open after a conflicting answer".to_owned());
    }
    handle
        .respond(decide(action.id.clone()).into())
        .await
        .map_err(|e| format!("the right answer was refused: {}", e.message()))?;
    match handle.respond(decide(action.id.clone()).into()).await {
        Err(e)
            if e.code() == &ErrorCode::ACTION_ALREADY_RESOLVED
                || e.code() == &ErrorCode::EXECUTION_TERMINAL => {}
        other => return Err(format!("a duplicate answer was not refused: {other:?}")),
    }
    let obs = probe::finish(&handle, b).await?;
    obs.check_log()?;
    let resolved = obs.count(|p| matches!(p, EventPayload::ActionResolved(_)));
    if resolved != 1 {
        return Err(format!("{resolved} action.resolved events for one action"));
    }
    Ok(
        "conflicting answer refused, action stayed open, duplicate refused, one action.resolved"
            .to_owned(),
    )
}

async fn cancel_before<Kn: Knobs>(knobs: &Kn) -> Verdict {
    let b = knobs.bounds();
    let adapter = knobs.adapter();
    let d = probe::direct(&adapter, &knobs.plain_request(), b).await?;
    for what in [
        "cancel before initialize",
        "second cancel before initialize",
    ] {
        probe::hook(what, b.grace, || {
            d.runtime.cancel(CancelReason::new("conformance"))
        })
        .await?;
    }
    let _ = probe::hook("cleanup", b.grace, || d.runtime.cleanup()).await;
    Ok("cancel twice before any run: bounded, no panic".to_owned())
}

async fn cancel_after<Kn: Knobs>(knobs: &Kn) -> Verdict {
    let b = knobs.bounds();
    let adapter = knobs.adapter();
    let d = probe::direct(&adapter, &knobs.plain_request(), b).await?;
    probe::hook("initialize", b.grace, || d.runtime.initialize())
        .await?
        .map_err(|e| e.message().to_owned())?;
    probe::drain(|| d.runtime.stream(d.turn.clone()), b.run)
        .await
        .check_protocol()?;
    for what in ["cancel after the run", "second cancel after the run"] {
        probe::hook(what, b.grace, || {
            d.runtime.cancel(CancelReason::new("conformance"))
        })
        .await?;
    }
    let _ = probe::hook("cleanup", b.grace, || d.runtime.cleanup()).await;
    // Through the service: a cancel after the end changes nothing.
    let service = probe::service(knobs.adapter(), b);
    let handle = probe::start(&service, knobs.plain_request()).await?;
    let before = probe::finish(&handle, b).await?;
    let request = handle.cancel(CancelReason::new("conformance"));
    if !matches!(request, CancelStatus::AlreadyEnded(_)) {
        return Err(format!("cancel after the end returned {request:?}"));
    }
    if handle.log().len() != before.events.len() {
        return Err("cancel after the end appended events".to_owned());
    }
    Ok("cancel twice after a run: bounded, no panic; the ended execution is unchanged".to_owned())
}

async fn cancel_streaming<Kn: Knobs>(knobs: &Kn, request: ExecutionRequest) -> Verdict {
    let b = knobs.bounds();
    let adapter = knobs.adapter();
    // At the runtime boundary: the stream must end within grace after the cancel hook.
    let d = probe::direct(&adapter, &request, b).await?;
    probe::hook("initialize", b.grace, || d.runtime.initialize())
        .await?
        .map_err(|e| e.message().to_owned())?;
    let cancel = async {
        for _ in 0..16 {
            tokio::task::yield_now().await;
        }
        probe::hook("cancel", b.grace, || {
            d.runtime.cancel(CancelReason::new("conformance"))
        })
        .await
    };
    let (seg, cancelled) = futures_util::future::join(
        probe::drain(|| d.runtime.stream(d.turn.clone()), b.grace),
        cancel,
    )
    .await;
    let _ = probe::hook("cleanup", b.grace, || d.runtime.cleanup()).await;
    cancelled?;
    if !seg.ended {
        return Err(format!(
            "cancel ignored: the runtime's stream did not end within grace ({:?}) \
             after its cancel hook",
            b.grace
        ));
    }
    if seg.count(|e| matches!(e, AdapterEvent::Completed(_))) > 0 {
        return Err("cancel ignored: the hanging run completed after its cancel hook".to_owned());
    }
    // Through the service: run.cancelled confirms it.
    let service = probe::service(knobs.adapter(), b);
    let handle = probe::start(&service, request).await?;
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
    handle.cancel(CancelReason::new("conformance"));
    let obs = probe::finish(&handle, b).await?;
    obs.check_log()?;
    if !matches!(obs.outcome, Outcome::Cancelled(_)) {
        return Err(format!("the cancelled execution ended {}", obs.ended()));
    }
    Ok("runtime stream ended after cancel; service run ended run.cancelled".to_owned())
}

async fn cancel_awaiting<Kn: Knobs>(knobs: &Kn, request: ExecutionRequest) -> Verdict {
    let b = knobs.bounds();
    let service = probe::service(knobs.adapter(), b);
    let handle = probe::start(&service, request).await?;
    probe::wait_action(&handle, b).await?;
    handle.cancel(CancelReason::new("conformance"));
    let obs = probe::finish(&handle, b).await?;
    obs.check_log()?;
    if !matches!(obs.outcome, Outcome::Cancelled(_)) {
        return Err(format!("cancel while awaiting ended {}", obs.ended()));
    }
    Ok("cancelled while awaiting approval: run.cancelled".to_owned())
}

async fn faults_error<Kn: Knobs>(
    knobs: &Kn,
    request: ExecutionRequest,
    category: ErrorCategory,
    sanitized: bool,
) -> Verdict {
    let b = knobs.bounds();
    let obs = probe::run_to_end(&probe::service(knobs.adapter(), b), request, b).await?;
    obs.check_log()?;
    let Outcome::Failed(err) = &obs.outcome else {
        return Err(format!("the failing run ended {}", obs.ended()));
    };
    if err.category() != category {
        return Err(format!(
            "failed with {:?}, expected {category:?}",
            err.category()
        ));
    }
    if sanitized {
        if let Some(at) = obs.leaks(CANARY) {
            return Err(format!(
                "error not sanitized: the private diagnostic reached {at}"
            ));
        }
        return Ok("the diagnostic stayed out of every event and the public error".to_owned());
    }
    Ok(format!("run.failed with {category:?}"))
}

/// `sandbox.escape`: the suite plants a file outside any workspace and opens a listener on
/// the host's loopback; the agent, asked to read the one, write beside it and connect to the
/// other, must report each denied, and the suite checks the host saw none of it.
async fn sandbox_escape<Kn: Knobs>(knobs: &Kn) -> Result<Verdict, Skip> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "harness-conformance-escape-{}-{}",
        std::process::id(),
        N.fetch_add(1, SeqCst)
    ));
    let planted = || -> std::io::Result<std::net::TcpListener> {
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("secret.txt"), CANARY)?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        Ok(listener)
    };
    let listener = match planted() {
        Ok(listener) => listener,
        Err(e) => return Ok(Err(format!("the suite could not set up its probes: {e}"))),
    };
    let behaviour = Behaviour::Escape {
        read: dir.join("secret.txt"),
        write: dir.join("written-from-inside"),
        connect: listener.local_addr().map(|a| a.port()).unwrap_or(0),
    };
    let probes = behaviour.escape_probes();
    let request = req(knobs, behaviour)?;
    let verdict = escape_verdict(knobs, request, &probes, &dir, &listener).await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(verdict)
}

async fn escape_verdict<Kn: Knobs>(
    knobs: &Kn,
    request: ExecutionRequest,
    probes: &[String],
    dir: &std::path::Path,
    listener: &std::net::TcpListener,
) -> Verdict {
    let b = knobs.bounds();
    let obs = probe::run_to_end(&probe::service(knobs.adapter(), b), request, b).await?;
    obs.check_log()?;
    if !matches!(obs.outcome, Outcome::Succeeded(_)) {
        return Err(format!("the probing run ended {}", obs.ended()));
    }
    let text = sessions::message_text(&obs);
    for probe in probes {
        let Some(result) = text
            .lines()
            .find_map(|line| line.strip_prefix(probe.as_str())?.strip_prefix(' '))
        else {
            return Err(format!("the agent did not report the probe {probe}"));
        };
        if !result.starts_with("denied") {
            return Err(format!(
                "{probe}: the agent reported `{result}` from inside its sandbox"
            ));
        }
    }
    if dir.join("written-from-inside").exists() {
        return Err("a file appeared outside the workspace".to_owned());
    }
    if listener.accept().is_ok() {
        return Err("the host's listener took a connection from the sandbox".to_owned());
    }
    Ok(format!(
        "{} probes denied from inside; nothing reached the host",
        probes.len()
    ))
}

/// `sandbox.limits`: a fork bomb must end the run `capacity`, within the run bound.
async fn sandbox_limits<Kn: Knobs>(knobs: &Kn, request: ExecutionRequest) -> Verdict {
    let b = knobs.bounds();
    let obs = probe::run_to_end(&probe::service(knobs.adapter(), b), request, b).await?;
    obs.check_log()?;
    let Outcome::Failed(err) = &obs.outcome else {
        return Err(format!("the fork bomb's run ended {}", obs.ended()));
    };
    if err.category() != ErrorCategory::Capacity {
        return Err(format!(
            "failed with {:?} ({}), expected capacity",
            err.category(),
            err.code().as_str()
        ));
    }
    Ok(format!("run.failed capacity/{}", err.code().as_str()))
}

async fn panic_sanitized<Kn: Knobs>(knobs: &Kn, request: ExecutionRequest) -> Verdict {
    let b = knobs.bounds();
    let obs = probe::run_to_end(&probe::service(knobs.adapter(), b), request, b).await?;
    obs.check_log()?;
    let Outcome::Failed(err) = &obs.outcome else {
        return Err(format!("the panicking run ended {}", obs.ended()));
    };
    // In the adapter's process, the service catches the panic: ADAPTER_PANICKED. A provider
    // out of process that panics crashes: its adapter reports it lost, classified
    // (`unavailable`, or `internal` with a code of its own), never as the service's
    // protocol verdict or an unclassified defect.
    let in_process = err.code() == &ErrorCode::ADAPTER_PANICKED;
    let crashed = crate::contract::is_provider_fault(err) && err.code() != &ErrorCode::INTERNAL;
    if !(in_process || crashed) {
        return Err(format!(
            "failed with {}, expected internal/ADAPTER_PANICKED (a panic in the adapter) or a \
             classified unavailable error (a provider that crashed)",
            crate::contract::classified(err)
        ));
    }
    if let Some(at) = obs.leaks(CANARY) {
        return Err(format!("panic text not sanitized: it reached {at}"));
    }
    Ok(format!(
        "{}, panic text private",
        crate::contract::classified(err)
    ))
}

async fn malformed<Kn: Knobs>(knobs: &Kn, request: ExecutionRequest) -> Verdict {
    let b = knobs.bounds();
    let obs = probe::run_to_end(&probe::service(knobs.adapter(), b), request, b).await?;
    let Outcome::Failed(err) = &obs.outcome else {
        return Err(format!("a malformed run ended {}", obs.ended()));
    };
    if err.category() != ErrorCategory::Protocol {
        return Err(format!(
            "a malformed run failed with {:?}, not protocol",
            err.category()
        ));
    }
    let terminals = obs.count(|p| p.is_terminal());
    if terminals != 1 {
        return Err(format!("{terminals} terminal events after a malformed run"));
    }
    Ok("the malformed run ended run.failed/protocol with one terminal".to_owned())
}

async fn no_leaked_credential<Kn: Knobs>(knobs: &Kn) -> Verdict {
    let b = knobs.bounds();
    let service = probe::service(knobs.adapter(), b);
    let fail = knobs.request_for(&Behaviour::Fail {
        category: ErrorCategory::Authentication,
        diagnostic: String::new(),
    });
    let mut runs = 0;
    for request in [Some(knobs.plain_request()), fail].into_iter().flatten() {
        let mut request = request;
        request
            .client_context
            .insert("apiKey".to_owned(), Value::String(CANARY.to_owned()));
        request.client_context.insert(
            "authorization".to_owned(),
            Value::String(format!("Bearer {CANARY}")),
        );
        let obs = probe::run_to_end(&service, request, b).await?;
        if let Some(at) = obs.leaks(CANARY) {
            return Err(format!(
                "credential leaked: the canary planted in client_context reached {at}"
            ));
        }
        runs += 1;
    }
    Ok(format!("canary credential absent from {runs} run(s)"))
}

async fn workload<Kn: Knobs>(knobs: &Kn) -> Result<usize, String> {
    let b = knobs.bounds();
    let service = probe::service(knobs.adapter(), b);
    let mut n = 0;
    let mut requests = vec![knobs.plain_request()];
    requests.extend(knobs.request_for(&Behaviour::StreamText));
    for request in requests {
        probe::run_to_end(&service, request, b).await?;
        n += 1;
    }
    if let Some(request) = knobs.request_for(&Behaviour::Hang) {
        let handle = probe::start(&service, request).await?;
        tokio::task::yield_now().await;
        handle.cancel(CancelReason::new("conformance"));
        probe::finish(&handle, b).await?;
        n += 1;
    }
    Ok(n)
}

/// Polls `measure` until it is at most `baseline`, bounded by `bounds.grace`.
async fn settle(bound: std::time::Duration, baseline: usize, measure: impl Fn() -> usize) -> usize {
    let step = std::time::Duration::from_millis(10);
    let mut waited = std::time::Duration::ZERO;
    loop {
        let now = measure();
        if now <= baseline || waited >= bound {
            return now;
        }
        tokio::time::sleep(step).await;
        waited += step;
    }
}

async fn leaks_tasks<Kn: Knobs>(knobs: &Kn) -> Verdict {
    let metrics = tokio::runtime::Handle::current().metrics();
    let baseline = metrics.num_alive_tasks();
    let runs = workload(knobs).await?;
    let after = settle(knobs.bounds().grace, baseline, || metrics.num_alive_tasks()).await;
    if after > baseline {
        return Err(format!(
            "resource leak: {} Tokio task(s) still alive {:?} after {runs} executions ended",
            after - baseline,
            knobs.bounds().grace
        ));
    }
    Ok(format!(
        "{runs} executions: alive Tokio tasks back to the baseline"
    ))
}

fn fd_count() -> Option<usize> {
    std::fs::read_dir("/proc/self/fd").ok().map(Iterator::count)
}

fn children() -> Option<BTreeSet<String>> {
    children_in(std::path::Path::new("/proc/self"))
}

/// The child pids of every thread of the process whose `/proc` directory is `proc`, or
/// `None` when one thread's list cannot be read (a kernel without `CONFIG_PROC_CHILDREN`, a
/// sandbox): an unreadable list is no evidence that there is no child.
fn children_in(proc: &std::path::Path) -> Option<BTreeSet<String>> {
    let tasks = std::fs::read_dir(proc.join("task")).ok()?;
    let mut set = BTreeSet::new();
    let mut read = 0;
    for task in tasks {
        let path = task.ok()?.path().join("children");
        match std::fs::read_to_string(&path) {
            Ok(text) => set.extend(text.split_whitespace().map(str::to_owned)),
            // The thread ended between the listing and the read: it has no children left.
            Err(_) if !path.parent().is_some_and(std::path::Path::exists) => continue,
            Err(_) => return None,
        }
        read += 1;
    }
    (read > 0).then_some(set)
}

async fn leaks_fds<Kn: Knobs>(knobs: &Kn, fds: usize, kids: &BTreeSet<String>) -> Verdict {
    let runs = workload(knobs).await?;
    let after = settle(knobs.bounds().grace, fds, || fd_count().unwrap_or(0)).await;
    if after > fds {
        return Err(format!(
            "resource leak: {} file descriptor(s) still open after {runs} executions ended",
            after - fds
        ));
    }
    let kids_after = children().unwrap_or_default();
    let new: Vec<&String> = kids_after.difference(kids).collect();
    if !new.is_empty() {
        return Err(format!(
            "resource leak: child process(es) {new:?} outlive {runs} executions"
        ));
    }
    Ok(format!(
        "{runs} executions: open fds back to the baseline, no new child process"
    ))
}

/// Every terminal the knobs can reach (succeeded, failed, cancelled) is the one terminal
/// event, last, and the one the run asked for.
async fn terminal_ordering<Kn: Knobs>(knobs: &Kn) -> Verdict {
    let b = knobs.bounds();
    let service = probe::service(knobs.adapter(), b);
    let mut seen = Vec::new();
    let mut runs: Vec<(ExecutionRequest, &str)> = vec![(knobs.plain_request(), "run.succeeded")];
    if let Some(r) = knobs.request_for(&Behaviour::Fail {
        category: ErrorCategory::Unavailable,
        diagnostic: String::new(),
    }) {
        runs.push((r, "run.failed"));
    }
    for (request, expected) in runs {
        let obs = probe::run_to_end(&service, request, b).await?;
        obs.check_log()?;
        let last = obs.kinds().last().copied().unwrap_or("nothing");
        if last != expected {
            return Err(format!(
                "expected {expected} as the terminal event, got {last}"
            ));
        }
        seen.push(expected);
    }
    if let Some(request) = knobs.request_for(&Behaviour::Hang) {
        let handle = probe::start(&service, request).await?;
        tokio::task::yield_now().await;
        handle.cancel(CancelReason::new("conformance"));
        let obs = probe::finish(&handle, b).await?;
        obs.check_log()?;
        if !matches!(obs.outcome, Outcome::Cancelled(_)) {
            return Err(format!("a cancelled run ended {}", obs.ended()));
        }
        seen.push("run.cancelled");
    }
    Ok(format!("one terminal event, last: {}", seen.join(", ")))
}

/// Sequences stay contiguous across segments (a run that pauses and resumes).
async fn sequence_contiguous<Kn: Knobs>(knobs: &Kn) -> Verdict {
    let b = knobs.bounds();
    let service = probe::service(knobs.adapter(), b);
    let obs = probe::run_to_end(&service, knobs.plain_request(), b).await?;
    obs.check_log()?;
    let mut evidence = vec![format!("1..{}", obs.events.len())];
    if let Some(request) = knobs.request_for(&ONE_APPROVAL) {
        let handle = probe::start(&service, request).await?;
        let action = probe::wait_action(&handle, b).await?;
        if let ActionKind::ToolApproval(a) = &action.kind {
            let decisions = a
                .calls()
                .iter()
                .map(|c| ToolDecision::approve(c.call_id().clone()));
            handle
                .respond(
                    ApprovalResponse::decide(action.id.clone(), action.revision, decisions).into(),
                )
                .await
                .map_err(|e| format!("the answer was refused: {}", e.message()))?;
        }
        let obs = probe::finish(&handle, b).await?;
        obs.check_log()?;
        evidence.push(format!("1..{} across a resume", obs.events.len()));
    }
    Ok(format!("contiguous from 1: {}", evidence.join(", ")))
}

async fn timeout<Kn: Knobs>(knobs: &Kn, request: ExecutionRequest) -> Verdict {
    use tower::ServiceExt;
    let b = knobs.bounds();
    let limit = b.grace / 5;
    let service = probe::builder(knobs.adapter(), b)
        .layer(harness_layers::timeout::TimeoutLayer::new().turn(limit))
        .build();
    let handle = service
        .oneshot(request)
        .await
        .map(probe::Started::new)
        .map_err(|e| e.message().to_owned())?;
    let obs = probe::finish(&handle, b).await?;
    obs.check_log()?;
    match &obs.outcome {
        Outcome::Failed(e) if e.category() == ErrorCategory::Timeout => {
            Ok("a hanging run past its turn deadline: run.failed/timeout".to_owned())
        }
        other => Err(format!(
            "a hanging run past its turn deadline ({limit:?}) ended {:?}, not failed/timeout",
            other.state()
        )),
    }
}

/// The evaluated report narrows the descriptor for a configuration; it never widens it
/// (preflight decides on the descriptor, so a wider report would be support nobody checked).
async fn capability_report<Kn: Knobs>(knobs: &Kn) -> Verdict {
    use harness_core::adapter::DeploymentContext;
    let b = knobs.bounds();
    let adapter = knobs.adapter();
    let declared = adapter.descriptor().capabilities();
    // The configuration the gate decided on, conversation included.
    let config = plain_config(knobs);
    let deployment = DeploymentContext::default();
    let report = probe::hook("evaluate", b.grace, || {
        adapter.evaluate(&config, &deployment)
    })
    .await?
    .map_err(|e| format!("evaluate failed for the plain request: {}", e.message()))?;
    let widened: Vec<String> = K::ALL
        .iter()
        .filter(|k| {
            let (d, e) = (declared.level(**k), report.level(**k));
            e.is_usable() && !(d.is_usable() && d.satisfies(e))
        })
        .map(|k| {
            format!(
                "{} (declared {}, evaluated {})",
                k.as_str(),
                declared.level(*k),
                report.level(*k)
            )
        })
        .collect();
    if !widened.is_empty() {
        return Err(format!(
            "capability claimed but not declared: evaluate widens the descriptor for {}",
            widened.join(", ")
        ));
    }
    Ok("evaluate answered and stays within the descriptor".to_owned())
}

#[cfg(test)]
mod tests {
    use super::children_in;

    #[test]
    fn children_are_not_measurable_when_a_thread_s_list_is_unreadable() {
        let root = std::env::temp_dir().join(format!(
            "harness-conformance-children-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("task/1")).unwrap();
        std::fs::create_dir_all(root.join("task/2")).unwrap();
        std::fs::write(root.join("task/1/children"), "12 34 ").unwrap();
        // Thread 2's list is missing (no CONFIG_PROC_CHILDREN): its children are unknown.
        let without = children_in(&root);
        std::fs::write(root.join("task/2/children"), "").unwrap();
        let with = children_in(&root);
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(without, None);
        assert_eq!(
            with,
            Some(["12".to_owned(), "34".to_owned()].into_iter().collect())
        );
        assert!(children_in(std::path::Path::new("/proc/self")).is_some());
    }
}
