use std::sync::Arc;

use serde_json::Value;

use super::approval::{DecisionKind, ToolCallApproval};
use super::form::{FieldViolation, FormValues};
use super::ids::ActionType;
use super::ids::{FieldName, Revision};
use super::resolution::{ActionResolution, CallResolution, ResolutionOutcome};
use super::response::{ApprovalAnswer, Decision, FormAnswer, ToolDecision};
use super::support::{listed, ticked};
use super::violation::SchemaViolation;
use crate::error::{ErrorCategory, ErrorCode, HarnessError};
use crate::id::{ActionId, IdempotencyKey, ToolCallId};

// ---------------------------------------------------------------------------------------------
// Validation results and errors
// ---------------------------------------------------------------------------------------------

/// An answer was refused: it does not fit the pending request.
///
/// [`code`](Self::code) gives the stable error code; converting into a [`HarnessError`] gives
/// category `configuration`, because the caller's answer was invalid and sending the same
/// answer again cannot succeed: the caller must fix it (the category is therefore not
/// retryable). It is not `protocol`, which blames the adapter's events, nor `internal`.
/// Messages name ids, revisions, field names, options and schema locations, never the values
/// the caller submitted, so they are safe to return to the caller.
///
/// ```
/// use harness_core::action::{ActionResponseError, Revision};
/// use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let err = ActionResponseError::StaleRevision {
///     action: "act_1".parse()?,
///     pending: Revision::FIRST.next(),
///     answered: Revision::FIRST,
/// };
/// assert_eq!(err.code(), ErrorCode::ACTION_REVISION_STALE);
/// let harness = HarnessError::from(err);
/// assert_eq!(harness.category(), ErrorCategory::Configuration);
/// assert!(!harness.retryable());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ActionResponseError {
    /// The answer names another action than the pending one.
    #[error("the answer targets action `{answered}` but the pending action is `{pending}`")]
    ActionMismatch {
        /// The pending action.
        pending: ActionId,
        /// The action the answer names.
        answered: ActionId,
    },
    /// The answer names another revision than the pending one.
    #[error(
        "the answer to action `{action}` names revision {answered} but the pending revision is \
         {pending}; answer revision {pending}"
    )]
    StaleRevision {
        /// The action.
        action: ActionId,
        /// The pending revision.
        pending: Revision,
        /// The revision the answer names.
        answered: Revision,
    },
    /// A form answered with an approval, or the reverse.
    #[error("action `{action}` is a {expected} request but was answered with a {found} response")]
    KindMismatch {
        /// The action.
        action: ActionId,
        /// The kind of the pending request.
        expected: ActionType,
        /// The kind of the answer.
        found: ActionType,
    },
    /// Submitted form values do not fit the form.
    #[error("invalid form values for action `{action}`: {}", listed(.violations))]
    InvalidFormValues {
        /// The action.
        action: ActionId,
        /// Every violation.
        violations: Vec<FieldViolation>,
    },
    /// Some calls have no decision.
    #[error(
        "action `{action}`: no decision for tool call(s) {}; every call needs exactly one decision",
        ticked(.calls)
    )]
    MissingDecision {
        /// The action.
        action: ActionId,
        /// The calls without a decision, in request order.
        calls: Vec<ToolCallId>,
    },
    /// A decision names a call the request does not contain.
    #[error(
        "action `{action}`: decision for unknown tool call `{call_id}`; the calls are {}",
        ticked(.known)
    )]
    UnknownCall {
        /// The action.
        action: ActionId,
        /// The unknown call.
        call_id: ToolCallId,
        /// The calls of the request.
        known: Vec<ToolCallId>,
    },
    /// Two decisions name the same call.
    #[error(
        "action `{action}`: tool call `{call_id}` has more than one decision; give exactly one"
    )]
    DuplicateDecision {
        /// The action.
        action: ActionId,
        /// The call decided twice.
        call_id: ToolCallId,
    },
    /// The decision is not among those the call allows.
    #[error(
        "action `{action}`: `{decision}` is not allowed for tool call `{call_id}`; allowed: {}",
        ticked(.allowed)
    )]
    DecisionNotAllowed {
        /// The action.
        action: ActionId,
        /// The call.
        call_id: ToolCallId,
        /// The refused decision.
        decision: DecisionKind,
        /// The decisions the call allows.
        allowed: Vec<DecisionKind>,
    },
    /// The request may not be dismissed.
    #[error("action `{action}` may not be dismissed; answer it instead")]
    DismissNotAllowed {
        /// The action.
        action: ActionId,
    },
    /// Edited arguments do not satisfy the tool's input schema.
    #[error(
        "action `{action}`: edited arguments for tool call `{call_id}` (`{tool}`) do not match \
         the tool's input schema: {}",
        listed(.violations)
    )]
    InvalidEditedArguments {
        /// The action.
        action: ActionId,
        /// The call.
        call_id: ToolCallId,
        /// The tool.
        tool: String,
        /// Every violation, with its JSON pointer.
        violations: Vec<SchemaViolation>,
    },
}

