//! The worker's end: hosts one runtime inside the sandbox and reaches everything else
//! through the control plane.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use base64::Engine as _;
use std::panic::AssertUnwindSafe;

use futures_util::{FutureExt as _, StreamExt as _};
use harness_core::action::{ActionRequest, ActionResponse};
use harness_core::adapter::{
    AdapterEvent, AgentConfig, BoxFuture, CancelResult, HarnessAdapter, HarnessRuntime, Restored,
    ResumeDecision, RuntimeContext, TurnInput,
};
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::event::EventPayload;
use harness_core::file::{FileHandle, FileSource, ValidatedInputFile};
use harness_core::manifest::ContractVersion;
use harness_core::session::{
    Conversation, ScopedThreadState, SessionBinding, StateEntry, StateError, StateKey,
    ThreadStateStore, Version,
};
use harness_core::tool::{PortableTool, ToolCallContext, ToolDescriptor, ToolHandle, ToolOutcome};
use serde_json::Value;
use tokio::io::AsyncWriteExt as _;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::wire::{
    FILE_CHUNK_BYTES, FrameError, FromWorker, Id, PROTOCOL_VERSION, StateAnswer, ToWorker,
    WireEvent, WireOutcome, WireRestored, WireStateError, WireTurn, encode_frame, policy_of,
    read_frame,
};

/// Builds the worker's adapter from the settings its control plane sent
/// ([`WorkerRuntime::start`](super::WorkerRuntime::start)'s `settings`).
pub type MakeAdapter =
    Box<dyn FnOnce(Value) -> Result<Arc<dyn HarnessAdapter>, HarnessError> + Send>;

/// What the worker's writer task takes: a frame, or a request to confirm that everything
/// before it was written.
enum Out {
    Frame(Vec<u8>),
    Flushed(oneshot::Sender<()>),
}

/// How many frames wait for the writer task before senders are held back.
const OUT_FRAMES: usize = 256;

/// The most the writer task gathers into one write.
const OUT_BATCH_BYTES: usize = 256 << 10;

/// The worker's side of the link. Frames go through one writer task in order: it writes
/// what has gathered since its last write in one write and one flush, so a burst of events
/// costs a few writes, not one each (stdout's writes are each a trip to a blocking thread).
struct Link {
    out: mpsc::Sender<Out>,
    replies: Mutex<HashMap<Id, oneshot::Sender<ToWorker>>>,
    next: AtomicU64,
    closed: CancellationToken,
}

impl Link {
    fn new(mut writer: Box<dyn AsyncWrite + Send + Unpin>) -> Arc<Self> {
        let (out, mut frames) = mpsc::channel::<Out>(OUT_FRAMES);
        let link = Arc::new(Self {
            out,
            replies: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            closed: CancellationToken::new(),
        });
        let closed = link.closed.clone();
        tokio::spawn(async move {
            let mut batch = Vec::new();
            let mut confirm = Vec::new();
            while let Some(first) = frames.recv().await {
                let mut next = Some(first);
                while let Some(item) = next.take() {
                    match item {
                        Out::Frame(frame) => batch.extend_from_slice(&frame),
                        Out::Flushed(tx) => confirm.push(tx),
                    }
                    if batch.len() < OUT_BATCH_BYTES {
                        next = frames.try_recv().ok();
                    }
                }
                let written = async {
                    writer.write_all(&batch).await?;
                    writer.flush().await
                };
                if written.await.is_err() {
                    closed.cancel();
                    return;
                }
                batch.clear();
                for tx in confirm.drain(..) {
                    let _ = tx.send(());
                }
            }
        });
        link
    }

    async fn send(&self, message: &FromWorker) -> Result<(), HarnessError> {
        let frame = encode_frame(message).map_err(|e| gone(&e.to_string()))?;
        self.out.send(Out::Frame(frame)).await.map_err(|_| {
            self.closed.cancel();
            gone("the link to the control plane failed")
        })
    }

    /// Waits until every frame sent so far is written.
    async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.out.send(Out::Flushed(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }

    async fn ask(&self, make: impl FnOnce(Id) -> FromWorker) -> Result<ToWorker, HarnessError> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.replies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, tx);
        self.send(&make(id)).await?;
        rx.await
            .map_err(|_| gone("the control plane closed the link"))
    }
}

fn gone(why: &str) -> HarnessError {
    HarnessError::new(ErrorCategory::Unavailable, "the control plane is gone")
        .with_code(ErrorCode::WORKER_LOST)
        .with_diagnostic(why.to_owned())
}

