//! Proves the typestate execution lifecycle matches the runtime model.
//!
//! - Every transition of the typed API lands in the right state, appends exactly the
//!   documented lifecycle events (and their data), and is an edge the diagram draws; the
//!   runtime `ExecutionState::can_transition_to` agrees on all 81 pairs with an explicit table
//!   written here, and every drawn edge is reachable through the typed API.
//! - Cancellation is idempotent and carries its reason to `run.cancelled`; a failure while
//!   starting ends `starting -> running -> failed` with only the public error in the log.
//! - A bad answer to a pending action hands the execution back untouched, with the right
//!   error code, and a good answer then succeeds.
//! - Content and artifacts can be emitted while running and cancelling; a duplicate or
//!   foreign artifact is refused and appends nothing.
//! - `AnyExecution` round-trips every state, gives a wrong-state execution back intact, and
//!   refuses to cancel a terminal execution.
//! - Random operation sequences driven through `AnyExecution` keep every log invariant of the
//!   runtime model after every step.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use harness_core::action::{
    ActionResponseError, ActionType, ApprovalRequest, ApprovalResponse, CallResolution,
    DecisionKind, FieldKind, FieldProblem, FormField, FormRequest, FormResponse, FormValues,
    ResolutionOutcome, Revision, ToolDecision,
};
use harness_core::artifact::ArtifactDescriptor;
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::event::{
    CancelReason, Content, Event, EventPayload, NativeEvent, RunSucceeded, TextDelta, ToolCall,
    ToolCallCompleted, ToolCallOutcome, Usage,
};
use harness_core::id::{ActionId, Cursor, ExecutionId, ToolCallId};
use harness_core::lifecycle::{
    AnyExecution, Emitting, Execution, ExecutionState, State, WrongState, state,
};
use harness_core::log::{AppendError, LogReader};
use proptest::prelude::*;
use rstest::rstest;
use serde_json::{Value, json};

use ExecutionState as S;

// ---------------------------------------------------------------------------------------------
// The runtime model, written out independently of the library
// ---------------------------------------------------------------------------------------------

/// The state names in the order of `ExecutionState::ALL` (checked by a test below).
const NAMES: [&str; 9] = [
    "queued",
    "starting",
    "running",
    "awaiting_input",
    "awaiting_approval",
    "cancelling",
    "succeeded",
    "failed",
    "cancelled",
];

/// `DRAWN[from][to] == 1` exactly when the runtime model's diagram draws `from -> to`.
#[rustfmt::skip]
const DRAWN: [[u8; 9]; 9] = [
    //                     qu st ru ai aa cg su fa cd
    /* queued            */ [0, 1, 0, 0, 0, 1, 0, 0, 0],
    /* starting          */ [0, 0, 1, 0, 0, 1, 0, 0, 0],
    /* running           */ [0, 0, 0, 1, 1, 1, 1, 1, 0],
    /* awaiting_input    */ [0, 0, 1, 0, 0, 1, 0, 0, 0],
    /* awaiting_approval */ [0, 0, 1, 0, 0, 1, 0, 0, 0],
    /* cancelling        */ [0, 0, 0, 0, 0, 0, 0, 0, 1],
    /* succeeded         */ [0, 0, 0, 0, 0, 0, 0, 0, 0],
    /* failed            */ [0, 0, 0, 0, 0, 0, 0, 0, 0],
    /* cancelled         */ [0, 0, 0, 0, 0, 0, 0, 0, 0],
];

fn index(s: ExecutionState) -> usize {
    ExecutionState::ALL
        .iter()
        .position(|x| *x == s)
        .expect("every state is in ALL")
}

fn drawn(from: ExecutionState, to: ExecutionState) -> bool {
    DRAWN[index(from)][index(to)] == 1
}

fn is_terminal(s: ExecutionState) -> bool {
    matches!(s, S::Succeeded | S::Failed | S::Cancelled)
}

/// The state a lifecycle event kind puts the execution in; `None` for other kinds.
fn state_of(kind: &str) -> Option<ExecutionState> {
    Some(match kind {
        "run.queued" => S::Queued,
        "run.starting" => S::Starting,
        "run.running" => S::Running,
        "run.awaiting_input" => S::AwaitingInput,
        "run.awaiting_approval" => S::AwaitingApproval,
        "run.cancelling" => S::Cancelling,
        "run.succeeded" => S::Succeeded,
        "run.failed" => S::Failed,
        "run.cancelled" => S::Cancelled,
        _ => return None,
    })
}

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

fn act() -> ActionId {
    "act_1".parse().expect("valid action id")
}

fn other_act() -> ActionId {
    "act_2".parse().expect("valid action id")
}

fn call_1() -> ToolCallId {
    "call_1".parse().expect("valid call id")
}

fn form() -> FormRequest {
    FormRequest::new([
        FormField::new("name".parse().expect("valid"), "Name", FieldKind::text()).required(),
        FormField::new("age".parse().expect("valid"), "Age", FieldKind::integer()),
    ])
    .expect("valid form")
}

fn tool_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": false
    })
}

fn approval(edit: bool) -> ApprovalRequest {
    let a = ApprovalRequest::single(
        call_1(),
        "read_file",
        json!({"path": "/etc/hosts"}),
        tool_schema(),
    )
    .expect("valid approval");
    if edit { a.allow_edit() } else { a }
}

fn good_submit() -> FormResponse {
    FormResponse::submit(
        act(),
        Revision::FIRST,
        FormValues::new().with("name", "Ada"),
    )
}

fn good_approve() -> ApprovalResponse {
    ApprovalResponse::decide(act(), Revision::FIRST, [ToolDecision::approve(call_1())])
}

fn descriptor(owner: &ExecutionId, id: &str) -> ArtifactDescriptor {
    ArtifactDescriptor::builder(
        id.parse().expect("valid artifact id"),
        owner.clone(),
        "text/plain",
    )
    .build()
    .expect("valid descriptor")
}

fn running() -> Execution<state::Running> {
    Execution::queue(ExecutionId::generate()).start().run()
}

fn kinds(reader: &LogReader) -> Vec<&'static str> {
    reader
        .snapshot(Cursor::START)
        .iter()
        .map(|e| e.kind().as_str())
        .collect()
}

fn assert_contiguous(events: &[Arc<Event>]) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq().get(), i as u64 + 1, "sequence gap at index {i}");
    }
}

fn assert_same_events(a: &[Arc<Event>], b: &[Arc<Event>]) {
    assert_eq!(a.len(), b.len(), "event count changed");
    for (x, y) in a.iter().zip(b) {
        assert!(Arc::ptr_eq(x, y), "event #{} changed", x.seq());
    }
}

/// An execution in state `s`, reached along the shortest path of the diagram.
fn build(s: ExecutionState) -> AnyExecution {
    match s {
        S::Queued => Execution::queue(ExecutionId::generate()).into(),
        S::Starting => Execution::queue(ExecutionId::generate()).start().into(),
        S::Running => running().into(),
        S::AwaitingInput => running().request_input(act(), form()).into(),
        S::AwaitingApproval => running().request_approval(act(), approval(true)).into(),
        S::Cancelling => running().begin_cancel(CancelReason::new("setup")).into(),
        S::Succeeded => running().succeed(RunSucceeded::default()).into(),
        S::Failed => running()
            .fail(HarnessError::new(ErrorCategory::Internal, "boom"))
            .into(),
        S::Cancelled => running()
            .begin_cancel(CancelReason::new("setup"))
            .confirm_cancelled()
            .into(),
    }
}

