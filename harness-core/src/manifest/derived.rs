use std::fmt;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::checks::push_pointer;
use super::descriptor::HarnessDescriptor;
use super::errors::ManifestError;
use super::support::truncate_for_echo;
use crate::json_schema::CompiledSchema;

// ---------------------------------------------------------------------------------------------
// Derived manifests and options: what `#[derive(Adapter)]` and `#[derive(AdapterOptions)]`
// (in `harness-macros`) implement
// ---------------------------------------------------------------------------------------------

/// Something that has a [`HarnessDescriptor`]: the one way to ask an adapter for its
/// descriptor, a supertrait of [`HarnessAdapter`](crate::adapter::HarnessAdapter) and
/// [`SimpleAdapter`](crate::adapter::SimpleAdapter), and what a
/// [`Registry`](crate::registry::Registry) needs.
///
/// `#[derive(Adapter)]` implements it; written by hand it is three lines. Implemented for
/// `HarnessDescriptor` itself and, through `Arc`, `Box` and `&`, for pointers to any
/// implementor, trait objects included (`Arc<dyn HarnessAdapter>`).
///
/// ```
/// use harness_core::manifest::{Describe, HarnessDescriptor};
///
/// #[derive(Debug)]
/// struct MyAdapter {
///     descriptor: HarnessDescriptor,
/// }
///
/// impl Describe for MyAdapter {
///     fn descriptor(&self) -> &HarnessDescriptor {
///         &self.descriptor
///     }
/// }
/// ```
pub trait Describe {
    /// The adapter's descriptor. Must return the same descriptor every time.
    fn descriptor(&self) -> &HarnessDescriptor;
}

impl Describe for HarnessDescriptor {
    fn descriptor(&self) -> &HarnessDescriptor {
        self
    }
}

impl<T: Describe + ?Sized> Describe for std::sync::Arc<T> {
    fn descriptor(&self) -> &HarnessDescriptor {
        (**self).descriptor()
    }
}

impl<T: Describe + ?Sized> Describe for Box<T> {
    fn descriptor(&self) -> &HarnessDescriptor {
        (**self).descriptor()
    }
}

impl<T: Describe + ?Sized> Describe for &T {
    fn descriptor(&self) -> &HarnessDescriptor {
        (**self).descriptor()
    }
}

/// An adapter type whose descriptor is known statically: what `#[derive(Adapter)]` implements
/// from its `#[adapter(...)]` attribute, with [`Describe`].
///
/// The derive checks the attribute at compile time (id pattern, contract versions, execution
/// mode, trust boundary, dependencies, capability keys and levels) and builds the descriptor
/// once, on the first call to [`Adapter::static_descriptor`], without I/O. The adapter's
/// [`Describe::descriptor`] returns it, and [`Adapter::parse_options`] parses its options.
/// (The trait and the derive share their name, as `serde::Serialize` does.)
///
/// What the two derives generate, written by hand:
///
/// ```
/// use std::sync::OnceLock;
/// use harness_core::manifest::{
///     Adapter, AdapterOptions, ClosedSchema, ContractVersion, Describe, ExecutionMode,
///     HarnessDescriptor,
/// };
/// use serde_json::json;
///
/// #[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
/// #[serde(deny_unknown_fields)]
/// struct EchoOptions {
///     prefix: Option<String>,
///     repeat: u8,
/// }
///
/// // `#[derive(AdapterOptions)]`, after checking `deny_unknown_fields` and the field types:
/// impl ClosedSchema for EchoOptions {}
/// impl AdapterOptions for EchoOptions {}
///
/// struct Echo;
///
/// // `#[derive(Adapter)]` with `#[adapter(id = "echo", contract_versions = [1],
/// // execution_mode = in_process(compatibility_only), options = EchoOptions)]`:
/// impl Adapter for Echo {
///     type Options = EchoOptions;
///     fn static_descriptor() -> &'static HarnessDescriptor {
///         static DESCRIPTOR: OnceLock<HarnessDescriptor> = OnceLock::new();
///         DESCRIPTOR.get_or_init(|| {
///             HarnessDescriptor::builder("echo".parse().unwrap(), "0.1.0")
///                 .contract_version(ContractVersion::V1)
///                 .execution_mode(ExecutionMode::in_process())
///                 .options_schema(EchoOptions::options_schema())
///                 .build()
///                 .unwrap()
///         })
///     }
/// }
///
/// impl Describe for Echo {
///     fn descriptor(&self) -> &HarnessDescriptor {
///         Self::static_descriptor()
///     }
/// }
///
/// assert_eq!(Echo.descriptor().id().as_str(), "echo");
/// let options = Echo::parse_options(&json!({"prefix": "> ", "repeat": 2})).unwrap();
/// assert_eq!((options.prefix.as_deref(), options.repeat), (Some("> "), 2));
///
/// let err = Echo::parse_options(&json!({"prefx": "> ", "repeat": "2"})).unwrap_err();
/// let pointers: Vec<&str> = err.violations.iter().map(|v| v.pointer.as_str()).collect();
/// assert_eq!(pointers, ["/prefx", "/repeat"]);
/// ```
pub trait Adapter {
    /// The adapter's options: what an execution's `options` deserialize into.
    type Options: AdapterOptions;

