//! [`AdapterService`]: the `tower::Service` that drives executions on one adapter.
//!
//! `call(ExecutionRequest)` checks the required capabilities against the adapter's report,
//! then spawns one *driver* task per execution and returns an [`ExecutionHandle`] at once.
//! The driver is the only owner of the typestate [`crate::lifecycle::Execution`]
//! and of the provider runtime, and it processes one thing at a time: an adapter event, a
//! caller's answer, or a cancellation. That is how the service guarantees, without locks
//! around provider calls:
//!
//! - **one mutating operation at a time**: `stream`, `resume`, `cancel` and `cleanup` are
//!   awaited by the driver in turn, never overlapped;
//! - **an action is answered at most once**: answers are queued to the driver; the first valid
//!   one resumes the run, every later one gets `ACTION_ALREADY_RESOLVED`; unknown ids get
//!   `ACTION_NOT_FOUND`, stale revisions `ACTION_REVISION_STALE`, answers that do not fit the
//!   request `ACTION_RESPONSE_INVALID`, and the pending action stays open after a bad answer;
//! - **cancellation is a request**: [`ExecutionHandle::cancel`] returns at once; the driver
//!   calls the runtime's cancel hook and cleanup at most once however many callers race, and
//!   `run.cancelled` (the one terminal event) confirms it. A failure the driver sees after a
//!   cancel was accepted (an `initialize` or a stream aborted by the execution's token) is
//!   taken as the answer to that cancel: the run ends `run.cancelled`. A segment that
//!   completed or paused before the driver saw the cancel ends as it ended;
//! - **errors and panics are classified and sanitized at the boundary**: an adapter's error
//!   ends the run as `run.failed` with the error's public projection; a panic in any adapter
//!   future or stream becomes an `internal` error with code `ADAPTER_PANICKED` (the panic text
//!   goes to the diagnostic only); the process never crashes;
//! - **events out of order end the run with `protocol`**: an item after the terminal one, a
//!   segment that ends without a terminal item, a duplicate or foreign artifact.
//!
//! Decisions where the spec is silent:
//! - If every handle of an execution is dropped while it awaits an action, nobody can answer
//!   it any more: the driver cancels it (source `abandoned`), which runs cleanup.
//! - An adapter error after output was emitted is marked "side effects may have occurred",
//!   so retry policies never repeat it.
//! - The request's deadline is enforced here (see [`policy`](crate::policy)); the timeout
//!   layer of `harness-layers` only sets it. It is also handed to the runtime in [`TurnInput`].
//! - If a driver is lost (a panic in a layer's policy, a runtime shutting down), the execution
//!   still ends with one `run.failed` (`internal`, `EXECUTION_LOST`).
//!
//! The service needs a Tokio runtime (it spawns the drivers); without one `call` fails with
//! an `internal` error rather than panicking.
//!
//! ```
//! use futures_util::StreamExt;
//! use harness_core::adapter::{AdapterEvent, BoxStream, EventResult, RunContext, Simple, SimpleAdapter};
//! use harness_core::event::{Content, RunSucceeded, TextDelta};
//! use harness_core::id::Cursor;
//! use harness_core::manifest::HarnessDescriptor;
//! use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
//! use tower::ServiceExt;
//!
//! struct Echo(HarnessDescriptor);
//! impl SimpleAdapter for Echo {
//!     fn descriptor(&self) -> &HarnessDescriptor { &self.0 }
//!     fn stream(&self, run: RunContext) -> BoxStream<'static, EventResult> {
//!         let text = run.turn.message.clone();
//!         Box::pin(futures_util::stream::iter([
//!             Ok(AdapterEvent::Content(Content::MessageDelta(TextDelta::new(text)))),
//!             Ok(AdapterEvent::Completed(RunSucceeded::default())),
//!         ]))
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! # use harness_core::manifest::{ContractVersion, ExecutionMode};
//! # let descriptor = HarnessDescriptor::builder("echo".parse().unwrap(), "0.1.0")
//! #     .contract_version(ContractVersion::V1).execution_mode(ExecutionMode::in_process()).build().unwrap();
//! let service = AdapterService::new(Simple::new(Echo(descriptor)));
//! let execution = service.oneshot(ExecutionRequest::new("hello")).await.unwrap();
//! let kinds: Vec<_> = execution.events(Cursor::START).map(|e| e.kind().as_str()).collect().await;
//! assert_eq!(kinds, ["run.queued", "run.starting", "run.running", "message.delta", "run.succeeded"]);
//! assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
//! # });
//! ```

use std::any::Any;
use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures_util::FutureExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::action::{ActionRequest, ActionResponse, ActionResponseError, ValidatedResponse};
use crate::adapter::{
    AdapterEvent, AgentConfig, BoxStream, DeploymentContext, EventResult, HarnessAdapter,
    HarnessRuntime, InputFile, InterruptKind, ResumeDecision, RunLimits, RuntimeContext, TurnInput,
};
use crate::artifact::ArtifactDescriptor;
use crate::capability::Requirement;
use crate::error::{ErrorCategory, ErrorCode, HarnessError};
use crate::event::{CancelReason, CancelSource, RunSucceeded};
use crate::extensions::Extensions;
use crate::id::{ActionId, AdapterId, ConversationId, Cursor, ExecutionId, IdempotencyKey};
use crate::lifecycle::{Execution, ExecutionState, NonTerminal, state};
use crate::log::{EventStream, LogReader};
use crate::manifest::ContractVersion;
use crate::policy::{Chain, InitTimeout, Interceptors, ParentCancellation, Retry};
use crate::time::Timestamp;
use crate::trace::TraceContext;

/// A request to start one execution.
///
/// ```
/// use harness_core::service::ExecutionRequest;
/// let req: ExecutionRequest = serde_json::from_value(serde_json::json!({
///     "message": "fix the failing test",
///     "requiredCapabilities": ["stream.text", {"capability": "interrupt.tool_approval", "minimum": "native"}],
///     "idempotencyKey": "order-42"
/// })).unwrap();
/// assert_eq!(req.required_capabilities.len(), 2);
/// let err = serde_json::from_value::<ExecutionRequest>(serde_json::json!({"mesage": "typo"})).unwrap_err();
/// assert!(err.to_string().contains("unknown field `mesage`"));
/// ```
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct ExecutionRequest {
    /// The user's message.
    pub message: String,
    /// Adapter options, validated against the adapter's options schema by the preflight layer.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub options: Value,
    /// Input files (references, never bytes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<InputFile>,
    /// Opaque client context handed to the adapter.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub client_context: Map<String, Value>,
    /// The conversation this execution continues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<ConversationId>,
    /// Capabilities the adapter must support, checked before any provider work.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_capabilities: Vec<Requirement>,
    /// Makes retries of this request return the original execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<IdempotencyKey>,
    /// When the execution must end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Timestamp>,
    /// The caller's W3C trace context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_context: Option<TraceContext>,
    /// Policies from layers for the driver (never on the wire; not part of the request's
    /// identity). See [`policy`](crate::policy).
    #[serde(skip)]
    #[schemars(skip)]
    pub extensions: Extensions,
}

