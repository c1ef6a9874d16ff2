//! Forms, multi-call approvals, and the runtime's interrupt bookkeeping (position kept between
//! segments, `pending_action`, a resume for the wrong interrupt, restart).

mod common;

use common::{action, completions, context, events, kinds, message_text, options, start, turn};
use futures_util::StreamExt;
use harness_core::action::ActionKind;
use harness_core::action::{
    ActionRequest, ApprovalRequest, ApprovalResponse, FieldKind, FormField, FormResponse,
    FormValues, ToolDecision, ValidatedResponse,
};
use harness_core::adapter::{AdapterEvent, EventResult, HarnessAdapter, ResumeDecision};
use harness_core::error::{ErrorCategory, ErrorCode};
use harness_core::event::{Content, EventPayload, ToolCallOutcome};
use harness_core::service::Outcome;
use harness_scripted::{ApprovalCall, DISMISSED_REASON, Script, ScriptedAdapter, Step};
use serde_json::json;

fn form_script() -> Script {
    Script::builder()
        .text("Before the form.")
        .form([
            FormField::new("name".parse().unwrap(), "Name", FieldKind::text()).required(),
            FormField::new("count".parse().unwrap(), "How many", FieldKind::integer()),
        ])
        .text("Hello {{name}}, here are {{ count }} items{{missing}}.")
        .reasoning("thinking about {{name}}")
        .complete("greeted {{name}}")
        .try_build()
        .unwrap()
}

#[tokio::test]
async fn submitted_form_values_fill_later_placeholders() {
    let service = common::service();
    let execution = start(&service, &form_script()).await;
    let request = action(&execution).await;
    let form = request.as_form().expect("a form");
    assert_eq!(form.fields().len(), 2);
    execution
        .respond(
            FormResponse::submit(
                request.id.clone(),
                request.revision,
                FormValues::new().with("name", "Ada").with("count", 3),
            )
            .into(),
        )
        .await
        .unwrap();
    let Outcome::Succeeded(done) = execution.outcome().await else {
        panic!("{:?}", kinds(&execution));
    };
    assert_eq!(done.summary.as_deref(), Some("greeted Ada"));
    assert_eq!(
        message_text(&execution),
        [
            "Before the form.",
            "Hello Ada, here are 3 items{{missing}}."
        ]
    );
    let reasoning: Vec<_> = events(&execution)
        .iter()
        .filter_map(|e| match e.payload() {
            EventPayload::ReasoningDelta(d) => Some(d.text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(reasoning, ["thinking about Ada"]);
    assert_eq!(
        kinds(&execution),
        [
            "run.queued",
            "run.starting",
            "run.running",
            "message.delta",
            "action.requested",
            "run.awaiting_input",
            "action.resolved",
            "run.running",
            "message.delta",
            "reasoning.delta",
            "run.succeeded"
        ]
    );
}

#[tokio::test]
async fn a_dismissed_form_leaves_placeholders_as_written() {
    let service = common::service();
    let execution = start(&service, &form_script()).await;
    let request = action(&execution).await;
    execution
        .respond(FormResponse::dismiss(request.id.clone(), request.revision).into())
        .await
        .unwrap();
    let Outcome::Succeeded(done) = execution.outcome().await else {
        panic!("{:?}", kinds(&execution));
    };
    assert_eq!(done.summary.as_deref(), Some("greeted {{name}}"));
    assert_eq!(
        message_text(&execution)[1],
        "Hello {{name}}, here are {{ count }} items{{missing}}."
    );
}

fn three_calls() -> Script {
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}},
                        "required": ["n"]});
    Script::builder()
        .approval([
            ApprovalCall::new("c1".parse().unwrap(), "tool_a", json!({"n": 1}))
                .with_output(json!("a done")),
            ApprovalCall::new("c2".parse().unwrap(), "tool_b", json!({"n": 2}))
                .with_input_schema(schema)
                .allow_edit()
                .with_output(json!("b done")),
            ApprovalCall::new("c3".parse().unwrap(), "tool_c", json!({"n": 3})),
        ])
        .complete("all decided")
        .try_build()
        .unwrap()
}

