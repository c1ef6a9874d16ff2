//! The control plane's end: a [`HarnessRuntime`] that drives a runtime hosted by a worker,
//! and serves the worker its scoped facades.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use base64::Engine as _;
use harness_core::action::{
    ActionRequest, ActionResponse, ApprovalResponse, FormResponse, ValidatedResponse,
};
use harness_core::adapter::{
    AdapterEvent, BoxFuture, BoxStream, CancelResult, EventResult, HarnessRuntime, Restored,
    ResumeDecision, RuntimeContext, RuntimeIdentity, RuntimeInit, TurnInput,
};
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::event::{CancelReason, Content};
use harness_core::file::{FileKind, ValidatedInputFile};
use harness_core::id::{AdapterId, ExecutionId};
use harness_core::session::{ScopedThreadState, StateError, StateKey};
use harness_core::tool::{Approved, ToolCallContext, ToolHandle, ToolId, ToolOutcome};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::wire::{
    FILE_CHUNK_BYTES, FrameError, FromWorker, Id, PROTOCOL_VERSION, StateAnswer, ToWorker,
    WireContext, WireEvent, WireFile, WireOutcome, WireRestored, WireStateError, WireTool,
    WireTurn, from_public, read_frame, violation, write_frame,
};
use crate::{SandboxGuard, Sandboxed};

/// How many of the worker's requests (thread state, tool calls) may be open at once; one
/// more is a protocol error.
pub const MAX_WORKER_REQUESTS: usize = 64;

/// How many items of one segment wait for its reader before the worker is held back.
const SEGMENT_BUFFER: usize = 256;

/// A worker's two streams and how to end it.
pub struct WorkerLink {
    reader: Box<dyn AsyncRead + Send + Unpin>,
    writer: Box<dyn AsyncWrite + Send + Unpin>,
    kill: Arc<dyn Fn() + Send + Sync>,
    guard: Option<SandboxGuard>,
    child: Option<tokio::process::Child>,
}

impl fmt::Debug for WorkerLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerLink")
            .field("sandboxed", &self.guard.is_some())
            .finish_non_exhaustive()
    }
}

impl WorkerLink {
    /// A worker reached through `reader` (its output) and `writer` (its input), ended by
    /// `kill`: for a worker of your own making (a test, another transport).
    pub fn new(
        reader: impl AsyncRead + Send + Unpin + 'static,
        writer: impl AsyncWrite + Send + Unpin + 'static,
        kill: impl Fn() + Send + Sync + 'static,
    ) -> Self {
        Self {
            reader: Box::new(reader),
            writer: Box::new(writer),
            kill: Arc::new(kill),
            guard: None,
            child: None,
        }
    }

    /// A worker started in a sandbox ([`Sandbox::spawn`](crate::Sandbox::spawn)): the
    /// protocol runs over its stdin and stdout; a limit it reaches ends it with the limit's
    /// error.
    ///
    /// # Errors
    /// `internal` when the sandbox's stdin or stdout was taken already.
    pub fn sandboxed(mut sandboxed: Sandboxed) -> Result<Self, HarnessError> {
        let taken = || {
            HarnessError::new(
                ErrorCategory::Internal,
                "the sandbox's stdin or stdout was taken before the worker link",
            )
        };
        let writer = sandboxed.child.stdin.take().ok_or_else(taken)?;
        let reader = sandboxed.child.stdout.take().ok_or_else(taken)?;
        let guard = sandboxed.guard;
        // What the worker writes to stderr is drained, so that it never blocks on it, and
        // counted with its frames against the profile's output limit.
        if let Some(stderr) = sandboxed.child.stderr.take() {
            let mut stderr = Counted {
                inner: stderr,
                guard: guard.clone(),
            };
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut stderr, &mut tokio::io::sink()).await;
            });
        }
        let killer = guard.clone();
        Ok(Self {
            reader: Box::new(Counted {
                inner: reader,
                guard: guard.clone(),
            }),
            writer: Box::new(writer),
            kill: Arc::new(move || killer.kill()),
            guard: Some(guard),
            child: Some(sandboxed.child),
        })
    }
}

/// A sandboxed worker's output, counted against its profile's output limit (past it, the
/// guard tears the sandbox down and the runtime ends `SANDBOX_LIMIT`).
struct Counted<R> {
    inner: R,
    guard: SandboxGuard,
}

