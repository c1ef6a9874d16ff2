//! [`ToolSet`]: the tools an application (or operator) offers the executions of a service:
//! tools registered one by one, and [`ToolProvider`]s (an MCP server) whose tools are listed
//! per execution; which of them an execution gets, and the caller's credentials for them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{
    BoundedFailure, BoxFuture, InvalidToolPolicy, PortableTool, ToolCallContext, ToolDescriptor,
    ToolHandle, ToolId, ToolOutcome, ToolPolicy,
};
use crate::error::{ErrorCategory, ErrorCode, HarnessError};
use crate::event::ToolUnavailable;
use crate::health::HarnessHealth;
use crate::id::ExecutionId;

/// A secret a caller supplies for one tool provider (a token for an MCP server).
///
/// It reaches only the provider it is for (in [`ToolScope::credential`]): never the adapter,
/// an event, a log line or the store. `Debug` does not print it. Every string a provider's
/// tools give back (descriptors, outputs, failure messages) is scrubbed of it before the
/// adapter sees it, so a server that echoes the credential does not leak it either.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential(Arc<str>);

impl Credential {
    /// A credential.
    #[must_use]
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into().into())
    }

    /// The secret, for the provider that sends it.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Credential(..)")
    }
}

/// The credentials a caller supplies for an execution's tool providers, by provider name
/// (`tool.caller_credentials`). Put it in the request's
/// [`extensions`](crate::service::ExecutionRequest::extensions): it is caller data, never
/// serialized, never part of the request's identity, never stored. Over HTTP it is the start
/// request's `callerCredentials`. harness-layers' redaction layer also redacts each from
/// everything the execution yields, and its preflight layer refuses them for an adapter
/// without `tool.caller_credentials`.
///
/// ```
/// use harness_core::service::ExecutionRequest;
/// use harness_core::tool::{CallerCredentials, Credential};
///
/// let mut request = ExecutionRequest::new("open an issue about the flaky test");
/// request.extensions.insert(
///     CallerCredentials::new().with("github", Credential::new("ghp_callers_own_token")),
/// );
/// let shown = format!("{:?}", request.extensions.get::<CallerCredentials>().unwrap());
/// assert!(shown.contains("github") && !shown.contains("ghp_"), "{shown}");
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct CallerCredentials(BTreeMap<String, Credential>);

impl CallerCredentials {
    /// No credential.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the credential for `provider`.
    #[must_use]
    pub fn with(mut self, provider: impl Into<String>, credential: Credential) -> Self {
        self.0.insert(provider.into(), credential);
        self
    }

    /// The credential for `provider`.
    #[must_use]
    pub fn get(&self, provider: &str) -> Option<&Credential> {
        self.0.get(provider)
    }

    /// Whether it holds no credential.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many credentials it holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The providers it holds a credential for, in name order.
    pub fn providers(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// The credentials, by provider name, in name order: for a redactor that must know
    /// them (the redaction layer adds them to the secrets it redacts for the execution).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Credential)> {
        self.0
            .iter()
            .map(|(name, credential)| (name.as_str(), credential))
    }
}

impl fmt::Debug for CallerCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

/// What a [`ToolProvider`] is told when it lists its tools for one execution.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ToolScope {
    /// The execution the tools are for.
    pub execution_id: ExecutionId,
    /// The caller's credential for this provider, if the caller gave one.
    pub credential: Option<Credential>,
    /// Cancelled when the execution is: a provider may end connections with it.
    pub cancellation: CancellationToken,
}

impl ToolScope {
    /// A scope for `execution_id`, without a credential.
    #[must_use]
    pub fn new(execution_id: ExecutionId, cancellation: CancellationToken) -> Self {
        Self {
            execution_id,
            credential: None,
            cancellation,
        }
    }

    /// With the caller's credential.
    #[must_use]
    pub fn with_credential(mut self, credential: Credential) -> Self {
        self.credential = Some(credential);
        self
    }
}

/// A tool a provider offers, with the policy its calls run under.
#[derive(Clone)]
pub struct ProvidedTool {
    tool: Arc<dyn PortableTool>,
    policy: ToolPolicy,
}

impl ProvidedTool {
    /// `tool` under `policy`.
    #[must_use]
    pub fn new(tool: Arc<dyn PortableTool>, policy: ToolPolicy) -> Self {
        Self { tool, policy }
    }

