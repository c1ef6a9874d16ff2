//! The agent process and the client side of its ACP connection, on the
//! `agent-client-protocol` crate: a `Client.v1()` connection over the child's stdio
//! (the crate's generic [`Lines`](acp::Lines) transport), with typed handlers for what
//! the agent sends.
//!
//! - `session/update` notifications, `session/request_permission` and `elicitation/create`
//!   requests go to the runtime's inbound queue, in the order the connection dispatched them
//!   (the crate's dispatch loop is sequential, and these handlers only enqueue; the `fs/*`
//!   handlers below do their file I/O in the loop, bounded by [`READ_LIMIT`]).
//! - That queue is bounded by *backpressure* at the source: the line stream admits each such
//!   message against the [`Backlog`] (at most [`INBOUND_LIMIT`] messages and
//!   [`INBOUND_BYTES`] bytes not yet consumed by the runtime) before the crate sees it, and
//!   stops reading the agent's stdout while the backlog is full, so the agent blocks on its
//!   own writes. The crate's own transport queue is unbounded, so the bound must be applied
//!   before it. See [`Backlog`] for the paths where waiting could deadlock and what is done
//!   there instead.
//! - `fs/read_text_file` / `fs/write_text_file` are served here, inside the workspace, or
//!   declined (a read returns at most [`READ_LIMIT`] bytes, honouring `line` / `limit`); every other request (`terminal/*`, ...) is answered `-32601` by the crate.
//! - The `session/prompt` response is enqueued from an ordered response callback
//!   ([`PreparedRequest::on_receiving_result`](acp::PreparedRequest::on_receiving_result)),
//!   so it always follows the updates the agent sent before it.
//!
//! The crate answers malformed input with JSON-RPC errors and carries on (it is built for
//! long-lived editors); the adapter must end the run as `protocol` instead. So the incoming
//! line stream is wrapped by a *wire guard* that checks each line before the crate sees it:
//! a line the crate's own parser refuses (see [`Wire::incoming`]), a response to a request
//! that was not sent (the outgoing sink records the ids of requests as they are written), a
//! malformed response to one of our requests, or a malformed `session/update` /
//! `session/request_permission` / `elicitation/create` ends the stream with an error and
//! records the fault, which then names every failure.
//!
//! The agent's exit also ends the run when a process it started still holds its stdout open
//! (so the stream never ends): see [`watch_exit`].
//!
//! Ending an agent ([`AgentProcess::stop`]) does not wait for its process group: a [`Reaper`]
//! task terminates, then kills, then reaps it, bounded. Decisions where the spec is silent:
//! cleanup returns once the group is handed over (the run's terminal event follows the
//! agent's answer to a cancel, not the death of a child that ignores `SIGTERM`); a group that
//! already exited is not signalled; a reaper dropped with its runtime kills the group at once.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use agent_client_protocol as acp;
use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    ClientCapabilities, CreateElicitationRequest, CreateElicitationResponse, ElicitationAction,
    ElicitationCapabilities, ElicitationFormCapabilities, FileSystemCapabilities, Implementation,
    InitializeRequest, InitializeResponse, LoadSessionRequest, LoadSessionResponse,
    NewSessionResponse, PromptRequest, PromptResponse, ReadTextFileRequest, ReadTextFileResponse,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse, SessionId,
    SessionNotification, WriteTextFileRequest, WriteTextFileResponse,
};
use futures_util::{FutureExt as _, future};
use harness_core::error::{ErrorCategory, HarnessError};
use harness_sandbox::{Launch, Sandbox, SandboxGuard};
use rustix::process::{Pid, Signal};
use serde::Deserialize as _;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::Instrument as _;

use crate::options::{AcpAgent, FileAccess};
use crate::runtime::Stats;

/// How much of the agent's stderr is kept, for diagnostics.
pub(crate) const STDERR_LIMIT: usize = 8 * 1024;
/// The longest line accepted from the agent.
const MAX_LINE: usize = 16 * 1024 * 1024;
/// The most text `fs/read_text_file` returns: a larger file (or larger selection of lines) is
/// answered with an `invalid params` error naming this limit.
pub const READ_LIMIT: usize = 4 * 1024 * 1024;

/// At most this many messages the runtime consumes (`session/update` notifications,
/// `session/request_permission` and `elicitation/create` requests) are held between the
/// agent's stdout and the runtime: while that many are waiting, the adapter stops reading the
/// agent's output (backpressure).
pub const INBOUND_LIMIT: usize = 1024;
/// At most this many bytes of such messages are held (a single larger message, up to the
/// 16 MiB line limit, is admitted alone).
pub const INBOUND_BYTES: usize = 8 * 1024 * 1024;
/// What each message weighs at least: [`INBOUND_BYTES`] / [`INBOUND_LIMIT`], so the byte
/// budget also bounds the number of messages.
const MIN_WEIGHT: usize = INBOUND_BYTES / INBOUND_LIMIT;

/// The crate's connection to the agent, as the client sees it.
type AgentConnection = acp::v1::ConnectionTo<acp::Agent>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the agent sent that the runtime handles.
#[derive(Debug)]
pub(crate) enum Inbound {
    /// A `session/update` notification (not a replayed one: see [`AgentProcess::load`]),
    /// with its share of the [`Backlog`], released when the runtime consumed it.
    Update(Box<SessionNotification>, Option<Ticket>),
    /// A `session/request_permission` request, answered through its responder.
    Permission {
        request: Box<RequestPermissionRequest>,
        responder: acp::v1::Responder<RequestPermissionResponse>,
        /// Released when the runtime takes the request.
        _ticket: Option<Ticket>,
    },
    /// An `elicitation/create` request, answered through its responder.
    Elicitation {
        request: Box<CreateElicitationRequest>,
        responder: acp::v1::Responder<CreateElicitationResponse>,
        /// Released when the runtime takes the request.
        _ticket: Option<Ticket>,
    },
    /// An informational `session/update` the schema refuses (see [`Taken::Rewritten`]), with
    /// its share of the [`Backlog`].
    Unparsed(Box<UnparsedUpdate>, Option<Ticket>),
    /// The prompt request was answered (or failed).
    PromptDone(Result<PromptResponse, HarnessError>),
    /// The connection ended (the agent exited, or sent something that is not ACP).
    Closed(HarnessError),
}

/// Feeds the lines of `agent_output` to a fresh wire guard, as an agent's output after our
/// `initialize` (id 0), `session/new` (id 1) and `session/prompt` (id 2) requests went out;
/// returns how it took each line (`Ok(true)`: a message for the runtime, `Ok(false)`:
/// handled, `Err`: the fault that ends the run). For the `acp_wire` fuzz target.
#[cfg(feature = "fuzzing")]
pub fn fuzz_wire(agent_output: &str) -> Vec<Result<bool, HarnessError>> {
    let wire = Wire::default();
    for (id, method) in [(0, "initialize"), (1, "session/new"), (2, "session/prompt")] {
        let request =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {}});
        wire.outgoing(&request.to_string());
    }
    agent_output
        .lines()
        .map(|line| wire.incoming(line).map(|taken| taken != Taken::Handled))
        .collect()
}

/// How the wire guard took a line the crate may see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Taken {
    /// The crate handles it (a response to one of our requests, a request it answers).
    Handled,
    /// A message the runtime consumes, passed on as it is.
    Consumed,
    /// An informational `session/update` the schema refuses, passed on rewritten as an
    /// [`UnparsedUpdate`] notification (which the runtime consumes): the run goes on.
    Rewritten(String),
}

/// The `sessionUpdate` kinds that carry portable semantics (text, reasoning, tool calls): one
/// the schema refuses is a protocol fault. Every other kind (`usage_update`,
/// `available_commands_update`, `current_mode_update`, a kind newer than the schema, ...) is
/// informational: one that does not parse becomes an `acp.unparsed_update` native event.
const PORTABLE_UPDATES: [&str; 4] = [
    "agent_message_chunk",
    "agent_thought_chunk",
    "tool_call",
    "tool_call_update",
];

/// The notification the wire guard rewrites an unparsable informational `session/update`
/// into, so that it keeps its place in the dispatch order. Agents may not send it: the guard
/// refuses every incoming method under `_harness/`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, acp::JsonRpcNotification)]
#[notification(method = "_harness/unparsed_update")]
#[serde(rename_all = "camelCase")]
pub(crate) struct UnparsedUpdate {
    pub(crate) session_id: SessionId,
    /// The update as the agent sent it.
    pub(crate) update: Value,
    /// Why the schema refused it.
    pub(crate) error: String,
}

