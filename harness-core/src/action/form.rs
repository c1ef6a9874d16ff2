use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::support::{listed, no_fields, ticked};
use crate::json_schema::{CompiledSchema, truncate};

use super::ids::*;

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
/// Closed (an unknown field is refused, by name), unlike the rest of an action request: a
/// form's fields are also what an operator writes, in a scripted adapter's script, whose
/// options schema must be closed. So an older reader refuses an `action.requested` event
/// whose form field carries a field it does not know (see [`crate::wire`]).
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
#[serde(rename_all = "camelCase")]
pub struct FormRequest {
    /// A heading for the form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    title: Option<String>,
    /// The fields, in display order; names are unique.
    // Shared by clones: a request is copied into the log, the lifecycle and the runtime, and
    // an idle execution holds every copy.
    fields: Arc<[FormField]>,
    /// The compiled `pattern` of each field (parallel to `fields`).
    #[serde(skip)]
    patterns: Arc<[Option<CompiledSchema>]>,
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
                fields: fields.into(),
                patterns: patterns.into(),
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
        for (field, pattern) in self.fields.iter().zip(self.patterns.iter()) {
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
    pub(super) fn answered(&self, values: &FormValues) -> Vec<FieldName> {
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
#[serde(rename_all = "camelCase")]
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
                && !compiled.is_valid(value)
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
#[serde(rename_all = "camelCase")]
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
    rename_all_fields = "camelCase"
)]
#[non_exhaustive]
pub enum FieldProblem {
    /// A required field is absent or `null`.
    Missing,
    /// The form defines no field of that name.
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
