//! [`AcpAdapter`] and its runtime: one agent process and one ACP session per execution.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    ContentBlock, InitializeResponse, PermissionOptionKind, PromptResponse,
    RequestPermissionRequest, SessionNotification, SessionUpdate, StopReason, ToolCallStatus,
};
use futures_util::{StreamExt, stream};
use harness_core::action::{
    ApprovalRequest, Decision, DecisionKind, ToolCallApproval, ValidatedResponse,
};
use harness_core::adapter::{
    AdapterEvent, AgentConfig, BoxFuture, BoxStream, CancelResult, DeploymentContext, EventResult,
    HarnessAdapter, HarnessRuntime, Interrupt, InterruptKind, ResumeDecision, RuntimeContext,
    RuntimeIdentity, RuntimeInit, TurnInput,
};
use harness_core::capability::{Capability, CapabilityKey, CapabilityReport};
use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::event::{
    CancelReason, Content, NativeEvent, RunSucceeded, TextDelta, ToolCall, ToolCallCompleted,
    ToolCallOutcome,
};
use harness_core::id::{ActionId, AdapterId, ToolCallId};
use harness_core::manifest::{
    ContractVersion, Dependency, DependencyKind, ExecutionMode, HarnessDescriptor, TrustBoundary,
};
use harness_layers::redaction::Redactor;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use crate::connection::{Connection, Inbound, protocol};
use crate::options::AcpOptions;

/// The adapter id.
pub const ADAPTER_ID: &str = "acp";
/// The namespace of native events.
pub const NAMESPACE: &str = "acp";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn capabilities() -> CapabilityReport {
    let native = |explanation: &str| Capability::native().with_explanation(explanation);
    CapabilityReport::new()
        .with(
            CapabilityKey::StreamText,
            native("agent_message_chunk text becomes message.delta"),
        )
        .with(
            CapabilityKey::StreamReasoning,
            native("agent_thought_chunk text becomes reasoning.delta"),
        )
        .with(
            CapabilityKey::StreamUsage,
            Capability::unsupported("ACP v1 reports no token usage increments"),
        )
        .with(
            CapabilityKey::InterruptToolApproval,
            native(
                "session/request_permission becomes a tool approval: allow_* options approve, \
                 reject_* options reject; editing the arguments is not offered",
            ),
        )
        .with(
            CapabilityKey::InterruptFormInput,
            Capability::unsupported("elicitation is not mapped yet"),
        )
        .with(
            CapabilityKey::ToolBuiltin,
            native("the agent's own tool calls are reported as tool.call events"),
        )
        .with(
            CapabilityKey::SessionMultiTurn,
            Capability::unsupported(
                "session/load is not implemented: each execution is a new ACP session, and \
                 conversations are refused at preflight",
            ),
        )
        .with(
            CapabilityKey::RuntimeCancel,
            native(
                "session/cancel, pending permission requests answered as cancelled, then the \
                 process group terminated and killed after the grace period",
            ),
        )
        .with(
            CapabilityKey::RuntimeBoundedCleanup,
            native("cleanup terminates, then kills, the agent's whole process group"),
        )
}

fn build_descriptor() -> Result<HarnessDescriptor, String> {
    let id: AdapterId = ADAPTER_ID.parse().map_err(|e| format!("{e}"))?;
    HarnessDescriptor::builder(id, env!("CARGO_PKG_VERSION"))
        .name("Agent Client Protocol (any ACP agent over stdio)")
        .contract_version(ContractVersion::V1)
        .execution_mode(ExecutionMode::in_process())
        .trust_boundary(TrustBoundary::LocalSubprocess)
        .dependency(Dependency::new(
            DependencyKind::Crate,
            "agent-client-protocol",
            "5.2",
        ))
        .options_schema_for::<AcpOptions>()
        .capabilities(capabilities())
        .build()
        .map_err(|e| e.to_string())
}

