//! The construction context and the turn input, through the service: the model a request
//! chooses among the instance's, the instance prompt rendered with the request's
//! parameters, the principal's safe projection, the caller's interrupt policy (enforced by
//! the driver whatever the adapter does), and resume decisions bound to their binding.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use harness_core::action::{
    ActionRequest, ActionType, FieldKind, FormField, FormRequest, FormValues, ToolCallApproval,
};
use harness_core::adapter::{
    AdapterEvent, AgentConfig, BoxStream, EventResult, HarnessAdapter, ResumeDecision, RunContext,
    RuntimeContext, Simple, SimpleAdapter,
};
use harness_core::capability::{Capability, CapabilityKey};
use harness_core::context::{
    InterruptPolicy, ModelPolicy, PromptConfig, PromptTemplate, UserIdKey, UserProjection,
};
use harness_core::error::{ErrorCategory, ErrorCode};
use harness_core::event::{Content, RunSucceeded, TextDelta};
use harness_core::id::{CallerId, Cursor, ExecutionId};
use harness_core::manifest::{ContractVersion, Describe, ExecutionMode, HarnessDescriptor};
use harness_core::service::{AdapterService, ExecutionHandle, ExecutionRequest, Outcome};
use harness_core::session::SessionBinding;
use tokio_util::sync::CancellationToken;

/// What one run of the recorder saw.
#[derive(Debug, Clone, Default)]
struct Seen {
    model: Option<(String, bool)>,
    prompt: Option<String>,
    user: Option<(String, Vec<(String, String)>)>,
    policy: InterruptPolicy,
    binding: Option<SessionBinding>,
    decision_binding: Option<Option<SessionBinding>>,
}

/// Records what each run gets; pauses for a form on "form", for an approval on "approve",
/// completes otherwise (and after any answer).
struct Recorder {
    descriptor: HarnessDescriptor,
    seen: Arc<Mutex<Vec<Seen>>>,
}

fn recorder() -> (Simple<Recorder>, Arc<Mutex<Vec<Seen>>>) {
    let descriptor = HarnessDescriptor::builder("recorder".parse().unwrap(), "1.0.0")
        .contract_version(ContractVersion::V1)
        .execution_mode(ExecutionMode::in_process())
        .capability(CapabilityKey::StreamText, Capability::native())
        .capability(CapabilityKey::InterruptFormInput, Capability::native())
        .capability(CapabilityKey::InterruptToolApproval, Capability::native())
        .build()
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    (
        Simple::new(Recorder {
            descriptor,
            seen: Arc::clone(&seen),
        }),
        seen,
    )
}

impl Describe for Recorder {
    fn descriptor(&self) -> &HarnessDescriptor {
        &self.descriptor
    }
}

fn form() -> ActionRequest {
    ActionRequest::form(
        FormRequest::new([FormField::new(
            "name".parse().unwrap(),
            "Name",
            FieldKind::text(),
        )])
        .unwrap(),
    )
}

fn approval() -> ActionRequest {
    let call = ToolCallApproval::new(
        "call_1".parse().unwrap(),
        "shell",
        serde_json::json!({"cmd": "ls"}),
        serde_json::json!({"type": "object"}),
    )
    .unwrap();
    ActionRequest::approval(harness_core::action::ApprovalRequest::new([call]).unwrap())
}

impl SimpleAdapter for Recorder {
    fn stream(&self, run: RunContext) -> BoxStream<'static, EventResult> {
        let context = &run.context;
        self.seen.lock().unwrap().push(Seen {
            model: context
                .config
                .model
                .as_ref()
                .map(|m| (m.as_str().to_owned(), m.by_request())),
            prompt: context.prompt.as_ref().map(|p| p.as_str().to_owned()),
            user: run.turn.user.as_ref().map(|u| {
                (
                    u.id().to_owned(),
                    u.attributes()
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                )
            }),
            policy: context.interrupt_policy.clone(),
            binding: context.binding.clone(),
            decision_binding: run.resume.as_ref().map(|d| d.binding().cloned()),
        });
        let text = Ok(AdapterEvent::Content(Content::MessageDelta(
            TextDelta::new("hi"),
        )));
        let end = match (run.resume.is_some(), run.turn.message.as_str()) {
            (false, "form") => AdapterEvent::Action(form()),
            (false, "approve") => AdapterEvent::Action(approval()),
            _ => AdapterEvent::Completed(RunSucceeded::default()),
        };
        Box::pin(futures_util::stream::iter([text, Ok(end)]))
    }
}

