//! [`AcpAdapter`] and its runtime: one agent process and one ACP session per execution.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use agent_client_protocol as acp;
use agent_client_protocol::v1::schema::{
    CancelNotification, ContentBlock, CreateElicitationRequest, CreateElicitationResponse,
    ElicitationAction, LoadSessionRequest, NewSessionRequest, PermissionOptionId,
    PermissionOptionKind, PromptRequest, PromptResponse, RequestPermissionOutcome,
    RequestPermissionRequest, RequestPermissionResponse, SelectedPermissionOutcome, SessionId,
    SessionNotification, SessionUpdate, StopReason, TextContent, ToolCallContent, ToolCallStatus,
};
use futures_util::{StreamExt, stream};
use harness_core::action::ActionRequest;
use harness_core::action::{
    ApprovalRequest, Decision, DecisionKind, FormRequest, ToolCallApproval, ValidatedResponse,
};
use harness_core::adapter::{
    AdapterEvent, AgentConfig, BoxFuture, BoxStream, CancelResult, DeploymentContext, EventResult,
    HarnessAdapter, HarnessRuntime, ResumeDecision, RuntimeContext, RuntimeIdentity, RuntimeInit,
    TurnInput,
};
use harness_core::capability::{Capability, CapabilityKey, CapabilityReport};
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::event::{
    CancelReason, Content, NativeEvent, RunSucceeded, TextDelta, ToolCall, ToolCallCompleted,
    ToolCallOutcome,
};
use harness_core::id::{ActionId, AdapterId, ToolCallId};
use harness_core::manifest::{Adapter, HarnessDescriptor};
use harness_core::middleware::{PortableMiddlewarePolicy, ToolAction, ToolDecision};
use harness_core::session::{Conversation, ScopedThreadState, StateKey};
use harness_layers::redaction::Redactor;
use harness_macros::Adapter;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use crate::client::{AgentProcess, Inbound, Reaped, protocol};
use crate::elicitation::{self, Unsupported};
use crate::options::{AcpAgent, AcpOptions, SessionSetup};
use crate::setup;

/// The adapter id.
pub const ADAPTER_ID: &str = "acp";
/// The namespace of native events.
pub const NAMESPACE: &str = "acp";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Counters of what the adapter's runtimes did, shared by all of them.
#[derive(Debug, Default)]
pub struct Stats {
    agents_started: AtomicU64,
    probes: AtomicU64,
    graceful_cancels: AtomicU64,
    forced_cancels: AtomicU64,
    pub(crate) inbound_peak: AtomicU64,
    pub(crate) inbound_stalls: AtomicU64,
    pub(crate) updates_dropped: AtomicU64,
    pub(crate) reaping: AtomicU64,
    pub(crate) groups_reaped: AtomicU64,
    pub(crate) groups_terminated: AtomicU64,
    pub(crate) groups_killed: AtomicU64,
}

/// A copy of the [`Stats`] counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatsSnapshot {
    /// Agent processes spawned for executions.
    pub agents_started: u64,
    /// Agent processes spawned by `evaluate` to probe what the agent negotiates (once per
    /// adapter: the result is cached).
    pub probes: u64,
    /// Cancels whose turn ended within the grace period after `session/cancel`.
    pub graceful_cancels: u64,
    /// Cancels that had to terminate the agent's process group.
    pub forced_cancels: u64,
    /// The most messages the agent sent (updates, permission and elicitation requests) that
    /// waited for a runtime at once: never more than [`INBOUND_LIMIT`](crate::INBOUND_LIMIT).
    pub inbound_peak: u64,
    /// How many times a connection stopped reading the agent's output because that many
    /// were waiting (backpressure).
    pub inbound_stalls: u64,
    /// Updates dropped because they arrived after a cancel while that many were waiting.
    pub updates_dropped: u64,
    /// Agents' process groups being reaped now, after the run (or probe) they served ended:
    /// a run's terminal event does not wait for its agent's group.
    pub reaping: u64,
    /// Agents' process groups reaped (each agent's, once).
    pub groups_reaped: u64,
    /// Process groups in which a process still ran when the agent was stopped, and was sent
    /// `SIGTERM` (a group that had exited on its own is not signalled).
    pub groups_terminated: u64,
    /// Process groups in which a process outlived `SIGTERM` by the cancel grace and was
    /// killed with `SIGKILL`.
    pub groups_killed: u64,
}

impl Stats {
    /// The counters now.
    #[must_use]
    pub fn snapshot(&self) -> StatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::SeqCst);
        StatsSnapshot {
            agents_started: get(&self.agents_started),
            probes: get(&self.probes),
            graceful_cancels: get(&self.graceful_cancels),
            forced_cancels: get(&self.forced_cancels),
            inbound_peak: get(&self.inbound_peak),
            inbound_stalls: get(&self.inbound_stalls),
            updates_dropped: get(&self.updates_dropped),
            reaping: get(&self.reaping),
            groups_reaped: get(&self.groups_reaped),
            groups_terminated: get(&self.groups_terminated),
            groups_killed: get(&self.groups_killed),
        }
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::SeqCst);
}

/// The process groups of ended runs still being reaped, by the ACP session they served: a
/// later turn of that session waits for its group before starting its own agent, so that
/// what the group's processes write on their way out (Claude Code's session transcript) is
/// there for `session/load`. Holds only groups not yet reaped.
#[derive(Debug, Default)]
struct Reaping(Mutex<HashMap<SessionId, Reaped>>);

impl Reaping {
    fn insert(&self, session: SessionId, reaped: Reaped) {
        let mut groups = lock(&self.0);
        groups.retain(|_, group| !group.done());
        if !reaped.done() {
            groups.insert(session, reaped);
        }
    }

    /// Waits until the group that last served `session` (if any is still being reaped) is
    /// reaped: bounded, as the reaping is.
    async fn settled(&self, session: &SessionId) {
        let group = lock(&self.0).get(session).cloned();
        if let Some(group) = group {
            group.wait().await;
        }
    }
}

/// Redacts the agent's stderr before it enters a diagnostic.
static STDERR_REDACTOR: LazyLock<Option<Redactor>> =
    LazyLock::new(|| Redactor::builder().build().ok());

/// How long `evaluate` waits for the agent to start and answer `initialize`.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// What an agent negotiated at `initialize`, as `evaluate` found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Probed {
    load_session: bool,
    /// `promptCapabilities.image` and `.embeddedContext`.
    image: bool,
    embedded_context: bool,
}

/// The name [`AcpAdapter::new`] registers its agent under: the agent that runs when a request
/// names none.
pub const DEFAULT_AGENT: &str = "default";

/// The longest agent name [`AcpAdapter::with_agent`] accepts.
pub const MAX_AGENT_NAME: usize = 64;

/// One of the operator's agents, with what its probe found.
#[derive(Debug, Clone)]
struct Profile {
    name: Arc<str>,
    agent: Arc<AcpAgent>,
    /// Probed once for the adapter and its clones; a failed or dropped probe leaves the cell
    /// empty (retried by the next `evaluate`). One cell per agent, so a slow agent never holds
    /// up `evaluate` for another.
    probed: Arc<tokio::sync::OnceCell<Probed>>,
}

impl Profile {
    fn new(name: &str, agent: AcpAgent) -> Self {
        Self {
            name: Arc::from(name),
            agent: Arc::new(agent),
            probed: Arc::default(),
        }
    }
}

/// The ACP session a conversation maps to, and the name of the agent it lives in.
#[derive(Debug, Clone)]
struct Bound {
    agent: Arc<str>,
    session: SessionId,
}

/// Where a conversation's [`Bound`] lives in its thread state.
const BOUND_KEY: &str = "acp/session";

/// [`Bound`] as the thread state keeps it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StoredBound {
    agent: String,
    session_id: String,
}

fn bound_key() -> StateKey {
    BOUND_KEY.parse().expect("a valid state key")
}

/// Refuses a conversation whose session lives in another agent than `agent`.
fn same_agent(
    bound: &Bound,
    conversation: &Conversation,
    agent: &str,
) -> Result<SessionId, HarnessError> {
    if &*bound.agent == agent {
        return Ok(bound.session.clone());
    }
    Err(HarnessError::new(
        ErrorCategory::Configuration,
        format!(
            "conversation {conversation} cannot be continued with agent `{agent}`: its ACP \
             session lives in agent `{}`; continue it with that agent, or start a new \
             conversation",
            bound.agent
        ),
    )
    .with_code(ErrorCode::OPTIONS_INVALID))
}

/// A conversation's mapped ACP session, if any, for the agent `agent`; a conversation bound
/// to another agent is a `configuration` error naming both.
fn session_for(
    sessions: &Mutex<HashMap<Conversation, Bound>>,
    conversation: Option<&Conversation>,
    agent: &str,
) -> Result<Option<SessionId>, HarnessError> {
    let Some(conversation) = conversation else {
        return Ok(None);
    };
    match lock(sessions).get(conversation) {
        None => Ok(None),
        Some(bound) => same_agent(bound, conversation, agent).map(Some),
    }
}

