//! The adapter contract (v1), Rust-shaped: [`HarnessAdapter`] and [`HarnessRuntime`].
//!
//! An adapter isolates one provider SDK from the control plane. The control plane (here,
//! [`AdapterService`](crate::service::AdapterService)) owns the lifecycle, event numbering,
//! actions and the terminal outcome; the adapter only yields [`AdapterEvent`]s.
//!
//! Both traits are object-safe, so one registry can hold `Arc<dyn HarnessAdapter>` of
//! different adapters. Methods return boxed futures and streams that borrow `self`; a runtime
//! takes `&self` everywhere so that [`HarnessRuntime::cancel`] can run *while* a stream is
//! being consumed. The contract's "only one mutating operation at a time" is guaranteed by
//! the service, which never overlaps `stream`, `resume`, `restart` and `cleanup`.
//!
//! For simple adapters there is an easier path, which the contract allows as a smaller
//! protocol (a descriptor, `evaluate`, an initial provider session id, and one stream per run
//! context, with the full lifecycle above as the certification target): implement
//! [`SimpleAdapter`] and wrap it in [`Simple`] to get a full [`HarnessAdapter`], whose
//! `cancel`, `restart` and `cleanup` [`Simple`] provides.
//!
//! # What a runtime yields
//!
//! `stream` and `resume` each yield exactly one canonical run segment: any number of
//! [`AdapterEvent::Content`] and [`AdapterEvent::Artifact`] items, then exactly one of
//! [`AdapterEvent::Completed`], [`AdapterEvent::Action`] or an `Err`, then the end of the
//! stream. Anything else (an item after the terminal one, a stream that ends without one) is
//! a protocol violation and ends the execution with the `protocol` category.
//!
//! # What a runtime receives
//!
//! [`RuntimeContext`], [`TurnInput`] and [`ResumeDecision`] are immutable, narrowed values:
//! none carries credentials, raw environment, transport objects or another adapter's state.
//! Tools arrive as [`ToolHandle`]s, which validate arguments and never expose a credential.
//! The model ([`AgentConfig::model`]), the instance prompt ([`RuntimeContext::prompt`]) and
//! the interrupt policy ([`RuntimeContext::interrupt_policy`]) are the engine's narrowing of
//! what the operator offers and the request picks (see [`context`](crate::context)); the
//! turn's [`user`](TurnInput::user) is the principal's safe projection, never a token or a
//! claim; a [`ResumeDecision`] names the session binding it was made for.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::StreamExt;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::action::ActionRequest;
use crate::artifact::ArtifactDescriptor;
use crate::capability::CapabilityReport;
use crate::error::HarnessError;
use crate::event::{CancelReason, Content, RunSucceeded};
use crate::id::{AdapterId, ConversationId, ExecutionId, IdempotencyKey};
use crate::manifest::{ContractVersion, Describe, HarnessDescriptor};
use crate::session::{Conversation, ScopedThreadState, SessionBinding};
use crate::time::Timestamp;
use crate::tool::ToolHandle;
use crate::tool::middleware::PortableMiddlewarePolicy;
use crate::trace::TraceContext;

pub use crate::action::resume::ResumeDecision;
pub use crate::boxed::{BoxFuture, BoxStream};
pub use crate::health::HarnessHealth;
/// One item of a runtime's stream.
pub type EventResult = Result<AdapterEvent, HarnessError>;

/// What a runtime yields; the service numbers it and moves the lifecycle.
#[derive(Debug, Clone, PartialEq)]
pub enum AdapterEvent {
    /// Text, reasoning, usage, tool activity or a native payload.
    Content(Content),
    /// An artifact was created (its descriptor names this execution).
    Artifact(ArtifactDescriptor),
    /// The run pauses on an action (the contract's *interrupt*: a native pause, normalized to
    /// a portable action request); the segment ends here. The runtime owns the request's
    /// revision and creation time: they are set afresh when it is opened.
    Action(ActionRequest),
    /// The run succeeded; the segment ends here.
    Completed(RunSucceeded),
}

impl From<Content> for AdapterEvent {
    fn from(c: Content) -> Self {
        Self::Content(c)
    }
}

