//! A portable tool: its id, descriptor, arguments, outcome and call context, and the names
//! providers give it.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonschema::error::ValidationErrorKind;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::action::ActionRequest;
use crate::error::ErrorCode;
use crate::id::{ExecutionId, InvalidId, ToolCallId};
use crate::json_schema::CompiledSchema;

use crate::boxed::BoxFuture;

// ---------------------------------------------------------------------------------------------
// ToolId
// ---------------------------------------------------------------------------------------------

/// The pattern every [`ToolId`] matches (and at most [`TOOL_ID_MAX_LEN`] characters).
pub const TOOL_ID_PATTERN: &str = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$";
/// The longest [`ToolId`], in characters.
pub const TOOL_ID_MAX_LEN: usize = 128;
const TOOL_ID_EXPECTED: &str = "dot-separated lowercase segments matching \
     ^[a-z][a-z0-9_]*(\\.[a-z][a-z0-9_]*)*$, at most 128 characters (e.g. github.create_issue)";

/// The stable, provider-independent id of a tool: dot-separated lowercase segments, such as
/// `github.create_issue`, at most [`TOOL_ID_MAX_LEN`] characters.
///
/// Provider tool names are derived from it with [`ProviderToolNames`]; the id itself never
/// changes with the provider.
///
/// ```
/// use harness_core::tool::ToolId;
/// let id: ToolId = "github.create_issue".parse().unwrap();
/// assert_eq!(id.segments().collect::<Vec<_>>(), ["github", "create_issue"]);
/// assert!("GitHub.createIssue".parse::<ToolId>().is_err()); // lowercase only
/// assert!("github..issue".parse::<ToolId>().is_err()); // empty segment
/// let err = "9tools".parse::<ToolId>().unwrap_err();
/// assert!(err.to_string().contains("github.create_issue"), "{err}");
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ToolId(Arc<str>);

impl ToolId {
    /// Checks `s` against [`TOOL_ID_PATTERN`] and [`TOOL_ID_MAX_LEN`]; usable in `const`
    /// context.
    #[must_use]
    pub const fn is_valid(s: &str) -> bool {
        let b = s.as_bytes();
        if b.is_empty() || b.len() > TOOL_ID_MAX_LEN {
            return false;
        }
        let mut segment_start = true;
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            if segment_start {
                if !c.is_ascii_lowercase() {
                    return false;
                }
                segment_start = false;
            } else if c == b'.' {
                segment_start = true;
            } else if !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_') {
                return false;
            }
            i += 1;
        }
        !segment_start
    }

    /// The id as a string slice.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The dot-separated segments (`github`, `create_issue`).
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split('.')
    }
}

fn invalid_tool_id(value: &str) -> InvalidId {
    let value = if value.chars().count() > 80 {
        let mut v: String = value.chars().take(77).collect();
        v.push_str("...");
        v
    } else {
        value.to_owned()
    };
    InvalidId {
        kind: "tool id",
        value,
        expected: TOOL_ID_EXPECTED,
    }
}

impl FromStr for ToolId {
    type Err = InvalidId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if Self::is_valid(s) {
            Ok(Self(s.into()))
        } else {
            Err(invalid_tool_id(s))
        }
    }
}

impl TryFrom<String> for ToolId {
    type Error = InvalidId;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        if Self::is_valid(&s) {
            Ok(Self(s.into()))
        } else {
            Err(invalid_tool_id(&s))
        }
    }
}

impl fmt::Display for ToolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ToolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ToolId({:?})", &*self.0)
    }
}

impl AsRef<str> for ToolId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Serialize for ToolId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ToolId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for ToolId {
    fn schema_name() -> Cow<'static, str> {
        "ToolId".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": TOOL_ID_PATTERN,
            "maxLength": TOOL_ID_MAX_LEN,
            "description": "A stable tool id: dot-separated lowercase segments."
        })
    }
}

// ---------------------------------------------------------------------------------------------
// ToolDescriptor
// ---------------------------------------------------------------------------------------------

