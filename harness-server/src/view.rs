//! What the API returns for an execution.

use std::collections::BTreeMap;

use harness_core::action::ActionRequest;
use harness_core::artifact::ArtifactDescriptor;
use harness_core::error::PublicError;
use harness_core::event::{Event, EventPayload};
use harness_core::id::{ActionId, ConversationId, Cursor, ExecutionId};
use harness_core::lifecycle::ExecutionState;
use harness_core::service::ExecutionHandle;
use harness_core::store::ExecutionRecord;
use harness_core::time::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::events::PAGE;
use crate::instance::Control;

/// One execution as `GET /v1/executions/{id}` returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ExecutionView {
    /// The execution.
    pub id: ExecutionId,
    /// The adapter instance that runs it.
    pub adapter: String,
    /// Its state.
    pub state: ExecutionState,
    /// When it was created.
    pub created_at: Timestamp,
    /// Whether a cancel was requested.
    pub cancel_requested: bool,
    /// The conversation it continues, when it was started with one: what a follow-up turn
    /// names to continue it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<ConversationId>,
    /// The actions awaiting an answer.
    pub pending_actions: Vec<ActionRequest>,
    /// Its artifacts, in creation order.
    pub artifacts: Vec<ArtifactDescriptor>,
    /// Its terminal event, once it has ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Event>,
    /// The sequence number of its last event (0 before any).
    pub last_seq: u64,
}

/// One execution of a `GET /v1/executions` page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ExecutionSummary {
    /// The execution.
    pub id: ExecutionId,
    /// The adapter instance that runs it.
    pub adapter: String,
    /// Its state, as last stored.
    pub state: ExecutionState,
    /// When it was created.
    pub created_at: Timestamp,
    /// Whether a cancel was requested.
    pub cancel_requested: bool,
    /// The conversation it continues, when it was started with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<ConversationId>,
    /// The first words of its message (at most 80 characters, cut between words and
    /// ended by `…` when cut): what a list shows to tell executions apart.
    #[serde(default)]
    pub message: String,
}

/// How many characters of an execution's message [`ExecutionSummary::message`] keeps.
pub(crate) const PREVIEW: usize = 80;

/// The first words of `text`, at most [`PREVIEW`] characters (`…` included when cut).
fn preview(text: &str) -> String {
    let text = text.trim();
    if text.chars().count() <= PREVIEW {
        return text.to_owned();
    }
    let cut: String = text.chars().take(PREVIEW - 1).collect();
    // Between words when there is a space to cut at, else mid-word.
    let kept = match cut.rfind(char::is_whitespace) {
        Some(at) if at > 0 => cut[..at].trim_end(),
        _ => cut.as_str(),
    };
    format!("{kept}…")
}

/// A page of `GET /v1/executions`: the caller's executions, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct ExecutionPage {
    /// The executions of this page.
    pub executions: Vec<ExecutionSummary>,
    /// The `before` of the next page; absent (`null`) on the last one.
    pub next: Option<String>,
}

/// A JSON page of `GET /v1/executions/{id}/events`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct EventPage {
    /// The stored events after the cursor, in order.
    pub events: Vec<Event>,
    /// The `after` of the next page: the last event's sequence number (the cursor itself when
    /// the page is empty).
    pub next: u64,
    /// Whether the terminal event has been read: no page after this one holds anything.
    pub ended: bool,
}

/// What `POST /v1/executions/{id}/actions/{actionId}` answers once the answer is applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Answered {
    /// The execution.
    pub execution_id: ExecutionId,
    /// The action answered.
    pub action_id: ActionId,
    /// Always `true`: a refused answer is an error instead.
    pub accepted: bool,
}

/// What `POST /v1/executions/{id}/cancel` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CancelOutcome {
    /// This request asked for cancellation: `run.cancelled` on the stream confirms it, unless
    /// the execution was already ending on its own.
    Requested,
    /// An earlier request had asked already.
    AlreadyRequested,
    /// The execution had ended.
    AlreadyEnded,
}

/// The `202` of `POST /v1/executions/{id}/cancel`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct CancelAnswer {
    /// The execution.
    pub execution_id: ExecutionId,
    /// What the request did.
    pub status: CancelOutcome,
}

/// An adapter instance's health, as `GET /v1/adapters` shows it (see [`crate::health`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct InstanceHealth {
    /// Whether the instance can take executions.
    pub ready: bool,
    /// Why not: a short category, naming no path or address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When it was checked (results are kept a few seconds).
    pub checked_at: harness_core::time::Timestamp,
}

