//! The pool of idle runtimes: a bound on the provider runtimes that executions paused on an
//! action keep alive while they wait for their answer.
//!
//! A runtime lives for one execution: the driver creates it for the first turn and cleans it
//! up when the execution ends, so between two turns of a conversation nothing of the provider
//! is held (its next turn reads what it kept from the thread state, on whichever replica
//! takes it). What can stay alive for long is the runtime of an execution *awaiting an
//! action*: an approval may come hours later, and ten thousand conversations waiting on one
//! would hold ten thousand runtimes (agent processes, HTTP clients, transcripts). The pool
//! bounds them ([`RuntimePoolConfig`], in [`ServiceConfig::runtime_pool`](super::ServiceConfig::runtime_pool)):
//!
//! - **a cap**: at most [`max_idle`](RuntimePoolConfig::max_idle) paused runtimes of the
//!   service stay alive; one more pushes out the one that has waited longest (least
//!   recently used out);
//! - **an idle timeout**: a runtime paused for [`idle_timeout`](RuntimePoolConfig::idle_timeout)
//!   is let go whatever the count.
//!
//! # What happens when a paused runtime is evicted
//!
//! The driver cleans the runtime up (bounded by the cleanup deadline, as at the end of a run)
//! and keeps waiting: the execution stays `awaiting_input` or `awaiting_approval`, its action
//! open, its log and handles untouched; nothing is appended. The answer (sent to any replica
//! of a durable service; accepted once, as always) resumes it on a fresh runtime, which first
//! restores the pause from durable state
//! ([`HarnessRuntime::restore`](crate::adapter::HarnessRuntime::restore): the execution's log
//! up to the pause, read back from the store when the memory window dropped it, and the
//! answers before it), then gets the decision as any resume. A runtime that cannot restore
//! fails the run as a runtime that cannot resume would (the adapter's error, after cleanup).
//!
//! # Decisions where the spec is silent
//!
//! - Only an adapter whose descriptor declares `runtime.eviction_recovery` usable has its
//!   paused runtimes pooled: evicting any other would lose the pause (an ACP agent's
//!   permission request belongs to its process). Their runtimes stay alive until answered,
//!   as before; the capacity layer bounds how many executions run at once.
//! - The pool is per service (one adapter instance): instances do not push each other's
//!   runtimes out.
//! - A runtime is idle only while its execution awaits an action; a running one is never
//!   evicted (its provider is working), and a finished turn's runtime is cleaned up at once.
//! - An execution taken over from another replica while paused holds no runtime until its
//!   answer comes: there is nothing to pool.
//! - A runtime whose pause could not be taken over now says so
//!   ([`HarnessRuntime::restorable`](crate::adapter::HarnessRuntime::restorable): the model
//!   loop for an execution without a conversation, whose pause has nowhere to be kept): when
//!   the pool would evict it, it is taken out of the pool instead and stays alive until
//!   answered. Only what can be restored is ever let go.
//! - `max_idle` 0 is allowed: every pause lets its runtime go at once (the smallest memory,
//!   a restore per answer).
//! - A conversation cleared ([`clear_session`](super::AdapterService::clear_session)) while
//!   its pause was evicted: the fresh runtime holds the old epoch's thread state, which is
//!   fenced, so a restore that reads it fails the run `persistence` (`STATE_EPOCH_STALE`), as
//!   a live runtime's next read would.
//! - The answers before the pause are kept by the driver (in memory, as the log is) and
//!   handed to the restoring runtime; the log is read back only when the answer comes, so an
//!   evicted execution holds no second copy of it.
//! - Cancelling an evicted execution calls no cancel hook or cleanup: its runtime was
//!   cleaned up already, and there is no other.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;

/// The default [`RuntimePoolConfig::max_idle`].
pub const DEFAULT_MAX_IDLE_RUNTIMES: usize = 256;

/// The default [`RuntimePoolConfig::idle_timeout`].
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// How many paused runtimes a service keeps alive, and for how long; see the
/// [module docs](self).
///
/// ```
/// use std::time::Duration;
/// use harness_core::service::{RuntimePoolConfig, ServiceConfig};
///
/// let config = ServiceConfig {
///     runtime_pool: RuntimePoolConfig::new(64, Duration::from_secs(60)),
///     ..ServiceConfig::default()
/// };
/// assert_eq!(config.runtime_pool.max_idle, 64);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimePoolConfig {
    /// The most paused runtimes kept alive at once; one more evicts the one paused longest.
    pub max_idle: usize,
    /// How long a paused runtime is kept alive before it is evicted.
    pub idle_timeout: Duration,
}

