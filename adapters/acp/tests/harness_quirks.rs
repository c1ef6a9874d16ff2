//! What real harnesses do that the adapter must take in its stride, each reproduced by a mode
//! of our test agent (`acp-test-agent`): informational updates the schema refuses (Claude's
//! `usage_update` with `used: null`), a turn ended `cancelled` after the caller rejected a
//! call (Codex), an agent's internal error and what it says (Codex), a tool call whose input
//! arrives in an update (Claude), replay sent after the `session/load` answer (Gemini), a
//! conversation whose first turn failed, and session modes and configuration options.

mod common;

use harness_core::session::Conversation;
use std::sync::Arc;
use std::time::Duration;

use common::{
    adapter_for, approve_all, assert_no_process_left, finish, kinds, marker, outcome, read_until,
    test_agent, text, until_action,
};
use harness_acp::{AcpAdapter, AcpOptions, ApprovalPolicy, ConfigValue};
use harness_core::action::ActionKind;
use harness_core::adapter::{AgentConfig, DeploymentContext, HarnessAdapter};
use harness_core::capability::{CapabilityKey, SupportLevel};
use harness_core::error::{ErrorCategory, ErrorCode};
use harness_core::event::{CancelReason, Event, EventPayload, ToolCallOutcome};
use harness_core::id::{ConversationId, Cursor};
use harness_core::service::{AdapterService, ExecutionHandle, ExecutionRequest, Outcome};
use harness_layers::stack::HarnessStack;
use tower::{Service, ServiceExt};

fn native<'a>(events: &'a [Arc<Event>], name: &str) -> Vec<&'a serde_json::Value> {
    events
        .iter()
        .filter_map(|e| match e.payload() {
            EventPayload::Native(n) if n.name() == name => Some(n.payload()),
            _ => None,
        })
        .collect()
}

/// Starts `request` through the default layer stack over `adapter`.
async fn start_stacked(adapter: &AcpAdapter, request: ExecutionRequest) -> ExecutionHandle {
    let mut service = HarnessStack::defaults_for(adapter)
        .expect("the default stack")
        .service(adapter.clone());
    service
        .ready()
        .await
        .expect("ready")
        .call(request)
        .await
        .expect("execution starts")
}

/// Defect (`@zed-industries/claude-agent-acp` 0.23.1): a `usage_update` with `used: null`
/// failed the parse of the whole line, ended the line stream and the run `protocol`; the
/// `end_turn` answer was never read. Informational updates that do not parse are native
/// diagnostics now, and the run goes on to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_informational_update_that_does_not_parse_is_a_diagnostic_and_the_run_goes_on() {
    let mark = marker("informational");
    let adapter = adapter_for(test_agent("informational", &mark));
    let execution = start_stacked(&adapter, ExecutionRequest::new("go")).await;
    let (events, outcome) = finish(&execution).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert_eq!(text(&events), "hello world", "{:?}", kinds(&events));
    let unparsed = native(&events, "unparsed_update");
    let kinds_seen: Vec<&str> = unparsed
        .iter()
        .map(|p| p["sessionUpdate"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        kinds_seen,
        ["usage_update", "future_update"],
        "{unparsed:?}"
    );
    assert!(unparsed[0]["update"]["used"].is_null(), "{}", unparsed[0]);
    assert!(
        unparsed[0]["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{}",
        unparsed[0]
    );
    assert_no_process_left(&mark).await;
}

/// Defect (same agent): the swallowed `stopReason: cancelled` made a cancel wait out the
/// whole grace period and kill the agent. The agent's own answer ends the turn now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_after_an_unparsed_update_is_answered_by_the_agent_not_by_a_kill() {
    let mark = marker("informational-cancel");
    let adapter =
        adapter_for(test_agent("informational", &mark).with_cancel_grace(Duration::from_secs(30)));
    let execution = start_stacked(&adapter, ExecutionRequest::new("hang")).await;
    read_until(
        &execution,
        Cursor::START,
        |e| matches!(e.payload(), EventPayload::MessageDelta(d) if d.text == " world"),
    )
    .await;
    let started = std::time::Instant::now();
    let _request = execution.cancel(CancelReason::new("test"));
    assert!(matches!(outcome(&execution).await, Outcome::Cancelled(_)));
    let stats = adapter.stats().snapshot();
    assert_eq!(
        (stats.graceful_cancels, stats.forced_cancels),
        (1, 0),
        "{stats:?} after {:?}",
        started.elapsed()
    );
    assert_no_process_left(&mark).await;
}

