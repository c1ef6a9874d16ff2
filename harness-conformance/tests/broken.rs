//! Deliberately broken adapters, each breaking one rule: the suite must fail every one of them,
//! naming the rule. A control adapter with no fault passes, so each failure is the fault's.
//!
//! One hand-written adapter implements the full contract at the runtime boundary (no
//! `SimpleAdapter` bridge, so faults can live in `resume`, `cancel` and `cleanup`); the
//! request's message selects the behaviour.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::{StreamExt, stream};
use harness_conformance::{
    Behaviour, Bounds, FixtureOutcome, FixtureResult, Knobs, Report, certify, run_fixture,
};
use harness_core::action::ActionRequest;
use harness_core::action::{ApprovalRequest, Decision, ToolCallApproval, ValidatedResponse};
use harness_core::adapter::{
    AdapterEvent, AgentConfig, BoxFuture, BoxStream, CancelResult, DeploymentContext, EventResult,
    HarnessAdapter, HarnessRuntime, ResumeDecision, RuntimeContext, RuntimeIdentity, RuntimeInit,
    TurnInput,
};
use harness_core::capability::{Capability, CapabilityKey as K, CapabilityReport};
use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::event::{
    CancelReason, Content, RunSucceeded, TextDelta, ToolCall, ToolCallCompleted, ToolCallOutcome,
};
use harness_core::id::{ActionId, CallerId, ConversationId};
use harness_core::manifest::{ContractVersion, Describe, ExecutionMode, HarnessDescriptor};
use harness_core::service::ExecutionRequest;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The one rule each adapter breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The control: breaks nothing.
    None,
    /// Every segment yields two terminal items.
    TwoTerminals,
    /// A segment ends without its terminal item: a gap in the run's lifecycle.
    SequenceGap,
    /// A segment yields content after its terminal item.
    EventsAfterTerminal,
    /// The second cleanup double-releases (panics).
    CleanupTwice,
    /// Errors echo the caller's client context (credentials included).
    LeakCredential,
    /// The cancel hook reports success but stops nothing.
    CancelIgnored,
    /// A decision is applied every time it is handed over.
    AcceptsTwice,
    /// `stream.reasoning` declared native; reasoning never yielded.
    ClaimsReasoning,
    /// `stream.usage` not declared (so unsupported); usage yielded in every run anyway.
    EmitsUndeclaredUsage,
    /// Every run spawns a task that never ends (a leaked background worker).
    LeaksTask,
    /// `evaluate` reports `skills` native, which the descriptor (and preflight) never declared.
    WidensReport,
    /// Provider work moved to an uninstrumented task logs outside the execution's span.
    LogsOutsideSpan,
    /// The provider request's span records the prompt, secrets included.
    SecretInSpan,
    /// The provider is sent a stale trace context instead of the turn's.
    StaleTraceContext,
    /// A slow `initialize` ignores the cancel hook.
    InitIgnoresCancel,
    /// A resumed segment that works until cancelled ignores the cancel hook.
    ResumeIgnoresCancel,
    /// The interrupt raised after an answer reuses the answered action's id.
    ReusesActionId,
    /// The configured agent lacks reasoning: `evaluate` narrows `stream.reasoning` to
    /// unsupported (the descriptor declares it), and reasoning is never yielded.
    NarrowsReasoning,
    /// `evaluate` fails for every configuration.
    EvaluateFails,
    /// `session.multi_turn` declared native; a turn asked to remember keeps nothing.
    Forgets,
    /// `session.multi_turn` declared native; what a turn keeps is kept for every
    /// conversation (one history for the whole adapter).
    SharesHistory,
    /// `session.multi_turn` declared native; what a turn keeps is keyed by the conversation's
    /// bare id, so another caller naming the same id continues it.
    KeysByBareId,
    /// Asked for an approval, works until cancelled and never asks.
    NeverAsks,
    /// `evaluate` reports `skills` native for a configuration that continues a conversation
    /// (the descriptor never declared it).
    WidensForConversations,
    /// Every run starts blocking work that never ends by itself (until [`RELEASE`]).
    BlocksForever,
    /// As [`Fault::NarrowsReasoning`], but only the first `evaluate` of an adapter answers:
    /// every later one never does.
    EvaluateHangsAfterFirst,
    /// `runtime.sandbox_isolation` declared native; the probes run in the control plane's
    /// own process (reading, writing, connecting all succeed) and a fork bomb meets no limit.
    ClaimsSandbox,
    /// `runtime.eviction_recovery` declared native; a fresh runtime cannot take a pause over
    /// (`restore` is the contract's default refusal).
    ClaimsEvictionRecovery,
}

/// Ends the blocking work of [`Fault::BlocksForever`] runs (for good: the test releases it
/// once, at its end).
static RELEASE: (Mutex<bool>, std::sync::Condvar) = (Mutex::new(false), std::sync::Condvar::new());

fn blocked_until_released() {
    let (released, changed) = &RELEASE;
    let mut released = released.lock().unwrap_or_else(PoisonError::into_inner);
    while !*released {
        released = changed
            .wait(released)
            .unwrap_or_else(PoisonError::into_inner);
    }
}

fn release() {
    let (released, changed) = &RELEASE;
    *released.lock().unwrap_or_else(PoisonError::into_inner) = true;
    changed.notify_all();
}

