//! [`HarnessStack`]: both default stacks in one call, any subset of them, one nameable type.
//!
//! ```
//! use harness_core::service::{ExecutionRequest, Outcome};
//! use harness_layers::stack::HarnessStack;
//! use harness_scripted::ScriptedAdapter;
//! use tower::ServiceExt;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let adapter = ScriptedAdapter::new(
//!     harness_scripted::Script::builder().text("token sk-live-0123456789abcdefghij").complete("ok").build(),
//! );
//! let service = HarnessStack::defaults_for(&adapter).unwrap().service(adapter);
//! let execution = service.oneshot(ExecutionRequest::new("go")).await.unwrap();
//! assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
//! let text = serde_json::to_string(&execution.log().snapshot(Default::default())).unwrap();
//! assert!(!text.contains("sk-live-0123456789abcdefghij")); // the redaction layer ran
//! # });
//! ```
//!
//! Two stacks, each in a meaningful order, outermost first. The **admission stack** wraps
//! the adapter service, a `Service<ExecutionRequest, Response = ExecutionHandle>`:
//!
//! | layer | why here |
//! |---|---|
//! | [`trace`](crate::trace) | the span covers everything below, refusals included |
//! | [`metrics`](crate::metrics) | counts every call and its outcome, refusals included |
//! | [`idempotency`](crate::idempotency) | a replay or conflict costs nothing below |
//! | [`preflight`](crate::preflight) | a refusal takes no permit and costs no provider work |
//! | [`capacity`](crate::capacity) | a permit per execution, from admission to its terminal event |
//!
//! The **runtime stack** is configured on the adapter service
//! ([`AdapterService::builder`](harness_core::service::AdapterService::builder)) and called
//! by its driver once per run segment, a `Service<Segment>` whose response is the segment's
//! stream of adapter items:
//!
//! | layer | why here |
//! |---|---|
//! | [`retry`](crate::retry) | only retryable failures before a turn's first item; outside the deadlines, so each attempt gets its own |
//! | [`timeout`](crate::timeout) | init and turn deadlines, per attempt |
//! | [`shutdown`](crate::shutdown) | ties every execution to the shutdown token |
//! | [`redaction`](crate::redaction) | innermost: everything the adapter yields, errors and panics included, is redacted before any other layer or the log sees it |
//!
//! Every layer is optional: start from [`HarnessStack::new`] (none) or
//! [`HarnessStack::defaults_for`] (all of them, the timeout with an initialization deadline
//! only; a turn deadline and shutdown need values only the application knows) and set or
//! remove layers.
//!
//! **Layers of your own** go at a named place in either stack:
//! [`admission_layer`](HarnessStack::admission_layer) with an [`AdmissionSlot`] (tower's own
//! `timeout`, `load_shed`, `concurrency_limit` and `buffer` included: the admission layers
//! take any inner error `Into<HarnessError>`, tower's `BoxError` classified as
//! [`harness_core::error`](harness_core::error#towers-own-middleware) says), and
//! [`runtime_layer`](HarnessStack::runtime_layer) with a [`RuntimeSlot`]. Each slot's docs
//! say what a layer there sees. The one rule, held by the types: no place below redaction,
//! so nothing of yours sees what redaction removes. For an order the slots do not offer,
//! build by hand: [`adapter_builder`](HarnessStack::adapter_builder) keeps the stack's
//! configuration, tools, limits, files and skills, and its getters
//! ([`service_config`](HarnessStack::service_config), [`tool_set`](HarnessStack::tool_set),
//! [`run_limits`](HarnessStack::run_limits), ...) say what it holds.
//!
//! The stacked service is boxed ([`StackService`], `Clone + Send + Sync`, so it can be axum
//! state): one allocation per *execution*, never per event, for a type applications can name
//! and store.
//!
//! [`AdapterService::builder`]: harness_core::service::AdapterService::builder

use std::sync::Arc;

use harness_core::adapter::HarnessAdapter;
use harness_core::error::HarnessError;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::Stream;
use harness_core::adapter::{AdapterEvent, EventResult};
use harness_core::service::{
    AdapterService, BoxSegmentStream, ExecutionHandle, ExecutionRequest, RuntimeStack, Segment,
    SegmentStream, ServiceConfig,
};
use pin_project_lite::pin_project;
use tower::util::BoxCloneSyncService;
use tower::{Layer, Service, ServiceBuilder};