/// Drives any ACP agent: see the [crate docs](crate).
///
/// The operator builds it from [`AcpAgent`]s: a default one ([`new`](Self::new)) and any
/// number of named ones ([`with_agent`](Self::with_agent)). A caller's request picks one by
/// name at most (its options are [`AcpOptions`]); it chooses no program, directory or
/// environment. An unknown name is refused as `OPTIONS_INVALID` before anything starts.
///
/// Which ACP session each conversation maps to, and in which agent, is kept in the
/// conversation's thread state (key `acp/session`), which the service hands each execution
/// of a conversation: a conversation's later turns with the same agent reopen that session
/// with `session/load`, on this adapter or on another replica over the same store; with
/// another agent, they are refused as `configuration` before the agent is started. A
/// cleared session (a new epoch of its binding) has no mapping: its next turn opens a new
/// ACP session. An agent that no longer knows the session (its storage gone) fails the turn
/// `persistence`: the conversation's state expired, and it is said so, not silently started
/// afresh. The adapter also remembers the mappings it made in memory (shared by its clones),
/// so that `evaluate` can refuse another agent before any probe.
///
/// ```
/// use harness_acp::{AcpAdapter, AcpAgent, AcpOptions, DEFAULT_AGENT};
/// let adapter = AcpAdapter::new(AcpAgent::new(["my-agent", "--acp"], "/srv/workspace"))?
///     .with_agent("other", AcpAgent::new(["other-agent"], "/srv/other"))?;
/// assert_eq!(adapter.agents().collect::<Vec<_>>(), [DEFAULT_AGENT, "other"]);
/// assert_eq!(adapter.agent(DEFAULT_AGENT).unwrap().command[0], "my-agent");
/// // What a request sets to run the other agent.
/// let options = AcpOptions::named("other").to_value();
/// assert_eq!(options, serde_json::json!({"agent": "other"}));
/// // A relative workspace is refused when the adapter is built, not at the first execution.
/// assert!(AcpAdapter::new(AcpAgent::new(["my-agent"], "workspace")).is_err());
/// # Ok::<(), harness_core::error::HarnessError>(())
/// ```
#[derive(Debug, Clone, Adapter)]
#[adapter(
    id = "acp",
    name = "Agent Client Protocol (any ACP agent over stdio)",
    contract_versions = [1],
    execution_mode = in_process(compatibility_only),
    trust_boundary = local_subprocess,
    dependency(kind = crate, name = "agent-client-protocol", version = "5.2"),
    options = AcpOptions,
    capability(
        "stream.text",
        native,
        explanation = "agent_message_chunk text becomes message.delta",
    ),
    capability(
        "stream.reasoning",
        native,
        explanation = "agent_thought_chunk text becomes reasoning.delta",
    ),
    capability(
        "input.images",
        native,
        explanation = "images go to the agent as ACP image blocks when its \
            promptCapabilities.image is true; an agent that does not take images fails the \
            turn (FILE_MODALITY_UNSUPPORTED, naming the file) before the prompt is sent",
        constraints(mediaTypes = ["image/png", "image/jpeg", "image/gif", "image/webp"]),
    ),
    capability(
        "input.documents",
        native,
        explanation = "documents go to the agent as embedded resource blocks (text as text, \
            PDFs as a base64 blob, named by an opaque harness-input: URI) when its \
            promptCapabilities.embeddedContext is true; otherwise the turn fails \
            (FILE_MODALITY_UNSUPPORTED, naming the file) before the prompt is sent. No \
            resource_link: the agent gets no path or URL it could read on the host",
        constraints(mediaTypes = ["application/pdf", "text/plain", "text/markdown", "application/json"]),
    ),
    capability(
        "skills",
        native,
        explanation = "granted skills are written in the agent's workspace, where the operator \
            says it reads skill folders (AcpAgent::skills_dir), for the execution's life; an \
            agent without a skills folder reports skills unsupported",
    ),
    capability(
        "invoke.non_streaming",
        emulated,
        explanation = "ACP has no non-streaming prompt: the service's invoke collects the \
            outcome from the execution's events",
    ),
    capability(
        "stream.usage",
        unsupported,
        explanation = "ACP v1 reports context-window occupancy (usage_update: tokens in context \
            and window size), not token increments; it is emitted as the native \
            event acp.usage_update",
    ),
    capability(
        "session.multi_turn",
        native,
        explanation = "a conversation maps to an ACP session: the first turn opens it with \
            session/new, later turns reopen it with session/load; evaluate reports \
            it unsupported for an agent that does not negotiate loadSession",
        constraints(requires = "agentCapabilities.loadSession"),
    ),
    capability(
        "session.clear",
        native,
        explanation = "the conversation's session mapping lives in its thread state: a cleared \
            session (a new epoch) has none, and its next turn opens a new ACP session",
        constraints(requires = "agentCapabilities.loadSession"),
    ),
    capability(
        "thread.eviction_restore",
        native,
        explanation = "the mapping is read back from the thread state by any runtime, process \
            or replica, and the agent reopens the session with session/load; an agent \
            that no longer has the session fails the turn `persistence`",
        constraints(requires = "agentCapabilities.loadSession"),
    ),
    capability(
        "session.cross_replica_resume",
        unsupported,
        explanation = "a paused permission request or elicitation belongs to the agent process \
            that asked: when its replica is lost, so is the question, and the execution \
            ends OWNER_LOST",
    ),
    capability(
        "runtime.lease_fencing",
        native,
        explanation = "a replica fenced off by the store cancels the run: session/cancel, then \
            the agent's process group is shut down",
    ),
    capability(
        "runtime.eviction_recovery",
        unsupported,
        explanation = "a paused permission request or elicitation belongs to the agent process \
            that asked, and no fresh process could answer it: the service's pool of idle \
            runtimes never evicts a paused ACP runtime, which stays alive until answered",
    ),
    capability(
        "interrupt.form_input",
        native,
        explanation = "a form-mode elicitation/create becomes form input; the client advertises \
            elicitation.form, and the agent decides whether to ask; evaluate reports it \
            unsupported unless the operator vouches that the agent asks (AcpAgent::elicitation)",
        constraints(when = "the operator vouches that the agent asks"),
    ),
    capability(
        "middleware.portable",
        degraded,
        explanation = "the operator's middleware policy decides each session/request_permission \
            (matched by the call's title and by acp.kind.<kind>): a denied call is rejected \
            without asking the caller, allowed and approval-required ones ask; the caps \
            narrow the run limits. The agent's own tools run in the agent: a call it makes \
            without asking (an edit in a mode that does not ask) bypasses the boundary, and \
            their arguments and results are neither rewritten, bounded nor redacted before \
            the agent's model reads them",
        constraints(
            requires = "an agent that asks permission for every call the policy governs",
            when = "permission requests; not the agent's tool arguments or results"
        ),
    ),
    capability(
        "interrupt.tool_approval",
        native,
        explanation = "session/request_permission becomes a tool approval: allow_* options \
            approve, reject_* options reject; editing the arguments is not offered",
    ),
    capability(
        "tool.builtin",
        native,
        explanation = "the agent's own tool calls are reported as tool.call events",
    ),
    capability(
        "tool.mcp",
        native,
        explanation = "the operator's MCP servers (AcpAgent::mcp_servers) are given to the \
            agent in session/new and session/load, and it offers their tools to its model; \
            credentials stay behind the control plane: a server with headers is proxied and a \
            stdio server with variables is run by the control plane and bridged, both served \
            to the agent on a loopback URL without the secret (an agent without \
            mcpCapabilities.http is refused such a server); the others are forwarded as \
            configured; evaluate names each server's way, and reports it unsupported for an \
            agent without any",
        constraints(
            when = "the operator configures mcpServers",
            credentials = "proxied"
        ),
    ),
    capability(
        "observability.metrics",
        native,
        explanation = "every outcome (success, failure, cancel) reaches the execution's log, so \
            the metrics layer counts and times each execution by outcome and its \
            events by kind",
    ),
    capability(
        "observability.tracing",
        native,
        explanation = "the tasks the runtime spawns (the ACP connection, the stderr reader) are \
            instrumented with the span that started the agent: the execution's",
    ),
    capability(
        "observability.trace_propagation",
        native,
        explanation = "the turn's W3C trace context is sent in the `_meta` of session/prompt \
            (`traceparent`, `tracestate`), the root keys ACP reserves for it; the \
            agent decides whether to continue the trace, and evaluate reports it \
            unsupported unless the operator vouches that it does (AcpAgent::trace_context)",
        constraints(via = "session/prompt _meta"),
    ),
    capability(
        "observability.redaction",
        native,
        explanation = "everything the agent produces is yielded to the runtime stack, where redaction \
            applies; the adapter opens no span and logs nothing, the agent's stderr \
            is redacted and kept in the internal diagnostic only, and the ACP crate \
            traces message payloads redacted",
    ),
    capability(
        "runtime.cancel",
        native,
        explanation = "session/cancel, pending permission requests and elicitations answered as \
            cancelled, then the process group terminated and killed after the grace \
            period",
    ),
    capability(
        "runtime.sandbox_isolation",
        native,
        explanation = "an agent the operator runs in a sandbox profile (AcpAgent::in_sandbox; \
            `sandbox = \"<name>\"` in harness.toml) runs in a bubblewrap sandbox: every \
            namespace unshared, only its workspace and the profile's read-only paths, only \
            the profile's loopback endpoints, torn down at the profile's limits; evaluate \
            reports it unsupported for an agent without one",
        constraints(when = "the operator runs the agent in a sandbox profile"),
    ),
    capability(
        "runtime.bounded_cleanup",
        native,
        explanation = "cleanup terminates, then kills, the agent's whole process group",
    ),
)]
pub struct AcpAdapter {
    /// The operator's agents by name, [`DEFAULT_AGENT`] among them.
    profiles: Arc<BTreeMap<String, Profile>>,
    stats: Arc<Stats>,
    reaping: Arc<Reaping>,
    sessions: Arc<Mutex<HashMap<Conversation, Bound>>>,
}

impl AcpAdapter {
    /// The adapter running `agent` (as [`DEFAULT_AGENT`]) for every request that names no
    /// agent.
    ///
    /// # Errors
    /// A `configuration` error (`OPTIONS_INVALID`) when [`AcpAgent::check`] refuses `agent`.
    pub fn new(agent: AcpAgent) -> Result<Self, HarnessError> {
        agent.check()?;
        let profiles =
            BTreeMap::from([(DEFAULT_AGENT.to_owned(), Profile::new(DEFAULT_AGENT, agent))]);
        Ok(Self {
            profiles: Arc::new(profiles),
            stats: Arc::default(),
            reaping: Arc::default(),
            sessions: Arc::default(),
        })
    }

    /// Also offers `agent` under `name`, for requests whose options name it
    /// (`{"agent": name}`). Names are the operator's: callers see them in errors.
    ///
    /// # Errors
    /// A `configuration` error (`OPTIONS_INVALID`) when `name` is taken, empty, longer than
    /// [`MAX_AGENT_NAME`] or not made of ASCII letters, digits, `-`, `_` and `.`, or when
    /// [`AcpAgent::check`] refuses `agent`.
    pub fn with_agent(
        mut self,
        name: impl Into<String>,
        agent: AcpAgent,
    ) -> Result<Self, HarnessError> {
        let name = name.into();
        let valid = !name.is_empty()
            && name.len() <= MAX_AGENT_NAME
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !valid {
            return Err(HarnessError::new(
                ErrorCategory::Configuration,
                format!(
                    "invalid agent name {name:?} for the acp adapter: use 1 to {MAX_AGENT_NAME} \
                     ASCII letters, digits, `-`, `_` or `.`"
                ),
            )
            .with_code(ErrorCode::OPTIONS_INVALID));
        }
        if self.profiles.contains_key(&name) {
            return Err(HarnessError::new(
                ErrorCategory::Configuration,
                format!("the acp adapter already has an agent named `{name}`"),
            )
            .with_code(ErrorCode::OPTIONS_INVALID));
        }
        agent.check()?;
        let profile = Profile::new(&name, agent);
        Arc::make_mut(&mut self.profiles).insert(name, profile);
        Ok(self)
    }