impl UnparsedUpdate {
    /// The update's `sessionUpdate` kind.
    pub(crate) fn kind(&self) -> &str {
        self.update
            .get("sessionUpdate")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

/// The rewritten line for an informational update that does not parse, or `None` when the
/// update carries portable semantics or cannot be placed (no session id, no kind).
fn rewrite_unparsed(params: &Value, error: &serde_json::Error) -> Option<String> {
    let session_id = params.get("sessionId")?.as_str()?;
    let update = params.get("update")?;
    let kind = update.get("sessionUpdate")?.as_str()?;
    if PORTABLE_UPDATES.contains(&kind) {
        return None;
    }
    let params = UnparsedUpdate {
        session_id: SessionId::new(session_id),
        update: update.clone(),
        error: error.to_string(),
    };
    let line = serde_json::json!({
        "jsonrpc": "2.0",
        "method": "_harness/unparsed_update",
        "params": params,
    });
    Some(line.to_string())
}

/// What the wire guard observed, shared by the line stream, the sink and the runtime.
#[derive(Debug, Default)]
struct Wire {
    /// Requests written and not yet answered: id → method.
    outstanding: Mutex<HashMap<acp::RawJsonRpcId, String>>,
    /// The first fault: the run ends with it.
    fault: Mutex<Option<HarnessError>>,
    /// The `protocolVersion` of the agent's `initialize` response, as sent.
    agent_version: Mutex<Option<Value>>,
    /// The sandbox the agent runs in, if any: a limit it reached is the run's fault.
    sandbox: std::sync::OnceLock<SandboxGuard>,
}

impl Wire {
    /// The first fault, else the limit the agent's sandbox reached (which killed the agent,
    /// so every path that reports its end reports the breach).
    fn fault(&self) -> Option<HarnessError> {
        let recorded = lock(&self.fault).clone();
        recorded.or_else(|| {
            let breach = self.sandbox.get()?.breach()?;
            Some(self.record_fault(breach.error()))
        })
    }

    /// Counts output the agent wrote against its sandbox's limit.
    fn output(&self, bytes: usize) {
        if let Some(sandbox) = self.sandbox.get() {
            sandbox.count_output(bytes);
        }
    }

    fn record_fault(&self, err: HarnessError) -> HarnessError {
        lock(&self.fault).get_or_insert(err).clone()
    }

    /// Records an outgoing request's id, before it is written.
    fn outgoing(&self, line: &str) {
        if let Ok(acp::RawJsonRpcMessage::Request(request)) =
            serde_json::from_str::<acp::RawJsonRpcMessage>(line)
        {
            lock(&self.outstanding).insert(request.id, request.method.to_string());
        }
    }

    /// Checks one incoming line; `Err` is a protocol fault that ends the connection. `Ok(true)`
    /// for a message the runtime consumes (a `session/update` notification, a
    /// `session/request_permission` or `elicitation/create` request), which the [`Backlog`]
    /// admits.
    ///
    /// The line is classified by the crate's own parser
    /// ([`TransportFrame::parse_json`](acp::TransportFrame::parse_json), what its transport
    /// does with every line), so the guard sees the message the crate will dispatch: a line
    /// the crate would answer or drop as malformed (a method together with `result`, an `id`
    /// that is not a number, string or null, `params` that are not an object or array, ...)
    /// is a fault here, and a consumed message is checked against its schema (as the typed
    /// handler will parse it), so `Ok(true)` holds exactly when a handler will take its
    /// ticket.
    fn incoming(&self, line: &str) -> Result<Taken, HarnessError> {
        let message = match acp::TransportFrame::parse_json(line) {
            acp::TransportFrame::Single(message) => message,
            acp::TransportFrame::Malformed { error, .. } => return Err(malformed(line, &error)),
            _ => return Err(protocol("the ACP agent sent a malformed JSON-RPC message")),
        };
        let fault = |method: &str, e: &serde_json::Error| {
            protocol("the ACP agent sent a malformed message")
                .with_diagnostic(format!("{method}: {e}"))
        };
        let typed = |method: &str, params: Option<acp::RawJsonRpcParams>| {
            let params = params.map_or(Value::Null, acp::RawJsonRpcParams::into_value);
            let checked = match method {
                "session/request_permission" => {
                    serde_json::from_value::<RequestPermissionRequest>(params).map(drop)
                }
                _ => serde_json::from_value::<CreateElicitationRequest>(params).map(drop),
            };
            checked
                .map(|()| Taken::Consumed)
                .map_err(|e| fault(method, &e))
        };
        match message {
            acp::RawJsonRpcMessage::Notification(n) if &*n.method == "session/update" => {
                let params = n
                    .params
                    .map_or(Value::Null, acp::RawJsonRpcParams::into_value);
                match SessionNotification::deserialize(&params) {
                    Ok(_) => Ok(Taken::Consumed),
                    Err(e) => rewrite_unparsed(&params, &e)
                        .map(Taken::Rewritten)
                        .ok_or_else(|| fault(&n.method, &e)),
                }
            }
            acp::RawJsonRpcMessage::Notification(n) if n.method.starts_with("_harness/") => Err(
                protocol("the ACP agent sent a method reserved for the client")
                    .with_diagnostic(format!("method {}", n.method)),
            ),
            acp::RawJsonRpcMessage::Request(r)
                if matches!(
                    &*r.method,
                    "session/request_permission" | "elicitation/create"
                ) =>
            {
                typed(&r.method, r.params)
            }
            acp::RawJsonRpcMessage::Request(r) if r.method.starts_with("_harness/") => Err(
                protocol("the ACP agent sent a method reserved for the client")
                    .with_diagnostic(format!("method {}", r.method)),
            ),
            acp::RawJsonRpcMessage::Notification(_) | acp::RawJsonRpcMessage::Request(_) => {
                Ok(Taken::Handled)
            }
            acp::RawJsonRpcMessage::Response(response) => {
                let id = response.id().clone();
                let Some(method) = lock(&self.outstanding).remove(&id) else {
                    return Err(protocol("the ACP agent answered an unknown request")
                        .with_diagnostic(format!(
                            "response id {}",
                            serde_json::to_string(&id).unwrap_or_default()
                        )));
                };
                match response {
                    acp::RawJsonRpcResponse::Result { result, .. } => {
                        self.check_result(&method, result).map(|()| Taken::Handled)
                    }
                    acp::RawJsonRpcResponse::Error { .. } => Ok(Taken::Handled),
                }
            }
        }
    }

    /// Checks the result of one of our requests against its schema.
    fn check_result(&self, method: &str, result: Value) -> Result<(), HarnessError> {
        let check = |r: Result<(), serde_json::Error>| {
            r.map_err(|e| {
                protocol("the ACP agent sent a malformed response")
                    .with_diagnostic(format!("{method}: {e}"))
            })
        };
        match method {
            "initialize" => {
                *lock(&self.agent_version) = result.get("protocolVersion").cloned();
                check(serde_json::from_value::<InitializeResponse>(result).map(drop))
            }
            "session/new" => check(serde_json::from_value::<NewSessionResponse>(result).map(drop)),
            "session/load" => {
                check(serde_json::from_value::<LoadSessionResponse>(result).map(drop))
            }
            "session/prompt" => check(serde_json::from_value::<PromptResponse>(result).map(drop)),
            _ => Ok(()),
        }
    }

    /// Maps a failure the crate reported for one of our requests.
    fn error(&self, err: &acp::Error) -> HarnessError {
        if let Some(fault) = self.fault() {
            return fault;
        }
        if acp::is_connection_terminated(err) || acp::is_incoming_transport_closed(err) {
            return exited().with_diagnostic(err.message.clone());
        }
        agent_error(i32::from(err.code), &err.message, err.data.as_ref())
    }
}

/// The bound on what the agent sent that the runtime has not consumed yet.
///
/// The line stream admits every message the runtime consumes before the crate sees it: it
/// takes a [`Ticket`] (the message's weight, at least [`MIN_WEIGHT`], from a budget of
/// [`INBOUND_BYTES`]) and queues it here; the handler the crate dispatches that message to
/// takes the ticket (in the same order: the dispatch loop is sequential) and either drops it
/// (a replayed update, a request answered at once) or hands it to the runtime with the
/// message, which drops it once consumed. While the budget is spent, the stream stops reading
/// the agent's stdout.
///
/// Waiting could deadlock where the runtime waits for something that must pass through the
/// same stdout while it is not consuming; each such path is handled:
///
/// - the handshake (`initialize`, `session/new`, `session/load`): nothing consumes yet, so a
///   backlog that is full once everything read was dispatched (see [`stuck`](Self::stuck))
///   ends the start as `protocol`, naming the limit;
/// - a cancelled turn (the driver may not poll the run, yet the cancel waits for the prompt's
///   answer): while [`refusing`](Self::refusing), the stream never waits; a message that
///   finds the budget spent passes without a ticket, and its handler answers a request
///   `cancelled` (as for any request after a cancel) or drops an update (counted in
///   `updates_dropped`);
/// - a run paused on an interrupt: the answer is written (the outgoing side never waits for
///   the incoming one) and the resumed segment consumes again, so waiting is safe;
/// - responses to our requests, `fs/*` requests and the `session/load` replay take no budget
///   for long (replayed updates are dropped by the handler at once);
/// - cleanup aborts the connection task, waiting or not.
#[derive(Debug)]
pub(crate) struct Backlog {
    budget: Arc<Semaphore>,
    /// Tickets of the lines admitted, in order, until their handler takes them (`None`: a
    /// line let through without budget while refusing).
    tickets: Mutex<VecDeque<Option<Ticket>>>,
    /// Messages admitted and not yet consumed.
    messages: Arc<AtomicUsize>,
    /// `true` while the stream waits for budget.
    stalled: AtomicBool,
    /// Bumped on every change [`stuck`](Self::stuck) depends on.
    changes: watch::Sender<u64>,
    /// Set once the turn is cancelled: permission and elicitation requests are then answered
    /// `cancelled` at once (ACP: the client answers them so after `session/cancel`), and the
    /// stream never waits for budget.
    refusing: watch::Sender<bool>,
    stats: Arc<Stats>,
}

/// One admitted message's share of the [`Backlog`], released when dropped.
#[derive(Debug)]
pub(crate) struct Ticket {
    _permit: OwnedSemaphorePermit,
    messages: Arc<AtomicUsize>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.messages.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Backlog {
    fn new(stats: Arc<Stats>) -> Self {
        Self {
            budget: Arc::new(Semaphore::new(INBOUND_BYTES)),
            tickets: Mutex::default(),
            messages: Arc::default(),
            stalled: AtomicBool::new(false),
            changes: watch::Sender::new(0),
            refusing: watch::Sender::new(false),
            stats,
        }
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Admits one message of `len` bytes the runtime will consume: waits for budget unless
    /// refusing.
    async fn admit(&self, len: usize) {
        let weight = u32::try_from(len.clamp(MIN_WEIGHT, INBOUND_BYTES)).unwrap_or(u32::MAX);
        let permit = match Arc::clone(&self.budget).try_acquire_many_owned(weight) {
            Ok(permit) => Some(permit),
            Err(_) if *self.refusing.borrow() => None,
            Err(_) => {
                self.stats.inbound_stalls.fetch_add(1, Ordering::SeqCst);
                self.stalled.store(true, Ordering::SeqCst);
                self.changed();
                let mut refusing = self.refusing.subscribe();
                let acquire = std::pin::pin!(Arc::clone(&self.budget).acquire_many_owned(weight));
                let cancelled = std::pin::pin!(async move {
                    let _ = refusing.wait_for(|r| *r).await.is_ok();
                });
                let permit = match future::select(acquire, cancelled).await {
                    future::Either::Left((permit, _)) => permit.ok(),
                    future::Either::Right(((), acquire)) => {
                        acquire.now_or_never().and_then(Result::ok)
                    }
                };
                self.stalled.store(false, Ordering::SeqCst);
                self.changed();
                permit
            }
        };
        let ticket = permit.map(|permit| {
            let n = self.messages.fetch_add(1, Ordering::SeqCst) + 1;
            self.stats
                .inbound_peak
                .fetch_max(u64::try_from(n).unwrap_or(u64::MAX), Ordering::SeqCst);
            Ticket {
                _permit: permit,
                messages: Arc::clone(&self.messages),
            }
        });
        lock(&self.tickets).push_back(ticket);
    }

    /// The ticket of the message being dispatched (the oldest one admitted).
    fn take(&self) -> Option<Ticket> {
        let ticket = lock(&self.tickets).pop_front().flatten();
        self.changed();
        ticket
    }

    /// Whether the stream waits for budget that only the runtime can free: every message
    /// admitted so far was dispatched (so everything read before them was too).
    fn is_stuck(&self) -> bool {
        self.stalled.load(Ordering::SeqCst) && lock(&self.tickets).is_empty()
    }

    /// Resolves once [`is_stuck`](Self::is_stuck).
    async fn stuck(&self) {
        let mut changes = self.changes.subscribe();
        let _ = changes.wait_for(|_| self.is_stuck()).await.is_ok();
    }

    fn refusing(&self) -> bool {
        *self.refusing.borrow()
    }
}

/// Replay accounting for `session/load`: while set, updates for that session are counted,
/// not enqueued.
#[derive(Debug, Default)]
struct Replay {
    session: Option<SessionId>,
    count: u64,
    /// When the last replayed update was dispatched.
    last: Option<tokio::time::Instant>,
}

/// The longest a `session/load` keeps counting a replay that goes on after its answer (see
/// [`AcpAgent::replay_quiet_ms`](crate::AcpAgent::replay_quiet_ms)).
pub const REPLAY_SETTLE_LIMIT: Duration = Duration::from_secs(5);

/// A running agent and the crate's client connection to it.
#[derive(Debug)]
pub(crate) struct AgentProcess {
    cx: AgentConnection,
    wire: Arc<Wire>,
    replay: Arc<Mutex<Replay>>,
    stderr: Arc<Mutex<VecDeque<u8>>>,
    /// `Some` until [`stop`](Self::stop) hands it to the reaper: until the agent is reaped,
    /// its pid (the group id) cannot be reused.
    child: Mutex<Option<Child>>,
    pgid: Option<u32>,
    stats: Arc<Stats>,
    /// Set once the process group is reaped (or given up on), by the [`Reaper`].
    reaped: Arc<watch::Sender<bool>>,
    stop: Mutex<Option<oneshot::Sender<()>>>,
    backlog: Arc<Backlog>,
    /// The tasks spawned for the agent (the connection first, then the stderr reader):
    /// stopped by the [`Reaper`] (and on drop) even if the agent left a process outside its
    /// group holding its stdout or stderr open.
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Reports the agent's exit while its stdout is still held open (see [`watch_exit`]);
    /// stopped first by [`stop`](Self::stop) (and on drop).
    exit_watch: Mutex<Option<JoinHandle<()>>>,
    /// Where the connection reports its end: the [`Reaper`] reports it when it had to stop
    /// the connection.
    inbound: mpsc::UnboundedSender<Inbound>,
    /// Set once the agent's end was reported (whoever reported it): see
    /// [`gone`](Self::gone).
    gone: Arc<watch::Sender<bool>>,
}

impl Drop for AgentProcess {
    /// An agent dropped without [`stop`](Self::stop) (a dropped `initialize` or probe, a
    /// timed-out `evaluate`) takes its whole process group with it, not only the leader
    /// `kill_on_drop` would reach.
    fn drop(&mut self) {
        if let Some(child) = lock(&self.child).take() {
            signal_group(self.pgid, Signal::KILL);
            reap_in_background(child);
        }
        if let Some(watch) = lock(&self.exit_watch).take() {
            watch.abort();
        }
        for task in lock(&self.tasks).drain(..) {
            task.abort();
        }
    }
}

/// How often a running agent is checked for having exited.
const EXIT_POLL: Duration = Duration::from_millis(100);
/// How long after the agent exited its connection may take to report the end itself (reading
/// what the agent wrote before it exited first).
const EXIT_DRAIN: Duration = Duration::from_millis(500);

/// Reports the agent's end as [`Inbound::Closed`] when it exited but its connection did not
/// report the end within [`EXIT_DRAIN`]: a process the agent started holds its stdout open,
/// so the stream never ends. The agent is not reaped here (it is watched through `/proc`):
/// until the [`Reaper`] is done with its group, its pid (the group id) stays reserved.
async fn watch_exit(
    pid: u32,
    mut reported: watch::Receiver<bool>,
    wire: Arc<Wire>,
    inbound: mpsc::UnboundedSender<Inbound>,
    gone: Arc<watch::Sender<bool>>,
) {
    loop {
        if *reported.borrow() {
            return;
        }
        if exited_unreaped(pid) {
            break;
        }
        tokio::time::sleep(EXIT_POLL).await;
    }
    if tokio::time::timeout(EXIT_DRAIN, reported.wait_for(|r| *r))
        .await
        .is_ok_and(|r| r.is_ok())
    {
        return;
    }
    let end = wire.fault().unwrap_or_else(|| {
        exited().with_diagnostic("the agent exited while a process it started holds its stdout")
    });
    let _ = inbound.send(Inbound::Closed(end));
    gone.send_replace(true);
}

/// Reaps a killed agent on a task of its own (it ends once the agent is reaped, right after
/// the kill), so no zombie is left until Tokio's best-effort orphan reaping gets to it.
fn reap_in_background(mut child: Child) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            let _ = child.start_kill();
            let _ = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
        });
    }
}