use crate::capacity::CapacityLayer;
use crate::idempotency::IdempotencyLayer;
use crate::metrics::MetricsLayer;
use crate::preflight::PreflightLayer;
use crate::redaction::{RedactionLayer, Redactor};
use crate::retry::{Backoff, RetryLayer};
use crate::shutdown::ShutdownLayer;
use crate::timeout::TimeoutLayer;
use crate::trace::TraceLayer;

/// The service a [`HarnessStack`] (or an [`AdmissionStack`]) produces.
pub type StackService = BoxCloneSyncService<ExecutionRequest, ExecutionHandle, HarnessError>;

/// The default bound on concurrent executions of [`HarnessStack::defaults_for`].
pub const DEFAULT_CAPACITY: usize = 256;

/// The default initialization deadline of [`HarnessStack::defaults_for`]: a runtime that has
/// not started by then (an agent that never answers `initialize`) fails the run with
/// `timeout` instead of keeping it `starting`.
pub const DEFAULT_INIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// The layers of the admission stack, each optional, in the order of the
/// [module docs](self). A [`Layer`] over any service of executions.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct AdmissionStack {
    trace: Option<TraceLayer>,
    metrics: Option<MetricsLayer>,
    idempotency: Option<IdempotencyLayer>,
    preflight: Option<PreflightLayer>,
    capacity: Option<CapacityLayer>,
    extra: Vec<(AdmissionSlot, AdmissionExtra)>,
}

/// Where a layer of your own goes in the admission stack
/// ([`HarnessStack::admission_layer`]), outermost first. What each place means:
///
/// | slot | the layer sees |
/// |---|---|
/// | `Outermost` | every call, inside no span: above tracing |
/// | `BelowTrace` | every call, in the execution's span, before it is counted |
/// | `BelowMetrics` | every call, counted (its refusals are counted too), replays included |
/// | `BelowIdempotency` | first calls only: a replay or a conflict is answered above it |
/// | `BelowPreflight` | only requests the adapter can take, before a capacity permit is taken |
/// | `BelowCapacity` | only admitted requests, holding their permit while it works |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AdmissionSlot {
    /// Above tracing.
    Outermost,
    /// Between tracing and metrics.
    BelowTrace,
    /// Between metrics and idempotency.
    BelowMetrics,
    /// Between idempotency and preflight.
    BelowIdempotency,
    /// Between preflight and capacity.
    BelowPreflight,
    /// Between capacity and the adapter service: the innermost.
    BelowCapacity,
}

/// Where a layer of your own goes in the runtime stack ([`HarnessStack::runtime_layer`]),
/// outermost first. There is no place below redaction, and that is the rule: every item a
/// layer of yours sees has been redacted, so a layer that logs or mirrors what it sees cannot
/// leak what redaction removes.
///
/// | slot | the layer sees |
/// |---|---|
/// | `Outermost` | each segment once, whatever retries happen inside it |
/// | `BelowRetry` | each attempt (a retried turn calls it again), outside the deadlines |
/// | `BelowTimeout` | each attempt, inside its deadlines (its own time counts against them) |
/// | `BelowShutdown` | each attempt, just above redaction: the items closest to the adapter's |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RuntimeSlot {
    /// Above retry.
    Outermost,
    /// Between retry and timeout.
    BelowRetry,
    /// Between timeout and shutdown.
    BelowTimeout,
    /// Between shutdown and redaction.
    BelowShutdown,
}

/// A user's admission layer, erased.
#[derive(Clone)]
struct AdmissionExtra(Arc<dyn Fn(StackService) -> StackService + Send + Sync>);

/// A user's runtime layer, erased.
#[derive(Clone)]
struct RuntimeExtra(Arc<dyn Fn(RuntimeStack) -> RuntimeStack + Send + Sync>);

impl std::fmt::Debug for AdmissionExtra {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdmissionExtra")
    }
}

impl std::fmt::Debug for RuntimeExtra {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RuntimeExtra")
    }
}

/// The layers of the runtime stack, each optional, in the order of the
/// [module docs](self). A [`Layer`] over any service of segments: give it to
/// [`AdapterService::builder`](harness_core::service::AdapterService::builder).
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct RuntimeLayers {
    retry: Option<RetryLayer>,
    timeout: Option<TimeoutLayer>,
    shutdown: Option<ShutdownLayer>,
    redaction: Option<RedactionLayer>,
    extra: Vec<(RuntimeSlot, RuntimeExtra)>,
}