    /// The agent registered as `name`.
    #[must_use]
    pub fn agent(&self, name: &str) -> Option<&AcpAgent> {
        self.profiles.get(name).map(|profile| &*profile.agent)
    }

    /// The names of the registered agents, in order.
    pub fn agents(&self) -> impl Iterator<Item = &str> {
        self.profiles.keys().map(String::as_str)
    }

    /// The agent a request's options pick, and the session setup they choose (checked against
    /// what that agent lets callers choose).
    fn profile(&self, options: &Value) -> Result<(&Profile, SessionSetup), HarnessError> {
        let options = AcpOptions::from_value(options)?;
        let name = options.agent.as_deref().unwrap_or(DEFAULT_AGENT);
        let profile = self.profiles.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.agents().collect();
            HarnessError::new(
                ErrorCategory::Configuration,
                format!(
                    "the acp adapter has no agent named {name:?}; its agents are: {}",
                    known.join(", ")
                ),
            )
            .with_code(ErrorCode::OPTIONS_INVALID)
        })?;
        let setup = profile.agent.setup(&options)?;
        Ok((profile, setup))
    }

    /// The counters shared by this adapter's runtimes.
    #[must_use]
    pub fn stats(&self) -> Arc<Stats> {
        Arc::clone(&self.stats)
    }

    /// The ACP session id a conversation (in its caller's scope) maps to, from the moment its
    /// first execution opened the session (whether or not that turn succeeded).
    #[must_use]
    pub fn session_of(&self, conversation: &Conversation) -> Option<String> {
        lock(&self.sessions)
            .get(conversation)
            .map(|bound| bound.session.0.to_string())
    }

    /// Starts the agent, negotiates `initialize` and shuts it down again (bounded by
    /// [`PROBE_TIMEOUT`]); the result is cached for the adapter and its clones, so each agent
    /// is probed once however many executions are evaluated.
    async fn probe(&self, profile: &Profile) -> Result<Probed, HarnessError> {
        profile
            .probed
            .get_or_try_init(|| self.run_probe(&profile.agent))
            .await
            .copied()
    }

    async fn run_probe(&self, options: &AcpAgent) -> Result<Probed, HarnessError> {
        bump(&self.stats.probes);
        let (tx, _rx) = mpsc::unbounded_channel();
        let started = tokio::time::timeout(PROBE_TIMEOUT, async {
            let agent = AgentProcess::spawn(options, tx, Arc::clone(&self.stats), None).await?;
            let result = agent.initialize(options.files).await;
            agent.shutdown(Duration::from_millis(500)).await;
            result.map_err(|e| with_stderr(&agent, e))
        })
        .await;
        let init = match started {
            Ok(Ok(init)) => init,
            Ok(Err(e)) => {
                let message = format!(
                    "the ACP agent could not be probed for its capabilities: {}",
                    e.message()
                );
                let diagnostic = e.diagnostic().unwrap_or_default().to_owned();
                return Err(HarnessError::new(e.category(), message).with_diagnostic(diagnostic));
            }
            Err(_) => {
                return Err(HarnessError::new(
                    ErrorCategory::Unavailable,
                    format!(
                        "the ACP agent could not be probed for its capabilities: it did not \
                         answer initialize within {} s",
                        PROBE_TIMEOUT.as_secs()
                    ),
                ));
            }
        };
        Ok(Probed {
            load_session: init.agent_capabilities.load_session,
            image: init.agent_capabilities.prompt_capabilities.image,
            embedded_context: init.agent_capabilities.prompt_capabilities.embedded_context,
        })
    }
}

/// The turn's files as prompt blocks, as the agent's `promptCapabilities` allow: images as
/// `image` blocks (`image`), documents as embedded `resource` blocks (`embeddedContext`;
/// text as text, PDFs as a base64 blob), each named by an opaque `harness-input:` URI (never
/// a host path). A file the agent does not take refuses the turn before the prompt is sent.
async fn file_blocks(
    files: &[harness_core::file::ValidatedInputFile],
    capabilities: &agent_client_protocol::v1::schema::PromptCapabilities,
) -> Result<Vec<ContentBlock>, HarnessError> {
    use agent_client_protocol::v1::schema::{
        BlobResourceContents, EmbeddedResource, EmbeddedResourceResource, ImageContent,
        TextResourceContents,
    };
    use base64::Engine as _;
    use harness_core::file::FileKind;
    let mut blocks = Vec::with_capacity(files.len());
    for file in files {
        let (allowed, flag) = match file.kind() {
            FileKind::Image => (capabilities.image, "image"),
            FileKind::Document => (capabilities.embedded_context, "embeddedContext"),
        };
        let media_type = file.media_type().essence();
        if !allowed {
            return Err(HarnessError::new(
                ErrorCategory::Configuration,
                format!(
                    "file `{}` ({media_type}) cannot be given to this ACP agent: its \
                     promptCapabilities.{flag} is false; send it to an agent that takes it, or \
                     without the file",
                    file.name()
                ),
            )
            .with_code(ErrorCode::FILE_MODALITY_UNSUPPORTED));
        }
        let bytes = file.read().await?;
        let uri = format!(
            "harness-input:{}",
            file.name()
                .chars()
                .map(
                    |c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                        c
                    } else {
                        '_'
                    }
                )
                .collect::<String>()
        );
        blocks.push(match file.kind() {
            FileKind::Image => ContentBlock::Image(ImageContent::new(
                base64::engine::general_purpose::STANDARD.encode(&bytes),
                media_type,
            )),
            FileKind::Document if file.is_text() => {
                let mut text = TextResourceContents::new(String::from_utf8_lossy(&bytes), uri);
                text.mime_type = Some(media_type);
                ContentBlock::Resource(EmbeddedResource::new(
                    EmbeddedResourceResource::TextResourceContents(text),
                ))
            }
            FileKind::Document => {
                let mut blob = BlobResourceContents::new(
                    base64::engine::general_purpose::STANDARD.encode(&bytes),
                    uri,
                );
                blob.mime_type = Some(media_type);
                ContentBlock::Resource(EmbeddedResource::new(
                    EmbeddedResourceResource::BlobResourceContents(blob),
                ))
            }
        });
    }
    Ok(blocks)
}

/// A `session/load` the agent refused for good (not a transient failure of its provider or
/// process): the conversation's native state could not be loaded, `persistence`, with the
/// agent's reason in the diagnostic. (Gemini CLI 0.61.0, for one, cannot load a session
/// saved in the same wall-clock minute: "No previous sessions found for this project".)
fn load_failed(err: HarnessError, session: &SessionId) -> HarnessError {
    if !matches!(
        err.category(),
        ErrorCategory::Internal | ErrorCategory::Configuration
    ) {
        return err;
    }
    let mut failed = HarnessError::new(
        ErrorCategory::Persistence,
        "the ACP agent could not reopen the conversation's session",
    )
    .with_diagnostic(format!(
        "session/load {}: {}",
        session.0,
        err.diagnostic().unwrap_or_default()
    ));
    if let Some(code) = err.provider_code() {
        failed = failed.with_provider_code(code);
    }
    failed
}

fn multi_turn_unsupported(conversation: Option<&Conversation>) -> HarnessError {
    let what = conversation.map_or_else(
        || "a conversation".to_owned(),
        |c| format!("conversation {c}"),
    );
    HarnessError::new(
        ErrorCategory::Configuration,
        format!(
            "session.multi_turn is unsupported by this ACP agent: it did not negotiate \
             loadSession, so {what} cannot be continued"
        ),
    )
    .with_code(ErrorCode::CAPABILITY_UNSUPPORTED)
}

/// `tool.mcp` for an agent: which of its servers are forwarded, proxied and bridged (see
/// [`crate::mcp`]).
fn mcp_capability(agent: &AcpAgent) -> Capability {
    if agent.mcp_servers.is_empty() {
        return Capability::unsupported(
            "the operator gives this agent no MCP server (AcpAgent::mcp_servers)",
        );
    }
    let named = |way: crate::mcp::Way| -> Vec<String> {
        agent
            .mcp_servers
            .iter()
            .filter(|s| crate::mcp::Way::of(s) == way)
            .map(|s| s.name.clone())
            .collect()
    };
    let mut capability = Capability::native()
        .with_explanation(
            "the agent is given its MCP servers in session/new and session/load; a server's \
             headers or variables (credentials) never reach it: a server with headers is \
             proxied, a stdio server with variables run by the control plane and bridged, \
             both served on a loopback URL of the control plane",
        )
        .with_constraint("credentials", "proxied");
    for way in [
        crate::mcp::Way::Forwarded,
        crate::mcp::Way::Proxied,
        crate::mcp::Way::Bridged,
    ] {
        let names = named(way);
        if !names.is_empty() {
            capability = capability.with_constraint(way.as_str(), names);
        }
    }
    capability
}

/// `skills` for an agent: native where the operator says where it reads skill folders.
fn skills_capability(agent: &AcpAgent) -> Capability {
    match &agent.skills_dir {
        Some(dir) => Capability::native()
            .with_explanation(
                "granted skills are written in the agent's workspace where it reads skill \
                 folders, for the execution's life; the agent finds and loads them itself",
            )
            .with_constraint("skillsDir", dir.display().to_string())
            .with_constraint(
                "sharedWorkspace",
                "executions of one agent share its workspace: while two run at once, each \
                 may see the other's granted skills",
            ),
        None => Capability::unsupported(
            "the operator does not say where this agent reads skill folders \
             (AcpAgent::skills_dir): ACP gives an agent no way to declare it",
        ),
    }
}

