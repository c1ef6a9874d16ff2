//! [`ScriptedAdapter`]: the descriptor, the options, the instrumentation and the runtime.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures_core::Stream;
use harness_core::action::{ActionKind, ActionRequest, ActionResponse};
use harness_core::action::{ApprovalAnswer, Decision, FormAnswer, ValidatedResponse};
use harness_core::adapter::{
    AdapterEvent, AgentConfig, BoxFuture, BoxStream, CancelResult, DeploymentContext, EventResult,
    HarnessAdapter, HarnessRuntime, Restored, ResumeDecision, RuntimeContext, RuntimeIdentity,
    RuntimeInit, TurnInput,
};
use harness_core::capability::CapabilityReport;
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::event::{
    CancelReason, Content, EventPayload, ToolCallCompleted, ToolCallOutcome,
};
use harness_core::id::{AdapterId, ExecutionId};
use harness_core::manifest::{Adapter, ValidatorCell};
use harness_macros::{Adapter, AdapterOptions};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::script::{Op, Script};
use crate::stream::{Pending, Progress, ScriptStream, Values, lock, render_value};

/// The adapter id.
pub const ADAPTER_ID: &str = "scripted";

/// The placeholder (`{{traceparent}}`) a turn's W3C trace context fills in `text`,
/// `reasoning` and `complete` steps: the context a provider would receive.
pub const TRACEPARENT: &str = "traceparent";

/// The reason given to calls an approval's dismissal rejects.
pub const DISMISSED_REASON: &str = "dismissed";

/// The scripted adapter's options: the script one execution runs.
///
/// Without a script (no options, `{}`, or `{"script": null}`), the adapter's default script
/// runs. Unknown fields are refused, and so is an invalid script, naming the step.
///
/// ```
/// use harness_scripted::ScriptedOptions;
/// let options: ScriptedOptions = serde_json::from_value(serde_json::json!({
///     "script": {"steps": [{"type": "text", "text": "hi"}]}
/// })).unwrap();
/// assert_eq!(options.script.unwrap().steps().len(), 1);
/// let err = serde_json::from_value::<ScriptedOptions>(serde_json::json!({"scirpt": {}})).unwrap_err();
/// assert!(err.to_string().contains("unknown field `scirpt`"), "{err}");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, AdapterOptions)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScriptedOptions {
    /// The script to run instead of the adapter's default one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<Script>,
    /// How long each `initialize` takes, in milliseconds (a slow provider start); the cancel
    /// hook, cleanup or the execution's cancellation end it at once with a `cancelled`
    /// error. None by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialize_delay_ms: Option<u64>,
}

impl ScriptedOptions {
    /// Options running `script`.
    #[must_use]
    pub fn with_script(script: Script) -> Self {
        Self {
            script: Some(script),
            initialize_delay_ms: None,
        }
    }

    /// These options with each `initialize` taking `delay_ms` milliseconds.
    #[must_use]
    pub fn with_initialize_delay_ms(mut self, delay_ms: u64) -> Self {
        self.initialize_delay_ms = Some(delay_ms);
        self
    }

