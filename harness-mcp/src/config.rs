//! [`McpServer`]: the operator's configuration of one MCP server.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::tool::{ToolId, ToolPolicy};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The default [`McpServer::connect_timeout_ms`].
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 10_000;
/// The most tools one server may offer; the rest are not listed.
pub const MAX_TOOLS: usize = 512;

/// How to reach an MCP server.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum McpTransport {
    /// A program the adapter starts, spoken to over its stdin and stdout.
    Stdio {
        /// The program and its arguments (not run through a shell).
        command: Vec<String>,
        /// Its working directory (absolute); the adapter's own when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cwd: Option<PathBuf>,
        /// Names of host environment variables copied to it; nothing else is inherited.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        env: Vec<String>,
        /// Variables the operator sets for it. Values are never printed.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        set_env: BTreeMap<String, String>,
    },
    /// A server over MCP's streamable HTTP (`http://host:port/mcp`).
    Http {
        /// The endpoint URL.
        url: String,
        /// Headers the operator sends with every request. Values are never printed.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        headers: BTreeMap<String, String>,
    },
}

impl fmt::Debug for McpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stdio {
                command,
                cwd,
                env,
                set_env,
            } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("cwd", cwd)
                .field("env", env)
                .field("set_env", &set_env.keys().collect::<Vec<_>>())
                .finish(),
            Self::Http { url, headers } => f
                .debug_struct("Http")
                .field("url", url)
                .field("headers", &headers.keys().collect::<Vec<_>>())
                .finish(),
        }
    }
}

/// Where a caller's credential for the server goes: the server then takes one connection
/// per execution (its own credential's), instead of one shared by every execution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum CallerCredential {
    /// An HTTP server's request header: `Authorization` sends `Bearer <credential>`,
    /// another header the credential as it is.
    Header(String),
    /// A stdio server's environment variable.
    Env(String),
}

/// One MCP server, as the operator configures it.
///
/// Its tools become portable tools named `<name>.<tool>` (the tool's name made a tool-id
/// segment: lowercase, `_` for anything else, `camelCase` split; a clash gets `_2`, `_3`
/// in name order), each under [`policy`](Self::policy) or its entry in
/// [`tools`](Self::tools).
///
/// ```
/// use harness_mcp::McpServer;
/// let server = McpServer::from_value(&serde_json::json!({
///     "name": "everything",
///     "transport": {"stdio": {"command": ["node", "dist/index.js", "stdio"], "env": ["PATH"]}},
///     "tools": {"trigger-long-running-operation": {"deadlineMs": 30000}}
/// })).unwrap();
/// assert_eq!(server.name, "everything");
/// let err = McpServer::from_value(&serde_json::json!({
///     "name": "Bad Name", "transport": {"http": {"url": "http://127.0.0.1:3001/mcp"}}
/// })).unwrap_err();
/// assert!(err.message().contains("Bad Name"), "{}", err.message());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpServer {
    /// The server's name: one tool-id segment (`[a-z][a-z0-9_]*`), the provider name its
    /// tools' ids start with, and what a request selects it by.
    pub name: String,
    /// How to reach it.
    pub transport: McpTransport,
    /// The policy of its tools' calls, unless [`tools`](Self::tools) names one.
    #[serde(default)]
    pub policy: ToolPolicy,
    /// Policies of single tools, by the server's tool name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, ToolPolicy>,
    /// Where a caller's credential for this server goes, if it takes one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller_credential: Option<CallerCredential>,
    /// How long starting or connecting, and listing the tools, may take, in milliseconds.
    #[serde(default = "default_connect")]
    pub connect_timeout_ms: u64,
    /// The operator's sandbox a stdio server runs in (see [`in_sandbox`](Self::in_sandbox));
    /// `None`: a plain child process. Not part of the serialized form: a configuration file
    /// names a profile (`sandbox = "<name>"`), which the server resolves.
    #[serde(skip)]
    #[schemars(skip)]
    pub sandbox: Option<harness_sandbox::Sandbox>,
}

fn default_connect() -> u64 {
    DEFAULT_CONNECT_TIMEOUT_MS
}

impl McpServer {
    /// A stdio server `name` running `command`.
    #[must_use]
    pub fn stdio(
        name: impl Into<String>,
        command: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self::with_transport(
            name,
            McpTransport::Stdio {
                command: command.into_iter().map(Into::into).collect(),
                cwd: None,
                env: Vec::new(),
                set_env: BTreeMap::new(),
            },
        )
    }