/// `runtime.sandbox_isolation` for an agent: native with what its profile enforces as
/// constraints, or unsupported without a sandbox.
fn sandbox_isolation(agent: &AcpAgent) -> Capability {
    let sandbox = agent.sandbox.as_ref();
    let Some(sandbox) = sandbox else {
        return Capability::unsupported(
            "the operator runs this agent as a plain child process, with the server's \
             filesystem, network and process table: no sandbox profile (AcpAgent::in_sandbox)",
        );
    };
    let profile = sandbox.profile();
    if profile.backend != harness_sandbox::Backend::Bubblewrap {
        return Capability::unsupported(
            "the agent's sandbox profile names a backend that cannot start an agent here \
             (a Kubernetes profile only builds manifests yet): nothing runs",
        );
    }
    let allow: Vec<String> = profile
        .network
        .allow
        .iter()
        .map(ToString::to_string)
        .collect();
    let proxy: Vec<String> = profile
        .network
        .proxy
        .iter()
        .map(ToString::to_string)
        .collect();
    let limits = &profile.limits;
    Capability::native()
        .with_explanation(
            "the agent runs in the operator's bubblewrap sandbox: every namespace unshared, \
             its workspace read-write and the system read-only, nothing else of the host",
        )
        .with_constraint("backend", "bubblewrap")
        .with_constraint(
            "network",
            if allow.is_empty() && proxy.is_empty() {
                "none"
            } else {
                "allowlist"
            },
        )
        .with_constraint("networkAllow", allow)
        .with_constraint("networkProxy", proxy)
        .with_constraint("wallTimeMs", limits.wall_time_ms)
        .with_constraint("memoryBytes", limits.memory_bytes)
        .with_constraint("processes", limits.processes)
        .with_constraint("openFiles", limits.open_files)
        .with_constraint("outputBytes", limits.output_bytes)
        // What runs inside: the agent alone (its ACP client in the control plane), or the
        // agent with its ACP client, hosted by a worker over the Sandbox Worker Protocol v1.
        .with_constraint(
            "hosted",
            if agent.worker.is_some() {
                "worker"
            } else {
                "agent"
            },
        )
}

/// Refuses the engine's model choice and instance prompt: an ACP agent chooses its own model
/// and builds its own system prompt, and this adapter does not drive ACP's session
/// configuration options (`session/set_config_option`), so neither would reach the agent.
/// A refusal, not a silent drop: an operator who declares models or a prompt for an ACP
/// instance learns at once that they would not hold (`harness serve` refuses
/// `[acp.models]` and `[acp.prompt]` before that).
fn unselectable(
    model: Option<&harness_core::context::ModelSelection>,
    prompt: Option<&harness_core::context::RenderedPrompt>,
) -> Result<(), HarnessError> {
    if let Some(model) = model {
        return Err(HarnessError::new(
            ErrorCategory::Configuration,
            format!(
                "the ACP adapter cannot select model {:?}: an ACP agent chooses its own model \
                 (configure it in the agent's command or environment); leave the instance's \
                 model policy and the request's `model` out",
                model.as_str()
            ),
        )
        .with_code(ErrorCode::CAPABILITY_UNSUPPORTED));
    }
    if prompt.is_some() {
        return Err(HarnessError::new(
            ErrorCategory::Configuration,
            "the ACP adapter cannot hand an agent an instance prompt: an ACP agent builds its \
             own system prompt; leave the instance's prompt template out",
        )
        .with_code(ErrorCode::CAPABILITY_UNSUPPORTED));
    }
    Ok(())
}

impl HarnessAdapter for AcpAdapter {
    /// Ready when every agent's command resolves to an executable file and its working
    /// directory is there; nothing is started.
    fn health(&self) -> BoxFuture<'_, harness_core::adapter::HarnessHealth> {
        let health = crate::health::agents(
            self.profiles
                .iter()
                .map(|(name, profile)| (name.as_str(), &*profile.agent)),
        );
        Box::pin(async move { health })
    }

    /// Probes the agent (see [`PROBE_TIMEOUT`]) and reports what it negotiated:
    /// `session.multi_turn` is unsupported, and a conversation refused, when the agent does
    /// not offer `loadSession`.
    fn evaluate<'a>(
        &'a self,
        config: &'a AgentConfig,
        _deployment: &'a DeploymentContext,
    ) -> BoxFuture<'a, Result<CapabilityReport, HarnessError>> {
        Box::pin(async move {
            unselectable(config.model.as_ref(), None)?;
            // A caller's options, and a conversation bound to another agent, are refused
            // before anything is started.
            let (profile, setup) = self.profile(&config.options)?;
            session_for(&self.sessions, config.conversation.as_ref(), &profile.name)?;
            let probed = self.probe(profile).await?;
            let mut report = Self::static_descriptor().capabilities().clone();
            report.declare(CapabilityKey::ToolMcp, mcp_capability(&profile.agent));
            // What ACP gives an agent no way to declare is claimed only where the operator
            // vouches for it: a report claims nothing the agent may never do.
            if !profile.agent.elicitation {
                report.declare(
                    CapabilityKey::InterruptFormInput,
                    Capability::unsupported(
                        "the operator does not vouch that this agent asks for form input \
                         (AcpAgent::elicitation): ACP gives an agent no way to declare it",
                    ),
                );
            }
            if !profile.agent.trace_context {
                report.declare(
                    CapabilityKey::ObservabilityTracePropagation,
                    Capability::unsupported(
                        "the trace context is sent in session/prompt's _meta, but the \
                         operator does not vouch that this agent continues it \
                         (AcpAgent::trace_context)",
                    ),
                );
            }
            report.declare(
                CapabilityKey::RuntimeSandboxIsolation,
                sandbox_isolation(&profile.agent),
            );
            report.declare(CapabilityKey::Skills, skills_capability(&profile.agent));
            if !setup.ask {
                report.declare(
                    CapabilityKey::InterruptToolApproval,
                    Capability::unsupported(
                        "the operator's approval policy is `agent`: the agent's session mode \
                         decides whether a tool call waits for approval, so none is guaranteed",
                    ),
                );
            }
            if !probed.image {
                report.declare(
                    CapabilityKey::InputImages,
                    Capability::unsupported(
                        "the agent did not negotiate promptCapabilities.image: a turn with an \
                         image fails naming it",
                    ),
                );
            }
            if !probed.embedded_context {
                report.declare(
                    CapabilityKey::InputDocuments,
                    Capability::unsupported(
                        "the agent did not negotiate promptCapabilities.embeddedContext: a turn \
                         with a document fails naming it",
                    ),
                );
            }
            if !probed.load_session {
                if config.conversation.is_some() {
                    return Err(multi_turn_unsupported(config.conversation.as_ref()));
                }
                for key in [
                    CapabilityKey::SessionMultiTurn,
                    CapabilityKey::SessionClear,
                    CapabilityKey::ThreadEvictionRestore,
                ] {
                    report.declare(
                        key,
                        Capability::unsupported(
                            "the agent did not negotiate loadSession: a conversation cannot \
                             be continued in a later execution",
                        ),
                    );
                }
            }
            Ok(report)
        })
    }

    fn create_runtime(
        &self,
        mut context: RuntimeContext,
    ) -> BoxFuture<'_, Result<Box<dyn HarnessRuntime>, HarnessError>> {
        if let Err(e) = unselectable(context.config.model.as_ref(), context.prompt.as_ref()) {
            return Box::pin(async move { Err(e) });
        }
        let profile = match self.profile(&context.config.options) {
            Ok(found) => found,
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        // The granted skills are written in the workspace before the agent (or its worker)
        // starts; cleanup removes them.
        let skills = std::mem::take(&mut context.skills);
        let agent = Arc::clone(&profile.0.agent);
        let with_skills = move |inner: Box<dyn HarnessRuntime>, installed| {
            crate::held::Holding::boxed(inner, installed)
        };
        if let (Some(sandbox), Some(worker)) = (&profile.0.agent.sandbox, &profile.0.agent.worker) {
            let name = Arc::clone(&profile.0.name);
            let (sandbox, worker) = (sandbox.clone(), worker.clone());
            return Box::pin(async move {
                if skills.is_empty() {
                    return crate::worker::start(&name, &agent, &sandbox, &worker, context).await;
                }
                let installed = crate::skills::install(&agent, &skills).await?;
                let inner = crate::worker::start(&name, &agent, &sandbox, &worker, context).await?;
                Ok(with_skills(inner, installed))
            });
        }
        let (profile, setup) = profile;
        let (turn_tx, _) = watch::channel(false);
        let (halt_tx, _) = watch::channel(false);
        let runtime = Box::new(AcpRuntime {
            adapter: context.adapter.clone(),
            execution_id: context.execution_id,
            agent: Arc::clone(&profile.agent),
            agent_name: Arc::clone(&profile.name),
            setup,
            conversation: context.config.conversation,
            thread_state: context.thread_state,
            sessions: Arc::clone(&self.sessions),
            stats: Arc::clone(&self.stats),
            reaping: Arc::clone(&self.reaping),
            init: tokio::sync::Mutex::new(None),
            inbound: tokio::sync::Mutex::new(None),
            held: Mutex::default(),
            state: Mutex::new(State::default()),
            turn: turn_tx,
            halt: halt_tx,
            middleware: context.middleware,
            relay: Mutex::new(None),
        }) as Box<dyn HarnessRuntime>;
        if skills.is_empty() {
            return Box::pin(async move { Ok(runtime) });
        }
        Box::pin(async move {
            let installed = crate::skills::install(&agent, &skills).await?;
            Ok(with_skills(runtime, installed))
        })
    }
}

/// A permission request waiting for the caller.
#[derive(Debug)]
struct PendingPermission {
    responder: acp::v1::Responder<RequestPermissionResponse>,
    interrupt: ActionRequest,
    call_id: ToolCallId,
    approve: Option<String>,
    reject: Option<String>,
}

/// A form elicitation waiting for the caller.
#[derive(Debug)]
struct PendingElicitation {
    responder: acp::v1::Responder<CreateElicitationResponse>,
    interrupt: ActionRequest,
    form: FormRequest,
}

/// What the run is paused on.
#[derive(Debug)]
enum Pending {
    Permission(PendingPermission),
    Elicitation(PendingElicitation),
}

impl Pending {
    fn interrupt(&self) -> &ActionRequest {
        match self {
            Self::Permission(p) => &p.interrupt,
            Self::Elicitation(e) => &e.interrupt,
        }
    }

    /// Answers the agent that the request was cancelled.
    fn cancel(self) {
        let _ = match self {
            Self::Permission(p) => p.responder.respond(RequestPermissionResponse::new(
                RequestPermissionOutcome::Cancelled,
            )),
            Self::Elicitation(e) => e
                .responder
                .respond(CreateElicitationResponse::new(ElicitationAction::Cancel)),
        };
    }
}

#[derive(Debug, Default)]
struct State {
    agent: Option<Arc<AgentProcess>>,
    inbound: Option<mpsc::UnboundedSender<Inbound>>,
    session_id: Option<SessionId>,
    negotiated: Option<Value>,
    /// What the agent's `promptCapabilities` take besides text, once initialized.
    prompt_capabilities: Option<agent_client_protocol::v1::schema::PromptCapabilities>,
    announced: bool,
    /// Set by `session/load`: how many replayed updates were not emitted (announced once).
    loaded: Option<Value>,
    /// The session's mode and configuration options, once applied (announced once).
    configured: Option<Value>,
    /// Whether the caller rejected a tool call during this turn.
    rejected: bool,
    /// `true` while `initialize` starts the agent.
    initializing: bool,
    pending: Option<Pending>,
    /// Tool calls reported as started, with the tool and arguments last reported; those
    /// reported as ended.
    started: HashMap<String, (String, Value)>,
    ended: HashSet<String>,
    titles: HashMap<String, String>,
}