fn typed<T: State>(any: AnyExecution) -> Execution<T> {
    Execution::<T>::try_from(any).unwrap_or_else(|e| panic!("{e}"))
}

/// `Execution::<T>::try_from` for the `T` whose state is `t`, erased again on success.
fn try_as(t: ExecutionState, any: AnyExecution) -> Result<AnyExecution, WrongState> {
    fn go<T: State>(any: AnyExecution) -> Result<AnyExecution, WrongState> {
        Execution::<T>::try_from(any).map(|e| {
            assert_eq!(e.state(), T::STATE);
            e.into_any()
        })
    }
    match t {
        S::Queued => go::<state::Queued>(any),
        S::Starting => go::<state::Starting>(any),
        S::Running => go::<state::Running>(any),
        S::AwaitingInput => go::<state::AwaitingInput>(any),
        S::AwaitingApproval => go::<state::AwaitingApproval>(any),
        S::Cancelling => go::<state::Cancelling>(any),
        S::Succeeded => go::<state::Succeeded>(any),
        S::Failed => go::<state::Failed>(any),
        S::Cancelled => go::<state::Cancelled>(any),
    }
}

// ---------------------------------------------------------------------------------------------
// Every typed transition
// ---------------------------------------------------------------------------------------------

/// One transition of the typed API.
#[derive(Debug, Clone, Copy)]
enum Op {
    Start,
    Run,
    RequestInput,
    RequestApproval,
    Submit,
    Dismiss,
    Approve,
    Reject,
    Edit,
    Succeed,
    Fail,
    /// `begin_cancel` from the given state.
    Cancel(ExecutionState),
    Confirm,
}

const ALL_OPS: [Op; 18] = [
    Op::Start,
    Op::Run,
    Op::RequestInput,
    Op::RequestApproval,
    Op::Submit,
    Op::Dismiss,
    Op::Approve,
    Op::Reject,
    Op::Edit,
    Op::Succeed,
    Op::Fail,
    Op::Cancel(S::Queued),
    Op::Cancel(S::Starting),
    Op::Cancel(S::Running),
    Op::Cancel(S::AwaitingInput),
    Op::Cancel(S::AwaitingApproval),
    Op::Cancel(S::Cancelling),
    Op::Confirm,
];

fn table_error() -> HarnessError {
    HarnessError::new(ErrorCategory::Unavailable, "the sandbox is unavailable")
        .with_diagnostic("worker 7 exited with ENOMEM")
}

impl Op {
    fn source(self) -> ExecutionState {
        match self {
            Op::Start => S::Queued,
            Op::Run => S::Starting,
            Op::RequestInput | Op::RequestApproval | Op::Succeed | Op::Fail => S::Running,
            Op::Submit | Op::Dismiss => S::AwaitingInput,
            Op::Approve | Op::Reject | Op::Edit => S::AwaitingApproval,
            Op::Cancel(from) => from,
            Op::Confirm => S::Cancelling,
        }
    }

    fn apply(self, any: AnyExecution) -> AnyExecution {
        let reason = CancelReason::new("table");
        match self {
            Op::Start => typed::<state::Queued>(any).start().into(),
            Op::Run => typed::<state::Starting>(any).run().into(),
            Op::RequestInput => typed::<state::Running>(any)
                .request_input(act(), form())
                .into(),
            Op::RequestApproval => typed::<state::Running>(any)
                .request_approval(act(), approval(true))
                .into(),
            Op::Submit | Op::Dismiss => {
                let answer = match self {
                    Op::Submit => good_submit(),
                    _ => FormResponse::dismiss(act(), Revision::FIRST),
                };
                let (running, validated) = typed::<state::AwaitingInput>(any)
                    .resolve(answer)
                    .map_err(|(_, e)| e)
                    .expect("a valid answer resolves");
                assert_eq!(validated.action_id(), &act());
                assert_eq!(validated.is_dismissed(), matches!(self, Op::Dismiss));
                running.into()
            }
            Op::Approve | Op::Reject | Op::Edit => {
                let decision = match self {
                    Op::Approve => ToolDecision::approve(call_1()),
                    Op::Reject => ToolDecision::reject_because(call_1(), "no"),
                    _ => ToolDecision::edit(call_1(), json!({"path": "/tmp/x"})),
                };
                let (running, validated) = typed::<state::AwaitingApproval>(any)
                    .resolve(ApprovalResponse::decide(
                        act(),
                        Revision::FIRST,
                        [decision.clone()],
                    ))
                    .map_err(|(_, e)| e)
                    .expect("a valid answer resolves");
                assert_eq!(validated.decisions(), Some(&[decision][..]));
                running.into()
            }
            Op::Succeed => typed::<state::Running>(any)
                .succeed(RunSucceeded {
                    summary: Some("done".into()),
                })
                .into(),
            Op::Fail => typed::<state::Running>(any).fail(table_error()).into(),
            Op::Cancel(from) => match from {
                S::Queued => typed::<state::Queued>(any).begin_cancel(reason).into(),
                S::Starting => typed::<state::Starting>(any).begin_cancel(reason).into(),
                S::Running => typed::<state::Running>(any).begin_cancel(reason).into(),
                S::AwaitingInput => typed::<state::AwaitingInput>(any)
                    .begin_cancel(reason)
                    .into(),
                S::AwaitingApproval => typed::<state::AwaitingApproval>(any)
                    .begin_cancel(reason)
                    .into(),
                S::Cancelling => typed::<state::Cancelling>(any).begin_cancel(reason).into(),
                terminal => panic!("no begin_cancel on {terminal}"),
            },
            Op::Confirm => typed::<state::Cancelling>(any).confirm_cancelled().into(),
        }
    }