/// What a [`Broken`] adapter remembers, by conversation (in its caller's scope; the caller
/// left out by [`Fault::KeysByBareId`]), across its executions.
type Memory = Arc<Mutex<HashMap<Option<(Option<CallerId>, ConversationId)>, Vec<String>>>>;

/// The trace context a [`Fault::StaleTraceContext`] runtime sends its provider.
const STALE: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

#[derive(Debug, Clone)]
struct Broken {
    fault: Fault,
    descriptor: HarnessDescriptor,
    memory: Memory,
    evaluations: Arc<AtomicUsize>,
}

impl Broken {
    fn new(fault: Fault) -> Self {
        let mut builder = HarnessDescriptor::builder("broken".parse().unwrap(), "0.0.1")
            .contract_version(ContractVersion::V1)
            .execution_mode(ExecutionMode::in_process());
        for key in [
            K::StreamText,
            K::StreamReasoning,
            K::InterruptToolApproval,
            K::InterruptMultiTool,
            K::RuntimeCancel,
            K::RuntimeRestart,
            K::SessionMultiTurn,
            K::ObservabilityMetrics,
            K::ObservabilityTracing,
            K::ObservabilityTracePropagation,
            K::ObservabilityRedaction,
        ] {
            builder = builder.capability(key, Capability::native());
        }
        if fault == Fault::ClaimsSandbox {
            builder = builder.capability(K::RuntimeSandboxIsolation, Capability::native());
        }
        if fault == Fault::ClaimsEvictionRecovery {
            builder = builder.capability(K::RuntimeEvictionRecovery, Capability::native());
        }
        Self {
            fault,
            descriptor: builder.build().unwrap(),
            memory: Memory::default(),
            evaluations: Arc::default(),
        }
    }
}

impl Describe for Broken {
    fn descriptor(&self) -> &HarnessDescriptor {
        &self.descriptor
    }
}

impl HarnessAdapter for Broken {
    fn evaluate<'a>(
        &'a self,
        config: &'a AgentConfig,
        _deployment: &'a DeploymentContext,
    ) -> BoxFuture<'a, Result<CapabilityReport, HarnessError>> {
        let mut report = self.descriptor.capabilities().clone();
        match self.fault {
            Fault::WidensReport => {
                report.declare(K::Skills, Capability::native());
            }
            Fault::WidensForConversations if config.conversation.is_some() => {
                report.declare(K::Skills, Capability::native());
            }
            Fault::EvaluateHangsAfterFirst
                if self.evaluations.fetch_add(1, Ordering::SeqCst) > 0 =>
            {
                return Box::pin(std::future::pending());
            }
            Fault::NarrowsReasoning | Fault::EvaluateHangsAfterFirst => {
                report.declare(
                    K::StreamReasoning,
                    Capability::unsupported("the configured agent does not reason"),
                );
            }
            Fault::EvaluateFails => {
                return Box::pin(async {
                    Err(HarnessError::new(
                        ErrorCategory::Unavailable,
                        "the agent registry is unreachable",
                    ))
                });
            }
            _ => {}
        }
        Box::pin(async move { Ok(report) })
    }

    fn create_runtime(
        &self,
        context: RuntimeContext,
    ) -> BoxFuture<'_, Result<Box<dyn HarnessRuntime>, HarnessError>> {
        let runtime = BrokenRuntime {
            fault: self.fault,
            slow_init: context.config.options.get("slowInit") == Some(&Value::Bool(true)),
            token: context.cancellation.child_token(),
            context,
            state: Mutex::new(State::default()),
            cleanups: AtomicUsize::new(0),
            memory: Arc::clone(&self.memory),
        };
        Box::pin(async move { Ok(Box::new(runtime) as Box<dyn HarnessRuntime>) })
    }
}

/// What a resume does after completing the answered calls.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Then {
    /// Succeed.
    #[default]
    Complete,
    /// Work until cancelled.
    Hang,
    /// Pause on a second approval (then succeed).
    AskAgain,
}

#[derive(Debug, Default)]
struct State {
    open: Option<ActionRequest>,
    answered: HashSet<ActionId>,
    then: Then,
}

#[derive(Debug)]
struct BrokenRuntime {
    fault: Fault,
    slow_init: bool,
    context: RuntimeContext,
    token: CancellationToken,
    state: Mutex<State>,
    cleanups: AtomicUsize,
    memory: Memory,
}

fn text(t: &str) -> EventResult {
    Ok(AdapterEvent::Content(Content::MessageDelta(
        TextDelta::new(t),
    )))
}

fn done() -> EventResult {
    Ok(AdapterEvent::Completed(RunSucceeded::default()))
}

impl BrokenRuntime {
    /// Where this execution's conversation keeps what it remembers.
    fn memory_key(&self) -> Option<(Option<CallerId>, ConversationId)> {
        let conversation = self.context.config.conversation.as_ref()?;
        match self.fault {
            Fault::SharesHistory => None,
            Fault::KeysByBareId => Some((None, conversation.id().clone())),
            _ => Some((
                Some(conversation.caller().clone()),
                conversation.id().clone(),
            )),
        }
    }

