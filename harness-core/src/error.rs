//! The error model: one category per error, a stable code, retry advice, and two faces.
//!
//! A [`HarnessError`] carries everything the runtime knows, including an internal diagnostic
//! for operators. It deliberately does **not** implement `Serialize`: the only way to put an
//! error on the wire is [`HarnessError::public`], which yields the [`PublicError`] safe
//! projection (category, code, safe message, retry advice, sanitized provider code). So a
//! diagnostic cannot reach a client by accident: it does not type-check.
//!
//! ```
//! use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
//!
//! let err = HarnessError::new(ErrorCategory::Throttled, "the provider is rate limiting")
//!     .with_diagnostic("429 from api.example.com, token sk-live-123")
//!     .with_retry_after(std::time::Duration::from_secs(2));
//! assert!(err.retryable());
//! let wire = serde_json::to_value(err.public()).unwrap();
//! assert_eq!(wire["category"], "throttled");
//! assert_eq!(wire["code"], "THROTTLED");
//! assert_eq!(wire["retryAfterMs"], 2000);
//! assert!(!wire.to_string().contains("sk-live-123"));
//! ```
//!
//! # Tower's own middleware
//!
//! Stock tower middleware (`timeout`, `load_shed`, `buffer`) fails with [`tower::BoxError`].
//! `HarnessError: From<BoxError>` classifies it, so such middleware can sit between this
//! project's layers (which accept any inner error that is `Into<HarnessError>` and convert it
//! once, at their edge) or under `?`:
//!
//! | inside the `BoxError` | becomes |
//! |---|---|
//! | a [`HarnessError`] (what our services fail with, boxed by the middleware) | itself, unchanged |
//! | `tower::timeout::error::Elapsed` | `timeout`, `SERVICE_TIMEOUT` |
//! | `tower::load_shed::error::Overloaded` | `capacity`, `LOAD_SHED` (retryable) |
//! | `tower::buffer::error::ServiceError` | what the buffered service failed with, classified by these rules |
//! | `tower::buffer::error::Closed` | `unavailable`, `SERVICE_CLOSED` |
//! | anything else | `internal`, `INTERNAL`: its text in the diagnostic only, never in the message |
//!
//! ```
//! use std::time::Duration;
//! use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
//! use tower::{BoxError, ServiceBuilder, ServiceExt, service_fn};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let slow = service_fn(|(): ()| async {
//!     tokio::time::sleep(Duration::from_secs(60)).await;
//!     Ok::<_, HarnessError>(())
//! });
//! let service = ServiceBuilder::new()
//!     .map_err(HarnessError::from) // BoxError -> HarnessError, once, at the edge
//!     .timeout(Duration::from_millis(10))
//!     .service(slow);
//! let err = service.oneshot(()).await.unwrap_err();
//! assert_eq!(err.category(), ErrorCategory::Timeout);
//! assert_eq!(err.code(), &ErrorCode::SERVICE_TIMEOUT);
//!
//! // A HarnessError that travelled boxed comes back as it was.
//! let refused = HarnessError::new(ErrorCategory::Configuration, "no");
//! assert_eq!(HarnessError::from(BoxError::from(refused.clone())), refused);
//! // Anything else is `internal`, its text for operators only.
//! let odd = HarnessError::from(BoxError::from("disk on fire at /srv/secret"));
//! assert_eq!(odd.category(), ErrorCategory::Internal);
//! assert!(!odd.message().contains("/srv/secret"));
//! assert!(odd.diagnostic().unwrap().contains("/srv/secret"));
//! # });
//! ```
//!
//! Decisions where tower leaves it open:
//!
//! - **`From<BoxError>`, not tonic's way.** tonic's layers are generic over `E: Into<BoxError>`
//!   and fail with `BoxError`: every caller then downcasts to learn what happened. Here the
//!   typed error stays the error of every layer and service (callers match on its category and
//!   code, the server maps it to a status) and the conversion happens once, where a tower
//!   middleware's `BoxError` meets one of ours. The cost: a foreign error's *type* is lost
//!   (only its text is kept, in the diagnostic).
//! - **Retry advice** is the category's default: a load shed is retryable; an elapsed timeout
//!   is not (the call it dropped may have started work); a closed buffer is `unavailable`, so
//!   retryable elsewhere, although that buffer takes no more requests.
//! - **Only the known wrappers are looked through.** A foreign error whose `source()` is a
//!   `HarnessError` is still `internal`: its type says nothing about what the wrapper meant.
//!
//! Every code the project emits is a constant of [`ErrorCode`], listed once in [`CATALOG`]
//! (providers' own codes travel separately, as the sanitized `providerCode`):
//!
#![doc = include_str!("../ERROR_CODES.md")]

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The eleven error categories of the adapter contract.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCategory {
    /// Invalid options, incompatible model. Not retryable.
    Configuration,
    /// Missing or expired provider credentials. Usually not retryable.
    Authentication,
    /// Provider or IAM denial. Not retryable.
    Authorization,
    /// Concurrency quota or local capacity. Retryable.
    Capacity,
    /// Provider rate limit. Retryable.
    Throttled,
    /// Provider, sandbox worker or SDK subprocess unavailable. Retryable.
    Unavailable,
    /// Initialization, turn or tool deadline. Retryable by policy.
    Timeout,
    /// Malformed events or invalid event order. Not retryable.
    Protocol,
    /// Native state could not be saved or loaded. Retryable by policy.
    Persistence,
    /// Caller or shutdown cancellation. Not retryable.
    Cancelled,
    /// An unexpected adapter defect. Not retryable.
    Internal,
}