    /// Checks the data of the events this transition appended.
    fn check_data(self, appended: &[Arc<Event>]) {
        let payloads: Vec<&EventPayload> = appended.iter().map(|e| e.payload()).collect();
        let resolved = |outcome: ResolutionOutcome, action_type: ActionType| match payloads[0] {
            EventPayload::ActionResolved(r) => {
                assert_eq!(r.action_id, act());
                assert_eq!(r.revision, Revision::FIRST);
                assert_eq!(r.action_type, action_type);
                assert_eq!(r.outcome, outcome);
            }
            other => panic!("expected action.resolved, got {other:?}"),
        };
        let decided = |decision: DecisionKind, reason: Option<&str>| ResolutionOutcome::Decided {
            calls: vec![CallResolution {
                call_id: call_1(),
                decision,
                reason: reason.map(str::to_owned),
            }],
        };
        match self {
            Op::RequestInput | Op::RequestApproval => {
                let EventPayload::ActionRequested(request) = payloads[0] else {
                    panic!("expected action.requested, got {:?}", payloads[0]);
                };
                assert_eq!(request.id, act());
                assert_eq!(request.revision, Revision::FIRST);
                match (self, payloads[1]) {
                    (Op::RequestInput, EventPayload::RunAwaitingInput(a))
                    | (Op::RequestApproval, EventPayload::RunAwaitingApproval(a)) => {
                        assert_eq!(a.action_id, act());
                    }
                    (_, other) => panic!("unexpected {other:?}"),
                }
                if matches!(self, Op::RequestInput) {
                    assert_eq!(request.as_form(), Some(&form()));
                } else {
                    assert_eq!(request.as_approval(), Some(&approval(true)));
                }
            }
            Op::Submit => resolved(
                ResolutionOutcome::Submitted {
                    fields: vec!["name".parse().expect("valid")],
                },
                ActionType::FormInput,
            ),
            Op::Dismiss => resolved(ResolutionOutcome::Dismissed, ActionType::FormInput),
            Op::Approve => resolved(
                decided(DecisionKind::Approve, None),
                ActionType::ToolApproval,
            ),
            Op::Reject => resolved(
                decided(DecisionKind::Reject, Some("no")),
                ActionType::ToolApproval,
            ),
            Op::Edit => resolved(decided(DecisionKind::Edit, None), ActionType::ToolApproval),
            Op::Succeed => assert_eq!(
                payloads,
                [&EventPayload::RunSucceeded(RunSucceeded {
                    summary: Some("done".into())
                })]
            ),
            Op::Fail => match payloads[0] {
                EventPayload::RunFailed(f) => assert_eq!(f.error, table_error().public()),
                other => panic!("expected run.failed, got {other:?}"),
            },
            Op::Cancel(from) if from != S::Cancelling => assert_eq!(
                payloads,
                [&EventPayload::RunCancelling(CancelReason::new("table"))]
            ),
            Op::Confirm => assert_eq!(
                payloads,
                [&EventPayload::RunCancelled(CancelReason::new("setup"))]
            ),
            Op::Start | Op::Run | Op::Cancel(_) => {}
        }
    }
}

#[rstest]
#[case::queued_start(Op::Start, S::Starting, &["run.starting"])]
#[case::starting_run(Op::Run, S::Running, &["run.running"])]
#[case::running_request_input(
    Op::RequestInput,
    S::AwaitingInput,
    &["action.requested", "run.awaiting_input"]
)]
#[case::running_request_approval(
    Op::RequestApproval,
    S::AwaitingApproval,
    &["action.requested", "run.awaiting_approval"]
)]
#[case::awaiting_input_submit(Op::Submit, S::Running, &["action.resolved", "run.running"])]
#[case::awaiting_input_dismiss(Op::Dismiss, S::Running, &["action.resolved", "run.running"])]
#[case::awaiting_approval_approve(Op::Approve, S::Running, &["action.resolved", "run.running"])]
#[case::awaiting_approval_reject(Op::Reject, S::Running, &["action.resolved", "run.running"])]
#[case::awaiting_approval_edit(Op::Edit, S::Running, &["action.resolved", "run.running"])]
#[case::running_succeed(Op::Succeed, S::Succeeded, &["run.succeeded"])]
#[case::running_fail(Op::Fail, S::Failed, &["run.failed"])]
#[case::queued_cancel(Op::Cancel(S::Queued), S::Cancelling, &["run.cancelling"])]
#[case::starting_cancel(Op::Cancel(S::Starting), S::Cancelling, &["run.cancelling"])]
#[case::running_cancel(Op::Cancel(S::Running), S::Cancelling, &["run.cancelling"])]
#[case::awaiting_input_cancel(Op::Cancel(S::AwaitingInput), S::Cancelling, &["run.cancelling"])]
#[case::awaiting_approval_cancel(
    Op::Cancel(S::AwaitingApproval),
    S::Cancelling,
    &["run.cancelling"]
)]
#[case::cancelling_cancel_again(Op::Cancel(S::Cancelling), S::Cancelling, &[])]
#[case::cancelling_confirm(Op::Confirm, S::Cancelled, &["run.cancelled"])]
fn typed_transition(#[case] op: Op, #[case] to: ExecutionState, #[case] appended: &[&str]) {
    let from = op.source();
    let before = build(from);
    assert_eq!(before.state(), from);
    let id = before.id().clone();
    let prefix = before.events().snapshot(Cursor::START);

    let after = op.apply(before);

    assert_eq!(after.state(), to, "{op:?}");
    assert_eq!(after.id(), &id);
    let events = after.events().snapshot(Cursor::START);
    assert_contiguous(&events);
    assert_same_events(&events[..prefix.len()], &prefix);
    let got: Vec<&str> = events[prefix.len()..]
        .iter()
        .map(|e| e.kind().as_str())
        .collect();
    assert_eq!(got, appended, "{op:?} appended the wrong events");
    for e in &events {
        assert_eq!(e.execution_id(), &id);
    }
    op.check_data(&events[prefix.len()..]);

    // The runtime model agrees with the typed API.
    if from == to {
        // `begin_cancel` on a cancelling execution is idempotent: no edge is taken.
        assert!(!from.can_transition_to(to));
        assert!(!drawn(from, to));
    } else {
        assert!(
            drawn(from, to),
            "the typed API took an undrawn edge {from} -> {to}"
        );
        assert!(
            from.can_transition_to(to),
            "can_transition_to({from}, {to}) is false"
        );
    }
    // The pending action exists exactly while awaiting.
    assert_eq!(
        after.pending().is_some(),
        matches!(to, S::AwaitingInput | S::AwaitingApproval)
    );
}

#[test]
fn execution_state_all_is_in_the_documented_order() {
    let names: Vec<&str> = ExecutionState::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(names, NAMES);
    for s in ExecutionState::ALL {
        assert_eq!(s.to_string(), s.as_str());
        assert_eq!(s.is_terminal(), is_terminal(s));
        assert_eq!(
            serde_json::to_value(s).expect("serializes"),
            json!(s.as_str())
        );
    }
}