/// The normalized agent configuration an adapter evaluates.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentConfig {
    /// Adapter options, already validated against the adapter's options schema.
    pub options: Value,
    /// The model, narrowed by the engine: one the operator's
    /// [`ModelPolicy`](crate::context::ModelPolicy) allows, chosen by the request or the
    /// policy's default; `None` when the instance offers no choice (the adapter uses its own
    /// configured model).
    pub model: Option<crate::context::ModelSelection>,
    /// The conversation the caller continues, if any, in the caller's scope: key anything
    /// kept per conversation outside the thread state by it (the same id under two callers
    /// is two conversations).
    pub conversation: Option<Conversation>,
}

/// What the deployment offers the adapter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeploymentContext {
    /// Contract versions the control plane speaks.
    pub contract_versions: Vec<ContractVersion>,
    /// Whether sandbox workers are available in this deployment.
    pub sandbox_available: bool,
}

impl Default for DeploymentContext {
    fn default() -> Self {
        Self {
            contract_versions: vec![ContractVersion::V1],
            sandbox_available: false,
        }
    }
}

pub use crate::limits::RunLimits;

/// The immutable, narrowed values a runtime is built from. No credentials, no raw
/// environment, no transport objects, no other adapter's state.
#[derive(Debug, Clone)]
pub struct RuntimeContext {
    /// The negotiated contract version.
    pub contract_version: ContractVersion,
    /// The adapter this runtime belongs to.
    pub adapter: AdapterId,
    /// The execution this runtime serves.
    pub execution_id: ExecutionId,
    /// The normalized configuration.
    pub config: AgentConfig,
    /// The session binding, for multi-turn conversations.
    pub binding: Option<SessionBinding>,
    /// The operator's instance prompt, rendered by the engine with the request's
    /// parameters ([`PromptTemplate`](crate::context::PromptTemplate)); `None` when the
    /// instance has none. A model loop makes it its system message.
    pub prompt: Option<crate::context::RenderedPrompt>,
    /// The pauses the caller permits and how long an answer may take. The service's driver
    /// enforces it whatever the runtime does; a runtime that can avoid a pause may read it.
    pub interrupt_policy: crate::context::InterruptPolicy,
    /// Portable tools, each behind a validating handle.
    pub tools: Vec<ToolHandle>,
    /// The run limits in force for this execution (the operator's, narrowed by the
    /// caller's). The service's driver enforces them whatever the runtime does; a runtime
    /// that runs its own loop may also stop before it passes one (see
    /// [`limits`](crate::limits)).
    pub limits: RunLimits,
    /// Thread state scoped to this binding only.
    pub thread_state: Option<ScopedThreadState>,
    /// Cancelled when the execution is cancelled; runtimes may watch it.
    pub cancellation: CancellationToken,
    /// How the caller takes the execution's output: a runtime whose provider has a
    /// non-streaming call may use it for [`Delivery::Outcome`] (see [`Delivery`]).
    pub delivery: Delivery,
    /// The operator's middleware policy ([`PortableMiddlewarePolicy`]; allows everything by
    /// default). The service already applies it to [`tools`](Self::tools); a runtime consults
    /// it ([`PortableMiddlewarePolicy::decide`]) for calls of the harness's own tools, which
    /// do not pass through a handle.
    pub middleware: PortableMiddlewarePolicy,
    /// The skills granted to this execution (empty unless the request asked for some): see
    /// [`skill`](crate::skill). A runtime whose adapter declares `skills` usable delivers
    /// them to its harness.
    pub skills: crate::skill::SkillManifest,
    /// The execution's telemetry: spans that are children of the execution's span and
    /// metrics under the adapter's prefix and labels (see [`telemetry`](crate::telemetry)).
    /// Emit the runtime's own measurements here rather than to the global recorder.
    pub telemetry: crate::telemetry::TelemetrySink,
}

