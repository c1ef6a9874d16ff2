//! [`AdapterService`]: the `tower::Service` that drives executions on one adapter.
//!
//! `call(ExecutionRequest)` checks the required capabilities against the adapter's report,
//! then spawns one *driver* task per execution and returns an [`ExecutionHandle`] at once.
//! The driver is the only owner of the typestate [`crate::lifecycle::Execution`], and it
//! processes one thing at a time: an item of the run segment, a caller's answer, or a
//! cancellation. It reaches the adapter through the service's *runtime stack* (see
//! [below](#the-runtime-stack) and [`segment`]), which it calls once per run segment. That
//! is how the service guarantees, without locks around provider calls:
//!
//! - **one mutating operation at a time**: `stream`, `resume`, `cancel` and `cleanup` are
//!   awaited by the driver in turn, never overlapped;
//! - **an action is answered at most once**: answers are queued to the driver; the first valid
//!   one resumes the run, every later one gets `ACTION_ALREADY_RESOLVED`; unknown ids get
//!   `ACTION_NOT_FOUND`, stale revisions `ACTION_REVISION_STALE`, answers that do not fit the
//!   request `ACTION_RESPONSE_INVALID`, and the pending action stays open after a bad answer;
//! - **cancellation is a request**: [`ExecutionHandle::cancel`] returns at once; the driver
//!   calls the runtime's cancel hook and cleanup at most once however many callers race, and
//!   `run.cancelled` (the one terminal event) confirms it. A failure the driver sees after a
//!   cancel was accepted (an `initialize` or a stream aborted by the execution's token) is
//!   taken as the answer to that cancel: the run ends `run.cancelled`. A segment that
//!   completed or paused before the driver saw the cancel ends as it ended;
//! - **errors and panics are classified and sanitized at the boundary**: an adapter's error
//!   ends the run as `run.failed` with the error's public projection; a panic in any adapter
//!   future or stream becomes an `internal` error with code `ADAPTER_PANICKED` (the panic text
//!   goes to the diagnostic only, after the runtime stack's layers, a redactor included, saw
//!   it), a panic in a layer of the runtime stack one with code `LAYER_PANICKED`; the process
//!   never crashes;
//! - **events out of order end the run with `protocol`**: an item after the terminal one, a
//!   segment that ends without a terminal item, a duplicate or foreign artifact;
//! - **declarations bind**: an adapter that produces what its descriptor declares unusable
//!   (`unsupported` or `unavailable`, or not declared at all) ends the run with one
//!   `run.failed`, `protocol`, `CAPABILITY_VIOLATED`, before the item is appended (the
//!   content before it is kept): `reasoning.delta` without `stream.reasoning`, `usage`
//!   without `stream.usage`, a pause for form input or tool approval without
//!   `interrupt.form_input` or `interrupt.tool_approval`, one approval of several calls
//!   without `interrupt.multi_tool`. A manifest is a promise the runtime holds the adapter to;
//! - **run limits hold** ([`RunLimits`]: the operator's, [`AdapterServiceBuilder::limits`],
//!   narrowed by the request's [`ExecutionRequest::limits`], never widened): every item
//!   passes the driver, which counts events, `tool.call.started`, message and reasoning
//!   bytes, and the tokens and model turns `usage` events report, and bounds the wall time
//!   from acceptance in every state. Past a limit the run ends with one `run.failed`
//!   carrying the limit's own code (`LIMIT_WALL_TIME`, `EVENT_LIMIT_REACHED`,
//!   `LIMIT_TOOL_CALLS`, `LIMIT_MODEL_TURNS`, `LIMIT_OUTPUT_BYTES`, `LIMIT_TOKENS`; not
//!   retryable), after cleanup (and, past the wall time, the cancel hook first, as for the
//!   deadline). The runtime gets the limits in force in [`RuntimeContext::limits`];
//! - **paused runtimes are bounded**: the runtimes of executions awaiting an action stay
//!   alive up to a cap and an idle timeout ([`ServiceConfig::runtime_pool`]); past them the
//!   one paused longest is cleaned up and the answer restores the pause on a fresh runtime
//!   from durable state (see [`pool`] for what happens when, and for which adapters);
//! - **the contract version is negotiated**: the service picks the highest version both the
//!   adapter's descriptor and the control plane speak ([`AdapterService::contract_version`],
//!   what each runtime receives); with none in common every execution is refused with
//!   `CONTRACT_VERSION_UNSUPPORTED` before anything runs.
//!
//! Decisions where the spec is silent:
//! - Run limits are counted where they can be known for every adapter: a text delta that
//!   would pass `maxOutputBytes` and a `tool.call.started` past `maxToolCalls` are not
//!   appended (the log holds at most the limit); a `usage` event that takes tokens or
//!   turns past their limit is appended (it reports what was already spent) and the run
//!   fails right after it. A run whose adapter runs ahead of the driver (its own loop) may
//!   have started the work the refused event announces: an adapter that runs its own loop
//!   reads [`RuntimeContext::limits`] to stop before (the model-loop adapter does).
//! - Model turns are what `usage` events report in `modelTurns` (1 per model request): the
//!   portable stream has no other turn marker, and a usage report is where a provider's
//!   request count is known. Limits on tokens or model turns on an adapter whose
//!   descriptor does not declare `stream.usage` usable are refused at start
//!   (`LIMIT_UNENFORCEABLE`): a limit nothing can count is not accepted.
//! - No cost limit: no provider of this project reports a cost (the OpenAI-compatible APIs
//!   report tokens), so a token limit is the budget to use.
//! - Wall time runs out while awaiting an answer too: the action is withdrawn
//!   (`run.running`) and the run fails `LIMIT_WALL_TIME` (unlike the request's deadline,
//!   which cancels: a limit the operator set is a failure of the run, with its code).
//! - A restored execution (taken over by another replica) keeps its budget: the counts are
//!   replayed from its stored log and the wall time runs from its first stored event.
//! - The per-turn deadline is not a run limit: it is the `harness-layers` timeout layer's
//!   (`TURN_TIMEOUT`).
//! - If every handle of an execution is dropped while it awaits an action, nobody can answer
//!   it any more: the driver cancels it (source `abandoned`), which runs cleanup.
//! - Declarations bind against the *descriptor*, not what `evaluate` reports: `evaluate`
//!   runs only for a request with requirements, and narrows what is *promised* for them (the
//!   ACP adapter reports `interrupt.tool_approval` unsupported when nothing guarantees an
//!   agent asks, yet answers the approvals such an agent does send). Artifacts are not
//!   checked: the contract has no artifact capability.
//! - The instance context a request picks or fills (its `model`, its `promptParameters`,
//!   its `interruptPolicy`'s bounds) is checked before the tools, the files, the skills and
//!   the capabilities, and before anything is recorded: a refused request starts nothing
//!   (see [`context`](crate::context)). An adapter that cannot honour a choice the engine
//!   made (the ACP adapter, for a model or a prompt) refuses it when its runtime is created.
//! - An adapter error after output was emitted is marked "side effects may have occurred",
//!   so retry policies never repeat it.
//! - The request's `deadline` (caller data) is enforced here, in every state: past it, a
//!   starting or running execution fails with `timeout` after the runtime's cancel hook and
//!   cleanup ran; one awaiting an action is cancelled (source `deadline`), since the runtime
//!   model draws no edge from awaiting to failed. It is also handed to the runtime in
//!   [`TurnInput`].
//! - If a driver is lost (the Tokio runtime shutting down), the execution still ends with one
//!   `run.failed` (`internal`, `EXECUTION_LOST`), and answers still queued get
//!   `EXECUTION_TERMINAL`. The runtime's `cancel` and `cleanup` are futures, which need the
//!   Tokio runtime that is going away: they are not called. What is guaranteed instead is
//!   that the runtime is dropped (with the driver's task), so a runtime releases what the
//!   operating system holds in `Drop` (the ACP adapter kills the agent's process group there:
//!   a test drops the Tokio runtime mid-turn and finds no process left).
//! - If the provider is lost while the execution awaits an action
//!   ([`HarnessRuntime::lost`](crate::adapter::HarnessRuntime::lost): the agent process
//!   exited), nothing could continue from an answer: the action is withdrawn (`run.running`)
//!   and the execution fails `unavailable`, `PROVIDER_LOST`, retryable, after cleanup.
//! - A durable execution whose adapter streams faster than the store writes waits for the
//!   store (the driver stops polling the adapter while a memory window of events is not yet
//!   acknowledged) rather than buffering without bound: the store's pace is the execution's.
//!   A store that is down holds the execution until it returns; a cancel or an answer is
//!   still taken meanwhile. Memory per execution: see
//!   [`AdapterServiceBuilder::memory_window`].
//!
//! # The runtime stack
//!
//! Redaction, retries before output, initialization and turn deadlines and shutdown are
//! layers of the runtime stack, configured on the service with
//! [`AdapterService::builder`]: each acts on the [`Segment`] call or on the
//! [`SegmentStream`] it returns, the way tower-http layers wrap a response body. They are not
//! request extensions: a layer of the admission stack that rebuilds the request cannot drop
//! them. See [`segment`] for the types and an example layer.
//!
//! The service needs a Tokio runtime with its time driver (it spawns the drivers, and bounds
//! deadlines, grace periods and cleanup with timers); without one `call` fails with an
//! `internal` error saying so. Tokio cannot be asked whether a runtime has timers: the
//! service finds out once per runtime by arming one, which, in a runtime without them, the
//! panic hook reports (and `panic = "abort"` turns into an abort): build the runtime with
//! `enable_time()` or `enable_all()`.
//!
//! ```
//! use futures_util::StreamExt;
//! use harness_core::adapter::{AdapterEvent, BoxStream, EventResult, RunContext, Simple, SimpleAdapter};
//! use harness_core::event::{Content, RunSucceeded, TextDelta};
//! use harness_core::id::Cursor;
//! use harness_core::manifest::{Describe, HarnessDescriptor};
//! use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
//! use tower::ServiceExt;
//!
//! struct Echo(HarnessDescriptor);
//! impl Describe for Echo {
//!     fn descriptor(&self) -> &HarnessDescriptor { &self.0 }
//! }
//! impl SimpleAdapter for Echo {
//!     fn stream(&self, run: RunContext) -> BoxStream<'static, EventResult> {
//!         let text = run.turn.message.clone();
//!         Box::pin(futures_util::stream::iter([
//!             Ok(AdapterEvent::Content(Content::MessageDelta(TextDelta::new(text)))),
//!             Ok(AdapterEvent::Completed(RunSucceeded::default())),
//!         ]))
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! # use harness_core::manifest::{ContractVersion, ExecutionMode};
//! # let descriptor = HarnessDescriptor::builder("echo".parse().unwrap(), "0.1.0")
//! #     .contract_version(ContractVersion::V1).execution_mode(ExecutionMode::in_process()).build().unwrap();
//! let service = AdapterService::new(Simple::new(Echo(descriptor)));
//! let execution = service.oneshot(ExecutionRequest::new("hello")).await.unwrap();
//! let kinds: Vec<_> = execution.events(Cursor::START).map(|e| e.kind().as_str()).collect().await;
//! assert_eq!(kinds, ["run.queued", "run.starting", "run.running", "message.delta", "run.succeeded"]);
//! assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
//! # });
//! ```