impl ActionResponseError {
    /// The stable code: [`ErrorCode::ACTION_NOT_FOUND`] when the answer names another action,
    /// [`ErrorCode::ACTION_REVISION_STALE`] for another revision, and
    /// [`ErrorCode::ACTION_RESPONSE_INVALID`] when the answer does not fit the request.
    #[must_use]
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::ActionMismatch { .. } => ErrorCode::ACTION_NOT_FOUND,
            Self::StaleRevision { .. } => ErrorCode::ACTION_REVISION_STALE,
            Self::KindMismatch { .. }
            | Self::InvalidFormValues { .. }
            | Self::MissingDecision { .. }
            | Self::UnknownCall { .. }
            | Self::DuplicateDecision { .. }
            | Self::DecisionNotAllowed { .. }
            | Self::DismissNotAllowed { .. }
            | Self::InvalidEditedArguments { .. } => ErrorCode::ACTION_RESPONSE_INVALID,
        }
    }
}

impl From<ActionResponseError> for HarnessError {
    fn from(err: ActionResponseError) -> Self {
        Self::new(ErrorCategory::Configuration, err.to_string()).with_code(err.code())
    }
}

/// A form answer that fits its request. Only [`ActionRequest::validate_form`](super::ActionRequest::validate_form) builds one.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedForm {
    pub(super) action_id: ActionId,
    pub(super) revision: Revision,
    pub(super) idempotency_key: Option<IdempotencyKey>,
    pub(super) answer: FormAnswer,
    pub(super) answered: Vec<FieldName>,
}

impl ValidatedForm {
    /// The action answered.
    #[must_use]
    pub fn action_id(&self) -> &ActionId {
        &self.action_id
    }

    /// The revision answered.
    #[must_use]
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// The answer's idempotency key.
    #[must_use]
    pub fn idempotency_key(&self) -> Option<&IdempotencyKey> {
        self.idempotency_key.as_ref()
    }

    /// The answer.
    #[must_use]
    pub fn answer(&self) -> &FormAnswer {
        &self.answer
    }

    /// The submitted values; `None` when the form was dismissed.
    #[must_use]
    pub fn values(&self) -> Option<&FormValues> {
        match &self.answer {
            FormAnswer::Submit(values) => Some(values),
            FormAnswer::Dismiss => None,
        }
    }

    /// Whether the form was dismissed.
    #[must_use]
    pub fn is_dismissed(&self) -> bool {
        matches!(self.answer, FormAnswer::Dismiss)
    }

    /// The answer, for the adapter.
    #[must_use]
    pub fn into_answer(self) -> FormAnswer {
        self.answer
    }

    /// The record of this answer for the `action.resolved` event: the names of the fields
    /// answered, not their values (see [`ActionResolution`]).
    #[must_use]
    pub fn resolution(&self) -> ActionResolution {
        ActionResolution {
            action_id: self.action_id.clone(),
            revision: self.revision,
            action_type: ActionType::FormInput,
            idempotency_key: self.idempotency_key.clone(),
            outcome: match self.answer {
                FormAnswer::Submit(_) => ResolutionOutcome::Submitted {
                    fields: self.answered.clone(),
                },
                FormAnswer::Dismiss => ResolutionOutcome::Dismissed,
            },
        }
    }
}

/// An approval answer that fits its request, with decisions in the request's call order. Only
/// [`ActionRequest::validate_approval`](super::ActionRequest::validate_approval) builds one.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedApproval {
    pub(super) action_id: ActionId,
    pub(super) revision: Revision,
    pub(super) idempotency_key: Option<IdempotencyKey>,
    pub(super) answer: ApprovalAnswer,
    /// The request's calls (shared with it), for [`approved`](Self::approved).
    pub(super) calls: Arc<[ToolCallApproval]>,
}

/// A call the caller let run, from [`ValidatedApproval::approved`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ApprovedCall<'a> {
    /// The tool's stable name, as the request named it.
    pub tool: &'a str,
    /// The arguments to run it with: the proposed ones when approved, the caller's (checked
    /// against the tool's input schema) when edited.
    pub arguments: &'a Value,
    /// Whether the caller edited the arguments.
    pub edited: bool,
}