/// Both stacks, each layer optional, and the service's configuration; see the
/// [module docs](self).
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct HarnessStack {
    admission: AdmissionStack,
    runtime: RuntimeLayers,
    config: ServiceConfig,
    tools: Option<harness_core::tool::ToolSet>,
    limits: harness_core::limits::RunLimits,
    files: Files,
    middleware: harness_core::middleware::PortableMiddlewarePolicy,
    skills: Option<std::sync::Arc<harness_core::skill::SkillCatalog>>,
    models: Option<harness_core::context::ModelPolicy>,
    prompt: Option<harness_core::context::PromptTemplate>,
    users: harness_core::context::UserProjection,
}

/// Where the services find uploaded files, and the operator's limits on input files.
#[derive(Clone, Default)]
struct Files {
    workspace: Option<std::sync::Arc<dyn harness_core::file::FileWorkspace>>,
    limits: harness_core::file::FileLimits,
}

impl std::fmt::Debug for Files {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Files")
            .field("workspace", &self.workspace.is_some())
            .field("limits", &self.limits)
            .finish()
    }
}

macro_rules! setters {
    ($($field:ident: $ty:ty, $without:ident;)*) => {$(
        #[doc = concat!("Sets the `", stringify!($field), "` layer.")]
        pub fn $field(mut self, layer: $ty) -> Self {
            self.$field = Some(layer);
            self
        }

        #[doc = concat!("Removes the `", stringify!($field), "` layer.")]
        pub fn $without(mut self) -> Self {
            self.$field = None;
            self
        }
    )*};
}

macro_rules! delegate {
    ($part:ident: $($field:ident: $ty:ty, $without:ident;)*) => {$(
        #[doc = concat!("Sets the `", stringify!($field), "` layer.")]
        pub fn $field(mut self, layer: $ty) -> Self {
            self.$part = self.$part.$field(layer);
            self
        }

        #[doc = concat!("Removes the `", stringify!($field), "` layer.")]
        pub fn $without(mut self) -> Self {
            self.$part = self.$part.$without();
            self
        }
    )*};
}

impl AdmissionStack {
    /// No layer.
    pub fn new() -> Self {
        Self::default()
    }

    setters! {
        trace: TraceLayer, without_trace;
        metrics: MetricsLayer, without_metrics;
        idempotency: IdempotencyLayer, without_idempotency;
        preflight: PreflightLayer, without_preflight;
        capacity: CapacityLayer, without_capacity;
    }

    /// Adds `layer` at `slot` (see [`HarnessStack::admission_layer`]).
    pub fn layer_at<L>(mut self, slot: AdmissionSlot, layer: L) -> Self
    where
        L: Layer<StackService> + Send + Sync + 'static,
        L::Service:
            Service<ExecutionRequest, Response = ExecutionHandle> + Clone + Send + Sync + 'static,
        <L::Service as Service<ExecutionRequest>>::Error: Into<HarnessError>,
        <L::Service as Service<ExecutionRequest>>::Future: Send + 'static,
    {
        let erased = move |inner: StackService| -> StackService {
            BoxCloneSyncService::new(
                ServiceBuilder::new()
                    .map_err(Into::<HarnessError>::into)
                    .service(layer.layer(inner)),
            )
        };
        self.extra.push((slot, AdmissionExtra(Arc::new(erased))));
        self
    }

    /// `inner` with the user's layers at `slot` around it, in the order they were added
    /// (the first added outermost).
    fn extras_at(&self, slot: AdmissionSlot, inner: StackService) -> StackService {
        self.extra
            .iter()
            .rev()
            .filter(|(at, _)| *at == slot)
            .fold(inner, |inner, (_, extra)| (extra.0)(inner))
    }
}

impl RuntimeLayers {
    /// No layer.
    pub fn new() -> Self {
        Self::default()
    }

    setters! {
        retry: RetryLayer, without_retry;
        timeout: TimeoutLayer, without_timeout;
        shutdown: ShutdownLayer, without_shutdown;
        redaction: RedactionLayer, without_redaction;
    }

    /// Adds `layer` at `slot` (see [`HarnessStack::runtime_layer`]).
    pub fn layer_at<L>(mut self, slot: RuntimeSlot, layer: L) -> Self
    where
        L: Layer<RuntimeStack> + Send + Sync + 'static,
        L::Service: Service<Segment, Error = HarnessError> + Clone + Send + Sync + 'static,
        <L::Service as Service<Segment>>::Response: SegmentStream + 'static,
        <L::Service as Service<Segment>>::Future: Send + 'static,
    {
        let erased = move |inner: RuntimeStack| -> RuntimeStack {
            BoxCloneSyncService::new(
                ServiceBuilder::new()
                    .map_response(|stream| Box::pin(stream) as BoxSegmentStream)
                    .service(layer.layer(inner)),
            )
        };
        self.extra.push((slot, RuntimeExtra(Arc::new(erased))));
        self
    }

