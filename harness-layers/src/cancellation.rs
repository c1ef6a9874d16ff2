//! Cancellation: one token that cancels every execution started through this layer.
//!
//! ```
//! use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
//! use harness_layers::cancellation::CancellationLayer;
//! use harness_scripted::{Script, ScriptedAdapter};
//! use tokio_util::sync::CancellationToken;
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let shutdown = CancellationToken::new();
//! let service = ServiceBuilder::new()
//!     .layer(CancellationLayer::new(shutdown.clone()))
//!     .service(AdapterService::new(ScriptedAdapter::new(Script::builder().hang().build())));
//! let execution = service.oneshot(ExecutionRequest::new("go")).await.unwrap();
//! shutdown.cancel();
//! let Outcome::Cancelled(reason) = execution.outcome().await else { panic!() };
//! assert_eq!(reason.source, harness_core::event::CancelSource::Shutdown);
//! # });
//! ```
//!
//! Per-execution cancellation is the service's own guarantee: `ExecutionHandle::cancel` is a
//! request, concurrent cancels run the provider's cancel hook and cleanup at most once, the
//! hook has a bounded grace period before cleanup runs anyway (`ServiceConfig`), and exactly
//! one `run.cancelled` confirms it. This layer adds the shutdown path: each execution's token
//! becomes a child of the layer's token, so cancelling it cancels them all, each with reason
//! `shutdown` unless a caller gave one first.
//!
//! Neighbours: any position.

use std::task::{Context, Poll};

use harness_core::error::HarnessError;
use harness_core::policy::ParentCancellation;
use harness_core::service::{ExecutionHandle, ExecutionRequest};
use tokio_util::sync::CancellationToken;
use tower::{Layer, Service};

/// Configures [`Cancellation`] with the parent token.
#[derive(Debug, Clone)]
pub struct CancellationLayer {
    token: CancellationToken,
}

impl CancellationLayer {
    /// Executions started through the layer are cancelled when `token` is.
    #[must_use]
    pub fn new(token: CancellationToken) -> Self {
        Self { token }
    }
}

impl<S> Layer<S> for CancellationLayer {
    type Service = Cancellation<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Cancellation {
            inner,
            token: self.token.clone(),
        }
    }
}

/// Ties each execution to the parent token; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Cancellation<S> {
    inner: S,
    token: CancellationToken,
}

impl<S> Cancellation<S> {
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

impl<S> Service<ExecutionRequest> for Cancellation<S>
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
        request
            .extensions
            .insert(ParentCancellation(self.token.clone()));
        self.inner.call(request)
    }
}
