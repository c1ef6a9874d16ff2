//! Retry: by error category, never once output or side effects may have occurred, with
//! jittered backoff and a retry budget.
//!
//! ```
//! use std::time::Duration;
//! use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
//! use harness_layers::retry::{Backoff, RetryLayer};
//! use harness_scripted::ScriptedAdapter;
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let service = ServiceBuilder::new()
//!     .layer(RetryLayer::new(Backoff::new().max_attempts(3).base(Duration::from_millis(10))))
//!     .service(AdapterService::new(ScriptedAdapter::quickstart()));
//! let execution = service.oneshot(ExecutionRequest::new("go")).await.unwrap();
//! # drop(execution);
//! # });
//! ```
//!
//! Two places where a retry is safe, both handled with the same policy:
//!
//! 1. **Inside the execution**, before any output: the layer hands the policy to the
//!    service's driver ([`harness_core::policy::Retry`]), which retries a runtime that failed
//!    to start or failed before appending any content, on a fresh runtime (each one cleaned
//!    up once), within the same execution: callers see one execution, not the attempts.
//! 2. **The call itself**: a refusal from an inner layer that is retryable (`capacity` from a
//!    capacity layer inside this one, `unavailable` while evaluating) is retried after the
//!    policy's delay, never sooner than the error's own retry interval.
//!
//! Only errors that are retryable *and* carry no "side effects may have occurred" flag are
//! ever retried ([`HarnessError::retryable`]); the driver sets that flag on any error that
//! follows output. [`Backoff`] retries `throttled`, `capacity` and `unavailable`, and
//! `timeout` only when asked, with equal-jitter exponential backoff, at most `max_attempts`
//! attempts, and a [`TpsBudget`] so retries stay a bounded fraction of traffic. Each retry is
//! logged (`tracing`, with attempt, category and delay) and counted in metrics.
//!
//! Neighbours: put it inside capacity (so retried attempts of one execution keep its permit)
//! unless call-level `capacity` refusals should be retried, in which case put capacity inside.

use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::id::AdapterId;
use harness_core::policy::{Retry as RetryExtension, RetryPolicy};
use harness_core::service::{ExecutionHandle, ExecutionRequest};
use pin_project_lite::pin_project;
use tower::retry::budget::{Budget, TpsBudget};
use tower::{Layer, Service};

use crate::metrics::names;

/// Exponential backoff with equal jitter, by category, within a retry budget.
#[derive(Clone)]
pub struct Backoff {
    max_attempts: u32,
    base: Duration,
    cap: Duration,
    retry_timeouts: bool,
    budget: Arc<TpsBudget>,
}

impl fmt::Debug for Backoff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backoff")
            .field("max_attempts", &self.max_attempts)
            .field("base", &self.base)
            .field("cap", &self.cap)
            .field("retry_timeouts", &self.retry_timeouts)
            .finish_non_exhaustive()
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}

impl Backoff {
    /// Three attempts, 100 ms base, 10 s cap, no timeout retries; a budget allowing retries
    /// of 20 % of requests over 10 s, and at least 10 retries per second.
    #[must_use]
    pub fn new() -> Self {
        Self {
            max_attempts: 3,
            base: Duration::from_millis(100),
            cap: Duration::from_secs(10),
            retry_timeouts: false,
            budget: Arc::new(TpsBudget::new(Duration::from_secs(10), 10, 0.2)),
        }
    }

    /// At most `n` attempts in all (the first included).
    #[must_use]
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n.max(1);
        self
    }

    /// The first delay's scale; attempt `k` waits between half and all of `base * 2^(k-1)`.
    #[must_use]
    pub fn base(mut self, base: Duration) -> Self {
        self.base = base;
        self
    }

    /// The longest delay.
    #[must_use]
    pub fn cap(mut self, cap: Duration) -> Self {
        self.cap = cap;
        self
    }

    /// Whether `timeout` errors are retried (the contract leaves it to policy).
    #[must_use]
    pub fn retry_timeouts(mut self, yes: bool) -> Self {
        self.retry_timeouts = yes;
        self
    }

    /// Replaces the retry budget.
    #[must_use]
    pub fn budget(mut self, budget: TpsBudget) -> Self {
        self.budget = Arc::new(budget);
        self
    }

    fn category_allowed(&self, category: ErrorCategory) -> bool {
        match category {
            ErrorCategory::Throttled | ErrorCategory::Capacity | ErrorCategory::Unavailable => true,
            ErrorCategory::Timeout => self.retry_timeouts,
            _ => false,
        }
    }
}

/// A number in `[0, 1)` from std's randomly seeded hasher: jitter needs no crypto.
fn unit_random() -> f64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x9e37_79b9_7f4a_7c15);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

