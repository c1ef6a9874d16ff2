//! Deliberately broken adapters, each breaking one rule: the suite must fail every one of them,
//! naming the rule. A control adapter with no fault passes, so each failure is the fault's.
//!
//! One hand-written adapter implements the full contract at the runtime boundary (no
//! `SimpleAdapter` bridge, so faults can live in `resume`, `cancel` and `cleanup`); the
//! request's message selects the behaviour.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use futures_util::stream;
use harness_conformance::{Behaviour, Bounds, FixtureOutcome, Knobs, Report, certify, run_fixture};
use harness_core::action::{ApprovalRequest, Decision, ToolCallApproval, ValidatedResponse};
use harness_core::adapter::{
    AdapterEvent, AgentConfig, BoxFuture, BoxStream, CancelResult, DeploymentContext, EventResult,
    HarnessAdapter, HarnessRuntime, Interrupt, InterruptKind, ResumeDecision, RuntimeContext,
    RuntimeIdentity, RuntimeInit, TurnInput,
};
use harness_core::capability::{Capability, CapabilityKey as K, CapabilityReport};
use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::event::{
    CancelReason, Content, RunSucceeded, TextDelta, ToolCall, ToolCallCompleted, ToolCallOutcome,
};
use harness_core::id::ActionId;
use harness_core::manifest::{ContractVersion, ExecutionMode, HarnessDescriptor};
use harness_core::service::ExecutionRequest;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The one rule each adapter breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The control: breaks nothing.
    None,
    /// Every segment yields two terminal items.
    TwoTerminals,
    /// A segment ends without its terminal item: a gap in the run's lifecycle.
    SequenceGap,
    /// A segment yields content after its terminal item.
    EventsAfterTerminal,
    /// The second cleanup double-releases (panics).
    CleanupTwice,
    /// Errors echo the caller's client context (credentials included).
    LeakCredential,
    /// The cancel hook reports success but stops nothing.
    CancelIgnored,
    /// A decision is applied every time it is handed over.
    AcceptsTwice,
    /// `stream.reasoning` declared native; reasoning never yielded.
    ClaimsReasoning,
    /// Every run spawns a task that never ends (a leaked background worker).
    LeaksTask,
    /// `evaluate` reports `skills` native, which the descriptor (and preflight) never declared.
    WidensReport,
}

#[derive(Debug, Clone)]
struct Broken {
    fault: Fault,
    descriptor: HarnessDescriptor,
}

impl Broken {
    fn new(fault: Fault) -> Self {
        let mut builder = HarnessDescriptor::builder("broken".parse().unwrap(), "0.0.1")
            .contract_version(ContractVersion::V1)
            .execution_mode(ExecutionMode::in_process());
        for key in [
            K::StreamText,
            K::StreamReasoning,
            K::InterruptToolApproval,
            K::InterruptMultiTool,
            K::RuntimeCancel,
            K::RuntimeRestart,
        ] {
            builder = builder.capability(key, Capability::native());
        }
        Self {
            fault,
            descriptor: builder.build().unwrap(),
        }
    }
}

impl HarnessAdapter for Broken {
    fn descriptor(&self) -> &HarnessDescriptor {
        &self.descriptor
    }

    fn evaluate<'a>(
        &'a self,
        _config: &'a AgentConfig,
        _deployment: &'a DeploymentContext,
    ) -> BoxFuture<'a, Result<CapabilityReport, HarnessError>> {
        let mut report = self.descriptor.capabilities().clone();
        if self.fault == Fault::WidensReport {
            report.declare(K::Skills, Capability::native());
        }
        Box::pin(async move { Ok(report) })
    }

    fn create_runtime(
        &self,
        context: RuntimeContext,
    ) -> BoxFuture<'_, Result<Box<dyn HarnessRuntime>, HarnessError>> {
        let runtime = BrokenRuntime {
            fault: self.fault,
            token: context.cancellation.child_token(),
            context,
            state: Mutex::new(State::default()),
            cleanups: AtomicUsize::new(0),
        };
        Box::pin(async move { Ok(Box::new(runtime) as Box<dyn HarnessRuntime>) })
    }
}

#[derive(Debug, Default)]
struct State {
    open: Option<Interrupt>,
    answered: HashSet<ActionId>,
}

#[derive(Debug)]
struct BrokenRuntime {
    fault: Fault,
    context: RuntimeContext,
    token: CancellationToken,
    state: Mutex<State>,
    cleanups: AtomicUsize,
}

