//! Where idempotency records live: the [`IdempotencyStore`] trait and its in-memory
//! implementation, [`InMemoryIdempotencyStore`].

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::id::{AdapterId, IdempotencyKey};
use harness_core::service::{ExecutionHandle, WeakExecutionHandle};
use harness_core::tool::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;

use super::CallerId;
use super::fingerprint::Fingerprint;

/// An idempotency key in its caller's scope: the key of a record.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScopedKey {
    /// Whose key it is.
    pub caller: CallerId,
    /// The key the request carried.
    pub key: IdempotencyKey,
}

impl ScopedKey {
    /// `key` in `caller`'s scope.
    #[must_use]
    pub fn new(caller: CallerId, key: IdempotencyKey) -> Self {
        Self { caller, key }
    }
}

impl fmt::Display for ScopedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.caller, self.key)
    }
}

/// Identifies one reservation of a key, so that a late release never frees someone else's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReservationId(u64);

impl ReservationId {
    /// A reservation id (stores number their reservations as they like).
    #[must_use]
    pub const fn new(id: u64) -> Self {
        Self(id)
    }

    /// The number.
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0
    }
}

/// What [`IdempotencyStore::reserve`] found.
#[derive(Debug)]
pub enum Reservation {
    /// The key was free and is now reserved for this caller, who must
    /// [`complete`](IdempotencyStore::complete) or [`release`](IdempotencyStore::release) it.
    Reserved(ReservationId),
    /// The key names an execution started by an equivalent request: here is its handle.
    Existing(ExecutionHandle),
    /// The key is reserved or recorded for a request with another fingerprint.
    Conflict {
        /// The adapter of the recorded execution, when known (a metrics label).
        adapter: Option<AdapterId>,
    },
    /// An equivalent request holds the reservation: wait for this, then ask again.
    InFlight(InFlight),
}

/// Resolves when a reservation held by another caller is completed or released.
pub struct InFlight(BoxFuture<'static, ()>);

impl InFlight {
    /// Wraps the future a store resolves when the reservation ends.
    #[must_use]
    pub fn new(ended: impl Future<Output = ()> + Send + 'static) -> Self {
        Self(Box::pin(ended))
    }
}

impl Future for InFlight {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl fmt::Debug for InFlight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlight").finish_non_exhaustive()
    }
}

/// Idempotency records, scoped by caller.
///
/// A key goes through two states in a store:
///
/// 1. **reserved**: one caller holds it while its request goes to the inner service. Callers
///    with the same key and an equivalent request wait ([`Reservation::InFlight`]); callers
///    with a different request are refused ([`Reservation::Conflict`](Reservation::Conflict)). The holder either
///    [completes](IdempotencyStore::complete) the reservation with the execution it started,
///    or [releases](IdempotencyStore::release) it (its request was refused before an execution
///    existed, or its future was dropped), and then the key is free again.
/// 2. **recorded**: the key names one execution, whatever its outcome, until the record's
///    retention runs out. Equivalent requests get a clone of its handle
///    ([`Reservation::Existing`]); different ones are refused.
///
/// The trait is object safe, and shared as `Arc<dyn IdempotencyStore>`. The asynchronous
/// methods return `'static` boxed futures (an implementation clones what it needs, typically
/// an `Arc` of its state, into them), so the [`Idempotency`](super::Idempotency) service's
/// response future can hold them. They do their work when polled, not when called: a future
/// dropped unpolled leaves the store unchanged.
///
/// Contract:
/// - `reserve` is atomic per key: of any number of concurrent callers with a free key, exactly
///   one gets [`Reservation::Reserved`].
/// - A reservation lasts until `complete` or `release`; it does not expire (the service holds
///   it in a drop guard, so it cannot leak).
/// - An [`InFlight`] resolves once the reservation it waits for has ended (completed or
///   released), at once if it already has.
/// - A record is kept for the store's retention after `complete`; an expired record behaves as
///   absent.
///
/// Records hold the [`ExecutionHandle`] itself. A durable, multi-process store would keep
/// execution ids instead and reattach them through an event-log store; that belongs with the
/// durable backends, not here.
pub trait IdempotencyStore: fmt::Debug + Send + Sync {
    /// Looks `key` up for a request with `fingerprint`, reserving it when it is free.
    ///
    /// # Errors
    /// A store that cannot answer (a remote store that is down) fails with the category that
    /// describes why, for instance `unavailable`.
    fn reserve(
        &self,
        key: ScopedKey,
        fingerprint: Fingerprint,
    ) -> BoxFuture<'static, Result<Reservation, HarnessError>>;

    /// Turns reservation `id` of `key` into a record of `execution`.
    ///
    /// # Errors
    /// When the reservation is not held any more, or the store cannot write.
    fn complete(
        &self,
        key: ScopedKey,
        id: ReservationId,
        execution: ExecutionHandle,
    ) -> BoxFuture<'static, Result<(), HarnessError>>;

    /// Frees reservation `id` of `key` without a record; does nothing when `id` does not hold
    /// the key. Called from a drop guard, so it must neither block nor wait: a store that needs
    /// I/O spawns it.
    fn release(&self, key: &ScopedKey, id: ReservationId);

