//! Errors of every category, panics and malformed event orders all end as `run.failed`, with
//! only the safe projection on the wire.

mod common;

use common::{events, kinds, start, wire};
use harness_core::error::{ErrorCategory, ErrorCode, PublicError};
use harness_core::event::EventPayload;
use harness_core::service::{AdapterService, ExecutionHandle, ExecutionRequest, Outcome};
use harness_scripted::{Script, ScriptedAdapter, ScriptedOptions, Step};
use rstest::rstest;
use tower::ServiceExt;

fn failure(execution: &ExecutionHandle) -> PublicError {
    let all = events(execution);
    let last = all.last().expect("events");
    match last.payload() {
        EventPayload::RunFailed(failed) => failed.error.clone(),
        other => panic!(
            "expected run.failed, got {other:?} after {:?}",
            kinds(execution)
        ),
    }
}

async fn failed(script: &Script) -> (ExecutionHandle, harness_core::error::HarnessError) {
    let service = common::service();
    let execution = start(&service, script).await;
    match execution.outcome().await {
        Outcome::Failed(err) => (execution, err),
        other => panic!("expected a failure, got {other:?}: {:?}", kinds(&execution)),
    }
}

#[rstest]
#[tokio::test]
async fn every_error_category_ends_as_run_failed_without_its_diagnostic(
    #[values(
        ErrorCategory::Configuration,
        ErrorCategory::Authentication,
        ErrorCategory::Authorization,
        ErrorCategory::Capacity,
        ErrorCategory::Throttled,
        ErrorCategory::Unavailable,
        ErrorCategory::Timeout,
        ErrorCategory::Protocol,
        ErrorCategory::Persistence,
        ErrorCategory::Cancelled,
        ErrorCategory::Internal
    )]
    category: ErrorCategory,
) {
    let secret = format!("SECRET-DIAGNOSTIC-{category}-token-sk-123");
    let script = Script::builder()
        .step(Step::Error {
            category,
            message: format!("scripted {category} failure"),
            code: None,
            provider_code: Some("prov_42".to_owned()),
            retryable: None,
            retry_after_ms: Some(1500),
            side_effects: false,
            diagnostic: Some(secret.clone()),
        })
        .try_build()
        .unwrap();
    let (execution, err) = failed(&script).await;
    // The application sees everything, the diagnostic included.
    assert_eq!(err.category(), category);
    assert_eq!(err.diagnostic(), Some(secret.as_str()));
    // Clients see the safe projection only.
    let public = failure(&execution);
    assert_eq!(public.category, category);
    assert_eq!(public.code, category.default_code());
    assert_eq!(public.message, format!("scripted {category} failure"));
    assert_eq!(public.retryable, category.retryable_by_default());
    assert_eq!(public.retry_after_ms, Some(1500));
    assert_eq!(public.provider_code.as_deref(), Some("prov_42"));
    assert!(!public.side_effects_may_have_occurred);
    assert!(!wire(&execution).contains("SECRET-DIAGNOSTIC"));
    assert_eq!(
        kinds(&execution),
        ["run.queued", "run.starting", "run.running", "run.failed"]
    );
}

#[tokio::test]
async fn error_fields_are_honoured() {
    let script = Script::from_json_str(
        r#"{"steps": [
            {"type": "error", "category": "throttled", "message": "slow down",
             "code": "QUOTA_EXCEEDED", "retryable": false, "sideEffects": true,
             "diagnostic": "hidden"}
        ]}"#,
    )
    .unwrap();
    let (execution, err) = failed(&script).await;
    assert_eq!(err.code().as_str(), "QUOTA_EXCEEDED");
    let public = failure(&execution);
    assert_eq!(public.code.as_str(), "QUOTA_EXCEEDED");
    assert!(!public.retryable);
    assert!(public.side_effects_may_have_occurred);
    assert_eq!(public.retry_after_ms, None);
    assert!(!wire(&execution).contains("hidden"));
}

#[tokio::test]
async fn an_error_after_output_is_marked_as_possibly_having_side_effects() {
    let script = Script::builder()
        .text("partial output")
        .error(ErrorCategory::Unavailable, "provider went away")
        .build();
    let (execution, err) = failed(&script).await;
    assert_eq!(err.category(), ErrorCategory::Unavailable);
    let public = failure(&execution);
    assert!(public.side_effects_may_have_occurred);
    assert!(!public.retryable);
}

