//! The relay's bridge for a stdio MCP server with `env`: the control plane runs the
//! operator's program and serves it to the agent as a streamable-HTTP MCP server.
//!
//! - **Sessions.** An `initialize` request `POST`ed without `Mcp-Session-Id` starts the
//!   program (its own process group, killed on drop) and opens an MCP session: the answer
//!   carries the session's id (128 random bits) in `Mcp-Session-Id`, which every later request
//!   must carry. At most [`SESSIONS`] run at once per server (`503` beyond). `DELETE` ends a
//!   session; so does the relay's end (the runtime's), and the program's exit: a request for
//!   an ended or unknown session is `404`, as MCP specifies, and a client starts over.
//! - **Messages.** A `POST`ed request is written to the program's stdin as one line, and
//!   answered, as `application/json`, with the program's response of the same id; a request
//!   in flight when the program exits is answered with a JSON-RPC error. A `POST`ed
//!   notification or response is written and answered `202`. A batch (a JSON array) is
//!   refused `400`: MCP removed batches (2025-06-18), and one message per request keeps each
//!   answer bound to its request. A message, either way, is at most [`MESSAGE_LIMIT`] bytes; a
//!   longer line from the program ends its session.
//! - **Unprompted messages.** What the program sends that answers no request (notifications,
//!   its own requests) goes to the session's stream, which a `GET` opens as SSE (one at a
//!   time: `409` for a second). While none is open, up to [`UNPROMPTED_LIMIT`] wait for one;
//!   beyond that, the newest are dropped (a notification is advisory; a server request
//!   dropped this way goes unanswered, as it would to a client that never listens).
//! - **The program** runs in the agent's working directory, with the variables the agent
//!   inherits from the host (`AcpAgent::env`) and its own `env`, not the agent's `setEnv`;
//!   its stderr is discarded. For a sandboxed agent it runs in a sandbox of its own, of the
//!   agent's profile.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use harness_core::error::{ErrorCategory, HarnessError};
use harness_sandbox::{Launch, Sandbox, SandboxGuard};
use http_body_util::BodyExt as _;
use hyper::body::{Bytes, Frame, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::{Body, plain, read_body, whole};
use crate::options::AcpAgent;

/// MCP sessions (processes) one bridged server runs at once.
pub const SESSIONS: usize = 8;
/// The largest message either way, in bytes.
pub const MESSAGE_LIMIT: usize = super::BODY_LIMIT;
/// Unprompted messages that wait for a stream.
pub const UNPROMPTED_LIMIT: usize = 256;
/// How long writing a message to the program may take (it must read its stdin).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

const SESSION_HEADER: &str = "mcp-session-id";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The operator's program of a bridged server. `Debug` shows variable names, not values.
pub(crate) struct Program {
    command: Vec<String>,
    env: Vec<(String, OsString)>,
    cwd: PathBuf,
    /// The agent's search path, for resolving the program for a sandbox.
    search_path: OsString,
    sandbox: Option<Sandbox>,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("command", &self.command)
            .field("env", &self.env.iter().map(|(n, _)| n).collect::<Vec<_>>())
            .field("cwd", &self.cwd)
            .field("sandboxed", &self.sandbox.is_some())
            .finish_non_exhaustive()
    }
}

/// A started program: killed, with its process group, on drop.
struct Process {
    child: Child,
    /// The sandbox it runs in, torn down with it.
    _sandbox: Option<SandboxGuard>,
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(pid) = self
            .child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        // `kill_on_drop` kills the leader, and Tokio reaps it.
    }
}

impl Program {
    /// `command` with `env`, run as `agent`'s servers are (see the [module](self)).
    ///
    /// # Errors
    /// `configuration` for an empty command.
    pub(crate) fn for_agent(
        agent: &AcpAgent,
        command: &[String],
        env: &BTreeMap<String, String>,
    ) -> Result<Self, HarnessError> {
        if command.first().is_none_or(String::is_empty) {
            return Err(HarnessError::new(
                ErrorCategory::Configuration,
                "a bridged MCP server has an empty command",
            ));
        }
        let mut vars: Vec<(String, OsString)> = agent
            .env
            .iter()
            .filter(|n| !env.contains_key(*n))
            .filter_map(|n| std::env::var_os(n).map(|v| (n.clone(), v)))
            .collect();
        vars.extend(env.iter().map(|(n, v)| (n.clone(), OsString::from(v))));
        Ok(Self {
            command: command.to_vec(),
            env: vars,
            cwd: agent.cwd.clone(),
            search_path: agent.search_path(),
            sandbox: agent.sandbox.clone(),
        })
    }

