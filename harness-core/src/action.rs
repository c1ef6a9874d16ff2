//! Action requests (form input, tool approval), their typed answers, and the validation that
//! turns an answer into a resolution.
//!
//! An [`ActionRequest`] pauses an execution until the caller answers it. It has its own
//! [`ActionId`], a [`Revision`] (an adapter that changes a pending request bumps it, so an
//! answer to an older version is refused), and one of two kinds:
//!
//! - [`FormRequest`]: validated field definitions; answered by a [`FormResponse`] that submits
//!   [`FormValues`] or dismisses the form;
//! - [`ApprovalRequest`]: one or more tool calls, each with its input schema and the decisions
//!   allowed for it; answered by an [`ApprovalResponse`] with exactly one [`ToolDecision`] per
//!   call (approve, reject, or edit with arguments revalidated against the tool's schema), or
//!   by dismissing the whole action.
//!
//! The two answer types are distinct, so code holding an approval can only be handed an
//! approval answer; [`ActionResponse`] wraps both for the wire and for untyped callers.
//! Validating an answer against the pending request yields a [`ValidatedForm`] or
//! [`ValidatedApproval`], which only validation can build, or an [`ActionResponseError`] that
//! names what was wrong and what would be right. A validated answer summarizes itself as the
//! [`ActionResolution`] recorded in the `action.resolved` event.
//!
//! ```
//! use harness_core::action::{
//!     ActionRequest, ApprovalRequest, ApprovalResponse, FieldKind, FormField, FormRequest,
//!     FormResponse, FormValues, ToolDecision,
//! };
//! use serde_json::json;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A form with one required field.
//! let form = FormRequest::new([
//!     FormField::new("email".parse()?, "Email", FieldKind::text()).required(),
//! ])?;
//! let request = ActionRequest::form(form);
//! let answer = FormResponse::submit(
//!     request.id.clone(),
//!     request.revision,
//!     FormValues::new().with("email", "ada@example.com"),
//! );
//! let validated = request.validate_form(answer)?;
//! assert_eq!(validated.values().and_then(|v| v.get("email")), Some(&json!("ada@example.com")));
//!
//! // A tool approval whose caller may edit the arguments.
//! let schema = json!({"type": "object", "properties": {"path": {"type": "string"}},
//!                     "required": ["path"]});
//! let approval = ApprovalRequest::single(
//!     "call_1".parse()?, "read_file", json!({"path": "/etc/passwd"}), schema,
//! )?;
//! let request = ActionRequest::approval(approval.allow_edit());
//! let bad = ApprovalResponse::decide(
//!     request.id.clone(),
//!     request.revision,
//!     [ToolDecision::edit("call_1".parse()?, json!({"path": 42}))],
//! );
//! let err = request.validate_approval(bad).unwrap_err();
//! assert!(err.to_string().contains("/path"));
//! let good = ApprovalResponse::decide(
//!     request.id.clone(),
//!     request.revision,
//!     [ToolDecision::edit("call_1".parse()?, json!({"path": "/tmp/notes"}))],
//! );
//! let validated = request.validate_approval(good)?;
//! assert_eq!(serde_json::to_value(validated.resolution())?["outcome"]["calls"][0]["decision"],
//!            "edit");
//! # Ok(())
//! # }
//! ```

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::num::NonZeroU32;
use std::str::FromStr;
use std::sync::Arc;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::error::{ErrorCategory, ErrorCode, HarnessError};
use crate::id::{ActionId, IdempotencyKey, InvalidId, ToolCallId};
use crate::time::Timestamp;

// ---------------------------------------------------------------------------------------------
// Revision
// ---------------------------------------------------------------------------------------------

/// The version of a pending action request, from 1.
///
/// An adapter that changes a pending request (new fields, another set of tool calls) publishes
/// it again with the next revision; an answer naming any other revision is refused as stale.
///
/// ```
/// use harness_core::action::Revision;
/// assert_eq!(Revision::FIRST.get(), 1);
/// assert_eq!(Revision::FIRST.next().get(), 2);
/// assert_eq!(Revision::new(0), None);
/// let err = serde_json::from_str::<Revision>("0").unwrap_err();
/// assert!(err.to_string().contains("revisions start at 1"), "{err}");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Revision(NonZeroU32);

impl Revision {
    /// The first revision of every action request.
    pub const FIRST: Self = Self(NonZeroU32::MIN);

    /// A revision number; `None` for zero.
    #[must_use]
    pub const fn new(n: u32) -> Option<Self> {
        match NonZeroU32::new(n) {
            Some(n) => Some(Self(n)),
            None => None,
        }
    }

    /// The number.
    #[must_use]
    pub const fn get(self) -> u32 {
        self.0.get()
    }

    /// The following revision (saturating at `u32::MAX`).
    #[must_use]
    pub const fn next(self) -> Self {
        Self(self.0.saturating_add(1))
    }
}

impl Default for Revision {
    fn default() -> Self {
        Self::FIRST
    }
}

impl fmt::Debug for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Revision({})", self.0)
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl<'de> Deserialize<'de> for Revision {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = u32::deserialize(d)?;
        Self::new(n)
            .ok_or_else(|| serde::de::Error::custom("invalid revision 0: revisions start at 1"))
    }
}

impl JsonSchema for Revision {
    fn schema_name() -> Cow<'static, str> {
        "Revision".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "integer",
            "minimum": 1,
            "maximum": u32::MAX,
            "description": "The version of a pending action request, from 1."
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Field names
// ---------------------------------------------------------------------------------------------

/// The pattern every [`FieldName`] matches.
pub const FIELD_NAME_PATTERN: &str = "^[a-zA-Z][a-zA-Z0-9_]{0,63}$";

const FIELD_NAME_EXPECTED: &str =
    "a letter then up to 63 letters, digits or underscores (^[a-zA-Z][a-zA-Z0-9_]{0,63}$)";

/// The name of a form field, matching `^[a-zA-Z][a-zA-Z0-9_]{0,63}$`: the key under which its
/// value is submitted.
///
/// ```
/// use harness_core::action::FieldName;
/// assert!("email".parse::<FieldName>().is_ok());
/// assert!("first_name2".parse::<FieldName>().is_ok());
/// let err = "2fa".parse::<FieldName>().unwrap_err();
/// assert!(err.to_string().contains("invalid form field name `2fa`"), "{err}");
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldName(Box<str>);

impl FieldName {
    /// Checks `s` against [`FIELD_NAME_PATTERN`]; usable in `const` context.
    #[must_use]
    pub const fn is_valid(s: &str) -> bool {
        let b = s.as_bytes();
        if b.is_empty() || b.len() > 64 || !b[0].is_ascii_alphabetic() {
            return false;
        }
        let mut i = 1;
        while i < b.len() {
            let c = b[i];
            if !(c.is_ascii_alphanumeric() || c == b'_') {
                return false;
            }
            i += 1;
        }
        true
    }

    /// The name as a string slice.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn invalid_field_name(s: &str) -> InvalidId {
    let value = if s.chars().count() > 80 {
        let mut v: String = s.chars().take(77).collect();
        v.push_str("...");
        v
    } else {
        s.to_owned()
    };
    InvalidId {
        kind: "form field name",
        value,
        expected: FIELD_NAME_EXPECTED,
    }
}

impl FromStr for FieldName {
    type Err = InvalidId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if Self::is_valid(s) {
            Ok(Self(s.into()))
        } else {
            Err(invalid_field_name(s))
        }
    }
}

impl TryFrom<String> for FieldName {
    type Error = InvalidId;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        if Self::is_valid(&s) {
            Ok(Self(s.into_boxed_str()))
        } else {
            Err(invalid_field_name(&s))
        }
    }
}

crate::id::string_id_common!(FieldName, FIELD_NAME_PATTERN, "A form field name.");

// ---------------------------------------------------------------------------------------------
// Compiled JSON Schemas (tool input schemas, text patterns)
// ---------------------------------------------------------------------------------------------

/// A JSON Schema compiled once, when the definition that holds it is built.
///
/// Compiled offline: a `$ref` to anything outside the schema is refused, never fetched, so a
/// request from an adapter cannot make the runtime open a connection.
#[derive(Clone)]
struct CompiledSchema(Arc<jsonschema::Validator>);

impl CompiledSchema {
    fn compile(schema: &Value) -> Result<Self, String> {
        jsonschema::options()
            .offline()
            .build(schema)
            .map(|v| Self(Arc::new(v)))
            .map_err(|e| truncate(&e.to_string(), 300))
    }

    fn violations(&self, instance: &Value) -> Vec<SchemaViolation> {
        self.0
            .iter_errors(instance)
            .map(|e| SchemaViolation {
                pointer: e.instance_path().as_str().to_owned(),
                keyword_location: e.schema_path().as_str().to_owned(),
                message: truncate(&e.masked().to_string(), 300),
            })
            .collect()
    }
}

impl fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CompiledSchema")
    }
}

/// Always equal: a compiled schema is derived from the JSON it sits beside, which is compared.
impl PartialEq for CompiledSchema {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

fn truncate(s: &str, max_chars: usize) -> String {
    if s.chars().count() > max_chars {
        let mut t: String = s.chars().take(max_chars.saturating_sub(3)).collect();
        t.push_str("...");
        t
    } else {
        s.to_owned()
    }
}

/// Deserializes the body of a field-less variant of an internally tagged enum, refusing any
/// key besides the tag: serde's `deny_unknown_fields` does not reach unit variants.
fn no_fields<'de, D: Deserializer<'de>>(d: D) -> Result<(), D::Error> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct NoFields {}
    NoFields::deserialize(d).map(|NoFields {}| ())
}

/// `a`, `b`, `c` (backticked, comma separated).
fn ticked<T: fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Items joined with `; `.
fn listed<T: fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

// ---------------------------------------------------------------------------------------------
// Form definitions
// ---------------------------------------------------------------------------------------------

/// What a form field accepts. Wire: internally tagged, `{"type": "text", "maxLength": 80}`.
///
/// ```
/// use harness_core::action::FieldKind;
/// let kind = FieldKind::Text { min_length: Some(1), max_length: Some(80), pattern: None };
/// let wire = serde_json::to_value(&kind).unwrap();
/// assert_eq!(wire, serde_json::json!({"type": "text", "minLength": 1, "maxLength": 80}));
/// assert_eq!(FieldKind::choice(["a", "b"]), serde_json::from_value(
///     serde_json::json!({"type": "choice", "options": ["a", "b"]})).unwrap());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum FieldKind {
    /// A string. Lengths count Unicode scalar values, as JSON Schema does.
    Text {
        /// The fewest characters accepted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min_length: Option<u32>,
        /// The most characters accepted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_length: Option<u32>,
        /// An ECMA-262 regular expression the text must match. Like JSON Schema's `pattern`
        /// it is not anchored: write `^...$` to match the whole text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pattern: Option<String>,
    },
    /// A JSON number.
    Number {
        /// The smallest value accepted (inclusive).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        minimum: Option<f64>,
        /// The largest value accepted (inclusive).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        maximum: Option<f64>,
        /// Whether only whole numbers are accepted (`2.0` counts as whole, as in JSON Schema).
        #[serde(default)]
        integer: bool,
    },
    /// `true` or `false`.
    #[serde(deserialize_with = "no_fields")]
    Boolean,
    /// One of a fixed list of strings, or several of them (an array) when `multiple`.
    Choice {
        /// The accepted values: at least one, no duplicates.
        #[schemars(length(min = 1))]
        options: Vec<String>,
        /// Whether the answer is an array of distinct options rather than one option.
        #[serde(default)]
        multiple: bool,
    },
}

impl FieldKind {
    /// Any text.
    #[must_use]
    pub const fn text() -> Self {
        Self::Text {
            min_length: None,
            max_length: None,
            pattern: None,
        }
    }

    /// Any number.
    #[must_use]
    pub const fn number() -> Self {
        Self::Number {
            minimum: None,
            maximum: None,
            integer: false,
        }
    }

    /// Any whole number.
    #[must_use]
    pub const fn integer() -> Self {
        Self::Number {
            minimum: None,
            maximum: None,
            integer: true,
        }
    }

    /// A boolean.
    #[must_use]
    pub const fn boolean() -> Self {
        Self::Boolean
    }

    /// Exactly one of `options`.
    #[must_use]
    pub fn choice<S: Into<String>>(options: impl IntoIterator<Item = S>) -> Self {
        Self::Choice {
            options: options.into_iter().map(Into::into).collect(),
            multiple: false,
        }
    }

    /// Any number of distinct `options`, answered as an array.
    #[must_use]
    pub fn multi_choice<S: Into<String>>(options: impl IntoIterator<Item = S>) -> Self {
        Self::Choice {
            options: options.into_iter().map(Into::into).collect(),
            multiple: true,
        }
    }
}

/// One field of a form.
///
/// A field is plain data; [`FormRequest::new`] checks it (and its siblings) and refuses a
/// malformed definition.
///
/// ```
/// use harness_core::action::{FieldKind, FormField};
/// # fn main() -> Result<(), harness_core::id::InvalidId> {
/// let field = FormField::new("age".parse()?, "Age", FieldKind::integer())
///     .required()
///     .with_description("In whole years");
/// assert!(field.required);
/// let wire = serde_json::to_value(&field).unwrap();
/// assert_eq!(wire["kind"]["type"], "number");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FormField {
    /// The key under which the value is submitted; unique within the form.
    pub name: FieldName,
    /// A short human-readable label; not blank.
    pub label: String,
    /// Longer help text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether a submission must carry a non-null value for this field.
    #[serde(default)]
    pub required: bool,
    /// What the field accepts.
    pub kind: FieldKind,
}

impl FormField {
    /// An optional field without description.
    #[must_use]
    pub fn new(name: FieldName, label: impl Into<String>, kind: FieldKind) -> Self {
        Self {
            name,
            label: label.into(),
            description: None,
            required: false,
            kind,
        }
    }

    /// Makes the field required.
    #[must_use]
    pub fn required(mut self) -> Self {
        self.required = true;
        self
    }

    /// Adds help text.
    #[must_use]
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
}

/// A form: an optional title and validated field definitions.
///
/// Built with [`FormRequest::new`], which refuses duplicate names, blank labels, inverted
/// ranges, non-finite bounds, invalid patterns, and empty or repeated choices, listing every
/// problem at once. Deserialization runs the same checks, so a malformed form never exists in
/// memory. A form may have no field at all: it then asks for a plain confirmation (submit) or
/// refusal (dismiss).
///
/// ```
/// use harness_core::action::{FieldKind, FormField, FormRequest, FormValues};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let form = FormRequest::new([
///     FormField::new("name".parse()?, "Name", FieldKind::text()).required(),
///     FormField::new("color".parse()?, "Color", FieldKind::choice(["red", "blue"])),
/// ])?
/// .with_title("Who are you?");
///
/// let violations = form.validate(&FormValues::new().with("color", "green")).unwrap_err();
/// assert_eq!(violations.len(), 2);
/// assert_eq!(violations[0].to_string(), "field `name`: is required but missing");
/// assert_eq!(violations[1].to_string(),
///            "field `color`: expected one of `red`, `blue`");
///
/// let err = FormRequest::new([
///     FormField::new("a".parse()?, "A", FieldKind::choice(Vec::<String>::new())),
///     FormField::new("a".parse()?, "A again", FieldKind::boolean()),
/// ]).unwrap_err();
/// assert_eq!(err.problems().len(), 2);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FormRequest {
    /// A heading for the form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    title: Option<String>,
    /// The fields, in display order; names are unique.
    fields: Vec<FormField>,
    /// The compiled `pattern` of each field (parallel to `fields`).
    #[serde(skip)]
    patterns: Vec<Option<CompiledSchema>>,
}

