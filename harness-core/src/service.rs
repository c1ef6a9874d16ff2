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
//!   `run.cancelled` (the one terminal event) confirms it;
//! - **errors and panics are classified and sanitized at the boundary**: an adapter's error
//!   ends the run as `run.failed` with the error's public projection; a panic in any adapter
//!   future or stream becomes an `internal` error with code `ADAPTER_PANICKED` (the panic text
//!   goes to the diagnostic only); the process never crashes;
//! - **events out of order end the run with `protocol`**: an item after the terminal one, a
//!   segment that ends without a terminal item, a duplicate or foreign artifact.
//!
//! Decisions where the spec is silent:
//! - If every handle of an execution is dropped while it awaits an action, nobody can answer
//!   it any more: the driver cancels it (reason `abandoned`), which runs cleanup.
//! - An adapter error after output was emitted is marked "side effects may have occurred",
//!   so retry policies never repeat it.
//! - Deadlines in the request are handed to the runtime in [`TurnInput`]; enforcing them is
//!   the timeout layer's job (`harness-layers`).
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
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::action::{ActionRequest, ActionResponse, ActionResponseError, ValidatedResponse};
use crate::adapter::{
    AdapterEvent, AgentConfig, BoxStream, DeploymentContext, EventResult, HarnessAdapter,
    HarnessRuntime, InputFile, InterruptKind, ResumeDecision, RunLimits, RuntimeContext, TurnInput,
};
use crate::artifact::ArtifactDescriptor;
use crate::capability::Requirement;
use crate::error::{ErrorCategory, ErrorCode, HarnessError};
use crate::event::{CancelReason, RunSucceeded};
use crate::id::{ActionId, AdapterId, ConversationId, Cursor, ExecutionId, IdempotencyKey};
use crate::lifecycle::{Execution, ExecutionState, NonTerminal, state};
use crate::log::{EventStream, LogReader};
use crate::manifest::ContractVersion;
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
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
    /// This call requested cancellation; `run.cancelled` will confirm it.
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
        let queued = Execution::queue(id.clone());
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            id,
            adapter: inner.adapter.descriptor().id().clone(),
            reader: queued.events(),
            cancel: CancellationToken::new(),
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
        };
        tokio.spawn(driver.run(queued, request, config));
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

