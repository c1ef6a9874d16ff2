//! The service hands each execution of a conversation the thread state of that conversation's
//! binding, at its current epoch: later turns see what earlier ones kept (on this service or
//! on another over the same store), another conversation does not, `clear_session` forgets,
//! and an execution without a conversation gets none.

use std::sync::Arc;

use futures_util::{StreamExt, stream};
use harness_core::adapter::{
    AdapterEvent, BoxStream, EventResult, RunContext, Simple, SimpleAdapter,
};
use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::event::{Content, EventPayload, RunSucceeded, TextDelta};
use harness_core::id::{ConversationId, Cursor};
use harness_core::manifest::{ContractVersion, Describe, ExecutionMode, HarnessDescriptor};
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
use harness_core::session::{BindingId, StateKey};
use harness_core::store::{MemoryStore, ReplicaId};

/// Counts its turns per conversation in thread state and streams the count.
struct Counter(HarnessDescriptor);

impl Describe for Counter {
    fn descriptor(&self) -> &HarnessDescriptor {
        &self.0
    }
}

fn counter() -> Simple<Counter> {
    Simple::new(Counter(
        HarnessDescriptor::builder("counter".parse().unwrap(), "0.1.0")
            .contract_version(ContractVersion::V1)
            .execution_mode(ExecutionMode::in_process())
            .build()
            .unwrap(),
    ))
}

impl SimpleAdapter for Counter {
    fn stream(&self, run: RunContext) -> BoxStream<'static, EventResult> {
        let counted = stream::once(async move {
            let Some(state) = run.context.thread_state.clone() else {
                return Err(HarnessError::new(
                    ErrorCategory::Configuration,
                    "no thread state without a conversation",
                ));
            };
            assert_eq!(run.context.binding.as_ref(), Some(state.binding()));
            let key: StateKey = "turns".parse().unwrap();
            let (turns, version) = match state.get_json::<u64>(&key).await? {
                Some((turns, version)) => (turns, Some(version)),
                None => (0, None),
            };
            state.put_json(&key, &(turns + 1), version).await?;
            Ok(AdapterEvent::Content(Content::MessageDelta(TextDelta {
                text: format!("turn {}", turns + 1),
            })))
        });
        let done = stream::once(async { Ok(AdapterEvent::Completed(RunSucceeded::default())) });
        Box::pin(counted.chain(done))
    }
}

async fn turn(
    service: &AdapterService<Simple<Counter>>,
    conversation: Option<&ConversationId>,
) -> Result<String, HarnessError> {
    let mut request = ExecutionRequest::new("count");
    if let Some(c) = conversation {
        request = request.with_conversation(c.clone());
    }
    let handle = service.start(request).await?;
    match handle.outcome().await {
        Outcome::Succeeded(_) => {}
        Outcome::Failed(e) => return Err(e),
        other => panic!("unexpected outcome {other:?}"),
    }
    let events = handle.log().snapshot(Cursor::START);
    Ok(events
        .iter()
        .filter_map(|e| match e.payload() {
            EventPayload::MessageDelta(d) => Some(d.text.clone()),
            _ => None,
        })
        .collect())
}

#[tokio::test]
async fn a_conversation_keeps_its_state_between_turns_and_another_does_not_see_it() {
    let service = AdapterService::new(counter());
    let (a, b) = (ConversationId::generate(), ConversationId::generate());
    assert_eq!(turn(&service, Some(&a)).await.unwrap(), "turn 1");
    assert_eq!(turn(&service, Some(&a)).await.unwrap(), "turn 2");
    assert_eq!(turn(&service, Some(&b)).await.unwrap(), "turn 1");
    let none = turn(&service, None).await.unwrap_err();
    assert_eq!(none.category(), ErrorCategory::Configuration);
}

/// Two services over one store, as two replicas.
fn two_replicas() -> (
    AdapterService<Simple<Counter>>,
    AdapterService<Simple<Counter>>,
) {
    let store = Arc::new(MemoryStore::new());
    let replica = |name: &str| {
        AdapterService::builder(counter())
            .durable(Arc::clone(&store), ReplicaId::new(name))
            .build()
    };
    (replica("one"), replica("two"))
}

#[tokio::test]
async fn replicas_over_one_store_continue_each_others_conversations() {
    let (one, two) = two_replicas();
    let a = ConversationId::generate();
    assert_eq!(turn(&one, Some(&a)).await.unwrap(), "turn 1");
    assert_eq!(turn(&two, Some(&a)).await.unwrap(), "turn 2");
    assert_eq!(turn(&one, Some(&a)).await.unwrap(), "turn 3");
    // A service with its own (default, in-memory) thread state knows nothing of it.
    assert_eq!(
        turn(&AdapterService::new(counter()), Some(&a))
            .await
            .unwrap(),
        "turn 1"
    );
}

#[tokio::test]
async fn clearing_a_session_forgets_it_on_every_replica_and_moves_its_epoch() {
    let (one, two) = two_replicas();
    let a = ConversationId::generate();
    turn(&one, Some(&a)).await.unwrap();
    turn(&one, Some(&a)).await.unwrap();
    let cleared = two.clear_session(&a).await.unwrap();
    assert_eq!(cleared.epoch(), 1);
    assert_eq!(
        cleared.binding_id(),
        &BindingId::for_conversation(&"counter".parse().unwrap(), &a)
    );
    assert_eq!(turn(&one, Some(&a)).await.unwrap(), "turn 1");
    assert_eq!(turn(&two, Some(&a)).await.unwrap(), "turn 2");
    assert_eq!(one.clear_session(&a).await.unwrap().epoch(), 2);
}

#[test]
fn long_conversation_ids_get_distinct_valid_bindings() {
    let adapter = "counter".parse().unwrap();
    let mut seen = std::collections::HashSet::new();
    for i in 0..1000 {
        let c: ConversationId = format!("{}{i}", "c".repeat(120)).parse().unwrap();
        let b = BindingId::for_conversation(&adapter, &c);
        assert!(b.as_str().len() <= 128, "{b}");
        assert_eq!(b.as_str().parse::<BindingId>().unwrap(), b);
        assert!(seen.insert(b));
    }
}