#[derive(Debug)]
struct AcpRuntime {
    adapter: AdapterId,
    execution_id: harness_core::id::ExecutionId,
    agent: Arc<AcpAgent>,
    /// The agent's name: a conversation's session is looked up for it.
    agent_name: Arc<str>,
    /// The session mode and configuration options this execution's session gets.
    setup: SessionSetup,
    conversation: Option<Conversation>,
    /// The conversation's thread state: where its session mapping lives.
    thread_state: Option<ScopedThreadState>,
    sessions: Arc<Mutex<HashMap<Conversation, Bound>>>,
    stats: Arc<Stats>,
    reaping: Arc<Reaping>,
    init: tokio::sync::Mutex<Option<Result<RuntimeInit, HarnessError>>>,
    inbound: tokio::sync::Mutex<Option<mpsc::UnboundedReceiver<Inbound>>>,
    /// What a cancel took out of `inbound` while answering queued requests (see
    /// [`answer_queued`](Self::answer_queued)), in order: read before `inbound`.
    held: Mutex<VecDeque<Inbound>>,
    state: Mutex<State>,
    /// `true` while a `session/prompt` is outstanding.
    turn: watch::Sender<bool>,
    /// Set by a cancel while the runtime initializes: the start is abandoned (the agent shut
    /// down) and `initialize` returns `cancelled`.
    halt: watch::Sender<bool>,
    /// The operator's middleware policy, consulted for the agent's permission requests.
    middleware: PortableMiddlewarePolicy,
    /// The MCP relay serving the agent its credentialed MCP servers, while the runtime lives
    /// (see [`crate::mcp`]).
    relay: Mutex<Option<crate::mcp::McpRelay>>,
}

/// Marks the runtime as initializing while alive (also when `initialize` is dropped).
struct Initializing<'a>(&'a Mutex<State>);

impl<'a> Initializing<'a> {
    fn enter(state: &'a Mutex<State>) -> Self {
        lock(state).initializing = true;
        Self(state)
    }
}

impl Drop for Initializing<'_> {
    fn drop(&mut self) {
        lock(self.0).initializing = false;
    }
}

/// Appends the agent's stderr tail, redacted, to the error's diagnostic.
fn with_stderr(agent: &AgentProcess, err: HarnessError) -> HarnessError {
    let tail = agent.stderr_tail();
    if tail.is_empty() {
        return err;
    }
    // Redacted with the built-in rules (bearer tokens, API keys, ...); without a
    // redactor the tail is dropped rather than kept unredacted.
    let Some(redactor) = STDERR_REDACTOR.as_ref() else {
        return err;
    };
    let tail = redactor.redact_str(&tail);
    let before = err.diagnostic().unwrap_or_default().to_owned();
    err.with_diagnostic(format!(
        "{before}\nagent stderr (last 8 KiB, redacted):\n{tail}"
    ))
}

impl AcpRuntime {
    /// Whether the turn was cancelled: its requests are answered `cancelled`.
    fn refusing(&self) -> bool {
        lock(&self.state)
            .agent
            .as_ref()
            .is_some_and(|agent| agent.refusing())
    }

    /// Ends `agent` without waiting for its process group (`SIGTERM`, `grace`, `SIGKILL` on a
    /// task of its own): the run's terminal event does not wait for it, a later turn of the
    /// session does (see [`Reaping`]).
    fn release(&self, agent: &AgentProcess, grace: Duration) {
        let reaped = agent.stop(grace);
        if let Some(session) = lock(&self.state).session_id.clone() {
            self.reaping.insert(session, reaped);
        }
    }

    fn with_stderr(&self, err: HarnessError) -> HarnessError {
        match lock(&self.state).agent.clone() {
            Some(agent) => with_stderr(&agent, err),
            None => err,
        }
    }

    /// Starts the agent unless (or until) a cancel halts the start; a halted start shuts the
    /// agent down (a dropped spawn takes its process group with it) and is `cancelled`.
    async fn start(&self) -> Result<RuntimeInit, HarnessError> {
        let mut halt = self.halt.subscribe();
        let halted = std::pin::pin!(async move {
            // Only the change matters (the guard it returns is not `Send`).
            let _ = halt.wait_for(|halted| *halted).await.is_ok();
        });
        let start = std::pin::pin!(self.start_agent());
        match futures_util::future::select(start, halted).await {
            futures_util::future::Either::Left((result, _)) => result,
            futures_util::future::Either::Right(_) => {
                let agent = lock(&self.state).agent.clone();
                if let Some(agent) = agent {
                    agent.shutdown(self.agent.cancel_grace()).await;
                }
                Err(HarnessError::new(
                    ErrorCategory::Cancelled,
                    "the ACP agent's start was cancelled",
                ))
            }
        }
    }

    /// The conversation's session, from its thread state (the cache when it has none), and
    /// the version to write a new mapping over; another agent's session is refused.
    async fn known_session(
        &self,
    ) -> Result<(Option<SessionId>, Option<harness_core::session::Version>), HarnessError> {
        let (Some(conversation), Some(state)) = (&self.conversation, &self.thread_state) else {
            return Ok((
                session_for(&self.sessions, self.conversation.as_ref(), &self.agent_name)?,
                None,
            ));
        };
        let Some((stored, version)) = state.get_json::<StoredBound>(&bound_key()).await? else {
            return Ok((None, None));
        };
        let bound = Bound {
            agent: Arc::from(stored.agent.as_str()),
            session: SessionId::new(stored.session_id),
        };
        let session = same_agent(&bound, conversation, &self.agent_name)?;
        lock(&self.sessions).insert(conversation.clone(), bound);
        Ok((Some(session), Some(version)))
    }

    async fn start_agent(&self) -> Result<RuntimeInit, HarnessError> {
        // A conversation bound to another agent fails before an agent is started.
        let known = self.known_session().await?;
        if let Some(session) = &known.0 {
            self.reaping.settled(session).await;
        }
        // The relay serves the credentialed MCP servers before the agent starts: a sandboxed
        // agent's launch relays its address.
        let relay = crate::mcp::McpRelay::start(&self.agent).await?;
        let endpoint = relay.as_ref().map(crate::mcp::McpRelay::endpoint);
        *lock(&self.relay) = relay;
        let (tx, rx) = mpsc::unbounded_channel();
        let agent =
            AgentProcess::spawn(&self.agent, tx.clone(), Arc::clone(&self.stats), endpoint).await?;
        bump(&self.stats.agents_started);
        *self.inbound.lock().await = Some(rx);
        {
            let mut state = lock(&self.state);
            state.agent = Some(Arc::clone(&agent));
            state.inbound = Some(tx);
        }
        let result = self.handshake(&agent, known).await;
        if result.is_err() {
            agent.shutdown(self.agent.cancel_grace()).await;
        }
        result.map_err(|e| with_stderr(&agent, e))
    }

    async fn handshake(
        &self,
        agent: &AgentProcess,
        (known, version): (Option<SessionId>, Option<harness_core::session::Version>),
    ) -> Result<RuntimeInit, HarnessError> {
        let init = agent.initialize(self.agent.files).await?;
        let servers = crate::mcp::servers_for_agent(
            &self.agent,
            init.agent_capabilities.mcp_capabilities.http,
            lock(&self.relay).as_ref(),
        )?;
        let (session_id, loaded, modes, options) = match known {
            Some(session_id) if init.agent_capabilities.load_session => {
                let request = LoadSessionRequest::new(session_id.clone(), self.agent.cwd.clone())
                    .mcp_servers(servers);
                let (response, replayed) = agent
                    .load(request, self.agent.replay_quiet())
                    .await
                    .map_err(|e| load_failed(e, &session_id))?;
                let loaded = json!({"sessionId": session_id.0, "replayedUpdates": replayed});
                (
                    session_id,
                    Some(loaded),
                    response.modes,
                    response.config_options,
                )
            }
            Some(_) => return Err(multi_turn_unsupported(self.conversation.as_ref())),
            None => {
                let response = agent
                    .call(NewSessionRequest::new(self.agent.cwd.clone()).mcp_servers(servers))
                    .await?;
                (
                    response.session_id,
                    None,
                    response.modes,
                    response.config_options,
                )
            }
        };
        let configured = if modes.is_some() || !self.setup.config.is_empty() {
            let applied = setup::apply(
                agent,
                &session_id,
                &self.agent,
                &self.setup,
                modes.as_ref(),
                options.as_deref(),
            )
            .await?;
            Some(applied)
        } else {
            None
        };
        // The conversation continues in this session from now on, whatever its first turn
        // does: a failed or cancelled turn is part of its history too.
        if loaded.is_none()
            && let Some(conversation) = self.conversation.clone()
        {
            if let Some(state) = &self.thread_state {
                let stored = StoredBound {
                    agent: self.agent_name.to_string(),
                    session_id: session_id.0.to_string(),
                };
                // A concurrent first turn of the conversation that saved first wins: this
                // one fails rather than fork the conversation.
                state.put_json(&bound_key(), &stored, version).await?;
            }
            let bound = Bound {
                agent: Arc::clone(&self.agent_name),
                session: session_id.clone(),
            };
            lock(&self.sessions).insert(conversation, bound);
        }
        let mut state = lock(&self.state);
        state.session_id = Some(session_id.clone());
        state.loaded = loaded;
        state.configured = configured;
        state.prompt_capabilities = Some(init.agent_capabilities.prompt_capabilities.clone());
        state.negotiated = Some(json!({
            "protocolVersion": init.protocol_version,
            "agentCapabilities": init.agent_capabilities,
            "agentInfo": init.agent_info,
        }));
        Ok(RuntimeInit {
            provider_session_id: Some(session_id.0.to_string()),
        })
    }

    async fn ensure_initialized(&self) -> Result<RuntimeInit, HarnessError> {
        let mut init = self.init.lock().await;
        if let Some(result) = init.as_ref() {
            return result.clone();
        }
        let result = {
            let _initializing = Initializing::enter(&self.state);
            self.start().await
        };
        *init = Some(result.clone());
        result
    }