impl ErrorCategory {
    /// Every category, in contract order.
    pub const ALL: [Self; 11] = [
        Self::Configuration,
        Self::Authentication,
        Self::Authorization,
        Self::Capacity,
        Self::Throttled,
        Self::Unavailable,
        Self::Timeout,
        Self::Protocol,
        Self::Persistence,
        Self::Cancelled,
        Self::Internal,
    ];

    /// The wire name (`throttled`, ...).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Configuration => "configuration",
            Self::Authentication => "authentication",
            Self::Authorization => "authorization",
            Self::Capacity => "capacity",
            Self::Throttled => "throttled",
            Self::Unavailable => "unavailable",
            Self::Timeout => "timeout",
            Self::Protocol => "protocol",
            Self::Persistence => "persistence",
            Self::Cancelled => "cancelled",
            Self::Internal => "internal",
        }
    }

    /// Whether errors of this category are retryable unless said otherwise.
    ///
    /// `capacity`, `throttled` and `unavailable` are; `timeout` and `persistence` are
    /// "policy" in the contract and default to not retryable here: a retry policy opts in.
    #[must_use]
    pub const fn retryable_by_default(self) -> bool {
        matches!(self, Self::Capacity | Self::Throttled | Self::Unavailable)
    }

    /// The generic code used when an error names no more specific one.
    #[must_use]
    pub const fn default_code(self) -> ErrorCode {
        match self {
            Self::Configuration => ErrorCode::CONFIGURATION,
            Self::Authentication => ErrorCode::AUTHENTICATION,
            Self::Authorization => ErrorCode::AUTHORIZATION,
            Self::Capacity => ErrorCode::CAPACITY,
            Self::Throttled => ErrorCode::THROTTLED,
            Self::Unavailable => ErrorCode::UNAVAILABLE,
            Self::Timeout => ErrorCode::TIMEOUT,
            Self::Protocol => ErrorCode::PROTOCOL,
            Self::Persistence => ErrorCode::PERSISTENCE,
            Self::Cancelled => ErrorCode::CANCELLED,
            Self::Internal => ErrorCode::INTERNAL,
        }
    }
}

impl fmt::Display for ErrorCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stable, SCREAMING_SNAKE error code (`ACTION_ALREADY_RESOLVED`).
///
/// ```
/// use harness_core::error::ErrorCode;
/// assert_eq!(ErrorCode::ACTION_ALREADY_RESOLVED.as_str(), "ACTION_ALREADY_RESOLVED");
/// assert!("not_screaming".parse::<ErrorCode>().is_err());
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ErrorCode(Cow<'static, str>);

const fn is_code(s: &str) -> bool {
    let b = s.as_bytes();
    if b.is_empty() || b.len() > 64 || !b[0].is_ascii_uppercase() {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if !(b[i].is_ascii_uppercase() || b[i].is_ascii_digit() || b[i] == b'_') {
            return false;
        }
        i += 1;
    }
    true
}

/// One stable code of the [`CATALOG`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ErrorCodeDef {
    name: &'static str,
    category: Option<ErrorCategory>,
    meaning: &'static str,
}

