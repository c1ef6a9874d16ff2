//! [`RetryLayer`]: configuration only.

use std::fmt;
use std::sync::Arc;

use harness_core::id::AdapterId;
use tower::Layer;

use super::Retry;
use super::policy::{Observed, RetryPolicy};
use crate::metrics::names;

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
    /// Retries as `policy` says ([`Backoff`](super::Backoff), or any closure
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
