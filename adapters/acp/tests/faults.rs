//! Faults, with our own scriptable ACP agent (the `acp-test-agent` binary of this package, on
//! the agent side of the `agent-client-protocol` crate): each ends as the contract says, with
//! no process left behind.

mod common;

use std::time::{Duration, Instant};

use common::{
    adapter_for, assert_no_process_left, kinds, marker, outcome, read_until, start, test_agent,
    text,
};
use harness_acp::FileAccess;
use harness_core::error::{ErrorCategory, ErrorCode};
use harness_core::event::{CancelReason, EventKind, EventPayload};
use harness_core::id::Cursor;
use harness_core::service::Outcome;

async fn failure(mode: &str) -> (harness_core::error::HarnessError, String) {
    let mark = marker(mode);
    let execution = start(&adapter_for(test_agent(mode, &mark))).await;
    let Outcome::Failed(err) = outcome(&execution).await else {
        panic!("expected a failure");
    };
    drop(execution);
    (err, mark)
}

/// `hang` honours `session/cancel` (a graceful cancel); `ignore-cancel` ignores it and `SIGTERM`,
/// and leaves a child (also ignoring `SIGTERM`) in its process group: the group is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_agent_ends_the_turn_or_is_killed_with_its_group() {
    for (mode, graceful) in [("hang", true), ("ignore-cancel", false)] {
        let mark = marker(mode);
        let adapter = adapter_for(test_agent(mode, &mark));
        let stats = adapter.stats();
        let execution = start(&adapter).await;
        read_until(&execution, Cursor::START, |e| {
            e.kind() == EventKind::MessageDelta || e.kind().is_terminal()
        })
        .await;
        if !graceful {
            // The agent's child runs (its argv carries the marker too).
            let deadline = Instant::now() + Duration::from_secs(10);
            while common::processes_with(&mark).len() < 2 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(
                common::processes_with(&mark).len() >= 2,
                "agent and child run"
            );
        }
        let began = Instant::now();
        let _request = execution.cancel(CancelReason::new("test"));
        assert!(
            matches!(outcome(&execution).await, Outcome::Cancelled(_)),
            "{mode}"
        );
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "bounded by the grace period"
        );
        let events = read_until(&execution, Cursor::START, |e| e.kind().is_terminal()).await;
        assert_eq!(kinds(&events).last(), Some(&"run.cancelled"));
        let stats = stats.snapshot();
        let expected = if graceful { (1, 0) } else { (0, 1) };
        assert_eq!(
            (stats.graceful_cancels, stats.forced_cancels),
            expected,
            "{mode}: {stats:?}"
        );
        assert_no_process_left(&mark).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_agent_ends_unavailable_and_its_stderr_stays_internal() {
    let (err, mark) = failure("crash").await;
    assert_eq!(err.category(), ErrorCategory::Unavailable, "{err:?}");
    assert!(!err.public().message.contains("secret-token-123"));
    assert!(
        err.diagnostic()
            .unwrap_or_default()
            .contains("secret-token-123"),
        "the stderr tail is kept as a diagnostic: {err:?}"
    );
    let diagnostic = err.diagnostic().unwrap_or_default();
    assert!(
        !diagnostic.contains("sk-test-SECRET123") && diagnostic.contains("[REDACTED:bearer]"),
        "the stderr tail is redacted: {diagnostic}"
    );
    assert_no_process_left(&mark).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_output_ends_as_protocol() {
    let (err, mark) = failure("malformed").await;
    assert_eq!(err.category(), ErrorCategory::Protocol, "{err:?}");
    assert_no_process_left(&mark).await;
}

/// The service evaluates every request: the capability probe's `initialize` meets the
/// unsupported version, and the start is refused before any execution runs an agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsupported_protocol_version_is_refused_at_initialize() {
    let mark = marker("bad-version");
    let adapter = adapter_for(test_agent("bad-version", &mark));
    let err = harness_core::service::AdapterService::new(adapter.clone())
        .start(harness_core::service::ExecutionRequest::new("go"))
        .await
        .expect_err("refused at start");
    assert_eq!(err.category(), ErrorCategory::Configuration, "{err:?}");
    assert_eq!(adapter.stats().snapshot().agents_started, 0);
    assert_no_process_left(&mark).await;
}