    /// The tool's id.
    #[must_use]
    pub fn id(&self) -> &ToolId {
        self.tool.descriptor().id()
    }
}

impl fmt::Debug for ProvidedTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProvidedTool")
            .field("id", &self.id().as_str())
            .field("policy", &self.policy)
            .finish()
    }
}

/// A source of tools listed per execution: an MCP server, say. Its name is one tool-id
/// segment, and every tool it offers has an id under it (`<name>.<tool>`).
///
/// [`tools`](Self::tools) is called once per execution that selects the provider, when its
/// runtime is created (inside the runtime stack, so an initialization deadline bounds it);
/// an error leaves the execution running with its other tools, and is reported in the
/// execution's log as `tool.unavailable` with the error's public projection.
pub trait ToolProvider: Send + Sync + 'static {
    /// The provider's name: `[a-z][a-z0-9_]*`, the first segment of its tools' ids.
    fn name(&self) -> &str;

    /// The tools this provider offers to the execution of `scope`.
    fn tools(&self, scope: ToolScope) -> BoxFuture<'_, Result<Vec<ProvidedTool>, HarnessError>>;

    /// A bounded, side-effect-free check that the provider could list its tools now: its
    /// program can be started, its server answers. Nothing is started or changed, and no
    /// caller credential is sent. A reason, when not ready, names the provider and is safe
    /// to show a caller (`` MCP server `files`: its command is not found ``); details go to
    /// the log. The caller bounds it with a deadline too. Ready by default.
    fn health(&self) -> BoxFuture<'_, HarnessHealth> {
        Box::pin(async { HarnessHealth::ready() })
    }
}

/// A [`ToolSet`] could not take a tool or provider.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolSetError {
    /// Two tools with one id.
    #[error("tool `{0}` is registered twice: give each tool its own id")]
    DuplicateTool(ToolId),
    /// A provider name that is not one tool-id segment.
    #[error("tool provider name `{0}` is invalid: expected one lowercase segment [a-z][a-z0-9_]*")]
    InvalidProviderName(String),
    /// Two providers with one name, or a provider named like a registered tool's first
    /// segment.
    #[error(
        "tool provider `{0}` clashes with a provider or a tool already registered under that \
         name: tool ids must tell their provider"
    )]
    Clash(String),
    /// The policy does not fit the tool.
    #[error(transparent)]
    Policy(#[from] InvalidToolPolicy),
}

/// The tools a service offers its executions: tools registered one by one, and
/// [`ToolProvider`]s whose tools are listed per execution.
///
/// Each execution gets every tool of the set, or, when its request lists
/// [`tools`](crate::service::ExecutionRequest::tools), those it names: a tool id, or a
/// provider's name for all of that provider's tools. Each reaches the runtime as a
/// [`ToolHandle`] under the tool's [`ToolPolicy`], cancelled with the execution.
///
/// ```
/// use harness_core::tool::{FnTool, ToolPolicy, ToolSet};
/// use schemars::JsonSchema;
/// use serde::Deserialize;
///
/// #[derive(Deserialize, JsonSchema)]
/// struct Path { path: String }
///
/// let read = FnTool::new("files.read".parse()?, "Reads a file.", |p: Path, _| async move {
///     Ok::<_, String>(format!("contents of {}", p.path))
/// })?;
/// let delete = FnTool::new("files.delete".parse()?, "Deletes a file.", |p: Path, _| async move {
///     Ok::<_, String>(format!("deleted {}", p.path))
/// })?;
/// let tools = ToolSet::new()
///     .tool(read)?
///     .tool_with_policy(delete, ToolPolicy::new().needs_approval())?;
/// assert_eq!(tools.tool_ids().len(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default)]
pub struct ToolSet {
    tools: BTreeMap<ToolId, ProvidedTool>,
    providers: BTreeMap<String, Arc<dyn ToolProvider>>,
}

impl fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolSet")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .field("providers", &self.providers.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The tools resolved for one execution.
#[derive(Debug, Clone, Default)]
pub struct ResolvedTools {
    /// The tools the execution has, each behind its handle.
    pub handles: Vec<ToolHandle>,
    /// What it was to have and has not (`tool.unavailable` events).
    pub unavailable: Vec<ToolUnavailable>,
}

