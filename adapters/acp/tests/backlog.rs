//! The queue between the agent's output and the runtime is bounded: an agent flooding updates
//! while the run waits on an approval is held back (backpressure), the run still answers
//! correctly, and no task or process outlives the execution. With our own scriptable agent
//! (`acp-test-agent` modes `flood`, `flood-init`, `detach`).

mod common;

use std::time::Duration;

use common::{
    adapter_for, approve_all, assert_no_process_left, first_segment, is, logged_text, marker,
    outcome, processes_with, read_until, runtime, start, test_agent, until_action,
};
use harness_acp::{AcpAdapter, AcpAgent, INBOUND_LIMIT};
use harness_core::action::ActionKind;
use harness_core::adapter::AdapterEvent;
use harness_core::error::ErrorCategory;
use harness_core::event::{CancelReason, EventKind};
use harness_core::id::Cursor;
use harness_core::service::Outcome;

/// Updates `flood` sends while its permission request is unanswered.
const FLOOD: usize = 100_000;

fn flood_agent(mode: &str, mark: &str, grace: Duration) -> AcpAgent {
    test_agent(mode, mark).with_cancel_grace(grace)
}

/// Waits (bounded) until a connection of `adapter` stopped reading its agent's output
/// because [`INBOUND_LIMIT`] messages were waiting for the runtime.
async fn until_held_back(adapter: &AcpAdapter) {
    let held = async {
        while adapter.stats().snapshot().inbound_stalls == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(common::WAIT, held)
        .await
        .expect("the connection is held back within the bounded wait");
}

fn assert_bounded(adapter: &AcpAdapter) {
    let stats = adapter.stats().snapshot();
    assert!(
        stats.inbound_peak >= 1 && stats.inbound_peak <= INBOUND_LIMIT as u64,
        "at most {INBOUND_LIMIT} messages wait for the runtime: {stats:?}"
    );
}

/// Defect: the queue from the connection to the runtime was unbounded, so an agent flooding
/// updates while the run waited on an approval (the runtime not polled) grew the adapter's
/// memory without bound. Now the connection stops reading at [`INBOUND_LIMIT`] waiting
/// messages, and the approval, once given, still finishes the run with every update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_while_paused_on_an_approval_is_held_back_and_the_approval_finishes_the_run() {
    let mark = marker("flood-approve");
    let adapter = adapter_for(flood_agent("flood", &mark, common::WAIT));
    let execution = start(&adapter).await;
    let action = until_action(&execution).await;
    let ActionKind::ToolApproval(approval) = &action.kind else {
        panic!("not an approval");
    };
    // The run is paused and nothing consumes: the agent's flood is held back.
    until_held_back(&adapter).await;
    assert_bounded(&adapter);
    execution
        .respond(approve_all(&action, approval).into())
        .await
        .expect("the answer is accepted");
    assert!(matches!(outcome(&execution).await, Outcome::Succeeded(_)));
    // Every update arrived, in order, none dropped.
    assert_eq!(
        logged_text(&execution),
        format!("{}done", ".".repeat(FLOOD))
    );
    assert_bounded(&adapter);
    assert_eq!(adapter.stats().snapshot().updates_dropped, 0);
    drop(execution);
    assert_no_process_left(&mark).await;
}

/// A cancel while the flood is held back ends the run `cancelled`, and no process is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_while_a_flood_is_held_back_ends_the_run_cancelled() {
    let mark = marker("flood-cancel");
    let adapter = adapter_for(flood_agent("flood", &mark, Duration::from_millis(500)));
    let execution = start(&adapter).await;
    read_until(&execution, Cursor::START, |e| {
        is(e, EventKind::ActionRequested) || e.kind().is_terminal()
    })
    .await;
    until_held_back(&adapter).await;
    let _request = execution.cancel(CancelReason::new("test"));
    assert!(matches!(outcome(&execution).await, Outcome::Cancelled(_)));
    assert_bounded(&adapter);
    drop(execution);
    assert_no_process_left(&mark).await;
}