#[tokio::test]
async fn multi_call_approval_with_mixed_decisions() {
    let service = common::service();
    let execution = start(&service, &three_calls()).await;
    let request = action(&execution).await;
    assert_eq!(request.as_approval().unwrap().calls().len(), 3);
    // Every call was announced before the pause.
    let started: Vec<_> = events(&execution)
        .iter()
        .filter_map(|e| match e.payload() {
            EventPayload::ToolCallStarted(c) => Some(c.call_id.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(started, ["c1", "c2", "c3"]);
    execution
        .respond(
            ApprovalResponse::decide(
                request.id.clone(),
                request.revision,
                // Out of order on purpose: outcomes follow the request's call order.
                [
                    ToolDecision::reject_because("c3".parse().unwrap(), "too risky"),
                    ToolDecision::approve("c1".parse().unwrap()),
                    ToolDecision::edit("c2".parse().unwrap(), json!({"n": 20})),
                ],
            )
            .into(),
        )
        .await
        .unwrap();
    assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
    let got: Vec<_> = completions(&execution)
        .into_iter()
        .map(|(id, outcome)| (id.to_string(), outcome))
        .collect();
    assert_eq!(
        got,
        [
            (
                "c1".to_owned(),
                ToolCallOutcome::Success {
                    output: json!("a done")
                }
            ),
            (
                "c2".to_owned(),
                ToolCallOutcome::Success {
                    output: json!({"arguments": {"n": 20}})
                }
            ),
            (
                "c3".to_owned(),
                ToolCallOutcome::Rejected {
                    reason: Some("too risky".to_owned())
                }
            ),
        ]
    );
}

#[tokio::test]
async fn a_dismissed_approval_rejects_every_call() {
    let service = common::service();
    let execution = start(&service, &three_calls()).await;
    let request = action(&execution).await;
    execution
        .respond(ApprovalResponse::dismiss(request.id.clone(), request.revision).into())
        .await
        .unwrap();
    assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
    let outcomes: Vec<_> = completions(&execution)
        .into_iter()
        .map(|(_, o)| o)
        .collect();
    assert_eq!(
        outcomes,
        vec![
            ToolCallOutcome::Rejected {
                reason: Some(DISMISSED_REASON.to_owned())
            };
            3
        ]
    );
}

#[tokio::test]
async fn fixed_action_ids_are_used() {
    let script =
        Script::from_json_str(r#"{"steps": [{"type": "form", "id": "act_fixed", "fields": []}]}"#)
            .unwrap();
    let service = common::service();
    let execution = start(&service, &script).await;
    let request = action(&execution).await;
    assert_eq!(request.id.as_str(), "act_fixed");
    execution
        .respond(FormResponse::submit(request.id, request.revision, FormValues::new()).into())
        .await
        .unwrap();
    // The script ran out of steps: the run completes.
    assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
}

// ---------------------------------------------------------------------------------------------
// The runtime, driven by hand
// ---------------------------------------------------------------------------------------------

async fn collect(stream: harness_core::adapter::BoxStream<'_, EventResult>) -> Vec<EventResult> {
    stream.collect().await
}

fn text_of(item: &EventResult) -> Option<&str> {
    match item {
        Ok(AdapterEvent::Content(Content::MessageDelta(d))) => Some(&d.text),
        _ => None,
    }
}

/// A validated decision approving every call of `approval`, answering action `id`.
fn approve_all(id: &str, approval: &ApprovalRequest) -> ResumeDecision {
    let request = ActionRequest::approval(approval.clone()).with_id(id.parse().unwrap());
    let answer = ApprovalResponse::decide(
        request.id.clone(),
        request.revision,
        approval
            .calls()
            .iter()
            .map(|c| ToolDecision::approve(c.call_id().clone())),
    );
    ResumeDecision::new(ValidatedResponse::Approval(
        request.validate_approval(answer).unwrap(),
    ))
}

#[tokio::test]
async fn the_runtime_keeps_its_position_and_refuses_a_resume_for_another_interrupt() {
    let script = Script::builder()
        .text("one")
        .approval([ApprovalCall::new("c1".parse().unwrap(), "t", json!({}))])
        .text("two")
        .complete("first turn")
        .text("three")
        .build();
    let adapter = ScriptedAdapter::new(Script::default());
    let ctx = context(options(&script));
    let exec = ctx.execution_id.clone();
    let runtime = adapter.create_runtime(ctx).await.unwrap();
    runtime.initialize().await.unwrap();
    assert!(runtime.pending_action().await.is_none());

    let first = collect(runtime.stream(turn(&exec))).await;
    assert_eq!(text_of(&first[0]), Some("one"));
    let Some(Ok(AdapterEvent::Action(interrupt))) = first.last() else {
        panic!("{first:?}");
    };
    let ActionKind::ToolApproval(approval) = &interrupt.kind else {
        panic!("{interrupt:?}");
    };
    assert_eq!(runtime.pending_action().await.as_ref(), Some(interrupt));

    // A stream while paused, and a decision for another interrupt, are protocol errors.
    let while_paused = collect(runtime.stream(turn(&exec))).await;
    assert!(matches!(&while_paused[..], [Err(e)] if e.category() == ErrorCategory::Protocol));
    let wrong = collect(runtime.resume(approve_all("act_other", approval))).await;
    let [Err(err)] = &wrong[..] else {
        panic!("{wrong:?}")
    };
    assert_eq!(err.category(), ErrorCategory::Protocol);
    assert!(err.message().contains("act_other"), "{err}");
    assert_eq!(runtime.pending_action().await.as_ref(), Some(interrupt));

    // The right decision continues right after the approval step.
    let second = collect(runtime.resume(approve_all(interrupt.id.as_str(), approval))).await;
    assert!(matches!(
        &second[0],
        Ok(AdapterEvent::Content(Content::ToolCallCompleted(_)))
    ));
    assert_eq!(text_of(&second[1]), Some("two"));
    assert!(
        matches!(&second[2], Ok(AdapterEvent::Completed(s)) if s.summary.as_deref() == Some("first turn"))
    );
    assert_eq!(second.len(), 3);
    assert!(runtime.pending_action().await.is_none());

    // A later stream runs the rest, then the script runs out and completes.
    let third = collect(runtime.stream(turn(&exec))).await;
    assert_eq!(text_of(&third[0]), Some("three"));
    assert!(matches!(&third[1], Ok(AdapterEvent::Completed(s)) if s.summary.is_none()));
    assert_eq!(third.len(), 2);

    runtime.cleanup().await;
    let after = collect(runtime.stream(turn(&exec))).await;
    assert!(matches!(&after[..], [Err(e)] if e.category() == ErrorCategory::Protocol));
    assert!(runtime.restart().await.is_err());
}

#[tokio::test]
async fn restart_keeps_the_open_interrupt_and_the_position() {
    let script = Script::builder()
        .approval([ApprovalCall::new("c1".parse().unwrap(), "t", json!({}))])
        .text("after restart")
        .build();
    let adapter = ScriptedAdapter::new(script);
    let stats = adapter.stats();
    let ctx = context(serde_json::Value::Null);
    let exec = ctx.execution_id.clone();
    let runtime = adapter.create_runtime(ctx).await.unwrap();
    runtime.initialize().await.unwrap();
    let first = collect(runtime.stream(turn(&exec))).await;
    let Some(Ok(AdapterEvent::Action(interrupt))) = first.last() else {
        panic!("{first:?}");
    };
    let ActionKind::ToolApproval(approval) = &interrupt.kind else {
        panic!()
    };

    runtime.restart().await.unwrap();
    runtime.initialize().await.unwrap();
    assert_eq!(runtime.pending_action().await.as_ref(), Some(interrupt));
    let resumed = collect(runtime.resume(approve_all(interrupt.id.as_str(), approval))).await;
    assert_eq!(text_of(&resumed[1]), Some("after restart"));
    assert!(matches!(
        resumed.last(),
        Some(Ok(AdapterEvent::Completed(_)))
    ));

    let s = stats.snapshot();
    assert_eq!(s.restart_calls, 1);
    assert_eq!((s.initialize_calls, s.initializations), (2, 2));
}

#[tokio::test]
async fn a_decision_of_the_wrong_kind_is_a_protocol_error() {
    let script = Script::builder()
        .form([FormField::new("x".parse().unwrap(), "X", FieldKind::text())])
        .build();
    let adapter = ScriptedAdapter::new(script);
    let ctx = context(serde_json::Value::Null);
    let exec = ctx.execution_id.clone();
    let runtime = adapter.create_runtime(ctx).await.unwrap();
    let first = collect(runtime.stream(turn(&exec))).await;
    let Some(Ok(AdapterEvent::Action(interrupt))) = first.last() else {
        panic!("{first:?}");
    };
    let approval =
        ApprovalRequest::single("c".parse().unwrap(), "t", json!({}), json!(true)).unwrap();
    let items = collect(runtime.resume(approve_all(interrupt.id.as_str(), &approval))).await;
    let [Err(err)] = &items[..] else {
        panic!("{items:?}")
    };
    assert_eq!(err.category(), ErrorCategory::Protocol);
    assert_eq!(err.code(), &ErrorCode::EVENT_ORDER_VIOLATION);
    assert!(runtime.pending_action().await.is_some());
}

#[test]
fn steps_know_their_kind_and_whether_they_end_a_segment() {
    let step = Step::Approval {
        id: None,
        calls: Vec::new(),
    };
    assert_eq!(step.kind(), "approval");
    assert!(step.is_terminal());
    assert!(!Step::Delay { ms: 1 }.is_terminal());
}