/// A "panic" of an agent out of process: it panics mid-turn (its panic message and a stack
/// backtrace, holding a secret, on stderr) and aborts. The run ends classified
/// `unavailable`, the secret in no event and not in the public error; the stderr tail,
/// redacted, is the diagnostic's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_panics_mid_turn_ends_the_run_unavailable_and_sanitized() {
    let mark = marker("panic");
    let adapter = adapter_for(test_agent("panic", &mark));
    let execution = harness_core::service::AdapterService::new(adapter)
        .start(harness_core::service::ExecutionRequest::new(
            "token sk-panic-secret-0123456789abcdef",
        ))
        .await
        .expect("execution starts");
    let Outcome::Failed(err) = outcome(&execution).await else {
        panic!("expected a failure");
    };
    assert_eq!(err.category(), ErrorCategory::Unavailable, "{err:?}");
    let public = serde_json::to_string(&err.public()).unwrap();
    assert!(!public.contains("sk-panic-secret"), "{public}");
    let events = read_until(&execution, Cursor::START, |e| e.kind().is_terminal()).await;
    for e in &events {
        let json = serde_json::to_string(&**e).unwrap();
        assert!(!json.contains("panicked"), "{json}");
        assert!(!json.contains("sk-panic-secret"), "{json}");
    }
    let diagnostic = err.diagnostic().unwrap_or_default();
    assert!(diagnostic.contains("panicked"), "{diagnostic}");
    assert!(
        !diagnostic.contains("sk-panic-secret-0123456789abcdef"),
        "{diagnostic}"
    );
    drop(execution);
    assert_no_process_left(&mark).await;
}

async fn fs_answers(files: FileAccess) -> (String, std::path::PathBuf) {
    fs_answers_with(files, "hello").await
}

async fn fs_answers_with(files: FileAccess, inside: &str) -> (String, std::path::PathBuf) {
    let mark = marker("fs");
    let options = test_agent("fs", &mark).with_files(files);
    std::fs::write(options.cwd.join("inside.txt"), inside).expect("write fixture");
    let workspace = options.cwd.clone();
    let execution = start(&adapter_for(options)).await;
    assert!(matches!(outcome(&execution).await, Outcome::Succeeded(_)));
    let events = read_until(&execution, Cursor::START, |e| e.kind().is_terminal()).await;
    drop(execution);
    assert_no_process_left(&mark).await;
    (text(&events), workspace)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_requests_are_served_inside_the_workspace_only_and_terminals_declined() {
    let (said, dir) = fs_answers(FileAccess::ReadWrite).await;
    assert_eq!(
        said,
        "inside:hello;outside:declined;terminal:declined;write:served;escape:declined"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("new.txt")).ok().as_deref(),
        Some("written")
    );
    assert!(!dir.join("../escape.txt").exists());
    let (said, _) = fs_answers(FileAccess::Read).await;
    assert_eq!(
        said,
        "inside:hello;outside:declined;terminal:declined;write:declined;escape:declined"
    );
    let (said, dir) = fs_answers(FileAccess::Decline).await;
    assert_eq!(
        said,
        "inside:error;outside:declined;terminal:declined;write:declined;escape:declined"
    );
    assert!(!dir.join("new.txt").exists());
}

/// Defect: the wire guard took a backlog ticket for lines the crate refuses as malformed (a
/// method together with `result`, an `id` that is `true`), which the crate answered with an
/// error and carried on: the run went on (and the ticket queue drifted). Such a line is not
/// ACP: the run ends `protocol`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_rpc_message_of_no_valid_shape_ends_as_protocol() {
    for mode in ["bad-shape", "bad-id"] {
        let (err, mark) = failure(mode).await;
        assert_eq!(err.category(), ErrorCategory::Protocol, "{mode}: {err:?}");
        assert_no_process_left(&mark).await;
    }
}

/// Defect: an agent that exited while a process it started (in its group) still held its
/// stdout was never noticed (stdout never ended): the run waited for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_exits_while_a_child_holds_its_stdout_ends_unavailable() {
    let mark = marker("orphan-crash");
    let execution = start(&adapter_for(test_agent("orphan-crash", &mark))).await;
    let outcome = tokio::time::timeout(Duration::from_secs(20), execution.outcome())
        .await
        .expect("the run ends once the agent exited");
    let Outcome::Failed(err) = outcome else {
        panic!("expected a failure, got {outcome:?}");
    };
    assert_eq!(err.category(), ErrorCategory::Unavailable, "{err:?}");
    let events = read_until(&execution, Cursor::START, |e| e.kind().is_terminal()).await;
    assert_eq!(kinds(&events).last(), Some(&"run.failed"));
    drop(execution);
    assert_no_process_left(&mark).await;
}