#[allow(clippy::expect_used)] // a constant descriptor; the `descriptor_builds` test proves it.
static DESCRIPTOR: LazyLock<HarnessDescriptor> =
    LazyLock::new(|| build_descriptor().expect("the acp adapter's constant descriptor is valid"));

/// Counters of what the adapter's runtimes did, shared by all of them.
#[derive(Debug, Default)]
pub struct Stats {
    agents_started: AtomicU64,
    graceful_cancels: AtomicU64,
    forced_cancels: AtomicU64,
}

/// A copy of the [`Stats`] counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatsSnapshot {
    /// Agent processes spawned.
    pub agents_started: u64,
    /// Cancels whose turn ended within the grace period after `session/cancel`.
    pub graceful_cancels: u64,
    /// Cancels that had to terminate the agent's process group.
    pub forced_cancels: u64,
}

impl Stats {
    /// The counters now.
    #[must_use]
    pub fn snapshot(&self) -> StatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::SeqCst);
        StatsSnapshot {
            agents_started: get(&self.agents_started),
            graceful_cancels: get(&self.graceful_cancels),
            forced_cancels: get(&self.forced_cancels),
        }
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::SeqCst);
}

/// Redacts the agent's stderr before it enters a diagnostic.
static STDERR_REDACTOR: LazyLock<Option<Redactor>> =
    LazyLock::new(|| Redactor::builder().build().ok());

/// Drives any ACP agent: see the [crate docs](crate).
#[derive(Debug, Clone, Default)]
pub struct AcpAdapter {
    stats: Arc<Stats>,
}

impl AcpAdapter {
    /// The adapter.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The counters shared by this adapter's runtimes.
    #[must_use]
    pub fn stats(&self) -> Arc<Stats> {
        Arc::clone(&self.stats)
    }
}

impl HarnessAdapter for AcpAdapter {
    fn descriptor(&self) -> &HarnessDescriptor {
        &DESCRIPTOR
    }

    fn evaluate<'a>(
        &'a self,
        config: &'a AgentConfig,
        _deployment: &'a DeploymentContext,
    ) -> BoxFuture<'a, Result<CapabilityReport, HarnessError>> {
        let result = AcpOptions::from_value(&config.options).and_then(|_| {
            if config.conversation.is_some() {
                Err(HarnessError::new(
                    ErrorCategory::Configuration,
                    "the acp adapter does not continue conversations (session.multi_turn is \
                     unsupported)",
                ))
            } else {
                Ok(DESCRIPTOR.capabilities().clone())
            }
        });
        Box::pin(async move { result })
    }

    fn create_runtime(
        &self,
        context: RuntimeContext,
    ) -> BoxFuture<'_, Result<Box<dyn HarnessRuntime>, HarnessError>> {
        let result = AcpOptions::from_value(&context.config.options).map(|options| {
            let (turn_tx, _) = watch::channel(false);
            Box::new(AcpRuntime {
                adapter: context.adapter.clone(),
                execution_id: context.execution_id,
                options,
                stats: Arc::clone(&self.stats),
                init: tokio::sync::Mutex::new(None),
                inbound: tokio::sync::Mutex::new(None),
                state: Mutex::new(State::default()),
                turn: turn_tx,
            }) as Box<dyn HarnessRuntime>
        });
        Box::pin(async move { result })
    }
}

/// A permission request waiting for the caller.
#[derive(Debug, Clone)]
struct PendingPermission {
    rpc_id: Value,
    interrupt: Interrupt,
    call_id: ToolCallId,
    approve: Option<String>,
    reject: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    connection: Option<Arc<Connection>>,
    session_id: Option<String>,
    negotiated: Option<Value>,
    announced: bool,
    pending: Option<PendingPermission>,
    /// Tool calls reported as started / as ended.
    started: HashSet<String>,
    ended: HashSet<String>,
    titles: std::collections::HashMap<String, String>,
}