/// Waiting could deadlock where the cancel waits for the turn's end, which is behind the
/// flood on the agent's stdout, while nobody polls the run: once cancelled, the connection
/// reads on (dropping updates past the bound), so the agent ends its turn itself — a graceful
/// cancel, not a kill after the grace period (here as long as a test may wait).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_a_held_back_flood_is_graceful() {
    let mark = marker("flood-graceful");
    let adapter = adapter_for(flood_agent("flood", &mark, common::WAIT));
    let runtime = runtime(&adapter).await;
    let items = first_segment(&*runtime).await;
    let Some(Ok(AdapterEvent::Action(interrupt))) = items.last() else {
        panic!("the segment did not end on an interrupt: {items:?}");
    };
    assert!(matches!(interrupt.kind, ActionKind::ToolApproval(_)));
    until_held_back(&adapter).await;
    tokio::time::timeout(common::WAIT, runtime.cancel(CancelReason::new("test")))
        .await
        .expect("the cancel returns within the bounded wait");
    let stats = adapter.stats().snapshot();
    assert_eq!(
        (stats.graceful_cancels, stats.forced_cancels),
        (1, 0),
        "the agent ended its turn itself: {stats:?}"
    );
    assert!(stats.inbound_peak <= INBOUND_LIMIT as u64, "{stats:?}");
    runtime.cleanup().await;
    assert_no_process_left(&mark).await;
}

/// Waiting would deadlock during the handshake, when nothing consumes yet: an agent that
/// sends more than [`INBOUND_LIMIT`] updates before answering `session/new` fails the start
/// as `protocol`, naming the limit, instead of hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_before_the_session_is_open_fails_the_start_naming_the_limit() {
    let mark = marker("flood-init");
    let adapter = adapter_for(flood_agent("flood-init", &mark, Duration::from_millis(500)));
    let execution = start(&adapter).await;
    let Outcome::Failed(err) = outcome(&execution).await else {
        panic!("expected a failure");
    };
    assert_eq!(err.category(), ErrorCategory::Protocol, "{err:?}");
    assert!(
        err.message().contains(&INBOUND_LIMIT.to_string()) && err.message().contains("session/new"),
        "{err:?}"
    );
    assert_bounded(&adapter);
    drop(execution);
    assert_no_process_left(&mark).await;
}

/// Defect: the stderr reader (and the connection) ran until the agent's stderr (stdout)
/// closed, so a child the agent moved out of its process group, holding them open, kept the
/// tasks alive after the execution. Cleanup now stops every task the agent's connection
/// spawned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_task_outlives_an_execution_whose_agent_left_a_detached_child() {
    let mark = marker("detach");
    let adapter = adapter_for(flood_agent("detach", &mark, Duration::from_millis(500)));
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let runtime = runtime(&adapter).await;
    let items = first_segment(&*runtime).await;
    assert!(
        matches!(items.last(), Some(Ok(AdapterEvent::Completed(_)))),
        "{items:?}"
    );
    assert!(metrics.num_alive_tasks() > before, "the agent's tasks run");
    runtime.cleanup().await;
    drop(runtime);
    // Cleanup hands the agent's group to a reaper and returns: wait until it is reaped.
    let reaped = async {
        while adapter.stats().snapshot().reaping > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), reaped)
        .await
        .expect("the agent's group is reaped, bounded");
    // The detached child (outside the agent's group, by design out of the adapter's reach)
    // still holds the agent's stdout and stderr open.
    let detached = processes_with(&mark);
    assert_eq!(detached.len(), 1, "the detached child lives: {detached:?}");
    let ended = async {
        while metrics.num_alive_tasks() > before {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let ended = tokio::time::timeout(Duration::from_secs(10), ended).await;
    let alive = metrics.num_alive_tasks();
    for pid in detached {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    assert!(
        ended.is_ok(),
        "tasks outlive the execution: {alive} alive, {before} before"
    );
    assert_no_process_left(&mark).await;
}