impl<R: AsyncRead + Unpin> AsyncRead for Counted<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let read = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if read.is_ready() {
            let n = buf.filled().len() - before;
            self.guard.count_output(n);
        }
        read
    }
}

/// Settings of the control plane's end.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// How often the worker must send a heartbeat; it is lost after three missed.
    pub heartbeat: Duration,
    /// How long the worker may take to build its runtime.
    pub start_timeout: Duration,
    /// How long `cancel`, `restart` and `cleanup` wait for the worker's answer.
    pub answer_timeout: Duration,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_secs(2),
            start_timeout: Duration::from_secs(30),
            answer_timeout: Duration::from_secs(10),
        }
    }
}

type Segment = mpsc::Sender<EventResult>;

#[derive(Default)]
struct Waiting {
    replies: HashMap<Id, oneshot::Sender<FromWorker>>,
    segments: HashMap<Id, Segment>,
    ready: Option<oneshot::Sender<FromWorker>>,
}

/// What the control plane's end shares between the runtime and its reader.
struct Shared {
    adapter: AdapterId,
    execution: ExecutionId,
    writer: tokio::sync::Mutex<Box<dyn AsyncWrite + Send + Unpin>>,
    waiting: Mutex<Waiting>,
    failure: OnceLock<HarnessError>,
    gone: CancellationToken,
    closing: AtomicBool,
    kill: Arc<dyn Fn() + Send + Sync>,
    next: AtomicU64,
    in_flight: Arc<tokio::sync::Semaphore>,
    state: Option<ScopedThreadState>,
    tools: HashMap<ToolId, ToolHandle>,
    decision: Mutex<Option<ResumeDecision>>,
    session: Mutex<Option<String>>,
    /// The input files of the turns this runtime was given, in order: what `fileRead`
    /// reads, by place.
    files: Mutex<Vec<ValidatedInputFile>>,
    /// The worker's sandbox, if it runs in one: a limit it reached is the run's fault.
    guard: Option<SandboxGuard>,
}