impl ExecutionRequest {
    /// A request with `message` and nothing else.
    #[must_use]
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            ..Self::default()
        }
    }

    /// Sets the adapter options.
    #[must_use]
    pub fn with_options(mut self, options: Value) -> Self {
        self.options = options;
        self
    }

    /// Adds a required capability.
    #[must_use]
    pub fn require(mut self, requirement: impl Into<Requirement>) -> Self {
        self.required_capabilities.push(requirement.into());
        self
    }

    /// Sets the idempotency key.
    #[must_use]
    pub fn with_idempotency_key(mut self, key: IdempotencyKey) -> Self {
        self.idempotency_key = Some(key);
        self
    }

    /// Sets the conversation.
    #[must_use]
    pub fn with_conversation(mut self, conversation: ConversationId) -> Self {
        self.conversation_id = Some(conversation);
        self
    }

    /// Sets the trace context.
    #[must_use]
    pub fn with_trace_context(mut self, trace: TraceContext) -> Self {
        self.trace_context = Some(trace);
        self
    }

    /// Sets the deadline.
    #[must_use]
    pub fn with_deadline(mut self, deadline: Timestamp) -> Self {
        self.deadline = Some(deadline);
        self
    }
}

/// How an execution ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// `run.succeeded`.
    Succeeded(RunSucceeded),
    /// `run.failed`, with the full error (its diagnostic included: this is for the
    /// application, not for its clients).
    Failed(HarnessError),
    /// `run.cancelled`.
    Cancelled(CancelReason),
}

impl Outcome {
    /// The terminal state.
    #[must_use]
    pub fn state(&self) -> ExecutionState {
        match self {
            Self::Succeeded(_) => ExecutionState::Succeeded,
            Self::Failed(_) => ExecutionState::Failed,
            Self::Cancelled(_) => ExecutionState::Cancelled,
        }
    }
}

/// What [`ExecutionHandle::cancel`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelRequest {
    /// This call requested cancellation. `run.cancelled` confirms it, unless the execution
    /// was already ending on its own (its terminal item seen, cleanup under way): a request is
    /// not a guarantee, and the outcome tells which way it ended.
    Accepted,
    /// Cancellation had already been requested; nothing more was done.
    AlreadyRequested,
    /// The execution had already ended in this state.
    AlreadyEnded(ExecutionState),
}

/// Timing knobs of the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceConfig {
    /// How long the runtime's cancel hook may take before cleanup runs anyway.
    pub cancel_grace: Duration,
    /// How long cleanup may take.
    pub cleanup_deadline: Duration,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        Self {
            cancel_grace: Duration::from_secs(5),
            cleanup_deadline: Duration::from_secs(10),
        }
    }
}

/// Drives executions on one adapter. Cheap to clone; clones share the adapter.
pub struct AdapterService<A> {
    inner: Arc<ServiceInner<A>>,
}

struct ServiceInner<A> {
    adapter: A,
    config: ServiceConfig,
    deployment: DeploymentContext,
}

impl<A> Clone for AdapterService<A> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<A: HarnessAdapter> fmt::Debug for AdapterService<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdapterService")
            .field("adapter", self.inner.adapter.descriptor().id())
            .field("config", &self.inner.config)
            .finish()
    }
}

impl<A: HarnessAdapter> AdapterService<A> {
    /// A service over `adapter` with the default [`ServiceConfig`].
    #[must_use]
    pub fn new(adapter: A) -> Self {
        Self::with_config(adapter, ServiceConfig::default())
    }

    /// A service over `adapter` with `config`.
    #[must_use]
    pub fn with_config(adapter: A, config: ServiceConfig) -> Self {
        Self {
            inner: Arc::new(ServiceInner {
                adapter,
                config,
                deployment: DeploymentContext::default(),
            }),
        }
    }

    /// The adapter.
    #[must_use]
    pub fn adapter(&self) -> &A {
        &self.inner.adapter
    }

    /// Starts one execution: checks required capabilities against the adapter's report, then
    /// spawns its driver and returns its handle.
    ///
    /// # Errors
    /// `CAPABILITY_UNSUPPORTED` (configuration) when a requirement is unmet; `internal` when
    /// called outside a Tokio runtime. No provider work has happened in either case.
    pub async fn start(&self, request: ExecutionRequest) -> Result<ExecutionHandle, HarnessError> {
        let tokio = tokio::runtime::Handle::try_current().map_err(|_| {
            HarnessError::new(
                ErrorCategory::Internal,
                "the adapter service needs a Tokio runtime",
            )
            .with_diagnostic("AdapterService::call was polled outside a Tokio runtime context")
        })?;
        // Deadlines, grace periods and cleanup bounds need the runtime's timer; without it the
        // driver could not bound anything, so refuse here rather than fail later.
        if std::panic::catch_unwind(|| drop(tokio::time::sleep(Duration::ZERO))).is_err() {
            return Err(HarnessError::new(
                ErrorCategory::Internal,
                "the adapter service needs a Tokio runtime with timers enabled",
            )
            .with_diagnostic("build the runtime with `enable_time()` (or `enable_all()`)"));
        }
        let inner = &self.inner;
        let config = AgentConfig {
            options: request.options.clone(),
            model: None,
            conversation: request.conversation_id.clone(),
        };
        if !request.required_capabilities.is_empty() {
            let report = catch(async { inner.adapter.evaluate(&config, &inner.deployment).await })
                .await
                .and_then(|r| r)?;
            if let Err(unmet) = report.check(&request.required_capabilities) {
                let list: Vec<String> = unmet.iter().map(ToString::to_string).collect();
                return Err(HarnessError::new(
                    ErrorCategory::Configuration,
                    format!(
                        "required capabilities are not supported: {}",
                        list.join("; ")
                    ),
                )
                .with_code(ErrorCode::CAPABILITY_UNSUPPORTED));
            }
        }

        let id = ExecutionId::generate();
        // If the driver is lost (a panic in a layer's policy, a runtime shutting down), the
        // execution still ends its log with exactly one terminal event.
        let queued = Execution::queue(id.clone()).fail_on_drop();
        let parent = request
            .extensions
            .get::<ParentCancellation>()
            .map(|p| p.0.clone());
        let cancel = parent
            .as_ref()
            .map_or_else(CancellationToken::new, CancellationToken::child_token);
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            id,
            adapter: inner.adapter.descriptor().id().clone(),
            reader: queued.events(),
            cancel,
            snapshot: Mutex::new(Snapshot {
                resolved: HashSet::new(),
                cancel_reason: None,
                outcome: None,
            }),
        });
        let handle = ExecutionHandle {
            shared: Arc::clone(&shared),
            commands: tx,
        };
        let driver = Driver {
            service: Arc::clone(&self.inner),
            shared,
            commands: Some(rx),
            emitted: false,
            deadline: None,
            chain: None,
            parent,
            content: Vec::new(),
        };
        // The driver inherits the caller's span (a tracing layer enters the execution's span while
        // polling this call), so what the driver and the adapter log belongs to the execution.
        tokio.spawn(
            driver
                .run(queued, request, config)
                .instrument(tracing::Span::current()),
        );
        Ok(handle)
    }
}