/// Kills the process group (and reaps the agent) when dropped, unless disarmed: covers
/// `spawn` being dropped before the [`AgentProcess`] (whose `Drop` then takes over) exists.
struct KillGroup {
    pgid: Option<u32>,
    child: Option<Child>,
}

impl KillGroup {
    /// The agent, no longer killed on drop.
    fn disarm(mut self) -> Option<Child> {
        self.pgid = None;
        self.child.take()
    }
}

impl Drop for KillGroup {
    fn drop(&mut self) {
        signal_group(self.pgid.take(), Signal::KILL);
        if let Some(child) = self.child.take() {
            reap_in_background(child);
        }
    }
}

/// Ends an agent's process group on a task of its own, so that the run it served does not
/// wait for it: `SIGTERM` to the group (if anything in it still lives), up to the grace for
/// the group to exit, `SIGKILL` to what did not, then the agent (the group's leader) is
/// reaped and the agent's tasks get [`TASK_DRAIN`] to finish. Bounded: the grace, 2 s for the
/// reap, [`TASK_DRAIN`].
///
/// Dropped unfinished (its Tokio runtime shuts down, or there is none), it kills the group at
/// once: no process outlives the reaper either way.
struct Reaper {
    /// The agent, until reaped: its group is killed if the reaper is dropped before.
    group: KillGroup,
    tasks: Vec<JoinHandle<()>>,
    wire: Arc<Wire>,
    inbound: mpsc::UnboundedSender<Inbound>,
    gone: Arc<watch::Sender<bool>>,
    stats: Arc<Stats>,
    reaped: Arc<watch::Sender<bool>>,
}

impl Reaper {
    async fn run(mut self, grace: Duration) {
        if let Some(pgid) = self.group.pgid
            // A group that already exited (its leader unreaped, so the id is still ours) is
            // not signalled.
            && group_lives(pgid)
        {
            self.stats.groups_terminated.fetch_add(1, Ordering::SeqCst);
            signal_group(Some(pgid), Signal::TERM);
            // The whole group, not only the agent: a harness's agent often exits on the
            // signal before the model process it started has flushed its own state (Claude
            // Code's session transcript, which the next turn's `session/load` reads).
            let deadline = tokio::time::Instant::now() + grace;
            while group_lives(pgid) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // What did not exit in the grace period is killed.
            if group_lives(pgid) {
                self.stats.groups_killed.fetch_add(1, Ordering::SeqCst);
                signal_group(Some(pgid), Signal::KILL);
            }
        }
        if let Some(child) = self.group.child.as_mut() {
            // A leader that left its group is not reached by the group's signals.
            if child.id().is_some_and(|pid| !exited_unreaped(pid)) {
                let _ = child.start_kill();
            }
            let _ = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
        }
        // Reaped (or, past the bound, left to Tokio's orphan reaping, `kill_on_drop` having
        // killed it): the group id may be reused from now on and is never signalled again.
        self.group.pgid = None;
        drop(self.group.child.take());
        // The connection and the stderr reader end once every holder of the agent's stdout
        // and stderr is gone; a process the agent moved out of its group may hold them open
        // for ever. Let them finish what the group wrote (bounded), then stop them.
        let deadline = tokio::time::Instant::now() + TASK_DRAIN;
        for (i, mut task) in std::mem::take(&mut self.tasks).into_iter().enumerate() {
            let finished = tokio::time::timeout_at(deadline, &mut task).await.is_ok();
            task.abort();
            if i == 0 && !finished {
                // The connection could not report its end itself.
                let end = self.wire.fault().unwrap_or_else(exited);
                let _ = self.inbound.send(Inbound::Closed(end));
                self.gone.send_replace(true);
            }
        }
        self.stats.groups_reaped.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        // Unfinished: kill the group now (finished: nothing is left to kill).
        signal_group(self.group.pgid.take(), Signal::KILL);
        for task in self.tasks.drain(..) {
            task.abort();
        }
        self.stats.reaping.fetch_sub(1, Ordering::SeqCst);
        self.reaped.send_replace(true);
    }
}

/// What the operator needs to know of a failed spawn: the program, where it was looked for
/// (the search path the child's lookup used: its own `PATH` when the agent sets or passes
/// one, else this process's), the working directory and the OS error. Diagnostic only: the
/// caller's projection says "could not be started".
fn spawn_failure(agent: &AcpAgent, program: &str, err: &std::io::Error) -> String {
    let path = agent.search_path();
    let searched = if program.contains('/') {
        "not searched: the program is a path".to_owned()
    } else if path.is_empty() {
        "PATH is empty".to_owned()
    } else {
        format!("PATH searched: {}", path.to_string_lossy())
    };
    let found = match harness_core::program::resolve(program, &agent.cwd, &path) {
        Ok(file) => format!(
            "; it resolves to {}, which the OS would not run",
            file.display()
        ),
        Err(why) => format!("; {}", why.category()),
    };
    format!(
        "spawning program `{program}` in {} ({searched}){found}: {err}",
        agent.cwd.display()
    )
}

/// The agent's program resolved on its search path, for a sandbox (which runs an absolute
/// path).
pub(crate) fn resolve_for_sandbox(
    agent: &AcpAgent,
    program: &str,
) -> Result<std::path::PathBuf, HarnessError> {
    harness_core::program::resolve(program, &agent.cwd, &agent.search_path()).map_err(|why| {
        HarnessError::new(
            ErrorCategory::Unavailable,
            "the ACP agent could not be started",
        )
        .with_diagnostic(format!(
            "resolving `{program}` for the sandbox in {}: {}",
            agent.cwd.display(),
            why.category()
        ))
    })
}

