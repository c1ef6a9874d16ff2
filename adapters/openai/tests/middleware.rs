//! The operator's middleware policy on the model loop, against the mock model server, with
//! the same rules as the scripted adapter's and the ACP adapter's tests: deny `files.*` and
//! `acp.kind.edit`, require approval for `weather.*`, results capped at 120 bytes with a
//! secret redacted, at most 3 tool calls. Checked by what the model receives in its next
//! request.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{City, Mock, name, payloads, pending};
use harness_core::action::ActionKind;
use harness_core::event::{EventPayload, ToolCallOutcome};
use harness_core::middleware::{MiddlewareConfig, TRUNCATION_MARKER};
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
use harness_core::tool::{FnTool, ToolSet};
use harness_openai::{Api, Endpoint, OpenAiAdapter};
use serde_json::json;

const SECRET: &str = "sk-live-0123456789";
const APIS: [Api; 2] = [Api::ChatCompletions, Api::Responses];

fn rules() -> MiddlewareConfig {
    serde_json::from_value(json!({
        "tools": [
            {"tool": "files.*", "action": "deny"},
            {"tool": "acp.kind.edit", "action": "deny"},
            {"tool": "weather.*", "action": "require_approval"}
        ],
        "results": {"maxBytes": 120, "redact": {"secrets": [SECRET]}},
        "limits": {"maxToolCalls": 3}
    }))
    .unwrap()
}

/// `files.delete`, `notes.read` (its text holds the secret) and `weather.now`, none of
/// which asks for approval on its own; each counts its calls.
fn tools(calls: &Arc<AtomicUsize>) -> ToolSet {
    let counted = |calls: &Arc<AtomicUsize>| {
        let calls = Arc::clone(calls);
        move || {
            calls.fetch_add(1, Ordering::SeqCst);
        }
    };
    let (a, b, c) = (counted(calls), counted(calls), counted(calls));
    let delete = FnTool::new(
        "files.delete".parse().unwrap(),
        "Deletes a file.",
        move |f: City, _| {
            a();
            async move { Ok::<_, String>(json!({"deleted": f.city})) }
        },
    )
    .unwrap();
    let notes = FnTool::new(
        "notes.read".parse().unwrap(),
        "Reads the notes of a city.",
        move |_: City, _| {
            b();
            async move { Ok::<_, String>(format!("key {SECRET} then {}", "lorem ".repeat(40))) }
        },
    )
    .unwrap();
    let weather = FnTool::new(
        "weather.now".parse().unwrap(),
        "The weather now.",
        move |w: City, _| {
            c();
            async move { Ok::<_, String>(format!("sunny in {}", w.city)) }
        },
    )
    .unwrap();
    ToolSet::new()
        .tool(delete)
        .unwrap()
        .tool(notes)
        .unwrap()
        .tool(weather)
        .unwrap()
}

fn service(mock: &Mock, api: Api, calls: &Arc<AtomicUsize>) -> AdapterService<OpenAiAdapter> {
    let endpoint = Endpoint::new(mock.base(), "gpt-4.1").with_api(api);
    AdapterService::builder(OpenAiAdapter::new(endpoint).unwrap())
        .tools(tools(calls))
        .middleware(harness_layers::middleware::compile(&rules()).unwrap())
        .build()
}

