//! Conversations as ACP sessions, capabilities from what the agent negotiated, and usage,
//! with our own test agent (`acp-test-agent`, modes `echo` and `no-load`).

mod common;

use harness_core::session::Conversation;
use std::sync::Arc;

use common::{adapter_for, assert_no_process_left, finish, kinds, marker, test_agent, text};
use harness_acp::{AcpAdapter, AcpOptions};
use harness_core::adapter::{AgentConfig, DeploymentContext, HarnessAdapter};
use harness_core::capability::{CapabilityKey, SupportLevel};
use harness_core::error::{ErrorCategory, ErrorCode};
use harness_core::event::{Event, EventPayload};
use harness_core::id::ConversationId;
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};

fn conversation(name: &str) -> ConversationId {
    name.parse().expect("a valid conversation id")
}

fn native<'a>(events: &'a [Arc<Event>], name: &str) -> Vec<&'a serde_json::Value> {
    events
        .iter()
        .filter_map(|e| match e.payload() {
            EventPayload::Native(n) if n.name() == name => Some(n.payload()),
            _ => None,
        })
        .collect()
}

/// Runs one execution to its end; returns its events and outcome.
async fn run(
    service: &AdapterService<AcpAdapter>,
    request: ExecutionRequest,
) -> (Vec<Arc<Event>>, Outcome) {
    let execution = service.start(request).await.expect("execution starts");
    finish(&execution).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_turn_of_a_conversation_loads_its_session_without_replaying_history() {
    let mark = marker("conversation");
    let adapter = adapter_for(test_agent("echo", &mark));
    let service = AdapterService::new(adapter.clone());
    let conv = conversation("conv_sessions");
    let request = |message: &str| {
        ExecutionRequest::new(message)
            .with_conversation(conv.clone())
            .require(CapabilityKey::SessionMultiTurn)
    };

    let (first, outcome) = run(&service, request("hello")).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert_eq!(text(&first), "turn 1: hello", "{:?}", kinds(&first));
    assert!(native(&first, "session_loaded").is_empty());
    let session = adapter
        .session_of(&Conversation::anonymous(conv.clone()))
        .expect("the conversation is mapped once its turn succeeded");

    // A new execution is a new agent process: it reopens the session with session/load.
    let (second, outcome) = run(&service, request("again")).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    // Exactly this turn's text: the replayed history ("hello", "turn 1: hello") is not
    // emitted as message deltas.
    assert_eq!(text(&second), "turn 2: again", "{:?}", kinds(&second));
    let loaded = native(&second, "session_loaded");
    assert_eq!(loaded.len(), 1, "{:?}", kinds(&second));
    assert_eq!(loaded[0]["sessionId"], session.as_str());
    assert_eq!(loaded[0]["replayedUpdates"], 2, "{}", loaded[0]);
    assert_eq!(
        adapter
            .session_of(&Conversation::anonymous(conv.clone()))
            .as_deref(),
        Some(session.as_str())
    );

    // One probe for both preflights (cached for the adapter), one agent per execution.
    let stats = adapter.stats().snapshot();
    assert_eq!((stats.probes, stats.agents_started), (1, 2), "{stats:?}");
    assert_no_process_left(&mark).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executions_without_a_conversation_each_open_a_new_session() {
    let mark = marker("no-conversation");
    let service = AdapterService::new(adapter_for(test_agent("echo", &mark)));
    for _ in 0..2 {
        let (events, outcome) = run(&service, ExecutionRequest::new("hi")).await;
        assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
        assert_eq!(text(&events), "turn 1: hi");
    }
    assert_no_process_left(&mark).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evaluate_reports_what_the_agent_negotiated() {
    let deployment = DeploymentContext::default();
    let config = AgentConfig::default();
    let mark = marker("evaluate-echo");
    let echo = adapter_for(test_agent("echo", &mark));
    let report = echo
        .evaluate(&config, &deployment)
        .await
        .expect("the probe answers");
    assert_eq!(
        report.level(CapabilityKey::SessionMultiTurn),
        SupportLevel::Native
    );
    let no_load_mark = marker("evaluate-no-load");
    let no_load = adapter_for(test_agent("no-load", &no_load_mark));
    let report = no_load
        .evaluate(&config, &deployment)
        .await
        .expect("the probe answers");
    assert_eq!(
        report.level(CapabilityKey::SessionMultiTurn),
        SupportLevel::Unsupported
    );
    // What ACP gives an agent no way to declare is claimed only where the operator vouches.
    for key in [
        CapabilityKey::InterruptFormInput,
        CapabilityKey::ObservabilityTracePropagation,
    ] {
        assert_eq!(report.level(key), SupportLevel::Unsupported, "{key:?}");
    }
    let vouched_mark = marker("evaluate-vouched");
    let vouched = adapter_for(
        test_agent("no-load", &vouched_mark)
            .with_elicitation()
            .with_trace_context(),
    );
    let report = vouched
        .evaluate(&config, &deployment)
        .await
        .expect("the probe answers");
    for key in [
        CapabilityKey::InterruptFormInput,
        CapabilityKey::ObservabilityTracePropagation,
    ] {
        assert_eq!(report.level(key), SupportLevel::Native, "{key:?}");
    }
    // Cached for the adapter: evaluating again starts no agent.
    echo.evaluate(&config, &deployment).await.expect("cached");
    assert_eq!(echo.stats().snapshot().probes, 1);
    assert_eq!(no_load.stats().snapshot().probes, 1);
    assert_no_process_left(&mark).await;
    assert_no_process_left(&no_load_mark).await;
    assert_no_process_left(&vouched_mark).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_on_an_agent_without_load_session_is_refused_at_preflight() {
    let mark = marker("no-load");
    let adapter = adapter_for(test_agent("no-load", &mark));
    let service = AdapterService::new(adapter.clone());
    let err = service
        .start(
            ExecutionRequest::new("hello")
                .with_conversation(conversation("conv_no_load"))
                .require(CapabilityKey::StreamText),
        )
        .await
        .expect_err("refused at preflight");
    assert_eq!(err.category(), ErrorCategory::Configuration, "{err:?}");
    assert_eq!(err.code(), &ErrorCode::CAPABILITY_UNSUPPORTED, "{err:?}");
    assert!(err.message().contains("session.multi_turn"), "{err:?}");
    assert!(err.message().contains("loadSession"), "{err:?}");
    // Only the probe ran: no execution started an agent.
    let stats = adapter.stats().snapshot();
    assert_eq!((stats.probes, stats.agents_started), (1, 0), "{stats:?}");
    assert_no_process_left(&mark).await;
}

/// Defect: without required capabilities the service did not call `evaluate`, so a
/// conversation on an agent that cannot reopen a session ran its first turn and failed only
/// at the second. Now every request is evaluated: the first turn is refused at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_on_an_agent_without_load_session_is_refused_without_requirements() {
    let mark = marker("no-load-runtime");
    let adapter = adapter_for(test_agent("no-load", &mark));
    let service = AdapterService::new(adapter.clone());
    let conv = conversation("conv_no_load_runtime");
    let err = service
        .start(ExecutionRequest::new("hello").with_conversation(conv))
        .await
        .expect_err("refused at start");
    assert_eq!(err.code(), &ErrorCode::CAPABILITY_UNSUPPORTED, "{err:?}");
    assert!(err.message().contains("session.multi_turn"), "{err:?}");
    let stats = adapter.stats().snapshot();
    assert_eq!((stats.probes, stats.agents_started), (1, 0), "{stats:?}");
    // Without a conversation the same agent runs.
    let (_, outcome) = run(&service, ExecutionRequest::new("hello")).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert_no_process_left(&mark).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_update_is_a_native_event_not_portable_usage() {
    let mark = marker("usage");
    let service = AdapterService::new(adapter_for(test_agent("echo", &mark)));
    let (events, outcome) = run(&service, ExecutionRequest::new("hello")).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    let usage = native(&events, "usage_update");
    assert_eq!(usage.len(), 1, "{:?}", kinds(&events));
    assert_eq!(usage[0]["used"], 5, "{}", usage[0]);
    assert_eq!(usage[0]["size"], 100_000, "{}", usage[0]);
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.payload(), EventPayload::Usage(_))),
        "context-window occupancy is not reported as token usage"
    );
    assert_no_process_left(&mark).await;
}

/// A conversation's session lives in its adapter's agent: continued on another adapter
/// (another agent), the conversation is unknown there and opens a new session, never loading
/// a session id of the first agent into the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_continued_on_another_adapter_opens_a_new_session_there() {
    let first_mark = marker("conversation-first");
    let second_mark = marker("conversation-second");
    let first = adapter_for(test_agent("echo", &first_mark));
    let second = adapter_for(test_agent("echo", &second_mark));
    let conv = conversation("conv_moved");
    let request = |message: &str| ExecutionRequest::new(message).with_conversation(conv.clone());
    // Each adapter behind a service of its own: their conversations' thread state is apart.
    let first_service = AdapterService::new(first.clone());
    let (_, outcome) = run(&first_service, request("hello")).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    let session = first
        .session_of(&Conversation::anonymous(conv.clone()))
        .expect("the conversation is mapped");

    let (events, outcome) = run(&AdapterService::new(second.clone()), request("again")).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert_eq!(text(&events), "turn 1: again", "{:?}", kinds(&events));
    assert!(native(&events, "session_loaded").is_empty());
    let other = second
        .session_of(&Conversation::anonymous(conv.clone()))
        .expect("mapped in the second adapter");
    assert_ne!(other, session);
    // The first adapter's mapping is untouched, and continues there.
    assert_eq!(
        first
            .session_of(&Conversation::anonymous(conv.clone()))
            .as_deref(),
        Some(session.as_str())
    );
    let (events, outcome) = run(&first_service, request("again")).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert_eq!(text(&events), "turn 2: again");
    assert_no_process_left(&first_mark).await;
    assert_no_process_left(&second_mark).await;
}