pub mod segment;

mod budget;
mod clock;
mod config;
mod declared;
mod driver;
mod files;
mod handle;
pub mod invoke;
mod persist;
pub mod pool;
mod skills;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use tower::layer::util::{Identity, Stack};
use tower::{Layer, ServiceBuilder, ServiceExt};
use tracing::Instrument;

pub use self::handle::{CancelStatus, ExecutionHandle, Outcome, WeakExecutionHandle};
pub use self::segment::{
    AdapterStream, BoxSegmentStream, RuntimeService, RuntimeStack, Segment, SegmentKind,
    SegmentStream,
};
pub use crate::adapter::Delivery;

use self::clock::instant_of;
pub use self::config::{DEFAULT_MAX_EVENTS, ServiceConfig};
use self::driver::Driver;
use self::handle::{Holders, Shared};
use self::persist::Durable;
pub use self::persist::Recovery;
pub use self::pool::{RuntimePoolConfig, RuntimePoolStats};
use self::segment::{ExecutionRuntime, catch};
use crate::adapter::{
    AgentConfig, DeploymentContext, HarnessAdapter, Restored, RunLimits, RuntimeContext, TurnInput,
};
use crate::capability::Requirement;
use crate::error::{ErrorCategory, ErrorCode, HarnessError};
use crate::extensions::Extensions;
use crate::file::{InputFile, ValidatedInputFile};
use crate::id::{CallerId, ConversationId, Cursor, ExecutionId, IdempotencyKey};
use crate::lifecycle::{AnyExecution, Execution};
use crate::manifest::ContractVersion;
use crate::session::{
    BindingId, Conversation, InMemoryThreadStateStore, ScopedThreadState, SessionBinding,
    ThreadStateStore,
};
use crate::time::Timestamp;
use crate::trace::TraceContext;

/// A request to start one execution.
///
/// ```
/// use harness_core::service::ExecutionRequest;
/// let req: ExecutionRequest = serde_json::from_value(serde_json::json!({
///     "message": "fix the failing test",
///     "requiredCapabilities": ["stream.text", {"capability": "interrupt.tool_approval", "minimum": "native"}],
///     "idempotencyKey": "order-42"
/// })).unwrap();
/// assert_eq!(req.required_capabilities.len(), 2);
/// // The instance context a caller picks or fills (checked against the instance at start).
/// let req: ExecutionRequest = serde_json::from_value(serde_json::json!({
///     "message": "review this diff",
///     "model": "gpt-4.1-mini",
///     "promptParameters": {"team": "payments"},
///     "interruptPolicy": {"allow": ["tool_approval"], "answerWithinMs": 300000}
/// })).unwrap();
/// assert_eq!(req.model.as_deref(), Some("gpt-4.1-mini"));
/// assert_eq!(req.prompt_parameters["team"], "payments");
/// let policy = req.interrupt_policy.unwrap();
/// assert!(!policy.permits(harness_core::action::ActionType::FormInput));
/// let err = serde_json::from_value::<ExecutionRequest>(serde_json::json!({"mesage": "typo"})).unwrap_err();
/// assert!(err.to_string().contains("unknown field `mesage`"));
/// ```
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct ExecutionRequest {
    /// The user's message.
    pub message: String,
    /// Adapter options, validated against the adapter's options schema by the preflight layer.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub options: Value,
    /// Input files: uploaded ones by id, small ones inline. Validated before anything runs:
    /// count, size, type by content, and what the adapter takes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<InputFile>,
    /// Opaque client context handed to the adapter.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub client_context: Map<String, Value>,
    /// The conversation this execution continues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<ConversationId>,
    /// Capabilities the adapter must support, checked before any provider work.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_capabilities: Vec<Requirement>,
    /// Makes retries of this request return the original execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<IdempotencyKey>,
    /// When the execution must end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Timestamp>,
    /// The caller's W3C trace context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_context: Option<TraceContext>,
    /// The skills the execution asks for, by name (see [`skill`](crate::skill)): granted
    /// by the service's [`SkillCatalog`](crate::skill::SkillCatalog) for the request's
    /// caller before anything runs, or the request is refused (`SKILL_BLOCKED`,
    /// `SKILL_NOT_FOUND`; `CAPABILITY_UNSUPPORTED` for an adapter whose `skills` is not
    /// usable).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<String>,
    /// Which of the service's tools the execution gets: tool ids, or a tool provider's name
    /// for all of its tools (an MCP server's); every tool of the service when absent, none
    /// when empty. An entry the service does not offer refuses the request
    /// (`TOOL_NOT_FOUND`) before anything runs; so does a non-empty list for an adapter
    /// that does not run portable tools
    /// ([`PORTABLE_TOOLS`](crate::capability::PORTABLE_TOOLS)). See
    /// [`ToolSet`](crate::tool::ToolSet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<crate::tool::ToolId>>,
    /// The caller's run limits for this execution: they narrow the operator's
    /// ([`AdapterServiceBuilder::limits`]), never widen them (each limit in force is the
    /// smaller of the two). See [`RunLimits`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<RunLimits>,
    /// How the caller takes the output: `stream` (the default) or `outcome`, which lets an
    /// adapter whose provider has a non-streaming call make it (see [`Delivery`] and
    /// [`invoke`](AdapterService::invoke), which sets it). Not part of the request's
    /// identity: a retry that waits for the outcome finds the execution a streamed request
    /// started, and the reverse.
    #[serde(default, skip_serializing_if = "Delivery::is_stream")]
    pub delivery: Delivery,
    /// The model to run with: one of those the operator offers on this instance
    /// ([`AdapterServiceBuilder::models`]), else the request is refused before anything
    /// runs (`MODEL_NOT_ALLOWED`, naming them). Absent: the operator's default. The adapter
    /// receives the choice in [`AgentConfig::model`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Values of the instance prompt's parameters ([`AdapterServiceBuilder::prompt`]), by
    /// name: checked before anything runs (`PROMPT_PARAMETER_INVALID`, naming an unknown
    /// parameter, a missing required one, a value too long), rendered by the engine into
    /// [`RuntimeContext::prompt`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prompt_parameters: BTreeMap<String, String>,
    /// Which pauses the caller permits and how long an answer may take (see
    /// [`InterruptPolicy`](crate::context::InterruptPolicy)): every pause, unbounded, when
    /// absent. Enforced by the driver whatever the adapter does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt_policy: Option<crate::context::InterruptPolicy>,
    /// Caller data for the application's own layers (never on the wire; not part of the
    /// request's identity). No layer of this project puts a policy here: a layer that
    /// rebuilds the request cannot switch anything off.
    #[serde(skip)]
    #[schemars(skip)]
    pub extensions: Extensions,
}

// `CallerId::of` lives beside the request it reads, so that the id module, at the bottom of the
// kernel, does not import the service at its top.
impl CallerId {
    /// The caller of `request`: its [`CallerId`] extension, or [`ANONYMOUS`](Self::ANONYMOUS).
    #[must_use]
    pub fn of(request: &ExecutionRequest) -> Self {
        request
            .extensions
            .get::<Self>()
            .cloned()
            .unwrap_or(Self::ANONYMOUS)
    }
}