impl ToolSet {
    /// No tool.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `tool` with the default [`ToolPolicy`].
    ///
    /// # Errors
    /// As [`tool_with_policy`](Self::tool_with_policy).
    pub fn tool(self, tool: impl PortableTool + 'static) -> Result<Self, ToolSetError> {
        self.tool_with_policy(tool, ToolPolicy::new())
    }

    /// Registers `tool`, its calls running under `policy`.
    ///
    /// # Errors
    /// When a tool of that id is registered, a provider owns its first segment, or the
    /// policy does not fit the tool.
    pub fn tool_with_policy(
        mut self,
        tool: impl PortableTool + 'static,
        policy: ToolPolicy,
    ) -> Result<Self, ToolSetError> {
        let id = tool.descriptor().id().clone();
        policy.check(tool.descriptor())?;
        if self.tools.contains_key(&id) {
            return Err(ToolSetError::DuplicateTool(id));
        }
        let first = id.segments().next().unwrap_or_default();
        if self.providers.contains_key(first) {
            return Err(ToolSetError::Clash(first.to_owned()));
        }
        self.tools
            .insert(id, ProvidedTool::new(Arc::new(tool), policy));
        Ok(self)
    }

    /// Registers a provider; its tools are listed per execution.
    ///
    /// # Errors
    /// When its name is not one tool-id segment, or a provider or tool already uses it.
    pub fn provider(mut self, provider: impl ToolProvider) -> Result<Self, ToolSetError> {
        let name = provider.name().to_owned();
        if name.contains('.') || !ToolId::is_valid(&name) {
            return Err(ToolSetError::InvalidProviderName(name));
        }
        let taken = self.providers.contains_key(&name)
            || self
                .tools
                .keys()
                .any(|id| id.segments().next() == Some(name.as_str()));
        if taken {
            return Err(ToolSetError::Clash(name));
        }
        self.providers.insert(name, Arc::new(provider));
        Ok(self)
    }

    /// The health of every provider ([`ToolProvider::health`]), asked concurrently: ready
    /// when all are (a set without providers is), else not ready with the reasons of those
    /// that are not, in provider-name order, joined by `; `. Tools registered one by one
    /// run in process and are always ready.
    ///
    /// ```
    /// use harness_core::tool::ToolSet;
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// assert!(ToolSet::new().health().await.ready);
    /// # });
    /// ```
    pub async fn health(&self) -> HarnessHealth {
        let checks = self.providers.values().map(|p| p.health());
        let reasons: Vec<String> = futures_util::future::join_all(checks)
            .await
            .into_iter()
            .zip(self.providers.keys())
            .filter(|(health, _)| !health.ready)
            .map(|(health, name)| {
                health
                    .reason
                    .unwrap_or_else(|| format!("tool provider `{name}` is not ready"))
            })
            .collect();
        if reasons.is_empty() {
            HarnessHealth::ready()
        } else {
            HarnessHealth::not_ready(reasons.join("; "))
        }
    }

