//! A place where a value misses its JSON Schema, for forms and tool-call arguments alike.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::json_schema::{CompiledSchema, MESSAGE_CHARS, truncate};

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
#[serde(rename_all = "camelCase")]
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

/// Every way `instance` misses `schema`, as violations (messages bounded).
pub(super) fn violations(schema: &CompiledSchema, instance: &Value) -> Vec<SchemaViolation> {
    schema
        .errors(instance)
        .map(|e| SchemaViolation {
            pointer: e.instance_path().as_str().to_owned(),
            keyword_location: e.schema_path().as_str().to_owned(),
            message: truncate(&e.masked().to_string(), MESSAGE_CHARS),
        })
        .collect()
}