    /// The user's layers at `slot`, over `inner` if there are any: `inner` is then boxed.
    fn extras_at<S>(&self, slot: RuntimeSlot, inner: S) -> Optional<RuntimeStack, S>
    where
        S: Service<Segment, Error = HarnessError> + Clone + Send + Sync + 'static,
        S::Response: SegmentStream + 'static,
        S::Future: Send + 'static,
    {
        if !self.extra.iter().any(|(at, _)| *at == slot) {
            return Optional::Bare(inner);
        }
        let boxed: RuntimeStack = BoxCloneSyncService::new(
            ServiceBuilder::new()
                .map_response(|stream| Box::pin(stream) as BoxSegmentStream)
                .service(inner),
        );
        Optional::Layered(
            self.extra
                .iter()
                .rev()
                .filter(|(at, _)| *at == slot)
                .fold(boxed, |inner, (_, extra)| (extra.0)(inner)),
        )
    }
}

impl HarnessStack {
    /// No layer, the default [`ServiceConfig`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Every layer with its defaults for `adapter`: tracing, metrics labelled with the
    /// adapter id, in-memory idempotency, preflight against its descriptor, a capacity of
    /// [`DEFAULT_CAPACITY`], [`Backoff`] retries, an initialization deadline of
    /// [`DEFAULT_INIT_TIMEOUT`], and redaction with the built-in rules. A turn deadline and
    /// shutdown need the application's values: set them with [`timeout`](Self::timeout) and
    /// [`shutdown`](Self::shutdown).
    ///
    /// # Errors
    /// When the adapter's options schema does not compile (preflight) or the built-in
    /// redaction rules fail to build; neither happens for a registered adapter.
    pub fn defaults_for<A: HarnessAdapter>(adapter: &A) -> Result<Self, HarnessError> {
        let id = adapter.descriptor().id().clone();
        let redactor = Redactor::builder().build().map_err(|e| {
            HarnessError::new(
                harness_core::error::ErrorCategory::Internal,
                "the built-in redaction rules do not build",
            )
            .with_diagnostic(e.to_string())
        })?;
        Ok(Self::new()
            .trace(TraceLayer::new())
            .metrics(MetricsLayer::new().with_adapter(id.as_str()))
            .idempotency(IdempotencyLayer::default())
            .preflight(PreflightLayer::for_adapter(adapter)?)
            .capacity(CapacityLayer::new(DEFAULT_CAPACITY))
            .retry(RetryLayer::new(Backoff::new()).adapter(&id))
            .timeout(TimeoutLayer::new().init(DEFAULT_INIT_TIMEOUT))
            .redaction(RedactionLayer::new(Arc::new(redactor)).adapter(&id)))
    }

    delegate! { admission:
        trace: TraceLayer, without_trace;
        metrics: MetricsLayer, without_metrics;
        idempotency: IdempotencyLayer, without_idempotency;
        preflight: PreflightLayer, without_preflight;
        capacity: CapacityLayer, without_capacity;
    }

    delegate! { runtime:
        retry: RetryLayer, without_retry;
        timeout: TimeoutLayer, without_timeout;
        shutdown: ShutdownLayer, without_shutdown;
        redaction: RedactionLayer, without_redaction;
    }

    /// Adds a layer of your own to the admission stack at `slot`, a
    /// `Layer<`[`StackService`]`>`: tower's own middleware (`timeout`, `load_shed`,
    /// `concurrency_limit`, `buffer`: their `BoxError` is classified by
    /// [`HarnessError`'s `From`](harness_core::error#towers-own-middleware)) or yours. Layers
    /// at one slot nest in the order added, the first outermost. See [`AdmissionSlot`] for
    /// what each place means.
    ///
    /// ```
    /// use std::time::Duration;
    /// use harness_layers::stack::{AdmissionSlot, HarnessStack};
    /// use harness_scripted::ScriptedAdapter;
    /// use tower::load_shed::LoadShedLayer;
    ///
    /// let adapter = ScriptedAdapter::quickstart();
    /// let stack = HarnessStack::defaults_for(&adapter)
    ///     .unwrap()
    ///     // Only admitted, first-time requests are shed when the service is not ready.
    ///     .admission_layer(AdmissionSlot::BelowPreflight, LoadShedLayer::new())
    ///     .admission_layer(AdmissionSlot::Outermost, tower::timeout::TimeoutLayer::new(Duration::from_secs(5)));
    /// let _service = stack.service(adapter);
    /// ```
    pub fn admission_layer<L>(mut self, slot: AdmissionSlot, layer: L) -> Self
    where
        L: Layer<StackService> + Send + Sync + 'static,
        L::Service:
            Service<ExecutionRequest, Response = ExecutionHandle> + Clone + Send + Sync + 'static,
        <L::Service as Service<ExecutionRequest>>::Error: Into<HarnessError>,
        <L::Service as Service<ExecutionRequest>>::Future: Send + 'static,
    {
        self.admission = self.admission.layer_at(slot, layer);
        self
    }