/// An agent that exits while its permission request is pending: the execution does not
/// wait for an answer nothing could continue from (without a timeout layer it waited for
/// ever); it fails `unavailable`, `PROVIDER_LOST`, retryable, after `run.running` (the
/// action withdrawn), and a late answer is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_exits_while_its_permission_request_is_pending_fails_the_run() {
    let mark = marker("approval-exit");
    let execution = start(&adapter_for(test_agent("approval-exit", &mark))).await;
    let Outcome::Failed(err) = outcome(&execution).await else {
        panic!("expected a failure");
    };
    assert_eq!(err.category(), ErrorCategory::Unavailable, "{err:?}");
    assert_eq!(err.code(), &ErrorCode::PROVIDER_LOST);
    assert!(err.retryable());
    let events = read_until(&execution, Cursor::START, |e| e.kind().is_terminal()).await;
    let kinds = kinds(&events);
    let tail = &kinds[kinds.len() - 3..];
    assert_eq!(
        tail,
        ["run.awaiting_approval", "run.running", "run.failed"],
        "{kinds:?}"
    );
    assert!(execution.pending_actions().is_empty());
    let pending = events
        .iter()
        .find_map(|e| match e.payload() {
            EventPayload::ActionRequested(request) => Some(request.clone()),
            _ => None,
        })
        .expect("the permission request was an action");
    let late = execution.respond(pending.approve_all()).await.unwrap_err();
    assert_eq!(late.code(), &ErrorCode::EXECUTION_TERMINAL);
    assert_no_process_left(&mark).await;
}

/// The Tokio runtime shuts down mid-turn: no cleanup future can run, but the runtime is
/// dropped with the driver's task, and dropping the agent kills its process group.
#[test]
fn an_agent_whose_tokio_runtime_shuts_down_mid_turn_leaves_no_process() {
    let mark = marker("hang");
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let execution = tokio.block_on(async {
        let execution = start(&adapter_for(test_agent("hang", &mark))).await;
        read_until(&execution, Cursor::START, |e| {
            e.kind() == EventKind::MessageDelta || e.kind().is_terminal()
        })
        .await;
        assert_eq!(common::processes_with(&mark).len(), 1, "the agent runs");
        execution
    });
    drop(tokio);
    let events = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(read_until(&execution, Cursor::START, |e| {
            e.kind().is_terminal()
        }));
    assert_eq!(kinds(&events).last(), Some(&"run.failed"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !common::processes_with(&mark).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        common::processes_with(&mark),
        Vec::<u32>::new(),
        "processes left behind"
    );
}

/// Defect: a cancel answered only the request raised as the pending action; a second one the
/// agent had already sent stayed queued, unanswered (no segment polled the queue), so the agent
/// never ended its turn and was killed. Every queued request is answered `cancelled`: the cancel
/// is graceful.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_answers_requests_already_queued_and_stays_graceful() {
    let mark = marker("double-ask");
    let adapter =
        adapter_for(test_agent("double-ask", &mark).with_cancel_grace(Duration::from_secs(5)));
    let stats = adapter.stats();
    let execution = start(&adapter).await;
    common::until_action(&execution).await;
    // Both requests have been sent (and the second queued) before the cancel.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _request = execution.cancel(CancelReason::new("test"));
    assert!(matches!(outcome(&execution).await, Outcome::Cancelled(_)));
    let stats = stats.snapshot();
    assert_eq!(
        (stats.graceful_cancels, stats.forced_cancels),
        (1, 0),
        "{stats:?}"
    );
    drop(execution);
    assert_no_process_left(&mark).await;
}

/// Defect: `fs/read_text_file` read a whole file into memory, however large. A file over
/// [`harness_acp::READ_LIMIT`] is answered with an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_over_the_read_limit_is_not_served() {
    let big = "x".repeat(harness_acp::READ_LIMIT + 1);
    let (said, _) = fs_answers_with(FileAccess::Read, &big).await;
    assert!(
        said == "inside:error;outside:declined;terminal:declined;write:declined;escape:declined",
        "served {} bytes",
        said.len()
    );
    let fits = "y".repeat(harness_acp::READ_LIMIT);
    let (said, _) = fs_answers_with(FileAccess::Read, &fits).await;
    assert!(
        said.starts_with(&format!("inside:{fits};")),
        "not served whole: {} bytes",
        said.len()
    );
}

