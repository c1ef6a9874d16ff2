//! [`RedactionLayer`]: configuration only.

use std::sync::Arc;

use tower::Layer;

use super::Redaction;
use super::engine::Redactor;

/// Applies [`Redaction`] to a service: see the [module docs](super).
#[derive(Debug, Clone)]
pub struct RedactionLayer {
    redactor: Arc<Redactor>,
    adapter: Option<Arc<str>>,
}

impl RedactionLayer {
    /// A layer redacting with `redactor` (shared by every execution). Redactions are counted
    /// under the adapter label `unknown` until [`RedactionLayer::adapter`] names it.
    #[must_use]
    pub const fn new(redactor: Arc<Redactor>) -> Self {
        Self {
            redactor,
            adapter: None,
        }
    }

    /// The adapter label of `harness_redactions_total`.
    #[must_use]
    pub fn adapter(mut self, adapter: &harness_core::id::AdapterId) -> Self {
        self.adapter = Some(Arc::from(adapter.as_str()));
        self
    }

    /// The redactor.
    #[must_use]
    pub fn redactor(&self) -> &Arc<Redactor> {
        &self.redactor
    }
}

impl<S> Layer<S> for RedactionLayer {
    type Service = Redaction<S>;

    fn layer(&self, inner: S) -> Self::Service {
        let adapter = self
            .adapter
            .clone()
            .unwrap_or_else(|| Arc::from(crate::metrics::names::UNKNOWN_ADAPTER));
        Redaction::for_adapter(inner, Arc::clone(&self.redactor), adapter)
    }
}