/// Hints that steer common policy (retries, approvals), not the provider.
///
/// The default is the cautious one: not idempotent, may have side effects. A retry policy may
/// only repeat a call whose tool says it is idempotent.
///
/// ```
/// use harness_core::tool::ToolAnnotations;
/// let lookup = ToolAnnotations::default().with_idempotent(true).with_side_effects(false);
/// assert!(lookup.idempotent && !lookup.side_effects);
/// assert!(ToolAnnotations::default().side_effects);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct ToolAnnotations {
    /// Calling twice with the same arguments has the same effect as calling once.
    #[serde(default)]
    pub idempotent: bool,
    /// The tool may change something outside the execution (send, write, pay, ...).
    #[serde(default = "default_side_effects")]
    pub side_effects: bool,
}

const fn default_side_effects() -> bool {
    true
}

impl Default for ToolAnnotations {
    fn default() -> Self {
        Self {
            idempotent: false,
            side_effects: true,
        }
    }
}

impl ToolAnnotations {
    /// Sets whether the tool is idempotent.
    #[must_use]
    pub const fn with_idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    /// Sets whether the tool may have side effects.
    #[must_use]
    pub const fn with_side_effects(mut self, side_effects: bool) -> Self {
        self.side_effects = side_effects;
        self
    }
}

/// A tool's input schema did not compile.
///
/// ```
/// use harness_core::tool::ToolDescriptor;
/// let err = ToolDescriptor::new(
///     "demo.echo".parse().unwrap(),
///     "Echo.",
///     serde_json::json!({ "type": "no-such-type" }),
/// )
/// .unwrap_err();
/// assert!(err.to_string().contains("demo.echo"), "{err}");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid input schema for tool `{tool}`: {reason}; expected a JSON Schema (draft 2020-12 \
     unless `$schema` says otherwise) that compiles without remote references"
)]
pub struct InvalidToolSchema {
    /// The tool whose schema was rejected.
    pub tool: ToolId,
    /// Why the schema did not compile.
    pub reason: String,
}

/// What a tool is: its stable id, a description for the model, the JSON Schema of its
/// arguments, and policy annotations.
///
/// The schema is compiled when the descriptor is built (or deserialized), so a descriptor with
/// an invalid schema never exists, and every copy shares the one compiled validator. Building a
/// descriptor performs no I/O: schemas that reference remote documents are rejected.
///
/// ```
/// use harness_core::tool::{ToolAnnotations, ToolDescriptor};
/// use serde_json::json;
///
/// let d = ToolDescriptor::new(
///     "weather.lookup".parse().unwrap(),
///     "Current weather for a city.",
///     json!({ "type": "object", "properties": { "city": { "type": "string" } } }),
/// )
/// .unwrap()
/// .with_annotations(ToolAnnotations::default().with_idempotent(true).with_side_effects(false));
///
/// let wire = serde_json::to_value(&d).unwrap();
/// assert_eq!(wire["id"], "weather.lookup");
/// assert_eq!(wire["inputSchema"]["type"], "object");
/// assert_eq!(wire["annotations"]["sideEffects"], false);
/// let back: ToolDescriptor = serde_json::from_value(wire).unwrap();
/// assert_eq!(back, d);
/// assert!(d.validate_arguments(&json!({ "city": 3 })).is_err());
/// ```
#[derive(Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", try_from = "DescriptorFields")]
pub struct ToolDescriptor {
    id: ToolId,
    description: String,
    input_schema: Value,
    annotations: ToolAnnotations,
    #[serde(skip)]
    validator: CompiledSchema,
}

/// The wire form of a [`ToolDescriptor`] before its schema is compiled.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DescriptorFields {
    /// The stable tool id.
    id: ToolId,
    /// What the tool does, for the model.
    description: String,
    /// The JSON Schema of the arguments.
    input_schema: Value,
    /// Policy annotations.
    #[serde(default)]
    annotations: ToolAnnotations,
}

impl TryFrom<DescriptorFields> for ToolDescriptor {
    type Error = InvalidToolSchema;
    fn try_from(f: DescriptorFields) -> Result<Self, Self::Error> {
        Ok(Self::new(f.id, f.description, f.input_schema)?.with_annotations(f.annotations))
    }
}

