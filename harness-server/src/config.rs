//! `harness.toml`: what the operator configures for `harness serve`.
//!
//! ```toml
//! # Where to listen: loopback unless the operator says otherwise.
//! listen = "127.0.0.1:8700"
//! # This replica's name in the store (several replicas over one PostgreSQL: one name each).
//! replica = "harness-1"
//! # The largest request body, in bytes.
//! body_limit = 1048576
//!
//! [store]
//! kind = "sqlite"          # "sqlite" (the default), "postgres" or "memory"
//! path = "harness.db"      # sqlite: the database file
//! # url = "postgres://harness@127.0.0.1/harness"   # postgres
//!
//! # Who may call: a principal per token, each token kept as its SHA-256 digest
//! # (`harness token` prints a new token and its digest).
//! [[tokens]]
//! principal = "alice"
//! sha256 = "<64 hex digits>"
//!
//! # The embedded scripted adapter, with the operator's script (the bundled one if left out).
//! [scripted]
//! script = "scripts/demo.json"
//!
//! # ACP agents: each table is an `AcpAgent` (command, cwd, env, files, approval, ...).
//! # Callers pick one with the option {"agent": "<name>"}; `default` serves the others.
//! [acp.agents.default]
//! command = ["gemini", "--experimental-acp"]
//! cwd = "/srv/workspace"
//! env = ["PATH", "HOME"]
//! ```
//!
//! Unknown keys are refused, naming the key. A relative path is resolved against the
//! configuration file's directory. Without a `[scripted]` or `[acp]` table the scripted
//! adapter is offered with its bundled script.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use harness_acp::{AcpAdapter, AcpAgent};
use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::store::{MemoryStore, ReplicaId};
use harness_layers::stack::HarnessStack;
use harness_scripted::{Script, ScriptedAdapter};
use serde::Deserialize;

use crate::auth::BearerTokens;
use crate::{Instance, Server};

/// The address `harness serve` listens on by default.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8700";

/// The database file of the embedded store by default (in the working directory).
pub const DEFAULT_DATABASE: &str = "harness.db";

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
}

/// `[acp]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct AcpConfig {
    /// The agents by name.
    pub agents: BTreeMap<String, toml::Value>,
}

fn invalid(message: String) -> HarnessError {
    HarnessError::new(ErrorCategory::Configuration, message)
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
        let (instances, store) = match self.store.kind {
            StoreKind::Memory => {
                let store = Arc::new(MemoryStore::new());
                (
                    self.instances(&store, &replica)?,
                    "memory (lost on exit)".to_owned(),
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
                (
                    self.instances(&store, &replica)?,
                    format!("sqlite {}", path.display()),
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
                (self.instances(&store, &replica)?, "postgres".to_owned())
            }
        };
        let mut builder = Server::builder().authenticate(tokens);
        if let Some(limit) = self.body_limit {
            builder = builder.body_limit(limit);
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
    ) -> Result<Vec<Instance>, HarnessError>
    where
        S: harness_core::store::ExecutionStore + harness_core::session::ThreadStateStore + 'static,
    {
        let mut instances = Vec::new();
        let scripted = match (&self.scripted, &self.acp) {
            (Some(scripted), _) => Some(scripted.clone()),
            (None, None) => Some(ScriptedConfig::default()),
            (None, Some(_)) => None,
        };
        if let Some(scripted) = scripted {
            let script = match &scripted.script {
                Some(path) => Script::from_path(path)
                    .map_err(|e| invalid(format!("cannot use {}: {e}", path.display())))?,
                None => Script::quickstart(),
            };
            let adapter = ScriptedAdapter::new(script);
            let stack = HarnessStack::defaults_for(&adapter)?;
            instances.push(Instance::new(
                &stack,
                adapter,
                Arc::clone(store),
                replica.clone(),
            ));
        }
        if let Some(acp) = &self.acp {
            instances.push(Instance::new_acp(acp, store, replica)?);
        }
        Ok(instances)
    }
}

impl Instance {
    fn new_acp<S>(
        acp: &AcpConfig,
        store: &Arc<S>,
        replica: &ReplicaId,
    ) -> Result<Self, HarnessError>
    where
        S: harness_core::store::ExecutionStore + harness_core::session::ThreadStateStore + 'static,
    {
        let agent = |name: &str, value: &toml::Value| -> Result<AcpAgent, HarnessError> {
            let json = serde_json::to_value(value)
                .map_err(|e| invalid(format!("acp agent `{name}`: {e}")))?;
            AcpAgent::from_value(&json)
                .map_err(|e| invalid(format!("acp agent `{name}`: {}", e.public().message)))
        };
        let default = match (acp.agents.get(harness_acp::DEFAULT_AGENT), acp.agents.len()) {
            (Some(value), _) => (harness_acp::DEFAULT_AGENT.to_owned(), value),
            (None, 1) => {
                let (name, value) = acp
                    .agents
                    .iter()
                    .next()
                    .ok_or_else(|| invalid("`[acp.agents]` names no agent".into()))?;
                (name.clone(), value)
            }
            (None, 0) => return Err(invalid("`[acp.agents]` names no agent".into())),
            (None, _) => {
                return Err(invalid(
                    "`[acp.agents]` names several agents but none is `default`".into(),
                ));
            }
        };
        let mut adapter = AcpAdapter::new(agent(&default.0, default.1)?)?;
        for (name, value) in &acp.agents {
            // The default one too under its own name, when it has one.
            if name != harness_acp::DEFAULT_AGENT {
                adapter = adapter.with_agent(name.clone(), agent(name, value)?)?;
            }
        }
        let stack = HarnessStack::defaults_for(&adapter)?;
        Ok(Self::new(
            &stack,
            adapter,
            Arc::clone(store),
            replica.clone(),
        ))
    }
}