    /// The adapter's descriptor, built on first use (pure, no I/O) and shared by every
    /// instance (and every instantiation of a generic adapter type).
    ///
    /// # Panics
    ///
    /// If the descriptor is invalid, with a message naming every problem. `#[derive(Adapter)]`
    /// checks everything it declares at compile time; what it cannot see is the options
    /// type's schema when a field was marked `#[adapter_options(unchecked)]` or
    /// [`AdapterOptions`] was implemented by hand.
    fn static_descriptor() -> &'static HarnessDescriptor;

    /// Validates `options` (`null` counts as `{}`) against the options schema, listing every
    /// violation with its JSON pointer, then deserializes them.
    ///
    /// # Errors
    ///
    /// [`InvalidOptions`] with every violation.
    fn parse_options(options: &Value) -> Result<Self::Options, InvalidOptions> {
        Self::Options::from_options(options)
    }
}

/// An options type for an adapter: it deserializes from a JSON object whose JSON Schema
/// rejects unknown fields at every level.
///
/// Derive it with `#[derive(serde::Deserialize, schemars::JsonSchema, AdapterOptions)]` and
/// `#[serde(deny_unknown_fields)]`. The derive refuses, at compile time, a type that would
/// accept unknown fields (no `deny_unknown_fields`, a `#[serde(flatten)]` field, or a field
/// whose type is not [`ClosedSchema`]), and overrides the provided methods with versions that
/// generate the schema and compile its validator once.
///
/// Implementing it by hand (with [`ClosedSchema`]) is an assertion that the schema rejects
/// unknown fields; a descriptor built from a schema that does not is still refused.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an adapter options type",
    label = "this type does not implement `AdapterOptions`",
    note = "adapter options are a struct (or an enum of struct variants) deriving \
            `serde::Deserialize`, `schemars::JsonSchema` and `AdapterOptions`, with \
            `#[serde(deny_unknown_fields)]`",
    note = "the facade re-exports the versions it is built on: derive \
            `harness::serde::Deserialize` and `harness::schemars::JsonSchema` with \
            `#[serde(crate = \"harness::serde\")]` and `#[schemars(crate = \"harness::schemars\")]`"
)]
pub trait AdapterOptions: ClosedSchema + serde::de::DeserializeOwned + JsonSchema {
    /// The options JSON Schema (2020-12, for deserialization), as the descriptor publishes it.
    #[must_use]
    fn options_schema() -> Value {
        generate_options_schema::<Self>()
    }

