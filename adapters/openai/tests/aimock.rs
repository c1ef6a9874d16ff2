//! The model loop against a real mock model server (`@copilotkit/aimock`), over both APIs:
//! text, reasoning, usage, tool calls (one, parallel, approvals), multi-turn history,
//! cancellation mid-stream, errors of every class.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Mock, kinds, name, payloads, pending, reasoning, squeezed, text, tools};
use harness_core::error::ErrorCategory;
use harness_core::event::{CancelReason, CancelSource, EventPayload, ToolCallOutcome};
use harness_core::id::ConversationId;
use harness_core::limits::RunLimits;
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
use harness_core::tool::ToolSet;
use harness_openai::{Api, Endpoint, OpenAiAdapter, OpenAiOptions};
use serde_json::{Value, json};

const APIS: [Api; 2] = [Api::ChatCompletions, Api::Responses];

fn service(mock: &Mock, api: Api, tools: ToolSet) -> AdapterService<OpenAiAdapter> {
    let endpoint = Endpoint::new(mock.base(), "gpt-4.1")
        .with_api(api)
        .with_api_key("sk-test-operator-key")
        .with_instructions("You are the test model.");
    AdapterService::builder(OpenAiAdapter::new(endpoint).unwrap())
        .tools(tools)
        .build()
}

