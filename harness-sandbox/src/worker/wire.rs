//! The messages of the Sandbox Worker Protocol v1 and their framing (see the
//! [module docs](super) for the specification).

use std::time::Duration;

use harness_core::action::{ActionRequest, ActionResponse};
use harness_core::artifact::ArtifactDescriptor;
use harness_core::error::{ErrorCode, HarnessError, PublicError};
use harness_core::event::{CancelReason, EventPayload, RunSucceeded};
use harness_core::file::FileKind;
use harness_core::id::{AdapterId, ConversationId, ExecutionId, IdempotencyKey, ToolCallId};
use harness_core::limits::RunLimits;
use harness_core::session::{BindingId, SessionBinding, Version};
use harness_core::time::Timestamp;
use harness_core::tool::{ToolDescriptor, ToolId, ToolOutcome, ToolPolicy};
use harness_core::trace::TraceContext;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The protocol version this crate speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// The largest frame either side accepts, in bytes (16 MiB): a longer one is a protocol
/// error, refused before its body is read.
pub const MAX_FRAME_BYTES: usize = 16 << 20;

/// A request id, chosen by the side that asks; unique among that side's open requests.
pub(crate) type Id = u64;

/// What the control plane sends the worker.
#[derive(Debug, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub(crate) enum ToWorker {
    /// The first frame, once: the runtime to build.
    Start {
        protocol: u32,
        context: Box<WireContext>,
    },
    Initialize {
        id: Id,
    },
    Stream {
        id: Id,
        turn: Box<WireTurn>,
    },
    Resume {
        id: Id,
        response: Box<ActionResponse>,
    },
    PendingAction {
        id: Id,
    },
    /// Takes over a pause another runtime made: answered by `restored`.
    Restore {
        id: Id,
        restored: Box<WireRestored>,
    },
    Cancel {
        id: Id,
        reason: CancelReason,
    },
    Restart {
        id: Id,
    },
    Cleanup {
        id: Id,
    },
    /// The answer to the worker's `state*` request `id`.
    StateReply {
        id: Id,
        result: WireOutcome<StateAnswer, WireStateError>,
    },
    /// The answer to the worker's `fileRead` `id`: the bytes, base64.
    FileReply {
        id: Id,
        result: WireOutcome<String, PublicError>,
    },
    /// The answer to the worker's `toolCall` `id`.
    ToolReply {
        id: Id,
        outcome: ToolOutcome,
    },
}

/// What the worker sends the control plane.
#[derive(Debug, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub(crate) enum FromWorker {
    /// The answer to `start`: the runtime is built (or could not be).
    Ready {
        protocol: u32,
        result: WireOutcome<(), PublicError>,
    },
    Initialized {
        id: Id,
        result: WireOutcome<Option<String>, PublicError>,
    },
    /// One item of the segment `id` asked by `stream` or `resume`.
    Event {
        id: Id,
        event: Box<WireEvent>,
    },
    /// The segment `id` ended: its runtime's stream is over.
    SegmentEnd {
        id: Id,
    },
    PendingAction {
        id: Id,
        action: Option<Box<ActionRequest>>,
    },
    Restored {
        id: Id,
        result: WireOutcome<(), PublicError>,
    },
    Cancelled {
        id: Id,
        requested: bool,
    },
    Restarted {
        id: Id,
        result: WireOutcome<(), PublicError>,
    },
    CleanedUp {
        id: Id,
    },
    /// Thread state of the worker's own binding: the request names a key, never a binding.
    StateGet {
        id: Id,
        key: String,
    },
    StatePut {
        id: Id,
        key: String,
        /// The value, base64 (standard alphabet, padded).
        value: String,
        expected: Option<Version>,
    },
    StateDelete {
        id: Id,
        key: String,
        expected: Version,
    },
    StateListKeys {
        id: Id,
    },
    /// Bytes of one of the runtime's input files (by its place among the files of the
    /// turns it was given, from 0), at most [`FILE_CHUNK_BYTES`] from `offset`.
    FileRead {
        id: Id,
        index: usize,
        offset: u64,
        len: u64,
    },
    /// A call of a granted tool, by its id.
    ToolCall {
        id: Id,
        tool: ToolId,
        call_id: ToolCallId,
        arguments: Value,
        /// What is left of the call's deadline, if bounded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deadline_ms: Option<u64>,
    },
    Heartbeat,
}

/// `Ok` or `Err`, spelled for the wire.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) enum WireOutcome<T, E> {
    Ok(T),
    Err(E),
}

impl<T, E> From<Result<T, E>> for WireOutcome<T, E> {
    fn from(r: Result<T, E>) -> Self {
        match r {
            Ok(t) => Self::Ok(t),
            Err(e) => Self::Err(e),
        }
    }
}