    /// A streamable-HTTP server `name` at `url`.
    #[must_use]
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self::with_transport(
            name,
            McpTransport::Http {
                url: url.into(),
                headers: BTreeMap::new(),
            },
        )
    }

    fn with_transport(name: impl Into<String>, transport: McpTransport) -> Self {
        Self {
            name: name.into(),
            transport,
            policy: ToolPolicy::new(),
            tools: BTreeMap::new(),
            caller_credential: None,
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
            sandbox: None,
        }
    }

    /// Runs a stdio server in `sandbox`, an operator's profile: the server sees its `cwd`
    /// (required) read-write and what the profile shows, reaches what the profile allows,
    /// and is torn down at the profile's limits; every variable it is given must be allowed
    /// by the profile. The tools' calls still go through their handles in the control plane.
    #[must_use]
    pub fn in_sandbox(mut self, sandbox: harness_sandbox::Sandbox) -> Self {
        self.sandbox = Some(sandbox);
        self
    }

    /// Copies the host variable `name` to a stdio server (nothing else is inherited).
    #[must_use]
    pub fn allow_env(mut self, name: impl Into<String>) -> Self {
        if let McpTransport::Stdio { env, .. } = &mut self.transport {
            env.push(name.into());
        }
        self
    }

    /// Sets `name` to `value` for a stdio server.
    #[must_use]
    pub fn set_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let McpTransport::Stdio { set_env, .. } = &mut self.transport {
            set_env.insert(name.into(), value.into());
        }
        self
    }

    /// Runs a stdio server in `cwd`.
    #[must_use]
    pub fn in_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        if let McpTransport::Stdio { cwd, .. } = &mut self.transport {
            *cwd = Some(dir.into());
        }
        self
    }

    /// The policy of every tool without one of its own.
    #[must_use]
    pub fn with_policy(mut self, policy: ToolPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The policy of the server's tool `tool` (its MCP name).
    #[must_use]
    pub fn with_tool_policy(mut self, tool: impl Into<String>, policy: ToolPolicy) -> Self {
        self.tools.insert(tool.into(), policy);
        self
    }

    /// Takes a caller's credential, sent as `credential` says.
    #[must_use]
    pub fn with_caller_credential(mut self, credential: CallerCredential) -> Self {
        self.caller_credential = Some(credential);
        self
    }

    /// Bounds starting (or connecting) and listing the tools.
    #[must_use]
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// Parses the operator's configuration of a server and [checks](Self::check) it.
    ///
    /// # Errors
    /// `configuration` (`OPTIONS_INVALID`) naming what is wrong.
    pub fn from_value(value: &Value) -> Result<Self, HarnessError> {
        let server =
            Self::deserialize(value).map_err(|e| invalid(format!("invalid MCP server: {e}")))?;
        server.check()?;
        Ok(server)
    }

    /// Checks what no request could fix: the name, the command or URL, the directory,
    /// header and variable names, the credential's place, the timeout.
    ///
    /// # Errors
    /// `configuration` (`OPTIONS_INVALID`) saying what to change.
    pub fn check(&self) -> Result<(), HarnessError> {
        let name = &self.name;
        if name.contains('.') || !ToolId::is_valid(name) {
            return Err(invalid(format!(
                "MCP server name {name:?} is not one tool-id segment: use [a-z][a-z0-9_]* \
                 (its tools become `{name}.<tool>`)"
            )));
        }
        if !(1..=600_000).contains(&self.connect_timeout_ms) {
            return Err(invalid(format!(
                "MCP server `{name}`: connectTimeoutMs is {}: give 1 to 600000",
                self.connect_timeout_ms
            )));
        }
        match &self.transport {
            McpTransport::Stdio {
                command,
                cwd,
                env,
                set_env,
            } => {
                if command.first().is_none_or(|p| p.trim().is_empty()) {
                    return Err(invalid(format!(
                        "MCP server `{name}`: the command is empty: give the program and its \
                         arguments"
                    )));
                }
                if let Some(cwd) = cwd
                    && (!cwd.is_absolute() || !cwd.is_dir())
                {
                    return Err(invalid(format!(
                        "MCP server `{name}`: cwd {} is not an absolute path to a directory",
                        cwd.display()
                    )));
                }
                for var in env.iter().chain(set_env.keys()) {
                    if var.is_empty() || var.contains('=') || var.contains('\0') {
                        return Err(invalid(format!(
                            "MCP server `{name}`: {var:?} is not an environment variable name"
                        )));
                    }
                }
                if let Some(sandbox) = &self.sandbox {
                    if cwd.is_none() {
                        return Err(invalid(format!(
                            "MCP server `{name}` runs in a sandbox: give it a `cwd`, the \
                             workspace it sees (nothing else of the host is there)"
                        )));
                    }
                    let credential = match &self.caller_credential {
                        Some(CallerCredential::Env(var)) => Some(var),
                        _ => None,
                    };
                    let names = env.iter().chain(set_env.keys()).chain(credential);
                    sandbox
                        .profile()
                        .check_env(names.map(String::as_str))
                        .map_err(|e| invalid(format!("MCP server `{name}`: {}", e.message())))?;
                }
                if matches!(self.caller_credential, Some(CallerCredential::Header(_))) {
                    return Err(invalid(format!(
                        "MCP server `{name}` runs over stdio: its caller credential goes in an \
                         environment variable (`{{\"env\": \"NAME\"}}`), not a header"
                    )));
                }
            }
            McpTransport::Http { url, headers } => {
                if self.sandbox.is_some() {
                    return Err(invalid(format!(
                        "MCP server `{name}` is reached over HTTP: there is no process of ours \
                         to sandbox (only a stdio server runs in a sandbox)"
                    )));
                }
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(invalid(format!(
                        "MCP server `{name}`: url {url:?} is not an http:// or https:// URL"
                    )));
                }
                for (header, value) in headers {
                    check_header(name, header, value)?;
                }
                if matches!(self.caller_credential, Some(CallerCredential::Env(_))) {
                    return Err(invalid(format!(
                        "MCP server `{name}` is reached over HTTP: its caller credential goes in \
                         a header (`{{\"header\": \"Authorization\"}}`), not a variable"
                    )));
                }
            }
        }
        match &self.caller_credential {
            Some(CallerCredential::Header(header)) => check_header(name, header, "")?,
            Some(CallerCredential::Env(var)) if var.is_empty() || var.contains('=') => {
                return Err(invalid(format!(
                    "MCP server `{name}`: {var:?} is not an environment variable name"
                )));
            }
            _ => {}
        }
        Ok(())
    }

    /// The policy of the server's tool `tool`.
    pub(crate) fn policy_of(&self, tool: &str) -> ToolPolicy {
        self.tools.get(tool).copied().unwrap_or(self.policy)
    }
}

