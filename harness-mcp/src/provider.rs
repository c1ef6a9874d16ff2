//! [`McpProvider`]: one MCP server as a [`ToolProvider`].

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use harness_core::adapter::HarnessHealth;
use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::tool::{
    BoundedFailure, BoxFuture, Credential, PortableTool, ProvidedTool, ToolAnnotations,
    ToolCallContext, ToolDescriptor, ToolOutcome, ToolProvider, ToolScope,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation, Tool,
};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceError, ServiceExt};
use serde_json::Value;

use crate::config::{CallerCredential, MAX_TOOLS, McpServer, McpTransport};
use crate::names::tool_ids;

/// One MCP server's tools, for the executions of a service.
///
/// A server that takes no caller credential is started (or connected to) once, when the
/// first execution asks for its tools, and shared by the executions that follow; when its
/// connection is gone (the process exited, the server closed it), the next execution starts
/// it again. A server that takes a caller's credential gets one connection per execution,
/// with that execution's credential, closed when the execution ends; an execution whose
/// caller gave none gets none of its tools (`tool.unavailable`, `configuration`).
///
/// A server that cannot be started, reached, initialized or listed within its connect
/// timeout is unavailable (`unavailable`, retryable): the execution runs with its other
/// tools. The list of tools is the one the connection got when it was made (MCP's
/// `tools/list_changed` is not followed).
///
/// Calls go through the tool's handle (policy, deadline, cancellation); a call whose future
/// is dropped (cancelled, or past its deadline) sends the server `notifications/cancelled`.
/// A result with `isError` is a failure with the server's text; a JSON-RPC error is a
/// failure with its message; a connection lost mid-call is a retryable failure.
pub struct McpProvider {
    server: Arc<McpServer>,
    shared: tokio::sync::Mutex<Option<Arc<Connection>>>,
}

impl fmt::Debug for McpProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpProvider")
            .field("server", &self.server.name)
            .finish_non_exhaustive()
    }
}

impl McpProvider {
    /// The provider of `server`'s tools.
    ///
    /// # Errors
    /// When [`McpServer::check`] refuses the configuration.
    pub fn new(server: McpServer) -> Result<Self, HarnessError> {
        server.check()?;
        Ok(Self {
            server: Arc::new(server),
            shared: tokio::sync::Mutex::new(None),
        })
    }

    /// The server's configuration.
    #[must_use]
    pub fn server(&self) -> &McpServer {
        &self.server
    }

    /// The shared connection, made (again) if there is none alive.
    async fn shared(&self) -> Result<Arc<Connection>, HarnessError> {
        let mut shared = self.shared.lock().await;
        if let Some(connection) = &*shared
            && !connection.service.is_transport_closed()
        {
            return Ok(Arc::clone(connection));
        }
        *shared = None;
        let connection = Arc::new(Connection::open(&self.server, None).await?);
        *shared = Some(Arc::clone(&connection));
        Ok(connection)
    }
}

impl ToolProvider for McpProvider {
    fn name(&self) -> &str {
        &self.server.name
    }

    fn tools(&self, scope: ToolScope) -> BoxFuture<'_, Result<Vec<ProvidedTool>, HarnessError>> {
        Box::pin(async move {
            let connection = match (&self.server.caller_credential, scope.credential) {
                (None, _) => self.shared().await?,
                (Some(_), Some(credential)) => {
                    Arc::new(Connection::open(&self.server, Some(&credential)).await?)
                }
                (Some(_), None) => {
                    return Err(HarnessError::new(
                        ErrorCategory::Configuration,
                        format!(
                            "tool server `{}` needs the caller's credential, and the request \
                             gave none for it",
                            self.server.name
                        ),
                    ));
                }
            };
            Ok(connection.provided(&self.server))
        })
    }

    /// For a stdio server, its program found and executable where and how it would be
    /// started; for an HTTP server, an answer to one bounded `GET` of its URL. Nothing is
    /// started, no session opened, no credential sent (see the crate's health module).
    fn health(&self) -> BoxFuture<'_, HarnessHealth> {
        Box::pin(crate::health::check(&self.server))
    }
}

