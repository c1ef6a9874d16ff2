//! Plain invocation (`invoke.non_streaming`, native here) against the mock model server:
//! an execution started for its outcome makes non-streaming model requests, over both APIs,
//! and its outcome holds the text, the reasoning, the tool results and the usage; a round
//! that needs an approval pauses the invocation, which answers and finishes.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Mock, kinds, name, payloads, tools};
use harness_core::capability::{CapabilityKey, SupportLevel};
use harness_core::event::{EventPayload, ToolCallOutcome};
use harness_core::lifecycle::ExecutionState;
use harness_core::manifest::Describe;
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
use harness_core::tool::ToolSet;
use harness_openai::{Api, Endpoint, OpenAiAdapter};
use serde_json::{Value, json};

const APIS: [Api; 2] = [Api::ChatCompletions, Api::Responses];

fn service(mock: &Mock, api: Api, tools: ToolSet) -> AdapterService<OpenAiAdapter> {
    let endpoint = Endpoint::new(mock.base(), "gpt-4.1")
        .with_api(api)
        .with_api_key("sk-test-operator-key");
    AdapterService::builder(OpenAiAdapter::new(endpoint).unwrap())
        .tools(tools)
        .build()
}

/// The `stream` flag of each request the mock received since `from`.
async fn streamed(mock: &Mock, from: usize) -> Vec<Value> {
    mock.journal().await[from..]
        .iter()
        .map(|entry| entry["body"]["stream"].clone())
        .collect()
}