impl<T, E> From<WireOutcome<T, E>> for Result<T, E> {
    fn from(r: WireOutcome<T, E>) -> Self {
        match r {
            WireOutcome::Ok(t) => Ok(t),
            WireOutcome::Err(e) => Err(e),
        }
    }
}

/// One item of a segment.
#[derive(Debug, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub(crate) enum WireEvent {
    /// Content: an event payload of a content kind (a lifecycle, action or artifact kind is
    /// a protocol error).
    Content {
        payload: EventPayload,
    },
    Artifact {
        descriptor: ArtifactDescriptor,
    },
    /// Terminal: the segment pauses on this action.
    Action {
        request: ActionRequest,
    },
    /// Terminal: the run succeeded.
    Completed {
        result: RunSucceeded,
    },
    /// Terminal: the segment failed.
    Failed {
        error: PublicError,
    },
}

/// What a `state*` request answers.
#[derive(Debug, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub(crate) enum StateAnswer {
    Entry {
        value: Option<String>,
        version: Option<Version>,
    },
    Written {
        version: Version,
    },
    Deleted,
    Keys {
        keys: Vec<String>,
    },
}

/// A thread state failure, as the worker's runtime sees it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub(crate) enum WireStateError {
    VersionConflict {
        key: String,
        expected: Option<Version>,
        actual: Option<Version>,
    },
    StaleEpoch {
        binding: BindingId,
        epoch: u64,
        current: u64,
    },
    Unavailable {
        reason: String,
    },
}

/// A granted tool: what the worker may call, and the approval its calls need.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct WireTool {
    pub(crate) descriptor: ToolDescriptor,
    pub(crate) needs_approval: bool,
}

/// The narrowed construction context of the worker's runtime.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct WireContext {
    pub(crate) adapter: AdapterId,
    pub(crate) execution_id: ExecutionId,
    pub(crate) options: Value,
    pub(crate) model: Option<String>,
    /// Whether the request chose `model` (else it is the operator's default).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) model_by_request: bool,
    /// The conversation's id, without its caller (the worker hosts one runtime: the id is
    /// enough to key what it keeps, and the caller stays in the control plane).
    pub(crate) conversation: Option<ConversationId>,
    pub(crate) binding: Option<SessionBinding>,
    pub(crate) prompt: Option<String>,
    /// The pauses the caller permits (the control plane's driver enforces it too).
    #[serde(default, skip_serializing_if = "is_permit_all")]
    pub(crate) interrupt_policy: harness_core::context::InterruptPolicy,
    pub(crate) tools: Vec<WireTool>,
    pub(crate) limits: RunLimits,
    /// How the caller takes the output (a hosted runtime may ask its provider for whole
    /// responses).
    #[serde(default)]
    pub(crate) delivery: harness_core::adapter::Delivery,
    /// The operator's middleware rules, for the runtime's own tools (an ACP agent's
    /// permission requests), without `results.redact`: results of portable tools are
    /// redacted by the control plane's handles, and its secrets stay out of the sandbox.
    #[serde(default, skip_serializing_if = "is_allow_all")]
    pub(crate) middleware: harness_core::middleware::MiddlewareConfig,
    /// Whether the runtime gets thread state (of `binding`, through the control plane).
    pub(crate) thread_state: bool,
    /// How often the worker sends `heartbeat`.
    pub(crate) heartbeat_ms: u64,
    /// The adapter's own settings for its worker (the operator's configuration of the
    /// instance), opaque to the protocol.
    pub(crate) settings: Value,
}

fn is_permit_all(policy: &harness_core::context::InterruptPolicy) -> bool {
    *policy == harness_core::context::InterruptPolicy::default()
}

fn is_allow_all(config: &harness_core::middleware::MiddlewareConfig) -> bool {
    *config == harness_core::middleware::MiddlewareConfig::default()
}

/// The most one `fileRead` answers, in bytes (8 MiB: base64 of it fits a frame).
pub const FILE_CHUNK_BYTES: u64 = 8 << 20;

/// An input file the control plane validated: what it is, not its bytes (read on demand).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct WireFile {
    pub(crate) name: String,
    pub(crate) media_type: harness_core::artifact::MediaType,
    pub(crate) image: bool,
    pub(crate) size: u64,
}

impl WireFile {
    pub(crate) fn kind(&self) -> FileKind {
        if self.image {
            FileKind::Image
        } else {
            FileKind::Document
        }
    }
}