/// A live connection to a server, and its tools as listed then.
struct Connection {
    service: RunningService<RoleClient, ClientConfig>,
    tools: Vec<Tool>,
    /// A sandboxed stdio server's sandbox, torn down with the connection.
    _sandbox: Option<harness_sandbox::Sandboxed>,
}

impl Connection {
    /// Starts (stdio) or connects to (HTTP) the server, initializes and lists its tools,
    /// all within its connect timeout.
    async fn open(
        server: &McpServer,
        credential: Option<&Credential>,
    ) -> Result<Self, HarnessError> {
        let timeout = Duration::from_millis(server.connect_timeout_ms);
        let name = &server.name;
        let unavailable = |what: &str, detail: String| {
            HarnessError::new(
                ErrorCategory::Unavailable,
                format!("tool server `{name}` {what}"),
            )
            .with_retryable(true)
            .with_diagnostic(detail)
        };
        let client = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("harness", env!("CARGO_PKG_VERSION")),
        );
        // A sandboxed server's bwrap and guard: they live as long as the connection.
        let mut kept: Option<harness_sandbox::Sandboxed> = None;
        let opening = async {
            let service = match &server.transport {
                McpTransport::Stdio {
                    command,
                    cwd,
                    env,
                    set_env,
                } if server.sandbox.is_some() => {
                    let sandbox = server.sandbox.as_ref().expect("matched on it");
                    let (workspace, program) = match cwd {
                        Some(cwd) => (cwd, &command[0]),
                        None => return Err(unavailable("has no workspace", "no cwd".to_owned())),
                    };
                    let search = set_env
                        .get("PATH")
                        .map(std::ffi::OsString::from)
                        .or_else(|| std::env::var_os("PATH"))
                        .unwrap_or_default();
                    let resolved = harness_core::program::resolve(program, workspace, &search)
                        .map_err(|why| {
                            unavailable("could not be started", why.category().to_owned())
                        })?;
                    let mut launch = harness_sandbox::Launch::new(resolved, workspace);
                    launch.args.extend(command[1..].iter().map(Into::into));
                    for var in env {
                        if let Some(value) = std::env::var_os(var) {
                            launch = launch.env(var.clone(), value);
                        }
                    }
                    for (var, value) in set_env {
                        launch.env.retain(|(n, _)| n != var);
                        launch = launch.env(var.clone(), value);
                    }
                    if let (Some(CallerCredential::Env(var)), Some(credential)) =
                        (&server.caller_credential, credential)
                    {
                        launch.env.retain(|(n, _)| n != var);
                        launch = launch.env(var.clone(), credential.expose());
                    }
                    let mut sandboxed = sandbox.spawn(launch).await.map_err(|e| {
                        unavailable(
                            "could not be started in its sandbox",
                            format!("{}: {}", e.message(), e.diagnostic().unwrap_or_default()),
                        )
                    })?;
                    let (Some(stdout), Some(stdin)) =
                        (sandboxed.child.stdout.take(), sandboxed.child.stdin.take())
                    else {
                        return Err(unavailable("could not be started", "no stdio".to_owned()));
                    };
                    // The server's stderr is not read: dropped, so a full pipe never blocks it.
                    drop(sandboxed.child.stderr.take());
                    kept = Some(sandboxed);
                    client
                        .serve((stdout, stdin))
                        .await
                        .map_err(|e| unavailable("did not initialize", e.to_string()))?
                }
                McpTransport::Stdio {
                    command,
                    cwd,
                    env,
                    set_env,
                } => {
                    let mut cmd = tokio::process::Command::new(&command[0]);
                    cmd.args(&command[1..]).env_clear().kill_on_drop(true);
                    for var in env {
                        if let Some(value) = std::env::var_os(var) {
                            cmd.env(var, value);
                        }
                    }
                    cmd.envs(set_env);
                    if let Some(cwd) = cwd {
                        cmd.current_dir(cwd);
                    }
                    if let (Some(CallerCredential::Env(var)), Some(credential)) =
                        (&server.caller_credential, credential)
                    {
                        cmd.env(var, credential.expose());
                    }
                    let (transport, _) = TokioChildProcess::builder(cmd)
                        .stderr(Stdio::null())
                        .spawn()
                        .map_err(|e| unavailable("could not be started", e.to_string()))?;
                    client
                        .serve(transport)
                        .await
                        .map_err(|e| unavailable("did not initialize", e.to_string()))?
                }
                McpTransport::Http { url, headers } => {
                    let mut custom: HashMap<http::HeaderName, http::HeaderValue> = HashMap::new();
                    for (header, value) in headers {
                        // Checked with the configuration.
                        if let (Ok(h), Ok(v)) = (
                            http::HeaderName::from_bytes(header.as_bytes()),
                            http::HeaderValue::from_str(value),
                        ) {
                            custom.insert(h, v);
                        }
                    }
                    let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                    if let (Some(CallerCredential::Header(header)), Some(credential)) =
                        (&server.caller_credential, credential)
                    {
                        if header.eq_ignore_ascii_case("authorization") {
                            config = config.auth_header(credential.expose());
                        } else if let (Ok(h), Ok(v)) = (
                            http::HeaderName::from_bytes(header.as_bytes()),
                            http::HeaderValue::from_str(credential.expose()),
                        ) {
                            custom.insert(h, v);
                        }
                    }
                    config = config.custom_headers(custom);
                    client
                        .serve(StreamableHttpClientTransport::from_config(config))
                        .await
                        .map_err(|e| unavailable("could not be reached", e.to_string()))?
                }
            };
            let mut tools = service
                .list_all_tools()
                .await
                .map_err(|e| unavailable("did not list its tools", e.to_string()))?;
            if tools.len() > MAX_TOOLS {
                tracing::warn!(server = %name, offered = tools.len(), "an MCP server offers more tools than are listed");
                tools.truncate(MAX_TOOLS);
            }
            Ok((service, tools))
        };
        // The connection outlives the execution that opened it, and rmcp's serving task keeps
        // the span current at `serve` for its life: under a root span of its own, so that no
        // execution's span (and its exported trace) stays open as long as the connection.
        let opening = tracing::Instrument::instrument(
            opening,
            tracing::info_span!(parent: None, "harness.mcp.connection", server = %name),
        );
        match tokio::time::timeout(timeout, opening).await {
            Ok(opened) => opened.map(|(service, tools)| Self {
                service,
                tools,
                _sandbox: kept,
            }),
            Err(_) => Err(unavailable(
                &format!(
                    "did not start and list its tools within {} ms",
                    timeout.as_millis()
                ),
                "connect timeout".to_owned(),
            )),
        }
    }

    /// The connection's tools as portable tools (those whose schema does not compile are
    /// left out, with a warning).
    fn provided(self: &Arc<Self>, server: &McpServer) -> Vec<ProvidedTool> {
        let names: Vec<&str> = self.tools.iter().map(|t| t.name.as_ref()).collect();
        let ids = tool_ids(&server.name, &names);
        let mut provided = Vec::with_capacity(self.tools.len());
        for (tool, id) in self.tools.iter().zip(ids) {
            let annotations = tool.annotations.as_ref();
            let idempotent = annotations.and_then(|a| a.idempotent_hint).unwrap_or(false);
            let read_only = annotations.and_then(|a| a.read_only_hint).unwrap_or(false);
            let description = tool
                .description
                .as_deref()
                .or(tool.title.as_deref())
                .unwrap_or(tool.name.as_ref())
                .to_owned();
            let schema = Value::Object((*tool.input_schema).clone());
            let descriptor = match ToolDescriptor::new(id.clone(), description, schema) {
                Ok(d) => d.with_annotations(
                    ToolAnnotations::default()
                        .with_idempotent(idempotent)
                        .with_side_effects(!read_only),
                ),
                Err(e) => {
                    tracing::warn!(server = %server.name, tool = %tool.name, error = %e, "an MCP tool's input schema does not compile; the tool is left out");
                    continue;
                }
            };
            let mut policy = server.policy_of(&tool.name);
            // Retries are for idempotent tools only: a policy that would retry another one
            // runs it once.
            if policy.check(&descriptor).is_err() {
                policy = policy.retries(0);
            }
            provided.push(ProvidedTool::new(
                Arc::new(McpTool {
                    connection: Arc::clone(self),
                    name: tool.name.to_string(),
                    server: server.name.clone(),
                    descriptor,
                }),
                policy,
            ));
        }
        provided
    }
}