fn template() -> PromptTemplate {
    let config: PromptConfig = serde_json::from_value(serde_json::json!({
        "template": "You help the {{team}} team, in {{language}}.",
        "parameters": {"team": {"required": true, "maxBytes": 16}, "language": {"default": "English"}}
    }))
    .unwrap();
    PromptTemplate::compile(&config).unwrap()
}

async fn outcome(handle: &ExecutionHandle) -> Outcome {
    tokio::time::timeout(Duration::from_secs(10), handle.outcome())
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

#[tokio::test]
async fn the_chosen_model_the_rendered_prompt_and_the_safe_user_reach_the_adapter() {
    let (adapter, seen) = recorder();
    let alice: CallerId = "alice".parse().unwrap();
    let users = UserProjection::keyed(UserIdKey::new("the-operator-s-key-0123456789").unwrap())
        .with_attributes(alice.clone(), [("team".into(), "payments".into())].into())
        .unwrap();
    let service = AdapterService::builder(adapter)
        .models(
            ModelPolicy::new(["small", "large"])
                .unwrap()
                .with_default("small")
                .unwrap(),
        )
        .prompt(template())
        .users(users.clone())
        .build();
    let mut request = ExecutionRequest::new("go")
        .with_model("large")
        .with_prompt_parameter("team", "payments");
    request.extensions.insert(alice.clone());
    let handle = service.start(request).await.unwrap();
    assert!(matches!(outcome(&handle).await, Outcome::Succeeded(_)));
    // The default, and no principal: no user.
    let handle = service
        .start(ExecutionRequest::new("go").with_prompt_parameter("team", "ops"))
        .await
        .unwrap();
    assert!(matches!(outcome(&handle).await, Outcome::Succeeded(_)));

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen[0].model, Some(("large".to_owned(), true)));
    assert_eq!(
        seen[0].prompt.as_deref(),
        Some("You help the payments team, in English.")
    );
    let (id, attributes) = seen[0].user.clone().expect("a user");
    assert_eq!(id, users.project(&alice).id());
    assert!(!id.contains("alice"), "the id is opaque: {id}");
    assert_eq!(attributes, [("team".to_owned(), "payments".to_owned())]);
    assert_eq!(seen[1].model, Some(("small".to_owned(), false)));
    assert_eq!(
        seen[1].prompt.as_deref(),
        Some("You help the ops team, in English.")
    );
    assert_eq!(seen[1].user, None);
}

#[tokio::test]
async fn what_the_instance_does_not_offer_is_refused_before_any_work() {
    let (adapter, seen) = recorder();
    let service = AdapterService::builder(adapter)
        .models(ModelPolicy::new(["small", "large"]).unwrap())
        .prompt(template())
        .build();
    let ok = |r: ExecutionRequest| r.with_prompt_parameter("team", "t");
    let cases = [
        (
            ok(ExecutionRequest::new("go").with_model("huge")),
            ErrorCode::MODEL_NOT_ALLOWED,
            "choose one of: small, large",
        ),
        (
            ExecutionRequest::new("go"),
            ErrorCode::PROMPT_PARAMETER_INVALID,
            "`team` is required",
        ),
        (
            ok(ExecutionRequest::new("go")).with_prompt_parameter("teem", "x"),
            ErrorCode::PROMPT_PARAMETER_INVALID,
            "unknown prompt parameter `teem`; this instance's prompt takes: language, team",
        ),
        (
            ExecutionRequest::new("go").with_prompt_parameter("team", "x".repeat(17)),
            ErrorCode::PROMPT_PARAMETER_INVALID,
            "`team` is 17 bytes, more than its limit of 16",
        ),
        (
            ok(ExecutionRequest::new("go")).with_interrupt_policy(
                serde_json::from_value(serde_json::json!({"answerWithinMs": 0})).unwrap(),
            ),
            ErrorCode::CONFIGURATION,
            "`interruptPolicy.answerWithinMs` is 0",
        ),
    ];
    for (request, code, says) in cases {
        let err = service.start(request).await.unwrap_err();
        assert_eq!(err.category(), ErrorCategory::Configuration);
        assert_eq!(err.code(), &code, "{}", err.message());
        assert!(err.message().contains(says), "{}", err.message());
    }
    // An instance without a policy or a template offers neither.
    let (bare, _) = recorder();
    let bare = AdapterService::new(bare);
    let err = bare
        .start(ExecutionRequest::new("go").with_model("small"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), &ErrorCode::MODEL_NOT_ALLOWED);
    let err = bare
        .start(ExecutionRequest::new("go").with_prompt_parameter("team", "t"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), &ErrorCode::PROMPT_PARAMETER_INVALID);
    assert!(err.message().contains("no prompt template"));
    assert!(seen.lock().unwrap().is_empty(), "nothing ran");
}