/// Replicas over one store share the conversations' thread state, where the conversation →
/// session mapping lives: a conversation opened on one replica continues on another (a
/// separate adapter instance, knowing nothing in memory) with `session/load` of the same
/// session; after `clear_session` the next turn opens a new session on either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_continues_on_another_replica_and_a_cleared_one_starts_afresh() {
    use harness_core::store::{MemoryStore, ReplicaId};
    let mark = marker("conversation-replicas");
    let agent = test_agent("echo", &mark);
    let store = Arc::new(MemoryStore::new());
    let replica = |name: &str| {
        AdapterService::builder(adapter_for(agent.clone()))
            .durable(Arc::clone(&store), ReplicaId::new(name))
            .build()
    };
    let (one, two) = (replica("one"), replica("two"));
    let conv = conversation("conv_replicas");
    let request = |message: &str| ExecutionRequest::new(message).with_conversation(conv.clone());
    let (_, outcome) = run(&one, request("hello")).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    let session = one
        .adapter()
        .session_of(&Conversation::anonymous(conv.clone()))
        .expect("mapped on one");
    assert_eq!(
        two.adapter()
            .session_of(&Conversation::anonymous(conv.clone())),
        None,
        "two knows nothing in memory"
    );

    let (events, outcome) = run(&two, request("again")).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert_eq!(text(&events), "turn 2: again", "{:?}", kinds(&events));
    assert_eq!(native(&events, "session_loaded").len(), 1);
    assert_eq!(
        two.adapter()
            .session_of(&Conversation::anonymous(conv.clone())),
        Some(session.clone())
    );

    two.clear_session(&Conversation::anonymous(conv.clone()))
        .await
        .expect("cleared");
    let (events, outcome) = run(&one, request("afresh")).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert_eq!(
        text(&events),
        "turn 1: afresh",
        "a new session after the clear"
    );
    assert!(native(&events, "session_loaded").is_empty());
    assert_ne!(
        one.adapter()
            .session_of(&Conversation::anonymous(conv.clone())),
        Some(session)
    );
    assert_no_process_left(&mark).await;
}