impl RetryPolicy for Backoff {
    fn retry_after(&self, attempt: u32, error: &HarnessError) -> Option<Duration> {
        if attempt >= self.max_attempts || !error.retryable() {
            return None;
        }
        if !self.category_allowed(error.category()) || !self.budget.withdraw() {
            return None;
        }
        let exp = self
            .base
            .saturating_mul(1u32 << (attempt - 1).min(20))
            .min(self.cap);
        let jittered = exp.mul_f64(0.5 + unit_random() / 2.0);
        Some(jittered.max(error.retry_after().unwrap_or_default()))
    }

    fn on_request(&self) {
        self.budget.deposit();
    }
}

/// Logs and counts every retry the inner policy grants.
struct Observed {
    policy: Arc<dyn RetryPolicy>,
    adapter: String,
}

impl RetryPolicy for Observed {
    fn retry_after(&self, attempt: u32, error: &HarnessError) -> Option<Duration> {
        let delay = self.policy.retry_after(attempt, error)?;
        tracing::info!(adapter = %self.adapter, attempt, category = %error.category(), ?delay, "retrying");
        names::record_retry(&self.adapter, error.category());
        Some(delay)
    }

    fn on_request(&self) {
        self.policy.on_request();
    }
}

/// Configures [`Retry`] with a policy.
#[derive(Clone)]
pub struct RetryLayer {
    policy: Arc<dyn RetryPolicy>,
    adapter: String,
}

impl fmt::Debug for RetryLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryLayer")
            .field("adapter", &self.adapter)
            .finish_non_exhaustive()
    }
}

impl RetryLayer {
    /// Retries as `policy` says ([`Backoff`], or any closure
    /// `Fn(u32, &HarnessError) -> Option<Duration>`). Retries are counted under the adapter
    /// label `unknown` until [`RetryLayer::adapter`] names it.
    #[must_use]
    pub fn new(policy: impl RetryPolicy) -> Self {
        Self {
            policy: Arc::new(policy),
            adapter: names::UNKNOWN_ADAPTER.to_owned(),
        }
    }

    /// The adapter label for the retry metrics and logs.
    #[must_use]
    pub fn adapter(mut self, adapter: &AdapterId) -> Self {
        self.adapter = adapter.to_string();
        self
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = Retry<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Retry {
            inner,
            policy: Arc::new(Observed {
                policy: Arc::clone(&self.policy),
                adapter: self.adapter.clone(),
            }),
        }
    }
}

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
}

impl<S> Service<ExecutionRequest> for Retry<S>
where
    S: Service<ExecutionRequest, Response = ExecutionHandle, Error = HarnessError> + Clone,
{
    type Response = ExecutionHandle;
    type Error = HarnessError;
    type Future = ResponseFuture<S>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: ExecutionRequest) -> Self::Future {
        self.policy.on_request();
        request
            .extensions
            .insert(RetryExtension(Arc::clone(&self.policy)));
        // The ready clone answers this call; `self.inner` stays for the next (a clone starts
        // unready, as tower's services expect).
        let clone = self.inner.clone();
        let mut service = std::mem::replace(&mut self.inner, clone);
        let future = service.call(request.clone());
        ResponseFuture {
            state: State::Calling { future },
            service,
            request,
            attempt: 1,
            policy: Arc::clone(&self.policy),
        }
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        Calling { #[pin] future: F },
        Waiting { #[pin] sleep: tokio::time::Sleep },
        Ready,
    }
}

pin_project! {
    /// The response future of [`Retry`]: calls, and after a retryable refusal waits and
    /// calls again.
    pub struct ResponseFuture<S: Service<ExecutionRequest>> {
        #[pin]
        state: State<S::Future>,
        service: S,
        request: ExecutionRequest,
        attempt: u32,
        policy: Arc<dyn RetryPolicy>,
    }
}

impl<S: Service<ExecutionRequest>> fmt::Debug for ResponseFuture<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

impl<S> Future for ResponseFuture<S>
where
    S: Service<ExecutionRequest, Response = ExecutionHandle, Error = HarnessError>,
{
    type Output = Result<ExecutionHandle, HarnessError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Calling { future } => match ready!(future.poll(cx)) {
                    Ok(handle) => return Poll::Ready(Ok(handle)),
                    Err(err) => {
                        let delay = if err.retryable() {
                            this.policy.retry_after(*this.attempt, &err)
                        } else {
                            None
                        };
                        let Some(delay) = delay else {
                            return Poll::Ready(Err(err));
                        };
                        *this.attempt += 1;
                        this.state.set(State::Waiting {
                            sleep: tokio::time::sleep(delay),
                        });
                    }
                },
                StateProj::Waiting { sleep } => {
                    ready!(sleep.poll(cx));
                    this.state.set(State::Ready);
                }
                StateProj::Ready => {
                    ready!(this.service.poll_ready(cx))?;
                    let future = this.service.call(this.request.clone());
                    this.state.set(State::Calling { future });
                }
            }
        }
    }
}
