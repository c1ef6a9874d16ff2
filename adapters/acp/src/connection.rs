//! The agent process and the client side of its JSON-RPC 2.0 connection (newline-delimited
//! JSON over stdio, as ACP specifies).
//!
//! One reader task parses the agent's stdout: responses go to the request that waits for
//! them, `session/update` notifications and `session/request_permission` requests go to the
//! runtime's inbound queue (in order), and file and terminal requests are served or declined
//! here. Anything that is not JSON-RPC ends the connection with a `protocol` error.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use agent_client_protocol::v1::schema::{RequestPermissionRequest, SessionNotification};
use harness_core::error::{ErrorCategory, HarnessError};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};

use crate::options::{AcpOptions, FileAccess};

/// How much of the agent's stderr is kept, for diagnostics.
pub(crate) const STDERR_LIMIT: usize = 8 * 1024;
/// The longest line accepted from the agent.
const MAX_LINE: usize = 16 * 1024 * 1024;

/// What the agent sent that the runtime handles.
#[derive(Debug)]
pub(crate) enum Inbound {
    /// A `session/update` notification.
    Update(Box<SessionNotification>),
    /// A `session/request_permission` request, to answer with [`Connection::respond`].
    Permission {
        id: Value,
        request: Box<RequestPermissionRequest>,
    },
    /// The prompt request was answered.
    PromptDone(Result<Value, HarnessError>),
    /// The connection ended (the agent exited, or sent something that is not JSON-RPC).
    Closed(HarnessError),
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, HarnessError>>>>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running agent and its connection.
#[derive(Debug)]
pub(crate) struct Connection {
    /// A sender into the runtime's inbound queue (for prompt completions).
    pub(crate) inbound: mpsc::UnboundedSender<Inbound>,
    outgoing: mpsc::UnboundedSender<String>,
    pending: Pending,
    next_id: AtomicU64,
    stderr: Arc<Mutex<VecDeque<u8>>>,
    child: tokio::sync::Mutex<Option<Child>>,
    pgid: Option<u32>,
}

impl Connection {
    /// Spawns the agent in its own process group, with only the allowlisted environment.
    pub(crate) fn spawn(
        options: &AcpOptions,
    ) -> Result<(Arc<Self>, mpsc::UnboundedReceiver<Inbound>), HarnessError> {
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

        let (out_tx, mut out_rx) = mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            let mut stdin = stdin;
            while let Some(line) = out_rx.recv().await {
                if stdin.write_all(line.as_bytes()).await.is_err()
                    || stdin.write_all(b"\n").await.is_err()
                    || stdin.flush().await.is_err()
                {
                    break;
                }
            }
        });