impl FormRequest {
    /// Checks the field definitions and builds the form.
    ///
    /// # Errors
    ///
    /// A [`FormDefinitionError`] listing every problem found.
    pub fn new(fields: impl IntoIterator<Item = FormField>) -> Result<Self, FormDefinitionError> {
        let fields: Vec<FormField> = fields.into_iter().collect();
        let mut problems = Vec::new();
        let mut names = BTreeSet::new();
        let mut patterns = Vec::with_capacity(fields.len());
        for field in &fields {
            if !names.insert(field.name.as_str()) {
                problems.push(FormDefinitionProblem::DuplicateField {
                    field: field.name.clone(),
                });
            }
            if field.label.trim().is_empty() {
                problems.push(FormDefinitionProblem::BlankLabel {
                    field: field.name.clone(),
                });
            }
            patterns.push(check_field_kind(field, &mut problems));
        }
        if problems.is_empty() {
            Ok(Self {
                title: None,
                fields,
                patterns,
            })
        } else {
            Err(FormDefinitionError { problems })
        }
    }

    /// Sets the title.
    #[must_use]
    pub fn with_title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// The title.
    #[must_use]
    pub fn title(&self) -> Option<&str> {
        self.title.as_deref()
    }

    /// The fields, in display order.
    #[must_use]
    pub fn fields(&self) -> &[FormField] {
        &self.fields
    }

    /// The field named `name`.
    #[must_use]
    pub fn field(&self, name: &str) -> Option<&FormField> {
        self.fields.iter().find(|f| f.name.as_str() == name)
    }

    /// Checks submitted values against the definitions and reports **every** violation, in
    /// field order, then unknown names in sorted order.
    ///
    /// A required field must be present and not `null`; an optional field may be absent or
    /// `null`. An empty string is a present value: use `minLength: 1` to refuse it.
    ///
    /// # Errors
    ///
    /// The violations, each naming the field and what was expected. Violations never echo
    /// the submitted value, which may be sensitive.
    pub fn validate(&self, values: &FormValues) -> Result<(), Vec<FieldViolation>> {
        let mut violations = Vec::new();
        for (field, pattern) in self.fields.iter().zip(&self.patterns) {
            match values.get(field.name.as_str()) {
                None | Some(Value::Null) => {
                    if field.required {
                        violations.push(FieldViolation::new(&field.name, FieldProblem::Missing));
                    }
                }
                Some(value) => check_value(field, pattern.as_ref(), value, &mut violations),
            }
        }
        for name in values.names() {
            if self.field(name).is_none() {
                violations.push(FieldViolation {
                    field: name.to_owned(),
                    problem: FieldProblem::Unknown,
                });
            }
        }
        if violations.is_empty() {
            Ok(())
        } else {
            Err(violations)
        }
    }

    /// The names of the fields that carry a non-null value in `values`, in field order.
    fn answered(&self, values: &FormValues) -> Vec<FieldName> {
        self.fields
            .iter()
            .filter(|f| values.get(f.name.as_str()).is_some_and(|v| !v.is_null()))
            .map(|f| f.name.clone())
            .collect()
    }
}

impl fmt::Debug for FormRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FormRequest")
            .field("title", &self.title)
            .field("fields", &self.fields)
            .finish()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FormRequestWire {
    #[serde(default)]
    title: Option<String>,
    fields: Vec<FormField>,
}

impl<'de> Deserialize<'de> for FormRequest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let wire = FormRequestWire::deserialize(d)?;
        let mut form = Self::new(wire.fields).map_err(serde::de::Error::custom)?;
        form.title = wire.title;
        Ok(form)
    }
}

/// Checks one field's kind; returns its compiled pattern, if any.
fn check_field_kind(
    field: &FormField,
    problems: &mut Vec<FormDefinitionProblem>,
) -> Option<CompiledSchema> {
    let name = &field.name;
    match &field.kind {
        FieldKind::Text {
            min_length,
            max_length,
            pattern,
        } => {
            if let (Some(min), Some(max)) = (*min_length, *max_length)
                && min > max
            {
                problems.push(FormDefinitionProblem::LengthRange {
                    field: name.clone(),
                    min_length: min,
                    max_length: max,
                });
            }
            let pattern = pattern.as_ref()?;
            let schema = serde_json::json!({ "type": "string", "pattern": pattern });
            match CompiledSchema::compile(&schema) {
                Ok(compiled) => Some(compiled),
                Err(reason) => {
                    problems.push(FormDefinitionProblem::InvalidPattern {
                        field: name.clone(),
                        pattern: truncate(pattern, 200),
                        reason,
                    });
                    None
                }
            }
        }
        FieldKind::Number {
            minimum, maximum, ..
        } => {
            for (bound, value) in [("minimum", minimum), ("maximum", maximum)] {
                if value.is_some_and(|v| !v.is_finite()) {
                    problems.push(FormDefinitionProblem::NonFiniteBound {
                        field: name.clone(),
                        bound,
                    });
                }
            }
            if let (Some(min), Some(max)) = (*minimum, *maximum)
                && min > max
            {
                problems.push(FormDefinitionProblem::NumberRange {
                    field: name.clone(),
                    minimum: min,
                    maximum: max,
                });
            }
            None
        }
        FieldKind::Boolean => None,
        FieldKind::Choice { options, .. } => {
            if options.is_empty() {
                problems.push(FormDefinitionProblem::NoOptions {
                    field: name.clone(),
                });
            }
            let mut seen = BTreeSet::new();
            let mut reported = BTreeSet::new();
            for option in options {
                if !seen.insert(option.as_str()) && reported.insert(option.as_str()) {
                    problems.push(FormDefinitionProblem::DuplicateOption {
                        field: name.clone(),
                        option: option.clone(),
                    });
                }
            }
            None
        }
    }
}

/// Checks one present, non-null value against its field.
fn check_value(
    field: &FormField,
    pattern: Option<&CompiledSchema>,
    value: &Value,
    out: &mut Vec<FieldViolation>,
) {
    let mut push = |problem| out.push(FieldViolation::new(&field.name, problem));
    let found = JsonType::of(value);
    match &field.kind {
        FieldKind::Text {
            min_length,
            max_length,
            pattern: source,
        } => {
            let Value::String(text) = value else {
                return push(FieldProblem::WrongType {
                    expected: JsonType::String,
                    found,
                });
            };
            let length = u64::try_from(text.chars().count()).unwrap_or(u64::MAX);
            if let Some(min) = *min_length
                && length < u64::from(min)
            {
                push(FieldProblem::TooShort {
                    min_length: min,
                    length,
                });
            }
            if let Some(max) = *max_length
                && length > u64::from(max)
            {
                push(FieldProblem::TooLong {
                    max_length: max,
                    length,
                });
            }
            if let (Some(compiled), Some(source)) = (pattern, source)
                && !compiled.0.is_valid(value)
            {
                push(FieldProblem::PatternMismatch {
                    pattern: source.clone(),
                });
            }
        }
        FieldKind::Number {
            minimum,
            maximum,
            integer,
        } => {
            let Value::Number(number) = value else {
                return push(FieldProblem::WrongType {
                    expected: JsonType::Number,
                    found,
                });
            };
            let Some(n) = number.as_f64() else {
                return push(FieldProblem::WrongType {
                    expected: JsonType::Number,
                    found,
                });
            };
            if *integer && !(number.is_i64() || number.is_u64() || n.fract() == 0.0) {
                push(FieldProblem::NotAnInteger);
            }
            if let Some(min) = *minimum
                && n < min
            {
                push(FieldProblem::BelowMinimum { minimum: min });
            }
            if let Some(max) = *maximum
                && n > max
            {
                push(FieldProblem::AboveMaximum { maximum: max });
            }
        }
        FieldKind::Boolean => {
            if !value.is_boolean() {
                push(FieldProblem::WrongType {
                    expected: JsonType::Boolean,
                    found,
                });
            }
        }
        FieldKind::Choice { options, multiple } => {
            let is_option = |v: &Value| v.as_str().is_some_and(|s| options.iter().any(|o| o == s));
            let not_an_option = || FieldProblem::NotAnOption {
                options: options.clone(),
            };
            if !*multiple {
                if !is_option(value) {
                    push(not_an_option());
                }
                return;
            }
            let Value::Array(items) = value else {
                return push(FieldProblem::WrongType {
                    expected: JsonType::Array,
                    found,
                });
            };
            let mut seen = BTreeSet::new();
            let mut reported = BTreeSet::new();
            for item in items {
                match item.as_str() {
                    Some(s) if is_option(item) => {
                        if !seen.insert(s) && reported.insert(s) {
                            push(FieldProblem::RepeatedOption {
                                option: s.to_owned(),
                            });
                        }
                    }
                    _ => push(not_an_option()),
                }
            }
        }
    }
}

/// A form definition was refused; [`FormDefinitionError::problems`] lists every problem.
///
/// ```
/// use harness_core::action::{FieldKind, FormField, FormRequest};
/// # fn main() -> Result<(), harness_core::id::InvalidId> {
/// let kind = FieldKind::Number { minimum: Some(10.0), maximum: Some(1.0), integer: false };
/// let err = FormRequest::new([FormField::new("n".parse()?, "N", kind)]).unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "invalid form definition: field `n`: minimum 10 is greater than maximum 1"
/// );
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid form definition: {}", listed(&self.problems))]
pub struct FormDefinitionError {
    problems: Vec<FormDefinitionProblem>,
}

impl FormDefinitionError {
    /// Every problem found, in field order.
    #[must_use]
    pub fn problems(&self) -> &[FormDefinitionProblem] {
        &self.problems
    }
}

/// One problem of a form definition.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum FormDefinitionProblem {
    /// Two fields share a name.
    #[error("field `{field}` is defined more than once; field names must be unique")]
    DuplicateField {
        /// The repeated name.
        field: FieldName,
    },
    /// A label is empty or whitespace.
    #[error("field `{field}` has a blank label; give it a human-readable label")]
    BlankLabel {
        /// The field.
        field: FieldName,
    },
    /// `minLength` exceeds `maxLength`.
    #[error("field `{field}`: minLength {min_length} is greater than maxLength {max_length}")]
    LengthRange {
        /// The field.
        field: FieldName,
        /// The declared minimum length.
        min_length: u32,
        /// The declared maximum length.
        max_length: u32,
    },
    /// A text pattern is not a valid ECMA-262 regular expression.
    #[error("field `{field}`: pattern `{pattern}` is not a valid regular expression: {reason}")]
    InvalidPattern {
        /// The field.
        field: FieldName,
        /// The pattern (truncated to 200 characters).
        pattern: String,
        /// Why it was refused.
        reason: String,
    },
    /// A number bound is NaN or infinite.
    #[error("field `{field}`: {bound} must be a finite number")]
    NonFiniteBound {
        /// The field.
        field: FieldName,
        /// `minimum` or `maximum`.
        bound: &'static str,
    },
    /// `minimum` exceeds `maximum`.
    #[error("field `{field}`: minimum {minimum} is greater than maximum {maximum}")]
    NumberRange {
        /// The field.
        field: FieldName,
        /// The declared minimum.
        minimum: f64,
        /// The declared maximum.
        maximum: f64,
    },
    /// A choice lists no option.
    #[error("field `{field}`: a choice needs at least one option")]
    NoOptions {
        /// The field.
        field: FieldName,
    },
    /// A choice lists an option twice.
    #[error("field `{field}`: option `{option}` is listed more than once; options must be unique")]
    DuplicateOption {
        /// The field.
        field: FieldName,
        /// The repeated option.
        option: String,
    },
}

// ---------------------------------------------------------------------------------------------
// Form values and violations
// ---------------------------------------------------------------------------------------------

/// Submitted form values: field name to JSON value, kept in name order.
///
/// Keys are plain strings, so that a submission naming a field the form does not define is
/// reported by [`FormRequest::validate`] as an unknown field rather than refused while
/// parsing.
///
/// ```
/// use harness_core::action::FormValues;
/// let values = FormValues::new().with("age", 42).with("name", "Ada");
/// assert_eq!(serde_json::to_string(&values).unwrap(), r#"{"age":42,"name":"Ada"}"#);
/// assert_eq!(values.len(), 2);
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct FormValues(BTreeMap<String, Value>);

impl FormValues {
    /// No values.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a value.
    #[must_use]
    pub fn with(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.insert(name, value);
        self
    }

    /// Sets a value, returning the one it replaced.
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<Value>) -> Option<Value> {
        self.0.insert(name.into(), value.into())
    }

    /// The value submitted for `name`.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name)
    }

    /// The submitted names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// The name/value pairs, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// How many values were submitted.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether nothing was submitted.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The underlying map.
    #[must_use]
    pub fn into_inner(self) -> BTreeMap<String, Value> {
        self.0
    }
}

impl From<BTreeMap<String, Value>> for FormValues {
    fn from(map: BTreeMap<String, Value>) -> Self {
        Self(map)
    }
}

impl<K: Into<String>, V: Into<Value>> FromIterator<(K, V)> for FormValues {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Self(
            iter.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }
}

/// The type of a JSON value, as named in violations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JsonType {
    /// `null`.
    Null,
    /// `true` / `false`.
    Boolean,
    /// A number.
    Number,
    /// A string.
    String,
    /// An array.
    Array,
    /// An object.
    Object,
}

impl JsonType {
    /// The type of `value`.
    #[must_use]
    pub fn of(value: &Value) -> Self {
        match value {
            Value::Null => Self::Null,
            Value::Bool(_) => Self::Boolean,
            Value::Number(_) => Self::Number,
            Value::String(_) => Self::String,
            Value::Array(_) => Self::Array,
            Value::Object(_) => Self::Object,
        }
    }

    /// The type with its article, for messages (`a string`, `an array`, `null`).
    #[must_use]
    pub const fn described(self) -> &'static str {
        match self {
            Self::Null => "null",
            Self::Boolean => "a boolean",
            Self::Number => "a number",
            Self::String => "a string",
            Self::Array => "an array",
            Self::Object => "an object",
        }
    }
}

impl fmt::Display for JsonType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Null => "null",
            Self::Boolean => "boolean",
            Self::Number => "number",
            Self::String => "string",
            Self::Array => "array",
            Self::Object => "object",
        })
    }
}

/// A submitted value that does not fit its form: which field, and what was expected.
///
/// ```
/// use harness_core::action::{FieldProblem, FieldViolation, JsonType};
/// let v = FieldViolation {
///     field: "age".into(),
///     problem: FieldProblem::WrongType { expected: JsonType::Number, found: JsonType::String },
/// };
/// assert_eq!(v.to_string(), "field `age`: expected a number, got a string");
/// let wire = serde_json::to_value(&v).unwrap();
/// assert_eq!(wire["problem"]["type"], "wrong_type");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FieldViolation {
    /// The field name as submitted (or as defined, for a missing field).
    pub field: String,
    /// What is wrong.
    pub problem: FieldProblem,
}

impl FieldViolation {
    fn new(field: &FieldName, problem: FieldProblem) -> Self {
        Self {
            field: field.as_str().to_owned(),
            problem,
        }
    }
}

impl fmt::Display for FieldViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "field `{}`: {}", self.field, self.problem)
    }
}