    fn finish(&self, mut items: Vec<EventResult>) -> BoxStream<'_, EventResult> {
        match self.fault {
            Fault::TwoTerminals => items.push(done()),
            Fault::SequenceGap => {
                items.pop();
            }
            Fault::EventsAfterTerminal => items.push(text("late")),
            Fault::EmitsUndeclaredUsage => {
                let at = items.len().saturating_sub(1);
                items.insert(
                    at,
                    Ok(AdapterEvent::Content(Content::Usage(
                        harness_core::event::Usage {
                            input_tokens: 1,
                            output_tokens: 1,
                            ..Default::default()
                        },
                    ))),
                );
            }
            _ => {}
        }
        Box::pin(stream::iter(items))
    }

    /// Starts `calls` and pauses on their approval, as action `id`.
    fn ask(&self, calls: Vec<ToolCallApproval>, id: ActionId) -> Vec<EventResult> {
        let mut items: Vec<EventResult> = calls
            .iter()
            .map(|c| {
                Ok(AdapterEvent::Content(Content::ToolCallStarted(ToolCall {
                    call_id: c.call_id().clone(),
                    tool: c.tool().to_owned(),
                    arguments: c.arguments().clone(),
                })))
            })
            .collect();
        let interrupt = ActionRequest::approval(ApprovalRequest::new(calls).unwrap()).with_id(id);
        self.lock().open = Some(interrupt.clone());
        items.push(Ok(AdapterEvent::Action(interrupt)));
        items
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl HarnessRuntime for BrokenRuntime {
    fn identity(&self) -> RuntimeIdentity {
        RuntimeIdentity {
            adapter: self.context.adapter.clone(),
            execution_id: self.context.execution_id.clone(),
            provider_session_id: None,
        }
    }

    fn initialize(&self) -> BoxFuture<'_, Result<RuntimeInit, HarnessError>> {
        let (slow, token) = (self.slow_init, self.token.clone());
        let ignores = self.fault == Fault::InitIgnoresCancel;
        // A provider session per runtime, named afresh each time (as real providers do).
        let session = format!("sess-{}", self.context.execution_id);
        Box::pin(async move {
            if slow {
                let start = tokio::time::sleep(Duration::from_secs(60));
                if ignores {
                    start.await;
                } else {
                    tokio::select! {
                        () = start => {}
                        () = token.cancelled() => {
                            return Err(HarnessError::new(ErrorCategory::Cancelled, "cancelled"));
                        }
                    }
                }
            }
            Ok(RuntimeInit {
                provider_session_id: Some(session),
            })
        })
    }

    fn stream(&self, turn: TurnInput) -> BoxStream<'_, EventResult> {
        let message = turn.message.as_str();
        if let Some(marker) = message.strip_prefix("remember:") {
            let key = self.memory_key();
            if self.fault != Fault::Forgets {
                let mut memory = self.memory.lock().unwrap_or_else(PoisonError::into_inner);
                memory.entry(key).or_default().push(marker.to_owned());
            }
            return self.finish(vec![text("kept"), done()]);
        }
        if message == "recall" {
            let key = self.memory_key();
            let kept = self
                .memory
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&key)
                .map(|kept| kept.join(" "))
                .unwrap_or_default();
            return self.finish(vec![text(&format!("recalled: [{kept}]")), done()]);
        }
        if message == "hang" || (self.fault == Fault::NeverAsks && message.starts_with("approval:"))
        {
            let token = self.token.clone();
            return Box::pin(stream::once(async move {
                token.cancelled().await;
                Err(HarnessError::new(ErrorCategory::Cancelled, "cancelled"))
            }));
        }
        if let Some(probes) = message.strip_prefix("escape:") {
            // No sandbox: each probe is tried here, and reported as it went.
            let report: String = probes
                .split(' ')
                .map(|probe| {
                    let (what, arg) = probe.split_once(':').unwrap_or((probe, ""));
                    let ok = match what {
                        "read" => std::fs::read(arg).is_ok(),
                        "write" => std::fs::write(arg, "escaped").is_ok(),
                        "connect" => {
                            std::net::TcpStream::connect(("127.0.0.1", arg.parse().unwrap_or(0)))
                                .is_ok()
                        }
                        _ => false,
                    };
                    format!("{probe} {}\n", if ok { "ok" } else { "denied" })
                })
                .collect();
            return self.finish(vec![text(&report), done()]);
        }
        if message == "bomb" {
            return self.finish(vec![text("no limit here"), done()]);
        }
        if let Some(diagnostic) = message.strip_prefix("fail:") {
            let mut msg = "the provider failed".to_owned();
            if self.fault == Fault::LeakCredential {
                msg = format!("the provider failed for context {:?}", turn.client_context);
            }
            let err = HarnessError::new(ErrorCategory::Unavailable, msg)
                .with_diagnostic(diagnostic.to_owned());
            return Box::pin(stream::iter([text("trying"), Err(err)]));
        }
        if let Some(message) = message.strip_prefix("panic:") {
            let message = message.to_owned();
            return Box::pin(stream::once(async move {
                std::panic::panic_any(message);
            }));
        }
        if let Some(tool) = message.strip_prefix("tool:") {
            let call_id: harness_core::id::ToolCallId = "call_t".parse().unwrap();
            let outcome = if tool == "ok" {
                ToolCallOutcome::Success { output: json!(1) }
            } else {
                ToolCallOutcome::Failure {
                    message: "no such file".to_owned(),
                }
            };
            return self.finish(vec![
                Ok(AdapterEvent::Content(Content::ToolCallStarted(ToolCall {
                    call_id: call_id.clone(),
                    tool: "read_file".to_owned(),
                    arguments: json!({}),
                }))),
                Ok(AdapterEvent::Content(Content::ToolCallCompleted(
                    ToolCallCompleted { call_id, outcome },
                ))),
                done(),
            ]);
        }
        if let Some(spec) = message.strip_prefix("approval:") {
            let (spec, then) = match spec.split_once(':') {
                Some((n, "hang")) => (n, Then::Hang),
                Some((n, "again")) => (n, Then::AskAgain),
                _ => (spec, Then::Complete),
            };
            self.lock().then = then;
            let (n, editable) = match spec.strip_suffix(":edit") {
                Some(n) => (n, true),
                None => (spec, false),
            };
            let n: usize = n.parse().unwrap();
            let calls: Vec<ToolCallApproval> = (0..n)
                .map(|i| {
                    ToolCallApproval::new(
                        format!("call_{i}").parse().unwrap(),
                        "shell",
                        json!({"cmd": i}),
                        json!({"type": "object"}),
                    )
                    .unwrap()
                })
                .map(|c| if editable { c.allow_edit() } else { c })
                .collect();
            return Box::pin(stream::iter(self.ask(calls, ActionId::generate())));
        }
        if message == "echo-trace" {
            let sent = match (&turn.trace_context, self.fault) {
                (_, Fault::StaleTraceContext) => STALE.to_owned(),
                (Some(trace), _) => trace.traceparent().to_owned(),
                (None, _) => String::new(),
            };
            return self.finish(vec![text(&sent), done()]);
        }
        if let Some(secret) = message.strip_prefix("secret:") {
            if self.fault == Fault::SecretInSpan {
                let _span = tracing::info_span!("provider.request", prompt = %message);
            }
            return self.finish(vec![text(&format!("the key is {secret}")), done()]);
        }
        if self.fault == Fault::LeaksTask {
            tokio::spawn(std::future::pending::<()>());
        }
        if self.fault == Fault::BlocksForever {
            drop(tokio::task::spawn_blocking(blocked_until_released));
        }
        if self.fault == Fault::LogsOutsideSpan {
            tokio::spawn(async { tracing::info!("provider heartbeat") });
        }
        let mut items = Vec::new();
        if message == "reasoning"
            && !matches!(
                self.fault,
                Fault::ClaimsReasoning | Fault::NarrowsReasoning | Fault::EvaluateHangsAfterFirst
            )
        {
            items.push(Ok(AdapterEvent::Content(Content::ReasoningDelta(
                TextDelta::new("thinking"),
            ))));
        }
        if message == "malformed" {
            return Box::pin(stream::iter([done(), text("late")]));
        }
        items.push(text("hello"));
        items.push(done());
        self.finish(items)
    }

    fn resume(&self, decision: ResumeDecision) -> BoxStream<'_, EventResult> {
        let then = {
            let mut state = self.lock();
            let open = state.open.as_ref().map(|i| &i.id) == Some(decision.action_id());
            let repeated = !state.answered.insert(decision.action_id().clone());
            if !open || (repeated && self.fault != Fault::AcceptsTwice) {
                return Box::pin(stream::iter([Err(HarnessError::new(
                    ErrorCategory::Protocol,
                    "no such open interrupt",
                ))]));
            }
            if self.fault != Fault::AcceptsTwice {
                state.open = None;
            }
            std::mem::take(&mut state.then)
        };
        let mut items = Vec::new();
        if let ValidatedResponse::Approval(approval) = decision.response() {
            for d in approval.decisions().unwrap_or_default() {
                let outcome = match &d.decision {
                    Decision::Approve | Decision::Edit { .. } => ToolCallOutcome::Success {
                        output: Value::Null,
                    },
                    Decision::Reject { reason } => ToolCallOutcome::Rejected {
                        reason: reason.clone(),
                    },
                };
                items.push(Ok(AdapterEvent::Content(Content::ToolCallCompleted(
                    ToolCallCompleted {
                        call_id: d.call_id.clone(),
                        outcome,
                    },
                ))));
            }
        }
        match then {
            Then::Complete => {}
            Then::Hang => {
                let token = self.token.clone();
                let ignores = self.fault == Fault::ResumeIgnoresCancel;
                let hang = stream::once(async move {
                    if ignores {
                        std::future::pending::<()>().await;
                    }
                    token.cancelled().await;
                    Err(HarnessError::new(ErrorCategory::Cancelled, "cancelled"))
                });
                return Box::pin(stream::iter(items).chain(hang));
            }
            Then::AskAgain => {
                let call = ToolCallApproval::new(
                    "call_again".parse().unwrap(),
                    "shell",
                    json!({"cmd": "again"}),
                    json!({"type": "object"}),
                )
                .unwrap();
                let id = if self.fault == Fault::ReusesActionId {
                    decision.action_id().clone()
                } else {
                    ActionId::generate()
                };
                items.extend(self.ask(vec![call], id));
                return Box::pin(stream::iter(items));
            }
        }
        items.push(done());
        self.finish(items)
    }

    fn pending_action(&self) -> BoxFuture<'_, Option<ActionRequest>> {
        let open = self.lock().open.clone();
        Box::pin(async move { open })
    }

    fn cancel(&self, _reason: CancelReason) -> BoxFuture<'_, CancelResult> {
        if self.fault != Fault::CancelIgnored {
            self.token.cancel();
        }
        Box::pin(async { CancelResult::Requested })
    }

    fn restart(&self) -> BoxFuture<'_, Result<(), HarnessError>> {
        Box::pin(async { Ok(()) })
    }

    fn cleanup(&self) -> BoxFuture<'_, ()> {
        let n = self.cleanups.fetch_add(1, Ordering::SeqCst);
        if self.fault == Fault::CleanupTwice && n > 0 {
            panic!("double release of the provider client");
        }
        if self.fault != Fault::CancelIgnored {
            self.token.cancel();
        }
        Box::pin(async {})
    }
}