/// How the caller of an execution takes its output
/// ([`ExecutionRequest::delivery`](crate::service::ExecutionRequest::delivery)).
///
/// Either way every event reaches the execution's log, and every layer sees it; what
/// changes is only how a runtime may ask its provider. For [`Outcome`](Self::Outcome) the
/// caller waits for the finished outcome
/// ([`AdapterService::invoke`](crate::service::AdapterService::invoke)), so a runtime whose
/// provider has a non-streaming call may make it (`invoke.non_streaming` native): its text
/// then arrives as one `message.delta` per model request instead of many. A runtime that
/// ignores it is correct: the outcome is collected from its stream (emulated).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Delivery {
    /// Events as they come (the default).
    #[default]
    Stream,
    /// Only the finished outcome is wanted: a runtime may ask its provider for whole
    /// responses.
    Outcome,
}

impl Delivery {
    /// The default: [`Stream`](Self::Stream) (for serde's `skip_serializing_if`).
    #[must_use]
    #[allow(clippy::trivially_copy_pass_by_ref)] // serde passes a reference
    pub fn is_stream(&self) -> bool {
        *self == Self::Stream
    }
}

pub use crate::file::{InputFile, ValidatedInputFile};

/// One turn's input.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnInput {
    /// The execution (run) id.
    pub execution_id: ExecutionId,
    /// The conversation's id as its caller gave it, for multi-turn adapters. It is unique
    /// only within the caller's scope: key what is kept per conversation by
    /// [`AgentConfig::conversation`] (or keep it in the thread state), never by this id.
    pub conversation_id: Option<ConversationId>,
    /// The user's message.
    pub message: String,
    /// Input files, validated (count, size, type by content) and of a modality the
    /// adapter declares it takes: read handles, never host paths (see [`crate::file`]).
    pub files: Vec<ValidatedInputFile>,
    /// The principal's safe projection (an opaque stable id and what the operator lets
    /// pass, never a token or a claim), to attribute work by; `None` for an execution
    /// without a principal (in-process use that names no caller).
    pub user: Option<crate::context::SafeUserContext>,
    /// Opaque client context (no credentials: callers must not put any here).
    pub client_context: Map<String, Value>,
    /// The caller's trace context, to continue.
    pub trace_context: Option<TraceContext>,
    /// When the turn must end.
    pub deadline: Option<Timestamp>,
    /// The request's idempotency key.
    pub idempotency_key: Option<IdempotencyKey>,
}

/// Who a runtime is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeIdentity {
    /// The adapter.
    pub adapter: AdapterId,
    /// The execution.
    pub execution_id: ExecutionId,
    /// The provider's native session id, once known.
    pub provider_session_id: Option<String>,
}

/// What [`HarnessRuntime::initialize`] reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeInit {
    /// The provider's native session id, if one was created.
    pub provider_session_id: Option<String>,
}

/// What [`HarnessRuntime::cancel`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelResult {
    /// Native work was asked to stop.
    Requested,
    /// Nothing was running.
    NothingToCancel,
}

/// An adapter: a static, allowlisted registry entry that builds runtimes. Its descriptor
/// comes from [`Describe`] (building it performs no I/O).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a `HarnessAdapter`",
    label = "a `HarnessAdapter` is expected here",
    note = "a `SimpleAdapter` becomes one wrapped in `Simple`: `Simple::new(adapter)` \
            (`harness::adapter::Simple`)",
    note = "an adapter implements `HarnessAdapter` (its runtimes) or `SimpleAdapter` (one \
            stream per run), and `Describe` through `#[derive(Adapter)]`"
)]
pub trait HarnessAdapter: Describe + Send + Sync + 'static {
    /// A bounded, side-effect-free health check. The caller bounds it with a deadline too.
    fn health(&self) -> BoxFuture<'_, HarnessHealth> {
        Box::pin(async { HarnessHealth::ready() })
    }

    /// The capability report for this configuration in this deployment.
    fn evaluate<'a>(
        &'a self,
        config: &'a AgentConfig,
        deployment: &'a DeploymentContext,
    ) -> BoxFuture<'a, Result<CapabilityReport, HarnessError>> {
        let _ = (config, deployment);
        Box::pin(async move { Ok(self.descriptor().capabilities().clone()) })
    }

    /// Builds a runtime for one execution.
    fn create_runtime(
        &self,
        context: RuntimeContext,
    ) -> BoxFuture<'_, Result<Box<dyn HarnessRuntime>, HarnessError>>;
}