/// What is wrong with one submitted value. Wire: internally tagged, `{"type": "missing"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
#[non_exhaustive]
pub enum FieldProblem {
    /// A required field is absent or `null`.
    #[serde(deserialize_with = "no_fields")]
    Missing,
    /// The form defines no field of that name.
    #[serde(deserialize_with = "no_fields")]
    Unknown,
    /// The value has the wrong JSON type.
    WrongType {
        /// The type the field accepts.
        expected: JsonType,
        /// The type submitted.
        found: JsonType,
    },
    /// The text is shorter than `minLength`.
    TooShort {
        /// The fewest characters accepted.
        min_length: u32,
        /// The characters submitted.
        length: u64,
    },
    /// The text is longer than `maxLength`.
    TooLong {
        /// The most characters accepted.
        max_length: u32,
        /// The characters submitted.
        length: u64,
    },
    /// The text does not match the pattern.
    PatternMismatch {
        /// The field's pattern.
        pattern: String,
    },
    /// The number has a fraction but the field takes whole numbers.
    #[serde(deserialize_with = "no_fields")]
    NotAnInteger,
    /// The number is below the minimum.
    BelowMinimum {
        /// The smallest value accepted.
        minimum: f64,
    },
    /// The number is above the maximum.
    AboveMaximum {
        /// The largest value accepted.
        maximum: f64,
    },
    /// The value (or an element of a multiple choice) is not one of the options.
    NotAnOption {
        /// The accepted options.
        options: Vec<String>,
    },
    /// A multiple choice selects the same option twice.
    RepeatedOption {
        /// The repeated option.
        option: String,
    },
}

impl fmt::Display for FieldProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing => f.write_str("is required but missing"),
            Self::Unknown => f.write_str("is not a field of this form; remove it"),
            Self::WrongType { expected, found } => write!(
                f,
                "expected {}, got {}",
                expected.described(),
                found.described()
            ),
            Self::TooShort { min_length, length } => {
                write!(f, "expected at least {min_length} characters, got {length}")
            }
            Self::TooLong { max_length, length } => {
                write!(f, "expected at most {max_length} characters, got {length}")
            }
            Self::PatternMismatch { pattern } => {
                write!(f, "expected text matching the pattern `{pattern}`")
            }
            Self::NotAnInteger => f.write_str("expected a whole number"),
            Self::BelowMinimum { minimum } => write!(f, "expected a number >= {minimum}"),
            Self::AboveMaximum { maximum } => write!(f, "expected a number <= {maximum}"),
            Self::NotAnOption { options } => write!(f, "expected one of {}", ticked(options)),
            Self::RepeatedOption { option } => {
                write!(f, "option `{option}` is selected more than once")
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tool approval definitions
// ---------------------------------------------------------------------------------------------

/// A decision a caller may take on one tool call.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    /// Run the call as proposed.
    Approve,
    /// Do not run the call.
    Reject,
    /// Run the call with caller-supplied arguments, revalidated against the tool's schema.
    Edit,
}

impl DecisionKind {
    /// Every decision kind.
    pub const ALL: [Self; 3] = [Self::Approve, Self::Reject, Self::Edit];

    /// The wire name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Reject => "reject",
            Self::Edit => "edit",
        }
    }
}

impl fmt::Display for DecisionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One tool call awaiting a decision: the tool, its proposed arguments, its input schema and
/// the decisions allowed.
///
/// The input schema is compiled when the value is built (or deserialized); a schema that is
/// not valid JSON Schema, or that refers to an external document, is refused then, so edited
/// arguments can always be revalidated. By default a call allows `approve` and `reject`;
/// [`allow_edit`](Self::allow_edit) or [`with_allowed`](Self::with_allowed) opt in to more or
/// fewer, because an adapter must only offer what it can honestly resume with.
///
/// ```
/// use harness_core::action::{DecisionKind, ToolCallApproval};
/// use serde_json::json;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let call = ToolCallApproval::new(
///     "call_1".parse()?, "shell", json!({"cmd": "ls"}),
///     json!({"type": "object", "properties": {"cmd": {"type": "string"}}}),
/// )?;
/// assert!(call.allows(DecisionKind::Approve) && !call.allows(DecisionKind::Edit));
/// assert!(call.validate_arguments(&json!({"cmd": "pwd"})).is_ok());
/// let violations = call.validate_arguments(&json!({"cmd": ["rm"]})).unwrap_err();
/// assert_eq!(violations[0].pointer, "/cmd");
///
/// let err = ToolCallApproval::new("call_2".parse()?, "shell", json!({}), json!({"type": 12}))
///     .unwrap_err();
/// assert!(err.to_string().contains("not a valid JSON Schema"), "{err}");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolCallApproval {
    /// The tool call this decision is about; unique within the approval.
    call_id: ToolCallId,
    /// The tool's stable name.
    tool: String,
    /// The arguments the agent proposed.
    arguments: Value,
    /// The tool's input JSON Schema; edited arguments must satisfy it.
    input_schema: Value,
    /// The decisions the caller may take on this call: at least one.
    #[schemars(length(min = 1))]
    allowed: BTreeSet<DecisionKind>,
    #[serde(skip)]
    compiled: CompiledSchema,
}

impl ToolCallApproval {
    /// A call allowing `approve` and `reject`.
    ///
    /// # Errors
    ///
    /// [`ApprovalDefinitionError::EmptyToolName`] for a blank tool name and
    /// [`ApprovalDefinitionError::InvalidInputSchema`] for a schema that does not compile.
    pub fn new(
        call_id: ToolCallId,
        tool: impl Into<String>,
        arguments: Value,
        input_schema: Value,
    ) -> Result<Self, ApprovalDefinitionError> {
        let tool = tool.into();
        if tool.trim().is_empty() {
            return Err(ApprovalDefinitionError::EmptyToolName { call_id });
        }
        let compiled = match CompiledSchema::compile(&input_schema) {
            Ok(compiled) => compiled,
            Err(reason) => {
                return Err(ApprovalDefinitionError::InvalidInputSchema {
                    call_id,
                    tool,
                    reason,
                });
            }
        };
        Ok(Self {
            call_id,
            tool,
            arguments,
            input_schema,
            allowed: BTreeSet::from([DecisionKind::Approve, DecisionKind::Reject]),
            compiled,
        })
    }

    /// Also allows editing the arguments.
    #[must_use]
    pub fn allow_edit(mut self) -> Self {
        self.allowed.insert(DecisionKind::Edit);
        self
    }

    /// Replaces the allowed decisions.
    ///
    /// # Errors
    ///
    /// [`ApprovalDefinitionError::NoAllowedDecisions`] when `allowed` is empty.
    pub fn with_allowed(
        mut self,
        allowed: impl IntoIterator<Item = DecisionKind>,
    ) -> Result<Self, ApprovalDefinitionError> {
        let allowed: BTreeSet<_> = allowed.into_iter().collect();
        if allowed.is_empty() {
            return Err(ApprovalDefinitionError::NoAllowedDecisions {
                call_id: self.call_id,
            });
        }
        self.allowed = allowed;
        Ok(self)
    }

    /// The tool call id.
    #[must_use]
    pub fn call_id(&self) -> &ToolCallId {
        &self.call_id
    }

    /// The tool name.
    #[must_use]
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The proposed arguments.
    #[must_use]
    pub fn arguments(&self) -> &Value {
        &self.arguments
    }

    /// The tool's input schema.
    #[must_use]
    pub fn input_schema(&self) -> &Value {
        &self.input_schema
    }

    /// The allowed decisions.
    #[must_use]
    pub fn allowed(&self) -> &BTreeSet<DecisionKind> {
        &self.allowed
    }

    /// Whether `decision` is allowed.
    #[must_use]
    pub fn allows(&self, decision: DecisionKind) -> bool {
        self.allowed.contains(&decision)
    }

    /// Checks `arguments` against the tool's input schema.
    ///
    /// # Errors
    ///
    /// Every violation, with the JSON pointer of the offending value. Messages mask the
    /// submitted values.
    pub fn validate_arguments(&self, arguments: &Value) -> Result<(), Vec<SchemaViolation>> {
        let violations = self.compiled.violations(arguments);
        if violations.is_empty() {
            Ok(())
        } else {
            Err(violations)
        }
    }
}

impl fmt::Debug for ToolCallApproval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolCallApproval")
            .field("call_id", &self.call_id)
            .field("tool", &self.tool)
            .field("arguments", &self.arguments)
            .field("input_schema", &self.input_schema)
            .field("allowed", &self.allowed)
            .finish()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ToolCallApprovalWire {
    call_id: ToolCallId,
    tool: String,
    arguments: Value,
    input_schema: Value,
    allowed: BTreeSet<DecisionKind>,
}

impl<'de> Deserialize<'de> for ToolCallApproval {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let wire = ToolCallApprovalWire::deserialize(d)?;
        Self::new(wire.call_id, wire.tool, wire.arguments, wire.input_schema)
            .and_then(|call| call.with_allowed(wire.allowed))
            .map_err(serde::de::Error::custom)
    }
}

/// A tool approval: one or more tool calls with distinct ids.
///
/// ```
/// use harness_core::action::{ApprovalRequest, ToolCallApproval};
/// use serde_json::json;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let call = |id: &str| -> Result<ToolCallApproval, Box<dyn std::error::Error>> {
///     Ok(ToolCallApproval::new(id.parse()?, "t", json!({}), json!(true))?)
/// };
/// let approval = ApprovalRequest::new([call("c1")?, call("c2")?])?;
/// assert_eq!(approval.calls().len(), 2);
/// let err = ApprovalRequest::new([call("c1")?, call("c1")?]).unwrap_err();
/// assert_eq!(err.to_string(),
///            "tool call `c1` appears more than once; call ids must be unique within an approval");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalRequest {
    /// The calls awaiting a decision, in the order they were proposed.
    #[schemars(length(min = 1))]
    calls: Vec<ToolCallApproval>,
}

impl ApprovalRequest {
    /// An approval of `calls`.
    ///
    /// # Errors
    ///
    /// [`ApprovalDefinitionError::NoCalls`] when there is no call and
    /// [`ApprovalDefinitionError::DuplicateCall`] when two calls share an id.
    pub fn new(
        calls: impl IntoIterator<Item = ToolCallApproval>,
    ) -> Result<Self, ApprovalDefinitionError> {
        let calls: Vec<_> = calls.into_iter().collect();
        if calls.is_empty() {
            return Err(ApprovalDefinitionError::NoCalls);
        }
        let mut seen = BTreeSet::new();
        for call in &calls {
            if !seen.insert(call.call_id()) {
                return Err(ApprovalDefinitionError::DuplicateCall {
                    call_id: call.call_id.clone(),
                });
            }
        }
        Ok(Self { calls })
    }

    /// An approval of one call allowing `approve` and `reject` (see
    /// [`ApprovalRequest::allow_edit`]).
    ///
    /// # Errors
    ///
    /// As [`ToolCallApproval::new`].
    pub fn single(
        call_id: ToolCallId,
        tool: impl Into<String>,
        arguments: Value,
        input_schema: Value,
    ) -> Result<Self, ApprovalDefinitionError> {
        Self::new([ToolCallApproval::new(
            call_id,
            tool,
            arguments,
            input_schema,
        )?])
    }

    /// Allows editing the arguments of every call.
    #[must_use]
    pub fn allow_edit(mut self) -> Self {
        for call in &mut self.calls {
            call.allowed.insert(DecisionKind::Edit);
        }
        self
    }

    /// The calls, in proposal order.
    #[must_use]
    pub fn calls(&self) -> &[ToolCallApproval] {
        &self.calls
    }

    /// The call with id `call_id`.
    #[must_use]
    pub fn call(&self, call_id: &ToolCallId) -> Option<&ToolCallApproval> {
        self.calls.iter().find(|c| &c.call_id == call_id)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ApprovalRequestWire {
    calls: Vec<ToolCallApproval>,
}

impl<'de> Deserialize<'de> for ApprovalRequest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let wire = ApprovalRequestWire::deserialize(d)?;
        Self::new(wire.calls).map_err(serde::de::Error::custom)
    }
}

/// A tool approval definition was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalDefinitionError {
    /// The approval lists no call.
    #[error("a tool approval needs at least one tool call")]
    NoCalls,
    /// Two calls share an id.
    #[error(
        "tool call `{call_id}` appears more than once; call ids must be unique within an approval"
    )]
    DuplicateCall {
        /// The repeated id.
        call_id: ToolCallId,
    },
    /// The tool name is blank.
    #[error("tool call `{call_id}` has a blank tool name; name the tool being called")]
    EmptyToolName {
        /// The call.
        call_id: ToolCallId,
    },
    /// The call allows no decision at all.
    #[error(
        "tool call `{call_id}` allows no decision; allow at least one of approve, reject, edit"
    )]
    NoAllowedDecisions {
        /// The call.
        call_id: ToolCallId,
    },
    /// The tool's input schema does not compile.
    #[error(
        "tool call `{call_id}` (`{tool}`): the input schema is not a valid JSON Schema: {reason}"
    )]
    InvalidInputSchema {
        /// The call.
        call_id: ToolCallId,
        /// The tool.
        tool: String,
        /// Why the schema was refused.
        reason: String,
    },
}

// ---------------------------------------------------------------------------------------------
// Action requests
// ---------------------------------------------------------------------------------------------

/// Which kind of action a request or response is. Wire: `form_input` / `tool_approval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ActionType {
    /// A form to fill in.
    FormInput,
    /// Tool calls to decide on.
    ToolApproval,
}

impl ActionType {
    /// The wire name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::FormInput => "form_input",
            Self::ToolApproval => "tool_approval",
        }
    }
}

impl fmt::Display for ActionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an action request asks for. Wire: internally tagged, `{"type": "form_input", ...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ActionKind {
    /// Fill in a form.
    FormInput(FormRequest),
    /// Decide on tool calls.
    ToolApproval(ApprovalRequest),
}

impl ActionKind {
    /// The kind without its data.
    #[must_use]
    pub fn action_type(&self) -> ActionType {
        match self {
            Self::FormInput(_) => ActionType::FormInput,
            Self::ToolApproval(_) => ActionType::ToolApproval,
        }
    }
}

impl From<FormRequest> for ActionKind {
    fn from(form: FormRequest) -> Self {
        Self::FormInput(form)
    }
}

impl From<ApprovalRequest> for ActionKind {
    fn from(approval: ApprovalRequest) -> Self {
        Self::ToolApproval(approval)
    }
}

const fn default_dismissible() -> bool {
    true
}

/// A pending request for caller input or approval.
///
/// Every answer names the request's `id` and `revision`. **Dismiss** is a whole-action answer
/// available on both kinds: the caller declines to fill in the form or to decide, and the
/// adapter resumes with that refusal (typically as if every call were rejected). A request
/// that must be answered sets `dismissible: false` (default `true` on the wire), and a dismiss
/// is then refused with [`ActionResponseError::DismissNotAllowed`].
///
/// ```
/// use harness_core::action::{ActionRequest, ApprovalRequest, Revision};
/// use serde_json::json;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let approval = ApprovalRequest::single("c1".parse()?, "shell", json!({"cmd": "ls"}), json!({}))?;
/// let request = ActionRequest::approval(approval)
///     .with_id("act_1".parse()?)
///     .with_created_at("2026-11-30T12:00:00Z".parse()?)
///     .with_dismissible(false);
/// let wire = serde_json::to_value(&request)?;
/// assert_eq!(wire["kind"]["type"], "tool_approval");
/// assert_eq!(wire["revision"], 1);
/// assert_eq!(wire["createdAt"], "2026-11-30T12:00:00Z");
/// let back: ActionRequest = serde_json::from_value(wire)?;
/// assert_eq!(back, request);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActionRequest {
    /// The action's identity.
    pub id: ActionId,
    /// The current revision; answers must name it.
    pub revision: Revision,
    /// When this revision was created.
    pub created_at: Timestamp,
    /// Whether the caller may dismiss the whole action instead of answering it.
    #[serde(default = "default_dismissible")]
    pub dismissible: bool,
    /// What is asked.
    pub kind: ActionKind,
}

impl ActionRequest {
    /// A dismissible request with a fresh id, revision 1, created now.
    #[must_use]
    pub fn new(kind: impl Into<ActionKind>) -> Self {
        Self {
            id: ActionId::generate(),
            revision: Revision::FIRST,
            created_at: Timestamp::now(),
            dismissible: true,
            kind: kind.into(),
        }
    }