#[test]
fn the_capability_report_says_native() {
    let capability = harness_openai::descriptor()
        .capabilities()
        .get(CapabilityKey::InvokeNonStreaming);
    assert_eq!(capability.level(), SupportLevel::Native);
    let adapter = OpenAiAdapter::new(Endpoint::new("http://127.0.0.1:9/v1", "m")).unwrap();
    assert_eq!(
        adapter
            .descriptor()
            .capabilities()
            .level(CapabilityKey::InvokeNonStreaming),
        SupportLevel::Native
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invocation_makes_non_streaming_requests_and_returns_the_outcome() {
    let mock = Mock::start(&json!([
        {"match": {"userMessage": "weather", "hasToolResult": true}, "response": {"content": "It is sunny in Paris.", "reasoning": "The tool said so.",
            "usage": {"prompt_tokens": 20, "completion_tokens": 6, "total_tokens": 26}}, "chunkSize": 3},
        {"match": {"userMessage": "weather"}, "response": {"toolCalls": [{"id": "call_w1", "name": name("weather.now"), "arguments": {"city": "Paris"}}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}}, "chunkSize": 3},
    ]));
    let mut seen = 0;
    for api in APIS {
        let calls = Arc::new(AtomicUsize::new(0));
        let service = service(&mock, api, tools(&calls));
        let invocation = service
            .invoke(ExecutionRequest::new("what is the weather in Paris?"))
            .await
            .unwrap();
        let outcome = invocation.outcome();
        assert_eq!(
            outcome.state,
            ExecutionState::Succeeded,
            "{api:?}: {outcome:?}"
        );
        assert!(matches!(invocation.ended(), Some(Outcome::Succeeded(_))));
        assert_eq!(outcome.text, "It is sunny in Paris.", "{api:?}");
        assert_eq!(outcome.tool_calls.len(), 1, "{api:?}");
        assert_eq!(outcome.tool_calls[0].tool, "weather.now");
        assert_eq!(outcome.tool_calls[0].arguments, json!({"city": "Paris"}));
        assert_eq!(
            outcome.tool_calls[0].outcome,
            Some(ToolCallOutcome::Success {
                output: json!("sunny in Paris")
            })
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(outcome.usage.model_turns, 2, "{api:?}: one per request");
        if api == Api::ChatCompletions {
            // Responses usage comes from the mock's own counting; chat reports the fixture's.
            assert_eq!(
                (outcome.usage.input_tokens, outcome.usage.output_tokens),
                (31, 10)
            );
            assert_eq!(outcome.reasoning, "The tool said so.");
        }
        // Whole responses: one text delta for the round that spoke (chunkSize 3 would have
        // made seven when streamed).
        let log = payloads(invocation.handle()).await;
        let deltas = log
            .iter()
            .filter(|p| matches!(p, EventPayload::MessageDelta(_)))
            .count();
        assert_eq!(deltas, 1, "{api:?}: {:?}", kinds(&log));
        // The provider was asked for whole responses, both rounds.
        assert_eq!(
            streamed(&mock, seen).await,
            [json!(false), json!(false)],
            "{api:?}"
        );
        seen += 2;
    }
    let journal = mock.journal().await;
    assert!(
        journal[0]["body"].get("stream_options").is_none(),
        "stream_options goes with streaming only: {}",
        journal[0]["body"]
    );

    // The same request started for a stream streams.
    let service = service(&mock, Api::ChatCompletions, tools(&Arc::default()));
    let execution = service
        .start(ExecutionRequest::new("what is the weather in Paris?"))
        .await
        .unwrap();
    let log = payloads(&execution).await;
    assert!(
        log.iter()
            .filter(|p| matches!(p, EventPayload::MessageDelta(_)))
            .count()
            > 1
    );
    assert_eq!(streamed(&mock, seen).await, [json!(true), json!(true)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invocation_paused_on_an_approval_answers_and_finishes() {
    let mock = Mock::start(&json!([
        {"match": {"userMessage": "tidy", "hasToolResult": true}, "response": {"content": "Deleted old.txt."}},
        {"match": {"userMessage": "tidy"}, "response": {"toolCalls": [
            {"id": "call_b", "name": name("files.delete"), "arguments": {"city": "old.txt"}}
        ]}},
    ]));
    let mut seen = 0;
    for api in APIS {
        let service = service(&mock, api, tools(&Arc::default()));
        let invocation = service
            .invoke(ExecutionRequest::new("tidy up please"))
            .await
            .unwrap();
        assert_eq!(invocation.outcome().state, ExecutionState::AwaitingApproval);
        assert!(invocation.ended().is_none());
        let action = invocation.pending_action().expect("pending").clone();
        assert_eq!(invocation.outcome().tool_calls[0].outcome, None);
        let invocation = invocation
            .resume(action.decide(|_| harness_core::action::Decision::Approve))
            .await
            .unwrap();
        let outcome = invocation.outcome();
        assert_eq!(outcome.state, ExecutionState::Succeeded, "{api:?}");
        assert_eq!(outcome.pending_action, None);
        assert_eq!(outcome.text, "Deleted old.txt.");
        assert_eq!(
            outcome.tool_calls[0].outcome,
            Some(ToolCallOutcome::Success {
                output: json!({"deleted": "old.txt"})
            })
        );
        assert_eq!(
            streamed(&mock, seen).await,
            [json!(false), json!(false)],
            "{api:?}: the round after the answer is whole too"
        );
        seen += 2;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_error_is_a_classified_failure() {
    let mock = Mock::start(&json!([
        {"match": {"userMessage": "busy"}, "response": {"error": {"message": "Rate limit reached", "type": "rate_limit_error", "code": "rate_limit_exceeded"}, "status": 429}},
    ]));
    for api in APIS {
        let service = service(&mock, api, ToolSet::new());
        let invocation = service
            .invoke(ExecutionRequest::new("busy?"))
            .await
            .unwrap();
        let outcome = invocation.outcome();
        assert_eq!(outcome.state, ExecutionState::Failed, "{api:?}");
        let error = outcome.error.as_ref().expect("the public error");
        assert_eq!(
            error.category,
            harness_core::error::ErrorCategory::Throttled,
            "{api:?}"
        );
        assert!(error.retryable);
        let Some(Outcome::Failed(full)) = invocation.ended() else {
            panic!("{:?}", invocation.ended())
        };
        assert_eq!(
            full.category(),
            harness_core::error::ErrorCategory::Throttled
        );
    }
}

/// A server that answers every request with `head` then `body`, then closes the connection
/// (with `hold`, keeps it open without a byte more).
async fn stub(head: &'static str, body: Vec<u8>, hold: bool) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let _ = socket.read(&mut buf).await;
                let _ = socket.write_all(head.as_bytes()).await;
                for piece in body.chunks(64 * 1024) {
                    if socket.write_all(piece).await.is_err() {
                        return;
                    }
                }
                if hold {
                    tokio::time::sleep(std::time::Duration::from_secs(600)).await;
                }
            });
        }
    });
    url
}

const JSON: &str = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n";

async fn invoked(url: String, api: Api) -> harness_core::service::invoke::InvokeOutcome {
    let endpoint = Endpoint::new(url, "m")
        .with_api(api)
        .with_idle_timeout(std::time::Duration::from_secs(30));
    let service = AdapterService::new(OpenAiAdapter::new(endpoint).unwrap());
    tokio::time::timeout(
        std::time::Duration::from_secs(60),
        service.invoke(ExecutionRequest::new("hi")),
    )
    .await
    .expect("within a minute")
    .unwrap()
    .into_outcome()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_response_that_is_hostile_is_a_protocol_failure() {
    for api in APIS {
        // Not JSON.
        let outcome = invoked(
            stub(JSON, b"{\"choices\": [oops".to_vec(), false).await,
            api,
        )
        .await;
        let error = outcome.error.expect("failed");
        assert_eq!(error.category, harness_core::error::ErrorCategory::Protocol);
        assert!(error.message.contains("not a JSON response"), "{error:?}");
        // JSON, but not a response.
        let outcome = invoked(stub(JSON, b"[1, 2]".to_vec(), false).await, api).await;
        let error = outcome.error.expect("failed");
        assert_eq!(error.category, harness_core::error::ErrorCategory::Protocol);
        // Longer than the bound, the connection held open after it: refused at the bound,
        // not read on.
        let mut huge = b"{\"x\": \"".to_vec();
        huge.extend(std::iter::repeat_n(b'x', 33 << 20));
        let outcome = invoked(stub(JSON, huge, true).await, api).await;
        let error = outcome.error.expect("failed");
        assert_eq!(error.category, harness_core::error::ErrorCategory::Protocol);
        assert!(error.message.contains("longer than"), "{error:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_response_with_reasoning_and_usage_reads_as_the_stream_would() {
    let chat = json!({"choices": [{"message": {"role": "assistant", "content": "Hi.",
        "reasoning_content": "greet"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2}});
    let responses = json!({"status": "completed", "output": [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "greet"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hi."}]}],
        "usage": {"input_tokens": 3, "output_tokens": 2}});
    for (api, body) in [(Api::ChatCompletions, chat), (Api::Responses, responses)] {
        let outcome = invoked(stub(JSON, body.to_string().into_bytes(), false).await, api).await;
        assert_eq!(
            outcome.state,
            ExecutionState::Succeeded,
            "{api:?}: {outcome:?}"
        );
        assert_eq!(outcome.text, "Hi.");
        assert_eq!(outcome.reasoning, "greet");
        assert_eq!(
            (
                outcome.usage.input_tokens,
                outcome.usage.output_tokens,
                outcome.usage.model_turns
            ),
            (3, 2, 1)
        );
    }
}
