//! [`AcpAgent`], the operator's configuration: how to start an agent, what to serve it, which
//! session mode and configuration options its sessions get and which of those a caller may
//! choose; [`AcpOptions`], what a caller may set per execution: which of the operator's agents
//! runs, and the modes and options the operator lets callers pick.
//!
//! The split is a security boundary: a caller's execution request never chooses the program
//! that runs, its working directory (the file workspace) or which host variables it sees.
//! The operator registers agents by name when constructing
//! [`AcpAdapter`](crate::AcpAdapter); a request names one of them at most. Its options are
//! checked against [`AcpOptions`]' schema, which rejects every unknown field, so a request
//! naming `command`, `cwd` or `env` is refused at preflight (`OPTIONS_INVALID`) before any
//! process starts.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::manifest::ValidatorCell;
use harness_macros::AdapterOptions;
use harness_sandbox::Sandbox;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The default cancel grace period, in milliseconds.
pub const DEFAULT_CANCEL_GRACE_MS: u64 = 2_000;

/// The default [`AcpAgent::replay_quiet_ms`].
pub const DEFAULT_REPLAY_QUIET_MS: u64 = 100;

/// The session modes known to ask before running tools, by the id their agents give them:
/// `default` (Claude Code's and Gemini CLI's default modes), `read-only` (Codex: approval
/// before edits, commands and network access) and `ask`. [`AcpAgent::asking_modes`] replaces
/// the list for one agent.
pub const ASKING_MODES: [&str; 3] = ["default", "read-only", "ask"];

/// Who decides whether the agent's tool calls wait for the caller's approval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalPolicy {
    /// Ask before running tools: sessions run in a mode that asks (the chosen mode must be one
    /// of the [asking modes](AcpAgent::asking_modes); with none chosen, the adapter selects
    /// the agent's first asking mode, or fails the start naming the modes offered when it has
    /// none). An agent that offers no modes is taken to ask, as ACP's permission requests
    /// intend. `interrupt.tool_approval` is reported `native`.
    #[default]
    Ask,
    /// The agent's mode decides (it may run tools without asking): permission requests the
    /// agent does send still become approvals, but `interrupt.tool_approval` is reported
    /// `unsupported`, since nothing guarantees them.
    Agent,
}

/// A value for one of the agent's session configuration options
/// (`session/set_config_option`): a boolean toggle, or the id of a select option's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, AdapterOptions)]
#[serde(untagged)]
pub enum ConfigValue {
    /// For a `boolean` option.
    Bool(bool),
    /// For a `select` option: one of its values' ids.
    Id(String),
}

/// What the adapter does with the agent's `fs/*` requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FileAccess {
    /// Decline every file request (the client advertises no file capability).
    #[default]
    Decline,
    /// Serve `fs/read_text_file` inside the workspace; decline writes.
    Read,
    /// Serve `fs/read_text_file` and `fs/write_text_file` inside the workspace.
    ReadWrite,
}

impl FileAccess {
    /// Whether reads are served.
    #[must_use]
    pub fn reads(self) -> bool {
        matches!(self, Self::Read | Self::ReadWrite)
    }

    /// Whether writes are served.
    #[must_use]
    pub fn writes(self) -> bool {
        matches!(self, Self::ReadWrite)
    }
}

