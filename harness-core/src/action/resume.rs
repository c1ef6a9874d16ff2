//! The validated answer a runtime resumes with. Its public path is
//! [`crate::adapter::ResumeDecision`].

use super::resolution::ActionResolution;
use super::validation::ValidatedResponse;
use crate::id::ActionId;

/// A validated answer to an action request, handed to [`HarnessRuntime::resume`](crate::adapter::HarnessRuntime::resume).
///
/// Only the service builds one, from an answer that passed validation against the pending
/// request, so a runtime never sees a decision that broadens what it offered.
#[derive(Debug, Clone, PartialEq)]
pub struct ResumeDecision {
    response: ValidatedResponse,
}

impl ResumeDecision {
    /// Wraps a validated answer.
    #[must_use]
    pub fn new(response: ValidatedResponse) -> Self {
        Self { response }
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