impl<A: HarnessAdapter> tower::Service<ExecutionRequest> for AdapterService<A> {
    type Response = ExecutionHandle;
    type Error = HarnessError;
    type Future = crate::adapter::BoxFuture<'static, Result<ExecutionHandle, HarnessError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Executions are independent tasks: the bare service is always ready. Capacity limits
        // are a layer's job.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ExecutionRequest) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.start(request).await })
    }
}

/// What the driver shares with handles beyond the log. State, pending action and artifacts
/// are *not* here: they are derived from the log under its append lock, so they can never
/// lag behind the events a caller has already seen.
struct Snapshot {
    resolved: HashSet<ActionId>,
    cancel_reason: Option<CancelReason>,
    outcome: Option<Outcome>,
}

struct Shared {
    id: ExecutionId,
    adapter: AdapterId,
    reader: LogReader,
    cancel: CancellationToken,
    snapshot: Mutex<Snapshot>,
}

impl Shared {
    fn state(&self) -> ExecutionState {
        self.reader.state().unwrap_or(ExecutionState::Queued)
    }

    fn snapshot(&self) -> MutexGuard<'_, Snapshot> {
        // Every update under this lock is a single assignment, so a poisoned lock still holds
        // a consistent snapshot.
        self.snapshot.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A caller's request to the driver. Boxed so the channel's pre-allocated slots stay small:
/// every idle execution holds one block of them.
enum Command {
    Respond(Box<(ActionResponse, oneshot::Sender<Result<(), HarnessError>>)>),
}

/// The caller's handle on one execution. Cheap to clone.
#[derive(Clone)]
pub struct ExecutionHandle {
    shared: Arc<Shared>,
    commands: mpsc::UnboundedSender<Command>,
}

impl fmt::Debug for ExecutionHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecutionHandle")
            .field("id", &self.shared.id)
            .field("adapter", &self.shared.adapter)
            .field("state", &self.state())
            .finish()
    }
}

impl ExecutionHandle {
    /// The execution id.
    #[must_use]
    pub fn id(&self) -> &ExecutionId {
        &self.shared.id
    }

    /// The adapter running it.
    #[must_use]
    pub fn adapter(&self) -> &AdapterId {
        &self.shared.adapter
    }

    /// The current state.
    #[must_use]
    pub fn state(&self) -> ExecutionState {
        self.shared.state()
    }

    /// The events after `cursor`: replay, then the live tail, ending after the terminal event.
    #[must_use]
    pub fn events(&self, cursor: Cursor) -> EventStream {
        self.shared.reader.subscribe(cursor)
    }

    /// A reader of the event log.
    #[must_use]
    pub fn log(&self) -> &LogReader {
        &self.shared.reader
    }

    /// The pending action requests (at most one in this version of the runtime).
    #[must_use]
    pub fn pending_actions(&self) -> Vec<ActionRequest> {
        self.shared.reader.pending_action().into_iter().collect()
    }

    /// The artifacts created so far.
    #[must_use]
    pub fn artifacts(&self) -> Vec<ArtifactDescriptor> {
        self.shared.reader.artifacts()
    }

    /// Answers a pending action.
    ///
    /// # Errors
    /// `ACTION_ALREADY_RESOLVED` for an action already answered, `ACTION_NOT_FOUND` for an id
    /// that is not pending, `ACTION_REVISION_STALE` for another revision,
    /// `ACTION_RESPONSE_INVALID` for an answer that does not fit the request (the action
    /// stays pending), `EXECUTION_TERMINAL` once the execution has ended.
    pub async fn respond(&self, response: ActionResponse) -> Result<(), HarnessError> {
        let (tx, rx) = oneshot::channel();
        let action_id = response.action_id().clone();
        if self
            .commands
            .send(Command::Respond(Box::new((response, tx))))
            .is_err()
        {
            return Err(self.late_answer(&action_id));
        }
        match rx.await {
            Ok(result) => result,
            Err(_) => Err(self.late_answer(&action_id)),
        }
    }

    /// The error for an answer that arrives after the driver stopped listening.
    fn late_answer(&self, action_id: &ActionId) -> HarnessError {
        if self.shared.snapshot().resolved.contains(action_id) {
            already_resolved(action_id)
        } else {
            HarnessError::new(
                ErrorCategory::Configuration,
                format!(
                    "execution {} has ended ({}); action {action_id} can no longer be answered",
                    self.shared.id,
                    self.shared.state()
                ),
            )
            .with_code(ErrorCode::EXECUTION_TERMINAL)
        }
    }

    /// Requests cancellation. Returns at once; `run.cancelled` confirms it. Safe to call any
    /// number of times, from any number of tasks, before, during or after the run.
    pub fn cancel(&self, reason: CancelReason) -> CancelRequest {
        let state = self.shared.state();
        if state.is_terminal() {
            return CancelRequest::AlreadyEnded(state);
        }
        let mut snapshot = self.shared.snapshot();
        if snapshot.cancel_reason.is_some() || self.shared.cancel.is_cancelled() {
            return CancelRequest::AlreadyRequested;
        }
        snapshot.cancel_reason = Some(reason);
        drop(snapshot);
        self.shared.cancel.cancel();
        CancelRequest::Accepted
    }

    /// Resolves when the execution has ended, with its outcome.
    pub async fn outcome(&self) -> Outcome {
        let terminal = self.shared.reader.terminal().await;
        if let Some(outcome) = self.shared.snapshot().outcome.clone() {
            return outcome;
        }
        // The driver records the outcome before appending the terminal event, so this is
        // only reached for a log filled by other means; derive it from the event.
        match terminal.payload() {
            crate::event::EventPayload::RunSucceeded(s) => Outcome::Succeeded(s.clone()),
            crate::event::EventPayload::RunFailed(f) => Outcome::Failed(f.error.clone().into()),
            crate::event::EventPayload::RunCancelled(r) => Outcome::Cancelled(r.clone()),
            _ => Outcome::Failed(HarnessError::new(
                ErrorCategory::Internal,
                "the execution ended without a terminal event",
            )),
        }
    }
}

fn already_resolved(action_id: &ActionId) -> HarnessError {
    HarnessError::new(
        ErrorCategory::Configuration,
        format!("action {action_id} was already answered; an action is answered at most once"),
    )
    .with_code(ErrorCode::ACTION_ALREADY_RESOLVED)
}