/// How the operator runs the agent: fixed per [`AcpAdapter`](crate::AcpAdapter), never
/// chosen by a caller.
///
/// Terminal requests (`terminal/*`) are always declined: the client advertises no terminal
/// capability.
///
/// ```
/// use harness_acp::{AcpAgent, FileAccess};
/// let agent = AcpAgent::new(["my-agent", "--acp"], "/srv/workspace")
///     .allow_env("PATH")
///     .with_files(FileAccess::Read);
/// assert_eq!(agent.command, ["my-agent", "--acp"]);
/// agent.check().unwrap();
///
/// // From the operator's configuration file, with the same checks.
/// let parsed = AcpAgent::from_value(&serde_json::json!({
///     "command": ["my-agent", "--acp"],
///     "cwd": "/srv/workspace",
///     "env": ["PATH"],
///     "files": "read",
/// })).unwrap();
/// assert_eq!(parsed, agent);
/// let err = AcpAgent::from_value(&serde_json::json!({"command": ["a"], "cwd": "/", "shell": true}));
/// assert!(err.is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AcpAgent {
    /// The agent's argv: program, then arguments. Not run through a shell.
    pub command: Vec<String>,
    /// The agent's working directory, the ACP session's `cwd` and the file workspace: an
    /// absolute path to an existing directory.
    pub cwd: PathBuf,
    /// Names of host environment variables copied to the agent; nothing else is inherited.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Variables the operator sets for the agent (a `HOME` of its own, a config directory, a
    /// model server's address or key), after those copied from `env`. Values are never
    /// printed (`Debug` shows the names).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set_env: BTreeMap<String, String>,
    /// How long a cancelled turn may take to end before the process group is terminated,
    /// then killed.
    #[serde(default = "default_grace")]
    pub cancel_grace_ms: u64,
    /// What to do with the agent's file requests.
    #[serde(default)]
    pub files: FileAccess,
    /// Whether tool calls wait for the caller's approval; see [`ApprovalPolicy`].
    #[serde(default)]
    pub approval: ApprovalPolicy,
    /// The session mode (`session/set_mode`) sessions run in, unless a caller picks one of
    /// `caller_modes`; it must be among the modes the agent offers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The modes a caller may pick (`{"mode": ...}` in a request's options).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub caller_modes: Vec<String>,
    /// The ids of this agent's modes that ask before running tools; absent, [`ASKING_MODES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asking_modes: Option<Vec<String>>,
    /// Session configuration options (`session/set_config_option`) set on every session:
    /// option id → value. Each must be an option the agent offers, with a value it offers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config_options: BTreeMap<String, ConfigValue>,
    /// The ids of the configuration options a caller may set (`{"config": {...}}`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub caller_config_options: Vec<String>,
    /// After `session/load` answers, updates for the loaded session are still taken as replay
    /// (not delivered) until none arrived for this long (at most
    /// [`REPLAY_SETTLE_LIMIT`](crate::REPLAY_SETTLE_LIMIT)): Gemini CLI sends part of its
    /// replay after the answer. `0` ends the replay at the answer, as ACP specifies; each
    /// continued conversation waits this long before its prompt is sent.
    #[serde(default = "default_replay_quiet")]
    pub replay_quiet_ms: u64,
    /// MCP servers the agent's sessions get (`mcpServers` of `session/new` and
    /// `session/load`): the agent connects to them and offers their tools to its model. Their
    /// headers and variables are credentials that never reach the agent: a server with some
    /// is served to it by the control plane's MCP relay instead (see [`AcpMcpTransport`]).
    /// An HTTP server, and a relayed one, needs an agent that negotiates
    /// `mcpCapabilities.http` (the start fails saying so otherwise). Header and variable
    /// values are never printed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<AcpMcpServer>,
    /// The operator vouches that this agent asks for form input (ACP's form-mode
    /// `elicitation/create`). ACP lets a client offer elicitation but gives an agent no way
    /// to say it uses it, so without this `interrupt.form_input` is reported unsupported for
    /// the agent, and a request requiring it is refused at preflight instead of waiting for
    /// a form that never comes. Forms the agent sends are answered either way.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub elicitation: bool,
    /// The operator vouches that this agent continues the W3C trace context the adapter sends
    /// in `session/prompt`'s `_meta`. The context is sent either way; without this,
    /// `observability.trace_propagation` is reported unsupported for the agent, since
    /// nothing shows that the trace goes on inside it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trace_context: bool,
    /// Where, under `cwd`, this agent reads skill folders (`<dir>/<name>/SKILL.md`): an
    /// execution's granted skills are written there for its life (see
    /// [`crate::skills`]). [`CLAUDE_SKILLS_DIR`](crate::CLAUDE_SKILLS_DIR) for Claude
    /// Code, [`CODEX_SKILLS_DIR`](crate::CODEX_SKILLS_DIR) for Codex. `None` (the default:
    /// ACP gives an agent no way to say where it looks): `skills` is reported unsupported,
    /// and a request asking for skills is refused at preflight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills_dir: Option<PathBuf>,
    /// The operator's sandbox the agent runs in (see [`in_sandbox`](Self::in_sandbox)); `None`:
    /// the agent runs as a plain child process. Not part of the serialized form: a
    /// configuration file names a profile (`sandbox = "<name>"`), which the server resolves.
    #[serde(skip)]
    #[schemars(skip)]
    pub sandbox: Option<Sandbox>,
    /// The worker program that hosts this agent's whole runtime inside its sandbox (see
    /// [`hosted_by_worker`](Self::hosted_by_worker)); `None`: only the agent runs in the
    /// sandbox, and the ACP client in the control plane. Not part of the serialized form,
    /// like `sandbox`.
    #[serde(skip)]
    #[schemars(skip)]
    pub worker: Option<PathBuf>,
}