    /// The options as the JSON value an `ExecutionRequest` carries.
    #[must_use]
    pub fn to_value(&self) -> Value {
        // Plain data: serializing it to a `Value` cannot fail.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Parses adapter options (`null` counts as none).
    ///
    /// # Errors
    /// A `configuration` error (`OPTIONS_INVALID`) naming what was wrong: an unknown field,
    /// or the invalid step of the script and why.
    pub fn from_value(options: &Value) -> Result<Self, HarnessError> {
        if options.is_null() {
            return Ok(Self::default());
        }
        let invalid = |e: &dyn std::fmt::Display| {
            HarnessError::new(
                ErrorCategory::Configuration,
                format!("invalid options for the scripted adapter: {e}"),
            )
            .with_code(ErrorCode::OPTIONS_INVALID)
        };
        let parsed = Self::deserialize(options).map_err(|e| invalid(&e))?;
        // `Deserialize` also takes a struct from a JSON array: what the published schema
        // refuses is refused here too (found by the `options` fuzz target).
        static SCHEMA: ValidatorCell = ValidatorCell::new();
        SCHEMA.validate::<Self>(options).map_err(|e| invalid(&e))?;
        Ok(parsed)
    }
}

// ---------------------------------------------------------------------------------------------
// Stats
// ---------------------------------------------------------------------------------------------

/// Honest counters of what the control plane asked of the adapter's runtimes, shared by every
/// clone of the adapter. See [`ScriptedAdapter::stats`].
#[derive(Debug, Default)]
pub struct Stats {
    runtimes_created: AtomicU64,
    initialize_calls: AtomicU64,
    initializations: AtomicU64,
    stream_calls: AtomicU64,
    resume_calls: AtomicU64,
    cancel_calls: AtomicU64,
    restart_calls: AtomicU64,
    cleanup_calls: AtomicU64,
    cleanups: AtomicU64,
}

/// A copy of the [`Stats`] counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatsSnapshot {
    /// Runtimes created (`create_runtime` calls that succeeded).
    pub runtimes_created: u64,
    /// `initialize` calls.
    pub initialize_calls: u64,
    /// Effective initializations: the first `initialize` of a runtime (and the first after
    /// each `restart`).
    pub initializations: u64,
    /// `stream` calls.
    pub stream_calls: u64,
    /// `resume` calls.
    pub resume_calls: u64,
    /// Cancel-hook (`cancel`) calls.
    pub cancel_calls: u64,
    /// `restart` calls.
    pub restart_calls: u64,
    /// `cleanup` calls.
    pub cleanup_calls: u64,
    /// Effective cleanups: the first `cleanup` of each runtime.
    pub cleanups: u64,
}

impl StatsSnapshot {
    /// Runtimes created and not yet cleaned up.
    #[must_use]
    pub fn live_runtimes(&self) -> u64 {
        self.runtimes_created.saturating_sub(self.cleanups)
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::SeqCst);
}