impl ErrorCodeDef {
    /// The code, as it goes on the wire.
    #[must_use]
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The category errors with this code have; `None` for the codes of a tool's bounded
    /// failure (a tool outcome the model sees, not an execution's error).
    #[must_use]
    pub const fn category(&self) -> Option<ErrorCategory> {
        self.category
    }

    /// What it means.
    #[must_use]
    pub fn meaning(&self) -> &'static str {
        self.meaning.trim()
    }
}

macro_rules! codes {
    ($($(#[doc = $doc:literal])+ $name:ident: $category:expr;)*) => {
        impl ErrorCode {
            $(
                $(#[doc = $doc])+
                pub const $name: Self = Self::from_static(stringify!($name));
            )*
        }

        /// Every error code this project emits, each once, with its category and meaning: a
        /// test keeps it in step with the code (no code is made anywhere else) and with the
        /// table in the [module docs](self).
        pub const CATALOG: &[ErrorCodeDef] = &[
            $(ErrorCodeDef {
                name: stringify!($name),
                category: $category,
                meaning: concat!($($doc),+),
            },)*
        ];
    };
}

use ErrorCategory as C;

codes! {
    /// An error that names no more specific code: a configuration problem.
    CONFIGURATION: Some(C::Configuration);
    /// An error that names no more specific code: provider credentials are missing or expired.
    AUTHENTICATION: Some(C::Authentication);
    /// An error that names no more specific code: the provider denied the operation.
    AUTHORIZATION: Some(C::Authorization);
    /// An error that names no more specific code: a concurrency quota or local capacity.
    CAPACITY: Some(C::Capacity);
    /// An error that names no more specific code: the provider is rate limiting.
    THROTTLED: Some(C::Throttled);
    /// An error that names no more specific code: the provider or its process is unavailable.
    UNAVAILABLE: Some(C::Unavailable);
    /// An error that names no more specific code: a deadline passed.
    TIMEOUT: Some(C::Timeout);
    /// An error that names no more specific code: malformed output or invalid order.
    PROTOCOL: Some(C::Protocol);
    /// An error that names no more specific code: native state could not be saved or loaded.
    PERSISTENCE: Some(C::Persistence);
    /// An error that names no more specific code: the work was cancelled.
    CANCELLED: Some(C::Cancelled);
    /// An error that names no more specific code: an unexpected defect.
    INTERNAL: Some(C::Internal);
    /// A second answer to an action that was already answered: a conflict (the server
    /// answers 409), `configuration` as every request the caller must change rather than
    /// retry is: none of the contract's categories is a conflict.
    ACTION_ALREADY_RESOLVED: Some(C::Configuration);
    /// No pending action has that id.
    ACTION_NOT_FOUND: Some(C::Configuration);
    /// The answer names a revision other than the pending one.
    ACTION_REVISION_STALE: Some(C::Configuration);
    /// The answer does not fit the request (wrong kind, invalid values, undeclared decision).
    ACTION_RESPONSE_INVALID: Some(C::Configuration);
    /// A caller's credential for a tool provider cannot be taken: too short to be redacted
    /// exactly, too long, or for a provider the instance does not have.
    CALLER_CREDENTIAL_INVALID: Some(C::Configuration);
    /// The same idempotency key was used with a different request.
    IDEMPOTENCY_CONFLICT: Some(C::Configuration);
    /// A required capability is not supported at the required level.
    CAPABILITY_UNSUPPORTED: Some(C::Configuration);
    /// Adapter options do not match the adapter's options schema.
    OPTIONS_INVALID: Some(C::Configuration);
    /// Every execution slot of a capacity layer is busy; retry later.
    CAPACITY_EXHAUSTED: Some(C::Capacity);
    /// The adapter produced events out of order or malformed.
    EVENT_ORDER_VIOLATION: Some(C::Protocol);
    /// The adapter produced an event or a pause its descriptor declares unusable (reasoning
    /// without `stream.reasoning`, usage without `stream.usage`, a pause for tool approval or
    /// form input without `interrupt.tool_approval` or `interrupt.form_input`, one approval
    /// of several calls without `interrupt.multi_tool`).
    CAPABILITY_VIOLATED: Some(C::Protocol);
    /// The adapter panicked; the panic text is in the diagnostic only.
    ADAPTER_PANICKED: Some(C::Internal);
    /// A layer of the runtime stack panicked.
    LAYER_PANICKED: Some(C::Internal);
    /// The execution reached its limit of events (`ServiceConfig::max_events`, or
    /// `RunLimits::max_events` when lower).
    EVENT_LIMIT_REACHED: Some(C::Capacity);
    /// The execution passed its wall-time limit (`RunLimits::wall_time`), in any state.
    LIMIT_WALL_TIME: Some(C::Timeout);
    /// The execution would have started more tool calls than its limit
    /// (`RunLimits::max_tool_calls`); the call past it was not started.
    LIMIT_TOOL_CALLS: Some(C::Capacity);
    /// The execution made as many model requests as its limit allows
    /// (`RunLimits::max_model_turns`) and needed another.
    LIMIT_MODEL_TURNS: Some(C::Capacity);
    /// The execution's message and reasoning text passed its limit of bytes
    /// (`RunLimits::max_output_bytes`); the text past it was not appended.
    LIMIT_OUTPUT_BYTES: Some(C::Capacity);
    /// The execution's reported input and output tokens passed its limit
    /// (`RunLimits::max_tokens`).
    LIMIT_TOKENS: Some(C::Capacity);
    /// A run limit was set that the adapter cannot honour (tokens or model turns on an
    /// adapter that does not report usage); nothing ran.
    LIMIT_UNENFORCEABLE: Some(C::Configuration);
    /// The adapter and the control plane share no contract version; nothing ran.
    CONTRACT_VERSION_UNSUPPORTED: Some(C::Configuration);
    /// The idempotency store holds as many records as it may, none of them ended.
    IDEMPOTENCY_STORE_FULL: Some(C::Capacity);
    /// The execution's driver was lost (its Tokio runtime shut down) before its end.
    EXECUTION_LOST: Some(C::Internal);
    /// The execution has already ended.
    EXECUTION_TERMINAL: Some(C::Configuration);
    /// The provider (its process or connection) was lost while the execution awaited an
    /// action: nothing is left to continue from the answer.
    PROVIDER_LOST: Some(C::Unavailable);
    /// The replica that owned the execution was lost (its lease lapsed) before its end, and
    /// the execution could not be continued where it stood; starting it again may succeed.
    OWNER_LOST: Some(C::Unavailable);
    /// Creating and initializing the runtime took longer than its initialization deadline.
    INIT_TIMEOUT: Some(C::Timeout);
    /// A run segment took longer than its turn deadline.
    TURN_TIMEOUT: Some(C::Timeout);
    /// The request's deadline passed while the execution was starting or running.
    DEADLINE_EXCEEDED: Some(C::Timeout);
    /// A stale version: the thread state changed since it was read.
    STATE_VERSION_CONFLICT: Some(C::Persistence);
    /// A stale epoch: the session was cleared since the handle was made.
    STATE_EPOCH_STALE: Some(C::Persistence);
    /// The binding belongs to another conversation.
    STATE_BINDING_MISMATCH: Some(C::Persistence);
    /// A thread-state value could not be encoded or decoded.
    STATE_CODEC: Some(C::Persistence);
    /// The thread-state store could not save or load.
    STATE_UNAVAILABLE: Some(C::Persistence);
    /// The execution store's disk is full (or its size limit reached): nothing was written;
    /// retry once space is freed.
    STORE_FULL: Some(C::Persistence);
    /// The server holds no execution of that id for the caller (another principal's
    /// executions are not found either).
    EXECUTION_NOT_FOUND: Some(C::Configuration);
    /// The server has no endpoint at that path (or not for that method).
    ENDPOINT_NOT_FOUND: Some(C::Configuration);
    /// The server has no adapter instance of that id.
    ADAPTER_NOT_FOUND: Some(C::Configuration);
    /// The request's body, query or headers could not be read: the message names what.
    REQUEST_INVALID: Some(C::Configuration);
    /// The request's body is larger than the server accepts.
    REQUEST_TOO_LARGE: Some(C::Configuration);
    /// The request carries no valid credential for the server.
    CREDENTIAL_INVALID: Some(C::Authentication);
    /// No sandbox could be made for an agent the operator runs in one (its backend is missing
    /// or cannot create namespaces here, or a limit needs a cgroup the host does not give):
    /// nothing ran, and nothing runs unsandboxed instead.
    SANDBOX_UNAVAILABLE: Some(C::Unavailable);
    /// A sandboxed agent reached its profile's limit of memory, processes or output bytes:
    /// the sandbox was torn down with everything in it.
    SANDBOX_LIMIT: Some(C::Capacity);
    /// A sandboxed agent outlived its profile's wall time: the sandbox was torn down.
    SANDBOX_WALL_TIME: Some(C::Timeout);
    /// A sandbox worker broke the Sandbox Worker Protocol (a malformed or oversized frame, a
    /// message out of order, an ask beyond its grants): the worker was ended, the server
    /// was not.
    WORKER_PROTOCOL: Some(C::Protocol);
    /// A sandbox worker is gone (it exited, closed its stream or missed its lease) before
    /// its runtime's work was done.
    WORKER_LOST: Some(C::Unavailable);
    /// A tower timeout layer (`ServiceBuilder::timeout`) passed its deadline before the
    /// service it wraps answered (`tower::timeout::error::Elapsed`).
    SERVICE_TIMEOUT: Some(C::Timeout);
    /// A tower load-shed layer (`ServiceBuilder::load_shed`) refused the request because the
    /// service below it was not ready (`tower::load_shed::error::Overloaded`); retry later.
    LOAD_SHED: Some(C::Capacity);
    /// A tower buffer's worker is gone (`tower::buffer::error::Closed`: its runtime shut
    /// down, or it was dropped): that buffer takes no more requests.
    SERVICE_CLOSED: Some(C::Unavailable);
    /// A tool failed in its own way (the default code of a bounded failure).
    TOOL_FAILED: None;
    /// A tool's arguments did not match its input schema; the tool was not called.
    TOOL_ARGUMENTS_INVALID: None;
    /// A tool panicked; the panic text is not exposed.
    TOOL_PANICKED: None;
    /// A tool call's deadline passed: before the tool was called (it was not), or while it
    /// ran (it was stopped).
    TOOL_DEADLINE_EXCEEDED: None;
    /// A tool call was stopped because its execution was cancelled.
    TOOL_CANCELLED: None;
    /// A tool's output was larger than its policy allows; the output was dropped.
    TOOL_OUTPUT_TOO_LARGE: None;
    /// The operator's middleware policy denies the tool; the call did not run.
    TOOL_DENIED_BY_POLICY: None;
    /// A tool call's arguments were larger than the operator's middleware policy allows;
    /// the call did not run.
    TOOL_ARGUMENTS_TOO_LARGE: None;
    /// A request selects a tool (or tool provider) the service does not offer, or a
    /// provider does not offer a tool selected under it.
    TOOL_NOT_FOUND: Some(C::Configuration);
    /// A model kept calling tools past its adapter's bound on rounds of tool calls.
    TOOL_ROUNDS_EXHAUSTED: Some(C::Configuration);
    /// A request names an uploaded file that does not exist for its caller (never uploaded,
    /// past its retention, or another caller's).
    FILE_NOT_FOUND: Some(C::Configuration);
    /// An input file is larger than the operator's limit or the adapter's, or the files
    /// together are larger than the operator's total.
    FILE_TOO_LARGE: Some(C::Configuration);
    /// A request gives more input files than the operator's limit or the adapter's.
    FILES_TOO_MANY: Some(C::Configuration);
    /// An input file's content is of a type the service or the adapter does not take.
    FILE_TYPE_UNSUPPORTED: Some(C::Configuration);
    /// An input file's declared media type is not what its content is (the content decides).
    FILE_TYPE_MISMATCH: Some(C::Configuration);
    /// The adapter does not take input files of this kind (`input.images` or
    /// `input.documents` unusable, or the harness behind it declines them).
    FILE_MODALITY_UNSUPPORTED: Some(C::Configuration);
    /// A request asks for a skill this caller cannot see on this service: none of that name
    /// is installed and offered, or it is restricted to other principals (the two are
    /// indistinguishable).
    SKILL_NOT_FOUND: Some(C::Configuration);
    /// A request asks for a skill the operator blocks on this service (its block list),
    /// whether or not one of that name is installed.
    SKILL_BLOCKED: Some(C::Configuration);
    /// The request names a model the instance does not offer (or any model, on an instance
    /// whose operator offers no choice); the message lists the models it offers.
    MODEL_NOT_ALLOWED: Some(C::Configuration);
    /// The request's prompt parameters do not fit the instance's prompt template: an
    /// unknown parameter, a required one missing, a value too long or with control
    /// characters, or parameters for an instance without a template. The message names it.
    PROMPT_PARAMETER_INVALID: Some(C::Configuration);
    /// The runtime paused for a kind of action the request's interrupt policy does not
    /// permit (`interruptPolicy.allow`): the run fails instead of pausing.
    INTERRUPT_FORBIDDEN: Some(C::Configuration);
    /// The action was not answered within the request's interrupt policy
    /// (`interruptPolicy.answerWithinMs`): it is withdrawn and the run fails.
    ACTION_EXPIRED: Some(C::Timeout);
    /// A resume decision made for another session binding (another conversation, or an
    /// epoch a clear left behind) was presented to a runtime: refused.
    ACTION_BINDING_MISMATCH: Some(C::Protocol);
}

impl ErrorCode {
    /// A code from a literal; fails to compile (in `const` context) or panics if the literal is
    /// not SCREAMING_SNAKE, so invalid literals are caught where they are written.
    #[must_use]
    pub const fn from_static(code: &'static str) -> Self {
        assert!(
            is_code(code),
            "error codes are SCREAMING_SNAKE, 1 to 64 chars"
        );
        Self(Cow::Borrowed(code))
    }

    /// The code as a string slice.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An error code was not SCREAMING_SNAKE.
#[derive(Debug, Clone, thiserror::Error)]
#[error("invalid error code `{0}`: expected SCREAMING_SNAKE such as ACTION_ALREADY_RESOLVED")]
pub struct InvalidErrorCode(String);

impl FromStr for ErrorCode {
    type Err = InvalidErrorCode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if is_code(s) {
            Ok(Self(Cow::Owned(s.to_owned())))
        } else {
            Err(InvalidErrorCode(s.chars().take(80).collect()))
        }
    }
}

impl fmt::Debug for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for ErrorCode {
    fn schema_name() -> Cow<'static, str> {
        "ErrorCode".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string", "pattern": "^[A-Z][A-Z0-9_]{0,63}$" })
    }
}

/// Keeps a provider's error code only when it is short and plainly an identifier, so that
/// a provider cannot smuggle a message, token or path through the code field.
fn sanitize_provider_code(code: &str) -> Option<Box<str>> {
    let ok = (1..=64).contains(&code.len())
        && code
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    ok.then(|| code.into())
}

/// An error with everything the runtime knows about it.
///
/// `Display` shows only the safe message; `Debug` also shows the internal diagnostic, for
/// operators' logs. Only [`HarnessError::public`] may cross to a client.
#[derive(Clone, PartialEq, Eq)]
pub struct HarnessError {
    category: ErrorCategory,
    code: ErrorCode,
    message: Cow<'static, str>,
    retryable: bool,
    retry_after: Option<Duration>,
    provider_code: Option<Box<str>>,
    side_effects: bool,
    diagnostic: Option<Box<str>>,
}

impl HarnessError {
    /// An error of `category` with a safe public `message`, the category's default code and
    /// retry advice, and no side effects.
    #[must_use]
    pub fn new(category: ErrorCategory, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            category,
            code: category.default_code(),
            message: message.into(),
            retryable: category.retryable_by_default(),
            retry_after: None,
            provider_code: None,
            side_effects: false,
            diagnostic: None,
        }
    }

    /// Replaces the code.
    #[must_use]
    pub fn with_code(mut self, code: ErrorCode) -> Self {
        self.code = code;
        self
    }

    /// Overrides whether the error is retryable. Errors whose output or side effects may have
    /// occurred stay non-retryable whatever this says (see [`HarnessError::retryable`]).
    #[must_use]
    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    /// Advises waiting at least `after` before a retry.
    #[must_use]
    pub fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// Records the provider's own code, kept only if it is a short identifier
    /// (`[A-Za-z0-9_.-]{1,64}`); anything else is dropped as possibly sensitive.
    #[must_use]
    pub fn with_provider_code(mut self, code: &str) -> Self {
        self.provider_code = sanitize_provider_code(code);
        self
    }

    /// Marks that output or side effects may have occurred before the error.
    #[must_use]
    pub fn with_side_effects(mut self, may_have_occurred: bool) -> Self {
        self.side_effects = may_have_occurred;
        self
    }

    /// Attaches an internal diagnostic (never serialized toward a client).
    #[must_use]
    pub fn with_diagnostic(mut self, diagnostic: impl Into<String>) -> Self {
        self.diagnostic = Some(diagnostic.into().into_boxed_str());
        self
    }

    /// The category.
    #[must_use]
    pub fn category(&self) -> ErrorCategory {
        self.category
    }

    /// The stable code.
    #[must_use]
    pub fn code(&self) -> &ErrorCode {
        &self.code
    }

    /// The safe public message.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether a retry may help: the error says so *and* no output or side effect may have
    /// occurred (retrying then could repeat them).
    #[must_use]
    pub fn retryable(&self) -> bool {
        self.retryable && !self.side_effects
    }

    /// The advised wait before a retry.
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// The sanitized provider code.
    #[must_use]
    pub fn provider_code(&self) -> Option<&str> {
        self.provider_code.as_deref()
    }

    /// Whether output or side effects may have occurred.
    #[must_use]
    pub fn side_effects_may_have_occurred(&self) -> bool {
        self.side_effects
    }

    /// The internal diagnostic, for operators only.
    #[must_use]
    pub fn diagnostic(&self) -> Option<&str> {
        self.diagnostic.as_deref()
    }

    /// The safe projection: the only form of an error that may reach a client.
    #[must_use]
    pub fn public(&self) -> PublicError {
        PublicError {
            category: self.category,
            code: self.code.clone(),
            message: self.message.to_string(),
            retryable: self.retryable(),
            retry_after_ms: self
                .retry_after
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            provider_code: self.provider_code.as_deref().map(str::to_owned),
            side_effects_may_have_occurred: self.side_effects,
        }
    }
}

impl fmt::Debug for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HarnessError")
            .field("category", &self.category)
            .field("code", &self.code)
            .field("message", &self.message)
            .field("retryable", &self.retryable())
            .field("retry_after", &self.retry_after)
            .field("provider_code", &self.provider_code)
            .field("side_effects", &self.side_effects)
            .field("diagnostic", &self.diagnostic)
            .finish()
    }
}

