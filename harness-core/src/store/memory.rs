//! [`MemoryStore`]: the store in this process's memory.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::watch;

use super::execution::{
    Created, ExecutionRecord, ExecutionStore, FencingToken, Lease, Listed, ReplicaId, Resolution,
    StoreError, Tail, check_batch,
};
use crate::event::Event;
use crate::id::{ActionId, Cursor, ExecutionId, IdempotencyKey};
use crate::time::Timestamp;

/// The [`ExecutionStore`] in memory: for tests, the quickstart and one process that needs no
/// durability (a restart loses everything). Clones share the store.
///
/// ```
/// use std::time::Duration;
/// use harness_core::event::{Event, EventPayload};
/// use harness_core::id::{Cursor, ExecutionId, Sequence};
/// use harness_core::store::{ExecutionRecord, ExecutionStore, MemoryStore, ReplicaId};
/// use harness_core::time::Timestamp;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// let id = ExecutionId::generate();
/// store.create(ExecutionRecord::new(id.clone(), "scripted", "fp", serde_json::json!({}))).await?;
/// let lease = store.acquire(&id, &ReplicaId::new("a"), Duration::from_secs(30)).await?;
/// let queued = Event::new(id.clone(), Sequence::FIRST, Timestamp::now(), EventPayload::RunQueued);
/// store.append(&lease, &[queued]).await?;
/// assert_eq!(store.read(&id, Cursor::START, 10).await?.len(), 1);
///
/// // Another replica cannot take the lease while it is held...
/// assert!(store.acquire(&id, &ReplicaId::new("b"), Duration::from_secs(30)).await.is_err());
/// # Ok::<(), harness_core::store::StoreError>(())
/// # }).unwrap();
/// ```
#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
    /// Conversations' thread state, next to the executions (as the durable stores keep it).
    state: crate::session::InMemoryThreadStateStore,
}

#[derive(Default)]
struct Inner {
    executions: HashMap<ExecutionId, Entry>,
    /// (principal, key) → execution.
    keys: HashMap<(String, IdempotencyKey), ExecutionId>,
    /// Creation order (position → execution), for [`ExecutionStore::unfinished`] and
    /// [`ExecutionStore::list`].
    order: BTreeMap<u64, ExecutionId>,
    /// The last position handed out.
    last_position: u64,
}

struct Entry {
    record: ExecutionRecord,
    /// Shared with the logs that appended them (see [`ExecutionStore::append_shared`]).
    events: Vec<Arc<Event>>,
    ended: bool,
    lease: Option<Lease>,
    /// The last token handed out (0: none yet).
    token: u64,
    resolutions: HashMap<ActionId, Resolution>,
    tail: watch::Sender<u64>,
}

impl MemoryStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves no half-applied write: each write checks
        // everything before it changes anything.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn with<T>(
        &self,
        id: &ExecutionId,
        f: impl FnOnce(&mut Entry) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut inner = self.lock();
        let entry = inner
            .executions
            .get_mut(id)
            .ok_or_else(|| StoreError::NotFound(id.clone()))?;
        f(entry)
    }

    /// Appends one batch, keeping each event as `share` makes it.
    fn append_with<E: std::borrow::Borrow<Event>>(
        &self,
        lease: &Lease,
        events: &[E],
        share: impl Fn(&E) -> Arc<Event>,
    ) -> Result<(), StoreError> {
        self.with(&lease.execution_id, |entry| {
            current(entry, lease, Timestamp::now())?;
            let last = entry.events.last().map_or(0, |e| e.seq().get());
            let (state, ends) = check_batch(&lease.execution_id, last, entry.ended, events)?;
            entry.events.extend(events.iter().map(share));
            if let Some(state) = state {
                entry.record.state = state;
            }
            entry.ended |= ends;
            let last = entry.events.last().map_or(0, |e| e.seq().get());
            entry.tail.send_replace(last);
            Ok(())
        })
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("executions", &self.lock().executions.len())
            .finish()
    }
}

/// Whether `lease` is the current, unexpired lease of `entry`.
fn current(entry: &Entry, lease: &Lease, now: Timestamp) -> Result<(), StoreError> {
    let fenced = || StoreError::Fenced {
        execution: lease.execution_id.clone(),
        presented: lease.token,
        current: FencingToken::new(entry.token),
    };
    match &entry.lease {
        Some(held) if held.token == lease.token && held.owner == lease.owner => {
            if held.expires_at <= now {
                Err(fenced())
            } else {
                Ok(())
            }
        }
        _ => Err(fenced()),
    }
}