    /// Adds a layer of your own to the runtime stack at `slot`, a
    /// `Layer<`[`RuntimeStack`]`>` whose service answers a [`SegmentStream`] (see
    /// [`inspect`](crate::inspect) for writing one, and [`InspectLayer`](crate::inspect::InspectLayer)
    /// for one that only looks). Never below redaction ([`RuntimeSlot`]). Layers at one slot
    /// nest in the order added, the first outermost. A slot with a layer costs one boxed
    /// stream per segment and a dynamic call per item; a slot without costs nothing.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    /// use harness_core::service::{ExecutionRequest, Outcome, Segment};
    /// use harness_layers::inspect::{InspectLayer, Seen};
    /// use harness_layers::stack::{HarnessStack, RuntimeSlot};
    /// use harness_scripted::{Script, ScriptedAdapter};
    /// use tower::ServiceExt;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let adapter = ScriptedAdapter::new(Script::builder().text("hi").complete("ok").build());
    /// let items = Arc::new(AtomicU64::new(0));
    /// let counted = Arc::clone(&items);
    /// let service = HarnessStack::defaults_for(&adapter)
    ///     .unwrap()
    ///     .runtime_layer(RuntimeSlot::BelowShutdown, InspectLayer::new(move |_: &Segment| {
    ///         let counted = Arc::clone(&counted);
    ///         move |seen: Seen<'_>| if let Seen::Item(_) = seen { counted.fetch_add(1, Relaxed); }
    ///     }))
    ///     .service(adapter);
    /// let execution = service.oneshot(ExecutionRequest::new("go")).await.unwrap();
    /// assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
    /// assert_eq!(items.load(Relaxed), 2);
    /// # });
    /// ```
    pub fn runtime_layer<L>(mut self, slot: RuntimeSlot, layer: L) -> Self
    where
        L: Layer<RuntimeStack> + Send + Sync + 'static,
        L::Service: Service<Segment, Error = HarnessError> + Clone + Send + Sync + 'static,
        <L::Service as Service<Segment>>::Response: SegmentStream + 'static,
        <L::Service as Service<Segment>>::Future: Send + 'static,
    {
        self.runtime = self.runtime.layer_at(slot, layer);
        self
    }

    /// The adapter service's timing knobs.
    pub fn service_config(&self) -> &ServiceConfig {
        &self.config
    }

    /// The tools offered to executions, if any were set.
    pub fn tool_set(&self) -> Option<&harness_core::tool::ToolSet> {
        self.tools.as_ref()
    }

    /// The operator's run limits.
    pub fn run_limits(&self) -> &harness_core::limits::RunLimits {
        &self.limits
    }

    /// The operator's middleware policy.
    pub fn middleware_policy(&self) -> &harness_core::middleware::PortableMiddlewarePolicy {
        &self.middleware
    }

    /// Where uploaded files are found, if set.
    pub fn file_workspace(&self) -> Option<&std::sync::Arc<dyn harness_core::file::FileWorkspace>> {
        self.files.workspace.as_ref()
    }

    /// The operator's limits on input files.
    pub fn input_file_limits(&self) -> &harness_core::file::FileLimits {
        &self.files.limits
    }

    /// The skills offered to executions, if set.
    pub fn skill_catalog(&self) -> Option<&std::sync::Arc<harness_core::skill::SkillCatalog>> {
        self.skills.as_ref()
    }

    /// The models a caller may choose, and the default (see
    /// [`AdapterServiceBuilder::models`](harness_core::service::AdapterServiceBuilder::models)).
    pub fn models(mut self, policy: harness_core::context::ModelPolicy) -> Self {
        self.models = Some(policy);
        self
    }

