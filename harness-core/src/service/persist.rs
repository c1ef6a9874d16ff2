//! Durable executions: the persister that writes an execution's log to the service's store,
//! and recovery of the executions a lost replica left unfinished.
//!
//! # What happens when a cancel or an answer is stored for an execution run here
//!
//! Whichever replica stored it, the owner's store watcher applies it as soon as the store's
//! [`Tail`](crate::store::Tail) wakes the watcher, at any moment of the execution's life: also
//! right after `start` returned, before the watcher's task has first run.
//!
//! # Decisions where the spec is silent
//!
//! - **No wake-up is left to the periodic re-check.** The watcher subscribes to the tail
//!   before it reads the store, and reads it before its first wait: a write before the
//!   subscription is found by that read, and one after it (even between a read and the wait
//!   that follows) wakes the wait, since the tail counts every change since it was taken.
//!   The re-check every third of the lease term stays, as a fallback only: for a store that
//!   cannot hand out a tail for now, or whose notifications stopped.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::handle::{Command, Shared};
use crate::action::ActionResponse;
use crate::error::{ErrorCategory, ErrorCode, HarnessError};
use crate::event::{CancelReason, Event, EventPayload, RunFailed};
use crate::id::{Cursor, ExecutionId};
use crate::log::LogReader;
use crate::state::ExecutionState;
use crate::store::{ExecutionStore, Lease, ReplicaId, StoreError, next_sequence};
use crate::time::Timestamp;

/// The most events one append carries. An append also carries at most the service's memory
/// window (a publish larger than the window would drop events a reader that was up to date
/// still needs): the default window allows this much. A store pays one sync per append, so a
/// stream that outruns the store catches up in appends this large: on SQLite, appends of
/// 32,768 streamed 1.17-1.19 million events/s where appends of 8,192 streamed 0.92 million.
const MAX_BATCH: usize = 32_768;

/// Where a service keeps its executions: the store, this replica's name, the lease term,
/// and how many stored events each execution's log keeps in memory.
#[derive(Clone)]
pub(crate) struct Durable {
    pub(crate) store: Arc<dyn ExecutionStore>,
    pub(crate) replica: ReplicaId,
    pub(crate) lease_ttl: Duration,
    pub(crate) window: usize,
    /// The executions this service runs, from their start (or takeover) until the store
    /// holds their end or fenced them off: recovery leaves them alone.
    pub(crate) live: Arc<std::sync::Mutex<std::collections::HashSet<ExecutionId>>>,
}

impl Durable {
    fn live(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<ExecutionId>> {
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Marks `id` as run here.
    pub(crate) fn hold(&self, id: &ExecutionId) {
        self.live().insert(id.clone());
    }

    /// Marks `id` as no longer run here.
    pub(crate) fn let_go(&self, id: &ExecutionId) {
        self.live().remove(id);
    }

    fn is_live(&self, id: &ExecutionId) -> bool {
        self.live().contains(id)
    }

    /// Marks `id` as run here unless it already is; whether it was not.
    fn claim(&self, id: &ExecutionId) -> bool {
        self.live().insert(id.clone())
    }
}

/// Gives a claim on an execution back when dropped, unless it runs here now
/// ([`keep`](Self::keep): its persister lets it go when it ends). A start or a recovery
/// dropped half-way (its caller gave up) so leaves nothing claimed.
pub(crate) struct ReleaseClaim<'a>(&'a Durable, Option<ExecutionId>);

impl<'a> ReleaseClaim<'a> {
    /// Claims `id` for this service (see [`Durable::hold`]).
    pub(crate) fn hold(durable: &'a Durable, id: &ExecutionId) -> Self {
        durable.hold(id);
        Self(durable, Some(id.clone()))
    }

    pub(crate) fn keep(mut self) {
        self.1 = None;
    }
}

impl Drop for ReleaseClaim<'_> {
    fn drop(&mut self) {
        if let Some(id) = &self.1 {
            self.0.let_go(id);
        }
    }
}