/// One tool of one server.
struct McpTool {
    connection: Arc<Connection>,
    /// The server's own name for it.
    name: String,
    server: String,
    descriptor: ToolDescriptor,
}

impl PortableTool for McpTool {
    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    fn invoke(&self, arguments: Value, _ctx: ToolCallContext) -> BoxFuture<'_, ToolOutcome> {
        let arguments = match arguments {
            Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        let params = CallToolRequestParams::new(self.name.clone()).with_arguments(arguments);
        Box::pin(async move {
            // Dropping this future (a cancel, a deadline) sends `notifications/cancelled`.
            match self.connection.service.peer().call_tool(params).await {
                Ok(result) => outcome(result),
                Err(e) => failure(&self.server, &e),
            }
        })
    }
}

/// A call's result as the tool's outcome: its structured content, else its text (one text
/// block as a string), else its blocks as JSON; a result with `isError`, a failure with its
/// text.
fn outcome(result: CallToolResult) -> ToolOutcome {
    let texts: Vec<&str> = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect();
    if result.is_error == Some(true) {
        let message = if texts.is_empty() {
            "the tool reported an error without a message".to_owned()
        } else {
            texts.join("\n")
        };
        return ToolOutcome::Failure(BoundedFailure::new(message));
    }
    if let Some(structured) = result.structured_content {
        return ToolOutcome::Success(structured);
    }
    if texts.len() == result.content.len() {
        return ToolOutcome::Success(Value::String(texts.join("\n")));
    }
    ToolOutcome::Success(serde_json::to_value(&result.content).unwrap_or(Value::Null))
}