/// What the store kept of a paused execution whose runtime was lost, for
/// [`HarnessRuntime::restore`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Restored {
    /// The execution's turn, rebuilt from its stored request.
    pub turn: TurnInput,
    /// The action the execution awaits (the next `resume` answers it).
    pub pending: ActionRequest,
    /// The execution's stored log, up to the pause (`action.requested` last among the
    /// actions).
    pub log: Vec<Arc<crate::event::Event>>,
    /// The answers to the actions resolved before this one, in log order, as the store
    /// recorded them (form values included, which the log does not carry).
    pub answers: Vec<crate::action::ActionResponse>,
}

impl Restored {
    /// What the store kept; for the service, and for adapters' tests.
    #[must_use]
    pub fn new(
        turn: TurnInput,
        pending: ActionRequest,
        log: Vec<Arc<crate::event::Event>>,
        answers: Vec<crate::action::ActionResponse>,
    ) -> Self {
        Self {
            turn,
            pending,
            log,
            answers,
        }
    }
}

/// One execution's provider runtime.
pub trait HarnessRuntime: Send + Sync + 'static {
    /// Who this runtime is.
    fn identity(&self) -> RuntimeIdentity;

    /// Prepares provider clients. Idempotent, or returns the same terminal error again.
    fn initialize(&self) -> BoxFuture<'_, Result<RuntimeInit, HarnessError>>;

    /// Runs one turn: one canonical run segment (see the [module docs](self)).
    fn stream(&self, turn: TurnInput) -> BoxStream<'_, EventResult>;

    /// Continues after an action with a validated decision: one canonical run segment.
    fn resume(&self, decision: ResumeDecision) -> BoxStream<'_, EventResult>;

    /// The action the runtime is paused on, if any (for restore after restart).
    fn pending_action(&self) -> BoxFuture<'_, Option<ActionRequest>>;

    /// Asks native work to stop. Idempotent; safe before, during and after a run.
    fn cancel(&self, reason: CancelReason) -> BoxFuture<'_, CancelResult>;

    /// Releases provider clients and processes, to be recreated on next use, without
    /// clearing durable conversation state.
    fn restart(&self) -> BoxFuture<'_, Result<(), HarnessError>>;

    /// Releases everything. Idempotent; the caller bounds it with a deadline.
    fn cleanup(&self) -> BoxFuture<'_, ()>;

    /// Takes over a pause another runtime made (`session.cross_replica_resume`, "restore
    /// pending interrupts"): the runtime that paused is gone with its replica, and this one,
    /// fresh (created and initialized, no segment streamed), gets what the store kept of the
    /// execution. [`resume`](Self::resume) with the answer to [`Restored::pending`] follows.
    ///
    /// The service calls it only for an adapter whose descriptor declares
    /// `session.cross_replica_resume` usable; the default refuses, and the execution then
    /// fails `OWNER_LOST` as one that cannot be continued.
    fn restore(&self, restored: Restored) -> BoxFuture<'_, Result<(), HarnessError>> {
        let _ = restored;
        Box::pin(async {
            Err(HarnessError::new(
                crate::error::ErrorCategory::Configuration,
                "this runtime cannot take over a pause another runtime made",
            )
            .with_code(crate::error::ErrorCode::CAPABILITY_UNSUPPORTED))
        })
    }

    /// Whether a fresh runtime could take over this runtime's current pause
    /// ([`restore`](Self::restore)) from durable state, should this one be let go now. The
    /// service's pool of paused runtimes asks it before it evicts one (see
    /// [`service::pool`](crate::service::pool)), only for an adapter whose descriptor declares
    /// `runtime.eviction_recovery` usable; a runtime that answers `false` stays alive until
    /// its answer (out of the pool). By default `true`: such an adapter restores any pause.
    /// A runtime whose pause lives in the conversation's thread state answers `false` for an
    /// execution without a conversation.
    fn restorable(&self) -> bool {
        true
    }

    /// Completes when the provider is gone for good (its process exited, its connection
    /// closed), so that an execution awaiting an action does not wait for an answer that
    /// nothing could continue from; by default, never. The driver waits on it only while the
    /// execution awaits an action (a running segment reports a lost provider by its stream),
    /// then fails the execution `unavailable`, `PROVIDER_LOST`, retryable. It carries no
    /// error: what crosses outward is the driver's own text, not the provider's.
    fn lost(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::pending())
    }
}

