//! Cancels at the edges of a run (while the agent starts, after `session/cancel`), probes that
//! are dropped, output that is not UTF-8, sequential approvals and the turn's trace context,
//! with our own scriptable agent (`acp-test-agent`). No process is left behind.

mod common;

use std::time::Duration;

use common::{
    adapter_for, approve_all, assert_no_process_left, first_segment, kinds, logged_text, marker,
    outcome, processes_with, read_until, runtime, start, test_agent,
};
use harness_acp::AcpOptions;
use harness_core::action::ActionKind;
use harness_core::adapter::{AgentConfig, DeploymentContext, HarnessAdapter};
use harness_core::error::ErrorCategory;
use harness_core::event::{CancelReason, EventKind, EventPayload, ToolCallOutcome};
use harness_core::id::Cursor;
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
use harness_core::trace::TraceContext;
use tower::ServiceExt;

/// Waits (bounded) until `n` processes carry `mark`, while `pending` has not returned.
async fn until_running<F: Future + Unpin>(mark: &str, n: usize, pending: &mut F)
where
    F::Output: std::fmt::Debug,
{
    let running = async {
        while processes_with(mark).len() < n {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        done = pending => panic!("returned before the agent started: {done:?}"),
        waited = tokio::time::timeout(common::WAIT, running) => {
            waited.expect("the agent and its child run within the bounded wait");
        }
    }
}

/// Defect: a cancel while the agent had not answered `initialize` was "nothing to cancel",
/// and `initialize` waited for the agent forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_while_the_agent_starts_ends_initialize_and_the_process_group() {
    let mark = marker("slow-init");
    let adapter = adapter_for(test_agent("slow-init", &mark));
    let runtime = runtime(&adapter).await;
    let mut init = runtime.initialize();
    // The agent and the child it spawned (ignoring SIGTERM) run; initialize is unanswered.
    until_running(&mark, 2, &mut init).await;
    runtime.cancel(CancelReason::new("test")).await;
    let result = tokio::time::timeout(common::WAIT, init)
        .await
        .expect("initialize returns after the cancel");
    let err = result.expect_err("a cancelled start");
    assert_eq!(err.category(), ErrorCategory::Cancelled, "{err:?}");
    // Idempotent: the same answer again, no second agent.
    let again = runtime.initialize().await.expect_err("still cancelled");
    assert_eq!(again.category(), ErrorCategory::Cancelled);
    assert_eq!(adapter.stats().snapshot().agents_started, 1);
    runtime.cleanup().await;
    assert_no_process_left(&mark).await;
}

/// Defect: an `evaluate` dropped while its probe waited for `initialize` (a caller's timeout,
/// like the conformance gate's) killed the agent but left the rest of its process group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_probe_takes_the_agents_process_group_with_it() {
    let mark = marker("slow-init-probe");
    let adapter = adapter_for(test_agent("slow-init", &mark));
    let config = AgentConfig::default();
    let deployment = DeploymentContext::default();
    let mut probing = adapter.evaluate(&config, &deployment);
    until_running(&mark, 2, &mut probing).await;
    drop(probing);
    assert_no_process_left(&mark).await;
}

/// Defect: a permission request the agent sent after `session/cancel` became a new approval
/// (never answered `cancelled`), and the cancel had to kill the agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_after_a_cancel_are_answered_cancelled_not_raised() {
    let mark = marker("ask-after-cancel");
    let adapter = adapter_for(test_agent("ask-after-cancel", &mark));
    let execution = start(&adapter).await;
    read_until(&execution, Cursor::START, |e| {
        e.kind() == EventKind::MessageDelta || e.kind().is_terminal()
    })
    .await;
    let _request = execution.cancel(CancelReason::new("test"));
    assert!(matches!(outcome(&execution).await, Outcome::Cancelled(_)));
    let kinds = kinds(&execution.log().snapshot(Cursor::START));
    assert!(!kinds.contains(&"action.requested"), "{kinds:?}");
    assert!(!logged_text(&execution).contains("not cancelled"));
    let stats = adapter.stats().snapshot();
    assert_eq!(
        (stats.graceful_cancels, stats.forced_cancels),
        (1, 0),
        "the agent ended its turn itself: {stats:?}"
    );
    drop(execution);
    assert_no_process_left(&mark).await;
}