/// Whether process `pid` runs (exists and is not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with(['Z', 'X']))
    })
}

/// Probes the adapter's agent once (the service evaluates every request, and the ACP adapter
/// probes each agent once) and waits until the probe's process group is reaped: the counts
/// after it are the baseline a test's own run is measured from, whether the probe's agent
/// exited on its own or was signalled.
async fn probed(adapter: &harness_acp::AcpAdapter) -> harness_acp::StatsSnapshot {
    use harness_core::adapter::{AgentConfig, DeploymentContext, HarnessAdapter as _};
    adapter
        .evaluate(&AgentConfig::default(), &DeploymentContext::default())
        .await
        .expect("the capability probe");
    until_reaped(&adapter.stats()).await
}

/// Waits (bounded) until the adapter has reaped every process group it stopped.
async fn until_reaped(stats: &harness_acp::Stats) -> harness_acp::StatsSnapshot {
    let deadline = Instant::now() + Duration::from_secs(20);
    while stats.snapshot().reaping > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let snapshot = stats.snapshot();
    assert_eq!(
        snapshot.reaping, 0,
        "groups still being reaped: {snapshot:?}"
    );
    snapshot
}

/// Defect (issue 34, with `claude-agent-acp` 0.101.0): the agent answered `session/cancel`
/// within milliseconds, but the Claude Code process it started ignores `SIGTERM`, and
/// `run.cancelled` waited for the whole process group: the full grace. The run ends as soon as
/// the agent ended the turn `cancelled`; the group is reaped behind it (the child is killed
/// only after the grace), and nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_the_agent_answers_ends_the_run_before_its_group_is_reaped() {
    let grace = Duration::from_secs(5);
    let mark = marker("hang-child");
    let adapter = adapter_for(test_agent("hang-child", &mark).with_cancel_grace(grace));
    let stats = adapter.stats();
    let base = probed(&adapter).await;
    let execution = start(&adapter).await;
    let events = read_until(&execution, Cursor::START, |e| {
        e.kind() == EventKind::MessageDelta || e.kind().is_terminal()
    })
    .await;
    let said = text(&events);
    let child: u32 = said
        .strip_prefix("child ")
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("the agent names its child: {said:?}"));
    assert!(alive(child), "the child runs");

    let began = Instant::now();
    let _request = execution.cancel(CancelReason::new("test"));
    let outcome = outcome(&execution).await;
    let ended = began.elapsed();
    assert!(matches!(outcome, Outcome::Cancelled(_)), "{outcome:?}");
    // Generous (the agent answers in milliseconds), and far below the grace.
    assert!(
        ended < Duration::from_secs(1),
        "run.cancelled came {ended:?} after the cancel, with a grace of {grace:?}"
    );
    assert!(
        alive(child),
        "the child still runs: the terminal event did not wait for it"
    );
    let events = read_until(&execution, Cursor::START, |e| e.kind().is_terminal()).await;
    assert_eq!(kinds(&events).last(), Some(&"run.cancelled"));

    // Behind the terminal event: SIGTERM, which the child ignores, then SIGKILL after the grace.
    let deadline = began + grace + Duration::from_secs(15);
    while alive(child) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let killed = began.elapsed();
    assert!(!alive(child), "the child outlived its group's reaping");
    assert!(
        killed >= grace,
        "the child was killed {killed:?} after the cancel, before the grace ({grace:?})"
    );
    let stats = until_reaped(&stats).await;
    assert_eq!(
        (
            stats.graceful_cancels - base.graceful_cancels,
            stats.forced_cancels - base.forced_cancels,
            stats.groups_reaped - base.groups_reaped,
            stats.groups_terminated - base.groups_terminated,
            stats.groups_killed - base.groups_killed
        ),
        // The run's own agent, counted from the probe's baseline.
        (1, 0, 1, 1, 1),
        "{stats:?}"
    );
    drop(execution);
    assert_no_process_left(&mark).await;
}

