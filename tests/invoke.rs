//! Plain invocation over the scripted adapter, through the default stacks: the outcome
//! holds what the log holds (text, reasoning, tool results, artifacts, usage, state, the
//! classified error), every layer applied (redaction, idempotency, preflight), and a run
//! paused on an action returns with it pending, to be answered and waited for.

use std::time::Duration;

use harness::HarnessStack;
use harness::layers::stack::StackService;
use harness::scripted::{Script, ScriptedAdapter, ScriptedOptions};
use harness_core::capability::{CapabilityKey, Requirement, SupportLevel};
use harness_core::error::{ErrorCategory, ErrorCode};
use harness_core::event::{CancelSource, ToolCallOutcome};
use harness_core::lifecycle::ExecutionState;
use harness_core::manifest::Describe;
use harness_core::service::invoke::InvokeExt;
use harness_core::service::{ExecutionRequest, Outcome};
use serde_json::json;

fn stack(adapter: ScriptedAdapter) -> StackService {
    HarnessStack::defaults_for(&adapter)
        .unwrap()
        .service(adapter)
}

fn request(script: &Script) -> ExecutionRequest {
    ExecutionRequest::new("go")
        .with_options(ScriptedOptions::with_script(script.clone()).to_value())
}

fn service() -> StackService {
    stack(ScriptedAdapter::quickstart())
}

#[tokio::test]
async fn the_outcome_holds_text_reasoning_tools_artifacts_and_usage() {
    let script = Script::builder()
        .reasoning("think")
        .text("Hello, ")
        .text("token sk-live-0123456789abcdefghij")
        .usage(10, 4)
        .tool_call(
            "call_1".parse().unwrap(),
            "search",
            json!({"q": "rust"}),
            json!({"hits": 3}),
        )
        .failing_tool_call("call_2".parse().unwrap(), "fetch", json!({}), "offline")
        .usage(5, 2)
        .artifact("text/markdown", "notes", "file:///workspace/notes.md")
        .complete("all done")
        .build();
    let invocation = service().invoke(request(&script)).await.unwrap();
    let outcome = invocation.outcome();
    assert_eq!(outcome.state, ExecutionState::Succeeded);
    assert!(matches!(invocation.ended(), Some(Outcome::Succeeded(_))));
    assert!(
        outcome.text.starts_with("Hello, token "),
        "{}",
        outcome.text
    );
    // The redaction layer ran: the outcome is made of what the log holds.
    assert!(
        !outcome.text.contains("sk-live-0123456789abcdefghij"),
        "{}",
        outcome.text
    );
    assert_eq!(outcome.reasoning, "think");
    assert_eq!(
        (outcome.usage.input_tokens, outcome.usage.output_tokens),
        (15, 6)
    );
    let tools: Vec<_> = outcome
        .tool_calls
        .iter()
        .map(|c| (c.tool.as_str(), c.outcome.clone()))
        .collect();
    assert_eq!(
        tools,
        [
            (
                "search",
                Some(ToolCallOutcome::Success {
                    output: json!({"hits": 3})
                })
            ),
            (
                "fetch",
                Some(ToolCallOutcome::Failure {
                    message: "offline".into()
                })
            ),
        ]
    );
    assert_eq!(outcome.artifacts.len(), 1);
    assert_eq!(outcome.artifacts[0].media_type().as_str(), "text/markdown");
    assert_eq!(outcome.summary.as_deref(), Some("all done"));
    assert_eq!(outcome.error, None);
    assert!(!outcome.truncated);
    assert_eq!(
        outcome.last_seq,
        invocation.handle().log().last().unwrap().seq().get()
    );
    // The outcome is a wire type too.
    let wire = serde_json::to_value(outcome).unwrap();
    assert_eq!(wire["state"], "succeeded");
    assert_eq!(wire["toolCalls"][0]["tool"], "search");
}

#[tokio::test]
async fn a_failed_run_is_an_outcome_with_its_classified_error() {
    let script = Script::builder()
        .text("partial")
        .error(ErrorCategory::Throttled, "slow down")
        .build();
    let invocation = service().invoke(request(&script)).await.unwrap();
    let outcome = invocation.outcome();
    assert_eq!(outcome.state, ExecutionState::Failed);
    assert_eq!(outcome.text, "partial");
    let error = outcome.error.as_ref().unwrap();
    assert_eq!(error.category, ErrorCategory::Throttled);
    assert!(error.side_effects_may_have_occurred, "output came first");
    let Some(Outcome::Failed(full)) = invocation.ended() else {
        panic!("{:?}", invocation.ended());
    };
    assert_eq!(full.category(), ErrorCategory::Throttled);
}