    fn segment(&self, first: VecDeque<EventResult>) -> BoxStream<'_, EventResult> {
        let segment = Segment {
            runtime: self,
            queue: first,
            done: false,
        };
        Box::pin(stream::unfold(segment, |mut s| async move {
            loop {
                if let Some(item) = s.queue.pop_front() {
                    if matches!(
                        item,
                        Err(_) | Ok(AdapterEvent::Completed(_) | AdapterEvent::Action(_))
                    ) {
                        s.done = true;
                        s.queue.clear();
                    }
                    return Some((item, s));
                }
                if s.done {
                    return None;
                }
                s.step().await;
            }
        }))
    }

    async fn begin_turn(&self, turn: &TurnInput) -> VecDeque<EventResult> {
        let mut out = VecDeque::new();
        if let Err(e) = self.ensure_initialized().await {
            out.push_back(Err(e));
            return out;
        }
        let (agent, inbound, session_id, announce, loaded, configured) = {
            let mut state = lock(&self.state);
            let announce = if state.announced {
                None
            } else {
                state.announced = true;
                state.negotiated.clone()
            };
            (
                state.agent.clone(),
                state.inbound.clone(),
                state.session_id.clone(),
                announce,
                state.loaded.take(),
                state.configured.take(),
            )
        };
        let (Some(agent), Some(inbound), Some(session_id)) = (agent, inbound, session_id) else {
            out.push_back(Err(HarnessError::new(
                ErrorCategory::Unavailable,
                "the ACP agent is not running",
            )));
            return out;
        };
        let capabilities = lock(&self.state)
            .prompt_capabilities
            .clone()
            .unwrap_or_default();
        let files = match file_blocks(&turn.files, &capabilities).await {
            Ok(files) => files,
            Err(e) => {
                out.push_back(Err(e));
                return out;
            }
        };
        if let Some(negotiated) = announce {
            self.native("initialized", &negotiated, &mut out);
        }
        if let Some(loaded) = loaded {
            self.native("session_loaded", &loaded, &mut out);
        }
        if let Some(configured) = configured {
            self.native("session_configured", &configured, &mut out);
        }
        agent.refuse_requests(false);
        lock(&self.state).rejected = false;
        self.turn.send_replace(true);
        let turn_flag = self.turn.clone();
        let mut blocks = vec![ContentBlock::Text(TextContent::new(turn.message.clone()))];
        blocks.extend(files);
        let mut prompt = PromptRequest::new(session_id, blocks);
        if let Some(trace) = &turn.trace_context {
            // ACP reserves these root `_meta` keys for W3C trace context.
            let mut meta = serde_json::Map::new();
            meta.insert("traceparent".to_owned(), json!(trace.traceparent()));
            if let Some(state) = trace.tracestate() {
                meta.insert("tracestate".to_owned(), json!(state));
            }
            prompt = prompt.meta(meta);
        }
        agent.prompt(prompt, move |result| {
            let _ = inbound.send(Inbound::PromptDone(result));
            turn_flag.send_replace(false);
        });
        out
    }

    fn map_update(&self, update: SessionUpdate, out: &mut VecDeque<EventResult>) {
        let content = |c: Content| Ok(AdapterEvent::Content(c));
        match update {
            SessionUpdate::AgentMessageChunk(chunk) => match chunk.content {
                ContentBlock::Text(t) => {
                    out.push_back(content(Content::MessageDelta(TextDelta::new(t.text))));
                }
                other => self.native("agent_message_chunk", &other, out),
            },
            SessionUpdate::AgentThoughtChunk(chunk) => match chunk.content {
                ContentBlock::Text(t) => {
                    out.push_back(content(Content::ReasoningDelta(TextDelta::new(t.text))));
                }
                other => self.native("agent_thought_chunk", &other, out),
            },
            SessionUpdate::ToolCall(call) => {
                let id = call.tool_call_id.0.to_string();
                let status = call.status;
                let arguments = call.raw_input.clone().unwrap_or_else(|| json!({}));
                lock(&self.state)
                    .titles
                    .insert(id.clone(), call.title.clone());
                // Announced again: the agent's latest tool and input.
                if !self.report_call(&id, Some(&call.title), Some(&arguments), out) {
                    self.native("tool_call", &call, out);
                }
                let output = tool_output(call.raw_output.as_ref(), Some(&call.content));
                self.finish(&id, status, output, out);
            }
            SessionUpdate::ToolCallUpdate(update) => {
                let id = update.tool_call_id.0.to_string();
                let fields = &update.fields;
                if let Some(title) = &fields.title {
                    lock(&self.state).titles.insert(id.clone(), title.clone());
                }
                match fields.status {
                    Some(status @ (ToolCallStatus::Completed | ToolCallStatus::Failed)) => {
                        self.report_call(
                            &id,
                            fields.title.as_deref(),
                            fields.raw_input.as_ref(),
                            out,
                        );
                        let output =
                            tool_output(fields.raw_output.as_ref(), fields.content.as_deref());
                        if !self.finish(&id, status, output, out) {
                            self.native("tool_call_update", &update, out);
                        }
                    }
                    _ => {
                        // Claude announces a call with empty input and sends the input in an
                        // update: the portable event carries what the agent actually runs.
                        if fields.title.is_some() || fields.raw_input.is_some() {
                            self.report_call(
                                &id,
                                fields.title.as_deref(),
                                fields.raw_input.as_ref(),
                                out,
                            );
                        }
                        self.native("tool_call_update", &update, out);
                    }
                }
            }
            other => {
                let value = serde_json::to_value(&other).unwrap_or(Value::Null);
                let name = value
                    .get("sessionUpdate")
                    .and_then(Value::as_str)
                    .unwrap_or("session_update")
                    .to_owned();
                self.native(&name, &value, out);
            }
        }
    }

    fn title(&self, id: &str) -> String {
        lock(&self.state)
            .titles
            .get(id)
            .cloned()
            .unwrap_or_else(|| "tool".to_owned())
    }

    /// Reports a call's tool and input as the agent now gives them (each absent: the title
    /// known for the call, no arguments / unchanged): `tool.call.started` the first time,
    /// `tool.call.updated` when they changed since; `true` if either was emitted.
    fn report_call(
        &self,
        id: &str,
        title: Option<&str>,
        arguments: Option<&Value>,
        out: &mut VecDeque<EventResult>,
    ) -> bool {
        let tool = title.map_or_else(|| self.title(id), str::to_owned);
        let initial = arguments.cloned().unwrap_or_else(|| json!({}));
        self.started(id, &tool, initial, out) || self.updated(id, title, arguments, out)
    }

    /// Emits `tool.call.started` once per call; `false` if it was already started.
    fn started(
        &self,
        id: &str,
        title: &str,
        arguments: Value,
        out: &mut VecDeque<EventResult>,
    ) -> bool {
        {
            let mut state = lock(&self.state);
            if state.started.contains_key(id) {
                return false;
            }
            state
                .started
                .insert(id.to_owned(), (tool_name(title), arguments.clone()));
        }
        match tool_call_id(id) {
            Ok(call_id) => out.push_back(Ok(AdapterEvent::Content(Content::ToolCallStarted(
                ToolCall {
                    call_id,
                    tool: tool_name(title),
                    arguments,
                },
            )))),
            Err(e) => out.push_back(Err(e)),
        }
        true
    }

    /// Emits `tool.call.updated` for a started call that has not ended when the agent's
    /// `title` or `arguments` (each absent: unchanged) differ from those last reported;
    /// `true` if it did.
    fn updated(
        &self,
        id: &str,
        title: Option<&str>,
        arguments: Option<&Value>,
        out: &mut VecDeque<EventResult>,
    ) -> bool {
        let call = {
            let mut state = lock(&self.state);
            if state.ended.contains(id) {
                return false;
            }
            let Some((tool, args)) = state.started.get_mut(id) else {
                return false;
            };
            let new_tool = title.map(tool_name);
            let changed = new_tool.as_ref().is_some_and(|t| t != tool)
                || arguments.is_some_and(|a| a != args);
            if !changed {
                return false;
            }
            if let Some(t) = new_tool {
                *tool = t;
            }
            if let Some(a) = arguments {
                a.clone_into(args);
            }
            (tool.clone(), args.clone())
        };
        match tool_call_id(id) {
            Ok(call_id) => out.push_back(Ok(AdapterEvent::Content(Content::ToolCallUpdated(
                ToolCall {
                    call_id,
                    tool: call.0,
                    arguments: call.1,
                },
            )))),
            Err(e) => out.push_back(Err(e)),
        }
        true
    }

    /// Emits `tool.call.completed` once per call for a final status; `false` otherwise.
    fn finish(
        &self,
        id: &str,
        status: ToolCallStatus,
        output: Option<Value>,
        out: &mut VecDeque<EventResult>,
    ) -> bool {
        let outcome = match status {
            ToolCallStatus::Completed => ToolCallOutcome::Success {
                output: output.unwrap_or(Value::Null),
            },
            ToolCallStatus::Failed => ToolCallOutcome::Failure {
                message: "the agent reported the tool call as failed".to_owned(),
            },
            _ => return false,
        };
        if !lock(&self.state).ended.insert(id.to_owned()) {
            return false;
        }
        match tool_call_id(id) {
            Ok(call_id) => out.push_back(Ok(AdapterEvent::Content(Content::ToolCallCompleted(
                ToolCallCompleted { call_id, outcome },
            )))),
            Err(e) => out.push_back(Err(e)),
        }
        true
    }

    fn native(&self, name: &str, payload: &impl serde::Serialize, out: &mut VecDeque<EventResult>) {
        let payload = serde_json::to_value(payload).unwrap_or(Value::Null);
        if let Ok(event) = NativeEvent::new(NAMESPACE, name, payload) {
            out.push_back(Ok(AdapterEvent::Content(Content::Native(event))));
        }
    }

    /// A permission request becomes a tool-approval interrupt (pushed to `out`, after a
    /// `tool.call.updated` when the request brings the call's input or title anew).
    ///
    /// The operator's middleware decides first ([`middleware_decision`]): a call it denies
    /// is rejected at once (the agent gets its `reject_*` option, or `cancelled` when it
    /// offers none) without asking the caller, with a native `acp.denied_by_policy` event;
    /// `allow` and `require_approval` ask the caller, as every permission request does.
    fn permission(
        &self,
        request: &RequestPermissionRequest,
        responder: acp::v1::Responder<RequestPermissionResponse>,
        out: &mut VecDeque<EventResult>,
    ) {
        let fields = &request.tool_call.fields;
        let id = request.tool_call.tool_call_id.0.to_string();
        let title = fields.title.clone().unwrap_or_else(|| self.title(&id));
        let kind = fields.kind.as_ref().and_then(|k| {
            serde_json::to_value(k)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
        });
        let (decision, matched) =
            middleware_decision(&self.middleware, &tool_name(&title), kind.as_deref());
        if decision.action() == ToolAction::Deny {
            self.updated(&id, fields.title.as_deref(), fields.raw_input.as_ref(), out);
            let reject = request
                .options
                .iter()
                .find(|o| {
                    matches!(
                        o.kind,
                        PermissionOptionKind::RejectOnce | PermissionOptionKind::RejectAlways
                    )
                })
                .map(|o| o.option_id.clone());
            let _ = responder.respond(RequestPermissionResponse::new(match reject {
                Some(option) => {
                    RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(option))
                }
                None => RequestPermissionOutcome::Cancelled,
            }));
            lock(&self.state).rejected = true;
            self.native(
                "denied_by_policy",
                &json!({
                    "toolCallId": id,
                    "tool": matched,
                    "rule": decision.rule(),
                    "message": decision.denial(&matched).message(),
                }),
                out,
            );
            return;
        }
        match self.permission_request(request, responder, out) {
            Ok(event) => out.push_back(Ok(event)),
            Err(e) => out.push_back(Err(e)),
        }
    }

    fn permission_request(
        &self,
        request: &RequestPermissionRequest,
        responder: acp::v1::Responder<RequestPermissionResponse>,
        out: &mut VecDeque<EventResult>,
    ) -> Result<AdapterEvent, HarnessError> {
        let id = request.tool_call.tool_call_id.0.to_string();
        let call_id = tool_call_id(&id)?;
        let pick = |kinds: [PermissionOptionKind; 2]| {
            kinds.iter().find_map(|kind| {
                request
                    .options
                    .iter()
                    .find(|o| o.kind == *kind)
                    .map(|o| o.option_id.0.to_string())
            })
        };
        let approve = pick([
            PermissionOptionKind::AllowOnce,
            PermissionOptionKind::AllowAlways,
        ]);
        let reject = pick([
            PermissionOptionKind::RejectOnce,
            PermissionOptionKind::RejectAlways,
        ]);
        let mut allowed = Vec::new();
        if approve.is_some() {
            allowed.push(DecisionKind::Approve);
        }
        if reject.is_some() {
            allowed.push(DecisionKind::Reject);
        }
        let fields = &request.tool_call.fields;
        self.updated(&id, fields.title.as_deref(), fields.raw_input.as_ref(), out);
        let title = fields.title.clone().unwrap_or_else(|| self.title(&id));
        // Absent from the request: the input the call was last reported with.
        let arguments = fields.raw_input.clone().unwrap_or_else(|| {
            lock(&self.state)
                .started
                .get(&id)
                .map_or_else(|| json!({}), |(_, args)| args.clone())
        });
        let approval =
            ToolCallApproval::new(call_id.clone(), tool_name(&title), arguments, json!({}))
                .and_then(|a| a.with_allowed(allowed))
                .and_then(|a| ApprovalRequest::new([a]))
                .map_err(|e| {
                    protocol("the ACP agent sent a permission request with no usable option")
                        .with_diagnostic(e.to_string())
                })?;
        let interrupt = ActionRequest::approval(approval).with_id(ActionId::generate());
        lock(&self.state).pending = Some(Pending::Permission(PendingPermission {
            responder,
            interrupt: interrupt.clone(),
            call_id,
            approve,
            reject,
        }));
        Ok(AdapterEvent::Action(interrupt))
    }

    /// A form elicitation becomes a form-input interrupt; one the portable form cannot
    /// represent is declined at once, with a native `acp.elicitation_declined` event.
    fn elicitation(
        &self,
        request: &CreateElicitationRequest,
        responder: acp::v1::Responder<CreateElicitationResponse>,
        out: &mut VecDeque<EventResult>,
    ) {
        match elicitation::form_for(&request.message, &request.mode) {
            Ok(form) => {
                let interrupt = ActionRequest::form(form.clone()).with_id(ActionId::generate());
                lock(&self.state).pending = Some(Pending::Elicitation(PendingElicitation {
                    responder,
                    interrupt: interrupt.clone(),
                    form,
                }));
                out.push_back(Ok(AdapterEvent::Action(interrupt)));
            }
            Err(Unsupported(reason)) => {
                let _ =
                    responder.respond(CreateElicitationResponse::new(ElicitationAction::Decline));
                self.native(
                    "elicitation_declined",
                    &json!({"message": request.message, "reason": reason}),
                    out,
                );
            }
        }
    }

    fn stop(&self, result: Result<PromptResponse, HarnessError>) -> EventResult {
        let response = result.map_err(|e| self.with_stderr(e))?;
        let summary = match response.stop_reason {
            StopReason::EndTurn => None,
            // Some agents (Codex) end the turn `cancelled` when the caller rejects a tool call:
            // the caller's decision, not a failure. Nobody rejected and nobody cancelled: the
            // agent gave up on its own.
            StopReason::Cancelled if !self.refusing() && lock(&self.state).rejected => Some(
                "stop reason: cancelled (the agent ended the turn after a tool call was rejected)"
                    .to_owned(),
            ),
            StopReason::Cancelled => {
                return Err(HarnessError::new(
                    ErrorCategory::Cancelled,
                    "the ACP agent cancelled the turn",
                ));
            }
            other => Some(format!(
                "stop reason: {}",
                serde_json::to_value(other)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_else(|| "other".to_owned())
            )),
        };
        Ok(AdapterEvent::Completed(RunSucceeded { summary }))
    }
}