/// Backs the gated log of `id` by the store: it keeps the last `window` stored events in
/// memory, and readers behind them read pages from the store.
pub(crate) fn back(durable: &Durable, reader: &LogReader, id: &ExecutionId) {
    let store = Arc::clone(&durable.store);
    let id = id.clone();
    let source: crate::log::PageSource = Arc::new(move |after, limit| {
        let (store, id) = (Arc::clone(&store), id.clone());
        Box::pin(async move {
            store
                .read(&id, Cursor::after_seq(after), limit)
                .await
                .map_err(|e| e.to_string())
        })
    });
    reader.back(source, durable.window);
}

impl std::fmt::Debug for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable")
            .field("replica", &self.replica)
            .field("lease_ttl", &self.lease_ttl)
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

/// Writes every event of `reader`'s (gated) log to the store under `lease`, in batches of
/// what arrived during the previous write, and publishes each batch to the log's readers once
/// the store acknowledged it. Renews the lease while the execution lives (awaiting an answer
/// for hours included) and releases it after the terminal event.
///
/// When the store fences this replica (another one took the execution over), the local run
/// is cancelled and the gate lifted: local readers see the local end, the store keeps the
/// new owner's. When the store is unavailable or full, the batch is retried with backoff;
/// readers wait meanwhile (nothing unacknowledged is shown).
///
/// The first `stored` events of the log are the store's already (an execution taken over).
///
/// The channel from the log to this task is unbounded, but what it holds is the log's
/// unacknowledged events, which the driver bounds: it stops taking from the adapter while a
/// window of them waits ([`LogReader::backlogged`]).
pub(crate) fn spawn(durable: Durable, mut lease: Lease, shared: &Arc<Shared>, stored: usize) {
    let reader = shared.reader.clone();
    let cancel = shared.cancel.clone();
    watch_store(durable.clone(), Arc::clone(shared));
    let (tx, mut rx) = mpsc::unbounded_channel::<Arc<Event>>();
    // Dropped after the terminal event (or with the log): the channel then closes.
    reader.observe(Forward { tx, stored });
    let holder = durable.clone();
    let Durable {
        store,
        replica,
        lease_ttl,
        ..
    } = durable;
    let renew_every = lease_ttl / 3;
    let most = holder.window.min(MAX_BATCH);
    tokio::spawn(async move {
        // Whatever way this task ends, the execution is no longer run here.
        let _let_go = LetGo(holder, lease.execution_id.clone());
        let mut published = stored;
        let mut renewed = Instant::now();
        let mut batch: Vec<Arc<Event>> = Vec::new();
        let mut backoff = Duration::from_millis(20);
        // Whether the batch is being retried after an ambiguous failure.
        let mut retried = false;
        loop {
            if batch.is_empty() {
                match tokio::time::timeout(renew_every, rx.recv()).await {
                    Ok(Some(event)) => batch.push(event),
                    Ok(None) => break,
                    Err(_) => {}
                }
                while batch.len() < most {
                    match rx.try_recv() {
                        Ok(event) => batch.push(event),
                        Err(_) => break,
                    }
                }
            }
            if renewed.elapsed() >= renew_every {
                match store
                    .acquire(&lease.execution_id, &replica, lease_ttl)
                    .await
                {
                    Ok(renewal) if renewal.token == lease.token => {
                        lease = renewal;
                        renewed = Instant::now();
                    }
                    // The lease lapsed and another replica held it meanwhile (a new token):
                    // this one was fenced off, whatever the store now holds.
                    Ok(renewal) => {
                        let _ = store.release(&renewal).await;
                        let fenced = StoreError::Fenced {
                            execution: lease.execution_id.clone(),
                            presented: lease.token,
                            current: renewal.token,
                        };
                        lost(&fenced, &reader, &cancel);
                        return;
                    }
                    Err(e @ (StoreError::Unavailable(_) | StoreError::Full(_))) => {
                        tracing::warn!(error = %e, "could not renew the execution's lease");
                    }
                    Err(e) => {
                        lost(&e, &reader, &cancel);
                        return;
                    }
                }
            }
            if batch.is_empty() {
                continue;
            }
            let appended = match store.append_shared(&lease, &batch).await {
                // After an ambiguous failure (the store may have committed before its answer
                // was lost), a retry finds the batch already there: under our lease nobody
                // else appends, so the log continuing right after the batch means it is
                // stored.
                Err(StoreError::Sequence { expected, .. })
                    if retried
                        && batch
                            .last()
                            .is_some_and(|last| last.seq().get() + 1 == expected) =>
                {
                    Ok(())
                }
                other => other,
            };
            match appended {
                Ok(()) => {
                    retried = false;
                    backoff = Duration::from_millis(20);
                    published += batch.len();
                    let ended = batch.last().is_some_and(|e| e.kind().is_terminal());
                    batch.clear();
                    if ended {
                        // Released before the end is shown: whoever saw it finds it free.
                        let _ = store.release(&lease).await;
                        reader.publish(Some(published));
                        return;
                    }
                    reader.publish(Some(published));
                }
                // A full disk too: the execution pauses until space returns.
                Err(e @ (StoreError::Unavailable(_) | StoreError::Full(_))) => {
                    retried = true;
                    tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "the store refused a batch of events; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                Err(e) => {
                    lost(&e, &reader, &cancel);
                    return;
                }
            }
        }
    });
}

