//! `harness.toml`: what the operator configures for `harness serve`.
//!
//! `harness init` writes this sample ([`SAMPLE`]), which `harness serve` accepts as written:
//!
//! ```toml
#![doc = include_str!("sample.toml")]
//! ```
//!
//! `harness serve` reads the file `--config` names, else `./harness.toml` when there is
//! one, else the file `$HARNESS_CONFIG` names, else none (the defaults), and says which.
//!
//!
//! Unknown keys are refused, naming the key. A relative path is resolved against the
//! configuration file's directory. Without a `[scripted]`, `[acp]` or `[openai]` table the
//! scripted adapter is offered with its bundled script. `[mcp]` needs `[openai]`: the model
//! loop is the adapter that runs the execution's tools (an ACP agent gets MCP servers of its
//! own, `mcpServers` in its table).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use harness_acp::{AcpAdapter, AcpAgent};
use harness_core::adapter::HarnessAdapter;
use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::file::FileLimits;
use harness_core::limits::RunLimits;
use harness_core::middleware::{MiddlewareConfig, PortableMiddlewarePolicy};
use harness_core::store::{MemoryStore, ReplicaId};
use harness_core::tool::ToolSet;
use harness_layers::stack::HarnessStack;
use harness_mcp::{McpProvider, McpServer};
use harness_openai::{Endpoint, OpenAiAdapter};
use harness_scripted::{Script, ScriptedAdapter};
use serde::Deserialize;

use crate::auth::BearerTokens;
use crate::{ConnectionLimits, Instance, Server};

/// The address `harness serve` listens on by default.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8700";

/// The database file of the embedded store by default (in the working directory).
pub const DEFAULT_DATABASE: &str = "harness.db";

/// The sample configuration `harness init` writes: every table, commented.
///
/// ```
/// let config = harness_server::config::Config::from_toml(harness_server::config::SAMPLE).unwrap();
/// assert!(config.scripted.is_some());
/// ```
pub const SAMPLE: &str = include_str!("sample.toml");

/// The file the development token is kept in, in the [data directory](Config::data_dir).
pub const TOKEN_FILE: &str = "harness.token";

/// The configuration file's contents; see the [module docs](self).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Config {
    /// Where to listen ([`DEFAULT_LISTEN`]).
    #[serde(default)]
    pub listen: Option<SocketAddr>,
    /// This replica's name in the store (`harness` by default).
    #[serde(default)]
    pub replica: Option<String>,
    /// The largest request body.
    #[serde(default)]
    pub body_limit: Option<usize>,
    /// The longest wait for an execution's outcome, in seconds
    /// ([`ServerBuilder::max_wait`](crate::ServerBuilder::max_wait)).
    #[serde(default)]
    pub max_wait_secs: Option<u64>,
    /// The socket layer's bounds.
    #[serde(default)]
    pub connections: ConnectionsConfig,
    /// The store.
    #[serde(default)]
    pub store: StoreConfig,
    /// Who may call.
    #[serde(default)]
    pub tokens: Vec<TokenConfig>,
    /// The scripted adapter.
    #[serde(default)]
    pub scripted: Option<ScriptedConfig>,
    /// The ACP adapter.
    #[serde(default)]
    pub acp: Option<AcpConfig>,
    /// The model-loop adapter.
    #[serde(default)]
    pub openai: Option<OpenAiConfig>,
    /// MCP servers for the model loop's executions.
    #[serde(default)]
    pub mcp: Option<McpConfig>,
    /// The operator's sandbox profiles, which agents name (`sandbox = "<name>"`).
    #[serde(default)]
    pub sandbox: Option<SandboxConfig>,
    /// How many paused runtimes each adapter instance keeps alive.
    #[serde(default)]
    pub runtimes: RuntimesConfig,
    /// Input files: uploads' retention and the limits on files.
    #[serde(default)]
    pub files: FilesConfig,
    /// `[middleware]`: the operator's portable middleware policy for every instance
    /// without a `middleware` table of its own ([`harness_core::middleware`]).
    #[serde(default)]
    pub middleware: Option<MiddlewareConfig>,
    /// Installed skills, who may use them, and what is blocked ([`crate::skills`]).
    #[serde(default)]
    pub skills: Option<crate::skills::SkillsConfig>,
    /// `[users]`: how a principal is shown to adapters.
    #[serde(default)]
    pub users: Option<UsersConfig>,
    /// `[telemetry]`: trace export ([`TelemetryConfig`]).
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// The directory of the file read, against which relative paths were resolved.
    #[serde(skip)]
    base: Option<PathBuf>,
}

/// `[telemetry]`: what `harness serve` exports besides its Prometheus metrics.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TelemetryConfig {
    /// `[telemetry.otlp]`: export traces over OTLP/HTTP; none without it.
    #[serde(default)]
    pub otlp: Option<OtlpTomlConfig>,
}

/// `[telemetry.otlp]`: the collector traces go to ([`harness_observe::otlp`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct OtlpTomlConfig {
    /// The collector's OTLP/HTTP base URL (`http://127.0.0.1:4318`); spans go to
    /// `<endpoint>/v1/traces`.
    pub endpoint: String,
    /// The `service.name` resource attribute (`harness`).
    #[serde(default)]
    pub service_name: Option<String>,
    /// Seconds one export request may take (10).
    #[serde(default)]
    pub timeout_secs: Option<f64>,
}

impl OtlpTomlConfig {
    /// The exporter's configuration.
    ///
    /// # Errors
    /// A `configuration` error when `timeout_secs` is not a positive number of seconds
    /// (at most a day).
    pub fn otlp(&self) -> Result<harness_observe::otlp::OtlpConfig, HarnessError> {
        let mut config = harness_observe::otlp::OtlpConfig::new(self.endpoint.clone());
        if let Some(name) = &self.service_name {
            config = config.with_service_name(name.clone());
        }
        if let Some(secs) = self.timeout_secs {
            if !(secs > 0.0 && secs <= 86_400.0) {
                return Err(HarnessError::new(
                    ErrorCategory::Configuration,
                    format!(
                        "[telemetry.otlp] timeout_secs = {secs}: expected a positive number of \
                         seconds, at most 86400"
                    ),
                ));
            }
            config = config.with_timeout(std::time::Duration::from_secs_f64(secs));
        }
        Ok(config)
    }
}

/// `[connections]`: each left out keeps its [`ConnectionLimits`] default.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ConnectionsConfig {
    /// Seconds to send a request head.
    #[serde(default)]
    pub header_timeout_secs: Option<f64>,
    /// Seconds to send a request body, after its head.
    #[serde(default)]
    pub body_timeout_secs: Option<f64>,
    /// Seconds a kept-alive connection may stay idle.
    #[serde(default)]
    pub idle_timeout_secs: Option<f64>,
    /// Seconds a response's write may make no progress (the client stopped reading).
    #[serde(default)]
    pub write_timeout_secs: Option<f64>,
    /// Connections open at once.
    #[serde(default)]
    pub max: Option<usize>,
    /// Connections open at once from one IP address.
    #[serde(default)]
    pub max_per_peer: Option<usize>,
}