#[derive(Debug)]
struct AcpRuntime {
    adapter: AdapterId,
    execution_id: harness_core::id::ExecutionId,
    options: AcpOptions,
    stats: Arc<Stats>,
    init: tokio::sync::Mutex<Option<Result<RuntimeInit, HarnessError>>>,
    inbound: tokio::sync::Mutex<Option<mpsc::UnboundedReceiver<Inbound>>>,
    state: Mutex<State>,
    /// `true` while a `session/prompt` is outstanding.
    turn: watch::Sender<bool>,
}

impl AcpRuntime {
    fn with_stderr(&self, err: HarnessError) -> HarnessError {
        let Some(connection) = lock(&self.state).connection.clone() else {
            return err;
        };
        let tail = connection.stderr_tail();
        if tail.is_empty() {
            return err;
        }
        // Redacted with the built-in rules (bearer tokens, API keys, ...); without a
        // redactor the tail is dropped rather than kept unredacted.
        let Some(redactor) = STDERR_REDACTOR.as_ref() else {
            return err;
        };
        let tail = redactor.redact_str(&tail);
        let before = err.diagnostic().unwrap_or_default().to_owned();
        err.with_diagnostic(format!(
            "{before}\nagent stderr (last 8 KiB, redacted):\n{tail}"
        ))
    }

    async fn start(&self) -> Result<RuntimeInit, HarnessError> {
        let (connection, inbound) = Connection::spawn(&self.options)?;
        bump(&self.stats.agents_started);
        *self.inbound.lock().await = Some(inbound);
        lock(&self.state).connection = Some(Arc::clone(&connection));
        let result = self.handshake(&connection).await;
        if result.is_err() {
            connection.shutdown(self.options.cancel_grace()).await;
        }
        result.map_err(|e| self.with_stderr(e))
    }

    async fn handshake(&self, connection: &Connection) -> Result<RuntimeInit, HarnessError> {
        let files = self.options.files;
        let init = connection
            .call(
                "initialize",
                &json!({
                    "protocolVersion": ProtocolVersion::LATEST,
                    "clientCapabilities": {
                        "fs": {"readTextFile": files.reads(), "writeTextFile": files.writes()},
                        "terminal": false,
                    },
                }),
            )
            .await?;
        let init: InitializeResponse = serde_json::from_value(init).map_err(|e| {
            protocol("the ACP agent sent a malformed initialize response")
                .with_diagnostic(e.to_string())
        })?;
        if init.protocol_version != ProtocolVersion::V1 {
            return Err(HarnessError::new(
                ErrorCategory::Configuration,
                "the ACP agent speaks a protocol version this adapter does not",
            )
            .with_diagnostic(format!(
                "agent protocol version {:?}",
                init.protocol_version
            )));
        }
        let session = connection
            .call(
                "session/new",
                &json!({"cwd": self.options.cwd, "mcpServers": []}),
            )
            .await?;
        let Some(session_id) = session.get("sessionId").and_then(Value::as_str) else {
            return Err(protocol(
                "the ACP agent's session/new response has no sessionId",
            ));
        };
        let mut state = lock(&self.state);
        state.session_id = Some(session_id.to_owned());
        state.negotiated = Some(json!({
            "protocolVersion": init.protocol_version,
            "agentCapabilities": init.agent_capabilities,
            "agentInfo": init.agent_info,
        }));
        Ok(RuntimeInit {
            provider_session_id: Some(session_id.to_owned()),
        })
    }

    async fn ensure_initialized(&self) -> Result<RuntimeInit, HarnessError> {
        let mut init = self.init.lock().await;
        if let Some(result) = init.as_ref() {
            return result.clone();
        }
        let result = self.start().await;
        *init = Some(result.clone());
        result
    }

