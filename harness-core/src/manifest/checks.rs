use serde_json::Value;

use super::support::truncate_for_echo;
use crate::json_schema::CompiledSchema;

use super::errors::*;

// ---------------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------------

/// Checks a semantic-versioning-like `MAJOR.MINOR.PATCH[-pre][+build]` version.
pub(super) fn check_implementation_version(s: &str) -> Result<(), &'static str> {
    fn is_ident_char(c: char) -> bool {
        c.is_ascii_alphanumeric() || c == '-'
    }
    if s.len() > 128 {
        return Err("longer than 128 characters");
    }
    let (rest, build) = match s.split_once('+') {
        Some((rest, build)) => (rest, Some(build)),
        None => (s, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (rest, None),
    };
    let parts: Vec<&str> = core.split('.').collect();
    if parts.len() != 3 {
        return Err("expected exactly three numeric components");
    }
    for part in parts {
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return Err("MAJOR, MINOR and PATCH must be non-negative integers");
        }
        if part.len() > 1 && part.starts_with('0') {
            return Err("numeric components must not have leading zeros");
        }
    }
    if let Some(pre) = pre {
        for ident in pre.split('.') {
            if ident.is_empty() || !ident.chars().all(is_ident_char) {
                return Err("pre-release identifiers must be non-empty [0-9A-Za-z-]");
            }
            if ident.len() > 1
                && ident.starts_with('0')
                && ident.bytes().all(|b| b.is_ascii_digit())
            {
                return Err("numeric pre-release identifiers must not have leading zeros");
            }
        }
    }
    if let Some(build) = build {
        for ident in build.split('.') {
            if ident.is_empty() || !ident.chars().all(is_ident_char) {
                return Err("build identifiers must be non-empty [0-9A-Za-z-]");
            }
        }
    }
    Ok(())
}

pub(super) fn valid_name(s: &str) -> bool {
    (1..=128).contains(&s.chars().count())
        && !s.trim().is_empty()
        && !s.chars().any(char::is_control)
}

pub(super) fn valid_evidence_version(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'+' | b'-'))
}

