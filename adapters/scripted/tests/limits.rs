//! Run limits, end to end through the service: each limit a script passes ends the run with
//! its own code and exactly one `run.failed`, after the runtime was cleaned up; a limit not
//! reached changes nothing; a caller narrows the operator's limits and never widens them.

mod common;

use std::time::Duration;

use common::{kinds, options};
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::event::EventPayload;
use harness_core::limits::RunLimits;
use harness_core::service::{AdapterService, ExecutionHandle, ExecutionRequest, Outcome};
use harness_scripted::{ApprovalCall, Script, ScriptedAdapter};
use rstest::rstest;
use serde_json::json;

fn service(limits: RunLimits) -> AdapterService<ScriptedAdapter> {
    AdapterService::builder(ScriptedAdapter::quickstart())
        .limits(limits)
        .build()
}

async fn run(
    service: &AdapterService<ScriptedAdapter>,
    request: ExecutionRequest,
) -> ExecutionHandle {
    let handle = service.start(request).await.unwrap();
    let _ = handle.outcome().await;
    handle
}

fn request(script: &Script) -> ExecutionRequest {
    ExecutionRequest::new("go").with_options(options(script))
}

fn count(handle: &ExecutionHandle, kind: &str) -> usize {
    kinds(handle).iter().filter(|k| **k == kind).count()
}

/// The run's failure, after checking it ended with exactly one terminal event, `run.failed`.
async fn failure(handle: &ExecutionHandle) -> HarnessError {
    let kinds = kinds(handle);
    let terminal: Vec<&str> = kinds
        .iter()
        .copied()
        .filter(|k| matches!(*k, "run.succeeded" | "run.failed" | "run.cancelled"))
        .collect();
    assert_eq!(terminal, ["run.failed"], "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"run.failed"));
    match handle.outcome().await {
        Outcome::Failed(err) => err,
        other => panic!("expected a failure, got {other:?}"),
    }
}

fn message_bytes(handle: &ExecutionHandle) -> usize {
    common::events(handle)
        .iter()
        .map(|e| match e.payload() {
            EventPayload::MessageDelta(d) | EventPayload::ReasoningDelta(d) => d.text.len(),
            _ => 0,
        })
        .sum()
}

fn tool_calls(n: usize) -> Script {
    (0..n)
        .fold(Script::builder(), |b, i| {
            b.tool_call(
                format!("call_{i}").parse().unwrap(),
                "lookup",
                json!({"i": i}),
                json!("found"),
            )
        })
        .complete("done")
        .build()
}

fn text(chunks: u32) -> Script {
    Script::builder()
        .text_repeated("0123456789", chunks)
        .reasoning("and some thinking")
        .complete("done")
        .build()
}

fn turns(n: usize, input: u64, output: u64) -> Script {
    (0..n)
        .fold(Script::builder(), |b, _| {
            b.model_turn(input, output).text("ok")
        })
        .complete("done")
        .build()
}

/// What each limit case runs: the limit, a script that passes it, the code, and what the
/// log must show (the count of an event kind, or the bytes of text) at the end.
enum Kept {
    Kind(&'static str, usize),
    TextBytes(usize),
    EventsAtMost(usize),
}

fn case(name: &str) -> (RunLimits, Script, ErrorCode, Kept) {
    let none = RunLimits::none();
    match name {
        "tool_calls" => (
            none.with_max_tool_calls(3).unwrap(),
            tool_calls(10),
            ErrorCode::LIMIT_TOOL_CALLS,
            // The fourth call is never started: three `tool.call.started`, each completed.
            Kept::Kind("tool.call.started", 3),
        ),
        "output_bytes" => (
            none.with_max_output_bytes(95).unwrap(),
            text(50),
            ErrorCode::LIMIT_OUTPUT_BYTES,
            // 10-byte deltas: the one that would pass 95 bytes is not kept.
            Kept::TextBytes(90),
        ),
        "tokens" => (
            none.with_max_tokens(1000).unwrap(),
            turns(5, 300, 100),
            ErrorCode::LIMIT_TOKENS,
            // The usage that passes the limit reports what was spent: it is kept.
            Kept::Kind("usage", 3),
        ),
        "model_turns" => (
            none.with_max_model_turns(2).unwrap(),
            turns(5, 1, 1),
            ErrorCode::LIMIT_MODEL_TURNS,
            Kept::Kind("usage", 3),
        ),
        "events" => (
            none.with_max_events(50).unwrap(),
            text(1000),
            ErrorCode::EVENT_LIMIT_REACHED,
            Kept::EventsAtMost(51),
        ),
        "wall_time" => (
            none.with_wall_time(Duration::from_millis(200)).unwrap(),
            Script::builder()
                .text("working")
                .delay(Duration::from_secs(60))
                .complete("done")
                .build(),
            ErrorCode::LIMIT_WALL_TIME,
            Kept::Kind("message.delta", 1),
        ),
        other => unreachable!("{other}"),
    }
}

#[rstest]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_limit_ends_the_run_with_its_code_and_one_run_failed(
    #[values(
        "tool_calls",
        "output_bytes",
        "tokens",
        "model_turns",
        "events",
        "wall_time"
    )]
    name: &str,
) {
    let (limits, script, code, kept) = case(name);
    let service = service(limits);
    let started = std::time::Instant::now();
    let handle = run(&service, request(&script)).await;
    let err = failure(&handle).await;
    assert_eq!(err.code(), &code, "{name}: {}", err.public().message);
    assert!(!err.retryable(), "{name}");
    let expected_category = if name == "wall_time" {
        ErrorCategory::Timeout
    } else {
        ErrorCategory::Capacity
    };
    assert_eq!(err.category(), expected_category, "{name}");
    match kept {
        Kept::Kind(kind, n) => assert_eq!(count(&handle, kind), n, "{name}: {:?}", kinds(&handle)),
        Kept::TextBytes(n) => assert_eq!(message_bytes(&handle), n, "{name}"),
        Kept::EventsAtMost(n) => {
            let len = kinds(&handle).len();
            assert!(len <= n, "{name}: {len} events");
        }
    }
    // The runtime was cleaned up, as on any failure.
    assert_eq!(service.adapter().stats().snapshot().cleanups, 1, "{name}");
    // Bounded: nothing waited for the script's own end (the wall-time script sleeps 60 s).
    assert!(started.elapsed() < Duration::from_secs(20), "{name}");
}