fn refused(why: String) -> HarnessError {
    HarnessError::new(
        ErrorCategory::Protocol,
        "the control plane broke the worker protocol",
    )
    .with_code(ErrorCode::WORKER_PROTOCOL)
    .with_diagnostic(why)
}

/// Thread state through the control plane: the worker names keys; the control plane
/// applies them to the runtime's own binding, whatever binding this handle names.
struct RemoteState(Arc<Link>);

impl RemoteState {
    async fn ask(&self, make: impl FnOnce(Id) -> FromWorker) -> Result<StateAnswer, StateError> {
        let unavailable = |reason: String| StateError::Unavailable { reason };
        match self.0.ask(make).await {
            Ok(ToWorker::StateReply { result, .. }) => match Result::from(result) {
                Ok(answer) => Ok(answer),
                Err(WireStateError::VersionConflict {
                    key,
                    expected,
                    actual,
                }) => Err(match key.parse::<StateKey>() {
                    Ok(key) => StateError::VersionConflict {
                        key,
                        expected,
                        actual,
                    },
                    Err(e) => unavailable(e.to_string()),
                }),
                Err(WireStateError::StaleEpoch {
                    binding,
                    epoch,
                    current,
                }) => Err(StateError::StaleEpoch {
                    binding,
                    epoch,
                    current,
                }),
                Err(WireStateError::Unavailable { reason }) => Err(unavailable(reason)),
            },
            Ok(_) => Err(unavailable("the control plane answered out of turn".into())),
            Err(e) => Err(unavailable(e.diagnostic().unwrap_or_default().to_owned())),
        }
    }
}

fn decode(value: &str) -> Result<Vec<u8>, StateError> {
    base64::engine::general_purpose::STANDARD
        .decode(value)
        .map_err(|e| StateError::Unavailable {
            reason: format!("the control plane sent a value that is not base64: {e}"),
        })
}

fn out_of_turn<T>() -> Result<T, StateError> {
    Err(StateError::Unavailable {
        reason: "the control plane answered with another kind".into(),
    })
}

impl ThreadStateStore for RemoteState {
    fn get<'a>(
        &'a self,
        _binding: &'a SessionBinding,
        key: &'a StateKey,
    ) -> BoxFuture<'a, Result<Option<StateEntry>, StateError>> {
        Box::pin(async move {
            let key = key.as_str().to_owned();
            match self.ask(|id| FromWorker::StateGet { id, key }).await? {
                StateAnswer::Entry {
                    value: Some(value),
                    version: Some(version),
                } => Ok(Some(StateEntry {
                    value: decode(&value)?,
                    version,
                })),
                StateAnswer::Entry { .. } => Ok(None),
                _ => out_of_turn(),
            }
        })
    }

    fn put<'a>(
        &'a self,
        _binding: &'a SessionBinding,
        key: &'a StateKey,
        value: Vec<u8>,
        expected: Option<Version>,
    ) -> BoxFuture<'a, Result<Version, StateError>> {
        Box::pin(async move {
            let key = key.as_str().to_owned();
            let value = base64::engine::general_purpose::STANDARD.encode(value);
            match self
                .ask(|id| FromWorker::StatePut {
                    id,
                    key,
                    value,
                    expected,
                })
                .await?
            {
                StateAnswer::Written { version } => Ok(version),
                _ => out_of_turn(),
            }
        })
    }

    fn delete<'a>(
        &'a self,
        _binding: &'a SessionBinding,
        key: &'a StateKey,
        expected: Version,
    ) -> BoxFuture<'a, Result<(), StateError>> {
        Box::pin(async move {
            let key = key.as_str().to_owned();
            match self
                .ask(|id| FromWorker::StateDelete { id, key, expected })
                .await?
            {
                StateAnswer::Deleted => Ok(()),
                _ => out_of_turn(),
            }
        })
    }

    fn list_keys<'a>(
        &'a self,
        _binding: &'a SessionBinding,
    ) -> BoxFuture<'a, Result<Vec<StateKey>, StateError>> {
        Box::pin(async move {
            match self.ask(|id| FromWorker::StateListKeys { id }).await? {
                StateAnswer::Keys { keys } => keys
                    .iter()
                    .map(|k| {
                        k.parse::<StateKey>().map_err(|e| StateError::Unavailable {
                            reason: e.to_string(),
                        })
                    })
                    .collect(),
                _ => out_of_turn(),
            }
        })
    }

    fn clear<'a>(
        &'a self,
        _binding: &'a SessionBinding,
    ) -> BoxFuture<'a, Result<SessionBinding, StateError>> {
        // A runtime's handle cannot clear its session; neither can its worker.
        Box::pin(async {
            Err(StateError::Unavailable {
                reason: "a sandbox worker cannot clear its session".into(),
            })
        })
    }
}