    /// A form request (see [`ActionRequest::new`]).
    #[must_use]
    pub fn form(form: FormRequest) -> Self {
        Self::new(form)
    }

    /// A tool approval request (see [`ActionRequest::new`]).
    #[must_use]
    pub fn approval(approval: ApprovalRequest) -> Self {
        Self::new(approval)
    }

    /// Replaces the id.
    #[must_use]
    pub fn with_id(mut self, id: ActionId) -> Self {
        self.id = id;
        self
    }

    /// Replaces the revision.
    #[must_use]
    pub fn with_revision(mut self, revision: Revision) -> Self {
        self.revision = revision;
        self
    }

    /// Replaces the creation time.
    #[must_use]
    pub fn with_created_at(mut self, created_at: Timestamp) -> Self {
        self.created_at = created_at;
        self
    }

    /// Sets whether the action may be dismissed.
    #[must_use]
    pub fn with_dismissible(mut self, dismissible: bool) -> Self {
        self.dismissible = dismissible;
        self
    }

    /// The kind without its data.
    #[must_use]
    pub fn action_type(&self) -> ActionType {
        self.kind.action_type()
    }

    /// An answer approving every call of this tool approval, for this request's id and
    /// revision. (On a form request it names no call, and answering with it is refused as
    /// the wrong kind.)
    ///
    /// ```
    /// use harness_core::action::{ActionRequest, ApprovalRequest, ToolCallApproval};
    /// use serde_json::json;
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let call = ToolCallApproval::new("c1".parse()?, "shell", json!({"cmd": "ls"}), json!({"type": "object"}))?;
    /// let request = ActionRequest::approval(ApprovalRequest::new([call])?);
    /// let approve = request.approve_all();
    /// let reject = request.reject(&"c1".parse()?, "not today");
    /// let edit = request.edit(&"c1".parse()?, json!({"cmd": "ls -la"}));
    /// for answer in [&approve, &reject, &edit] {
    ///     assert_eq!(answer.action_id(), &request.id);
    ///     assert_eq!(answer.revision(), request.revision);
    /// }
    /// assert_eq!(serde_json::to_value(&reject)?["answer"]["decisions"][0]["decision"]["type"], "reject");
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn approve_all(&self) -> ActionResponse {
        self.decide(|_| Decision::Approve)
    }

    /// An answer rejecting every call of this tool approval, with `reason`.
    #[must_use]
    pub fn reject_all(&self, reason: impl Into<String>) -> ActionResponse {
        let reason = reason.into();
        self.decide(|_| Decision::Reject {
            reason: Some(reason.clone()),
        })
    }

    /// An answer rejecting the call `call_id` with `reason` and approving every other call.
    #[must_use]
    pub fn reject(&self, call_id: &ToolCallId, reason: impl Into<String>) -> ActionResponse {
        let reason = reason.into();
        self.decide(|call| {
            if call.call_id() == call_id {
                Decision::Reject {
                    reason: Some(reason.clone()),
                }
            } else {
                Decision::Approve
            }
        })
    }

    /// An answer running the call `call_id` with `arguments` instead (revalidated against
    /// its input schema when answered) and approving every other call.
    #[must_use]
    pub fn edit(&self, call_id: &ToolCallId, arguments: Value) -> ActionResponse {
        let mut arguments = Some(arguments);
        self.decide(
            |call| match arguments.take_if(|_| call.call_id() == call_id) {
                Some(arguments) => Decision::Edit { arguments },
                None => Decision::Approve,
            },
        )
    }

    /// An answer with the decision `decide` makes for each call of this tool approval.
    #[must_use]
    pub fn decide(&self, mut decide: impl FnMut(&ToolCallApproval) -> Decision) -> ActionResponse {
        let calls = match &self.kind {
            ActionKind::ToolApproval(approval) => approval.calls(),
            ActionKind::FormInput(_) => &[],
        };
        let decisions = calls.iter().map(|call| ToolDecision {
            call_id: call.call_id().clone(),
            decision: decide(call),
        });
        ApprovalResponse::decide(self.id.clone(), self.revision, decisions).into()
    }

    /// An answer submitting `values` to this form (validated against its fields when
    /// answered).
    ///
    /// ```
    /// use harness_core::action::{ActionRequest, FieldKind, FormField, FormRequest, FormValues};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let form = FormRequest::new([FormField::new("name".parse()?, "Name", FieldKind::text())])?;
    /// let request = ActionRequest::form(form);
    /// let answer = request.submit(FormValues::new().with("name", "Ada"));
    /// assert_eq!(serde_json::to_value(&answer)?["answer"]["values"]["name"], "Ada");
    /// assert_eq!(request.dismiss().revision(), request.revision);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn submit(&self, values: FormValues) -> ActionResponse {
        FormResponse::submit(self.id.clone(), self.revision, values).into()
    }

    /// An answer dismissing this action (form or tool approval) as a whole.
    #[must_use]
    pub fn dismiss(&self) -> ActionResponse {
        match &self.kind {
            ActionKind::FormInput(_) => {
                FormResponse::dismiss(self.id.clone(), self.revision).into()
            }
            ActionKind::ToolApproval(_) => {
                ApprovalResponse::dismiss(self.id.clone(), self.revision).into()
            }
        }
    }

    /// The form, if this is a form request.
    #[must_use]
    pub fn as_form(&self) -> Option<&FormRequest> {
        match &self.kind {
            ActionKind::FormInput(form) => Some(form),
            ActionKind::ToolApproval(_) => None,
        }
    }

    /// The approval, if this is a tool approval request.
    #[must_use]
    pub fn as_approval(&self) -> Option<&ApprovalRequest> {
        match &self.kind {
            ActionKind::ToolApproval(approval) => Some(approval),
            ActionKind::FormInput(_) => None,
        }
    }

    /// Checks that an answer names this action and its current revision.
    fn check_target(
        &self,
        action_id: &ActionId,
        revision: Revision,
    ) -> Result<(), ActionResponseError> {
        if *action_id != self.id {
            return Err(ActionResponseError::ActionMismatch {
                pending: self.id.clone(),
                answered: action_id.clone(),
            });
        }
        if revision != self.revision {
            return Err(ActionResponseError::StaleRevision {
                action: self.id.clone(),
                pending: self.revision,
                answered: revision,
            });
        }
        Ok(())
    }

    /// Checks a form answer against this request: id, revision, kind, dismissal, then every
    /// submitted value.
    ///
    /// # Errors
    ///
    /// The first failed check, as an [`ActionResponseError`]; invalid values are reported
    /// all together in [`ActionResponseError::InvalidFormValues`].
    pub fn validate_form(
        &self,
        response: FormResponse,
    ) -> Result<ValidatedForm, ActionResponseError> {
        self.check_target(&response.action_id, response.revision)?;
        let ActionKind::FormInput(form) = &self.kind else {
            return Err(ActionResponseError::KindMismatch {
                action: self.id.clone(),
                expected: self.action_type(),
                found: ActionType::FormInput,
            });
        };
        let answered = match &response.answer {
            FormAnswer::Dismiss => {
                if !self.dismissible {
                    return Err(ActionResponseError::DismissNotAllowed {
                        action: self.id.clone(),
                    });
                }
                Vec::new()
            }
            FormAnswer::Submit(values) => {
                form.validate(values).map_err(|violations| {
                    ActionResponseError::InvalidFormValues {
                        action: self.id.clone(),
                        violations,
                    }
                })?;
                form.answered(values)
            }
        };
        Ok(ValidatedForm {
            action_id: response.action_id,
            revision: response.revision,
            idempotency_key: response.idempotency_key,
            answer: response.answer,
            answered,
        })
    }

    /// Checks an approval answer against this request: id, revision, kind, dismissal, then
    /// each decision in the order given (known call, not repeated, allowed, edited arguments
    /// valid), then that every call has a decision.
    ///
    /// # Errors
    ///
    /// The first failed check, as an [`ActionResponseError`].
    pub fn validate_approval(
        &self,
        response: ApprovalResponse,
    ) -> Result<ValidatedApproval, ActionResponseError> {
        self.check_target(&response.action_id, response.revision)?;
        let ActionKind::ToolApproval(approval) = &self.kind else {
            return Err(ActionResponseError::KindMismatch {
                action: self.id.clone(),
                expected: self.action_type(),
                found: ActionType::ToolApproval,
            });
        };
        let answer = match response.answer {
            ApprovalAnswer::Dismiss => {
                if !self.dismissible {
                    return Err(ActionResponseError::DismissNotAllowed {
                        action: self.id.clone(),
                    });
                }
                ApprovalAnswer::Dismiss
            }
            ApprovalAnswer::Decide(decisions) => {
                ApprovalAnswer::Decide(self.check_decisions(approval, decisions)?)
            }
        };
        Ok(ValidatedApproval {
            action_id: response.action_id,
            revision: response.revision,
            idempotency_key: response.idempotency_key,
            answer,
        })
    }

    /// Validates the decisions and returns them in the request's call order.
    fn check_decisions(
        &self,
        approval: &ApprovalRequest,
        decisions: Vec<ToolDecision>,
    ) -> Result<Vec<ToolDecision>, ActionResponseError> {
        let mut by_call: HashMap<ToolCallId, ToolDecision> = HashMap::new();
        for decision in decisions {
            let Some(call) = approval.call(&decision.call_id) else {
                return Err(ActionResponseError::UnknownCall {
                    action: self.id.clone(),
                    call_id: decision.call_id,
                    known: approval.calls.iter().map(|c| c.call_id.clone()).collect(),
                });
            };
            if by_call.contains_key(&decision.call_id) {
                return Err(ActionResponseError::DuplicateDecision {
                    action: self.id.clone(),
                    call_id: decision.call_id,
                });
            }
            let kind = decision.decision.kind();
            if !call.allows(kind) {
                return Err(ActionResponseError::DecisionNotAllowed {
                    action: self.id.clone(),
                    call_id: decision.call_id,
                    decision: kind,
                    allowed: call.allowed.iter().copied().collect(),
                });
            }
            if let Decision::Edit { arguments } = &decision.decision {
                call.validate_arguments(arguments).map_err(|violations| {
                    ActionResponseError::InvalidEditedArguments {
                        action: self.id.clone(),
                        call_id: call.call_id.clone(),
                        tool: call.tool.clone(),
                        violations,
                    }
                })?;
            }
            by_call.insert(decision.call_id.clone(), decision);
        }
        let missing: Vec<ToolCallId> = approval
            .calls
            .iter()
            .filter(|c| !by_call.contains_key(&c.call_id))
            .map(|c| c.call_id.clone())
            .collect();
        if !missing.is_empty() {
            return Err(ActionResponseError::MissingDecision {
                action: self.id.clone(),
                calls: missing,
            });
        }
        Ok(approval
            .calls
            .iter()
            .filter_map(|c| by_call.remove(&c.call_id))
            .collect())
    }

    /// Checks an untyped answer against this request (see [`validate_form`] and
    /// [`validate_approval`]); an answer of the other kind is refused with
    /// [`ActionResponseError::KindMismatch`].
    ///
    /// [`validate_form`]: Self::validate_form
    /// [`validate_approval`]: Self::validate_approval
    ///
    /// # Errors
    ///
    /// The first failed check, as an [`ActionResponseError`].
    pub fn validate(
        &self,
        response: ActionResponse,
    ) -> Result<ValidatedResponse, ActionResponseError> {
        match response {
            ActionResponse::FormInput(r) => self.validate_form(r).map(ValidatedResponse::Form),
            ActionResponse::ToolApproval(r) => {
                self.validate_approval(r).map(ValidatedResponse::Approval)
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------------------

/// The answer to a form. Wire: `{"type": "submit", "values": {...}}` or `{"type": "dismiss"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "type",
    content = "values",
    rename_all = "snake_case",
    deny_unknown_fields
)]
pub enum FormAnswer {
    /// Submit these values.
    Submit(FormValues),
    /// Decline the whole form.
    Dismiss,
}

/// A caller's answer to a form request.
///
/// ```
/// use harness_core::action::{FormResponse, FormValues, Revision};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let r = FormResponse::submit("act_1".parse()?, Revision::FIRST, FormValues::new().with("x", 1))
///     .with_idempotency_key("answer-1".parse()?);
/// assert_eq!(
///     serde_json::to_string(&r)?,
///     r#"{"actionId":"act_1","revision":1,"idempotencyKey":"answer-1","answer":{"type":"submit","values":{"x":1}}}"#
/// );
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FormResponse {
    /// The action answered.
    pub action_id: ActionId,
    /// The revision answered.
    pub revision: Revision,
    /// Makes a retried answer recognizable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<IdempotencyKey>,
    /// The answer.
    pub answer: FormAnswer,
}

impl FormResponse {
    /// Submits `values`.
    #[must_use]
    pub fn submit(action_id: ActionId, revision: Revision, values: FormValues) -> Self {
        Self {
            action_id,
            revision,
            idempotency_key: None,
            answer: FormAnswer::Submit(values),
        }
    }

    /// Dismisses the form.
    #[must_use]
    pub fn dismiss(action_id: ActionId, revision: Revision) -> Self {
        Self {
            action_id,
            revision,
            idempotency_key: None,
            answer: FormAnswer::Dismiss,
        }
    }

    /// Sets the idempotency key.
    #[must_use]
    pub fn with_idempotency_key(mut self, key: IdempotencyKey) -> Self {
        self.idempotency_key = Some(key);
        self
    }
}

/// A decision on one tool call. Wire: internally tagged, `{"type": "reject", "reason": "..."}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Decision {
    /// Run the call as proposed.
    #[serde(deserialize_with = "no_fields")]
    Approve,
    /// Do not run the call.
    Reject {
        /// Why, for the agent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Run the call with these arguments instead (a full replacement, not a patch); they must
    /// satisfy the tool's input schema.
    Edit {
        /// The replacement arguments.
        arguments: Value,
    },
}

impl Decision {
    /// The kind of decision.
    #[must_use]
    pub fn kind(&self) -> DecisionKind {
        match self {
            Self::Approve => DecisionKind::Approve,
            Self::Reject { .. } => DecisionKind::Reject,
            Self::Edit { .. } => DecisionKind::Edit,
        }
    }
}

/// A decision on the tool call `call_id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolDecision {
    /// The call decided on.
    pub call_id: ToolCallId,
    /// The decision.
    pub decision: Decision,
}

impl ToolDecision {
    /// Approves the call.
    #[must_use]
    pub fn approve(call_id: ToolCallId) -> Self {
        Self {
            call_id,
            decision: Decision::Approve,
        }
    }

    /// Rejects the call without a reason.
    #[must_use]
    pub fn reject(call_id: ToolCallId) -> Self {
        Self {
            call_id,
            decision: Decision::Reject { reason: None },
        }
    }

    /// Rejects the call, telling the agent why.
    #[must_use]
    pub fn reject_because(call_id: ToolCallId, reason: impl Into<String>) -> Self {
        Self {
            call_id,
            decision: Decision::Reject {
                reason: Some(reason.into()),
            },
        }
    }

    /// Runs the call with `arguments` instead.
    #[must_use]
    pub fn edit(call_id: ToolCallId, arguments: Value) -> Self {
        Self {
            call_id,
            decision: Decision::Edit { arguments },
        }
    }
}

/// The answer to a tool approval. Wire: `{"type": "decide", "decisions": [...]}` or
/// `{"type": "dismiss"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "type",
    content = "decisions",
    rename_all = "snake_case",
    deny_unknown_fields
)]
pub enum ApprovalAnswer {
    /// Exactly one decision per call.
    Decide(Vec<ToolDecision>),
    /// Decline the whole action.
    Dismiss,
}

