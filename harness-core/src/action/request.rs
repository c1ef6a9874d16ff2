use std::collections::HashMap;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::approval::{ApprovalRequest, ToolCallApproval};
use super::form::{FormRequest, FormValues};
use super::ids::{ActionType, Revision};
use super::response::{
    ActionResponse, ApprovalAnswer, ApprovalResponse, Decision, FormAnswer, FormResponse,
    ToolDecision,
};
use super::validation::{ActionResponseError, ValidatedApproval, ValidatedForm, ValidatedResponse};
use crate::id::{ActionId, ToolCallId};
use crate::time::Timestamp;

// ---------------------------------------------------------------------------------------------
// Action requests
// ---------------------------------------------------------------------------------------------

/// What an action request asks for. Wire: internally tagged, `{"type": "form_input", ...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ActionKind {
    /// Fill in a form.
    FormInput(FormRequest),
    /// Decide on tool calls.
    ToolApproval(ApprovalRequest),
}

impl ActionKind {
    /// The kind without its data.
    #[must_use]
    pub fn action_type(&self) -> ActionType {
        match self {
            Self::FormInput(_) => ActionType::FormInput,
            Self::ToolApproval(_) => ActionType::ToolApproval,
        }
    }
}

impl From<FormRequest> for ActionKind {
    fn from(form: FormRequest) -> Self {
        Self::FormInput(form)
    }
}

impl From<ApprovalRequest> for ActionKind {
    fn from(approval: ApprovalRequest) -> Self {
        Self::ToolApproval(approval)
    }
}

const fn default_dismissible() -> bool {
    true
}

/// A pending request for caller input or approval.
///
/// Every answer names the request's `id` and `revision`. **Dismiss** is a whole-action answer
/// available on both kinds: the caller declines to fill in the form or to decide, and the
/// adapter resumes with that refusal (typically as if every call were rejected). A request
/// that must be answered sets `dismissible: false` (default `true` on the wire), and a dismiss
/// is then refused with [`ActionResponseError::DismissNotAllowed`].
///
/// ```
/// use harness_core::action::{ActionRequest, ApprovalRequest, Revision};
/// use serde_json::json;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let approval = ApprovalRequest::single("c1".parse()?, "shell", json!({"cmd": "ls"}), json!({}))?;
/// let request = ActionRequest::approval(approval)
///     .with_id("act_1".parse()?)
///     .with_created_at("2026-11-30T12:00:00Z".parse()?)
///     .with_dismissible(false);
/// let wire = serde_json::to_value(&request)?;
/// assert_eq!(wire["kind"]["type"], "tool_approval");
/// assert_eq!(wire["revision"], 1);
/// assert_eq!(wire["createdAt"], "2026-11-30T12:00:00Z");
/// let back: ActionRequest = serde_json::from_value(wire)?;
/// assert_eq!(back, request);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActionRequest {
    /// The action's identity.
    pub id: ActionId,
    /// The current revision; answers must name it.
    pub revision: Revision,
    /// When this revision was created.
    pub created_at: Timestamp,
    /// Whether the caller may dismiss the whole action instead of answering it.
    #[serde(default = "default_dismissible")]
    pub dismissible: bool,
    /// What is asked.
    pub kind: ActionKind,
}

impl ActionRequest {
    /// A dismissible request with a fresh id, revision 1, created now.
    #[must_use]
    pub fn new(kind: impl Into<ActionKind>) -> Self {
        Self {
            id: ActionId::generate(),
            revision: Revision::FIRST,
            created_at: Timestamp::now(),
            dismissible: true,
            kind: kind.into(),
        }
    }

    /// A form request (see [`ActionRequest::new`]).
    #[must_use]
    pub fn form(form: FormRequest) -> Self {
        Self::new(form)
    }

    /// A tool approval request (see [`ActionRequest::new`]).
    #[must_use]
    pub fn approval(approval: ApprovalRequest) -> Self {
        Self::new(approval)
    }