/// An input file, read through the control plane in chunks.
struct RemoteFile {
    index: usize,
    size: u64,
    link: Arc<Link>,
}

impl FileSource for RemoteFile {
    fn size(&self) -> u64 {
        self.size
    }

    fn read(&self) -> BoxFuture<'_, Result<Arc<[u8]>, HarnessError>> {
        Box::pin(async move {
            let mut bytes = Vec::with_capacity(usize::try_from(self.size).unwrap_or(0));
            let mut offset = 0;
            while offset < self.size {
                let len = FILE_CHUNK_BYTES.min(self.size - offset);
                let (index, link) = (self.index, &self.link);
                let chunk = match link
                    .ask(|id| FromWorker::FileRead {
                        id,
                        index,
                        offset,
                        len,
                    })
                    .await?
                {
                    ToWorker::FileReply { result, .. } => {
                        Result::from(result).map_err(super::wire::from_public)?
                    }
                    _ => return Err(refused("an answer of another kind to `fileRead`".into())),
                };
                let chunk = base64::engine::general_purpose::STANDARD
                    .decode(chunk)
                    .map_err(|e| refused(format!("file bytes that are not base64: {e}")))?;
                if chunk.len() as u64 != len {
                    return Err(refused(format!(
                        "{} bytes of file {index} where {len} were asked",
                        chunk.len()
                    )));
                }
                bytes.extend_from_slice(&chunk);
                offset += len;
            }
            Ok(Arc::from(bytes))
        })
    }
}

/// A granted tool, called through the control plane (which holds its credentials).
struct RemoteTool {
    descriptor: ToolDescriptor,
    link: Arc<Link>,
}

impl PortableTool for RemoteTool {
    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    fn invoke(&self, arguments: Value, ctx: ToolCallContext) -> BoxFuture<'_, ToolOutcome> {
        Box::pin(async move {
            let tool = self.descriptor.id().clone();
            let deadline_ms = ctx.deadline.map(|d| {
                u64::try_from(d.saturating_duration_since(Instant::now()).as_millis())
                    .unwrap_or(u64::MAX)
            });
            let asked = self
                .link
                .ask(|id| FromWorker::ToolCall {
                    id,
                    tool,
                    call_id: ctx.call_id,
                    arguments,
                    deadline_ms,
                })
                .await;
            match asked {
                Ok(ToWorker::ToolReply { outcome, .. }) => outcome,
                Ok(_) => ToolOutcome::failure("the control plane answered out of turn"),
                Err(_) => ToolOutcome::failure("the control plane is gone"),
            }
        })
    }
}

/// Serves the protocol on `reader` (the control plane's frames) and `writer` (the
/// worker's), hosting the runtime of the adapter `make` builds. Returns when the control
/// plane asks for `cleanup` or closes the link.
///
/// Nothing else may write to `writer` (for a worker on stdio: log to stderr, never stdout).
///
/// # Errors
/// When the link fails, or the control plane breaks the protocol (the worker then ends;
/// its control plane sees it gone).
pub async fn serve(
    reader: impl AsyncRead + Send + Unpin + 'static,
    writer: impl AsyncWrite + Send + Unpin + 'static,
    make: MakeAdapter,
) -> Result<(), HarnessError> {
    let mut reader: Box<dyn AsyncRead + Send + Unpin> = Box::new(reader);
    let link = Link::new(Box::new(writer));
    let result = run(&mut reader, &link, make).await;
    // What the runtime said last (`cleanedUp`, or why it could not start) is written
    // before the worker ends.
    link.flush().await;
    result
}