    /// Whether the set offers nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty() && self.providers.is_empty()
    }

    /// The ids of the tools registered one by one.
    #[must_use]
    pub fn tool_ids(&self) -> Vec<&ToolId> {
        self.tools.keys().collect()
    }

    /// The names of the providers.
    #[must_use]
    pub fn provider_names(&self) -> Vec<&str> {
        self.providers.keys().map(String::as_str).collect()
    }

    /// Checks a request's selection before anything runs: each entry must name a
    /// registered tool, a provider, or a tool under a provider (which the provider is then
    /// asked for; one it does not offer is reported `tool.unavailable`).
    ///
    /// # Errors
    /// `configuration`, [`ErrorCode::TOOL_NOT_FOUND`], naming the entries and what the set
    /// offers.
    pub fn check_selection(&self, selection: &[ToolId]) -> Result<(), HarnessError> {
        let unknown: Vec<&str> = selection
            .iter()
            .filter(|id| {
                !self.tools.contains_key(*id)
                    && !self
                        .providers
                        .contains_key(id.segments().next().unwrap_or_default())
            })
            .map(ToolId::as_str)
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        Err(not_found(&unknown, self))
    }

    /// The tools of one execution: those `selection` names (all when `None`), each behind
    /// a handle under its policy, cancelled by `cancellation`; providers are asked
    /// concurrently, each with the caller's credential for it from `credentials`.
    pub async fn resolve(
        &self,
        selection: Option<&[ToolId]>,
        execution_id: &ExecutionId,
        credentials: Option<&CallerCredentials>,
        cancellation: &CancellationToken,
    ) -> ResolvedTools {
        let mut resolved = ResolvedTools::default();
        let mut seen = BTreeSet::new();
        let handle = |tool: &ProvidedTool| -> Result<ToolHandle, InvalidToolPolicy> {
            Ok(ToolHandle::new(Arc::clone(&tool.tool))
                .with_policy(tool.policy)?
                .cancelled_by(cancellation.clone()))
        };
        // Which providers, and for each, all its tools (None) or the ids named.
        let mut wanted: BTreeMap<&str, Option<Vec<&ToolId>>> = BTreeMap::new();
        match selection {
            None => {
                for tool in self.tools.values() {
                    push(&mut resolved, &mut seen, handle(tool));
                }
                for name in self.providers.keys() {
                    wanted.insert(name, None);
                }
            }
            Some(selection) => {
                for id in selection {
                    if let Some(tool) = self.tools.get(id) {
                        if !seen.contains(id) {
                            push(&mut resolved, &mut seen, handle(tool));
                        }
                        continue;
                    }
                    let mut segments = id.segments();
                    let name = segments.next().unwrap_or_default();
                    let Some((name, _)) = self.providers.get_key_value(name) else {
                        continue; // refused by check_selection before the execution started
                    };
                    let whole = segments.next().is_none();
                    match wanted.entry(name) {
                        std::collections::btree_map::Entry::Vacant(v) => {
                            v.insert((!whole).then(|| vec![id]));
                        }
                        std::collections::btree_map::Entry::Occupied(mut o) => {
                            match (o.get_mut(), whole) {
                                (Some(ids), false) => ids.push(id),
                                (entry, true) => *entry = None,
                                (None, false) => {}
                            }
                        }
                    }
                }
            }
        }
        let asked = wanted.iter().filter_map(|(name, ids)| {
            let provider = self.providers.get(*name)?;
            let mut scope = ToolScope::new(execution_id.clone(), cancellation.clone());
            let credential = credentials.and_then(|c| c.get(name)).cloned();
            if let Some(credential) = &credential {
                scope = scope.with_credential(credential.clone());
            }
            Some(async move {
                let listed = provider.tools(scope).await;
                (*name, ids, credential, listed)
            })
        });
        for (name, ids, credential, listed) in futures_util::future::join_all(asked).await {
            let tools = match listed {
                Ok(tools) => tools,
                Err(err) => {
                    resolved.unavailable.push(ToolUnavailable {
                        source: name.to_owned(),
                        tools: ids
                            .iter()
                            .flatten()
                            .map(|id| id.as_str().to_owned())
                            .collect(),
                        error: err.public(),
                    });
                    continue;
                }
            };
            let mut offered = BTreeSet::new();
            for mut tool in tools {
                let id = tool.id().clone();
                if id.segments().next() != Some(name) {
                    resolved.unavailable.push(outside(name, &id));
                    continue;
                }
                offered.insert(id.clone());
                if ids.as_ref().is_some_and(|ids| !ids.contains(&&id)) || seen.contains(&id) {
                    continue;
                }
                if let Some(secret) = credential.as_ref().filter(|c| !c.expose().is_empty()) {
                    tool.tool = Arc::new(Scrubbed::new(tool.tool, secret.clone()));
                }
                push(&mut resolved, &mut seen, handle(&tool));
            }
            let missing: Vec<String> = ids
                .iter()
                .flatten()
                .filter(|id| !offered.contains(**id))
                .map(|id| id.as_str().to_owned())
                .collect();
            if !missing.is_empty() {
                let err = HarnessError::new(
                    ErrorCategory::Configuration,
                    format!(
                        "tool provider `{name}` does not offer {}",
                        missing.join(", ")
                    ),
                )
                .with_code(ErrorCode::TOOL_NOT_FOUND);
                resolved.unavailable.push(ToolUnavailable {
                    source: name.to_owned(),
                    tools: missing,
                    error: err.public(),
                });
            }
        }
        resolved
    }
}

fn push(
    resolved: &mut ResolvedTools,
    seen: &mut BTreeSet<ToolId>,
    handle: Result<ToolHandle, InvalidToolPolicy>,
) {
    match handle {
        Ok(handle) => {
            seen.insert(handle.id().clone());
            resolved.handles.push(handle);
        }
        Err(invalid) => {
            let err = HarnessError::new(ErrorCategory::Configuration, invalid.to_string())
                .with_code(ErrorCode::TOOL_NOT_FOUND);
            resolved.unavailable.push(ToolUnavailable {
                source: invalid.tool.as_str().to_owned(),
                tools: vec![invalid.tool.as_str().to_owned()],
                error: err.public(),
            });
        }
    }
}