impl fmt::Display for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.category, self.message)
    }
}

impl std::error::Error for HarnessError {}

impl From<PublicError> for HarnessError {
    fn from(p: PublicError) -> Self {
        Self {
            category: p.category,
            code: p.code,
            message: p.message.into(),
            retryable: p.retryable,
            retry_after: p.retry_after_ms.map(Duration::from_millis),
            provider_code: p.provider_code.as_deref().and_then(sanitize_provider_code),
            side_effects: p.side_effects_may_have_occurred,
            diagnostic: None,
        }
    }
}

/// Classifies what a tower middleware failed with; see
/// ["Tower's own middleware"](self#towers-own-middleware).
impl From<tower::BoxError> for HarnessError {
    fn from(error: tower::BoxError) -> Self {
        match error.downcast::<Self>() {
            Ok(error) => *error,
            Err(other) => classify(&*other),
        }
    }
}

impl From<tower::timeout::error::Elapsed> for HarnessError {
    fn from(_: tower::timeout::error::Elapsed) -> Self {
        HarnessError::new(
            ErrorCategory::Timeout,
            "the service did not answer within its timeout",
        )
        .with_code(ErrorCode::SERVICE_TIMEOUT)
    }
}

impl From<tower::load_shed::error::Overloaded> for HarnessError {
    fn from(_: tower::load_shed::error::Overloaded) -> Self {
        HarnessError::new(
            ErrorCategory::Capacity,
            "the service is at capacity and shed the request; retry later",
        )
        .with_code(ErrorCode::LOAD_SHED)
    }
}