/// Defect: a line that is not UTF-8 failed the run as `unavailable` (an I/O error of the
/// pipe) instead of `protocol`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_that_is_not_utf8_ends_as_protocol() {
    let mark = marker("binary");
    let execution = start(&adapter_for(test_agent("binary", &mark))).await;
    let Outcome::Failed(err) = outcome(&execution).await else {
        panic!("expected a failure");
    };
    assert_eq!(err.category(), ErrorCategory::Protocol, "{err:?}");
    drop(execution);
    assert_no_process_left(&mark).await;
}

/// Two permission requests in one turn, the second sent once the first is answered: two
/// actions, each answered once, each call completed as decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_permission_requests_are_sequential_actions() {
    let mark = marker("sequential");
    let execution = start(&adapter_for(test_agent("sequential", &mark))).await;
    let mut answered = Vec::new();
    for call in ["t1", "t2"] {
        let events = read_until(&execution, Cursor::START, |e| {
            matches!(e.payload(), EventPayload::ActionRequested(a) if !answered.contains(&a.id))
                || e.kind().is_terminal()
        })
        .await;
        let Some(EventPayload::ActionRequested(action)) = events.last().map(|e| e.payload()) else {
            panic!("no action for {call}: {events:?}");
        };
        let ActionKind::ToolApproval(approval) = &action.kind else {
            panic!("not an approval");
        };
        let calls: Vec<String> = approval
            .calls()
            .iter()
            .map(|c| c.call_id().to_string())
            .collect();
        assert_eq!(calls, [call]);
        execution
            .respond(approve_all(action, approval).into())
            .await
            .expect("the answer is accepted");
        answered.push(action.id.clone());
    }
    assert!(matches!(outcome(&execution).await, Outcome::Succeeded(_)));
    let completed: Vec<String> = execution
        .log()
        .snapshot(Cursor::START)
        .iter()
        .filter_map(|e| match e.payload() {
            EventPayload::ToolCallCompleted(c)
                if matches!(c.outcome, ToolCallOutcome::Success { .. }) =>
            {
                Some(c.call_id.to_string())
            }
            _ => None,
        })
        .collect();
    assert_eq!(completed, ["t1", "t2"]);
    assert!(logged_text(&execution).contains("both asked"));
    drop(execution);
    assert_no_process_left(&mark).await;
}

/// The turn's W3C trace context reaches the agent in the `_meta` of `session/prompt`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_turns_traceparent_reaches_the_agent_in_the_prompts_meta() {
    let mark = marker("trace");
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let context: TraceContext = traceparent.parse().expect("a valid traceparent");
    let adapter = adapter_for(test_agent("trace", &mark));
    let execution = AdapterService::new(adapter)
        .oneshot(ExecutionRequest::new("go").with_trace_context(context))
        .await
        .expect("execution starts");
    assert!(matches!(outcome(&execution).await, Outcome::Succeeded(_)));
    assert_eq!(logged_text(&execution), traceparent);
    drop(execution);
    assert_no_process_left(&mark).await;
    // Without a trace context, nothing is sent.
    let none = marker("trace-none");
    let execution = start(&adapter_for(test_agent("trace", &none))).await;
    assert!(matches!(outcome(&execution).await, Outcome::Succeeded(_)));
    assert_eq!(logged_text(&execution), "no traceparent");
    drop(execution);
    assert_no_process_left(&none).await;
}

/// Defect: an answer that lost the race with a cancel (the cancel answered the permission
/// request `cancelled` first) failed the resumed segment as `protocol` instead of ending it
/// with the cancelled turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_loses_the_race_with_a_cancel_ends_cancelled_not_protocol() {
    use futures_util::StreamExt;
    use harness_core::action::ActionKind;
    use harness_core::action::ActionRequest;
    use harness_core::adapter::{AdapterEvent, ResumeDecision};

    let mark = marker("permission-race");
    let adapter = adapter_for(test_agent("permission", &mark));
    let runtime = runtime(&adapter).await;
    let items = first_segment(&*runtime).await;
    let Some(Ok(AdapterEvent::Action(interrupt))) = items.last() else {
        panic!("the segment did not end on an interrupt: {items:?}");
    };
    let ActionKind::ToolApproval(approval) = &interrupt.kind else {
        panic!("not an approval");
    };
    let action = ActionRequest::new(ActionKind::ToolApproval(approval.clone()))
        .with_id(interrupt.id.clone());
    let response = approve_all(&action, approval);
    let decision = ResumeDecision::new(action.validate(response.into()).expect("valid"));
    // The cancel wins: it answers the request `cancelled`, and the agent ends its turn.
    runtime.cancel(CancelReason::new("test")).await;
    let items: Vec<_> = tokio::time::timeout(common::WAIT, runtime.resume(decision).collect())
        .await
        .expect("the resumed segment ends");
    let Some(Err(err)) = items.last() else {
        panic!("the resumed segment did not fail: {items:?}");
    };
    assert_eq!(err.category(), ErrorCategory::Cancelled, "{err:?}");
    runtime.cleanup().await;
    assert_no_process_left(&mark).await;
}