    /// The instance prompt (see
    /// [`AdapterServiceBuilder::prompt`](harness_core::service::AdapterServiceBuilder::prompt)).
    pub fn prompt(mut self, template: harness_core::context::PromptTemplate) -> Self {
        self.prompt = Some(template);
        self
    }

    /// How a request's principal is projected for the adapter (see
    /// [`AdapterServiceBuilder::users`](harness_core::service::AdapterServiceBuilder::users)).
    pub fn users(mut self, projection: harness_core::context::UserProjection) -> Self {
        self.users = projection;
        self
    }

    /// The model policy, if set.
    pub fn model_policy(&self) -> Option<&harness_core::context::ModelPolicy> {
        self.models.as_ref()
    }

    /// Sets the adapter service's timing knobs.
    pub fn config(mut self, config: ServiceConfig) -> Self {
        self.config = config;
        self
    }

    /// Offers `tools` to the executions of the services this stack builds (see
    /// [`AdapterServiceBuilder::tools`](harness_core::service::AdapterServiceBuilder::tools)).
    pub fn tools(mut self, tools: harness_core::tool::ToolSet) -> Self {
        self.tools = Some(tools);
        self
    }

    /// Sets the operator's run limits of the services this stack builds (see
    /// [`AdapterServiceBuilder::limits`](harness_core::service::AdapterServiceBuilder::limits)).
    pub fn limits(mut self, limits: harness_core::limits::RunLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets the operator's middleware policy of the services this stack builds (see
    /// [`AdapterServiceBuilder::middleware`](harness_core::service::AdapterServiceBuilder::middleware)).
    pub fn middleware(
        mut self,
        policy: harness_core::middleware::PortableMiddlewarePolicy,
    ) -> Self {
        self.middleware = policy;
        self
    }

    /// Where the services this stack builds find uploaded files (see
    /// [`AdapterServiceBuilder::files`](harness_core::service::AdapterServiceBuilder::files)).
    pub fn files(
        mut self,
        workspace: std::sync::Arc<dyn harness_core::file::FileWorkspace>,
    ) -> Self {
        self.files.workspace = Some(workspace);
        self
    }

    /// Sets the operator's limits on input files of the services this stack builds (see
    /// [`AdapterServiceBuilder::file_limits`](harness_core::service::AdapterServiceBuilder::file_limits)).
    pub fn file_limits(mut self, limits: harness_core::file::FileLimits) -> Self {
        self.files.limits = limits;
        self
    }

    /// The skills the services this stack builds offer (see
    /// [`AdapterServiceBuilder::skills`](harness_core::service::AdapterServiceBuilder::skills)).
    pub fn skills(mut self, catalog: std::sync::Arc<harness_core::skill::SkillCatalog>) -> Self {
        self.skills = Some(catalog);
        self
    }

    /// The adapter service's builder with this stack's configuration, runtime layers,
    /// tools, run limits, middleware, files, skills, models, prompt and user projection: for a service built by hand (more
    /// layers with [`layer`](harness_core::service::AdapterServiceBuilder::layer), a store)
    /// that keeps everything this stack holds. Wrap what it builds in
    /// [`admission`](Self::admission).
    pub fn adapter_builder<A: HarnessAdapter>(
        &self,
        adapter: A,
    ) -> harness_core::service::AdapterServiceBuilder<
        A,
        tower::layer::util::Stack<RuntimeLayers, tower::layer::util::Identity>,
    > {
        let mut builder = AdapterService::builder(adapter)
            .config(self.config)
            .limits(self.limits)
            .middleware(self.middleware.clone())
            .file_limits(self.files.limits.clone())
            .users(self.users.clone())
            .layer(self.runtime.clone());
        if let Some(models) = &self.models {
            builder = builder.models(models.clone());
        }
        if let Some(prompt) = &self.prompt {
            builder = builder.prompt(prompt.clone());
        }
        if let Some(workspace) = &self.files.workspace {
            builder = builder.files(std::sync::Arc::clone(workspace));
        }
        if let Some(catalog) = &self.skills {
            builder = builder.skills(std::sync::Arc::clone(catalog));
        }
        match &self.tools {
            Some(tools) => builder.tools(tools.clone()),
            None => builder,
        }
    }

    /// The admission layers.
    pub fn admission(&self) -> &AdmissionStack {
        &self.admission
    }

    /// The runtime layers.
    pub fn runtime(&self) -> &RuntimeLayers {
        &self.runtime
    }

    /// The adapter service over `adapter`, with the runtime layers, inside the admission
    /// layers.
    pub fn service<A: HarnessAdapter>(&self, adapter: A) -> StackService {
        self.admission.layer(self.adapter_builder(adapter).build())
    }

    /// [`service`](Self::service), durable: its executions and its conversations' thread
    /// state are kept in `store` as replica `replica` (see
    /// [`AdapterServiceBuilder::durable`](harness_core::service::AdapterServiceBuilder::durable)).
    pub fn durable_service<A, S>(
        &self,
        adapter: A,
        store: std::sync::Arc<S>,
        replica: harness_core::store::ReplicaId,
    ) -> StackService
    where
        A: HarnessAdapter,
        S: harness_core::store::ExecutionStore + harness_core::session::ThreadStateStore + 'static,
    {
        self.durable_parts(adapter, store, replica).0
    }

    /// [`durable_service`](Self::durable_service), and the adapter service it stacks: what
    /// reaches the service's executions by id (records, answers, cancels, stored events),
    /// as a server does, while new executions go through the admission layers.
    pub fn durable_parts<A, S>(
        &self,
        adapter: A,
        store: std::sync::Arc<S>,
        replica: harness_core::store::ReplicaId,
    ) -> (StackService, AdapterService<A>)
    where
        A: HarnessAdapter,
        S: harness_core::store::ExecutionStore + harness_core::session::ThreadStateStore + 'static,
    {
        let service = self
            .adapter_builder(adapter)
            .durable(store, replica)
            .build();
        (self.admission.layer(service.clone()), service)
    }
}

/// The admission stack takes a service whose error is anything `Into<HarnessError>` (tower's
/// `BoxError` included, classified as
/// [`harness_core::error`](harness_core::error#towers-own-middleware) says): it is converted
/// once, below the innermost layer.
impl<S> Layer<S> for AdmissionStack
where
    S: Service<ExecutionRequest, Response = ExecutionHandle> + Clone + Send + Sync + 'static,
    S::Error: Into<HarnessError>,
    S::Future: Send + 'static,
{
    type Service = StackService;

    fn layer(&self, inner: S) -> Self::Service {
        if self.extra.is_empty() {
            let service = ServiceBuilder::new()
                .option_layer(self.trace)
                .option_layer(self.metrics.clone())
                .option_layer(self.idempotency.clone())
                .option_layer(self.preflight.clone())
                .option_layer(self.capacity)
                // Each layer converts on its own; this is for the layers that are absent (an
                // optional layer's two arms must fail alike), and costs nothing for a
                // `HarnessError`.
                .map_err(Into::<HarnessError>::into)
                .service(inner);
            return BoxCloneSyncService::new(service);
        }
        // With layers of the user's: boxed at each slot, one allocation per execution.
        fn boxed<T>(service: T) -> StackService
        where
            T: Service<ExecutionRequest, Response = ExecutionHandle>
                + Clone
                + Send
                + Sync
                + 'static,
            T::Error: Into<HarnessError>,
            T::Future: Send + 'static,
        {
            BoxCloneSyncService::new(
                ServiceBuilder::new()
                    .map_err(Into::<HarnessError>::into)
                    .service(service),
            )
        }
        let service = self.extras_at(AdmissionSlot::BelowCapacity, boxed(inner));
        let service = self.extras_at(
            AdmissionSlot::BelowPreflight,
            boxed(
                ServiceBuilder::new()
                    .option_layer(self.capacity)
                    .service(service),
            ),
        );
        let service = self.extras_at(
            AdmissionSlot::BelowIdempotency,
            boxed(
                ServiceBuilder::new()
                    .option_layer(self.preflight.clone())
                    .service(service),
            ),
        );
        let service = self.extras_at(
            AdmissionSlot::BelowMetrics,
            boxed(
                ServiceBuilder::new()
                    .option_layer(self.idempotency.clone())
                    .service(service),
            ),
        );
        let service = self.extras_at(
            AdmissionSlot::BelowTrace,
            boxed(
                ServiceBuilder::new()
                    .option_layer(self.metrics.clone())
                    .service(service),
            ),
        );
        self.extras_at(
            AdmissionSlot::Outermost,
            boxed(
                ServiceBuilder::new()
                    .option_layer(self.trace)
                    .service(service),
            ),
        )
    }
}

/// `layer` over `inner` if it is there, else `inner`.
fn optional<L: Layer<S>, S>(layer: Option<&L>, inner: S) -> Optional<L::Service, S> {
    match layer {
        Some(layer) => Optional::Layered(layer.layer(inner)),
        None => Optional::Bare(inner),
    }
}

/// The service [`RuntimeLayers`] makes of `S`: every layer optional, none boxed.
type Opt<L, S> = Optional<<L as Layer<S>>::Service, S>;

/// A slot of [`RuntimeLayers`]: the user's layers there over what is below, or what is below.
type Slot<S> = Optional<RuntimeStack, S>;

impl<S> Layer<S> for RuntimeLayers
where
    S: Service<Segment, Error = HarnessError> + Clone + Send + Sync + 'static,
    S::Response: SegmentStream + 'static,
    S::Future: Send + 'static,
{
    type Service = Slot<
        Opt<
            RetryLayer,
            Slot<Opt<TimeoutLayer, Slot<Opt<ShutdownLayer, Slot<Opt<RedactionLayer, S>>>>>>,
        >,
    >;

    fn layer(&self, inner: S) -> Self::Service {
        let service = optional(self.redaction.as_ref(), inner);
        let service = self.extras_at(RuntimeSlot::BelowShutdown, service);
        let service = optional(self.shutdown.as_ref(), service);
        let service = self.extras_at(RuntimeSlot::BelowTimeout, service);
        let service = optional(self.timeout.as_ref(), service);
        let service = self.extras_at(RuntimeSlot::BelowRetry, service);
        let service = optional(self.retry.as_ref(), service);
        self.extras_at(RuntimeSlot::Outermost, service)
    }
}

/// A layer of the runtime stack that may be absent: its service, or the inner one, under one
/// type, so an optional layer costs a `match` per item instead of a boxed stream.
#[derive(Debug, Clone)]
pub enum Optional<A, B> {
    /// The layer is there.
    Layered(A),
    /// It is not: the inner service, as is.
    Bare(B),
}

impl<A, B> Service<Segment> for Optional<A, B>
where
    A: Service<Segment, Error = HarnessError>,
    B: Service<Segment, Error = HarnessError>,
{
    type Response = EitherStream<A::Response, B::Response>;
    type Error = HarnessError;
    type Future = EitherFuture<A::Future, B::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), HarnessError>> {
        match self {
            Self::Layered(a) => a.poll_ready(cx),
            Self::Bare(b) => b.poll_ready(cx),
        }
    }