    fn segment(&self, first: VecDeque<EventResult>) -> BoxStream<'_, EventResult> {
        let segment = Segment {
            runtime: self,
            queue: first,
            done: false,
        };
        Box::pin(stream::unfold(segment, |mut s| async move {
            loop {
                if let Some(item) = s.queue.pop_front() {
                    if matches!(
                        item,
                        Err(_) | Ok(AdapterEvent::Completed(_) | AdapterEvent::Interrupt(_))
                    ) {
                        s.done = true;
                        s.queue.clear();
                    }
                    return Some((item, s));
                }
                if s.done {
                    return None;
                }
                s.step().await;
            }
        }))
    }

    async fn begin_turn(&self, turn: &TurnInput) -> VecDeque<EventResult> {
        let mut out = VecDeque::new();
        if let Err(e) = self.ensure_initialized().await {
            out.push_back(Err(e));
            return out;
        }
        let (connection, session_id, announce) = {
            let mut state = lock(&self.state);
            let announce = if state.announced {
                None
            } else {
                state.announced = true;
                state.negotiated.clone()
            };
            (state.connection.clone(), state.session_id.clone(), announce)
        };
        let (Some(connection), Some(session_id)) = (connection, session_id) else {
            out.push_back(Err(HarnessError::new(
                ErrorCategory::Unavailable,
                "the ACP agent is not running",
            )));
            return out;
        };
        if let Some(negotiated) = announce
            && let Ok(event) = NativeEvent::new(NAMESPACE, "initialized", negotiated)
        {
            out.push_back(Ok(AdapterEvent::Content(Content::Native(event))));
        }
        let done = connection.request(
            "session/prompt",
            &json!({"sessionId": session_id, "prompt": [{"type": "text", "text": turn.message}]}),
        );
        self.turn.send_replace(true);
        let inbound = connection.inbound.clone();
        let turn_flag = self.turn.clone();
        tokio::spawn(async move {
            let result = done.await.unwrap_or_else(|_| {
                Err(HarnessError::new(
                    ErrorCategory::Unavailable,
                    "the ACP agent is not running",
                ))
            });
            let _ = inbound.send(Inbound::PromptDone(result));
            turn_flag.send_replace(false);
        });
        out
    }

    fn map_update(&self, update: SessionUpdate, out: &mut VecDeque<EventResult>) {
        let content = |c: Content| Ok(AdapterEvent::Content(c));
        match update {
            SessionUpdate::AgentMessageChunk(chunk) => match chunk.content {
                ContentBlock::Text(t) => {
                    out.push_back(content(Content::MessageDelta(TextDelta::new(t.text))));
                }
                other => self.native("agent_message_chunk", &other, out),
            },
            SessionUpdate::AgentThoughtChunk(chunk) => match chunk.content {
                ContentBlock::Text(t) => {
                    out.push_back(content(Content::ReasoningDelta(TextDelta::new(t.text))));
                }
                other => self.native("agent_thought_chunk", &other, out),
            },
            SessionUpdate::ToolCall(call) => {
                let id = call.tool_call_id.0.to_string();
                let status = call.status;
                let arguments = call.raw_input.clone().unwrap_or_else(|| json!({}));
                lock(&self.state)
                    .titles
                    .insert(id.clone(), call.title.clone());
                if !self.started(&id, &call.title, arguments, out) {
                    self.native("tool_call", &call, out);
                }
                let output = call.raw_output.clone();
                self.finish(&id, status, output, out);
            }
            SessionUpdate::ToolCallUpdate(update) => {
                let id = update.tool_call_id.0.to_string();
                let fields = &update.fields;
                match fields.status {
                    Some(status @ (ToolCallStatus::Completed | ToolCallStatus::Failed)) => {
                        let title = fields.title.clone().unwrap_or_else(|| self.title(&id));
                        let arguments = fields.raw_input.clone().unwrap_or_else(|| json!({}));
                        self.started(&id, &title, arguments, out);
                        let output = fields.raw_output.clone().or_else(|| {
                            fields
                                .content
                                .as_ref()
                                .and_then(|c| serde_json::to_value(c).ok())
                        });
                        if !self.finish(&id, status, output, out) {
                            self.native("tool_call_update", &update, out);
                        }
                    }
                    _ => self.native("tool_call_update", &update, out),
                }
            }
            other => {
                let value = serde_json::to_value(&other).unwrap_or(Value::Null);
                let name = value
                    .get("sessionUpdate")
                    .and_then(Value::as_str)
                    .unwrap_or("session_update")
                    .to_owned();
                self.native(&name, &value, out);
            }
        }
    }

    fn title(&self, id: &str) -> String {
        lock(&self.state)
            .titles
            .get(id)
            .cloned()
            .unwrap_or_else(|| "tool".to_owned())
    }

    /// Emits `tool.call.started` once per call; `false` if it was already started.
    fn started(
        &self,
        id: &str,
        title: &str,
        arguments: Value,
        out: &mut VecDeque<EventResult>,
    ) -> bool {
        if !lock(&self.state).started.insert(id.to_owned()) {
            return false;
        }
        match tool_call_id(id) {
            Ok(call_id) => out.push_back(Ok(AdapterEvent::Content(Content::ToolCallStarted(
                ToolCall {
                    call_id,
                    tool: tool_name(title),
                    arguments,
                },
            )))),
            Err(e) => out.push_back(Err(e)),
        }
        true
    }

    /// Emits `tool.call.completed` once per call for a final status; `false` otherwise.
    fn finish(
        &self,
        id: &str,
        status: ToolCallStatus,
        output: Option<Value>,
        out: &mut VecDeque<EventResult>,
    ) -> bool {
        let outcome = match status {
            ToolCallStatus::Completed => ToolCallOutcome::Success {
                output: output.unwrap_or(Value::Null),
            },
            ToolCallStatus::Failed => ToolCallOutcome::Failure {
                message: "the agent reported the tool call as failed".to_owned(),
            },
            _ => return false,
        };
        if !lock(&self.state).ended.insert(id.to_owned()) {
            return false;
        }
        match tool_call_id(id) {
            Ok(call_id) => out.push_back(Ok(AdapterEvent::Content(Content::ToolCallCompleted(
                ToolCallCompleted { call_id, outcome },
            )))),
            Err(e) => out.push_back(Err(e)),
        }
        true
    }

    fn native(&self, name: &str, payload: &impl serde::Serialize, out: &mut VecDeque<EventResult>) {
        let payload = serde_json::to_value(payload).unwrap_or(Value::Null);
        if let Ok(event) = NativeEvent::new(NAMESPACE, name, payload) {
            out.push_back(Ok(AdapterEvent::Content(Content::Native(event))));
        }
    }

    fn permission(&self, rpc_id: Value, request: &RequestPermissionRequest) -> EventResult {
        let id = request.tool_call.tool_call_id.0.to_string();
        let call_id = tool_call_id(&id)?;
        let pick = |kinds: [PermissionOptionKind; 2]| {
            kinds.iter().find_map(|kind| {
                request
                    .options
                    .iter()
                    .find(|o| o.kind == *kind)
                    .map(|o| o.option_id.0.to_string())
            })
        };
        let approve = pick([
            PermissionOptionKind::AllowOnce,
            PermissionOptionKind::AllowAlways,
        ]);
        let reject = pick([
            PermissionOptionKind::RejectOnce,
            PermissionOptionKind::RejectAlways,
        ]);
        let mut allowed = Vec::new();
        if approve.is_some() {
            allowed.push(DecisionKind::Approve);
        }
        if reject.is_some() {
            allowed.push(DecisionKind::Reject);
        }
        let fields = &request.tool_call.fields;
        let title = fields.title.clone().unwrap_or_else(|| self.title(&id));
        let arguments = fields.raw_input.clone().unwrap_or_else(|| json!({}));
        let approval =
            ToolCallApproval::new(call_id.clone(), tool_name(&title), arguments, json!({}))
                .and_then(|a| a.with_allowed(allowed))
                .and_then(|a| ApprovalRequest::new([a]))
                .map_err(|e| {
                    protocol("the ACP agent sent a permission request with no usable option")
                        .with_diagnostic(e.to_string())
                })?;
        let interrupt = Interrupt {
            id: ActionId::generate(),
            kind: InterruptKind::ToolApproval(approval),
        };
        lock(&self.state).pending = Some(PendingPermission {
            rpc_id,
            interrupt: interrupt.clone(),
            call_id,
            approve,
            reject,
        });
        Ok(AdapterEvent::Interrupt(interrupt))
    }

    fn stop(&self, result: Result<Value, HarnessError>) -> EventResult {
        let value = result.map_err(|e| self.with_stderr(e))?;
        let response: PromptResponse = serde_json::from_value(value).map_err(|e| {
            protocol("the ACP agent sent a malformed session/prompt response")
                .with_diagnostic(e.to_string())
        })?;
        let summary = match response.stop_reason {
            StopReason::EndTurn => None,
            StopReason::Cancelled => {
                return Err(HarnessError::new(
                    ErrorCategory::Cancelled,
                    "the ACP agent cancelled the turn",
                ));
            }
            other => Some(format!(
                "stop reason: {}",
                serde_json::to_value(other)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_else(|| "other".to_owned())
            )),
        };
        Ok(AdapterEvent::Completed(RunSucceeded { summary }))
    }
}