/// Defect (`@agentclientprotocol/codex-acp` 2.6.0): the agent ends the turn `cancelled` when
/// the caller rejects a tool call, and the run failed `cancelled` although nobody cancelled.
/// The caller's rejection is no failure: the run succeeds, the call completed `rejected`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_the_agent_ends_cancelled_after_a_rejection_succeeds() {
    let mark = marker("reject-cancels");
    let adapter = adapter_for(test_agent("reject-cancels", &mark));
    let execution = start_stacked(&adapter, ExecutionRequest::new("go")).await;
    let action = until_action(&execution).await;
    let ActionKind::ToolApproval(approval) = &action.kind else {
        panic!("not an approval: {action:?}");
    };
    let call = approval.calls()[0].call_id().clone();
    execution
        .respond(action.reject(&call, "not now"))
        .await
        .expect("the rejection is accepted");
    let (events, outcome) = finish(&execution).await;
    let Outcome::Succeeded(done) = &outcome else {
        panic!("{outcome:?}: {:?}", kinds(&events));
    };
    assert!(
        done.summary
            .as_deref()
            .is_some_and(|s| s.contains("rejected")),
        "{done:?}"
    );
    let rejected = events.iter().any(|e| {
        matches!(e.payload(), EventPayload::ToolCallCompleted(c)
            if c.call_id == call && matches!(c.outcome, ToolCallOutcome::Rejected { .. }))
    });
    assert!(rejected, "{:?}", kinds(&events));

    // Approved, the same agent ends the turn normally; unasked, `cancelled` stays a failure
    // (covered by the lifecycle tests' cancel paths).
    let execution = start_stacked(&adapter, ExecutionRequest::new("go")).await;
    let action = until_action(&execution).await;
    let ActionKind::ToolApproval(approval) = &action.kind else {
        panic!("not an approval");
    };
    execution
        .respond(approve_all(&action, approval).into())
        .await
        .expect("accepted");
    let (_, outcome) = finish(&execution).await;
    let Outcome::Succeeded(done) = &outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(done.summary, None);
    assert_no_process_left(&mark).await;
}

/// Defect (Codex): an agent error kept only "Internal error" (its `data.details` dropped)
/// and was classed `unavailable`, so the retry layer started the agent three times for an
/// error that could not go away. The reason is kept in the diagnostic, and the class follows
/// what it says: a bad request is not retried, a rate limit is `throttled`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_error_keeps_its_reason_and_is_classified_by_it() {
    let mark = marker("fail");
    let adapter = adapter_for(test_agent("fail", &mark));
    for (message, category, retried) in [
        ("model gpt-x does not exist", ErrorCategory::Internal, false),
        (
            "unexpected status 429 Too Many Requests: rate limit",
            ErrorCategory::Throttled,
            true,
        ),
        (
            "401 Unauthorized: invalid api key",
            ErrorCategory::Authentication,
            false,
        ),
    ] {
        let before = adapter.stats().snapshot().agents_started;
        let execution = start_stacked(&adapter, ExecutionRequest::new(message)).await;
        let (events, outcome) = finish(&execution).await;
        let Outcome::Failed(failed) = &outcome else {
            panic!("{message}: {outcome:?}");
        };
        assert_eq!(failed.category(), category, "{message}: {failed:?}");
        let diagnostic = failed.diagnostic().unwrap_or_default();
        assert!(diagnostic.contains(message), "{message}: {diagnostic}");
        // The public projection carries no diagnostic.
        let public = serde_json::to_string(&failed.public()).unwrap();
        assert!(!public.contains(message), "{public}");
        // Only what may go away is retried (and not after the turn's side effects).
        let started = adapter.stats().snapshot().agents_started - before;
        if !retried {
            assert!(!failed.retryable(), "{message}");
            assert_eq!(started, 1, "{message}: {:?}", kinds(&events));
        }
    }
    assert_no_process_left(&mark).await;
}