    fn call(&mut self, segment: Segment) -> Self::Future {
        match self {
            Self::Layered(a) => EitherFuture::Left {
                future: a.call(segment),
            },
            Self::Bare(b) => EitherFuture::Right {
                future: b.call(segment),
            },
        }
    }
}

pin_project! {
    /// The future of [`Optional`]: the layer's, or the inner service's (`future`).
    #[project = EitherFutureProj]
    #[derive(Debug)]
    #[allow(missing_docs)]
    pub enum EitherFuture<A, B> {
        /// The layer's.
        Left { #[pin] future: A },
        /// The inner service's.
        Right { #[pin] future: B },
    }
}

impl<A, B, SA, SB> Future for EitherFuture<A, B>
where
    A: Future<Output = Result<SA, HarnessError>>,
    B: Future<Output = Result<SB, HarnessError>>,
{
    type Output = Result<EitherStream<SA, SB>, HarnessError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            EitherFutureProj::Left { future } => future
                .poll(cx)
                .map(|r| r.map(|stream| EitherStream::Left { stream })),
            EitherFutureProj::Right { future } => future
                .poll(cx)
                .map(|r| r.map(|stream| EitherStream::Right { stream })),
        }
    }
}

pin_project! {
    /// The stream of [`Optional`]: the layer's, or the inner service's (`stream`).
    #[project = EitherStreamProj]
    #[derive(Debug)]
    #[allow(missing_docs)]
    pub enum EitherStream<A, B> {
        /// The layer's.
        Left { #[pin] stream: A },
        /// The inner service's.
        Right { #[pin] stream: B },
    }
}

impl<A, B> Stream for EitherStream<A, B>
where
    A: Stream<Item = EventResult>,
    B: Stream<Item = EventResult>,
{
    type Item = EventResult;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<EventResult>> {
        match self.project() {
            EitherStreamProj::Left { stream } => stream.poll_next(cx),
            EitherStreamProj::Right { stream } => stream.poll_next(cx),
        }
    }
}

impl<A: SegmentStream, B: SegmentStream> SegmentStream for EitherStream<A, B> {
    fn drain(self: Pin<&mut Self>, out: &mut Vec<AdapterEvent>) {
        match self.project() {
            EitherStreamProj::Left { stream } => stream.drain(out),
            EitherStreamProj::Right { stream } => stream.drain(out),
        }
    }
}