impl Shared {
    fn waiting(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Ends the worker with `error` (the first one sticks): every open request and segment
    /// gets it, and the worker is killed.
    fn fail(&self, error: HarnessError) {
        if self.failure.set(error).is_ok()
            && let Some(e) = self.failure.get()
            && !self.closing.load(Ordering::Acquire)
        {
            tracing::warn!(
                adapter = %self.adapter,
                code = e.code().as_str(),
                diagnostic = e.diagnostic().unwrap_or_default(),
                "sandbox worker ended"
            );
        }
        self.gone.cancel();
        (self.kill)();
        let mut w = self.waiting();
        w.replies.clear();
        w.ready = None;
        w.segments.clear();
    }

    fn failure(&self) -> HarnessError {
        self.failure
            .get()
            .cloned()
            .unwrap_or_else(|| lost("closed"))
    }

    fn id(&self) -> Id {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    async fn send(&self, message: &ToWorker) -> Result<(), HarnessError> {
        if self.gone.is_cancelled() {
            return Err(self.failure());
        }
        let mut writer = self.writer.lock().await;
        if let Err(e) = write_frame(&mut **writer, message).await {
            drop(writer);
            self.fail(lost(&format!("writing to it failed: {e}")));
            return Err(self.failure());
        }
        Ok(())
    }

    /// Sends a request and awaits its answer.
    async fn ask(
        &self,
        make: impl FnOnce(Id) -> ToWorker,
        timeout: Option<Duration>,
    ) -> Result<FromWorker, HarnessError> {
        let id = self.id();
        let (tx, rx) = oneshot::channel();
        self.waiting().replies.insert(id, tx);
        if self.gone.is_cancelled() {
            self.waiting().replies.remove(&id);
            return Err(self.failure());
        }
        self.send(&make(id)).await?;
        let answer = match timeout {
            Some(t) => match tokio::time::timeout(t, rx).await {
                Ok(a) => a,
                Err(_) => {
                    self.waiting().replies.remove(&id);
                    return Err(HarnessError::new(
                        ErrorCategory::Timeout,
                        "the sandbox worker did not answer in time",
                    )
                    .with_code(ErrorCode::WORKER_LOST));
                }
            },
            None => rx.await,
        };
        answer.map_err(|_| self.failure())
    }

    /// Opens segment `id` and asks for it with `message`.
    fn segment(self: &Arc<Self>, make: impl FnOnce(Id) -> ToWorker + Send + 'static) -> Segmented {
        let id = self.id();
        let (tx, rx) = mpsc::channel(SEGMENT_BUFFER);
        let live = !self.gone.is_cancelled();
        if live {
            self.waiting().segments.insert(id, tx);
        }
        Segmented {
            shared: Arc::clone(self),
            first: live.then(|| make(id)),
            rx,
            done: false,
            terminal: false,
        }
    }
}

fn lost(why: &str) -> HarnessError {
    HarnessError::new(ErrorCategory::Unavailable, "the sandbox worker is gone")
        .with_code(ErrorCode::WORKER_LOST)
        .with_retryable(true)
        .with_diagnostic(why.to_owned())
}

struct Segmented {
    shared: Arc<Shared>,
    first: Option<ToWorker>,
    rx: mpsc::Receiver<EventResult>,
    done: bool,
    terminal: bool,
}

impl Segmented {
    fn into_stream(self) -> BoxStream<'static, EventResult> {
        Box::pin(futures_util::stream::unfold(self, |mut s| async move {
            if s.done {
                return None;
            }
            if let Some(first) = s.first.take()
                && let Err(e) = s.shared.send(&first).await
            {
                s.done = true;
                return Some((Err(e), s));
            }
            match s.rx.recv().await {
                Some(item) => {
                    s.terminal |= !matches!(
                        item,
                        Ok(AdapterEvent::Content(_) | AdapterEvent::Artifact(_))
                    );
                    Some((item, s))
                }
                None => {
                    s.done = true;
                    // Ended by the worker's `segmentEnd`, or by its failure: a segment cut
                    // short gets the failure as its last item, so that it does not end
                    // without one.
                    if s.terminal {
                        return None;
                    }
                    let failure = s.shared.failure.get().cloned();
                    failure.map(|e| (Err(e), s))
                }
            }
        }))
    }
}

/// A runtime hosted by a sandbox worker, driven over the Sandbox Worker Protocol v1.
///
/// It is a [`HarnessRuntime`] like any other: the service numbers what it yields and moves
/// the lifecycle. What the worker asks in return is answered within its grants: thread state
/// of the runtime's own binding, calls of the tools it was given (approval-gated ones only
/// as the caller decided), nothing else.
pub struct WorkerRuntime {
    shared: Arc<Shared>,
    child: Mutex<Option<tokio::process::Child>>,
}

impl fmt::Debug for WorkerRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerRuntime")
            .field("adapter", &self.shared.adapter)
            .field("execution", &self.shared.execution)
            .field("gone", &self.shared.gone.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl Drop for WorkerRuntime {
    fn drop(&mut self) {
        self.shared.closing.store(true, Ordering::Release);
        self.shared.gone.cancel();
        (self.shared.kill)();
    }
}

impl WorkerRuntime {
    /// Starts the protocol on `link` for the runtime `context` describes, with the
    /// adapter's own `settings` for its worker, and waits until the worker has built its
    /// runtime.
    ///
    /// # Errors
    /// The worker's own error when it could not build its runtime; `WORKER_LOST` when it
    /// ended or did not answer within [`WorkerOptions::start_timeout`]; `WORKER_PROTOCOL`
    /// when it answered out of turn.
    pub async fn start(
        link: WorkerLink,
        context: &RuntimeContext,
        settings: serde_json::Value,
        options: WorkerOptions,
    ) -> Result<Self, HarnessError> {
        let WorkerLink {
            reader,
            writer,
            kill,
            guard,
            child,
        } = link;
        let tools: Vec<WireTool> = context
            .tools
            .iter()
            .map(|t| WireTool {
                descriptor: t.descriptor().clone(),
                needs_approval: t.requires_approval(),
            })
            .collect();
        let shared = Arc::new(Shared {
            adapter: context.adapter.clone(),
            execution: context.execution_id.clone(),
            writer: tokio::sync::Mutex::new(writer),
            waiting: Mutex::new(Waiting::default()),
            failure: OnceLock::new(),
            gone: CancellationToken::new(),
            closing: AtomicBool::new(false),
            kill,
            next: AtomicU64::new(1),
            in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_WORKER_REQUESTS)),
            state: context.thread_state.clone(),
            tools: context
                .tools
                .iter()
                .map(|t| (t.id().clone(), t.clone()))
                .collect(),
            decision: Mutex::new(None),
            session: Mutex::new(None),
            files: Mutex::new(Vec::new()),
            guard: guard.clone(),
        });
        let runtime = Self {
            shared: Arc::clone(&shared),
            child: Mutex::new(child),
        };
        let (ready_tx, ready_rx) = oneshot::channel();
        shared.waiting().ready = Some(ready_tx);
        tokio::spawn(read_loop(
            Arc::clone(&shared),
            reader,
            guard,
            options.heartbeat,
        ));
        let start = ToWorker::Start {
            protocol: PROTOCOL_VERSION,
            context: Box::new(WireContext {
                adapter: context.adapter.clone(),
                execution_id: context.execution_id.clone(),
                options: context.config.options.clone(),
                model: context.config.model.as_ref().map(|m| m.as_str().to_owned()),
                model_by_request: context
                    .config
                    .model
                    .as_ref()
                    .is_some_and(|m| m.by_request()),
                conversation: context.config.conversation.as_ref().map(|c| c.id().clone()),
                binding: context.binding.clone(),
                prompt: context.prompt.as_ref().map(|p| p.as_str().to_owned()),
                interrupt_policy: context.interrupt_policy.clone(),
                tools,
                limits: context.limits,
                delivery: context.delivery,
                middleware: {
                    let mut config = context.middleware.config();
                    config.results.redact = harness_core::middleware::RedactConfig::default();
                    config
                },
                thread_state: context.thread_state.is_some(),
                heartbeat_ms: u64::try_from(options.heartbeat.as_millis()).unwrap_or(u64::MAX),
                settings,
            }),
        };
        shared.send(&start).await?;
        let ready = match tokio::time::timeout(options.start_timeout, ready_rx).await {
            Ok(Ok(ready)) => ready,
            Ok(Err(_)) => return Err(shared.failure()),
            Err(_) => {
                shared.fail(lost("it did not answer `start` in time"));
                return Err(shared.failure());
            }
        };
        match ready {
            FromWorker::Ready {
                protocol: PROTOCOL_VERSION,
                result,
            } => Result::from(result).map_err(from_public)?,
            FromWorker::Ready { protocol, .. } => {
                shared.fail(violation(format!(
                    "it speaks protocol {protocol}, not {PROTOCOL_VERSION}"
                )));
                return Err(shared.failure());
            }
            // Only `ready` reaches the start's waiter.
            other => return Err(runtime.unexpected(&other, "start")),
        }
        Ok(runtime)
    }