#[tokio::test]
async fn a_refused_request_is_an_error_and_nothing_runs() {
    // The scripted adapter emulates plain invocation: a requirement of `native` is refused
    // by preflight, `emulated` is met.
    let native = Requirement::native(CapabilityKey::InvokeNonStreaming);
    let err = service()
        .invoke(ExecutionRequest::new("go").require(native))
        .await
        .unwrap_err();
    assert_eq!(*err.code(), ErrorCode::CAPABILITY_UNSUPPORTED);
    assert!(err.message().contains("invoke.non_streaming"), "{err}");
    let emulated =
        Requirement::at_least(CapabilityKey::InvokeNonStreaming, SupportLevel::Emulated).unwrap();
    let invocation = service()
        .invoke(ExecutionRequest::new("go").require(emulated))
        .await
        .unwrap();
    assert_eq!(invocation.outcome().state, ExecutionState::AwaitingApproval);
}

#[test]
fn the_capability_report_says_emulated() {
    let adapter = ScriptedAdapter::quickstart();
    let capabilities = adapter.descriptor().capabilities();
    assert_eq!(
        capabilities.level(CapabilityKey::InvokeNonStreaming),
        SupportLevel::Emulated
    );
    assert!(
        !capabilities
            .get(CapabilityKey::InvokeNonStreaming)
            .explanation()
            .unwrap_or_default()
            .is_empty()
    );
}

#[tokio::test]
async fn a_paused_run_returns_its_pending_action_and_resume_finishes_it() {
    let service = service();
    // The quickstart asks to approve one `write_file` call.
    let invocation = service
        .invoke(ExecutionRequest::new("summarize my notes"))
        .await
        .unwrap();
    let outcome = invocation.outcome();
    assert_eq!(outcome.state, ExecutionState::AwaitingApproval);
    assert!(invocation.ended().is_none());
    let action = invocation.pending_action().cloned().expect("pending");
    assert_eq!(outcome.pending_action.as_ref(), Some(&action));
    assert!(!outcome.text.is_empty(), "the text before the pause");
    assert_eq!(outcome.tool_calls[0].tool, "write_file");
    assert_eq!(outcome.tool_calls[0].outcome, None, "not run yet");

    // A wrong answer is the respond's error, and the run still waits.
    let id = invocation.handle().clone();
    let stale = action.approve_all();
    let mut wrong = serde_json::to_value(&stale).unwrap();
    wrong["revision"] = json!(
        serde_json::to_value(action.revision)
            .unwrap()
            .as_u64()
            .unwrap()
            + 1
    );
    let err = invocation
        .clone()
        .resume(serde_json::from_value(wrong).unwrap())
        .await
        .unwrap_err();
    assert_eq!(*err.code(), ErrorCode::ACTION_REVISION_STALE);
    assert_eq!(id.state(), ExecutionState::AwaitingApproval);

    let invocation = invocation.resume(action.approve_all()).await.unwrap();
    let outcome = invocation.outcome();
    assert_eq!(outcome.state, ExecutionState::Succeeded);
    assert_eq!(outcome.pending_action, None);
    assert!(matches!(
        outcome.tool_calls[0].outcome,
        Some(ToolCallOutcome::Success { .. })
    ));
    assert_eq!(outcome.artifacts.len(), 1);
}

#[tokio::test]
async fn waiting_again_after_another_party_answers_gets_the_rest() {
    let invocation = service()
        .invoke(ExecutionRequest::new("summarize my notes"))
        .await
        .unwrap();
    let action = invocation.pending_action().cloned().unwrap();
    let handle = invocation.handle().clone();
    let answer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        handle.respond(action.approve_all()).await
    });
    let invocation = invocation.wait().await;
    answer.await.unwrap().unwrap();
    assert_eq!(invocation.outcome().state, ExecutionState::Succeeded);
}

#[tokio::test]
async fn dropping_a_paused_invocation_abandons_its_run() {
    let invocation = service()
        .invoke(ExecutionRequest::new("summarize my notes"))
        .await
        .unwrap();
    let log = invocation.handle().log().clone();
    drop(invocation);
    let terminal = tokio::time::timeout(Duration::from_secs(10), log.terminal())
        .await
        .expect("the abandoned run ended");
    let harness_core::event::EventPayload::RunCancelled(reason) = terminal.payload() else {
        panic!("{terminal:?}");
    };
    assert_eq!(reason.source, CancelSource::Abandoned);
}

