//! The agent process and the client side of its ACP connection, on the
//! `agent-client-protocol` crate: a `Client.v1()` connection over the child's stdio
//! (the crate's generic [`Lines`](acp::Lines) transport), with typed handlers for what
//! the agent sends.
//!
//! - `session/update` notifications, `session/request_permission` and `elicitation/create`
//!   requests go to the runtime's inbound queue, in the order the connection dispatched them
//!   (the crate's dispatch loop is sequential, and the handlers only enqueue).
//! - `fs/read_text_file` / `fs/write_text_file` are served here, inside the workspace, or
//!   declined; every other request (`terminal/*`, ...) is answered `-32601` by the crate.
//! - The `session/prompt` response is enqueued from an ordered response callback
//!   ([`PreparedRequest::on_receiving_result`](acp::PreparedRequest::on_receiving_result)),
//!   so it always follows the updates the agent sent before it.
//!
//! The crate answers malformed input with JSON-RPC errors and carries on (it is built for
//! long-lived editors); the adapter must end the run as `protocol` instead. So the incoming
//! line stream is wrapped by a *wire guard* that checks each line before the crate sees it:
//! a line that is not a JSON-RPC 2.0 object, a response to a request that was not sent (the
//! outgoing sink records the ids of requests as they are written), a malformed response to
//! one of our requests, or a malformed `session/update` / `session/request_permission` ends
//! the stream with an error and records the fault, which then names every failure.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use agent_client_protocol as acp;
use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    ClientCapabilities, CreateElicitationRequest, CreateElicitationResponse,
    ElicitationCapabilities, ElicitationFormCapabilities, FileSystemCapabilities, Implementation,
    InitializeRequest, InitializeResponse, LoadSessionRequest, LoadSessionResponse,
    NewSessionResponse, PromptRequest, PromptResponse, ReadTextFileRequest, ReadTextFileResponse,
    RequestPermissionRequest, RequestPermissionResponse, SessionId, SessionNotification,
    WriteTextFileRequest, WriteTextFileResponse,
};
use futures_util::future;
use harness_core::error::{ErrorCategory, HarnessError};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, oneshot};

use crate::options::{AcpOptions, FileAccess};

/// How much of the agent's stderr is kept, for diagnostics.
pub(crate) const STDERR_LIMIT: usize = 8 * 1024;
/// The longest line accepted from the agent.
const MAX_LINE: usize = 16 * 1024 * 1024;

/// The crate's connection to the agent, as the client sees it.
type AgentConnection = acp::v1::ConnectionTo<acp::Agent>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the agent sent that the runtime handles.
#[derive(Debug)]
pub(crate) enum Inbound {
    /// A `session/update` notification (not a replayed one: see [`AgentProcess::load`]).
    Update(Box<SessionNotification>),
    /// A `session/request_permission` request, answered through its responder.
    Permission {
        request: Box<RequestPermissionRequest>,
        responder: acp::v1::Responder<RequestPermissionResponse>,
    },
    /// An `elicitation/create` request, answered through its responder.
    Elicitation {
        request: Box<CreateElicitationRequest>,
        responder: acp::v1::Responder<CreateElicitationResponse>,
    },
    /// The prompt request was answered (or failed).
    PromptDone(Result<PromptResponse, HarnessError>),
    /// The connection ended (the agent exited, or sent something that is not ACP).
    Closed(HarnessError),
}

/// What the wire guard observed, shared by the line stream, the sink and the runtime.
#[derive(Debug, Default)]
struct Wire {
    /// Requests written and not yet answered: JSON text of the id → method.
    outstanding: Mutex<HashMap<String, String>>,
    /// The first fault: the run ends with it.
    fault: Mutex<Option<HarnessError>>,
    /// The `protocolVersion` of the agent's `initialize` response, as sent.
    agent_version: Mutex<Option<Value>>,
}

impl Wire {
    fn fault(&self) -> Option<HarnessError> {
        lock(&self.fault).clone()
    }

    fn record_fault(&self, err: HarnessError) -> HarnessError {
        lock(&self.fault).get_or_insert(err).clone()
    }

    /// Records an outgoing request's id, before it is written.
    fn outgoing(&self, line: &str) {
        let Ok(Value::Object(message)) = serde_json::from_str::<Value>(line) else {
            return;
        };
        if let (Some(id), Some(method)) = (
            message.get("id"),
            message.get("method").and_then(Value::as_str),
        ) {
            lock(&self.outstanding).insert(id.to_string(), method.to_owned());
        }
    }