    async fn start(&self) -> Result<(Process, ChildStdin, ChildStdout), String> {
        let (program, args) = self
            .command
            .split_first()
            .ok_or_else(|| "an empty command".to_owned())?;
        let (mut child, sandbox) = match &self.sandbox {
            None => {
                let child = Command::new(program)
                    .args(args)
                    .current_dir(&self.cwd)
                    .env_clear()
                    .envs(self.env.iter().map(|(n, v)| (n, v)))
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::null())
                    .process_group(0)
                    .kill_on_drop(true)
                    .spawn()
                    .map_err(|e| format!("spawning `{program}`: {e}"))?;
                (child, None)
            }
            Some(sandbox) => {
                let resolved =
                    harness_core::program::resolve(program, &self.cwd, &self.search_path)
                        .map_err(|why| format!("resolving `{program}`: {}", why.category()))?;
                let mut launch = Launch::new(resolved, &self.cwd);
                launch.args.extend(args.iter().map(OsString::from));
                launch.env.clone_from(&self.env);
                let sandboxed = sandbox
                    .spawn(launch)
                    .await
                    .map_err(|e| e.message().to_owned())?;
                (sandboxed.child, Some(sandboxed.guard))
            }
        };
        let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
        let process = Process {
            child,
            _sandbox: sandbox,
        };
        match (stdin, stdout) {
            (Some(stdin), Some(stdout)) => Ok((process, stdin, stdout)),
            _ => Err("its stdio was not piped".to_owned()),
        }
    }
}

type Sessions = Mutex<HashMap<String, Arc<Session>>>;

/// One bridged server: its program and its sessions.
#[derive(Debug)]
pub(crate) struct Bridge {
    program: Program,
    sessions: Arc<Sessions>,
}

/// One MCP session: one process.
struct Session {
    id: String,
    stdin: tokio::sync::Mutex<ChildStdin>,
    /// Requests waiting for their response, by their id (as JSON text).
    pending: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    /// The unprompted messages' receiving end, while no stream holds it.
    stream: Mutex<Option<mpsc::Receiver<Bytes>>>,
    ended: Mutex<bool>,
    process: Mutex<Option<Process>>,
    reader: Mutex<Option<JoinHandle<()>>>,
    /// Unprompted messages dropped while the buffer was full.
    dropped: AtomicU64,
    sessions: Weak<Sessions>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("ended", &*lock(&self.ended))
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Ends the session: the process killed, the waiting requests answered, the stream ended,
    /// the id unknown from now on.
    fn end(&self) {
        *lock(&self.ended) = true;
        if let Some(sessions) = self.sessions.upgrade() {
            lock(&sessions).remove(&self.id);
        }
        lock(&self.pending).clear();
        drop(lock(&self.process).take());
        if let Some(reader) = lock(&self.reader).take() {
            reader.abort();
        }
    }

    /// Writes `message` as one line; a failure (or a program that does not read within
    /// [`WRITE_TIMEOUT`]) ends the session.
    async fn write(&self, message: &Value) -> Result<(), ()> {
        let mut line = message.to_string().into_bytes();
        line.push(b'\n');
        let mut stdin = self.stdin.lock().await;
        let written = tokio::time::timeout(WRITE_TIMEOUT, async {
            stdin.write_all(&line).await?;
            stdin.flush().await
        })
        .await;
        if matches!(written, Ok(Ok(()))) {
            Ok(())
        } else {
            drop(stdin);
            self.end();
            Err(())
        }
    }

    /// Sends the request `message` (of id `key`) and waits for its response; `None` when the
    /// session ended first.
    async fn request(&self, key: String, message: &Value) -> Result<Option<Value>, Refused> {
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = lock(&self.pending);
            if *lock(&self.ended) {
                return Ok(None);
            }
            if pending.contains_key(&key) {
                return Err(Refused::DuplicateId);
            }
            pending.insert(key.clone(), tx);
        }
        // Removes the entry however this ends (the client may go away while it waits).
        let _waiting = Waiting(self, key);
        if self.write(message).await.is_err() {
            return Ok(None);
        }
        Ok(rx.await.ok())
    }
}

enum Refused {
    DuplicateId,
}