#[test]
fn can_transition_to_matches_the_diagram_on_all_81_pairs() {
    let mut checked = 0;
    for from in ExecutionState::ALL {
        for to in ExecutionState::ALL {
            assert_eq!(
                from.can_transition_to(to),
                drawn(from, to),
                "can_transition_to({from}, {to})"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 81);
    // 2 + 2 + 5 + 2 + 2 + 1 edges.
    assert_eq!(DRAWN.iter().flatten().filter(|x| **x == 1).count(), 14);
}

#[test]
fn every_drawn_edge_is_reachable_through_the_typed_api() {
    let mut taken = BTreeSet::new();
    for op in ALL_OPS {
        let from = op.source();
        let to = op.apply(build(from)).state();
        if from != to {
            taken.insert((from, to));
        }
    }
    let expected: BTreeSet<_> = ExecutionState::ALL
        .into_iter()
        .flat_map(|a| ExecutionState::ALL.into_iter().map(move |b| (a, b)))
        .filter(|(a, b)| drawn(*a, *b))
        .collect();
    assert_eq!(taken, expected);
}

// ---------------------------------------------------------------------------------------------
// Cancellation and failure
// ---------------------------------------------------------------------------------------------

#[test]
fn begin_cancel_on_a_cancelling_execution_appends_nothing_and_keeps_the_first_reason() {
    let cancelling = running().begin_cancel(CancelReason::new("first"));
    let before = cancelling.events().snapshot(Cursor::START);
    let cancelling = cancelling.begin_cancel(CancelReason::new("second"));
    let cancelling = cancelling.begin_cancel(CancelReason::default());
    assert_eq!(cancelling.state(), S::Cancelling);
    assert_same_events(&cancelling.events().snapshot(Cursor::START), &before);

    let cancelled = cancelling.confirm_cancelled();
    let events = cancelled.events().snapshot(Cursor::START);
    assert_eq!(
        events.last().map(|e| e.payload().clone()),
        Some(EventPayload::RunCancelled(CancelReason::new("first")))
    );
    assert_eq!(
        kinds(&cancelled.events()),
        [
            "run.queued",
            "run.starting",
            "run.running",
            "run.cancelling",
            "run.cancelled"
        ]
    );
}

#[rstest]
fn confirm_cancelled_carries_the_reason_given_to_begin_cancel(
    #[values(
        S::Queued,
        S::Starting,
        S::Running,
        S::AwaitingInput,
        S::AwaitingApproval
    )]
    from: ExecutionState,
    #[values(Some("user pressed stop"), None)] reason: Option<&str>,
) {
    let reason = reason.map_or_else(CancelReason::default, CancelReason::new);
    let cancelling = build(from)
        .begin_cancel(reason.clone())
        .expect("non-terminal");
    let cancelled = cancelling.confirm_cancelled();
    let events = cancelled.events().snapshot(Cursor::START);
    let n = events.len();
    assert_eq!(
        events[n - 2].payload(),
        &EventPayload::RunCancelling(reason.clone())
    );
    assert_eq!(events[n - 1].payload(), &EventPayload::RunCancelled(reason));
    assert!(
        cancelled
            .into_any()
            .begin_cancel(CancelReason::default())
            .is_err()
    );
}

#[test]
fn a_failure_while_starting_runs_then_fails_with_only_the_public_error_logged() {
    let error = HarnessError::new(ErrorCategory::Unavailable, "the sandbox could not start")
        .with_provider_code("E_SANDBOX")
        .with_diagnostic("secret-token-1234 in /var/lib/worker");
    let starting = Execution::queue(ExecutionId::generate()).start();
    let failed = starting.run().fail(error.clone());

    assert_eq!(failed.state(), S::Failed);
    assert_eq!(
        kinds(&failed.events()),
        ["run.queued", "run.starting", "run.running", "run.failed"]
    );
    let last = failed.events().last().expect("an event");
    let EventPayload::RunFailed(data) = last.payload() else {
        panic!("expected run.failed, got {:?}", last.payload());
    };
    assert_eq!(data.error, error.public());
    assert_eq!(data.error.message, "the sandbox could not start");
    assert_eq!(data.error.provider_code.as_deref(), Some("E_SANDBOX"));
    let wire = serde_json::to_string(&*last).expect("serializes");
    assert!(
        !wire.contains("secret-token-1234"),
        "diagnostic leaked: {wire}"
    );
    assert!(
        !wire.contains("/var/lib/worker"),
        "diagnostic leaked: {wire}"
    );

    // The full error, diagnostic included, stays with the execution.
    assert_eq!(failed.error(), &error);
    assert_eq!(
        failed.error().diagnostic(),
        Some("secret-token-1234 in /var/lib/worker")
    );
    // The path is one the diagram draws.
    assert!(drawn(S::Starting, S::Running) && drawn(S::Running, S::Failed));
    assert!(!drawn(S::Starting, S::Failed));
}

// ---------------------------------------------------------------------------------------------
// Bad answers
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum BadForm {
    StaleRevision,
    WrongAction,
    MissingRequired,
    WrongType,
    UnknownField,
}

impl BadForm {
    fn response(self) -> FormResponse {
        let values = FormValues::new().with("name", "Ada");
        match self {
            Self::StaleRevision => FormResponse::submit(act(), Revision::FIRST.next(), values),
            Self::WrongAction => FormResponse::submit(other_act(), Revision::FIRST, values),
            Self::MissingRequired => {
                FormResponse::submit(act(), Revision::FIRST, FormValues::new().with("age", 3))
            }
            Self::WrongType => {
                FormResponse::submit(act(), Revision::FIRST, values.with("age", "three"))
            }
            Self::UnknownField => {
                FormResponse::submit(act(), Revision::FIRST, values.with("nickname", "A"))
            }
        }
    }

    fn check(self, err: &ActionResponseError) {
        match (self, err) {
            (
                Self::StaleRevision,
                ActionResponseError::StaleRevision {
                    pending, answered, ..
                },
            ) => {
                assert_eq!(
                    (*pending, *answered),
                    (Revision::FIRST, Revision::FIRST.next())
                );
            }
            (Self::WrongAction, ActionResponseError::ActionMismatch { pending, answered }) => {
                assert_eq!((pending, answered), (&act(), &other_act()));
            }
            (Self::MissingRequired, ActionResponseError::InvalidFormValues { violations, .. }) => {
                assert_eq!(violations.len(), 1);
                assert_eq!(violations[0].field, "name");
                assert_eq!(violations[0].problem, FieldProblem::Missing);
            }
            (Self::WrongType, ActionResponseError::InvalidFormValues { violations, .. }) => {
                assert_eq!(violations.len(), 1);
                assert_eq!(violations[0].field, "age");
            }
            (Self::UnknownField, ActionResponseError::InvalidFormValues { violations, .. }) => {
                assert_eq!(violations.len(), 1);
                assert_eq!(violations[0].field, "nickname");
                assert_eq!(violations[0].problem, FieldProblem::Unknown);
            }
            (bad, err) => panic!("{bad:?} gave the wrong error: {err:?}"),
        }
    }
}

#[rstest]
#[case::stale_revision(BadForm::StaleRevision, ErrorCode::ACTION_REVISION_STALE)]
#[case::wrong_action(BadForm::WrongAction, ErrorCode::ACTION_NOT_FOUND)]
#[case::missing_required(BadForm::MissingRequired, ErrorCode::ACTION_RESPONSE_INVALID)]
#[case::wrong_type(BadForm::WrongType, ErrorCode::ACTION_RESPONSE_INVALID)]
#[case::unknown_field(BadForm::UnknownField, ErrorCode::ACTION_RESPONSE_INVALID)]
fn a_bad_form_answer_leaves_the_execution_unchanged(#[case] bad: BadForm, #[case] code: ErrorCode) {
    let waiting = running().request_input(act(), form());
    let pending = waiting.pending().clone();
    let before = waiting.events().snapshot(Cursor::START);

    let (waiting, err) = waiting
        .resolve(bad.response())
        .map(|(e, _)| e)
        .expect_err("a bad answer is refused");
    assert_eq!(err.code(), code, "{err}");
    bad.check(&err);
    assert_eq!(waiting.state(), S::AwaitingInput);
    assert_eq!(waiting.pending(), &pending);
    assert_eq!(waiting.request(), &form());
    assert_same_events(&waiting.events().snapshot(Cursor::START), &before);

    // The same execution still accepts a good answer.
    let (running, validated) = waiting
        .resolve(good_submit())
        .map_err(|(_, e)| e)
        .expect("a good answer resolves");
    assert_eq!(running.state(), S::Running);
    assert_eq!(
        validated.values().and_then(|v| v.get("name")),
        Some(&json!("Ada"))
    );
    let events = running.events().snapshot(Cursor::START);
    assert_same_events(&events[..before.len()], &before);
    let tail: Vec<_> = events[before.len()..]
        .iter()
        .map(|e| e.kind().as_str())
        .collect();
    assert_eq!(tail, ["action.resolved", "run.running"]);
}