/// `[runtimes]`: the pool of paused runtimes of each adapter instance (see
/// [`harness_core::service::pool`]); each left out keeps its default.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RuntimesConfig {
    /// The most runtimes of executions awaiting an answer kept alive per instance
    /// ([`DEFAULT_MAX_IDLE_RUNTIMES`](harness_core::service::pool::DEFAULT_MAX_IDLE_RUNTIMES));
    /// one more evicts the one paused longest. 0 evicts every paused runtime at once.
    #[serde(default)]
    pub max_idle: Option<usize>,
    /// Seconds a paused runtime is kept alive
    /// ([`DEFAULT_IDLE_TIMEOUT`](harness_core::service::pool::DEFAULT_IDLE_TIMEOUT)).
    #[serde(default)]
    pub idle_timeout_secs: Option<f64>,
}

/// `[files]`: each left out keeps its default ([`crate::files`]).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct FilesConfig {
    /// Seconds an uploaded file is kept (a day).
    #[serde(default)]
    pub retention_secs: Option<u64>,
    /// The most bytes of one file, uploaded or inline (20 MiB).
    #[serde(default)]
    pub max_file_bytes: Option<u64>,
    /// The most files in one start request (10).
    #[serde(default)]
    pub max_files: Option<usize>,
    /// The most bytes of one start request's files together (50 MiB).
    #[serde(default)]
    pub max_total_bytes: Option<u64>,
    /// The most bytes of one file given inline in a start request, decoded (512 KiB); a
    /// larger one is uploaded first (`POST /v1/files`).
    #[serde(default)]
    pub max_inline_bytes: Option<u64>,
}

/// `[store]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct StoreConfig {
    /// `sqlite` (the default), `postgres` or `memory`.
    #[serde(default)]
    pub kind: StoreKind,
    /// The SQLite database file ([`DEFAULT_DATABASE`]).
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// The PostgreSQL connection string.
    #[serde(default)]
    pub url: Option<String>,
}

/// Which store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum StoreKind {
    /// One file, embedded.
    #[default]
    Sqlite,
    /// A PostgreSQL database, for several replicas.
    Postgres,
    /// In memory: executions are lost with the process.
    Memory,
}

/// `[users]`: how each execution's principal is projected for its adapter
/// ([`SafeUserContext`](harness_core::context::SafeUserContext)): an opaque id, keyed with the
/// secret in the environment variable `id_key_env` (unkeyed without one; see
/// [`UserProjection`](harness_core::context::UserProjection)), and the attributes that pass
/// for each principal (`[users.attributes.<principal>]`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct UsersConfig {
    /// The environment variable holding the key of the opaque user ids (16 bytes or more).
    #[serde(default)]
    pub id_key_env: Option<String>,
    /// What passes to adapters for each principal, by principal.
    #[serde(default)]
    pub attributes: BTreeMap<String, BTreeMap<String, String>>,
}

impl UsersConfig {
    /// The projection this table describes.
    ///
    /// # Errors
    /// When the key's variable is unset or shorter than 16 bytes, a principal is not a
    /// valid principal name, or an attribute is refused (naming it).
    pub fn projection(&self) -> Result<harness_core::context::UserProjection, HarnessError> {
        let mut projection = match &self.id_key_env {
            Some(var) => {
                let secret = std::env::var(var).map_err(|_| {
                    invalid(format!(
                        "`[users] id_key_env` names `{var}`, which is not set (or not UTF-8): \
                         set it to a secret of 16 bytes or more"
                    ))
                })?;
                let key = harness_core::context::UserIdKey::new(secret)
                    .map_err(|e| invalid(format!("`[users] id_key_env`: {}", e.message())))?;
                harness_core::context::UserProjection::keyed(key)
            }
            None => harness_core::context::UserProjection::new(),
        };
        for (principal, attributes) in &self.attributes {
            let caller = principal
                .parse::<harness_core::id::CallerId>()
                .map_err(|e| invalid(format!("`[users.attributes.{principal}]`: {e}")))?;
            projection = projection
                .with_attributes(caller, attributes.clone())
                .map_err(|e| invalid(format!("`[users.attributes]`: {}", e.message())))?;
        }
        Ok(projection)
    }
}

/// The model policy and the prompt of `[<table>]` on `stack`, the prompt compiled (refused
/// naming the table).
fn instance_context(
    stack: HarnessStack,
    models: Option<&harness_core::context::ModelPolicy>,
    prompt: Option<&harness_core::context::PromptConfig>,
    table: &str,
) -> Result<HarnessStack, HarnessError> {
    let stack = match models {
        Some(models) => stack.models(models.clone()),
        None => stack,
    };
    match prompt {
        Some(prompt) => {
            let template = harness_core::context::PromptTemplate::compile(prompt)
                .map_err(|e| invalid(format!("`[{table}.prompt]`: {}", e.message())))?;
            Ok(stack.prompt(template))
        }
        None => Ok(stack),
    }
}

/// One `[[tokens]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TokenConfig {
    /// Whose token it is.
    pub principal: String,
    /// The token's hex SHA-256 digest.
    pub sha256: String,
}

/// `[scripted]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ScriptedConfig {
    /// The script every execution runs (the bundled quickstart script if left out).
    #[serde(default)]
    pub script: Option<PathBuf>,
    /// The operator's run limits for this instance's executions.
    #[serde(default)]
    pub limits: Option<RunLimits>,
    /// The instance's middleware policy, in place of `[middleware]`.
    #[serde(default)]
    pub middleware: Option<MiddlewareConfig>,
    /// The models a caller may choose and the default (`[scripted.models]`; see
    /// [`ModelPolicy`](harness_core::context::ModelPolicy)).
    #[serde(default)]
    pub models: Option<harness_core::context::ModelPolicy>,
    /// The instance prompt (`[scripted.prompt]`; see
    /// [`PromptConfig`](harness_core::context::PromptConfig)).
    #[serde(default)]
    pub prompt: Option<harness_core::context::PromptConfig>,
}

/// `[sandbox]`: profiles by name (`[sandbox.profiles.<name>]`), each a
/// [`SandboxProfile`](harness_sandbox::SandboxProfile); an ACP agent runs in one when its table
/// says `sandbox = "<name>"`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SandboxConfig {
    /// The profiles by name.
    #[serde(default)]
    pub profiles: BTreeMap<String, harness_sandbox::SandboxProfile>,
}

/// Takes `sandbox = "<name>"` out of an agent's or an MCP server's table and resolves it
/// against `[sandbox.profiles]`: the profile is the operator's, so an unknown name is refused
/// naming the known ones.
fn take_sandbox(
    value: &toml::Value,
    what: &str,
    sandboxes: Option<&SandboxConfig>,
) -> Result<(toml::Value, Option<harness_sandbox::Sandbox>), HarnessError> {
    let mut value = value.clone();
    let profile = match value.as_table_mut().and_then(|t| t.remove("sandbox")) {
        None => return Ok((value, None)),
        Some(toml::Value::String(profile)) => profile,
        Some(other) => {
            return Err(invalid(format!(
                "{what}: `sandbox` names a profile of `[sandbox.profiles]`, a string, not {}",
                other.type_str()
            )));
        }
    };
    let profiles = sandboxes.map(|s| &s.profiles);
    let Some(found) = profiles.and_then(|p| p.get(&profile)) else {
        let known: Vec<&str> = profiles
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default();
        return Err(invalid(format!(
            "{what}: no sandbox profile `{profile}` (the profiles are the tables of \
             `[sandbox.profiles]`: {})",
            if known.is_empty() {
                "there are none".to_owned()
            } else {
                known.join(", ")
            }
        )));
    };
    let sandbox = harness_sandbox::Sandbox::new(found.clone()).map_err(|e| {
        invalid(format!(
            "{what}: sandbox profile `{profile}`: {}: {}",
            e.message(),
            e.diagnostic().unwrap_or_default()
        ))
    })?;
    Ok((value, Some(sandbox)))
}