/// The rules of `From<BoxError>`, on a borrowed error (a buffer's `ServiceError` shares the error it holds).
fn classify(error: &(dyn std::error::Error + 'static)) -> HarnessError {
    if let Some(error) = error.downcast_ref::<HarnessError>() {
        return error.clone();
    }
    if error.is::<tower::timeout::error::Elapsed>() {
        return tower::timeout::error::Elapsed::new().into();
    }
    if error.is::<tower::load_shed::error::Overloaded>() {
        return tower::load_shed::error::Overloaded::new().into();
    }
    if error.is::<tower::buffer::error::Closed>() {
        return HarnessError::new(
            ErrorCategory::Unavailable,
            "the service's buffer is closed and takes no more requests",
        )
        .with_code(ErrorCode::SERVICE_CLOSED);
    }
    if error.is::<tower::buffer::error::ServiceError>()
        && let Some(inner) = error.source()
    {
        return classify(inner);
    }
    let mut diagnostic = error.to_string();
    let mut source = error.source();
    // Bounded: a hostile `source` chain cannot grow the diagnostic without end.
    for _ in 0..8 {
        let Some(cause) = source else { break };
        diagnostic.push_str(": ");
        diagnostic.push_str(&cause.to_string());
        source = cause.source();
    }
    HarnessError::new(
        ErrorCategory::Internal,
        "an unexpected error in the service stack",
    )
    .with_diagnostic(diagnostic)
}

/// The safe projection of a [`HarnessError`]: what clients see.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PublicError {
    /// The category.
    pub category: ErrorCategory,
    /// The stable code.
    pub code: ErrorCode,
    /// The safe, human-readable message.
    pub message: String,
    /// Whether a retry may help.
    pub retryable: bool,
    /// The advised wait before a retry, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// The provider's own code, when short and non-sensitive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_code: Option<String>,
    /// Whether output or side effects may have occurred before the error.
    pub side_effects_may_have_occurred: bool,
}