fn text(t: &str) -> EventResult {
    Ok(AdapterEvent::Content(Content::MessageDelta(
        TextDelta::new(t),
    )))
}

fn done() -> EventResult {
    Ok(AdapterEvent::Completed(RunSucceeded::default()))
}

impl BrokenRuntime {
    fn finish(&self, mut items: Vec<EventResult>) -> BoxStream<'_, EventResult> {
        match self.fault {
            Fault::TwoTerminals => items.push(done()),
            Fault::SequenceGap => {
                items.pop();
            }
            Fault::EventsAfterTerminal => items.push(text("late")),
            _ => {}
        }
        Box::pin(stream::iter(items))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl HarnessRuntime for BrokenRuntime {
    fn identity(&self) -> RuntimeIdentity {
        RuntimeIdentity {
            adapter: self.context.adapter.clone(),
            execution_id: self.context.execution_id.clone(),
            provider_session_id: None,
        }
    }

    fn initialize(&self) -> BoxFuture<'_, Result<RuntimeInit, HarnessError>> {
        Box::pin(async { Ok(RuntimeInit::default()) })
    }

    fn stream(&self, turn: TurnInput) -> BoxStream<'_, EventResult> {
        let message = turn.message.as_str();
        if message == "hang" {
            let token = self.token.clone();
            return Box::pin(stream::once(async move {
                token.cancelled().await;
                Err(HarnessError::new(ErrorCategory::Cancelled, "cancelled"))
            }));
        }
        if let Some(diagnostic) = message.strip_prefix("fail:") {
            let mut msg = "the provider failed".to_owned();
            if self.fault == Fault::LeakCredential {
                msg = format!("the provider failed for context {:?}", turn.client_context);
            }
            let err = HarnessError::new(ErrorCategory::Unavailable, msg)
                .with_diagnostic(diagnostic.to_owned());
            return Box::pin(stream::iter([text("trying"), Err(err)]));
        }
        if let Some(message) = message.strip_prefix("panic:") {
            let message = message.to_owned();
            return Box::pin(stream::once(async move {
                std::panic::panic_any(message);
            }));
        }
        if let Some(tool) = message.strip_prefix("tool:") {
            let call_id: harness_core::id::ToolCallId = "call_t".parse().unwrap();
            let outcome = if tool == "ok" {
                ToolCallOutcome::Success { output: json!(1) }
            } else {
                ToolCallOutcome::Failure {
                    message: "no such file".to_owned(),
                }
            };
            return self.finish(vec![
                Ok(AdapterEvent::Content(Content::ToolCallStarted(ToolCall {
                    call_id: call_id.clone(),
                    tool: "read_file".to_owned(),
                    arguments: json!({}),
                }))),
                Ok(AdapterEvent::Content(Content::ToolCallCompleted(
                    ToolCallCompleted { call_id, outcome },
                ))),
                done(),
            ]);
        }
        if let Some(spec) = message.strip_prefix("approval:") {
            let (n, editable) = match spec.strip_suffix(":edit") {
                Some(n) => (n, true),
                None => (spec, false),
            };
            let n: usize = n.parse().unwrap();
            let calls: Vec<ToolCallApproval> = (0..n)
                .map(|i| {
                    ToolCallApproval::new(
                        format!("call_{i}").parse().unwrap(),
                        "shell",
                        json!({"cmd": i}),
                        json!({"type": "object"}),
                    )
                    .unwrap()
                })
                .map(|c| if editable { c.allow_edit() } else { c })
                .collect();
            let mut items: Vec<EventResult> = calls
                .iter()
                .map(|c| {
                    Ok(AdapterEvent::Content(Content::ToolCallStarted(ToolCall {
                        call_id: c.call_id().clone(),
                        tool: c.tool().to_owned(),
                        arguments: c.arguments().clone(),
                    })))
                })
                .collect();
            let interrupt = Interrupt {
                id: ActionId::generate(),
                kind: InterruptKind::ToolApproval(ApprovalRequest::new(calls).unwrap()),
            };
            self.lock().open = Some(interrupt.clone());
            items.push(Ok(AdapterEvent::Interrupt(interrupt)));
            return Box::pin(stream::iter(items));
        }
        if self.fault == Fault::LeaksTask {
            tokio::spawn(std::future::pending::<()>());
        }
        let mut items = Vec::new();
        if message == "reasoning" && self.fault != Fault::ClaimsReasoning {
            items.push(Ok(AdapterEvent::Content(Content::ReasoningDelta(
                TextDelta::new("thinking"),
            ))));
        }
        if message == "malformed" {
            return Box::pin(stream::iter([done(), text("late")]));
        }
        items.push(text("hello"));
        items.push(done());
        self.finish(items)
    }

    fn resume(&self, decision: ResumeDecision) -> BoxStream<'_, EventResult> {
        {
            let mut state = self.lock();
            let open = state.open.as_ref().map(|i| &i.id) == Some(decision.interrupt_id());
            let repeated = !state.answered.insert(decision.interrupt_id().clone());
            if !open || (repeated && self.fault != Fault::AcceptsTwice) {
                return Box::pin(stream::iter([Err(HarnessError::new(
                    ErrorCategory::Protocol,
                    "no such open interrupt",
                ))]));
            }
            if self.fault != Fault::AcceptsTwice {
                state.open = None;
            }
        }
        let mut items = Vec::new();
        if let ValidatedResponse::Approval(approval) = decision.response() {
            for d in approval.decisions().unwrap_or_default() {
                let outcome = match &d.decision {
                    Decision::Approve | Decision::Edit { .. } => ToolCallOutcome::Success {
                        output: Value::Null,
                    },
                    Decision::Reject { reason } => ToolCallOutcome::Rejected {
                        reason: reason.clone(),
                    },
                };
                items.push(Ok(AdapterEvent::Content(Content::ToolCallCompleted(
                    ToolCallCompleted {
                        call_id: d.call_id.clone(),
                        outcome,
                    },
                ))));
            }
        }
        items.push(done());
        self.finish(items)
    }

    fn pending_interrupt(&self) -> BoxFuture<'_, Option<Interrupt>> {
        let open = self.lock().open.clone();
        Box::pin(async move { open })
    }

    fn cancel(&self, _reason: CancelReason) -> BoxFuture<'_, CancelResult> {
        if self.fault != Fault::CancelIgnored {
            self.token.cancel();
        }
        Box::pin(async { CancelResult::Requested })
    }

    fn restart(&self) -> BoxFuture<'_, Result<(), HarnessError>> {
        Box::pin(async { Ok(()) })
    }

    fn cleanup(&self) -> BoxFuture<'_, ()> {
        let n = self.cleanups.fetch_add(1, Ordering::SeqCst);
        if self.fault == Fault::CleanupTwice && n > 0 {
            panic!("double release of the provider client");
        }
        if self.fault != Fault::CancelIgnored {
            self.token.cancel();
        }
        Box::pin(async {})
    }
}