    /// Replaces the id.
    #[must_use]
    pub fn with_id(mut self, id: ActionId) -> Self {
        self.id = id;
        self
    }

    /// Replaces the revision.
    #[must_use]
    pub fn with_revision(mut self, revision: Revision) -> Self {
        self.revision = revision;
        self
    }

    /// Replaces the creation time.
    #[must_use]
    pub fn with_created_at(mut self, created_at: Timestamp) -> Self {
        self.created_at = created_at;
        self
    }

    /// Sets whether the action may be dismissed.
    #[must_use]
    pub fn with_dismissible(mut self, dismissible: bool) -> Self {
        self.dismissible = dismissible;
        self
    }

    /// The kind without its data.
    #[must_use]
    pub fn action_type(&self) -> ActionType {
        self.kind.action_type()
    }

    /// An answer approving every call of this tool approval, for this request's id and
    /// revision. (On a form request it names no call, and answering with it is refused as
    /// the wrong kind.)
    ///
    /// ```
    /// use harness_core::action::{ActionRequest, ApprovalRequest, ToolCallApproval};
    /// use serde_json::json;
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let call = ToolCallApproval::new("c1".parse()?, "shell", json!({"cmd": "ls"}), json!({"type": "object"}))?;
    /// let request = ActionRequest::approval(ApprovalRequest::new([call])?);
    /// let approve = request.approve_all();
    /// let reject = request.reject(&"c1".parse()?, "not today");
    /// let edit = request.edit(&"c1".parse()?, json!({"cmd": "ls -la"}));
    /// for answer in [&approve, &reject, &edit] {
    ///     assert_eq!(answer.action_id(), &request.id);
    ///     assert_eq!(answer.revision(), request.revision);
    /// }
    /// assert_eq!(serde_json::to_value(&reject)?["answer"]["decisions"][0]["decision"]["type"], "reject");
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn approve_all(&self) -> ActionResponse {
        self.decide(|_| Decision::Approve)
    }

    /// An answer rejecting every call of this tool approval, with `reason`.
    #[must_use]
    pub fn reject_all(&self, reason: impl Into<String>) -> ActionResponse {
        let reason = reason.into();
        self.decide(|_| Decision::Reject {
            reason: Some(reason.clone()),
        })
    }

    /// An answer rejecting the call `call_id` with `reason` and approving every other call.
    #[must_use]
    pub fn reject(&self, call_id: &ToolCallId, reason: impl Into<String>) -> ActionResponse {
        let reason = reason.into();
        self.decide(|call| {
            if call.call_id() == call_id {
                Decision::Reject {
                    reason: Some(reason.clone()),
                }
            } else {
                Decision::Approve
            }
        })
    }

    /// An answer running the call `call_id` with `arguments` instead (revalidated against
    /// its input schema when answered) and approving every other call.
    #[must_use]
    pub fn edit(&self, call_id: &ToolCallId, arguments: Value) -> ActionResponse {
        let mut arguments = Some(arguments);
        self.decide(
            |call| match arguments.take_if(|_| call.call_id() == call_id) {
                Some(arguments) => Decision::Edit { arguments },
                None => Decision::Approve,
            },
        )
    }

    /// An answer with the decision `decide` makes for each call of this tool approval.
    #[must_use]
    pub fn decide(&self, mut decide: impl FnMut(&ToolCallApproval) -> Decision) -> ActionResponse {
        let calls = match &self.kind {
            ActionKind::ToolApproval(approval) => approval.calls(),
            ActionKind::FormInput(_) => &[],
        };
        let decisions = calls.iter().map(|call| ToolDecision {
            call_id: call.call_id().clone(),
            decision: decide(call),
        });
        ApprovalResponse::decide(self.id.clone(), self.revision, decisions).into()
    }

