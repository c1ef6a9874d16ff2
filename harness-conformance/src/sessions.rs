//! Group 5 fixtures over several executions of one adapter: conversation memory.

use harness_core::event::EventPayload;
use harness_core::id::{CallerId, ConversationId};
use harness_core::service::{ExecutionRequest, Outcome};

use crate::probe::{self, Observed};
use crate::{Behaviour, Knobs};

type Verdict = Result<String, String>;

/// The rule of `session.multi_turn`, named in each of its failures.
pub(crate) const MULTI_TURN_RULE: &str = "a later turn of a conversation sees what an earlier \
     turn kept; another conversation does not, nor does the same conversation id under another \
     caller";

/// The two callers of `session.multi_turn`: the first conversation is the first's.
const CALLERS: [&str; 2] = ["conformance-alice", "conformance-bob"];

/// A marker no adapter can know in advance: unique per fixture run.
pub(crate) fn marker() -> String {
    format!("conformance-marker-{}", ConversationId::generate())
}

/// The three turns of `session.multi_turn`, as the knobs make them (no conversation yet).
pub(crate) struct Turns {
    /// [`Behaviour::Remember`] with the marker.
    pub(crate) remember: ExecutionRequest,
    /// [`Behaviour::Recall`], for the same conversation.
    pub(crate) recall: ExecutionRequest,
    /// [`Behaviour::Recall`] again, for another conversation.
    pub(crate) recall_other: ExecutionRequest,
}

/// The text an execution streamed as `message.delta`.
pub(crate) fn message_text(obs: &Observed) -> String {
    obs.events
        .iter()
        .filter_map(|e| match e.payload() {
            EventPayload::MessageDelta(d) => Some(d.text.as_str()),
            _ => None,
        })
        .collect()
}

/// What the knobs' request would send, without the conversation the suite sets.
fn wire(request: &ExecutionRequest) -> String {
    serde_json::to_string(request).unwrap_or_default()
}

/// Runs one turn of `conversation` to its end, for `caller`; it must keep the log rules and
/// succeed.
async fn turn<A: harness_core::adapter::HarnessAdapter>(
    service: &harness_core::service::AdapterService<A>,
    request: ExecutionRequest,
    (caller, conversation): (&str, &ConversationId),
    which: &str,
    bounds: crate::Bounds,
) -> Result<Observed, String> {
    let mut request = request.with_conversation(conversation.clone());
    let caller: CallerId = caller.parse().map_err(|e| format!("{which}: {e}"))?;
    request.extensions.insert(caller);
    let obs = probe::run_to_end(service, request, bounds)
        .await
        .map_err(|e| format!("{which}: {e}"))?;
    obs.check_log().map_err(|e| format!("{which}: {e}"))?;
    if !matches!(obs.outcome, Outcome::Succeeded(_)) {
        return Err(format!(
            "{which} ended {}, not succeeded ({MULTI_TURN_RULE})",
            obs.ended()
        ));
    }
    Ok(obs)
}

/// `session.multi_turn`: through one adapter (one service), [`Behaviour::Remember`] then
/// [`Behaviour::Recall`] on a fresh conversation of one caller, then [`Behaviour::Recall`]
/// on a second conversation of that caller, and on the first conversation's id under
/// another caller. Both turns of the first succeed and its recall streams the marker; the
/// other recalls succeed without it anywhere in their logs.
///
/// The knobs make both recalls alike and without the marker (they cannot know the
/// conversation, which the suite sets afterwards): only the adapter's memory can tell them
/// apart.
pub(crate) async fn multi_turn<Kn: Knobs>(knobs: &Kn, marker: &str, turns: Turns) -> Verdict {
    let b = knobs.bounds();
    let (recall, other) = (wire(&turns.recall), wire(&turns.recall_other));
    if recall.contains(marker) {
        return Err(format!(
            "the knobs' {} request carries the marker itself: only the adapter's memory may \
             produce it",
            Behaviour::Recall
        ));
    }
    if recall != other {
        return Err(format!(
            "the knobs made two different {} requests: a recall may depend only on the \
             conversation the suite sets",
            Behaviour::Recall
        ));
    }
    let first = ConversationId::generate();
    let second = ConversationId::generate();
    let [alice, bob] = CALLERS;
    let recall_foreign = turns.recall_other.clone();
    // One adapter serves all three turns: its memory is what is certified.
    let service = probe::service(knobs.adapter(), b);
    turn(
        &service,
        turns.remember,
        (alice, &first),
        "the remembering turn of the first conversation",
        b,
    )
    .await?;
    let recalled = turn(
        &service,
        turns.recall,
        (alice, &first),
        "the recalling turn of the first conversation",
        b,
    )
    .await?;
    if !message_text(&recalled).contains(marker) {
        return Err(format!(
            "conversation forgotten: the later turn of the first conversation did not stream \
             the marker its earlier turn kept ({MULTI_TURN_RULE})"
        ));
    }
    let elsewhere = turn(
        &service,
        turns.recall_other,
        (alice, &second),
        "the recalling turn of the second conversation",
        b,
    )
    .await?;
    if let Some(at) = elsewhere.leaks(marker) {
        return Err(format!(
            "conversation leaked: the second conversation's turn saw the marker the first \
             kept, at {at} ({MULTI_TURN_RULE})"
        ));
    }
    let foreign = turn(
        &service,
        recall_foreign,
        (bob, &first),
        "the recalling turn of another caller naming the first conversation's id",
        b,
    )
    .await?;
    if let Some(at) = foreign.leaks(marker) {
        return Err(format!(
            "conversation leaked across callers: another caller naming the first \
             conversation's id saw the marker its owner kept, at {at} ({MULTI_TURN_RULE})"
        ));
    }
    Ok(
        "one adapter, four turns: the first conversation's later turn recalled the marker its \
         earlier turn kept; neither the caller's second conversation nor another caller \
         naming the first conversation's id saw it"
            .to_owned(),
    )
}