impl ExecutionRequest {
    /// A request with `message` and nothing else.
    #[must_use]
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            ..Self::default()
        }
    }

    /// Sets the adapter options.
    #[must_use]
    pub fn with_options(mut self, options: Value) -> Self {
        self.options = options;
        self
    }

    /// Adds a required capability.
    #[must_use]
    pub fn require(mut self, requirement: impl Into<Requirement>) -> Self {
        self.required_capabilities.push(requirement.into());
        self
    }

    /// Sets the idempotency key.
    #[must_use]
    pub fn with_idempotency_key(mut self, key: IdempotencyKey) -> Self {
        self.idempotency_key = Some(key);
        self
    }

    /// Sets the conversation.
    #[must_use]
    pub fn with_conversation(mut self, conversation: ConversationId) -> Self {
        self.conversation_id = Some(conversation);
        self
    }

    /// The conversation this execution continues, in its caller's scope: `conversation_id`
    /// under the request's [`CallerId`] (anonymous without one).
    ///
    /// ```
    /// use harness_core::id::CallerId;
    /// use harness_core::service::ExecutionRequest;
    ///
    /// let mut request = ExecutionRequest::new("hi").with_conversation("c-1".parse().unwrap());
    /// assert_eq!(request.conversation().unwrap().caller(), &CallerId::ANONYMOUS);
    /// request.extensions.insert("alice".parse::<CallerId>().unwrap());
    /// assert_eq!(request.conversation().unwrap().caller().as_str(), "alice");
    /// ```
    #[must_use]
    pub fn conversation(&self) -> Option<Conversation> {
        let id = self.conversation_id.clone()?;
        Some(Conversation::new(crate::id::CallerId::of(self), id))
    }

    /// Sets the trace context.
    #[must_use]
    pub fn with_trace_context(mut self, trace: TraceContext) -> Self {
        self.trace_context = Some(trace);
        self
    }

    /// Sets the deadline.
    #[must_use]
    pub fn with_deadline(mut self, deadline: Timestamp) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Narrows the service's run limits for this execution (see [`limits`](Self::limits)).
    #[must_use]
    pub fn with_limits(mut self, limits: RunLimits) -> Self {
        self.limits = Some(limits);
        self
    }

    /// Sets how the caller takes the output (see [`delivery`](Self::delivery)).
    #[must_use]
    pub fn with_delivery(mut self, delivery: Delivery) -> Self {
        self.delivery = delivery;
        self
    }

    /// Chooses the model (see [`model`](Self::model)).
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Fills one parameter of the instance prompt (see
    /// [`prompt_parameters`](Self::prompt_parameters)).
    #[must_use]
    pub fn with_prompt_parameter(
        mut self,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> Self {
        self.prompt_parameters.insert(name.into(), value.into());
        self
    }

    /// Sets the interrupt policy (see [`interrupt_policy`](Self::interrupt_policy)).
    #[must_use]
    pub fn with_interrupt_policy(mut self, policy: crate::context::InterruptPolicy) -> Self {
        self.interrupt_policy = Some(policy);
        self
    }

    /// Selects the service's tools the execution gets (see [`tools`](Self::tools)).
    #[must_use]
    pub fn with_tools(mut self, tools: impl IntoIterator<Item = crate::tool::ToolId>) -> Self {
        self.tools = Some(tools.into_iter().collect());
        self
    }
}

/// Drives executions on one adapter. Cheap to clone; clones share the adapter and the
/// runtime stack.
pub struct AdapterService<A> {
    inner: Arc<ServiceInner<A>>,
}

struct ServiceInner<A> {
    adapter: Arc<A>,
    config: ServiceConfig,
    deployment: DeploymentContext,
    /// The highest contract version both the adapter and the control plane speak; `None`
    /// when they share none (every execution is refused).
    contract_version: Option<ContractVersion>,
    /// The operator's run limits (narrowed by the middleware's caps).
    limits: RunLimits,
    /// The operator's middleware policy.
    middleware: crate::tool::middleware::PortableMiddlewarePolicy,
    stack: RuntimeStack,
    durable: Option<Durable>,
    thread_state: Arc<dyn ThreadStateStore>,
    tools: Option<Arc<crate::tool::ToolSet>>,
    files: files::FileSettings,
    skills: Option<Arc<crate::skill::SkillCatalog>>,
    /// The pool of paused runtimes; `None` when the adapter cannot restore an evicted one.
    pool: Option<Arc<pool::Pool>>,
    /// The operator's instance context: models, prompt, user projection.
    instance: Instance,
}

/// What the operator configures per instance for the construction context and the turn.
#[derive(Debug, Clone, Default)]
struct Instance {
    models: Option<crate::context::ModelPolicy>,
    prompt: Option<Arc<crate::context::PromptTemplate>>,
    users: crate::context::UserProjection,
}

/// The default [`AdapterServiceBuilder::memory_window`] of a durable service: the stored
/// events each execution's log keeps in memory (some 6 MB of short deltas), the most one
/// append to the store carries, and the most that wait for the store before the execution
/// waits for it.
pub const DEFAULT_MEMORY_WINDOW: usize = 32_768;

/// The default lease term of a durable service ([`AdapterServiceBuilder::store`]): a replica
/// that dies leaves its executions to another after at most this long.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);

impl<A> Clone for AdapterService<A> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<A: HarnessAdapter> fmt::Debug for AdapterService<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdapterService")
            .field("adapter", self.inner.adapter.descriptor().id())
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// Builds an [`AdapterService`]: its [`ServiceConfig`] and its runtime stack.
///
/// Layers are added outermost first, as with [`tower::ServiceBuilder`]: the first one added
/// is the nearest to the driver, the last one the nearest to the adapter.
///
/// ```
/// use harness_core::service::{AdapterService, ServiceConfig};
/// # use harness_core::adapter::{BoxStream, EventResult, RunContext, Simple, SimpleAdapter};
/// # use harness_core::manifest::{ContractVersion, ExecutionMode, HarnessDescriptor};
/// # struct Nop(HarnessDescriptor);
/// # impl harness_core::manifest::Describe for Nop {
/// #     fn descriptor(&self) -> &HarnessDescriptor { &self.0 }
/// # }
/// # impl SimpleAdapter for Nop {
/// #     fn stream(&self, _: RunContext) -> BoxStream<'static, EventResult> { Box::pin(futures_util::stream::empty()) }
/// # }
/// # let adapter = Simple::new(Nop(HarnessDescriptor::builder("nop".parse().unwrap(), "0.1.0")
/// #     .contract_version(ContractVersion::V1).execution_mode(ExecutionMode::in_process()).build().unwrap()));
/// let service = AdapterService::builder(adapter)
///     .config(ServiceConfig::default())
///     .layer(tower::layer::util::Identity::new()) // a runtime layer: redaction, retry, ...
///     .build();
/// # drop(service);
/// ```
#[must_use]
pub struct AdapterServiceBuilder<A, L> {
    adapter: A,
    config: ServiceConfig,
    layers: ServiceBuilder<L>,
    durable: Option<Durable>,
    thread_state: Option<Arc<dyn ThreadStateStore>>,
    tools: Option<Arc<crate::tool::ToolSet>>,
    limits: RunLimits,
    files: files::FileSettings,
    middleware: crate::tool::middleware::PortableMiddlewarePolicy,
    skills: Option<Arc<crate::skill::SkillCatalog>>,
    instance: Instance,
}

impl<A: HarnessAdapter, L> fmt::Debug for AdapterServiceBuilder<A, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdapterServiceBuilder")
            .field("adapter", self.adapter.descriptor().id())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<A: HarnessAdapter, L> AdapterServiceBuilder<A, L> {
    /// Adds a layer to the runtime stack, inside those added before it.
    pub fn layer<T>(self, layer: T) -> AdapterServiceBuilder<A, Stack<T, L>> {
        AdapterServiceBuilder {
            adapter: self.adapter,
            config: self.config,
            layers: self.layers.layer(layer),
            durable: self.durable,
            thread_state: self.thread_state,
            tools: self.tools,
            limits: self.limits,
            files: self.files,
            middleware: self.middleware,
            skills: self.skills,
            instance: self.instance,
        }
    }

    /// The models a caller of this instance may choose, and the default (see
    /// [`ModelPolicy`](crate::context::ModelPolicy)); without it a request that names a
    /// model is refused and the adapter uses its own configured one.
    ///
    /// ```
    /// use harness_core::context::ModelPolicy;
    /// use harness_core::service::ExecutionRequest;
    /// # use harness_core::service::AdapterService;
    /// # use harness_core::adapter::{BoxStream, EventResult, RunContext, Simple, SimpleAdapter};
    /// # use harness_core::manifest::{ContractVersion, ExecutionMode, HarnessDescriptor};
    /// # struct Nop(HarnessDescriptor);
    /// # impl harness_core::manifest::Describe for Nop {
    /// #     fn descriptor(&self) -> &HarnessDescriptor { &self.0 }
    /// # }
    /// # impl SimpleAdapter for Nop {
    /// #     fn stream(&self, _: RunContext) -> BoxStream<'static, EventResult> { Box::pin(futures_util::stream::empty()) }
    /// # }
    /// # let adapter = Simple::new(Nop(HarnessDescriptor::builder("nop".parse().unwrap(), "0.1.0")
    /// #     .contract_version(ContractVersion::V1).execution_mode(ExecutionMode::in_process()).build().unwrap()));
    /// let policy = ModelPolicy::new(["small", "large"])?.with_default("small")?;
    /// let service = AdapterService::builder(adapter).models(policy).build();
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let err = service.start(ExecutionRequest::new("hi").with_model("huge")).await.unwrap_err();
    /// assert_eq!(err.code().as_str(), "MODEL_NOT_ALLOWED");
    /// assert!(err.message().contains("small, large"));
    /// # });
    /// # Ok::<(), harness_core::error::HarnessError>(())
    /// ```
    pub fn models(mut self, policy: crate::context::ModelPolicy) -> Self {
        self.instance.models = Some(policy);
        self
    }

    /// The instance prompt: rendered for each execution with the request's
    /// [`prompt_parameters`](ExecutionRequest::prompt_parameters) and handed to the runtime
    /// in [`RuntimeContext::prompt`] (see [`PromptTemplate`](crate::context::PromptTemplate)).
    /// Without it a request that fills parameters is refused.
    pub fn prompt(mut self, template: crate::context::PromptTemplate) -> Self {
        self.instance.prompt = Some(Arc::new(template));
        self
    }

    /// How a request's principal is projected for the adapter ([`TurnInput::user`]): the
    /// id key and the attributes that pass (see
    /// [`UserProjection`](crate::context::UserProjection); unkeyed ids and no attributes by
    /// default).
    pub fn users(mut self, projection: crate::context::UserProjection) -> Self {
        self.instance.users = projection;
        self
    }

    /// The operator's run limits, for every execution of the service (none by default). A
    /// request's own [`limits`](ExecutionRequest::limits) narrow them, never widen them; the
    /// driver ends a run that passes one with one `run.failed` naming it (see
    /// [`RunLimits`] and the [service docs](self)). Limits on tokens or model turns need an
    /// adapter that reports usage (`stream.usage` usable in its descriptor): on any other,
    /// every execution is refused with `LIMIT_UNENFORCEABLE`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use harness_core::limits::RunLimits;
    /// # use harness_core::service::AdapterService;
    /// # use harness_core::adapter::{BoxStream, EventResult, RunContext, Simple, SimpleAdapter};
    /// # use harness_core::manifest::{ContractVersion, ExecutionMode, HarnessDescriptor};
    /// # struct Nop(HarnessDescriptor);
    /// # impl harness_core::manifest::Describe for Nop {
    /// #     fn descriptor(&self) -> &HarnessDescriptor { &self.0 }
    /// # }
    /// # impl SimpleAdapter for Nop {
    /// #     fn stream(&self, _: RunContext) -> BoxStream<'static, EventResult> { Box::pin(futures_util::stream::empty()) }
    /// # }
    /// # let adapter = Simple::new(Nop(HarnessDescriptor::builder("nop".parse().unwrap(), "0.1.0")
    /// #     .contract_version(ContractVersion::V1).execution_mode(ExecutionMode::in_process()).build().unwrap()));
    /// let limits = RunLimits::none()
    ///     .with_wall_time(Duration::from_secs(300))?
    ///     .with_max_tool_calls(20)?
    ///     .with_max_output_bytes(1 << 20)?;
    /// let service = AdapterService::builder(adapter).limits(limits).build();
    /// assert_eq!(service.limits().max_tool_calls(), Some(20));
    /// # Ok::<(), harness_core::error::HarnessError>(())
    /// ```
    pub fn limits(mut self, limits: RunLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Offers `tools` to the service's executions: each gets them (or those its request
    /// selects, [`ExecutionRequest::tools`]) as [`ToolHandle`](crate::tool::ToolHandle)s in
    /// [`RuntimeContext::tools`], under each tool's policy and cancelled with the
    /// execution. Providers (MCP servers) are asked for their tools when the execution's
    /// runtime is created; one that fails is reported in the log (`tool.unavailable`) and
    /// the execution runs with the rest. The caller's
    /// [`CallerCredentials`](crate::tool::CallerCredentials), in the request's extensions,
    /// reach only the providers they name.
    ///
    /// ```
    /// use harness_core::tool::{FnTool, ToolSet};
    /// # use harness_core::service::AdapterService;
    /// # use harness_core::adapter::{BoxStream, EventResult, RunContext, Simple, SimpleAdapter};
    /// # use harness_core::manifest::{ContractVersion, ExecutionMode, HarnessDescriptor};
    /// # struct Nop(HarnessDescriptor);
    /// # impl harness_core::manifest::Describe for Nop {
    /// #     fn descriptor(&self) -> &HarnessDescriptor { &self.0 }
    /// # }
    /// # impl SimpleAdapter for Nop {
    /// #     fn stream(&self, _: RunContext) -> BoxStream<'static, EventResult> { Box::pin(futures_util::stream::empty()) }
    /// # }
    /// # let adapter = Simple::new(Nop(HarnessDescriptor::builder("nop".parse().unwrap(), "0.1.0")
    /// #     .contract_version(ContractVersion::V1).execution_mode(ExecutionMode::in_process()).build().unwrap()));
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct City { name: String }
    /// let weather = FnTool::new("weather.now".parse()?, "Current weather.", |c: City, _| async move {
    ///     Ok::<_, String>(format!("sunny in {}", c.name))
    /// })?;
    /// let service = AdapterService::builder(adapter).tools(ToolSet::new().tool(weather)?).build();
    /// # drop(service);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn tools(mut self, tools: crate::tool::ToolSet) -> Self {
        self.tools = Some(Arc::new(tools));
        self
    }

    /// The operator's middleware policy (see [`middleware`](crate::tool::middleware)), for
    /// every execution of the service (none by default: everything allowed). Every tool
    /// handle of an execution applies it, every runtime gets it in
    /// [`RuntimeContext::middleware`] (for a harness's own tools), and its caps narrow the
    /// run limits ([`limits`](Self::limits)) so the driver enforces them.
    ///
    /// ```
    /// use harness_core::middleware::{MiddlewareConfig, PortableMiddlewarePolicy};
    /// # use harness_core::service::AdapterService;
    /// # use harness_core::adapter::{BoxStream, EventResult, RunContext, Simple, SimpleAdapter};
    /// # use harness_core::manifest::{ContractVersion, ExecutionMode, HarnessDescriptor};
    /// # struct Nop(HarnessDescriptor);
    /// # impl harness_core::manifest::Describe for Nop {
    /// #     fn descriptor(&self) -> &HarnessDescriptor { &self.0 }
    /// # }
    /// # impl SimpleAdapter for Nop {
    /// #     fn stream(&self, _: RunContext) -> BoxStream<'static, EventResult> { Box::pin(futures_util::stream::empty()) }
    /// # }
    /// # let adapter = Simple::new(Nop(HarnessDescriptor::builder("nop".parse().unwrap(), "0.1.0")
    /// #     .contract_version(ContractVersion::V1).execution_mode(ExecutionMode::in_process()).build().unwrap()));
    /// let config: MiddlewareConfig = serde_json::from_value(serde_json::json!({
    ///     "tools": [{ "tool": "fs.*", "action": "deny" }],
    ///     "limits": { "maxToolCalls": 8 }
    /// }))?;
    /// let service = AdapterService::builder(adapter)
    ///     .middleware(PortableMiddlewarePolicy::compile(&config)?)
    ///     .build();
    /// assert_eq!(service.limits().max_tool_calls(), Some(8));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn middleware(mut self, policy: crate::tool::middleware::PortableMiddlewarePolicy) -> Self {
        self.middleware = policy;
        self
    }

    /// Keeps every execution in `store`, as replica `replica`: its record, and each event
    /// before any reader sees it (readers of a durable execution see only what the store
    /// acknowledged, so a crash never takes back an event someone saw). The execution's
    /// lease ([`DEFAULT_LEASE_TTL`]) is renewed while it lives; when this process dies,
    /// [`AdapterService::recover`] on another one (or this one, restarted) takes over or ends
    /// what it left. A replica name belongs to one live process at a time: a process
    /// restarted under the same name recovers its predecessor's executions at once (their
    /// leases are its own), another waits for them to lapse.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use harness_core::store::{MemoryStore, ReplicaId};
    /// # use harness_core::service::AdapterService;
    /// # use harness_core::adapter::{BoxStream, EventResult, RunContext, Simple, SimpleAdapter};
    /// # use harness_core::manifest::{ContractVersion, ExecutionMode, HarnessDescriptor};
    /// # struct Nop(HarnessDescriptor);
    /// # impl harness_core::manifest::Describe for Nop {
    /// #     fn descriptor(&self) -> &HarnessDescriptor { &self.0 }
    /// # }
    /// # impl SimpleAdapter for Nop {
    /// #     fn stream(&self, _: RunContext) -> BoxStream<'static, EventResult> { Box::pin(futures_util::stream::empty()) }
    /// # }
    /// # let adapter = Simple::new(Nop(HarnessDescriptor::builder("nop".parse().unwrap(), "0.1.0")
    /// #     .contract_version(ContractVersion::V1).execution_mode(ExecutionMode::in_process()).build().unwrap()));
    /// let service = AdapterService::builder(adapter)
    ///     .store(Arc::new(MemoryStore::new()), ReplicaId::new("replica-1"))
    ///     .build();
    /// # drop(service);
    /// ```
    pub fn store(
        mut self,
        store: Arc<dyn crate::store::ExecutionStore>,
        replica: crate::store::ReplicaId,
    ) -> Self {
        self.durable = Some(Durable {
            store,
            replica,
            lease_ttl: DEFAULT_LEASE_TTL,
            window: DEFAULT_MEMORY_WINDOW,
            live: Arc::default(),
        });
        self
    }

    /// How many stored events each execution's log of a durable service keeps in memory
    /// (after [`store`](Self::store); [`DEFAULT_MEMORY_WINDOW`] by default, at least 1,024):
    /// older ones are dropped, 1,024 at a time, once the store holds them, and a reader
    /// behind reads them back from the store in pages, so a long execution's memory stays
    /// bounded however far behind its readers are. `ExecutionHandle::log().snapshot(..)`
    /// shows only what is held; `events(..)` streams show everything. The window also caps
    /// an append to the store (at most 32,768 events): a smaller window trades streaming
    /// throughput (one store sync per append) for memory.
    ///
    /// It also bounds what waits for the store: when a window of events is not yet
    /// acknowledged, the execution takes nothing more from its adapter until the store has
    /// caught up (a cancel or an answer is still handled meanwhile), so an adapter faster
    /// than the store slows to the store's pace instead of filling memory. A live execution
    /// holds at most about two windows of events (stored, and waiting for the store; some
    /// 12 MB of short deltas at the default); once its end is stored, only its last chunk
    /// of at most 1,024 events.
    pub fn memory_window(mut self, events: usize) -> Self {
        if let Some(durable) = &mut self.durable {
            durable.window = events.max(1024);
        }
        self
    }

    /// Keeps the thread state of conversations (what adapters keep between turns, scoped
    /// to each conversation's binding) in `store`. Every execution of a conversation gets a
    /// [`ScopedThreadState`] for its binding
    /// ([`BindingId::for_conversation`]) at the binding's current epoch, in
    /// [`RuntimeContext::thread_state`]; an execution without a conversation gets none.
    /// Replicas that share `store` continue each other's conversations. Without it the
    /// service keeps thread state in memory, for its own lifetime.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use harness_core::session::InMemoryThreadStateStore;
    /// # use harness_core::service::AdapterService;
    /// # use harness_core::adapter::{BoxStream, EventResult, RunContext, Simple, SimpleAdapter};
    /// # use harness_core::manifest::{ContractVersion, ExecutionMode, HarnessDescriptor};
    /// # struct Nop(HarnessDescriptor);
    /// # impl harness_core::manifest::Describe for Nop {
    /// #     fn descriptor(&self) -> &HarnessDescriptor { &self.0 }
    /// # }
    /// # impl SimpleAdapter for Nop {
    /// #     fn stream(&self, _: RunContext) -> BoxStream<'static, EventResult> { Box::pin(futures_util::stream::empty()) }
    /// # }
    /// # let adapter = Simple::new(Nop(HarnessDescriptor::builder("nop".parse().unwrap(), "0.1.0")
    /// #     .contract_version(ContractVersion::V1).execution_mode(ExecutionMode::in_process()).build().unwrap()));
    /// let shared = Arc::new(InMemoryThreadStateStore::new());
    /// let service = AdapterService::builder(adapter).thread_state(shared).build();
    /// # drop(service);
    /// ```
    pub fn thread_state(mut self, store: Arc<dyn ThreadStateStore>) -> Self {
        self.thread_state = Some(store);
        self
    }

    /// [`store`](Self::store) and [`thread_state`](Self::thread_state) on one backend that
    /// keeps both (every store of this project does): executions and conversations survive
    /// this process together, and replicas over `store` share both.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use harness_core::store::{MemoryStore, ReplicaId};
    /// # use harness_core::service::AdapterService;
    /// # use harness_core::adapter::{BoxStream, EventResult, RunContext, Simple, SimpleAdapter};
    /// # use harness_core::manifest::{ContractVersion, ExecutionMode, HarnessDescriptor};
    /// # struct Nop(HarnessDescriptor);
    /// # impl harness_core::manifest::Describe for Nop {
    /// #     fn descriptor(&self) -> &HarnessDescriptor { &self.0 }
    /// # }
    /// # impl SimpleAdapter for Nop {
    /// #     fn stream(&self, _: RunContext) -> BoxStream<'static, EventResult> { Box::pin(futures_util::stream::empty()) }
    /// # }
    /// # let adapter = Simple::new(Nop(HarnessDescriptor::builder("nop".parse().unwrap(), "0.1.0")
    /// #     .contract_version(ContractVersion::V1).execution_mode(ExecutionMode::in_process()).build().unwrap()));
    /// let service = AdapterService::builder(adapter)
    ///     .durable(Arc::new(MemoryStore::new()), ReplicaId::new("replica-1"))
    ///     .build();
    /// # drop(service);
    /// ```
    pub fn durable<S>(self, store: Arc<S>, replica: crate::store::ReplicaId) -> Self
    where
        S: crate::store::ExecutionStore + ThreadStateStore + 'static,
    {
        self.store(
            Arc::clone(&store) as Arc<dyn crate::store::ExecutionStore>,
            replica,
        )
        .thread_state(store)
    }

    /// Sets the lease term of a durable service (after [`store`](Self::store)).
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        if let Some(durable) = &mut self.durable {
            durable.lease_ttl = ttl;
        }
        self
    }

    /// Sets the timing knobs.
    pub fn config(mut self, config: ServiceConfig) -> Self {
        self.config = config;
        self
    }

    /// The service, its runtime stack built once (and cloned for each segment).
    ///
    /// The stack's outermost layer may fail with anything `Into<HarnessError>` (tower's
    /// `BoxError` included: a tower `timeout` or `concurrency_limit` around the runtime
    /// layers), converted here, once, as the [error module](crate::error#towers-own-middleware)
    /// describes.
    pub fn build(self) -> AdapterService<A>
    where
        L: Layer<RuntimeService<A>>,
        L::Service: tower::Service<Segment> + Clone + Send + Sync + 'static,
        <L::Service as tower::Service<Segment>>::Error: Into<HarnessError>,
        <L::Service as tower::Service<Segment>>::Response: SegmentStream + 'static,
        <L::Service as tower::Service<Segment>>::Future: Send + 'static,
    {
        let adapter = Arc::new(self.adapter);
        let stack = self
            .layers
            .service(RuntimeService::new(Arc::clone(&adapter)))
            .map_err(Into::<HarnessError>::into)
            .map_response(|stream| Box::pin(stream) as BoxSegmentStream);
        let deployment = DeploymentContext::default();
        let contract_version = adapter
            .descriptor()
            .highest_common_version(&deployment.contract_versions);
        AdapterService {
            inner: Arc::new(ServiceInner {
                config: self.config,
                deployment,
                contract_version,
                limits: self.limits.narrowed_by(&self.middleware.limits()),
                middleware: self.middleware,
                stack: RuntimeStack::new(stack),
                durable: self.durable,
                thread_state: self
                    .thread_state
                    .unwrap_or_else(|| Arc::new(InMemoryThreadStateStore::new())),
                tools: self.tools,
                files: self.files,
                skills: self.skills,
                pool: pool::evictable(adapter.descriptor())
                    .then(|| Arc::new(pool::Pool::new(self.config.runtime_pool))),
                instance: self.instance,
                adapter,
            }),
        }
    }
}

