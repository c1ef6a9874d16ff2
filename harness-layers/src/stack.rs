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
//! [`HarnessStack::defaults_for`] (all but timeout and shutdown, which need values only the
//! application knows) and set or remove layers. For another *order*, compose the layers with
//! `tower::ServiceBuilder` and [`AdapterService::builder`] directly: each documents what it
//! assumes of its neighbours.
//!
//! The stacked service is boxed ([`StackService`], `Clone + Send + Sync`, so it can be axum
//! state): one allocation per *execution*, never per event, for a type applications can name
//! and store.
//!
//! [`AdapterService::builder`]: harness_core::service::AdapterService::builder

use std::sync::Arc;

use harness_core::adapter::HarnessAdapter;
use harness_core::error::HarnessError;
use harness_core::service::{
    AdapterService, BoxSegmentStream, ExecutionHandle, ExecutionRequest, RuntimeStack, Segment,
    SegmentStream, ServiceConfig,
};
use tower::util::BoxCloneSyncService;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

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
}

/// Both stacks, each layer optional, and the service's configuration; see the
/// [module docs](self).
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct HarnessStack {
    admission: AdmissionStack,
    runtime: RuntimeLayers,
    config: ServiceConfig,
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
}

impl HarnessStack {
    /// No layer, the default [`ServiceConfig`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Every layer with its defaults for `adapter`: tracing, metrics labelled with the
    /// adapter id, in-memory idempotency, preflight against its descriptor, a capacity of
    /// [`DEFAULT_CAPACITY`], [`Backoff`] retries, and redaction with the built-in rules.
    /// Timeouts and shutdown need the application's values: add them with
    /// [`timeout`](Self::timeout) and [`shutdown`](Self::shutdown).
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

    /// Sets the adapter service's timing knobs.
    pub fn config(mut self, config: ServiceConfig) -> Self {
        self.config = config;
        self
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
        let service = AdapterService::builder(adapter)
            .config(self.config)
            .layer(self.runtime.clone())
            .build();
        self.admission.layer(service)
    }
}

impl<S> Layer<S> for AdmissionStack
where
    S: Service<ExecutionRequest, Response = ExecutionHandle, Error = HarnessError>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    type Service = StackService;

    fn layer(&self, inner: S) -> Self::Service {
        let service = ServiceBuilder::new()
            .option_layer(self.trace)
            .option_layer(self.metrics.clone())
            .option_layer(self.idempotency.clone())
            .option_layer(self.preflight.clone())
            .option_layer(self.capacity)
            .service(inner);
        BoxCloneSyncService::new(service)
    }
}

/// Boxes one layer of the runtime stack: the layers change the stream type, so optional
/// ones cannot share a type without it (one allocation per segment call, one dynamic call
/// per item and layer).
fn boxed<S>(service: S) -> RuntimeStack
where
    S: Service<Segment, Error = HarnessError> + Clone + Send + Sync + 'static,
    S::Response: SegmentStream + 'static,
    S::Future: Send + 'static,
{
    RuntimeStack::new(service.map_response(|stream| Box::pin(stream) as BoxSegmentStream))
}

impl<S> Layer<S> for RuntimeLayers
where
    S: Service<Segment, Error = HarnessError> + Clone + Send + Sync + 'static,
    S::Response: SegmentStream + 'static,
    S::Future: Send + 'static,
{
    type Service = RuntimeStack;

    fn layer(&self, inner: S) -> Self::Service {
        let mut service = boxed(inner);
        if let Some(layer) = &self.redaction {
            service = boxed(layer.layer(service));
        }
        if let Some(layer) = &self.shutdown {
            service = boxed(layer.layer(service));
        }
        if let Some(layer) = &self.timeout {
            service = boxed(layer.layer(service));
        }
        if let Some(layer) = &self.retry {
            service = boxed(layer.layer(service));
        }
        service
    }
}
