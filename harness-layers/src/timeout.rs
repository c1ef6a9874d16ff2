//! Timeouts: initialization and turn deadlines that end an execution with `timeout`.
//!
//! ```
//! use std::time::Duration;
//! use harness_core::error::ErrorCategory;
//! use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
//! use harness_layers::timeout::TimeoutLayer;
//! use harness_scripted::{Script, ScriptedAdapter};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let stuck = Script::builder().text("working...").hang().build();
//! let service = ServiceBuilder::new()
//!     .layer(TimeoutLayer::new().turn(Duration::from_millis(20)))
//!     .service(AdapterService::new(ScriptedAdapter::new(stuck)));
//! let execution = service.oneshot(ExecutionRequest::new("go")).await.unwrap();
//! let Outcome::Failed(err) = execution.outcome().await else { panic!() };
//! assert_eq!(err.category(), ErrorCategory::Timeout);
//! # });
//! ```
//!
//! The layer only sets limits; the service's driver enforces them, because only it can stop
//! the provider's work at the right moment (see [`harness_core::policy`]):
//!
//! - **turn**: the request's `deadline` becomes the earlier of its own and now + `turn`.
//!   Past it, a starting or running execution fails with `timeout` after the runtime's cancel
//!   hook and cleanup ran; one awaiting an action is cancelled (source `deadline`), since
//!   the runtime model draws no edge from awaiting to failed.
//! - **init**: creating and initializing the runtime past this fails with `timeout`.
//!
//! Tool deadlines belong to portable tools (`ToolCallContext::deadline`), which the service
//! does not wire yet.
//!
//! Neighbours: any position works; inside retry, the deadline covers every attempt.

use std::task::{Context, Poll};
use std::time::Duration;

use harness_core::error::HarnessError;
use harness_core::policy::InitTimeout;
use harness_core::service::{ExecutionHandle, ExecutionRequest};
use harness_core::time::Timestamp;
use tower::{Layer, Service};

/// Configures [`Timeout`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimeoutLayer {
    turn: Option<Duration>,
    init: Option<Duration>,
}

impl TimeoutLayer {
    /// No limits yet.
    #[must_use]
    pub const fn new() -> Self {
        Self {
            turn: None,
            init: None,
        }
    }

    /// Limits the whole turn (execution) to `limit` from the call.
    #[must_use]
    pub const fn turn(mut self, limit: Duration) -> Self {
        self.turn = Some(limit);
        self
    }

    /// Limits creating and initializing the runtime to `limit`.
    #[must_use]
    pub const fn init(mut self, limit: Duration) -> Self {
        self.init = Some(limit);
        self
    }
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = Timeout<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Timeout {
            inner,
            limits: *self,
        }
    }
}

/// Sets deadlines on each request; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Timeout<S> {
    inner: S,
    limits: TimeoutLayer,
}

impl<S> Timeout<S> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }
    /// The inner service, by value.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S> Service<ExecutionRequest> for Timeout<S>
where
    S: Service<ExecutionRequest, Response = ExecutionHandle, Error = HarnessError>,
{
    type Response = ExecutionHandle;
    type Error = HarnessError;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: ExecutionRequest) -> Self::Future {
        if let Some(turn) = self.limits.turn {
            let millis = i64::try_from(turn.as_millis()).unwrap_or(i64::MAX);
            let limit = Timestamp::from_millis(Timestamp::now().as_millis().saturating_add(millis));
            request.deadline = match (request.deadline, limit) {
                (Some(own), Some(limit)) => Some(own.min(limit)),
                (own, limit) => own.or(limit),
            };
        }
        if let Some(init) = self.limits.init {
            request.extensions.insert(InitTimeout(init));
        }
        self.inner.call(request)
    }
}