impl<A: HarnessAdapter> AdapterService<A> {
    /// A service over `adapter` with the default [`ServiceConfig`] and no runtime layer.
    #[must_use]
    pub fn new(adapter: A) -> Self {
        Self::builder(adapter).build()
    }

    /// A service over `adapter` with `config` and no runtime layer.
    #[must_use]
    pub fn with_config(adapter: A, config: ServiceConfig) -> Self {
        Self::builder(adapter).config(config).build()
    }

    /// A builder, to add runtime layers.
    pub fn builder(adapter: A) -> AdapterServiceBuilder<A, Identity> {
        AdapterServiceBuilder {
            adapter,
            config: ServiceConfig::default(),
            layers: ServiceBuilder::new(),
            durable: None,
            thread_state: None,
            tools: None,
            limits: RunLimits::none(),
            files: files::FileSettings::default(),
            middleware: crate::tool::middleware::PortableMiddlewarePolicy::allow_all(),
            skills: None,
            instance: Instance::default(),
        }
    }

    /// The adapter.
    #[must_use]
    pub fn adapter(&self) -> &A {
        &self.inner.adapter
    }

    /// The timing knobs.
    #[must_use]
    pub fn config(&self) -> &ServiceConfig {
        &self.inner.config
    }

    /// The operator's middleware policy ([`AdapterServiceBuilder::middleware`]).
    #[must_use]
    pub fn middleware(&self) -> &crate::tool::middleware::PortableMiddlewarePolicy {
        &self.inner.middleware
    }