/// Keywords that only annotate: a schema made of nothing else accepts any value.
const ANNOTATION_KEYWORDS: &[&str] = &[
    "$schema",
    "$id",
    "$anchor",
    "$comment",
    "$defs",
    "definitions",
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// Nesting of subschemas beyond which a schema is not analysed (and is reported as open).
const MAX_SCHEMA_DEPTH: usize = 64;
/// Longest chain of local `$ref`s followed.
const MAX_REF_HOPS: usize = 16;

/// Whether a schema accepts every value: `true`, or an object of annotations only.
fn accepts_anything(schema: &Value) -> bool {
    match schema {
        Value::Bool(b) => *b,
        Value::Object(map) => map
            .keys()
            .all(|k| ANNOTATION_KEYWORDS.contains(&k.as_str())),
        _ => false,
    }
}

/// Follows a local `$ref` (`#`, `#/...`) from `schema`, up to [`MAX_REF_HOPS`] times.
fn resolve<'a>(root: &'a Value, mut schema: &'a Value) -> Option<&'a Value> {
    for _ in 0..MAX_REF_HOPS {
        let Some(Value::String(reference)) = schema.get("$ref") else {
            return Some(schema);
        };
        let pointer = reference.strip_prefix('#')?;
        schema = root.pointer(pointer)?;
    }
    None
}

fn has_type(map: &serde_json::Map<String, Value>, ty: &str) -> bool {
    match map.get("type") {
        Some(Value::String(t)) => t == ty,
        Some(Value::Array(ts)) => ts.iter().any(|t| t == ty),
        _ => false,
    }
}

/// An object schema: typed `object`, or with `properties` / `patternProperties`.
fn is_object_schema(map: &serde_json::Map<String, Value>) -> bool {
    has_type(map, "object")
        || map.contains_key("properties")
        || map.contains_key("patternProperties")
}

/// Closed by its own keywords: `additionalProperties: false`, `unevaluatedProperties: false`,
/// or a deliberate map (`additionalProperties` / `unevaluatedProperties` given a schema that
/// constrains the values), whose keys are data rather than option names.
fn closes_itself(map: &serde_json::Map<String, Value>) -> bool {
    ["additionalProperties", "unevaluatedProperties"]
        .iter()
        .any(|kw| match map.get(*kw) {
            Some(Value::Bool(b)) => !b,
            Some(v @ Value::Object(_)) => !accepts_anything(v),
            _ => false,
        })
}

/// Whether `schema` rejects every object with unknown fields: closed itself, closed by its
/// branches, or not accepting objects at all.
fn rejects_unknown_fields(root: &Value, schema: &Value, depth: usize) -> bool {
    if depth > MAX_REF_HOPS {
        return false;
    }
    let Some(schema) = resolve(root, schema) else {
        return false;
    };
    match schema {
        Value::Bool(b) => !b,
        Value::Object(map) => {
            closes_itself(map)
                || map.contains_key("const")
                || map.contains_key("enum")
                || (map.contains_key("type") && !has_type(map, "object"))
                || closed_by_branches(root, map, depth + 1)
        }
        _ => false,
    }
}

/// An object schema without closing keywords of its own is still closed when one `allOf`
/// branch, or every `anyOf` / `oneOf` branch, is closed, or its sibling `$ref` is.
fn closed_by_branches(root: &Value, map: &serde_json::Map<String, Value>, depth: usize) -> bool {
    let branches = |kw: &str| match map.get(kw) {
        Some(Value::Array(items)) if !items.is_empty() => Some(items),
        _ => None,
    };
    if let Some(items) = branches("allOf")
        && items.iter().any(|s| rejects_unknown_fields(root, s, depth))
    {
        return true;
    }
    if ["anyOf", "oneOf"].iter().any(|kw| {
        branches(kw)
            .is_some_and(|items| items.iter().all(|s| rejects_unknown_fields(root, s, depth)))
    }) {
        return true;
    }
    map.get("$ref").is_some_and(|target| {
        rejects_unknown_fields(root, &serde_json::json!({ "$ref": target }), depth)
    })
}

/// Whether the root schema describes only JSON objects (possibly through a local `$ref` or as a
/// union of object schemas, like a schemars-generated enum).
pub(super) fn describes_objects(root: &Value, schema: &Value, depth: usize) -> bool {
    if depth > MAX_REF_HOPS {
        return false;
    }
    let Some(Value::Object(map)) = resolve(root, schema) else {
        return false;
    };
    if is_object_schema(map) {
        return true;
    }
    let branches = |kw: &str| match map.get(kw) {
        Some(Value::Array(items)) if !items.is_empty() => Some(items),
        _ => None,
    };
    if let Some(items) = branches("allOf")
        && items.iter().any(|s| describes_objects(root, s, depth + 1))
    {
        return true;
    }
    ["anyOf", "oneOf"].iter().any(|kw| {
        branches(kw)
            .is_some_and(|items| items.iter().all(|s| describes_objects(root, s, depth + 1)))
    })
}

pub(super) fn push_pointer(pointer: &str, token: &str) -> String {
    let mut out = String::with_capacity(pointer.len() + token.len() + 1);
    out.push_str(pointer);
    out.push('/');
    for c in token.chars() {
        match c {
            '~' => out.push_str("~0"),
            '/' => out.push_str("~1"),
            c => out.push(c),
        }
    }
    out
}

struct Walk<'a> {
    root: &'a Value,
    open: Vec<String>,
}