#[tokio::test]
async fn a_panic_step_fails_the_run_and_the_process_lives_on() {
    let service = common::service();
    let script = Script::builder()
        .text("about to fail")
        .panic("SCRIPTED-PANIC-TEXT")
        .build();
    let execution = start(&service, &script).await;
    let Outcome::Failed(err) = execution.outcome().await else {
        panic!("{:?}", kinds(&execution));
    };
    assert_eq!(err.category(), ErrorCategory::Internal);
    assert_eq!(err.code(), &ErrorCode::ADAPTER_PANICKED);
    assert!(err.diagnostic().unwrap().contains("SCRIPTED-PANIC-TEXT"));
    assert_eq!(failure(&execution).code, ErrorCode::ADAPTER_PANICKED);
    assert!(!wire(&execution).contains("SCRIPTED-PANIC-TEXT"));

    // The same service keeps working.
    let next = start(&service, &Script::builder().complete("fine").build()).await;
    assert!(matches!(next.outcome().await, Outcome::Succeeded(_)));
}

#[rstest]
#[case::event_after_complete(Script::builder().text("x").event_after_complete().build())]
#[case::end_without_terminal(Script::builder().text("x").end_without_terminal().build())]
#[case::end_without_terminal_alone(Script::builder().end_without_terminal().complete("never").build())]
#[tokio::test]
async fn malformed_orders_fail_with_protocol(#[case] script: Script) {
    let (execution, err) = failed(&script).await;
    assert_eq!(err.category(), ErrorCategory::Protocol);
    assert_eq!(err.code(), &ErrorCode::EVENT_ORDER_VIOLATION);
    assert_eq!(failure(&execution).category, ErrorCategory::Protocol);
    assert!(!kinds(&execution).contains(&"run.succeeded"));
}

#[tokio::test]
async fn a_script_that_runs_out_of_steps_completes() {
    let service = common::service();
    let execution = start(&service, &Script::builder().text("only text").build()).await;
    let Outcome::Succeeded(done) = execution.outcome().await else {
        panic!("{:?}", kinds(&execution));
    };
    assert_eq!(done.summary, None);
    let empty = start(&service, &Script::default()).await;
    assert!(matches!(empty.outcome().await, Outcome::Succeeded(_)));
    assert_eq!(
        kinds(&empty),
        ["run.queued", "run.starting", "run.running", "run.succeeded"]
    );
}

#[tokio::test]
async fn an_invalid_built_step_fails_the_run_that_reaches_it_with_configuration() {
    let script = Script::builder()
        .text("ok")
        .native("Bad Name", serde_json::json!({}))
        .build();
    // As a default script, the run fails when it reaches the step.
    let adapter = ScriptedAdapter::new(script.clone());
    let stats = adapter.stats();
    let service = AdapterService::new(adapter);
    let execution = service
        .clone()
        .oneshot(ExecutionRequest::new("go"))
        .await
        .unwrap();
    let Outcome::Failed(err) = execution.outcome().await else {
        panic!("{:?}", kinds(&execution));
    };
    assert_eq!(err.category(), ErrorCategory::Configuration);
    assert_eq!(err.code(), &ErrorCode::OPTIONS_INVALID);
    assert!(err.message().contains("steps[1] (native)"), "{err}");
    assert_eq!(kinds(&execution)[3], "message.delta");
    assert_eq!(stats.snapshot().runtimes_created, 1);

    // Through the options it is refused at start, before any runtime exists.
    let err = common::service()
        .oneshot(
            ExecutionRequest::new("go")
                .with_options(ScriptedOptions::with_script(script).to_value()),
        )
        .await
        .expect_err("refused at start");
    assert_eq!(err.category(), ErrorCategory::Configuration);
    assert!(err.message().contains("steps[1] (native)"), "{err}");
    assert_eq!(stats.snapshot().runtimes_created, 1);
}

#[tokio::test]
async fn native_events_and_failing_tool_calls_stream_as_scripted() {
    let script = Script::from_json_str(
        r#"{"steps": [
            {"type": "native", "name": "plan.update", "payload": {"step": 1}},
            {"type": "native", "namespace": "acme", "name": "ping"},
            {"type": "toolCall", "callId": "c1", "tool": "grep", "arguments": {"q": "x"},
             "failure": "no such file"},
            {"type": "toolCall", "callId": "c2", "tool": "ls", "output": ["a", "b"]}
        ]}"#,
    )
    .unwrap();
    let service = common::service();
    let execution = start(&service, &script).await;
    assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
    let wire: serde_json::Value = serde_json::from_str(&wire(&execution)).unwrap();
    let data: Vec<_> = wire.as_array().unwrap()[3..9]
        .iter()
        .map(|e| (e["kind"].as_str().unwrap().to_owned(), e["data"].clone()))
        .collect();
    assert_eq!(data[0].0, "native");
    assert_eq!(data[0].1["namespace"], "scripted");
    assert_eq!(data[0].1["payload"]["step"], 1);
    assert_eq!(data[1].1["namespace"], "acme");
    assert_eq!(data[2].0, "tool.call.started");
    assert_eq!(data[3].0, "tool.call.completed");
    assert_eq!(data[3].1["outcome"]["status"], "failure");
    assert_eq!(data[3].1["outcome"]["message"], "no such file");
    assert_eq!(
        data[5].1["outcome"]["output"],
        serde_json::json!(["a", "b"])
    );
}