/// An agent that never answers the cancel (and ignores `SIGTERM`, as its child does) still
/// ends `cancelled`, once the grace has passed, without waiting for its group, which is
/// killed behind the terminal event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_the_agent_ignores_ends_the_run_once_the_grace_has_passed() {
    let grace = Duration::from_secs(2);
    let mark = marker("ignore-cancel");
    let adapter = adapter_for(test_agent("ignore-cancel", &mark).with_cancel_grace(grace));
    let stats = adapter.stats();
    let base = probed(&adapter).await;
    let execution = start(&adapter).await;
    read_until(&execution, Cursor::START, |e| {
        e.kind() == EventKind::MessageDelta || e.kind().is_terminal()
    })
    .await;
    let began = Instant::now();
    let _request = execution.cancel(CancelReason::new("test"));
    let outcome = outcome(&execution).await;
    let ended = began.elapsed();
    assert!(matches!(outcome, Outcome::Cancelled(_)), "{outcome:?}");
    assert!(
        ended >= grace,
        "ended {ended:?} after the cancel, within the grace"
    );
    assert!(
        ended < grace + Duration::from_secs(3),
        "ended {ended:?} after the cancel, with a grace of {grace:?}"
    );
    let events = read_until(&execution, Cursor::START, |e| e.kind().is_terminal()).await;
    assert_eq!(kinds(&events).last(), Some(&"run.cancelled"));
    let stats = until_reaped(&stats).await;
    assert_eq!(
        (
            stats.graceful_cancels - base.graceful_cancels,
            stats.forced_cancels - base.forced_cancels,
            stats.groups_reaped - base.groups_reaped,
            stats.groups_killed - base.groups_killed
        ),
        // The run's own agent, counted from the probe's baseline.
        (0, 1, 1, 1),
        "{stats:?}"
    );
    drop(execution);
    assert_no_process_left(&mark).await;
}

/// A process group that exited on its own (the agent crashed) is reaped without a signal:
/// its id is never signalled once nothing in it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_that_exited_on_its_own_is_not_signalled() {
    let mark = marker("crash");
    let adapter = adapter_for(test_agent("crash", &mark));
    let stats = adapter.stats();
    let base = probed(&adapter).await;
    let execution = start(&adapter).await;
    assert!(matches!(outcome(&execution).await, Outcome::Failed(_)));
    let stats = until_reaped(&stats).await;
    assert_eq!(
        (
            stats.groups_reaped - base.groups_reaped,
            stats.groups_terminated - base.groups_terminated,
            stats.groups_killed - base.groups_killed
        ),
        // The run's own agent, counted from the probe's baseline.
        (1, 0, 0),
        "{stats:?}"
    );
    drop(execution);
    assert_no_process_left(&mark).await;
}

/// The Tokio runtime shuts down while a cancelled run's process group is still being reaped
/// (its child ignores `SIGTERM`, the grace is long): the reaper is dropped with the runtime
/// and kills the group at once, no orphan waits for the grace.
#[test]
fn a_group_being_reaped_when_its_tokio_runtime_shuts_down_is_killed() {
    let grace = Duration::from_secs(60);
    let mark = marker("hang-child");
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (child, stats) = tokio.block_on(async {
        let adapter = adapter_for(test_agent("hang-child", &mark).with_cancel_grace(grace));
        let execution = start(&adapter).await;
        let events = read_until(&execution, Cursor::START, |e| {
            e.kind() == EventKind::MessageDelta || e.kind().is_terminal()
        })
        .await;
        let child: u32 = text(&events)
            .strip_prefix("child ")
            .and_then(|pid| pid.parse().ok())
            .expect("the agent names its child");
        let _request = execution.cancel(CancelReason::new("test"));
        assert!(matches!(outcome(&execution).await, Outcome::Cancelled(_)));
        (child, adapter.stats())
    });
    assert!(alive(child), "the child runs through the grace");
    assert_eq!(stats.snapshot().reaping, 1, "its group is being reaped");
    let dropped = Instant::now();
    drop(tokio);
    while alive(child) && dropped.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(child), "the child outlived its runtime");
    assert_eq!(stats.snapshot().reaping, 0);
    assert_eq!(
        common::processes_with(&mark),
        Vec::<u32>::new(),
        "processes left behind"
    );
}

