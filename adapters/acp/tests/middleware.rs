//! The operator's middleware policy on an ACP agent's permission requests, through the
//! service: the same rules as the model loop's and the scripted adapter's tests. Our test
//! agent (`permission` mode) announces `call-1` (`write file`, kind `edit`) and asks
//! permission for it; on `reject` it reports the call failed and says `rejected`.

mod common;

use common::{adapter_for, finish, marker, test_agent, until_action};
use harness_core::action::ActionKind;
use harness_core::event::{EventKind, EventPayload};
use harness_core::middleware::MiddlewareConfig;
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
use serde_json::json;

/// The rules of every adapter's middleware test (`acp.kind.edit` names an ACP agent's file
/// edits). The results rules cannot reach an agent's own tools (the agent runs them and
/// its model reads their results first): the capability report says so.
fn rules(edit: &str) -> MiddlewareConfig {
    serde_json::from_value(json!({
        "tools": [
            {"tool": "files.*", "action": "deny"},
            {"tool": "acp.kind.edit", "action": edit},
            {"tool": "weather.*", "action": "require_approval"}
        ],
        "results": {"maxBytes": 120, "redact": {"secrets": ["sk-live-0123456789"]}},
        "limits": {"maxToolCalls": 3}
    }))
    .unwrap()
}

fn text(events: &[std::sync::Arc<harness_core::event::Event>]) -> String {
    events
        .iter()
        .filter_map(|e| match e.payload() {
            EventPayload::MessageDelta(d) => Some(d.text.as_str()),
            _ => None,
        })
        .collect()
}

/// The worker program that hosts an agent's runtime in its sandbox.
const WORKER: &str = env!("CARGO_BIN_EXE_acp-sandbox-worker");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_permission_request_is_rejected_without_asking_the_caller() {
    denied(test_agent("permission", &marker("middleware-deny"))).await;
}

/// The same with the agent's client hosted in a sandbox by a worker: the policy travels in
/// the worker's `start` message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosted_agent_gets_the_policy_through_the_worker_protocol() {
    let sandbox = harness_sandbox::Sandbox::new(harness_sandbox::SandboxProfile::default())
        .expect("bwrap is installed");
    let agent = test_agent("permission", &marker("middleware-hosted"))
        .in_sandbox(sandbox)
        .hosted_by_worker(WORKER);
    denied(agent).await;
}

async fn denied(agent: harness_acp::AcpAgent) {
    let service = AdapterService::builder(adapter_for(agent))
        .middleware(harness_layers::middleware::compile(&rules("deny")).unwrap())
        .build();
    let execution = service.start(ExecutionRequest::new("go")).await.unwrap();
    let (events, outcome) = finish(&execution).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert!(
        !events
            .iter()
            .any(|e| e.kind() == EventKind::ActionRequested),
        "the caller was asked"
    );
    // The agent got `reject`: it reports the call failed and says so.
    assert_eq!(text(&events), "rejected");
    let denied = events
        .iter()
        .find_map(|e| match e.payload() {
            EventPayload::Native(n) if n.name() == "denied_by_policy" => Some(n.payload().clone()),
            _ => None,
        })
        .expect("a native acp.denied_by_policy event");
    assert_eq!(denied["tool"], "acp.kind.edit");
    assert_eq!(denied["rule"], "acp.kind.edit");
    assert!(
        denied["message"]
            .as_str()
            .unwrap()
            .contains("tools[1] (`acp.kind.edit`)"),
        "{denied}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_and_approval_required_requests_ask_the_caller() {
    for edit in ["allow", "require_approval"] {
        let mark = marker("middleware-ask");
        let service = AdapterService::builder(adapter_for(test_agent("permission", &mark)))
            .middleware(harness_layers::middleware::compile(&rules(edit)).unwrap())
            .build();
        let execution = service.start(ExecutionRequest::new("go")).await.unwrap();
        let action = until_action(&execution).await;
        let ActionKind::ToolApproval(approval) = &action.kind else {
            panic!("{edit}: expected a tool approval")
        };
        assert_eq!(approval.calls()[0].tool(), "write file", "{edit}");
        execution.cancel(harness_core::event::CancelReason::new("test done"));
        let _ = common::outcome(&execution).await;
    }
}