/// One of the operator's MCP servers for an ACP agent's sessions.
///
/// A server that carries no credential (a stdio server without `env`, an HTTP server without
/// `headers`) is forwarded to the agent as configured: the agent starts or reaches it itself.
/// One that does is not: its credentials stay with the control plane (see
/// [`AcpMcpTransport`] and [`crate::mcp`]).
///
/// ```
/// use harness_acp::AcpMcpServer;
/// let server: AcpMcpServer = serde_json::from_value(serde_json::json!({
///     "name": "everything",
///     "transport": {"stdio": {"command": ["node", "/srv/mcp/everything.js", "stdio"], "env": {"LOG": "quiet"}}}
/// })).unwrap();
/// assert_eq!(server.name, "everything");
/// assert!(!format!("{server:?}").contains("quiet"));
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AcpMcpServer {
    /// The server's name, as the agent shows it (non-empty, unique per agent).
    pub name: String,
    /// How it is reached.
    pub transport: AcpMcpTransport,
}

/// How an MCP server of an ACP agent is reached, and what the agent is given of it.
///
/// Variables and headers are credentials (API tokens, `Authorization`), and the agent never
/// gets them: a server with some is served to the agent by the control plane's MCP relay, on
/// a loopback URL (`http://127.0.0.1:<port>/mcp/<random token>`), which needs an agent that
/// negotiates `mcpCapabilities.http` (the start fails naming the server otherwise). The
/// `tool.mcp` capability's constraints say which servers are `forwarded`, `proxied` and
/// `bridged`. See [`crate::mcp`] for the relay's bounds.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum AcpMcpTransport {
    /// A program speaking MCP over its stdio. Without `env`, the agent is given the command
    /// and starts it itself (**forwarded**). With `env`, the control plane runs it, one
    /// process per MCP session, with these variables and those the agent inherits from the
    /// host (`AcpAgent::env`), in the agent's working directory (in a sandbox of the agent's
    /// profile for a sandboxed agent, which must allow the variables' names), and serves it
    /// to the agent over streamable HTTP (**bridged**): the agent's process, its children
    /// and their `/proc` never hold a value.
    Stdio {
        /// The program and its arguments.
        command: Vec<String>,
        /// Variables the program gets; never given to the agent.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        env: BTreeMap<String, String>,
    },
    /// A streamable-HTTP server. Without `headers`, the agent is given the URL and reaches it
    /// itself (**forwarded**). With `headers`, the control plane proxies it: the agent is
    /// given the relay's URL, and the relay forwards its requests to `url` with the headers
    /// added (**proxied**); an `https://` URL then needs harness-acp's `tls` feature (refused
    /// by [`AcpAgent::check`] without it).
    Http {
        /// Its URL.
        url: String,
        /// Headers sent to the server; never given to the agent.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        headers: BTreeMap<String, String>,
    },
}

impl fmt::Debug for AcpMcpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AcpMcpServer")
            .field("name", &self.name)
            .field("transport", &self.transport)
            .finish()
    }
}

impl fmt::Debug for AcpMcpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stdio { command, env } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("env", &env.keys().collect::<Vec<_>>())
                .finish(),
            Self::Http { url, headers } => f
                .debug_struct("Http")
                .field("url", url)
                .field("headers", &headers.keys().collect::<Vec<_>>())
                .finish(),
        }
    }
}