/// An ACP agent's table, its sandbox resolved (see [`take_sandbox`]), and its worker
/// (`worker = "/path/to/acp-sandbox-worker"`: the agent's ACP client runs in the sandbox
/// too, see `AcpAgent::hosted_by_worker`), which needs a sandbox.
fn acp_agent(
    name: &str,
    value: &toml::Value,
    sandboxes: Option<&SandboxConfig>,
) -> Result<AcpAgent, HarnessError> {
    let what = format!("acp agent `{name}`");
    let (mut value, sandbox) = take_sandbox(value, &what, sandboxes)?;
    let worker = match value.as_table_mut().and_then(|t| t.remove("worker")) {
        None => None,
        Some(toml::Value::String(path)) => Some(path),
        Some(other) => {
            return Err(invalid(format!(
                "{what}: `worker` is the path of the worker program (acp-sandbox-worker), a \
                 string, not {}",
                other.type_str()
            )));
        }
    };
    let mut agent = AcpAgent::from_value(&json_of(&value, &what)?)
        .map_err(|e| invalid(format!("{what}: {}", e.public().message)))?;
    if let Some(worker) = worker {
        agent = agent.hosted_by_worker(worker);
    }
    let Some(sandbox) = sandbox else {
        agent
            .check()
            .map_err(|e| invalid(format!("{what}: {}", e.message())))?;
        return Ok(agent);
    };
    let agent = agent.in_sandbox(sandbox);
    agent
        .check()
        .map_err(|e| invalid(format!("{what} in its sandbox: {}", e.message())))?;
    Ok(agent)
}

/// `[acp]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct AcpConfig {
    /// The agents by name.
    pub agents: BTreeMap<String, toml::Value>,
    /// The operator's run limits for this instance's executions.
    #[serde(default)]
    pub limits: Option<RunLimits>,
    /// The instance's middleware policy, in place of `[middleware]`.
    #[serde(default)]
    pub middleware: Option<MiddlewareConfig>,
    /// Refused, naming why: an ACP agent chooses its own model.
    #[serde(default)]
    pub models: Option<toml::Value>,
    /// Refused, naming why: an ACP agent builds its own system prompt.
    #[serde(default)]
    pub prompt: Option<toml::Value>,
    /// The installed skills this instance offers ([`crate::skills`]); every one when left
    /// out.
    #[serde(default)]
    pub skills: Option<Vec<String>>,
}

/// `[openai]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct OpenAiConfig {
    /// The model endpoints by name.
    pub endpoints: BTreeMap<String, toml::Value>,
    /// The operator's run limits for this instance's executions.
    #[serde(default)]
    pub limits: Option<RunLimits>,
    /// The instance's middleware policy, in place of `[middleware]`.
    #[serde(default)]
    pub middleware: Option<MiddlewareConfig>,
    /// The models a caller may choose and the default (`[openai.models]`; see
    /// [`ModelPolicy`](harness_core::context::ModelPolicy)): the chosen model is sent to
    /// the endpoint as is, in place of the endpoint's `model`.
    #[serde(default)]
    pub models: Option<harness_core::context::ModelPolicy>,
    /// The instance prompt (`[openai.prompt]`; see
    /// [`PromptConfig`](harness_core::context::PromptConfig)): the system message, after
    /// the endpoint's `instructions`.
    #[serde(default)]
    pub prompt: Option<harness_core::context::PromptConfig>,
    /// The installed skills this instance offers ([`crate::skills`]); every one when left
    /// out.
    #[serde(default)]
    pub skills: Option<Vec<String>>,
}

/// `[mcp]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct McpConfig {
    /// The MCP servers.
    pub servers: Vec<toml::Value>,
}

/// The table named `default` in `tables`, or the only one; `what` names the tables in errors.
fn default_of<'a>(
    tables: &'a BTreeMap<String, toml::Value>,
    default: &str,
    what: &str,
) -> Result<(&'a String, &'a toml::Value), HarnessError> {
    match (tables.get_key_value(default), tables.len()) {
        (Some(found), _) => Ok(found),
        (None, 1) => tables
            .iter()
            .next()
            .ok_or_else(|| invalid(format!("`{what}` names nothing"))),
        (None, 0) => Err(invalid(format!("`{what}` names nothing"))),
        (None, _) => Err(invalid(format!(
            "`{what}` names several but none is `{default}`"
        ))),
    }
}

/// Where `program` would be started from, as `execvp` looks it up: itself when it names a
/// directory (relative to `cwd`), else the first executable file of that name in `path`.
fn find_program(program: &str, cwd: &Path, path: &std::ffi::OsStr) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt as _;
    let executable = |candidate: &Path| -> std::io::Result<()> {
        let meta = std::fs::metadata(candidate)?;
        if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
            Ok(())
        } else {
            Err(std::io::Error::from_raw_os_error(13))
        }
    };
    if program.contains('/') {
        let candidate = cwd.join(program);
        return executable(&candidate)
            .map(|()| candidate.clone())
            .map_err(|e| format!("program `{program}` ({}): {e}", candidate.display()));
    }
    let dirs: Vec<PathBuf> = std::env::split_paths(path).collect();
    let mut last = std::io::Error::from_raw_os_error(2);
    for dir in &dirs {
        let candidate = dir.join(program);
        match executable(&candidate) {
            Ok(()) => return Ok(candidate),
            // A file that is there but cannot be run says more than "not found".
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => last = e,
            Err(_) => {}
        }
    }
    let searched = std::env::join_paths(&dirs)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    Err(format!(
        "program `{program}` was not found on the PATH searched ({}): {last}",
        if searched.is_empty() {
            "empty"
        } else {
            &searched
        }
    ))
}

/// Reads the development token kept in `dir` (see [`TOKEN_FILE`]), making one (mode 0600)
/// when there is none or `rotate` asks for a new one. Returns the token and its file.
///
/// # Errors
/// When the file cannot be read or written, holds no token, or can be read by others.
pub fn development_token(dir: &Path, rotate: bool) -> Result<(String, PathBuf), HarnessError> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    // `harness.token`, not `./harness.token`, for the working directory.
    let file = if dir == Path::new(".") {
        PathBuf::from(TOKEN_FILE)
    } else {
        dir.join(TOKEN_FILE)
    };
    if !rotate {
        match std::fs::metadata(&file) {
            Ok(meta) => {
                let mode = meta.permissions().mode() & 0o777;
                if mode & 0o077 != 0 {
                    return Err(invalid(format!(
                        "{} can be read by others (mode {mode:o}): `chmod 600` it, or make a new \
                         token with `harness token --rotate`",
                        file.display()
                    )));
                }
                // A token is 64 hex digits; read no more than a page of whatever is there.
                let text = std::fs::read(&file)
                    .map_err(|e| invalid(format!("cannot read {}: {e}", file.display())))?;
                let token = String::from_utf8_lossy(&text[..text.len().min(4096)])
                    .trim()
                    .to_owned();
                if token.len() < 16 || token.chars().any(|c| !c.is_ascii_graphic()) {
                    return Err(invalid(format!(
                        "{} holds no token (16 to 4096 printable ASCII characters): make a new \
                         one with `harness token --rotate`",
                        file.display()
                    )));
                }
                return Ok((token, file));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(invalid(format!("cannot read {}: {e}", file.display()))),
        }
    }
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| invalid(format!("no randomness for a token: {e}")))?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::create_dir_all(dir)
        .map_err(|e| invalid(format!("cannot create {}: {e}", dir.display())))?;
    // Written beside it and renamed over it: a reader never sees half a token.
    let partial = file.with_file_name(format!("{TOKEN_FILE}.{}", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)
        .and_then(|mut f| {
            f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
            f.write_all(format!("{token}\n").as_bytes())?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&partial, &file));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&partial);
        return Err(invalid(format!("cannot write {}: {e}", file.display())));
    }
    Ok((token, file))
}

