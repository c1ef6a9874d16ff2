//! Helpers shared by the integration tests: run a script through the service, wait for an
//! event, read the log.

#![allow(dead_code)] // each test crate uses a different subset

use std::sync::Arc;

use futures_util::StreamExt;
use harness_core::action::ActionRequest;
use harness_core::adapter::{AgentConfig, RunLimits, RuntimeContext, TurnInput};
use harness_core::event::{Event, EventPayload, ToolCallOutcome};
use harness_core::id::{Cursor, ExecutionId, ToolCallId};
use harness_core::manifest::ContractVersion;
use harness_core::service::{AdapterService, ExecutionHandle, ExecutionRequest};
use harness_scripted::{Script, ScriptedAdapter, ScriptedOptions};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// A service over an adapter whose default script is the quickstart.
pub(crate) fn service() -> AdapterService<ScriptedAdapter> {
    AdapterService::new(ScriptedAdapter::quickstart())
}

/// Starts an execution of `script` (given through the options).
pub(crate) async fn start(
    service: &AdapterService<ScriptedAdapter>,
    script: &Script,
) -> ExecutionHandle {
    let request = ExecutionRequest::new("go")
        .with_options(ScriptedOptions::with_script(script.clone()).to_value());
    service.clone().oneshot(request).await.unwrap()
}

/// Waits for the first event of `kind`, failing the test if the execution ends without one.
pub(crate) async fn wait_for(handle: &ExecutionHandle, kind: &str) -> Arc<Event> {
    let mut events = handle.events(Cursor::START);
    while let Some(event) = events.next().await {
        if event.kind().as_str() == kind {
            return event;
        }
    }
    panic!("the execution ended without `{kind}`: {:?}", kinds(handle));
}

/// Waits for the next action request (from its `action.requested` event, which is appended
/// before the run pauses).
pub(crate) async fn action(handle: &ExecutionHandle) -> ActionRequest {
    let event = wait_for(handle, "action.requested").await;
    match event.payload() {
        EventPayload::ActionRequested(request) => ActionRequest::clone(request),
        other => panic!("unexpected payload {other:?}"),
    }
}

/// Every event so far.
pub(crate) fn events(handle: &ExecutionHandle) -> Vec<Arc<Event>> {
    handle.log().snapshot(Cursor::START)
}

/// The kinds of every event so far.
pub(crate) fn kinds(handle: &ExecutionHandle) -> Vec<&'static str> {
    events(handle).iter().map(|e| e.kind().as_str()).collect()
}

/// The texts of the `message.delta` events.
pub(crate) fn message_text(handle: &ExecutionHandle) -> Vec<String> {
    events(handle)
        .iter()
        .filter_map(|e| match e.payload() {
            EventPayload::MessageDelta(d) => Some(d.text.clone()),
            _ => None,
        })
        .collect()
}

/// The outcome of each `tool.call.completed`, in order.
pub(crate) fn completions(handle: &ExecutionHandle) -> Vec<(ToolCallId, ToolCallOutcome)> {
    events(handle)
        .iter()
        .filter_map(|e| match e.payload() {
            EventPayload::ToolCallCompleted(c) => Some((c.call_id.clone(), c.outcome.clone())),
            _ => None,
        })
        .collect()
}

/// Every event, serialized as a client would receive it.
pub(crate) fn wire(handle: &ExecutionHandle) -> String {
    serde_json::to_string(&events(handle)).unwrap()
}

/// A runtime context for driving a runtime by hand.
pub(crate) fn context(options: Value) -> RuntimeContext {
    let execution_id = ExecutionId::generate();
    RuntimeContext {
        telemetry: harness_core::telemetry::TelemetrySink::detached(
            "scripted".parse().unwrap(),
            execution_id.clone(),
        ),
        middleware: harness_core::middleware::PortableMiddlewarePolicy::allow_all(),
        contract_version: ContractVersion::V1,
        adapter: "scripted".parse().unwrap(),
        execution_id,
        config: AgentConfig {
            options,
            ..AgentConfig::default()
        },
        binding: None,
        prompt: None,
        interrupt_policy: Default::default(),
        tools: Vec::new(),
        limits: RunLimits::default(),
        thread_state: None,
        cancellation: CancellationToken::new(),
        delivery: harness_core::adapter::Delivery::default(),
        skills: harness_core::skill::SkillManifest::default(),
    }
}

/// A turn for driving a runtime by hand.
pub(crate) fn turn(execution_id: &ExecutionId) -> TurnInput {
    TurnInput {
        execution_id: execution_id.clone(),
        conversation_id: None,
        message: "go".to_owned(),
        files: Vec::new(),
        user: None,
        client_context: Map::new(),
        trace_context: None,
        deadline: None,
        idempotency_key: None,
    }
}

/// Options carrying `script`.
pub(crate) fn options(script: &Script) -> Value {
    ScriptedOptions::with_script(script.clone()).to_value()
}