#[derive(Debug)]
struct BrokenKnobs(Fault);

impl Knobs for BrokenKnobs {
    type Adapter = Broken;

    fn adapter(&self) -> Broken {
        Broken::new(self.0)
    }

    fn request_for(&self, behaviour: &Behaviour) -> Option<ExecutionRequest> {
        let message = match behaviour {
            Behaviour::StreamText => "text".to_owned(),
            Behaviour::StreamReasoning => "reasoning".to_owned(),
            Behaviour::ToolApproval {
                calls,
                editable: false,
            } => format!("approval:{calls}"),
            Behaviour::ToolApproval {
                calls,
                editable: true,
            } => format!("approval:{calls}:edit"),
            Behaviour::ToolSuccess => "tool:ok".to_owned(),
            Behaviour::ToolError => "tool:err".to_owned(),
            Behaviour::Hang => "hang".to_owned(),
            Behaviour::Fail { diagnostic, .. } => format!("fail:{diagnostic}"),
            Behaviour::Panic { message } => format!("panic:{message}"),
            Behaviour::MalformedOrder => "malformed".to_owned(),
            _ => return None,
        };
        Some(ExecutionRequest::new(message))
    }

    fn bounds(&self) -> Bounds {
        // Bounded waits only; a broken runtime hits them, a correct one never does.
        Bounds {
            run: Duration::from_secs(5),
            grace: Duration::from_millis(500),
        }
    }
}