/// A TOML table as JSON, for a type's own (checked) deserialization.
fn json_of(value: &toml::Value, what: &str) -> Result<serde_json::Value, HarnessError> {
    serde_json::to_value(value).map_err(|e| invalid(format!("{what}: {e}")))
}

pub(crate) fn invalid(message: String) -> HarnessError {
    HarnessError::new(ErrorCategory::Configuration, message)
}

/// The middleware policy of `table` (an instance's own table, else `[middleware]`),
/// compiled with the project's redactor; refused naming the table and the rule, and when
/// its caps count usage `adapter` does not report.
fn middleware_for<A: HarnessAdapter>(
    adapter: &A,
    own: Option<&MiddlewareConfig>,
    global: Option<&MiddlewareConfig>,
    table: &str,
) -> Result<PortableMiddlewarePolicy, HarnessError> {
    let (config, table) = match (own, global) {
        (Some(own), _) => (own, format!("{table}.middleware")),
        (None, Some(global)) => (global, "middleware".to_owned()),
        (None, None) => return Ok(PortableMiddlewarePolicy::allow_all()),
    };
    let policy = harness_layers::middleware::compile(config)
        .map_err(|e| invalid(format!("`[{table}]`: {e}")))?;
    limits_for(adapter, Some(&policy.limits()), &table)?;
    Ok(policy)
}

/// The operator's run limits of `table` for `adapter`, refused when one counts usage that
/// the adapter does not report (every execution would be refused).
fn limits_for<A: HarnessAdapter>(
    adapter: &A,
    limits: Option<&RunLimits>,
    table: &str,
) -> Result<RunLimits, HarnessError> {
    let limits = limits.copied().unwrap_or_default();
    let needing = limits.needing_usage();
    let usage = adapter
        .descriptor()
        .capabilities()
        .level(harness_core::capability::CapabilityKey::StreamUsage)
        .is_usable();
    if !needing.is_empty() && !usage {
        return Err(invalid(format!(
            "`[{table}.limits]` sets {}, which count what `usage` events report, but adapter \
             `{}` does not report usage: leave {} out",
            needing.join(" and "),
            adapter.descriptor().id(),
            if needing.len() == 1 { "it" } else { "them" },
        )));
    }
    Ok(limits)
}

