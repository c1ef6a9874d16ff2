//! Metrics of executions: started, finished by outcome, durations, in-flight, events by kind,
//! errors by category.
//!
//! ```
//! use harness_core::id::Cursor;
//! use harness_core::service::{AdapterService, ExecutionRequest};
//! use harness_layers::metrics::{MetricsLayer, names};
//! use harness_scripted::{Script, ScriptedAdapter};
//! use metrics_util::debugging::{DebugValue, DebuggingRecorder};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # let recorder = DebuggingRecorder::new();
//! # let snapshotter = recorder.snapshotter();
//! # metrics::with_local_recorder(&recorder, || {
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let service = ServiceBuilder::new()
//!     .layer(MetricsLayer::new())
//!     .service(AdapterService::new(ScriptedAdapter::new(Script::quickstart())));
//! let script = Script::builder().text("hello").complete("done").build();
//! let request = ExecutionRequest::new("hi")
//!     .with_options(harness_scripted::ScriptedOptions::with_script(script).to_value());
//! let execution = service.oneshot(request).await.unwrap();
//! execution.outcome().await;
//! # });
//! # });
//! # let snapshot = snapshotter.snapshot().into_vec();
//! # let finished = snapshot.iter().find(|(key, ..)| key.key().name() == names::EXECUTIONS_FINISHED).unwrap();
//! # assert_eq!(finished.3, DebugValue::Counter(1));
//! // The recorder now holds harness_executions_started_total{adapter="scripted"} = 1,
//! // harness_executions_finished_total{adapter="scripted",outcome="succeeded"} = 1,
//! // harness_events_total{adapter="scripted",kind="message.delta"} = 1, ...
//! ```
//!
//! The library emits through the `metrics` macros only and never installs a recorder: an
//! application installs one (an exporter) and calls [`names::describe`]. Every name, unit and
//! label is in [`names`], with the recommended histogram buckets.
//!
//! # What the layer records
//!
//! - When called: the in-flight gauge goes up, held by a drop guard inside the response
//!   future. If the inner call fails, or the future is dropped before it resolves, the guard
//!   takes it down again; a failed call also counts in `harness_errors_total` with
//!   `stage="call"`.
//! - When the inner service returns a new execution: `harness_executions_started_total`, and
//!   a [log observer](harness_core::log::LogReader::observe) follows its log from the start
//!   (on the driver's own task: no task of its own, and no handle clone, so the driver still
//!   notices when every caller has let go). It counts events by kind, records the time to the
//!   first non-lifecycle event and each cancellation by its typed source, and on the terminal
//!   event records the outcome, the duration (from the call) and, for a failure, the error
//!   category; then the observer, and the in-flight guard it holds, are dropped.
//!
//! # Neighbours
//!
//! - **Adapter label.** Before the inner service answers, the layer does not know the adapter:
//!   the in-flight gauge of a pending call and the errors of a refused call carry the label
//!   given with [`MetricsLayer::with_adapter`] (default [`names::UNKNOWN_ADAPTER`]). Once an
//!   execution exists, its own adapter id is the label (the in-flight count moves over).
//! - **Idempotency below.** A replayed execution is not a new one: the idempotency layer
//!   returns its handle marked ([`ExecutionHandle::is_replay`]), so this layer neither counts
//!   it as started nor follows its log a second time. An idempotency layer *above* this one
//!   needs nothing: replays never reach it.
//! - **Tracing above.** Any order works; put [`TraceLayer`](crate::trace::TraceLayer) outside
//!   so its span covers this layer too.
//! - **Retries inside the driver** are one execution: they count in `harness_retries_total`
//!   (recorded by the retry policy), not as more starts.

mod future;
mod layer;
pub mod names;

use std::task::{Context, Poll};
use std::time::Instant;

use ::metrics::SharedString;
use harness_core::error::HarnessError;
use harness_core::service::{ExecutionHandle, ExecutionRequest};
use tower::Service;

pub use self::future::ResponseFuture;
pub use self::layer::MetricsLayer;

/// Records metrics of the executions started through the inner service. See the
/// [module docs](self).
#[derive(Debug, Clone)]
pub struct Metrics<S> {
    inner: S,
    adapter: SharedString,
}

impl<S> Metrics<S> {
    /// Wraps `inner`; the adapter label before an execution exists is
    /// [`names::UNKNOWN_ADAPTER`].
    #[must_use]
    pub const fn new(inner: S) -> Self {
        Self {
            inner,
            adapter: SharedString::const_str(names::UNKNOWN_ADAPTER),
        }
    }

    pub(crate) const fn with_label(inner: S, adapter: SharedString) -> Self {
        Self { inner, adapter }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S> Service<ExecutionRequest> for Metrics<S>
where
    S: Service<ExecutionRequest, Response = ExecutionHandle>,
    S::Error: Into<HarnessError>,
{
    type Response = ExecutionHandle;
    type Error = HarnessError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: ExecutionRequest) -> Self::Future {
        let started = Instant::now();
        let call = future::Call::new(self.adapter.clone(), started);
        ResponseFuture::new(self.inner.call(request), call)
    }
}