impl fmt::Display for PublicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.category, self.message)
    }
}

impl std::error::Error for PublicError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn side_effects_make_an_error_non_retryable() {
        let e = HarnessError::new(ErrorCategory::Unavailable, "down");
        assert!(e.retryable());
        assert!(!e.clone().with_side_effects(true).retryable());
        assert!(!e.with_side_effects(true).public().retryable);
    }

    #[test]
    fn provider_code_is_sanitized() {
        let e = HarnessError::new(ErrorCategory::Internal, "x")
            .with_provider_code("rate_limit.exceeded");
        assert_eq!(e.provider_code(), Some("rate_limit.exceeded"));
        let e =
            HarnessError::new(ErrorCategory::Internal, "x").with_provider_code("Bearer abc def");
        assert_eq!(e.provider_code(), None);
    }

    #[test]
    fn public_projection_has_no_diagnostic_and_round_trips() {
        let e = HarnessError::new(ErrorCategory::Timeout, "turn deadline")
            .with_diagnostic("secret detail")
            .with_retry_after(Duration::from_millis(1500));
        let json = serde_json::to_string(&e.public()).unwrap();
        assert!(!json.contains("secret detail"));
        let back: PublicError = serde_json::from_str(&json).unwrap();
        assert_eq!(back, e.public());
        let err = serde_json::from_str::<PublicError>(
            r#"{"category":"nope","code":"X","message":"m","retryable":false,"sideEffectsMayHaveOccurred":false}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("unknown variant `nope`"), "{err}");
    }
}