    /// Removes every expired record; returns how many.
    ///
    /// # Errors
    /// When the store cannot be reached.
    fn purge_expired(&self) -> BoxFuture<'static, Result<usize, HarnessError>>;
}

/// How long [`InMemoryIdempotencyStore::new`] keeps records: 24 hours.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// How many keys [`InMemoryIdempotencyStore::new`] holds at most: 10,000.
pub const DEFAULT_MAX_RECORDS: usize = 10_000;

/// The in-memory [`IdempotencyStore`]: correct under concurrency, for one process.
///
/// Records are kept for the store's retention after their execution started, measured on
/// Tokio's clock (so tests can pause and advance it). Expired records are removed lazily: the
/// record of a key when that key is next looked up, and all of them by
/// [`purge_expired`](IdempotencyStore::purge_expired) or by a sweep that `reserve` runs at most
/// once per retention period.
///
/// A record holds a [weak handle](harness_core::service::WeakExecutionHandle) on its
/// execution: its event log stays in memory while the record lives (a replay can start from
/// any cursor), but the record does not keep the execution answerable: one awaiting an
/// action whose callers are all gone is abandoned like any other (a replay then finds it
/// cancelled). The store holds at most `max_records` keys ([`DEFAULT_MAX_RECORDS`]): a new
/// key when it is full evicts the oldest record whose execution has ended, and if none has,
/// the request is refused with `IDEMPOTENCY_STORE_FULL` (`capacity`, retryable). Each record's
/// memory is its execution's log, which the service bounds (`ServiceConfig::max_events`).
///
/// The state sits behind one `std::sync::Mutex`, held only for map operations and never
/// across an `.await`. Cheap to clone; clones share the records.
///
/// ```
/// use std::time::Duration;
/// use harness_layers::idempotency::InMemoryIdempotencyStore;
///
/// let store = InMemoryIdempotencyStore::with_retention(Duration::from_secs(600));
/// assert_eq!(store.retention(), Duration::from_secs(600));
/// assert!(store.is_empty());
/// ```
#[derive(Clone)]
pub struct InMemoryIdempotencyStore {
    inner: Arc<Inner>,
}

struct Inner {
    retention: Duration,
    max_records: usize,
    state: Mutex<State>,
}

struct State {
    entries: HashMap<ScopedKey, Entry>,
    next_id: u64,
    /// When `reserve` next sweeps every expired record (`None`: at the next call).
    next_sweep: Option<Instant>,
}

enum Entry {
    Reserved {
        id: ReservationId,
        fingerprint: Fingerprint,
        /// Dropped when the reservation ends, which wakes every waiter.
        ended: watch::Sender<()>,
    },
    Recorded {
        fingerprint: Fingerprint,
        execution: WeakExecutionHandle,
        /// When it was recorded: the oldest ended record is evicted first.
        recorded: Instant,
        /// `None`: the retention is too long to represent; never expires.
        expires: Option<Instant>,
    },
}

impl Entry {
    fn expired(&self, now: Instant) -> bool {
        match self {
            Self::Reserved { .. } => false,
            Self::Recorded { expires, .. } => expires.is_some_and(|at| at <= now),
        }
    }
}

impl Default for InMemoryIdempotencyStore {
    fn default() -> Self {
        Self::new()
    }
}

impl InMemoryIdempotencyStore {
    /// An empty store with the [`DEFAULT_RETENTION`].
    #[must_use]
    pub fn new() -> Self {
        Self::with_retention(DEFAULT_RETENTION)
    }

    /// An empty store keeping records for `retention` after their execution started.
    #[must_use]
    pub fn with_retention(retention: Duration) -> Self {
        Self::with_limits(retention, DEFAULT_MAX_RECORDS)
    }