    fn unexpected(&self, got: &FromWorker, asked: &str) -> HarnessError {
        self.shared.fail(violation(format!(
            "it answered `{asked}` with {}",
            kind_of(got)
        )));
        self.shared.failure()
    }
}

fn kind_of(m: &FromWorker) -> &'static str {
    match m {
        FromWorker::Ready { .. } => "`ready`",
        FromWorker::Initialized { .. } => "`initialized`",
        FromWorker::Event { .. } => "`event`",
        FromWorker::SegmentEnd { .. } => "`segmentEnd`",
        FromWorker::PendingAction { .. } => "`pendingAction`",
        FromWorker::Restored { .. } => "`restored`",
        FromWorker::Cancelled { .. } => "`cancelled`",
        FromWorker::Restarted { .. } => "`restarted`",
        FromWorker::CleanedUp { .. } => "`cleanedUp`",
        FromWorker::StateGet { .. }
        | FromWorker::StatePut { .. }
        | FromWorker::StateDelete { .. }
        | FromWorker::StateListKeys { .. } => "a thread state request",
        FromWorker::FileRead { .. } => "`fileRead`",
        FromWorker::ToolCall { .. } => "`toolCall`",
        FromWorker::Heartbeat => "`heartbeat`",
    }
}

/// The turn for the wire; its files are kept here, for the worker to read by place.
fn wire_turn(shared: &Shared, turn: TurnInput) -> WireTurn {
    let files = turn
        .files
        .iter()
        .map(|f| WireFile {
            name: f.name().to_owned(),
            media_type: f.media_type().clone(),
            image: f.kind() == FileKind::Image,
            size: f.size(),
        })
        .collect();
    shared
        .files
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .extend(turn.files);
    WireTurn {
        conversation_id: turn.conversation_id,
        message: turn.message,
        files,
        user: turn.user.map(|user| super::wire::WireUser {
            id: user.id().to_owned(),
            attributes: user.attributes().clone(),
        }),
        client_context: turn.client_context,
        trace_context: turn.trace_context,
        deadline: turn.deadline,
        idempotency_key: turn.idempotency_key,
    }
}