/// A caller's answer to a tool approval request.
///
/// ```
/// use harness_core::action::{ApprovalResponse, Revision, ToolDecision};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let r = ApprovalResponse::decide("act_1".parse()?, Revision::FIRST,
///                                  [ToolDecision::reject_because("c1".parse()?, "too risky")]);
/// assert_eq!(
///     serde_json::to_string(&r)?,
///     r#"{"actionId":"act_1","revision":1,"answer":{"type":"decide","decisions":[{"callId":"c1","decision":{"type":"reject","reason":"too risky"}}]}}"#
/// );
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalResponse {
    /// The action answered.
    pub action_id: ActionId,
    /// The revision answered.
    pub revision: Revision,
    /// Makes a retried answer recognizable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<IdempotencyKey>,
    /// The answer.
    pub answer: ApprovalAnswer,
}

impl ApprovalResponse {
    /// Decides on the calls.
    #[must_use]
    pub fn decide(
        action_id: ActionId,
        revision: Revision,
        decisions: impl IntoIterator<Item = ToolDecision>,
    ) -> Self {
        Self {
            action_id,
            revision,
            idempotency_key: None,
            answer: ApprovalAnswer::Decide(decisions.into_iter().collect()),
        }
    }

    /// Dismisses the whole action.
    #[must_use]
    pub fn dismiss(action_id: ActionId, revision: Revision) -> Self {
        Self {
            action_id,
            revision,
            idempotency_key: None,
            answer: ApprovalAnswer::Dismiss,
        }
    }

    /// Sets the idempotency key.
    #[must_use]
    pub fn with_idempotency_key(mut self, key: IdempotencyKey) -> Self {
        self.idempotency_key = Some(key);
        self
    }
}

/// An answer of either kind, for the wire and the untyped API. Wire: internally tagged,
/// `{"type": "form_input", "actionId": ...}` / `{"type": "tool_approval", ...}`.
///
/// ```
/// use harness_core::action::{ActionResponse, ActionType};
/// let r: ActionResponse = serde_json::from_str(
///     r#"{"type":"tool_approval","actionId":"act_1","revision":2,"answer":{"type":"dismiss"}}"#,
/// ).unwrap();
/// assert_eq!(r.action_type(), ActionType::ToolApproval);
/// assert_eq!(r.revision().get(), 2);
/// assert!(r.into_form().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ActionResponse {
    /// An answer to a form.
    FormInput(FormResponse),
    /// An answer to a tool approval.
    ToolApproval(ApprovalResponse),
}

impl ActionResponse {
    /// The kind answered.
    #[must_use]
    pub fn action_type(&self) -> ActionType {
        match self {
            Self::FormInput(_) => ActionType::FormInput,
            Self::ToolApproval(_) => ActionType::ToolApproval,
        }
    }

    /// The action answered.
    #[must_use]
    pub fn action_id(&self) -> &ActionId {
        match self {
            Self::FormInput(r) => &r.action_id,
            Self::ToolApproval(r) => &r.action_id,
        }
    }

    /// The revision answered.
    #[must_use]
    pub fn revision(&self) -> Revision {
        match self {
            Self::FormInput(r) => r.revision,
            Self::ToolApproval(r) => r.revision,
        }
    }

    /// The idempotency key.
    #[must_use]
    pub fn idempotency_key(&self) -> Option<&IdempotencyKey> {
        match self {
            Self::FormInput(r) => r.idempotency_key.as_ref(),
            Self::ToolApproval(r) => r.idempotency_key.as_ref(),
        }
    }

    /// Whether the answer dismisses the action.
    #[must_use]
    pub fn is_dismiss(&self) -> bool {
        match self {
            Self::FormInput(r) => matches!(r.answer, FormAnswer::Dismiss),
            Self::ToolApproval(r) => matches!(r.answer, ApprovalAnswer::Dismiss),
        }
    }

    /// The form answer, if it is one.
    #[must_use]
    pub fn as_form(&self) -> Option<&FormResponse> {
        match self {
            Self::FormInput(r) => Some(r),
            Self::ToolApproval(_) => None,
        }
    }

    /// The approval answer, if it is one.
    #[must_use]
    pub fn as_approval(&self) -> Option<&ApprovalResponse> {
        match self {
            Self::ToolApproval(r) => Some(r),
            Self::FormInput(_) => None,
        }
    }

    /// The form answer, or `self` back when it is an approval answer.
    ///
    /// # Errors
    ///
    /// `self`, unchanged, when it is not a form answer.
    pub fn into_form(self) -> Result<FormResponse, Self> {
        match self {
            Self::FormInput(r) => Ok(r),
            other @ Self::ToolApproval(_) => Err(other),
        }
    }

    /// The approval answer, or `self` back when it is a form answer.
    ///
    /// # Errors
    ///
    /// `self`, unchanged, when it is not an approval answer.
    pub fn into_approval(self) -> Result<ApprovalResponse, Self> {
        match self {
            Self::ToolApproval(r) => Ok(r),
            other @ Self::FormInput(_) => Err(other),
        }
    }
}

impl From<FormResponse> for ActionResponse {
    fn from(r: FormResponse) -> Self {
        Self::FormInput(r)
    }
}

impl From<ApprovalResponse> for ActionResponse {
    fn from(r: ApprovalResponse) -> Self {
        Self::ToolApproval(r)
    }
}

// ---------------------------------------------------------------------------------------------
// Validation results and errors
// ---------------------------------------------------------------------------------------------

/// One way edited tool arguments break the tool's input schema.
///
/// ```
/// use harness_core::action::SchemaViolation;
/// let v = SchemaViolation {
///     pointer: "/path".into(),
///     keyword_location: "/properties/path/type".into(),
///     message: "value is not of type \"string\"".into(),
/// };
/// assert_eq!(v.to_string(), "at `/path`: value is not of type \"string\"");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SchemaViolation {
    /// The JSON pointer (RFC 6901) of the offending value; empty for the whole document.
    pub pointer: String,
    /// The JSON pointer of the schema keyword that failed.
    pub keyword_location: String,
    /// What is wrong; submitted values are masked as `value`.
    pub message: String,
}

impl fmt::Display for SchemaViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pointer.is_empty() {
            write!(f, "at the root: {}", self.message)
        } else {
            write!(f, "at `{}`: {}", self.pointer, self.message)
        }
    }
}

/// An answer was refused: it does not fit the pending request.
///
/// [`code`](Self::code) gives the stable error code; converting into a [`HarnessError`] gives
/// category `configuration`, because the caller's answer was invalid and sending the same
/// answer again cannot succeed: the caller must fix it (the category is therefore not
/// retryable). It is not `protocol`, which blames the adapter's events, nor `internal`.
/// Messages name ids, revisions, field names, options and schema locations, never the values
/// the caller submitted, so they are safe to return to the caller.
///
/// ```
/// use harness_core::action::{ActionResponseError, Revision};
/// use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let err = ActionResponseError::StaleRevision {
///     action: "act_1".parse()?,
///     pending: Revision::FIRST.next(),
///     answered: Revision::FIRST,
/// };
/// assert_eq!(err.code(), ErrorCode::ACTION_REVISION_STALE);
/// let harness = HarnessError::from(err);
/// assert_eq!(harness.category(), ErrorCategory::Configuration);
/// assert!(!harness.retryable());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ActionResponseError {
    /// The answer names another action than the pending one.
    #[error("the answer targets action `{answered}` but the pending action is `{pending}`")]
    ActionMismatch {
        /// The pending action.
        pending: ActionId,
        /// The action the answer names.
        answered: ActionId,
    },
    /// The answer names another revision than the pending one.
    #[error(
        "the answer to action `{action}` names revision {answered} but the pending revision is \
         {pending}; answer revision {pending}"
    )]
    StaleRevision {
        /// The action.
        action: ActionId,
        /// The pending revision.
        pending: Revision,
        /// The revision the answer names.
        answered: Revision,
    },
    /// A form answered with an approval, or the reverse.
    #[error("action `{action}` is a {expected} request but was answered with a {found} response")]
    KindMismatch {
        /// The action.
        action: ActionId,
        /// The kind of the pending request.
        expected: ActionType,
        /// The kind of the answer.
        found: ActionType,
    },
    /// Submitted form values do not fit the form.
    #[error("invalid form values for action `{action}`: {}", listed(.violations))]
    InvalidFormValues {
        /// The action.
        action: ActionId,
        /// Every violation.
        violations: Vec<FieldViolation>,
    },
    /// Some calls have no decision.
    #[error(
        "action `{action}`: no decision for tool call(s) {}; every call needs exactly one decision",
        ticked(.calls)
    )]
    MissingDecision {
        /// The action.
        action: ActionId,
        /// The calls without a decision, in request order.
        calls: Vec<ToolCallId>,
    },
    /// A decision names a call the request does not contain.
    #[error(
        "action `{action}`: decision for unknown tool call `{call_id}`; the calls are {}",
        ticked(.known)
    )]
    UnknownCall {
        /// The action.
        action: ActionId,
        /// The unknown call.
        call_id: ToolCallId,
        /// The calls of the request.
        known: Vec<ToolCallId>,
    },
    /// Two decisions name the same call.
    #[error(
        "action `{action}`: tool call `{call_id}` has more than one decision; give exactly one"
    )]
    DuplicateDecision {
        /// The action.
        action: ActionId,
        /// The call decided twice.
        call_id: ToolCallId,
    },
    /// The decision is not among those the call allows.
    #[error(
        "action `{action}`: `{decision}` is not allowed for tool call `{call_id}`; allowed: {}",
        ticked(.allowed)
    )]
    DecisionNotAllowed {
        /// The action.
        action: ActionId,
        /// The call.
        call_id: ToolCallId,
        /// The refused decision.
        decision: DecisionKind,
        /// The decisions the call allows.
        allowed: Vec<DecisionKind>,
    },
    /// The request may not be dismissed.
    #[error("action `{action}` may not be dismissed; answer it instead")]
    DismissNotAllowed {
        /// The action.
        action: ActionId,
    },
    /// Edited arguments do not satisfy the tool's input schema.
    #[error(
        "action `{action}`: edited arguments for tool call `{call_id}` (`{tool}`) do not match \
         the tool's input schema: {}",
        listed(.violations)
    )]
    InvalidEditedArguments {
        /// The action.
        action: ActionId,
        /// The call.
        call_id: ToolCallId,
        /// The tool.
        tool: String,
        /// Every violation, with its JSON pointer.
        violations: Vec<SchemaViolation>,
    },
}

impl ActionResponseError {
    /// The stable code: [`ErrorCode::ACTION_NOT_FOUND`] when the answer names another action,
    /// [`ErrorCode::ACTION_REVISION_STALE`] for another revision, and
    /// [`ErrorCode::ACTION_RESPONSE_INVALID`] when the answer does not fit the request.
    #[must_use]
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::ActionMismatch { .. } => ErrorCode::ACTION_NOT_FOUND,
            Self::StaleRevision { .. } => ErrorCode::ACTION_REVISION_STALE,
            Self::KindMismatch { .. }
            | Self::InvalidFormValues { .. }
            | Self::MissingDecision { .. }
            | Self::UnknownCall { .. }
            | Self::DuplicateDecision { .. }
            | Self::DecisionNotAllowed { .. }
            | Self::DismissNotAllowed { .. }
            | Self::InvalidEditedArguments { .. } => ErrorCode::ACTION_RESPONSE_INVALID,
        }
    }
}

impl From<ActionResponseError> for HarnessError {
    fn from(err: ActionResponseError) -> Self {
        Self::new(ErrorCategory::Configuration, err.to_string()).with_code(err.code())
    }
}

/// A form answer that fits its request. Only [`ActionRequest::validate_form`] builds one.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedForm {
    action_id: ActionId,
    revision: Revision,
    idempotency_key: Option<IdempotencyKey>,
    answer: FormAnswer,
    answered: Vec<FieldName>,
}

impl ValidatedForm {
    /// The action answered.
    #[must_use]
    pub fn action_id(&self) -> &ActionId {
        &self.action_id
    }

    /// The revision answered.
    #[must_use]
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// The answer's idempotency key.
    #[must_use]
    pub fn idempotency_key(&self) -> Option<&IdempotencyKey> {
        self.idempotency_key.as_ref()
    }

    /// The answer.
    #[must_use]
    pub fn answer(&self) -> &FormAnswer {
        &self.answer
    }

    /// The submitted values; `None` when the form was dismissed.
    #[must_use]
    pub fn values(&self) -> Option<&FormValues> {
        match &self.answer {
            FormAnswer::Submit(values) => Some(values),
            FormAnswer::Dismiss => None,
        }
    }

    /// Whether the form was dismissed.
    #[must_use]
    pub fn is_dismissed(&self) -> bool {
        matches!(self.answer, FormAnswer::Dismiss)
    }

    /// The answer, for the adapter.
    #[must_use]
    pub fn into_answer(self) -> FormAnswer {
        self.answer
    }

    /// The record of this answer for the `action.resolved` event: the names of the fields
    /// answered, not their values (see [`ActionResolution`]).
    #[must_use]
    pub fn resolution(&self) -> ActionResolution {
        ActionResolution {
            action_id: self.action_id.clone(),
            revision: self.revision,
            action_type: ActionType::FormInput,
            idempotency_key: self.idempotency_key.clone(),
            outcome: match self.answer {
                FormAnswer::Submit(_) => ResolutionOutcome::Submitted {
                    fields: self.answered.clone(),
                },
                FormAnswer::Dismiss => ResolutionOutcome::Dismissed,
            },
        }
    }
}

/// An approval answer that fits its request, with decisions in the request's call order. Only
/// [`ActionRequest::validate_approval`] builds one.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedApproval {
    action_id: ActionId,
    revision: Revision,
    idempotency_key: Option<IdempotencyKey>,
    answer: ApprovalAnswer,
}

impl ValidatedApproval {
    /// The action answered.
    #[must_use]
    pub fn action_id(&self) -> &ActionId {
        &self.action_id
    }

    /// The revision answered.
    #[must_use]
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// The answer's idempotency key.
    #[must_use]
    pub fn idempotency_key(&self) -> Option<&IdempotencyKey> {
        self.idempotency_key.as_ref()
    }

    /// The answer; decisions are in the request's call order, one per call.
    #[must_use]
    pub fn answer(&self) -> &ApprovalAnswer {
        &self.answer
    }

    /// The decisions, one per call in request order; `None` when the action was dismissed.
    #[must_use]
    pub fn decisions(&self) -> Option<&[ToolDecision]> {
        match &self.answer {
            ApprovalAnswer::Decide(decisions) => Some(decisions),
            ApprovalAnswer::Dismiss => None,
        }
    }

    /// The decision on `call_id`.
    #[must_use]
    pub fn decision_for(&self, call_id: &ToolCallId) -> Option<&Decision> {
        self.decisions()?
            .iter()
            .find(|d| &d.call_id == call_id)
            .map(|d| &d.decision)
    }

    /// Whether the action was dismissed.
    #[must_use]
    pub fn is_dismissed(&self) -> bool {
        matches!(self.answer, ApprovalAnswer::Dismiss)
    }

    /// The answer, for the adapter.
    #[must_use]
    pub fn into_answer(self) -> ApprovalAnswer {
        self.answer
    }

    /// The record of this answer for the `action.resolved` event: per call, the decision and
    /// any reject reason, not edited arguments (see [`ActionResolution`]).
    #[must_use]
    pub fn resolution(&self) -> ActionResolution {
        ActionResolution {
            action_id: self.action_id.clone(),
            revision: self.revision,
            action_type: ActionType::ToolApproval,
            idempotency_key: self.idempotency_key.clone(),
            outcome: match &self.answer {
                ApprovalAnswer::Decide(decisions) => ResolutionOutcome::Decided {
                    calls: decisions
                        .iter()
                        .map(|d| CallResolution {
                            call_id: d.call_id.clone(),
                            decision: d.decision.kind(),
                            reason: match &d.decision {
                                Decision::Reject { reason } => reason.clone(),
                                Decision::Approve | Decision::Edit { .. } => None,
                            },
                        })
                        .collect(),
                },
                ApprovalAnswer::Dismiss => ResolutionOutcome::Dismissed,
            },
        }
    }
}