/// Hands the persister the log's events after the first `stored`, as the log shares them
/// (no copy of an event on the way to the store).
struct Forward {
    tx: mpsc::UnboundedSender<Arc<Event>>,
    stored: usize,
}

impl crate::log::LogObserver for Forward {
    fn on_event(&mut self, event: &Event) {
        self.on_shared(&Arc::new(event.clone()));
    }

    fn on_shared(&mut self, event: &Arc<Event>) {
        if event.seq().get() > self.stored as u64 {
            let _ = self.tx.send(Arc::clone(event));
        }
    }
}

/// Applies what other replicas recorded for this execution in the store: the first cancel
/// request, and the answer to the pending action (claimed there once, whichever replica
/// took it). Woken by the store's tail; ends with the execution.
///
/// No wake-up is lost, wherever a write lands. The tail is subscribed *before* each read of
/// the store, and a [`Tail`](crate::store::Tail) counts every change made after its
/// subscription (a `watch` version), so:
/// - a write before the subscription (this task may first run after a client cancelled,
///   right after `start`; a restored execution may have been cancelled or answered before
///   it was taken over) is found by the read that follows the subscription, before the first
///   wait;
/// - a write after it, even one landing between a read and the wait that follows it, makes
///   that wait return at once.
///
/// The re-check every third of the lease term is only the fallback for a store that cannot
/// hand out a tail for now (it is asked again then) or whose notifications stopped (a
/// PostgreSQL listening connection that broke); it is never the path a cancel takes.
fn watch_store(durable: Durable, shared: Arc<Shared>) {
    let Durable {
        store, lease_ttl, ..
    } = durable;
    let id = shared.id.clone();
    tokio::spawn(async move {
        let mut ended = std::pin::pin!(shared.reader.terminal());
        let mut seen = Seen::default();
        let mut tail: Option<crate::store::Tail> = None;
        loop {
            if tail.is_none() {
                tail = match store.tail(&id).await {
                    Ok(tail) => Some(tail),
                    Err(e) => {
                        tracing::warn!(error = %e, "could not watch the store for this execution's cancels and answers; checking every third of the lease term");
                        None
                    }
                };
            }
            seen.apply(&*store, &shared).await;
            let changed = async {
                match &mut tail {
                    Some(tail) => tail.changed().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = &mut ended => return,
                changed = changed => if !changed { return },
                () = tokio::time::sleep(lease_ttl / 3) => {}
            }
        }
    });
}

/// What the store watcher has applied already.
#[derive(Default)]
struct Seen {
    cancelled: bool,
    answered: Option<crate::id::ActionId>,
}

impl Seen {
    /// Reads the store and applies what is new: the cancel request, the pending answer.
    async fn apply(&mut self, store: &dyn ExecutionStore, shared: &Shared) {
        let id = &shared.id;
        if !self.cancelled
            && let Ok(record) = store.record(id).await
            && let Some(reason) = record.cancel_requested
        {
            self.cancelled = true;
            let _ = shared.request_cancel(CancelReason::new(reason));
        }
        let Some(pending) = shared.reader.pending_action() else {
            return;
        };
        if self.answered.as_ref() == Some(&pending.id) {
            return;
        }
        let Ok(Some(resolution)) = store.resolution(id, &pending.id).await else {
            return;
        };
        let Ok(response) = serde_json::from_value::<ActionResponse>(resolution.response) else {
            tracing::error!(action = %pending.id, "an answer in the store cannot be read back");
            return;
        };
        self.answered = Some(pending.id.clone());
        let (reply, _) = tokio::sync::oneshot::channel();
        let _ = shared.send(Command::Respond(Box::new((response, reply, true))));
    }
}

/// Takes an execution off the service's live set when dropped.
struct LetGo(Durable, ExecutionId);

impl Drop for LetGo {
    fn drop(&mut self) {
        self.0.let_go(&self.1);
    }
}

fn lost(error: &StoreError, reader: &LogReader, cancel: &CancellationToken) {
    tracing::error!(
        error = %error,
        "this replica lost the execution to the store (another replica owns it now); its run stops here"
    );
    cancel.cancel();
    reader.publish(None);
}

/// The error recovery ends an execution with when its owner was lost.
pub(crate) fn owner_lost() -> HarnessError {
    HarnessError::new(
        ErrorCategory::Unavailable,
        "the replica running this execution was lost before it ended",
    )
    .with_code(ErrorCode::OWNER_LOST)
    .with_retryable(true)
}

/// What [`AdapterService::recover`](super::AdapterService::recover) did with one execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// Ended with `run.failed` (`OWNER_LOST`): its owner was lost mid-run.
    Failed(ExecutionId),
    /// Ended with `run.cancelled`: a cancel had been requested (or begun).
    Cancelled(ExecutionId),
    /// Taken over while paused on an action: it awaits its answer on this replica, and the
    /// answer (sent to any replica) resumes it here.
    Restored(ExecutionId),
}

