use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::approval::DecisionKind;
use super::form::FormValues;
use super::ids::ActionType;
use super::ids::Revision;
use super::support::no_fields;
use crate::id::{ActionId, IdempotencyKey, ToolCallId};

// ---------------------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------------------

/// The answer to a form. Wire: `{"type": "submit", "values": {...}}` or `{"type": "dismiss"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "type",
    content = "values",
    rename_all = "snake_case",
    deny_unknown_fields
)]
pub enum FormAnswer {
    /// Submit these values.
    Submit(FormValues),
    /// Decline the whole form.
    Dismiss,
}

/// A caller's answer to a form request.
///
/// ```
/// use harness_core::action::{FormResponse, FormValues, Revision};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let r = FormResponse::submit("act_1".parse()?, Revision::FIRST, FormValues::new().with("x", 1))
///     .with_idempotency_key("answer-1".parse()?);
/// assert_eq!(
///     serde_json::to_string(&r)?,
///     r#"{"actionId":"act_1","revision":1,"idempotencyKey":"answer-1","answer":{"type":"submit","values":{"x":1}}}"#
/// );
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FormResponse {
    /// The action answered.
    pub action_id: ActionId,
    /// The revision answered.
    pub revision: Revision,
    /// Makes a retried answer recognizable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<IdempotencyKey>,
    /// The answer.
    pub answer: FormAnswer,
}

impl FormResponse {
    /// Submits `values`.
    #[must_use]
    pub fn submit(action_id: ActionId, revision: Revision, values: FormValues) -> Self {
        Self {
            action_id,
            revision,
            idempotency_key: None,
            answer: FormAnswer::Submit(values),
        }
    }

    /// Dismisses the form.
    #[must_use]
    pub fn dismiss(action_id: ActionId, revision: Revision) -> Self {
        Self {
            action_id,
            revision,
            idempotency_key: None,
            answer: FormAnswer::Dismiss,
        }
    }

    /// Sets the idempotency key.
    #[must_use]
    pub fn with_idempotency_key(mut self, key: IdempotencyKey) -> Self {
        self.idempotency_key = Some(key);
        self
    }
}

/// A decision on one tool call. Wire: internally tagged, `{"type": "reject", "reason": "..."}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Decision {
    /// Run the call as proposed.
    #[serde(deserialize_with = "no_fields")]
    Approve,
    /// Do not run the call.
    Reject {
        /// Why, for the agent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Run the call with these arguments instead (a full replacement, not a patch); they must
    /// satisfy the tool's input schema.
    Edit {
        /// The replacement arguments.
        arguments: Value,
    },
}

impl Decision {
    /// The kind of decision.
    #[must_use]
    pub fn kind(&self) -> DecisionKind {
        match self {
            Self::Approve => DecisionKind::Approve,
            Self::Reject { .. } => DecisionKind::Reject,
            Self::Edit { .. } => DecisionKind::Edit,
        }
    }
}

/// A decision on the tool call `call_id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolDecision {
    /// The call decided on.
    pub call_id: ToolCallId,
    /// The decision.
    pub decision: Decision,
}

impl ToolDecision {
    /// Approves the call.
    #[must_use]
    pub fn approve(call_id: ToolCallId) -> Self {
        Self {
            call_id,
            decision: Decision::Approve,
        }
    }

    /// Rejects the call without a reason.
    #[must_use]
    pub fn reject(call_id: ToolCallId) -> Self {
        Self {
            call_id,
            decision: Decision::Reject { reason: None },
        }
    }

    /// Rejects the call, telling the agent why.
    #[must_use]
    pub fn reject_because(call_id: ToolCallId, reason: impl Into<String>) -> Self {
        Self {
            call_id,
            decision: Decision::Reject {
                reason: Some(reason.into()),
            },
        }
    }

    /// Runs the call with `arguments` instead.
    #[must_use]
    pub fn edit(call_id: ToolCallId, arguments: Value) -> Self {
        Self {
            call_id,
            decision: Decision::Edit { arguments },
        }
    }
}

/// The answer to a tool approval. Wire: `{"type": "decide", "decisions": [...]}` or
/// `{"type": "dismiss"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "type",
    content = "decisions",
    rename_all = "snake_case",
    deny_unknown_fields
)]
pub enum ApprovalAnswer {
    /// Exactly one decision per call.
    Decide(Vec<ToolDecision>),
    /// Decline the whole action.
    Dismiss,
}

/// A caller's answer to a tool approval request.
///
/// ```
/// use harness_core::action::{ApprovalResponse, Revision, ToolDecision};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let r = ApprovalResponse::decide("act_1".parse()?, Revision::FIRST,
///                                  [ToolDecision::reject_because("c1".parse()?, "too risky")]);
/// assert_eq!(
///     serde_json::to_string(&r)?,
///     r#"{"actionId":"act_1","revision":1,"answer":{"type":"decide","decisions":[{"callId":"c1","decision":{"type":"reject","reason":"too risky"}}]}}"#
/// );
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalResponse {
    /// The action answered.
    pub action_id: ActionId,
    /// The revision answered.
    pub revision: Revision,
    /// Makes a retried answer recognizable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<IdempotencyKey>,
    /// The answer.
    pub answer: ApprovalAnswer,
}