/// `launch` with the variables the agent inherits (`env`), from this process.
pub(crate) fn inherited(agent: &AcpAgent, mut launch: Launch) -> Launch {
    for name in &agent.env {
        if let Some(value) = std::env::var_os(name) {
            launch = launch.env(name.clone(), value);
        }
    }
    launch
}

/// Starts the agent in the operator's sandbox: its program resolved on the agent's search
/// path (the sandbox runs an absolute path), its environment as an unsandboxed agent's
/// (what `env` names, from this process, then `setEnv`), all of it allowed by the profile;
/// `relay`, the MCP relay's endpoint, relayed into this sandbox only.
async fn spawn_sandboxed(
    agent: &AcpAgent,
    sandbox: &Sandbox,
    (program, args): (&str, &[String]),
    relay: Option<harness_sandbox::Endpoint>,
) -> Result<harness_sandbox::Sandboxed, HarnessError> {
    let resolved = resolve_for_sandbox(agent, program)?;
    let mut launch = inherited(agent, Launch::new(resolved, &agent.cwd));
    launch.relays.extend(relay);
    launch.args.extend(args.iter().map(Into::into));
    for (name, value) in &agent.set_env {
        launch.env.retain(|(n, _)| n != name);
        launch = launch.env(name.clone(), value);
    }
    sandbox.spawn(launch).await
}

/// Completes once an agent's process group is reaped: see [`AgentProcess::stop`].
#[derive(Debug, Clone)]
pub(crate) struct Reaped(watch::Receiver<bool>);

impl Reaped {
    /// Whether the group is reaped already.
    pub(crate) fn done(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits until the group is reaped.
    pub(crate) async fn wait(mut self) {
        // Every sender gone: the reaper is gone too.
        let _ = self.0.wait_for(|reaped| *reaped).await;
    }
}

impl AgentProcess {
    /// Spawns the agent in its own process group, with only the allowlisted environment, and
    /// connects the crate's client to its stdio. What the agent sends goes to `inbound`. A
    /// sandboxed agent reaches `relay` (the MCP relay's endpoint) through its sandbox.
    pub(crate) async fn spawn(
        agent: &AcpAgent,
        inbound: mpsc::UnboundedSender<Inbound>,
        stats: Arc<Stats>,
        relay: Option<harness_sandbox::Endpoint>,
    ) -> Result<Arc<Self>, HarnessError> {
        let (program, args) = agent
            .command
            .split_first()
            .ok_or_else(|| HarnessError::new(ErrorCategory::Configuration, "empty command"))?;
        let wire = Arc::new(Wire::default());
        let mut child = match &agent.sandbox {
            None => {
                let mut command = Command::new(program);
                command
                    .args(args)
                    .current_dir(&agent.cwd)
                    .env_clear()
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .process_group(0)
                    .kill_on_drop(true);
                for name in &agent.env {
                    if let Some(value) = std::env::var_os(name) {
                        command.env(name, value);
                    }
                }
                command.envs(&agent.set_env);
                command.spawn().map_err(|e| {
                    HarnessError::new(
                        ErrorCategory::Unavailable,
                        "the ACP agent could not be started",
                    )
                    .with_diagnostic(spawn_failure(agent, program, &e))
                })?
            }
            Some(sandbox) => {
                let sandboxed = spawn_sandboxed(agent, sandbox, (program, args), relay).await?;
                let _ = wire.sandbox.set(sandboxed.guard);
                sandboxed.child
            }
        };
        let pgid = child.id();
        let stdio = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let guard = KillGroup {
            pgid,
            child: Some(child),
        };
        let (Some(stdin), Some(stdout), Some(stderr)) = stdio else {
            if let Some(child) = guard.disarm() {
                Self::reap_on_failure(child, pgid).await;
            }
            return Err(HarnessError::new(
                ErrorCategory::Internal,
                "the ACP agent's stdio was not piped",
            ));
        };
        let (stderr_buf, stderr_task) = keep_stderr(stderr, Arc::clone(&wire));
        // Aborted on every path out of here that does not hand it to the agent.
        let stderr_task = AbortOnDrop(Some(stderr_task));

        let replay = Arc::new(Mutex::new(Replay::default()));
        let backlog = Arc::new(Backlog::new(Arc::clone(&stats)));
        let transport = acp::Lines::new(
            line_sink(stdin, Arc::clone(&wire)),
            line_stream(stdout, Arc::clone(&wire), Arc::clone(&backlog)),
        );
        let handlers = Handlers {
            inbound: inbound.clone(),
            replay: Arc::clone(&replay),
            workspace: agent.cwd.clone(),
            files: agent.files,
            backlog: Arc::clone(&backlog),
        };
        let (cx_tx, cx_rx) = oneshot::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let ended = Arc::clone(&wire);
        let inbound_end = inbound.clone();
        let (reported_tx, reported) = watch::channel(false);
        let gone = Arc::new(watch::Sender::new(false));
        let gone_end = Arc::clone(&gone);
        // The connection's work (and the crate's own tracing) stays in the caller's span: the
        // execution's, when a runtime starts the agent.
        let connection = async move {
            let result = handlers.connect(transport, cx_tx, stop_rx).await;
            let end = ended.fault().unwrap_or_else(|| match result {
                Ok(()) => exited(),
                Err(e) => exited().with_diagnostic(e.to_string()),
            });
            let _ = inbound.send(Inbound::Closed(end));
            reported_tx.send_replace(true);
            gone_end.send_replace(true);
        };
        let connection_task = AbortOnDrop(Some(tokio::spawn(
            connection.instrument(tracing::Span::current()),
        )));

        let Ok(cx) = cx_rx.await else {
            let err = wire.fault().unwrap_or_else(exited);
            if let Some(child) = guard.disarm() {
                Self::reap_on_failure(child, pgid).await;
            }
            return Err(err);
        };
        // Stdout ends only once every holder is gone: an agent that exits while a process it
        // started still holds stdout must end the run too.
        let exit_watch = pgid.map(|pid| {
            let watch = watch_exit(
                pid,
                reported,
                Arc::clone(&wire),
                inbound_end.clone(),
                Arc::clone(&gone),
            );
            tokio::spawn(watch.instrument(tracing::Span::current()))
        });
        let agent = Self {
            cx,
            exit_watch: Mutex::new(exit_watch),
            wire,
            replay,
            stderr: stderr_buf,
            child: Mutex::new(guard.disarm()),
            pgid,
            stats: Arc::clone(&stats),
            reaped: Arc::new(watch::Sender::new(false)),
            stop: Mutex::new(Some(stop_tx)),
            backlog,
            inbound: inbound_end,
            gone,
            tasks: Mutex::new(
                [connection_task, stderr_task]
                    .into_iter()
                    .filter_map(AbortOnDrop::into_inner)
                    .collect(),
            ),
        };
        Ok(Arc::new(agent))
    }

    /// Whether permission and elicitation requests are answered `cancelled` at once (set by
    /// [`refuse_requests`](Self::refuse_requests)).
    pub(crate) fn refusing(&self) -> bool {
        self.backlog.refusing()
    }

    /// From now on (`true`: the turn was cancelled) or again (`false`: a new turn), answers
    /// permission and elicitation requests `cancelled` at once instead of enqueuing them (and
    /// lets the agent's output through without waiting for the runtime: see [`Backlog`]).
    pub(crate) fn refuse_requests(&self, refuse: bool) {
        self.backlog.refusing.send_replace(refuse);
    }

    /// Waits for `answer` (a handshake request's response) unless the backlog is stuck
    /// first: nothing consumes it during the handshake, so the response can never be read.
    async fn answered<T>(
        &self,
        method: &str,
        answer: impl Future<Output = Result<T, HarnessError>>,
    ) -> Result<T, HarnessError> {
        let answer = std::pin::pin!(answer);
        let stuck = std::pin::pin!(self.backlog.stuck());
        match future::select(answer, stuck).await {
            future::Either::Left((result, _)) => result,
            // Dispatched just before the backlog was found stuck: still the answer.
            future::Either::Right(((), answer)) => answer.now_or_never().unwrap_or_else(|| {
                Err(HarnessError::new(
                    ErrorCategory::Protocol,
                    format!(
                        "the ACP agent sent more than {INBOUND_LIMIT} messages (or {} MiB) \
                         before answering {method}; the adapter holds at most that many \
                         unconsumed",
                        INBOUND_BYTES / (1024 * 1024)
                    ),
                ))
            }),
        }
    }

    async fn reap_on_failure(mut child: Child, pgid: Option<u32>) {
        signal_group(pgid, Signal::KILL);
        let _ = child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
    }

