//! [`AcpOptions`]: how to start the agent and what to serve it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_macros::AdapterOptions;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The default cancel grace period, in milliseconds.
pub const DEFAULT_CANCEL_GRACE_MS: u64 = 2_000;

/// What the adapter does with the agent's `fs/*` requests.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema, AdapterOptions,
)]
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

/// The ACP adapter's options.
///
/// Terminal requests (`terminal/*`) are always declined: the client advertises no terminal
/// capability.
///
/// ```
/// use harness_acp::AcpOptions;
/// let options = AcpOptions::from_value(&serde_json::json!({
///     "command": ["my-agent", "--acp"],
///     "cwd": "/tmp",
///     "env": ["PATH"],
/// })).unwrap();
/// assert_eq!(options.command, ["my-agent", "--acp"]);
/// let err = AcpOptions::from_value(&serde_json::json!({"command": ["a"], "cwd": "/", "shell": true}));
/// assert!(err.is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, AdapterOptions)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AcpOptions {
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

fn default_grace() -> u64 {
    DEFAULT_CANCEL_GRACE_MS
}

impl AcpOptions {
    /// Options running `command` in `cwd`, with an empty environment.
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

    /// The options as JSON, for an execution request.
    #[must_use]
    pub fn to_value(&self) -> Value {
        // Plain data: serializing it to a `Value` cannot fail.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The cancel grace period.
    #[must_use]
    pub fn cancel_grace(&self) -> Duration {
        Duration::from_millis(self.cancel_grace_ms)
    }

    /// Parses and checks options.
    ///
    /// # Errors
    /// A `configuration` error (`OPTIONS_INVALID`) for unknown fields, an empty command, a
    /// relative `cwd` or an invalid variable name.
    pub fn from_value(options: &Value) -> Result<Self, HarnessError> {
        let parsed = Self::deserialize(options).map_err(|e| invalid(&format!("{e}")))?;
        parsed.check()?;
        Ok(parsed)
    }

    fn check(&self) -> Result<(), HarnessError> {
        match self.command.first() {
            Some(program) if !program.is_empty() => {}
            _ => return Err(invalid("`command` needs a program")),
        }
        if !self.cwd.is_absolute() {
            return Err(invalid("`cwd` must be an absolute path"));
        }
        if let Some(bad) = self
            .env
            .iter()
            .find(|n| n.is_empty() || n.contains('=') || n.contains('\0'))
        {
            return Err(invalid(&format!(
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