impl ApprovalResponse {
    /// Decides on the calls.
    #[must_use]
    pub fn decide(
        action_id: ActionId,
        revision: Revision,
        decisions: impl IntoIterator<Item = ToolDecision>,
    ) -> Self {
        Self {
            action_id,
            revision,
            idempotency_key: None,
            answer: ApprovalAnswer::Decide(decisions.into_iter().collect()),
        }
    }

    /// Dismisses the whole action.
    #[must_use]
    pub fn dismiss(action_id: ActionId, revision: Revision) -> Self {
        Self {
            action_id,
            revision,
            idempotency_key: None,
            answer: ApprovalAnswer::Dismiss,
        }
    }

    /// Sets the idempotency key.
    #[must_use]
    pub fn with_idempotency_key(mut self, key: IdempotencyKey) -> Self {
        self.idempotency_key = Some(key);
        self
    }
}

/// An answer of either kind, for the wire and the untyped API. Wire: internally tagged,
/// `{"type": "form_input", "actionId": ...}` / `{"type": "tool_approval", ...}`.
///
/// ```
/// use harness_core::action::{ActionResponse, ActionType};
/// let r: ActionResponse = serde_json::from_str(
///     r#"{"type":"tool_approval","actionId":"act_1","revision":2,"answer":{"type":"dismiss"}}"#,
/// ).unwrap();
/// assert_eq!(r.action_type(), ActionType::ToolApproval);
/// assert_eq!(r.revision().get(), 2);
/// assert!(r.into_form().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ActionResponse {
    /// An answer to a form.
    FormInput(FormResponse),
    /// An answer to a tool approval.
    ToolApproval(ApprovalResponse),
}

impl ActionResponse {
    /// The kind answered.
    #[must_use]
    pub fn action_type(&self) -> ActionType {
        match self {
            Self::FormInput(_) => ActionType::FormInput,
            Self::ToolApproval(_) => ActionType::ToolApproval,
        }
    }

    /// The action answered.
    #[must_use]
    pub fn action_id(&self) -> &ActionId {
        match self {
            Self::FormInput(r) => &r.action_id,
            Self::ToolApproval(r) => &r.action_id,
        }
    }

    /// The revision answered.
    #[must_use]
    pub fn revision(&self) -> Revision {
        match self {
            Self::FormInput(r) => r.revision,
            Self::ToolApproval(r) => r.revision,
        }
    }

    /// The idempotency key.
    #[must_use]
    pub fn idempotency_key(&self) -> Option<&IdempotencyKey> {
        match self {
            Self::FormInput(r) => r.idempotency_key.as_ref(),
            Self::ToolApproval(r) => r.idempotency_key.as_ref(),
        }
    }

    /// Whether the answer dismisses the action.
    #[must_use]
    pub fn is_dismiss(&self) -> bool {
        match self {
            Self::FormInput(r) => matches!(r.answer, FormAnswer::Dismiss),
            Self::ToolApproval(r) => matches!(r.answer, ApprovalAnswer::Dismiss),
        }
    }

    /// The form answer, if it is one.
    #[must_use]
    pub fn as_form(&self) -> Option<&FormResponse> {
        match self {
            Self::FormInput(r) => Some(r),
            Self::ToolApproval(_) => None,
        }
    }

    /// The approval answer, if it is one.
    #[must_use]
    pub fn as_approval(&self) -> Option<&ApprovalResponse> {
        match self {
            Self::ToolApproval(r) => Some(r),
            Self::FormInput(_) => None,
        }
    }

    /// The form answer, or `self` back when it is an approval answer.
    ///
    /// # Errors
    ///
    /// `self`, unchanged, when it is not a form answer.
    pub fn into_form(self) -> Result<FormResponse, Self> {
        match self {
            Self::FormInput(r) => Ok(r),
            other @ Self::ToolApproval(_) => Err(other),
        }
    }

    /// The approval answer, or `self` back when it is a form answer.
    ///
    /// # Errors
    ///
    /// `self`, unchanged, when it is not an approval answer.
    pub fn into_approval(self) -> Result<ApprovalResponse, Self> {
        match self {
            Self::ToolApproval(r) => Ok(r),
            other @ Self::FormInput(_) => Err(other),
        }
    }
}

impl From<FormResponse> for ActionResponse {
    fn from(r: FormResponse) -> Self {
        Self::FormInput(r)
    }
}

impl From<ApprovalResponse> for ActionResponse {
    fn from(r: ApprovalResponse) -> Self {
        Self::ToolApproval(r)
    }
}