    /// The last [`STDERR_LIMIT`] bytes of the agent's stderr, lossily decoded.
    pub(crate) fn stderr_tail(&self) -> String {
        let buf = lock(&self.stderr);
        let (a, b) = buf.as_slices();
        let mut bytes = a.to_vec();
        bytes.extend_from_slice(b);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// `initialize` with protocol version 1 and the client capabilities the options allow.
    ///
    /// # Errors
    /// `configuration` when the agent answers with another protocol version; otherwise as
    /// [`Wire::error`] maps it.
    pub(crate) async fn initialize(
        &self,
        files: FileAccess,
    ) -> Result<InitializeResponse, HarnessError> {
        let capabilities = ClientCapabilities::new()
            .fs(FileSystemCapabilities::new()
                .read_text_file(files.reads())
                .write_text_file(files.writes()))
            .terminal(false)
            .elicitation(ElicitationCapabilities::new().form(ElicitationFormCapabilities::new()));
        let request = InitializeRequest::new(ProtocolVersion::V1)
            .client_capabilities(capabilities)
            .client_info(Implementation::new(
                "harness-acp",
                env!("CARGO_PKG_VERSION"),
            ));
        let result = self
            .answered("initialize", async {
                Ok(self.cx.send_request(request).block_task().await)
            })
            .await?;
        // The crate refuses a response of another version; the guard kept what was sent.
        let version = lock(&self.wire.agent_version).clone();
        match result {
            Ok(response) if response.protocol_version == ProtocolVersion::V1 => Ok(response),
            Err(e) if version.as_ref().is_none_or(|v| v.as_u64() == Some(1)) => {
                Err(self.wire.error(&e))
            }
            _ => Err(HarnessError::new(
                ErrorCategory::Configuration,
                "the ACP agent speaks a protocol version this adapter does not",
            )
            .with_diagnostic(format!(
                "agent protocol version {}; this adapter speaks 1",
                version.unwrap_or(Value::Null)
            ))),
        }
    }

    /// Sends a request and waits for its response.
    pub(crate) async fn call<R: acp::JsonRpcRequest>(
        &self,
        request: R,
    ) -> Result<R::Response, HarnessError> {
        let method = request.method().to_owned();
        self.answered(&method, async {
            self.cx
                .send_request(request)
                .block_task()
                .await
                .map_err(|e| self.wire.error(&e))
        })
        .await
    }

    /// `session/load`: the session's replayed history (the updates for it that arrive before
    /// the load response) is counted, not enqueued. Returns the response and that count.
    pub(crate) async fn load(
        &self,
        request: LoadSessionRequest,
        quiet: Duration,
    ) -> Result<(LoadSessionResponse, u64), HarnessError> {
        *lock(&self.replay) = Replay {
            session: Some(request.session_id.clone()),
            ..Replay::default()
        };
        let (tx, rx) = oneshot::channel();
        let sent = self
            .cx
            .prepare_request(request)
            .on_receiving_result(move |result| {
                let _ = tx.send(result);
                future::ready(Ok(()))
            });
        let result = match sent {
            Ok(()) => {
                self.answered("session/load", async {
                    Ok(rx
                        .await
                        .unwrap_or_else(|_| Err(acp::Error::internal_error())))
                })
                .await
            }
            Err(e) => Ok(Err(e)),
        };
        if matches!(result, Ok(Ok(_))) {
            self.settle_replay(quiet).await;
        }
        let count = std::mem::take(&mut *lock(&self.replay)).count;
        result?
            .map(|response| (response, count))
            .map_err(|e| self.wire.error(&e))
    }

    /// Some agents (Gemini CLI) send part of the replay *after* answering `session/load`:
    /// until the replay has been quiet for `quiet` (at most [`REPLAY_SETTLE_LIMIT`] in all),
    /// updates for the loaded session are still counted as replay, not delivered. Nothing of
    /// the next turn can be among them: its prompt is sent only after this returns.
    async fn settle_replay(&self, quiet: Duration) {
        if quiet.is_zero() {
            return;
        }
        let answered = tokio::time::Instant::now();
        let limit = answered + REPLAY_SETTLE_LIMIT;
        let mut until = answered + quiet;
        loop {
            tokio::time::sleep_until(until.min(limit)).await;
            let last = lock(&self.replay).last.unwrap_or(answered);
            let next = last.max(answered) + quiet;
            if next <= until || until >= limit {
                return;
            }
            until = next;
        }
    }
    /// Sends `session/prompt`; `done` runs with its result, in order after every update the
    /// agent sent before the response.
    pub(crate) fn prompt(
        &self,
        request: PromptRequest,
        done: impl FnOnce(Result<PromptResponse, HarnessError>) + Send + 'static,
    ) {
        let wire = Arc::clone(&self.wire);
        let done = Arc::new(Mutex::new(Some(done)));
        let on_result = Arc::clone(&done);
        // The callback runs in the dispatch loop; `done` only enqueues, it never waits.
        let sent = self
            .cx
            .prepare_request(request)
            .on_receiving_result(move |result| {
                if let Some(done) = lock(&on_result).take() {
                    done(result.map_err(|e| wire.error(&e)));
                }
                future::ready(Ok(()))
            });
        if let Err(e) = sent
            && let Some(done) = lock(&done).take()
        {
            done(Err(self.wire.error(&e)));
        }
    }

    /// Sends a notification (best effort: a closed connection is reported by the stream).
    pub(crate) fn notify<N: acp::JsonRpcNotification>(&self, notification: N) {
        let _ = self.cx.send_notification(notification);
    }

    /// Ends the agent without waiting for its process group: stops the connection and hands
    /// the group to a [`Reaper`] task (`SIGTERM`, up to `grace`, `SIGKILL`, reap). The first
    /// call decides; later ones (and [`shutdown`](Self::shutdown)) only return the same
    /// [`Reaped`].
    ///
    /// The agent is reaped only after its group was signalled for the last time: until then
    /// its pid (the group id) cannot be reused, so the signals never reach an unrelated
    /// process.
    pub(crate) fn stop(&self, grace: Duration) -> Reaped {
        let reaped = Reaped(self.reaped.subscribe());
        let Some(child) = lock(&self.child).take() else {
            return reaped;
        };
        // Before the agent is reaped (its exit is then no longer the run's end).
        if let Some(watch) = lock(&self.exit_watch).take() {
            watch.abort();
        }
        if let Some(stop) = lock(&self.stop).take() {
            let _ = stop.send(());
        }
        self.stats.reaping.fetch_add(1, Ordering::SeqCst);
        let reaper = Reaper {
            group: KillGroup {
                pgid: self.pgid,
                child: Some(child),
            },
            tasks: lock(&self.tasks).drain(..).collect(),
            wire: Arc::clone(&self.wire),
            inbound: self.inbound.clone(),
            gone: Arc::clone(&self.gone),
            stats: Arc::clone(&self.stats),
            reaped: Arc::clone(&self.reaped),
        };
        // Without a runtime the reaper is dropped here, which kills the group at once.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(reaper.run(grace).instrument(tracing::Span::current()));
        }
        reaped
    }

    /// [`stop`](Self::stop), and waits until the process group is reaped. Idempotent.
    pub(crate) async fn shutdown(&self, grace: Duration) {
        self.stop(grace).wait().await;
    }

    /// Completes once the agent's end has been reported: it exited, or its connection ended
    /// (on its own, or stopped by [`stop`](Self::stop)).
    pub(crate) fn gone(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut gone = self.gone.subscribe();
        async move {
            let _ = gone.wait_for(|g| *g).await;
        }
    }
}

/// How long the [`Reaper`] lets the agent's tasks finish on their own once the process group
/// is gone.
const TASK_DRAIN: Duration = Duration::from_millis(200);

/// Aborts a task when dropped, unless taken out with [`into_inner`](Self::into_inner).
struct AbortOnDrop(Option<JoinHandle<()>>);

impl AbortOnDrop {
    fn into_inner(mut self) -> Option<JoinHandle<()>> {
        self.0.take()
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

/// The typed handlers of the client connection.
#[derive(Debug, Clone)]
struct Handlers {
    inbound: mpsc::UnboundedSender<Inbound>,
    replay: Arc<Mutex<Replay>>,
    workspace: PathBuf,
    files: FileAccess,
    backlog: Arc<Backlog>,
}

impl Handlers {
    /// Runs the client connection over `transport` until `stop` fires or the agent's output
    /// ends; hands the connection out through `cx_tx` first.
    async fn connect(
        self,
        transport: impl acp::ConnectTo<acp::Client> + 'static,
        cx_tx: oneshot::Sender<AgentConnection>,
        stop: oneshot::Receiver<()>,
    ) -> Result<(), acp::Error> {
        let updates = self.clone();
        let unparsed = self.clone();
        let permissions = self.clone();
        let elicitations = self.clone();
        let reads = self.clone();
        let writes = self;
        acp::Client
            .v1()
            .name("harness-acp")
            .on_receive_notification(
                async move |notification: SessionNotification, _cx| {
                    let session = notification.session_id.clone();
                    updates.deliver(&session, |ticket| {
                        Inbound::Update(Box::new(notification), ticket)
                    });
                    Ok(())
                },
                acp::on_receive_notification!(),
            )
            .on_receive_notification(
                async move |notification: UnparsedUpdate, _cx| {
                    let session = notification.session_id.clone();
                    unparsed.deliver(&session, |ticket| {
                        Inbound::Unparsed(Box::new(notification), ticket)
                    });
                    Ok(())
                },
                acp::on_receive_notification!(),
            )
            .on_receive_request(
                async move |request: RequestPermissionRequest,
                            responder: acp::v1::Responder<RequestPermissionResponse>,
                            _cx| {
                    permissions.forward(
                        responder,
                        || RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled),
                        |responder, ticket| Inbound::Permission {
                            request: Box::new(request),
                            responder,
                            _ticket: ticket,
                        },
                    )
                },
                acp::on_receive_request!(),
            )
            .on_receive_request(
                async move |request: CreateElicitationRequest,
                            responder: acp::v1::Responder<CreateElicitationResponse>,
                            _cx| {
                    elicitations.forward(
                        responder,
                        || CreateElicitationResponse::new(ElicitationAction::Cancel),
                        |responder, ticket| Inbound::Elicitation {
                            request: Box::new(request),
                            responder,
                            _ticket: ticket,
                        },
                    )
                },
                acp::on_receive_request!(),
            )
            .on_receive_request(
                async move |request: ReadTextFileRequest,
                            responder: acp::v1::Responder<ReadTextFileResponse>,
                            _cx| {
                    match reads.read(&request).await {
                        Ok(content) => responder.respond(ReadTextFileResponse::new(content)),
                        Err(e) => responder.respond_with_error(e),
                    }
                },
                acp::on_receive_request!(),
            )
            .on_receive_request(
                async move |request: WriteTextFileRequest,
                            responder: acp::v1::Responder<WriteTextFileResponse>,
                            _cx| {
                    match writes.write(&request).await {
                        Ok(()) => responder.respond(WriteTextFileResponse::new()),
                        Err(e) => responder.respond_with_error(e),
                    }
                },
                acp::on_receive_request!(),
            )
            .connect_with(transport, async move |cx: AgentConnection| {
                let _ = cx_tx.send(cx.clone());
                let closed = std::pin::pin!(cx.incoming_closed());
                let _ = future::select(stop, closed).await;
                Ok(())
            })
            .await
    }

    /// Hands an update for `session` to the runtime with its share of the backlog, unless it
    /// is replayed (counted, not delivered) or arrives after a cancel with the backlog full
    /// (dropped rather than held).
    fn deliver(&self, session: &SessionId, inbound: impl FnOnce(Option<Ticket>) -> Inbound) {
        let ticket = self.backlog.take();
        {
            let mut replay = lock(&self.replay);
            if replay.session.as_ref() == Some(session) {
                replay.count += 1;
                replay.last = Some(tokio::time::Instant::now());
                return;
            }
        }
        if ticket.is_none() && self.backlog.refusing() {
            self.backlog
                .stats
                .updates_dropped
                .fetch_add(1, Ordering::SeqCst);
            return;
        }
        let _ = self.inbound.send(inbound(ticket));
    }

    /// Hands a request of the agent to the runtime with its share of the backlog or, while
    /// requests are refused (after a cancel), answers it with `refused` at once.
    fn forward<T: acp::JsonRpcResponse>(
        &self,
        responder: acp::v1::Responder<T>,
        refused: impl FnOnce() -> T,
        inbound: impl FnOnce(acp::v1::Responder<T>, Option<Ticket>) -> Inbound,
    ) -> Result<(), acp::Error> {
        let ticket = self.backlog.take();
        if self.backlog.refusing() {
            return responder.respond(refused());
        }
        let _ = self.inbound.send(inbound(responder, ticket));
        Ok(())
    }

    /// Serves `fs/read_text_file`: the file, or the `limit` lines from 1-based `line`
    /// (joined with `\n`), at most [`READ_LIMIT`] bytes of it. Reads stream through a buffer:
    /// lines before `line` are skipped without being kept, and nothing beyond the limit is held.
    async fn read(&self, request: &ReadTextFileRequest) -> Result<String, acp::Error> {
        if !self.files.reads() {
            return Err(acp::Error::method_not_found());
        }
        let path = self.inside(&request.path, false).await?;
        let unreadable = |_| invalid("the file could not be read");
        let too_large = || {
            invalid(&format!(
                "the text to read is larger than the client's limit of {READ_LIMIT} bytes \
                 ({} MiB); ask for fewer lines (`line` / `limit`)",
                READ_LIMIT / (1024 * 1024)
            ))
        };
        let mut reader = BufReader::new(tokio::fs::File::open(&path).await.map_err(unreadable)?);
        let mut text = Vec::new();
        match (request.line, request.limit) {
            (None, None) => {
                (&mut reader)
                    .take(READ_LIMIT as u64 + 1)
                    .read_to_end(&mut text)
                    .await
                    .map_err(unreadable)?;
                if text.len() > READ_LIMIT {
                    return Err(too_large());
                }
            }
            (line, limit) => {
                for _ in 1..line.unwrap_or(1) {
                    if !skip_line(&mut reader).await.map_err(unreadable)? {
                        break;
                    }
                }
                let mut one = Vec::new();
                for taken in 0..limit.unwrap_or(u32::MAX) {
                    one.clear();
                    // One byte past the limit (with the separator) shows it was exceeded.
                    let room = (READ_LIMIT + 2).saturating_sub(text.len()) as u64;
                    let n = (&mut reader)
                        .take(room)
                        .read_until(b'\n', &mut one)
                        .await
                        .map_err(unreadable)?;
                    if n == 0 {
                        break;
                    }
                    if one.last() == Some(&b'\n') {
                        one.pop();
                        if one.last() == Some(&b'\r') {
                            one.pop();
                        }
                    }
                    if taken > 0 {
                        text.push(b'\n');
                    }
                    text.extend_from_slice(&one);
                    if text.len() > READ_LIMIT {
                        return Err(too_large());
                    }
                }
            }
        }
        String::from_utf8(text).map_err(|_| invalid("the file is not UTF-8 text"))
    }

    async fn write(&self, request: &WriteTextFileRequest) -> Result<(), acp::Error> {
        if !self.files.writes() {
            return Err(acp::Error::method_not_found());
        }
        let path = self.inside(&request.path, true).await?;
        tokio::fs::write(&path, &request.content)
            .await
            .map_err(|_| invalid("the file could not be written"))
    }

    /// The canonical path of `path` if it lies inside the workspace. A file to create need
    /// not exist, but its parent directory must.
    async fn inside(&self, path: &Path, create: bool) -> Result<PathBuf, acp::Error> {
        let outside = || invalid("the path is outside the workspace");
        if !path.is_absolute() {
            return Err(outside());
        }
        let root = tokio::fs::canonicalize(&self.workspace)
            .await
            .map_err(|_| outside())?;
        let resolved = match tokio::fs::canonicalize(path).await {
            Ok(p) => p,
            Err(_) if create => {
                let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
                    return Err(outside());
                };
                tokio::fs::canonicalize(parent)
                    .await
                    .map_err(|_| outside())?
                    .join(name)
            }
            Err(_) => return Err(outside()),
        };
        if resolved.starts_with(&root) {
            Ok(resolved)
        } else {
            Err(outside())
        }
    }
}

/// Discards one line (through its `\n`) without keeping it; `false` at the end of the file.
async fn skip_line(reader: &mut BufReader<tokio::fs::File>) -> std::io::Result<bool> {
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(false);
        }
        match buf.iter().position(|b| *b == b'\n') {
            Some(i) => {
                reader.consume(i + 1);
                return Ok(true);
            }
            None => {
                let n = buf.len();
                reader.consume(n);
            }
        }
    }
}

