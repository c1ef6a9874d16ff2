//! [`HarnessStack`]: the default layer order in one call, any subset of it, one nameable type.
//!
//! ```
//! use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
//! use harness_layers::stack::HarnessStack;
//! use harness_scripted::ScriptedAdapter;
//! use tower::{Layer, ServiceExt};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let adapter = ScriptedAdapter::new(
//!     harness_scripted::Script::builder().text("token sk-live-0123456789abcdefghij").complete("ok").build(),
//! );
//! let stack = HarnessStack::defaults_for(&adapter).unwrap();
//! let service = stack.layer(AdapterService::new(adapter));
//! let execution = service.oneshot(ExecutionRequest::new("go")).await.unwrap();
//! assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
//! let text = serde_json::to_string(&execution.log().snapshot(Default::default())).unwrap();
//! assert!(!text.contains("sk-live-0123456789abcdefghij")); // the redaction layer ran
//! # });
//! ```
//!
//! The default order, outermost first (DESIGN.md):
//!
//! | layer | why here |
//! |---|---|
//! | [`trace`](crate::trace) | the span covers everything below, refusals included |
//! | [`metrics`](crate::metrics) | counts every call and its outcome, refusals included |
//! | [`idempotency`](crate::idempotency) | a replay or conflict costs nothing below |
//! | [`preflight`](crate::preflight) | a refusal takes no permit and is never retried |
//! | [`capacity`](crate::capacity) | a permit per execution, kept across its retries |
//! | [`retry`](crate::retry) | only retryable failures before any output |
//! | [`timeout`](crate::timeout) | the deadline covers every attempt |
//! | [`redaction`](crate::redaction) | what the adapter yields is redacted before it is stored |
//! | [`cancellation`](crate::cancellation) | shutdown reaches every execution |
//!
//! Every layer is optional: start from [`HarnessStack::new`] (none) or
//! [`HarnessStack::defaults_for`] (all but timeout and shutdown, which need values only the
//! application knows) and set or remove layers. For another *order*, compose the layers with
//! `tower::ServiceBuilder` directly: each documents what it assumes of its neighbours.
//!
//! The stacked service is boxed ([`BoxCloneService`]): one allocation per *execution*, never
//! per event, for a type applications can name and store.

use std::sync::Arc;

use harness_core::adapter::HarnessAdapter;
use harness_core::error::HarnessError;
use harness_core::service::{ExecutionHandle, ExecutionRequest};
use tower::util::BoxCloneService;
use tower::{Layer, Service, ServiceBuilder};

use crate::cancellation::CancellationLayer;
use crate::capacity::CapacityLayer;
use crate::idempotency::IdempotencyLayer;
use crate::metrics::MetricsLayer;
use crate::preflight::PreflightLayer;
use crate::redaction::{RedactionLayer, Redactor};
use crate::retry::{Backoff, RetryLayer};
use crate::timeout::TimeoutLayer;
use crate::trace::TraceLayer;

/// The service a [`HarnessStack`] produces.
pub type StackService = BoxCloneService<ExecutionRequest, ExecutionHandle, HarnessError>;

/// The default stack of layers, each optional; see the [module docs](self).
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct HarnessStack {
    trace: Option<TraceLayer>,
    metrics: Option<MetricsLayer>,
    idempotency: Option<IdempotencyLayer>,
    preflight: Option<PreflightLayer>,
    capacity: Option<CapacityLayer>,
    retry: Option<RetryLayer>,
    timeout: Option<TimeoutLayer>,
    redaction: Option<RedactionLayer>,
    cancellation: Option<CancellationLayer>,
}

/// The default bound on concurrent executions of [`HarnessStack::defaults_for`].
pub const DEFAULT_CAPACITY: usize = 256;

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

impl HarnessStack {
    /// A stack with no layer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every layer with its defaults for `adapter`: tracing, metrics labelled with the
    /// adapter id, in-memory idempotency, preflight against its descriptor, a capacity of
    /// [`DEFAULT_CAPACITY`], [`Backoff`] retries, and redaction with the built-in rules.
    /// Timeouts and shutdown cancellation need the application's values: add them with
    /// [`timeout`](Self::timeout) and [`cancellation`](Self::cancellation).
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

    setters! {
        trace: TraceLayer, without_trace;
        metrics: MetricsLayer, without_metrics;
        idempotency: IdempotencyLayer, without_idempotency;
        preflight: PreflightLayer, without_preflight;
        capacity: CapacityLayer, without_capacity;
        retry: RetryLayer, without_retry;
        timeout: TimeoutLayer, without_timeout;
        redaction: RedactionLayer, without_redaction;
        cancellation: CancellationLayer, without_cancellation;
    }
}

impl<S> Layer<S> for HarnessStack
where
    S: Service<ExecutionRequest, Response = ExecutionHandle, Error = HarnessError>
        + Clone
        + Send
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
            .option_layer(self.retry.clone())
            .option_layer(self.timeout)
            .option_layer(self.redaction.clone())
            .option_layer(self.cancellation.clone())
            .service(inner);
        BoxCloneService::new(service)
    }
}