fn answer(request: &ActionRequest) -> harness_core::action::ActionResponse {
    match request.action_type() {
        ActionType::FormInput => request.submit(FormValues::new().with("name", "Ada")),
        ActionType::ToolApproval => request.approve_all(),
    }
}

async fn pending(handle: &ExecutionHandle) -> ActionRequest {
    let mut events = handle.events(Cursor::START);
    while let Some(event) = events.next().await {
        if let harness_core::event::EventPayload::ActionRequested(request) = event.payload() {
            return ActionRequest::clone(request);
        }
    }
    panic!("no action was requested: {:?}", kinds(handle).await);
}

#[tokio::test]
async fn a_pause_the_caller_forbids_fails_instead_of_pausing() {
    for (message, policy, forbidden) in [
        ("form", InterruptPolicy::no_pauses(), true),
        ("approve", InterruptPolicy::no_pauses(), true),
        (
            "approve",
            InterruptPolicy::allowing([ActionType::FormInput]),
            true,
        ),
        (
            "form",
            InterruptPolicy::allowing([ActionType::ToolApproval]),
            true,
        ),
        (
            "approve",
            InterruptPolicy::allowing([ActionType::ToolApproval]),
            false,
        ),
        ("form", InterruptPolicy::permit_all(), false),
    ] {
        let (adapter, seen) = recorder();
        let service = AdapterService::new(adapter);
        let handle = service
            .start(ExecutionRequest::new(message).with_interrupt_policy(policy.clone()))
            .await
            .unwrap();
        if forbidden {
            let Outcome::Failed(err) = outcome(&handle).await else {
                panic!("{message} under {policy:?} must fail");
            };
            assert_eq!(err.code(), &ErrorCode::INTERRUPT_FORBIDDEN);
            assert_eq!(err.category(), ErrorCategory::Configuration);
            assert!(
                err.message().contains("does not permit"),
                "{}",
                err.message()
            );
            let kinds = kinds(&handle).await;
            assert!(!kinds.contains(&"action.requested"), "{kinds:?}");
            assert_eq!(
                kinds.iter().filter(|k| k.starts_with("run.failed")).count(),
                1
            );
            assert_eq!(kinds.last(), Some(&"run.failed"));
        } else {
            let request = pending(&handle).await;
            handle.respond(answer(&request)).await.unwrap();
            assert!(matches!(outcome(&handle).await, Outcome::Succeeded(_)));
        }
        // The runtime saw the policy it runs under.
        assert_eq!(seen.lock().unwrap()[0].policy, policy);
    }
}

#[tokio::test]
async fn an_unanswered_action_expires_with_one_terminal_event() {
    let (adapter, _) = recorder();
    let service = AdapterService::new(adapter);
    let policy = InterruptPolicy::permit_all().with_answer_within(Duration::from_millis(200));
    let handle = service
        .start(ExecutionRequest::new("form").with_interrupt_policy(policy.clone()))
        .await
        .unwrap();
    let request = pending(&handle).await;
    let Outcome::Failed(err) = outcome(&handle).await else {
        panic!("the action must expire");
    };
    assert_eq!(err.code(), &ErrorCode::ACTION_EXPIRED);
    assert_eq!(err.category(), ErrorCategory::Timeout);
    assert!(!err.retryable());
    let kinds = kinds(&handle).await;
    assert_eq!(
        &kinds[kinds.len() - 4..],
        [
            "action.requested",
            "run.awaiting_input",
            "run.running",
            "run.failed"
        ]
    );
    let terminal = kinds
        .iter()
        .filter(|k| matches!(**k, "run.failed" | "run.succeeded" | "run.cancelled"))
        .count();
    assert_eq!(terminal, 1);
    // An answer after the expiry is refused.
    let late = handle.respond(answer(&request)).await.unwrap_err();
    assert_eq!(late.code(), &ErrorCode::EXECUTION_TERMINAL);

    // Answered in time, the same policy lets the run go on.
    let handle = service
        .start(ExecutionRequest::new("approve").with_interrupt_policy(policy))
        .await
        .unwrap();
    let request = pending(&handle).await;
    handle.respond(answer(&request)).await.unwrap();
    assert!(matches!(outcome(&handle).await, Outcome::Succeeded(_)));
}