/// Defect (Claude Code): its first `tool_call` reads `Terminal` with empty input, the real
/// command arrives in a `tool_call_update`, which became only a native event. The portable
/// `tool.call.updated` carries it, and the approval proposes the command the agent runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_calls_late_input_is_reported_as_a_portable_update() {
    let mark = marker("late-input");
    let adapter = adapter_for(test_agent("late-input", &mark));
    let execution = start_stacked(&adapter, ExecutionRequest::new("go")).await;
    let action = until_action(&execution).await;
    let ActionKind::ToolApproval(approval) = &action.kind else {
        panic!("not an approval");
    };
    let proposed = &approval.calls()[0];
    assert_eq!(proposed.tool(), "touch created.txt");
    assert_eq!(
        proposed.arguments(),
        &serde_json::json!({"command": "touch created.txt"})
    );
    execution
        .respond(approve_all(&action, approval).into())
        .await
        .expect("accepted");
    let (events, outcome) = finish(&execution).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    let calls: Vec<(&str, String, serde_json::Value)> = events
        .iter()
        .filter_map(|e| match e.payload() {
            EventPayload::ToolCallStarted(c) => {
                Some(("started", c.tool.clone(), c.arguments.clone()))
            }
            EventPayload::ToolCallUpdated(c) => {
                Some(("updated", c.tool.clone(), c.arguments.clone()))
            }
            EventPayload::ToolCallCompleted(_) => {
                Some(("completed", String::new(), serde_json::Value::Null))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        calls,
        [
            ("started", "Terminal".to_owned(), serde_json::json!({})),
            (
                "updated",
                "touch created.txt".to_owned(),
                serde_json::json!({"command": "touch created.txt"})
            ),
            ("completed", String::new(), serde_json::Value::Null),
        ],
        "{:?}",
        kinds(&events)
    );
    assert_no_process_left(&mark).await;
}

/// Defect (`@google/gemini-cli` 0.61.0): part of the replay arrived after the `session/load`
/// answer and became the new turn's text (the previous answer repeated, and an
/// `acp.user_message_chunk` of the old turn). Replay is taken as replay until it is quiet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_sent_after_the_load_answer_never_leaks_into_the_new_turn() {
    let mark = marker("late-replay");
    let adapter = adapter_for(test_agent("late-replay", &mark));
    let service = AdapterService::new(adapter.clone());
    let conv: ConversationId = "conv_late_replay".parse().unwrap();
    let request = |message: &str| ExecutionRequest::new(message).with_conversation(conv.clone());
    let first = service.start(request("hello")).await.expect("starts");
    let (events, outcome) = finish(&first).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert_eq!(text(&events), "turn 1: hello");

    let second = service.start(request("again")).await.expect("starts");
    let (events, outcome) = finish(&second).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert_eq!(text(&events), "turn 2: again", "{:?}", kinds(&events));
    assert!(native(&events, "user_message_chunk").is_empty());
    let loaded = native(&events, "session_loaded");
    assert_eq!(loaded[0]["replayedUpdates"], 2, "{}", loaded[0]);

    // With the replay ending at the answer (ACP's rule, `replayQuiet` 0), the late replay
    // leaks: the setting is what holds it back.
    let strict = adapter_for(test_agent("late-replay", &mark).with_replay_quiet(Duration::ZERO));
    let service = AdapterService::new(strict.clone());
    let conv: ConversationId = "conv_late_replay_strict".parse().unwrap();
    let request = |message: &str| ExecutionRequest::new(message).with_conversation(conv.clone());
    let first = service.start(request("hello")).await.expect("starts");
    finish(&first).await;
    let second = service.start(request("again")).await.expect("starts");
    let (events, _) = finish(&second).await;
    assert_ne!(text(&events), "turn 2: again", "{:?}", kinds(&events));
    assert_no_process_left(&mark).await;
}

/// Defect: a conversation whose first turn failed was not recorded, so its next turn
/// silently opened a new session. The session is the conversation's from the moment it is
/// opened: the next turn loads it, with the failed turn in its history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_whose_first_turn_failed_continues_in_its_session() {
    let mark = marker("failed-first");
    let adapter = adapter_for(test_agent("echo", &mark));
    let service = AdapterService::new(adapter.clone());
    let conv: ConversationId = "conv_failed_first".parse().unwrap();
    let first = service
        .start(ExecutionRequest::new("fail now").with_conversation(conv.clone()))
        .await
        .expect("starts");
    let (_, outcome) = finish(&first).await;
    assert!(matches!(outcome, Outcome::Failed(_)), "{outcome:?}");
    let session = adapter
        .session_of(&Conversation::anonymous(conv.clone()))
        .expect("recorded when the session was opened");
    let second = service
        .start(ExecutionRequest::new("recall").with_conversation(conv.clone()))
        .await
        .expect("starts");
    let (events, outcome) = finish(&second).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert_eq!(
        text(&events),
        "turn 2: recall: fail now",
        "{:?}",
        kinds(&events)
    );
    let loaded = native(&events, "session_loaded");
    assert_eq!(loaded[0]["sessionId"], session.as_str());
    assert_eq!(
        adapter.session_of(&Conversation::anonymous(conv.clone())),
        Some(session)
    );
    assert_no_process_left(&mark).await;
}