    /// Checks one incoming line; `Err` is a protocol fault that ends the connection.
    fn incoming(&self, line: &str) -> Result<(), HarnessError> {
        let message: Value = serde_json::from_str(line).map_err(|e| {
            protocol("the ACP agent sent output that is not JSON-RPC").with_diagnostic(format!(
                "{e}; line starts {:?}",
                line.chars().take(80).collect::<String>()
            ))
        })?;
        let Some(object) = message.as_object() else {
            return Err(protocol(
                "the ACP agent sent a JSON-RPC message that is not an object",
            ));
        };
        if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err(protocol(
                "the ACP agent sent a message that is not JSON-RPC 2.0",
            ));
        }
        let params = || object.get("params").cloned().unwrap_or(Value::Null);
        match (object.get("method"), object.get("id")) {
            (Some(Value::String(method)), id) => {
                let malformed = match (method.as_str(), id) {
                    ("session/update", None) => {
                        serde_json::from_value::<SessionNotification>(params()).err()
                    }
                    ("session/request_permission", Some(_)) => {
                        serde_json::from_value::<RequestPermissionRequest>(params()).err()
                    }
                    _ => None,
                };
                match malformed {
                    Some(e) => Err(protocol("the ACP agent sent a malformed message")
                        .with_diagnostic(format!("{method}: {e}"))),
                    None => Ok(()),
                }
            }
            (Some(_), _) => Err(protocol(
                "the ACP agent sent a JSON-RPC message whose method is not a string",
            )),
            (None, Some(id)) => {
                let Some(method) = lock(&self.outstanding).remove(&id.to_string()) else {
                    return Err(protocol("the ACP agent answered an unknown request")
                        .with_diagnostic(format!("response id {id}")));
                };
                match (object.get("result"), object.get("error")) {
                    (Some(result), None) => self.check_result(&method, result),
                    (None, Some(error)) if error.get("code").is_some_and(Value::is_i64) => Ok(()),
                    _ => Err(protocol("the ACP agent sent a malformed JSON-RPC response")
                        .with_diagnostic(format!("response to {method}"))),
                }
            }
            (None, None) => Err(protocol(
                "the ACP agent sent a JSON-RPC message without method or id",
            )),
        }
    }

    /// Checks the result of one of our requests against its schema.
    fn check_result(&self, method: &str, result: &Value) -> Result<(), HarnessError> {
        let check = |r: Result<(), serde_json::Error>| {
            r.map_err(|e| {
                protocol("the ACP agent sent a malformed response")
                    .with_diagnostic(format!("{method}: {e}"))
            })
        };
        match method {
            "initialize" => {
                *lock(&self.agent_version) = result.get("protocolVersion").cloned();
                check(serde_json::from_value::<InitializeResponse>(result.clone()).map(drop))
            }
            "session/new" => {
                check(serde_json::from_value::<NewSessionResponse>(result.clone()).map(drop))
            }
            "session/load" => {
                check(serde_json::from_value::<LoadSessionResponse>(result.clone()).map(drop))
            }
            "session/prompt" => {
                check(serde_json::from_value::<PromptResponse>(result.clone()).map(drop))
            }
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
        agent_error(i32::from(err.code), &err.message)
    }
}

/// Replay accounting for `session/load`: while set, updates for that session are counted,
/// not enqueued.
#[derive(Debug, Default)]
struct Replay {
    session: Option<SessionId>,
    count: u64,
}

/// A running agent and the crate's client connection to it.
#[derive(Debug)]
pub(crate) struct AgentProcess {
    cx: AgentConnection,
    wire: Arc<Wire>,
    replay: Arc<Mutex<Replay>>,
    stderr: Arc<Mutex<VecDeque<u8>>>,
    child: tokio::sync::Mutex<Option<Child>>,
    pgid: Option<u32>,
    stop: Mutex<Option<oneshot::Sender<()>>>,
}