struct Waiting<'a>(&'a Session, String);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        lock(&self.0.pending).remove(&self.1);
    }
}

/// What a `POST`ed message is.
#[derive(Debug, PartialEq, Eq)]
enum Kind {
    /// A request, with its id as JSON text.
    Request(String),
    Notification,
    Response,
}

fn kind(message: &serde_json::Map<String, Value>) -> Option<Kind> {
    let id = message
        .get("id")
        .filter(|id| id.is_string() || id.is_number());
    match (message.get("method").and_then(Value::as_str), id) {
        (Some(_), Some(id)) => Some(Kind::Request(id.to_string())),
        (Some(_), None) if !message.contains_key("id") => Some(Kind::Notification),
        (None, Some(_)) if message.contains_key("result") || message.contains_key("error") => {
            Some(Kind::Response)
        }
        _ => None,
    }
}

/// Whether what the program sent answers a request, and which (its id as JSON text).
fn answers(message: &Value) -> Option<String> {
    let object = message.as_object()?;
    if object.contains_key("method") {
        return None;
    }
    (object.contains_key("result") || object.contains_key("error"))
        .then(|| object.get("id").map(Value::to_string))
        .flatten()
}

impl Bridge {
    pub(crate) fn new(program: Program) -> Self {
        Self {
            program,
            sessions: Arc::default(),
        }
    }

    /// Ends every session (the relay's end).
    pub(crate) fn end_all(&self) {
        let sessions: Vec<Arc<Session>> = lock(&self.sessions).values().cloned().collect();
        for session in sessions {
            session.end();
        }
    }

    fn session(&self, id: &str) -> Option<Arc<Session>> {
        lock(&self.sessions).get(id).cloned()
    }

    /// Serves the agent's `request` for the server `name`.
    pub(crate) async fn serve(&self, name: &str, request: Request<Incoming>) -> Response<Body> {
        let session_id = request
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let method = request.method().clone();
        if method == Method::POST {
            let body = match read_body(request.into_body()).await {
                Ok(body) => body,
                Err(refused) => return refused,
            };
            return self.post(name, session_id.as_deref(), &body).await;
        }
        if method != Method::GET && method != Method::DELETE {
            return plain(
                StatusCode::METHOD_NOT_ALLOWED,
                "MCP's streamable HTTP takes POST, GET and DELETE",
            );
        }
        let Some(session_id) = session_id else {
            return plain(
                StatusCode::BAD_REQUEST,
                "a GET or DELETE needs the Mcp-Session-Id of an initialized session",
            );
        };
        let Some(session) = self.session(&session_id) else {
            return unknown_session();
        };
        if method == Method::DELETE {
            session.end();
            return plain(StatusCode::OK, "the session ended");
        }
        let Some(rx) = lock(&session.stream).take() else {
            return plain(
                StatusCode::CONFLICT,
                "a stream of this session is open already: one at a time",
            );
        };
        let mut response = Response::new(
            SseBody {
                rx: Some(rx),
                session,
            }
            .boxed_unsync(),
        );
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        response
            .headers_mut()
            .insert("cache-control", HeaderValue::from_static("no-cache"));
        response
    }

    async fn post(&self, name: &str, session_id: Option<&str>, body: &[u8]) -> Response<Body> {
        let Ok(message) = serde_json::from_slice::<Value>(body) else {
            return plain(
                StatusCode::BAD_REQUEST,
                "the body is not JSON: POST one JSON-RPC message",
            );
        };
        if message.is_array() {
            return plain(
                StatusCode::BAD_REQUEST,
                "JSON-RPC batches are refused (MCP removed them in 2025-06-18): POST one \
                 message per request",
            );
        }
        let Some(kind) = message.as_object().and_then(kind) else {
            return plain(
                StatusCode::BAD_REQUEST,
                "the body is not a JSON-RPC request, notification or response",
            );
        };
        let initialize = message["method"] == "initialize";
        let (session, opened) = match session_id {
            Some(id) => match self.session(id) {
                Some(session) => (session, false),
                None => return unknown_session(),
            },
            None if initialize && matches!(kind, Kind::Request(_)) => match self.open().await {
                Ok(session) => (session, true),
                Err(response) => return response,
            },
            None => {
                return plain(
                    StatusCode::BAD_REQUEST,
                    "a request needs the Mcp-Session-Id of an initialized session (POST \
                     `initialize` first)",
                );
            }
        };
        let Kind::Request(key) = kind else {
            return match session.write(&message).await {
                Ok(()) => {
                    let mut response = Response::new(whole(Bytes::new()));
                    *response.status_mut() = StatusCode::ACCEPTED;
                    response
                }
                Err(()) => unknown_session(),
            };
        };
        let answer = match session.request(key, &message).await {
            Ok(Some(answer)) => answer,
            Ok(None) => json!({
                "jsonrpc": "2.0",
                "id": message["id"],
                "error": {"code": -32603, "message": format!("MCP server `{name}` exited")},
            }),
            Err(Refused::DuplicateId) => {
                return plain(
                    StatusCode::BAD_REQUEST,
                    "a request with this id is in flight in this session already",
                );
            }
        };
        let mut response = Response::new(whole(answer.to_string()));
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if opened && let Ok(id) = HeaderValue::from_str(&session.id) {
            response.headers_mut().insert(SESSION_HEADER, id);
        }
        response
    }