fn invalid(message: &str) -> acp::Error {
    acp::Error::new(acp::ErrorCode::INVALID_PARAMS, message)
}

/// The outgoing half of the transport: one line per message, recording request ids first.
fn line_sink(
    stdin: ChildStdin,
    wire: Arc<Wire>,
) -> impl futures_util::Sink<String, Error = std::io::Error> + Send + 'static {
    futures_util::sink::unfold(stdin, move |mut stdin, line: String| {
        wire.outgoing(&line);
        async move {
            stdin.write_all(line.as_bytes()).await?;
            stdin.write_all(b"\n").await?;
            stdin.flush().await?;
            Ok(stdin)
        }
    })
}

/// The incoming half of the transport: the agent's stdout, line by line, through the wire
/// guard. A fault ends the stream with an error (and is recorded first).
fn line_stream(
    stdout: ChildStdout,
    wire: Arc<Wire>,
    backlog: Arc<Backlog>,
) -> impl futures_util::Stream<Item = std::io::Result<String>> + Send + 'static {
    let reader = BufReader::new(stdout);
    futures_util::stream::unfold(Some(reader), move |reader| {
        let wire = Arc::clone(&wire);
        let backlog = Arc::clone(&backlog);
        async move {
            let mut reader = reader?;
            let mut bytes = Vec::new();
            loop {
                bytes.clear();
                let read = (&mut reader)
                    .take(MAX_LINE as u64)
                    .read_until(b'\n', &mut bytes)
                    .await;
                if let Ok(n) = read {
                    wire.output(n);
                }
                let fault = match read {
                    Ok(0) => return None,
                    Ok(_) if bytes.last() != Some(&b'\n') && bytes.len() >= MAX_LINE => {
                        protocol("the ACP agent sent an oversized message")
                    }
                    // Output that is not UTF-8 is not JSON-RPC: a protocol fault, like any
                    // other line that is not (not an I/O failure of the pipe).
                    Ok(_) => match std::str::from_utf8(&bytes) {
                        Err(e) => protocol("the ACP agent sent output that is not JSON-RPC")
                            .with_diagnostic(format!("the line is not UTF-8: {e}")),
                        Ok(line) if line.trim().is_empty() => continue,
                        Ok(line) => match wire.incoming(line.trim()) {
                            Ok(taken) => {
                                let consumed = taken != Taken::Handled;
                                let text = match taken {
                                    Taken::Rewritten(text) => text,
                                    _ => line.trim_end_matches(['\n', '\r']).to_owned(),
                                };
                                if consumed {
                                    // Backpressure: waits while the runtime is behind.
                                    backlog.admit(text.len()).await;
                                }
                                return Some((Ok(text), Some(reader)));
                            }
                            Err(fault) => fault,
                        },
                    },
                    Err(e) => {
                        return Some((Err(e), None));
                    }
                };
                let fault = wire.record_fault(fault);
                let error = std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    fault.message().to_owned(),
                );
                return Some((Err(error), None));
            }
        }
    })
}

fn keep_stderr(
    stderr: tokio::process::ChildStderr,
    wire: Arc<Wire>,
) -> (Arc<Mutex<VecDeque<u8>>>, JoinHandle<()>) {
    let buf = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_LIMIT)));
    let keep = Arc::clone(&buf);
    let read = async move {
        let mut stderr = stderr;
        let mut chunk = [0_u8; 4096];
        while let Ok(n) = stderr.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            wire.output(n);
            let mut buf = lock(&keep);
            buf.extend(chunk.iter().take(n));
            let excess = buf.len().saturating_sub(STDERR_LIMIT);
            buf.drain(..excess);
        }
    };
    let task = tokio::spawn(read.instrument(tracing::Span::current()));
    (buf, task)
}

/// Signals the whole process group with kill(2): no program is run (none needs to be on
/// `PATH`), nothing blocks, and it is safe in `Drop`. A group already gone is not an error.
fn signal_group(pgid: Option<u32>, signal: Signal) {
    let Some(pid) = pgid
        .and_then(|p| i32::try_from(p).ok())
        .and_then(Pid::from_raw)
    else {
        return;
    };
    if let Err(error) = rustix::process::kill_process_group(pid, signal)
        && error != rustix::io::Errno::SRCH
    {
        tracing::warn!(pgid = pid.as_raw_nonzero().get(), %error, "could not signal the agent's process group");
    }
}

/// Whether a live (non-zombie) process is in the process group `pgid`, from `/proc`. The
/// agent (the group's leader) is our unreaped child, so the group id cannot be reused while
/// this is asked.
fn group_lives(pgid: u32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return !exited_unreaped(pgid);
    };
    entries.flatten().any(|entry| {
        let numeric = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
        numeric
            && std::fs::read_to_string(entry.path().join("stat"))
                .ok()
                .and_then(|stat| {
                    // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses.
                    let (_, rest) = stat.rsplit_once(") ")?;
                    let mut fields = rest.split(' ');
                    let state = fields.next()?;
                    let pgrp = fields.nth(1)?.parse::<u32>().ok()?;
                    Some(pgrp == pgid && !state.starts_with(['Z', 'X']))
                })
                .unwrap_or(false)
    })
}

/// Whether `pid` has exited (a zombie, not yet reaped) or is gone, from `/proc`.
fn exited_unreaped(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_none_or(|(_, rest)| rest.starts_with(['Z', 'X'])),
        Err(_) => true,
    }
}

