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
use crate::json_schema::{CompiledSchema, MESSAGE_CHARS, truncate};
use crate::time::Timestamp;

// One file per part, sharing the imports above (`use super::*`); every public item is
// re-exported here, so paths stay `harness_core::action::Item`.
mod approval;
mod form;
mod ids;
mod request;
mod resolution;
mod response;
mod validation;

pub use self::approval::*;
pub use self::form::*;
pub use self::ids::*;
pub use self::request::*;
pub use self::resolution::*;
pub use self::response::*;
pub use self::validation::*;

// ---------------------------------------------------------------------------------------------
// Schema violations and small helpers
// ---------------------------------------------------------------------------------------------

/// Every way `instance` misses `schema`, as violations (messages bounded).
fn violations(schema: &CompiledSchema, instance: &Value) -> Vec<SchemaViolation> {
    schema
        .errors(instance)
        .map(|e| SchemaViolation {
            pointer: e.instance_path().as_str().to_owned(),
            keyword_location: e.schema_path().as_str().to_owned(),
            message: truncate(&e.masked().to_string(), MESSAGE_CHARS),
        })
        .collect()
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

#[cfg(test)]
mod tests;
