//! [`RetryPolicy`] and the default policy, [`Backoff`].

use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use harness_core::error::{ErrorCategory, HarnessError};
use tower::retry::budget::{Budget, TpsBudget};

use crate::metrics::names;

/// Decides whether a failure is retried, and after how long.
///
/// The retry layer asks only about errors that are [retryable](HarnessError::retryable)
/// (which excludes any error after which output or side effects may have occurred), and in
/// the runtime stack only before the first item of a segment. Closures
/// `Fn(u32, &HarnessError) -> Option<Duration>` are policies.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use harness_layers::retry::{Backoff, RetryPolicy};
/// // Object-safe: a boxed policy plugs in as any other.
/// let policies: Vec<Arc<dyn RetryPolicy>> = vec![
///     Arc::new(Backoff::new()),
///     Arc::new(|attempt: u32, _: &harness_core::error::HarnessError| {
///         (attempt < 2).then_some(Duration::from_millis(5))
///     }),
/// ];
/// # assert_eq!(policies.len(), 2);
/// ```
pub trait RetryPolicy: Send + Sync + 'static {
    /// After attempt number `attempt` (from 1) failed with `error`, how long to wait before
    /// the next attempt; `None` to give up.
    fn retry_after(&self, attempt: u32, error: &HarnessError) -> Option<Duration>;

    /// A new execution (or call) arrived: retry budgets deposit here.
    fn on_request(&self) {}
}

impl<F> RetryPolicy for F
where
    F: Fn(u32, &HarnessError) -> Option<Duration> + Send + Sync + 'static,
{
    fn retry_after(&self, attempt: u32, error: &HarnessError) -> Option<Duration> {
        self(attempt, error)
    }
}

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

    /// The longest delay. A provider that asks to wait longer (its error's retry interval)
    /// is not retried: the error goes to the caller with that interval in it.
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
        let asked = error.retry_after().unwrap_or_default();
        if asked > self.cap || !self.category_allowed(error.category()) {
            return None;
        }
        if !self.budget.withdraw() {
            return None;
        }
        let exp = self
            .base
            .saturating_mul(1u32 << (attempt - 1).min(20))
            .min(self.cap);
        let jittered = exp.mul_f64(0.5 + unit_random() / 2.0);
        Some(jittered.max(asked))
    }

    fn on_request(&self) {
        self.budget.deposit();
    }
}

/// Logs and counts every retry the inner policy grants.
pub(super) struct Observed {
    pub(super) policy: Arc<dyn RetryPolicy>,
    pub(super) adapter: String,
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