fn tool_call_id(id: &str) -> Result<ToolCallId, HarnessError> {
    id.parse().map_err(|_| {
        protocol("the ACP agent sent a tool call id that is not a valid id").with_diagnostic(
            format!("tool call id {:?}", id.chars().take(80).collect::<String>()),
        )
    })
}

fn tool_name(title: &str) -> String {
    if title.trim().is_empty() {
        "tool".to_owned()
    } else {
        title.to_owned()
    }
}

struct Segment<'a> {
    runtime: &'a AcpRuntime,
    queue: VecDeque<EventResult>,
    done: bool,
}

impl Segment<'_> {
    async fn step(&mut self) {
        let rt = self.runtime;
        let next = {
            let mut guard = rt.inbound.lock().await;
            match guard.as_mut() {
                Some(rx) => rx.recv().await,
                None => None,
            }
        };
        let Some(next) = next else {
            self.queue.push_back(Err(HarnessError::new(
                ErrorCategory::Unavailable,
                "the ACP agent is not running",
            )));
            return;
        };
        match next {
            Inbound::Update(notification) => {
                let SessionNotification {
                    session_id, update, ..
                } = *notification;
                if lock(&rt.state).session_id.as_deref() == Some(&*session_id.0) {
                    rt.map_update(update, &mut self.queue);
                }
            }
            Inbound::Permission { id, request } => {
                let item = rt.permission(id, &request);
                self.queue.push_back(item);
            }
            Inbound::PromptDone(result) => {
                let item = rt.stop(result);
                self.queue.push_back(item);
            }
            Inbound::Closed(err) => self.queue.push_back(Err(rt.with_stderr(err))),
        }
    }
}

