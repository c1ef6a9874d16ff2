//! Idempotency: the same key with an equivalent request returns the original execution.
//!
//! ```
//! use futures_util::StreamExt;
//! use harness_core::error::{ErrorCategory, ErrorCode};
//! use harness_core::id::{Cursor, IdempotencyKey};
//! use harness_core::service::{AdapterService, ExecutionRequest};
//! use harness_layers::idempotency::{IdempotencyLayer, InMemoryIdempotencyStore};
//! use harness_scripted::ScriptedAdapter;
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = InMemoryIdempotencyStore::new();
//! let service = ServiceBuilder::new()
//!     .layer(IdempotencyLayer::new(store.clone()))
//!     .service(AdapterService::new(ScriptedAdapter::quickstart()));
//! let key: IdempotencyKey = "order-42".parse().unwrap();
//! let request = || ExecutionRequest::new("hello").with_idempotency_key(key.clone());
//!
//! let first = service.clone().oneshot(request()).await.unwrap();
//! // A retry of the same request gets the same execution, replayable from any cursor.
//! let retry = service.clone().oneshot(request()).await.unwrap();
//! assert_eq!(retry.id(), first.id());
//! first.cancel(Default::default()); // the quickstart would wait for an approval
//! first.outcome().await;
//! let all = retry.events(Cursor::START).count().await;
//! let tail = retry.events(Cursor::after_seq(2)).count().await;
//! assert_eq!(tail, all - 2);
//!
//! // A different request under the same key is refused before any provider work.
//! let other = ExecutionRequest::new("goodbye").with_idempotency_key(key.clone());
//! let err = service.oneshot(other).await.unwrap_err();
//! assert_eq!(err.code(), &ErrorCode::IDEMPOTENCY_CONFLICT);
//! assert_eq!(err.category(), ErrorCategory::Configuration);
//! assert!(err.message().contains("order-42") && !err.message().contains("goodbye"));
//! # });
//! ```
//!
//! # What it does
//!
//! A request without an [`idempotency_key`](ExecutionRequest::idempotency_key) passes straight
//! through. A keyed request is looked up in an [`IdempotencyStore`] under its [`ScopedKey`]
//! (the key in its caller's scope):
//!
//! - **free key**: the request reserves it, goes to the inner service, and the execution it
//!   starts is recorded under the key;
//! - **recorded, equivalent request**: the original execution comes back (a clone of its
//!   [`ExecutionHandle`]: replay from any cursor, then the live tail); the inner service is
//!   not called;
//! - **recorded or reserved, different request**: refused with `IDEMPOTENCY_CONFLICT`
//!   (category `configuration`, not retryable; the message names the key and never the
//!   request); the inner service is not called;
//! - **reserved by an equivalent request still in flight**: the request waits for that one to
//!   finish, then looks again: so concurrent identical requests create **one** execution.
//!
//! # Callers
//!
//! Keys are scoped by caller: the [`CallerId`] in the request's
//! [`extensions`](ExecutionRequest::extensions), put there by the application (from its
//! authentication, say). A request without one is in the [`CallerId::ANONYMOUS`] scope, which
//! all such requests share. Two callers using the same key never see each other's executions
//! or conflicts.
//!
//! # Equivalence
//!
//! Two requests are equivalent when an [`Equivalence`] policy gives them the same
//! [`Fingerprint`]. The default, [`CanonicalFingerprint`], hashes the
//! [canonical form](canonical_form) of the request: message, options, files, client context,
//! conversation and required capabilities (a set: order and repetition do not count), with
//! JSON object members in sorted order. Left out: the idempotency key itself, the trace
//! context (a retry is traced anew), the deadline (a retry computes its own) and the
//! extensions (process-local policies and the caller's identity). Any closure
//! `Fn(&ExecutionRequest) -> Fingerprint` can replace it
//! ([`IdempotencyLayer::with_equivalence`]).
//!
//! # Failures
//!
//! - **Refused before an execution existed** (the inner service answered `Err`, from
//!   preflight or capacity say, or failed to become ready): the reservation is released and
//!   **no record is kept**, so a corrected retry with the same key proceeds. Waiters with an
//!   equivalent request then try in turn, each getting its own answer. (A store that cannot
//!   answer fails the request before anything is reserved.)
//! - **Started, then failed** (the inner service returned a handle; the execution later ended
//!   in `run.failed` or `run.cancelled`): **the record stands**. The key returns the original,
//!   failed execution for its whole retention; to try again, use a new key. (This is the usual
//!   rule, Stripe's among others: an execution may have had side effects, and only the caller
//!   can decide that another attempt is safe.)
//! - **The caller went away**: a response future dropped before its execution is recorded
//!   releases the key (its reservation is a drop guard), and a waiter takes over.
//! - **The store failed to record** a started execution: the execution is handed over anyway
//!   (it runs whatever the store says), a warning is logged, and the key is released.
//!
//! # Retention
//!
//! Records expire after the store's retention ([`InMemoryIdempotencyStore::with_retention`],
//! [`DEFAULT_RETENTION`] by default), counted from when their execution started; after that,
//! the key is free again. Expired records are purged lazily, and by
//! [`IdempotencyStore::purge_expired`]. An in-memory record holds a weak handle on its
//! execution: the execution's event log stays in memory until the record expires or is
//! evicted (at most [`DEFAULT_MAX_RECORDS`] keys by default, the oldest ended record first;
//! see [`InMemoryIdempotencyStore::with_limits`]), but a record never keeps an execution
//! answerable: one awaiting an action whose callers all let go is abandoned as any other.
//!
//! # Neighbours
//!
//! - **Outside preflight and capacity** (the default order): a replay or a conflict then costs
//!   nothing, takes no capacity permit, and is never refused for lack of capacity; a request
//!   preflight refuses keeps no record (see above).
//! - **Inside metrics and tracing** (the default order): replays and conflicts still pass
//!   through them, so they are traced and counted. This layer records them itself
//!   (`harness_idempotent_replays_total`, `harness_idempotency_conflicts_total`), and marks a
//!   replay in the request's extensions so that an outer
//!   [`MetricsLayer`](crate::metrics::MetricsLayer) does not count the replayed execution as a
//!   new one. Conflicts carry the adapter label of the recorded execution when the store
//!   knows it, else `unknown`.
//! - **Readiness**: the service is always ready. It awaits the inner service's readiness in its
//!   response future, and only for a request that goes to it, so that a waiting, replayed or
//!   refused request never holds the inner service's capacity. That is why the inner service
//!   must be `Clone` (each call drives its own clone).