#[tokio::test]
async fn an_idempotent_retry_gets_the_original_outcome() {
    let service = service();
    let script = Script::builder().text("once").complete("ok").build();
    let key = "order-42".parse().unwrap();
    let first = service
        .invoke(request(&script).with_idempotency_key(key))
        .await
        .unwrap();
    let key = "order-42".parse().unwrap();
    let again = service
        .invoke(request(&script).with_idempotency_key(key))
        .await
        .unwrap();
    assert!(again.handle().is_replay());
    assert_eq!(again.handle().id(), first.handle().id());
    assert_eq!(again.outcome(), first.outcome());
    assert_eq!(again.outcome().text, "once");
}

#[tokio::test]
async fn many_concurrent_invocations_each_get_their_own_outcome() {
    let service = service();
    let calls = (0..64).map(|i| {
        let service = service.clone();
        async move {
            let script = Script::builder()
                .text(format!("reply {i}"))
                .complete("ok")
                .build();
            let invocation = service.invoke(request(&script)).await.unwrap();
            (i, invocation.into_outcome())
        }
    });
    for (i, outcome) in futures_util::future::join_all(calls).await {
        assert_eq!(outcome.state, ExecutionState::Succeeded);
        assert_eq!(outcome.text, format!("reply {i}"));
    }
}

#[tokio::test]
async fn a_huge_output_is_kept_up_to_the_bound_and_marked_truncated() {
    use harness_core::service::invoke::Collector;
    use harness_core::service::invoke::Invocation;
    let script = Script::builder()
        .text_repeated("0123456789", 1000)
        .complete("ok")
        .build();
    let handle = tower::ServiceExt::oneshot(service(), request(&script))
        .await
        .unwrap();
    let collector = Collector::new(handle.id().clone()).with_max_collected(1024);
    let invocation = Invocation::with_collector(handle, collector).wait().await;
    let outcome = invocation.outcome();
    assert_eq!(outcome.state, ExecutionState::Succeeded);
    assert!(outcome.truncated);
    assert_eq!(outcome.text.len(), 1020, "whole deltas up to the bound");
}

#[tokio::test]
async fn an_idempotent_retry_of_a_run_answered_since_waits_past_its_old_pause() {
    let service = service();
    let key: harness_core::id::IdempotencyKey = "notes-1".parse().unwrap();
    let first = service
        .invoke(ExecutionRequest::new("summarize my notes").with_idempotency_key(key.clone()))
        .await
        .unwrap();
    let action = first.pending_action().cloned().unwrap();
    let first = first.resume(action.approve_all()).await.unwrap();
    assert_eq!(first.outcome().state, ExecutionState::Succeeded);
    // The replay reads the log from its start, past the answered pause, to the end.
    let again = service
        .invoke(ExecutionRequest::new("summarize my notes").with_idempotency_key(key))
        .await
        .unwrap();
    assert!(again.handle().is_replay());
    assert_eq!(again.outcome().state, ExecutionState::Succeeded);
    assert_eq!(again.outcome(), first.outcome());
}

#[tokio::test]
async fn a_durable_retry_that_waits_finds_the_execution_a_plain_start_made() {
    use harness_core::service::AdapterService;
    use harness_core::store::{MemoryStore, ReplicaId};
    // No idempotency layer: the store's own record of the key decides.
    let service = AdapterService::builder(ScriptedAdapter::quickstart())
        .store(
            std::sync::Arc::new(MemoryStore::new()),
            ReplicaId::new("r1"),
        )
        .build();
    let script = Script::builder().text("once").complete("ok").build();
    let key: harness_core::id::IdempotencyKey = "durable-1".parse().unwrap();
    let first = service
        .start(request(&script).with_idempotency_key(key.clone()))
        .await
        .unwrap();
    let again = service
        .invoke(request(&script).with_idempotency_key(key))
        .await
        .expect("the same request, waited for: `delivery` is not its identity");
    assert_eq!(again.handle().id(), first.id());
    assert_eq!(again.outcome().text, "once");
}

#[tokio::test]
async fn the_run_limits_hold_for_an_invocation() {
    let script = Script::builder()
        .text_repeated("0123456789", 100)
        .complete("ok")
        .build();
    let limits = harness_core::limits::RunLimits::none()
        .with_max_output_bytes(64)
        .unwrap();
    let invocation = service()
        .invoke(request(&script).with_limits(limits))
        .await
        .unwrap();
    let outcome = invocation.outcome();
    assert_eq!(outcome.state, ExecutionState::Failed);
    assert_eq!(
        outcome.error.as_ref().unwrap().code,
        ErrorCode::LIMIT_OUTPUT_BYTES
    );
    assert!(outcome.text.len() <= 64, "{}", outcome.text.len());
}