impl AgentProcess {
    /// Spawns the agent in its own process group, with only the allowlisted environment, and
    /// connects the crate's client to its stdio. What the agent sends goes to `inbound`.
    pub(crate) async fn spawn(
        options: &AcpOptions,
        inbound: mpsc::UnboundedSender<Inbound>,
    ) -> Result<Arc<Self>, HarnessError> {
        let (program, args) = options
            .command
            .split_first()
            .ok_or_else(|| HarnessError::new(ErrorCategory::Configuration, "empty command"))?;
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(&options.cwd)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        for name in &options.env {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        let mut child = command.spawn().map_err(|e| {
            HarnessError::new(
                ErrorCategory::Unavailable,
                "the ACP agent could not be started",
            )
            .with_diagnostic(format!("spawning {program:?}: {e}"))
        })?;
        let pgid = child.id();
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(HarnessError::new(
                ErrorCategory::Internal,
                "the ACP agent's stdio was not piped",
            ));
        };
        let stderr_buf = keep_stderr(stderr);

        let wire = Arc::new(Wire::default());
        let replay = Arc::new(Mutex::new(Replay::default()));
        let transport = acp::Lines::new(
            line_sink(stdin, Arc::clone(&wire)),
            line_stream(stdout, Arc::clone(&wire)),
        );
        let handlers = Handlers {
            inbound: inbound.clone(),
            replay: Arc::clone(&replay),
            workspace: options.cwd.clone(),
            files: options.files,
        };
        let (cx_tx, cx_rx) = oneshot::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let ended = Arc::clone(&wire);
        tokio::spawn(async move {
            let result = handlers.connect(transport, cx_tx, stop_rx).await;
            let end = ended.fault().unwrap_or_else(|| match result {
                Ok(()) => exited(),
                Err(e) => exited().with_diagnostic(e.to_string()),
            });
            let _ = inbound.send(Inbound::Closed(end));
        });

        let Ok(cx) = cx_rx.await else {
            let err = wire.fault().unwrap_or_else(exited);
            Self::reap_on_failure(child, pgid).await;
            return Err(err);
        };
        let agent = Self {
            cx,
            wire,
            replay,
            stderr: stderr_buf,
            child: tokio::sync::Mutex::new(Some(child)),
            pgid,
            stop: Mutex::new(Some(stop_tx)),
        };
        Ok(Arc::new(agent))
    }

    async fn reap_on_failure(mut child: Child, pgid: Option<u32>) {
        signal_group(pgid, "-KILL");
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
        let result = self.cx.send_request(request).block_task().await;
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
        self.cx
            .send_request(request)
            .block_task()
            .await
            .map_err(|e| self.wire.error(&e))
    }

