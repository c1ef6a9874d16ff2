//! [`CompiledSchema`]: the one way this crate compiles a JSON Schema it was given (a tool's
//! input schema, an approval call's schema, a form field's pattern, an adapter's options
//! schema).

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

/// A JSON Schema compiled once, when the definition that holds it is built. Cheap to clone.
///
/// Compiled offline: a `$ref` to anything outside the schema is refused, never fetched, so a
/// definition from an adapter (or from a model) cannot make the runtime open a connection or
/// read a file.
#[derive(Clone)]
pub(crate) struct CompiledSchema(Arc<jsonschema::Validator>);

/// How much of a compiler's or validator's message is kept (they may quote the schema).
pub(crate) const MESSAGE_CHARS: usize = 300;

impl CompiledSchema {
    /// Compiles `schema`; the error says why it is not a usable schema (bounded).
    pub(crate) fn compile(schema: &Value) -> Result<Self, String> {
        jsonschema::options()
            .offline()
            .build(schema)
            .map(|v| Self(Arc::new(v)))
            .map_err(|e| truncate(&e.to_string(), MESSAGE_CHARS))
    }

    /// Every way `instance` misses the schema.
    pub(crate) fn errors<'a>(
        &'a self,
        instance: &'a Value,
    ) -> impl Iterator<Item = jsonschema::ValidationError<'a>> + 'a {
        self.0.iter_errors(instance)
    }

    /// Whether `instance` fits the schema.
    pub(crate) fn is_valid(&self, instance: &Value) -> bool {
        self.0.is_valid(instance)
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

/// `s` cut to `max_chars` characters, ending in `...` when cut.
pub(crate) fn truncate(s: &str, max_chars: usize) -> String {
    if s.chars().count() > max_chars {
        let mut t: String = s.chars().take(max_chars.saturating_sub(3)).collect();
        t.push_str("...");
        t
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_remote_reference_is_refused_not_fetched() {
        let schema = json!({"$ref": "https://example.invalid/schema.json"});
        assert!(CompiledSchema::compile(&schema).is_err());
        let local = json!({"$defs": {"n": {"type": "integer"}}, "$ref": "#/$defs/n"});
        let compiled = CompiledSchema::compile(&local).unwrap();
        assert!(compiled.is_valid(&json!(3)));
        assert_eq!(compiled.errors(&json!("x")).count(), 1);
    }
}