impl Stats {
    /// All counters.
    #[must_use]
    pub fn snapshot(&self) -> StatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::SeqCst);
        StatsSnapshot {
            runtimes_created: get(&self.runtimes_created),
            initialize_calls: get(&self.initialize_calls),
            initializations: get(&self.initializations),
            stream_calls: get(&self.stream_calls),
            resume_calls: get(&self.resume_calls),
            cancel_calls: get(&self.cancel_calls),
            restart_calls: get(&self.restart_calls),
            cleanup_calls: get(&self.cleanup_calls),
            cleanups: get(&self.cleanups),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Adapter
// ---------------------------------------------------------------------------------------------

/// A deterministic, in-process adapter that runs a [`Script`] per execution.
///
/// The script comes from the execution's options ([`ScriptedOptions`]); without one, the
/// adapter's default script runs. Cheap to clone; clones share the default script and the
/// [`Stats`].
#[derive(Debug, Clone, Adapter)]
#[adapter(
    id = "scripted",
    name = "Scripted (deterministic, in-process)",
    contract_versions = [1],
    execution_mode = in_process(compatibility_only),
    options = ScriptedOptions,
    capability(
        "stream.text",
        native,
        explanation = "`text` steps stream message.delta events, as many as scripted",
    ),
    capability(
        "stream.reasoning",
        native,
        explanation = "`reasoning` steps stream reasoning.delta events",
    ),
    capability(
        "stream.usage",
        native,
        explanation = "`usage` steps report token usage increments and model turns",
    ),
    capability(
        "invoke.non_streaming",
        emulated,
        explanation = "scripts stream; the service's invoke collects the outcome from the \
            execution's events",
    ),
    capability(
        "session.multi_turn",
        native,
        explanation = "`remember` steps keep text in the conversation's thread state \
            (adapter_store); `recall` steps of its later turns stream it",
        constraints(requires = "a conversation id"),
    ),
    capability(
        "session.cross_replica_resume",
        native,
        explanation = "a run paused on a `form` or `approval` step resumes on another replica: \
            the new runtime finds the step from the stored log (scripts are linear) and \
            the earlier form values from the store's answers",
    ),
    capability(
        "session.clear",
        native,
        explanation = "clearing the session moves its binding to a new epoch: later turns \
            recall nothing of the old one",
    ),
    capability(
        "thread.durable_commit",
        native,
        explanation = "each `remember` is one compare-and-set write of the thread state, \
            durable when the service's store is",
    ),
    capability(
        "thread.eviction_restore",
        native,
        explanation = "the runtime holds no conversation state of its own: a new runtime, \
            process or replica reads it back from the thread state",
    ),
    capability(
        "runtime.eviction_recovery",
        native,
        explanation = "a runtime paused on a `form` or `approval` step may be evicted by the \
            service's pool of idle runtimes: the answer restores the pause on a fresh runtime \
            from the execution's log (scripts are linear) and its earlier answers, as for a \
            takeover by another replica",
        constraints(when = "paused on an action"),
    ),
    capability(
        "interrupt.form_input",
        native,
        explanation = "`form` steps pause for typed form input; submitted values fill \
            `{{field}}` placeholders of later steps",
    ),
    capability(
        "interrupt.tool_approval",
        native,
        explanation = "`approval` steps pause for tool approval; approve, edit (revalidated \
            against the input schema), reject and dismiss each complete the calls \
            accordingly",
    ),
    capability(
        "interrupt.multi_tool",
        native,
        explanation = "one `approval` step may cover several tool calls, decided one by one",
    ),
    capability(
        "middleware.portable",
        native,
        explanation = "the operator's middleware policy governs the script's `toolCall` \
            steps: a denied tool's call fails TOOL_DENIED_BY_POLICY, one requiring approval \
            becomes a tool approval, arguments are bounded and rewritten, outputs redacted \
            and capped; `approval` steps (the script's own interrupts) keep their calls, \
            with outputs redacted and capped; the caps narrow the run limits",
    ),
    capability(
        "observability.metrics",
        native,
        explanation = "every outcome reaches the execution's log, so the metrics layer counts \
            and times each execution by outcome and its events by kind",
    ),
    capability(
        "observability.tracing",
        native,
        explanation = "the runtime works only in the hooks and streams the driver polls: all of \
            it inside the execution's span; it spawns no task of its own",
    ),
    capability(
        "observability.trace_propagation",
        native,
        explanation = "the turn's W3C trace context fills `{{traceparent}}` placeholders: what \
            a provider would receive",
    ),
    capability(
        "observability.redaction",
        native,
        explanation = "everything it produces is yielded to the runtime stack, where redaction \
            applies; it opens no span and logs nothing",
    ),
    capability(
        "runtime.cancel",
        native,
        explanation = "cancel trips the run's token: delays and hangs end at once, then the stream",
    ),
    capability(
        "runtime.restart",
        native,
        explanation = "restart releases the run's token and keeps the script position and any \
            open interrupt",
    ),
    capability(
        "runtime.lease_fencing",
        native,
        explanation = "a replica fenced off by the store (its lease taken over) cancels the run: \
            delays and hangs end at once",
    ),
    capability(
        "runtime.bounded_cleanup",
        native,
        explanation = "cleanup holds no external resource: it is immediate and idempotent",
    ),
)]
pub struct ScriptedAdapter {
    default_script: Script,
    stats: Arc<Stats>,
}

impl Default for ScriptedAdapter {
    /// An adapter whose default script is the quickstart.
    fn default() -> Self {
        Self::new(Script::quickstart())
    }
}

impl ScriptedAdapter {
    /// An adapter running `default_script` when an execution's options carry no script.
    #[must_use]
    pub fn new(default_script: Script) -> Self {
        Self {
            default_script,
            stats: Arc::new(Stats::default()),
        }
    }