/// The fault for a line the crate's parser refuses (`error` is what the crate would answer),
/// described from its shape. Only on this path is the line parsed again.
fn malformed(line: &str, error: &acp::Error) -> HarnessError {
    let message = match serde_json::from_str::<Value>(line) {
        Err(e) => {
            return protocol("the ACP agent sent output that is not JSON-RPC").with_diagnostic(
                format!(
                    "{e}; line starts {:?}",
                    line.chars().take(80).collect::<String>()
                ),
            );
        }
        Ok(Value::Object(object)) => {
            let has = |key: &str| object.contains_key(key);
            if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
                "the ACP agent sent a message that is not JSON-RPC 2.0"
            } else if object.get("method").is_some_and(|m| !m.is_string()) {
                "the ACP agent sent a JSON-RPC message whose method is not a string"
            } else if has("method") && (has("result") || has("error")) {
                "the ACP agent sent a JSON-RPC message that is both a request and a response"
            } else if !has("method") && !has("id") {
                "the ACP agent sent a JSON-RPC message without method or id"
            } else if object
                .get("id")
                .is_some_and(|id| !(id.is_null() || id.is_string() || id.is_i64()))
            {
                "the ACP agent sent a JSON-RPC message whose id is not an integer, string or null"
            } else if object
                .get("params")
                .is_some_and(|p| !(p.is_null() || p.is_object() || p.is_array()))
            {
                "the ACP agent sent a JSON-RPC message whose params are not an object or array"
            } else if !has("method") {
                "the ACP agent sent a malformed JSON-RPC response"
            } else {
                "the ACP agent sent a malformed JSON-RPC message"
            }
        }
        Ok(_) => "the ACP agent sent a JSON-RPC message that is not an object",
    };
    protocol(message).with_diagnostic(format!("{} ({})", error.message, i32::from(error.code)))
}

fn exited() -> HarnessError {
    HarnessError::new(
        ErrorCategory::Unavailable,
        "the ACP agent exited during the execution",
    )
}

/// A `protocol` error.
pub(crate) fn protocol(message: &'static str) -> HarnessError {
    HarnessError::new(ErrorCategory::Protocol, message)
}

/// The most of an agent error's message and `data` kept in the diagnostic.
const AGENT_ERROR_LIMIT: usize = 2048;

/// An error the agent answered one of our requests with, classified by what it means: its
/// JSON-RPC code first (`-32000` auth required, `-32002` resource not found, `-32602` invalid
/// params, `-32600`/`-32601`/`-32700` a request it did not take), else, for an internal or
/// other error (or an HTTP status used as the code, as Gemini CLI does), the HTTP status or
/// words its message and `data` carry (agents wrap their model provider's failures: 401/403,
/// 429 or rate limit, 5xx, server error or overloaded, timeouts);
/// an internal error that says nothing more is `internal`, not retried. The diagnostic
/// keeps the code, the message and the `data` (such as `details`), truncated.
fn agent_error(code: i32, message: &str, data: Option<&Value>) -> HarnessError {
    let data = data.map(Value::to_string).unwrap_or_default();
    let diagnostic: String = if data.is_empty() {
        format!("{code}: {message}")
    } else {
        format!("{code}: {message}; data: {data}")
    }
    .chars()
    .take(AGENT_ERROR_LIMIT)
    .collect();
    let (category, public) = match code {
        -32000 => (
            ErrorCategory::Authentication,
            "the ACP agent requires authentication",
        ),
        -32002 => (
            ErrorCategory::Configuration,
            "the ACP agent does not know the resource named in the request",
        ),
        -32602 => (
            ErrorCategory::Configuration,
            "the ACP agent refused the request's parameters",
        ),
        -32600 | -32601 | -32700 => (
            ErrorCategory::Protocol,
            "the ACP agent did not take the request",
        ),
        // Gemini CLI answers with its model provider's HTTP status as the code.
        400..=599 => classify_text(&format!("{code} {diagnostic}")),
        _ => classify_text(&diagnostic),
    };
    HarnessError::new(category, public)
        .with_provider_code(&code.to_string())
        .with_diagnostic(diagnostic)
}