/// Defect: the conversation → session map was keyed by the conversation only, so a
/// conversation continued with another of the operator's agents sent `session/load` with a
/// session id of the first agent, and the run failed there as `unavailable`. Now it is
/// refused as `configuration`, naming both agents: at preflight, and, without one, before an
/// agent is started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_continued_with_another_agent_is_refused_naming_both() {
    let mark = marker("conversation-moved");
    let other_mark = marker("conversation-moved-other");
    let adapter = adapter_for(test_agent("echo", &mark))
        .with_agent("other", test_agent("echo", &other_mark))
        .expect("a valid agent");
    let service = AdapterService::new(adapter.clone());
    let conv = conversation("conv_moved");
    let request = |agent: Option<&str>, message: &str| {
        let options = agent.map_or_else(AcpOptions::default, AcpOptions::named);
        ExecutionRequest::new(message)
            .with_options(options.to_value())
            .with_conversation(conv.clone())
    };
    let (_, outcome) = run(&service, request(None, "hello")).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    let session = adapter
        .session_of(&Conversation::anonymous(conv.clone()))
        .expect("the conversation is mapped");

    // Refused at start, whether the request requires a capability or not: the service
    // evaluates every request, before an agent is started for it.
    let started = adapter.stats().snapshot().agents_started;
    for required in [Some(CapabilityKey::SessionMultiTurn), None] {
        let mut moved = request(Some("other"), "again");
        if let Some(key) = required {
            moved = moved.require(key);
        }
        let refused = service.start(moved).await.expect_err("refused at start");
        assert_eq!(
            refused.category(),
            ErrorCategory::Configuration,
            "{refused:?}"
        );
        assert!(
            refused.message().contains("`other`") && refused.message().contains("`default`"),
            "{refused:?}"
        );
    }
    assert_eq!(adapter.stats().snapshot().agents_started, started);

    // The conversation still maps to its session, and continues with its own agent.
    assert_eq!(
        adapter
            .session_of(&Conversation::anonymous(conv.clone()))
            .as_deref(),
        Some(session.as_str())
    );
    let (events, outcome) = run(&service, request(Some("default"), "again")).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert_eq!(text(&events), "turn 2: again");
    // An unknown agent is refused naming the registered ones.
    let started = service
        .start(ExecutionRequest::new("hi").with_options(AcpOptions::named("nope").to_value()))
        .await;
    let err = match started {
        Err(err) => err,
        Ok(execution) => match common::outcome(&execution).await {
            Outcome::Failed(err) => err,
            other => panic!("an unknown agent ran: {other:?}"),
        },
    };
    assert_eq!(err.code(), &ErrorCode::OPTIONS_INVALID, "{err:?}");
    assert!(err.message().contains("default, other"), "{err:?}");
    assert_no_process_left(&mark).await;
    assert_no_process_left(&other_mark).await;
}
