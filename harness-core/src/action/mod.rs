//! Action requests (form input, tool approval), their typed answers, and the validation that
//! turns an answer into a resolution.
//!
//! An [`ActionRequest`] pauses an execution until the caller answers it. It has its own
//! [`ActionId`](crate::id::ActionId), a [`Revision`] (an adapter that changes a pending request bumps it, so an
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
//! **Unknown fields.** A request (an adapter's) and a resolution (the engine's) cross version
//! boundaries in events and in the store: a field a newer writer added is read past. An
//! answer ([`ActionResponse`] and its parts) is a caller's instruction: a field this version
//! does not know is refused with an error that names it, whether the answer comes from a
//! caller or is read back from the store (a reader must not act on part of an instruction).
//! See [`crate::wire`].
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

// One file per part, each importing what it uses; every public item is
// re-exported here, so paths stay `harness_core::action::Item`.
mod approval;
mod form;
mod ids;
mod request;
mod resolution;
mod response;
pub(crate) mod resume;
mod support;
mod validation;
mod violation;

pub use self::approval::*;
pub use self::form::*;
pub use self::ids::*;
pub use self::request::*;
pub use self::resolution::*;
pub use self::response::*;
pub use self::validation::*;
pub use self::violation::SchemaViolation;

#[cfg(test)]
mod tests;