impl ToolDescriptor {
    /// A descriptor with the default (cautious) annotations; fails when `input_schema` does
    /// not compile.
    ///
    /// # Errors
    ///
    /// [`InvalidToolSchema`] when the schema is not a valid JSON Schema or references a
    /// document that cannot be resolved without I/O.
    pub fn new(
        id: ToolId,
        description: impl Into<String>,
        input_schema: Value,
    ) -> Result<Self, InvalidToolSchema> {
        // Offline, as every schema this crate compiles: a `$ref` outside it is refused.
        let validator =
            CompiledSchema::compile(&input_schema).map_err(|reason| InvalidToolSchema {
                tool: id.clone(),
                reason,
            })?;
        Ok(Self {
            id,
            description: description.into(),
            input_schema,
            annotations: ToolAnnotations::default(),
            validator,
        })
    }

    /// Replaces the annotations.
    #[must_use]
    pub fn with_annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.annotations = annotations;
        self
    }

    /// The stable id.
    #[must_use]
    pub fn id(&self) -> &ToolId {
        &self.id
    }

    /// The description for the model.
    #[must_use]
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The JSON Schema of the arguments (read-only: there is no way to replace it).
    #[must_use]
    pub fn input_schema(&self) -> &Value {
        &self.input_schema
    }

    /// The policy annotations.
    #[must_use]
    pub fn annotations(&self) -> ToolAnnotations {
        self.annotations
    }

    /// Checks `arguments` against the input schema, listing every violation with its JSON
    /// pointer. An unknown field is reported at its own pointer (`/extra`).
    ///
    /// # Errors
    ///
    /// [`InvalidArguments`] when the arguments do not match.
    pub fn validate_arguments(&self, arguments: &Value) -> Result<(), InvalidArguments> {
        let mut violations = Vec::new();
        for error in self.validator.errors(arguments) {
            match error.kind() {
                ValidationErrorKind::AdditionalProperties { unexpected }
                | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
                    for field in unexpected {
                        violations.push(ArgumentViolation {
                            pointer: error.instance_path().join(field.as_str()).to_string(),
                            message: format!("unknown field `{field}` is not allowed"),
                        });
                    }
                }
                _ => violations.push(ArgumentViolation {
                    pointer: error.instance_path().to_string(),
                    message: error.masked().to_string(),
                }),
            }
        }
        if violations.is_empty() {
            Ok(())
        } else {
            Err(InvalidArguments {
                tool: self.id.clone(),
                violations,
            })
        }
    }
}

impl PartialEq for ToolDescriptor {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
            && self.description == other.description
            && self.input_schema == other.input_schema
            && self.annotations == other.annotations
    }
}

impl fmt::Debug for ToolDescriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolDescriptor")
            .field("id", &self.id)
            .field("description", &self.description)
            .field("input_schema", &self.input_schema)
            .field("annotations", &self.annotations)
            .finish_non_exhaustive()
    }
}

/// One way the arguments missed the input schema.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ArgumentViolation {
    /// The JSON pointer (RFC 6901) of the offending value; `""` is the whole argument object.
    pub pointer: String,
    /// What is wrong there. Argument values are masked, never echoed.
    pub message: String,
}

/// Arguments did not match a tool's input schema.
///
/// `Display` lists every violation as `at <pointer>: <message>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct InvalidArguments {
    tool: ToolId,
    violations: Vec<ArgumentViolation>,
}

impl InvalidArguments {
    /// The tool whose schema the arguments missed.
    #[must_use]
    pub fn tool(&self) -> &ToolId {
        &self.tool
    }

    /// Every violation, in schema evaluation order.
    #[must_use]
    pub fn violations(&self) -> &[ArgumentViolation] {
        &self.violations
    }

    /// The failure a tool call with these arguments yields (not retryable: the same arguments
    /// would fail again).
    #[must_use]
    pub fn to_failure(&self) -> BoundedFailure {
        BoundedFailure::new(self.to_string()).with_code(ErrorCode::TOOL_ARGUMENTS_INVALID)
    }
}