/// A tool call's output, the same for `tool_call` and `tool_call_update`: its `rawOutput`,
/// else its content (when it has any), else none.
fn tool_output(raw_output: Option<&Value>, content: Option<&[ToolCallContent]>) -> Option<Value> {
    raw_output.cloned().or_else(|| {
        content
            .filter(|c| !c.is_empty())
            .and_then(|c| serde_json::to_value(c).ok())
    })
}

fn tool_call_id(id: &str) -> Result<ToolCallId, HarnessError> {
    id.parse().map_err(|_| {
        protocol("the ACP agent sent a tool call id that is not a valid id").with_diagnostic(
            format!("tool call id {:?}", id.chars().take(80).collect::<String>()),
        )
    })
}

/// The middleware's decision on an agent's tool call, and the name it matched: the call's
/// title (as its approval names it) and, when the agent gives one, `acp.kind.<kind>`
/// (`acp.kind.edit`, `acp.kind.execute`, ...); the more restrictive of the two decides.
fn middleware_decision(
    policy: &PortableMiddlewarePolicy,
    title: &str,
    kind: Option<&str>,
) -> (ToolDecision, String) {
    let by_title = policy.decide(title);
    let Some(kind) = kind else {
        return (by_title, title.to_owned());
    };
    let kind_name = format!("acp.kind.{kind}");
    let by_kind = policy.decide(&kind_name);
    let rank = |a: ToolAction| match a {
        ToolAction::Deny => 2,
        ToolAction::RequireApproval => 1,
        _ => 0,
    };
    if rank(by_kind.action()) > rank(by_title.action()) {
        (by_kind, kind_name)
    } else {
        (by_title, title.to_owned())
    }
}

fn tool_name(title: &str) -> String {
    if title.trim().is_empty() {
        "tool".to_owned()
    } else {
        title.to_owned()
    }
}

struct Segment<'a> {
    runtime: &'a AcpRuntime,
    queue: VecDeque<EventResult>,
    done: bool,
}

impl Segment<'_> {
    async fn step(&mut self) {
        let rt = self.runtime;
        let next = {
            let mut guard = rt.inbound.lock().await;
            // A cancel moves messages to `held` only while it holds `inbound`: they are older
            // than anything still in the channel.
            let held = lock(&rt.held).pop_front();
            match (held, guard.as_mut()) {
                (Some(next), _) => Some(next),
                (None, Some(rx)) => rx.recv().await,
                (None, None) => None,
            }
        };
        let Some(next) = next else {
            self.queue.push_back(Err(HarnessError::new(
                ErrorCategory::Unavailable,
                "the ACP agent is not running",
            )));
            return;
        };
        match next {
            Inbound::Update(notification, _consumed) => {
                let SessionNotification {
                    session_id, update, ..
                } = *notification;
                if lock(&rt.state).session_id.as_ref() == Some(&session_id) {
                    rt.map_update(update, &mut self.queue);
                }
            }
            // An informational update the schema refuses: reported, and the run goes on.
            Inbound::Unparsed(unparsed, _consumed) => {
                if lock(&rt.state).session_id.as_ref() == Some(&unparsed.session_id) {
                    let payload = json!({
                        "sessionUpdate": unparsed.kind(),
                        "update": unparsed.update,
                        "error": unparsed.error,
                    });
                    rt.native("unparsed_update", &payload, &mut self.queue);
                }
            }
            // Queued before the turn was cancelled: answered `cancelled`, never raised.
            Inbound::Permission { responder, .. } if rt.refusing() => {
                let _ = responder.respond(RequestPermissionResponse::new(
                    RequestPermissionOutcome::Cancelled,
                ));
            }
            Inbound::Elicitation { responder, .. } if rt.refusing() => {
                let _ =
                    responder.respond(CreateElicitationResponse::new(ElicitationAction::Cancel));
            }
            Inbound::Permission {
                request, responder, ..
            } => rt.permission(&request, responder, &mut self.queue),
            Inbound::Elicitation {
                request, responder, ..
            } => {
                rt.elicitation(&request, responder, &mut self.queue);
            }
            Inbound::PromptDone(result) => {
                let item = rt.stop(result);
                self.queue.push_back(item);
            }
            Inbound::Closed(err) => self.queue.push_back(Err(rt.with_stderr(err))),
        }
    }
}

impl AcpRuntime {
    /// After a cancel: answers every permission and elicitation request waiting in the inbound
    /// queue `cancelled` (dropping its backlog ticket) and moves everything else, in order, to
    /// `held`, for the next segment. Never resolves; returns at once (pending) when a segment
    /// holds the queue (it answers such requests itself, see [`Segment::step`]).
    async fn answer_queued(&self) {
        if let Ok(mut guard) = self.inbound.try_lock()
            && let Some(rx) = guard.as_mut()
        {
            while let Some(next) = rx.recv().await {
                match next {
                    Inbound::Permission { responder, .. } => {
                        let _ = responder.respond(RequestPermissionResponse::new(
                            RequestPermissionOutcome::Cancelled,
                        ));
                    }
                    Inbound::Elicitation { responder, .. } => {
                        let _ = responder
                            .respond(CreateElicitationResponse::new(ElicitationAction::Cancel));
                    }
                    other => lock(&self.held).push_back(other),
                }
            }
        }
        std::future::pending::<()>().await;
    }

