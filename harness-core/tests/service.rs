//! The guarantees of `AdapterService`, proven under load: at most one answer per action, one
//! cancel hook, one cleanup and one `run.cancelled` however many callers race, panics and
//! out-of-order events contained, and readers at any cursor seeing the exact suffix.
//!
//! The runtime here is a controllable one (its segments are closures the test chooses) that
//! counts calls to its cancel hook and cleanup: fault injection for the service, whose real
//! adapter tests live with the adapters.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::StreamExt;
use harness_core::action::ActionRequest;
use harness_core::action::{
    ActionResponse, ApprovalRequest, ApprovalResponse, FormResponse, FormValues, Revision,
    ToolDecision,
};
use harness_core::adapter::{
    AdapterEvent, BoxFuture, BoxStream, CancelResult, EventResult, HarnessAdapter, HarnessRuntime,
    ResumeDecision, RuntimeContext, RuntimeIdentity, RuntimeInit, TurnInput,
};
use harness_core::capability::{Capability, CapabilityKey};
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::event::{
    CancelReason, CancelSource, Content, EventPayload, RunSucceeded, TextDelta,
};
use harness_core::extensions::Extensions;
use harness_core::id::{ActionId, Cursor, ToolCallId};
use harness_core::lifecycle::ExecutionState;
use harness_core::manifest::{ContractVersion, Describe, ExecutionMode, HarnessDescriptor};
use harness_core::service::{
    AdapterService, CancelStatus, ExecutionHandle, ExecutionRequest, Outcome, SegmentKind,
    SegmentStream, ServiceConfig,
};
use tokio_util::sync::CancellationToken;

type Script = Arc<dyn Fn(Option<&ResumeDecision>) -> Vec<Step> + Send + Sync>;

/// One item of a scripted segment.
#[derive(Clone)]
enum Step {
    Event(EventResult),
    /// Wait until the run is cancelled (never yields).
    Hang,
    Panic,
}

#[derive(Default)]
struct Counters {
    runtimes: AtomicUsize,
    cancels: AtomicUsize,
    cleanups: AtomicUsize,
}

struct Controlled {
    descriptor: HarnessDescriptor,
    segment: Script,
    counters: Arc<Counters>,
    panic_on_create: bool,
    hang_on_create: bool,
    /// Every runtime's cancellation token, to check the abort signal was tripped.
    tokens: Arc<std::sync::Mutex<Vec<CancellationToken>>>,
}

impl Controlled {
    fn new(segment: impl Fn(Option<&ResumeDecision>) -> Vec<Step> + Send + Sync + 'static) -> Self {
        let descriptor = HarnessDescriptor::builder("controlled".parse().unwrap(), "1.0.0")
            .contract_version(ContractVersion::V1)
            .execution_mode(ExecutionMode::in_process())
            .capability(CapabilityKey::StreamText, Capability::native())
            .capability(CapabilityKey::InterruptToolApproval, Capability::native())
            .build()
            .unwrap();
        Self {
            descriptor,
            segment: Arc::new(segment),
            counters: Arc::default(),
            panic_on_create: false,
            hang_on_create: false,
            tokens: Arc::default(),
        }
    }
}

impl Describe for Controlled {
    fn descriptor(&self) -> &HarnessDescriptor {
        &self.descriptor
    }
}

impl HarnessAdapter for Controlled {
    fn create_runtime(
        &self,
        context: RuntimeContext,
    ) -> BoxFuture<'_, Result<Box<dyn HarnessRuntime>, HarnessError>> {
        assert!(!self.panic_on_create, "boom in create_runtime");
        if self.hang_on_create {
            return Box::pin(std::future::pending());
        }
        self.counters.runtimes.fetch_add(1, Ordering::SeqCst);
        self.tokens
            .lock()
            .unwrap()
            .push(context.cancellation.clone());
        let runtime = ControlledRuntime {
            segment: Arc::clone(&self.segment),
            counters: Arc::clone(&self.counters),
            token: context.cancellation.clone(),
            context,
        };
        Box::pin(async move { Ok(Box::new(runtime) as Box<dyn HarnessRuntime>) })
    }
}

struct ControlledRuntime {
    segment: Script,
    counters: Arc<Counters>,
    token: CancellationToken,
    context: RuntimeContext,
}

impl ControlledRuntime {
    fn play(&self, steps: Vec<Step>) -> BoxStream<'_, EventResult> {
        let token = self.token.clone();
        Box::pin(
            futures_util::stream::iter(steps)
                .then(move |step| {
                    let token = token.clone();
                    async move {
                        match step {
                            Step::Event(e) => Some(e),
                            Step::Hang => {
                                token.cancelled().await;
                                None
                            }
                            Step::Panic => panic!("boom in the stream"),
                        }
                    }
                })
                .take_while(|item| std::future::ready(item.is_some()))
                .map(|item| item.expect("filtered above")),
        )
    }
}