impl AcpMcpServer {
    /// A stdio server the agent starts with `command`.
    #[must_use]
    pub fn stdio(
        name: impl Into<String>,
        command: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            name: name.into(),
            transport: AcpMcpTransport::Stdio {
                command: command.into_iter().map(Into::into).collect(),
                env: BTreeMap::new(),
            },
        }
    }

    /// A streamable-HTTP server at `url`.
    #[must_use]
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            transport: AcpMcpTransport::Http {
                url: url.into(),
                headers: BTreeMap::new(),
            },
        }
    }

    /// Whether the agent reaches it over HTTP.
    #[must_use]
    pub fn is_http(&self) -> bool {
        matches!(self.transport, AcpMcpTransport::Http { .. })
    }

    fn check(&self) -> Result<(), HarnessError> {
        if self.name.trim().is_empty() {
            return Err(invalid_agent(
                "an MCP server in `mcpServers` has an empty name",
            ));
        }
        match &self.transport {
            AcpMcpTransport::Stdio { command, env } => {
                if command.first().is_none_or(|p| p.is_empty()) {
                    return Err(invalid_agent(&format!(
                        "MCP server `{}` has an empty command",
                        self.name
                    )));
                }
                if let Some(bad) = env
                    .keys()
                    .find(|n| n.is_empty() || n.contains('=') || n.contains('\0'))
                {
                    return Err(invalid_agent(&format!(
                        "MCP server `{}` sets an invalid variable name {bad:?}",
                        self.name
                    )));
                }
                if let Some((bad, _)) = env.iter().find(|(_, v)| v.contains('\0')) {
                    return Err(invalid_agent(&format!(
                        "MCP server `{}` sets {bad:?} to a value with a NUL byte",
                        self.name
                    )));
                }
            }
            AcpMcpTransport::Http { url, headers } => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(invalid_agent(&format!(
                        "MCP server `{}`: {url:?} is not an http:// or https:// URL",
                        self.name
                    )));
                }
                if !headers.is_empty() {
                    crate::mcp::check_proxied(&self.name, url, headers)
                        .map_err(|why| invalid_agent(&why))?;
                }
            }
        }
        Ok(())
    }
}

impl fmt::Debug for AcpAgent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AcpAgent")
            .field("command", &self.command)
            .field("cwd", &self.cwd)
            .field("env", &self.env)
            .field("set_env", &self.set_env.keys().collect::<Vec<_>>())
            .field("cancel_grace_ms", &self.cancel_grace_ms)
            .field("files", &self.files)
            .field("approval", &self.approval)
            .field("mode", &self.mode)
            .field("caller_modes", &self.caller_modes)
            .field("asking_modes", &self.asking_modes)
            .field("config_options", &self.config_options)
            .field("caller_config_options", &self.caller_config_options)
            .field("replay_quiet_ms", &self.replay_quiet_ms)
            .field("mcp_servers", &self.mcp_servers)
            .field("elicitation", &self.elicitation)
            .field("trace_context", &self.trace_context)
            .field("sandbox", &self.sandbox.as_ref().map(Sandbox::profile))
            .field("worker", &self.worker)
            .finish()
    }
}

/// What a caller may set per execution: which of the operator's agents runs, by name.
///
/// Every other field a request names is refused (`deny_unknown_fields`, in the published
/// schema too): how an agent runs is the operator's [`AcpAgent`].
///
/// ```
/// use harness_acp::AcpOptions;
/// assert_eq!(AcpOptions::from_value(&serde_json::json!({})).unwrap().agent, None);
/// assert_eq!(AcpOptions::from_value(&serde_json::Value::Null).unwrap().agent, None);
/// let named = AcpOptions::from_value(&serde_json::json!({"agent": "gemini"})).unwrap();
/// assert_eq!(named.agent.as_deref(), Some("gemini"));
/// let err = AcpOptions::from_value(&serde_json::json!({"command": ["/bin/sh"]})).unwrap_err();
/// assert_eq!(err.code().as_str(), "OPTIONS_INVALID");
/// ```
#[derive(
    Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema, AdapterOptions,
)]
#[serde(deny_unknown_fields)]
pub struct AcpOptions {
    /// The name of an agent the operator registered
    /// ([`AcpAdapter::with_agent`](crate::AcpAdapter::with_agent)); absent, the adapter's
    /// default agent ([`DEFAULT_AGENT`](crate::DEFAULT_AGENT)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// A session mode among the agent's
    /// [`caller_modes`](AcpAgent::caller_modes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Session configuration options among the agent's
    /// [`caller_config_options`](AcpAgent::caller_config_options): option id → value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, ConfigValue>,
}