#[derive(Debug)]
struct BrokenKnobs(Fault);

impl Knobs for BrokenKnobs {
    type Adapter = Broken;

    fn adapter(&self) -> Broken {
        Broken::new(self.0)
    }

    fn request_for(&self, behaviour: &Behaviour) -> Option<ExecutionRequest> {
        let message = match behaviour {
            Behaviour::StreamText => "text".to_owned(),
            Behaviour::StreamReasoning => "reasoning".to_owned(),
            Behaviour::ToolApproval {
                calls,
                editable: false,
            } => format!("approval:{calls}"),
            Behaviour::ToolApproval {
                calls,
                editable: true,
            } => format!("approval:{calls}:edit"),
            Behaviour::ToolSuccess => "tool:ok".to_owned(),
            Behaviour::ToolError => "tool:err".to_owned(),
            Behaviour::Hang => "hang".to_owned(),
            Behaviour::Fail { diagnostic, .. } => format!("fail:{diagnostic}"),
            Behaviour::Panic { message } => format!("panic:{message}"),
            Behaviour::MalformedOrder => "malformed".to_owned(),
            Behaviour::EchoTraceContext => "echo-trace".to_owned(),
            Behaviour::SlowInitialize => {
                return Some(ExecutionRequest::new("text").with_options(json!({"slowInit": true})));
            }
            Behaviour::ApprovalThenHang => "approval:1:hang".to_owned(),
            Behaviour::SequentialApprovals => "approval:1:again".to_owned(),
            Behaviour::EmitSecret { secret } => format!("secret:{secret}"),
            Behaviour::Remember { marker } => format!("remember:{marker}"),
            Behaviour::Recall => "recall".to_owned(),
            escape @ Behaviour::Escape { .. } => {
                format!("escape:{}", escape.escape_probes().join(" "))
            }
            Behaviour::ForkBomb => "bomb".to_owned(),
            _ => return None,
        };
        Some(ExecutionRequest::new(message))
    }