/// The wire form of a validated decision (the worker validates it again against the
/// request it made, to get its own [`ResumeDecision`]).
fn response_of(decision: &ResumeDecision) -> ActionResponse {
    match decision.response() {
        ValidatedResponse::Form(f) => ActionResponse::FormInput(FormResponse {
            action_id: f.action_id().clone(),
            revision: f.revision(),
            idempotency_key: f.idempotency_key().cloned(),
            answer: f.answer().clone(),
        }),
        ValidatedResponse::Approval(a) => ActionResponse::ToolApproval(ApprovalResponse {
            action_id: a.action_id().clone(),
            revision: a.revision(),
            idempotency_key: a.idempotency_key().cloned(),
            answer: a.answer().clone(),
        }),
    }
}

impl HarnessRuntime for WorkerRuntime {
    fn identity(&self) -> RuntimeIdentity {
        RuntimeIdentity {
            adapter: self.shared.adapter.clone(),
            execution_id: self.shared.execution.clone(),
            provider_session_id: self
                .shared
                .session
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }

    fn initialize(&self) -> BoxFuture<'_, Result<RuntimeInit, HarnessError>> {
        Box::pin(async move {
            match self
                .shared
                .ask(|id| ToWorker::Initialize { id }, None)
                .await?
            {
                FromWorker::Initialized { result, .. } => {
                    let session = Result::from(result).map_err(from_public)?;
                    session.clone_into(
                        &mut self
                            .shared
                            .session
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner),
                    );
                    Ok(RuntimeInit {
                        provider_session_id: session,
                    })
                }
                other => Err(self.unexpected(&other, "initialize")),
            }
        })
    }

    fn stream(&self, turn: TurnInput) -> BoxStream<'_, EventResult> {
        let wire = wire_turn(&self.shared, turn);
        self.shared
            .segment(move |id| ToWorker::Stream {
                id,
                turn: Box::new(wire),
            })
            .into_stream()
    }

    fn resume(&self, decision: ResumeDecision) -> BoxStream<'_, EventResult> {
        let response = response_of(&decision);
        *self
            .shared
            .decision
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(decision);
        self.shared
            .segment(move |id| ToWorker::Resume {
                id,
                response: Box::new(response),
            })
            .into_stream()
    }

    fn pending_action(&self) -> BoxFuture<'_, Option<ActionRequest>> {
        Box::pin(async move {
            match self
                .shared
                .ask(|id| ToWorker::PendingAction { id }, None)
                .await
            {
                Ok(FromWorker::PendingAction { action, .. }) => action.map(|a| *a),
                Ok(other) => {
                    let _ = self.unexpected(&other, "pendingAction");
                    None
                }
                Err(_) => None,
            }
        })
    }

    fn cancel(&self, reason: CancelReason) -> BoxFuture<'_, CancelResult> {
        Box::pin(async move {
            let asked = self
                .shared
                .ask(
                    |id| ToWorker::Cancel { id, reason },
                    Some(Duration::from_secs(10)),
                )
                .await;
            match asked {
                Ok(FromWorker::Cancelled { requested, .. }) => {
                    if requested {
                        CancelResult::Requested
                    } else {
                        CancelResult::NothingToCancel
                    }
                }
                Ok(other) => {
                    let _ = self.unexpected(&other, "cancel");
                    CancelResult::Requested
                }
                // A worker that is gone runs nothing; one that did not answer is ended, so
                // that what it ran stops.
                Err(_) if self.shared.gone.is_cancelled() => CancelResult::NothingToCancel,
                Err(_) => {
                    self.shared.fail(lost("it did not answer `cancel` in time"));
                    CancelResult::Requested
                }
            }
        })
    }

    fn restart(&self) -> BoxFuture<'_, Result<(), HarnessError>> {
        Box::pin(async move {
            match self
                .shared
                .ask(|id| ToWorker::Restart { id }, Some(Duration::from_secs(30)))
                .await?
            {
                FromWorker::Restarted { result, .. } => Result::from(result).map_err(from_public),
                other => Err(self.unexpected(&other, "restart")),
            }
        })
    }

    fn cleanup(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if !self.shared.gone.is_cancelled() {
                let _ = self
                    .shared
                    .ask(|id| ToWorker::Cleanup { id }, Some(Duration::from_secs(10)))
                    .await;
            }
            self.shared.closing.store(true, Ordering::Release);
            self.shared.fail(lost("cleaned up"));
            let child = self
                .child
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            if let Some(mut child) = child {
                let _ = child.start_kill();
                let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
            }
        })
    }

    fn restore(&self, restored: Restored) -> BoxFuture<'_, Result<(), HarnessError>> {
        Box::pin(async move {
            let restored = WireRestored {
                turn: wire_turn(&self.shared, restored.turn),
                pending: restored.pending,
                log: restored.log.iter().map(|e| (**e).clone()).collect(),
                answers: restored.answers,
            };
            let asked = self.shared.ask(
                |id| ToWorker::Restore {
                    id,
                    restored: Box::new(restored),
                },
                None,
            );
            match asked.await? {
                FromWorker::Restored { result, .. } => Result::from(result).map_err(from_public),
                other => Err(self.unexpected(&other, "restore")),
            }
        })
    }

    fn lost(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.shared.gone.cancelled().await;
            // A worker this runtime closed itself is not lost.
            if self.shared.closing.load(Ordering::Acquire) {
                std::future::pending::<()>().await;
            }
        })
    }
}