/// A validated answer of either kind.
#[derive(Debug, Clone, PartialEq)]
pub enum ValidatedResponse {
    /// A form answer.
    Form(ValidatedForm),
    /// An approval answer.
    Approval(ValidatedApproval),
}

impl ValidatedResponse {
    /// The action answered.
    #[must_use]
    pub fn action_id(&self) -> &ActionId {
        match self {
            Self::Form(v) => v.action_id(),
            Self::Approval(v) => v.action_id(),
        }
    }

    /// The record for the `action.resolved` event.
    #[must_use]
    pub fn resolution(&self) -> ActionResolution {
        match self {
            Self::Form(v) => v.resolution(),
            Self::Approval(v) => v.resolution(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Resolution record
// ---------------------------------------------------------------------------------------------

/// The record of an accepted answer, carried by the `action.resolved` event.
///
/// It summarizes the outcome but **does not carry form values or edited arguments**: those are
/// caller data and may hold secrets (a password field, a token in an argument), while events
/// are replayed to every reader of the execution and kept as long as the deployment retains
/// the log. The adapter receives the full answer through [`ValidatedForm::into_answer`] /
/// [`ValidatedApproval::into_answer`]; the resolution records which fields were answered and
/// which decision each call received. A reject reason is kept: it is a short message the
/// caller writes for the agent, not data the agent acts on.
///
/// ```
/// use harness_core::action::ActionResolution;
/// let r: ActionResolution = serde_json::from_str(r#"{
///     "actionId": "act_1", "revision": 1, "actionType": "tool_approval",
///     "outcome": {"type": "decided", "calls": [
///         {"callId": "c1", "decision": "approve"},
///         {"callId": "c2", "decision": "reject", "reason": "not today"}]}
/// }"#).unwrap();
/// assert!(!r.is_dismissed());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActionResolution {
    /// The action resolved.
    pub action_id: ActionId,
    /// The revision answered.
    pub revision: Revision,
    /// The kind of the action.
    pub action_type: ActionType,
    /// The accepted answer's idempotency key, so a retried answer can be recognized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<IdempotencyKey>,
    /// What was decided.
    pub outcome: ResolutionOutcome,
}

impl ActionResolution {
    /// Whether the action was dismissed.
    #[must_use]
    pub fn is_dismissed(&self) -> bool {
        matches!(self.outcome, ResolutionOutcome::Dismissed)
    }
}

/// The outcome of an action. Wire: internally tagged, `{"type": "submitted", "fields": [...]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum ResolutionOutcome {
    /// A form was submitted.
    Submitted {
        /// The fields that received a non-null value, in form order.
        fields: Vec<FieldName>,
    },
    /// The action was dismissed.
    #[serde(deserialize_with = "no_fields")]
    Dismissed,
    /// Every tool call received a decision.
    Decided {
        /// One entry per call, in request order.
        calls: Vec<CallResolution>,
    },
}

/// The decision one tool call received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CallResolution {
    /// The call.
    pub call_id: ToolCallId,
    /// The decision.
    pub decision: DecisionKind,
    /// The reject reason, if one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use rstest::rstest;
    use serde::de::DeserializeOwned;
    use serde_json::json;

    use super::*;

    fn name(s: &str) -> FieldName {
        s.parse().expect("valid field name")
    }

    fn call(s: &str) -> ToolCallId {
        s.parse().expect("valid call id")
    }

    fn act(s: &str) -> ActionId {
        s.parse().expect("valid action id")
    }

    fn at() -> Timestamp {
        "2026-11-30T12:00:00Z".parse().expect("valid timestamp")
    }

    fn sample_form() -> FormRequest {
        FormRequest::new([
            FormField::new(
                name("nick"),
                "Nickname",
                FieldKind::Text {
                    min_length: Some(2),
                    max_length: Some(8),
                    pattern: Some("^[a-z]+$".into()),
                },
            )
            .required(),
            FormField::new(
                name("age"),
                "Age",
                FieldKind::Number {
                    minimum: Some(0.0),
                    maximum: Some(150.0),
                    integer: true,
                },
            )
            .required(),
            FormField::new(name("agree"), "Agree", FieldKind::boolean()),
            FormField::new(name("color"), "Color", FieldKind::choice(["red", "blue"])),
            FormField::new(
                name("tags"),
                "Tags",
                FieldKind::multi_choice(["a", "b", "c"]),
            ),
            FormField::new(name("password"), "Password", FieldKind::text()),
        ])
        .expect("valid form")
        .with_title("Profile")
    }

    fn form_request() -> ActionRequest {
        ActionRequest::form(sample_form())
            .with_id(act("act_form"))
            .with_created_at(at())
    }

    fn path_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1},
                "lines": {"type": "integer", "minimum": 1}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn sample_approval() -> ApprovalRequest {
        ApprovalRequest::new([
            ToolCallApproval::new(
                call("c1"),
                "read_file",
                json!({"path": "/etc/hosts"}),
                path_schema(),
            )
            .expect("valid call")
            .allow_edit(),
            ToolCallApproval::new(
                call("c2"),
                "shell",
                json!({"cmd": "ls"}),
                json!({"type": "object"}),
            )
            .expect("valid call"),
        ])
        .expect("valid approval")
    }

    fn approval_request() -> ActionRequest {
        ActionRequest::approval(sample_approval())
            .with_id(act("act_appr"))
            .with_created_at(at())
    }

    fn good_values() -> FormValues {
        FormValues::new()
            .with("nick", "ada")
            .with("age", 36)
            .with("agree", true)
            .with("color", "red")
            .with("tags", json!(["a", "c"]))
    }

    fn round_trip<T: Serialize + DeserializeOwned + PartialEq + fmt::Debug>(value: &T) {
        let json = serde_json::to_string(value).expect("serializes");
        let back: T = serde_json::from_str(&json).expect("deserializes");
        assert_eq!(&back, value, "{json}");
        assert_eq!(serde_json::to_string(&back).expect("serializes"), json);
    }

    // ----- identifiers and revisions -------------------------------------------------------

    #[rstest]
    #[case("a", true)]
    #[case("Email", true)]
    #[case("first_name2", true)]
    #[case("", false)]
    #[case("2fa", false)]
    #[case("_x", false)]
    #[case("a-b", false)]
    #[case("a b", false)]
    #[case("é", false)]
    fn field_name_rule(#[case] input: &str, #[case] valid: bool) {
        assert_eq!(input.parse::<FieldName>().is_ok(), valid, "{input:?}");
        assert_eq!(
            serde_json::from_value::<FieldName>(json!(input)).is_ok(),
            valid
        );
    }

    #[test]
    fn field_name_length_boundary_and_message() {
        let max = format!("a{}", "b".repeat(63));
        assert!(max.parse::<FieldName>().is_ok());
        let err = format!("{max}b").parse::<FieldName>().unwrap_err();
        assert_eq!(err.kind, "form field name");
        assert!(
            err.to_string().contains("^[a-zA-Z][a-zA-Z0-9_]{0,63}$"),
            "{err}"
        );
    }

    #[test]
    fn revision_rejects_zero_and_counts_up() {
        assert_eq!(Revision::new(3).map(Revision::get), Some(3));
        assert_eq!(
            Revision::new(u32::MAX).map(|r| r.next().get()),
            Some(u32::MAX)
        );
        let err = serde_json::from_value::<Revision>(json!(0)).unwrap_err();
        assert!(err.to_string().contains("revisions start at 1"), "{err}");
        assert!(serde_json::from_value::<Revision>(json!(-1)).is_err());
        round_trip(&Revision::FIRST.next());
    }

    // ----- form definitions ----------------------------------------------------------------