impl RuntimePoolConfig {
    /// A pool of at most `max_idle` paused runtimes, each kept at most `idle_timeout`.
    #[must_use]
    pub const fn new(max_idle: usize, idle_timeout: Duration) -> Self {
        Self {
            max_idle,
            idle_timeout,
        }
    }

    /// No bound: every paused runtime stays alive until its answer (what a service did
    /// before the pool; for comparisons).
    #[must_use]
    pub const fn unbounded() -> Self {
        Self {
            max_idle: usize::MAX,
            idle_timeout: Duration::MAX,
        }
    }
}

impl Default for RuntimePoolConfig {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_IDLE_RUNTIMES, DEFAULT_IDLE_TIMEOUT)
    }
}

/// What a service's pool holds now and has done ([`AdapterService::runtime_pool`]).
///
/// [`AdapterService::runtime_pool`]: super::AdapterService::runtime_pool
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuntimePoolStats {
    /// Paused runtimes alive now (at most the configured `max_idle`).
    pub idle: usize,
    /// Paused runtimes evicted since the service was built (by the cap or the timeout).
    pub evictions: u64,
}

/// Whether the runtimes of the adapter `descriptor` describes may be evicted while paused:
/// it declares `runtime.eviction_recovery` usable (it restores a pause on a fresh runtime).
pub(crate) fn evictable(descriptor: &crate::manifest::HarnessDescriptor) -> bool {
    descriptor
        .capabilities()
        .level(crate::capability::CapabilityKey::RuntimeEvictionRecovery)
        .is_usable()
}

/// The pool: paused runtimes in the order they paused.
pub(crate) struct Pool {
    config: RuntimePoolConfig,
    state: Mutex<State>,
    evictions: AtomicU64,
}

#[derive(Default)]
struct State {
    next: u64,
    /// By the order they went idle: the first is the least recently used.
    idle: BTreeMap<u64, oneshot::Sender<()>>,
}

impl Pool {
    pub(crate) fn new(config: RuntimePoolConfig) -> Self {
        Self {
            config,
            state: Mutex::new(State::default()),
            evictions: AtomicU64::new(0),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update is a map insert or remove: a poisoned lock still holds a consistent map.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Enters a runtime that just paused; the runtimes paused longest are told to go when
    /// that makes one too many.
    pub(crate) fn enter(self: &Arc<Self>) -> Idle {
        let (tx, rx) = oneshot::channel();
        let mut state = self.state();
        let key = state.next;
        state.next += 1;
        state.idle.insert(key, tx);
        while state.idle.len() > self.config.max_idle {
            if let Some((_, out)) = state.idle.pop_first() {
                // A receiver already gone left on its own (answered meanwhile).
                let _ = out.send(());
            }
        }
        drop(state);
        Idle {
            pool: Arc::clone(self),
            key,
            evict: rx,
            until: tokio::time::Instant::now()
                .checked_add(self.config.idle_timeout)
                .map(|at| Box::pin(tokio::time::sleep_until(at))),
        }
    }

    /// Counts one paused runtime let go.
    pub(crate) fn evicted_one(&self) {
        self.evictions.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn stats(&self) -> RuntimePoolStats {
        RuntimePoolStats {
            idle: self.state().idle.len(),
            evictions: self.evictions.load(Ordering::Relaxed),
        }
    }
}

/// A paused runtime's place in the pool; dropping it (the answer came, the run was
/// cancelled) takes it out.
pub(crate) struct Idle {
    pool: Arc<Pool>,
    key: u64,
    evict: oneshot::Receiver<()>,
    /// The idle timeout (none when it is too far to represent).
    until: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl Idle {
    /// Completes when the runtime must go: pushed out by a newer one, or idle too long.
    pub(crate) async fn evicted(&mut self) {
        let timeout = async {
            match self.until.as_mut() {
                Some(sleep) => sleep.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            // A closed sender is only the pool's drop: never while the service lives.
            _ = &mut self.evict => {}
            () = timeout => {}
        }
    }
}

impl Drop for Idle {
    fn drop(&mut self) {
        self.pool.state().idle.remove(&self.key);
    }
}
