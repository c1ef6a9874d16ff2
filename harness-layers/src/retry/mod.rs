//! Retry: by error category, never once output or side effects may have occurred, with
//! jittered backoff and a retry budget.
//!
//! ```
//! use std::time::Duration;
//! use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
//! use harness_layers::retry::{Backoff, RetryLayer};
//! use harness_scripted::ScriptedAdapter;
//! use tower::ServiceExt;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! // In the runtime stack: a turn that fails before its first item starts again on a fresh
//! // runtime, within the same execution.
//! let service = AdapterService::builder(ScriptedAdapter::quickstart())
//!     .layer(RetryLayer::new(Backoff::new().max_attempts(3).base(Duration::from_millis(10))))
//!     .build();
//! let execution = service.oneshot(ExecutionRequest::new("go")).await.unwrap();
//! # drop(execution);
//! # });
//! ```
//!
//! [`Retry`] is a layer of either stack, and where it sits says what it retries:
//!
//! 1. **In the runtime stack** ([`AdapterService::builder`]), the first segment of an
//!    execution (its turn) when it fails *before its first item*: a runtime that failed to
//!    start, or a stream whose first item is an error. It asks the segment for its next
//!    attempt ([`Segment::retry`]), which the adapter service runs on a fresh runtime (the
//!    failed one cleaned up first, once): callers see one execution, not the attempts. A
//!    resume is never retried (its pause lives in its runtime), nor is anything after the
//!    first item: the stream passes it on and stops retrying.
//! 2. **In the admission stack**, a refusal of the call that is retryable (`capacity` from a
//!    capacity layer inside this one, `unavailable` while evaluating), after the policy's
//!    delay.
//!
//! Only errors that are retryable *and* carry no "side effects may have occurred" flag are
//! ever retried ([`HarnessError::retryable`]); the driver sets that flag on any error that
//! follows output. [`Backoff`] retries `throttled`, `capacity` and `unavailable`, and
//! `timeout` only when asked, with equal-jitter exponential backoff, never sooner than the
//! error's own retry interval and never when that interval is longer than its cap, at most
//! `max_attempts` attempts, and a [`TpsBudget`](tower::retry::budget::TpsBudget) so retries
//! stay a bounded fraction of traffic. Each retry is logged (`tracing`, with attempt,
//! category and delay) and counted in metrics.
//!
//! Neighbours in the runtime stack: outside a turn deadline ([`timeout`](crate::timeout)),
//! each attempt gets its own deadline; inside it, one deadline covers every attempt and the
//! waits between them (`tests/layers.rs` shows both). Inside redaction or outside it, it
//! decides the same (redaction keeps categories and flags). In the admission stack: inside
//! capacity, retried calls keep one permit; outside it, capacity refusals are retried.
//!
//! [`AdapterService::builder`]: harness_core::service::AdapterService::builder
//! [`Segment::retry`]: harness_core::service::Segment::retry

mod future;
mod layer;
mod policy;
mod stream;

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use harness_core::error::HarnessError;
use harness_core::service::{ExecutionHandle, ExecutionRequest, Segment, SegmentStream};
use tower::Service;

pub use self::future::{ResponseFuture, SegmentFuture};
pub use self::layer::RetryLayer;
pub use self::policy::{Backoff, RetryPolicy};
pub use self::stream::RetryStream;

/// Retries safely; see the [module docs](self).
#[derive(Clone)]
pub struct Retry<S> {
    inner: S,
    policy: Arc<dyn RetryPolicy>,
}

impl<S: fmt::Debug> fmt::Debug for Retry<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retry")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S> Retry<S> {
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

    /// The ready inner service for this call; `self.inner` keeps a clone for the next (a
    /// clone starts unready, as tower's services expect).
    fn take_ready(&mut self) -> S
    where
        S: Clone,
    {
        let clone = self.inner.clone();
        std::mem::replace(&mut self.inner, clone)
    }
}

/// Whether (and after how long) attempt `attempt` that failed with `err` is retried.
fn delay(
    policy: &dyn RetryPolicy,
    attempt: u32,
    err: &HarnessError,
) -> Option<std::time::Duration> {
    if err.retryable() {
        policy.retry_after(attempt, err)
    } else {
        None
    }
}

impl<S> Service<ExecutionRequest> for Retry<S>
where
    S: Service<ExecutionRequest, Response = ExecutionHandle> + Clone,
    S::Error: Into<HarnessError>,
{
    type Response = ExecutionHandle;
    type Error = HarnessError;
    type Future = ResponseFuture<S>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: ExecutionRequest) -> Self::Future {
        self.policy.on_request();
        let mut service = self.take_ready();
        let future = service.call(request.clone());
        ResponseFuture::new(future, service, request, Arc::clone(&self.policy))
    }
}

impl<S> Service<Segment> for Retry<S>
where
    S: Service<Segment, Error = HarnessError> + Clone,
    S::Response: SegmentStream,
{
    type Response = RetryStream<S>;
    type Error = HarnessError;
    type Future = SegmentFuture<S>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, segment: Segment) -> Self::Future {
        if segment.attempt() == 1 {
            self.policy.on_request();
        }
        let mut service = self.take_ready();
        let future = service.call(segment.clone());
        SegmentFuture::new(future, service, segment, Arc::clone(&self.policy))
    }
}