/// A turn of the `modes` agent with `options`; returns its events and outcome, approving
/// whatever it asks.
async fn modes_turn(
    adapter: &AcpAdapter,
    options: serde_json::Value,
) -> (Vec<Arc<Event>>, Outcome, bool) {
    let execution = start_stacked(adapter, ExecutionRequest::new("go").with_options(options)).await;
    let events = read_until(&execution, Cursor::START, |e| {
        matches!(e.payload(), EventPayload::ActionRequested(_)) || e.kind().is_terminal()
    })
    .await;
    let mut asked = false;
    if let Some(EventPayload::ActionRequested(action)) = events.last().map(|e| e.payload()) {
        let ActionKind::ToolApproval(approval) = &action.kind else {
            panic!("not an approval");
        };
        asked = true;
        execution
            .respond(approve_all(action, approval).into())
            .await
            .expect("accepted");
    }
    let (events, outcome) = finish(&execution).await;
    (events, outcome, asked)
}

/// Defect (`@agentclientprotocol/codex-acp` 2.6.0): the adapter could not choose a session
/// mode, so an agent whose default mode lets an automatic reviewer decide never asked, while
/// the report said `interrupt.tool_approval: native`. The operator picks the mode and the
/// configuration options; the approval policy `ask` selects a mode that asks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_chooses_the_mode_and_options_and_the_ask_policy_picks_a_mode_that_asks() {
    let mark = marker("modes");
    // Nothing chosen, policy `ask` (the default): the agent's current mode `auto` does not
    // ask, so the adapter selects `ask`, one of the known asking modes it offers.
    let adapter = adapter_for(test_agent("modes", &mark));
    let (events, outcome, asked) = modes_turn(&adapter, serde_json::Value::Null).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert!(asked, "{:?}", kinds(&events));
    assert!(
        text(&events).starts_with("mode=ask model=m1 fast=false"),
        "{}",
        text(&events)
    );
    let configured = native(&events, "session_configured");
    assert_eq!(configured[0]["mode"], "ask", "{configured:?}");

    // The operator's mode and options.
    let agent = test_agent("modes", &mark)
        .with_mode("ask")
        .with_config("model", ConfigValue::Id("m2".to_owned()))
        .with_config("fast", ConfigValue::Bool(true));
    let (events, outcome, asked) = modes_turn(&adapter_for(agent), serde_json::Value::Null).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert!(asked);
    assert!(
        text(&events).starts_with("mode=ask model=m2 fast=true"),
        "{}",
        text(&events)
    );

    // Policy `agent`: the agent's mode runs the tool unasked, and the report says so.
    let agent = test_agent("modes", &mark).with_approval(ApprovalPolicy::Agent);
    let adapter = adapter_for(agent);
    let (events, outcome, asked) = modes_turn(&adapter, serde_json::Value::Null).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert!(!asked);
    assert!(text(&events).starts_with("mode=auto"), "{}", text(&events));
    let report = adapter
        .evaluate(&AgentConfig::default(), &DeploymentContext::default())
        .await
        .expect("evaluated");
    assert_eq!(
        report.level(CapabilityKey::InterruptToolApproval),
        SupportLevel::Unsupported
    );
    let refused = HarnessStack::defaults_for(&adapter)
        .expect("the default stack")
        .service(adapter.clone())
        .oneshot(ExecutionRequest::new("go").require(CapabilityKey::InterruptToolApproval))
        .await
        .expect_err("a requirement the policy cannot meet is refused at preflight");
    assert_eq!(
        *refused.code(),
        ErrorCode::CAPABILITY_UNSUPPORTED,
        "{refused:?}"
    );
    let asking = adapter_for(test_agent("modes", &mark));
    let report = asking
        .evaluate(&AgentConfig::default(), &DeploymentContext::default())
        .await
        .expect("evaluated");
    assert_eq!(
        report.level(CapabilityKey::InterruptToolApproval),
        SupportLevel::Native
    );
    assert_no_process_left(&mark).await;
}