impl HarnessRuntime for ControlledRuntime {
    fn identity(&self) -> RuntimeIdentity {
        RuntimeIdentity {
            adapter: self.context.adapter.clone(),
            execution_id: self.context.execution_id.clone(),
            provider_session_id: None,
        }
    }
    fn initialize(&self) -> BoxFuture<'_, Result<RuntimeInit, HarnessError>> {
        Box::pin(async { Ok(RuntimeInit::default()) })
    }
    fn stream(&self, _turn: TurnInput) -> BoxStream<'_, EventResult> {
        self.play((self.segment)(None))
    }
    fn resume(&self, decision: ResumeDecision) -> BoxStream<'_, EventResult> {
        self.play((self.segment)(Some(&decision)))
    }
    fn pending_action(&self) -> BoxFuture<'_, Option<ActionRequest>> {
        Box::pin(async { None })
    }
    fn cancel(&self, _reason: CancelReason) -> BoxFuture<'_, CancelResult> {
        self.counters.cancels.fetch_add(1, Ordering::SeqCst);
        self.token.cancel();
        Box::pin(async { CancelResult::Requested })
    }
    fn restart(&self) -> BoxFuture<'_, Result<(), HarnessError>> {
        Box::pin(async { Ok(()) })
    }
    fn cleanup(&self) -> BoxFuture<'_, ()> {
        self.counters.cleanups.fetch_add(1, Ordering::SeqCst);
        Box::pin(async {})
    }
}

fn delta(text: &str) -> Step {
    Step::Event(Ok(AdapterEvent::Content(Content::MessageDelta(
        TextDelta::new(text),
    ))))
}

fn complete() -> Step {
    Step::Event(Ok(AdapterEvent::Completed(RunSucceeded::default())))
}

const APPROVAL_ID: &str = "act_approval";

fn approval_interrupt() -> Step {
    let approval = ApprovalRequest::single(
        "call_1".parse().unwrap(),
        "shell",
        serde_json::json!({"cmd": "ls"}),
        serde_json::json!({"type": "object"}),
    )
    .unwrap();
    Step::Event(Ok(AdapterEvent::Action(
        ActionRequest::approval(approval).with_id(APPROVAL_ID.parse().unwrap()),
    )))
}

/// Asks for approval, then completes once approved.
fn approval_then_complete() -> Controlled {
    Controlled::new(|decision| match decision {
        None => vec![delta("thinking"), approval_interrupt()],
        Some(_) => vec![delta("done"), complete()],
    })
}

fn approve() -> ActionResponse {
    ApprovalResponse::decide(
        APPROVAL_ID.parse().unwrap(),
        Revision::FIRST,
        vec![ToolDecision::approve("call_1".parse().unwrap())],
    )
    .into()
}

async fn kinds(handle: &ExecutionHandle) -> Vec<&'static str> {
    handle
        .events(Cursor::START)
        .map(|e| e.kind().as_str())
        .collect()
        .await
}

async fn wait_for(handle: &ExecutionHandle, state: ExecutionState) {
    let mut events = handle.events(Cursor::START);
    while handle.state() != state {
        if events.next().await.is_none() {
            break;
        }
    }
    assert_eq!(handle.state(), state);
}