enum Command {
    Respond(ActionResponse, oneshot::Sender<Result<(), HarnessError>>),
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
        if self.commands.send(Command::Respond(response, tx)).is_err() {
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
        if snapshot.cancel_reason.is_some() {
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
    Cancelled,
}

struct Driver<A> {
    service: Arc<ServiceInner<A>>,
    shared: Arc<Shared>,
    /// `None` once every handle is gone.
    commands: Option<mpsc::UnboundedReceiver<Command>>,
    /// Whether any content or artifact was appended (output may have occurred).
    emitted: bool,
}

/// Waits for the next command, or forever once every handle is gone.
async fn next_command(commands: &mut Option<mpsc::UnboundedReceiver<Command>>) -> Option<Command> {
    match commands {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

impl<A: HarnessAdapter> Driver<A> {
    fn cancel_reason(&self) -> CancelReason {
        self.shared
            .snapshot()
            .cancel_reason
            .clone()
            .unwrap_or_default()
    }

    /// Answers a command that arrives while no action is pending.
    fn refuse(&self, command: Command) {
        let Command::Respond(response, reply) = command;
        let id = response.action_id();
        let resolved = self.shared.snapshot().resolved.contains(id);
        let err = if resolved {
            already_resolved(id)
        } else {
            not_pending(id, None)
        };
        let _ = reply.send(Err(err));
    }

    async fn run(
        mut self,
        queued: Execution<state::Queued>,
        request: ExecutionRequest,
        config: AgentConfig,
    ) {
        if self.shared.cancel.is_cancelled() {
            return self.finish_cancel(queued, None).await;
        }
        let starting = queued.start();

        let inner = Arc::clone(&self.service);
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
        let cancel = self.shared.cancel.clone();
        let created = tokio::select! {
            biased;
            () = cancel.cancelled() => return self.finish_cancel(starting, None).await,
            created = catch(async { inner.adapter.create_runtime(context).await }) => created.and_then(|r| r),
        };
        let runtime = match created {
            Ok(runtime) => runtime,
            Err(err) => return self.fail(starting.run(), err, None).await,
        };
        let runtime = &*runtime;
        let initialized = tokio::select! {
            biased;
            () = cancel.cancelled() => return self.finish_cancel(starting, Some(runtime)).await,
            init = catch(async { runtime.initialize().await }) => init.and_then(|r| r),
        };
        if let Err(err) = initialized {
            return self.fail(starting.run(), err, Some(runtime)).await;
        }
        let mut running = starting.run();

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
        let mut segment = open_segment(|| runtime.stream(turn));
        loop {
            match self.consume(&mut running, segment).await {
                SegmentEnd::Completed(summary) => {
                    self.cleanup(runtime).await;
                    self.record(Outcome::Succeeded(summary.clone()));
                    let _done = running.succeed(summary);
                    return;
                }
                SegmentEnd::Failed(err) => return self.fail(running, err, Some(runtime)).await,
                SegmentEnd::Cancelled => return self.finish_cancel(running, Some(runtime)).await,
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
                            segment = open_segment(|| runtime.resume(decision));
                        }
                        Err(cancelling) => {
                            return self.confirm_cancel(cancelling, Some(runtime)).await;
                        }
                    }
                }
            }
        }
    }

    /// Consumes one run segment, appending its content, until its terminal item and the end
    /// of the stream.
    async fn consume(
        &mut self,
        running: &mut Execution<state::Running>,
        segment: BoxStream<'_, EventResult>,
    ) -> SegmentEnd {
        let mut segment = pin!(AssertUnwindSafe(segment).catch_unwind());
        let cancel = self.shared.cancel.clone();
        // The terminal item seen, waiting for the end of the stream.
        let mut ending: Option<SegmentEnd> = None;
        loop {
            let item = tokio::select! {
                biased;
                () = cancel.cancelled() => return SegmentEnd::Cancelled,
                command = next_command(&mut self.commands) => {
                    match command {
                        Some(command) => self.refuse(command),
                        None => self.commands = None,
                    }
                    continue;
                }
                item = segment.next() => item,
            };
            let event = match item {
                None => {
                    return ending.unwrap_or_else(|| {
                        SegmentEnd::Failed(protocol(
                            "the adapter ended a run segment without completing, failing or pausing",
                            "stream ended with no terminal item".to_owned(),
                        ))
                    });
                }
                Some(Err(panic)) => {
                    return SegmentEnd::Failed(panic_error("its event stream", &*panic));
                }
                Some(Ok(_)) if ending.is_some() => {
                    return SegmentEnd::Failed(protocol(
                        "the adapter produced events after the end of a run segment",
                        "item after Completed/Interrupt".to_owned(),
                    ));
                }
                Some(Ok(Err(err))) => {
                    let err = if self.emitted {
                        err.with_side_effects(true)
                    } else {
                        err
                    };
                    return SegmentEnd::Failed(err);
                }
                Some(Ok(Ok(event))) => event,
            };
            match event {
                AdapterEvent::Content(content) => {
                    if let Err(e) = running.emit(content) {
                        return SegmentEnd::Failed(protocol(
                            "the adapter produced an invalid event",
                            e.to_string(),
                        ));
                    }
                    self.emitted = true;
                }
                AdapterEvent::Artifact(artifact) => {
                    if let Err(e) = running.create_artifact(artifact) {
                        return SegmentEnd::Failed(protocol(
                            "the adapter produced an invalid artifact",
                            e.to_string(),
                        ));
                    }
                    self.emitted = true;
                }
                AdapterEvent::Interrupt(interrupt) => {
                    ending = Some(SegmentEnd::Interrupt(interrupt));
                }
                AdapterEvent::Completed(summary) => ending = Some(SegmentEnd::Completed(summary)),
            }
        }
    }

    /// Waits for a valid answer (or cancellation) while awaiting an action.
    async fn await_answer<S>(
        &mut self,
        mut awaiting: Execution<S>,
    ) -> Result<(Execution<state::Running>, ResumeDecision), Execution<state::Cancelling>>
    where
        S: NonTerminal,
        Execution<S>: Awaiting,
    {
        let pending = awaiting.pending_request().clone();
        let cancel = self.shared.cancel.clone();
        loop {
            let command = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(awaiting.begin_cancel(self.cancel_reason())),
                command = next_command(&mut self.commands) => command,
            };
            let Some(Command::Respond(response, reply)) = command else {
                // Every handle is gone: nobody can answer any more.
                self.commands = None;
                self.shared
                    .snapshot()
                    .cancel_reason
                    .get_or_insert_with(|| CancelReason::new("abandoned"));
                self.shared.cancel.cancel();
                return Err(awaiting.begin_cancel(self.cancel_reason()));
            };
            let id = response.action_id().clone();
            if id != pending.id {
                let resolved = self.shared.snapshot().resolved.contains(&id);
                let err = if resolved {
                    already_resolved(&id)
                } else {
                    not_pending(&id, Some(&pending.id))
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

    fn record(&self, outcome: Outcome) {
        self.shared.snapshot().outcome = Some(outcome);
    }

    async fn cleanup(&self, runtime: &dyn HarnessRuntime) {
        let deadline = self.service.config.cleanup_deadline;
        match tokio::time::timeout(deadline, catch(async { runtime.cleanup().await })).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                tracing::warn!(execution = %self.shared.id, error = ?err, "runtime cleanup panicked");
            }
            Err(_) => {
                tracing::warn!(execution = %self.shared.id, ?deadline, "runtime cleanup exceeded its deadline");
            }
        }
    }

    async fn fail(
        &self,
        running: Execution<state::Running>,
        err: HarnessError,
        runtime: Option<&dyn HarnessRuntime>,
    ) {
        if let Some(runtime) = runtime {
            self.cleanup(runtime).await;
        }
        self.record(Outcome::Failed(err.clone()));
        let _done = running.fail(err);
    }

    async fn finish_cancel<S: NonTerminal>(
        &self,
        execution: Execution<S>,
        runtime: Option<&dyn HarnessRuntime>,
    ) {
        let cancelling = execution.begin_cancel(self.cancel_reason());
        self.confirm_cancel(cancelling, runtime).await;
    }

    /// The one cancellation path: cancel hook (bounded by the grace period), cleanup
    /// (bounded by its deadline), then the one `run.cancelled`.
    async fn confirm_cancel(
        &self,
        cancelling: Execution<state::Cancelling>,
        runtime: Option<&dyn HarnessRuntime>,
    ) {
        let reason = self.cancel_reason();
        if let Some(runtime) = runtime {
            let grace = self.service.config.cancel_grace;
            if tokio::time::timeout(grace, catch(async { runtime.cancel(reason.clone()).await }))
                .await
                .is_err()
            {
                tracing::warn!(execution = %self.shared.id, ?grace, "runtime cancel hook exceeded its grace period");
            }
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