impl fmt::Display for InvalidArguments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "arguments of tool `{}` do not match its input schema:",
            self.tool
        )?;
        for (i, v) in self.violations.iter().enumerate() {
            let sep = if i == 0 { " " } else { "; " };
            let pointer = if v.pointer.is_empty() {
                "(root)"
            } else {
                &v.pointer
            };
            write!(f, "{sep}at {pointer}: {}", v.message)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Outcomes
// ---------------------------------------------------------------------------------------------

/// A tool failure with a message bounded to [`BoundedFailure::MAX_MESSAGE_BYTES`].
///
/// Longer messages are cut at a character boundary and end with
/// [`BoundedFailure::TRUNCATION_MARKER`]; deserialization applies the same bound, so an
/// unbounded failure never exists in memory.
///
/// ```
/// use harness_core::tool::BoundedFailure;
/// let f = BoundedFailure::new("é".repeat(10_000)).with_retryable(true);
/// assert!(f.message().len() <= BoundedFailure::MAX_MESSAGE_BYTES);
/// assert!(f.message().ends_with(BoundedFailure::TRUNCATION_MARKER));
/// assert!(f.retryable());
/// assert_eq!(f.code().as_str(), "TOOL_FAILED");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", from = "FailureFields")]
pub struct BoundedFailure {
    message: String,
    code: ErrorCode,
    retryable: bool,
}

/// The wire form of a [`BoundedFailure`] before its message is bounded.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FailureFields {
    /// What went wrong (at most 4096 bytes).
    message: String,
    /// A stable code.
    #[serde(default = "default_failure_code")]
    code: ErrorCode,
    /// Whether common policy may retry the call.
    #[serde(default)]
    retryable: bool,
}

fn default_failure_code() -> ErrorCode {
    ErrorCode::TOOL_FAILED
}

impl From<FailureFields> for BoundedFailure {
    fn from(f: FailureFields) -> Self {
        Self::new(f.message)
            .with_code(f.code)
            .with_retryable(f.retryable)
    }
}

impl BoundedFailure {
    /// The longest message, in bytes (marker included).
    pub const MAX_MESSAGE_BYTES: usize = 4096;
    /// Ends a message that was cut.
    pub const TRUNCATION_MARKER: &'static str = "… [truncated]";

    /// A non-retryable failure with code [`ErrorCode::TOOL_FAILED`]; `message` is bounded.
    #[must_use]
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: bound_message(message.into()),
            code: ErrorCode::TOOL_FAILED,
            retryable: false,
        }
    }

    /// Replaces the code.
    #[must_use]
    pub fn with_code(mut self, code: ErrorCode) -> Self {
        self.code = code;
        self
    }

    /// Sets whether common policy may retry the call (it still checks the tool's
    /// [`ToolAnnotations`]).
    #[must_use]
    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    /// The bounded message.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The stable code.
    #[must_use]
    pub fn code(&self) -> &ErrorCode {
        &self.code
    }

    /// Whether common policy may retry the call.
    #[must_use]
    pub fn retryable(&self) -> bool {
        self.retryable
    }
}

fn bound_message(mut message: String) -> String {
    if message.len() <= BoundedFailure::MAX_MESSAGE_BYTES {
        return message;
    }
    let mut cut = BoundedFailure::MAX_MESSAGE_BYTES - BoundedFailure::TRUNCATION_MARKER.len();
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    message.truncate(cut);
    message.push_str(BoundedFailure::TRUNCATION_MARKER);
    message
}