fn expires(ttl: Duration) -> Timestamp {
    let now = Timestamp::now();
    let millis = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    Timestamp::from_millis(now.as_millis().saturating_add(millis)).unwrap_or(now)
}

impl ExecutionStore for MemoryStore {
    fn create(&self, record: ExecutionRecord) -> BoxFuture<'_, Result<Created, StoreError>> {
        let result = (|| {
            let mut inner = self.lock();
            if inner.executions.contains_key(&record.id) {
                return Err(StoreError::Exists(record.id.clone()));
            }
            if let Some(key) = &record.idempotency_key {
                let scoped = (record.principal.clone(), key.clone());
                if let Some(existing) = inner.keys.get(&scoped) {
                    let first = &inner.executions[existing].record;
                    return if first.fingerprint == record.fingerprint {
                        Ok(Created::Existing(Box::new(first.clone())))
                    } else {
                        Err(StoreError::IdempotencyConflict {
                            key: key.clone(),
                            existing: existing.clone(),
                        })
                    };
                }
                inner.keys.insert(scoped, record.id.clone());
            }
            inner.last_position += 1;
            let position = inner.last_position;
            inner.order.insert(position, record.id.clone());
            inner.executions.insert(
                record.id.clone(),
                Entry {
                    record,
                    events: Vec::new(),
                    ended: false,
                    lease: None,
                    token: 0,
                    resolutions: HashMap::new(),
                    tail: watch::Sender::new(0),
                },
            );
            Ok(Created::New)
        })();
        Box::pin(async move { result })
    }

    fn record<'a>(
        &'a self,
        id: &'a ExecutionId,
    ) -> BoxFuture<'a, Result<ExecutionRecord, StoreError>> {
        let result = self.with(id, |e| Ok(e.record.clone()));
        Box::pin(async move { result })
    }

    fn unfinished(&self) -> BoxFuture<'_, Result<Vec<ExecutionRecord>, StoreError>> {
        let inner = self.lock();
        let records = inner
            .order
            .values()
            .filter_map(|id| inner.executions.get(id))
            .filter(|e| !e.ended)
            .map(|e| e.record.clone())
            .collect();
        Box::pin(async move { Ok(records) })
    }

    fn list<'a>(
        &'a self,
        principal: &'a str,
        before: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Listed>, StoreError>> {
        let inner = self.lock();
        let page = inner
            .order
            .range(..before.unwrap_or(u64::MAX))
            .rev()
            .filter_map(|(&position, id)| {
                let record = &inner.executions.get(id)?.record;
                (record.principal == principal).then(|| Listed {
                    position,
                    record: record.clone(),
                })
            })
            .take(limit)
            .collect();
        Box::pin(async move { Ok(page) })
    }

    fn acquire<'a>(
        &'a self,
        id: &'a ExecutionId,
        owner: &'a ReplicaId,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Lease, StoreError>> {
        let result = self.with(id, |entry| {
            let now = Timestamp::now();
            let token = match &entry.lease {
                Some(held) if held.owner == *owner && held.expires_at > now => held.token,
                Some(held) if held.expires_at > now => {
                    return Err(StoreError::Leased {
                        execution: id.clone(),
                        owner: held.owner.clone(),
                        until: held.expires_at,
                    });
                }
                _ => {
                    entry.token += 1;
                    FencingToken::new(entry.token)
                }
            };
            let lease = Lease {
                execution_id: id.clone(),
                owner: owner.clone(),
                token,
                expires_at: expires(ttl),
            };
            entry.lease = Some(lease.clone());
            Ok(lease)
        });
        Box::pin(async move { result })
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        let result = self.with(&lease.execution_id, |entry| {
            current(entry, lease, Timestamp::now())?;
            entry.lease = None;
            Ok(())
        });
        Box::pin(async move { result })
    }

    fn append<'a>(
        &'a self,
        lease: &'a Lease,
        events: &'a [Event],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let result = self.append_with(lease, events, |e| Arc::new(e.clone()));
        Box::pin(async move { result })
    }

    fn append_shared<'a>(
        &'a self,
        lease: &'a Lease,
        events: &'a [Arc<Event>],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let result = self.append_with(lease, events, Arc::clone);
        Box::pin(async move { result })
    }

    fn read<'a>(
        &'a self,
        id: &'a ExecutionId,
        after: Cursor,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Event>, StoreError>> {
        let result = self.with(id, |entry| {
            // Sequence numbers are contiguous from 1: event n is at index n - 1.
            let start = usize::try_from(after.after())
                .unwrap_or(usize::MAX)
                .min(entry.events.len());
            let end = start.saturating_add(limit).min(entry.events.len());
            Ok(entry.events[start..end]
                .iter()
                .map(|e| Event::clone(e))
                .collect())
        });
        Box::pin(async move { result })
    }

    fn tail<'a>(&'a self, id: &'a ExecutionId) -> BoxFuture<'a, Result<Tail, StoreError>> {
        let result = self.with(id, |entry| Ok(Tail::new(entry.tail.subscribe())));
        Box::pin(async move { result })
    }

    fn resolve<'a>(
        &'a self,
        id: &'a ExecutionId,
        resolution: Resolution,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let result = self.with(id, |entry| {
            if entry.resolutions.contains_key(&resolution.action_id) {
                return Err(StoreError::AlreadyResolved {
                    execution: id.clone(),
                    action: resolution.action_id,
                });
            }
            entry
                .resolutions
                .insert(resolution.action_id.clone(), resolution);
            // Wakes the owner, which watches the tail.
            entry.tail.send_modify(|_| {});
            Ok(())
        });
        Box::pin(async move { result })
    }

    fn resolution<'a>(
        &'a self,
        id: &'a ExecutionId,
        action: &'a ActionId,
    ) -> BoxFuture<'a, Result<Option<Resolution>, StoreError>> {
        let result = self.with(id, |entry| Ok(entry.resolutions.get(action).cloned()));
        Box::pin(async move { result })
    }

    fn request_cancel<'a>(
        &'a self,
        id: &'a ExecutionId,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let result = self.with(id, |entry| {
            if entry.record.cancel_requested.is_some() {
                return Ok(false);
            }
            entry.record.cancel_requested = Some(reason.to_owned());
            entry.tail.send_modify(|_| {});
            Ok(true)
        });
        Box::pin(async move { result })
    }

    fn purge(
        &self,
        created_before: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        let mut inner = self.lock();
        let Inner {
            executions,
            keys,
            order,
            ..
        } = &mut *inner;
        let mut purged = 0;
        // Creation order: the oldest first.
        order.retain(|_, id| {
            if purged == limit {
                return true;
            }
            let Some(entry) = executions.get(id) else {
                return false;
            };
            if !entry.ended || entry.record.created_at >= created_before {
                return true;
            }
            if let Some(key) = &entry.record.idempotency_key {
                keys.remove(&(entry.record.principal.clone(), key.clone()));
            }
            executions.remove(id);
            purged += 1;
            false
        });
        Box::pin(async move { Ok(purged) })
    }
}

