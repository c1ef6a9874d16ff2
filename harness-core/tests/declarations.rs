//! Declarations bind: an adapter that produces what its descriptor declares unusable (a
//! pause of an undeclared kind, reasoning, usage) ends the run with one `run.failed`,
//! `protocol`, `CAPABILITY_VIOLATED`; the same adapter declaring them runs as before.

use futures_util::StreamExt;
use harness_core::action::{
    ActionRequest, ApprovalRequest, ApprovalResponse, Revision, ToolDecision,
};
use harness_core::adapter::{
    AdapterEvent, BoxStream, EventResult, RunContext, Simple, SimpleAdapter,
};
use harness_core::capability::{Capability, CapabilityKey};
use harness_core::error::{ErrorCategory, ErrorCode};
use harness_core::event::{Content, EventPayload, RunSucceeded, TextDelta, Usage};
use harness_core::id::Cursor;
use harness_core::manifest::{ContractVersion, Describe, ExecutionMode, HarnessDescriptor};
use harness_core::service::{AdapterService, ExecutionHandle, ExecutionRequest, Outcome};
use tower::ServiceExt;

#[derive(Clone, Copy, Debug)]
enum Emits {
    /// Text, then a pause for approval of `calls` calls; completes once answered.
    Approval {
        calls: usize,
    },
    Reasoning,
    Usage,
}

struct Emitter {
    descriptor: HarnessDescriptor,
    emits: Emits,
}

impl Emitter {
    /// Declares `stream.text` and `declared` (each `native`).
    fn new(emits: Emits, declared: &[CapabilityKey]) -> Simple<Self> {
        let mut builder = HarnessDescriptor::builder("emitter".parse().unwrap(), "1.0.0")
            .contract_version(ContractVersion::V1)
            .execution_mode(ExecutionMode::in_process())
            .capability(CapabilityKey::StreamText, Capability::native());
        for key in declared {
            builder = builder.capability(*key, Capability::native());
        }
        Simple::new(Self {
            descriptor: builder.build().unwrap(),
            emits,
        })
    }
}

impl Describe for Emitter {
    fn descriptor(&self) -> &HarnessDescriptor {
        &self.descriptor
    }
}

fn text(s: &str) -> EventResult {
    Ok(AdapterEvent::Content(Content::MessageDelta(
        TextDelta::new(s),
    )))
}

fn approval(calls: usize) -> ActionRequest {
    let calls: Vec<_> = (0..calls)
        .map(|i| {
            harness_core::action::ToolCallApproval::new(
                format!("call_{i}").parse().unwrap(),
                "shell",
                serde_json::json!({"cmd": "ls"}),
                serde_json::json!({"type": "object"}),
            )
            .unwrap()
        })
        .collect();
    ActionRequest::approval(ApprovalRequest::new(calls).unwrap()).with_id("act_1".parse().unwrap())
}

impl SimpleAdapter for Emitter {
    fn stream(&self, run: RunContext) -> BoxStream<'static, EventResult> {
        let done = Ok(AdapterEvent::Completed(RunSucceeded::default()));
        let items = match (self.emits, run.resume) {
            (_, Some(_)) => vec![text("resumed"), done],
            (Emits::Approval { calls }, None) => {
                vec![text("before"), Ok(AdapterEvent::Action(approval(calls)))]
            }
            (Emits::Reasoning, None) => vec![
                text("before"),
                Ok(AdapterEvent::Content(Content::ReasoningDelta(
                    TextDelta::new("hmm"),
                ))),
                text("after"),
                done,
            ],
            (Emits::Usage, None) => vec![
                text("before"),
                Ok(AdapterEvent::Content(Content::Usage(Usage {
                    input_tokens: 3,
                    output_tokens: 4,
                    ..Usage::default()
                }))),
                done,
            ],
        };
        Box::pin(futures_util::stream::iter(items))
    }
}

async fn start(adapter: Simple<Emitter>) -> ExecutionHandle {
    AdapterService::new(adapter)
        .oneshot(ExecutionRequest::new("go"))
        .await
        .unwrap()
}

/// The execution's outcome, bounded: a run that pauses when it should have failed fails the
/// test instead of hanging it.
async fn outcome(handle: &ExecutionHandle) -> Outcome {
    tokio::time::timeout(std::time::Duration::from_secs(10), handle.outcome())
        .await
        .expect("the execution ends")
}

async fn kinds(handle: &ExecutionHandle) -> Vec<&'static str> {
    handle
        .events(Cursor::START)
        .map(|e| e.kind().as_str())
        .collect()
        .await
}