    /// `session/load`: the session's replayed history (the updates for it that arrive before
    /// the load response) is counted, not enqueued. Returns the response and that count.
    pub(crate) async fn load(
        &self,
        request: LoadSessionRequest,
    ) -> Result<(LoadSessionResponse, u64), HarnessError> {
        *lock(&self.replay) = Replay {
            session: Some(request.session_id.clone()),
            count: 0,
        };
        // The callback runs in the dispatch loop, right after the updates sent before the
        // response: replay accounting ends exactly at the response.
        let (tx, rx) = oneshot::channel();
        let replay = Arc::clone(&self.replay);
        let sent = self
            .cx
            .prepare_request(request)
            .on_receiving_result(move |result| {
                let count = std::mem::take(&mut *lock(&replay)).count;
                let _ = tx.send(result.map(|r| (r, count)));
                future::ready(Ok(()))
            });
        let result = match sent {
            Ok(()) => rx
                .await
                .unwrap_or_else(|_| Err(acp::Error::internal_error())),
            Err(e) => Err(e),
        };
        *lock(&self.replay) = Replay::default();
        result.map_err(|e| self.wire.error(&e))
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

    /// Ends the agent: stops the connection, terminates the process group, waits up to
    /// `grace` for the agent to exit, then kills the process group and reaps the agent.
    /// Idempotent.
    ///
    /// The agent is reaped only after the group was killed: until then its pid (the group
    /// id) cannot be reused, so the signals never reach an unrelated process.
    pub(crate) async fn shutdown(&self, grace: Duration) {
        let Some(mut child) = self.child.lock().await.take() else {
            return;
        };
        if let Some(stop) = lock(&self.stop).take() {
            let _ = stop.send(());
        }
        signal_group(self.pgid, "-TERM");
        if let Some(pid) = self.pgid {
            let deadline = tokio::time::Instant::now() + grace;
            while !exited_unreaped(pid) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        // Children of the agent may outlive it in the group: kill the group either way.
        signal_group(self.pgid, "-KILL");
        let _ = child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
    }
}

/// The typed handlers of the client connection.
#[derive(Debug, Clone)]
struct Handlers {
    inbound: mpsc::UnboundedSender<Inbound>,
    replay: Arc<Mutex<Replay>>,
    workspace: PathBuf,
    files: FileAccess,
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
        let permissions = self.inbound.clone();
        let elicitations = self.inbound.clone();
        let reads = self.clone();
        let writes = self;
        acp::Client
            .v1()
            .name("harness-acp")
            .on_receive_notification(
                async move |notification: SessionNotification, _cx| {
                    {
                        let mut replay = lock(&updates.replay);
                        if replay.session.as_ref() == Some(&notification.session_id) {
                            replay.count += 1;
                            return Ok(());
                        }
                    }
                    let _ = updates
                        .inbound
                        .send(Inbound::Update(Box::new(notification)));
                    Ok(())
                },
                acp::on_receive_notification!(),
            )
            .on_receive_request(
                async move |request: RequestPermissionRequest, responder, _cx| {
                    let _ = permissions.send(Inbound::Permission {
                        request: Box::new(request),
                        responder,
                    });
                    Ok(())
                },
                acp::on_receive_request!(),
            )
            .on_receive_request(
                async move |request: CreateElicitationRequest, responder, _cx| {
                    let _ = elicitations.send(Inbound::Elicitation {
                        request: Box::new(request),
                        responder,
                    });
                    Ok(())
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

    async fn read(&self, request: &ReadTextFileRequest) -> Result<String, acp::Error> {
        if !self.files.reads() {
            return Err(acp::Error::method_not_found());
        }
        let path = self.inside(&request.path, false).await?;
        let text = tokio::fs::read_to_string(&path)
            .await
            .map_err(|_| invalid("the file could not be read"))?;
        Ok(match (request.line, request.limit) {
            (None, None) => text,
            (line, limit) => {
                let skip =
                    usize::try_from(line.unwrap_or(1).saturating_sub(1)).unwrap_or(usize::MAX);
                let take = limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
                text.lines()
                    .skip(skip)
                    .take(take)
                    .collect::<Vec<_>>()
                    .join("\n")
            }
        })
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
) -> impl futures_util::Stream<Item = std::io::Result<String>> + Send + 'static {
    let reader = BufReader::new(stdout);
    futures_util::stream::unfold(Some(reader), move |reader| {
        let wire = Arc::clone(&wire);
        async move {
            let mut reader = reader?;
            let mut line = String::new();
            loop {
                line.clear();
                let read = (&mut reader)
                    .take(MAX_LINE as u64)
                    .read_line(&mut line)
                    .await;
                let fault = match read {
                    Ok(0) => return None,
                    Ok(_) if !line.ends_with('\n') && line.len() >= MAX_LINE => {
                        protocol("the ACP agent sent an oversized message")
                    }
                    Ok(_) if line.trim().is_empty() => continue,
                    Ok(_) => match wire.incoming(line.trim()) {
                        Ok(()) => {
                            let text = line.trim_end_matches(['\n', '\r']).to_owned();
                            return Some((Ok(text), Some(reader)));
                        }
                        Err(fault) => fault,
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

fn keep_stderr(stderr: tokio::process::ChildStderr) -> Arc<Mutex<VecDeque<u8>>> {
    let buf = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_LIMIT)));
    let keep = Arc::clone(&buf);
    tokio::spawn(async move {
        let mut stderr = stderr;
        let mut chunk = [0_u8; 4096];
        while let Ok(n) = stderr.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            let mut buf = lock(&keep);
            buf.extend(chunk.iter().take(n));
            let excess = buf.len().saturating_sub(STDERR_LIMIT);
            buf.drain(..excess);
        }
    });
    buf
}

/// Signals the whole process group.
fn signal_group(pgid: Option<u32>, signal: &str) {
    if let Some(pgid) = pgid {
        let _ = std::process::Command::new("kill")
            .args([signal, "--", &format!("-{pgid}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
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

fn agent_error(code: i32, message: &str) -> HarnessError {
    let message = message.chars().take(512).collect::<String>();
    // ACP's `auth_required` is -32000.
    let category = if code == -32000 {
        ErrorCategory::Authentication
    } else {
        ErrorCategory::Unavailable
    };
    HarnessError::new(category, "the ACP agent returned an error")
        .with_provider_code(&code.to_string())
        .with_diagnostic(message)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn agent_errors_map_to_authentication_or_unavailable() {
        let wire = Wire::default();
        let auth = wire.error(&acp::Error::auth_required());
        assert_eq!(auth.category(), ErrorCategory::Authentication);
        let other = wire.error(&acp::Error::new(-32099, "busy"));
        assert_eq!(other.category(), ErrorCategory::Unavailable);
        // Once the guard saw a fault, every failure is that fault.
        wire.record_fault(protocol("the ACP agent sent output that is not JSON-RPC"));
        assert_eq!(
            wire.error(&acp::Error::auth_required()).category(),
            ErrorCategory::Protocol
        );
    }
}
