//! The service hands each execution of a conversation the thread state of that conversation's
//! binding, at its current epoch: later turns see what earlier ones kept (on this service or
//! on another over the same store), another conversation does not, nor does the same
//! conversation id under another caller, `clear_session` forgets, and an execution without a
//! conversation gets none.

use std::sync::Arc;

use futures_util::{StreamExt, stream};
use harness_core::adapter::{
    AdapterEvent, BoxStream, EventResult, RunContext, Simple, SimpleAdapter,
};
use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::event::{Content, EventPayload, RunSucceeded, TextDelta};
use harness_core::id::{CallerId, ConversationId, Cursor};
use harness_core::manifest::{ContractVersion, Describe, ExecutionMode, HarnessDescriptor};
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
use harness_core::session::{BindingId, Conversation, StateKey};
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
    turn_of(service, None, conversation).await
}

/// A turn of `caller` (anonymous when `None`).
async fn turn_of(
    service: &AdapterService<Simple<Counter>>,
    caller: Option<&str>,
    conversation: Option<&ConversationId>,
) -> Result<String, HarnessError> {
    let mut request = ExecutionRequest::new("count");
    if let Some(c) = conversation {
        request = request.with_conversation(c.clone());
    }
    if let Some(caller) = caller {
        request
            .extensions
            .insert(caller.parse::<CallerId>().unwrap());
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

#[tokio::test]
async fn the_same_conversation_id_under_two_callers_is_two_conversations() {
    for service in [AdapterService::new(counter()), two_replicas().0] {
        let a = ConversationId::generate();
        let alice = Some("alice");
        assert_eq!(turn_of(&service, alice, Some(&a)).await.unwrap(), "turn 1");
        assert_eq!(turn_of(&service, alice, Some(&a)).await.unwrap(), "turn 2");
        // Bob names the same id: a conversation of his own, from its first turn.
        assert_eq!(
            turn_of(&service, Some("bob"), Some(&a)).await.unwrap(),
            "turn 1"
        );
        // So does in-process use without a caller.
        assert_eq!(turn(&service, Some(&a)).await.unwrap(), "turn 1");
        // Bob's clear touches only his.
        let bobs = Conversation::new("bob".parse().unwrap(), a.clone());
        assert_eq!(service.clear_session(&bobs).await.unwrap().epoch(), 1);
        assert_eq!(turn_of(&service, alice, Some(&a)).await.unwrap(), "turn 3");
        assert_eq!(
            turn_of(&service, Some("bob"), Some(&a)).await.unwrap(),
            "turn 1"
        );
    }
}

#[test]
fn bindings_of_distinct_callers_adapters_and_ids_never_coincide() {
    // Ids and callers that would run together in a naive `caller:adapter:id` form.
    let callers = [
        "anonymous",
        "a",
        "a:b",
        "a.1",
        "1",
        "b:x",
        "5.alice",
        "alice",
    ];
    let adapters = ["ab", "ab_c", "x1"];
    let ids = ["x", "b:x", "1.a:x", "alice:x", "5.alice:x", "ab:x"];
    let mut seen = std::collections::HashMap::new();
    for caller in callers {
        for adapter in adapters {
            for id in ids {
                let conversation = Conversation::new(caller.parse().unwrap(), id.parse().unwrap());
                let b = BindingId::for_conversation(&adapter.parse().unwrap(), &conversation);
                if let Some(other) = seen.insert(b.clone(), (caller, adapter, id)) {
                    panic!(
                        "{b} is the binding of {other:?} and of {:?}",
                        (caller, adapter, id)
                    );
                }
            }
        }
    }
    // Long forms: the same long id under callers sharing a long prefix stays apart.
    let id: ConversationId = "c".repeat(128).parse().unwrap();
    let callers: Vec<String> = (0..100)
        .map(|i| format!("{}{i}", "p".repeat(100)))
        .collect();
    let long: std::collections::HashSet<BindingId> = callers
        .iter()
        .map(|caller| {
            let conversation = Conversation::new(caller.parse().unwrap(), id.clone());
            BindingId::for_conversation(&"ab".parse().unwrap(), &conversation)
        })
        .collect();
    assert_eq!(long.len(), callers.len());
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
    let anonymous = Conversation::anonymous(a.clone());
    let cleared = two.clear_session(&anonymous).await.unwrap();
    assert_eq!(cleared.epoch(), 1);
    assert_eq!(
        cleared.binding_id(),
        &BindingId::for_conversation(&"counter".parse().unwrap(), &anonymous)
    );
    assert_eq!(turn(&one, Some(&a)).await.unwrap(), "turn 1");
    assert_eq!(turn(&two, Some(&a)).await.unwrap(), "turn 2");
    assert_eq!(one.clear_session(&anonymous).await.unwrap().epoch(), 2);
}

#[test]
fn long_conversation_ids_get_distinct_valid_bindings() {
    let adapter = "counter".parse().unwrap();
    let mut seen = std::collections::HashSet::new();
    for i in 0..1000 {
        let c: ConversationId = format!("{}{i}", "c".repeat(120)).parse().unwrap();
        let b = BindingId::for_conversation(&adapter, &Conversation::anonymous(c));
        assert!(b.as_str().len() <= 128, "{b}");
        assert_eq!(b.as_str().parse::<BindingId>().unwrap(), b);
        assert!(seen.insert(b));
    }
}
