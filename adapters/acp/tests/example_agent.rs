//! The adapter against a real third-party agent: the example agent shipped in the npm package
//! `@zed-industries/agent-client-protocol` 0.4.5, run with `tsx` (installed by
//! `.ci/install-acp.sh`). It needs no network and no API key.

mod common;

use std::time::Duration;

use common::{
    adapter_for, assert_no_process_left, example_agent, finish, is, kinds, marker, outcome,
    read_until, text, until_action,
};
use harness_core::action::{ActionKind, ApprovalResponse, DecisionKind, ToolDecision};
use harness_core::event::{CancelReason, EventKind, EventPayload};
use harness_core::id::Cursor;
use harness_core::service::{AdapterService, ExecutionRequest, Outcome, ServiceConfig};
use tower::ServiceExt;

async fn run_to_approval(
    decision: DecisionKind,
) -> (
    Vec<std::sync::Arc<harness_core::event::Event>>,
    Outcome,
    String,
) {
    let mark = marker("approval");
    let service = AdapterService::new(adapter_for(example_agent(&mark)));
    let execution = service
        .oneshot(ExecutionRequest::new("update the config"))
        .await
        .expect("execution starts");

    let request = until_action(&execution).await;
    let ActionKind::ToolApproval(approval) = &request.kind else {
        panic!("expected a tool approval");
    };
    let call = &approval.calls()[0];
    assert_eq!(call.call_id().as_str(), "call_2");
    assert_eq!(call.tool(), "Modifying critical configuration file");
    assert!(call.allows(DecisionKind::Approve) && call.allows(DecisionKind::Reject));
    assert!(!call.allows(DecisionKind::Edit));

    let answer = match decision {
        DecisionKind::Approve => ToolDecision::approve(call.call_id().clone()),
        _ => ToolDecision::reject(call.call_id().clone()),
    };
    execution
        .respond(ApprovalResponse::decide(request.id.clone(), request.revision, [answer]).into())
        .await
        .expect("the answer is accepted");

    let (all, outcome) = finish(&execution).await;
    drop(execution);
    (all, outcome, mark)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_streams_text_and_tool_calls_and_its_permission_request_is_approved() {
    let (events, outcome, mark) = run_to_approval(DecisionKind::Approve).await;
    let kinds = kinds(&events);
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert_eq!(
        kinds,
        [
            "run.queued",
            "run.starting",
            "run.running",
            "native",            // acp.initialized: the negotiated version and capabilities
            "message.delta",     // "I'll help you with that..."
            "tool.call.started", // call_1, Reading project files
            "tool.call.completed",
            "message.delta",
            "tool.call.started", // call_2, needs permission
            // The permission request names another path than the announced call: the
            // input the approval is about.
            "tool.call.updated",
            "action.requested",
            "run.awaiting_approval",
            "action.resolved",
            "run.running",
            "tool.call.completed", // call_2 completed after approval
            "message.delta",
            "run.succeeded",
        ]
    );
    let said = text(&events);
    assert!(said.contains("I'll help you with that"), "{said}");
    assert!(
        said.contains("successfully updated the configuration"),
        "{said}"
    );
    let EventPayload::Native(init) = events[3].payload() else {
        panic!("expected the acp.initialized native event");
    };
    assert_eq!(init.name(), "initialized");
    assert_eq!(init.payload()["protocolVersion"], 1);
    assert_eq!(init.payload()["agentCapabilities"]["loadSession"], false);
    assert_no_process_left(&mark).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_permission_request_selects_the_reject_option() {
    let (events, outcome, mark) = run_to_approval(DecisionKind::Reject).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    let rejected = events.iter().any(|e| {
        matches!(e.payload(), EventPayload::ToolCallCompleted(c)
            if c.call_id.as_str() == "call_2"
            && matches!(c.outcome, harness_core::event::ToolCallOutcome::Rejected { .. }))
    });
    assert!(rejected, "{:?}", kinds(&events));
    let said = text(&events);
    assert!(said.contains("skip the configuration update"), "{said}");
    assert_no_process_left(&mark).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_mid_turn_ends_in_run_cancelled_and_leaves_no_process() {
    let mark = marker("cancel");
    // Generous bounds, so that a loaded machine cannot turn the graceful cancel into a kill.
    let adapter = adapter_for(example_agent(&mark).with_cancel_grace(Duration::from_secs(10)));
    let stats = adapter.stats();
    let config = ServiceConfig {
        cancel_grace: Duration::from_secs(20),
        cleanup_deadline: Duration::from_secs(10),
        ..ServiceConfig::default()
    };
    let service = AdapterService::with_config(adapter, config);
    let execution = service
        .oneshot(ExecutionRequest::new("update the config"))
        .await
        .expect("execution starts");
    // Cancel once the first tool call has started: the agent is mid-turn.
    read_until(&execution, Cursor::START, |e| {
        is(e, EventKind::ToolCallStarted) || e.kind().is_terminal()
    })
    .await;
    assert!(!common::processes_with(&mark).is_empty(), "the agent runs");
    let _request = execution.cancel(CancelReason::new("test"));
    let events = read_until(&execution, Cursor::START, |e| e.kind().is_terminal()).await;
    assert_eq!(kinds(&events).last(), Some(&"run.cancelled"));
    let outcome = outcome(&execution).await;
    assert!(matches!(outcome, Outcome::Cancelled(_)), "{outcome:?}");
    // The agent honoured session/cancel (its turn ended with stop reason `cancelled`)
    // within the grace period: nothing had to be killed to cancel.
    let stats = stats.snapshot();
    assert_eq!(
        (stats.graceful_cancels, stats.forced_cancels),
        (1, 0),
        "{stats:?}"
    );
    assert_no_process_left(&mark).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_while_awaiting_approval_ends_in_run_cancelled() {
    let mark = marker("cancel-approval");
    let service = AdapterService::new(adapter_for(example_agent(&mark)));
    let execution = service
        .oneshot(ExecutionRequest::new("update the config"))
        .await
        .expect("execution starts");
    read_until(&execution, Cursor::START, |e| {
        is(e, EventKind::ActionRequested) || e.kind().is_terminal()
    })
    .await;
    let _request = execution.cancel(CancelReason::new("test"));
    let events = read_until(&execution, Cursor::START, |e| e.kind().is_terminal()).await;
    assert_eq!(kinds(&events).last(), Some(&"run.cancelled"));
    assert_no_process_left(&mark).await;
}