fn check_header(server: &str, name: &str, value: &str) -> Result<(), HarnessError> {
    if http::HeaderName::from_bytes(name.as_bytes()).is_err()
        || http::HeaderValue::from_str(value).is_err()
    {
        return Err(invalid(format!(
            "MCP server `{server}`: header {name:?} (or its value) is not a valid HTTP header"
        )));
    }
    Ok(())
}

pub(crate) fn invalid(message: impl Into<String>) -> HarnessError {
    HarnessError::new(ErrorCategory::Configuration, message.into())
        .with_code(ErrorCode::OPTIONS_INVALID)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn configurations_are_checked_with_clear_errors() {
        for (bad, named) in [
            (
                json!({"name": "a.b", "transport": {"http": {"url": "http://x/mcp"}}}),
                "a.b",
            ),
            (
                json!({"name": "s", "transport": {"http": {"url": "ftp://x"}}}),
                "ftp",
            ),
            (
                json!({"name": "s", "transport": {"stdio": {"command": []}}}),
                "empty",
            ),
            (
                json!({"name": "s", "transport": {"stdio": {"command": ["x"], "cwd": "relative"}}}),
                "relative",
            ),
            (
                json!({"name": "s", "transport": {"stdio": {"command": ["x"]}}, "callerCredential": {"header": "Authorization"}}),
                "environment variable",
            ),
            (
                json!({"name": "s", "transport": {"http": {"url": "http://x/mcp"}}, "callerCredential": {"env": "T"}}),
                "header",
            ),
            (
                json!({"name": "s", "transport": {"http": {"url": "http://x/mcp", "headers": {"bad header": "v"}}}}),
                "bad header",
            ),
            (
                json!({"name": "s", "transport": {"http": {"url": "http://x/mcp"}}, "connectTimeoutMs": 0}),
                "connectTimeoutMs",
            ),
            (
                json!({"name": "s", "transport": {"http": {"url": "http://x/mcp"}}, "shell": true}),
                "shell",
            ),
        ] {
            let err = McpServer::from_value(&bad).unwrap_err();
            assert!(err.message().contains(named), "{named}: {}", err.message());
        }
        let ok = McpServer::http("remote", "http://127.0.0.1:3001/mcp")
            .with_caller_credential(CallerCredential::Header("Authorization".into()));
        ok.check().unwrap();
        let round = McpServer::from_value(&serde_json::to_value(&ok).unwrap()).unwrap();
        assert_eq!(round, ok);
    }

    #[test]
    fn secrets_are_not_printed() {
        let server = McpServer::stdio("s", ["x"]).set_env("TOKEN", "very-secret");
        assert!(!format!("{server:?}").contains("very-secret"));
    }
}