impl HarnessRuntime for AcpRuntime {
    fn identity(&self) -> RuntimeIdentity {
        RuntimeIdentity {
            adapter: self.adapter.clone(),
            execution_id: self.execution_id.clone(),
            provider_session_id: lock(&self.state).session_id.clone(),
        }
    }

    fn initialize(&self) -> BoxFuture<'_, Result<RuntimeInit, HarnessError>> {
        Box::pin(self.ensure_initialized())
    }

    fn stream(&self, turn: TurnInput) -> BoxStream<'_, EventResult> {
        let start = Box::pin(async move {
            let first = self.begin_turn(&turn).await;
            self.segment(first)
        });
        Box::pin(stream::once(start).flatten())
    }

    fn resume(&self, decision: ResumeDecision) -> BoxStream<'_, EventResult> {
        let mut first = VecDeque::new();
        let (pending, connection) = {
            let mut state = lock(&self.state);
            (state.pending.take(), state.connection.clone())
        };
        match (pending, connection) {
            (Some(pending), Some(connection))
                if pending.interrupt.id == *decision.interrupt_id() =>
            {
                let decided = match decision.response() {
                    ValidatedResponse::Approval(approval) => approval
                        .decisions()
                        .and_then(|d| d.iter().find(|d| d.call_id == pending.call_id))
                        .map(|d| d.decision.clone()),
                    ValidatedResponse::Form(_) => None,
                };
                let (option, rejected) = match &decided {
                    Some(Decision::Approve) => (pending.approve.clone(), None),
                    Some(Decision::Reject { reason }) => {
                        (pending.reject.clone(), Some(reason.clone()))
                    }
                    // A dismissal (or an edit, never offered) declines the call.
                    _ => (pending.reject.clone(), Some(None)),
                };
                let outcome = match option {
                    Some(option) => json!({"outcome": "selected", "optionId": option}),
                    None => json!({"outcome": "cancelled"}),
                };
                connection.respond(&pending.rpc_id, &json!({ "outcome": outcome }));
                if let Some(reason) = rejected {
                    let id = pending.call_id.as_str().to_owned();
                    if lock(&self.state).ended.insert(id) {
                        first.push_back(Ok(AdapterEvent::Content(Content::ToolCallCompleted(
                            ToolCallCompleted {
                                call_id: pending.call_id,
                                outcome: ToolCallOutcome::Rejected { reason },
                            },
                        ))));
                    }
                }
            }
            (pending, _) => {
                lock(&self.state).pending = pending;
                first.push_back(Err(protocol(
                    "resume names no permission request this runtime is paused on",
                )));
            }
        }
        self.segment(first)
    }

    fn pending_interrupt(&self) -> BoxFuture<'_, Option<Interrupt>> {
        let pending = lock(&self.state)
            .pending
            .as_ref()
            .map(|p| p.interrupt.clone());
        Box::pin(async move { pending })
    }

    fn cancel(&self, _reason: CancelReason) -> BoxFuture<'_, CancelResult> {
        Box::pin(async move {
            let (connection, session_id, pending) = {
                let mut state = lock(&self.state);
                (
                    state.connection.clone(),
                    state.session_id.clone(),
                    state.pending.take(),
                )
            };
            let (Some(connection), Some(session_id)) = (connection, session_id) else {
                return CancelResult::NothingToCancel;
            };
            if !*self.turn.borrow() {
                return CancelResult::NothingToCancel;
            }
            connection.notify("session/cancel", &json!({"sessionId": session_id}));
            if let Some(pending) = pending {
                connection.respond(
                    &pending.rpc_id,
                    &json!({"outcome": {"outcome": "cancelled"}}),
                );
            }
            let mut turn = self.turn.subscribe();
            let grace = self.options.cancel_grace();
            if tokio::time::timeout(grace, turn.wait_for(|active| !*active))
                .await
                .is_err()
            {
                bump(&self.stats.forced_cancels);
                connection.shutdown(Duration::from_millis(500)).await;
            } else {
                bump(&self.stats.graceful_cancels);
            }
            CancelResult::Requested
        })
    }

    fn restart(&self) -> BoxFuture<'_, Result<(), HarnessError>> {
        Box::pin(async {
            Err(HarnessError::new(
                ErrorCategory::Configuration,
                "the acp adapter does not support runtime.restart",
            ))
        })
    }

    fn cleanup(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let connection = {
                let mut state = lock(&self.state);
                state.pending = None;
                state.connection.clone()
            };
            if let Some(connection) = connection {
                connection.shutdown(self.options.cancel_grace()).await;
            }
        })
    }
}

/// The descriptor, for tests and registries.
#[must_use]
pub fn descriptor() -> &'static HarnessDescriptor {
    &DESCRIPTOR
}