    /// Validates `options` (`null` counts as `{}`) against [`AdapterOptions::options_schema`],
    /// listing every violation with its JSON pointer.
    ///
    /// # Errors
    ///
    /// [`InvalidOptions`] with every violation (one at the root if the schema itself is not a
    /// valid JSON Schema).
    fn validate_options(options: &Value) -> Result<(), InvalidOptions> {
        match OptionsValidator::new(&Self::options_schema()) {
            Ok(validator) => validator.validate(options),
            Err(problem) => Err(InvalidOptions::at_root(problem.to_string())),
        }
    }

    /// Validates `options` (`null` counts as `{}`), then deserializes them.
    ///
    /// # Errors
    ///
    /// [`InvalidOptions`] with every schema violation, or the deserialization error (at the
    /// root) when the schema accepts what the type's `Deserialize` refuses.
    fn from_options(options: &Value) -> Result<Self, InvalidOptions> {
        let empty = Value::Object(serde_json::Map::new());
        let options = if options.is_null() { &empty } else { options };
        Self::validate_options(options)?;
        Self::deserialize(options).map_err(|e| InvalidOptions::at_root(e.to_string()))
    }
}

/// A type whose JSON Schema rejects unknown fields at every level (or describes no object at
/// all), so that it may appear inside adapter options.
///
/// Implemented for the scalar types, `String`, `PathBuf`, and for `Option`, `Vec`,
/// `VecDeque`, arrays, sets, `Box`, `Arc`, tuples and string-keyed maps of such types;
/// `#[derive(AdapterOptions)]` implements it for options types and their nested structs and
/// enums. `serde_json::Value` does not implement it (it accepts anything): mark a deliberately
/// free-form field `#[adapter_options(unchecked)]`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` may accept unknown fields, so it cannot be part of adapter options",
    label = "not known to reject unknown fields",
    note = "derive `AdapterOptions` for it (with `#[serde(deny_unknown_fields)]`); for a \
            deliberately free-form field (such as `serde_json::Value`) or a foreign type whose \
            schema is closed, mark the field `#[adapter_options(unchecked)]`"
)]
pub trait ClosedSchema {}

macro_rules! closed_schema {
    ($($ty:ty),* $(,)?) => { $(impl ClosedSchema for $ty {})* };
}

closed_schema!(
    bool,
    char,
    u8,
    u16,
    u32,
    u64,
    u128,
    usize,
    i8,
    i16,
    i32,
    i64,
    i128,
    isize,
    f32,
    f64,
    str,
    String,
    std::path::PathBuf,
    std::num::NonZeroU8,
    std::num::NonZeroU16,
    std::num::NonZeroU32,
    std::num::NonZeroU64,
    std::num::NonZeroUsize,
    std::num::NonZeroI8,
    std::num::NonZeroI16,
    std::num::NonZeroI32,
    std::num::NonZeroI64,
    std::num::NonZeroIsize,
);

impl<T: ClosedSchema> ClosedSchema for Option<T> {}
impl<T: ClosedSchema> ClosedSchema for Vec<T> {}
impl<T: ClosedSchema> ClosedSchema for std::collections::VecDeque<T> {}
impl<T: ClosedSchema, const N: usize> ClosedSchema for [T; N] {}
impl<T: ClosedSchema> ClosedSchema for [T] {}
impl<T: ClosedSchema> ClosedSchema for std::collections::BTreeSet<T> {}
impl<T: ClosedSchema, S> ClosedSchema for std::collections::HashSet<T, S> {}
impl<K: ClosedSchema, V: ClosedSchema> ClosedSchema for std::collections::BTreeMap<K, V> {}
impl<K: ClosedSchema, V: ClosedSchema, S> ClosedSchema for std::collections::HashMap<K, V, S> {}
impl<T: ClosedSchema + ?Sized> ClosedSchema for Box<T> {}
impl<T: ClosedSchema + ?Sized> ClosedSchema for std::sync::Arc<T> {}
impl<A: ClosedSchema, B: ClosedSchema> ClosedSchema for (A, B) {}
impl<A: ClosedSchema, B: ClosedSchema, C: ClosedSchema> ClosedSchema for (A, B, C) {}
impl<A: ClosedSchema, B: ClosedSchema, C: ClosedSchema, D: ClosedSchema> ClosedSchema
    for (A, B, C, D)
{
}