    /// An answer submitting `values` to this form (validated against its fields when
    /// answered).
    ///
    /// ```
    /// use harness_core::action::{ActionRequest, FieldKind, FormField, FormRequest, FormValues};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let form = FormRequest::new([FormField::new("name".parse()?, "Name", FieldKind::text())])?;
    /// let request = ActionRequest::form(form);
    /// let answer = request.submit(FormValues::new().with("name", "Ada"));
    /// assert_eq!(serde_json::to_value(&answer)?["answer"]["values"]["name"], "Ada");
    /// assert_eq!(request.dismiss().revision(), request.revision);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn submit(&self, values: FormValues) -> ActionResponse {
        FormResponse::submit(self.id.clone(), self.revision, values).into()
    }

    /// An answer dismissing this action (form or tool approval) as a whole.
    #[must_use]
    pub fn dismiss(&self) -> ActionResponse {
        match &self.kind {
            ActionKind::FormInput(_) => {
                FormResponse::dismiss(self.id.clone(), self.revision).into()
            }
            ActionKind::ToolApproval(_) => {
                ApprovalResponse::dismiss(self.id.clone(), self.revision).into()
            }
        }
    }

    /// The form, if this is a form request.
    #[must_use]
    pub fn as_form(&self) -> Option<&FormRequest> {
        match &self.kind {
            ActionKind::FormInput(form) => Some(form),
            ActionKind::ToolApproval(_) => None,
        }
    }

    /// The approval, if this is a tool approval request.
    #[must_use]
    pub fn as_approval(&self) -> Option<&ApprovalRequest> {
        match &self.kind {
            ActionKind::ToolApproval(approval) => Some(approval),
            ActionKind::FormInput(_) => None,
        }
    }

    /// Checks that an answer names this action and its current revision.
    fn check_target(
        &self,
        action_id: &ActionId,
        revision: Revision,
    ) -> Result<(), ActionResponseError> {
        if *action_id != self.id {
            return Err(ActionResponseError::ActionMismatch {
                pending: self.id.clone(),
                answered: action_id.clone(),
            });
        }
        if revision != self.revision {
            return Err(ActionResponseError::StaleRevision {
                action: self.id.clone(),
                pending: self.revision,
                answered: revision,
            });
        }
        Ok(())
    }

    /// Checks a form answer against this request: id, revision, kind, dismissal, then every
    /// submitted value.
    ///
    /// # Errors
    ///
    /// The first failed check, as an [`ActionResponseError`]; invalid values are reported
    /// all together in [`ActionResponseError::InvalidFormValues`].
    pub fn validate_form(
        &self,
        response: FormResponse,
    ) -> Result<ValidatedForm, ActionResponseError> {
        self.check_target(&response.action_id, response.revision)?;
        let ActionKind::FormInput(form) = &self.kind else {
            return Err(ActionResponseError::KindMismatch {
                action: self.id.clone(),
                expected: self.action_type(),
                found: ActionType::FormInput,
            });
        };
        let answered = match &response.answer {
            FormAnswer::Dismiss => {
                if !self.dismissible {
                    return Err(ActionResponseError::DismissNotAllowed {
                        action: self.id.clone(),
                    });
                }
                Vec::new()
            }
            FormAnswer::Submit(values) => {
                form.validate(values).map_err(|violations| {
                    ActionResponseError::InvalidFormValues {
                        action: self.id.clone(),
                        violations,
                    }
                })?;
                form.answered(values)
            }
        };
        Ok(ValidatedForm {
            action_id: response.action_id,
            revision: response.revision,
            idempotency_key: response.idempotency_key,
            answer: response.answer,
            answered,
        })
    }

    /// Checks an approval answer against this request: id, revision, kind, dismissal, then
    /// each decision in the order given (known call, not repeated, allowed, edited arguments
    /// valid), then that every call has a decision.
    ///
    /// # Errors
    ///
    /// The first failed check, as an [`ActionResponseError`].
    pub fn validate_approval(
        &self,
        response: ApprovalResponse,
    ) -> Result<ValidatedApproval, ActionResponseError> {
        self.check_target(&response.action_id, response.revision)?;
        let ActionKind::ToolApproval(approval) = &self.kind else {
            return Err(ActionResponseError::KindMismatch {
                action: self.id.clone(),
                expected: self.action_type(),
                found: ActionType::ToolApproval,
            });
        };
        let answer = match response.answer {
            ApprovalAnswer::Dismiss => {
                if !self.dismissible {
                    return Err(ActionResponseError::DismissNotAllowed {
                        action: self.id.clone(),
                    });
                }
                ApprovalAnswer::Dismiss
            }
            ApprovalAnswer::Decide(decisions) => {
                ApprovalAnswer::Decide(self.check_decisions(approval, decisions)?)
            }
        };
        Ok(ValidatedApproval {
            action_id: response.action_id,
            revision: response.revision,
            idempotency_key: response.idempotency_key,
            answer,
            calls: Arc::clone(&approval.calls),
        })
    }

    /// Validates the decisions and returns them in the request's call order.
    fn check_decisions(
        &self,
        approval: &ApprovalRequest,
        decisions: Vec<ToolDecision>,
    ) -> Result<Vec<ToolDecision>, ActionResponseError> {
        let mut by_call: HashMap<ToolCallId, ToolDecision> = HashMap::new();
        for decision in decisions {
            let Some(call) = approval.call(&decision.call_id) else {
                return Err(ActionResponseError::UnknownCall {
                    action: self.id.clone(),
                    call_id: decision.call_id,
                    known: approval.calls.iter().map(|c| c.call_id.clone()).collect(),
                });
            };
            if by_call.contains_key(&decision.call_id) {
                return Err(ActionResponseError::DuplicateDecision {
                    action: self.id.clone(),
                    call_id: decision.call_id,
                });
            }
            let kind = decision.decision.kind();
            if !call.allows(kind) {
                return Err(ActionResponseError::DecisionNotAllowed {
                    action: self.id.clone(),
                    call_id: decision.call_id,
                    decision: kind,
                    allowed: call.allowed.iter().copied().collect(),
                });
            }
            if let Decision::Edit { arguments } = &decision.decision {
                call.validate_arguments(arguments).map_err(|violations| {
                    ActionResponseError::InvalidEditedArguments {
                        action: self.id.clone(),
                        call_id: call.call_id.clone(),
                        tool: call.tool.clone(),
                        violations,
                    }
                })?;
            }
            by_call.insert(decision.call_id.clone(), decision);
        }
        let missing: Vec<ToolCallId> = approval
            .calls
            .iter()
            .filter(|c| !by_call.contains_key(&c.call_id))
            .map(|c| c.call_id.clone())
            .collect();
        if !missing.is_empty() {
            return Err(ActionResponseError::MissingDecision {
                action: self.id.clone(),
                calls: missing,
            });
        }
        Ok(approval
            .calls
            .iter()
            .filter_map(|c| by_call.remove(&c.call_id))
            .collect())
    }

    /// Checks an untyped answer against this request (see [`validate_form`] and
    /// [`validate_approval`]); an answer of the other kind is refused with
    /// [`ActionResponseError::KindMismatch`].
    ///
    /// [`validate_form`]: Self::validate_form
    /// [`validate_approval`]: Self::validate_approval
    ///
    /// # Errors
    ///
    /// The first failed check, as an [`ActionResponseError`].
    pub fn validate(
        &self,
        response: ActionResponse,
    ) -> Result<ValidatedResponse, ActionResponseError> {
        match response {
            ActionResponse::FormInput(r) => self.validate_form(r).map(ValidatedResponse::Form),
            ActionResponse::ToolApproval(r) => {
                self.validate_approval(r).map(ValidatedResponse::Approval)
            }
        }
    }
}
