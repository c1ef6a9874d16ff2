use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::approval::DecisionKind;
use super::ids::ActionType;
use super::ids::{FieldName, Revision};
// Named by the docs only (their text is published in the JSON Schemas, links unrewritten).
#[cfg(doc)]
use super::validation::{ValidatedApproval, ValidatedForm};
use crate::id::{ActionId, IdempotencyKey, ToolCallId};

// ---------------------------------------------------------------------------------------------
// Resolution record
// ---------------------------------------------------------------------------------------------

/// The record of an accepted answer, carried by the `action.resolved` event.
///
/// It summarizes the outcome but **does not carry form values or edited arguments**: those are
/// caller data and may hold secrets (a password field, a token in an argument), while events
/// are replayed to every reader of the execution and kept as long as the deployment retains
/// the log. The adapter receives the full answer through [`ValidatedForm::into_answer`] /
/// [`ValidatedApproval::into_answer`]; the resolution records which fields were answered and
/// which decision each call received. A reject reason is kept: it is a short message the
/// caller writes for the agent, not data the agent acts on.
///
/// ```
/// use harness_core::action::ActionResolution;
/// let r: ActionResolution = serde_json::from_str(r#"{
///     "actionId": "act_1", "revision": 1, "actionType": "tool_approval",
///     "outcome": {"type": "decided", "calls": [
///         {"callId": "c1", "decision": "approve"},
///         {"callId": "c2", "decision": "reject", "reason": "not today"}]}
/// }"#).unwrap();
/// assert!(!r.is_dismissed());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActionResolution {
    /// The action resolved.
    pub action_id: ActionId,
    /// The revision answered.
    pub revision: Revision,
    /// The kind of the action.
    pub action_type: ActionType,
    /// The accepted answer's idempotency key, so a retried answer can be recognized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<IdempotencyKey>,
    /// What was decided.
    pub outcome: ResolutionOutcome,
}

impl ActionResolution {
    /// Whether the action was dismissed.
    #[must_use]
    pub fn is_dismissed(&self) -> bool {
        matches!(self.outcome, ResolutionOutcome::Dismissed)
    }
}

/// The outcome of an action. Wire: internally tagged, `{"type": "submitted", "fields": [...]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum ResolutionOutcome {
    /// A form was submitted.
    Submitted {
        /// The fields that received a non-null value, in form order.
        fields: Vec<FieldName>,
    },
    /// The action was dismissed.
    Dismissed,
    /// Every tool call received a decision.
    Decided {
        /// One entry per call, in request order.
        calls: Vec<CallResolution>,
    },
}

/// The decision one tool call received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallResolution {
    /// The call.
    pub call_id: ToolCallId,
    /// The decision.
    pub decision: DecisionKind,
    /// The reject reason, if one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
