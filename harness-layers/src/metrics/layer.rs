use std::sync::Arc;

use ::metrics::SharedString;
use tower::Layer;

use super::{Metrics, names};

/// Wraps a service in [`Metrics`]. Configuration only; cheap to clone.
#[derive(Debug, Clone)]
pub struct MetricsLayer {
    adapter: SharedString,
}

impl MetricsLayer {
    /// A layer whose calls carry the adapter label [`names::UNKNOWN_ADAPTER`] until an
    /// execution exists.
    #[must_use]
    pub const fn new() -> Self {
        Self {
            adapter: SharedString::const_str(names::UNKNOWN_ADAPTER),
        }
    }

    /// The adapter label of what happens before an execution exists: the in-flight gauge of
    /// a pending call and the errors of a refused call. Use the id of the adapter the stack
    /// wraps.
    #[must_use]
    pub fn with_adapter(mut self, adapter: &str) -> Self {
        self.adapter = SharedString::from(Arc::<str>::from(adapter));
        self
    }
}

impl Default for MetricsLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> Layer<S> for MetricsLayer {
    type Service = Metrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Metrics::with_label(inner, self.adapter.clone())
    }
}