#[tokio::test]
async fn a_decision_carries_its_binding_and_another_binding_s_is_refused() {
    let (adapter, seen) = recorder();
    let service = AdapterService::new(adapter);
    let handle = service
        .start(ExecutionRequest::new("form").with_conversation("conv-1".parse().unwrap()))
        .await
        .unwrap();
    let request = pending(&handle).await;
    handle.respond(answer(&request)).await.unwrap();
    assert!(matches!(outcome(&handle).await, Outcome::Succeeded(_)));
    let seen = seen.lock().unwrap().clone();
    let binding = seen[0]
        .binding
        .clone()
        .expect("a conversation has a binding");
    assert_eq!(seen[1].decision_binding, Some(Some(binding.clone())));

    // A runtime of this binding, given a decision made for another conversation's, or for
    // this one before a clear: refused, nothing resumed.
    let (adapter, seen) = recorder();
    let execution_id = ExecutionId::generate();
    let context = RuntimeContext {
        contract_version: ContractVersion::V1,
        adapter: "recorder".parse().unwrap(),
        execution_id: execution_id.clone(),
        config: AgentConfig::default(),
        binding: Some(binding.clone()),
        prompt: None,
        interrupt_policy: InterruptPolicy::default(),
        tools: Vec::new(),
        limits: harness_core::limits::RunLimits::default(),
        thread_state: None,
        cancellation: CancellationToken::new(),
        delivery: harness_core::adapter::Delivery::default(),
        middleware: harness_core::middleware::PortableMiddlewarePolicy::allow_all(),
        skills: harness_core::skill::SkillManifest::default(),
        telemetry: harness_core::telemetry::TelemetrySink::detached(
            "recorder".parse().unwrap(),
            execution_id,
        ),
    };
    let runtime = adapter.create_runtime(context).await.unwrap();
    let turn = harness_core::adapter::TurnInput {
        execution_id: runtime.identity().execution_id,
        conversation_id: Some("conv-1".parse().unwrap()),
        message: "form".to_owned(),
        files: Vec::new(),
        user: None,
        client_context: serde_json::Map::new(),
        trace_context: None,
        deadline: None,
        idempotency_key: None,
    };
    let items: Vec<_> = runtime.stream(turn).collect().await;
    let Some(Ok(AdapterEvent::Action(request))) = items.last() else {
        panic!("{items:?}");
    };
    let other = SessionBinding::new(
        "recorder:conv-2".parse().unwrap(),
        "conv-2".parse().unwrap(),
    );
    let cleared = binding.clone().with_epoch(binding.epoch() + 1);
    for wrong in [Some(other), Some(cleared), None] {
        let decision =
            ResumeDecision::new(request.validate(answer(request)).unwrap()).for_binding(wrong);
        let items: Vec<_> = runtime.resume(decision).collect().await;
        let [Err(err)] = items.as_slice() else {
            panic!("{items:?}");
        };
        assert_eq!(err.code(), &ErrorCode::ACTION_BINDING_MISMATCH);
        assert_eq!(err.category(), ErrorCategory::Protocol);
    }
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "no refused decision reached the adapter"
    );
    let decision =
        ResumeDecision::new(request.validate(answer(request)).unwrap()).for_binding(Some(binding));
    let items: Vec<_> = runtime.resume(decision).collect().await;
    assert!(
        matches!(items.last(), Some(Ok(AdapterEvent::Completed(_)))),
        "{items:?}"
    );
}