impl ValidatedApproval {
    /// The call `call_id` as the caller let it run; `None` when the caller rejected it, the
    /// action was dismissed, or the request has no such call.
    ///
    /// ```
    /// use harness_core::action::{ActionRequest, ApprovalRequest, ValidatedResponse};
    /// use serde_json::json;
    /// let request = ActionRequest::approval(
    ///     ApprovalRequest::single("call_1".parse().unwrap(), "files.write", json!({"path": "a"}),
    ///         json!({"type": "object"})).unwrap().allow_edit());
    /// let edited = request.edit(&"call_1".parse().unwrap(), json!({"path": "b"}));
    /// let ValidatedResponse::Approval(v) = request.validate(edited).unwrap() else { unreachable!() };
    /// let call = v.approved(&"call_1".parse().unwrap()).unwrap();
    /// assert_eq!((call.tool, call.arguments, call.edited), ("files.write", &json!({"path": "b"}), true));
    /// ```
    #[must_use]
    pub fn approved(&self, call_id: &ToolCallId) -> Option<ApprovedCall<'_>> {
        let call = self.calls.iter().find(|c| &c.call_id == call_id)?;
        let (arguments, edited) = match self.decision_for(call_id)? {
            Decision::Approve => (call.arguments(), false),
            Decision::Edit { arguments } => (arguments, true),
            Decision::Reject { .. } => return None,
        };
        Some(ApprovedCall {
            tool: &call.tool,
            arguments,
            edited,
        })
    }

    /// The action answered.
    #[must_use]
    pub fn action_id(&self) -> &ActionId {
        &self.action_id
    }

    /// The revision answered.
    #[must_use]
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// The answer's idempotency key.
    #[must_use]
    pub fn idempotency_key(&self) -> Option<&IdempotencyKey> {
        self.idempotency_key.as_ref()
    }

    /// The answer; decisions are in the request's call order, one per call.
    #[must_use]
    pub fn answer(&self) -> &ApprovalAnswer {
        &self.answer
    }

    /// The decisions, one per call in request order; `None` when the action was dismissed.
    #[must_use]
    pub fn decisions(&self) -> Option<&[ToolDecision]> {
        match &self.answer {
            ApprovalAnswer::Decide(decisions) => Some(decisions),
            ApprovalAnswer::Dismiss => None,
        }
    }

    /// The decision on `call_id`.
    #[must_use]
    pub fn decision_for(&self, call_id: &ToolCallId) -> Option<&Decision> {
        self.decisions()?
            .iter()
            .find(|d| &d.call_id == call_id)
            .map(|d| &d.decision)
    }

    /// Whether the action was dismissed.
    #[must_use]
    pub fn is_dismissed(&self) -> bool {
        matches!(self.answer, ApprovalAnswer::Dismiss)
    }

    /// The answer, for the adapter.
    #[must_use]
    pub fn into_answer(self) -> ApprovalAnswer {
        self.answer
    }

    /// The record of this answer for the `action.resolved` event: per call, the decision and
    /// any reject reason, not edited arguments (see [`ActionResolution`]).
    #[must_use]
    pub fn resolution(&self) -> ActionResolution {
        ActionResolution {
            action_id: self.action_id.clone(),
            revision: self.revision,
            action_type: ActionType::ToolApproval,
            idempotency_key: self.idempotency_key.clone(),
            outcome: match &self.answer {
                ApprovalAnswer::Decide(decisions) => ResolutionOutcome::Decided {
                    calls: decisions
                        .iter()
                        .map(|d| CallResolution {
                            call_id: d.call_id.clone(),
                            decision: d.decision.kind(),
                            reason: match &d.decision {
                                Decision::Reject { reason } => reason.clone(),
                                Decision::Approve | Decision::Edit { .. } => None,
                            },
                        })
                        .collect(),
                },
                ApprovalAnswer::Dismiss => ResolutionOutcome::Dismissed,
            },
        }
    }
}

/// A validated answer of either kind.
#[derive(Debug, Clone, PartialEq)]
pub enum ValidatedResponse {
    /// A form answer.
    Form(ValidatedForm),
    /// An approval answer.
    Approval(ValidatedApproval),
}

impl ValidatedResponse {
    /// The action answered.
    #[must_use]
    pub fn action_id(&self) -> &ActionId {
        match self {
            Self::Form(v) => v.action_id(),
            Self::Approval(v) => v.action_id(),
        }
    }

    /// The record for the `action.resolved` event.
    #[must_use]
    pub fn resolution(&self) -> ActionResolution {
        match self {
            Self::Form(v) => v.resolution(),
            Self::Approval(v) => v.resolution(),
        }
    }
}