/// The same scripts under limits they stay within run as they would with none.
#[rstest]
#[tokio::test]
async fn a_limit_not_reached_changes_nothing(
    #[values(
        "tool_calls",
        "output_bytes",
        "tokens",
        "model_turns",
        "events",
        "wall_time"
    )]
    name: &str,
) {
    let (script, limits) = match name {
        "tool_calls" => (tool_calls(10), RunLimits::none().with_max_tool_calls(10)),
        // 500 bytes of text and 17 of reasoning.
        "output_bytes" => (text(50), RunLimits::none().with_max_output_bytes(517)),
        "tokens" => (turns(5, 300, 100), RunLimits::none().with_max_tokens(2000)),
        "model_turns" => (turns(5, 1, 1), RunLimits::none().with_max_model_turns(5)),
        "events" => (text(10), RunLimits::none().with_max_events(16)),
        "wall_time" => (
            text(10),
            RunLimits::none().with_wall_time(Duration::from_secs(60)),
        ),
        other => unreachable!("{other}"),
    };
    let free = run(&service(RunLimits::none()), request(&script)).await;
    let bounded = run(&service(limits.unwrap()), request(&script)).await;
    assert!(
        matches!(bounded.outcome().await, Outcome::Succeeded(_)),
        "{name}"
    );
    assert_eq!(kinds(&bounded), kinds(&free), "{name}");
    assert_eq!(message_bytes(&bounded), message_bytes(&free), "{name}");
}

#[tokio::test]
async fn a_caller_narrows_the_operators_limits_and_cannot_widen_them() {
    let operator = RunLimits::none().with_max_tool_calls(3).unwrap();
    let service = service(operator);
    // A caller asking for more (on the wire, as the server passes it) still gets 3.
    let wider: ExecutionRequest = serde_json::from_value(json!({
        "message": "go",
        "options": options(&tool_calls(10)),
        "limits": {"maxToolCalls": 100, "maxOutputBytes": 1_000_000}
    }))
    .unwrap();
    let handle = run(&service, wider).await;
    assert_eq!(failure(&handle).await.code(), &ErrorCode::LIMIT_TOOL_CALLS);
    assert_eq!(count(&handle, "tool.call.started"), 3);
    // A caller asking for less gets less.
    let narrower =
        request(&tool_calls(10)).with_limits(RunLimits::none().with_max_tool_calls(2).unwrap());
    let handle = run(&service, narrower).await;
    assert_eq!(failure(&handle).await.code(), &ErrorCode::LIMIT_TOOL_CALLS);
    assert_eq!(count(&handle, "tool.call.started"), 2);
    // A caller cannot remove a limit either: none on the request is the operator's.
    let handle = run(&service, request(&tool_calls(10))).await;
    assert_eq!(count(&handle, "tool.call.started"), 3);
    // A caller may add a limit the operator did not set.
    let handle = run(
        &service,
        request(&text(50)).with_limits(RunLimits::none().with_max_output_bytes(20).unwrap()),
    )
    .await;
    assert_eq!(
        failure(&handle).await.code(),
        &ErrorCode::LIMIT_OUTPUT_BYTES
    );
    assert_eq!(message_bytes(&handle), 20);
    // A zero limit on the wire is refused when the request is read, naming the field.
    let err = serde_json::from_value::<ExecutionRequest>(json!({
        "message": "go", "limits": {"maxToolCalls": 0}
    }))
    .unwrap_err();
    assert!(err.to_string().contains("`maxToolCalls` is 0"), "{err}");
}

/// Awaiting an answer counts too: past its wall time the action is withdrawn
/// (`run.running`) and the run fails with `LIMIT_WALL_TIME`, after the cancel hook and
/// cleanup.
#[tokio::test]
async fn the_wall_time_runs_out_while_awaiting_an_answer() {
    let script = Script::builder()
        .approval([ApprovalCall::new(
            "call_1".parse().unwrap(),
            "write_file",
            json!({"path": "a.txt"}),
        )])
        .complete("done")
        .build();
    let service = service(
        RunLimits::none()
            .with_wall_time(Duration::from_millis(300))
            .unwrap(),
    );
    let handle = service.start(request(&script)).await.unwrap();
    common::wait_for(&handle, "run.awaiting_approval").await;
    let err = failure_when_done(&handle).await;
    assert_eq!(err.code(), &ErrorCode::LIMIT_WALL_TIME);
    let kinds = kinds(&handle);
    assert_eq!(
        kinds[kinds.len() - 2..],
        ["run.running", "run.failed"],
        "{kinds:?}"
    );
    let stats = service.adapter().stats().snapshot();
    assert_eq!((stats.cancel_calls, stats.cleanups), (1, 1));
}

async fn failure_when_done(handle: &ExecutionHandle) -> HarnessError {
    let _ = handle.outcome().await;
    failure(handle).await
}