    /// The operator's run limits ([`AdapterServiceBuilder::limits`], narrowed by the
    /// middleware's caps).
    #[must_use]
    pub fn limits(&self) -> &RunLimits {
        &self.inner.limits
    }

    /// The contract version negotiated with the adapter: the highest one both the adapter's
    /// descriptor and the control plane speak (what each runtime receives in
    /// [`RuntimeContext::contract_version`]); `None` when they share none, and then every
    /// execution is refused with `CONTRACT_VERSION_UNSUPPORTED`.
    #[must_use]
    pub fn contract_version(&self) -> Option<ContractVersion> {
        self.inner.contract_version
    }

    /// What the service's pool of paused runtimes holds and has evicted (see [`pool`]);
    /// `None` for an adapter whose paused runtimes are never evicted (it does not declare
    /// `runtime.eviction_recovery` usable).
    #[must_use]
    pub fn runtime_pool(&self) -> Option<RuntimePoolStats> {
        self.inner.pool.as_ref().map(|pool| pool.stats())
    }

    /// The tools offered to the service's executions ([`AdapterServiceBuilder::tools`]), if
    /// any: for a readiness check of their providers ([`ToolSet::health`](crate::tool::ToolSet::health)).
    #[must_use]
    pub fn tools(&self) -> Option<&crate::tool::ToolSet> {
        self.inner.tools.as_deref()
    }
    /// Starts one execution: checks required capabilities, first against the adapter's
    /// descriptor (the most it can do), then against what `evaluate` reports for the
    /// request's configuration; then spawns its driver and returns its handle.
    ///
    /// `evaluate` is called for *every* request, not only one that requires capabilities:
    /// its error (options the instance refuses, a configuration it cannot serve) refuses the
    /// start, and so does a conversation on a configuration whose report withdraws the
    /// `session.multi_turn` the descriptor declares (a descriptor that does not declare it
    /// is for `harness_layers::preflight::PreflightLayer` to refuse). Adapters cache what
    /// `evaluate` needs from the provider (the ACP adapter probes each agent once), so this
    /// costs no provider work per request.
    ///
    /// # Errors
    /// `CAPABILITY_UNSUPPORTED` (configuration) when a requirement is unmet (a requirement the
    /// descriptor cannot meet is refused without calling `evaluate`, which may do provider
    /// work such as probing an agent), or when the request names a conversation and the
    /// evaluated report withdraws `session.multi_turn`; `evaluate`'s own error;
    /// `internal` when called outside a Tokio runtime. No execution has started in any of
    /// these cases.
    pub async fn start(&self, request: ExecutionRequest) -> Result<ExecutionHandle, HarnessError> {
        let tokio = tokio::runtime::Handle::try_current().map_err(|_| {
            HarnessError::new(
                ErrorCategory::Internal,
                "the adapter service needs a Tokio runtime",
            )
            .with_diagnostic("AdapterService::call was polled outside a Tokio runtime context")
        })?;
        // Deadlines, grace periods and cleanup bounds need the runtime's timer; without it the
        // driver could not bound anything, so refuse here rather than fail later.
        if !has_timers(&tokio) {
            return Err(HarnessError::new(
                ErrorCategory::Internal,
                "the adapter service needs a Tokio runtime with timers enabled",
            )
            .with_diagnostic("build the runtime with `enable_time()` (or `enable_all()`)"));
        }
        let inner = &self.inner;
        self.negotiated()?;
        self.limits_of(&request)?;
        // The conversation is the caller's: the same id under another caller is another one.
        let conversation = request.conversation();
        // The instance context the request picks or fills, checked before any work.
        let (model, prompt) = self.instance_context(&request)?;
        let config = AgentConfig {
            options: request.options.clone(),
            model,
            conversation: conversation.clone(),
        };
        self.check_tools(&request)?;
        let files = self.validated_files(&request).await?;
        // Asking for skills requires `skills`, checked like any required capability and
        // before the names are looked at.
        let required = self.required_with_skills(&request);
        if !required.is_empty() {
            // The descriptor is the most the adapter can do: what it cannot meet is refused
            // before `evaluate`, which may do provider work (the ACP adapter starts its agent).
            let declared = inner.adapter.descriptor().capabilities();
            if let Err(unmet) = declared.check(&required) {
                return Err(unsupported(&unmet));
            }
        }
        let skills = self.granted_skills(&request)?;
        // `evaluate` answers for every request, required capabilities or not: an instance
        // that cannot serve this configuration (options it refuses, a conversation on an
        // agent that cannot reopen a session) refuses here, before any runtime exists.
        // A conversation on a configuration whose report withdraws the `session.multi_turn`
        // its descriptor declares is refused too. (Whether the descriptor declares it at
        // all is the preflight layer's check; the bare service leaves that to it.)
        let report = match catch(async { inner.adapter.evaluate(&config, &inner.deployment).await })
            .await
            .and_then(|r| r)
        {
            Ok(report) => report,
            Err(err) => {
                // The operator's record of why (an agent that cannot be spawned, say): the
                // caller sees the safe projection only, and no execution exists to log it.
                tracing::warn!(
                    adapter = %inner.adapter.descriptor().id(),
                    code = %err.code(),
                    category = err.category().as_str(),
                    diagnostic = err.diagnostic().unwrap_or(""),
                    "execution refused at start, evaluate failed: {}",
                    err.message()
                );
                return Err(err);
            }
        };
        let mut implied = required;
        let multi_turn = crate::capability::CapabilityKey::SessionMultiTurn;
        if conversation.is_some()
            && inner
                .adapter
                .descriptor()
                .capabilities()
                .level(multi_turn)
                .is_usable()
        {
            implied.push(crate::capability::Requirement::from(multi_turn));
        }
        if let Err(unmet) = report.check(&implied) {
            return Err(unsupported(&unmet));
        }

        // The conversation's thread state, at its binding's current epoch; a store that
        // cannot say refuses the start before anything is recorded or runs.
        let (binding, thread_state) = match &conversation {
            Some(conversation) => {
                let scoped = self.scoped_state(conversation).await?;
                (Some(scoped.binding().clone()), Some(scoped))
            }
            None => (None, None),
        };
        let id = ExecutionId::generate();
        // If the driver is lost (a runtime shutting down), the execution still ends its log
        // with exactly one terminal event.
        let queued = Execution::queue(id.clone()).fail_on_drop();
        let shared = Arc::new(Shared::new(
            id.clone(),
            inner.adapter.descriptor().id().clone(),
            queued.events(),
            CancellationToken::new(),
        ));
        if let Some(durable) = &inner.durable {
            let reader = queued.events();
            reader.gate();
            persist::back(durable, &reader, &id);
            let json = serde_json::to_value(&request).unwrap_or_default();
            let mut record = crate::store::ExecutionRecord::new(
                id.clone(),
                shared.adapter.as_str(),
                crate::store::fingerprint(&identity(&json)),
                json,
            );
            if let Some(key) = &request.idempotency_key {
                record = record.with_idempotency_key(key.clone());
            }
            // The caller owns the execution (and scopes its key); in-process use names none.
            if let Some(caller) = request.extensions.get::<crate::id::CallerId>() {
                record = record.with_principal(caller.as_str());
            }
            // Nothing has run: a refusal here starts nothing (the queued execution is
            // dropped, its in-memory log ended).
            // Live here from before its record exists: a recovery running meanwhile on
            // this service leaves it alone (and it is let go if this start goes no further).
            let claim = persist::ReleaseClaim::hold(durable, &id);
            match durable.store.create(record).await {
                Ok(crate::store::Created::New) => {}
                // The key was used before, on any replica: that execution, mirrored here.
                Ok(crate::store::Created::Existing(first)) => return self.attach(&first.id).await,
                Err(e) => return Err(e.to_harness_error()),
            }
            let lease = durable
                .store
                .acquire(&id, &durable.replica, durable.lease_ttl)
                .await
                .map_err(|e| e.to_harness_error())?;
            persist::spawn(durable.clone(), lease, &shared, 0);
            claim.keep();
        }
        let handle = ExecutionHandle {
            holders: Arc::new(Holders(Arc::clone(&shared))),
            replay: false,
        };
        let turn = turn_of(id, &request, files, self.user_of(&request));
        let driver = self.driver(
            shared,
            request,
            config,
            (binding, thread_state),
            (turn, skills, prompt),
            None,
        );
        // The driver inherits the caller's span (a tracing layer enters the execution's span while
        // polling this call), so what the driver and the adapter log belongs to the execution.
        tokio.spawn(driver.run(queued).instrument(tracing::Span::current()));
        Ok(handle)
    }
}

