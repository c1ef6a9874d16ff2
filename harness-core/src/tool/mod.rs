//! Portable tools: stable ids, descriptors with a compiled input schema, the [`PortableTool`]
//! trait, the [`ToolHandle`] every adapter call goes through, and a reversible mapping from
//! tool ids to provider-safe names.
//!
//! The adapter contract says an adapter cannot replace a tool's input schema, cannot widen its
//! allowed arguments and cannot receive the credential a tool holds. [`ToolHandle`] is how
//! those rules become types: it validates every call's arguments against the schema it
//! snapshotted at construction, catches panics, and offers no accessor to the tool itself.
//!
//! ```
//! use std::sync::Arc;
//!
//! use harness_core::id::{ExecutionId, ToolCallId};
//! use harness_core::tool::{
//!     BoxFuture, PortableTool, ProviderNameRule, ProviderToolNames, ToolCallContext,
//!     ToolDescriptor, ToolHandle, ToolOutcome,
//! };
//! use serde_json::{Value, json};
//!
//! /// A tool that holds a credential. The field is private: nothing outside this type reads it.
//! struct CreateIssue {
//!     descriptor: ToolDescriptor,
//!     api_key: String,
//! }
//!
//! impl PortableTool for CreateIssue {
//!     fn descriptor(&self) -> &ToolDescriptor {
//!         &self.descriptor
//!     }
//!
//!     fn invoke(&self, arguments: Value, _ctx: ToolCallContext) -> BoxFuture<'_, ToolOutcome> {
//!         Box::pin(async move {
//!             // A real tool would send `self.api_key` to the provider here.
//!             let authorized = self.api_key.starts_with("ghp_");
//!             ToolOutcome::Success(json!({ "created": arguments["title"], "authorized": authorized }))
//!         })
//!     }
//! }
//!
//! let descriptor = ToolDescriptor::new(
//!     "github.create_issue".parse()?,
//!     "Create a GitHub issue.",
//!     json!({
//!         "type": "object",
//!         "properties": { "title": { "type": "string" } },
//!         "required": ["title"],
//!         "additionalProperties": false
//!     }),
//! )?;
//! let handle = ToolHandle::new(Arc::new(CreateIssue {
//!     descriptor,
//!     api_key: "ghp_very_secret".to_owned(),
//! }));
//!
//! // What an adapter sees: the descriptor and a way to call. Never the key.
//! assert_eq!(format!("{handle:?}"), r#"ToolHandle { id: "github.create_issue" }"#);
//!
//! let rt = tokio::runtime::Builder::new_current_thread().build()?;
//! let ctx = ToolCallContext::new(ToolCallId::generate(), ExecutionId::generate());
//! let outcome = rt.block_on(handle.invoke(json!({ "title": "flaky test" }), ctx.clone()));
//! assert_eq!(
//!     outcome,
//!     ToolOutcome::Success(json!({ "created": "flaky test", "authorized": true }))
//! );
//!
//! // Arguments outside the schema never reach the tool.
//! let ToolOutcome::Failure(failure) =
//!     rt.block_on(handle.invoke(json!({ "title": 7, "assignee": "me" }), ctx))
//! else {
//!     panic!("expected a failure")
//! };
//! assert!(failure.message().contains("/title"), "{}", failure.message());
//! assert!(failure.message().contains("/assignee"), "{}", failure.message());
//! assert!(!failure.message().contains("ghp_"));
//!
//! // Provider-safe names that map back to the stable id.
//! let names = ProviderToolNames::new([handle.id()], ProviderNameRule::COMMON);
//! let provider_name = names.to_provider(handle.id()).unwrap();
//! assert!(ProviderNameRule::COMMON.is_valid(provider_name));
//! assert_eq!(names.from_provider(provider_name), Some(handle.id()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
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

mod function;
mod handle;
mod policy;
mod set;

