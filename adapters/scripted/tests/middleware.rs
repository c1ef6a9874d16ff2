//! The operator's middleware policy over a script's tool calls, through the service, with
//! the same rules as the model loop's and the ACP adapter's tests: deny `files.*` and
//! `acp.kind.edit`, require approval for `weather.*`, results capped at 120 bytes with a
//! secret redacted, at most 3 tool calls.

mod common;

use common::options;
use harness_core::action::{ActionKind, Decision};
use harness_core::error::ErrorCode;
use harness_core::event::{EventPayload, ToolCallOutcome};
use harness_core::middleware::{MiddlewareConfig, TRUNCATION_MARKER};
use harness_core::service::{AdapterService, ExecutionHandle, ExecutionRequest, Outcome};
use harness_scripted::{Script, ScriptedAdapter};
use serde_json::{Value, json};

const SECRET: &str = "sk-live-0123456789";

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

fn service(governed: bool) -> AdapterService<ScriptedAdapter> {
    let builder = AdapterService::builder(ScriptedAdapter::quickstart());
    if governed {
        builder
            .middleware(harness_layers::middleware::compile(&rules()).unwrap())
            .build()
    } else {
        builder.build()
    }
}

fn notes() -> Value {
    json!({"text": format!("key {SECRET} then {}", "lorem ".repeat(40))})
}

fn script() -> Script {
    Script::builder()
        .tool_call(
            "c1".parse().unwrap(),
            "files.delete",
            json!({"path": "old.txt"}),
            json!({"deleted": true}),
        )
        .tool_call("c2".parse().unwrap(), "notes.read", json!({}), notes())
        .tool_call(
            "c3".parse().unwrap(),
            "weather.now",
            json!({"city": "Oslo"}),
            json!("sunny"),
        )
        .complete("done")
        .build()
}

fn outcome_of(handle: &ExecutionHandle, call: &str) -> Option<ToolCallOutcome> {
    common::events(handle)
        .iter()
        .find_map(|e| match e.payload() {
            EventPayload::ToolCallCompleted(c) if c.call_id.as_str() == call => {
                Some(c.outcome.clone())
            }
            _ => None,
        })
}

async fn pending(handle: &ExecutionHandle) -> harness_core::action::ActionRequest {
    for _ in 0..500 {
        if let Some(action) = handle.pending_actions().pop() {
            return action;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("no action: {:?}", common::kinds(handle))
}

#[tokio::test]
async fn the_rules_apply_to_scripted_tool_calls() {
    let service = service(true);
    let handle = service
        .start(ExecutionRequest::new("go").with_options(options(&script())))
        .await
        .unwrap();
    // `weather.now` does not ask in the script: the policy makes it an approval.
    let action = pending(&handle).await;
    let ActionKind::ToolApproval(approval) = &action.kind else {
        panic!("expected a tool approval, got {action:?}")
    };
    assert_eq!(approval.calls()[0].tool(), "weather.now");
    handle
        .respond(action.decide(|_| Decision::Approve))
        .await
        .unwrap();
    assert!(matches!(handle.outcome().await, Outcome::Succeeded(_)));

    // The denied call reports the policy's denial, not its scripted output.
    let Some(ToolCallOutcome::Failure { message }) = outcome_of(&handle, "c1") else {
        panic!("{:?}", outcome_of(&handle, "c1"))
    };
    assert!(
        message.contains("denied by the operator's middleware policy"),
        "{message}"
    );
    assert!(message.contains("files.delete"), "{message}");
    // The result is redacted, then cut to the cap.
    let Some(ToolCallOutcome::Success {
        output: Value::String(text),
    }) = outcome_of(&handle, "c2")
    else {
        panic!("{:?}", outcome_of(&handle, "c2"))
    };
    assert!(!text.contains(SECRET), "{text}");
    assert!(text.contains("[REDACTED:secret]"), "{text}");
    assert!(text.contains(TRUNCATION_MARKER), "{text}");
    assert!(text.len() <= 120, "{text}");
    assert_eq!(
        outcome_of(&handle, "c3"),
        Some(ToolCallOutcome::Success {
            output: json!("sunny")
        })
    );

    // Without the policy the same script runs as written.
    let plain = service_plain_run().await;
    assert_eq!(
        outcome_of(&plain, "c1"),
        Some(ToolCallOutcome::Success {
            output: json!({"deleted": true})
        })
    );
    assert_eq!(
        outcome_of(&plain, "c2"),
        Some(ToolCallOutcome::Success { output: notes() })
    );
}

async fn service_plain_run() -> ExecutionHandle {
    let handle = service(false)
        .start(ExecutionRequest::new("go").with_options(options(&script())))
        .await
        .unwrap();
    assert!(matches!(handle.outcome().await, Outcome::Succeeded(_)));
    handle
}

#[tokio::test]
async fn the_tool_call_cap_ends_the_run() {
    let mut builder = Script::builder();
    for i in 0..5 {
        builder = builder.tool_call(
            format!("n{i}").parse().unwrap(),
            "notes.read",
            json!({}),
            json!("ok"),
        );
    }
    let script = builder.complete("done").build();
    let handle = service(true)
        .start(ExecutionRequest::new("go").with_options(options(&script)))
        .await
        .unwrap();
    let Outcome::Failed(error) = handle.outcome().await else {
        panic!("expected the cap to fail the run")
    };
    assert_eq!(error.code(), &ErrorCode::LIMIT_TOOL_CALLS);
    let started = common::kinds(&handle)
        .iter()
        .filter(|k| **k == "tool.call.started")
        .count();
    assert_eq!(started, 3);
}