/// How a tool call ended: success, a bounded failure, or a pending action (the contract's
/// "pending canonical interrupt": the execution pauses until the caller answers it).
///
/// On the wire it is tagged by `status`, like the event log's tool call outcome:
///
/// ```
/// use harness_core::tool::{BoundedFailure, ToolOutcome};
/// use serde_json::json;
/// let ok = serde_json::to_value(ToolOutcome::Success(json!(42))).unwrap();
/// assert_eq!(ok, json!({ "status": "success", "output": 42 }));
/// let failed = serde_json::to_value(ToolOutcome::Failure(BoundedFailure::new("boom"))).unwrap();
/// assert_eq!(failed["status"], "failure");
/// assert_eq!(failed["message"], "boom");
/// let back: ToolOutcome = serde_json::from_value(failed).unwrap();
/// assert_eq!(back, ToolOutcome::Failure(BoundedFailure::new("boom")));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(into = "OutcomeWire", from = "OutcomeWire")]
pub enum ToolOutcome {
    /// The tool returned a result.
    Success(Value),
    /// The tool failed; the message is bounded and safe to show the model.
    Failure(BoundedFailure),
    /// The tool is waiting on the caller: the action request to open.
    Action(Box<ActionRequest>),
}

impl ToolOutcome {
    /// A failure with `message` (non-retryable, code [`ErrorCode::TOOL_FAILED`]).
    #[must_use]
    pub fn failure(message: impl Into<String>) -> Self {
        Self::Failure(BoundedFailure::new(message))
    }

    /// Whether this is a success.
    #[must_use]
    pub fn is_success(&self) -> bool {
        matches!(self, Self::Success(_))
    }
}

/// The wire form of a [`ToolOutcome`].
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(tag = "status", rename_all = "snake_case")]
enum OutcomeWire {
    /// The tool returned a result.
    Success {
        /// The result.
        #[serde(default)]
        output: Value,
    },
    /// The tool failed.
    Failure(BoundedFailure),
    /// The tool is waiting on the caller.
    Action {
        /// The action request to open.
        request: Box<ActionRequest>,
    },
}

impl From<ToolOutcome> for OutcomeWire {
    fn from(o: ToolOutcome) -> Self {
        match o {
            ToolOutcome::Success(output) => Self::Success { output },
            ToolOutcome::Failure(f) => Self::Failure(f),
            ToolOutcome::Action(request) => Self::Action { request },
        }
    }
}

