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

mod function;
mod handle;
pub mod middleware;
mod policy;
mod portable;
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

pub use self::portable::*;
pub use crate::boxed::BoxFuture;

#[cfg(test)]
mod tests;