/// What an agent's internal (or unknown) error means, from the words it carries.
fn classify_text(text: &str) -> (ErrorCategory, &'static str) {
    let text = text.to_ascii_lowercase();
    // Status codes count as whole words only (`5000 tokens` is not a 500).
    let words: Vec<&str> = text
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let has = |needles: &[&str]| {
        needles.iter().any(|n| {
            if n.bytes().all(|b| b.is_ascii_digit()) {
                words.contains(n)
            } else {
                text.contains(n)
            }
        })
    };
    if has(&[
        "429",
        "rate limit",
        "rate_limit",
        "too many requests",
        "quota",
    ]) {
        (
            ErrorCategory::Throttled,
            "the ACP agent's model provider is rate limiting it",
        )
    } else if has(&[
        "401",
        "unauthorized",
        "invalid api key",
        "invalid_api_key",
        "authentication",
    ]) {
        (
            ErrorCategory::Authentication,
            "the ACP agent's model provider refused its credentials",
        )
    } else if has(&["403", "forbidden", "permission denied"]) {
        (
            ErrorCategory::Authorization,
            "the ACP agent's model provider denied the request",
        )
    } else if has(&["timed out", "timeout", "deadline exceeded"]) {
        (ErrorCategory::Timeout, "the ACP agent timed out")
    } else if has(&[
        "500",
        "502",
        "503",
        "504",
        "529",
        "overloaded",
        "unavailable",
        "server_error",
        "server error",
        "high demand",
        "connection refused",
        "connection reset",
        "econnrefused",
        "econnreset",
        "stream disconnected",
    ]) {
        (
            ErrorCategory::Unavailable,
            "the ACP agent's model provider is unavailable",
        )
    } else {
        (ErrorCategory::Internal, "the ACP agent failed the request")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kill(2) on the group, no `kill` program: a shell and its child, in their own group,
    /// both end; a group already gone is no error.
    #[test]
    fn a_process_group_is_signalled_with_the_system_call() {
        use std::os::unix::process::CommandExt;
        let mut shell = std::process::Command::new("/bin/sh")
            .args(["-c", "/bin/sleep 60 & echo $!; wait"])
            .process_group(0)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(shell.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let child: u32 = line.trim().parse().unwrap();
        let pgid = shell.id();
        signal_group(Some(pgid), Signal::KILL);
        assert!(!shell.wait().unwrap().success());
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !exited_unreaped(child) {
            assert!(
                std::time::Instant::now() < deadline,
                "the child outlived its group's kill"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        signal_group(Some(pgid), Signal::KILL);
    }

    fn fault(wire: &Wire, line: &str) -> HarnessError {
        wire.incoming(line).expect_err("a protocol fault")
    }

    #[test]
    fn the_wire_guard_refuses_what_is_not_acp_json_rpc() {
        let wire = Wire::default();
        for (line, why) in [
            ("this is not json", "not JSON-RPC"),
            ("[1, 2]", "not an object"),
            (r#"{"id": 1, "result": {}}"#, "not JSON-RPC 2.0"),
            (r#"{"jsonrpc": "2.0"}"#, "without method or id"),
            (r#"{"jsonrpc": "2.0", "method": 3}"#, "not a string"),
            (
                r#"{"jsonrpc": "2.0", "id": 7, "result": {}}"#,
                "unknown request",
            ),
            (
                r#"{"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s"}}"#,
                "malformed message",
            ),
            (
                r#"{"jsonrpc": "2.0", "id": 1, "method": "session/request_permission", "params": {}}"#,
                "malformed message",
            ),
        ] {
            let err = fault(&wire, line);
            assert_eq!(err.category(), ErrorCategory::Protocol, "{line}");
            assert!(err.message().contains(why), "{line}: {err:?}");
        }
    }

    /// Defect: the guard admitted (took a backlog ticket for) any object with a method and
    /// valid params, but the crate refuses some of them as malformed and never calls a
    /// handler, so no handler took the ticket: the queue drifted and the budget leaked until
    /// the stream stalled for ever. Whatever the crate refuses is a fault here; whatever it
    /// dispatches to a consuming handler is admitted.
    #[test]
    fn the_wire_guard_admits_exactly_what_the_crate_dispatches_to_a_handler() {
        let update = r#""params": {"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}}"#;
        let permission =
            r#""params": {"sessionId": "s", "toolCall": {"toolCallId": "t1"}, "options": []}"#;
        let wire = Wire::default();
        wire.outgoing(r#"{"jsonrpc":"2.0","id":4,"method":"session/new","params":{}}"#);
        for (line, why) in [
            (
                format!(r#"{{"jsonrpc": "2.0", "method": "session/update", {update}, "result": {{}}}}"#),
                "both a request and a response",
            ),
            (
                format!(r#"{{"jsonrpc": "2.0", "method": "session/update", {update}, "error": {{"code": 1, "message": "x"}}}}"#),
                "both a request and a response",
            ),
            (
                format!(r#"{{"jsonrpc": "2.0", "id": true, "method": "session/request_permission", {permission}}}"#),
                "id is not",
            ),
            (
                format!(r#"{{"jsonrpc": "2.0", "id": {{}}, "method": "session/request_permission", {permission}}}"#),
                "id is not",
            ),
            (
                format!(r#"{{"jsonrpc": "2.0", "id": 1.5, "method": "session/request_permission", {permission}}}"#),
                "id is not",
            ),
            (
                r#"{"jsonrpc": "2.0", "method": "session/update", "params": 5}"#.to_owned(),
                "params are not",
            ),
            (
                r#"{"jsonrpc": "2.0", "id": 4, "error": {"code": -32000}}"#.to_owned(),
                "malformed JSON-RPC response",
            ),
            (
                r#"{"jsonrpc": "2.0", "id": 4, "result": {}, "error": {"code": 1, "message": "x"}}"#.to_owned(),
                "malformed JSON-RPC response",
            ),
        ] {
            let err = fault(&wire, &line);
            assert_eq!(err.category(), ErrorCategory::Protocol, "{line}");
            assert!(err.message().contains(why), "{line}: {err:?}");
        }
        for (line, consumed) in [
            (
                format!(r#"{{"jsonrpc": "2.0", "method": "session/update", {update}}}"#),
                true,
            ),
            (
                format!(
                    r#"{{"jsonrpc": "2.0", "id": null, "method": "session/request_permission", {permission}}}"#
                ),
                true,
            ),
            (
                format!(
                    r#"{{"jsonrpc": "2.0", "id": "p", "method": "session/request_permission", {permission}}}"#
                ),
                true,
            ),
            // Not consumed by the runtime: the crate answers or ignores them.
            (
                format!(r#"{{"jsonrpc": "2.0", "id": 9, "method": "session/update", {update}}}"#),
                false,
            ),
            (
                format!(
                    r#"{{"jsonrpc": "2.0", "method": "session/request_permission", {permission}}}"#
                ),
                false,
            ),
        ] {
            let taken = wire.incoming(&line).expect("taken");
            assert_eq!(taken != Taken::Handled, consumed, "{line}");
        }
    }

    #[test]
    fn responses_must_answer_a_request_that_was_sent_and_match_its_schema() {
        let wire = Wire::default();
        wire.outgoing(r#"{"jsonrpc":"2.0","id":0,"method":"session/prompt","params":{}}"#);
        wire.outgoing(r#"{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{}}"#);
        wire.outgoing(r#"{"jsonrpc":"2.0","id":2,"method":"session/new","params":{}}"#);
        wire.outgoing(r#"{"jsonrpc":"2.0","method":"session/cancel","params":{}}"#);
        wire.incoming(r#"{"jsonrpc":"2.0","id":0,"result":{"stopReason":"end_turn"}}"#)
            .expect("a valid prompt response");
        // Answered once only.
        assert!(
            fault(
                &wire,
                r#"{"jsonrpc":"2.0","id":0,"result":{"stopReason":"end_turn"}}"#
            )
            .message()
            .contains("unknown request")
        );
        assert!(
            fault(&wire, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#)
                .message()
                .contains("malformed response")
        );
        wire.incoming(r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32000,"message":"auth"}}"#)
            .expect("an error response is the agent's answer, not a fault");
        wire.incoming(r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}}"#)
            .expect("a valid update");
        wire.incoming(r#"{"jsonrpc":"2.0","id":"x","method":"terminal/create","params":{}}"#)
            .expect("other requests are the crate's to answer");
    }

    /// The backlog admits [`INBOUND_LIMIT`] messages, then waits until the runtime consumes
    /// one; it is stuck when it waits and every admitted message was dispatched; once
    /// refusing, it lets messages through without budget instead of waiting.
    #[tokio::test]
    async fn the_backlog_waits_when_full_until_a_message_is_consumed() {
        let wait = Duration::from_secs(10);
        let stats = Arc::new(Stats::default());
        let backlog = Arc::new(Backlog::new(Arc::clone(&stats)));
        for _ in 0..INBOUND_LIMIT {
            backlog.admit(10).await;
        }
        let mut held: Vec<_> = (0..INBOUND_LIMIT).map(|_| backlog.take()).collect();
        assert!(held.iter().all(Option::is_some));
        assert!(!backlog.is_stuck());
        let next = tokio::spawn({
            let backlog = Arc::clone(&backlog);
            async move { backlog.admit(10).await }
        });
        tokio::time::timeout(wait, backlog.stuck())
            .await
            .expect("the full backlog waits, with nothing left to dispatch");
        drop(held.pop());
        tokio::time::timeout(wait, next)
            .await
            .expect("a consumed message makes room")
            .expect("the admission task");
        assert_eq!(
            stats.inbound_peak.load(Ordering::SeqCst),
            INBOUND_LIMIT as u64
        );
        assert_eq!(backlog.messages.load(Ordering::SeqCst), INBOUND_LIMIT);
        // Refusing (a cancelled turn): no waiting, no budget.
        backlog.refusing.send_replace(true);
        tokio::time::timeout(wait, backlog.admit(10))
            .await
            .expect("a cancelled turn never waits");
        let last = backlog.take();
        assert!(last.is_some());
        assert!(backlog.take().is_none(), "let through without a ticket");
        drop(held);
        assert_eq!(backlog.messages.load(Ordering::SeqCst), 1);
        drop(last);
        assert_eq!(backlog.messages.load(Ordering::SeqCst), 0);
    }

    /// Defect: `fs/read_text_file` read the whole file into memory, however large. At most
    /// [`READ_LIMIT`] bytes are returned (a larger answer is an error naming the limit), and
    /// `line` / `limit` select lines without reading the skipped ones into memory.
    #[tokio::test]
    async fn reads_honour_line_and_limit_up_to_the_read_limit() {
        let dir = std::env::temp_dir().join(format!("harness-acp-read-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        let handlers = Handlers {
            inbound: mpsc::unbounded_channel().0,
            replay: Arc::default(),
            workspace: dir.clone(),
            files: FileAccess::Read,
            backlog: Arc::new(Backlog::new(Arc::default())),
        };
        let request = |name: &str, line: Option<u32>, limit: Option<u32>| {
            let mut request = ReadTextFileRequest::new("s".to_owned(), dir.join(name));
            request.line = line;
            request.limit = limit;
            request
        };
        std::fs::write(dir.join("small.txt"), "one\r\ntwo\nthree\n").expect("fixture");
        for (line, limit, expected) in [
            (None, None, "one\r\ntwo\nthree\n"),
            (Some(2), None, "two\nthree"),
            (Some(1), Some(2), "one\ntwo"),
            (None, Some(1), "one"),
            (Some(9), None, ""),
        ] {
            let read = handlers.read(&request("small.txt", line, limit)).await;
            assert_eq!(read.ok().as_deref(), Some(expected), "{line:?} {limit:?}");
        }
        let row = format!("{}\n", "x".repeat(1023));
        std::fs::write(dir.join("big.txt"), row.repeat(READ_LIMIT / 1024 + 2)).expect("fixture");
        std::fs::write(dir.join("long.txt"), "y".repeat(READ_LIMIT + 1)).expect("fixture");
        for (name, line, limit) in [
            ("big.txt", None, None),
            ("big.txt", Some(2), None),
            ("long.txt", None, None),
            ("long.txt", Some(1), Some(1)),
        ] {
            let Err(err) = handlers.read(&request(name, line, limit)).await else {
                panic!("{name} {line:?} {limit:?}: served over the limit");
            };
            assert!(
                err.message.contains(&READ_LIMIT.to_string()),
                "{name}: {}",
                err.message
            );
        }
        let last = handlers
            .read(&request("big.txt", Some(3), Some(1)))
            .await
            .expect("one line of a large file");
        assert_eq!(last, "x".repeat(1023));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn agent_errors_are_classified_by_what_they_mean_and_keep_the_agents_reason() {
        let wire = Wire::default();
        let auth = wire.error(&acp::Error::auth_required());
        assert_eq!(auth.category(), ErrorCategory::Authentication);
        let internal = |details: &str| {
            wire.error(
                &acp::Error::new(-32603, "Internal error")
                    .data(serde_json::json!({ "details": details })),
            )
        };
        for (details, category) in [
            (
                "unexpected status 429 Too Many Requests",
                ErrorCategory::Throttled,
            ),
            (
                "401 Unauthorized: invalid api key",
                ErrorCategory::Authentication,
            ),
            ("HTTP 403 Forbidden", ErrorCategory::Authorization),
            (
                "stream disconnected before completion",
                ErrorCategory::Unavailable,
            ),
            ("upstream returned 503", ErrorCategory::Unavailable),
            ("request timed out", ErrorCategory::Timeout),
            // Digits inside a number are no status code.
            (
                "model context of 5000 tokens exceeded",
                ErrorCategory::Internal,
            ),
            ("unknown model gpt-x", ErrorCategory::Internal),
        ] {
            let err = internal(details);
            assert_eq!(err.category(), category, "{details}");
            let diagnostic = err.diagnostic().unwrap_or_default();
            assert!(diagnostic.contains(details), "{details}: {diagnostic}");
            assert!(diagnostic.contains("Internal error"), "{diagnostic}");
        }
        // An internal error that says nothing more is not retried.
        assert!(!internal("boom").retryable());
        // Gemini CLI puts its provider's HTTP status in the code.
        for (code, category) in [
            (429, ErrorCategory::Throttled),
            (500, ErrorCategory::Unavailable),
            (401, ErrorCategory::Authentication),
        ] {
            let err = wire.error(&acp::Error::new(code, "aimock injected error"));
            assert_eq!(err.category(), category, "{code}");
        }
        let codex = wire.error(&acp::Error::new(-32603, "Internal error").data(
            serde_json::json!({"message": "high demand", "codex_error_info": "internal_server_error"}),
        ));
        assert_eq!(codex.category(), ErrorCategory::Unavailable);
        let not_found = wire.error(&acp::Error::new(-32002, "session not found"));
        assert_eq!(not_found.category(), ErrorCategory::Configuration);
        let method = wire.error(&acp::Error::method_not_found());
        assert_eq!(method.category(), ErrorCategory::Protocol);
        // The diagnostic is bounded however long the agent's data.
        let long = internal(&"x".repeat(100_000));
        assert!(long.diagnostic().unwrap_or_default().chars().count() <= AGENT_ERROR_LIMIT);
        // Once the guard saw a fault, every failure is that fault.
        wire.record_fault(protocol("the ACP agent sent output that is not JSON-RPC"));
        assert_eq!(
            wire.error(&acp::Error::auth_required()).category(),
            ErrorCategory::Protocol
        );
    }

    /// Defect: an informational update the schema refuses (Claude's `usage_update` with
    /// `used: null`, a kind newer than the schema) ended the run `protocol`. It is passed on
    /// rewritten, for an `acp.unparsed_update` event; an update with portable semantics that
    /// does not parse is still a fault, and an agent may not send the rewritten method.
    #[test]
    fn an_informational_update_that_does_not_parse_is_rewritten_not_a_fault() {
        let wire = Wire::default();
        let update = |body: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s","update":{body}}}}}"#
            )
        };
        for body in [
            r#"{"sessionUpdate":"usage_update","used":null,"size":200000}"#,
            r#"{"sessionUpdate":"a_future_update","anything":[1,2]}"#,
            r#"{"sessionUpdate":"current_mode_update"}"#,
        ] {
            let Ok(Taken::Rewritten(line)) = wire.incoming(&update(body)) else {
                panic!("{body}: not rewritten");
            };
            let value: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(value["method"], "_harness/unparsed_update");
            let params: UnparsedUpdate = serde_json::from_value(value["params"].clone()).unwrap();
            assert_eq!(&*params.session_id.0, "s");
            assert_eq!(params.update, serde_json::from_str::<Value>(body).unwrap());
            assert!(!params.error.is_empty());
        }
        for body in [
            r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text"}}"#,
            r#"{"sessionUpdate":"tool_call","toolCallId":7}"#,
            r#"{"sessionUpdate":"tool_call_update"}"#,
            r#"{"sessionUpdate":"agent_thought_chunk"}"#,
            r#"{"nokind":true}"#,
        ] {
            let err = fault(&wire, &update(body));
            assert!(
                err.message().contains("malformed message"),
                "{body}: {err:?}"
            );
        }
        let spoofed = r#"{"jsonrpc":"2.0","method":"_harness/unparsed_update","params":{"sessionId":"s","update":{},"error":""}}"#;
        assert!(fault(&wire, spoofed).message().contains("reserved"));
    }
}