impl Config {
    /// Reads the configuration file at `path`.
    ///
    /// # Errors
    /// When the file cannot be read or is not a valid configuration (the message names the
    /// key and line).
    pub fn from_path(path: &Path) -> Result<Self, HarnessError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| invalid(format!("cannot read {}: {e}", path.display())))?;
        let mut config = Self::from_toml(&text)
            .map_err(|e| invalid(format!("{}: {}", path.display(), e.public().message)))?;
        let base = path.parent().unwrap_or_else(|| Path::new("."));
        config.resolve(base);
        config.base = Some(base.to_path_buf());
        Ok(config)
    }

    /// Parses a configuration (relative paths stay relative).
    ///
    /// ```
    /// let config = harness_server::config::Config::from_toml("listen = \"127.0.0.1:9000\"").unwrap();
    /// assert_eq!(config.listen.unwrap().port(), 9000);
    /// let err = harness_server::config::Config::from_toml("lisen = 1").unwrap_err();
    /// assert!(err.to_string().contains("unknown field `lisen`"), "{err}");
    /// ```
    ///
    /// # Errors
    /// When `text` is not a valid configuration.
    pub fn from_toml(text: &str) -> Result<Self, HarnessError> {
        toml::from_str(text).map_err(|e| invalid(format!("invalid configuration: {e}")))
    }

    fn resolve(&mut self, base: &Path) {
        let absolute = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        if let Some(path) = &mut self.store.path {
            absolute(path);
        }
        if let Some(script) = self.scripted.as_mut().and_then(|s| s.script.as_mut()) {
            absolute(script);
        }
        if let Some(skills) = &mut self.skills {
            skills.resolve(base);
        }
    }

    /// Where `harness serve` keeps its files other than the configuration: the SQLite
    /// database's directory; with another store, the configuration file's directory, else
    /// the working directory.
    #[must_use]
    pub fn data_dir(&self) -> PathBuf {
        let database = match self.store.kind {
            StoreKind::Sqlite => Some(
                self.store
                    .path
                    .clone()
                    .unwrap_or_else(|| PathBuf::from(DEFAULT_DATABASE)),
            ),
            StoreKind::Postgres | StoreKind::Memory => None,
        };
        match database.as_deref().and_then(Path::parent) {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => self.base.clone().unwrap_or_else(|| PathBuf::from(".")),
        }
    }

    /// Checks that every ACP agent's program can be started: found (on the `PATH` it would
    /// be looked up on when it names no directory) and executable, in an existing working
    /// directory. The error names the program, the directories searched and the OS error.
    ///
    /// ```
    /// let config = harness_server::config::Config::from_toml(
    ///     "[acp.agents.default]\ncommand = [\"no-such-agent-program\"]\ncwd = \"/\"\n",
    /// ).unwrap();
    /// let err = config.check_programs().unwrap_err().to_string();
    /// assert!(err.contains("`no-such-agent-program`") && err.contains("PATH"), "{err}");
    /// ```
    ///
    /// # Errors
    /// The first agent whose program cannot be started, or an agent table that is invalid.
    pub fn check_programs(&self) -> Result<(), HarnessError> {
        let Some(acp) = &self.acp else {
            return Ok(());
        };
        for (name, value) in &acp.agents {
            let what = format!("acp agent `{name}`");
            let agent = acp_agent(name, value, self.sandbox.as_ref())?;
            if let Some(sandbox) = &agent.sandbox {
                sandbox
                    .profile()
                    .check(&agent.cwd)
                    .map_err(|e| invalid(format!("{what} cannot be sandboxed: {}", e.message())))?;
            }
            let Some(program) = agent.command.first() else {
                continue;
            };
            if let Err(e) = std::fs::read_dir(&agent.cwd) {
                return Err(invalid(format!(
                    "{what} cannot be started: its cwd {} cannot be used: {e}",
                    agent.cwd.display()
                )));
            }
            find_program(program, &agent.cwd, &agent.search_path())
                .map_err(|e| invalid(format!("{what} cannot be started: {e}")))?;
        }
        Ok(())
    }

    /// The address to listen on.
    #[must_use]
    pub fn listen(&self) -> SocketAddr {
        self.listen.unwrap_or_else(|| {
            DEFAULT_LISTEN
                .parse()
                .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 8700)))
        })
    }

    /// The socket layer's bounds: `[connections]` over the defaults.
    ///
    /// ```
    /// use std::time::Duration;
    /// let config = harness_server::config::Config::from_toml(
    ///     "[connections]\nheader_timeout_secs = 2.5\nbody_timeout_secs = 5\nwrite_timeout_secs = 20\nmax_per_peer = 8",
    /// ).unwrap();
    /// let limits = config.connection_limits().unwrap();
    /// assert_eq!(limits.header_timeout, Duration::from_millis(2500));
    /// assert_eq!(limits.body_timeout, Duration::from_secs(5));
    /// assert_eq!(limits.write_timeout, Duration::from_secs(20));
    /// assert_eq!(limits.max_connections_per_peer, 8);
    /// assert_eq!(limits.max_connections, 1024);
    /// let zero = harness_server::config::Config::from_toml("[connections]\nmax = 0").unwrap();
    /// assert!(zero.connection_limits().unwrap_err().to_string().contains("`connections.max`"));
    /// ```
    ///
    /// # Errors
    /// A timeout that is not a positive number of seconds (at most a day), or a cap of 0.
    pub fn connection_limits(&self) -> Result<ConnectionLimits, HarnessError> {
        let c = &self.connections;
        let seconds = |value: Option<f64>, key: &str, default: std::time::Duration| match value {
            None => Ok(default),
            Some(s) if s > 0.0 && s <= 86_400.0 => Ok(std::time::Duration::from_secs_f64(s)),
            Some(s) => Err(invalid(format!(
                "`connections.{key}` is {s}: it must be a number of seconds above 0 and at most 86400"
            ))),
        };
        let count = |value: Option<usize>, key: &str, default: usize| match value {
            None => Ok(default),
            Some(0) => Err(invalid(format!(
                "`connections.{key}` is 0: it must be at least 1"
            ))),
            Some(n) => Ok(n),
        };
        let d = ConnectionLimits::new();
        Ok(ConnectionLimits::new()
            .header_timeout(seconds(
                c.header_timeout_secs,
                "header_timeout_secs",
                d.header_timeout,
            )?)
            .body_timeout(seconds(
                c.body_timeout_secs,
                "body_timeout_secs",
                d.body_timeout,
            )?)
            .idle_timeout(seconds(
                c.idle_timeout_secs,
                "idle_timeout_secs",
                d.idle_timeout,
            )?)
            .write_timeout(seconds(
                c.write_timeout_secs,
                "write_timeout_secs",
                d.write_timeout,
            )?)
            .max_connections(count(c.max, "max", d.max_connections)?)
            .max_connections_per_peer(count(
                c.max_per_peer,
                "max_per_peer",
                d.max_connections_per_peer,
            )?))
    }

    /// The adapter services' configuration: `[runtimes]` over the defaults.
    ///
    /// ```
    /// use std::time::Duration;
    /// let config = harness_server::config::Config::from_toml(
    ///     "[runtimes]\nmax_idle = 32\nidle_timeout_secs = 90",
    /// ).unwrap();
    /// let pool = config.service_config().unwrap().runtime_pool;
    /// assert_eq!((pool.max_idle, pool.idle_timeout), (32, Duration::from_secs(90)));
    /// let bad = harness_server::config::Config::from_toml("[runtimes]\nidle_timeout_secs = 0").unwrap();
    /// assert!(bad.service_config().unwrap_err().to_string().contains("`runtimes.idle_timeout_secs`"));
    /// ```
    ///
    /// # Errors
    /// An idle timeout that is not a positive number of seconds (at most a week).
    pub fn service_config(&self) -> Result<harness_core::service::ServiceConfig, HarnessError> {
        let r = &self.runtimes;
        let mut config = harness_core::service::ServiceConfig::default();
        if let Some(max) = r.max_idle {
            config.runtime_pool.max_idle = max;
        }
        match r.idle_timeout_secs {
            None => {}
            Some(s) if s > 0.0 && s <= 604_800.0 => {
                config.runtime_pool.idle_timeout = std::time::Duration::from_secs_f64(s);
            }
            Some(s) => {
                return Err(invalid(format!(
                    "`runtimes.idle_timeout_secs` is {s}: it must be a number of seconds above 0 \
                     and at most 604800 (a week)"
                )));
            }
        }
        Ok(config)
    }

    /// The uploads' policy of `[files]` over the defaults, kept in `store`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let config = harness_server::config::Config::from_toml(
    ///     "[files]\nretention_secs = 3600\nmax_file_bytes = 1048576",
    /// ).unwrap();
    /// let uploads = config.uploads(Arc::new(harness_store::files::MemoryFiles::new())).unwrap();
    /// assert_eq!(uploads.file_limits().max_file_bytes, 1048576);
    /// assert_eq!(uploads.file_limits().max_files, 10);
    /// let zero = harness_server::config::Config::from_toml("[files]\nretention_secs = 0").unwrap();
    /// let err = zero.uploads(Arc::new(harness_store::files::MemoryFiles::new())).unwrap_err();
    /// assert!(err.to_string().contains("`files.retention_secs`"), "{err}");
    /// ```
    ///
    /// # Errors
    /// A value of 0, or a total below one file's bytes.
    pub fn uploads(
        &self,
        store: Arc<dyn harness_store::files::FileStore>,
    ) -> Result<crate::files::Uploads, HarnessError> {
        let f = &self.files;
        let positive = |value: Option<u64>, key: &str, default: u64| match value {
            None => Ok(default),
            Some(0) => Err(invalid(format!(
                "`files.{key}` is 0: it must be at least 1"
            ))),
            Some(n) => Ok(n),
        };
        let d = FileLimits::default();
        let limits = FileLimits {
            max_file_bytes: positive(f.max_file_bytes, "max_file_bytes", d.max_file_bytes)?,
            max_files: usize::try_from(positive(
                f.max_files.map(|n| n as u64),
                "max_files",
                d.max_files as u64,
            )?)
            .unwrap_or(usize::MAX),
            max_total_bytes: positive(f.max_total_bytes, "max_total_bytes", d.max_total_bytes)?,
        };
        if limits.max_total_bytes < limits.max_file_bytes {
            return Err(invalid(format!(
                "`files.max_total_bytes` ({}) is below `files.max_file_bytes` ({}): a request \
                 could not take one file of the largest size",
                limits.max_total_bytes, limits.max_file_bytes
            )));
        }
        let retention = positive(
            f.retention_secs,
            "retention_secs",
            crate::files::DEFAULT_RETENTION.as_secs(),
        )?;
        Ok(crate::files::Uploads::new(store)
            .limits(limits)
            .retention(std::time::Duration::from_secs(retention)))
    }

    /// The tokens of `[[tokens]]`.
    ///
    /// # Errors
    /// A principal or digest that is not valid.
    pub fn tokens(&self) -> Result<BearerTokens, HarnessError> {
        self.tokens
            .iter()
            .try_fold(BearerTokens::new(), |tokens, t| {
                tokens.with_digest(&t.principal, &t.sha256)
            })
    }

    /// The server this configuration describes, accepting `tokens`, and the database it
    /// uses (for the startup message). Opens the store and applies its schema.
    ///
    /// # Errors
    /// When the store cannot be opened, a script cannot be read, or an agent is refused.
    pub async fn server(&self, tokens: BearerTokens) -> Result<(Server, String), HarnessError> {
        let replica = ReplicaId::new(self.replica.clone().unwrap_or_else(|| "harness".into()));
        let (instances, store, uploads) = match self.store.kind {
            StoreKind::Memory => {
                let store = Arc::new(MemoryStore::new());
                let uploads = self.uploads(Arc::new(harness_store::files::MemoryFiles::new()))?;
                (
                    self.instances(&store, &replica, &uploads)?,
                    "memory (lost on exit)".to_owned(),
                    uploads,
                )
            }
            StoreKind::Sqlite => {
                let path = self
                    .store
                    .path
                    .clone()
                    .unwrap_or_else(|| PathBuf::from(DEFAULT_DATABASE));
                let store = Arc::new(
                    harness_store::SqliteStore::open(&path)
                        .map_err(|e| invalid(format!("cannot open {}: {e}", path.display())))?,
                );
                let uploads = self.uploads(store.clone())?;
                (
                    self.instances(&store, &replica, &uploads)?,
                    format!("sqlite {}", path.display()),
                    uploads,
                )
            }
            StoreKind::Postgres => {
                let url = self.store.url.as_deref().ok_or_else(|| {
                    invalid("`store.url` is missing: the PostgreSQL connection string".into())
                })?;
                let store = Arc::new(
                    harness_store::PostgresStore::connect(url)
                        .await
                        .map_err(|e| invalid(format!("cannot connect to PostgreSQL: {e}")))?,
                );
                let uploads = self.uploads(store.clone())?;
                (
                    self.instances(&store, &replica, &uploads)?,
                    "postgres".to_owned(),
                    uploads,
                )
            }
        };
        let mut builder = Server::builder().authenticate(tokens).files(uploads);
        match self.files.max_inline_bytes {
            Some(0) => {
                return Err(invalid(
                    "`files.max_inline_bytes` is 0: it must be at least 1 (files are then \
                     uploaded with POST /v1/files)"
                        .to_owned(),
                ));
            }
            Some(bytes) => builder = builder.max_inline_file_bytes(bytes),
            None => {}
        }
        if let Some(limit) = self.body_limit {
            builder = builder.body_limit(limit);
        }
        if let Some(secs) = self.max_wait_secs {
            builder = builder.max_wait(std::time::Duration::from_secs(secs));
        }
        for instance in instances {
            builder = builder.instance(instance);
        }
        Ok((builder.build()?, store))
    }

    fn instances<S>(
        &self,
        store: &Arc<S>,
        replica: &ReplicaId,
        uploads: &crate::files::Uploads,
    ) -> Result<Vec<Instance>, HarnessError>
    where
        S: harness_core::store::ExecutionStore + harness_core::session::ThreadStateStore + 'static,
    {
        let mut instances = Vec::new();
        let service = self.service_config()?;
        let users = self
            .users
            .as_ref()
            .map(UsersConfig::projection)
            .transpose()?
            .unwrap_or_default();
        let skills = self
            .skills
            .as_ref()
            .map(crate::skills::SkillsConfig::load)
            .transpose()?
            .unwrap_or_default();
        let scripted = match (&self.scripted, &self.acp, &self.openai) {
            (Some(scripted), _, _) => Some(scripted.clone()),
            (None, None, None) => Some(ScriptedConfig::default()),
            (None, _, _) => None,
        };
        if self.mcp.is_some() && self.openai.is_none() {
            return Err(invalid(
                "`[mcp]` offers its servers' tools to the model loop: add `[openai]` (an ACP \
                 agent takes MCP servers of its own, `mcpServers` in its table)"
                    .to_owned(),
            ));
        }
        if let Some(scripted) = scripted {
            let script = match &scripted.script {
                Some(path) => Script::from_path(path)
                    .map_err(|e| invalid(format!("cannot use {}: {e}", path.display())))?,
                None => Script::quickstart(),
            };
            let adapter = ScriptedAdapter::new(script);
            let limits = limits_for(&adapter, scripted.limits.as_ref(), "scripted")?;
            let middleware = middleware_for(
                &adapter,
                scripted.middleware.as_ref(),
                self.middleware.as_ref(),
                "scripted",
            )?;
            let stack = instance_context(
                with_files(
                    HarnessStack::defaults_for(&adapter)?
                        .limits(limits)
                        .middleware(middleware)
                        .config(service)
                        .users(users.clone()),
                    uploads,
                ),
                scripted.models.as_ref(),
                scripted.prompt.as_ref(),
                "scripted",
            )?;
            instances.push(Instance::new(
                &stack,
                adapter,
                Arc::clone(store),
                replica.clone(),
            ));
        }
        let common = Common {
            service,
            uploads,
            middleware: self.middleware.as_ref(),
            skills: &skills,
            users: &users,
        };
        if let Some(acp) = &self.acp {
            instances.push(Instance::new_acp(
                acp,
                self.sandbox.as_ref(),
                store,
                replica,
                &common,
            )?);
        }
        if let Some(openai) = &self.openai {
            instances.push(Instance::new_openai(
                openai,
                self.mcp.as_ref(),
                self.sandbox.as_ref(),
                store,
                replica,
                &common,
            )?);
        }
        Ok(instances)
    }
}

