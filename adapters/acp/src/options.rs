//! [`AcpAgent`], the operator's configuration: how to start an agent and what to serve it;
//! [`AcpOptions`], what a caller may set per execution: which of the operator's agents runs.
//!
//! The split is a security boundary: a caller's execution request never chooses the program
//! that runs, its working directory (the file workspace) or which host variables it sees.
//! The operator registers agents by name when constructing
//! [`AcpAdapter`](crate::AcpAdapter); a request names one of them at most. Its options are
//! checked against [`AcpOptions`]' schema, which rejects every unknown field, so a request
//! naming `command`, `cwd` or `env` is refused at preflight (`OPTIONS_INVALID`) before any
//! process starts.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::manifest::{AdapterOptions as _, OptionsValidator};
use harness_macros::AdapterOptions;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The default cancel grace period, in milliseconds.
pub const DEFAULT_CANCEL_GRACE_MS: u64 = 2_000;

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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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
    /// How long a cancelled turn may take to end before the process group is terminated,
    /// then killed.
    #[serde(default = "default_grace")]
    pub cancel_grace_ms: u64,
    /// What to do with the agent's file requests.
    #[serde(default)]
    pub files: FileAccess,
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
}

impl AcpOptions {
    /// Options naming the operator's agent `name`.
    #[must_use]
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            agent: Some(name.into()),
        }
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
                "{e}; a request names at most an `agent` the operator registered: how an agent \
                 runs (command, cwd, env, files, cancel grace) is the operator's AcpAgent"
            ))
        })?;
        // `Deserialize` also takes a struct from a JSON array (`[]`, `["x"]`): what the
        // published schema refuses is refused here too (found by the `options` fuzz target).
        static SCHEMA: OnceLock<Option<OptionsValidator>> = OnceLock::new();
        if let Some(schema) =
            SCHEMA.get_or_init(|| OptionsValidator::new(&Self::options_schema()).ok())
        {
            schema
                .validate(options)
                .map_err(|e| invalid(&e.to_string()))?;
        }
        Ok(parsed)
    }
}

fn default_grace() -> u64 {
    DEFAULT_CANCEL_GRACE_MS
}

impl AcpAgent {
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
            cancel_grace_ms: DEFAULT_CANCEL_GRACE_MS,
            files: FileAccess::Decline,
        }
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
        if let Some(bad) = self
            .env
            .iter()
            .find(|n| n.is_empty() || n.contains('=') || n.contains('\0'))
        {
            return Err(invalid_agent(&format!(
                "`env` has an invalid variable name {bad:?}"
            )));
        }
        Ok(())
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