impl AcpOptions {
    /// Options naming the operator's agent `name`.
    #[must_use]
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            agent: Some(name.into()),
            ..Self::default()
        }
    }

    /// Also picks the session mode `mode` (one of the agent's `caller_modes`).
    #[must_use]
    pub fn with_mode(mut self, mode: impl Into<String>) -> Self {
        self.mode = Some(mode.into());
        self
    }

    /// Also sets the configuration option `id` (one of the agent's `caller_config_options`).
    #[must_use]
    pub fn with_config(mut self, id: impl Into<String>, value: ConfigValue) -> Self {
        self.config.insert(id.into(), value);
        self
    }

    /// The options as JSON, for an execution request.
    #[must_use]
    pub fn to_value(&self) -> Value {
        // Plain data: serializing it to a `Value` cannot fail.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Parses a request's options: `null`, or an object with at most `agent`.
    ///
    /// # Errors
    /// A `configuration` error (`OPTIONS_INVALID`) naming the field a caller may not set.
    pub fn from_value(options: &Value) -> Result<Self, HarnessError> {
        if options.is_null() {
            return Ok(Self::default());
        }
        let parsed = Self::deserialize(options).map_err(|e| {
            invalid(&format!(
                "{e}; a request names at most an `agent` the operator registered, a `mode` and \
                 `config` options the operator lets callers choose: how an agent runs \
                 (command, cwd, env, files, cancel grace, approval) is the operator's AcpAgent"
            ))
        })?;
        // `Deserialize` also takes a struct from a JSON array (`[]`, `["x"]`): what the
        // published schema refuses is refused here too (found by the `options` fuzz target).
        static SCHEMA: ValidatorCell = ValidatorCell::new();
        SCHEMA
            .validate::<Self>(options)
            .map_err(|e| invalid(&e.to_string()))?;
        Ok(parsed)
    }
}

fn default_grace() -> u64 {
    DEFAULT_CANCEL_GRACE_MS
}

fn default_replay_quiet() -> u64 {
    DEFAULT_REPLAY_QUIET_MS
}

/// The session mode and configuration options one execution's session gets: the operator's,
/// overridden where the caller may choose.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SessionSetup {
    pub(crate) mode: Option<String>,
    pub(crate) config: BTreeMap<String, ConfigValue>,
    /// Whether the session must run in a mode that asks before running tools.
    pub(crate) ask: bool,
}

impl AcpAgent {
    /// The search path the agent's program is looked up on: the `PATH` the agent is given
    /// (`setEnv`), else this process's (the lookup of a child without its own uses it).
    #[must_use]
    pub fn search_path(&self) -> std::ffi::OsString {
        self.set_env
            .get("PATH")
            .map(std::ffi::OsString::from)
            .or_else(|| std::env::var_os("PATH"))
            .unwrap_or_default()
    }

    /// The agent `command` run in `cwd`, with an empty environment.
    #[must_use]
    pub fn new(
        command: impl IntoIterator<Item = impl Into<String>>,
        cwd: impl AsRef<Path>,
    ) -> Self {
        Self {
            command: command.into_iter().map(Into::into).collect(),
            cwd: cwd.as_ref().to_path_buf(),
            env: Vec::new(),
            set_env: BTreeMap::new(),
            cancel_grace_ms: DEFAULT_CANCEL_GRACE_MS,
            files: FileAccess::Decline,
            approval: ApprovalPolicy::Ask,
            mode: None,
            caller_modes: Vec::new(),
            asking_modes: None,
            config_options: BTreeMap::new(),
            caller_config_options: Vec::new(),
            replay_quiet_ms: DEFAULT_REPLAY_QUIET_MS,
            mcp_servers: Vec::new(),
            elicitation: false,
            trace_context: false,
            skills_dir: None,
            sandbox: None,
            worker: None,
        }
    }

    /// Forwards the MCP server `server` to the agent's sessions.
    #[must_use]
    pub fn with_mcp_server(mut self, server: AcpMcpServer) -> Self {
        self.mcp_servers.push(server);
        self
    }