/// An unfinished execution paused on an action, taken over under a lease of this replica.
pub(crate) struct Paused {
    pub(crate) lease: Lease,
    pub(crate) record: crate::store::ExecutionRecord,
    pub(crate) events: Vec<Event>,
    pub(crate) pending: crate::action::ActionRequest,
}

/// Takes a paused execution over (see [`Paused`]); `Err` leaves it to be ended as lost.
pub(crate) type Restore<'a> = &'a (
        dyn Fn(Paused) -> futures_util::future::BoxFuture<'static, Result<(), HarnessError>> + Sync
    );

/// Ends the unfinished executions of `adapter` whose owner is gone (their lease is free or
/// lapsed), each with exactly one terminal event, written under a lease of this replica: those
/// held by a live replica are left alone, and of several replicas recovering at once, one
/// ends each execution (the lease decides).
///
/// With `restore`, an execution paused on an action is taken over instead: `restore` resumes
/// it here, under the lease recovery took.
pub(crate) async fn recover(
    durable: &Durable,
    adapter: &str,
    restore: Option<Restore<'_>>,
) -> Result<Vec<Recovery>, StoreError> {
    use futures_util::StreamExt;
    let store = &*durable.store;
    let (replica, ttl) = (&durable.replica, durable.lease_ttl);
    // This service's own executions are left alone; the others are taken under this
    // replica's lease (one that a previous process of the same replica held is taken at
    // once: that process is gone).
    let unfinished: Vec<_> = store
        .unfinished()
        .await?
        .into_iter()
        .filter(|record| record.adapter == adapter && !durable.is_live(&record.id))
        .collect();
    // Many at once: the store commits their writes together (group commit, pipelining).
    let mut ended = futures_util::stream::iter(unfinished)
        .map(|record| {
            async move {
                // Claimed for this service first: of two recoveries running at once on it
                // (same replica, same lease owner), one handles each execution.
                if !durable.claim(&record.id) {
                    return Ok(None);
                }
                let claimed = ReleaseClaim(durable, Some(record.id.clone()));
                let lease = match store.acquire(&record.id, replica, ttl).await {
                    Ok(lease) => lease,
                    Err(StoreError::Leased { .. }) => return Ok(None),
                    Err(e) => return Err(e),
                };
                let done = match settle(durable, lease.clone(), record.clone(), restore).await {
                    Ok(Settled::Restored) => {
                        claimed.keep();
                        return Ok(Some(Recovery::Restored(record.id)));
                    }
                    // Ended by this lease: nothing follows a terminal event, so the lease
                    // guards nothing any more and lapses by itself (one write saved).
                    Ok(Settled::Ended(Some(done))) => return Ok(Some(done)),
                    Ok(Settled::Ended(None)) => Ok(None),
                    // Another replica recovered it first, or a late append of the old owner
                    // raced.
                    Err(
                        StoreError::Ended(_)
                        | StoreError::Sequence { .. }
                        | StoreError::Fenced { .. },
                    ) => Ok(None),
                    Err(e) => Err(e),
                };
                let _ = store.release(&lease).await;
                done
            }
        })
        .buffer_unordered(RECOVERY_PARALLELISM);
    let mut recovered = Vec::new();
    while let Some(done) = ended.next().await {
        if let Some(done) = done? {
            recovered.push(done);
        }
    }
    Ok(recovered)
}