fn failure(server: &str, error: &ServiceError) -> ToolOutcome {
    let failure = match error {
        ServiceError::McpError(e) => BoundedFailure::new(format!(
            "tool server `{server}` refused the call: {}",
            e.message
        )),
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => BoundedFailure::new(
            format!("the connection to tool server `{server}` was lost during the call"),
        )
        .with_retryable(true),
        ServiceError::Timeout { .. } => {
            BoundedFailure::new(format!("tool server `{server}` did not answer in time"))
                .with_retryable(true)
        }
        other => {
            tracing::debug!(%server, error = %other, "an MCP call failed");
            BoundedFailure::new(format!("the call to tool server `{server}` failed"))
        }
    };
    ToolOutcome::Failure(failure)
}

/// Several servers' providers, by name (checked unique), for a tool set.
///
/// # Errors
/// When two servers share a name or one is refused ([`McpProvider::new`]).
pub fn providers(
    servers: impl IntoIterator<Item = McpServer>,
) -> Result<Vec<McpProvider>, HarnessError> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for server in servers {
        if !seen.insert(server.name.clone()) {
            return Err(crate::config::invalid(format!(
                "two MCP servers are named `{}`",
                server.name
            )));
        }
        out.push(McpProvider::new(server)?);
    }
    Ok(out)
}