/// The turn an execution of `request` runs.
fn turn_of(
    id: ExecutionId,
    request: &ExecutionRequest,
    files: Vec<ValidatedInputFile>,
    user: Option<crate::context::SafeUserContext>,
) -> TurnInput {
    TurnInput {
        execution_id: id,
        conversation_id: request.conversation_id.clone(),
        message: request.message.clone(),
        files,
        user,
        client_context: request.client_context.clone(),
        trace_context: request.trace_context.clone(),
        deadline: request.deadline,
        idempotency_key: request.idempotency_key.clone(),
    }
}

impl<A: HarnessAdapter> AdapterService<A> {
    /// The negotiated contract version, or the refusal when the adapter and the control
    /// plane share none.
    fn negotiated(&self) -> Result<ContractVersion, HarnessError> {
        self.inner.contract_version.ok_or_else(|| {
            let descriptor = self.inner.adapter.descriptor();
            let list = |versions: &[ContractVersion]| {
                versions
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            HarnessError::new(
                ErrorCategory::Configuration,
                format!(
                    "adapter `{}` speaks contract versions [{}] but this control plane speaks \
                     [{}]: no common version, so it runs nothing; build the adapter against a \
                     contract version the control plane speaks",
                    descriptor.id(),
                    list(descriptor.contract_versions()),
                    list(&self.inner.deployment.contract_versions),
                ),
            )
            .with_code(ErrorCode::CONTRACT_VERSION_UNSUPPORTED)
        })
    }

    /// The run limits in force for `request`: the operator's narrowed by the caller's;
    /// refused when one needs usage reports the adapter does not make.
    fn limits_of(&self, request: &ExecutionRequest) -> Result<RunLimits, HarnessError> {
        let limits = match &request.limits {
            Some(caller) => self.inner.limits.narrowed_by(caller),
            None => self.inner.limits,
        };
        let needing = limits.needing_usage();
        let descriptor = self.inner.adapter.descriptor();
        if !needing.is_empty()
            && !descriptor
                .capabilities()
                .level(crate::capability::CapabilityKey::StreamUsage)
                .is_usable()
        {
            return Err(HarnessError::new(
                ErrorCategory::Configuration,
                format!(
                    "run limits {} count what `usage` events report, but adapter `{}` does not \
                     report usage (`stream.usage`): leave them out, or bound the execution with \
                     `wallTimeMs`, `maxToolCalls` or `maxOutputBytes`",
                    needing
                        .iter()
                        .map(|n| format!("`{n}`"))
                        .collect::<Vec<_>>()
                        .join(" and "),
                    descriptor.id(),
                ),
            )
            .with_code(ErrorCode::LIMIT_UNENFORCEABLE));
        }
        Ok(limits)
    }

    /// The model and the rendered prompt of `request`, narrowed by the instance's policy
    /// and template; refused when the request picks or fills what the instance does not
    /// offer, or carries an interrupt policy that bounds nothing.
    fn instance_context(
        &self,
        request: &ExecutionRequest,
    ) -> Result<
        (
            Option<crate::context::ModelSelection>,
            Option<crate::context::RenderedPrompt>,
        ),
        HarnessError,
    > {
        let instance = &self.inner.instance;
        let model = crate::context::ModelPolicy::select_under(
            instance.models.as_ref(),
            request.model.as_deref(),
        )?;
        let prompt = match &instance.prompt {
            Some(template) => Some(template.render(&request.prompt_parameters)?),
            None if request.prompt_parameters.is_empty() => None,
            None => {
                return Err(HarnessError::new(
                    ErrorCategory::Configuration,
                    "the request fills `promptParameters`, but this instance has no prompt \
                     template: leave them out",
                )
                .with_code(ErrorCode::PROMPT_PARAMETER_INVALID));
            }
        };
        if let Some(policy) = &request.interrupt_policy {
            policy.check()?;
        }
        Ok((model, prompt))
    }

    /// The safe projection of the request's principal, if it names one.
    fn user_of(&self, request: &ExecutionRequest) -> Option<crate::context::SafeUserContext> {
        request
            .extensions
            .get::<CallerId>()
            .map(|caller| self.inner.instance.users.project(caller))
    }

    /// Refuses a request that selects tools the service does not offer, or any tool for an
    /// adapter that does not run portable tools.
    fn check_tools(&self, request: &ExecutionRequest) -> Result<(), HarnessError> {
        let Some(selection) = request.tools.as_deref().filter(|s| !s.is_empty()) else {
            return Ok(());
        };
        if !self
            .inner
            .adapter
            .descriptor()
            .capabilities()
            .runs_portable_tools()
        {
            return Err(HarnessError::new(
                ErrorCategory::Configuration,
                format!(
                    "the request selects tools, but adapter `{}` does not run portable tools \
                     (its `tool.builtin` does not declare `portableTools`): leave `tools` out",
                    self.inner.adapter.descriptor().id()
                ),
            )
            .with_code(ErrorCode::CAPABILITY_UNSUPPORTED));
        }
        let none = crate::tool::ToolSet::new();
        self.inner
            .tools
            .as_deref()
            .unwrap_or(&none)
            .check_selection(selection)
    }

    /// The driver of one execution: its runtime context, its turn, and (for one taken over
    /// while paused) what its runtime restores.
    fn driver(
        &self,
        shared: Arc<Shared>,
        request: ExecutionRequest,
        config: AgentConfig,
        (binding, thread_state): (Option<SessionBinding>, Option<ScopedThreadState>),
        (turn, skills, prompt): (
            TurnInput,
            crate::skill::SkillManifest,
            Option<crate::context::RenderedPrompt>,
        ),
        restored: Option<Restored>,
    ) -> Driver {
        let inner = &self.inner;
        // Checked when the execution was accepted; a restored one was accepted before.
        let limits = self.limits_of(&request).unwrap_or(inner.limits);
        let context = RuntimeContext {
            contract_version: inner.contract_version.unwrap_or(ContractVersion::V1),
            adapter: shared.adapter.clone(),
            execution_id: shared.id.clone(),
            config,
            binding,
            prompt,
            interrupt_policy: request.interrupt_policy.clone().unwrap_or_default(),
            tools: Vec::new(),
            limits,
            thread_state,
            cancellation: shared.cancel.child_token(),
            delivery: request.delivery,
            middleware: inner.middleware.clone(),
            skills,
            // Built while the execution's span (the trace layer's) is current.
            telemetry: crate::telemetry::TelemetrySink::new(
                shared.adapter.clone(),
                shared.id.clone(),
                tracing::Span::current(),
            ),
        };
        let mut execution = ExecutionRuntime::new(
            Arc::clone(&shared),
            context,
            turn,
            request.extensions,
            inner.config.cleanup_deadline,
        );
        if let Some(tools) = &inner.tools {
            execution = execution.with_tools(Arc::clone(tools), request.tools);
        }
        let emitted = restored.is_some();
        // The wall time runs from the execution's acceptance: its first stored event for one
        // taken over.
        let accepted = restored
            .as_ref()
            .and_then(|r| r.log.first())
            .map_or_else(Timestamp::now, |first| first.time());
        let mut budget = budget::Budget::new(limits, inner.config.max_events, accepted);
        // The answers before a pause, for a runtime that restores it.
        let answers = restored
            .as_ref()
            .map(|r| r.answers.clone())
            .unwrap_or_default();
        if let Some(restored) = restored {
            budget.replay(&restored.log);
            execution = execution.with_restored(restored);
        }
        Driver {
            config: inner.config,
            shared,
            execution: Arc::new(execution),
            stack: inner.stack.clone(),
            listening: true,
            // A restored execution may have produced output before its owner was lost.
            emitted,
            deadline: request.deadline.map(instant_of),
            declared: declared::Declared::of(inner.adapter.descriptor().capabilities()),
            content: Vec::new(),
            budget,
            durable: inner.durable.clone(),
            pool: inner.pool.clone(),
            answers,
        }
    }

    /// Takes over `paused` (its lease already this replica's): the execution, restored
    /// from its stored log, awaits its action here; the answer resumes it on a fresh
    /// runtime that restores the pause.
    async fn restore(&self, paused: persist::Paused) -> Result<(), HarnessError> {
        let durable = self.durable()?;
        let persist::Paused {
            lease,
            record,
            events,
            pending,
        } = paused;
        let id = record.id.clone();
        let mut request: ExecutionRequest =
            serde_json::from_value(record.request).map_err(|e| {
                HarnessError::new(
                    ErrorCategory::Persistence,
                    "the stored request of the execution cannot be read back",
                )
                .with_diagnostic(e.to_string())
            })?;
        // The answers before this pause, with what the log does not carry (form values).
        let mut answers = Vec::new();
        for event in &events {
            if let crate::event::EventPayload::ActionResolved(resolved) = event.payload()
                && let Some(resolution) = durable
                    .store
                    .resolution(&id, &resolved.action_id)
                    .await
                    .map_err(|e| e.to_harness_error())?
                && let Ok(answer) = serde_json::from_value(resolution.response)
            {
                answers.push(answer);
            }
        }
        let stored = events.len();
        let restored = AnyExecution::restore(&id, events).map_err(|e| {
            HarnessError::new(
                ErrorCategory::Persistence,
                "the stored log of the execution cannot be restored",
            )
            .with_diagnostic(e.to_string())
        })?;
        // The caller the record names owns the conversation (none: in-process, anonymous).
        if !record.principal.is_empty() {
            let caller = record
                .principal
                .parse::<crate::id::CallerId>()
                .map_err(|e| {
                    HarnessError::new(
                        ErrorCategory::Persistence,
                        "the stored principal of the execution is not a caller id",
                    )
                    .with_diagnostic(e.to_string())
                })?;
            request.extensions.insert(caller);
        }
        let conversation = request.conversation();
        // The model and prompt again, under this replica's instance configuration.
        let (model, prompt) = self.instance_context(&request)?;
        // The files are resolved again, in the owner's scope: the runtime gets the same handles.
        let files = self.validated_files(&request).await?;
        let skills = self.granted_skills(&request)?;
        let state = match &conversation {
            Some(conversation) => {
                let scoped = self.scoped_state(conversation).await?;
                (Some(scoped.binding().clone()), Some(scoped))
            }
            None => (None, None),
        };
        let reader = restored.events();
        // The whole stored log, for the runtime's restore (taken before the log is trimmed).
        let log = reader.snapshot(crate::id::Cursor::START);
        reader.gate();
        persist::back(durable, &reader, &id);
        reader.publish(Some(stored));
        let shared = Arc::new(Shared::new(
            id.clone(),
            self.inner.adapter.descriptor().id().clone(),
            reader,
            CancellationToken::new(),
        ));
        persist::spawn(durable.clone(), lease, &shared, stored);
        let turn = turn_of(id, &request, files, self.user_of(&request));
        let config = AgentConfig {
            options: request.options.clone(),
            model,
            conversation,
        };
        let restored_for_runtime = Restored::new(turn.clone(), pending, log, answers);
        let driver = self.driver(
            shared,
            request,
            config,
            state,
            (turn, skills, prompt),
            Some(restored_for_runtime),
        );
        tokio::spawn(driver.run_restored(restored));
        Ok(())
    }

    /// Handles the executions of this adapter that a lost replica left unfinished in the
    /// service's store (their lease lapsed or was released), each exactly once across the
    /// replicas recovering at once (the lease decides); executions a live replica holds are
    /// left alone. Call it when a replica starts, and from time to time.
    ///
    /// - One paused on an action, when the adapter declares `session.cross_replica_resume`
    ///   usable, is taken over ([`Recovery::Restored`]): it awaits its answer here (sent to
    ///   any replica, accepted once), which resumes it on a fresh runtime that restores the
    ///   pause ([`HarnessRuntime::restore`](crate::adapter::HarnessRuntime::restore)).
    /// - One whose cancel was requested (or begun) ends `run.cancelled`.
    /// - Any other ends `run.failed` (`unavailable`, retryable, `OWNER_LOST`): continuing a
    ///   run mid-stream would need the provider's own state of the unfinished turn, which no
    ///   adapter of this project keeps. (A pause whose runtime the service's own
    ///   [`pool`] evicted is restored the same way as a takeover, on this replica.)
    ///
    /// # Errors
    /// `persistence` when the store fails; `configuration` when the service has no store.
    pub async fn recover(&self) -> Result<Vec<Recovery>, HarnessError> {
        let durable = self.durable()?;
        let restorable = self
            .inner
            .adapter
            .descriptor()
            .capabilities()
            .level(crate::capability::CapabilityKey::SessionCrossReplicaResume)
            .is_usable();
        let this = self.clone();
        let restore = move |paused: persist::Paused| -> futures_util::future::BoxFuture<
            'static,
            Result<(), HarnessError>,
        > {
            let this = this.clone();
            Box::pin(async move { this.restore(paused).await })
        };
        persist::recover(
            durable,
            self.inner.adapter.descriptor().id().as_str(),
            restorable.then_some(&restore as persist::Restore<'_>),
        )
        .await
        .map_err(|e| e.to_harness_error())
    }

    /// Retention: deletes from the service's store every execution (of any adapter: the
    /// store is shared) that has ended and was created more than `keep` ago, with its events,
    /// answers and idempotency key, in batches of 1,000. Unfinished executions are never
    /// deleted. Returns how many were. Nothing is deleted unless this is called: call it
    /// from time to time with the retention the deployment promises (a retried request whose
    /// execution was purged starts a new one).
    ///
    /// # Errors
    /// `persistence` when the store fails (what was deleted before stays deleted);
    /// `configuration` when the service has no store.
    pub async fn purge_ended(&self, keep: Duration) -> Result<usize, HarnessError> {
        const BATCH: usize = 1000;
        let durable = self.durable()?;
        let keep = i64::try_from(keep.as_millis()).unwrap_or(i64::MAX);
        let cutoff = Timestamp::from_millis(Timestamp::now().as_millis().saturating_sub(keep))
            .unwrap_or_else(|| Timestamp::from_millis(0).unwrap_or_else(Timestamp::now));
        let mut purged = 0;
        loop {
            let n = durable
                .store
                .purge(cutoff, BATCH)
                .await
                .map_err(|e| e.to_harness_error())?;
            purged += n;
            if n < BATCH {
                return Ok(purged);
            }
        }
    }

    /// The thread state of `conversation` on this adapter, at its binding's current epoch.
    async fn scoped_state(
        &self,
        conversation: &Conversation,
    ) -> Result<ScopedThreadState, HarnessError> {
        let store = &self.inner.thread_state;
        let id = BindingId::for_conversation(self.inner.adapter.descriptor().id(), conversation);
        let binding = store.current(&id, conversation.id()).await?;
        Ok(ScopedThreadState::new(Arc::clone(store), binding))
    }

    /// `session.clear`: forgets what this adapter kept for `conversation` (every replica
    /// sharing the thread-state store forgets it) and moves its binding to the next epoch,
    /// which is returned. The conversation's next execution starts afresh; a runtime still
    /// holding the old epoch's state is fenced (its reads and writes fail
    /// `STATE_EPOCH_STALE`). Of two clears at once, each moves the epoch on once or reports
    /// the race.
    ///
    /// ```
    /// # use harness_core::adapter::{BoxStream, EventResult, RunContext, Simple, SimpleAdapter};
    /// # use harness_core::manifest::{ContractVersion, ExecutionMode, HarnessDescriptor};
    /// # use harness_core::service::AdapterService;
    /// # struct Nop(HarnessDescriptor);
    /// # impl harness_core::manifest::Describe for Nop {
    /// #     fn descriptor(&self) -> &HarnessDescriptor { &self.0 }
    /// # }
    /// # impl SimpleAdapter for Nop {
    /// #     fn stream(&self, _: RunContext) -> BoxStream<'static, EventResult> { Box::pin(futures_util::stream::empty()) }
    /// # }
    /// # let adapter = Simple::new(Nop(HarnessDescriptor::builder("nop".parse().unwrap(), "0.1.0")
    /// #     .contract_version(ContractVersion::V1).execution_mode(ExecutionMode::in_process()).build().unwrap()));
    /// use harness_core::session::Conversation;
    ///
    /// let service = AdapterService::new(adapter);
    /// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    /// rt.block_on(async {
    ///     let conversation = Conversation::anonymous("conv-1".parse().unwrap());
    ///     assert_eq!(service.clear_session(&conversation).await.unwrap().epoch(), 1);
    ///     assert_eq!(service.clear_session(&conversation).await.unwrap().epoch(), 2);
    /// });
    /// ```
    ///
    /// # Errors
    /// `persistence` (`STATE_*` codes) when the thread-state store fails or the race is lost.
    pub async fn clear_session(
        &self,
        conversation: &Conversation,
    ) -> Result<SessionBinding, HarnessError> {
        let scoped = self.scoped_state(conversation).await?;
        Ok(self.inner.thread_state.clear(scoped.binding()).await?)
    }

    fn durable(&self) -> Result<&Durable, HarnessError> {
        self.inner.durable.as_ref().ok_or_else(|| {
            HarnessError::new(
                ErrorCategory::Configuration,
                "this service keeps its executions in no store: build it with \
                 AdapterServiceBuilder::store to reach executions of other replicas",
            )
        })
    }

    /// Answers the pending action of a durable execution, whichever replica runs it: the
    /// answer is checked against the stored action, recorded in the store once (of answers
    /// sent to any replicas, the first recorded wins), and applied by the owner.
    ///
    /// # Errors
    /// As [`ExecutionHandle::respond`]: `ACTION_ALREADY_RESOLVED`, `ACTION_NOT_FOUND`,
    /// `ACTION_REVISION_STALE`, `ACTION_RESPONSE_INVALID`, `EXECUTION_TERMINAL`; `persistence`
    /// when the store fails or holds no such execution; `configuration` without a store.
    pub async fn respond_to(
        &self,
        id: &ExecutionId,
        response: crate::action::ActionResponse,
    ) -> Result<(), HarnessError> {
        persist::answer(&*self.durable()?.store, id, response).await
    }

    /// A handle on the durable execution `id`, whichever replica runs it: its events read
    /// from the store (a reader sees what the store holds, live), its answers and cancels
    /// sent through the store to the owner. Dropping it stops only the mirror.
    ///
    /// # Errors
    /// `persistence` when the store fails or holds no such execution; `configuration`
    /// without a store.
    pub async fn attach(&self, id: &ExecutionId) -> Result<ExecutionHandle, HarnessError> {
        persist::attach(
            self.durable()?,
            id,
            self.inner.adapter.descriptor().id().clone(),
        )
        .await
        .map_err(|e| e.to_harness_error())
    }

    /// The stored record of the durable execution `id`, whichever replica runs it: who
    /// started it (the [`CallerId`] of its request, empty when none),
    /// on which adapter, its state as last stored, whether a cancel was requested.
    ///
    /// `None` when the store holds no such execution (never created, or purged).
    ///
    /// # Errors
    /// `persistence` when the store fails; `configuration` without a store.
    pub async fn record(
        &self,
        id: &ExecutionId,
    ) -> Result<Option<crate::store::ExecutionRecord>, HarnessError> {
        match self.durable()?.store.record(id).await {
            Ok(record) => Ok(Some(record)),
            Err(crate::store::StoreError::NotFound(_)) => Ok(None),
            Err(e) => Err(e.to_harness_error()),
        }
    }

    /// A page of the durable executions `principal` started (on any adapter sharing the
    /// store), newest first; see [`ExecutionStore::list`](crate::store::ExecutionStore::list).
    ///
    /// # Errors
    /// `persistence` when the store fails; `configuration` without a store.
    pub async fn list(
        &self,
        principal: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<crate::store::Listed>, HarnessError> {
        self.durable()?
            .store
            .list(principal, before, limit)
            .await
            .map_err(|e| e.to_harness_error())
    }

    /// Up to `limit` stored events of the durable execution `id` after `after`, in order,
    /// whichever replica runs it (what the store has acknowledged).
    ///
    /// # Errors
    /// `persistence` when the store fails or holds no such execution; `configuration`
    /// without a store.
    pub async fn read_events(
        &self,
        id: &ExecutionId,
        after: Cursor,
        limit: usize,
    ) -> Result<Vec<crate::event::Event>, HarnessError> {
        self.durable()?
            .store
            .read(id, after, limit)
            .await
            .map_err(|e| e.to_harness_error())
    }

    /// A [`Tail`](crate::store::Tail) of the durable execution `id`'s stored log: it wakes
    /// when the store holds more of it, whichever replica appends.
    ///
    /// # Errors
    /// `persistence` when the store fails; `configuration` without a store.
    pub async fn tail(&self, id: &ExecutionId) -> Result<crate::store::Tail, HarnessError> {
        self.durable()?
            .store
            .tail(id)
            .await
            .map_err(|e| e.to_harness_error())
    }

    /// Requests the cancellation of a durable execution, whichever replica runs it (the
    /// owner applies it; `run.cancelled` in its log confirms it). Returns whether this was
    /// the first request.
    ///
    /// # Errors
    /// `persistence` when the store fails or holds no such execution; `configuration`
    /// without a store.
    pub async fn request_cancel(
        &self,
        id: &ExecutionId,
        reason: &str,
    ) -> Result<bool, HarnessError> {
        self.durable()?
            .store
            .request_cancel(id, reason)
            .await
            .map_err(|e| e.to_harness_error())
    }
}

/// What identifies a request for its idempotency key: the request without the key itself,
/// its trace context and its deadline (a retry carries new ones) and how its caller takes
/// the output, as the idempotency layer's fingerprint leaves them out.
fn identity(request: &Value) -> Value {
    let mut identity = request.clone();
    if let Some(members) = identity.as_object_mut() {
        for volatile in ["idempotencyKey", "traceContext", "deadline", "delivery"] {
            members.remove(volatile);
        }
    }
    identity
}

/// Whether the runtime of `handle` has its time driver. Tokio has no query for it: the only
/// way to know is to arm a timer, which panics without one (the panic is caught, but the
/// process's panic hook prints it, and under `panic = "abort"` it aborts). So the answer is
/// remembered for the last few runtimes: a runtime is asked once, and one with timers (every
/// `#[tokio::main]` and `enable_all()` runtime) never panics at all.
/// The `CAPABILITY_UNSUPPORTED` refusal listing `unmet`.
fn unsupported(unmet: &[crate::capability::UnmetRequirement]) -> HarnessError {
    let list: Vec<String> = unmet.iter().map(ToString::to_string).collect();
    HarnessError::new(
        ErrorCategory::Configuration,
        format!(
            "required capabilities are not supported: {}",
            list.join("; ")
        ),
    )
    .with_code(ErrorCode::CAPABILITY_UNSUPPORTED)
}

fn has_timers(handle: &tokio::runtime::Handle) -> bool {
    use std::sync::Mutex;
    static KNOWN: Mutex<Vec<(tokio::runtime::Id, bool)>> = Mutex::new(Vec::new());
    const REMEMBERED: usize = 16;
    let id = handle.id();
    let mut known = KNOWN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(&(_, timers)) = known.iter().find(|(known, _)| *known == id) {
        return timers;
    }
    let timers = std::panic::catch_unwind(|| drop(tokio::time::sleep(Duration::ZERO))).is_ok();
    if known.len() == REMEMBERED {
        known.remove(0);
    }
    known.push((id, timers));
    timers
}

impl<A: HarnessAdapter> tower::Service<ExecutionRequest> for AdapterService<A> {
    type Response = ExecutionHandle;
    type Error = HarnessError;
    type Future = crate::adapter::BoxFuture<'static, Result<ExecutionHandle, HarnessError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Executions are independent tasks: the bare service is always ready. Capacity limits
        // are a layer's job.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ExecutionRequest) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.start(request).await })
    }
}