        let stderr_buf = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_LIMIT)));
        let keep = Arc::clone(&stderr_buf);
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

        let pending: Pending = Arc::default();
        let (in_tx, in_rx) = mpsc::unbounded_channel();
        let reader = Reader {
            pending: Arc::clone(&pending),
            inbound: in_tx.clone(),
            outgoing: out_tx.clone(),
            workspace: options.cwd.clone(),
            files: options.files,
        };
        tokio::spawn(reader.run(stdout));

        let connection = Arc::new(Self {
            inbound: in_tx,
            outgoing: out_tx,
            pending,
            next_id: AtomicU64::new(0),
            stderr: stderr_buf,
            child: tokio::sync::Mutex::new(Some(child)),
            pgid,
        });
        Ok((connection, in_rx))
    }

    /// The last [`STDERR_LIMIT`] bytes of the agent's stderr, lossily decoded.
    pub(crate) fn stderr_tail(&self) -> String {
        let buf = lock(&self.stderr);
        let (a, b) = buf.as_slices();
        let mut bytes = a.to_vec();
        bytes.extend_from_slice(b);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Sends a request; the receiver yields its result or error.
    pub(crate) fn request(
        &self,
        method: &str,
        params: &Value,
    ) -> oneshot::Receiver<Result<Value, HarnessError>> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if self.outgoing.send(message.to_string()).is_err()
            && let Some(tx) = lock(&self.pending).remove(&id)
        {
            let _ = tx.send(Err(closed()));
        }
        rx
    }

    /// Sends a request and waits for its result.
    pub(crate) async fn call(&self, method: &str, params: &Value) -> Result<Value, HarnessError> {
        self.request(method, params)
            .await
            .unwrap_or_else(|_| Err(closed()))
    }

    /// Sends a notification.
    pub(crate) fn notify(&self, method: &str, params: &Value) {
        let message = json!({"jsonrpc": "2.0", "method": method, "params": params});
        let _ = self.outgoing.send(message.to_string());
    }

    /// Answers a request the agent sent.
    pub(crate) fn respond(&self, id: &Value, result: &Value) {
        let message = json!({"jsonrpc": "2.0", "id": id, "result": result});
        let _ = self.outgoing.send(message.to_string());
    }

    /// Signals the whole process group.
    fn signal_group(&self, signal: &str) {
        if let Some(pgid) = self.pgid {
            let _ = std::process::Command::new("kill")
                .args([signal, "--", &format!("-{pgid}")])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }

    /// Ends the agent: terminates the process group, waits up to `grace` for the agent to
    /// exit, then kills the process group and reaps the agent. Idempotent.
    ///
    /// The agent is reaped only after the group was killed: until then its pid (the group
    /// id) cannot be reused, so the signals never reach an unrelated process.
    pub(crate) async fn shutdown(&self, grace: Duration) {
        let Some(mut child) = self.child.lock().await.take() else {
            return;
        };
        self.signal_group("-TERM");
        if let Some(pid) = self.pgid {
            let deadline = tokio::time::Instant::now() + grace;
            while !exited_unreaped(pid) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        // Children of the agent may outlive it in the group: kill the group either way.
        self.signal_group("-KILL");
        let _ = child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
        for (_, tx) in lock(&self.pending).drain() {
            let _ = tx.send(Err(closed()));
        }
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

fn closed() -> HarnessError {
    HarnessError::new(ErrorCategory::Unavailable, "the ACP agent is not running")
}

struct Reader {
    pending: Pending,
    inbound: mpsc::UnboundedSender<Inbound>,
    outgoing: mpsc::UnboundedSender<String>,
    workspace: PathBuf,
    files: FileAccess,
}

impl Reader {
    async fn run(self, stdout: tokio::process::ChildStdout) {
        let mut lines = BufReader::new(stdout);
        let mut line = String::new();
        let end = loop {
            line.clear();
            match (&mut lines)
                .take(MAX_LINE as u64)
                .read_line(&mut line)
                .await
            {
                Ok(0) => {
                    break HarnessError::new(
                        ErrorCategory::Unavailable,
                        "the ACP agent exited during the execution",
                    );
                }
                Ok(_) if !line.ends_with('\n') && line.len() >= MAX_LINE => {
                    break protocol("the ACP agent sent an oversized message");
                }
                Ok(_) => {}
                Err(e) => {
                    break HarnessError::new(
                        ErrorCategory::Unavailable,
                        "the ACP agent's output could not be read",
                    )
                    .with_diagnostic(e.to_string());
                }
            }
            let text = line.trim();
            if text.is_empty() {
                continue;
            }
            if let Err(err) = self.dispatch(text).await {
                break err;
            }
        };
        for (_, tx) in lock(&self.pending).drain() {
            let _ = tx.send(Err(end.clone()));
        }
        let _ = self.inbound.send(Inbound::Closed(end));
    }

    async fn dispatch(&self, text: &str) -> Result<(), HarnessError> {
        let message: Value = serde_json::from_str(text).map_err(|e| {
            protocol("the ACP agent sent output that is not JSON-RPC")
                .with_diagnostic(format!("{e}"))
        })?;
        let Some(object) = message.as_object() else {
            return Err(protocol(
                "the ACP agent sent a JSON-RPC message that is not an object",
            ));
        };
        let method = object.get("method").and_then(Value::as_str);
        let id = object.get("id").cloned();
        let params = object.get("params").cloned().unwrap_or(Value::Null);
        match (method, id) {
            (Some("session/update"), None) => {
                let update: SessionNotification = serde_json::from_value(params).map_err(|e| {
                    protocol("the ACP agent sent a malformed session/update")
                        .with_diagnostic(e.to_string())
                })?;
                let _ = self.inbound.send(Inbound::Update(Box::new(update)));
            }
            (Some(_), None) => {} // other notifications carry nothing the runtime maps
            (Some("session/request_permission"), Some(id)) => {
                let request: RequestPermissionRequest =
                    serde_json::from_value(params).map_err(|e| {
                        protocol("the ACP agent sent a malformed session/request_permission")
                            .with_diagnostic(e.to_string())
                    })?;
                let _ = self.inbound.send(Inbound::Permission {
                    id,
                    request: Box::new(request),
                });
            }
            (Some(method), Some(id)) => {
                let reply = self.serve(method, &params).await;
                let message = match reply {
                    Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
                    Err((code, msg)) => json!({
                        "jsonrpc": "2.0", "id": id, "error": {"code": code, "message": msg}
                    }),
                };
                let _ = self.outgoing.send(message.to_string());
            }
            (None, Some(id)) => {
                let Some(key) = id.as_u64() else {
                    return Err(protocol("the ACP agent answered an unknown request"));
                };
                let Some(tx) = lock(&self.pending).remove(&key) else {
                    return Err(protocol("the ACP agent answered an unknown request"));
                };
                let result = match (object.get("result"), object.get("error")) {
                    (Some(result), None) => Ok(result.clone()),
                    (None, Some(error)) => Err(agent_error(error)),
                    _ => Err(protocol("the ACP agent sent a malformed JSON-RPC response")),
                };
                let _ = tx.send(result);
            }
            (None, None) => {
                return Err(protocol(
                    "the ACP agent sent a JSON-RPC message without method or id",
                ));
            }
        }
        Ok(())
    }

    /// Serves or declines a client-side request; terminals are always declined.
    async fn serve(&self, method: &str, params: &Value) -> Result<Value, (i64, String)> {
        const NOT_FOUND: i64 = -32601;
        const INVALID: i64 = -32602;
        let path = || {
            params
                .get("path")
                .and_then(Value::as_str)
                .map(PathBuf::from)
                .ok_or((INVALID, "`path` is required".to_owned()))
        };
        match method {
            "fs/read_text_file" if self.files.reads() => {
                let path = self.inside(&path()?, false).await?;
                let text = tokio::fs::read_to_string(&path)
                    .await
                    .map_err(|_| (INVALID, "the file could not be read".to_owned()))?;
                let line = params.get("line").and_then(Value::as_u64);
                let limit = params.get("limit").and_then(Value::as_u64);
                let text = match (line, limit) {
                    (None, None) => text,
                    _ => {
                        let skip = usize::try_from(line.unwrap_or(1).saturating_sub(1))
                            .unwrap_or(usize::MAX);
                        let take =
                            limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
                        text.lines()
                            .skip(skip)
                            .take(take)
                            .collect::<Vec<_>>()
                            .join("\n")
                    }
                };
                Ok(json!({"content": text}))
            }
            "fs/write_text_file" if self.files.writes() => {
                let path = self.inside(&path()?, true).await?;
                let content = params
                    .get("content")
                    .and_then(Value::as_str)
                    .ok_or((INVALID, "`content` is required".to_owned()))?;
                tokio::fs::write(&path, content)
                    .await
                    .map_err(|_| (INVALID, "the file could not be written".to_owned()))?;
                Ok(json!({}))
            }
            _ => Err((NOT_FOUND, format!("{method} is not served by this client"))),
        }
    }

    /// The canonical path of `path` if it lies inside the workspace. A file to create need
    /// not exist, but its parent directory must.
    async fn inside(&self, path: &Path, create: bool) -> Result<PathBuf, (i64, String)> {
        let outside = || (-32602, "the path is outside the workspace".to_owned());
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

pub(crate) fn protocol(message: &'static str) -> HarnessError {
    HarnessError::new(ErrorCategory::Protocol, message)
}

fn agent_error(error: &Value) -> HarnessError {
    let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .chars()
        .take(512)
        .collect::<String>();
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