    /// Starts the program for a new session.
    async fn open(&self) -> Result<Arc<Session>, Response<Body>> {
        if lock(&self.sessions).len() >= SESSIONS {
            return Err(plain(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("this MCP server runs at most {SESSIONS} sessions at once"),
            ));
        }
        let id = super::random_token()
            .map_err(|e| plain(StatusCode::INTERNAL_SERVER_ERROR, e.message()))?;
        let (process, stdin, stdout) = self.program.start().await.map_err(|why| {
            tracing::debug!(%why, "a bridged MCP server could not be started");
            plain(
                StatusCode::BAD_GATEWAY,
                "the MCP server could not be started",
            )
        })?;
        let (tx, rx) = mpsc::channel(UNPROMPTED_LIMIT);
        let session = Arc::new(Session {
            id: id.clone(),
            stdin: tokio::sync::Mutex::new(stdin),
            pending: Mutex::default(),
            stream: Mutex::new(Some(rx)),
            ended: Mutex::new(false),
            process: Mutex::new(Some(process)),
            reader: Mutex::new(None),
            dropped: AtomicU64::new(0),
            sessions: Arc::downgrade(&self.sessions),
        });
        lock(&self.sessions).insert(id, Arc::clone(&session));
        let reader = tokio::spawn(read(stdout, Arc::clone(&session), tx));
        *lock(&session.reader) = Some(reader);
        Ok(session)
    }
}

fn unknown_session() -> Response<Body> {
    plain(
        StatusCode::NOT_FOUND,
        "no such MCP session (it ended, or never was): initialize a new one",
    )
}

/// Reads the program's messages until its stdout ends (or a message is too long), then ends
/// the session.
async fn read(stdout: ChildStdout, session: Arc<Session>, unprompted: mpsc::Sender<Bytes>) {
    let mut reader = BufReader::new(stdout);
    let mut line = Vec::new();
    loop {
        line.clear();
        let limit = u64::try_from(MESSAGE_LIMIT).unwrap_or(u64::MAX) + 1;
        match (&mut reader).take(limit).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if line.len() > MESSAGE_LIMIT {
            tracing::debug!("a bridged MCP server sent a message over the limit");
            break;
        }
        // A line that is not JSON (a server's stray output) is skipped.
        let Ok(message) = serde_json::from_slice::<Value>(&line) else {
            continue;
        };
        if let Some(key) = answers(&message) {
            if let Some(waiting) = lock(&session.pending).remove(&key) {
                let _ = waiting.send(message);
            }
            continue;
        }
        let event = Bytes::from(format!("event: message\ndata: {message}\n\n"));
        if let Err(mpsc::error::TrySendError::Full(_)) = unprompted.try_send(event) {
            session.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
    // `end` aborts this task: take the handle first, so that it ends on its own.
    drop(lock(&session.reader).take());
    session.end();
}

/// A session's stream, as SSE: gives the receiving end back when the client goes.
struct SseBody {
    rx: Option<mpsc::Receiver<Bytes>>,
    session: Arc<Session>,
}

impl Drop for SseBody {
    fn drop(&mut self) {
        if let Some(rx) = self.rx.take() {
            *lock(&self.session.stream) = Some(rx);
        }
    }
}

impl hyper::body::Body for SseBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.rx.as_mut() {
            None => Poll::Ready(None),
            Some(rx) => rx.poll_recv(cx).map(|m| m.map(|b| Ok(Frame::data(b)))),
        }
    }
}