    #[rstest]
    #[case::duplicate_name(
        vec![
            FormField::new(name("x"), "X", FieldKind::text()),
            FormField::new(name("x"), "X2", FieldKind::boolean()),
        ],
        "field `x` is defined more than once; field names must be unique"
    )]
    #[case::blank_label(
        vec![FormField::new(name("x"), "  ", FieldKind::text())],
        "field `x` has a blank label; give it a human-readable label"
    )]
    #[case::length_range(
        vec![FormField::new(name("x"), "X", FieldKind::Text {
            min_length: Some(5), max_length: Some(2), pattern: None })],
        "field `x`: minLength 5 is greater than maxLength 2"
    )]
    #[case::invalid_pattern(
        vec![FormField::new(name("x"), "X", FieldKind::Text {
            min_length: None, max_length: None, pattern: Some("([a-z".into()) })],
        "field `x`: pattern `([a-z` is not a valid regular expression"
    )]
    #[case::number_range(
        vec![FormField::new(name("x"), "X", FieldKind::Number {
            minimum: Some(3.5), maximum: Some(1.0), integer: false })],
        "field `x`: minimum 3.5 is greater than maximum 1"
    )]
    #[case::non_finite(
        vec![FormField::new(name("x"), "X", FieldKind::Number {
            minimum: Some(f64::NAN), maximum: None, integer: false })],
        "field `x`: minimum must be a finite number"
    )]
    #[case::no_options(
        vec![FormField::new(name("x"), "X", FieldKind::choice(Vec::<String>::new()))],
        "field `x`: a choice needs at least one option"
    )]
    #[case::duplicate_option(
        vec![FormField::new(name("x"), "X", FieldKind::multi_choice(["a", "b", "a", "a"]))],
        "field `x`: option `a` is listed more than once; options must be unique"
    )]
    fn malformed_forms_are_refused(#[case] fields: Vec<FormField>, #[case] expected: &str) {
        let err = FormRequest::new(fields).unwrap_err();
        assert_eq!(err.problems().len(), 1, "{err}");
        assert!(
            err.to_string().starts_with("invalid form definition: "),
            "{err}"
        );
        assert!(err.to_string().contains(expected), "{err}");
    }

    #[test]
    fn every_definition_problem_is_listed() {
        let err = FormRequest::new([
            FormField::new(name("a"), "", FieldKind::choice(Vec::<String>::new())),
            FormField::new(
                name("a"),
                "A",
                FieldKind::Number {
                    minimum: Some(2.0),
                    maximum: Some(1.0),
                    integer: true,
                },
            ),
        ])
        .unwrap_err();
        let kinds: Vec<_> = err.problems().iter().map(ToString::to_string).collect();
        assert_eq!(
            kinds,
            [
                "field `a` has a blank label; give it a human-readable label",
                "field `a`: a choice needs at least one option",
                "field `a` is defined more than once; field names must be unique",
                "field `a`: minimum 2 is greater than maximum 1",
            ]
        );
    }

    #[test]
    fn deserializing_a_form_runs_the_same_checks() {
        let wire = json!({"fields": [
            {"name": "x", "label": "X", "kind": {"type": "boolean"}},
            {"name": "x", "label": "X", "kind": {"type": "boolean"}}
        ]});
        let err = serde_json::from_value::<FormRequest>(wire).unwrap_err();
        assert!(err.to_string().contains("defined more than once"), "{err}");

        let wire = json!({"fields": [
            {"name": "bad name", "label": "X", "kind": {"type": "boolean"}}
        ]});
        let err = serde_json::from_value::<FormRequest>(wire).unwrap_err();
        assert!(
            err.to_string()
                .contains("invalid form field name `bad name`"),
            "{err}"
        );

        let wire = json!({"fields": [{"name": "p", "label": "P",
                                      "kind": {"type": "text", "pattern": "("}}]});
        let err = serde_json::from_value::<FormRequest>(wire).unwrap_err();
        assert!(
            err.to_string().contains("not a valid regular expression"),
            "{err}"
        );
    }

    #[test]
    fn an_empty_form_is_a_confirmation() {
        let form = FormRequest::new([]).expect("empty form is fine");
        assert!(form.validate(&FormValues::new()).is_ok());
        let v = form.validate(&FormValues::new().with("x", 1)).unwrap_err();
        assert_eq!(v[0].problem, FieldProblem::Unknown);
    }

    // ----- form values ---------------------------------------------------------------------

    #[test]
    fn valid_values_pass_and_optional_fields_may_be_absent_or_null() {
        let form = sample_form();
        assert_eq!(form.validate(&good_values()), Ok(()));
        let minimal = FormValues::new()
            .with("nick", "bo")
            .with("age", 0)
            .with("color", Value::Null);
        assert_eq!(form.validate(&minimal), Ok(()));
        assert_eq!(form.validate(&good_values().with("age", 36.0)), Ok(()));
    }

    #[test]
    fn every_violation_is_reported_with_field_and_expectation() {
        let values = FormValues::new()
            .with("nick", "A")
            .with("agree", "yes")
            .with("color", "green")
            .with("tags", json!(["a", "z", "a", 3]))
            .with("zzz", 1)
            .with("extra", true);
        let violations = sample_form().validate(&values).unwrap_err();
        let messages: Vec<_> = violations.iter().map(ToString::to_string).collect();
        assert_eq!(
            messages,
            [
                "field `nick`: expected at least 2 characters, got 1",
                "field `nick`: expected text matching the pattern `^[a-z]+$`",
                "field `age`: is required but missing",
                "field `agree`: expected a boolean, got a string",
                "field `color`: expected one of `red`, `blue`",
                "field `tags`: expected one of `a`, `b`, `c`",
                "field `tags`: option `a` is selected more than once",
                "field `tags`: expected one of `a`, `b`, `c`",
                "field `extra`: is not a field of this form; remove it",
                "field `zzz`: is not a field of this form; remove it",
            ]
        );
    }

    #[rstest]
    #[case::text_wrong_type("nick", json!(12), "expected a string, got a number")]
    #[case::text_too_long("nick", json!("abcdefghi"), "expected at most 8 characters, got 9")]
    #[case::number_wrong_type("age", json!("36"), "expected a number, got a string")]
    #[case::not_integer("age", json!(36.5), "expected a whole number")]
    #[case::below("age", json!(-1), "expected a number >= 0")]
    #[case::above("age", json!(151), "expected a number <= 150")]
    #[case::required_null("age", Value::Null, "is required but missing")]
    #[case::choice_wrong_type("color", json!(["red"]), "expected one of `red`, `blue`")]
    #[case::multi_not_array("tags", json!("a"), "expected an array, got a string")]
    #[case::boolean_object("agree", json!({}), "expected a boolean, got an object")]
    fn single_value_violations(#[case] field: &str, #[case] value: Value, #[case] expected: &str) {
        let violations = sample_form()
            .validate(&good_values().with(field, value))
            .unwrap_err();
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert_eq!(violations[0].field, field);
        assert_eq!(violations[0].problem.to_string(), expected);
    }

    #[test]
    fn text_lengths_count_characters_not_bytes() {
        let kind = FieldKind::Text {
            min_length: None,
            max_length: Some(2),
            pattern: None,
        };
        let form = FormRequest::new([FormField::new(name("t"), "T", kind)]).unwrap();
        assert!(form.validate(&FormValues::new().with("t", "éé")).is_ok());
        let v = form
            .validate(&FormValues::new().with("t", "ééé"))
            .unwrap_err();
        assert_eq!(
            v[0].to_string(),
            "field `t`: expected at most 2 characters, got 3"
        );
    }

    #[test]
    fn violations_do_not_echo_submitted_values() {
        let violations = sample_form()
            .validate(
                &good_values()
                    .with("password", 123_456_789)
                    .with("nick", "s3cr3t!"),
            )
            .unwrap_err();
        let text = format!(
            "{violations:?} {}",
            serde_json::to_string(&violations).unwrap()
        );
        assert!(
            !text.contains("123456789") && !text.contains("s3cr3t"),
            "{text}"
        );
    }

    // ----- approval definitions ------------------------------------------------------------

    #[rstest]
    #[case::wrong_keyword_type(json!({"type": 12}))]
    #[case::bad_pattern(json!({"type": "string", "pattern": "(("}))]
    #[case::external_ref(json!({"$ref": "https://example.com/schema.json"}))]
    fn invalid_input_schemas_are_refused(#[case] schema: Value) {
        let err = ToolCallApproval::new(call("c1"), "tool", json!({}), schema).unwrap_err();
        assert!(matches!(
            err,
            ApprovalDefinitionError::InvalidInputSchema { .. }
        ));
        assert!(
            err.to_string().starts_with(
                "tool call `c1` (`tool`): the input schema is not a valid JSON Schema: "
            ),
            "{err}"
        );
    }

    #[test]
    fn approval_definition_errors() {
        let ok = || ToolCallApproval::new(call("c1"), "t", json!({}), json!({})).unwrap();
        assert_eq!(
            ApprovalRequest::new([]).unwrap_err().to_string(),
            "a tool approval needs at least one tool call"
        );
        assert_eq!(
            ApprovalRequest::new([ok(), ok()]).unwrap_err(),
            ApprovalDefinitionError::DuplicateCall {
                call_id: call("c1")
            }
        );
        assert_eq!(
            ToolCallApproval::new(call("c1"), " ", json!({}), json!({}))
                .unwrap_err()
                .to_string(),
            "tool call `c1` has a blank tool name; name the tool being called"
        );
        assert_eq!(
            ok().with_allowed([]).unwrap_err().to_string(),
            "tool call `c1` allows no decision; allow at least one of approve, reject, edit"
        );
        let only_reject = ok().with_allowed([DecisionKind::Reject]).unwrap();
        assert_eq!(
            only_reject.allowed().iter().copied().collect::<Vec<_>>(),
            [DecisionKind::Reject]
        );
    }

    #[test]
    fn deserializing_an_approval_runs_the_same_checks() {
        let call_json = |id: &str, schema: Value, allowed: Value| {
            json!({"callId": id, "tool": "t", "arguments": {}, "inputSchema": schema,
                   "allowed": allowed})
        };
        let ok = serde_json::from_value::<ApprovalRequest>(json!({"calls": [
            call_json("c1", json!({}), json!(["approve", "edit"]))
        ]}))
        .unwrap();
        assert!(ok.calls()[0].allows(DecisionKind::Edit));
        assert!(!ok.calls()[0].allows(DecisionKind::Reject));

        for (wire, expected) in [
            (json!({"calls": []}), "at least one tool call"),
            (
                json!({"calls": [call_json("c1", json!({}), json!(["approve"])),
                                 call_json("c1", json!({}), json!(["approve"]))]}),
                "appears more than once",
            ),
            (
                json!({"calls": [call_json("c1", json!({"type": "nope"}), json!(["approve"]))]}),
                "not a valid JSON Schema",
            ),
            (
                json!({"calls": [call_json("c1", json!({}), json!([]))]}),
                "allows no decision",
            ),
            (
                json!({"calls": [call_json("c1", json!({}), json!(["maybe"]))]}),
                "unknown variant `maybe`",
            ),
        ] {
            let err = serde_json::from_value::<ApprovalRequest>(wire).unwrap_err();
            assert!(err.to_string().contains(expected), "{err}");
        }
    }

    // ----- wire format ---------------------------------------------------------------------

    #[test]
    fn action_request_wire_shape() {
        let request = ActionRequest::form(
            FormRequest::new([FormField::new(name("ok"), "OK?", FieldKind::boolean()).required()])
                .unwrap(),
        )
        .with_id(act("act_1"))
        .with_created_at(at());
        assert_eq!(
            serde_json::to_value(&request).unwrap(),
            json!({
                "id": "act_1",
                "revision": 1,
                "createdAt": "2026-11-30T12:00:00Z",
                "dismissible": true,
                "kind": {
                    "type": "form_input",
                    "fields": [{"name": "ok", "label": "OK?", "required": true,
                                "kind": {"type": "boolean"}}]
                }
            })
        );
        let approval = serde_json::to_value(approval_request()).unwrap();
        assert_eq!(approval["kind"]["type"], "tool_approval");
        assert_eq!(approval["kind"]["calls"][0]["inputSchema"], path_schema());
        assert_eq!(
            approval["kind"]["calls"][0]["allowed"],
            json!(["approve", "reject", "edit"])
        );
    }

    #[test]
    fn dismissible_defaults_to_true_on_the_wire() {
        let mut wire = serde_json::to_value(form_request().with_dismissible(false)).unwrap();
        assert_eq!(wire["dismissible"], false);
        wire.as_object_mut().unwrap().remove("dismissible");
        let back: ActionRequest = serde_json::from_value(wire).unwrap();
        assert!(back.dismissible);
    }

    #[test]
    fn serde_round_trips() {
        round_trip(&form_request());
        round_trip(&approval_request().with_revision(Revision::new(7).unwrap()));
        round_trip(&ActionResponse::from(
            FormResponse::submit(act("a"), Revision::FIRST, good_values())
                .with_idempotency_key("k1".parse().unwrap()),
        ));
        round_trip(&ActionResponse::from(FormResponse::dismiss(
            act("a"),
            Revision::FIRST,
        )));
        round_trip(&ActionResponse::from(ApprovalResponse::decide(
            act("a"),
            Revision::FIRST,
            [
                ToolDecision::approve(call("c1")),
                ToolDecision::reject(call("c2")),
                ToolDecision::reject_because(call("c3"), "no"),
                ToolDecision::edit(call("c4"), json!({"x": [1, 2]})),
            ],
        )));
        round_trip(&ActionResponse::from(ApprovalResponse::dismiss(
            act("a"),
            Revision::FIRST,
        )));
        let values = good_values().with("password", "pw");
        let validated = form_request()
            .validate_form(FormResponse::submit(
                act("act_form"),
                Revision::FIRST,
                values,
            ))
            .unwrap();
        round_trip(&validated.resolution());
        round_trip(
            &sample_form()
                .validate(&FormValues::new().with("q", 1))
                .unwrap_err(),
        );
    }

    /// Events carry requests and resolutions inside a flattened, adjacently tagged payload
    /// (serde buffers them as `Content`): validation and `deny_unknown_fields` must still work.
    #[test]
    fn requests_and_resolutions_survive_a_flattened_event_envelope() {
        #[derive(Debug, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "kind", content = "data")]
        enum Payload {
            #[serde(rename = "action.requested")]
            Requested(ActionRequest),
            #[serde(rename = "action.resolved")]
            Resolved(ActionResolution),
        }
        #[derive(Debug, PartialEq, Serialize, Deserialize)]
        struct Envelope {
            seq: u64,
            #[serde(flatten)]
            payload: Payload,
        }
        let resolution = approval_request()
            .validate(decide(vec![
                ToolDecision::approve(call("c1")),
                ToolDecision::reject(call("c2")),
            ]))
            .unwrap()
            .resolution();
        for payload in [
            Payload::Requested(form_request()),
            Payload::Requested(approval_request()),
            Payload::Resolved(resolution),
        ] {
            round_trip(&Envelope { seq: 3, payload });
        }
        let mut wire = serde_json::to_value(Envelope {
            seq: 1,
            payload: Payload::Requested(form_request()),
        })
        .unwrap();
        wire["data"]["kind"]["fields"][0]["kind"]["minLength"] = json!(9);
        let err = serde_json::from_value::<Envelope>(wire.clone()).unwrap_err();
        assert!(
            err.to_string()
                .contains("minLength 9 is greater than maxLength 8"),
            "{err}"
        );
        wire["data"]["kind"]["fields"][0]["kind"]["minLength"] = json!(1);
        wire["data"]["kind"]["fields"][2]["kind"]["extra"] = json!(1);
        let err = serde_json::from_value::<Envelope>(wire).unwrap_err();
        assert!(err.to_string().contains("unknown field `extra`"), "{err}");
    }

    #[rstest]
    #[case::request_envelope(
        "ActionRequest",
        json!({"id": "a", "revision": 1, "createdAt": "2026-11-30T12:00:00Z",
               "kind": {"type": "form_input", "fields": []}, "priority": 1}),
        "unknown field `priority`"
    )]
    #[case::form_request_body(
        "ActionRequest",
        json!({"id": "a", "revision": 1, "createdAt": "2026-11-30T12:00:00Z",
               "kind": {"type": "form_input", "fields": [], "layout": "grid"}}),
        "unknown field `layout`"
    )]
    #[case::form_field(
        "FormRequest",
        json!({"fields": [{"name": "a", "label": "A", "kind": {"type": "boolean"},
                           "placeholder": "x"}]}),
        "unknown field `placeholder`"
    )]
    #[case::field_kind(
        "FormRequest",
        json!({"fields": [{"name": "a", "label": "A",
                           "kind": {"type": "text", "maxLen": 3}}]}),
        "unknown field `maxLen`"
    )]
    #[case::approval_call(
        "ActionRequest",
        json!({"id": "a", "revision": 1, "createdAt": "2026-11-30T12:00:00Z",
               "kind": {"type": "tool_approval", "calls": [{"callId": "c", "tool": "t",
                 "arguments": {}, "inputSchema": {}, "allowed": ["approve"], "risk": "high"}]}}),
        "unknown field `risk`"
    )]
    #[case::form_response(
        "ActionResponse",
        json!({"type": "form_input", "actionId": "a", "revision": 1,
               "answer": {"type": "dismiss"}, "note": "x"}),
        "unknown field `note`"
    )]
    #[case::form_answer(
        "ActionResponse",
        json!({"type": "form_input", "actionId": "a", "revision": 1,
               "answer": {"type": "submit", "values": {}, "draft": true}}),
        "invalid value: string \"draft\", expected \"type\" or \"values\""
    )]
    #[case::dismiss_with_values(
        "ActionResponse",
        json!({"type": "tool_approval", "actionId": "a", "revision": 1,
               "answer": {"type": "dismiss", "decisions": []}}),
        "invalid type: sequence, expected unit"
    )]
    #[case::decision(
        "ActionResponse",
        json!({"type": "tool_approval", "actionId": "a", "revision": 1,
               "answer": {"type": "decide", "decisions": [
                 {"callId": "c", "decision": {"type": "approve", "always": true}}]}}),
        "unknown field `always`"
    )]
    #[case::unit_variant(
        "FormRequest",
        json!({"fields": [{"name": "a", "label": "A",
                           "kind": {"type": "boolean", "default": true}}]}),
        "unknown field `default`"
    )]
    #[case::unit_outcome(
        "ActionResolution",
        json!({"actionId": "a", "revision": 1, "actionType": "form_input",
               "outcome": {"type": "dismissed", "by": "x"}}),
        "unknown field `by`"
    )]
    #[case::tool_decision(
        "ActionResponse",
        json!({"type": "tool_approval", "actionId": "a", "revision": 1,
               "answer": {"type": "decide", "decisions": [
                 {"callId": "c", "decision": {"type": "approve"}, "by": "me"}]}}),
        "unknown field `by`"
    )]
    #[case::resolution(
        "ActionResolution",
        json!({"actionId": "a", "revision": 1, "actionType": "form_input",
               "outcome": {"type": "dismissed"}, "values": {}}),
        "unknown field `values`"
    )]
    #[case::resolution_call(
        "ActionResolution",
        json!({"actionId": "a", "revision": 1, "actionType": "tool_approval",
               "outcome": {"type": "decided", "calls": [
                 {"callId": "c", "decision": "edit", "arguments": {}}]}}),
        "unknown field `arguments`"
    )]
    fn unknown_fields_are_rejected(#[case] ty: &str, #[case] wire: Value, #[case] expected: &str) {
        let err = match ty {
            "ActionRequest" => serde_json::from_value::<ActionRequest>(wire).map(drop),
            "FormRequest" => serde_json::from_value::<FormRequest>(wire).map(drop),
            "ActionResponse" => serde_json::from_value::<ActionResponse>(wire).map(drop),
            "ActionResolution" => serde_json::from_value::<ActionResolution>(wire).map(drop),
            other => panic!("no such case type {other}"),
        }
        .unwrap_err();
        assert!(err.to_string().contains(expected), "{err}");
    }

    #[test]
    fn generated_schemas_accept_the_wire_and_reject_unknown_fields() {
        fn check<T: JsonSchema + Serialize>(samples: &[T]) {
            let schema = serde_json::to_value(schemars::schema_for!(T)).unwrap();
            let validator = jsonschema::validator_for(&schema).unwrap();
            for sample in samples {
                let wire = serde_json::to_value(sample).unwrap();
                let errors: Vec<_> = validator
                    .iter_errors(&wire)
                    .map(|e| e.to_string())
                    .collect();
                assert!(errors.is_empty(), "{wire}: {errors:?}");
                let mut extra = wire.clone();
                extra
                    .as_object_mut()
                    .unwrap()
                    .insert("surprise".into(), json!(1));
                assert!(!validator.is_valid(&extra), "{extra}");
            }
        }
        check(&[form_request(), approval_request()]);
        check(&[
            ActionResponse::from(FormResponse::submit(
                act("a"),
                Revision::FIRST,
                good_values(),
            )),
            ActionResponse::from(ApprovalResponse::decide(
                act("a"),
                Revision::FIRST,
                [
                    ToolDecision::edit(call("c1"), json!({"path": "x"})),
                    ToolDecision::reject_because(call("c2"), "no"),
                ],
            )),
        ]);
        let resolution = approval_request()
            .validate_approval(ApprovalResponse::decide(
                act("act_appr"),
                Revision::FIRST,
                [
                    ToolDecision::approve(call("c1")),
                    ToolDecision::reject_because(call("c2"), "no"),
                ],
            ))
            .unwrap()
            .resolution();
        check(&[resolution]);

        // Unknown keys in nested unit variants are refused by the schemas too.
        let schema = serde_json::to_value(schemars::schema_for!(ActionResponse)).unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        let decision = |d: Value| {
            json!({"type": "tool_approval", "actionId": "a", "revision": 1,
                   "answer": {"type": "decide", "decisions": [{"callId": "c", "decision": d}]}})
        };
        assert!(validator.is_valid(&decision(json!({"type": "approve"}))));
        assert!(!validator.is_valid(&decision(json!({"type": "approve", "always": true}))));
        let schema = serde_json::to_value(schemars::schema_for!(FormRequest)).unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        let form = |k: Value| json!({"fields": [{"name": "a", "label": "A", "kind": k}]});
        assert!(validator.is_valid(&form(json!({"type": "boolean"}))));
        assert!(!validator.is_valid(&form(json!({"type": "boolean", "default": true}))));
    }

    // ----- validating answers --------------------------------------------------------------

    fn form_answer(values: FormValues) -> ActionResponse {
        FormResponse::submit(act("act_form"), Revision::FIRST, values).into()
    }

    fn decide(decisions: Vec<ToolDecision>) -> ActionResponse {
        ApprovalResponse::decide(act("act_appr"), Revision::FIRST, decisions).into()
    }

    #[rstest]
    #[case::action_mismatch(
        form_request(),
        FormResponse::submit(act("act_other"), Revision::FIRST, good_values()).into(),
        ErrorCode::ACTION_NOT_FOUND,
        "the answer targets action `act_other` but the pending action is `act_form`"
    )]
    #[case::stale_revision(
        form_request().with_revision(Revision::new(2).unwrap()),
        form_answer(good_values()),
        ErrorCode::ACTION_REVISION_STALE,
        "the answer to action `act_form` names revision 1 but the pending revision is 2; \
         answer revision 2"
    )]
    #[case::kind_mismatch_form_answered_with_approval(
        form_request(),
        ApprovalResponse::dismiss(act("act_form"), Revision::FIRST).into(),
        ErrorCode::ACTION_RESPONSE_INVALID,
        "action `act_form` is a form_input request but was answered with a tool_approval response"
    )]
    #[case::kind_mismatch_approval_answered_with_form(
        approval_request(),
        FormResponse::dismiss(act("act_appr"), Revision::FIRST).into(),
        ErrorCode::ACTION_RESPONSE_INVALID,
        "action `act_appr` is a tool_approval request but was answered with a form_input response"
    )]
    #[case::invalid_form_values(
        form_request(),
        form_answer(good_values().with("age", 200).with("x", 1)),
        ErrorCode::ACTION_RESPONSE_INVALID,
        "invalid form values for action `act_form`: field `age`: expected a number <= 150; \
         field `x`: is not a field of this form; remove it"
    )]
    #[case::form_dismiss_not_allowed(
        form_request().with_dismissible(false),
        FormResponse::dismiss(act("act_form"), Revision::FIRST).into(),
        ErrorCode::ACTION_RESPONSE_INVALID,
        "action `act_form` may not be dismissed; answer it instead"
    )]
    #[case::approval_dismiss_not_allowed(
        approval_request().with_dismissible(false),
        ApprovalResponse::dismiss(act("act_appr"), Revision::FIRST).into(),
        ErrorCode::ACTION_RESPONSE_INVALID,
        "action `act_appr` may not be dismissed; answer it instead"
    )]
    #[case::missing_decision(
        approval_request(),
        decide(vec![]),
        ErrorCode::ACTION_RESPONSE_INVALID,
        "action `act_appr`: no decision for tool call(s) `c1`, `c2`; \
         every call needs exactly one decision"
    )]
    #[case::unknown_call(
        approval_request(),
        decide(vec![ToolDecision::approve(call("c9"))]),
        ErrorCode::ACTION_RESPONSE_INVALID,
        "action `act_appr`: decision for unknown tool call `c9`; the calls are `c1`, `c2`"
    )]
    #[case::duplicate_decision(
        approval_request(),
        decide(vec![ToolDecision::approve(call("c1")), ToolDecision::reject(call("c1"))]),
        ErrorCode::ACTION_RESPONSE_INVALID,
        "action `act_appr`: tool call `c1` has more than one decision; give exactly one"
    )]
    #[case::decision_not_allowed(
        approval_request(),
        decide(vec![ToolDecision::approve(call("c1")),
                    ToolDecision::edit(call("c2"), json!({"cmd": "rm -rf /"}))]),
        ErrorCode::ACTION_RESPONSE_INVALID,
        "action `act_appr`: `edit` is not allowed for tool call `c2`; allowed: `approve`, `reject`"
    )]
    #[case::invalid_edited_arguments(
        approval_request(),
        decide(vec![ToolDecision::edit(call("c1"), json!({"path": "", "lines": 0, "mode": "w"})),
                    ToolDecision::approve(call("c2"))]),
        ErrorCode::ACTION_RESPONSE_INVALID,
        "action `act_appr`: edited arguments for tool call `c1` (`read_file`) do not match the \
         tool's input schema: "
    )]
    fn refused_answers(
        #[case] request: ActionRequest,
        #[case] response: ActionResponse,
        #[case] code: ErrorCode,
        #[case] message: &str,
    ) {
        let err = request.validate(response).unwrap_err();
        assert_eq!(err.code(), code, "{err}");
        assert!(err.to_string().starts_with(message), "{err}");
        let harness = HarnessError::from(err.clone());
        assert_eq!(harness.category(), ErrorCategory::Configuration);
        assert_eq!(harness.code(), &code);
        assert_eq!(harness.message(), err.to_string());
        assert!(!harness.retryable());
    }

    #[test]
    fn edited_arguments_are_revalidated_with_every_pointer() {
        let err = approval_request()
            .validate(decide(vec![
                ToolDecision::edit(call("c1"), json!({"path": "", "lines": 0, "mode": "w"})),
                ToolDecision::approve(call("c2")),
            ]))
            .unwrap_err();
        let ActionResponseError::InvalidEditedArguments {
            call_id,
            tool,
            violations,
            ..
        } = &err
        else {
            panic!("unexpected {err:?}");
        };
        assert_eq!((call_id.as_str(), tool.as_str()), ("c1", "read_file"));
        let mut pointers: Vec<_> = violations.iter().map(|v| v.pointer.as_str()).collect();
        pointers.sort_unstable();
        assert_eq!(pointers, ["", "/lines", "/path"], "{violations:?}");
        let keywords: BTreeSet<_> = violations
            .iter()
            .map(|v| v.keyword_location.as_str())
            .collect();
        assert!(
            keywords.contains("/properties/path/minLength"),
            "{keywords:?}"
        );
        assert!(keywords.contains("/additionalProperties"), "{keywords:?}");
        let text = err.to_string();
        assert!(
            text.contains("at `/path`") && text.contains("at `/lines`"),
            "{text}"
        );
        assert!(text.contains("at the root"), "{text}");
        assert!(
            !text.contains("\"w\""),
            "the submitted value is masked: {text}"
        );

        let missing = approval_request()
            .validate(decide(vec![
                ToolDecision::edit(call("c1"), json!({"lines": 3})),
                ToolDecision::approve(call("c2")),
            ]))
            .unwrap_err();
        assert!(
            missing
                .to_string()
                .contains("\"path\" is a required property"),
            "{missing}"
        );
    }

    #[test]
    fn a_valid_edit_is_accepted_and_decisions_come_back_in_request_order() {
        let validated = approval_request()
            .validate_approval(
                ApprovalResponse::decide(
                    act("act_appr"),
                    Revision::FIRST,
                    [
                        ToolDecision::reject_because(call("c2"), "not now"),
                        ToolDecision::edit(call("c1"), json!({"path": "/tmp/a", "lines": 5})),
                    ],
                )
                .with_idempotency_key("k-1".parse().unwrap()),
            )
            .unwrap();
        let order: Vec<_> = validated
            .decisions()
            .unwrap()
            .iter()
            .map(|d| d.call_id.as_str())
            .collect();
        assert_eq!(order, ["c1", "c2"]);
        assert_eq!(
            validated.decision_for(&call("c1")),
            Some(&Decision::Edit {
                arguments: json!({"path": "/tmp/a", "lines": 5})
            })
        );
        assert!(!validated.is_dismissed());
        assert_eq!(
            serde_json::to_value(validated.resolution()).unwrap(),
            json!({
                "actionId": "act_appr",
                "revision": 1,
                "actionType": "tool_approval",
                "idempotencyKey": "k-1",
                "outcome": {"type": "decided", "calls": [
                    {"callId": "c1", "decision": "edit"},
                    {"callId": "c2", "decision": "reject", "reason": "not now"}
                ]}
            })
        );
    }

    #[test]
    fn a_submitted_form_resolves_to_field_names_without_values() {
        let values = good_values()
            .with("password", "hunter2-secret")
            .with("color", Value::Null);
        let validated = form_request()
            .validate_form(FormResponse::submit(
                act("act_form"),
                Revision::FIRST,
                values.clone(),
            ))
            .unwrap();
        assert_eq!(validated.values(), Some(&values));
        let resolution = validated.resolution();
        assert_eq!(
            resolution.outcome,
            ResolutionOutcome::Submitted {
                fields: vec![
                    name("nick"),
                    name("age"),
                    name("agree"),
                    name("tags"),
                    name("password")
                ],
            }
        );
        let wire = serde_json::to_string(&resolution).unwrap();
        assert!(!wire.contains("hunter2"), "{wire}");
        assert!(!wire.contains("ada"), "{wire}");
        assert_eq!(validated.into_answer(), FormAnswer::Submit(values));
    }

    #[test]
    fn dismissing_resolves_as_dismissed() {
        let form = form_request()
            .validate(FormResponse::dismiss(act("act_form"), Revision::FIRST).into())
            .unwrap();
        assert!(form.resolution().is_dismissed());
        assert_eq!(form.resolution().action_type, ActionType::FormInput);
        let ValidatedResponse::Approval(approval) = approval_request()
            .validate(ApprovalResponse::dismiss(act("act_appr"), Revision::FIRST).into())
            .unwrap()
        else {
            panic!("an approval answer validates as an approval");
        };
        assert!(approval.is_dismissed() && approval.decisions().is_none());
        assert_eq!(
            serde_json::to_value(approval.resolution()).unwrap(),
            json!({"actionId": "act_appr", "revision": 1, "actionType": "tool_approval",
                   "outcome": {"type": "dismissed"}})
        );
    }

    #[test]
    fn untyped_response_accessors() {
        let r = ActionResponse::from(
            FormResponse::dismiss(act("a"), Revision::FIRST.next())
                .with_idempotency_key("k".parse().unwrap()),
        );
        assert_eq!(r.action_type(), ActionType::FormInput);
        assert_eq!(r.action_id().as_str(), "a");
        assert_eq!(r.revision().get(), 2);
        assert_eq!(r.idempotency_key().map(IdempotencyKey::as_str), Some("k"));
        assert!(r.is_dismiss() && r.as_form().is_some() && r.as_approval().is_none());
        let r = r.into_approval().unwrap_err();
        assert!(r.into_form().is_ok());
        let request = approval_request();
        assert!(request.as_approval().is_some() && request.as_form().is_none());
        assert_eq!(request.action_type(), ActionType::ToolApproval);
    }

    #[test]
    fn public_types_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<ActionRequest>();
        assert_send_sync::<ActionResponse>();
        assert_send_sync::<ValidatedForm>();
        assert_send_sync::<ValidatedApproval>();
        assert_send_sync::<ActionResponseError>();
        assert_send_sync::<ToolCallApproval>();
    }

    // ----- properties ----------------------------------------------------------------------

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            ".{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map("[a-z]{1,4}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn field_name_parse_matches_the_pattern(s in "\\PC{0,70}") {
            let expected = s.len() <= 64
                && s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            prop_assert_eq!(s.parse::<FieldName>().is_ok(), expected);
        }

        #[test]
        fn valid_field_names_round_trip(s in "[a-zA-Z][a-zA-Z0-9_]{0,63}") {
            let n: FieldName = s.parse().unwrap();
            let wire = serde_json::to_value(&n).unwrap();
            let back: FieldName = serde_json::from_value(wire).unwrap();
            prop_assert_eq!(back.as_str(), s.as_str());
        }

        #[test]
        fn text_length_bounds_hold(s in "\\PC{0,12}", min in 0u32..12, extra in 0u32..6) {
            let max = min + extra;
            let form = FormRequest::new([FormField::new(name("t"), "T", FieldKind::Text {
                min_length: Some(min), max_length: Some(max), pattern: None,
            })]).unwrap();
            let len = u32::try_from(s.chars().count()).unwrap();
            let ok = form.validate(&FormValues::new().with("t", s)).is_ok();
            prop_assert_eq!(ok, (min..=max).contains(&len));
        }

        #[test]
        fn number_bounds_hold(v in -1e9f64..1e9, a in -1e9f64..1e9, b in -1e9f64..1e9) {
            let (min, max) = if a <= b { (a, b) } else { (b, a) };
            let form = FormRequest::new([FormField::new(name("n"), "N", FieldKind::Number {
                minimum: Some(min), maximum: Some(max), integer: false,
            })]).unwrap();
            let ok = form.validate(&FormValues::new().with("n", v)).is_ok();
            prop_assert_eq!(ok, min <= v && v <= max);
        }

        #[test]
        fn form_validation_reports_each_unknown_name_once_and_never_panics(
            values in prop::collection::btree_map(
                prop_oneof![
                    Just("nick".to_owned()), Just("age".to_owned()), Just("tags".to_owned()),
                    "[a-z]{1,6}",
                ],
                arb_json(),
                0..8,
            )
        ) {
            let form = sample_form();
            let values = FormValues::from(values);
            let violations = form.validate(&values).err().unwrap_or_default();
            for n in values.names() {
                let unknown = violations
                    .iter()
                    .filter(|v| v.field == n && v.problem == FieldProblem::Unknown)
                    .count();
                prop_assert_eq!(unknown, usize::from(form.field(n).is_none()));
            }
            for v in &violations {
                prop_assert!(form.field(&v.field).is_some() || values.get(&v.field).is_some());
            }
        }

        #[test]
        fn decisions_in_any_order_validate_iff_every_call_is_decided(
            n in 1usize..6,
            picks in prop::collection::vec((0usize..6, 0u8..3), 0..8),
        ) {
            let ids: Vec<ToolCallId> = (0..n).map(|i| call(&format!("c{i}"))).collect();
            let approval = ApprovalRequest::new(ids.iter().map(|id| {
                ToolCallApproval::new(id.clone(), "t", json!({}), json!({"type": "object"}))
                    .unwrap()
                    .allow_edit()
            }))
            .unwrap();
            let request = ActionRequest::approval(approval).with_id(act("a"));
            let mut seen = BTreeSet::new();
            let decisions: Vec<ToolDecision> = picks
                .iter()
                .filter(|(i, _)| *i < n && seen.insert(*i))
                .map(|&(i, k)| match k {
                    0 => ToolDecision::approve(ids[i].clone()),
                    1 => ToolDecision::reject(ids[i].clone()),
                    _ => ToolDecision::edit(ids[i].clone(), json!({"k": i})),
                })
                .collect();
            let result = request.validate_approval(
                ApprovalResponse::decide(act("a"), Revision::FIRST, decisions));
            if seen.len() == n {
                let validated = result.unwrap();
                let order: Vec<_> =
                    validated.decisions().unwrap().iter().map(|d| d.call_id.clone()).collect();
                prop_assert_eq!(order, ids);
            } else {
                let missing: Vec<_> =
                    ids.iter()
                        .enumerate()
                        .filter(|(i, _)| !seen.contains(i))
                        .map(|(_, id)| id.clone())
                        .collect();
                prop_assert_eq!(result.unwrap_err(), ActionResponseError::MissingDecision {
                    action: act("a"),
                    calls: missing,
                });
            }
        }
    }

    #[test]
    fn the_answer_helpers_validate_against_the_request_they_answer() {
        let approval = approval_request();
        let decided = |response: ActionResponse| -> Vec<(String, DecisionKind)> {
            let ValidatedResponse::Approval(v) = approval.validate(response).expect("valid") else {
                panic!("an approval");
            };
            let ApprovalAnswer::Decide(decisions) = v.into_answer() else {
                panic!("decided");
            };
            decisions
                .into_iter()
                .map(|d| (d.call_id.to_string(), d.decision.kind()))
                .collect()
        };
        use DecisionKind::{Approve, Edit, Reject};
        let all = |k| vec![("c1".to_owned(), k), ("c2".to_owned(), k)];
        assert_eq!(decided(approval.approve_all()), all(Approve));
        assert_eq!(decided(approval.reject_all("no")), all(Reject));
        assert_eq!(
            decided(approval.reject(&call("c2"), "not that one")),
            [("c1".to_owned(), Approve), ("c2".to_owned(), Reject)]
        );
        assert_eq!(
            decided(approval.edit(&call("c1"), json!({"path": "/etc/hostname"}))),
            [("c1".to_owned(), Edit), ("c2".to_owned(), Approve)]
        );
        // An edit is revalidated: arguments the schema refuses fail the answer.
        assert!(
            approval
                .validate(approval.edit(&call("c1"), json!({"path": 7})))
                .is_err()
        );
        assert!(approval.validate(approval.dismiss()).is_ok());

        let form = form_request();
        assert!(form.validate(form.submit(good_values())).is_ok());
        assert!(form.validate(form.submit(FormValues::new())).is_err());
        assert!(form.validate(form.dismiss()).is_ok());
        // A helper of the other kind is refused as the wrong kind, not accepted.
        assert!(matches!(
            form.validate(form.approve_all()),
            Err(ActionResponseError::KindMismatch { .. })
        ));
    }
}