#[derive(Debug, Clone, Copy)]
enum BadApproval {
    StaleRevision,
    WrongAction,
    /// `edit` on a call that only allows approve and reject.
    UndeclaredEdit,
    UnknownCall,
    DuplicateDecision,
    NoDecision,
    EditWrongType,
    EditMissingProperty,
}

impl BadApproval {
    fn edit_allowed(self) -> bool {
        !matches!(self, Self::UndeclaredEdit)
    }

    fn response(self) -> ApprovalResponse {
        let approve = || ToolDecision::approve(call_1());
        let decide = |d: Vec<ToolDecision>| ApprovalResponse::decide(act(), Revision::FIRST, d);
        match self {
            Self::StaleRevision => {
                ApprovalResponse::decide(act(), Revision::FIRST.next(), [approve()])
            }
            Self::WrongAction => {
                ApprovalResponse::decide(other_act(), Revision::FIRST, [approve()])
            }
            Self::UndeclaredEdit => decide(vec![ToolDecision::edit(
                call_1(),
                json!({"path": "/tmp/x"}),
            )]),
            Self::UnknownCall => decide(vec![
                approve(),
                ToolDecision::approve("call_9".parse().expect("valid")),
            ]),
            Self::DuplicateDecision => decide(vec![approve(), ToolDecision::reject(call_1())]),
            Self::NoDecision => decide(vec![]),
            Self::EditWrongType => decide(vec![ToolDecision::edit(call_1(), json!({"path": 42}))]),
            Self::EditMissingProperty => {
                decide(vec![ToolDecision::edit(call_1(), json!({"file": "/x"}))])
            }
        }
    }

    fn check(self, err: &ActionResponseError) {
        use ActionResponseError as E;
        let ok = match (self, err) {
            (Self::StaleRevision, E::StaleRevision { .. })
            | (Self::WrongAction, E::ActionMismatch { .. })
            | (Self::DuplicateDecision, E::DuplicateDecision { .. })
            | (Self::NoDecision, E::MissingDecision { .. }) => true,
            (
                Self::UndeclaredEdit,
                E::DecisionNotAllowed {
                    decision, allowed, ..
                },
            ) => {
                *decision == DecisionKind::Edit
                    && allowed == &[DecisionKind::Approve, DecisionKind::Reject]
            }
            (Self::UnknownCall, E::UnknownCall { call_id, known, .. }) => {
                call_id.as_str() == "call_9" && known == &[call_1()]
            }
            (Self::EditWrongType, E::InvalidEditedArguments { violations, .. }) => {
                violations.iter().any(|v| v.pointer == "/path")
            }
            (Self::EditMissingProperty, E::InvalidEditedArguments { violations, .. }) => {
                !violations.is_empty()
            }
            _ => false,
        };
        assert!(ok, "{self:?} gave the wrong error: {err:?}");
    }
}

#[rstest]
#[case::stale_revision(BadApproval::StaleRevision, ErrorCode::ACTION_REVISION_STALE)]
#[case::wrong_action(BadApproval::WrongAction, ErrorCode::ACTION_NOT_FOUND)]
#[case::undeclared_edit(BadApproval::UndeclaredEdit, ErrorCode::ACTION_RESPONSE_INVALID)]
#[case::unknown_call(BadApproval::UnknownCall, ErrorCode::ACTION_RESPONSE_INVALID)]
#[case::duplicate_decision(BadApproval::DuplicateDecision, ErrorCode::ACTION_RESPONSE_INVALID)]
#[case::no_decision(BadApproval::NoDecision, ErrorCode::ACTION_RESPONSE_INVALID)]
#[case::edit_wrong_type(BadApproval::EditWrongType, ErrorCode::ACTION_RESPONSE_INVALID)]
#[case::edit_missing_property(BadApproval::EditMissingProperty, ErrorCode::ACTION_RESPONSE_INVALID)]
fn a_bad_approval_answer_leaves_the_execution_unchanged(
    #[case] bad: BadApproval,
    #[case] code: ErrorCode,
) {
    let waiting = running().request_approval(act(), approval(bad.edit_allowed()));
    let pending = waiting.pending().clone();
    let before = waiting.events().snapshot(Cursor::START);

    let (waiting, err) = waiting
        .resolve(bad.response())
        .map(|(e, _)| e)
        .expect_err("a bad answer is refused");
    assert_eq!(err.code(), code, "{err}");
    bad.check(&err);
    assert_eq!(waiting.state(), S::AwaitingApproval);
    assert_eq!(waiting.pending(), &pending);
    assert_eq!(waiting.request(), &approval(bad.edit_allowed()));
    assert_same_events(&waiting.events().snapshot(Cursor::START), &before);

    let (running, validated) = waiting
        .resolve(good_approve())
        .map_err(|(_, e)| e)
        .expect("a good answer resolves");
    assert_eq!(running.state(), S::Running);
    assert_eq!(
        validated.decision_for(&call_1()).map(|d| d.kind()),
        Some(DecisionKind::Approve)
    );
    let events = running.events().snapshot(Cursor::START);
    assert_same_events(&events[..before.len()], &before);
    let tail: Vec<_> = events[before.len()..]
        .iter()
        .map(|e| e.kind().as_str())
        .collect();
    assert_eq!(tail, ["action.resolved", "run.running"]);
}

// ---------------------------------------------------------------------------------------------
// Content and artifacts
// ---------------------------------------------------------------------------------------------

fn all_content() -> Vec<(Content, &'static str)> {
    vec![
        (
            Content::MessageDelta(TextDelta::new("hello")),
            "message.delta",
        ),
        (
            Content::ReasoningDelta(TextDelta::new("hmm")),
            "reasoning.delta",
        ),
        (
            Content::Usage(Usage {
                input_tokens: 3,
                output_tokens: 4,
                ..Usage::default()
            }),
            "usage",
        ),
        (
            Content::ToolCallStarted(ToolCall {
                call_id: call_1(),
                tool: "read_file".into(),
                arguments: json!({"path": "/a"}),
            }),
            "tool.call.started",
        ),
        (
            Content::ToolCallCompleted(ToolCallCompleted {
                call_id: call_1(),
                outcome: ToolCallOutcome::Success { output: json!("x") },
            }),
            "tool.call.completed",
        ),
        (
            Content::Native(
                NativeEvent::new("acp", "plan.update", json!({"n": 1})).expect("valid"),
            ),
            "native",
        ),
    ]
}

fn emit_all<S: Emitting>(e: &mut Execution<S>) {
    for (content, kind) in all_content() {
        let before = e.events().len();
        let event = e
            .emit(content.clone())
            .expect("emitting state accepts content");
        assert_eq!(event.kind().as_str(), kind);
        assert_eq!(event.payload(), &EventPayload::from(content));
        assert_eq!(event.seq().get(), before as u64 + 1);
        assert_eq!(event.execution_id(), e.id());
        let last = e.events().last().expect("an event");
        assert!(Arc::ptr_eq(&last, &event));
    }
}

