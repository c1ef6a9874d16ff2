//! Cancellation, delays (on tokio's paused clock: no wall-clock assertions) and the
//! idempotency of the runtime's lifecycle hooks, proven with the adapter's stats.

mod common;

use std::time::Duration;

use common::{action, context, kinds, start, turn, wait_for};
use futures_util::StreamExt;
use harness_core::adapter::{CancelResult, HarnessAdapter};
use harness_core::error::ErrorCategory;
use harness_core::event::CancelReason;
use harness_core::service::{AdapterService, CancelStatus, Outcome};
use harness_scripted::{ApprovalCall, Script, ScriptedAdapter};
use serde_json::json;
use tokio::time::Instant;

#[tokio::test]
async fn hang_then_cancel_ends_in_run_cancelled_with_one_cancel_and_one_cleanup() {
    let adapter = ScriptedAdapter::new(Script::default());
    let stats = adapter.stats();
    let service = AdapterService::new(adapter);
    let script = Script::builder()
        .text("working")
        .hang()
        .complete("never")
        .build();
    let execution = start(&service, &script).await;
    wait_for(&execution, "message.delta").await;

    assert_eq!(
        execution.cancel(CancelReason::new("user")),
        CancelStatus::Accepted
    );
    assert_eq!(
        execution.cancel(CancelReason::new("again")),
        CancelStatus::AlreadyRequested
    );
    let Outcome::Cancelled(reason) = execution.outcome().await else {
        panic!("{:?}", kinds(&execution));
    };
    assert_eq!(reason.reason.as_deref(), Some("user"));
    let all = kinds(&execution);
    assert_eq!(all.last(), Some(&"run.cancelled"));
    assert_eq!(all.iter().filter(|k| **k == "run.cancelled").count(), 1);
    assert!(!all.contains(&"run.succeeded"));

    let s = stats.snapshot();
    assert_eq!(s.runtimes_created, 1);
    assert_eq!(s.cancel_calls, 1, "{s:?}");
    assert_eq!(s.cleanups, 1, "{s:?}");
    assert_eq!(s.cleanup_calls, 1, "{s:?}");
    assert_eq!(s.live_runtimes(), 0);
}

#[tokio::test]
async fn cancelling_while_awaiting_approval_cleans_up_once() {
    let adapter = ScriptedAdapter::new(Script::default());
    let stats = adapter.stats();
    let service = AdapterService::new(adapter);
    let script = Script::builder()
        .approval([ApprovalCall::new("c1".parse().unwrap(), "t", json!({}))])
        .build();
    let execution = start(&service, &script).await;
    action(&execution).await;
    execution.cancel(CancelReason::default());
    assert!(matches!(execution.outcome().await, Outcome::Cancelled(_)));
    let s = stats.snapshot();
    assert_eq!((s.cancel_calls, s.cleanups, s.cleanup_calls), (1, 1, 1));
}

#[tokio::test]
async fn a_completed_run_cleans_up_once_without_cancelling() {
    let adapter = ScriptedAdapter::quickstart();
    let stats = adapter.stats();
    let service = AdapterService::new(adapter);
    let execution = start(&service, &Script::builder().text("hi").build()).await;
    assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
    let s = stats.snapshot();
    assert_eq!((s.initialize_calls, s.initializations), (1, 1));
    assert_eq!((s.stream_calls, s.resume_calls), (1, 0));
    assert_eq!((s.cancel_calls, s.cleanups, s.cleanup_calls), (0, 1, 1));
}

#[tokio::test(start_paused = true)]
async fn delays_are_honoured_on_the_paused_clock() {
    let service = common::service();
    let script = Script::builder()
        .text("before")
        .delay(Duration::from_secs(30))
        .text("after")
        .complete("waited")
        .build();
    let began = Instant::now();
    let execution = start(&service, &script).await;
    assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
    // Virtual time: the clock only moved because the delay asked it to.
    assert!(began.elapsed() >= Duration::from_secs(30));
    assert_eq!(common::message_text(&execution), ["before", "after"]);
}

#[tokio::test(start_paused = true)]
async fn cancel_ends_a_delay_at_once() {
    let service = common::service();
    let script = Script::builder()
        .text("before")
        .delay(Duration::from_secs(3600))
        .text("after")
        .build();
    let began = Instant::now();
    let execution = start(&service, &script).await;
    wait_for(&execution, "message.delta").await;
    execution.cancel(CancelReason::default());
    assert!(matches!(execution.outcome().await, Outcome::Cancelled(_)));
    assert!(began.elapsed() < Duration::from_secs(3600));
    assert_eq!(common::message_text(&execution), ["before"]);
}

#[tokio::test]
async fn runtime_hooks_are_idempotent() {
    let adapter = ScriptedAdapter::new(Script::builder().text("x").hang().build());
    let stats = adapter.stats();
    let ctx = context(serde_json::Value::Null);
    let exec = ctx.execution_id.clone();
    let runtime = adapter.create_runtime(ctx).await.unwrap();
    runtime.initialize().await.unwrap();
    runtime.initialize().await.unwrap();

    // A cancel hook tripped while the stream is consumed ends the hang and the stream.
    let mut stream = runtime.stream(turn(&exec));
    assert!(stream.next().await.unwrap().is_ok());
    assert_eq!(
        runtime.cancel(CancelReason::default()).await,
        CancelResult::Requested
    );
    let end = stream.next().await.unwrap().unwrap_err();
    assert_eq!(end.category(), ErrorCategory::Cancelled);
    assert!(stream.next().await.is_none());
    drop(stream);
    assert_eq!(
        runtime.cancel(CancelReason::default()).await,
        CancelResult::NothingToCancel
    );

    runtime.cleanup().await;
    runtime.cleanup().await;
    assert_eq!(
        runtime.cancel(CancelReason::default()).await,
        CancelResult::NothingToCancel
    );

    let s = stats.snapshot();
    assert_eq!((s.initialize_calls, s.initializations), (2, 1));
    assert_eq!(s.cancel_calls, 3);
    assert_eq!((s.cleanup_calls, s.cleanups), (2, 1));
    assert_eq!(s.live_runtimes(), 0);
}

#[tokio::test]
async fn cancel_before_the_stream_makes_it_end_cancelled() {
    let adapter = ScriptedAdapter::new(Script::builder().text("never").build());
    let ctx = context(serde_json::Value::Null);
    let exec = ctx.execution_id.clone();
    let runtime = adapter.create_runtime(ctx).await.unwrap();
    assert_eq!(
        runtime.cancel(CancelReason::default()).await,
        CancelResult::NothingToCancel
    );
    let items: Vec<_> = runtime.stream(turn(&exec)).collect().await;
    assert!(matches!(&items[..], [Err(e)] if e.category() == ErrorCategory::Cancelled));
}

#[tokio::test]
async fn the_execution_token_reaches_the_runtime() {
    let adapter = ScriptedAdapter::new(Script::builder().hang().build());
    let ctx = context(serde_json::Value::Null);
    let parent = ctx.cancellation.clone();
    let exec = ctx.execution_id.clone();
    let runtime = adapter.create_runtime(ctx).await.unwrap();
    let stream = runtime.stream(turn(&exec));
    parent.cancel();
    let items: Vec<_> = stream.collect().await;
    assert!(matches!(&items[..], [Err(e)] if e.category() == ErrorCategory::Cancelled));
}