impl<A: HarnessAdapter + ?Sized> HarnessAdapter for Arc<A> {
    fn health(&self) -> BoxFuture<'_, HarnessHealth> {
        (**self).health()
    }
    fn evaluate<'a>(
        &'a self,
        config: &'a AgentConfig,
        deployment: &'a DeploymentContext,
    ) -> BoxFuture<'a, Result<CapabilityReport, HarnessError>> {
        (**self).evaluate(config, deployment)
    }
    fn create_runtime(
        &self,
        context: RuntimeContext,
    ) -> BoxFuture<'_, Result<Box<dyn HarnessRuntime>, HarnessError>> {
        (**self).create_runtime(context)
    }
}

/// Everything one run of a [`SimpleAdapter`] needs.
#[derive(Debug, Clone)]
pub struct RunContext {
    /// The runtime's construction context.
    pub context: Arc<RuntimeContext>,
    /// The turn.
    pub turn: TurnInput,
    /// The decision, when this run resumes after an action.
    pub resume: Option<ResumeDecision>,
    /// The provider session id from [`SimpleAdapter::initial_provider_session_id`].
    pub provider_session_id: Option<String>,
    /// Cancelled when the execution is cancelled; the stream should end soon after.
    pub cancellation: CancellationToken,
}

/// The smaller adapter protocol the contract allows: descriptor, evaluate, initial provider
/// session id, and one stream per run context. Wrap it in [`Simple`] to get a
/// [`HarnessAdapter`].
///
/// A resumed run calls [`SimpleAdapter::stream`] again with [`RunContext::resume`] set.
pub trait SimpleAdapter: Describe + Send + Sync + 'static {
    /// The capability report; by default the descriptor's.
    fn evaluate(&self, config: &AgentConfig) -> Result<CapabilityReport, HarnessError> {
        let _ = config;
        Ok(self.descriptor().capabilities().clone())
    }

    /// The provider session id a new runtime starts with.
    fn initial_provider_session_id(&self, context: &RuntimeContext) -> Option<String> {
        let _ = context;
        None
    }

    /// One run segment.
    fn stream(&self, run: RunContext) -> BoxStream<'static, EventResult>;
}

/// Bridges a [`SimpleAdapter`] to the full contract.
///
/// The bridged runtime is stateless between segments apart from the turn it remembers for
/// resumes and the last action it paused on; `cancel` cancels the run's token, `restart` is a
/// no-op (there is nothing to release), and `cleanup` cancels the token (idempotently).
#[derive(Debug, Clone)]
pub struct Simple<A>(pub Arc<A>);

impl<A> Simple<A> {
    /// Wraps an adapter.
    #[must_use]
    pub fn new(adapter: A) -> Self {
        Self(Arc::new(adapter))
    }
}

impl<A: SimpleAdapter> Describe for Simple<A> {
    fn descriptor(&self) -> &HarnessDescriptor {
        self.0.descriptor()
    }
}

impl<A: SimpleAdapter> HarnessAdapter for Simple<A> {
    fn evaluate<'a>(
        &'a self,
        config: &'a AgentConfig,
        _deployment: &'a DeploymentContext,
    ) -> BoxFuture<'a, Result<CapabilityReport, HarnessError>> {
        Box::pin(async move { self.0.evaluate(config) })
    }

    fn create_runtime(
        &self,
        context: RuntimeContext,
    ) -> BoxFuture<'_, Result<Box<dyn HarnessRuntime>, HarnessError>> {
        let session = self.0.initial_provider_session_id(&context);
        let runtime = SimpleRuntime {
            adapter: Arc::clone(&self.0),
            cancellation: context.cancellation.child_token(),
            context: Arc::new(context),
            provider_session_id: session,
            state: Arc::new(Mutex::new(BridgeState::default())),
        };
        Box::pin(async move { Ok(Box::new(runtime) as Box<dyn HarnessRuntime>) })
    }
}