/// One way in which adapter options do not match the options schema.
///
/// ```
/// use harness_core::manifest::OptionsViolation;
/// let v = OptionsViolation { pointer: "/retry/max".into(), message: "expected integer, found string".into() };
/// assert_eq!(v.to_string(), "at `/retry/max`: expected integer, found string");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OptionsViolation {
    /// Where, as a JSON pointer into the options (RFC 6901; `""` is the root). For an unknown
    /// or missing field, the pointer names the field itself.
    pub pointer: String,
    /// What is wrong. It never repeats the offending value, which may be a secret.
    pub message: String,
}

impl fmt::Display for OptionsViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pointer.is_empty() {
            write!(f, "at the root: {}", self.message)
        } else {
            write!(f, "at `{}`: {}", self.pointer, self.message)
        }
    }
}

/// Adapter options were refused: every violation, each with its JSON pointer.
///
/// Converts into a `configuration` [`HarnessError`](crate::error::HarnessError) with code
/// `OPTIONS_INVALID`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid adapter options: {}",
    .violations.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
)]
pub struct InvalidOptions {
    /// Every violation found, ordered by pointer.
    pub violations: Vec<OptionsViolation>,
}

impl InvalidOptions {
    fn at_root(message: String) -> Self {
        Self {
            violations: vec![OptionsViolation {
                pointer: String::new(),
                message,
            }],
        }
    }
}

impl From<InvalidOptions> for crate::error::HarnessError {
    fn from(e: InvalidOptions) -> Self {
        Self::new(crate::error::ErrorCategory::Configuration, e.to_string())
            .with_code(crate::error::ErrorCode::OPTIONS_INVALID)
    }
}

/// An options schema compiled for validation: checks adapter options against it and reports
/// every violation with its JSON pointer. Compile it once and reuse it.
///
/// Unknown fields are reported one by one at their own pointer, with the fields the object
/// accepts; a missing field at the pointer it should have; messages never repeat the
/// offending value. For a `oneOf` / `anyOf` (an enum), the violations of the branch that
/// came closest are reported when one did.
///
/// ```
/// use harness_core::manifest::OptionsValidator;
/// use serde_json::json;
///
/// let validator = OptionsValidator::new(&json!({
///     "type": "object",
///     "properties": {
///         "model": {"type": "string"},
///         "retry": {
///             "type": "object",
///             "properties": {"max": {"type": "integer", "maximum": 10}},
///             "additionalProperties": false
///         }
///     },
///     "required": ["model"],
///     "additionalProperties": false
/// }))
/// .unwrap();
/// assert!(validator.validate(&json!({"model": "m"})).is_ok());
///
/// let err = validator
///     .validate(&json!({"retry": {"max": 99, "backoff": "x"}, "modle": "m"}))
///     .unwrap_err();
/// let found: Vec<(&str, &str)> = err
///     .violations
///     .iter()
///     .map(|v| (v.pointer.as_str(), v.message.as_str()))
///     .collect();
/// assert!(found.contains(&("/model", "missing required field `model`")));
/// assert!(found.contains(&("/modle", "unknown field `modle`: expected `model` or `retry`")));
/// assert!(found.contains(&("/retry/backoff", "unknown field `backoff`: expected `max`")));
/// assert!(found.contains(&("/retry/max", "value is greater than the maximum of 10")));
/// assert_eq!(found.len(), 4);
/// ```
pub struct OptionsValidator {
    schema: Value,
    validator: CompiledSchema,
}