    /// An empty store keeping records for `retention`, and at most `max_records` keys (at
    /// least one).
    #[must_use]
    pub fn with_limits(retention: Duration, max_records: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                retention,
                max_records: max_records.max(1),
                state: Mutex::new(State {
                    entries: HashMap::new(),
                    next_id: 0,
                    next_sweep: None,
                }),
            }),
        }
    }

    /// How long records are kept.
    #[must_use]
    pub fn retention(&self) -> Duration {
        self.inner.retention
    }

    /// How many keys are reserved or recorded (expired records not yet purged included).
    #[must_use]
    pub fn len(&self) -> usize {
        self.inner.state().entries.len()
    }

    /// Whether no key is reserved or recorded.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        // Every update under this lock is one map operation, so a poisoned lock still holds
        // consistent state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn reserve(
        &self,
        key: ScopedKey,
        fingerprint: Fingerprint,
    ) -> Result<Reservation, HarnessError> {
        let now = Instant::now();
        let mut state = self.state();
        if state.next_sweep.is_none_or(|at| at <= now) {
            state.entries.retain(|_, entry| !entry.expired(now));
            state.next_sweep = now.checked_add(self.retention);
        }
        match state.entries.get(&key) {
            Some(entry) if entry.expired(now) => {}
            None => {}
            Some(Entry::Reserved {
                fingerprint: held,
                ended,
                ..
            }) => {
                if *held != fingerprint {
                    return Ok(Reservation::Conflict { adapter: None });
                }
                let mut ended = ended.subscribe();
                return Ok(Reservation::InFlight(InFlight::new(async move {
                    // Nothing is ever sent: this resolves with `Err` once the sender is
                    // dropped, that is when the reservation ends.
                    while ended.changed().await.is_ok() {}
                })));
            }
            Some(Entry::Recorded {
                fingerprint: recorded,
                execution,
                ..
            }) => {
                if *recorded != fingerprint {
                    return Ok(Reservation::Conflict {
                        adapter: Some(execution.adapter().clone()),
                    });
                }
                return Ok(Reservation::Existing(execution.upgrade()));
            }
        }
        if !state.entries.contains_key(&key) && state.entries.len() >= self.max_records {
            state.entries.retain(|_, entry| !entry.expired(now));
            if state.entries.len() >= self.max_records && !evict_oldest_ended(&mut state) {
                return Err(full(self.max_records));
            }
        }
        state.next_id += 1;
        let id = ReservationId(state.next_id);
        let (ended, _) = watch::channel(());
        state.entries.insert(
            key,
            Entry::Reserved {
                id,
                fingerprint,
                ended,
            },
        );
        Ok(Reservation::Reserved(id))
    }

    fn complete(
        &self,
        key: ScopedKey,
        id: ReservationId,
        execution: &ExecutionHandle,
    ) -> Result<(), HarnessError> {
        let expires = Instant::now().checked_add(self.retention);
        let mut state = self.state();
        let fingerprint = match state.entries.get(&key) {
            Some(Entry::Reserved {
                id: held,
                fingerprint,
                ..
            }) if *held == id => *fingerprint,
            _ => return Err(lost(&key)),
        };
        // Replacing the entry drops its sender: the waiters wake and find the record.
        state.entries.insert(
            key,
            Entry::Recorded {
                fingerprint,
                execution: execution.downgrade(),
                recorded: Instant::now(),
                expires,
            },
        );
        Ok(())
    }

    fn release(&self, key: &ScopedKey, id: ReservationId) {
        let mut state = self.state();
        if matches!(state.entries.get(key), Some(Entry::Reserved { id: held, .. }) if *held == id) {
            // Removing the entry drops its sender: the waiters wake and one takes the key over.
            let _released = state.entries.remove(key);
        }
    }

    fn purge_expired(&self) -> usize {
        let now = Instant::now();
        let mut state = self.state();
        let before = state.entries.len();
        state.entries.retain(|_, entry| !entry.expired(now));
        before - state.entries.len()
    }
}

/// Removes the oldest record whose execution has ended; `false` if there is none.
fn evict_oldest_ended(state: &mut State) -> bool {
    let oldest = state
        .entries
        .iter()
        .filter_map(|(key, entry)| match entry {
            Entry::Recorded {
                execution,
                recorded,
                ..
            } if execution.state().is_terminal() => Some((*recorded, key)),
            _ => None,
        })
        .min_by_key(|(recorded, _)| *recorded)
        .map(|(_, key)| key.clone());
    oldest.is_some_and(|key| state.entries.remove(&key).is_some())
}

fn full(max: usize) -> HarnessError {
    HarnessError::new(
        ErrorCategory::Capacity,
        format!(
            "the idempotency store holds its {max} keys and none of their executions has \
             ended; retry later, or send the request without an idempotency key"
        ),
    )
    .with_code(ErrorCode::IDEMPOTENCY_STORE_FULL)
    .with_retry_after(Duration::from_secs(1))
}

fn lost(key: &ScopedKey) -> HarnessError {
    HarnessError::new(
        ErrorCategory::Internal,
        "an idempotency reservation was lost before its execution was recorded",
    )
    .with_diagnostic(format!("no reservation held for key `{key}`"))
}

impl IdempotencyStore for InMemoryIdempotencyStore {
    fn reserve(
        &self,
        key: ScopedKey,
        fingerprint: Fingerprint,
    ) -> BoxFuture<'static, Result<Reservation, HarnessError>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move { inner.reserve(key, fingerprint) })
    }

    fn complete(
        &self,
        key: ScopedKey,
        id: ReservationId,
        execution: ExecutionHandle,
    ) -> BoxFuture<'static, Result<(), HarnessError>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move { inner.complete(key, id, &execution) })
    }

    fn release(&self, key: &ScopedKey, id: ReservationId) {
        self.inner.release(key, id);
    }

    fn purge_expired(&self) -> BoxFuture<'static, Result<usize, HarnessError>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move { Ok(inner.purge_expired()) })
    }
}

impl fmt::Debug for InMemoryIdempotencyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.inner.state();
        let reserved = state
            .entries
            .values()
            .filter(|e| matches!(e, Entry::Reserved { .. }))
            .count();
        f.debug_struct("InMemoryIdempotencyStore")
            .field("retention", &self.inner.retention)
            .field("max_records", &self.inner.max_records)
            .field("reserved", &reserved)
            .field("recorded", &(state.entries.len() - reserved))
            .finish()
    }
}