    /// An adapter whose default script is the bundled quickstart.
    #[must_use]
    pub fn quickstart() -> Self {
        Self::default()
    }

    /// The default script.
    #[must_use]
    pub fn default_script(&self) -> &Script {
        &self.default_script
    }

    /// The counters shared by this adapter, its clones and every runtime they created.
    #[must_use]
    pub fn stats(&self) -> Arc<Stats> {
        Arc::clone(&self.stats)
    }

    /// The script an execution with `options` runs.
    ///
    /// # Errors
    /// As [`ScriptedOptions::from_value`].
    pub fn script_for(&self, options: &Value) -> Result<Script, HarnessError> {
        Ok(ScriptedOptions::from_value(options)?
            .script
            .unwrap_or_else(|| self.default_script.clone()))
    }

    /// The stream of adapter events `script` yields for `execution_id`, without a runtime or
    /// the service: the same items, in the same order, as the first run segment of an
    /// execution. For benchmarks and tests of the script itself. It ends at the first
    /// terminal item (an interrupt included); a `hang` step never ends (nothing can cancel
    /// it), and `delay` steps need a Tokio runtime with its timer.
    pub fn raw_stream(
        script: Script,
        execution_id: ExecutionId,
    ) -> impl Stream<Item = EventResult> + Send + Unpin + 'static {
        ScriptStream::new(
            script,
            0,
            CancellationToken::new(),
            Arc::new(Values::new()),
            execution_id,
            None,
        )
    }
}

impl HarnessAdapter for ScriptedAdapter {
    fn evaluate<'a>(
        &'a self,
        config: &'a AgentConfig,
        _deployment: &'a DeploymentContext,
    ) -> BoxFuture<'a, Result<CapabilityReport, HarnessError>> {
        let result = ScriptedOptions::from_value(&config.options)
            .map(|_| Self::static_descriptor().capabilities().clone());
        Box::pin(async move { result })
    }

    fn create_runtime(
        &self,
        context: RuntimeContext,
    ) -> BoxFuture<'_, Result<Box<dyn HarnessRuntime>, HarnessError>> {
        let created = ScriptedOptions::from_value(&context.config.options).map(|options| {
            bump(&self.stats.runtimes_created);
            let script = options
                .script
                .unwrap_or_else(|| self.default_script.clone());
            // The operator's middleware over the script's tool calls (see `middleware`).
            let script = crate::middleware::governed(script, &context.middleware);
            let mut runtime = ScriptedRuntime::new(&context, script, Arc::clone(&self.stats));
            runtime.initialize_delay = options
                .initialize_delay_ms
                .map(std::time::Duration::from_millis);
            Box::new(runtime) as Box<dyn HarnessRuntime>
        });
        Box::pin(async move { created })
    }
}

// ---------------------------------------------------------------------------------------------
// Runtime
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
struct Control {
    /// The token of the current "provider client"; `restart` replaces it.
    token: CancellationToken,
    initialized: bool,
    cancel_requested: bool,
    cleaned_up: bool,
}

/// One execution's runtime: a position in the script that survives between segments.
#[derive(Debug)]
struct ScriptedRuntime {
    adapter: AdapterId,
    execution_id: ExecutionId,
    script: Script,
    stats: Arc<Stats>,
    /// How long each `initialize` takes (cancellable).
    initialize_delay: Option<std::time::Duration>,
    /// The execution's token, parent of every token this runtime uses.
    parent: CancellationToken,
    control: Mutex<Control>,
    progress: Arc<Mutex<Progress>>,
    /// The conversation's thread state, for `remember` and `recall`.
    state: Option<harness_core::session::ScopedThreadState>,
}

fn protocol(message: String) -> HarnessError {
    HarnessError::new(ErrorCategory::Protocol, message).with_code(ErrorCode::EVENT_ORDER_VIOLATION)
}