/// The run failed once with `CAPABILITY_VIOLATED` naming `key`, after the text before the
/// violation and nothing of it.
async fn assert_violated(handle: &ExecutionHandle, key: &str) {
    let Outcome::Failed(err) = outcome(handle).await else {
        panic!("the run must fail");
    };
    assert_eq!(err.category(), ErrorCategory::Protocol, "{err:?}");
    assert_eq!(err.code(), &ErrorCode::CAPABILITY_VIOLATED);
    assert!(err.message().contains(key), "{}", err.message());
    assert!(err.message().contains("`emitter`"), "{}", err.message());
    let kinds = kinds(handle).await;
    assert_eq!(
        kinds,
        [
            "run.queued",
            "run.starting",
            "run.running",
            "message.delta",
            "run.failed"
        ],
    );
    let events: Vec<_> = handle.events(Cursor::START).collect().await;
    let EventPayload::RunFailed(failed) = events.last().unwrap().payload() else {
        unreachable!()
    };
    assert_eq!(failed.error.code, ErrorCode::CAPABILITY_VIOLATED);
}

#[tokio::test]
async fn a_pause_for_an_approval_declared_unsupported_fails_with_protocol() {
    let handle = start(Emitter::new(Emits::Approval { calls: 1 }, &[])).await;
    assert_violated(&handle, "`interrupt.tool_approval` unsupported").await;
    assert!(handle.pending_actions().is_empty());
}

#[tokio::test]
async fn reasoning_declared_unsupported_fails_with_protocol() {
    let handle = start(Emitter::new(Emits::Reasoning, &[])).await;
    assert_violated(&handle, "`stream.reasoning` unsupported").await;
}

#[tokio::test]
async fn usage_declared_unsupported_fails_with_protocol() {
    let handle = start(Emitter::new(Emits::Usage, &[])).await;
    assert_violated(&handle, "`stream.usage` unsupported").await;
}

#[tokio::test]
async fn an_approval_of_several_calls_needs_multi_tool() {
    let adapter = Emitter::new(
        Emits::Approval { calls: 2 },
        &[CapabilityKey::InterruptToolApproval],
    );
    let handle = start(adapter).await;
    assert_violated(&handle, "`interrupt.multi_tool` unsupported").await;
}

/// `unavailable` is as unusable as `unsupported`.
#[tokio::test]
async fn an_unavailable_declaration_binds_too() {
    let descriptor = HarnessDescriptor::builder("emitter".parse().unwrap(), "1.0.0")
        .contract_version(ContractVersion::V1)
        .execution_mode(ExecutionMode::in_process())
        .capability(CapabilityKey::StreamText, Capability::native())
        .capability(
            CapabilityKey::StreamReasoning,
            Capability::new(harness_core::capability::SupportLevel::Unavailable),
        )
        .build()
        .unwrap();
    let adapter = Simple::new(Emitter {
        descriptor,
        emits: Emits::Reasoning,
    });
    let handle = start(adapter).await;
    assert_violated(&handle, "`stream.reasoning` unavailable").await;
}

#[tokio::test]
async fn what_is_declared_runs_as_before() {
    let handle = start(Emitter::new(
        Emits::Reasoning,
        &[CapabilityKey::StreamReasoning],
    ))
    .await;
    assert!(matches!(outcome(&handle).await, Outcome::Succeeded(_)));
    assert!(kinds(&handle).await.contains(&"reasoning.delta"));

    let handle = start(Emitter::new(Emits::Usage, &[CapabilityKey::StreamUsage])).await;
    assert!(matches!(outcome(&handle).await, Outcome::Succeeded(_)));
    assert!(kinds(&handle).await.contains(&"usage"));

    for (calls, declared) in [
        (1, &[CapabilityKey::InterruptToolApproval][..]),
        (
            2,
            &[
                CapabilityKey::InterruptToolApproval,
                CapabilityKey::InterruptMultiTool,
            ][..],
        ),
    ] {
        let handle = start(Emitter::new(Emits::Approval { calls }, declared)).await;
        let mut events = handle.events(Cursor::START);
        while let Some(event) = events.next().await {
            if matches!(event.payload(), EventPayload::ActionRequested(_)) {
                break;
            }
        }
        let decisions: Vec<_> = (0..calls)
            .map(|i| ToolDecision::approve(format!("call_{i}").parse().unwrap()))
            .collect();
        handle
            .respond(
                ApprovalResponse::decide("act_1".parse().unwrap(), Revision::FIRST, decisions)
                    .into(),
            )
            .await
            .unwrap();
        assert!(
            matches!(outcome(&handle).await, Outcome::Succeeded(_)),
            "{calls} calls"
        );
    }
}