/// The content of the tool messages of the last request the mock received for `user`.
async fn tool_results(mock: &Mock, user: &str) -> Vec<String> {
    let journal = mock.journal().await;
    let last = journal
        .iter()
        .rev()
        .find(|e| {
            e["body"]["messages"].as_array().is_some_and(|m| {
                m.iter()
                    .any(|m| m["role"] == "user" && m["content"].as_str() == Some(user))
            })
        })
        .expect("a request for the message");
    last["body"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_receives_the_denial_and_the_redacted_capped_result() {
    let mock = Mock::start(&json!([
        {"match": {"userMessage": "delete", "hasToolResult": true}, "response": {"content": "Could not."}},
        {"match": {"userMessage": "delete"}, "response": {"toolCalls": [{"id": "call_d", "name": name("files.delete"), "arguments": {"city": "old.txt"}}]}},
        {"match": {"userMessage": "notes", "hasToolResult": true}, "response": {"content": "Read them."}},
        {"match": {"userMessage": "notes"}, "response": {"toolCalls": [{"id": "call_n", "name": name("notes.read"), "arguments": {"city": "Oslo"}}]}},
    ]));
    for api in APIS {
        let calls = Arc::new(AtomicUsize::new(0));
        let service = service(&mock, api, &calls);

        let execution = service
            .start(ExecutionRequest::new("delete old.txt"))
            .await
            .unwrap();
        let log = payloads(&execution).await;
        assert!(
            matches!(execution.outcome().await, Outcome::Succeeded(_)),
            "{api:?}"
        );
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "{api:?}: the denied tool ran"
        );
        assert!(log.iter().any(|p| matches!(p, EventPayload::ToolCallCompleted(c)
            if matches!(&c.outcome, ToolCallOutcome::Failure { message } if message.contains("denied")))));
        let results = tool_results(&mock, "delete old.txt").await;
        assert_eq!(results.len(), 1, "{api:?}");
        assert!(
            results[0].contains("denied by the operator's middleware policy")
                && results[0].contains("files.delete"),
            "{api:?}: {}",
            results[0]
        );

        let execution = service
            .start(ExecutionRequest::new("read the notes"))
            .await
            .unwrap();
        assert!(
            matches!(execution.outcome().await, Outcome::Succeeded(_)),
            "{api:?}"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{api:?}");
        let results = tool_results(&mock, "read the notes").await;
        assert_eq!(results.len(), 1, "{api:?}");
        let seen = &results[0];
        assert!(!seen.contains(SECRET), "{api:?}: {seen}");
        assert!(seen.contains("[REDACTED:secret]"), "{api:?}: {seen}");
        assert!(seen.contains(TRUNCATION_MARKER), "{api:?}: {seen}");
        assert!(seen.len() < 200, "{api:?}: {} bytes: {seen}", seen.len());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_is_required_and_the_tool_call_cap_holds() {
    let mock = Mock::start(&json!([
        {"match": {"userMessage": "weather", "hasToolResult": true}, "response": {"content": "Sunny."}},
        {"match": {"userMessage": "weather"}, "response": {"toolCalls": [{"id": "call_w", "name": name("weather.now"), "arguments": {"city": "Oslo"}}]}},
        {"match": {"userMessage": "loop"}, "response": {"toolCalls": [{"name": name("notes.read"), "arguments": {"city": "Rome"}}]}},
    ]));
    for api in APIS {
        let calls = Arc::new(AtomicUsize::new(0));
        let service = service(&mock, api, &calls);
        let execution = service
            .start(ExecutionRequest::new("weather in Oslo?"))
            .await
            .unwrap();
        let action = pending(&execution).await;
        let ActionKind::ToolApproval(approval) = &action.kind else {
            panic!("expected a tool approval")
        };
        assert_eq!(approval.calls()[0].tool(), "weather.now");
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "{api:?}: ran before approval"
        );
        execution
            .respond(action.decide(|_| harness_core::action::Decision::Approve))
            .await
            .unwrap();
        assert!(
            matches!(execution.outcome().await, Outcome::Succeeded(_)),
            "{api:?}"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{api:?}");
        assert_eq!(
            tool_results(&mock, "weather in Oslo?").await,
            ["sunny in Oslo"],
            "{api:?}"
        );

        calls.store(0, Ordering::SeqCst);
        let execution = service
            .start(ExecutionRequest::new("loop forever"))
            .await
            .unwrap();
        let Outcome::Failed(error) = execution.outcome().await else {
            panic!("expected the cap to end the run")
        };
        assert_eq!(error.code().as_str(), "LIMIT_TOOL_CALLS", "{api:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 3, "{api:?}");
    }
}