    fn bounds(&self) -> Bounds {
        // Bounded waits only; a broken runtime hits them, a correct one never does.
        Bounds {
            run: Duration::from_secs(5),
            grace: Duration::from_millis(500),
        }
    }
}

/// [`BrokenKnobs`] with other bounds and, when given, another plain request (otherwise the
/// default one).
#[derive(Debug)]
struct Tuned {
    fault: Fault,
    bounds: Bounds,
    plain_request: Option<fn() -> ExecutionRequest>,
}

impl Knobs for Tuned {
    type Adapter = Broken;

    fn adapter(&self) -> Broken {
        BrokenKnobs(self.fault).adapter()
    }

    fn request_for(&self, behaviour: &Behaviour) -> Option<ExecutionRequest> {
        BrokenKnobs(self.fault).request_for(behaviour)
    }

    fn plain_request(&self) -> ExecutionRequest {
        // `BrokenKnobs` keeps the default plain request.
        self.plain_request
            .map_or_else(|| BrokenKnobs(self.fault).plain_request(), |plain| plain())
    }

    fn bounds(&self) -> Bounds {
        self.bounds
    }
}

/// Asserts that `result` is a failure whose detail contains `detail`.
fn assert_fails_saying(result: &FixtureResult, detail: &str) {
    assert!(
        result.outcome.is_failure() && result.outcome.detail().contains(detail),
        "{result:?}"
    );
}

