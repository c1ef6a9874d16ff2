//! The bundled quickstart script, end to end through the adapter service.

mod common;

use common::{action, completions, events, kinds};
use harness_core::action::{ApprovalResponse, DecisionKind, ToolDecision};
use harness_core::error::ErrorCode;
use harness_core::event::{EventPayload, ToolCallOutcome};
use harness_core::id::ToolCallId;
use harness_core::service::{AdapterService, ExecutionHandle, ExecutionRequest, Outcome};
use harness_scripted::{QUICKSTART, Script, ScriptedAdapter};
use serde_json::json;
use tower::ServiceExt;

const KINDS: [&str; 17] = [
    "run.queued",
    "run.starting",
    "run.running",
    "reasoning.delta",
    "reasoning.delta",
    "message.delta",
    "message.delta",
    "message.delta",
    "usage",
    "tool.call.started",
    "action.requested",
    "run.awaiting_approval",
    "action.resolved",
    "run.running",
    "tool.call.completed",
    "artifact.created",
    "run.succeeded",
];

fn call_id() -> ToolCallId {
    "call_write_summary".parse().unwrap()
}

/// Starts the quickstart (the adapter's default script: no options) and answers its approval.
async fn run_quickstart(decision: impl FnOnce(ToolCallId) -> ToolDecision) -> ExecutionHandle {
    let service = AdapterService::new(ScriptedAdapter::quickstart());
    let execution = service
        .oneshot(ExecutionRequest::new("summarize my notes"))
        .await
        .unwrap();
    let request = action(&execution).await;
    let approval = request.as_approval().expect("a tool approval");
    assert_eq!(approval.calls().len(), 1);
    let call = &approval.calls()[0];
    assert_eq!(call.tool(), "write_file");
    assert_eq!(call.arguments()["path"], "notes/summary.md");
    assert!(call.allows(DecisionKind::Edit));
    execution
        .respond(
            ApprovalResponse::decide(request.id.clone(), request.revision, [decision(call_id())])
                .into(),
        )
        .await
        .unwrap();
    execution
}

#[tokio::test]
async fn approved_quickstart_runs_end_to_end() {
    let execution = run_quickstart(ToolDecision::approve).await;
    let Outcome::Succeeded(done) = execution.outcome().await else {
        panic!("expected success, got {:?}", kinds(&execution));
    };
    assert_eq!(
        done.summary.as_deref(),
        Some(
            "Drafted a summary of your notes for notes/summary.md; the write_file call's outcome says whether it was written."
        )
    );
    assert_eq!(kinds(&execution), KINDS);

    assert_eq!(
        completions(&execution),
        [(
            call_id(),
            ToolCallOutcome::Success {
                output: json!({"path": "notes/summary.md", "bytesWritten": 116})
            }
        )]
    );

    // The artifact: listed by the handle, created exactly once, owned by this execution.
    let listed = execution.artifacts();
    assert_eq!(listed.len(), 1);
    let artifact = &listed[0];
    assert_eq!(artifact.execution_id(), execution.id());
    assert_eq!(artifact.media_type().as_str(), "text/markdown");
    assert_eq!(
        artifact.uri().map(|u| u.as_str()),
        Some("file:///workspace/notes/summary.md")
    );
    let created: Vec<_> = events(&execution)
        .iter()
        .filter_map(|e| match e.payload() {
            EventPayload::ArtifactCreated(a) => {
                Some(harness_core::artifact::ArtifactDescriptor::clone(a))
            }
            _ => None,
        })
        .collect();
    assert_eq!(created, listed);

    // Usage and reasoning made it through as scripted.
    let usage: Vec<_> = events(&execution)
        .iter()
        .filter_map(|e| match e.payload() {
            EventPayload::Usage(u) => Some(*u),
            _ => None,
        })
        .collect();
    assert_eq!(usage.len(), 1);
    assert_eq!((usage[0].input_tokens, usage[0].output_tokens), (120, 48));
}