/// The principal's safe projection ([`SafeUserContext`](harness_core::context::SafeUserContext)).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct WireUser {
    pub(crate) id: String,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub(crate) attributes: std::collections::BTreeMap<String, String>,
}

/// One turn's input.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct WireTurn {
    pub(crate) conversation_id: Option<ConversationId>,
    pub(crate) message: String,
    pub(crate) files: Vec<WireFile>,
    /// The principal's safe projection (never a credential).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) user: Option<WireUser>,
    pub(crate) client_context: Map<String, Value>,
    pub(crate) trace_context: Option<TraceContext>,
    pub(crate) deadline: Option<Timestamp>,
    pub(crate) idempotency_key: Option<IdempotencyKey>,
}

/// What the store kept of a paused execution (see
/// [`Restored`](harness_core::adapter::Restored)).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct WireRestored {
    pub(crate) turn: WireTurn,
    pub(crate) pending: ActionRequest,
    pub(crate) log: Vec<harness_core::event::Event>,
    pub(crate) answers: Vec<ActionResponse>,
}

/// A public error back into an error: the category, code, message and retry advice the
/// worker sent (its message is the worker's, redacted on the way out like any other).
pub(crate) fn from_public(e: PublicError) -> HarnessError {
    let mut err = HarnessError::new(e.category, e.message)
        .with_code(e.code)
        .with_retryable(e.retryable)
        .with_side_effects(e.side_effects_may_have_occurred);
    if let Some(ms) = e.retry_after_ms {
        err = err.with_retry_after(Duration::from_millis(ms));
    }
    if let Some(code) = e.provider_code.as_deref() {
        err = err.with_provider_code(code);
    }
    err
}

pub(crate) fn policy_of(tool: &WireTool) -> ToolPolicy {
    if tool.needs_approval {
        ToolPolicy::new().needs_approval()
    } else {
        ToolPolicy::new()
    }
}

/// The error that ends a worker that broke the protocol.
pub(crate) fn violation(what: impl Into<String>) -> HarnessError {
    let what = what.into();
    HarnessError::new(
        harness_core::error::ErrorCategory::Protocol,
        "the sandbox worker broke the worker protocol",
    )
    .with_code(ErrorCode::WORKER_PROTOCOL)
    .with_diagnostic(what)
}

/// One frame: the length of the JSON body (4 bytes, big-endian), then the body.
pub(crate) fn encode_frame<T: Serialize>(message: &T) -> std::io::Result<Vec<u8>> {
    let mut frame = vec![0u8; 4];
    serde_json::to_writer(&mut frame, message).map_err(std::io::Error::other)?;
    let body = frame.len() - 4;
    if body > MAX_FRAME_BYTES {
        return Err(std::io::Error::other(format!(
            "a frame of {body} bytes is over the protocol's {MAX_FRAME_BYTES}"
        )));
    }
    let len = u32::try_from(body).map_err(std::io::Error::other)?;
    frame[..4].copy_from_slice(&len.to_be_bytes());
    Ok(frame)
}

/// Writes one frame, and flushes.
pub(crate) async fn write_frame<W: AsyncWrite + Unpin + ?Sized, T: Serialize>(
    writer: &mut W,
    message: &T,
) -> std::io::Result<()> {
    writer.write_all(&encode_frame(message)?).await?;
    writer.flush().await
}

/// Why a frame could not be read.
#[derive(Debug)]
pub(crate) enum FrameError {
    /// The stream ended cleanly between frames.
    Closed,
    /// The stream failed or ended inside a frame.
    Io(std::io::Error),
    /// The frame broke the protocol: its length, or a body that is not the message.
    Protocol(String),
}

/// Reads one frame and decodes it as `T`. The length is checked before the body is read,
/// so a hostile length allocates nothing.
pub(crate) async fn read_frame<R: AsyncRead + Unpin + ?Sized, T: for<'de> Deserialize<'de>>(
    reader: &mut R,
) -> Result<T, FrameError> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match reader.read(&mut len[got..]).await {
            Ok(0) if got == 0 => return Err(FrameError::Closed),
            Ok(0) => {
                return Err(FrameError::Io(std::io::ErrorKind::UnexpectedEof.into()));
            }
            Ok(n) => got += n,
            Err(e) => return Err(FrameError::Io(e)),
        }
    }
    let len = u32::from_be_bytes(len) as usize;
    if len == 0 || len > MAX_FRAME_BYTES {
        return Err(FrameError::Protocol(format!(
            "a frame of {len} bytes: frames are 1 to {MAX_FRAME_BYTES} bytes"
        )));
    }
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).await.map_err(FrameError::Io)?;
    serde_json::from_slice(&body).map_err(|e| FrameError::Protocol(format!("a bad message: {e}")))
}