fn outside(provider: &str, id: &ToolId) -> ToolUnavailable {
    let err = HarnessError::new(
        ErrorCategory::Protocol,
        format!("tool provider `{provider}` offered `{id}`, outside its namespace `{provider}.`"),
    )
    .with_code(ErrorCode::TOOL_NOT_FOUND);
    ToolUnavailable {
        source: provider.to_owned(),
        tools: vec![id.as_str().to_owned()],
        error: err.public(),
    }
}

fn not_found(unknown: &[&str], set: &ToolSet) -> HarnessError {
    const SHOWN: usize = 20;
    let mut offered: Vec<&str> = set.tools.keys().map(ToolId::as_str).collect();
    offered.extend(set.providers.keys().map(String::as_str));
    let more = offered.len().saturating_sub(SHOWN);
    offered.truncate(SHOWN);
    let offered = if offered.is_empty() {
        "none".to_owned()
    } else if more > 0 {
        format!("{} and {more} more", offered.join(", "))
    } else {
        offered.join(", ")
    };
    HarnessError::new(
        ErrorCategory::Configuration,
        format!(
            "the request selects tools this service does not offer: {}; it offers: {offered} \
             (a tool id, or a provider's name for all its tools)",
            unknown.join(", ")
        ),
    )
    .with_code(ErrorCode::TOOL_NOT_FOUND)
}

/// The marker a scrubbed credential becomes (the redactor's marker for exact secrets).
const SCRUBBED: &str = "[REDACTED:secret]";

/// A provider's tool given a caller's credential: every string it gives back is scrubbed of
/// the credential, its descriptor too.
struct Scrubbed {
    inner: Arc<dyn PortableTool>,
    descriptor: ToolDescriptor,
    secret: Credential,
}

impl Scrubbed {
    fn new(inner: Arc<dyn PortableTool>, secret: Credential) -> Self {
        let original = inner.descriptor();
        let mut schema = original.input_schema().clone();
        let description = scrub_str(original.description(), secret.expose());
        let changed = scrub(&mut schema, secret.expose()) || description != original.description();
        let descriptor = if changed {
            ToolDescriptor::new(original.id().clone(), description, schema)
                .map(|d| d.with_annotations(original.annotations()))
                // A schema that no longer compiles once scrubbed: an empty object schema
                // (the handle then refuses nothing the tool itself would not).
                .unwrap_or_else(|_| original.clone())
        } else {
            original.clone()
        };
        Self {
            inner,
            descriptor,
            secret,
        }
    }
}

impl PortableTool for Scrubbed {
    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    fn invoke(&self, arguments: Value, ctx: ToolCallContext) -> BoxFuture<'_, ToolOutcome> {
        let call = self.inner.invoke(arguments, ctx);
        Box::pin(async move {
            let secret = self.secret.expose();
            match call.await {
                ToolOutcome::Success(mut output) => {
                    scrub(&mut output, secret);
                    ToolOutcome::Success(output)
                }
                ToolOutcome::Failure(f) => ToolOutcome::Failure(
                    BoundedFailure::new(scrub_str(f.message(), secret))
                        .with_code(f.code().clone())
                        .with_retryable(f.retryable()),
                ),
                action @ ToolOutcome::Action(_) => action,
            }
        })
    }
}

fn scrub_str(s: &str, secret: &str) -> String {
    s.replace(secret, SCRUBBED)
}

/// Scrubs every string of `value` (keys included); whether anything changed.
fn scrub(value: &mut Value, secret: &str) -> bool {
    match value {
        Value::String(s) if s.contains(secret) => {
            *s = scrub_str(s, secret);
            true
        }
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |changed, item| scrub(item, secret) | changed),
        Value::Object(map) => {
            let mut changed = false;
            let keys: Vec<String> = map.keys().filter(|k| k.contains(secret)).cloned().collect();
            for key in keys {
                if let Some(item) = map.remove(&key) {
                    map.insert(scrub_str(&key, secret), item);
                    changed = true;
                }
            }
            for item in map.values_mut() {
                changed |= scrub(item, secret);
            }
            changed
        }
        _ => false,
    }
}