/// What every adapter instance of the file shares.
struct Common<'a> {
    service: harness_core::service::ServiceConfig,
    uploads: &'a crate::files::Uploads,
    /// `[middleware]`, for instances without a table of their own.
    middleware: Option<&'a MiddlewareConfig>,
    /// The installed skills (`[skills]`), which each instance offers some of.
    skills: &'a crate::skills::Installed,
    /// `[users]`: how principals are shown to every instance's adapter.
    users: &'a harness_core::context::UserProjection,
}

/// `stack` finding uploaded files where `uploads` keeps them, within its limits.
fn with_files(stack: HarnessStack, uploads: &crate::files::Uploads) -> HarnessStack {
    let workspace: Arc<dyn harness_core::file::FileWorkspace> = uploads.store().clone();
    stack
        .files(workspace)
        .file_limits(uploads.file_limits().clone())
}

impl Instance {
    fn new_openai<S>(
        openai: &OpenAiConfig,
        mcp: Option<&McpConfig>,
        sandboxes: Option<&SandboxConfig>,
        store: &Arc<S>,
        replica: &ReplicaId,
        common: &Common<'_>,
    ) -> Result<Self, HarnessError>
    where
        S: harness_core::store::ExecutionStore + harness_core::session::ThreadStateStore + 'static,
    {
        let endpoint = |name: &str, value: &toml::Value| -> Result<Endpoint, HarnessError> {
            let what = format!("openai endpoint `{name}`");
            Endpoint::from_value(&json_of(value, &what)?)
                .map_err(|e| invalid(format!("{what}: {}", e.public().message)))
        };
        let (name, value) = default_of(
            &openai.endpoints,
            harness_openai::DEFAULT_ENDPOINT,
            "[openai.endpoints]",
        )?;
        let mut adapter = OpenAiAdapter::new(endpoint(name, value)?)?;
        for (name, value) in &openai.endpoints {
            if name != harness_openai::DEFAULT_ENDPOINT {
                adapter = adapter.with_endpoint(name.clone(), endpoint(name, value)?)?;
            }
        }
        let mut tools = ToolSet::new();
        for (n, value) in mcp
            .map(|m| m.servers.as_slice())
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let what = format!("MCP server {}", n + 1);
            let (value, sandbox) = take_sandbox(value, &what, sandboxes)?;
            let server = McpServer::from_value(&json_of(&value, &what)?)
                .map_err(|e| invalid(format!("{what}: {}", e.public().message)))?;
            let server = match sandbox {
                Some(sandbox) => server.in_sandbox(sandbox),
                None => server,
            };
            tools = tools
                .provider(McpProvider::new(server)?)
                .map_err(|e| invalid(format!("{what}: {e}")))?;
        }
        let limits = limits_for(&adapter, openai.limits.as_ref(), "openai")?;
        let middleware = middleware_for(
            &adapter,
            openai.middleware.as_ref(),
            common.middleware,
            "openai",
        )?;
        let stack = with_files(
            HarnessStack::defaults_for(&adapter)?
                .tools(tools)
                .limits(limits)
                .middleware(middleware)
                .config(common.service)
                .users(common.users.clone()),
            common.uploads,
        )
        .skills(common.skills.catalog("openai", openai.skills.as_deref())?);
        let stack = instance_context(
            stack,
            openai.models.as_ref(),
            openai.prompt.as_ref(),
            "openai",
        )?;
        Ok(Self::new(
            &stack,
            adapter,
            Arc::clone(store),
            replica.clone(),
        ))
    }

    fn new_acp<S>(
        acp: &AcpConfig,
        sandboxes: Option<&SandboxConfig>,
        store: &Arc<S>,
        replica: &ReplicaId,
        common: &Common<'_>,
    ) -> Result<Self, HarnessError>
    where
        S: harness_core::store::ExecutionStore + harness_core::session::ThreadStateStore + 'static,
    {
        if acp.models.is_some() || acp.prompt.is_some() {
            return Err(invalid(format!(
                "`[acp.{}]`: an ACP agent chooses its own model and builds its own system \
                 prompt, which this adapter cannot set; configure them in the agent's command \
                 or environment and leave `[acp.models]` and `[acp.prompt]` out",
                if acp.models.is_some() {
                    "models"
                } else {
                    "prompt"
                }
            )));
        }
        let agent = |name: &str, value: &toml::Value| acp_agent(name, value, sandboxes);
        let default = default_of(&acp.agents, harness_acp::DEFAULT_AGENT, "[acp.agents]")?;
        let mut adapter = AcpAdapter::new(agent(default.0, default.1)?)?;
        for (name, value) in &acp.agents {
            // The default one too under its own name, when it has one.
            if name != harness_acp::DEFAULT_AGENT {
                adapter = adapter.with_agent(name.clone(), agent(name, value)?)?;
            }
        }
        let limits = limits_for(&adapter, acp.limits.as_ref(), "acp")?;
        let middleware =
            middleware_for(&adapter, acp.middleware.as_ref(), common.middleware, "acp")?;
        let stack = with_files(
            HarnessStack::defaults_for(&adapter)?
                .limits(limits)
                .middleware(middleware)
                .config(common.service)
                .users(common.users.clone()),
            common.uploads,
        )
        .skills(common.skills.catalog("acp", acp.skills.as_deref())?);
        Ok(Self::new(
            &stack,
            adapter,
            Arc::clone(store),
            replica.clone(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn refused(text: &str) -> String {
        let config = Config::from_toml(text).unwrap();
        match config.server(BearerTokens::new()).await {
            Ok(_) => panic!("the configuration was taken: {text}"),
            Err(e) => e.message().to_owned(),
        }
    }

    #[tokio::test]
    async fn model_endpoints_and_mcp_servers_are_checked_with_clear_errors() {
        let memory = "[store]\nkind = \"memory\"\n";
        let message = refused(&format!(
            "{memory}[[mcp.servers]]\nname = \"s\"\ntransport = {{ http = {{ url = \"http://127.0.0.1:1/mcp\" }} }}\n"
        ))
        .await;
        assert!(message.contains("[openai]"), "{message}");
        let message = refused(&format!(
            "{memory}[openai.endpoints.default]\nbaseUrl = \"ftp://x\"\nmodel = \"m\"\n"
        ))
        .await;
        assert!(
            message.contains("openai endpoint `default`") && message.contains("ftp://x"),
            "{message}"
        );
        let message = refused(&format!(
            "{memory}[openai.endpoints.a]\nbaseUrl = \"http://x/v1\"\nmodel = \"m\"\n[openai.endpoints.b]\nbaseUrl = \"http://x/v1\"\nmodel = \"m\"\n"
        ))
        .await;
        assert!(message.contains("none is `default`"), "{message}");
        let message = refused(&format!(
            "{memory}[openai.endpoints.default]\nbaseUrl = \"http://x/v1\"\nmodel = \"m\"\n[[mcp.servers]]\nname = \"Bad\"\ntransport = {{ http = {{ url = \"http://x/mcp\" }} }}\n"
        ))
        .await;
        assert!(
            message.contains("MCP server 1") && message.contains("Bad"),
            "{message}"
        );
        // A good one builds, with no scripted instance beside the model loop.
        let config = Config::from_toml(&format!(
            "{memory}[openai.endpoints.local]\nbaseUrl = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n[[mcp.servers]]\nname = \"remote\"\ntransport = {{ http = {{ url = \"http://127.0.0.1:1/mcp\" }} }}\n"
        ))
        .unwrap();
        config.server(BearerTokens::new()).await.unwrap();
    }

    #[tokio::test]
    async fn an_inline_file_limit_of_zero_is_refused_naming_the_key() {
        let message = refused("[store]\nkind = \"memory\"\n[files]\nmax_inline_bytes = 0\n").await;
        assert!(
            message.contains("`files.max_inline_bytes` is 0"),
            "{message}"
        );
        Config::from_toml("[store]\nkind = \"memory\"\n[files]\nmax_inline_bytes = 1\n")
            .unwrap()
            .server(BearerTokens::new())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn agents_name_the_operators_sandbox_profiles() {
        let memory = "[store]\nkind = \"memory\"\n";
        let agent = "[acp.agents.default]\ncommand = [\"/usr/bin/true\"]\ncwd = \"/tmp\"\n";
        let message = refused(&format!("{memory}{agent}sandbox = \"strict\"\n")).await;
        assert!(
            message.contains("no sandbox profile `strict`") && message.contains("there are none"),
            "{message}"
        );
        let profiles = "[sandbox.profiles.strict]\nbackend = \"bubblewrap\"\n\
                        [sandbox.profiles.net]\nnetwork = { allow = [\"127.0.0.1:4010\"] }\n";
        let message = refused(&format!("{memory}{agent}sandbox = \"other\"\n{profiles}")).await;
        assert!(message.contains("net, strict"), "{message}");
        // A worker hosts the agent's client in its sandbox: it needs one, and an absolute
        // path.
        let message = refused(&format!("{memory}{agent}worker = \"/usr/bin/w\"\n")).await;
        assert!(message.contains("sandbox profile too"), "{message}");
        let message = refused(&format!(
            "{memory}{agent}sandbox = \"strict\"\nworker = \"w\"\n{profiles}"
        ))
        .await;
        assert!(message.contains("absolute path"), "{message}");
        let config = Config::from_toml(&format!(
            "{memory}{agent}sandbox = \"strict\"\nworker = \"/usr/bin/w\"\n{profiles}"
        ))
        .unwrap();
        config.server(BearerTokens::new()).await.unwrap();
        // An MCP server of the model loop runs in one too; over HTTP there is nothing to
        // sandbox.
        let openai =
            "[openai.endpoints.default]\nbaseUrl = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n";
        let message = refused(&format!(
            "{memory}{openai}[[mcp.servers]]\nname = \"remote\"\nsandbox = \"strict\"\n\
             transport = {{ http = {{ url = \"http://127.0.0.1:1/mcp\" }} }}\n{profiles}"
        ))
        .await;
        assert!(message.contains("over HTTP"), "{message}");
        let message = refused(&format!(
            "{memory}{openai}[[mcp.servers]]\nname = \"local\"\nsandbox = \"strict\"\n\
             transport = {{ stdio = {{ command = [\"/usr/bin/true\"] }} }}\n{profiles}"
        ))
        .await;
        assert!(message.contains("cwd"), "{message}");
        Config::from_toml(&format!(
            "{memory}{openai}[[mcp.servers]]\nname = \"local\"\nsandbox = \"strict\"\n\
             transport = {{ stdio = {{ command = [\"/usr/bin/true\"], cwd = \"/tmp\" }} }}\n{profiles}"
        ))
        .unwrap()
        .server(BearerTokens::new())
        .await
        .unwrap();
        // A variable the profile does not allow never reaches the sandbox.
        let message = refused(&format!(
            "{memory}{agent}sandbox = \"strict\"\nsetEnv = {{ GITHUB_TOKEN = \"x\" }}\n{profiles}"
        ))
        .await;
        assert!(message.contains("GITHUB_TOKEN"), "{message}");
        // A profile is the operator's table, checked field by field.
        let err = Config::from_toml(&format!(
            "{memory}[sandbox.profiles.pod]\nbackend = \"bubblewrap\"\nimage = \"evil\"\n"
        ))
        .unwrap_err();
        assert!(err.to_string().contains("image"), "{err}");
        let err = Config::from_toml(&format!(
            "{memory}[sandbox.profiles.out]\nnetwork = {{ allow = [\"example.com:443\"] }}\n"
        ))
        .unwrap_err();
        assert!(err.to_string().contains("loopback"), "{err}");

        let config =
            Config::from_toml(&format!("{memory}{agent}sandbox = \"net\"\n{profiles}")).unwrap();
        config.check_programs().unwrap();
        let acp = config.acp.as_ref().unwrap();
        let parsed = acp_agent("default", &acp.agents["default"], config.sandbox.as_ref()).unwrap();
        let sandbox = parsed.sandbox.expect("sandboxed");
        assert_eq!(
            sandbox.profile().network.allow[0].to_string(),
            "127.0.0.1:4010"
        );
        config.server(BearerTokens::new()).await.unwrap();
    }

    /// The sample's commented `[middleware]` table, uncommented, is taken as written; its
    /// caps on model turns stop the server for an adapter that reports no usage.
    #[tokio::test]
    async fn the_samples_middleware_table_is_valid() {
        let start = SAMPLE
            .find("# [middleware]\n")
            .expect("the sample has [middleware]");
        let table: String = SAMPLE[start..]
            .lines()
            .take_while(|l| l.starts_with("# "))
            .map(|l| format!("{}\n", &l[2..]))
            .collect();
        let memory = "[store]\nkind = \"memory\"\n[scripted]\n";
        let config = Config::from_toml(&format!("{memory}{table}")).unwrap();
        let middleware = config.middleware.clone().unwrap();
        assert_eq!(middleware.tools.len(), 3);
        assert_eq!(middleware.limits.max_tool_calls, Some(50));
        config.server(BearerTokens::new()).await.unwrap();
        let message = refused(&format!(
            "[store]\nkind = \"memory\"\n[acp.agents.default]\ncommand = [\"true\"]\ncwd = \"/tmp\"\n{table}"
        ))
        .await;
        assert!(
            message.contains("[middleware.limits]") && message.contains("maxModelTurns"),
            "{message}"
        );
    }

    /// The sample's commented `[openai.models]`, `[openai.prompt]` and `[users]` tables,
    /// uncommented (on the scripted instance), are taken as written; mistakes in them are
    /// refused naming the table.
    #[tokio::test]
    async fn the_samples_instance_context_tables_are_valid_and_mistakes_are_named() {
        let start = SAMPLE
            .find("# [openai.models]\n")
            .expect("the sample has [openai.models]");
        // Every commented line from `[openai.models]` to the end of `[users]`.
        let block: String = SAMPLE[start..]
            .split("\n\n# The operator's middleware rules")
            .next()
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("# ") && !l.starts_with("# How each"))
            .filter(|l| {
                let body = &l[2..];
                body.starts_with('[') || body.contains(" = ")
            })
            .map(|l| format!("{}\n", &l[2..]))
            .collect();
        // On the scripted instance; the key read from a variable every test process has.
        let block = block
            .replace("[openai.", "[scripted.")
            .replace("HARNESS_USER_ID_KEY", "PATH");
        assert!(
            block.contains("[scripted.prompt]") && block.contains("[users]"),
            "{block}"
        );
        let memory = "[store]\nkind = \"memory\"\n[scripted]\n";
        let config = Config::from_toml(&format!("{memory}{block}")).unwrap();
        assert_eq!(
            config
                .scripted
                .as_ref()
                .unwrap()
                .models
                .as_ref()
                .unwrap()
                .allowed(),
            ["llama3.1", "qwen2.5"]
        );
        config.server(BearerTokens::new()).await.unwrap();

        let message = refused(&format!(
            "{memory}[scripted.prompt]\ntemplate = \"Hi {{{{who}}}}\"\n"
        ))
        .await;
        assert!(
            message.contains("`[scripted.prompt]`")
                && message.contains("`{{who}}`, which is not declared"),
            "{message}"
        );
        let message = refused(&format!(
            "{memory}[users]\nid_key_env = \"HARNESS_TEST_UNSET_KEY_VARIABLE\"\n"
        ))
        .await;
        assert!(
            message.contains("`HARNESS_TEST_UNSET_KEY_VARIABLE`, which is not set"),
            "{message}"
        );
        let message = refused(&format!(
            "{memory}[users.attributes.alice]\n\"bad name\" = \"x\"\n"
        ))
        .await;
        assert!(message.contains("not an attribute name"), "{message}");
        let message = refused(
            "[store]\nkind = \"memory\"\n[acp.agents.default]\ncommand = [\"true\"]\ncwd = \"/tmp\"\n[acp.models]\nallowed = [\"m\"]\n",
        )
        .await;
        assert!(
            message.contains("an ACP agent chooses its own model"),
            "{message}"
        );
        let err = Config::from_toml(&format!("{memory}[scripted.models]\nallowed = []\n"))
            .map(|_| ())
            .unwrap_err();
        assert!(
            err.to_string().contains("at least one `allowed` model"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn run_limits_are_read_per_instance_and_checked() {
        let memory = "[store]\nkind = \"memory\"\n";
        let config = Config::from_toml(&format!(
            "{memory}[scripted.limits]\nmaxToolCalls = 5\nwallTimeMs = 60000\nmaxTokens = 900\n"
        ))
        .unwrap();
        let limits = config.scripted.as_ref().unwrap().limits.unwrap();
        assert_eq!(limits.max_tool_calls(), Some(5));
        assert_eq!(limits.max_tokens(), Some(900));
        config.server(BearerTokens::new()).await.unwrap();
        // Zero, or a key that is no limit, is refused when the file is read, naming it.
        let err = Config::from_toml("[scripted.limits]\nmaxModelTurns = 0\n").unwrap_err();
        assert!(err.to_string().contains("`maxModelTurns` is 0"), "{err}");
        let err = Config::from_toml("[scripted.limits]\nmaxCostUsd = 1\n").unwrap_err();
        assert!(err.to_string().contains("maxCostUsd"), "{err}");
        // Tokens on an adapter that reports no usage would refuse every execution: the
        // server does not start.
        let message = refused(&format!(
            "{memory}[acp.agents.default]\ncommand = [\"true\"]\ncwd = \"/tmp\"\n[acp.limits]\nmaxTokens = 10\nmaxToolCalls = 3\n"
        ))
        .await;
        assert!(
            message.contains("[acp.limits]") && message.contains("maxTokens"),
            "{message}"
        );
    }
}