impl fmt::Debug for OptionsValidator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OptionsValidator")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl OptionsValidator {
    /// Compiles `schema`. Pure: a `$ref` outside the schema is an error, never a fetch.
    ///
    /// # Errors
    ///
    /// [`ManifestError::InvalidOptionsSchema`] when `schema` is not a valid JSON Schema.
    pub fn new(schema: &Value) -> Result<Self, ManifestError> {
        let validator = CompiledSchema::compile(schema).map_err(|reason| {
            ManifestError::InvalidOptionsSchema {
                reason: truncate_for_echo(&reason),
            }
        })?;
        Ok(Self {
            schema: schema.clone(),
            validator,
        })
    }

    /// The schema it validates against.
    #[must_use]
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// Validates `options` (`null` counts as `{}`: absent options).
    ///
    /// # Errors
    ///
    /// [`InvalidOptions`] with every violation.
    pub fn validate(&self, options: &Value) -> Result<(), InvalidOptions> {
        let empty = Value::Object(serde_json::Map::new());
        let options = if options.is_null() { &empty } else { options };
        let mut violations = Vec::new();
        for error in self.validator.errors(options) {
            self.collect(&error, &mut violations);
        }
        violations.sort_by(|a, b| a.pointer.cmp(&b.pointer));
        if violations.is_empty() {
            Ok(())
        } else {
            Err(InvalidOptions { violations })
        }
    }

    fn collect(&self, error: &jsonschema::ValidationError<'_>, out: &mut Vec<OptionsViolation>) {
        use jsonschema::error::{TypeKind, ValidationErrorKind as Kind};
        let at = error.instance_path().as_str();
        let mut push = |pointer: String, message: String| {
            let violation = OptionsViolation { pointer, message };
            if !out.contains(&violation) {
                out.push(violation);
            }
        };
        match error.kind() {
            Kind::AdditionalProperties { unexpected }
            | Kind::UnevaluatedProperties { unexpected } => {
                let known = self.known_fields(error.schema_path().as_str());
                for name in unexpected {
                    let message = match known.as_slice() {
                        [] => format!("unknown field `{name}`: no fields are accepted here"),
                        known => format!("unknown field `{name}`: expected {}", or_list(known)),
                    };
                    push(push_pointer(at, name), message);
                }
            }
            Kind::Required { property } => {
                let name = property.as_str().unwrap_or_default();
                push(
                    push_pointer(at, name),
                    format!("missing required field `{name}`"),
                );
            }
            Kind::Type { kind } => {
                let expected = match kind {
                    TypeKind::Single(t) => t.to_string(),
                    TypeKind::Multiple(set) => {
                        // `null` last: "expected integer or null" reads as an optional integer.
                        let mut types: Vec<String> = set.iter().map(|t| t.to_string()).collect();
                        types.sort_by_key(|t| t == "null");
                        types.join(" or ")
                    }
                };
                let found = match &**error.instance() {
                    Value::Null => "null",
                    Value::Bool(_) => "boolean",
                    Value::Number(n) if n.is_f64() => "number",
                    Value::Number(_) => "integer",
                    Value::String(_) => "string",
                    Value::Array(_) => "array",
                    Value::Object(_) => "object",
                };
                push(at.to_owned(), format!("expected {expected}, found {found}"));
            }
            Kind::OneOfNotValid { context } | Kind::AnyOf { context }
                if !context.is_empty()
                    && context.iter().flatten().all(|e| {
                        matches!(e.kind(), Kind::Constant { .. })
                            && e.instance_path().as_str() == at
                    }) =>
            {
                // A choice of constants (a unit-variant enum): name them.
                let expected: Vec<String> = context
                    .iter()
                    .flatten()
                    .filter_map(|e| match e.kind() {
                        Kind::Constant { expected_value } => Some(expected_value.to_string()),
                        _ => None,
                    })
                    .collect();
                push(at.to_owned(), format!("expected {}", expected.join(" or ")));
            }
            Kind::Enum { options } => {
                let expected: Vec<String> = options
                    .as_array()
                    .map(|o| o.iter().map(ToString::to_string).collect())
                    .unwrap_or_default();
                push(at.to_owned(), format!("expected {}", expected.join(" or ")));
            }
            Kind::OneOfNotValid { context } | Kind::AnyOf { context } => {
                // Branches for another type of value (`null` next to an object, as for an
                // `Option`) say nothing useful: leave them out, then report the branch that
                // came closest, when one did.
                let of_this_type = |branch: &&Vec<jsonschema::ValidationError<'static>>| {
                    !branch.iter().any(|e| {
                        matches!(e.kind(), Kind::Type { .. }) && e.instance_path().as_str() == at
                    })
                };
                let candidates: Vec<_> = context.iter().filter(of_this_type).collect();
                let candidates = if candidates.is_empty() {
                    context.iter().collect()
                } else {
                    candidates
                };
                let fewest = candidates.iter().map(|b| b.len()).min().unwrap_or(0);
                let closest: Vec<_> = candidates
                    .into_iter()
                    .filter(|b| b.len() == fewest)
                    .collect();
                if let [branch] = closest.as_slice()
                    && !branch.is_empty()
                {
                    for inner in *branch {
                        self.collect(inner, out);
                    }
                } else {
                    push(at.to_owned(), error.masked().to_string());
                }
            }
            _ => push(at.to_owned(), error.masked().to_string()),
        }
    }

    /// The `properties` of the object schema owning the keyword at `keyword_path`.
    /// The fields an object schema accepts, sorted: the order must not depend on whether
    /// some crate in the build turns on serde_json's `preserve_order` (feature unification).
    fn known_fields(&self, keyword_path: &str) -> Vec<String> {
        let parent = keyword_path
            .rsplit_once('/')
            .map_or("", |(parent, _)| parent);
        let mut fields: Vec<String> = self
            .schema
            .pointer(parent)
            .and_then(|s| s.get("properties"))
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        fields.sort_unstable();
        fields
    }
}