fn not_pending(action_id: &ActionId, pending: Option<&ActionId>) -> HarnessError {
    let detail = match pending {
        Some(p) => format!("the pending action is {p}"),
        None => "no action is pending".to_owned(),
    };
    HarnessError::new(
        ErrorCategory::Configuration,
        format!("action {action_id} is not pending: {detail}"),
    )
    .with_code(ErrorCode::ACTION_NOT_FOUND)
}

fn protocol(message: &str, diagnostic: String) -> HarnessError {
    HarnessError::new(ErrorCategory::Protocol, message.to_owned())
        .with_code(ErrorCode::EVENT_ORDER_VIOLATION)
        .with_diagnostic(diagnostic)
}

fn panic_error(what: &str, payload: &(dyn Any + Send)) -> HarnessError {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned());
    HarnessError::new(ErrorCategory::Internal, "the adapter failed unexpectedly")
        .with_code(ErrorCode::ADAPTER_PANICKED)
        .with_diagnostic(format!("adapter panicked in {what}: {text}"))
}

/// Runs an adapter future, turning a panic into an `ADAPTER_PANICKED` error.
async fn catch<T>(fut: impl Future<Output = T>) -> Result<T, HarnessError> {
    AssertUnwindSafe(fut)
        .catch_unwind()
        .await
        .map_err(|p| panic_error("a future", &*p))
}

/// One item of a run segment: `None` when the stream ended, `Err` for a panic in its
/// `poll_next` (after which the segment is never polled again).
type SegmentItem = Option<Result<EventResult, Box<dyn Any + Send>>>;

/// Polls a run segment once, turning a panic in the adapter's stream into an `Err` item.
fn poll_segment(
    segment: &mut BoxStream<'_, EventResult>,
    cx: &mut Context<'_>,
) -> Poll<SegmentItem> {
    match std::panic::catch_unwind(AssertUnwindSafe(|| segment.as_mut().poll_next(cx))) {
        Ok(Poll::Ready(item)) => Poll::Ready(item.map(Ok)),
        Ok(Poll::Pending) => Poll::Pending,
        Err(panic) => Poll::Ready(Some(Err(panic))),
    }
}

/// Opens a run segment, turning a panic in the synchronous part of `stream`/`resume` into a
/// segment that fails with `ADAPTER_PANICKED`.
fn open_segment<'a>(
    open: impl FnOnce() -> BoxStream<'a, EventResult>,
) -> BoxStream<'a, EventResult> {
    match std::panic::catch_unwind(AssertUnwindSafe(open)) {
        Ok(segment) => segment,
        Err(panic) => {
            let err = panic_error("opening its event stream", &*panic);
            Box::pin(futures_util::stream::once(async move { Err(err) }))
        }
    }
}

/// How a run segment ended.
enum SegmentEnd {
    Completed(RunSucceeded),
    Interrupt(crate::adapter::Interrupt),
    Failed(HarnessError),
    Stopped(Stop),
}

/// Why the driver stopped waiting on the adapter or the caller.
#[derive(Clone, Copy)]
enum Stop {
    /// Cancellation was requested (by a caller, the parent token, or abandonment).
    Cancelled,
    /// The request's deadline or the initialization timeout passed.
    Deadline,
}

/// A runtime as the driver holds it: the driver calls its cancel hook and cleanup at most
/// once each, whatever path the execution takes.
struct Runtime {
    inner: Box<dyn HarnessRuntime>,
    cancelled: bool,
    cleaned: bool,
}

impl Runtime {
    fn new(inner: Box<dyn HarnessRuntime>) -> Self {
        Self {
            inner,
            cancelled: false,
            cleaned: false,
        }
    }
}

struct Driver<A> {
    service: Arc<ServiceInner<A>>,
    shared: Arc<Shared>,
    /// `None` once every handle is gone.
    commands: Option<mpsc::UnboundedReceiver<Command>>,
    /// Whether any content or artifact was appended (output may have occurred).
    emitted: bool,
    /// When the execution must end.
    deadline: Option<tokio::time::Instant>,
    /// The interceptors of this execution, if any.
    chain: Option<Chain>,
    /// The parent (shutdown) token, to name the cancellation reason.
    parent: Option<CancellationToken>,
    /// Content received in the current batch, appended together.
    content: Vec<crate::event::Content>,
}