fn failed(error: HarnessError) -> BoxStream<'static, EventResult> {
    Box::pin(futures_util::stream::iter([Err(error)]))
}

fn cleaned_up_error(what: &str) -> HarnessError {
    protocol(format!(
        "{what} was called after the runtime was cleaned up"
    ))
}

impl ScriptedRuntime {
    fn new(context: &RuntimeContext, script: Script, stats: Arc<Stats>) -> Self {
        let parent = context.cancellation.clone();
        Self {
            adapter: context.adapter.clone(),
            execution_id: context.execution_id.clone(),
            script,
            stats,
            initialize_delay: None,
            control: Mutex::new(Control {
                token: parent.child_token(),
                initialized: false,
                cancel_requested: false,
                cleaned_up: false,
            }),
            parent,
            progress: Arc::new(Mutex::new(Progress::default())),
            state: context.thread_state.clone(),
        }
    }

    fn control(&self) -> std::sync::MutexGuard<'_, Control> {
        self.control.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The token of the current segment, or the error when the runtime was cleaned up.
    fn token(&self, what: &str) -> Result<CancellationToken, HarnessError> {
        let control = self.control();
        if control.cleaned_up {
            return Err(cleaned_up_error(what));
        }
        Ok(control.token.clone())
    }

    fn segment(
        &self,
        token: CancellationToken,
        pos: usize,
        values: Arc<Values>,
        execution_id: ExecutionId,
    ) -> ScriptStream {
        ScriptStream::new(
            self.script.clone(),
            pos,
            token,
            values,
            execution_id,
            Some(Arc::clone(&self.progress)),
        )
        .with_state(self.state.clone())
    }

    /// The completions of a resumed approval, one per call in request order.
    fn completions(&self, pending: &Pending, answer: &ApprovalAnswer) -> Vec<EventResult> {
        let Some(Op::Approval {
            request, outputs, ..
        }) = self.script.ops().get(pending.step)
        else {
            return Vec::new();
        };
        request
            .calls()
            .iter()
            .zip(outputs)
            .map(|(call, output)| {
                let decision = match answer {
                    ApprovalAnswer::Dismiss => None,
                    ApprovalAnswer::Decide(decisions) => decisions
                        .iter()
                        .find(|d| &d.call_id == call.call_id())
                        .map(|d| &d.decision),
                };
                let outcome = match decision {
                    Some(Decision::Approve) => ToolCallOutcome::Success {
                        output: output.clone(),
                    },
                    Some(Decision::Edit { arguments }) => ToolCallOutcome::Success {
                        output: serde_json::json!({ "arguments": arguments }),
                    },
                    Some(Decision::Reject { reason }) => ToolCallOutcome::Rejected {
                        reason: reason.clone(),
                    },
                    None => ToolCallOutcome::Rejected {
                        reason: Some(DISMISSED_REASON.to_owned()),
                    },
                };
                Ok(AdapterEvent::Content(Content::ToolCallCompleted(
                    ToolCallCompleted {
                        call_id: call.call_id().clone(),
                        outcome,
                    },
                )))
            })
            .collect()
    }
}

impl HarnessRuntime for ScriptedRuntime {
    fn identity(&self) -> RuntimeIdentity {
        RuntimeIdentity {
            adapter: self.adapter.clone(),
            execution_id: self.execution_id.clone(),
            provider_session_id: None,
        }
    }