mod fingerprint;
mod future;
mod layer;
mod store;

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use harness_core::error::HarnessError;
use harness_core::id::AdapterId;
use harness_core::service::{ExecutionHandle, ExecutionRequest};
use tower::Service;

use crate::metrics::names;

pub use self::fingerprint::{
    CanonicalFingerprint, Equivalence, FINGERPRINT_VERSION, Fingerprint, canonical_form,
};
pub use self::future::ResponseFuture;
pub use self::layer::IdempotencyLayer;
pub use self::store::{
    DEFAULT_MAX_RECORDS, DEFAULT_RETENTION, IdempotencyStore, InFlight, InMemoryIdempotencyStore,
    Reservation, ReservationId, ScopedKey,
};
/// Re-exported from harness-core: the service records it as an execution's principal.
pub use harness_core::id::CallerId;

/// Returns the original execution for a repeated key and an equivalent request; refuses a
/// repeated key with a different request. See the [module docs](self).
#[derive(Clone)]
pub struct Idempotency<S, P = CanonicalFingerprint> {
    inner: S,
    store: Arc<dyn IdempotencyStore>,
    equivalence: P,
}

impl<S> Idempotency<S> {
    /// Wraps `inner`, keeping records in `store`, with the canonical fingerprint.
    #[must_use]
    pub fn new(inner: S, store: Arc<dyn IdempotencyStore>) -> Self {
        Self::with_equivalence(inner, store, CanonicalFingerprint)
    }
}

impl<S, P> Idempotency<S, P> {
    /// Wraps `inner`, keeping records in `store`, with `equivalence` deciding which requests
    /// are the same.
    #[must_use]
    pub fn with_equivalence(inner: S, store: Arc<dyn IdempotencyStore>, equivalence: P) -> Self {
        Self {
            inner,
            store,
            equivalence,
        }
    }

    /// The store.
    #[must_use]
    pub fn store(&self) -> &Arc<dyn IdempotencyStore> {
        &self.store
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, consuming this one.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: fmt::Debug, P> fmt::Debug for Idempotency<S, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Idempotency")
            .field("inner", &self.inner)
            .field("store", &self.store)
            .field("equivalence", &std::any::type_name::<P>())
            .finish()
    }
}

impl<S, P> Service<ExecutionRequest> for Idempotency<S, P>
where
    S: Service<ExecutionRequest, Response = ExecutionHandle> + Clone,
    S::Error: Into<HarnessError>,
    P: Equivalence,
{
    type Response = ExecutionHandle;
    type Error = HarnessError;
    type Future = ResponseFuture<S>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Always ready: the response future awaits the inner service's readiness, and only
        // when the request goes to it (see "Neighbours" in the module docs).
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ExecutionRequest) -> Self::Future {
        let inner = self.inner.clone();
        let Some(key) = request.idempotency_key.clone() else {
            return ResponseFuture::passthrough(inner, request);
        };
        let fingerprint = self.equivalence.fingerprint(&request);
        let key = ScopedKey::new(CallerId::of(&request), key);
        ResponseFuture::keyed(inner, request, Arc::clone(&self.store), key, fingerprint)
    }
}

/// A replay: the one place replays are observed (the handle returned is marked
/// [`into_replay`](ExecutionHandle::into_replay), so a metrics layer above does not count it
/// as a new execution).
fn observe_replay(key: &ScopedKey, execution: &ExecutionHandle) {
    tracing::debug!(key = %key, execution = %execution.id(), "idempotent replay");
    names::record_idempotent_replay(execution.adapter().as_str());
}

/// A conflict: the one place conflicts are observed. `adapter` is the recorded execution's,
/// when the store knows it.
fn observe_conflict(key: &ScopedKey, adapter: Option<&AdapterId>) {
    tracing::debug!(key = %key, "idempotency conflict");
    names::record_idempotency_conflict(adapter.map_or(names::UNKNOWN_ADAPTER, AdapterId::as_str));
}
