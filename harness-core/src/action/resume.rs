//! The validated answer a runtime resumes with. Its public path is
//! [`crate::adapter::ResumeDecision`].

use super::resolution::ActionResolution;
use super::validation::ValidatedResponse;
use crate::error::{ErrorCategory, ErrorCode, HarnessError};
use crate::id::ActionId;
use crate::session::SessionBinding;

/// A validated answer to an action request, handed to [`HarnessRuntime::resume`](crate::adapter::HarnessRuntime::resume).
///
/// Only the service builds one, from an answer that passed validation against the pending
/// request, so a runtime never sees a decision that broadens what it offered. It carries
/// the session binding of the execution it answers ([`binding`](Self::binding): `None` for
/// an execution without a conversation), so that a decision is never applied to another
/// conversation's pause: the service refuses to resume a runtime whose binding is not the
/// decision's (`protocol`, `ACTION_BINDING_MISMATCH`), and a runtime may check it again
/// with [`check_binding`](Self::check_binding).
///
/// ```
/// use harness_core::action::{ActionRequest, FieldKind, FormField, FormRequest, FormValues};
/// use harness_core::adapter::ResumeDecision;
/// use harness_core::session::SessionBinding;
///
/// let form = FormRequest::new([FormField::new("name".parse()?, "Name", FieldKind::text())])?;
/// let request = ActionRequest::form(form);
/// let validated = request.validate(request.submit(FormValues::new().with("name", "Ada")))?;
/// let mine = SessionBinding::new("b-1".parse()?, "c-1".parse()?);
/// let decision = ResumeDecision::new(validated).for_binding(Some(mine.clone()));
/// assert!(decision.check_binding(Some(&mine)).is_ok());
/// // Another conversation's binding, or the same one after a clear (a later epoch): refused.
/// let err = decision.check_binding(Some(&mine.clone().with_epoch(1))).unwrap_err();
/// assert_eq!(err.code().as_str(), "ACTION_BINDING_MISMATCH");
/// assert!(decision.check_binding(None).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ResumeDecision {
    response: ValidatedResponse,
    binding: Option<SessionBinding>,
}

impl ResumeDecision {
    /// Wraps a validated answer, for an execution without a session binding (see
    /// [`for_binding`](Self::for_binding)).
    #[must_use]
    pub fn new(response: ValidatedResponse) -> Self {
        Self {
            response,
            binding: None,
        }
    }

    /// The same decision, for the execution of `binding`.
    #[must_use]
    pub fn for_binding(mut self, binding: Option<SessionBinding>) -> Self {
        self.binding = binding;
        self
    }

    /// The session binding (id and epoch) of the execution this decision answers.
    #[must_use]
    pub fn binding(&self) -> Option<&SessionBinding> {
        self.binding.as_ref()
    }

    /// Refuses this decision for a runtime of binding `expected` when it was made for
    /// another (another binding id, or another epoch of it).
    ///
    /// # Errors
    /// `protocol`, `ACTION_BINDING_MISMATCH`.
    pub fn check_binding(&self, expected: Option<&SessionBinding>) -> Result<(), HarnessError> {
        if self.binding.as_ref() == expected {
            return Ok(());
        }
        let name = |b: Option<&SessionBinding>| match b {
            Some(b) => format!("binding `{}` at epoch {}", b.binding_id(), b.epoch()),
            None => "no binding".to_owned(),
        };
        Err(HarnessError::new(
            ErrorCategory::Protocol,
            "a resume decision was presented on another session binding than the one it was \
             made for: refused",
        )
        .with_code(ErrorCode::ACTION_BINDING_MISMATCH)
        .with_diagnostic(format!(
            "decision for {}, runtime on {} (action {})",
            name(self.binding.as_ref()),
            name(expected),
            self.action_id()
        )))
    }

    /// The action being answered.
    #[must_use]
    pub fn action_id(&self) -> &ActionId {
        self.response.action_id()
    }

    /// The answer, validated against the request.
    #[must_use]
    pub fn response(&self) -> &ValidatedResponse {
        &self.response
    }

    /// The record appended as `action.resolved`.
    #[must_use]
    pub fn resolution(&self) -> ActionResolution {
        self.response.resolution()
    }

    /// The validated answer, by value.
    #[must_use]
    pub fn into_response(self) -> ValidatedResponse {
        self.response
    }
}