pub use self::function::FnTool;
pub use self::handle::{Approved, NotApproved, ToolHandle, ToolInvocation};
pub use self::policy::{
    DEFAULT_MAX_OUTPUT_BYTES, InvalidToolPolicy, MAX_OUTPUT_BYTES, MAX_TOOL_DEADLINE,
    MAX_TOOL_RETRIES, ToolPolicy,
};
pub use self::set::{
    CallerCredentials, Credential, ProvidedTool, ResolvedTools, ToolProvider, ToolScope, ToolSet,
    ToolSetError,
};

/// A boxed, `Send` future: what object-safe async traits of this crate return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

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
/// them through a [`ToolHandle`]. Implementations need not validate arguments (the handle
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

    fn build<'a>(
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
fn fnv1a_32(s: &str, salt: u64) -> u32 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }

    fn ctx() -> ToolCallContext {
        ToolCallContext::new(ToolCallId::generate(), ExecutionId::generate())
    }

    fn id(s: &str) -> ToolId {
        s.parse().unwrap()
    }

    fn strict_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "title": { "type": "string" },
                "count": { "type": "integer", "minimum": 1 },
                "tags": { "type": "array", "items": { "type": "string" } }
            },
            "required": ["title"],
            "additionalProperties": false
        })
    }

    /// Counts calls; panics, fails or succeeds on demand; holds a secret it never shows.
    struct Probe {
        descriptor: ToolDescriptor,
        calls: Arc<AtomicUsize>,
        api_key: String,
        behaviour: Behaviour,
    }

    #[derive(Clone, Copy)]
    enum Behaviour {
        Echo,
        PanicInFuture,
        PanicBeforeFuture,
        LongFailure,
    }

    impl Probe {
        fn handle(behaviour: Behaviour) -> (ToolHandle, Arc<AtomicUsize>) {
            let calls = Arc::new(AtomicUsize::new(0));
            let tool = Self {
                descriptor: ToolDescriptor::new(id("demo.probe"), "Probe.", strict_schema())
                    .unwrap(),
                calls: calls.clone(),
                api_key: "sk-live-SECRET".to_owned(),
                behaviour,
            };
            (ToolHandle::new(Arc::new(tool)), calls)
        }
    }

    impl PortableTool for Probe {
        fn descriptor(&self) -> &ToolDescriptor {
            &self.descriptor
        }

        fn invoke(&self, arguments: Value, _ctx: ToolCallContext) -> BoxFuture<'_, ToolOutcome> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if let Behaviour::PanicBeforeFuture = self.behaviour {
                panic!("sync panic with {}", self.api_key);
            }
            Box::pin(async move {
                match self.behaviour {
                    Behaviour::Echo => ToolOutcome::Success(arguments),
                    Behaviour::PanicInFuture => panic!("async panic with {}", self.api_key),
                    Behaviour::LongFailure => ToolOutcome::failure("x".repeat(100_000)),
                    Behaviour::PanicBeforeFuture => unreachable!(),
                }
            })
        }
    }

    fn failure(outcome: ToolOutcome) -> BoundedFailure {
        match outcome {
            ToolOutcome::Failure(f) => f,
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    #[test]
    fn tool_id_rules() {
        for ok in ["a", "github.create_issue", "a1.b_2.c", &"a".repeat(128)] {
            assert!(ToolId::is_valid(ok), "{ok}");
        }
        for bad in [
            "",
            "A",
            "a.",
            ".a",
            "a..b",
            "a.1b",
            "a-b",
            "a b",
            "é",
            &"a".repeat(129),
        ] {
            assert!(!ToolId::is_valid(bad), "{bad}");
            assert!(bad.parse::<ToolId>().is_err());
        }
        let err = serde_json::from_str::<ToolId>("\"Bad.Id\"").unwrap_err();
        assert!(
            err.to_string().contains("invalid tool id `Bad.Id`"),
            "{err}"
        );
    }

    #[test]
    fn invalid_schema_is_rejected_at_construction_and_deserialization() {
        let err = ToolDescriptor::new(id("a.b"), "d", json!({ "type": 12 })).unwrap_err();
        assert_eq!(err.tool, id("a.b"));
        let err = ToolDescriptor::new(
            id("a.b"),
            "d",
            json!({ "$ref": "https://example.com/remote.json" }),
        )
        .unwrap_err();
        assert!(err.to_string().contains("a.b"), "{err}");
        let wire = json!({ "id": "a.b", "description": "d", "inputSchema": { "minimum": "x" } });
        assert!(serde_json::from_value::<ToolDescriptor>(wire).is_err());
        let wire = json!({ "id": "a.b", "description": "d", "inputSchema": {}, "extra": 1 });
        let err = serde_json::from_value::<ToolDescriptor>(wire).unwrap_err();
        assert!(err.to_string().contains("unknown field `extra`"), "{err}");
    }

    #[test]
    fn valid_arguments_reach_the_tool() {
        let (handle, calls) = Probe::handle(Behaviour::Echo);
        let args = json!({ "title": "t", "count": 2 });
        let outcome = rt().block_on(handle.invoke(args.clone(), ctx()));
        assert_eq!(outcome, ToolOutcome::Success(args));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn wrong_types_and_unknown_fields_are_listed_and_the_tool_is_not_called() {
        let (handle, calls) = Probe::handle(Behaviour::Echo);
        let args = json!({
            "title": 5,
            "count": 0,
            "tags": ["ok", 3],
            "extra": true,
            "more": "sk-should-not-echo"
        });
        let f = failure(rt().block_on(handle.invoke(args.clone(), ctx())));
        assert_eq!(calls.load(Ordering::SeqCst), 0);
        assert_eq!(f.code(), &ErrorCode::TOOL_ARGUMENTS_INVALID);
        assert!(!f.retryable());
        for pointer in ["/title", "/count", "/tags/1", "/extra", "/more"] {
            assert!(
                f.message().contains(&format!("at {pointer}:")),
                "{pointer}: {}",
                f.message()
            );
        }
        assert!(
            !f.message().contains("sk-should-not-echo"),
            "{}",
            f.message()
        );

        let err = handle.descriptor().validate_arguments(&args).unwrap_err();
        let mut pointers: Vec<_> = err
            .violations()
            .iter()
            .map(|v| v.pointer.as_str())
            .collect();
        pointers.sort_unstable();
        assert_eq!(pointers, ["/count", "/extra", "/more", "/tags/1", "/title"]);
    }

    #[test]
    fn missing_required_and_non_object_arguments_are_rejected() {
        let (handle, calls) = Probe::handle(Behaviour::Echo);
        let f = failure(rt().block_on(handle.invoke(json!({}), ctx())));
        assert!(f.message().contains("at (root):"), "{}", f.message());
        assert!(f.message().contains("title"), "{}", f.message());
        let f = failure(rt().block_on(handle.invoke(json!([1, 2]), ctx())));
        assert_eq!(f.code(), &ErrorCode::TOOL_ARGUMENTS_INVALID);
        assert_eq!(calls.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn the_handle_keeps_the_schema_it_was_built_with() {
        // A tool whose descriptor changes after the handle was built cannot widen its
        // arguments through the handle.
        struct Shifty {
            strict: ToolDescriptor,
            open: ToolDescriptor,
            handed_out: AtomicUsize,
        }
        impl PortableTool for Shifty {
            fn descriptor(&self) -> &ToolDescriptor {
                if self.handed_out.fetch_add(1, Ordering::SeqCst) == 0 {
                    &self.strict
                } else {
                    &self.open
                }
            }
            fn invoke(&self, a: Value, _: ToolCallContext) -> BoxFuture<'_, ToolOutcome> {
                Box::pin(async move { ToolOutcome::Success(a) })
            }
        }
        let handle = ToolHandle::new(Arc::new(Shifty {
            strict: ToolDescriptor::new(id("s.t"), "d", strict_schema()).unwrap(),
            open: ToolDescriptor::new(id("s.t"), "d", json!(true)).unwrap(),
            handed_out: AtomicUsize::new(0),
        }));
        let outcome = rt().block_on(handle.invoke(json!({ "anything": 1 }), ctx()));
        assert_eq!(failure(outcome).code(), &ErrorCode::TOOL_ARGUMENTS_INVALID);
        assert_eq!(handle.descriptor().input_schema(), &strict_schema());
    }

    #[test]
    fn panics_become_generic_failures() {
        for behaviour in [Behaviour::PanicInFuture, Behaviour::PanicBeforeFuture] {
            let (handle, calls) = Probe::handle(behaviour);
            let f = failure(rt().block_on(handle.invoke(json!({ "title": "t" }), ctx())));
            assert_eq!(calls.load(Ordering::SeqCst), 1);
            assert_eq!(f.code(), &ErrorCode::TOOL_PANICKED);
            assert!(!f.message().contains("panic"), "{}", f.message());
            assert!(!f.message().contains("SECRET"), "{}", f.message());
        }
    }

    #[test]
    fn an_expired_deadline_does_not_call_the_tool() {
        let (handle, calls) = Probe::handle(Behaviour::Echo);
        let past = Instant::now();
        let f = failure(
            rt().block_on(handle.invoke(json!({ "title": "t" }), ctx().with_deadline(past))),
        );
        assert_eq!(f.code(), &ErrorCode::TOOL_DEADLINE_EXCEEDED);
        assert_eq!(calls.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn invoke_is_lazy() {
        let (handle, calls) = Probe::handle(Behaviour::Echo);
        let invocation = handle.invoke(json!({ "title": "t" }), ctx());
        assert!(format!("{invocation:?}").contains("start"));
        drop(invocation);
        assert_eq!(calls.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn failure_messages_are_bounded_at_a_char_boundary() {
        let (handle, _) = Probe::handle(Behaviour::LongFailure);
        let f = failure(rt().block_on(handle.invoke(json!({ "title": "t" }), ctx())));
        assert_eq!(f.message().len(), BoundedFailure::MAX_MESSAGE_BYTES);
        assert!(f.message().ends_with(BoundedFailure::TRUNCATION_MARKER));

        for len in 4080..4100 {
            let m = BoundedFailure::new("€".repeat(len / 3) + &"a".repeat(len % 3));
            assert!(m.message().len() <= BoundedFailure::MAX_MESSAGE_BYTES);
        }
        let short = BoundedFailure::new("short");
        assert_eq!(short.message(), "short");

        // Deserialization bounds too.
        let wire = json!({ "message": "y".repeat(10_000), "retryable": true });
        let f: BoundedFailure = serde_json::from_value(wire).unwrap();
        assert!(f.message().len() <= BoundedFailure::MAX_MESSAGE_BYTES);
        assert!(f.retryable());
        assert_eq!(f.code(), &ErrorCode::TOOL_FAILED);
    }

    fn pending_form() -> ActionRequest {
        let field = crate::action::FormField::new(
            "name".parse().unwrap(),
            "Name",
            crate::action::FieldKind::text(),
        );
        ActionRequest::form(crate::action::FormRequest::new([field]).unwrap())
            .with_created_at("2026-12-01T00:00:00Z".parse().unwrap())
    }

    #[test]
    fn outcome_wire_format_round_trips() {
        let outcomes = [
            ToolOutcome::Success(json!([1, "two"])),
            ToolOutcome::Success(Value::Null),
            ToolOutcome::Failure(BoundedFailure::new("nope").with_retryable(true)),
            ToolOutcome::Action(Box::new(pending_form())),
        ];
        for o in outcomes {
            let wire = serde_json::to_value(&o).unwrap();
            let back: ToolOutcome = serde_json::from_value(wire.clone()).unwrap();
            assert_eq!(back, o, "{wire}");
        }
        let wire = serde_json::to_value(ToolOutcome::Action(Box::new(pending_form()))).unwrap();
        assert_eq!(wire["status"], "action");
        assert_eq!(wire["request"]["kind"]["type"], "form_input");
        let err = serde_json::from_value::<ToolOutcome>(
            json!({ "status": "failure", "message": "m", "x": 1 }),
        )
        .unwrap_err();
        assert!(err.to_string().contains("unknown field `x`"), "{err}");
    }

    #[test]
    fn the_handle_never_shows_the_credential() {
        let (handle, _) = Probe::handle(Behaviour::Echo);
        let shown = format!("{handle:?} {handle:#?} {:?}", handle.descriptor());
        assert!(!shown.contains("SECRET"), "{shown}");
        assert_eq!(format!("{handle:?}"), r#"ToolHandle { id: "demo.probe" }"#);
    }

    #[test]
    fn handles_and_invocations_are_send_and_sync() {
        fn assert_send<T: Send>() {}
        fn assert_sync<T: Sync>() {}
        assert_send::<ToolHandle>();
        assert_sync::<ToolHandle>();
        assert_send::<ToolInvocation<'static>>();
        assert_send::<ToolDescriptor>();
        assert_sync::<ToolDescriptor>();
        let _: Option<Arc<dyn PortableTool>> = None;
    }

    #[test]
    fn a_cloned_handle_can_be_spawned() {
        let (handle, calls) = Probe::handle(Behaviour::Echo);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let h = handle.clone();
                rt.spawn(async move { h.invoke(json!({ "title": format!("{i}") }), ctx()).await })
            })
            .collect();
        for t in tasks {
            assert!(rt.block_on(t).unwrap().is_success());
        }
        assert_eq!(calls.load(Ordering::SeqCst), 8);
    }

    #[test]
    fn fnv1a_matches_the_reference_and_names_are_stable() {
        // FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c; folded: hi ^ lo.
        assert_eq!(fnv1a_32("a", 0), 0xaf63_dc4c ^ 0x8601_ec8c);
        let names = ProviderToolNames::new([&id("github.create_issue")], ProviderNameRule::COMMON);
        // Pinned literally: provider names persist in conversation histories, so changing
        // the hash or the layout breaks resumed conversations.
        assert_eq!(
            names.to_provider(&id("github.create_issue")),
            Some("github_create_issue-7d7ec09a")
        );
        let names = ProviderToolNames::new([&id("a.b_c"), &id("a_b.c")], ProviderNameRule::COMMON);
        assert_eq!(names.to_provider(&id("a.b_c")), Some("a_b_c-1387a44b"));
        assert_eq!(names.to_provider(&id("a_b.c")), Some("a_b_c-01e9e2fa"));
    }

    #[test]
    fn generated_schemas_accept_what_serde_writes() {
        fn check<T: JsonSchema + Serialize>(values: &[T]) {
            let schema = schemars::generate::SchemaSettings::draft2020_12()
                .into_generator()
                .into_root_schema_for::<T>();
            let validator = jsonschema::validator_for(schema.as_value()).unwrap();
            for v in values {
                let wire = serde_json::to_value(v).unwrap();
                let errors: Vec<_> = validator
                    .iter_errors(&wire)
                    .map(|e| e.to_string())
                    .collect();
                assert!(errors.is_empty(), "{wire}: {errors:?}");
            }
        }
        check(&[
            ToolOutcome::Success(json!({ "a": 1 })),
            ToolOutcome::Failure(BoundedFailure::new("m")),
            ToolOutcome::Action(Box::new(pending_form())),
        ]);
        check(&[ToolDescriptor::new(id("a.b"), "d", strict_schema()).unwrap()]);
        // The schema rejects what deserialization rejects.
        let schema = schemars::generate::SchemaSettings::draft2020_12()
            .into_generator()
            .into_root_schema_for::<ToolOutcome>();
        let validator = jsonschema::validator_for(schema.as_value()).unwrap();
        assert!(!validator.is_valid(&json!({ "status": "failure", "message": "m", "x": 1 })));
        assert!(!validator.is_valid(&json!({ "status": "exploded" })));
    }

    #[test]
    fn names_of_plain_ids_are_unchanged_and_collisions_are_disambiguated() {
        let ids = [id("a.b_c"), id("a_b.c"), id("a_b_c"), id("search")];
        let names = ProviderToolNames::new(&ids, ProviderNameRule::COMMON);
        assert_eq!(names.to_provider(&id("a_b_c")), Some("a_b_c"));
        assert_eq!(names.to_provider(&id("search")), Some("search"));
        let n1 = names.to_provider(&id("a.b_c")).unwrap();
        let n2 = names.to_provider(&id("a_b.c")).unwrap();
        assert_ne!(n1, n2);
        assert!(n1.starts_with("a_b_c-") && n2.starts_with("a_b_c-"));
        for i in &ids {
            let n = names.to_provider(i).unwrap();
            assert_eq!(names.from_provider(n), Some(i));
        }
        assert_eq!(names.from_provider("unknown"), None);
        assert_eq!(names.to_provider(&id("not.there")), None);

        let dotted = ProviderToolNames::new(&ids, ProviderNameRule::COMMON.allowing_dots());
        assert_eq!(dotted.to_provider(&id("a.b_c")), Some("a.b_c"));
    }

    #[test]
    fn long_ids_are_cut_and_stay_distinct() {
        let base = "a".repeat(100);
        let ids = [
            id(&format!("{base}.x")),
            id(&format!("{base}.y")),
            id(&base),
        ];
        let rule = ProviderNameRule::new(16).unwrap();
        let names = ProviderToolNames::new(&ids, rule);
        let set: BTreeSet<_> = ids.iter().map(|i| names.to_provider(i).unwrap()).collect();
        assert_eq!(set.len(), 3);
        assert!(
            set.iter().all(|n| rule.is_valid(n) && n.len() <= 16),
            "{set:?}"
        );
    }

    #[test]
    fn hash_collisions_are_resolved_deterministically() {
        fn constant(_: &str, salt: u64) -> u32 {
            u32::try_from(salt).unwrap()
        }
        let ids = [
            id("x.a"),
            id("x_a.b"),
            id("x.a_b"),
            id("x.a.b"),
            id("x_a_b"),
        ];
        let names = ProviderToolNames::build(&ids, ProviderNameRule::COMMON, constant);
        let again = ProviderToolNames::build(ids.iter().rev(), ProviderNameRule::COMMON, constant);
        let distinct: BTreeSet<_> = names.iter().map(|(_, n)| n.to_owned()).collect();
        assert_eq!(distinct.len(), ids.len());
        for i in &ids {
            let n = names.to_provider(i).unwrap();
            assert_eq!(names.from_provider(n), Some(i));
            assert_eq!(again.to_provider(i), Some(n));
        }
    }

    fn tool_id_strategy() -> impl Strategy<Value = String> {
        "[a-z][a-z0-9_]{0,14}(\\.[a-z][a-z0-9_]{0,14}){0,9}"
            .prop_filter("valid tool id", |s| ToolId::is_valid(s))
    }

    proptest! {
        #[test]
        fn provider_names_are_a_valid_bijection(
            raw in prop::collection::vec(tool_id_strategy(), 0..40),
            max_len in ProviderNameRule::MIN_MAX_LEN..=80,
            allow_dots in any::<bool>(),
        ) {
            // Add look-alikes: every dot swapped for an underscore and back.
            let mut all: BTreeSet<ToolId> = BTreeSet::new();
            for s in &raw {
                for variant in [s.clone(), s.replace('.', "_"), s.replace('_', ".")] {
                    if let Ok(i) = variant.parse() {
                        all.insert(i);
                    }
                }
            }
            let mut rule = ProviderNameRule::new(max_len).unwrap();
            if allow_dots {
                rule = rule.allowing_dots();
            }
            let names = ProviderToolNames::new(&all, rule);
            prop_assert_eq!(names.len(), all.len());
            let mut seen = BTreeSet::new();
            for i in &all {
                let n = names.to_provider(i).unwrap();
                prop_assert!(rule.is_valid(n), "{} -> {} breaks the rule", i, n);
                prop_assert!(n.as_bytes()[0].is_ascii_lowercase());
                prop_assert!(seen.insert(n.to_owned()), "{} is not unique", n);
                prop_assert_eq!(names.from_provider(n), Some(i));
            }
            // A name depends on the id alone: a one-element mapping agrees.
            if let Some(first) = all.iter().next() {
                let alone = ProviderToolNames::new([first], rule);
                prop_assert_eq!(alone.to_provider(first), names.to_provider(first));
            }
        }
    }
}