/// The agent is probed once per adapter: concurrent `evaluate`s share one probe (none holds
/// a lock across it), later ones read its result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_evaluates_share_one_probe() {
    let mark = marker("probe-echo");
    let adapter = adapter_for(test_agent("echo", &mark));
    let deployment = DeploymentContext::default();
    let config = AgentConfig::default();
    let evaluates = (0..8).map(|_| adapter.evaluate(&config, &deployment));
    let reports = tokio::time::timeout(common::WAIT, futures_util::future::join_all(evaluates))
        .await
        .expect("the evaluates end within the bounded wait");
    for report in reports {
        report.expect("the echo agent is probed");
    }
    adapter
        .evaluate(&config, &deployment)
        .await
        .expect("the cached probe");
    assert_eq!(adapter.stats().snapshot().probes, 1);
    assert_no_process_left(&mark).await;
}

/// A probe dropped mid-way (a caller's timeout) leaves nothing cached: the next `evaluate`
/// probes again (this agent never answers `initialize`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_probe_is_retried_by_the_next_evaluate() {
    let mark = marker("probe-retry");
    let adapter = adapter_for(test_agent("slow-init", &mark));
    let deployment = DeploymentContext::default();
    let config = AgentConfig::default();
    let mut probing = adapter.evaluate(&config, &deployment);
    until_running(&mark, 2, &mut probing).await;
    drop(probing);
    assert_no_process_left(&mark).await;
    let mut again = adapter.evaluate(&config, &deployment);
    until_running(&mark, 2, &mut again).await;
    drop(again);
    assert_eq!(adapter.stats().snapshot().probes, 2, "probed again");
    assert_no_process_left(&mark).await;
}

/// Defect: the probe cache was one lock held for a whole probe, so an agent slow to answer
/// `initialize` (up to `PROBE_TIMEOUT`, 30 s) held up `evaluate` for every other agent of
/// the adapter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_probe_does_not_hold_up_evaluate_for_another_agent() {
    let slow_mark = marker("slow-probe");
    let echo_mark = marker("probe-echo");
    let adapter = adapter_for(test_agent("slow-init", &slow_mark))
        .with_agent("echo", test_agent("echo", &echo_mark))
        .expect("a valid agent");
    let deployment = DeploymentContext::default();
    let slow = AgentConfig::default();
    let echo = AgentConfig {
        options: AcpOptions::named("echo").to_value(),
        ..AgentConfig::default()
    };
    let mut probing = adapter.evaluate(&slow, &deployment);
    until_running(&slow_mark, 2, &mut probing).await;
    // Well under PROBE_TIMEOUT: the slow probe must not be what this one waits for.
    let other = tokio::time::timeout(
        Duration::from_secs(10),
        adapter.evaluate(&echo, &deployment),
    )
    .await
    .expect("evaluate of another agent does not wait for the slow probe");
    other.expect("the echo agent is probed");
    drop(probing);
    assert_no_process_left(&slow_mark).await;
    assert_no_process_left(&echo_mark).await;
}

/// Defect: a `tool_call` reported already completed took its output from `rawOutput` only,
/// while a `tool_call_update` fell back to the call's content: both now use `rawOutput`, else
/// the content.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_tool_call_without_raw_output_reports_its_content() {
    let mark = marker("tool-content");
    let execution = start(&adapter_for(test_agent("tool-content", &mark))).await;
    assert!(matches!(outcome(&execution).await, Outcome::Succeeded(_)));
    let events = read_until(&execution, Cursor::START, |e| e.kind().is_terminal()).await;
    let output = events
        .iter()
        .find_map(|e| match e.payload() {
            EventPayload::ToolCallCompleted(done) => match &done.outcome {
                ToolCallOutcome::Success { output } => Some(output.clone()),
                _ => None,
            },
            _ => None,
        })
        .expect("a successful tool.call.completed");
    assert_eq!(
        output,
        serde_json::json!([{"type": "content", "content": {"type": "text", "text": "listing"}}])
    );
    drop(execution);
    assert_no_process_left(&mark).await;
}