/// The agent of a cancelled turn has its process group reaped behind the terminal event: the
/// conversation's next turn waits for that group before it starts its agent and loads the
/// session, since what the group's processes write on their way out (Claude Code's session
/// transcript) is what `session/load` reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_turn_of_a_session_waits_for_the_previous_agents_group() {
    use harness_core::capability::CapabilityKey;
    use harness_core::service::{AdapterService, ExecutionRequest};

    let grace = Duration::from_secs(2);
    let mark = marker("reaped-turn");
    let adapter = adapter_for(test_agent("echo", &mark).with_cancel_grace(grace));
    let service = AdapterService::new(adapter.clone());
    let conversation: harness_core::id::ConversationId =
        "conv_reaped".parse().expect("a valid conversation id");
    let request = |message: &str| {
        ExecutionRequest::new(message)
            .with_conversation(conversation.clone())
            .require(CapabilityKey::SessionMultiTurn)
    };

    let first = service.start(request("hang-child")).await.expect("starts");
    let events = read_until(&first, Cursor::START, |e| {
        e.kind() == EventKind::MessageDelta || e.kind().is_terminal()
    })
    .await;
    let said = text(&events);
    let child: u32 = said
        .strip_prefix("child ")
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("the agent names its child: {said:?}"));
    let began = Instant::now();
    let _request = first.cancel(CancelReason::new("test"));
    assert!(matches!(outcome(&first).await, Outcome::Cancelled(_)));
    assert!(alive(child), "the group is still being reaped");

    let second = service.start(request("again")).await.expect("starts");
    let events = read_until(&second, Cursor::START, |e| {
        e.kind() == EventKind::MessageDelta || e.kind().is_terminal()
    })
    .await;
    let started = began.elapsed();
    assert!(
        !alive(child),
        "the next turn ran while the previous agent's group was alive"
    );
    assert!(
        started >= grace,
        "the next turn ran {started:?} after the cancel, within the grace ({grace:?})"
    );
    assert_eq!(
        kinds(&events).last(),
        Some(&"message.delta"),
        "{:?}",
        kinds(&events)
    );
    let (events, outcome) = common::finish(&second).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert!(
        events.iter().any(|e| matches!(
            e.payload(),
            EventPayload::Native(n) if n.name() == "session_loaded"
        )),
        "the session was loaded: {:?}",
        kinds(&events)
    );
    drop((first, second));
    assert_no_process_left(&mark).await;
}

/// Many concurrent cancels and cleanups of one running runtime: every call returns without
/// waiting for the process group, and the group is stopped once: one reaper, one `SIGTERM`,
/// one `SIGKILL` (its child ignores `SIGTERM`), nothing left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_cancels_and_cleanups_stop_the_group_once() {
    use futures_util::StreamExt as _;
    use harness_core::adapter::{AdapterEvent, CancelResult};

    let grace = Duration::from_secs(1);
    let mark = marker("hang-child");
    let adapter = adapter_for(test_agent("hang-child", &mark).with_cancel_grace(grace));
    let stats = adapter.stats();
    let runtime = common::runtime(&adapter).await;
    runtime.initialize().await.expect("initialized");
    let mut stream = runtime.stream(common::turn(&*runtime));
    // Until the agent has named its child (the turn then waits for the cancel).
    let said = tokio::time::timeout(common::WAIT, async {
        while let Some(item) = stream.next().await {
            if let Ok(AdapterEvent::Content(content)) = item
                && format!("{content:?}").contains("child ")
            {
                return;
            }
        }
        panic!("the turn ended before the agent named its child");
    });
    said.await
        .expect("the child is named within the bounded wait");
    drop(stream);

    let began = Instant::now();
    let calls = (0..64).map(|i| {
        let runtime = &runtime;
        async move {
            if i % 2 == 0 {
                Some(runtime.cancel(CancelReason::new("test")).await)
            } else {
                runtime.cleanup().await;
                None
            }
        }
    });
    let results = futures_util::future::join_all(calls).await;
    let returned = began.elapsed();
    assert!(
        returned < grace,
        "the calls took {returned:?}: they waited for the group"
    );
    assert!(
        results
            .iter()
            .flatten()
            .all(|r| matches!(r, CancelResult::Requested | CancelResult::NothingToCancel)),
        "{results:?}"
    );
    let stats = until_reaped(&stats).await;
    assert_eq!(
        (
            stats.groups_reaped,
            stats.groups_terminated,
            stats.groups_killed
        ),
        (1, 1, 1),
        "{stats:?}"
    );
    drop(runtime);
    assert_no_process_left(&mark).await;
}