    fn initialize(&self) -> BoxFuture<'_, Result<RuntimeInit, HarnessError>> {
        bump(&self.stats.initialize_calls);
        let (result, token) = {
            let mut control = self.control();
            if control.cleaned_up {
                (Err(cleaned_up_error("initialize")), None)
            } else {
                if !control.initialized {
                    control.initialized = true;
                    bump(&self.stats.initializations);
                }
                (Ok(RuntimeInit::default()), Some(control.token.clone()))
            }
        };
        let delay = self.initialize_delay.zip(token);
        Box::pin(async move {
            if let Some((delay, token)) = delay {
                // A slow start the cancel hook, cleanup or the execution's token end at once.
                if tokio::time::timeout(delay, token.cancelled()).await.is_ok() {
                    return Err(HarnessError::new(
                        ErrorCategory::Cancelled,
                        "initialize was cancelled",
                    ));
                }
            }
            result
        })
    }

    fn stream(&self, turn: TurnInput) -> BoxStream<'_, EventResult> {
        bump(&self.stats.stream_calls);
        let token = match self.token("stream") {
            Ok(token) => token,
            Err(err) => return failed(err),
        };
        let (pos, values) = {
            let mut progress = lock(&self.progress);
            if let Some(pending) = &progress.pending {
                return failed(protocol(format!(
                    "stream was called while the run is paused on action {}; resume it instead",
                    pending.interrupt.id
                )));
            }
            progress.active = true;
            if let Some(trace) = &turn.trace_context {
                // What a provider would receive: the turn's context, for `{{traceparent}}`.
                Arc::make_mut(&mut progress.values)
                    .insert(TRACEPARENT.to_owned(), trace.traceparent().to_owned());
            }
            (progress.next, Arc::clone(&progress.values))
        };
        Box::pin(self.segment(token, pos, values, turn.execution_id))
    }

    fn resume(&self, decision: ResumeDecision) -> BoxStream<'_, EventResult> {
        bump(&self.stats.resume_calls);
        let token = match self.token("resume") {
            Ok(token) => token,
            Err(err) => return failed(err),
        };
        let mut progress = lock(&self.progress);
        let Some(pending) = progress.pending.clone() else {
            return failed(protocol(format!(
                "resume answers action {} but no interrupt is open",
                decision.action_id()
            )));
        };
        if decision.action_id() != &pending.interrupt.id {
            return failed(protocol(format!(
                "resume answers action {} but the open interrupt is {}",
                decision.action_id(),
                pending.interrupt.id
            )));
        }
        let prefix = match (&pending.interrupt.kind, decision.response()) {
            (ActionKind::ToolApproval(_), ValidatedResponse::Approval(answer)) => {
                self.completions(&pending, answer.answer())
            }
            (ActionKind::FormInput(_), ValidatedResponse::Form(answer)) => {
                if let FormAnswer::Submit(submitted) = answer.answer() {
                    let values = Arc::make_mut(&mut progress.values);
                    for (name, value) in submitted.iter().filter(|(_, v)| !v.is_null()) {
                        values.insert(name.to_owned(), render_value(value));
                    }
                }
                Vec::new()
            }
            _ => {
                return failed(protocol(format!(
                    "resume answers action {} with a decision of the wrong kind",
                    pending.interrupt.id
                )));
            }
        };
        progress.pending = None;
        progress.active = true;
        let (pos, values) = (pending.step + 1, Arc::clone(&progress.values));
        progress.next = pos;
        drop(progress);
        Box::pin(
            self.segment(token, pos, values, self.execution_id.clone())
                .with_prefix(prefix),
        )
    }

    fn pending_action(&self) -> BoxFuture<'_, Option<ActionRequest>> {
        let pending = lock(&self.progress)
            .pending
            .as_ref()
            .map(|p| p.interrupt.clone());
        Box::pin(async move { pending })
    }

    fn cancel(&self, _reason: CancelReason) -> BoxFuture<'_, CancelResult> {
        bump(&self.stats.cancel_calls);
        let running = {
            let progress = lock(&self.progress);
            progress.active || progress.pending.is_some()
        };
        let result = {
            let mut control = self.control();
            let first = !control.cancel_requested && !control.cleaned_up;
            control.cancel_requested = true;
            control.token.cancel();
            if first && running {
                CancelResult::Requested
            } else {
                CancelResult::NothingToCancel
            }
        };
        Box::pin(async move { result })
    }

    fn restart(&self) -> BoxFuture<'_, Result<(), HarnessError>> {
        bump(&self.stats.restart_calls);
        let result = {
            let mut control = self.control();
            if control.cleaned_up {
                Err(cleaned_up_error("restart"))
            } else {
                // Release the "client" (ending any stream still using it) and make a fresh
                // one; the script position and any open interrupt are durable state and stay.
                control.token.cancel();
                control.token = self.parent.child_token();
                control.initialized = false;
                control.cancel_requested = false;
                lock(&self.progress).active = false;
                Ok(())
            }
        };
        Box::pin(async move { result })
    }

    fn cleanup(&self) -> BoxFuture<'_, ()> {
        bump(&self.stats.cleanup_calls);
        let mut control = self.control();
        if !control.cleaned_up {
            control.cleaned_up = true;
            control.token.cancel();
            drop(control);
            let mut progress = lock(&self.progress);
            progress.pending = None;
            progress.active = false;
            bump(&self.stats.cleanups);
        }
        Box::pin(async {})
    }

    /// Takes over a pause: scripts are linear, so the pause is the interrupt step (`form`
    /// or `approval`) whose turn it is after as many actions as the log asked for; form
    /// values submitted before it fill placeholders again, from the store's answers.
    fn restore(&self, restored: Restored) -> BoxFuture<'_, Result<(), HarnessError>> {
        let result = self.take_over(restored);
        Box::pin(async move { result })
    }
}