/// How many executions recovery handles at once: the store commits their writes together
/// (SQLite's group commit, PostgreSQL's pooled connections).
const RECOVERY_PARALLELISM: usize = 64;

/// What recovery did with one execution under its recovery lease.
enum Settled {
    /// Ended (`None`: it had ended already, or someone else ended it).
    Ended(Option<Recovery>),
    /// Taken over by this replica (the recovery lease is gone).
    Restored,
}

/// Ends the execution of `lease` as lost, or (with `restore`, when it is paused on an
/// action and no cancel was asked for) hands it to `restore` under a lease of `replica`.
///
/// `listed` is the record as `unfinished` listed it: its request does not change, and
/// whether it is still paused is read from the log under the lease (a cancel requested
/// after the listing reaches the restored execution from the store, as any remote cancel).
async fn settle(
    durable: &Durable,
    lease: Lease,
    listed: crate::store::ExecutionRecord,
    restore: Option<Restore<'_>>,
) -> Result<Settled, StoreError> {
    let store = &*durable.store;
    let id = &lease.execution_id;
    let awaiting = matches!(
        listed.state,
        ExecutionState::AwaitingInput | ExecutionState::AwaitingApproval
    ) && listed.cancel_requested.is_none();
    if let Some(restore) = restore.filter(|_| awaiting) {
        let record = listed;
        let events = read_all(store, id).await?;
        if events.last().is_some_and(|e| e.kind().is_terminal()) {
            return Ok(Settled::Ended(None));
        }
        if let Some(pending) = pending_of(&events) {
            let own = lease.clone();
            let paused = Paused {
                lease: own.clone(),
                record,
                events,
                pending,
            };
            match restore(paused).await {
                Ok(()) => return Ok(Settled::Restored),
                Err(e) => {
                    tracing::error!(execution = %id, error = %e, "a paused execution could not be taken over; it ends as lost");
                    let ended = end(store, &own, &store.record(id).await?).await;
                    return ended.map(Settled::Ended);
                }
            }
        }
    }
    // Ended as lost: with the record as it is now (a cancel requested meanwhile counts).
    let record = store.record(id).await?;
    end(store, &lease, &record).await.map(Settled::Ended)
}

