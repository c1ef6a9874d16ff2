//! The model loop under the service's pool of paused runtimes, against the mock model
//! server: a turn paused on an approval whose runtime the pool evicts is restored from the
//! conversation's thread state when the answer comes, and the conversation's next turn sees
//! all of it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Mock, payloads, pending, text};
use harness_core::error::ErrorCode;
use harness_core::id::ConversationId;
use harness_core::service::{
    AdapterService, ExecutionRequest, Outcome, RuntimePoolConfig, ServiceConfig,
};
use harness_core::session::{
    BindingId, Conversation, InMemoryThreadStateStore, ScopedThreadState, ThreadStateStore,
};
use harness_core::tool::{FnTool, ToolPolicy, ToolSet};
use harness_openai::{Api, Endpoint, OpenAiAdapter, PAUSED_KEY};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

const APIS: [Api; 2] = [Api::ChatCompletions, Api::Responses];

fn name(id: &str) -> String {
    let id: harness_core::tool::ToolId = id.parse().unwrap();
    harness_core::tool::ProviderToolNames::new([&id], harness_core::tool::ProviderNameRule::COMMON)
        .to_provider(&id)
        .unwrap()
        .to_owned()
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct File {
    /// The file.
    path: String,
}

/// `files.delete`, which needs approval.
fn tools() -> ToolSet {
    let delete = FnTool::new(
        "files.delete".parse().unwrap(),
        "Deletes a file.",
        |f: File, _| async move { Ok::<_, String>(json!({"deleted": f.path})) },
    )
    .unwrap();
    ToolSet::new()
        .tool_with_policy(delete, ToolPolicy::new().needs_approval())
        .unwrap()
}

fn service(
    mock: &Mock,
    api: Api,
    max_idle: usize,
    state: &Arc<InMemoryThreadStateStore>,
) -> AdapterService<OpenAiAdapter> {
    let endpoint = Endpoint::new(mock.base(), "gpt-4.1")
        .with_api(api)
        .with_api_key("sk-test-operator-key");
    AdapterService::builder(OpenAiAdapter::new(endpoint).unwrap())
        .tools(tools())
        .config(ServiceConfig {
            runtime_pool: RuntimePoolConfig::new(max_idle, Duration::from_secs(3600)),
            ..ServiceConfig::default()
        })
        .thread_state(Arc::clone(state) as Arc<dyn ThreadStateStore>)
        .build()
}

fn fixtures() -> Value {
    json!([
        {"match": {"userMessage": "tidy", "hasToolResult": true}, "response": {"content": "Done tidying."}},
        {"match": {"userMessage": "tidy"}, "response": {"toolCalls": [
            {"id": "call_b", "name": name("files.delete"), "arguments": {"path": "old.txt"}}
        ]}},
        {"match": {"userMessage": "I am Ada"}, "response": {"content": "Nice to meet you, Ada."}},
        {"match": {"userMessage": "what did you do"}, "response": {"content": "I tidied."}},
    ])
}

/// The conversation's thread state, as the service scopes it for this adapter.
async fn scoped(
    state: &Arc<InMemoryThreadStateStore>,
    conversation: &ConversationId,
) -> ScopedThreadState {
    let conversation = Conversation::anonymous(conversation.clone());
    let id =
        BindingId::for_conversation(&harness_openai::ADAPTER_ID.parse().unwrap(), &conversation);
    let binding = state.current(&id, conversation.id()).await.unwrap();
    ScopedThreadState::new(Arc::clone(state) as Arc<dyn ThreadStateStore>, binding)
}

/// The (role, content) of the messages of a request the mock received, in chat form.
fn messages(request: &Value) -> Vec<(String, String)> {
    request["body"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_paused_turn_is_restored_from_the_thread_state_and_the_next_turn_sees_it() {
    let mock = Mock::start(&fixtures());
    for api in APIS {
        let state = Arc::new(InMemoryThreadStateStore::new());
        let service = service(&mock, api, 1, &state);
        let conversation = ConversationId::generate();
        let first = service
            .start(ExecutionRequest::new("I am Ada").with_conversation(conversation.clone()))
            .await
            .unwrap();
        assert_eq!(text(&payloads(&first).await), "Nice to meet you, Ada.");

        let paused = service
            .start(ExecutionRequest::new("tidy up").with_conversation(conversation.clone()))
            .await
            .unwrap();
        let asked = pending(&paused).await;
        // The pause is kept in the conversation's thread state.
        let kept = scoped(&state, &conversation).await;
        let key = PAUSED_KEY.parse().unwrap();
        assert!(kept.get(&key).await.unwrap().is_some(), "{api:?}");

        // Another conversation pauses: the pool of 1 evicts the first pause's runtime.
        let other = service
            .start(ExecutionRequest::new("tidy too").with_conversation(ConversationId::generate()))
            .await
            .unwrap();
        let other_asked = pending(&other).await;
        let pool = service.runtime_pool().unwrap();
        assert_eq!((pool.idle, pool.evictions), (1, 1), "{api:?}");

        // The answer restores the pause on a fresh runtime: the call runs once, the model
        // gets the whole transcript back, in its own call id.
        paused.respond(asked.approve_all()).await.unwrap();
        let log = payloads(&paused).await;
        assert!(
            matches!(paused.outcome().await, Outcome::Succeeded(_)),
            "{api:?}: {log:?}"
        );
        assert_eq!(text(&log), "Done tidying.");
        let completed: Vec<_> = log
            .iter()
            .filter_map(|p| match p {
                harness_core::event::EventPayload::ToolCallCompleted(c) => Some(c.outcome.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            completed,
            [harness_core::event::ToolCallOutcome::Success {
                output: json!({"deleted": "old.txt"})
            }]
        );
        let again = paused.respond(asked.approve_all()).await.unwrap_err();
        assert_eq!(*again.code(), ErrorCode::ACTION_ALREADY_RESOLVED);
        // Answered: the kept pause is forgotten.
        assert!(kept.get(&key).await.unwrap().is_none(), "{api:?}");

        // The next turn sends the history of both earlier turns, the restored one included.
        let next = service
            .start(ExecutionRequest::new("what did you do").with_conversation(conversation))
            .await
            .unwrap();
        assert_eq!(text(&payloads(&next).await), "I tidied.", "{api:?}");
        let journal = mock.journal().await;
        let sent = messages(journal.last().unwrap());
        let said: Vec<&str> = sent.iter().map(|(_, c)| c.as_str()).collect();
        for expected in [
            "I am Ada",
            "Nice to meet you, Ada.",
            "tidy up",
            "Done tidying.",
            "what did you do",
        ] {
            assert!(said.contains(&expected), "{api:?}: {expected} in {sent:?}");
        }
        assert!(
            journal.last().unwrap()["body"]["messages"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["role"] == "tool" && m["tool_call_id"] == "call_b"),
            "{api:?}: the restored call's result in the model's own call id"
        );

        other.respond(other_asked.approve_all()).await.unwrap();
        assert!(matches!(other.outcome().await, Outcome::Succeeded(_)));
        assert_eq!(service.runtime_pool().unwrap().idle, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_without_a_conversation_is_kept_alive_rather_than_lost() {
    let mock = Mock::start(&fixtures());
    let state = Arc::new(InMemoryThreadStateStore::new());
    // A pool of 0 would evict every pause at once; this one has nowhere to be kept.
    let service = service(&mock, Api::ChatCompletions, 0, &state);
    let paused = service
        .start(ExecutionRequest::new("tidy up"))
        .await
        .unwrap();
    let asked = pending(&paused).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let pool = service.runtime_pool().unwrap();
    assert_eq!((pool.idle, pool.evictions), (0, 0));
    paused.respond(asked.approve_all()).await.unwrap();
    let log = payloads(&paused).await;
    assert!(
        matches!(paused.outcome().await, Outcome::Succeeded(_)),
        "{log:?}"
    );
    assert_eq!(text(&log), "Done tidying.");
}