impl Walk<'_> {
    /// Visits the subschema `node` at `pointer`. `covered` is true when an enclosing schema at
    /// the same instance location already rejects unknown fields (for the branches of
    /// `allOf`/`anyOf`/`oneOf`/`if`/`then`/`else` under a closed schema).
    fn visit(&mut self, node: &Value, pointer: &str, covered: bool, depth: usize) {
        let Value::Object(map) = node else {
            return;
        };
        if depth > MAX_SCHEMA_DEPTH {
            self.open.push(pointer.to_owned());
            return;
        }
        let closed_here = closes_itself(map);
        if is_object_schema(map)
            && !closed_here
            && !covered
            && !closed_by_branches(self.root, map, 0)
        {
            self.open.push(pointer.to_owned());
        }

        // Same instance location: a closed parent covers its branches.
        let cover = covered || closed_here;
        for kw in ["allOf", "anyOf", "oneOf"] {
            if let Some(Value::Array(items)) = map.get(kw) {
                let base = push_pointer(pointer, kw);
                for (i, sub) in items.iter().enumerate() {
                    self.visit(sub, &push_pointer(&base, &i.to_string()), cover, depth + 1);
                }
            }
        }
        for kw in ["if", "then", "else"] {
            if let Some(sub) = map.get(kw) {
                self.visit(sub, &push_pointer(pointer, kw), cover, depth + 1);
            }
        }
        if let Some(Value::Object(subs)) = map.get("dependentSchemas") {
            let base = push_pointer(pointer, "dependentSchemas");
            for (name, sub) in subs {
                self.visit(sub, &push_pointer(&base, name), cover, depth + 1);
            }
        }

        // Other instance locations (or definitions): nothing covers them.
        for kw in ["properties", "patternProperties", "$defs", "definitions"] {
            if let Some(Value::Object(subs)) = map.get(kw) {
                let base = push_pointer(pointer, kw);
                for (name, sub) in subs {
                    self.visit(sub, &push_pointer(&base, name), false, depth + 1);
                }
            }
        }
        for kw in [
            "additionalProperties",
            "unevaluatedProperties",
            "items",
            "additionalItems",
            "unevaluatedItems",
            "contains",
            "propertyNames",
        ] {
            match map.get(kw) {
                Some(sub @ Value::Object(_)) => {
                    self.visit(sub, &push_pointer(pointer, kw), false, depth + 1);
                }
                Some(Value::Array(items)) if kw == "items" => {
                    let base = push_pointer(pointer, kw);
                    for (i, sub) in items.iter().enumerate() {
                        self.visit(sub, &push_pointer(&base, &i.to_string()), false, depth + 1);
                    }
                }
                _ => {}
            }
        }
        if let Some(Value::Array(items)) = map.get("prefixItems") {
            let base = push_pointer(pointer, "prefixItems");
            for (i, sub) in items.iter().enumerate() {
                self.visit(sub, &push_pointer(&base, &i.to_string()), false, depth + 1);
            }
        }
    }
}

/// The JSON pointers (RFC 6901; `""` is the root) of every object schema in `schema` that
/// would accept unknown fields.
///
/// An *object schema* is one typed `"object"` or with `properties` / `patternProperties`. It is
/// open unless one of these closes it:
///
/// - `"additionalProperties": false` or `"unevaluatedProperties": false`;
/// - a map declaration: `additionalProperties` (or `unevaluatedProperties`) given a schema
///   that constrains the values, such as schemars emits for a `HashMap<String, T>` field: its
///   keys are data, not option names;
/// - an enclosing schema at the same place that is closed (it covers its `allOf` / `anyOf` /
///   `oneOf` / `if` / `then` / `else` branches);
/// - its own branches: one closed `allOf` branch, every `anyOf` / `oneOf` branch closed, or a
///   closed sibling `$ref` (local references are followed).
///
/// The walk covers `properties`, `patternProperties`, `additionalProperties`, `items`,
/// `prefixItems`, `$defs` / `definitions`, `allOf` / `anyOf` / `oneOf`, and the other
/// applicators. A root of `true` or `{}` is reported too, since it accepts any object. A
/// free-form value *inside* the options (`{}`, as schemars emits for `serde_json::Value`) is not
/// an object schema and is not reported.
///
/// ```
/// use harness_core::manifest::open_object_schemas;
/// use serde_json::json;
///
/// let schema = json!({
///     "type": "object",
///     "properties": {
///         "model": { "type": "string" },
///         "retry": { "type": "object", "properties": { "max": { "type": "integer" } } }
///     },
///     "additionalProperties": false
/// });
/// assert_eq!(open_object_schemas(&schema), vec!["/properties/retry".to_owned()]);
/// ```
#[must_use]
pub fn open_object_schemas(schema: &Value) -> Vec<String> {
    if accepts_anything(schema) {
        return vec![String::new()];
    }
    let mut walk = Walk {
        root: schema,
        open: Vec::new(),
    };
    walk.visit(schema, "", false, 0);
    walk.open
}

pub(super) fn check_options_schema(schema: &Value, errors: &mut Vec<ManifestError>) {
    // Offline: a reference outside the schema is an error, never a fetch, whatever resolver
    // features another crate enables on `jsonschema`.
    if let Err(reason) = CompiledSchema::compile(schema) {
        errors.push(ManifestError::InvalidOptionsSchema {
            reason: truncate_for_echo(&reason),
        });
        return;
    }
    if !describes_objects(schema, schema, 0) {
        errors.push(ManifestError::OptionsSchemaNotObject);
        return;
    }
    let pointers = open_object_schemas(schema);
    if !pointers.is_empty() {
        errors.push(ManifestError::OpenOptionsSchema { pointers });
    }
}