#[test]
fn content_is_emitted_while_running_and_while_cancelling() {
    let mut running = running();
    emit_all(&mut running);
    let mut cancelling = running.begin_cancel(CancelReason::new("stop"));
    emit_all(&mut cancelling);
    let cancelled = cancelling.confirm_cancelled();
    let content: Vec<&str> = all_content().iter().map(|(_, k)| *k).collect();
    let mut expected = vec!["run.queued", "run.starting", "run.running"];
    expected.extend(&content);
    expected.push("run.cancelling");
    expected.extend(&content);
    expected.push("run.cancelled");
    assert_eq!(kinds(&cancelled.events()), expected);
    assert_contiguous(&cancelled.events().snapshot(Cursor::START));
}

/// Creates `id`, then checks that a duplicate and a foreign descriptor are refused without
/// appending anything.
fn artifact_rules<S: Emitting>(e: &mut Execution<S>, id: &str, duplicate_of: &str) {
    let me = e.id().clone();
    let fresh = descriptor(&me, id);
    let created = e
        .create_artifact(fresh.clone())
        .expect("a fresh artifact is created");
    assert_eq!(created.kind().as_str(), "artifact.created");
    assert_eq!(
        created.payload(),
        &EventPayload::ArtifactCreated(Box::new(fresh))
    );
    assert_eq!(created.seq().get(), e.events().len() as u64);

    let before = e.events().snapshot(Cursor::START);
    let dup = ArtifactDescriptor::builder(
        duplicate_of.parse().expect("valid"),
        me.clone(),
        "application/json",
    )
    .name("again")
    .build()
    .expect("valid descriptor");
    assert_eq!(
        e.create_artifact(dup).expect_err("duplicate id"),
        AppendError::DuplicateArtifact {
            execution_id: me.clone(),
            artifact_id: duplicate_of.parse().expect("valid"),
        }
    );
    assert_same_events(&e.events().snapshot(Cursor::START), &before);

    let other = ExecutionId::generate();
    let foreign_id = format!("{id}_foreign");
    assert_eq!(
        e.create_artifact(descriptor(&other, &foreign_id))
            .expect_err("foreign owner"),
        AppendError::ForeignArtifact {
            execution_id: me.clone(),
            artifact_id: foreign_id.parse().expect("valid"),
            owner: other,
        }
    );
    assert_same_events(&e.events().snapshot(Cursor::START), &before);
    // The refused foreign descriptor did not reserve its id.
    e.create_artifact(descriptor(&me, &foreign_id))
        .expect("the id is still free in this execution");
}

#[test]
fn artifacts_are_unique_owned_and_refusals_append_nothing() {
    let mut running = running();
    artifact_rules(&mut running, "art_1", "art_1");
    let mut cancelling = running.begin_cancel(CancelReason::default());
    // A duplicate of an artifact created while running is refused while cancelling too.
    artifact_rules(&mut cancelling, "art_2", "art_1");
    let cancelled = cancelling.confirm_cancelled();

    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for e in cancelled.events().snapshot(Cursor::START) {
        if let EventPayload::ArtifactCreated(a) = e.payload() {
            assert_eq!(a.execution_id(), cancelled.id());
            *count.entry(a.id().to_string()).or_default() += 1;
        }
    }
    let expected: BTreeMap<String, usize> = ["art_1", "art_1_foreign", "art_2", "art_2_foreign"]
        .into_iter()
        .map(|s| (s.to_owned(), 1))
        .collect();
    assert_eq!(count, expected);
}

// ---------------------------------------------------------------------------------------------
// AnyExecution
// ---------------------------------------------------------------------------------------------

#[rstest]
fn any_execution_round_trips_every_state(
    #[values(
        S::Queued,
        S::Starting,
        S::Running,
        S::AwaitingInput,
        S::AwaitingApproval,
        S::Cancelling,
        S::Succeeded,
        S::Failed,
        S::Cancelled
    )]
    s: ExecutionState,
) {
    let any = build(s);
    assert_eq!(any.state(), s);
    let id = any.id().clone();
    let events = any.events().snapshot(Cursor::START);
    let pending = any.pending().cloned();
    assert_eq!(
        pending.is_some(),
        matches!(s, S::AwaitingInput | S::AwaitingApproval)
    );

    // TryFrom into the right typed state, then From back, twice.
    let back = try_as(s, any).expect("the right state converts");
    let back = try_as(s, back).expect("and again");
    assert_eq!(back.state(), s);
    assert_eq!(back.id(), &id);
    assert_eq!(back.pending().cloned(), pending);
    assert_same_events(&back.events().snapshot(Cursor::START), &events);
    // The last event is the lifecycle event of the state.
    assert_eq!(
        back.events()
            .last()
            .and_then(|e| state_of(e.kind().as_str())),
        Some(s)
    );
}

#[rstest]
fn try_from_the_wrong_state_gives_the_execution_back_intact(
    #[values(
        S::Queued,
        S::Starting,
        S::Running,
        S::AwaitingInput,
        S::AwaitingApproval,
        S::Cancelling,
        S::Succeeded,
        S::Failed,
        S::Cancelled
    )]
    s: ExecutionState,
) {
    let mut any = build(s);
    let id = any.id().clone();
    let events = any.events().snapshot(Cursor::START);
    for wrong in ExecutionState::ALL.into_iter().filter(|t| *t != s) {
        let err = try_as(wrong, any).expect_err("wrong state");
        assert_eq!(err.expected(), wrong);
        assert_eq!(err.actual(), s);
        let msg = err.to_string();
        assert!(
            msg.contains(s.as_str()) && msg.contains(wrong.as_str()) && msg.contains(id.as_str()),
            "{msg}"
        );
        any = err.into_inner();
        assert_eq!(any.state(), s);
        assert_eq!(any.id(), &id);
        assert_same_events(&any.events().snapshot(Cursor::START), &events);
    }
    // Still usable: it converts to its real state and carries on.
    let any = try_as(s, any).expect("the right state converts");
    match any.begin_cancel(CancelReason::new("after")) {
        Ok(cancelling) => {
            assert!(!is_terminal(s));
            let cancelled = cancelling.confirm_cancelled();
            let k = kinds(&cancelled.events());
            assert_eq!(k.last(), Some(&"run.cancelled"));
            assert_eq!(k.len(), events.len() + usize::from(s != S::Cancelling) + 1);
        }
        Err(any) => {
            assert!(is_terminal(s));
            assert_same_events(&any.events().snapshot(Cursor::START), &events);
        }
    }
}

#[rstest]
fn any_execution_begin_cancel_refuses_terminal_executions(
    #[values(S::Succeeded, S::Failed, S::Cancelled)] s: ExecutionState,
) {
    let any = build(s);
    let id = any.id().clone();
    let events = any.events().snapshot(Cursor::START);
    let back = any
        .begin_cancel(CancelReason::new("too late"))
        .expect_err("a terminal execution cannot be cancelled");
    assert_eq!(back.state(), s);
    assert_eq!(back.id(), &id);
    assert_same_events(&back.events().snapshot(Cursor::START), &events);
    assert!(back.events().is_closed());
}