/// Waits for the next command, or forever once every handle is gone.
async fn next_command(commands: &mut Option<mpsc::UnboundedReceiver<Command>>) -> Option<Command> {
    match commands {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Converts a wall-clock deadline to the runtime's clock, relative to now.
fn instant_of(deadline: Timestamp) -> tokio::time::Instant {
    let left = deadline
        .as_millis()
        .saturating_sub(Timestamp::now().as_millis());
    tokio::time::Instant::now() + Duration::from_millis(u64::try_from(left).unwrap_or(0))
}

fn timeout_error(what: &str) -> HarnessError {
    HarnessError::new(
        ErrorCategory::Timeout,
        format!("the execution exceeded its {what}"),
    )
}

/// Resolves when the execution must stop waiting: cancelled, or past `deadline`.
async fn stop(cancel: &CancellationToken, deadline: Option<tokio::time::Instant>) -> Stop {
    tokio::select! {
        biased;
        () = cancel.cancelled() => Stop::Cancelled,
        () = sleep_until(deadline) => Stop::Deadline,
    }
}

/// How many ready items the driver takes from a segment before it looks at cancellation and
/// commands again: one `select!` per batch instead of one per item.
const BATCH: usize = 64;

impl<A: HarnessAdapter> Driver<A> {
    fn cancel_reason(&self) -> CancelReason {
        let given = self.shared.snapshot().cancel_reason.clone();
        given.unwrap_or_else(|| {
            if self
                .parent
                .as_ref()
                .is_some_and(CancellationToken::is_cancelled)
            {
                CancelReason::from_source(CancelSource::Shutdown)
            } else {
                CancelReason::default()
            }
        })
    }

    /// The deadline passed: record why (unless a caller already gave a reason) and trip the
    /// execution's token, the abort signal runtimes watch, alongside the cancel hook.
    fn deadline_passed(&self) {
        self.shared
            .snapshot()
            .cancel_reason
            .get_or_insert_with(|| CancelReason::from_source(CancelSource::Deadline));
        self.shared.cancel.cancel();
    }

    /// Resolves when the execution must stop waiting: cancelled, or past `deadline`.
    async fn stop(&self, deadline: Option<tokio::time::Instant>) -> Stop {
        stop(&self.shared.cancel, deadline).await
    }

    /// Answers a command that arrives while no action is pending.
    fn refuse(&self, command: Command) {
        let Command::Respond(respond) = command;
        let (response, reply) = *respond;
        let id = response.action_id();
        let resolved = self.shared.snapshot().resolved.contains(id);
        let err = if resolved {
            already_resolved(id)
        } else {
            not_pending(id, None)
        };
        let _ = reply.send(Err(err));
    }

    /// Whether to retry after `err`, and after how long: only retryable errors before any
    /// output, only as the policy says, never sooner than the error's own retry interval.
    fn retry_delay(
        &self,
        retry: Option<&Retry>,
        attempt: u32,
        err: &HarnessError,
    ) -> Option<Duration> {
        if self.emitted || !err.retryable() {
            return None;
        }
        let delay = retry?.0.retry_after(attempt, err)?;
        let delay = delay.max(err.retry_after().unwrap_or_default());
        tracing::info!(
            execution = %self.shared.id,
            attempt,
            category = %err.category(),
            ?delay,
            "retrying after a failure before any output"
        );
        Some(delay)
    }

    /// Waits `delay` before a retry; `Some` if the execution must stop instead.
    async fn pause(&self, delay: Duration) -> Option<Stop> {
        tokio::select! {
            biased;
            stop = self.stop(self.deadline) => Some(stop),
            () = tokio::time::sleep(delay) => None,
        }
    }

    /// Creates and initializes one runtime, bounded by the init timeout and the deadline.
    async fn start_once(
        &mut self,
        context: RuntimeContext,
        init_timeout: Option<Duration>,
    ) -> Result<Runtime, (SegmentEnd, Option<Runtime>)> {
        let limit = match init_timeout {
            Some(limit) => {
                let at = tokio::time::Instant::now() + limit;
                Some(self.deadline.map_or(at, |d| d.min(at)))
            }
            None => self.deadline,
        };
        let cancel = self.shared.cancel.clone();
        let service = Arc::clone(&self.service);
        // Answers that arrive while the runtime starts are refused at once (nothing is pending
        // yet) rather than left waiting for the start to finish.
        let mut creating = pin!(catch(async {
            service.adapter.create_runtime(context).await
        }));
        let created = loop {
            tokio::select! {
                biased;
                stop = stop(&cancel, limit) => return Err((SegmentEnd::Stopped(stop), None)),
                command = next_command(&mut self.commands) => self.on_command(command),
                created = &mut creating => break created.and_then(|r| r),
            }
        };
        let runtime = match created {
            Ok(runtime) => Runtime::new(runtime),
            Err(err) => return Err((self.cancel_wins(SegmentEnd::Failed(err)), None)),
        };
        let initialized = {
            let mut initializing = pin!(catch(async { runtime.inner.initialize().await }));
            loop {
                tokio::select! {
                    biased;
                    stop = stop(&cancel, limit) => break Err(stop),
                    command = next_command(&mut self.commands) => self.on_command(command),
                    init = &mut initializing => break Ok(init.and_then(|r| r)),
                }
            }
        };
        match initialized {
            Err(stop) => Err((SegmentEnd::Stopped(stop), Some(runtime))),
            Ok(Ok(_)) => Ok(runtime),
            Ok(Err(err)) => Err((self.cancel_wins(SegmentEnd::Failed(err)), Some(runtime))),
        }
    }

    /// A failure observed after a cancel was accepted is the runtime's answer to that cancel
    /// (an `initialize` or a stream aborted by the execution's token), so the run ends
    /// `run.cancelled`, not `run.failed`. Only failures the driver has not yet recorded are
    /// taken over: a segment that completed or paused did its work and ends as it ended, and a
    /// cancel accepted while an already-recorded failure runs its cleanup does not change it
    /// (cancellation is a request; `run.cancelled` is what confirms it).
    fn cancel_wins(&self, end: SegmentEnd) -> SegmentEnd {
        match end {
            SegmentEnd::Failed(_) if self.shared.cancel.is_cancelled() => {
                SegmentEnd::Stopped(Stop::Cancelled)
            }
            end => end,
        }
    }

    /// Handles a command while no action is pending: refuse it, or note that every handle is
    /// gone.
    fn on_command(&mut self, command: Option<Command>) {
        match command {
            Some(command) => self.refuse(command),
            None => self.commands = None,
        }
    }

    /// [`start_once`](Self::start_once), retried as the policy says.
    async fn start(
        &mut self,
        context: &RuntimeContext,
        init_timeout: Option<Duration>,
        retry: Option<&Retry>,
        attempt: &mut u32,
    ) -> Result<Runtime, (SegmentEnd, Option<Runtime>)> {
        loop {
            match self.start_once(context.clone(), init_timeout).await {
                Err((SegmentEnd::Failed(err), runtime)) => {
                    let Some(delay) = self.retry_delay(retry, *attempt, &err) else {
                        return Err((SegmentEnd::Failed(err), runtime));
                    };
                    if let Some(mut runtime) = runtime {
                        self.cleanup(&mut runtime).await;
                    }
                    *attempt += 1;
                    if let Some(stop) = self.pause(delay).await {
                        return Err((SegmentEnd::Stopped(stop), None));
                    }
                }
                other => return other,
            }
        }
    }

    async fn run(
        mut self,
        queued: Execution<state::Queued>,
        mut request: ExecutionRequest,
        config: AgentConfig,
    ) {
        if self.shared.cancel.is_cancelled() {
            return self.finish_cancel(queued, None).await;
        }
        let extensions = std::mem::take(&mut request.extensions);
        self.chain = extensions
            .get::<Interceptors>()
            .filter(|i| !i.is_empty())
            .map(Interceptors::instantiate);
        let retry = extensions.get::<Retry>().cloned();
        let init_timeout = extensions.get::<InitTimeout>().map(|t| t.0);
        self.deadline = request.deadline.map(instant_of);

        let starting = queued.start();
        let context = RuntimeContext {
            contract_version: ContractVersion::V1,
            adapter: self.shared.adapter.clone(),
            execution_id: self.shared.id.clone(),
            config,
            binding: None,
            prompt: None,
            tools: Vec::new(),
            limits: RunLimits::default(),
            thread_state: None,
            cancellation: self.shared.cancel.child_token(),
        };
        let turn = TurnInput {
            execution_id: self.shared.id.clone(),
            conversation_id: request.conversation_id,
            message: request.message,
            files: request.files,
            client_context: request.client_context,
            trace_context: request.trace_context,
            deadline: request.deadline,
            idempotency_key: request.idempotency_key,
        };

        let mut attempt = 1;
        let mut runtime = match self
            .start(&context, init_timeout, retry.as_ref(), &mut attempt)
            .await
        {
            Ok(runtime) => runtime,
            Err((end, runtime)) => return self.end_starting(starting, end, runtime).await,
        };
        let mut running = starting.run();

        // The first segment: a failure before any output may be retried on a fresh runtime.
        let mut end = loop {
            let end = self
                .consume(
                    &mut running,
                    open_segment(|| runtime.inner.stream(turn.clone())),
                )
                .await;
            let delay = match &end {
                SegmentEnd::Failed(err) => self.retry_delay(retry.as_ref(), attempt, err),
                _ => None,
            };
            let Some(delay) = delay else { break end };
            self.cleanup(&mut runtime).await;
            attempt += 1;
            if let Some(stop) = self.pause(delay).await {
                break SegmentEnd::Stopped(stop);
            }
            match self
                .start(&context, init_timeout, retry.as_ref(), &mut attempt)
                .await
            {
                Ok(next) => runtime = next,
                Err((end, next)) => {
                    if let Some(next) = next {
                        runtime = next;
                    }
                    break end;
                }
            }
        };

        loop {
            match end {
                SegmentEnd::Completed(summary) => {
                    self.cleanup(&mut runtime).await;
                    self.record(Outcome::Succeeded(summary.clone()));
                    let _done = running.succeed(summary);
                    return;
                }
                SegmentEnd::Failed(err) => {
                    return self.fail(running, err, Some(&mut runtime)).await;
                }
                SegmentEnd::Stopped(Stop::Cancelled) => {
                    return self.finish_cancel(running, Some(&mut runtime)).await;
                }
                SegmentEnd::Stopped(Stop::Deadline) => {
                    self.deadline_passed();
                    self.cancel_runtime(
                        &mut runtime,
                        CancelReason::from_source(CancelSource::Deadline),
                    )
                    .await;
                    return self
                        .fail(running, timeout_error("deadline"), Some(&mut runtime))
                        .await;
                }
                SegmentEnd::Interrupt(interrupt) => {
                    let resumed = match interrupt.kind {
                        InterruptKind::FormInput(form) => {
                            let awaiting = running.request_input(interrupt.id, form);
                            self.await_answer(awaiting).await
                        }
                        InterruptKind::ToolApproval(approval) => {
                            let awaiting = running.request_approval(interrupt.id, approval);
                            self.await_answer(awaiting).await
                        }
                    };
                    match resumed {
                        Ok((next, decision)) => {
                            running = next;
                            end = self
                                .consume(
                                    &mut running,
                                    open_segment(|| runtime.inner.resume(decision)),
                                )
                                .await;
                        }
                        Err(cancelling) => {
                            return self.confirm_cancel(cancelling, Some(&mut runtime)).await;
                        }
                    }
                }
            }
        }
    }

    /// Ends an execution whose runtime never started.
    async fn end_starting(
        &mut self,
        starting: Execution<state::Starting>,
        end: SegmentEnd,
        mut runtime: Option<Runtime>,
    ) {
        match end {
            SegmentEnd::Stopped(Stop::Cancelled) => {
                self.finish_cancel(starting, runtime.as_mut()).await;
            }
            SegmentEnd::Stopped(Stop::Deadline) => {
                self.deadline_passed();
                if let Some(runtime) = runtime.as_mut() {
                    self.cancel_runtime(runtime, CancelReason::from_source(CancelSource::Deadline))
                        .await;
                }
                let err = timeout_error("initialization deadline");
                self.fail(starting.run(), err, runtime.as_mut()).await;
            }
            SegmentEnd::Failed(err) => self.fail(starting.run(), err, runtime.as_mut()).await,
            SegmentEnd::Completed(_) | SegmentEnd::Interrupt(_) => {
                unreachable!("starting a runtime yields no segment end")
            }
        }
    }

    /// Appends one (intercepted) item; `Some` when the segment must end here.
    fn apply(
        &mut self,
        running: &mut Execution<state::Running>,
        event: AdapterEvent,
        ending: &mut Option<SegmentEnd>,
    ) -> Option<SegmentEnd> {
        if ending.is_some() {
            return Some(SegmentEnd::Failed(protocol(
                "the adapter produced events after the end of a run segment",
                "item after Completed/Interrupt".to_owned(),
            )));
        }
        if let AdapterEvent::Content(content) = event {
            self.content.push(content);
            self.emitted = true;
            return None;
        }
        // Everything else keeps its place after the content before it.
        if let Some(end) = self.flush_content(running) {
            return Some(end);
        }
        match event {
            AdapterEvent::Content(_) => unreachable!("handled above"),
            AdapterEvent::Artifact(artifact) => {
                if let Err(e) = running.create_artifact(artifact) {
                    return Some(SegmentEnd::Failed(protocol(
                        "the adapter produced an invalid artifact",
                        e.to_string(),
                    )));
                }
                self.emitted = true;
            }
            AdapterEvent::Interrupt(interrupt) => *ending = Some(SegmentEnd::Interrupt(interrupt)),
            AdapterEvent::Completed(summary) => *ending = Some(SegmentEnd::Completed(summary)),
        }
        None
    }

    /// Appends the content buffered in this batch.
    fn flush_content(&mut self, running: &mut Execution<state::Running>) -> Option<SegmentEnd> {
        if self.content.is_empty() {
            return None;
        }
        match running.emit_all(self.content.drain(..)) {
            Ok(_) => None,
            Err(e) => Some(SegmentEnd::Failed(protocol(
                "the adapter produced an invalid event",
                e.to_string(),
            ))),
        }
    }

    /// Appends what the interceptors still hold (before a terminal item or a stop).
    fn flush(
        &mut self,
        running: &mut Execution<state::Running>,
        ending: &mut Option<SegmentEnd>,
    ) -> Option<SegmentEnd> {
        let held = self
            .chain
            .as_mut()
            .map(Chain::segment_end)
            .unwrap_or_default();
        for item in held {
            if let Some(end) = self.apply(running, item, ending) {
                return Some(end);
            }
        }
        None
    }

    /// Consumes one run segment, appending its content, until its terminal item and the end
    /// of the stream (or a stop).
    async fn consume(
        &mut self,
        running: &mut Execution<state::Running>,
        segment: BoxStream<'_, EventResult>,
    ) -> SegmentEnd {
        let end = self.consume_segment(running, segment).await;
        self.cancel_wins(end)
    }

    async fn consume_segment(
        &mut self,
        running: &mut Execution<state::Running>,
        segment: BoxStream<'_, EventResult>,
    ) -> SegmentEnd {
        let mut segment = segment;
        let cancel = self.shared.cancel.clone();
        let deadline = self.deadline;
        // The terminal item seen, waiting for the end of the stream; bounded by the grace
        // period, so an adapter that keeps its stream open cannot hold the execution.
        let mut ending: Option<SegmentEnd> = None;
        let mut end_by: Option<tokio::time::Instant> = None;
        loop {
            if ending.is_some() && end_by.is_none() {
                end_by = Some(tokio::time::Instant::now() + self.service.config.cancel_grace);
            }
            let first = tokio::select! {
                biased;
                () = sleep_until(end_by), if end_by.is_some() => {
                    return SegmentEnd::Failed(protocol(
                        "the adapter did not end its run segment after its terminal item",
                        format!("stream still open {:?} after Completed/Interrupt", self.service.config.cancel_grace),
                    ));
                }
                stop = stop(&cancel, deadline) => {
                    let end = self.flush(running, &mut ending);
                    if let Some(end) = self.flush_content(running).or(end) {
                        return end;
                    }
                    return SegmentEnd::Stopped(stop);
                }
                command = next_command(&mut self.commands) => {
                    self.on_command(command);
                    continue;
                }
                item = std::future::poll_fn(|cx| poll_segment(&mut segment, cx)) => item,
            };
            // Take what is already ready without another `select!`: the cancel and command
            // futures cost more than appending an event.
            let mut item = first;
            let mut budget = BATCH;
            let mut ready = Context::from_waker(Waker::noop());
            loop {
                match item {
                    // The hot path: plain content with nothing to intercept it, staged as is.
                    Some(Ok(Ok(AdapterEvent::Content(content))))
                        if self.chain.is_none() && ending.is_none() =>
                    {
                        self.content.push(content);
                        self.emitted = true;
                    }
                    other => {
                        if let Some(end) = self.handle(running, other, &mut ending) {
                            // Content before the end keeps its place; a failure to append it
                            // wins.
                            return self.flush_content(running).unwrap_or(end);
                        }
                    }
                }
                budget -= 1;
                if budget == 0 {
                    break;
                }
                // Pending here is seen again by the `select!` above, with the task's waker.
                match poll_segment(&mut segment, &mut ready) {
                    Poll::Ready(next) => item = next,
                    Poll::Pending => break,
                }
            }
            if let Some(end) = self.flush_content(running) {
                return end;
            }
        }
    }

    /// Handles one item of a segment (`None`: the stream ended); `Some` ends the segment.
    fn handle(
        &mut self,
        running: &mut Execution<state::Running>,
        item: SegmentItem,
        ending: &mut Option<SegmentEnd>,
    ) -> Option<SegmentEnd> {
        let event = match item {
            None => {
                if let Some(end) = self.flush(running, ending) {
                    return Some(end);
                }
                return Some(ending.take().unwrap_or_else(|| {
                    SegmentEnd::Failed(protocol(
                        "the adapter ended a run segment without completing, failing or pausing",
                        "stream ended with no terminal item".to_owned(),
                    ))
                }));
            }
            Some(Err(panic)) => {
                return Some(SegmentEnd::Failed(panic_error("its event stream", &*panic)));
            }
            Some(Ok(Err(err))) => {
                if let Some(end) = self.flush(running, ending) {
                    return Some(end);
                }
                let err = if self.emitted {
                    err.with_side_effects(true)
                } else {
                    err
                };
                return Some(SegmentEnd::Failed(err));
            }
            Some(Ok(Ok(event))) => event,
        };
        let Some(chain) = self.chain.as_mut() else {
            return self.apply(running, event, ending);
        };
        let terminal = matches!(
            event,
            AdapterEvent::Interrupt(_) | AdapterEvent::Completed(_)
        );
        let mut items = if terminal {
            chain.segment_end()
        } else {
            Vec::new()
        };
        items.extend(chain.event(event));
        for item in items {
            if let Some(end) = self.apply(running, item, ending) {
                return Some(end);
            }
        }
        None
    }

    /// Waits for a valid answer while awaiting an action; a stop (cancellation, or the
    /// deadline: the diagram has no edge from awaiting to failed) begins cancellation.
    async fn await_answer<S>(
        &mut self,
        mut awaiting: Execution<S>,
    ) -> Result<(Execution<state::Running>, ResumeDecision), Execution<state::Cancelling>>
    where
        S: NonTerminal,
        Execution<S>: Awaiting,
    {
        let pending_id = awaiting.pending_request().id.clone();
        let cancel = self.shared.cancel.clone();
        let deadline = self.deadline;
        if self.commands.is_none() {
            // Every handle was dropped before the run paused: nobody can answer.
            return Err(self.abandon(awaiting));
        }
        loop {
            let command = tokio::select! {
                biased;
                stop = stop(&cancel, deadline) => {
                    if matches!(stop, Stop::Deadline) {
                        self.deadline_passed();
                    }
                    return Err(awaiting.begin_cancel(self.cancel_reason()));
                }
                command = next_command(&mut self.commands) => command,
            };
            let Some(Command::Respond(respond)) = command else {
                // Every handle is gone: nobody can answer any more.
                self.commands = None;
                return Err(self.abandon(awaiting));
            };
            let (response, reply) = *respond;
            let id = response.action_id().clone();
            if id != pending_id {
                let resolved = self.shared.snapshot().resolved.contains(&id);
                let err = if resolved {
                    already_resolved(&id)
                } else {
                    not_pending(&id, Some(&pending_id))
                };
                let _ = reply.send(Err(err));
                continue;
            }
            match awaiting.answer(response) {
                Ok((running, validated)) => {
                    self.shared.snapshot().resolved.insert(id);
                    let _ = reply.send(Ok(()));
                    return Ok((running, ResumeDecision::new(validated)));
                }
                Err((back, err)) => {
                    awaiting = back;
                    let _ = reply.send(Err(err));
                }
            }
        }
    }

    /// Cancels an execution nobody can answer any more (every handle dropped).
    fn abandon<S: NonTerminal>(&self, awaiting: Execution<S>) -> Execution<state::Cancelling> {
        self.shared
            .snapshot()
            .cancel_reason
            .get_or_insert_with(|| CancelReason::from_source(CancelSource::Abandoned));
        self.shared.cancel.cancel();
        awaiting.begin_cancel(self.cancel_reason())
    }

    fn record(&self, outcome: Outcome) {
        self.shared.snapshot().outcome = Some(outcome);
    }

    /// Calls the runtime's cancel hook once, bounded by the grace period.
    async fn cancel_runtime(&self, runtime: &mut Runtime, reason: CancelReason) {
        // A runtime already cleaned up has nothing left to stop.
        if runtime.cleaned || std::mem::replace(&mut runtime.cancelled, true) {
            return;
        }
        let grace = self.service.config.cancel_grace;
        let inner = &runtime.inner;
        if tokio::time::timeout(grace, catch(async { inner.cancel(reason).await }))
            .await
            .is_err()
        {
            tracing::warn!(execution = %self.shared.id, ?grace, "runtime cancel hook exceeded its grace period");
        }
    }

    /// Calls the runtime's cleanup once, bounded by its deadline.
    async fn cleanup(&self, runtime: &mut Runtime) {
        if std::mem::replace(&mut runtime.cleaned, true) {
            return;
        }
        let deadline = self.service.config.cleanup_deadline;
        let inner = &runtime.inner;
        match tokio::time::timeout(deadline, catch(async { inner.cleanup().await })).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                // The code only: the diagnostic holds the panic text, which may hold a secret.
                tracing::warn!(execution = %self.shared.id, code = %err.code(), "runtime cleanup panicked");
            }
            Err(_) => {
                tracing::warn!(execution = %self.shared.id, ?deadline, "runtime cleanup exceeded its deadline");
            }
        }
    }

    /// The one failure path. Every error, whatever made it (the adapter, a panic caught
    /// here, a start that failed, a deadline), passes through the interceptors here, once,
    /// before it is recorded: a redactor sees the diagnostic of a panic too.
    async fn fail(
        &mut self,
        running: Execution<state::Running>,
        err: HarnessError,
        runtime: Option<&mut Runtime>,
    ) {
        if let Some(runtime) = runtime {
            self.cleanup(runtime).await;
        }
        let err = match self.chain.as_mut() {
            Some(chain) => chain.error(err),
            None => err,
        };
        self.record(Outcome::Failed(err.clone()));
        let _done = running.fail(err);
    }

    async fn finish_cancel<S: NonTerminal>(
        &self,
        execution: Execution<S>,
        runtime: Option<&mut Runtime>,
    ) {
        let cancelling = execution.begin_cancel(self.cancel_reason());
        self.confirm_cancel(cancelling, runtime).await;
    }

    /// The one cancellation path: cancel hook (bounded by the grace period), cleanup
    /// (bounded by its deadline), then the one `run.cancelled`.
    async fn confirm_cancel(
        &self,
        cancelling: Execution<state::Cancelling>,
        runtime: Option<&mut Runtime>,
    ) {
        let reason = self.cancel_reason();
        if let Some(runtime) = runtime {
            self.cancel_runtime(runtime, reason.clone()).await;
            self.cleanup(runtime).await;
        }
        self.record(Outcome::Cancelled(reason));
        let _done = cancelling.confirm_cancelled();
    }
}