/// Every stored event of `id`, in pages.
async fn read_all(store: &dyn ExecutionStore, id: &ExecutionId) -> Result<Vec<Event>, StoreError> {
    let mut events: Vec<Event> = Vec::new();
    loop {
        let after = events.last().map_or(0, |e| e.seq().get());
        let page = store.read(id, Cursor::after_seq(after), 1024).await?;
        if page.is_empty() {
            return Ok(events);
        }
        events.extend(page);
    }
}

/// The action a log leaves open, if any.
fn pending_of(events: &[Event]) -> Option<crate::action::ActionRequest> {
    let mut pending = None;
    for event in events {
        match event.payload() {
            EventPayload::ActionRequested(request) => pending = Some((**request).clone()),
            EventPayload::ActionResolved(_) | EventPayload::RunCancelling(_) => pending = None,
            _ => {}
        }
    }
    pending
}

/// Appends the one terminal event of an execution whose owner was lost.
async fn end(
    store: &dyn ExecutionStore,
    lease: &Lease,
    record: &crate::store::ExecutionRecord,
) -> Result<Option<Recovery>, StoreError> {
    let id = &lease.execution_id;
    // The last stored event: read from the end in pages (bounded memory, any log length).
    let mut last = 0u64;
    loop {
        let page = store.read(id, Cursor::after_seq(last), 1024).await?;
        match page.last() {
            Some(event) if event.kind().is_terminal() => return Ok(None),
            Some(event) => last = event.seq().get(),
            None => break,
        }
    }
    let cancelled = record.cancel_requested.is_some() || record.state == ExecutionState::Cancelling;
    let (payload, done) = if cancelled {
        let reason = record
            .cancel_requested
            .clone()
            .unwrap_or_else(|| "the cancel was requested before the owner was lost".to_owned());
        (
            EventPayload::RunCancelled(CancelReason::new(reason)),
            Recovery::Cancelled(id.clone()),
        )
    } else {
        (
            EventPayload::RunFailed(Box::new(RunFailed {
                error: owner_lost().public(),
            })),
            Recovery::Failed(id.clone()),
        )
    };
    let event = Event::new(id.clone(), next_sequence(last), Timestamp::now(), payload);
    store.append(lease, &[event]).await?;
    Ok(Some(done))
}

/// Where a stored execution stands, for an answer sent from any replica.
pub(crate) enum Stands {
    /// It has ended.
    Ended,
    /// It awaits this action.
    Awaiting(Box<crate::action::ActionRequest>),
    /// It awaits nothing (or is cancelling).
    Busy,
}

/// Reads `id`'s stored log (in pages) to see whether it awaits an action.
pub(crate) async fn stands(
    store: &dyn ExecutionStore,
    id: &ExecutionId,
) -> Result<Stands, StoreError> {
    let mut pending: Option<Box<crate::action::ActionRequest>> = None;
    let mut after = 0u64;
    loop {
        let page = store.read(id, Cursor::after_seq(after), 1024).await?;
        let Some(last) = page.last() else {
            break;
        };
        after = last.seq().get();
        for event in &page {
            match event.payload() {
                EventPayload::ActionRequested(request) => pending = Some(request.clone()),
                EventPayload::ActionResolved(_) | EventPayload::RunCancelling(_) => pending = None,
                _ if event.kind().is_terminal() => return Ok(Stands::Ended),
                _ => {}
            }
        }
    }
    Ok(pending.map_or(Stands::Busy, Stands::Awaiting))
}