/// Runs the whole suite on `fault` and checks it fails at `id` with `reason` in the text.
async fn fails(fault: Fault, id: &str, reason: &str) -> Report {
    let report = certify(&BrokenKnobs(fault)).await;
    println!("{report}");
    assert!(
        !report.passed(),
        "the suite passed an adapter with {fault:?}"
    );
    let result = report.result(id).expect("fixture exists");
    match &result.outcome {
        FixtureOutcome::Failed { reason: got } => assert!(
            got.contains(reason),
            "{id} failed for another reason: {got}"
        ),
        other => panic!("{id} did not fail for {fault:?}: {other:?}"),
    }
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_sandbox_that_contains_nothing_is_caught() {
    let report = fails(Fault::ClaimsSandbox, "sandbox.escape", "reported `ok`").await;
    assert_fails_saying(report.result("sandbox.limits").unwrap(), "ended Succeeded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_eviction_recovery_that_cannot_restore_is_caught() {
    fails(
        Fault::ClaimsEvictionRecovery,
        "runtime.eviction_recovery",
        "not succeeded",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_adapter_passes() {
    let report = certify(&BrokenKnobs(Fault::None)).await;
    println!("{report}");
    report.assert_passed();
    // Its fixtures tied to undeclared capabilities were refused at preflight, and the
    // edit/form/usage/tool knobs it lacks are either failures (declared) or not exercised.
    assert!(matches!(
        report.result("stream.usage").unwrap().outcome,
        FixtureOutcome::RefusedAtPreflight { .. }
    ));
    // Its memory keeps each conversation's turns apart: the multi-turn fixture ran and passed.
    assert!(matches!(
        report.result("session.multi_turn").unwrap().outcome,
        FixtureOutcome::Passed { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_that_forgets_is_caught() {
    fails(
        Fault::Forgets,
        "session.multi_turn",
        "conversation forgotten: the later turn of the first conversation did not stream the \
         marker its earlier turn kept (a later turn of a conversation sees what an earlier turn \
         kept; another conversation does not, nor does the same conversation id under another \
         caller)",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_keyed_by_its_bare_id_is_caught() {
    fails(
        Fault::KeysByBareId,
        "session.multi_turn",
        "conversation leaked across callers: another caller naming the first conversation's id \
         saw the marker its owner kept, at event",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_shared_across_conversations_is_caught() {
    fails(
        Fault::SharesHistory,
        "session.multi_turn",
        "conversation leaked: the second conversation's turn saw the marker the first kept, at \
         event",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recall_knobs_that_know_the_marker_are_refused() {
    // Knobs that remember the marker themselves, and bake it into their first recall, would
    // pass for any adapter: the fixture refuses them.
    #[derive(Debug, Default)]
    struct Cheating(Mutex<Option<String>>);
    impl Knobs for Cheating {
        type Adapter = Broken;
        fn adapter(&self) -> Broken {
            Broken::new(Fault::Forgets)
        }
        fn request_for(&self, behaviour: &Behaviour) -> Option<ExecutionRequest> {
            let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            match behaviour {
                Behaviour::Remember { marker } => *kept = Some(marker.clone()),
                Behaviour::Recall => {
                    if let Some(marker) = kept.take() {
                        return Some(ExecutionRequest::new(format!("text {marker}")));
                    }
                }
                _ => {}
            }
            BrokenKnobs(Fault::Forgets).request_for(behaviour)
        }
    }
    let result = run_fixture(&Cheating::default(), "session.multi_turn")
        .await
        .unwrap();
    assert_fails_saying(&result, "request carries the marker itself");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_terminal_events_are_caught() {
    let report = fails(
        Fault::TwoTerminals,
        "stream.segment_protocol",
        "2 terminal items",
    )
    .await;
    let ordering = &report.result("stream.terminal_ordering").unwrap().outcome;
    assert!(
        ordering
            .detail()
            .contains("adapter emitted events after its terminal item"),
        "{ordering:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_in_the_sequence_is_caught() {
    let report = fails(
        Fault::SequenceGap,
        "stream.segment_protocol",
        "without a terminal item",
    )
    .await;
    let contiguous = &report.result("stream.sequence_contiguous").unwrap().outcome;
    assert!(
        contiguous.detail().contains("a gap in the run lifecycle"),
        "{contiguous:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_after_the_terminal_are_caught() {
    fails(
        Fault::EventsAfterTerminal,
        "stream.terminal_ordering",
        "adapter emitted events after its terminal item",
    )
    .await;
    let seg = run_fixture(
        &BrokenKnobs(Fault::EventsAfterTerminal),
        "stream.segment_protocol",
    )
    .await
    .unwrap();
    assert!(
        seg.outcome.detail().contains("after its terminal item"),
        "{seg:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_run_twice_is_caught() {
    fails(
        Fault::CleanupTwice,
        "cleanup.idempotent",
        "cleanup is not idempotent",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaked_credential_is_caught() {
    fails(
        Fault::LeakCredential,
        "observability.no_leaked_credential",
        "credential leaked",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ignored_cancel_is_caught() {
    fails(
        Fault::CancelIgnored,
        "cancel.while_streaming",
        "cancel ignored",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_accepted_twice_is_caught() {
    fails(
        Fault::AcceptsTwice,
        "action.duplicate_resume",
        "action accepted twice",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capability_claimed_but_not_delivered_is_caught() {
    fails(
        Fault::ClaimsReasoning,
        "stream.reasoning",
        "capability claimed but not delivered",
    )
    .await;
}

/// The converse: what a declaration says is unsupported must not be delivered either. The
/// service holds the adapter to it (the run fails `CAPABILITY_VIOLATED`), so the fixtures
/// whose runs it touches fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capability_delivered_but_declared_unsupported_is_caught() {
    fails(
        Fault::EmitsUndeclaredUsage,
        "stream.text",
        "its descriptor declares `stream.usage` unsupported",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_wider_than_the_descriptor_is_caught() {
    fails(
        Fault::WidensReport,
        "init.capability_report",
        "evaluate widens the descriptor for skills",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaked_task_is_caught() {
    fails(
        Fault::LeaksTask,
        "observability.leaks.tasks",
        "Tokio task(s) still alive",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaked_task_is_caught_while_the_callers_own_tasks_end() {
    // The caller's runtime has work of its own that ends while the fixture runs: it must
    // neither hide the adapter's leaked tasks nor be counted as the adapter's.
    let unrelated: Vec<_> = (0..16)
        .map(|_| tokio::spawn(tokio::time::sleep(Duration::from_millis(100))))
        .collect();
    let result = run_fixture(&BrokenKnobs(Fault::LeaksTask), "observability.leaks.tasks")
        .await
        .unwrap();
    for task in unrelated {
        task.await.unwrap();
    }
    assert_fails_saying(&result, "Tokio task(s) still alive");
    let busy = tokio::spawn(async {
        for _ in 0..50 {
            tokio::spawn(tokio::time::sleep(Duration::from_secs(30)));
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
    let control = run_fixture(&BrokenKnobs(Fault::None), "observability.leaks.tasks")
        .await
        .unwrap();
    busy.abort();
    assert!(
        matches!(control.outcome, FixtureOutcome::Passed { .. }),
        "{control:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixture_that_gives_up_waiting_cancels_what_it_started() {
    // An approval that never comes: the fixture fails on its bound, and must not leave the
    // execution (its driver task, its runtime and whatever that holds) running forever.
    let quick = Tuned {
        fault: Fault::NeverAsks,
        bounds: Bounds {
            run: Duration::from_millis(300),
            grace: Duration::from_millis(500),
        },
        plain_request: None,
    };
    let metrics = tokio::runtime::Handle::current().metrics();
    let baseline = metrics.num_alive_tasks();
    for id in [
        "tool.approval.approve",
        "action.conflicting_resume",
        "action.sequential_interrupts",
    ] {
        let result = run_fixture(&quick, id).await.unwrap();
        assert!(
            result
                .outcome
                .detail()
                .contains("no action was opened within")
                || result
                    .outcome
                    .detail()
                    .contains("no new action was opened within"),
            "{result:?}"
        );
    }
    // Bounded: the cancelled executions end within their grace.
    for _ in 0..200 {
        if metrics.num_alive_tasks() <= baseline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        metrics.num_alive_tasks() <= baseline,
        "{} execution task(s) still running after their fixtures gave up",
        metrics.num_alive_tasks() - baseline
    );
}

#[test]
fn an_observability_fixture_returns_though_the_adapter_leaves_blocking_work() {
    // The observability fixtures run on a runtime of their own, shut down when they end: work
    // the adapter left on its blocking pool must not hold the suite (the wait is bounded).
    let (tx, rx) = std::sync::mpsc::channel();
    let fixture = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let result = runtime.block_on(run_fixture(
            &BrokenKnobs(Fault::BlocksForever),
            "observability.metrics",
        ));
        let _ = tx.send(result);
    });
    let got = rx.recv_timeout(Duration::from_secs(30));
    release();
    fixture.join().unwrap();
    let result = got.expect("the fixture did not return within 30s of blocking work left behind");
    assert!(matches!(
        result.unwrap().outcome,
        FixtureOutcome::Passed { .. }
    ));
}

#[test]
fn the_preflight_check_is_bounded_when_evaluate_hangs() {
    // The gate's `evaluate` answered (reasoning narrowed away); the preflight check's request
    // reaches the service, whose `evaluate` never answers: the check must give up, bounded.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let result = runtime.block_on(run_fixture(
            &BrokenKnobs(Fault::EvaluateHangsAfterFirst),
            "stream.reasoning",
        ));
        let _ = tx.send(result);
    });
    let result = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the preflight check did not return within 30s")
        .unwrap();
    assert_fails_saying(&result, "preflight did not answer within");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_outside_the_execution_span_is_caught() {
    fails(
        Fault::LogsOutsideSpan,
        "observability.tracing",
        "work outside the execution span: a tracing event of broken",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_in_a_span_field_is_caught() {
    fails(
        Fault::SecretInSpan,
        "observability.redaction",
        "secret not redacted: the secret reached field prompt of span provider.request",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_trace_context_is_caught() {
    fails(
        Fault::StaleTraceContext,
        "observability.trace_propagation",
        "trace context not propagated: the runtime propagates",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_initialize_ignoring_cancel_is_caught() {
    fails(
        Fault::InitIgnoresCancel,
        "cancel.during_initialize",
        "cancel ignored: initialize did not return within grace",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_segment_ignoring_cancel_is_caught() {
    fails(
        Fault::ResumeIgnoresCancel,
        "cancel.during_resume",
        "cancel ignored: the resumed segment did not end within grace",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_interrupt_reusing_the_answered_action_is_caught() {
    fails(
        Fault::ReusesActionId,
        "action.sequential_interrupts",
        "action reused: the interrupt raised after an answer re-opened answered action",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capability_the_configuration_lacks_is_refused_at_preflight_not_failed() {
    // The descriptor declares reasoning; `evaluate` narrows it away for the configuration, and
    // no reasoning is ever yielded: the gate follows `evaluate`, so this is a refusal.
    let report = certify(&BrokenKnobs(Fault::NarrowsReasoning)).await;
    println!("{report}");
    report.assert_passed();
    assert_eq!(report.capability_gate, harness_conformance::GATE_EVALUATED);
    assert_eq!(
        report.result("stream.reasoning").unwrap().outcome,
        FixtureOutcome::RefusedAtPreflight {
            capabilities: vec![K::StreamReasoning]
        }
    );
    // The same adapter gated on its descriptor alone fails the fixture.
    let claimed = certify(&BrokenKnobs(Fault::ClaimsReasoning)).await;
    assert!(
        claimed
            .result("stream.reasoning")
            .unwrap()
            .outcome
            .is_failure()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_wider_for_the_configuration_the_suite_runs_is_caught() {
    // The knobs' plain request continues a conversation: that configuration is the one the
    // gate evaluates, and the one whose report must stay within the descriptor.
    let in_conversation = Tuned {
        fault: Fault::WidensForConversations,
        bounds: Bounds::default(),
        plain_request: Some(|| {
            ExecutionRequest::new("text").with_conversation(ConversationId::generate())
        }),
    };
    let result = run_fixture(&in_conversation, "init.capability_report")
        .await
        .unwrap();
    assert_fails_saying(&result, "evaluate widens the descriptor for skills");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_evaluate_falls_back_to_the_descriptor_and_says_so() {
    let report = fails(
        Fault::EvaluateFails,
        "init.capability_report",
        "evaluate failed for the plain request",
    )
    .await;
    assert!(
        report
            .capability_gate
            .contains("evaluate failed for the plain request")
            && report.capability_gate.contains("the descriptor"),
        "{}",
        report.capability_gate
    );
    // Gated on the descriptor, the declared capabilities' fixtures ran, and failed: the
    // service evaluates every request, so an adapter whose `evaluate` fails serves none.
    let reasoning = &report.result("stream.reasoning").unwrap().outcome;
    assert!(
        reasoning.is_failure()
            && reasoning
                .detail()
                .contains("the agent registry is unreachable"),
        "{reasoning:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_report_says_so_in_json() {
    let report = certify(&BrokenKnobs(Fault::ClaimsReasoning)).await;
    let json: Value = serde_json::from_str(&report.to_json()).unwrap();
    let reasoning = json["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "stream.reasoning")
        .unwrap();
    assert_eq!(reasoning["outcome"]["status"], "failed");
    assert_eq!(json["suiteVersion"], harness_conformance::SUITE_VERSION);
    assert_eq!(json["evidenceId"], report.evidence_id.as_str());
    // Another outcome, another evidence id.
    let control = certify(&BrokenKnobs(Fault::None)).await;
    assert_ne!(control.evidence_id, report.evidence_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_evidence_id_is_the_same_for_the_same_outcomes() {
    // The adapter's provider sessions are named afresh for every runtime: what the suite
    // observed is the same, and so must the evidence id be (adapters cite it).
    let first = certify(&BrokenKnobs(Fault::None)).await;
    let second = certify(&BrokenKnobs(Fault::None)).await;
    let differ: Vec<(&str, String, String)> = first
        .results
        .iter()
        .zip(&second.results)
        .filter(|(a, b)| a != b)
        .map(|(a, b)| (a.id.as_str(), a.outcome.detail(), b.outcome.detail()))
        .collect();
    assert!(differ.is_empty(), "run-specific details: {differ:#?}");
    assert_eq!(first.evidence_id, second.evidence_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_capability_the_suite_cannot_certify_fails() {
    // Declaring subagents supported, which this suite version cannot test, must not pass.
    #[derive(Debug)]
    struct ClaimsSubagents;
    impl Knobs for ClaimsSubagents {
        type Adapter = Broken;
        fn adapter(&self) -> Broken {
            let mut b = Broken::new(Fault::None);
            b.descriptor = HarnessDescriptor::builder("broken".parse().unwrap(), "0.0.1")
                .contract_version(ContractVersion::V1)
                .execution_mode(ExecutionMode::in_process())
                .capability(K::Subagents, Capability::native())
                .capability(K::SubagentsMixedHarness, Capability::native())
                .build()
                .unwrap();
            b
        }
        fn request_for(&self, behaviour: &Behaviour) -> Option<ExecutionRequest> {
            BrokenKnobs(Fault::None).request_for(behaviour)
        }
    }
    let result = run_fixture(&ClaimsSubagents, "subagents.nested")
        .await
        .unwrap();
    assert_fails_saying(&result, "not certifiable by suite version");
}

/// An adapter that declares `skills` and runs, but whose harness never sees the skill.
#[derive(Debug)]
struct IgnoresSkills;
impl Knobs for IgnoresSkills {
    type Adapter = Broken;
    fn adapter(&self) -> Broken {
        let mut b = Broken::new(Fault::None);
        b.descriptor = HarnessDescriptor::builder("broken".parse().unwrap(), "0.0.1")
            .contract_version(ContractVersion::V1)
            .execution_mode(ExecutionMode::in_process())
            .capability(K::StreamText, Capability::native())
            .capability(K::Skills, Capability::native())
            .build()
            .unwrap();
        b
    }
    fn request_for(&self, behaviour: &Behaviour) -> Option<ExecutionRequest> {
        match behaviour {
            Behaviour::UseSkill { .. } => {
                BrokenKnobs(Fault::None).request_for(&Behaviour::StreamText)
            }
            other => BrokenKnobs(Fault::None).request_for(other),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skill_the_harness_never_sees_fails() {
    let result = run_fixture(&IgnoresSkills, "skills.missing_blocked")
        .await
        .unwrap();
    assert_fails_saying(&result, "a skill dropped silently");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declaring_skills_without_a_knob_for_them_fails() {
    #[derive(Debug)]
    struct NoSkillKnob;
    impl Knobs for NoSkillKnob {
        type Adapter = Broken;
        fn adapter(&self) -> Broken {
            IgnoresSkills.adapter()
        }
        fn request_for(&self, behaviour: &Behaviour) -> Option<ExecutionRequest> {
            match behaviour {
                Behaviour::UseSkill { .. } => None,
                other => BrokenKnobs(Fault::None).request_for(other),
            }
        }
    }
    let result = run_fixture(&NoSkillKnob, "skills.missing_blocked")
        .await
        .unwrap();
    assert_fails_saying(&result, "knobs cannot produce UseSkill");
}