#[rstest]
fn any_execution_begin_cancel_cancels_non_terminal_executions(
    #[values(
        S::Queued,
        S::Starting,
        S::Running,
        S::AwaitingInput,
        S::AwaitingApproval,
        S::Cancelling
    )]
    s: ExecutionState,
) {
    let any = build(s);
    let before = any.events().snapshot(Cursor::START);
    let cancelling = any
        .begin_cancel(CancelReason::new("any"))
        .expect("non-terminal");
    assert_eq!(cancelling.state(), S::Cancelling);
    let after = cancelling.events().snapshot(Cursor::START);
    assert_same_events(&after[..before.len()], &before);
    let tail: Vec<_> = after[before.len()..]
        .iter()
        .map(|e| e.kind().as_str())
        .collect();
    if s == S::Cancelling {
        assert!(tail.is_empty());
    } else {
        assert_eq!(tail, ["run.cancelling"]);
    }
}

// ---------------------------------------------------------------------------------------------
// Random operation sequences
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum POp {
    Start,
    Run,
    RequestInput,
    RequestApproval,
    Resolve { valid: bool, which: u8 },
    Emit(u8),
    Artifact(u8),
    Succeed,
    Fail,
    BeginCancel,
    Confirm,
}

fn pop() -> impl Strategy<Value = POp> {
    prop_oneof![
        3 => Just(POp::Start),
        3 => Just(POp::Run),
        2 => Just(POp::RequestInput),
        2 => Just(POp::RequestApproval),
        5 => (any::<bool>(), 0u8..3).prop_map(|(valid, which)| POp::Resolve { valid, which }),
        4 => (0u8..3).prop_map(POp::Emit),
        3 => (0u8..4).prop_map(POp::Artifact),
        1 => Just(POp::Succeed),
        1 => Just(POp::Fail),
        1 => Just(POp::BeginCancel),
        1 => Just(POp::Confirm),
    ]
}

fn content(k: u8) -> (Content, &'static str) {
    match k {
        0 => (Content::MessageDelta(TextDelta::new("m")), "message.delta"),
        1 => (
            Content::ReasoningDelta(TextDelta::new("r")),
            "reasoning.delta",
        ),
        _ => (Content::Usage(Usage::default()), "usage"),
    }
}

fn artifact_name(n: u8) -> String {
    format!("art_{n}")
}

fn emit_step<S: Emitting>(e: &mut Execution<S>, k: u8) -> Vec<&'static str> {
    let (c, kind) = content(k);
    e.emit(c).expect("emitting state accepts content");
    vec![kind]
}

fn artifact_step<S: Emitting>(
    e: &mut Execution<S>,
    n: u8,
    created: &mut BTreeSet<u8>,
) -> Vec<&'static str> {
    let me = e.id().clone();
    match e.create_artifact(descriptor(&me, &artifact_name(n))) {
        Ok(_) => {
            assert!(created.insert(n), "duplicate artifact {n} was accepted");
            vec!["artifact.created"]
        }
        Err(AppendError::DuplicateArtifact { artifact_id, .. }) => {
            assert!(created.contains(&n), "fresh artifact {n} was refused");
            assert_eq!(artifact_id.as_str(), artifact_name(n));
            vec![]
        }
        Err(other) => panic!("unexpected {other:?}"),
    }
}

fn form_answer(valid: bool, which: u8) -> FormResponse {
    match (valid, which) {
        (true, 0) => good_submit(),
        (true, 1) => FormResponse::submit(
            act(),
            Revision::FIRST,
            FormValues::new().with("name", "Bo").with("age", 7),
        ),
        (true, _) => FormResponse::dismiss(act(), Revision::FIRST),
        (false, 0) => FormResponse::dismiss(act(), Revision::FIRST.next()),
        (false, 1) => FormResponse::submit(other_act(), Revision::FIRST, FormValues::new()),
        (false, _) => FormResponse::submit(act(), Revision::FIRST, FormValues::new()),
    }
}

fn approval_answer(valid: bool, which: u8) -> ApprovalResponse {
    let decide = |d: ToolDecision| ApprovalResponse::decide(act(), Revision::FIRST, [d]);
    match (valid, which) {
        (true, 0) => good_approve(),
        (true, 1) => decide(ToolDecision::edit(call_1(), json!({"path": "/b"}))),
        (true, _) => ApprovalResponse::dismiss(act(), Revision::FIRST),
        (false, 0) => ApprovalResponse::decide(
            act(),
            Revision::FIRST.next(),
            [ToolDecision::approve(call_1())],
        ),
        (false, 1) => decide(ToolDecision::edit(call_1(), json!({"path": false}))),
        (false, _) => ApprovalResponse::decide(act(), Revision::FIRST, []),
    }
}

/// Applies `op` when it applies to the current state; returns the execution and the kinds
/// the operation must have appended.
fn step(
    any: AnyExecution,
    op: &POp,
    created: &mut BTreeSet<u8>,
) -> (AnyExecution, Vec<&'static str>) {
    let from = any.state();
    match (op, any) {
        (POp::Start, AnyExecution::Queued(e)) => (e.start().into(), vec!["run.starting"]),
        (POp::Run, AnyExecution::Starting(e)) => (e.run().into(), vec!["run.running"]),
        (POp::RequestInput, AnyExecution::Running(e)) => (
            e.request_input(act(), form()).into(),
            vec!["action.requested", "run.awaiting_input"],
        ),
        (POp::RequestApproval, AnyExecution::Running(e)) => (
            e.request_approval(act(), approval(true)).into(),
            vec!["action.requested", "run.awaiting_approval"],
        ),
        (POp::Resolve { valid, which }, AnyExecution::AwaitingInput(e)) => {
            match e.resolve(form_answer(*valid, *which)) {
                Ok((r, _)) => {
                    assert!(*valid, "an invalid form answer was accepted");
                    (r.into(), vec!["action.resolved", "run.running"])
                }
                Err((e, err)) => {
                    assert!(!*valid, "a valid form answer was refused: {err}");
                    assert_eq!(e.pending().id, act());
                    (e.into(), vec![])
                }
            }
        }
        (POp::Resolve { valid, which }, AnyExecution::AwaitingApproval(e)) => {
            match e.resolve(approval_answer(*valid, *which)) {
                Ok((r, _)) => {
                    assert!(*valid, "an invalid approval answer was accepted");
                    (r.into(), vec!["action.resolved", "run.running"])
                }
                Err((e, err)) => {
                    assert!(!*valid, "a valid approval answer was refused: {err}");
                    assert_eq!(e.pending().id, act());
                    (e.into(), vec![])
                }
            }
        }
        (POp::Emit(k), AnyExecution::Running(mut e)) => {
            let appended = emit_step(&mut e, *k);
            (e.into(), appended)
        }
        (POp::Emit(k), AnyExecution::Cancelling(mut e)) => {
            let appended = emit_step(&mut e, *k);
            (e.into(), appended)
        }
        (POp::Artifact(n), AnyExecution::Running(mut e)) => {
            let appended = artifact_step(&mut e, *n, created);
            (e.into(), appended)
        }
        (POp::Artifact(n), AnyExecution::Cancelling(mut e)) => {
            let appended = artifact_step(&mut e, *n, created);
            (e.into(), appended)
        }
        (POp::Succeed, AnyExecution::Running(e)) => (
            e.succeed(RunSucceeded::default()).into(),
            vec!["run.succeeded"],
        ),
        (POp::Fail, AnyExecution::Running(e)) => (
            e.fail(HarnessError::new(ErrorCategory::Internal, "x"))
                .into(),
            vec!["run.failed"],
        ),
        (POp::BeginCancel, any) => match any.begin_cancel(CancelReason::new("prop")) {
            Ok(c) => {
                assert!(!is_terminal(from));
                let appended = if from == S::Cancelling {
                    vec![]
                } else {
                    vec!["run.cancelling"]
                };
                (c.into(), appended)
            }
            Err(any) => {
                assert!(is_terminal(from), "begin_cancel refused {from}");
                (any, vec![])
            }
        },
        (POp::Confirm, AnyExecution::Cancelling(e)) => {
            (e.confirm_cancelled().into(), vec!["run.cancelled"])
        }
        // The operation does not apply to this state: skipped.
        (_, any) => (any, vec![]),
    }
}