    /// Also sets the variable `name` to `value` for the agent.
    #[must_use]
    pub fn set_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.set_env.insert(name.into(), value.into());
        self
    }

    /// Sets the approval policy.
    #[must_use]
    pub fn with_approval(mut self, approval: ApprovalPolicy) -> Self {
        self.approval = approval;
        self
    }

    /// Runs sessions in the session mode `mode`.
    #[must_use]
    pub fn with_mode(mut self, mode: impl Into<String>) -> Self {
        self.mode = Some(mode.into());
        self
    }

    /// Lets callers pick the session mode `mode`.
    #[must_use]
    pub fn allow_caller_mode(mut self, mode: impl Into<String>) -> Self {
        self.caller_modes.push(mode.into());
        self
    }

    /// Declares which of this agent's modes ask before running tools (replacing
    /// [`ASKING_MODES`]).
    #[must_use]
    pub fn with_asking_modes(mut self, modes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.asking_modes = Some(modes.into_iter().map(Into::into).collect());
        self
    }

    /// Sets the configuration option `id` to `value` on every session.
    #[must_use]
    pub fn with_config(mut self, id: impl Into<String>, value: ConfigValue) -> Self {
        self.config_options.insert(id.into(), value);
        self
    }

    /// Lets callers set the configuration option `id`.
    #[must_use]
    pub fn allow_caller_config(mut self, id: impl Into<String>) -> Self {
        self.caller_config_options.push(id.into());
        self
    }

    /// Sets how long a replay must be quiet after `session/load` answers.
    #[must_use]
    pub fn with_replay_quiet(mut self, quiet: Duration) -> Self {
        self.replay_quiet_ms = u64::try_from(quiet.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// How long a replay must be quiet after `session/load` answers.
    #[must_use]
    pub fn replay_quiet(&self) -> Duration {
        Duration::from_millis(self.replay_quiet_ms)
    }

    /// Whether the session mode `mode` asks before running tools.
    #[must_use]
    pub fn asks(&self, mode: &str) -> bool {
        match &self.asking_modes {
            Some(modes) => modes.iter().any(|m| m == mode),
            None => ASKING_MODES.contains(&mode),
        }
    }

    /// What a caller's `options` choose for the session, checked against what this agent
    /// lets callers choose.
    pub(crate) fn setup(&self, options: &AcpOptions) -> Result<SessionSetup, HarnessError> {
        if let Some(mode) = &options.mode
            && !self.caller_modes.contains(mode)
        {
            return Err(invalid(&format!(
                "the caller may not choose session mode {mode:?}; {}",
                allowed("modes", &self.caller_modes)
            )));
        }
        if let Some(id) = options
            .config
            .keys()
            .find(|id| !self.caller_config_options.contains(id))
        {
            return Err(invalid(&format!(
                "the caller may not set configuration option {id:?}; {}",
                allowed("configuration options", &self.caller_config_options)
            )));
        }
        let mut config = self.config_options.clone();
        config.extend(options.config.clone());
        Ok(SessionSetup {
            mode: options.mode.clone().or_else(|| self.mode.clone()),
            config,
            ask: self.approval == ApprovalPolicy::Ask,
        })
    }

    /// Also copies the host variable `name` to the agent.
    #[must_use]
    pub fn allow_env(mut self, name: impl Into<String>) -> Self {
        self.env.push(name.into());
        self
    }

    /// Sets the cancel grace period.
    #[must_use]
    pub fn with_cancel_grace(mut self, grace: Duration) -> Self {
        self.cancel_grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// Sets the file access policy.
    #[must_use]
    pub fn with_files(mut self, files: FileAccess) -> Self {
        self.files = files;
        self
    }

    /// Vouches that the agent asks for form input: see [`elicitation`](Self::elicitation).
    #[must_use]
    pub const fn with_elicitation(mut self) -> Self {
        self.elicitation = true;
        self
    }

    /// Vouches that the agent continues the trace context: see
    /// [`trace_context`](Self::trace_context).
    #[must_use]
    pub const fn with_trace_context(mut self) -> Self {
        self.trace_context = true;
        self
    }

    /// Delivers granted skills to this agent in `dir` under its `cwd`: see
    /// [`skills_dir`](Self::skills_dir).
    ///
    /// ```
    /// use harness_acp::{AcpAgent, CLAUDE_SKILLS_DIR};
    /// let agent = AcpAgent::new(["claude-agent-acp"], "/srv/ws").with_skills_dir(CLAUDE_SKILLS_DIR);
    /// agent.check().unwrap();
    /// let err = agent.with_skills_dir("../elsewhere").check().unwrap_err();
    /// assert!(err.message().contains("skillsDir"));
    /// ```
    #[must_use]
    pub fn with_skills_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.skills_dir = Some(dir.into());
        self
    }

    /// Runs the agent in `sandbox`, an operator's profile: the agent sees its `cwd` (the
    /// workspace) and what the profile shows, reaches what the profile allows, and is torn
    /// down at the profile's limits. Every variable the agent is given (`env`, `setEnv`) must
    /// be allowed by the profile ([`check`](Self::check) refuses the rest).
    /// `runtime.sandbox_isolation` is then reported native, with the profile's terms as
    /// constraints.
    ///
    /// ```
    /// use harness_acp::AcpAgent;
    /// use harness_sandbox::{Sandbox, SandboxProfile};
    /// let sandbox = Sandbox::with_bwrap(SandboxProfile::default(), "/usr/bin/bwrap");
    /// let agent = AcpAgent::new(["/usr/bin/my-agent"], "/srv/ws").in_sandbox(sandbox.clone());
    /// agent.check().unwrap();
    /// let leaky = agent.set_env("AWS_SECRET_ACCESS_KEY", "x");
    /// assert!(leaky.check().unwrap_err().message().contains("AWS_SECRET_ACCESS_KEY"));
    /// ```
    #[must_use]
    pub fn in_sandbox(mut self, sandbox: Sandbox) -> Self {
        self.sandbox = Some(sandbox);
        self
    }

    /// Hosts the agent's whole runtime in its sandbox: `worker` (the `acp-sandbox-worker`
    /// program this crate builds, an absolute path) runs in the sandbox as the ACP client,
    /// starts the agent there, and reaches the control plane only over the Sandbox Worker
    /// Protocol v1 ([`harness_sandbox::worker`]): the code that parses the agent's output
    /// runs inside with it. Needs [`in_sandbox`](Self::in_sandbox); the agent's program must
    /// be an absolute path or on its search path, and is made visible in the sandbox.
    ///
    /// ```
    /// use harness_acp::AcpAgent;
    /// use harness_sandbox::{Sandbox, SandboxProfile};
    /// let sandbox = Sandbox::with_bwrap(SandboxProfile::default(), "/usr/bin/bwrap");
    /// let agent = AcpAgent::new(["/usr/bin/my-agent"], "/srv/ws");
    /// let hosted = agent.clone().hosted_by_worker("/usr/libexec/harness/acp-sandbox-worker");
    /// assert!(hosted.check().unwrap_err().message().contains("sandbox"));
    /// assert!(hosted.in_sandbox(sandbox).check().is_ok());
    /// ```
    #[must_use]
    pub fn hosted_by_worker(mut self, worker: impl Into<PathBuf>) -> Self {
        self.worker = Some(worker.into());
        self
    }

    /// The cancel grace period.
    #[must_use]
    pub fn cancel_grace(&self) -> Duration {
        Duration::from_millis(self.cancel_grace_ms)
    }

    /// Parses and checks the operator's configuration.
    ///
    /// # Errors
    /// A `configuration` error (`OPTIONS_INVALID`) for unknown fields or what
    /// [`check`](Self::check) refuses.
    pub fn from_value(agent: &Value) -> Result<Self, HarnessError> {
        let parsed = Self::deserialize(agent).map_err(|e| invalid_agent(&format!("{e}")))?;
        parsed.check()?;
        Ok(parsed)
    }

    /// Checks the configuration: a program, an absolute `cwd`, valid variable names.
    ///
    /// # Errors
    /// A `configuration` error (`OPTIONS_INVALID`) naming what is wrong.
    pub fn check(&self) -> Result<(), HarnessError> {
        match self.command.first() {
            Some(program) if !program.is_empty() => {}
            _ => return Err(invalid_agent("`command` needs a program")),
        }
        if !self.cwd.is_absolute() {
            return Err(invalid_agent("`cwd` must be an absolute path"));
        }
        let bad_name = |n: &&String| n.is_empty() || n.contains('=') || n.contains('\0');
        if let Some(bad) = self.env.iter().find(bad_name) {
            return Err(invalid_agent(&format!(
                "`env` has an invalid variable name {bad:?}"
            )));
        }
        if let Some(bad) = self.set_env.keys().find(bad_name) {
            return Err(invalid_agent(&format!(
                "`setEnv` has an invalid variable name {bad:?}"
            )));
        }
        if let Some((name, _)) = self.set_env.iter().find(|(_, v)| v.contains('\0')) {
            return Err(invalid_agent(&format!(
                "`setEnv` sets {name:?} to a value with a NUL byte"
            )));
        }
        if let Some(dir) = &self.skills_dir
            && (dir.as_os_str().is_empty()
                || !dir
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_))))
        {
            return Err(invalid_agent(&format!(
                "`skillsDir` {} must be a relative path inside `cwd` (no `..`, not absolute), \
                 such as `.claude/skills`",
                dir.display()
            )));
        }
        match (&self.worker, &self.sandbox) {
            (Some(_), None) => {
                return Err(invalid_agent(
                    "a worker hosts the agent's runtime in its sandbox: give the agent a \
                     sandbox profile too (`sandbox`)",
                ));
            }
            (Some(worker), Some(_)) if !worker.is_absolute() => {
                return Err(invalid_agent(&format!(
                    "the worker program `{}` must be an absolute path",
                    worker.display()
                )));
            }
            _ => {}
        }
        if let Some(sandbox) = &self.sandbox {
            let names = self.env.iter().chain(self.set_env.keys());
            sandbox
                .profile()
                .check_env(names.map(String::as_str))
                .map_err(|e| invalid_agent(e.message()))?;
        }
        let mut names = std::collections::BTreeSet::new();
        for server in &self.mcp_servers {
            server.check()?;
            // A bridged server runs in a sandbox of the agent's profile, with the variables
            // the agent inherits and its own.
            if let (Some(sandbox), AcpMcpTransport::Stdio { env, .. }) =
                (&self.sandbox, &server.transport)
                && !env.is_empty()
            {
                let names = self.env.iter().chain(env.keys());
                sandbox
                    .profile()
                    .check_env(names.map(String::as_str))
                    .map_err(|e| {
                        invalid_agent(&format!(
                            "MCP server `{}` runs in a sandbox of the agent's profile (its \
                             variables are credentials, kept from the agent): {}",
                            server.name,
                            e.message()
                        ))
                    })?;
            }
            if !names.insert(server.name.as_str()) {
                return Err(invalid_agent(&format!(
                    "two MCP servers in `mcpServers` are named `{}`",
                    server.name
                )));
            }
        }
        if self.approval == ApprovalPolicy::Ask {
            let modes = self.mode.iter().chain(&self.caller_modes);
            if let Some(mode) = modes.into_iter().find(|m| !self.asks(m)) {
                return Err(invalid_agent(&format!(
                    "session mode {mode:?} is not known to ask before running tools, yet the \
                     approval policy is `ask`: declare it in `askingModes` if it asks, or set \
                     `approval` to `agent`"
                )));
            }
        }
        Ok(())
    }
}

fn allowed(what: &str, ids: &[String]) -> String {
    if ids.is_empty() {
        format!("the operator lets callers choose no {what}")
    } else {
        format!(
            "the operator lets callers choose the {what} {}",
            ids.join(", ")
        )
    }
}

fn invalid(detail: &str) -> HarnessError {
    HarnessError::new(
        ErrorCategory::Configuration,
        format!("invalid options for the acp adapter: {detail}"),
    )
    .with_code(ErrorCode::OPTIONS_INVALID)
}

fn invalid_agent(detail: &str) -> HarnessError {
    HarnessError::new(
        ErrorCategory::Configuration,
        format!("invalid agent configuration for the acp adapter: {detail}"),
    )
    .with_code(ErrorCode::OPTIONS_INVALID)
}