/// The options schema of `T`: JSON Schema 2020-12, for deserialization (as
/// [`HarnessDescriptorBuilder::options_schema_for`] generates it).
pub(crate) fn generate_options_schema<T: JsonSchema + ?Sized>() -> Value {
    schemars::generate::SchemaSettings::draft2020_12()
        .for_deserialize()
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value()
}

/// `` `a`, `b` or `c` ``.
fn or_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => format!("`{one}`"),
        [init @ .., last] => format!(
            "{} or `{last}`",
            init.iter()
                .map(|i| format!("`{i}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A lazily compiled options validator: put one in a `static` per options type, and every
/// validation after the first reuses the compiled schema (the derive does it for
/// descriptors; adapters parsing a request's options do it too).
///
/// ```
/// use harness_core::manifest::{AdapterOptions, ClosedSchema, ValidatorCell};
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// #[serde(deny_unknown_fields)]
/// struct MyOptions { model: Option<String> }
/// // What `#[derive(AdapterOptions)]` writes.
/// impl ClosedSchema for MyOptions {}
/// impl AdapterOptions for MyOptions {}
///
/// static SCHEMA: ValidatorCell = ValidatorCell::new();
/// assert!(SCHEMA.validate::<MyOptions>(&serde_json::json!({"model": "m"})).is_ok());
/// assert!(SCHEMA.validate::<MyOptions>(&serde_json::json!({"modle": "m"})).is_err());
/// ```
#[derive(Debug)]
pub struct ValidatorCell(std::sync::OnceLock<Result<OptionsValidator, ManifestError>>);

impl ValidatorCell {
    /// An empty cell.
    #[must_use]
    pub const fn new() -> Self {
        Self(std::sync::OnceLock::new())
    }

    /// Validates `options` against `T`'s schema, compiling it on first use.
    ///
    /// # Errors
    ///
    /// Every violation, or one at the root if `T`'s schema is not a valid JSON Schema.
    pub fn validate<T: AdapterOptions>(&self, options: &Value) -> Result<(), InvalidOptions> {
        match self
            .0
            .get_or_init(|| OptionsValidator::new(&T::options_schema()))
        {
            Ok(validator) => validator.validate(options),
            Err(problem) => Err(InvalidOptions {
                violations: vec![OptionsViolation {
                    pointer: String::new(),
                    message: problem.to_string(),
                }],
            }),
        }
    }
}