    /// Answers a pending permission request as decided; returns the `rejected` completion
    /// to record, if any.
    fn answer_permission(
        &self,
        pending: PendingPermission,
        decision: &ResumeDecision,
    ) -> Option<EventResult> {
        let decided = match decision.response() {
            ValidatedResponse::Approval(approval) => approval
                .decisions()
                .and_then(|d| d.iter().find(|d| d.call_id == pending.call_id))
                .map(|d| d.decision.clone()),
            ValidatedResponse::Form(_) => None,
        };
        let (option, rejected) = match &decided {
            Some(Decision::Approve) => (pending.approve.clone(), None),
            Some(Decision::Reject { reason }) => (pending.reject.clone(), Some(reason.clone())),
            // A dismissal (or an edit, never offered) declines the call.
            _ => (pending.reject.clone(), Some(None)),
        };
        let outcome = match option {
            Some(option) => RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(
                PermissionOptionId::new(option),
            )),
            None => RequestPermissionOutcome::Cancelled,
        };
        let _ = pending
            .responder
            .respond(RequestPermissionResponse::new(outcome));
        let reason = rejected?;
        lock(&self.state).rejected = true;
        let id = pending.call_id.as_str().to_owned();
        lock(&self.state).ended.insert(id).then(|| {
            Ok(AdapterEvent::Content(Content::ToolCallCompleted(
                ToolCallCompleted {
                    call_id: pending.call_id,
                    outcome: ToolCallOutcome::Rejected { reason },
                },
            )))
        })
    }
}

impl HarnessRuntime for AcpRuntime {
    fn identity(&self) -> RuntimeIdentity {
        RuntimeIdentity {
            adapter: self.adapter.clone(),
            execution_id: self.execution_id.clone(),
            provider_session_id: lock(&self.state)
                .session_id
                .as_ref()
                .map(|s| s.0.to_string()),
        }
    }

    fn initialize(&self) -> BoxFuture<'_, Result<RuntimeInit, HarnessError>> {
        Box::pin(self.ensure_initialized())
    }

    fn stream(&self, turn: TurnInput) -> BoxStream<'_, EventResult> {
        let start = Box::pin(async move {
            let first = self.begin_turn(&turn).await;
            self.segment(first)
        });
        Box::pin(stream::once(start).flatten())
    }

    fn resume(&self, decision: ResumeDecision) -> BoxStream<'_, EventResult> {
        let mut first = VecDeque::new();
        let pending = {
            let mut state = lock(&self.state);
            match state.pending.take() {
                Some(p) if p.interrupt().id == *decision.action_id() => Some(p),
                other => {
                    state.pending = other;
                    None
                }
            }
        };
        match (pending, decision.response()) {
            (Some(Pending::Permission(pending)), ValidatedResponse::Approval(_)) => {
                if let Some(item) = self.answer_permission(pending, &decision) {
                    first.push_back(item);
                }
            }
            (Some(Pending::Elicitation(pending)), ValidatedResponse::Form(form)) => {
                let action = match form.values() {
                    Some(values) => elicitation::accept(&pending.form, values),
                    None => ElicitationAction::Decline,
                };
                let _ = pending
                    .responder
                    .respond(CreateElicitationResponse::new(action));
            }
            (Some(pending), _) => {
                lock(&self.state).pending = Some(pending);
                first.push_back(Err(protocol(
                    "resume answers the open interrupt with the wrong kind of response",
                )));
            }
            // A cancel answered the request first (the answer raced it): the segment follows
            // the turn to its end, `cancelled`, rather than failing the run as `protocol`.
            (None, _) if self.refusing() => {}
            (None, _) => first.push_back(Err(protocol(
                "resume names no request this runtime is paused on",
            ))),
        }
        self.segment(first)
    }

    fn pending_action(&self) -> BoxFuture<'_, Option<ActionRequest>> {
        let pending = lock(&self.state)
            .pending
            .as_ref()
            .map(|p| p.interrupt().clone());
        Box::pin(async move { pending })
    }

    fn cancel(&self, _reason: CancelReason) -> BoxFuture<'_, CancelResult> {
        Box::pin(async move {
            let (agent, session_id, pending) = {
                let mut state = lock(&self.state);
                if state.initializing {
                    drop(state);
                    // `initialize` abandons the start and shuts the agent down.
                    self.halt.send_replace(true);
                    return CancelResult::Requested;
                }
                (
                    state.agent.clone(),
                    state.session_id.clone(),
                    state.pending.take(),
                )
            };
            let (Some(agent), Some(session_id)) = (agent, session_id) else {
                return CancelResult::NothingToCancel;
            };
            if !*self.turn.borrow() {
                if let Some(pending) = pending {
                    lock(&self.state).pending = Some(pending);
                }
                return CancelResult::NothingToCancel;
            }
            // Requests the agent sends from now on are answered `cancelled` (the ACP client
            // answers every pending permission request so once it cancels).
            agent.refuse_requests(true);
            agent.notify(CancelNotification::new(session_id));
            if let Some(pending) = pending {
                pending.cancel();
            }
            let mut turn = self.turn.subscribe();
            let grace = self.agent.cancel_grace();
            let ended = std::pin::pin!(async move {
                let _ = turn.wait_for(|active| !*active).await;
            });
            // Requests already queued (sent before the agent saw the cancel) are answered
            // `cancelled` too, even while no segment polls the queue: the agent may wait for
            // every answer before it ends its turn.
            let queued = std::pin::pin!(self.answer_queued());
            // An agent whose connection ended (it exited, or a cleanup stopped it) will not
            // end its turn: nothing is left to wait for.
            let gone = std::pin::pin!(agent.gone());
            let waited = tokio::time::timeout(
                grace,
                futures_util::future::select(futures_util::future::select(ended, gone), queued),
            )
            .await;
            match waited {
                Err(_) => {
                    // The run ends now; the group is terminated, then killed, behind it.
                    bump(&self.stats.forced_cancels);
                    self.release(&agent, Duration::from_millis(500));
                }
                Ok(futures_util::future::Either::Left((
                    futures_util::future::Either::Right(_),
                    _,
                ))) => {}
                Ok(_) => bump(&self.stats.graceful_cancels),
            }
            CancelResult::Requested
        })
    }

    fn restart(&self) -> BoxFuture<'_, Result<(), HarnessError>> {
        Box::pin(async {
            Err(HarnessError::new(
                ErrorCategory::Configuration,
                "the acp adapter does not support runtime.restart",
            ))
        })
    }

    fn cleanup(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let agent = {
                let mut state = lock(&self.state);
                if let Some(pending) = state.pending.take() {
                    pending.cancel();
                }
                state.agent.clone()
            };
            // The agent answered (or the run ended): its group is reaped behind the terminal
            // event, bounded by the grace.
            if let Some(agent) = agent {
                self.release(&agent, self.agent.cancel_grace());
            }
            // The bridged MCP servers end with the runtime.
            drop(lock(&self.relay).take());
        })
    }

    /// The agent's end, however reported (it exited, even with a process it started still
    /// holding its stdout; its connection ended): an execution awaiting its permission or
    /// elicitation request then fails `PROVIDER_LOST` instead of waiting for an answer.
    fn lost(&self) -> BoxFuture<'_, ()> {
        let agent = lock(&self.state).agent.clone();
        Box::pin(async move {
            match agent {
                Some(agent) => agent.gone().await,
                None => std::future::pending().await,
            }
        })
    }
}

/// The descriptor, for tests and registries.
#[must_use]
pub fn descriptor() -> &'static HarnessDescriptor {
    AcpAdapter::static_descriptor()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `tool.mcp` names each server's way, and says that credentials are proxied.
    #[test]
    fn tool_mcp_names_which_servers_are_forwarded_proxied_and_bridged() {
        use crate::options::{AcpMcpServer, AcpMcpTransport};
        let none = AcpAgent::new(["a"], "/srv/ws");
        assert!(!mcp_capability(&none).level().is_usable());
        let mut bridged = AcpMcpServer::stdio("local", ["srv"]);
        if let AcpMcpTransport::Stdio { env, .. } = &mut bridged.transport {
            env.insert("TOKEN".to_owned(), "t".to_owned());
        }
        let mut proxied = AcpMcpServer::http("remote", "http://127.0.0.1:1/mcp");
        if let AcpMcpTransport::Http { headers, .. } = &mut proxied.transport {
            headers.insert("Authorization".to_owned(), "Bearer t".to_owned());
        }
        let agent = none
            .with_mcp_server(bridged)
            .with_mcp_server(proxied)
            .with_mcp_server(AcpMcpServer::stdio("open", ["srv"]));
        let capability = serde_json::to_value(mcp_capability(&agent)).unwrap();
        let constraints = &capability["constraints"];
        assert_eq!(constraints["credentials"], "proxied", "{capability}");
        assert_eq!(constraints["bridged"], json!(["local"]), "{capability}");
        assert_eq!(constraints["proxied"], json!(["remote"]), "{capability}");
        assert_eq!(constraints["forwarded"], json!(["open"]), "{capability}");
        assert!(!capability.to_string().contains("Bearer"), "{capability}");
    }

    /// Defect: the conversation → session map was keyed by the conversation only, so a
    /// conversation continued with another agent loaded a foreign session id in it.
    #[test]
    fn a_conversation_is_bound_to_the_agent_that_opened_its_session() {
        let sessions = Mutex::new(HashMap::new());
        let conversation = Conversation::new(
            "alice".parse().expect("a valid caller"),
            "conv_a".parse().expect("a valid id"),
        );
        lock(&sessions).insert(
            conversation.clone(),
            Bound {
                agent: Arc::from("a"),
                session: SessionId::new("s-1"),
            },
        );
        assert_eq!(
            session_for(&sessions, Some(&conversation), "a").expect("the same agent"),
            Some(SessionId::new("s-1"))
        );
        let err =
            session_for(&sessions, Some(&conversation), "b").expect_err("another agent is refused");
        assert_eq!(err.category(), ErrorCategory::Configuration);
        assert!(
            err.message().contains("`a`") && err.message().contains("`b`"),
            "{err:?}"
        );
        // Other conversations, the same id under another caller, and no conversation, are free.
        let other = Conversation::new(conversation.caller().clone(), "conv_b".parse().unwrap());
        assert_eq!(session_for(&sessions, Some(&other), "b").ok(), Some(None));
        let bobs = Conversation::new("bob".parse().unwrap(), conversation.id().clone());
        assert_eq!(session_for(&sessions, Some(&bobs), "b").ok(), Some(None));
        assert_eq!(session_for(&sessions, None, "b").ok(), Some(None));
    }
}
