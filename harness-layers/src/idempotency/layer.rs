//! [`IdempotencyLayer`]: the configuration of [`Idempotency`].

use std::fmt;
use std::sync::Arc;

use tower::Layer;

use super::Idempotency;
use super::fingerprint::{CanonicalFingerprint, Equivalence};
use super::store::{IdempotencyStore, InMemoryIdempotencyStore};

/// Wraps a service in [`Idempotency`]: a store of records and an [`Equivalence`] policy.
///
/// Every service the layer makes (and every clone of the layer) shares its one store.
#[derive(Clone)]
pub struct IdempotencyLayer<P = CanonicalFingerprint> {
    store: Arc<dyn IdempotencyStore>,
    equivalence: P,
}

impl IdempotencyLayer {
    /// Records in `store`; equivalence by the [canonical fingerprint](CanonicalFingerprint).
    ///
    /// Keep a clone of an [`InMemoryIdempotencyStore`] to call
    /// [`purge_expired`](IdempotencyStore::purge_expired) on it.
    #[must_use]
    pub fn new(store: impl IdempotencyStore + 'static) -> Self {
        Self::from_shared(Arc::new(store))
    }

    /// Records in a shared `store`.
    #[must_use]
    pub fn from_shared(store: Arc<dyn IdempotencyStore>) -> Self {
        Self {
            store,
            equivalence: CanonicalFingerprint,
        }
    }
}

impl Default for IdempotencyLayer {
    /// A fresh [`InMemoryIdempotencyStore`] with the default retention.
    fn default() -> Self {
        Self::new(InMemoryIdempotencyStore::new())
    }
}

impl<P> IdempotencyLayer<P> {
    /// Decides equivalence with `policy` (a closure `Fn(&ExecutionRequest) -> Fingerprint`
    /// will do) instead of the canonical fingerprint.
    #[must_use]
    pub fn with_equivalence<Q: Equivalence>(self, policy: Q) -> IdempotencyLayer<Q> {
        IdempotencyLayer {
            store: self.store,
            equivalence: policy,
        }
    }

    /// The store.
    #[must_use]
    pub fn store(&self) -> &Arc<dyn IdempotencyStore> {
        &self.store
    }
}

impl<S, P: Clone> Layer<S> for IdempotencyLayer<P> {
    type Service = Idempotency<S, P>;

    fn layer(&self, inner: S) -> Self::Service {
        Idempotency::with_equivalence(inner, Arc::clone(&self.store), self.equivalence.clone())
    }
}

impl<P> fmt::Debug for IdempotencyLayer<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyLayer")
            .field("store", &self.store)
            .field("equivalence", &std::any::type_name::<P>())
            .finish()
    }
}