async fn run(
    reader: &mut Box<dyn AsyncRead + Send + Unpin>,
    link: &Arc<Link>,
    make: MakeAdapter,
) -> Result<(), HarnessError> {
    let context = match read_frame::<_, ToWorker>(reader).await {
        Ok(ToWorker::Start { protocol, context }) => {
            if protocol != PROTOCOL_VERSION {
                let error = refused(format!(
                    "the control plane speaks protocol {protocol}; this worker speaks \
                     {PROTOCOL_VERSION}"
                ));
                let _ = link
                    .send(&FromWorker::Ready {
                        protocol: PROTOCOL_VERSION,
                        result: WireOutcome::Err(error.public()),
                    })
                    .await;
                return Err(error);
            }
            context
        }
        Ok(_) => return Err(refused("the first frame was not `start`".into())),
        Err(e) => return Err(frame_error(e)),
    };
    let cancellation = CancellationToken::new();
    // The runtime's binding: the decisions this worker makes are for it.
    let binding = context.binding.clone();
    let built = build(link, *context, make, cancellation.clone()).await;
    let (runtime, heartbeat) = match built {
        Ok(built) => built,
        Err(e) => {
            let _ = link
                .send(&FromWorker::Ready {
                    protocol: PROTOCOL_VERSION,
                    result: WireOutcome::Err(e.public()),
                })
                .await;
            return Err(e);
        }
    };
    let runtime: Arc<dyn HarnessRuntime> = Arc::from(runtime);
    link.send(&FromWorker::Ready {
        protocol: PROTOCOL_VERSION,
        result: WireOutcome::Ok(()),
    })
    .await?;
    let beat = Arc::clone(link);
    let beating = tokio::spawn(async move {
        let mut every = tokio::time::interval(heartbeat);
        loop {
            every.tick().await;
            if beat.send(&FromWorker::Heartbeat).await.is_err() {
                return;
            }
        }
    });
    let pending: Arc<Mutex<Option<ActionRequest>>> = Arc::new(Mutex::new(None));
    let result = serve_frames(
        reader,
        link,
        (&runtime, binding.as_ref()),
        &pending,
        &cancellation,
    )
    .await;
    beating.abort();
    cancellation.cancel();
    if result.is_err() || link.closed.is_cancelled() {
        // The control plane is gone or broke the protocol: release what the runtime holds.
        let _ = tokio::time::timeout(Duration::from_secs(10), runtime.cleanup()).await;
    }
    result
}