/// Reads the worker's frames in a task of its own (reads are not cancel-safe), and hands
/// them on one at a time.
async fn read_loop(
    shared: Arc<Shared>,
    reader: Box<dyn AsyncRead + Send + Unpin>,
    guard: Option<SandboxGuard>,
    heartbeat: Duration,
) {
    let (tx, mut rx) = mpsc::channel::<Result<FromWorker, FrameError>>(1);
    let gone = shared.gone.clone();
    // Frames come in bursts: one read takes many.
    let mut reader = tokio::io::BufReader::with_capacity(64 << 10, reader);
    tokio::spawn(async move {
        loop {
            let frame = tokio::select! {
                () = gone.cancelled() => return,
                frame = read_frame::<_, FromWorker>(&mut reader) => frame,
            };
            let end = frame.is_err();
            if tx.send(frame).await.is_err() || end {
                return;
            }
        }
    });
    let lease = heartbeat.saturating_mul(3).max(Duration::from_millis(100));
    let mut last = Instant::now();
    let breached = async {
        match &guard {
            Some(g) => g.breached().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(breached);
    loop {
        let frame = tokio::select! {
            () = shared.gone.cancelled() => return,
            breach = &mut breached => {
                shared.fail(breach.error());
                return;
            }
            () = tokio::time::sleep_until((last + lease).into()) => {
                shared.fail(lost(&format!("it sent nothing for {} ms, past its lease", lease.as_millis())));
                return;
            }
            frame = rx.recv() => frame,
        };
        let message = match frame {
            Some(Ok(m)) => m,
            Some(Err(FrameError::Protocol(what))) => {
                shared.fail(violation(what));
                return;
            }
            Some(Err(FrameError::Closed)) | None => {
                shared.fail(closed(&shared, guard.as_ref(), "it closed its output").await);
                return;
            }
            Some(Err(FrameError::Io(e))) => {
                shared.fail(
                    closed(&shared, guard.as_ref(), &format!("reading it failed: {e}")).await,
                );
                return;
            }
        };
        if let Err(e) = dispatch(&shared, message).await {
            shared.fail(e);
            return;
        }
        // Time spent waiting on a slow segment reader is not the worker's.
        last = Instant::now();
    }
}

/// The error of a worker that ended: the limit it reached, if the sandbox says so (the
/// watchdog may be a moment behind the kernel), else lost.
async fn closed(shared: &Shared, guard: Option<&SandboxGuard>, why: &str) -> HarnessError {
    if shared.closing.load(Ordering::Acquire) {
        return lost(why);
    }
    if let Some(g) = guard
        && let Ok(breach) = tokio::time::timeout(Duration::from_millis(300), g.breached()).await
    {
        return breach.error();
    }
    lost(why)
}

async fn dispatch(shared: &Arc<Shared>, message: FromWorker) -> Result<(), HarnessError> {
    match message {
        FromWorker::Heartbeat => Ok(()),
        FromWorker::Ready { .. } => {
            let ready = shared.waiting().ready.take();
            match ready {
                Some(tx) => {
                    let _ = tx.send(message);
                    Ok(())
                }
                None => Err(violation("it sent `ready` twice")),
            }
        }
        FromWorker::Initialized { id, .. }
        | FromWorker::PendingAction { id, .. }
        | FromWorker::Restored { id, .. }
        | FromWorker::Cancelled { id, .. }
        | FromWorker::Restarted { id, .. }
        | FromWorker::CleanedUp { id } => {
            let waiter = shared.waiting().replies.remove(&id);
            match waiter {
                Some(tx) => {
                    let _ = tx.send(message);
                    Ok(())
                }
                None => Err(violation(format!(
                    "it answered request {id}, which is not open"
                ))),
            }
        }
        FromWorker::Event { id, event } => {
            let segment = shared.waiting().segments.get(&id).cloned();
            let Some(segment) = segment else {
                return Err(violation(format!(
                    "it sent an event for segment {id}, which is not open"
                )));
            };
            let item = match *event {
                WireEvent::Content { payload } => Content::try_from(payload)
                    .map(AdapterEvent::Content)
                    .map(Ok)
                    .map_err(|p| {
                        violation(format!(
                            "it sent a `{}` event, which only the control plane makes",
                            p.kind().as_str()
                        ))
                    })?,
                WireEvent::Artifact { descriptor } => {
                    if descriptor.execution_id() != &shared.execution {
                        return Err(violation(format!(
                            "it sent an artifact of execution `{}`, not its own",
                            descriptor.execution_id()
                        )));
                    }
                    Ok(AdapterEvent::Artifact(descriptor))
                }
                WireEvent::Action { request } => Ok(AdapterEvent::Action(request)),
                WireEvent::Completed { result } => Ok(AdapterEvent::Completed(result)),
                // A worker whose sandbox reached a limit may still report what the limit
                // did to its agent (it exited) before it is killed too: the limit is the
                // run's fault.
                WireEvent::Failed { error } => {
                    Err(match shared.guard.as_ref().and_then(SandboxGuard::breach) {
                        Some(breach) => breach.error(),
                        None => from_public(error),
                    })
                }
            };
            // Backpressure: a slow reader holds the worker back. A reader that is gone
            // (the execution ended) takes nothing more.
            let _ = segment.send(item).await;
            Ok(())
        }
        FromWorker::SegmentEnd { id } => match shared.waiting().segments.remove(&id) {
            Some(_) => Ok(()),
            None => Err(violation(format!(
                "it ended segment {id}, which is not open"
            ))),
        },
        FromWorker::StateGet { .. }
        | FromWorker::StatePut { .. }
        | FromWorker::StateDelete { .. }
        | FromWorker::StateListKeys { .. }
        | FromWorker::FileRead { .. }
        | FromWorker::ToolCall { .. } => {
            let Ok(permit) = Arc::clone(&shared.in_flight).try_acquire_owned() else {
                return Err(violation(format!(
                    "it had more than {MAX_WORKER_REQUESTS} requests open"
                )));
            };
            let reply = serve_request(shared, message)?;
            let shared = Arc::clone(shared);
            tokio::spawn(async move {
                let answer = reply.await;
                drop(permit);
                match answer {
                    Ok(answer) => {
                        let _ = shared.send(&answer).await;
                    }
                    Err(e) => shared.fail(e),
                }
            });
            Ok(())
        }
    }
}

/// Checks a worker's request against its grants now (a refusal ends the worker), and
/// returns the work of answering it.
fn serve_request(
    shared: &Arc<Shared>,
    message: FromWorker,
) -> Result<BoxFuture<'static, Result<ToWorker, HarnessError>>, HarnessError> {
    let shared = Arc::clone(shared);
    let state = || {
        shared
            .state
            .clone()
            .ok_or_else(|| violation("it asked for thread state, which its runtime was not given"))
    };
    let key = |k: &str| {
        k.parse::<StateKey>()
            .map_err(|e| violation(format!("it named a bad state key: {e}")))
    };
    Ok(match message {
        FromWorker::StateGet { id, key: k } => {
            let (state, k) = (state()?, key(&k)?);
            Box::pin(async move {
                let result = state.get(&k).await.map(|entry| StateAnswer::Entry {
                    version: entry.as_ref().map(|e| e.version),
                    value: entry.map(|e| base64::engine::general_purpose::STANDARD.encode(e.value)),
                });
                Ok(state_reply(id, result))
            })
        }
        FromWorker::StatePut {
            id,
            key: k,
            value,
            expected,
        } => {
            let (state, k) = (state()?, key(&k)?);
            let value = base64::engine::general_purpose::STANDARD
                .decode(value)
                .map_err(|e| violation(format!("it sent a state value that is not base64: {e}")))?;
            Box::pin(async move {
                let result = state
                    .put(&k, value, expected)
                    .await
                    .map(|version| StateAnswer::Written { version });
                Ok(state_reply(id, result))
            })
        }
        FromWorker::StateDelete {
            id,
            key: k,
            expected,
        } => {
            let (state, k) = (state()?, key(&k)?);
            Box::pin(async move {
                let result = state
                    .delete(&k, expected)
                    .await
                    .map(|()| StateAnswer::Deleted);
                Ok(state_reply(id, result))
            })
        }
        FromWorker::StateListKeys { id } => {
            let state = state()?;
            Box::pin(async move {
                let result = state.list_keys().await.map(|keys| StateAnswer::Keys {
                    keys: keys.iter().map(|k| k.as_str().to_owned()).collect(),
                });
                Ok(state_reply(id, result))
            })
        }
        FromWorker::FileRead {
            id,
            index,
            offset,
            len,
        } => {
            let file = shared
                .files
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(index)
                .cloned();
            let Some(file) = file else {
                return Err(violation(format!(
                    "it read input file {index}, which its runtime was not given"
                )));
            };
            if len > FILE_CHUNK_BYTES || offset.saturating_add(len) > file.size() {
                return Err(violation(format!(
                    "it read {len} bytes at {offset} of a {}-byte file (at most \
                     {FILE_CHUNK_BYTES} a read, within the file)",
                    file.size()
                )));
            }
            Box::pin(async move {
                let result = file.read().await.map_err(|e| e.public()).map(|bytes| {
                    // Within the size validated, which `read` checked the bytes still have.
                    let (from, to) = (offset as usize, (offset + len) as usize);
                    base64::engine::general_purpose::STANDARD.encode(&bytes[from..to])
                });
                Ok(ToWorker::FileReply {
                    id,
                    result: result.into(),
                })
            })
        }
        FromWorker::ToolCall {
            id,
            tool,
            call_id,
            arguments,
            deadline_ms,
        } => {
            let Some(handle) = shared.tools.get(&tool).cloned() else {
                return Err(violation(format!(
                    "it called tool `{tool}`, which it was not granted"
                )));
            };
            let mut ctx = ToolCallContext::new(call_id, shared.execution.clone());
            if let Some(ms) = deadline_ms {
                ctx = ctx.with_deadline(Instant::now() + Duration::from_millis(ms));
            }
            if handle.requires_approval() {
                // The arguments are the caller's decision's, never the worker's.
                let decision = shared
                    .decision
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                let Some(decision) = decision else {
                    return Err(violation(format!(
                        "it called tool `{tool}`, which needs an approval, with none given"
                    )));
                };
                Box::pin(async move {
                    let outcome = match handle.invoke_approved(&decision, ctx) {
                        Ok(Approved::Run { invocation, .. }) => invocation.await,
                        Ok(Approved::Rejected { reason }) => ToolOutcome::failure(format!(
                            "the caller rejected the call{}",
                            reason.map(|r| format!(": {r}")).unwrap_or_default()
                        )),
                        Err(e) => {
                            return Err(violation(format!(
                                "it called tool `{tool}` beyond the caller's approval: {e}"
                            )));
                        }
                    };
                    Ok(ToWorker::ToolReply { id, outcome })
                })
            } else {
                Box::pin(async move {
                    let outcome = handle.invoke(arguments, ctx).await;
                    Ok(ToWorker::ToolReply { id, outcome })
                })
            }
        }
        _ => unreachable_request(),
    })
}

fn unreachable_request() -> BoxFuture<'static, Result<ToWorker, HarnessError>> {
    Box::pin(async { Err(violation("not a request")) })
}

fn state_reply(id: Id, result: Result<StateAnswer, StateError>) -> ToWorker {
    ToWorker::StateReply {
        id,
        result: WireOutcome::from(result.map_err(|e| match e {
            StateError::VersionConflict {
                key,
                expected,
                actual,
            } => WireStateError::VersionConflict {
                key: key.as_str().to_owned(),
                expected,
                actual,
            },
            StateError::StaleEpoch {
                binding,
                epoch,
                current,
            } => WireStateError::StaleEpoch {
                binding,
                epoch,
                current,
            },
            // The rest are the control plane's business; the worker learns only that the
            // state is unavailable.
            other => WireStateError::Unavailable {
                reason: other.code().as_str().to_owned(),
            },
        })),
    }
}