fn terminal_count(events: &[&str]) -> usize {
    events
        .iter()
        .filter(|k| matches!(**k, "run.succeeded" | "run.failed" | "run.cancelled"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_answers_have_one_winner() {
    let service = AdapterService::new(approval_then_complete());
    let handle = service.start(ExecutionRequest::new("go")).await.unwrap();
    wait_for(&handle, ExecutionState::AwaitingApproval).await;

    let answers = (0..1000).map(|_| {
        let handle = handle.clone();
        tokio::spawn(async move { handle.respond(approve()).await })
    });
    let results = futures_util::future::join_all(answers).await;
    let accepted = results.iter().filter(|r| matches!(r, Ok(Ok(())))).count();
    let already: Vec<_> = results
        .iter()
        .filter_map(|r| r.as_ref().unwrap().as_ref().err())
        .collect();
    assert_eq!(accepted, 1);
    assert_eq!(already.len(), 999);
    assert!(
        already
            .iter()
            .all(|e| e.code() == &ErrorCode::ACTION_ALREADY_RESOLVED),
        "{already:?}"
    );

    assert!(matches!(handle.outcome().await, Outcome::Succeeded(_)));
    let events = kinds(&handle).await;
    assert_eq!(
        events.iter().filter(|k| **k == "action.resolved").count(),
        1
    );
    assert_eq!(terminal_count(&events), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_cancels_give_one_hook_one_cleanup_one_cancelled() {
    let adapter = Controlled::new(|_| vec![delta("working"), Step::Hang]);
    let counters = Arc::clone(&adapter.counters);
    let service = AdapterService::new(adapter);
    let handle = service.start(ExecutionRequest::new("go")).await.unwrap();
    // Wait until the runtime is streaming (the delta is appended).
    let mut events = handle.events(Cursor::START);
    while let Some(e) = events.next().await {
        if e.kind().as_str() == "message.delta" {
            break;
        }
    }

    let cancels = (0..1000).map(|i| {
        let handle = handle.clone();
        tokio::spawn(async move { handle.cancel(CancelReason::new(format!("caller {i}"))) })
    });
    let results = futures_util::future::join_all(cancels).await;
    let accepted = results
        .iter()
        .filter(|r| matches!(r, Ok(CancelStatus::Accepted)))
        .count();
    assert_eq!(accepted, 1);

    let Outcome::Cancelled(reason) = handle.outcome().await else {
        panic!("expected a cancelled outcome");
    };
    assert!(reason.reason.unwrap().starts_with("caller "));
    let events = kinds(&handle).await;
    assert_eq!(events.iter().filter(|k| **k == "run.cancelled").count(), 1);
    assert_eq!(events.iter().filter(|k| **k == "run.cancelling").count(), 1);
    assert_eq!(terminal_count(&events), 1);
    assert_eq!(counters.cancels.load(Ordering::SeqCst), 1);
    assert_eq!(counters.cleanups.load(Ordering::SeqCst), 1);
    // After the end, cancel reports the terminal state and changes nothing.
    assert_eq!(
        handle.cancel(CancelReason::default()),
        CancelStatus::AlreadyEnded(ExecutionState::Cancelled)
    );
    assert_eq!(counters.cleanups.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn cancel_while_awaiting_approval() {
    let adapter = approval_then_complete();
    let counters = Arc::clone(&adapter.counters);
    let handle = AdapterService::new(adapter)
        .start(ExecutionRequest::new("go"))
        .await
        .unwrap();
    wait_for(&handle, ExecutionState::AwaitingApproval).await;
    assert_eq!(handle.pending_actions().len(), 1);
    assert_eq!(
        handle.cancel(CancelReason::new("changed my mind")),
        CancelStatus::Accepted
    );
    assert!(matches!(handle.outcome().await, Outcome::Cancelled(_)));
    assert!(handle.pending_actions().is_empty());
    // The pending action can no longer be answered.
    let err = handle.respond(approve()).await.unwrap_err();
    assert_eq!(err.code(), &ErrorCode::EXECUTION_TERMINAL);
    assert_eq!(
        kinds(&handle).await,
        [
            "run.queued",
            "run.starting",
            "run.running",
            "message.delta",
            "action.requested",
            "run.awaiting_approval",
            "run.cancelling",
            "run.cancelled"
        ]
    );
    assert_eq!(counters.cancels.load(Ordering::SeqCst), 1);
    assert_eq!(counters.cleanups.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn cancel_before_start_creates_no_runtime() {
    let adapter = approval_then_complete();
    let counters = Arc::clone(&adapter.counters);
    // A current-thread runtime: the driver cannot run before we cancel.
    let handle = AdapterService::new(adapter)
        .start(ExecutionRequest::new("go"))
        .await
        .unwrap();
    assert_eq!(
        handle.cancel(CancelReason::default()),
        CancelStatus::Accepted
    );
    assert!(matches!(handle.outcome().await, Outcome::Cancelled(_)));
    assert_eq!(
        kinds(&handle).await,
        ["run.queued", "run.cancelling", "run.cancelled"]
    );
    assert_eq!(counters.runtimes.load(Ordering::SeqCst), 0);
    assert_eq!(counters.cleanups.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn cancel_after_the_end_changes_nothing() {
    let adapter = Controlled::new(|_| vec![delta("hi"), complete()]);
    let handle = AdapterService::new(adapter)
        .start(ExecutionRequest::new("go"))
        .await
        .unwrap();
    assert!(matches!(handle.outcome().await, Outcome::Succeeded(_)));
    let before = handle.log().len();
    assert_eq!(
        handle.cancel(CancelReason::default()),
        CancelStatus::AlreadyEnded(ExecutionState::Succeeded)
    );
    assert_eq!(handle.log().len(), before);
}

#[tokio::test]
async fn bad_answers_leave_the_action_pending() {
    let handle = AdapterService::new(approval_then_complete())
        .start(ExecutionRequest::new("go"))
        .await
        .unwrap();
    wait_for(&handle, ExecutionState::AwaitingApproval).await;

    let unknown = ApprovalResponse::decide(
        ActionId::generate(),
        Revision::FIRST,
        vec![ToolDecision::approve("call_1".parse().unwrap())],
    );
    let err = handle.respond(unknown.into()).await.unwrap_err();
    assert_eq!(err.code(), &ErrorCode::ACTION_NOT_FOUND);

    let stale = ApprovalResponse::decide(
        APPROVAL_ID.parse().unwrap(),
        Revision::FIRST.next(),
        vec![ToolDecision::approve("call_1".parse().unwrap())],
    );
    let err = handle.respond(stale.into()).await.unwrap_err();
    assert_eq!(err.code(), &ErrorCode::ACTION_REVISION_STALE);

    let form = FormResponse::submit(
        APPROVAL_ID.parse().unwrap(),
        Revision::FIRST,
        FormValues::new(),
    );
    let err = handle.respond(form.into()).await.unwrap_err();
    assert_eq!(err.code(), &ErrorCode::ACTION_RESPONSE_INVALID);

    let unknown_call = ApprovalResponse::decide(
        APPROVAL_ID.parse().unwrap(),
        Revision::FIRST,
        vec![ToolDecision::approve(ToolCallId::generate())],
    );
    let err = handle.respond(unknown_call.into()).await.unwrap_err();
    assert_eq!(err.code(), &ErrorCode::ACTION_RESPONSE_INVALID);

    assert_eq!(handle.state(), ExecutionState::AwaitingApproval);
    assert_eq!(handle.pending_actions().len(), 1);
    handle.respond(approve()).await.unwrap();
    assert!(matches!(handle.outcome().await, Outcome::Succeeded(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_at_random_cursors_see_the_exact_suffix_of_a_10k_event_execution() {
    const DELTAS: usize = 10_000;
    let adapter = Controlled::new(|_| {
        let mut steps: Vec<Step> = (0..DELTAS).map(|i| delta(&i.to_string())).collect();
        steps.push(complete());
        steps
    });
    let handle = AdapterService::new(adapter)
        .start(ExecutionRequest::new("go"))
        .await
        .unwrap();
    // queued, starting, running, the deltas, succeeded
    let total = (DELTAS + 4) as u64;
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let readers = (0..48).map(|_| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let after = (seed >> 33) % (total + 2);
        let handle = handle.clone();
        tokio::spawn(async move {
            let seqs: Vec<u64> = handle
                .events(Cursor::after_seq(after))
                .map(|e| e.seq().get())
                .collect()
                .await;
            (after, seqs)
        })
    });
    for reader in futures_util::future::join_all(readers).await {
        let (after, seqs) = reader.unwrap();
        let expected: Vec<u64> = ((after + 1)..=total).collect();
        assert_eq!(seqs, expected, "reader after {after}");
    }
}

#[tokio::test]
async fn panics_are_contained_and_sanitized() {
    let handle = AdapterService::new(Controlled::new(|_| vec![delta("a"), Step::Panic]))
        .start(ExecutionRequest::new("go"))
        .await
        .unwrap();
    let Outcome::Failed(err) = handle.outcome().await else {
        panic!("expected failure");
    };
    assert_eq!(err.category(), ErrorCategory::Internal);
    assert_eq!(err.code(), &ErrorCode::ADAPTER_PANICKED);
    assert!(err.diagnostic().unwrap().contains("boom in the stream"));
    let wire = serde_json::to_string(&handle.log().snapshot(Cursor::START)).unwrap();
    assert!(
        !wire.contains("boom"),
        "the panic text reached the events: {wire}"
    );

    let mut adapter = Controlled::new(|_| vec![complete()]);
    adapter.panic_on_create = true;
    let handle = AdapterService::new(adapter)
        .start(ExecutionRequest::new("go"))
        .await
        .unwrap();
    let Outcome::Failed(err) = handle.outcome().await else {
        panic!("expected failure");
    };
    assert_eq!(err.code(), &ErrorCode::ADAPTER_PANICKED);
    // A failure while starting ends starting -> running -> failed.
    assert_eq!(
        kinds(&handle).await,
        ["run.queued", "run.starting", "run.running", "run.failed"]
    );
}

#[tokio::test]
async fn out_of_order_events_end_with_protocol() {
    let cases: Vec<(Vec<Step>, &str)> = vec![
        (vec![delta("a")], "ended without terminal"),
        (vec![complete(), delta("late")], "after completion"),
        (vec![approval_interrupt(), delta("late")], "after interrupt"),
    ];
    for (steps, name) in cases {
        let handle = AdapterService::new(Controlled::new(move |_| steps.clone()))
            .start(ExecutionRequest::new("go"))
            .await
            .unwrap();
        let Outcome::Failed(err) = handle.outcome().await else {
            panic!("{name}: expected failure");
        };
        assert_eq!(err.category(), ErrorCategory::Protocol, "{name}");
        let events = kinds(&handle).await;
        assert_eq!(terminal_count(&events), 1, "{name}");
        assert_eq!(*events.last().unwrap(), "run.failed", "{name}");
    }
}

#[tokio::test]
async fn adapter_errors_keep_their_category_and_flag_side_effects_after_output() {
    let err =
        HarnessError::new(ErrorCategory::Throttled, "slow down").with_diagnostic("secret-diag");
    let handle = AdapterService::new(Controlled::new(move |_| {
        vec![delta("partial"), Step::Event(Err(err.clone()))]
    }))
    .start(ExecutionRequest::new("go"))
    .await
    .unwrap();
    let Outcome::Failed(err) = handle.outcome().await else {
        panic!("expected failure");
    };
    assert_eq!(err.category(), ErrorCategory::Throttled);
    assert!(err.side_effects_may_have_occurred());
    assert!(
        !err.retryable(),
        "output was streamed: a retry could repeat it"
    );
    let last = handle.log().last().unwrap();
    let EventPayload::RunFailed(failed) = last.payload() else {
        panic!("last event is {:?}", last.kind());
    };
    assert_eq!(failed.error.category, ErrorCategory::Throttled);
    assert!(
        !serde_json::to_string(&*last)
            .unwrap()
            .contains("secret-diag")
    );
}

#[tokio::test]
async fn required_capabilities_are_checked_before_any_provider_work() {
    let adapter = approval_then_complete();
    let counters = Arc::clone(&adapter.counters);
    let service = AdapterService::new(adapter);
    let request = ExecutionRequest::new("go").require(CapabilityKey::SessionMultiTurn);
    let err = service.start(request).await.unwrap_err();
    assert_eq!(err.code(), &ErrorCode::CAPABILITY_UNSUPPORTED);
    assert!(
        err.message().contains("session.multi_turn"),
        "{}",
        err.message()
    );
    assert_eq!(counters.runtimes.load(Ordering::SeqCst), 0);
    let ok = ExecutionRequest::new("go").require(CapabilityKey::StreamText);
    assert!(service.start(ok).await.is_ok());
}

#[tokio::test]
async fn abandoned_executions_awaiting_an_answer_are_cancelled() {
    let adapter = approval_then_complete();
    let counters = Arc::clone(&adapter.counters);
    let handle = AdapterService::new(adapter)
        .start(ExecutionRequest::new("go"))
        .await
        .unwrap();
    wait_for(&handle, ExecutionState::AwaitingApproval).await;
    let reader = handle.log().clone();
    drop(handle);
    let terminal = reader.terminal().await;
    let EventPayload::RunCancelled(reason) = terminal.payload() else {
        panic!("expected run.cancelled, got {:?}", terminal.kind());
    };
    assert_eq!(reason.source, CancelSource::Abandoned);
    assert_eq!(counters.cleanups.load(Ordering::SeqCst), 1);
}

#[test]
fn the_service_outside_a_runtime_errors_instead_of_panicking() {
    let service = AdapterService::new(approval_then_complete());
    let fut = service.start(ExecutionRequest::new("go"));
    let err = futures_util::FutureExt::now_or_never(fut)
        .unwrap()
        .unwrap_err();
    assert_eq!(err.category(), ErrorCategory::Internal);
}

/// A runtime layer's stream that holds back all message text until the segment ends (its
/// terminal item, an error, the end, or a drain), then emits it upper-cased in one delta;
/// scrubs "secret" from errors. Proves that the driver appends what a layer gives back, in
/// order, and drains a stream it stops reading.
struct Shout {
    inner: harness_core::service::AdapterStream,
    held: String,
    out: std::collections::VecDeque<EventResult>,
}

impl Shout {
    fn flush(&mut self) {
        if !self.held.is_empty() {
            let text = std::mem::take(&mut self.held).to_uppercase();
            let delta = Content::MessageDelta(TextDelta::new(text));
            self.out.push_back(Ok(AdapterEvent::Content(delta)));
        }
    }
}

impl futures_util::Stream for Shout {
    type Item = EventResult;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<EventResult>> {
        let this = &mut *self;
        loop {
            if let Some(item) = this.out.pop_front() {
                return std::task::Poll::Ready(Some(item));
            }
            match std::task::ready!(this.inner.poll_next_unpin(cx)) {
                Some(Ok(AdapterEvent::Content(Content::MessageDelta(d)))) => {
                    this.held.push_str(&d.text);
                }
                Some(Err(err)) => {
                    this.flush();
                    let message = err.message().replace("secret", "[redacted]");
                    this.out
                        .push_back(Err(HarnessError::new(err.category(), message)));
                }
                Some(Ok(other)) => {
                    this.flush();
                    this.out.push_back(Ok(other));
                }
                None => {
                    this.flush();
                    if this.out.is_empty() {
                        return std::task::Poll::Ready(None);
                    }
                }
            }
        }
    }
}

impl SegmentStream for Shout {
    fn drain(mut self: std::pin::Pin<&mut Self>, out: &mut Vec<AdapterEvent>) {
        self.flush();
        out.extend(self.out.drain(..).filter_map(Result::ok));
    }
}

fn shouting(adapter: Controlled) -> AdapterService<Controlled> {
    AdapterService::builder(adapter)
        .layer(tower::util::MapResponseLayer::new(
            |inner: harness_core::service::AdapterStream| Shout {
                inner,
                held: String::new(),
                out: std::collections::VecDeque::new(),
            },
        ))
        .build()
}

async fn texts(handle: &ExecutionHandle) -> Vec<String> {
    handle
        .log()
        .snapshot(Cursor::START)
        .iter()
        .filter_map(|e| match e.payload() {
            EventPayload::MessageDelta(d) => Some(d.text.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn what_a_layer_holds_back_is_appended_before_the_terminal_item() {
    let adapter = Controlled::new(|decision| match decision {
        None => vec![delta("hel"), delta("lo "), approval_interrupt()],
        Some(_) => vec![delta("wor"), delta("ld"), complete()],
    });
    let handle = shouting(adapter)
        .start(ExecutionRequest::new("go"))
        .await
        .unwrap();
    wait_for(&handle, ExecutionState::AwaitingApproval).await;
    handle.respond(approve()).await.unwrap();
    assert!(matches!(handle.outcome().await, Outcome::Succeeded(_)));
    assert_eq!(texts(&handle).await, ["HELLO ", "WORLD"]);
    let kinds = kinds(&handle).await;
    let first_delta = kinds.iter().position(|k| *k == "message.delta").unwrap();
    let requested = kinds.iter().position(|k| *k == "action.requested").unwrap();
    assert!(
        first_delta < requested,
        "held text is flushed before the interrupt: {kinds:?}"
    );
}

#[tokio::test]
async fn a_layer_rewrites_errors_and_gives_back_what_it_held_before_them() {
    let err = HarnessError::new(ErrorCategory::Unavailable, "the secret backend is down");
    let adapter = Controlled::new(move |_| vec![delta("partial"), Step::Event(Err(err.clone()))]);
    let handle = shouting(adapter)
        .start(ExecutionRequest::new("go"))
        .await
        .unwrap();
    let Outcome::Failed(err) = handle.outcome().await else {
        panic!("expected failure");
    };
    assert_eq!(err.message(), "the [redacted] backend is down");
    assert_eq!(texts(&handle).await, ["PARTIAL"]);
}

#[tokio::test]
async fn a_stream_the_driver_stops_reading_is_drained_before_run_cancelled() {
    let adapter = Controlled::new(|_| vec![delta("held "), delta("back"), Step::Hang]);
    let handle = shouting(adapter)
        .start(ExecutionRequest::new("go"))
        .await
        .unwrap();
    wait_for(&handle, ExecutionState::Running).await;
    // Let the two deltas reach the layer (it holds them: nothing is appended yet).
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    assert!(texts(&handle).await.is_empty());
    handle.cancel(CancelReason::new("stop"));
    assert!(matches!(handle.outcome().await, Outcome::Cancelled(_)));
    assert_eq!(texts(&handle).await, ["HELD BACK"]);
    let kinds = kinds(&handle).await;
    assert_eq!(
        &kinds[kinds.len() - 3..],
        ["message.delta", "run.cancelling", "run.cancelled"]
    );
}

fn in_ms(ms: i64) -> harness_core::time::Timestamp {
    harness_core::time::Timestamp::from_millis(
        harness_core::time::Timestamp::now().as_millis() + ms,
    )
    .unwrap()
}

#[tokio::test]
async fn a_deadline_while_running_fails_with_timeout_and_stops_the_runtime() {
    let adapter = Controlled::new(|_| vec![delta("working"), Step::Hang]);
    let counters = Arc::clone(&adapter.counters);
    let handle = AdapterService::new(adapter)
        .start(ExecutionRequest::new("go").with_deadline(in_ms(50)))
        .await
        .unwrap();
    let Outcome::Failed(err) = handle.outcome().await else {
        panic!("expected failure");
    };
    assert_eq!(err.category(), ErrorCategory::Timeout);
    assert_eq!(counters.cancels.load(Ordering::SeqCst), 1);
    assert_eq!(counters.cleanups.load(Ordering::SeqCst), 1);
    assert_eq!(*kinds(&handle).await.last().unwrap(), "run.failed");
}

#[tokio::test]
async fn a_deadline_while_awaiting_cancels_because_no_edge_leads_to_failed() {
    let handle = AdapterService::new(approval_then_complete())
        .start(ExecutionRequest::new("go").with_deadline(in_ms(50)))
        .await
        .unwrap();
    let Outcome::Cancelled(reason) = handle.outcome().await else {
        panic!("expected cancellation");
    };
    assert_eq!(reason.source, CancelSource::Deadline);
}

/// A runtime layer that ties each execution to `token` (what the shutdown layer of
/// `harness-layers` does), through the segment: no request extension involved.
fn linked(adapter: Controlled, token: &CancellationToken) -> AdapterService<Controlled> {
    let token = token.clone();
    AdapterService::builder(adapter)
        .layer(tower::util::MapRequestLayer::new(
            move |segment: harness_core::service::Segment| {
                if segment.kind() == SegmentKind::Turn {
                    segment.cancel_on(&token, CancelSource::Shutdown);
                }
                segment
            },
        ))
        .build()
}

#[tokio::test]
async fn a_linked_token_cancels_running_and_awaiting_executions_as_shutdown() {
    let shutdown = CancellationToken::new();
    let hanging = linked(Controlled::new(|_| vec![delta("w"), Step::Hang]), &shutdown);
    let awaiting = linked(approval_then_complete(), &shutdown);
    let mut handles = Vec::new();
    for i in 0..10 {
        let service = if i % 2 == 0 { &hanging } else { &awaiting };
        handles.push(service.start(ExecutionRequest::new("go")).await.unwrap());
    }
    for (i, handle) in handles.iter().enumerate() {
        let state = if i % 2 == 0 {
            ExecutionState::Running
        } else {
            ExecutionState::AwaitingApproval
        };
        wait_for(handle, state).await;
    }
    shutdown.cancel();
    for handle in handles {
        let Outcome::Cancelled(reason) = handle.outcome().await else {
            panic!("expected cancellation");
        };
        assert_eq!(reason, CancelReason::from_source(CancelSource::Shutdown));
    }
    // An execution started after the token was cancelled ends at once.
    let late = hanging.start(ExecutionRequest::new("late")).await.unwrap();
    assert!(matches!(late.outcome().await, Outcome::Cancelled(_)));
}

/// Caller data in the request's extensions, as an application's own layer would put there.
#[derive(Debug, PartialEq)]
struct Tenant(&'static str);

#[test]
fn extensions_are_not_part_of_the_wire_form() {
    let mut request = ExecutionRequest::new("go");
    request.extensions.insert(Tenant("acme"));
    let json = serde_json::to_value(&request).unwrap();
    assert_eq!(json, serde_json::json!({"message": "go"}));
    let _unused: Extensions = Extensions::new();
}

#[tokio::test]
async fn runtime_layers_read_the_callers_extensions() {
    let seen = Arc::new(std::sync::Mutex::new(None));
    let record = Arc::clone(&seen);
    let service = AdapterService::builder(approval_then_complete())
        .layer(tower::util::MapRequestLayer::new(
            move |segment: harness_core::service::Segment| {
                *record.lock().unwrap() = segment.extensions().get::<Tenant>().map(|t| t.0);
                segment
            },
        ))
        .build();
    let mut request = ExecutionRequest::new("go");
    request.extensions.insert(Tenant("acme"));
    let handle = service.start(request).await.unwrap();
    wait_for(&handle, ExecutionState::AwaitingApproval).await;
    assert_eq!(*seen.lock().unwrap(), Some("acme"));
    handle.cancel(CancelReason::default());
}

// Defects found in review, each pinned by a test.

#[tokio::test]
async fn handles_dropped_before_the_run_pauses_still_abandon_it() {
    let adapter = approval_then_complete();
    let counters = Arc::clone(&adapter.counters);
    let handle = AdapterService::new(adapter)
        .start(ExecutionRequest::new("go"))
        .await
        .unwrap();
    let reader = handle.log().clone();
    // Dropped before the driver even ran: the channel is closed when the run pauses.
    drop(handle);
    let terminal = reader.terminal().await;
    let EventPayload::RunCancelled(reason) = terminal.payload() else {
        panic!("expected run.cancelled, got {:?}", terminal.kind());
    };
    assert_eq!(reason.source, CancelSource::Abandoned);
    assert_eq!(counters.cleanups.load(Ordering::SeqCst), 1);
}

/// A runtime layer whose stream panics on its first item.
struct Exploding(harness_core::service::AdapterStream);

impl futures_util::Stream for Exploding {
    type Item = EventResult;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<EventResult>> {
        match std::task::ready!(self.0.poll_next_unpin(cx)) {
            Some(_) => panic!("a layer bug"),
            None => std::task::Poll::Ready(None),
        }
    }
}

impl SegmentStream for Exploding {
    fn drain(self: std::pin::Pin<&mut Self>, _out: &mut Vec<AdapterEvent>) {}
}

#[tokio::test]
async fn a_panicking_layer_ends_the_execution_with_one_terminal_event() {
    let counters;
    let handle = {
        let adapter = Controlled::new(|_| vec![delta("x"), complete()]);
        counters = Arc::clone(&adapter.counters);
        AdapterService::builder(adapter)
            .layer(tower::util::MapResponseLayer::new(Exploding))
            .build()
            .start(ExecutionRequest::new("go"))
            .await
            .unwrap()
    };
    let Outcome::Failed(err) = handle.outcome().await else {
        panic!("expected failure");
    };
    assert_eq!(err.category(), ErrorCategory::Internal);
    assert_eq!(err.code(), &ErrorCode::LAYER_PANICKED);
    assert_eq!(terminal_count(&kinds(&handle).await), 1);
    assert_eq!(counters.cleanups.load(Ordering::SeqCst), 1);
}

#[test]
fn a_runtime_without_timers_is_refused_up_front() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let service = AdapterService::new(approval_then_complete());
    let err = runtime
        .block_on(service.start(ExecutionRequest::new("go")))
        .unwrap_err();
    assert_eq!(err.category(), ErrorCategory::Internal);
    assert!(err.message().contains("timers"), "{}", err.message());
}

#[tokio::test]
async fn cancel_after_a_shutdown_reports_already_requested() {
    let shutdown = CancellationToken::new();
    let handle = linked(Controlled::new(|_| vec![Step::Hang]), &shutdown)
        .start(ExecutionRequest::new("go"))
        .await
        .unwrap();
    wait_for(&handle, ExecutionState::Running).await;
    shutdown.cancel();
    // At once, before the driver has run again: the token's cancellation is on record.
    assert_eq!(
        handle.cancel(CancelReason::new("late")),
        CancelStatus::AlreadyRequested
    );
    let Outcome::Cancelled(reason) = handle.outcome().await else {
        panic!("expected cancellation");
    };
    assert_eq!(reason.source, CancelSource::Shutdown);
}

#[tokio::test]
async fn a_stream_left_open_after_its_terminal_item_fails_with_protocol() {
    let adapter = Controlled::new(|_| vec![delta("done"), complete(), Step::Hang]);
    let config = ServiceConfig {
        cancel_grace: std::time::Duration::from_millis(20),
        ..ServiceConfig::default()
    };
    let handle = AdapterService::with_config(adapter, config)
        .start(ExecutionRequest::new("go"))
        .await
        .unwrap();
    let Outcome::Failed(err) = handle.outcome().await else {
        panic!("expected failure");
    };
    assert_eq!(err.category(), ErrorCategory::Protocol);
}

#[tokio::test]
async fn a_deadline_trips_the_runtimes_abort_signal() {
    for awaiting in [false, true] {
        let adapter = if awaiting {
            approval_then_complete()
        } else {
            Controlled::new(|_| vec![delta("w"), Step::Hang])
        };
        let tokens = Arc::clone(&adapter.tokens);
        let handle = AdapterService::new(adapter)
            .start(ExecutionRequest::new("go").with_deadline(in_ms(30)))
            .await
            .unwrap();
        handle.outcome().await;
        let tokens = tokens.lock().unwrap();
        assert_eq!(tokens.len(), 1);
        assert!(tokens[0].is_cancelled(), "awaiting={awaiting}");
    }
}

#[tokio::test]
async fn answers_during_a_slow_start_are_refused_at_once() {
    let mut adapter = approval_then_complete();
    adapter.hang_on_create = true;
    let handle = AdapterService::new(adapter)
        .start(ExecutionRequest::new("go"))
        .await
        .unwrap();
    // The runtime never finishes starting; the answer must not wait for it.
    let err = handle.respond(approve()).await.unwrap_err();
    assert_eq!(err.code(), &ErrorCode::ACTION_NOT_FOUND);
    handle.cancel(CancelReason::default());
    assert!(matches!(handle.outcome().await, Outcome::Cancelled(_)));
}

/// Two answers race the end of the run, 100,000 times: each `respond` must return. (With
/// answers still queued in the channel when the driver went, one in about 20,000 rounds never
/// returned: the channel keeps queued messages, and their reply senders, while any handle
/// lives. The driver now closes and drains its queue when it goes.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_racing_the_end_of_the_run_always_return() {
    let rounds: usize = std::env::var("RESPOND_RACE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let service = AdapterService::new(approval_then_complete());
    for round in 0..rounds {
        let handle = service.start(ExecutionRequest::new("go")).await.unwrap();
        let mut events = handle.events(Cursor::START);
        while let Some(event) = events.next().await {
            if event.kind().as_str() == "action.requested" {
                break;
            }
        }
        let answer = |handle: ExecutionHandle| {
            tokio::spawn(async move {
                tokio::time::timeout(
                    std::time::Duration::from_secs(10),
                    handle.respond(approve()),
                )
                .await
            })
        };
        let (a, b) = (answer(handle.clone()), answer(handle.clone()));
        let (a, b) = (a.await.unwrap(), b.await.unwrap());
        let (Ok(a), Ok(b)) = (a, b) else {
            panic!("round {round}: an answer never returned");
        };
        assert!(
            a.is_ok() != b.is_ok(),
            "round {round}: exactly one answer wins: {a:?} {b:?}"
        );
    }
}

/// An adapter that yields without end is stopped at the service's event limit.
#[tokio::test]
async fn an_execution_stops_at_its_event_limit() {
    let adapter = Controlled::new(|_| (0..500).map(|_| delta("x")).chain([complete()]).collect());
    let config = ServiceConfig {
        max_events: 100,
        ..ServiceConfig::default()
    };
    let handle = AdapterService::with_config(adapter, config)
        .start(ExecutionRequest::new("go"))
        .await
        .unwrap();
    let Outcome::Failed(err) = handle.outcome().await else {
        panic!("expected failure");
    };
    assert_eq!(err.code(), &ErrorCode::EVENT_LIMIT_REACHED);
    assert!(!err.retryable());
    let events = handle.log().snapshot(Cursor::START);
    assert!(events.len() <= 101, "{} events", events.len());
    assert_eq!(events.last().unwrap().kind().as_str(), "run.failed");
}