#[tokio::test]
async fn edited_arguments_are_echoed_in_the_output() {
    let edited = json!({"path": "notes/short.md", "content": "# Short"});
    let execution = run_quickstart(|id| ToolDecision::edit(id, edited.clone())).await;
    assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
    assert_eq!(
        completions(&execution),
        [(
            call_id(),
            ToolCallOutcome::Success {
                output: json!({ "arguments": edited })
            }
        )]
    );
    assert_eq!(kinds(&execution), KINDS);
}

#[tokio::test]
async fn invalid_edits_are_refused_and_the_action_stays_open() {
    let service = AdapterService::new(ScriptedAdapter::quickstart());
    let execution = service.oneshot(ExecutionRequest::new("go")).await.unwrap();
    let request = action(&execution).await;
    // `path` must be a non-empty string: the core revalidates edits against the schema.
    let bad = ApprovalResponse::decide(
        request.id.clone(),
        request.revision,
        [ToolDecision::edit(
            call_id(),
            json!({"path": "", "content": "x"}),
        )],
    );
    let err = execution.respond(bad.into()).await.unwrap_err();
    assert_eq!(err.code(), &ErrorCode::ACTION_RESPONSE_INVALID);
    let good = ApprovalResponse::decide(
        request.id.clone(),
        request.revision,
        [ToolDecision::approve(call_id())],
    );
    execution.respond(good.into()).await.unwrap();
    assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
}

#[tokio::test]
async fn rejected_call_completes_as_rejected_with_the_reason() {
    let execution = run_quickstart(|id| ToolDecision::reject_because(id, "not today")).await;
    assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
    assert_eq!(
        completions(&execution),
        [(
            call_id(),
            ToolCallOutcome::Rejected {
                reason: Some("not today".to_owned())
            }
        )]
    );
    let resolved = events(&execution)
        .iter()
        .find_map(|e| match e.payload() {
            EventPayload::ActionResolved(r) => Some(r.clone()),
            _ => None,
        })
        .unwrap();
    let wire = serde_json::to_value(&resolved).unwrap();
    assert_eq!(wire["outcome"]["calls"][0]["decision"], "reject");
}

#[test]
fn the_quickstart_constant_is_the_bundled_file_and_asks_for_write_file() {
    let on_disk = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/quickstart.json"),
    )
    .unwrap();
    assert_eq!(on_disk, QUICKSTART);
    let script = Script::quickstart();
    let json = serde_json::to_value(&script).unwrap();
    let approval = json["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["type"] == "approval")
        .unwrap();
    assert_eq!(approval["calls"][0]["tool"], "write_file");
    assert_eq!(approval["calls"][0]["inputSchema"]["type"], "object");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_quickstarts_each_clean_up_once() {
    let adapter = ScriptedAdapter::quickstart();
    let stats = adapter.stats();
    let service = AdapterService::new(adapter);
    let mut tasks = Vec::new();
    for i in 0..32 {
        let service = service.clone();
        tasks.push(tokio::spawn(async move {
            let execution = service
                .oneshot(ExecutionRequest::new(format!("run {i}")))
                .await
                .unwrap();
            let request = action(&execution).await;
            let decision = if i % 2 == 0 {
                ToolDecision::approve(call_id())
            } else {
                ToolDecision::reject(call_id())
            };
            execution
                .respond(ApprovalResponse::decide(request.id, request.revision, [decision]).into())
                .await
                .unwrap();
            assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
            assert_eq!(kinds(&execution), KINDS);
            assert_eq!(execution.artifacts().len(), 1);
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let s = stats.snapshot();
    assert_eq!(s.runtimes_created, 32);
    assert_eq!((s.cleanups, s.cleanup_calls), (32, 32));
    assert_eq!((s.stream_calls, s.resume_calls), (32, 32));
    assert_eq!(s.live_runtimes(), 0);
}