/// Runs the whole suite on `fault` and checks it fails at `id` with `reason` in the text.
async fn fails(fault: Fault, id: &str, reason: &str) -> Report {
    let report = certify(&BrokenKnobs(fault)).await;
    println!("{report}");
    assert!(
        !report.passed(),
        "the suite passed an adapter with {fault:?}"
    );
    let result = report.result(id).expect("fixture exists");
    match &result.outcome {
        FixtureOutcome::Failed { reason: got } => assert!(
            got.contains(reason),
            "{id} failed for another reason: {got}"
        ),
        other => panic!("{id} did not fail for {fault:?}: {other:?}"),
    }
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_adapter_passes() {
    let report = certify(&BrokenKnobs(Fault::None)).await;
    println!("{report}");
    report.assert_passed();
    // Its fixtures tied to undeclared capabilities were refused at preflight, and the
    // edit/form/usage/tool knobs it lacks are either failures (declared) or not exercised.
    assert!(matches!(
        report.result("stream.usage").unwrap().outcome,
        FixtureOutcome::RefusedAtPreflight { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_terminal_events_are_caught() {
    let report = fails(
        Fault::TwoTerminals,
        "stream.segment_protocol",
        "2 terminal items",
    )
    .await;
    let ordering = &report.result("stream.terminal_ordering").unwrap().outcome;
    assert!(
        ordering
            .detail()
            .contains("adapter emitted events after its terminal item"),
        "{ordering:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_in_the_sequence_is_caught() {
    let report = fails(
        Fault::SequenceGap,
        "stream.segment_protocol",
        "without a terminal item",
    )
    .await;
    let contiguous = &report.result("stream.sequence_contiguous").unwrap().outcome;
    assert!(
        contiguous.detail().contains("a gap in the run lifecycle"),
        "{contiguous:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_after_the_terminal_are_caught() {
    fails(
        Fault::EventsAfterTerminal,
        "stream.terminal_ordering",
        "adapter emitted events after its terminal item",
    )
    .await;
    let seg = run_fixture(
        &BrokenKnobs(Fault::EventsAfterTerminal),
        "stream.segment_protocol",
    )
    .await
    .unwrap();
    assert!(
        seg.outcome.detail().contains("after its terminal item"),
        "{seg:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_run_twice_is_caught() {
    fails(
        Fault::CleanupTwice,
        "cleanup.idempotent",
        "cleanup is not idempotent",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaked_credential_is_caught() {
    fails(
        Fault::LeakCredential,
        "observability.no_leaked_credential",
        "credential leaked",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ignored_cancel_is_caught() {
    fails(
        Fault::CancelIgnored,
        "cancel.while_streaming",
        "cancel ignored",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_accepted_twice_is_caught() {
    fails(
        Fault::AcceptsTwice,
        "action.duplicate_resume",
        "action accepted twice",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capability_claimed_but_not_delivered_is_caught() {
    fails(
        Fault::ClaimsReasoning,
        "stream.reasoning",
        "capability claimed but not delivered",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_wider_than_the_descriptor_is_caught() {
    fails(
        Fault::WidensReport,
        "init.capability_report",
        "evaluate widens the descriptor for skills",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaked_task_is_caught() {
    fails(
        Fault::LeaksTask,
        "observability.leaks.tasks",
        "Tokio task(s) still alive",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_report_says_so_in_json() {
    let report = certify(&BrokenKnobs(Fault::ClaimsReasoning)).await;
    let json: Value = serde_json::from_str(&report.to_json()).unwrap();
    let reasoning = json["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "stream.reasoning")
        .unwrap();
    assert_eq!(reasoning["outcome"]["status"], "failed");
    assert_eq!(json["suiteVersion"], harness_conformance::SUITE_VERSION);
    assert_eq!(json["evidenceId"], report.evidence_id.as_str());
    // Another outcome, another evidence id.
    let control = certify(&BrokenKnobs(Fault::None)).await;
    assert_ne!(control.evidence_id, report.evidence_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_capability_the_suite_cannot_certify_fails() {
    // Declaring skills supported without a way to test them must not pass.
    #[derive(Debug)]
    struct ClaimsSkills;
    impl Knobs for ClaimsSkills {
        type Adapter = Broken;
        fn adapter(&self) -> Broken {
            let mut b = Broken::new(Fault::None);
            b.descriptor = HarnessDescriptor::builder("broken".parse().unwrap(), "0.0.1")
                .contract_version(ContractVersion::V1)
                .execution_mode(ExecutionMode::in_process())
                .capability(K::Skills, Capability::native())
                .build()
                .unwrap();
            b
        }
        fn request_for(&self, behaviour: &Behaviour) -> Option<ExecutionRequest> {
            BrokenKnobs(Fault::None).request_for(behaviour)
        }
    }
    let result = run_fixture(&ClaimsSkills, "skills.missing_blocked")
        .await
        .unwrap();
    assert!(
        result
            .outcome
            .detail()
            .contains("not certifiable by suite version"),
        "{result:?}"
    );
    assert!(result.outcome.is_failure());
}