impl From<OutcomeWire> for ToolOutcome {
    fn from(o: OutcomeWire) -> Self {
        match o {
            OutcomeWire::Success { output } => Self::Success(output),
            OutcomeWire::Failure(f) => Self::Failure(f),
            OutcomeWire::Action { request } => Self::Action(request),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The trait, the call context, the handle
// ---------------------------------------------------------------------------------------------

/// What a tool call knows about itself. It carries no credential: a tool that needs one holds
/// it privately.
///
/// ```
/// use std::time::{Duration, Instant};
/// use harness_core::id::{ExecutionId, ToolCallId};
/// use harness_core::tool::ToolCallContext;
///
/// let ctx = ToolCallContext::new(ToolCallId::generate(), ExecutionId::generate())
///     .with_deadline(Instant::now() + Duration::from_secs(30));
/// assert!(!ctx.is_expired());
/// assert!(ctx.remaining().unwrap() <= Duration::from_secs(30));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolCallContext {
    /// The call's id, unique within the execution.
    pub call_id: ToolCallId,
    /// The execution the call belongs to.
    pub execution_id: ExecutionId,
    /// When the call must be over, if bounded.
    pub deadline: Option<Instant>,
}

impl ToolCallContext {
    /// A context without a deadline.
    #[must_use]
    pub fn new(call_id: ToolCallId, execution_id: ExecutionId) -> Self {
        Self {
            call_id,
            execution_id,
            deadline: None,
        }
    }

    /// Bounds the call by `deadline`.
    #[must_use]
    pub fn with_deadline(mut self, deadline: Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Time left before the deadline (zero once passed); `None` without a deadline.
    #[must_use]
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// Whether the deadline has passed.
    #[must_use]
    pub fn is_expired(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

/// A tool the runtime can hand to any adapter.
///
/// Object-safe: the runtime stores tools as `Arc<dyn PortableTool>` and adapters only ever see
/// them through a [`ToolHandle`](super::ToolHandle). Implementations need not validate arguments (the handle
/// already did) and should return [`ToolOutcome::Failure`] rather than panic; a panic is caught
/// at the handle and becomes a generic failure.
pub trait PortableTool: Send + Sync {
    /// The descriptor. The handle snapshots it once, at construction.
    fn descriptor(&self) -> &ToolDescriptor;

    /// Runs one call with arguments that already match the input schema.
    fn invoke(&self, arguments: Value, ctx: ToolCallContext) -> BoxFuture<'_, ToolOutcome>;
}

// ---------------------------------------------------------------------------------------------
// Provider-safe names
// ---------------------------------------------------------------------------------------------

/// A model provider's constraint on tool names: `^[a-zA-Z0-9_-]{1,max_len}$`, optionally also
/// allowing `.`.
///
/// [`ProviderNameRule::COMMON`] is `^[a-zA-Z0-9_-]{1,64}$`, accepted by the major providers.
///
/// ```
/// use harness_core::tool::ProviderNameRule;
/// assert!(ProviderNameRule::COMMON.is_valid("github_create_issue"));
/// assert!(!ProviderNameRule::COMMON.is_valid("github.create_issue"));
/// assert!(ProviderNameRule::COMMON.allowing_dots().is_valid("github.create_issue"));
/// assert!(ProviderNameRule::new(8).is_err()); // too short to disambiguate
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProviderNameRule {
    max_len: usize,
    allow_dots: bool,
}

/// A [`ProviderNameRule`] was too tight to build unambiguous names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "provider tool names limited to {max_len} characters are too short: expected a limit of at \
     least {min} characters",
    min = ProviderNameRule::MIN_MAX_LEN
)]
pub struct InvalidProviderNameRule {
    /// The rejected limit.
    pub max_len: usize,
}

impl ProviderNameRule {
    /// The smallest accepted length limit: room for a 9-character disambiguating suffix.
    pub const MIN_MAX_LEN: usize = 16;
    /// `^[a-zA-Z0-9_-]{1,64}$`.
    pub const COMMON: Self = Self {
        max_len: 64,
        allow_dots: false,
    };

    /// Names of `[a-zA-Z0-9_-]`, at most `max_len` characters.
    ///
    /// # Errors
    ///
    /// [`InvalidProviderNameRule`] when `max_len` is below [`Self::MIN_MAX_LEN`].
    pub const fn new(max_len: usize) -> Result<Self, InvalidProviderNameRule> {
        if max_len < Self::MIN_MAX_LEN {
            Err(InvalidProviderNameRule { max_len })
        } else {
            Ok(Self {
                max_len,
                allow_dots: false,
            })
        }
    }

    /// The same rule, also allowing `.` (ids then keep their dots).
    #[must_use]
    pub const fn allowing_dots(mut self) -> Self {
        self.allow_dots = true;
        self
    }

    /// The length limit.
    #[must_use]
    pub const fn max_len(self) -> usize {
        self.max_len
    }

    /// Whether `.` is allowed.
    #[must_use]
    pub const fn allows_dots(self) -> bool {
        self.allow_dots
    }

    /// Whether `name` satisfies the rule.
    #[must_use]
    pub fn is_valid(self, name: &str) -> bool {
        (1..=self.max_len).contains(&name.len())
            && name.bytes().all(|b| {
                b.is_ascii_alphanumeric()
                    || b == b'_'
                    || b == b'-'
                    || (self.allow_dots && b == b'.')
            })
    }
}

/// A reversible mapping between a set of [`ToolId`]s and provider-safe tool names.
///
/// - An id that already satisfies the rule is its own name (`search` → `search`).
/// - Any other id is sanitized (`.` → `_` unless dots are allowed), cut to fit, and given a
///   `-` and 8 hex digits of a 64-bit FNV-1a hash of the full id (`github.create_issue` →
///   `github_create_issue-7d7ec09a`). Ids never contain `-`, so such names cannot collide with
///   an unchanged id, and ids that sanitize alike (`a.b_c`, `a_b.c`) get different suffixes.
/// - Should two ids of the set still share a name (a hash collision), the later one in id order
///   is rehashed with a counter, so the mapping is a bijection on the set and deterministic.
///
/// Names depend only on the id and the rule (barring that collision case), so they stay
/// stable when tools join or leave the set. Every name starts with a lowercase letter, which
/// also satisfies providers that forbid a leading digit.
#[derive(Debug, Clone)]
pub struct ProviderToolNames {
    rule: ProviderNameRule,
    to_provider: BTreeMap<ToolId, Box<str>>,
    from_provider: HashMap<Box<str>, ToolId>,
}

impl ProviderToolNames {
    /// Builds the mapping for `ids` (duplicates are ignored).
    #[must_use]
    pub fn new<'a>(ids: impl IntoIterator<Item = &'a ToolId>, rule: ProviderNameRule) -> Self {
        Self::build(ids, rule, fnv1a_32)
    }

    pub(super) fn build<'a>(
        ids: impl IntoIterator<Item = &'a ToolId>,
        rule: ProviderNameRule,
        hash: fn(&str, u64) -> u32,
    ) -> Self {
        let ids: BTreeSet<&ToolId> = ids.into_iter().collect();
        let mut to_provider = BTreeMap::new();
        let mut from_provider: HashMap<Box<str>, ToolId> = HashMap::with_capacity(ids.len());
        for id in ids {
            let mut salt = 0_u64;
            let name: Box<str> = loop {
                let candidate = provider_name(id, rule, salt, hash);
                if !from_provider.contains_key(candidate.as_str()) {
                    break candidate.into();
                }
                salt += 1;
            };
            from_provider.insert(name.clone(), id.clone());
            to_provider.insert(id.clone(), name);
        }
        Self {
            rule,
            to_provider,
            from_provider,
        }
    }

    /// The provider name of `id`; `None` when `id` is not in the set.
    #[must_use]
    pub fn to_provider(&self, id: &ToolId) -> Option<&str> {
        self.to_provider.get(id).map(|n| &**n)
    }

    /// The id behind a provider name; `None` for a name the set does not contain (a provider
    /// calling a tool it was never offered).
    #[must_use]
    pub fn from_provider(&self, name: &str) -> Option<&ToolId> {
        self.from_provider.get(name)
    }

    /// The rule the names satisfy.
    #[must_use]
    pub fn rule(&self) -> ProviderNameRule {
        self.rule
    }

    /// Every (id, provider name) pair, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (&ToolId, &str)> {
        self.to_provider.iter().map(|(id, n)| (id, &**n))
    }