#[derive(Default)]
struct BridgeState {
    turn: Option<TurnInput>,
    action: Option<ActionRequest>,
}

struct SimpleRuntime<A> {
    adapter: Arc<A>,
    context: Arc<RuntimeContext>,
    provider_session_id: Option<String>,
    cancellation: CancellationToken,
    state: Arc<Mutex<BridgeState>>,
}

impl<A: SimpleAdapter> SimpleRuntime<A> {
    fn run(&self, turn: TurnInput, resume: Option<ResumeDecision>) -> BoxStream<'_, EventResult> {
        let stream = self.adapter.stream(RunContext {
            context: Arc::clone(&self.context),
            turn,
            resume,
            provider_session_id: self.provider_session_id.clone(),
            cancellation: self.cancellation.clone(),
        });
        let state = Arc::clone(&self.state);
        Box::pin(stream.inspect(move |item| {
            if let Ok(AdapterEvent::Action(i)) = item {
                state.lock().unwrap_or_else(PoisonError::into_inner).action = Some(i.clone());
            }
        }))
    }
}

impl<A: SimpleAdapter> HarnessRuntime for SimpleRuntime<A> {
    fn identity(&self) -> RuntimeIdentity {
        RuntimeIdentity {
            adapter: self.context.adapter.clone(),
            execution_id: self.context.execution_id.clone(),
            provider_session_id: self.provider_session_id.clone(),
        }
    }

    fn initialize(&self) -> BoxFuture<'_, Result<RuntimeInit, HarnessError>> {
        let init = RuntimeInit {
            provider_session_id: self.provider_session_id.clone(),
        };
        Box::pin(async move { Ok(init) })
    }

    fn stream(&self, turn: TurnInput) -> BoxStream<'_, EventResult> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .turn = Some(turn.clone());
        self.run(turn, None)
    }

    fn resume(&self, decision: ResumeDecision) -> BoxStream<'_, EventResult> {
        // A decision made for another conversation's pause is never applied to this one.
        if let Err(err) = decision.check_binding(self.context.binding.as_ref()) {
            return Box::pin(futures_util::stream::once(async move { Err(err) }));
        }
        let turn = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.action = None;
            state.turn.clone()
        };
        match turn {
            Some(turn) => self.run(turn, Some(decision)),
            None => Box::pin(futures_util::stream::once(async {
                Err(HarnessError::new(
                    crate::error::ErrorCategory::Protocol,
                    "resume was called before any turn was streamed",
                ))
            })),
        }
    }

    fn pending_action(&self) -> BoxFuture<'_, Option<ActionRequest>> {
        let pending = self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .action
            .clone();
        Box::pin(async move { pending })
    }

    fn cancel(&self, _reason: CancelReason) -> BoxFuture<'_, CancelResult> {
        let result = if self.cancellation.is_cancelled() {
            CancelResult::NothingToCancel
        } else {
            self.cancellation.cancel();
            CancelResult::Requested
        };
        Box::pin(async move { result })
    }

    fn restart(&self) -> BoxFuture<'_, Result<(), HarnessError>> {
        Box::pin(async { Ok(()) })
    }

    fn cleanup(&self) -> BoxFuture<'_, ()> {
        self.cancellation.cancel();
        Box::pin(async {})
    }

    /// Remembers the turn and the pending action, as if this runtime had paused on it: the
    /// next `resume` streams the adapter with the decision. A [`SimpleAdapter`] keeps no
    /// state between segments, so this is all a takeover needs.
    fn restore(&self, restored: Restored) -> BoxFuture<'_, Result<(), HarnessError>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.turn = Some(restored.turn);
        state.action = Some(restored.pending);
        Box::pin(async { Ok(()) })
    }
}

impl<A> fmt::Debug for SimpleRuntime<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimpleRuntime")
            .field("adapter", &self.context.adapter)
            .field("execution_id", &self.context.execution_id)
            .finish_non_exhaustive()
    }
}