fn failure(outcome: Outcome) -> harness_core::error::PublicError {
    match outcome {
        Outcome::Failed(error) => error.public(),
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_reasoning_and_usage_stream_as_they_come() {
    let mock = Mock::start(&json!([
        {"match": {"userMessage": "think"}, "response": {"content": "The answer is 4.", "reasoning": "2 plus 2 is 4.",
            "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}}, "chunkSize": 4},
    ]));
    for api in APIS {
        let service = service(&mock, api, ToolSet::new());
        let execution = service
            .start(ExecutionRequest::new("think about 2+2"))
            .await
            .unwrap();
        let log = payloads(&execution).await;
        assert_eq!(text(&log), "The answer is 4.", "{api:?}");
        assert_eq!(reasoning(&log), "2 plus 2 is 4.", "{api:?}");
        let deltas = log
            .iter()
            .filter(|p| matches!(p, EventPayload::MessageDelta(_)))
            .count();
        assert!(
            deltas >= 4,
            "{api:?}: the text did not stream ({deltas} deltas)"
        );
        let usage: Vec<_> = log
            .iter()
            .filter_map(|p| match p {
                EventPayload::Usage(u) => Some((u.input_tokens, u.output_tokens)),
                _ => None,
            })
            .collect();
        assert_eq!(usage, [(11, 5)], "{api:?}");
        assert_eq!(kinds(&log).last(), Some(&"run.succeeded"));
    }
    // What the endpoint received: the operator's instructions and key, the user's message.
    let journal = mock.journal().await;
    let chat = &journal[0];
    assert_eq!(
        chat["body"]["messages"][0],
        json!({"role": "system", "content": "You are the test model."})
    );
    assert_eq!(chat["body"]["stream_options"]["include_usage"], true);
    assert_eq!(
        chat["headers"]["authorization"], "[REDACTED]",
        "no key was sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_runs_through_its_handle_and_the_model_reads_its_result() {
    let mock = Mock::start(&json!([
        {"match": {"userMessage": "weather", "hasToolResult": true}, "response": {"content": "It is sunny in Paris."}},
        {"match": {"userMessage": "weather"}, "response": {"toolCalls": [{"id": "call_w1", "name": name("weather.now"), "arguments": {"city": "Paris"}}]}, "chunkSize": 5},
    ]));
    for api in APIS {
        let calls = Arc::new(AtomicUsize::new(0));
        let service = service(&mock, api, tools(&calls));
        let execution = service
            .start(ExecutionRequest::new("what is the weather in Paris?"))
            .await
            .unwrap();
        let log = payloads(&execution).await;
        let mut shown = squeezed(&log);
        shown.retain(|k| *k != "usage");
        assert_eq!(
            shown,
            [
                "run.queued",
                "run.starting",
                "run.running",
                "tool.call.started",
                "tool.call.completed",
                "message.delta",
                "run.succeeded"
            ],
            "{api:?}"
        );
        let EventPayload::ToolCallStarted(started) = log
            .iter()
            .find(|p| matches!(p, EventPayload::ToolCallStarted(_)))
            .unwrap()
        else {
            unreachable!()
        };
        assert_eq!(
            (started.tool.as_str(), &started.arguments),
            ("weather.now", &json!({"city": "Paris"}))
        );
        let completed = log.iter().find_map(|p| match p {
            EventPayload::ToolCallCompleted(c) => Some(&c.outcome),
            _ => None,
        });
        assert_eq!(
            completed,
            Some(&ToolCallOutcome::Success {
                output: json!("sunny in Paris")
            }),
            "{api:?}"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{api:?}");
        assert_eq!(text(&log), "It is sunny in Paris.");
    }
    // The second round of each API carried the tool's result under the model's call id.
    let journal = mock.journal().await;
    let results: Vec<&Value> = journal
        .iter()
        .filter_map(|e| {
            e["body"]["messages"]
                .as_array()?
                .iter()
                .find(|m| m["role"] == "tool")
        })
        .collect();
    assert_eq!(results.len(), 2);
    for result in results {
        assert_eq!(
            (&result["tool_call_id"], &result["content"]),
            (&json!("call_w1"), &json!("sunny in Paris"))
        );
    }
    // Tools reach the model under provider-safe names, with their schemas.
    let tools = &journal[0]["body"]["tools"];
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, [name("files.delete"), name("weather.now")]);
    assert_eq!(
        tools[1]["function"]["parameters"]["required"],
        json!(["city"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_calls_run_and_one_approval_covers_those_that_need_it() {
    let mock = Mock::start(&json!([
        {"match": {"userMessage": "tidy", "hasToolResult": true}, "response": {"content": "Done tidying."}},
        {"match": {"userMessage": "tidy"}, "response": {"toolCalls": [
            {"id": "call_a", "name": name("weather.now"), "arguments": {"city": "Oslo"}},
            {"id": "call_b", "name": name("files.delete"), "arguments": {"city": "old.txt"}},
            {"id": "call_c", "name": name("files.delete"), "arguments": {"city": "tmp.txt"}},
            {"id": "call_d", "name": "no_such_tool", "arguments": {}}
        ]}},
    ]));
    for api in APIS {
        let calls = Arc::new(AtomicUsize::new(0));
        let service = service(&mock, api, tools(&calls));
        let execution = service
            .start(ExecutionRequest::new("tidy up please"))
            .await
            .unwrap();
        let action = pending(&execution).await;
        // The free call ran and the unknown tool was refused before the pause.
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{api:?}");
        let harness_core::action::ActionKind::ToolApproval(approval) = &action.kind else {
            panic!("expected a tool approval")
        };
        let asked: Vec<(&str, &Value)> = approval
            .calls()
            .iter()
            .map(|c| (c.tool(), c.arguments()))
            .collect();
        assert_eq!(
            asked,
            [
                ("files.delete", &json!({"city": "old.txt"})),
                ("files.delete", &json!({"city": "tmp.txt"}))
            ]
        );
        // Edit the first, reject the second.
        let (first, second) = (
            approval.calls()[0].call_id().clone(),
            approval.calls()[1].call_id().clone(),
        );
        let answer = action.decide(|call| {
            if call.call_id() == &first {
                harness_core::action::Decision::Edit {
                    arguments: json!({"city": "older.txt"}),
                }
            } else {
                harness_core::action::Decision::Reject {
                    reason: Some("keep it".to_owned()),
                }
            }
        });
        execution.respond(answer).await.unwrap();
        let log = payloads(&execution).await;
        assert!(
            matches!(execution.outcome().await, Outcome::Succeeded(_)),
            "{api:?}: {:?}",
            kinds(&log)
        );
        let outcome_of = |call: &harness_core::id::ToolCallId| {
            log.iter().find_map(|p| match p {
                EventPayload::ToolCallCompleted(c) if &c.call_id == call => Some(c.outcome.clone()),
                _ => None,
            })
        };
        assert_eq!(
            outcome_of(&first),
            Some(ToolCallOutcome::Success {
                output: json!({"deleted": "older.txt"})
            })
        );
        assert_eq!(
            outcome_of(&second),
            Some(ToolCallOutcome::Rejected {
                reason: Some("keep it".to_owned())
            })
        );
        // The edit is in the log before the call completed.
        assert!(log.iter().any(|p| matches!(p, EventPayload::ToolCallUpdated(u) if u.call_id == first && u.arguments == json!({"city": "older.txt"}))));
        let failures = log.iter().filter(|p| matches!(p, EventPayload::ToolCallCompleted(c) if matches!(c.outcome, ToolCallOutcome::Failure { .. }))).count();
        assert_eq!(failures, 1, "the unknown tool's call");
        assert_eq!(text(&log), "Done tidying.");
    }
    // The model read every result, in its own call ids: the edited call's output, the
    // rejection with its reason, the unknown tool's error.
    let journal = mock.journal().await;
    let last = journal.last().unwrap();
    let results: Vec<(String, String)> = last["body"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let ids: Vec<&str> = results.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["call_a", "call_b", "call_c", "call_d"]);
    assert_eq!(results[0].1, "sunny in Oslo");
    assert!(results[1].1.contains("older.txt"), "{}", results[1].1);
    assert!(
        results[2].1.contains("rejected") && results[2].1.contains("keep it"),
        "{}",
        results[2].1
    );
    assert!(results[3].1.contains("no_such_tool"), "{}", results[3].1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_continues_from_its_history_and_a_cleared_one_starts_afresh() {
    let mock = Mock::start(&json!([
        {"match": {"userMessage": "my name", "turnIndex": 1}, "response": {"content": "You are Ada."}},
        {"match": {"userMessage": "my name", "turnIndex": 0}, "response": {"content": "I do not know your name."}},
        {"match": {"userMessage": "I am Ada"}, "response": {"content": "Nice to meet you, Ada."}},
    ]));
    for api in APIS {
        let service = service(&mock, api, ToolSet::new());
        let conversation = ConversationId::generate();
        let first = service
            .start(ExecutionRequest::new("I am Ada").with_conversation(conversation.clone()))
            .await
            .unwrap();
        assert_eq!(text(&payloads(&first).await), "Nice to meet you, Ada.");
        let second = service
            .start(
                ExecutionRequest::new("what is my name?").with_conversation(conversation.clone()),
            )
            .await
            .unwrap();
        assert_eq!(
            text(&payloads(&second).await),
            "You are Ada.",
            "{api:?}: the history was not sent"
        );
        // Another conversation knows nothing; a cleared one neither.
        let other = service
            .start(
                ExecutionRequest::new("what is my name?")
                    .with_conversation(ConversationId::generate()),
            )
            .await
            .unwrap();
        assert_eq!(text(&payloads(&other).await), "I do not know your name.");
        service
            .clear_session(&harness_core::session::Conversation::anonymous(
                conversation.clone(),
            ))
            .await
            .unwrap();
        let cleared = service
            .start(ExecutionRequest::new("what is my name?").with_conversation(conversation))
            .await
            .unwrap();
        assert_eq!(
            text(&payloads(&cleared).await),
            "I do not know your name.",
            "{api:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_mid_stream_ends_the_run_at_once() {
    let mock = Mock::start(&json!([
        {"match": {"userMessage": "long story"}, "response": {"content": "Once upon a time there was a very long story that never seemed to end at all."},
         "latency": 300, "chunkSize": 4},
    ]));
    for api in APIS {
        let service = service(&mock, api, ToolSet::new());
        let execution = service
            .start(ExecutionRequest::new("tell me a long story"))
            .await
            .unwrap();
        let mut events = execution.events(harness_core::id::Cursor::START);
        use futures_util::StreamExt;
        while let Some(event) = events.next().await {
            if matches!(event.payload(), EventPayload::MessageDelta(_)) {
                break;
            }
        }
        let asked = Instant::now();
        execution.cancel(CancelReason::from_source(CancelSource::Caller));
        assert!(
            matches!(execution.outcome().await, Outcome::Cancelled(_)),
            "{api:?}"
        );
        // Far sooner than the ~6 s the rest of the story would take.
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "{api:?}: {:?}",
            asked.elapsed()
        );
        let log = payloads(&execution).await;
        assert!(
            text(&log).len() < 40,
            "{api:?}: the story went on: {}",
            text(&log)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_classified() {
    let mock = Mock::start(&json!([
        {"match": {"userMessage": "err401"}, "response": {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}, "status": 401}},
        {"match": {"userMessage": "err429"}, "response": {"error": {"message": "Rate limit reached", "type": "rate_limit_error", "code": "rate_limit_exceeded"}, "status": 429, "retryAfter": 7}},
        {"match": {"userMessage": "err500"}, "response": {"error": {"message": "boom", "type": "server_error"}, "status": 500}},
        {"match": {"userMessage": "cut short"}, "response": {"content": "This reply will be cut off before it is complete, long before."}, "latency": 10, "chunkSize": 4, "truncateAfterChunks": 4},
        {"match": {"userMessage": "garbage"}, "response": {"content": "x"}, "chaos": {"malformedRate": 1}},
    ]));
    for api in APIS {
        let service = service(&mock, api, ToolSet::new());
        let run = |message: &'static str| {
            let service = service.clone();
            async move {
                let execution = service.start(ExecutionRequest::new(message)).await.unwrap();
                failure(execution.outcome().await)
            }
        };
        let e = run("err401").await;
        assert_eq!(
            (e.category, e.retryable),
            (ErrorCategory::Authentication, false),
            "{api:?}"
        );
        assert_eq!(e.provider_code.as_deref(), Some("invalid_api_key"));
        let e = run("err429").await;
        assert_eq!(
            (e.category, e.retryable),
            (ErrorCategory::Throttled, true),
            "{api:?}"
        );
        assert_eq!(e.retry_after_ms, Some(7000), "{api:?}");
        let e = run("err500").await;
        assert_eq!(
            (e.category, e.retryable),
            (ErrorCategory::Unavailable, true),
            "{api:?}"
        );
        // Cut after some text: output occurred, so it is not retried blindly.
        // Cut mid-stream: retryable only if no output had been emitted yet.
        let e = run("cut short").await;
        assert_eq!(e.category, ErrorCategory::Unavailable, "{api:?}: {e:?}");
        assert_ne!(
            e.retryable, e.side_effects_may_have_occurred,
            "{api:?}: {e:?}"
        );
        let e = run("garbage").await;
        assert_eq!(e.category, ErrorCategory::Protocol, "{api:?}: {e:?}");
    }
    // Nothing listening: unavailable, retryable.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let endpoint = Endpoint::new(format!("http://127.0.0.1:{port}/v1"), "m");
    let service = AdapterService::new(OpenAiAdapter::new(endpoint).unwrap());
    let e = failure(
        service
            .start(ExecutionRequest::new("hi"))
            .await
            .unwrap()
            .outcome()
            .await,
    );
    assert_eq!(
        (e.category, e.retryable),
        (ErrorCategory::Unavailable, true)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_keeps_calling_tools_is_stopped_at_its_round_limit() {
    let mock = Mock::start(&json!([
        {"match": {"userMessage": "loop"}, "response": {"toolCalls": [{"name": name("weather.now"), "arguments": {"city": "Rome"}}]}},
    ]));
    let calls = Arc::new(AtomicUsize::new(0));
    let endpoint = Endpoint::new(mock.base(), "gpt-4.1").with_max_tool_rounds(3);
    let service = AdapterService::builder(OpenAiAdapter::new(endpoint).unwrap())
        .tools(tools(&calls))
        .build();
    let execution = service
        .start(ExecutionRequest::new("loop forever"))
        .await
        .unwrap();
    let e = failure(execution.outcome().await);
    let log = payloads(&execution).await;
    assert_eq!(e.code.as_str(), "TOOL_ROUNDS_EXHAUSTED", "{log:?}");
    let completed = log.iter().filter(|p| matches!(p, EventPayload::ToolCallCompleted(c) if matches!(c.outcome, ToolCallOutcome::Success { .. }))).count();
    assert_eq!(completed, 3, "{log:?}");
    assert!(e.message.contains('3'), "{}", e.message);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

/// The model requests (`modelTurns`) the execution's `usage` events report.
fn turns(log: &[EventPayload]) -> u64 {
    log.iter()
        .map(|p| match p {
            EventPayload::Usage(u) => u.model_turns,
            _ => 0,
        })
        .sum()
}

fn one_failure(log: &[EventPayload]) {
    let terminal: Vec<_> = log.iter().filter(|p| p.is_terminal()).collect();
    assert_eq!(terminal.len(), 1, "{log:?}");
    assert!(
        matches!(log.last(), Some(EventPayload::RunFailed(_))),
        "{log:?}"
    );
}

/// A model that keeps calling tools is stopped at the execution's `maxModelTurns` before it
/// makes one more request (the operator's limit; a caller asking for more still gets it),
/// and every request it made is counted in `usage`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_turn_limit_stops_the_loop_before_its_next_request() {
    let mock = Mock::start(&json!([
        {"match": {"userMessage": "loop"}, "response": {"toolCalls": [{"name": name("weather.now"), "arguments": {"city": "Rome"}}]}},
    ]));
    let limits = RunLimits::none().with_max_model_turns(2).unwrap();
    for api in APIS {
        let calls = Arc::new(AtomicUsize::new(0));
        let endpoint = Endpoint::new(mock.base(), "gpt-4.1")
            .with_api(api)
            .with_max_tool_rounds(10);
        let service = AdapterService::builder(OpenAiAdapter::new(endpoint).unwrap())
            .tools(tools(&calls))
            .limits(limits)
            .build();
        let before = mock.journal().await.len();
        let wider = RunLimits::none().with_max_model_turns(10).unwrap();
        let execution = service
            .start(ExecutionRequest::new("loop forever").with_limits(wider))
            .await
            .unwrap();
        let e = failure(execution.outcome().await);
        let log = payloads(&execution).await;
        assert_eq!(e.code.as_str(), "LIMIT_MODEL_TURNS", "{api:?} {log:?}");
        one_failure(&log);
        assert_eq!(
            mock.journal().await.len() - before,
            2,
            "{api:?}: model requests"
        );
        assert_eq!(turns(&log), 2, "{api:?} {log:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 2, "{api:?}");
    }
}

/// The loop does not start a tool call past `maxToolCalls`: the model asked for a third,
/// which was neither announced nor run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_limit_stops_the_loop_before_the_call_past_it() {
    let mock = Mock::start(&json!([
        {"match": {"userMessage": "loop"}, "response": {"toolCalls": [{"name": name("weather.now"), "arguments": {"city": "Rome"}}]}},
    ]));
    for api in APIS {
        let calls = Arc::new(AtomicUsize::new(0));
        let execution = service(&mock, api, tools(&calls))
            .start(
                ExecutionRequest::new("loop forever")
                    .with_limits(RunLimits::none().with_max_tool_calls(2).unwrap()),
            )
            .await
            .unwrap();
        let e = failure(execution.outcome().await);
        let log = payloads(&execution).await;
        assert_eq!(e.code.as_str(), "LIMIT_TOOL_CALLS", "{api:?} {log:?}");
        one_failure(&log);
        let started = log
            .iter()
            .filter(|p| matches!(p, EventPayload::ToolCallStarted(_)))
            .count();
        assert_eq!((started, calls.load(Ordering::SeqCst)), (2, 2), "{api:?}");
        // Three model requests, each counted.
        assert_eq!(turns(&log), 3, "{api:?} {log:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_picks_only_what_the_operator_allows() {
    let mock = Mock::start(&json!([{"match": {}, "response": {"content": "ok"}}]));
    let endpoint = Endpoint::new(mock.base(), "gpt-4.1").allow_model("gpt-4.1-mini");
    let service = AdapterService::new(OpenAiAdapter::new(endpoint).unwrap());
    let picked = service
        .start(
            ExecutionRequest::new("hi").with_options(
                OpenAiOptions::default()
                    .with_model("gpt-4.1-mini")
                    .to_value(),
            ),
        )
        .await
        .unwrap();
    assert!(matches!(picked.outcome().await, Outcome::Succeeded(_)));
    assert_eq!(mock.journal().await[0]["body"]["model"], "gpt-4.1-mini");
    for (options, named) in [
        (json!({"model": "o3"}), "o3"),
        (json!({"endpoint": "elsewhere"}), "elsewhere"),
        (json!({"baseUrl": "http://attacker.example"}), "baseUrl"),
        (json!({"apiKey": "x"}), "apiKey"),
    ] {
        // Refused at start: the service evaluates every request.
        let e = service
            .start(ExecutionRequest::new("hi").with_options(options))
            .await
            .expect_err("refused at start");
        assert_eq!(e.code().as_str(), "OPTIONS_INVALID");
        assert!(e.message().contains(named), "{}", e.message());
    }
    assert_eq!(
        mock.journal().await.len(),
        1,
        "a refused request reached the endpoint"
    );
}