/// The thread state of conversations, in memory next to the executions: the same contract
/// as [`InMemoryThreadStateStore`](crate::session::InMemoryThreadStateStore), shared by
/// every replica over this store.
impl crate::session::ThreadStateStore for MemoryStore {
    fn get<'a>(
        &'a self,
        binding: &'a crate::session::SessionBinding,
        key: &'a crate::session::StateKey,
    ) -> crate::tool::BoxFuture<
        'a,
        Result<Option<crate::session::StateEntry>, crate::session::StateError>,
    > {
        self.state.get(binding, key)
    }

    fn put<'a>(
        &'a self,
        binding: &'a crate::session::SessionBinding,
        key: &'a crate::session::StateKey,
        value: Vec<u8>,
        expected: Option<crate::session::Version>,
    ) -> crate::tool::BoxFuture<'a, Result<crate::session::Version, crate::session::StateError>>
    {
        self.state.put(binding, key, value, expected)
    }

    fn delete<'a>(
        &'a self,
        binding: &'a crate::session::SessionBinding,
        key: &'a crate::session::StateKey,
        expected: crate::session::Version,
    ) -> crate::tool::BoxFuture<'a, Result<(), crate::session::StateError>> {
        self.state.delete(binding, key, expected)
    }

    fn list_keys<'a>(
        &'a self,
        binding: &'a crate::session::SessionBinding,
    ) -> crate::tool::BoxFuture<'a, Result<Vec<crate::session::StateKey>, crate::session::StateError>>
    {
        self.state.list_keys(binding)
    }

    fn clear<'a>(
        &'a self,
        binding: &'a crate::session::SessionBinding,
    ) -> crate::tool::BoxFuture<
        'a,
        Result<crate::session::SessionBinding, crate::session::StateError>,
    > {
        self.state.clear(binding)
    }
}