fn check_invariants(any: &AnyExecution, created: &BTreeSet<u8>) -> Result<(), TestCaseError> {
    let events = any.events().snapshot(Cursor::START);
    for (i, e) in events.iter().enumerate() {
        prop_assert_eq!(e.seq().get(), i as u64 + 1, "sequence gap");
        prop_assert_eq!(e.execution_id(), any.id());
    }
    let kinds: Vec<&str> = events.iter().map(|e| e.kind().as_str()).collect();

    // At most one terminal event, and it is the last one.
    let terminals: Vec<usize> = kinds
        .iter()
        .enumerate()
        .filter(|(_, k)| state_of(k).is_some_and(is_terminal))
        .map(|(i, _)| i)
        .collect();
    prop_assert!(terminals.len() <= 1, "several terminal events: {:?}", kinds);
    if let Some(&t) = terminals.first() {
        prop_assert_eq!(
            t,
            kinds.len() - 1,
            "events after the terminal one: {:?}",
            kinds
        );
        prop_assert!(any.events().is_closed());
    } else {
        prop_assert!(!any.events().is_closed());
    }

    // The lifecycle events form a path of the diagram, from queued to the current state.
    let path: Vec<ExecutionState> = kinds.iter().filter_map(|k| state_of(k)).collect();
    prop_assert_eq!(path.first(), Some(&S::Queued));
    for w in path.windows(2) {
        prop_assert!(
            drawn(w[0], w[1]),
            "undrawn edge {} -> {} in {:?}",
            w[0],
            w[1],
            kinds
        );
    }
    prop_assert_eq!(path.last(), Some(&any.state()));

    // Action events are paired with their lifecycle event.
    for (i, k) in kinds.iter().enumerate() {
        match *k {
            "action.requested" => prop_assert!(
                matches!(
                    kinds.get(i + 1),
                    Some(&"run.awaiting_input" | &"run.awaiting_approval")
                ),
                "{:?}",
                kinds
            ),
            "action.resolved" => {
                prop_assert_eq!(kinds.get(i + 1), Some(&"run.running"), "{:?}", kinds);
            }
            _ => {}
        }
    }
    // The pending action is the one last requested, exactly while awaiting.
    match any.pending() {
        Some(pending) => {
            prop_assert!(matches!(
                any.state(),
                S::AwaitingInput | S::AwaitingApproval
            ));
            let requested = events.iter().rev().find_map(|e| match e.payload() {
                EventPayload::ActionRequested(r) => Some(&**r),
                _ => None,
            });
            prop_assert_eq!(requested, Some(pending));
        }
        None => prop_assert!(!matches!(
            any.state(),
            S::AwaitingInput | S::AwaitingApproval
        )),
    }

    // Each artifact id has exactly one artifact.created, and they are the ones created.
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for e in &events {
        if let EventPayload::ArtifactCreated(a) = e.payload() {
            *count.entry(a.id().to_string()).or_default() += 1;
        }
    }
    prop_assert!(count.values().all(|n| *n == 1), "{:?}", count);
    let names: BTreeSet<String> = count.into_keys().collect();
    let expected: BTreeSet<String> = created.iter().map(|n| artifact_name(*n)).collect();
    prop_assert_eq!(names, expected);
    Ok(())
}

proptest! {
    #[test]
    fn random_operation_sequences_keep_the_runtime_model_invariants(
        ops in prop::collection::vec(pop(), 0..60)
    ) {
        let mut any: AnyExecution = Execution::queue(ExecutionId::generate()).into();
        let mut created = BTreeSet::new();
        check_invariants(&any, &created)?;
        for op in &ops {
            let before = any.events().snapshot(Cursor::START);
            let (next, appended) = step(any, op, &mut created);
            any = next;
            let after = any.events().snapshot(Cursor::START);
            prop_assert!(after.len() >= before.len(), "events disappeared");
            for (x, y) in before.iter().zip(&after) {
                prop_assert!(Arc::ptr_eq(x, y), "event #{} was rewritten", x.seq());
            }
            let tail: Vec<&str> = after[before.len()..].iter().map(|e| e.kind().as_str()).collect();
            prop_assert_eq!(tail, appended, "after {:?}", op);
            check_invariants(&any, &created)?;
        }
    }
}

mod restore {
    use harness_core::event::{Event, EventPayload};
    use harness_core::id::{Cursor, ExecutionId, Sequence};
    use harness_core::lifecycle::{AnyExecution, Execution, ExecutionState};
    use harness_core::time::Timestamp;

    fn stored(events: &harness_core::log::LogReader) -> Vec<Event> {
        events
            .snapshot(Cursor::START)
            .iter()
            .map(|e| (**e).clone())
            .collect()
    }

    #[test]
    fn a_log_restores_to_the_state_it_leaves_and_keeps_its_events() {
        let id = ExecutionId::generate();
        let running = Execution::queue(id.clone()).start().run();
        let log = stored(&running.events());
        let restored = AnyExecution::restore(&id, log.clone()).unwrap();
        assert_eq!(restored.state(), ExecutionState::Running);
        let again: Vec<Event> = stored(&restored.events());
        assert_eq!(again, log);
        drop(running);
    }

    #[test]
    fn a_log_that_ended_has_a_gap_or_is_another_executions_is_refused() {
        let id = ExecutionId::generate();
        let running = Execution::queue(id.clone()).start().run();
        let mut log = stored(&running.events());
        let _done = running.succeed(Default::default());

        assert!(AnyExecution::restore(&id, Vec::new()).is_err(), "empty");
        let other = ExecutionId::generate();
        let err = AnyExecution::restore(&other, log.clone()).unwrap_err();
        assert!(err.to_string().contains("does not continue"), "{err}");
        let gap = vec![log[0].clone(), log[2].clone()];
        assert!(AnyExecution::restore(&id, gap).is_err(), "a gap");
        log.push(Event::new(
            id.clone(),
            Sequence::new(4).unwrap(),
            Timestamp::now(),
            EventPayload::RunSucceeded(Default::default()),
        ));
        let err = AnyExecution::restore(&id, log).unwrap_err();
        assert!(err.to_string().contains("ended"), "{err}");
    }
}