async fn outcome_of(execution: &ExecutionHandle) -> Outcome {
    finish(execution).await.1
}

/// A caller picks a mode or an option only among those the operator allows, refused at
/// preflight otherwise; under the `ask` policy the operator cannot allow a mode that is not
/// known to ask.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_picks_only_the_modes_and_options_the_operator_allows() {
    let mark = marker("caller-modes");
    let adapter = adapter_for(
        test_agent("modes", &mark)
            .with_approval(ApprovalPolicy::Agent)
            .allow_caller_mode("yolo")
            .allow_caller_config("model"),
    );
    let options = AcpOptions::default()
        .with_mode("yolo")
        .with_config("model", ConfigValue::Id("m2".to_owned()));
    let (events, outcome, _) = modes_turn(&adapter, options.to_value()).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert!(
        text(&events).starts_with("mode=yolo model=m2"),
        "{}",
        text(&events)
    );

    let started = adapter.stats().snapshot().agents_started;
    for (options, names) in [
        (
            AcpOptions::default().with_mode("ask"),
            "session mode \"ask\"",
        ),
        (
            AcpOptions::default().with_config("fast", ConfigValue::Bool(true)),
            "configuration option \"fast\"",
        ),
    ] {
        let config = AgentConfig {
            options: options.to_value(),
            ..AgentConfig::default()
        };
        let err = adapter
            .evaluate(&config, &DeploymentContext::default())
            .await
            .expect_err("refused at preflight");
        assert_eq!(*err.code(), ErrorCode::OPTIONS_INVALID, "{err:?}");
        assert!(err.message().contains(names), "{}", err.message());
    }
    assert_eq!(adapter.stats().snapshot().agents_started, started);

    let err = AcpAdapter::new(test_agent("modes", &mark).allow_caller_mode("yolo"))
        .expect_err("`yolo` is not known to ask");
    assert!(err.message().contains("askingModes"), "{}", err.message());
    assert_no_process_left(&mark).await;
}

/// A mode, option or value the agent does not offer fails the start with a configuration
/// error naming what it offers; so does the `ask` policy when no offered mode is known to ask.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_agent_does_not_offer_fails_the_start_naming_what_it_offers() {
    let mark = marker("modes-unoffered");
    for (agent, names) in [
        (
            test_agent("modes", &mark)
                .with_asking_modes(["plan"])
                .with_mode("plan"),
            "auto, ask, yolo",
        ),
        (
            test_agent("modes", &mark).with_config("model", ConfigValue::Id("m9".to_owned())),
            "m1, m2",
        ),
        (
            test_agent("modes", &mark).with_config("speed", ConfigValue::Bool(true)),
            "model, fast",
        ),
        (
            test_agent("modes", &mark).with_config("fast", ConfigValue::Id("yes".to_owned())),
            "boolean",
        ),
        (
            test_agent("modes", &mark).with_asking_modes(["careful"]),
            "none of the agent's session modes (auto, ask, yolo)",
        ),
    ] {
        let adapter = adapter_for(agent);
        let execution = start_stacked(&adapter, ExecutionRequest::new("go")).await;
        let Outcome::Failed(err) = outcome_of(&execution).await else {
            panic!("the start fails");
        };
        assert_eq!(err.category(), ErrorCategory::Configuration, "{err:?}");
        assert!(err.message().contains(names), "{names}: {}", err.message());
    }
    assert_no_process_left(&mark).await;
}

/// Defect (`@zed-industries/claude-agent-acp` 0.23.1): the follow-up turn's `session/load`
/// failed "Resource not found". The agent exits on `SIGTERM` before the Claude Code process
/// it started has written the session's transcript, and the adapter killed the group as soon
/// as the agent was gone. The group gets its grace period, not only the agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_children_get_the_grace_period_to_write_their_state() {
    let mark = marker("flusher");
    let adapter = adapter_for(test_agent("flusher", &mark));
    let written = common::workspace(&mark).join("flushed.txt");
    let execution = start_stacked(&adapter, ExecutionRequest::new("go")).await;
    let (events, outcome) = finish(&execution).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert_eq!(text(&events), "flushing child");
    drop(execution);
    assert_no_process_left(&mark).await;
    assert!(
        written.exists(),
        "the child was killed before it wrote its state"
    );
}
