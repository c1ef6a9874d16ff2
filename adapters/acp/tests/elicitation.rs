//! Form elicitation as form input, with our own test agent (`acp-test-agent elicit`): it asks
//! for a required string `name` and an optional integer `age`, and says `hello <name>` when
//! accepted, `declined` when declined, and stops with `cancelled` when cancelled.

mod common;

use std::time::Duration;

use common::{
    adapter_for, assert_no_process_left, finish, kinds, marker, test_agent, text, until_action,
};
use harness_acp::{AcpAdapter, AcpAgent};
use harness_core::action::{ActionKind, ActionRequest, FieldKind, FormResponse, FormValues};
use harness_core::event::CancelReason;
use harness_core::service::{AdapterService, ExecutionHandle, ExecutionRequest, Outcome};

fn elicit_agent(mark: &str) -> AcpAdapter {
    adapter_for(elicit_config(mark))
}

fn elicit_config(mark: &str) -> AcpAgent {
    test_agent("elicit", mark).with_cancel_grace(Duration::from_secs(10))
}

/// Starts an `elicit` turn and waits for its form; checks the form's fields.
async fn until_form(adapter: AcpAdapter) -> (ExecutionHandle, ActionRequest) {
    let execution = AdapterService::new(adapter)
        .start(ExecutionRequest::new("who am I?"))
        .await
        .expect("execution starts");
    let request = until_action(&execution).await;
    let ActionKind::FormInput(form) = &request.kind else {
        panic!("expected a form-input action, got {:?}", request.kind);
    };
    let name = form.field("name").expect("a `name` field");
    assert!(name.required);
    assert!(matches!(name.kind, FieldKind::Text { .. }), "{name:?}");
    let age = form.field("age").expect("an `age` field");
    assert!(!age.required);
    assert!(
        matches!(age.kind, FieldKind::Number { integer: true, .. }),
        "{age:?}"
    );
    (execution, request)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitted_form_accepts_the_elicitation_with_its_values() {
    let mark = marker("elicit-submit");
    let (execution, form) = until_form(elicit_agent(&mark)).await;
    let values = FormValues::new().with("name", "Ada").with("age", 36);
    execution
        .respond(FormResponse::submit(form.id.clone(), form.revision, values).into())
        .await
        .expect("the answer is accepted");
    let (events, outcome) = finish(&execution).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    let kinds = kinds(&events);
    for kind in ["run.awaiting_input", "action.resolved"] {
        assert!(kinds.contains(&kind), "{kinds:?}");
    }
    assert_eq!(text(&events), "hello Ada");
    drop(execution);
    assert_no_process_left(&mark).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dismissed_form_declines_the_elicitation() {
    let mark = marker("elicit-dismiss");
    let (execution, form) = until_form(elicit_agent(&mark)).await;
    execution
        .respond(FormResponse::dismiss(form.id.clone(), form.revision).into())
        .await
        .expect("the dismissal is accepted");
    let (events, outcome) = finish(&execution).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert_eq!(text(&events), "declined");
    drop(execution);
    assert_no_process_left(&mark).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_while_the_form_is_open_cancels_the_elicitation() {
    let mark = marker("elicit-cancel");
    let adapter = elicit_agent(&mark);
    let stats = adapter.stats();
    let (execution, _form) = until_form(adapter).await;
    let _request = execution.cancel(CancelReason::new("test"));
    let (events, outcome) = finish(&execution).await;
    assert!(matches!(outcome, Outcome::Cancelled(_)), "{outcome:?}");
    assert_eq!(kinds(&events).last(), Some(&"run.cancelled"));
    // The agent received `cancel` for its elicitation and ended its turn itself: nothing had
    // to be killed.
    let stats = stats.snapshot();
    assert_eq!(
        (stats.graceful_cancels, stats.forced_cancels),
        (1, 0),
        "{stats:?}"
    );
    drop(execution);
    assert_no_process_left(&mark).await;
}