    /// How many tools the mapping holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.to_provider.len()
    }

    /// Whether the mapping is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.to_provider.is_empty()
    }
}

/// Length of `-` plus 8 hex digits.
const SUFFIX_LEN: usize = 9;

fn provider_name(
    id: &ToolId,
    rule: ProviderNameRule,
    salt: u64,
    hash: fn(&str, u64) -> u32,
) -> String {
    let id = id.as_str();
    let sanitized: Cow<'_, str> = if rule.allow_dots {
        Cow::Borrowed(id)
    } else {
        Cow::Owned(id.replace('.', "_"))
    };
    if salt == 0 && sanitized == id && id.len() <= rule.max_len {
        return id.to_owned();
    }
    // ASCII only, so any byte index is a char boundary.
    let keep = sanitized.len().min(rule.max_len - SUFFIX_LEN);
    format!("{}-{:08x}", &sanitized[..keep], hash(id, salt))
}

/// 64-bit FNV-1a of `s` (then of `salt`'s bytes when non-zero), folded to 32 bits. Stable
/// across releases and platforms: provider names persist in conversation histories.
pub(super) fn fnv1a_32(s: &str, salt: u64) -> u32 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    let mut eat = |b: u8| {
        h ^= u64::from(b);
        h = h.wrapping_mul(PRIME);
    };
    s.bytes().for_each(&mut eat);
    if salt != 0 {
        salt.to_le_bytes().into_iter().for_each(&mut eat);
    }
    let folded = h ^ (h >> 32);
    u32::try_from(folded & 0xffff_ffff).unwrap_or_default()
}
