//! Shutdown: one token that cancels every execution started through this service.
//!
//! ```
//! use harness_core::event::CancelSource;
//! use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
//! use harness_layers::shutdown::ShutdownLayer;
//! use harness_scripted::{Script, ScriptedAdapter};
//! use tokio_util::sync::CancellationToken;
//! use tower::ServiceExt;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let shutdown = CancellationToken::new();
//! let service = AdapterService::builder(ScriptedAdapter::new(Script::builder().hang().build()))
//!     .layer(ShutdownLayer::new(shutdown.clone()))
//!     .build();
//! let execution = service.oneshot(ExecutionRequest::new("go")).await.unwrap();
//! shutdown.cancel();
//! let Outcome::Cancelled(reason) = execution.outcome().await else { panic!() };
//! assert_eq!(reason.source, CancelSource::Shutdown);
//! # });
//! ```
//!
//! Per-execution cancellation is the service's own guarantee: `ExecutionHandle::cancel` is a
//! request, concurrent cancels run the provider's cancel hook and cleanup at most once, the
//! hook has a bounded grace period before cleanup runs anyway (`ServiceConfig`), and exactly
//! one `run.cancelled` confirms it. This layer, in the runtime stack
//! ([`AdapterService::builder`]), adds the shutdown path: on an execution's first call it
//! ties the execution to its token ([`Segment::cancel_on`]), so cancelling the token cancels
//! every execution, in whatever state it is then (awaiting an action included: the driver
//! watches the token for the execution's whole life, without a task), with source
//! `shutdown` unless a caller gave a reason first. An execution started after the token was
//! cancelled is cancelled at once.
//!
//! Neighbours: any position in the runtime stack (it ties the execution on the first
//! attempt it sees, and retries reuse the tie).
//!
//! [`AdapterService::builder`]: harness_core::service::AdapterService::builder
//! [`Segment::cancel_on`]: harness_core::service::Segment::cancel_on

use std::task::{Context, Poll};

use harness_core::error::HarnessError;
use harness_core::event::CancelSource;
use harness_core::service::{Segment, SegmentKind};
use tokio_util::sync::CancellationToken;
use tower::{Layer, Service};

/// Configures [`Shutdown`] with the token.
#[derive(Debug, Clone)]
pub struct ShutdownLayer {
    token: CancellationToken,
}

impl ShutdownLayer {
    /// Executions started through the layer are cancelled when `token` is.
    #[must_use]
    pub fn new(token: CancellationToken) -> Self {
        Self { token }
    }
}

impl<S> Layer<S> for ShutdownLayer {
    type Service = Shutdown<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Shutdown {
            inner,
            token: self.token.clone(),
        }
    }
}

/// Ties each execution to the token; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Shutdown<S> {
    inner: S,
    token: CancellationToken,
}

impl<S> Shutdown<S> {
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

impl<S> Service<Segment> for Shutdown<S>
where
    S: Service<Segment, Error = HarnessError>,
{
    type Response = S::Response;
    type Error = HarnessError;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, segment: Segment) -> Self::Future {
        if segment.kind() == SegmentKind::Turn && segment.attempt() == 1 {
            segment.cancel_on(&self.token, CancelSource::Shutdown);
        }
        self.inner.call(segment)
    }
}