impl From<harness_core::adapter::HarnessHealth> for InstanceHealth {
    fn from(health: harness_core::adapter::HarnessHealth) -> Self {
        Self {
            ready: health.ready,
            reason: health.reason,
            checked_at: health.checked_at,
        }
    }
}

/// What `GET /readyz` answers (`200` when ready, else `503`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct Readiness {
    /// Whether every required check passes.
    pub ready: bool,
    /// Why not, sanitized.
    pub reasons: Vec<String>,
}

/// Every error the API answers: `{"error": <public error>}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct ErrorBody {
    /// The error's public projection.
    pub error: PublicError,
}

/// The conversation of `record`'s request, as accepted (a request's `conversationId` was
/// validated when it was started, so a stored one that no longer parses is left out).
fn conversation_of(record: &ExecutionRecord) -> Option<ConversationId> {
    record
        .request
        .get("conversationId")
        .and_then(serde_json::Value::as_str)
        .and_then(|c| c.parse().ok())
}

impl From<&ExecutionRecord> for ExecutionSummary {
    fn from(record: &ExecutionRecord) -> Self {
        Self {
            id: record.id.clone(),
            adapter: record.adapter.clone(),
            state: record.state,
            created_at: record.created_at,
            cancel_requested: record.cancel_requested.is_some(),
            conversation_id: conversation_of(record),
            message: record
                .request
                .get("message")
                .and_then(serde_json::Value::as_str)
                .map(preview)
                .unwrap_or_default(),
        }
    }
}

impl ExecutionView {
    /// From this process's handle on it.
    pub(crate) fn of_handle(record: &ExecutionRecord, handle: &ExecutionHandle) -> Self {
        let last = handle.log().last();
        Self {
            id: record.id.clone(),
            adapter: record.adapter.clone(),
            state: handle.state(),
            created_at: record.created_at,
            cancel_requested: record.cancel_requested.is_some(),
            conversation_id: conversation_of(record),
            pending_actions: handle.pending_actions(),
            artifacts: handle.artifacts(),
            last_seq: last.as_ref().map_or(0, |e| e.seq().get()),
            outcome: last
                .filter(|e| e.payload().is_terminal())
                .map(|e| Event::clone(&e)),
        }
    }

    /// From the stored log, read page by page (memory: the pending actions and artifacts).
    pub(crate) async fn of_store(
        record: &ExecutionRecord,
        control: &dyn Control,
    ) -> Result<Self, ApiError> {
        let mut pending: BTreeMap<ActionId, ActionRequest> = BTreeMap::new();
        let mut artifacts = Vec::new();
        let mut outcome = None;
        let mut state = record.state;
        let mut after = 0;
        loop {
            let page = control
                .read_events(&record.id, Cursor::after_seq(after), PAGE)
                .await?;
            let Some(last) = page.last() else { break };
            after = last.seq().get();
            for event in page {
                if let Some(implied) = event.payload().implied_state() {
                    state = implied;
                }
                match event.payload() {
                    EventPayload::ActionRequested(request) => {
                        pending.insert(request.id.clone(), (**request).clone());
                    }
                    EventPayload::ActionResolved(resolution) => {
                        pending.remove(&resolution.action_id);
                    }
                    EventPayload::ArtifactCreated(artifact) => artifacts.push((**artifact).clone()),
                    payload if payload.is_terminal() => {
                        pending.clear();
                        outcome = Some(event.clone());
                    }
                    _ => {}
                }
            }
        }
        Ok(Self {
            id: record.id.clone(),
            adapter: record.adapter.clone(),
            state,
            created_at: record.created_at,
            cancel_requested: record.cancel_requested.is_some(),
            conversation_id: conversation_of(record),
            pending_actions: pending.into_values().collect(),
            artifacts,
            outcome,
            last_seq: after,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{PREVIEW, preview};

    #[test]
    fn a_preview_keeps_the_first_words() {
        assert_eq!(preview("  Summarize my notes \n"), "Summarize my notes");
        let long = "word ".repeat(40);
        let short = preview(&long);
        assert!(short.chars().count() <= PREVIEW, "{short}");
        assert!(short.ends_with("word…"), "{short}");
        let unbroken = "x".repeat(200);
        assert_eq!(preview(&unbroken).chars().count(), PREVIEW);
        // Multi-byte text is cut on a character boundary.
        assert!(preview(&"é".repeat(200)).ends_with("é…"));
    }
}