/// A handle on a durable execution that another replica may run: its log mirrored from the
/// store (woken by the store's tail), its answers and cancels sent through the store (the
/// owner applies them). Dropping every handle stops the mirror, not the execution.
pub(crate) async fn attach(
    durable: &Durable,
    id: &ExecutionId,
    adapter: crate::id::AdapterId,
) -> Result<super::ExecutionHandle, StoreError> {
    use super::handle::Holders;
    let store = Arc::clone(&durable.store);
    store.record(id).await?;
    let mut tail = store.tail(id).await?;
    let log = crate::log::EventLog::new(id.clone());
    let shared = Arc::new(Shared::new(
        id.clone(),
        adapter,
        log.reader(),
        CancellationToken::new(),
    ));
    let handle = super::ExecutionHandle {
        holders: Arc::new(Holders(Arc::clone(&shared))),
        replay: false,
    };
    let weak = Arc::downgrade(&shared);
    let mirror_id = id.clone();
    let mirror_store = Arc::clone(&store);
    // The log: pages from the store, then each change the tail reports.
    tokio::spawn(async move {
        let mut after = 0u64;
        loop {
            match mirror_store
                .read(&mirror_id, Cursor::after_seq(after), 1024)
                .await
            {
                Ok(page) if !page.is_empty() => {
                    for event in page {
                        after = event.seq().get();
                        log.append_stored(event);
                    }
                    if log.is_closed() {
                        return;
                    }
                    continue;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "could not read a mirrored execution"),
            }
            if weak.strong_count() == 0 {
                return;
            }
            tokio::select! {
                woke = tail.after(Cursor::after_seq(after)) => if !woke { return },
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    });
    // Answers and cancels: through the store, to the owner.
    let commands = Arc::clone(&shared);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                command = commands.next_command() => {
                    let Some(Command::Respond(respond)) = command else { return };
                    let (response, reply, _) = *respond;
                    let answered = answer(&*store, &commands.id, response).await;
                    let _ = reply.send(answered);
                }
                () = commands.cancel.cancelled() => {
                    let reason = commands
                        .snapshot()
                        .cancel_reason
                        .as_ref()
                        .and_then(|r| r.reason.clone())
                        .unwrap_or_else(|| "cancelled from another replica".to_owned());
                    let _ = store.request_cancel(&commands.id, &reason).await;
                    // Further answers still go through.
                    while let Some(Command::Respond(respond)) = commands.next_command().await {
                        let (response, reply, _) = *respond;
                        let _ = reply.send(answer(&*store, &commands.id, response).await);
                    }
                    return;
                }
            }
        }
    });
    Ok(handle)
}

/// Checks `response` against the stored pending action of `id` and records it once.
pub(crate) async fn answer(
    store: &dyn ExecutionStore,
    id: &ExecutionId,
    response: ActionResponse,
) -> Result<(), HarnessError> {
    let stood = stands(store, id).await;
    if !matches!(stood, Ok(Stands::Awaiting(_))) {
        // A duplicate of an answer already recorded says so, whatever happened since (the
        // run resumed, or ended).
        match store.resolution(id, response.action_id()).await {
            Ok(Some(_)) => return Err(super::handle::already_resolved(response.action_id())),
            Ok(None) => {}
            Err(e) => return Err(e.to_harness_error()),
        }
    }
    let request = match stood {
        Ok(Stands::Awaiting(request)) => request,
        Ok(Stands::Ended) => {
            return Err(HarnessError::new(
                ErrorCategory::Configuration,
                "the execution has already ended",
            )
            .with_code(ErrorCode::EXECUTION_TERMINAL));
        }
        Ok(Stands::Busy) => return Err(super::handle::not_pending(response.action_id(), None)),
        Err(e) => return Err(e.to_harness_error()),
    };
    let action = response.action_id().clone();
    let json = serde_json::to_value(&response).unwrap_or_default();
    request.validate(response)?;
    let resolution = crate::store::Resolution {
        action_id: action.clone(),
        revision: u64::from(request.revision.get()),
        response: json,
        at: Timestamp::now(),
    };
    match store.resolve(id, resolution).await {
        Ok(()) => Ok(()),
        Err(StoreError::AlreadyResolved { .. }) => Err(super::handle::already_resolved(&action)),
        Err(e) => Err(e.to_harness_error()),
    }
}