async fn build(
    link: &Arc<Link>,
    context: super::wire::WireContext,
    make: MakeAdapter,
    cancellation: CancellationToken,
) -> Result<(Box<dyn HarnessRuntime>, Duration), HarnessError> {
    let adapter = make(context.settings)?;
    // Compiled by the control plane already; here without redaction (see `WireContext`).
    let middleware =
        harness_core::middleware::PortableMiddlewarePolicy::compile(&context.middleware)
            .map_err(|e| refused(format!("the middleware policy: {e}")))?;
    let tools = context
        .tools
        .iter()
        .map(|t| {
            ToolHandle::new(Arc::new(RemoteTool {
                descriptor: t.descriptor.clone(),
                link: Arc::clone(link),
            }))
            .with_policy(policy_of(t))
            .map(|h| h.cancelled_by(cancellation.clone()))
            .map_err(|e| refused(format!("a tool's policy: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let thread_state = match (context.thread_state, context.binding.clone()) {
        (true, Some(binding)) => Some(ScopedThreadState::new(
            Arc::new(RemoteState(Arc::clone(link))),
            binding,
        )),
        (true, None) => return Err(refused("thread state without a binding".into())),
        (false, _) => None,
    };
    // The worker's runtime reports in the worker's process: its spans are children of the
    // span current here (the worker's own, not the control plane's execution span).
    let telemetry = harness_core::telemetry::TelemetrySink::new(
        context.adapter.clone(),
        context.execution_id.clone(),
        tracing::Span::current(),
    );
    let runtime = adapter
        .create_runtime(RuntimeContext {
            contract_version: ContractVersion::V1,
            adapter: context.adapter,
            execution_id: context.execution_id,
            config: AgentConfig {
                options: context.options,
                model: context.model.map(|m| {
                    harness_core::context::ModelSelection::new(m, context.model_by_request)
                }),
                conversation: context.conversation.map(Conversation::anonymous),
            },
            binding: context.binding,
            prompt: context
                .prompt
                .map(harness_core::context::RenderedPrompt::new),
            interrupt_policy: context.interrupt_policy,
            tools,
            limits: context.limits,
            thread_state,
            cancellation,
            delivery: context.delivery,
            middleware,
            // Skills are delivered by the control plane (written in the workspace the
            // sandbox binds), not across the worker protocol.
            skills: harness_core::skill::SkillManifest::default(),
            telemetry,
        })
        .await?;
    let heartbeat = Duration::from_millis(context.heartbeat_ms.clamp(10, 60_000));
    Ok((runtime, heartbeat))
}

fn frame_error(e: FrameError) -> HarnessError {
    match e {
        FrameError::Closed => gone("the control plane closed the link"),
        FrameError::Io(e) => gone(&e.to_string()),
        FrameError::Protocol(what) => refused(what),
    }
}

async fn serve_frames(
    reader: &mut Box<dyn AsyncRead + Send + Unpin>,
    link: &Arc<Link>,
    (runtime, binding): (&Arc<dyn HarnessRuntime>, Option<&SessionBinding>),
    pending: &Arc<Mutex<Option<ActionRequest>>>,
    cancellation: &CancellationToken,
) -> Result<(), HarnessError> {
    // The runtime's input files so far, numbered as the control plane numbers them.
    let mut count = 0usize;
    let files = &mut count;
    loop {
        let frame = match read_frame::<_, ToWorker>(reader).await {
            Ok(frame) => frame,
            Err(FrameError::Closed) => {
                link.closed.cancel();
                return Ok(());
            }
            Err(e) => return Err(frame_error(e)),
        };
        let (link, runtime) = (Arc::clone(link), Arc::clone(runtime));
        match frame {
            ToWorker::Start { .. } => return Err(refused("a second `start`".into())),
            ToWorker::StateReply { id, .. }
            | ToWorker::ToolReply { id, .. }
            | ToWorker::FileReply { id, .. } => {
                let waiter = link
                    .replies
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&id);
                match waiter {
                    Some(tx) => {
                        let _ = tx.send(frame);
                    }
                    None => return Err(refused(format!("an answer to no request ({id})"))),
                }
            }
            ToWorker::Initialize { id } => {
                tokio::spawn(async move {
                    let result = guarded(runtime.initialize()).await.and_then(|r| r);
                    let result = result
                        .map(|init| init.provider_session_id)
                        .map_err(|e| e.public());
                    let _ = link
                        .send(&FromWorker::Initialized {
                            id,
                            result: result.into(),
                        })
                        .await;
                });
            }
            ToWorker::Stream { id, turn } => {
                let turn = turn_input(&*runtime, &link, files, *turn);
                let pending = Arc::clone(pending);
                tokio::spawn(async move {
                    let stream = runtime.stream(turn);
                    pump(&link, id, stream, &pending).await;
                });
            }
            ToWorker::Restore { id, restored } => {
                let WireRestored {
                    turn,
                    pending: action,
                    log,
                    answers,
                } = *restored;
                let turn = turn_input(&*runtime, &link, files, turn);
                *pending.lock().unwrap_or_else(PoisonError::into_inner) = Some(action.clone());
                tokio::spawn(async move {
                    let restored = Restored::new(
                        turn,
                        action,
                        log.into_iter().map(Arc::new).collect(),
                        answers,
                    );
                    let result = guarded(runtime.restore(restored))
                        .await
                        .and_then(|r| r)
                        .map_err(|e| e.public());
                    let _ = link
                        .send(&FromWorker::Restored {
                            id,
                            result: result.into(),
                        })
                        .await;
                });
            }
            ToWorker::Resume { id, response } => {
                let decision = decide(pending, *response, binding);
                let pending = Arc::clone(pending);
                tokio::spawn(async move {
                    match decision {
                        Ok(decision) => pump(&link, id, runtime.resume(decision), &pending).await,
                        Err(e) => {
                            let failed = WireEvent::Failed { error: e.public() };
                            let _ = link
                                .send(&FromWorker::Event {
                                    id,
                                    event: Box::new(failed),
                                })
                                .await;
                            let _ = link.send(&FromWorker::SegmentEnd { id }).await;
                        }
                    }
                });
            }
            ToWorker::PendingAction { id } => {
                tokio::spawn(async move {
                    let action = runtime.pending_action().await.map(Box::new);
                    let _ = link.send(&FromWorker::PendingAction { id, action }).await;
                });
            }
            ToWorker::Cancel { id, reason } => {
                cancellation.cancel();
                tokio::spawn(async move {
                    let requested = runtime.cancel(reason).await == CancelResult::Requested;
                    let _ = link.send(&FromWorker::Cancelled { id, requested }).await;
                });
            }
            ToWorker::Restart { id } => {
                tokio::spawn(async move {
                    let result = runtime.restart().await.map_err(|e| e.public());
                    let _ = link
                        .send(&FromWorker::Restarted {
                            id,
                            result: result.into(),
                        })
                        .await;
                });
            }
            ToWorker::Cleanup { id } => {
                runtime.cleanup().await;
                let _ = link.send(&FromWorker::CleanedUp { id }).await;
                return Ok(());
            }
        }
    }
}

/// The turn, its files reading their bytes through the control plane. `files` counts the
/// runtime's files so far (the control plane numbers them the same way).
fn turn_input(
    runtime: &dyn HarnessRuntime,
    link: &Arc<Link>,
    files: &mut usize,
    turn: WireTurn,
) -> TurnInput {
    let files = turn
        .files
        .into_iter()
        .map(|file| {
            let index = *files;
            *files += 1;
            let handle = FileHandle::new(RemoteFile {
                index,
                size: file.size,
                link: Arc::clone(link),
            });
            let kind = file.kind();
            ValidatedInputFile::relayed(file.name, file.media_type, kind, file.size, handle)
        })
        .collect();
    TurnInput {
        execution_id: runtime.identity().execution_id,
        conversation_id: turn.conversation_id,
        message: turn.message,
        files,
        user: turn.user.map(|user| {
            harness_core::context::SafeUserContext::new(user.id).with_attributes(user.attributes)
        }),
        client_context: turn.client_context,
        trace_context: turn.trace_context,
        deadline: turn.deadline,
        idempotency_key: turn.idempotency_key,
    }
}

fn panicked() -> HarnessError {
    HarnessError::new(ErrorCategory::Internal, "the adapter panicked")
        .with_code(ErrorCode::ADAPTER_PANICKED)
}

/// `future`, with a panic in it turned into `ADAPTER_PANICKED` (the service does the same
/// for a runtime it hosts itself).
async fn guarded<T>(future: impl Future<Output = T>) -> Result<T, HarnessError> {
    AssertUnwindSafe(future)
        .catch_unwind()
        .await
        .map_err(|_| panicked())
}

/// The caller's answer, validated once more against the action this worker's runtime
/// paused on (the control plane validated it against the request as it opened it, whose
/// revision it owns).
fn decide(
    pending: &Mutex<Option<ActionRequest>>,
    mut response: ActionResponse,
    binding: Option<&SessionBinding>,
) -> Result<ResumeDecision, HarnessError> {
    let request = pending
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .ok_or_else(|| refused("an answer while no action is pending".into()))?;
    match &mut response {
        ActionResponse::FormInput(r) => r.revision = request.revision,
        ActionResponse::ToolApproval(r) => r.revision = request.revision,
    }
    let validated = request.validate(response).map_err(|e| {
        refused(format!(
            "an answer that does not fit the pending action: {e}"
        ))
    })?;
    Ok(ResumeDecision::new(validated).for_binding(binding.cloned()))
}

/// Sends one segment's items, then its end.
async fn pump(
    link: &Link,
    id: Id,
    mut stream: harness_core::adapter::BoxStream<'_, harness_core::adapter::EventResult>,
    pending: &Mutex<Option<ActionRequest>>,
) {
    loop {
        let item = match AssertUnwindSafe(stream.next()).catch_unwind().await {
            Ok(Some(item)) => item,
            Ok(None) => break,
            // The segment ends with the panic as its error, as the service ends a runtime
            // of its own that panics.
            Err(_) => Err(panicked()),
        };
        let panicked = matches!(&item, Err(e) if e.code() == &ErrorCode::ADAPTER_PANICKED);
        let event = match item {
            Ok(AdapterEvent::Content(c)) => WireEvent::Content {
                payload: EventPayload::from(c),
            },
            Ok(AdapterEvent::Artifact(descriptor)) => WireEvent::Artifact { descriptor },
            Ok(AdapterEvent::Action(request)) => {
                *pending.lock().unwrap_or_else(PoisonError::into_inner) = Some(request.clone());
                WireEvent::Action { request }
            }
            Ok(AdapterEvent::Completed(result)) => WireEvent::Completed { result },
            Err(e) => WireEvent::Failed { error: e.public() },
        };
        if link
            .send(&FromWorker::Event {
                id,
                event: Box::new(event),
            })
            .await
            .is_err()
        {
            return;
        }
        if panicked {
            break;
        }
    }
    let _ = link.send(&FromWorker::SegmentEnd { id }).await;
}