/// The two awaiting states, seen alike by the driver.
trait Awaiting: Sized {
    fn pending_request(&self) -> &ActionRequest;
    fn answer(
        self,
        response: ActionResponse,
    ) -> Result<(Execution<state::Running>, ValidatedResponse), (Self, HarnessError)>;
}

macro_rules! awaiting {
    ($state:ident, $into:ident, $validated:ident) => {
        impl Awaiting for Execution<state::$state> {
            fn pending_request(&self) -> &ActionRequest {
                self.pending()
            }

            fn answer(
                self,
                response: ActionResponse,
            ) -> Result<(Execution<state::Running>, ValidatedResponse), (Self, HarnessError)> {
                let typed = match response.$into() {
                    Ok(typed) => typed,
                    Err(other) => {
                        let err = ActionResponseError::KindMismatch {
                            action: self.pending().id.clone(),
                            expected: self.pending().action_type(),
                            found: other.action_type(),
                        };
                        return Err((self, err.into()));
                    }
                };
                match self.resolve(typed) {
                    Ok((running, validated)) => {
                        Ok((running, ValidatedResponse::$validated(validated)))
                    }
                    Err((back, err)) => Err((back, err.into())),
                }
            }
        }
    };
}

awaiting!(AwaitingInput, into_form, Form);
awaiting!(AwaitingApproval, into_approval, Approval);

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;

    use super::*;
    use crate::adapter::{RunContext, Simple, SimpleAdapter};
    use crate::event::{Content, EventPayload, TextDelta};
    use crate::manifest::{ExecutionMode, HarnessDescriptor};

    /// How the test stream behaves after its deltas.
    #[derive(Clone, Copy)]
    enum Then {
        Complete,
        Panic,
    }

    /// Streams `count` deltas (going pending before every `pending_every`-th one, if set),
    /// then completes or panics.
    struct Deltas {
        descriptor: HarnessDescriptor,
        count: usize,
        pending_every: Option<usize>,
        then: Then,
    }

    impl Deltas {
        fn new(count: usize, pending_every: Option<usize>, then: Then) -> Simple<Self> {
            let descriptor = HarnessDescriptor::builder("deltas".parse().unwrap(), "0.1.0")
                .contract_version(ContractVersion::V1)
                .execution_mode(ExecutionMode::in_process())
                .build()
                .unwrap();
            Simple::new(Self {
                descriptor,
                count,
                pending_every,
                then,
            })
        }
    }

    impl SimpleAdapter for Deltas {
        fn descriptor(&self) -> &HarnessDescriptor {
            &self.descriptor
        }

        fn stream(&self, _run: RunContext) -> BoxStream<'static, EventResult> {
            let (count, every, then) = (self.count, self.pending_every, self.then);
            Box::pin(
                futures_util::stream::iter(0..=count).then(move |i| async move {
                    if every.is_some_and(|every| i % every == every - 1) {
                        tokio::task::yield_now().await;
                    }
                    if i < count {
                        let text = TextDelta::new(i.to_string());
                        return Ok(AdapterEvent::Content(Content::MessageDelta(text)));
                    }
                    match then {
                        Then::Complete => Ok(AdapterEvent::Completed(RunSucceeded::default())),
                        Then::Panic => panic!("boom after the deltas"),
                    }
                }),
            )
        }
    }

    async fn texts(handle: &ExecutionHandle) -> Vec<String> {
        handle
            .events(Cursor::START)
            .filter_map(|e| async move {
                match e.payload() {
                    EventPayload::MessageDelta(d) => Some(d.text.clone()),
                    _ => None,
                }
            })
            .collect()
            .await
    }

    fn numbers(count: usize) -> Vec<String> {
        (0..count).map(|i| i.to_string()).collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_delta_arrives_in_order_whether_the_stream_is_ready_or_pending() {
        // Several batches, always ready; then pending inside and at the edge of batches.
        for pending_every in [None, Some(1), Some(7), Some(BATCH), Some(BATCH + 1)] {
            let count = 3 * BATCH + 5;
            let handle = AdapterService::new(Deltas::new(count, pending_every, Then::Complete))
                .start(ExecutionRequest::new("go"))
                .await
                .unwrap();
            assert!(matches!(handle.outcome().await, Outcome::Succeeded(_)));
            assert_eq!(texts(&handle).await, numbers(count), "{pending_every:?}");
            let seqs: Vec<u64> = handle
                .log()
                .snapshot(Cursor::START)
                .iter()
                .map(|e| e.seq().get())
                .collect();
            assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
        }
    }

    #[tokio::test]
    async fn a_panic_mid_batch_keeps_the_content_before_it() {
        // The panic comes in the same batch as the deltas before it (all ready at once), and
        // in a later poll (pending before it).
        for pending_every in [None, Some(BATCH / 2)] {
            let count = BATCH / 2 + 3;
            let handle = AdapterService::new(Deltas::new(count, pending_every, Then::Panic))
                .start(ExecutionRequest::new("go"))
                .await
                .unwrap();
            let Outcome::Failed(err) = handle.outcome().await else {
                panic!("expected a failure");
            };
            assert_eq!(err.code(), &ErrorCode::ADAPTER_PANICKED);
            assert_eq!(texts(&handle).await, numbers(count), "{pending_every:?}");
            let last = handle.log().last().unwrap();
            assert!(matches!(last.payload(), EventPayload::RunFailed(_)));
        }
    }
}
