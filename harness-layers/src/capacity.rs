//! Capacity: a bound on concurrent executions that answers `capacity` instead of queueing.
//!
//! ```
//! use harness_core::error::{ErrorCategory, ErrorCode};
//! use harness_core::service::{AdapterService, ExecutionRequest};
//! use harness_layers::capacity::CapacityLayer;
//! use harness_scripted::{Script, ScriptedAdapter};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let hang = Script::builder().hang().build();
//! let service = ServiceBuilder::new()
//!     .layer(CapacityLayer::new(1))
//!     .service(AdapterService::new(ScriptedAdapter::new(hang)));
//! let first = service.clone().oneshot(ExecutionRequest::new("one")).await.unwrap();
//! let err = service.clone().oneshot(ExecutionRequest::new("two")).await.unwrap_err();
//! assert_eq!(err.category(), ErrorCategory::Capacity);
//! assert!(err.retryable());
//! // The permit comes back when the execution ends.
//! first.cancel(Default::default());
//! first.outcome().await;
//! assert!(service.oneshot(ExecutionRequest::new("three")).await.is_ok());
//! # });
//! ```
//!
//! Each execution holds a permit from the moment its request passes this layer until its
//! terminal event is appended (a [terminal hook](harness_core::log::LogReader::on_terminal) on
//! its log releases it: no task, and no handle clone, so an execution whose handles are all
//! dropped is still detected as abandoned). A
//! request that finds no permit is refused at once with a retryable `capacity` error that
//! advises a retry interval: callers or an outer retry layer decide whether to wait; nothing
//! queues without bound. A request the inner service refuses gives its permit back at once.
//!
//! Neighbours: put it inside preflight and idempotency (refusals and replays must not take
//! permits) and outside retry (a retried attempt reuses the execution's permit).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::service::{ExecutionHandle, ExecutionRequest};
use pin_project_lite::pin_project;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::{Layer, Service};

/// Configures [`Capacity`]: at most `limit` executions at once.
#[derive(Debug, Clone, Copy)]
pub struct CapacityLayer {
    limit: usize,
    retry_after: Duration,
}

impl CapacityLayer {
    /// The largest bound: a limit above it (`usize::MAX` included) is this one, which no
    /// process reaches.
    pub const MAX_LIMIT: usize = Semaphore::MAX_PERMITS;

    /// At most `limit` concurrent executions (at most [`MAX_LIMIT`](Self::MAX_LIMIT));
    /// refusals advise retrying after one second.
    #[must_use]
    pub const fn new(limit: usize) -> Self {
        Self {
            limit: if limit > Self::MAX_LIMIT {
                Self::MAX_LIMIT
            } else {
                limit
            },
            retry_after: Duration::from_secs(1),
        }
    }

    /// The retry interval refusals advise.
    #[must_use]
    pub const fn retry_after(mut self, after: Duration) -> Self {
        self.retry_after = after;
        self
    }
}

impl<S> Layer<S> for CapacityLayer {
    type Service = Capacity<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Capacity {
            inner,
            permits: Arc::new(Semaphore::new(self.limit)),
            limit: self.limit,
            retry_after: self.retry_after,
        }
    }
}

/// Bounds concurrent executions; see the [module docs](self). Clones share the bound.
#[derive(Clone)]
pub struct Capacity<S> {
    inner: S,
    permits: Arc<Semaphore>,
    limit: usize,
    retry_after: Duration,
}

impl<S: fmt::Debug> fmt::Debug for Capacity<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Capacity")
            .field("inner", &self.inner)
            .field("limit", &self.limit)
            .field("active", &self.active())
            .finish()
    }
}

impl<S> Capacity<S> {
    /// How many executions hold a permit now.
    #[must_use]
    pub fn active(&self) -> usize {
        self.limit.saturating_sub(self.permits.available_permits())
    }
    /// The bound.
    #[must_use]
    pub fn limit(&self) -> usize {
        self.limit
    }
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

impl<S> Service<ExecutionRequest> for Capacity<S>
where
    S: Service<ExecutionRequest, Response = ExecutionHandle>,
    S::Error: Into<HarnessError>,
{
    type Response = ExecutionHandle;
    type Error = HarnessError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Never wait for a permit here: a full service answers `capacity` in `call`.
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: ExecutionRequest) -> Self::Future {
        match Arc::clone(&self.permits).try_acquire_owned() {
            Ok(permit) => ResponseFuture {
                kind: Kind::Inner {
                    future: self.inner.call(request),
                    permit: Some(permit),
                },
            },
            Err(_) => ResponseFuture {
                kind: Kind::Full {
                    error: Some(
                        HarnessError::new(
                            ErrorCategory::Capacity,
                            format!("all {} execution slots are busy; retry later", self.limit),
                        )
                        .with_code(ErrorCode::CAPACITY_EXHAUSTED)
                        .with_retry_after(self.retry_after),
                    ),
                },
            },
        }
    }
}

pin_project! {
    /// The response future of [`Capacity`]: holds the permit until the execution exists,
    /// then hands it to a terminal hook that releases it at the terminal event.
    #[derive(Debug)]
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = Projected]
    #[derive(Debug)]
    enum Kind<F> {
        Inner { #[pin] future: F, permit: Option<OwnedSemaphorePermit> },
        Full { error: Option<HarnessError> },
    }
}

impl<F, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<ExecutionHandle, E>>,
    E: Into<HarnessError>,
{
    type Output = Result<ExecutionHandle, HarnessError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            Projected::Inner { future, permit } => {
                let result = std::task::ready!(future.poll(cx)).map_err(Into::into);
                if let (Ok(handle), Some(permit)) = (&result, permit.take()) {
                    hold_until_terminal(handle, permit);
                }
                Poll::Ready(result)
            }
            Projected::Full { error } => Poll::Ready(Err(error.take().unwrap_or_else(|| {
                HarnessError::new(
                    ErrorCategory::Internal,
                    "capacity future polled after completion",
                )
            }))),
        }
    }
}

/// Keeps `permit` until the execution's terminal event (or until its log's writer is gone).
fn hold_until_terminal(handle: &ExecutionHandle, permit: OwnedSemaphorePermit) {
    handle.log().on_terminal(move |_| drop(permit));
}