impl ScriptedRuntime {
    fn take_over(&self, restored: Restored) -> Result<(), HarnessError> {
        let refuse = |why: String| {
            protocol(format!(
                "the paused execution cannot be taken over by this script: {why}"
            ))
        };
        let asked = restored
            .log
            .iter()
            .filter(|e| matches!(e.payload(), EventPayload::ActionRequested(_)))
            .count();
        let (step, op) = self
            .script
            .ops()
            .iter()
            .enumerate()
            .filter(|(_, op)| matches!(op, Op::Approval { .. } | Op::Form { .. }))
            .nth(asked.saturating_sub(1))
            .ok_or_else(|| {
                refuse(format!(
                    "the log asked for {asked} action(s), the script has fewer interrupt steps"
                ))
            })?;
        let (fixed, fits) = match (op, &restored.pending.kind) {
            (Op::Approval { id, request, .. }, ActionKind::ToolApproval(pending)) => {
                (id, request.calls() == pending.calls())
            }
            (Op::Form { id, request }, ActionKind::FormInput(pending)) => (id, request == pending),
            _ => (&None, false),
        };
        if !fits || fixed.as_ref().is_some_and(|id| id != &restored.pending.id) {
            return Err(refuse(format!(
                "step {step} is not the action {} the execution awaits",
                restored.pending.id
            )));
        }
        if self.control().cleaned_up {
            return Err(cleaned_up_error("restore"));
        }
        let mut progress = lock(&self.progress);
        if progress.active || progress.pending.is_some() || progress.next != 0 {
            return Err(protocol(
                "restore was called on a runtime that already ran a segment".to_owned(),
            ));
        }
        let values = Arc::make_mut(&mut progress.values);
        for answer in &restored.answers {
            if let ActionResponse::FormInput(form) = answer
                && let FormAnswer::Submit(submitted) = &form.answer
            {
                for (name, value) in submitted.iter().filter(|(_, v)| !v.is_null()) {
                    values.insert(name.to_owned(), render_value(value));
                }
            }
        }
        if let Some(trace) = &restored.turn.trace_context {
            values.insert(TRACEPARENT.to_owned(), trace.traceparent().to_owned());
        }
        progress.next = step;
        progress.pending = Some(Pending {
            interrupt: restored.pending,
            step,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_builds() {
        let descriptor = ScriptedAdapter::static_descriptor();
        assert_eq!(descriptor.id().as_str(), ADAPTER_ID);
        assert_eq!(
            descriptor.implementation_version(),
            env!("CARGO_PKG_VERSION")
        );
    }
}
