//! The append-only event log of one execution.
//!
//! There is exactly one writer, [`EventLog`] (not `Clone`), owned by whoever drives the
//! execution; any number of [`LogReader`]s (cheap to clone) replay from a [`Cursor`] and then
//! follow the live tail as a [`Stream`].
//!
//! Invariants the log enforces on every append, whatever the caller does:
//! - sequence numbers are contiguous and strictly increasing from 1 (the log assigns them);
//! - exactly one terminal event, and nothing after it ([`AppendError::Closed`]);
//! - artifact ids are unique with exactly one `artifact.created` each, owned by this
//!   execution ([`AppendError::DuplicateArtifact`], [`AppendError::ForeignArtifact`]).
//!
//! Events are stored once and shared (`Arc<Event>`), so readers never copy payloads and the
//! writer never waits for a reader: a slow reader only falls behind, it neither blocks the
//! writer nor loses an event. Code that must act *as* events are appended, or at the end of
//! an execution, without a task of its own registers an observer ([`LogReader::observe`]:
//! the writer calls it right after each append and drops it after the terminal event) or,
//! when only the end matters, a terminal hook ([`LogReader::on_terminal`]: called once, and
//! nothing per event). Which lifecycle transitions are legal is not the log's business:
//! the typestate [`lifecycle`](crate::lifecycle) makes illegal ones unrepresentable.
//!
//! What stays in memory:
//! - a log without a store (in-process use) holds every event until it is dropped (the
//!   service's `max_events` bounds it);
//! - the log of a durable execution (the service backs it by its store) holds the last
//!   memory window of stored events (whole chunks of 1,024 are dropped once the store has
//!   them), plus at most a window the store has not acknowledged yet: the service's driver
//!   waits for the store before it takes more from the adapter (backpressure), so a stream
//!   faster than its store never piles up. A reader behind the window reads pages from
//!   the store;
//! - once a durable execution's end is stored, its log keeps only its last chunk (at most
//!   1,024 events: the terminal event among them; the state, pending action and artifact
//!   list are derived as they are appended), however long the execution was and however
//!   long its handle is held.
//!
//! ```
//! use futures_util::StreamExt;
//! use harness_core::event::{EventPayload, RunSucceeded, TextDelta};
//! use harness_core::id::{Cursor, ExecutionId};
//! use harness_core::log::EventLog;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let log = EventLog::new(ExecutionId::generate());
//! let reader = log.reader();
//! let tail = tokio::spawn(reader.subscribe(Cursor::START).map(|e| e.kind()).collect::<Vec<_>>());
//!
//! log.append(EventPayload::RunQueued).unwrap();
//! log.append(EventPayload::MessageDelta(TextDelta::new("hi"))).unwrap();
//! log.append(EventPayload::RunSucceeded(RunSucceeded::default())).unwrap();
//! assert!(log.append(EventPayload::RunQueued).is_err()); // nothing after the terminal event
//!
//! let kinds = tail.await.unwrap();
//! assert_eq!(kinds.len(), 3);
//! // A reconnecting reader passes the last sequence it saw.
//! let replay: Vec<_> = reader.subscribe(Cursor::after_seq(2)).collect().await;
//! assert_eq!(replay[0].seq().get(), 3);
//! # });
//! ```

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use futures_core::Stream;

use crate::action::ActionRequest;
use crate::artifact::ArtifactDescriptor;
use crate::event::{Content, Event, EventPayload};
use crate::id::{ArtifactId, Cursor, ExecutionId, Sequence};
use crate::state::ExecutionState;
use crate::time::Timestamp;

/// An append was refused; the log is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    /// The log already holds its terminal event.
    #[error(
        "execution {execution_id} already ended at event #{terminal_seq}; nothing may follow the terminal event"
    )]
    Closed {
        /// The execution.
        execution_id: ExecutionId,
        /// The sequence of the terminal event.
        terminal_seq: Sequence,
    },
    /// An artifact with this id was already created.
    #[error(
        "artifact {artifact_id} was already created in execution {execution_id}; artifact ids are unique per execution"
    )]
    DuplicateArtifact {
        /// The execution.
        execution_id: ExecutionId,
        /// The repeated id.
        artifact_id: ArtifactId,
    },
    /// The artifact names another execution as its owner.
    #[error("artifact {artifact_id} is owned by execution {owner}, not {execution_id}")]
    ForeignArtifact {
        /// The execution whose log was appended to.
        execution_id: ExecutionId,
        /// The artifact.
        artifact_id: ArtifactId,
        /// The execution the descriptor names.
        owner: ExecutionId,
    },
}

/// The stored events, in fixed-size chunks: appending never moves or copies what is stored
/// (a long execution would otherwise re-copy its whole index each time the vector doubles).
///
/// A log backed by a store may drop its oldest whole chunks ([`Events::trim`]); indexes stay
/// those of the whole log, and what was dropped is read back from the store.
#[derive(Default)]
struct Events {
    chunks: std::collections::VecDeque<Vec<Arc<Event>>>,
    /// Events ever pushed (held or dropped).
    len: usize,
    /// Events dropped from the front (a multiple of [`CHUNK`]).
    dropped: usize,
}

const CHUNK: usize = 1024;

impl Events {
    fn len(&self) -> usize {
        self.len
    }

    /// The index of the first event held.
    fn first_held(&self) -> usize {
        self.dropped
    }

    fn push(&mut self, event: Arc<Event>) {
        match self.chunks.back_mut() {
            Some(chunk) if chunk.len() < CHUNK => chunk.push(event),
            _ => {
                // The first chunk grows as usual, so a short execution holds a short index;
                // only long ones take whole chunks.
                let mut chunk = if self.chunks.is_empty() {
                    Vec::new()
                } else {
                    Vec::with_capacity(CHUNK)
                };
                chunk.push(event);
                self.chunks.push_back(chunk);
            }
        }
        self.len += 1;
    }

    /// Drops the whole chunks that end at or before `upto` (never the last one).
    fn trim(&mut self, upto: usize) {
        while self.chunks.len() > 1
            && self.chunks.front().is_some_and(|c| c.len() == CHUNK)
            && self.dropped + CHUNK <= upto
        {
            self.chunks.pop_front();
            self.dropped += CHUNK;
        }
    }

    fn last(&self) -> Option<&Arc<Event>> {
        self.chunks.back()?.last()
    }

    /// The held events from `from` on, at most `max` of them, as one slice per chunk
    /// touched (from the first held one when `from` was dropped).
    fn slices(&self, from: usize, max: usize) -> impl Iterator<Item = &[Arc<Event>]> {
        let end = self.len.min(from.saturating_add(max));
        let mut next = from.max(self.dropped);
        std::iter::from_fn(move || {
            if next >= end {
                return None;
            }
            let offset = next - self.dropped;
            let chunk = self.chunks.get(offset / CHUNK)?;
            let start = offset % CHUNK;
            let stop = chunk.len().min(start + (end - next));
            let slice = chunk.get(start..stop).filter(|s| !s.is_empty())?;
            next += slice.len();
            Some(slice)
        })
    }

    /// The held events from `from` on, at most `max` of them, in order.
    fn range(&self, from: usize, max: usize) -> impl Iterator<Item = &Arc<Event>> {
        self.slices(from, max).flatten()
    }
}

/// Reads a page of a log's events from its store: those after sequence `after`, at most
/// `limit`. Retried by the reader until it succeeds.
pub(crate) type PageSource = Arc<
    dyn Fn(u64, usize) -> futures_util::future::BoxFuture<'static, Result<Vec<Event>, String>>
        + Send
        + Sync,
>;

/// Where a trimmed log's dropped events are, and how many published events it holds.
#[derive(Clone)]
pub(crate) struct Backing {
    pub(crate) source: PageSource,
    pub(crate) window: usize,
}

struct State {
    events: Events,
    terminal: bool,
    artifacts: HashSet<ArtifactId>,
    /// Derived from the events under the same lock as the append, so a reader that saw an
    /// event never reads a state, pending action or artifact list older than it.
    lifecycle: Option<ExecutionState>,
    /// The open `action.requested` event.
    pending: Option<Arc<Event>>,
    /// The `artifact.created` events.
    artifact_events: Vec<Arc<Event>>,
    /// Parked readers, keyed by reader id. Drained (and woken) on every append.
    waiters: Vec<(u64, Waker)>,
    /// How many events readers see, when the log is gated ([`LogReader::gate`]): those a
    /// store acknowledged. `None`: every appended event.
    published: Option<usize>,
    /// Set on a log whose store holds every published event: it keeps only the last
    /// `window` of them in memory.
    backing: Option<Backing>,
}

impl State {
    /// How many events readers see.
    fn visible(&self) -> usize {
        self.published
            .map_or(self.events.len(), |p| p.min(self.events.len()))
    }

    /// Whether readers see the terminal event.
    fn visible_end(&self) -> bool {
        self.terminal && self.visible() == self.events.len()
    }

    /// Whether a store-backed log holds its window of events the store has not
    /// acknowledged yet.
    fn backlogged(&self) -> bool {
        self.backing
            .as_ref()
            .is_some_and(|b| self.events.len() - self.visible() >= b.window)
    }

    fn derive(&mut self, event: &Arc<Event>) {
        let payload = event.payload();
        let Some(lifecycle) = payload.implied_state() else {
            match payload {
                EventPayload::ActionRequested(_) => self.pending = Some(Arc::clone(event)),
                EventPayload::ActionResolved(_) => self.pending = None,
                EventPayload::ArtifactCreated(_) => self.artifact_events.push(Arc::clone(event)),
                _ => {}
            }
            return;
        };
        if matches!(
            lifecycle,
            ExecutionState::Cancelling
                | ExecutionState::Succeeded
                | ExecutionState::Failed
                | ExecutionState::Cancelled
        ) {
            self.pending = None;
        }
        self.lifecycle = Some(lifecycle);
    }
}

struct Shared {
    execution_id: ExecutionId,
    state: Mutex<State>,
    next_waiter: AtomicU64,
    /// Set before an observer first reads the log, so a writer that appends after that read
    /// always notifies (see [`Shared::notify`]).
    observed: AtomicBool,
    observers: Mutex<Observers>,
    /// Set before a terminal hook first reads the log, as `observed` is for observers.
    hooked: AtomicBool,
    /// The terminal hooks waiting for the terminal event ([`LogReader::on_terminal`]): kept
    /// apart from the observers, so that they cost nothing per event.
    hooks: Mutex<Vec<TerminalHook>>,
}

/// A function waiting for the terminal event.
type TerminalHook = Box<dyn FnOnce(&Event) + Send>;

/// Calls `hook` with `terminal`; a panic in it is caught (the writer's thread must not
/// unwind through the driver).
fn fire(hook: TerminalHook, terminal: &Event) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(terminal)));
}

/// The observers of one log and a reusable buffer of the events they have not seen yet.
#[derive(Default)]
struct Observers {
    list: Vec<Observing>,
    scratch: Vec<Arc<Event>>,
}

struct Observing {
    /// Index of the next event this observer has not seen.
    next: usize,
    observer: Box<dyn LogObserver>,
}

/// Feeds `events` to `observer`; `false` if it panicked (it is then dropped, never called
/// again: the writer's thread must not unwind through the driver).
fn feed(observer: &mut dyn LogObserver, events: &[Arc<Event>]) -> bool {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for event in events {
            observer.on_shared(event);
        }
    }))
    .is_ok()
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave `State` half-updated (every mutation is
        // a single push or insert after validation), so a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn waiter_id(&self) -> u64 {
        self.next_waiter.fetch_add(1, Ordering::Relaxed)
    }

    fn park(state: &mut State, id: u64, waker: &Waker) {
        match state.waiters.iter_mut().find(|(w, _)| *w == id) {
            Some((_, slot)) => slot.clone_from(waker),
            None => state.waiters.push((id, waker.clone())),
        }
    }

    fn unpark(&self, id: u64) {
        let mut state = self.lock();
        state.waiters.retain(|(w, _)| *w != id);
    }

    fn observers(&self) -> MutexGuard<'_, Observers> {
        // An observer's panic is caught inside `feed`, so the list is never left half-updated.
        self.observers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn hooks(&self) -> MutexGuard<'_, Vec<TerminalHook>> {
        // A hook's panic is caught outside the lock, so the list is never left half-updated.
        self.hooks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The terminal event, once it is appended.
    fn terminal_event(&self) -> Option<Arc<Event>> {
        let state = self.lock();
        if state.terminal {
            state.events.last().cloned()
        } else {
            None
        }
    }

    /// Runs what waits for appended events: the observers, then, when the append `ended`
    /// the log, the terminal hooks (so a batch of content never touches their lock). Called
    /// by the writer after each append, outside the state lock.
    fn notify(&self, ended: bool) {
        if self.observed.load(Ordering::SeqCst) {
            self.feed_observers();
        }
        if ended && self.hooked.load(Ordering::SeqCst) {
            self.fire_hooks();
        }
    }

    /// Calls each terminal hook once, when the terminal event is appended.
    fn fire_hooks(&self) {
        let (hooks, terminal) = {
            let mut hooks = self.hooks();
            if hooks.is_empty() {
                return;
            }
            let Some(terminal) = self.terminal_event() else {
                return;
            };
            (std::mem::take(&mut *hooks), terminal)
        };
        // Outside the lock: a hook may register another (which then runs at once).
        for hook in hooks {
            fire(hook, &terminal);
        }
    }

    /// Registers a terminal hook, or calls it at once after the end (see
    /// [`LogReader::on_terminal`]).
    fn on_terminal(&self, hook: TerminalHook) {
        let mut hooks = self.hooks();
        // Before reading: a writer that appends the terminal event after the read below then
        // sees the flag and waits on the hooks' lock, behind this registration.
        self.hooked.store(true, Ordering::SeqCst);
        match self.terminal_event() {
            Some(terminal) => {
                drop(hooks);
                fire(hook, &terminal);
            }
            None => hooks.push(hook),
        }
    }

    /// Hands every observer the events appended since it last saw one.
    fn feed_observers(&self) {
        let mut observers = self.observers();
        let Observers { list, scratch } = &mut *observers;
        let Some(from) = list.iter().map(|o| o.next).min() else {
            return;
        };
        scratch.extend(self.lock().events.range(from, usize::MAX).cloned());
        let end = from + scratch.len();
        let terminal = scratch.last().is_some_and(|e| e.kind().is_terminal());
        list.retain_mut(|o| {
            let fed = feed(&mut *o.observer, &scratch[o.next - from..]);
            o.next = end;
            fed && !terminal
        });
        scratch.clear();
    }

    /// Registers `observer` and replays the log to it (see [`LogReader::observe`]).
    fn observe(&self, mut observer: Box<dyn LogObserver>) {
        let mut observers = self.observers();
        // Before reading: a writer that appends after the read below then sees the flag and
        // waits on the observers' lock, behind this registration.
        self.observed.store(true, Ordering::SeqCst);
        let replay: Vec<Arc<Event>> = self.lock().events.range(0, usize::MAX).cloned().collect();
        let terminal = replay.last().is_some_and(|e| e.kind().is_terminal());
        if feed(&mut *observer, &replay) && !terminal {
            observers.list.push(Observing {
                next: replay.len(),
                observer,
            });
        }
    }
}

/// Wakes parked readers outside the lock, so they do not contend with the writer.
fn wake(waiters: Vec<(u64, Waker)>) {
    for (_, waker) in waiters {
        waker.wake();
    }
}

/// The single writer of one execution's event log.
pub struct EventLog {
    shared: Arc<Shared>,
}

impl EventLog {
    /// An empty log for `execution_id`.
    #[must_use]
    pub fn new(execution_id: ExecutionId) -> Self {
        Self {
            shared: Arc::new(Shared {
                execution_id,
                state: Mutex::new(State {
                    events: Events::default(),
                    terminal: false,
                    artifacts: HashSet::new(),
                    lifecycle: None,
                    pending: None,
                    artifact_events: Vec::new(),
                    waiters: Vec::new(),
                    published: None,
                    backing: None,
                }),
                next_waiter: AtomicU64::new(0),
                observed: AtomicBool::new(false),
                observers: Mutex::new(Observers::default()),
                hooked: AtomicBool::new(false),
                hooks: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Appends one event, numbering it, and wakes every waiting reader.
    ///
    /// # Errors
    /// [`AppendError`] when the append would break an invariant; the log is then unchanged.
    pub fn append(&self, payload: EventPayload) -> Result<Arc<Event>, AppendError> {
        let shared = &*self.shared;
        let (event, waiters) = {
            let mut state = shared.lock();
            if state.terminal {
                return Err(AppendError::Closed {
                    execution_id: shared.execution_id.clone(),
                    terminal_seq: state.events.last().map_or(Sequence::FIRST, |e| e.seq()),
                });
            }
            if let EventPayload::ArtifactCreated(artifact) = &payload {
                if artifact.execution_id() != &shared.execution_id {
                    return Err(AppendError::ForeignArtifact {
                        execution_id: shared.execution_id.clone(),
                        artifact_id: artifact.id().clone(),
                        owner: artifact.execution_id().clone(),
                    });
                }
                if !state.artifacts.insert(artifact.id().clone()) {
                    return Err(AppendError::DuplicateArtifact {
                        execution_id: shared.execution_id.clone(),
                        artifact_id: artifact.id().clone(),
                    });
                }
            }
            let index = state.events.len();
            let seq = Sequence::new(index as u64 + 1).unwrap_or(Sequence::FIRST);
            state.terminal = payload.is_terminal();
            let event = Arc::new(Event::new(
                shared.execution_id.clone(),
                seq,
                Timestamp::now(),
                payload,
            ));
            state.derive(&event);
            state.events.push(Arc::clone(&event));
            (event, std::mem::take(&mut state.waiters))
        };
        // Observers first: a parked reader woken by this event finds its hooks already run.
        shared.notify(event.kind().is_terminal());
        wake(waiters);
        Ok(event)
    }

    /// Appends content events (which can break no invariant but "nothing after the
    /// terminal event") under one lock, with one timestamp and one wake-up for the batch.
    ///
    /// This is the hot path of a streaming execution: one lock, one clock read and one
    /// reader wake-up per batch instead of per event.
    ///
    /// # Errors
    /// [`AppendError::Closed`] when the log already holds its terminal event; nothing is
    /// appended then.
    pub fn append_content(
        &self,
        contents: impl IntoIterator<Item = Content>,
    ) -> Result<usize, AppendError> {
        let shared = &*self.shared;
        let (count, waiters) = {
            let mut state = shared.lock();
            if state.terminal {
                return Err(AppendError::Closed {
                    execution_id: shared.execution_id.clone(),
                    terminal_seq: state.events.last().map_or(Sequence::FIRST, |e| e.seq()),
                });
            }
            let time = Timestamp::now();
            let before = state.events.len();
            for content in contents {
                let seq = Sequence::new(state.events.len() as u64 + 1).unwrap_or(Sequence::FIRST);
                let event = Event::new(shared.execution_id.clone(), seq, time, content.into());
                state.events.push(Arc::new(event));
            }
            let count = state.events.len() - before;
            let waiters = if count == 0 {
                Vec::new()
            } else {
                std::mem::take(&mut state.waiters)
            };
            (count, waiters)
        };
        if count > 0 {
            // Content never ends the log.
            shared.notify(false);
        }
        wake(waiters);
        Ok(count)
    }

    /// Appends `event` as a store holds it (its sequence number and time kept): the mirror
    /// of an execution another replica runs. Returns `false`, appending nothing, unless it
    /// is this log's execution's next event (a page read twice is skipped, not duplicated).
    pub(crate) fn append_stored(&self, event: Event) -> bool {
        let shared = &*self.shared;
        let (waiters, ended) = {
            let mut state = shared.lock();
            let index = state.events.len();
            if state.terminal
                || event.execution_id() != &shared.execution_id
                || event.seq().get() != index as u64 + 1
            {
                return false;
            }
            state.terminal = event.kind().is_terminal();
            let event = Arc::new(event);
            state.derive(&event);
            state.events.push(event);
            (std::mem::take(&mut state.waiters), state.terminal)
        };
        shared.notify(ended);
        wake(waiters);
        true
    }

    /// A reader of this log.
    #[must_use]
    pub fn reader(&self) -> LogReader {
        LogReader {
            shared: Arc::clone(&self.shared),
        }
    }

    /// The execution this log belongs to.
    #[must_use]
    pub fn execution_id(&self) -> &ExecutionId {
        &self.shared.execution_id
    }

    /// Whether the terminal event has been appended.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.shared.lock().terminal
    }

    /// How many events the log holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.shared.lock().events.len()
    }

    /// Whether the log holds no event yet.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for EventLog {
    fn drop(&mut self) {
        // Nothing more will be appended: observers waiting for the end let go of what they
        // hold (readers may keep the log itself alive much longer).
        let list = std::mem::take(&mut self.shared.observers().list);
        drop(list);
        let hooks = std::mem::take(&mut *self.shared.hooks());
        drop(hooks);
    }
}

impl fmt::Debug for EventLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("EventLog")
            .field("execution_id", &self.shared.execution_id)
            .field("len", &state.events.len())
            .field("closed", &state.terminal)
            .finish()
    }
}

/// A read handle on an execution's log; clone it freely.
#[derive(Clone)]
pub struct LogReader {
    shared: Arc<Shared>,
}

impl LogReader {
    /// The execution this log belongs to.
    #[must_use]
    pub fn execution_id(&self) -> &ExecutionId {
        &self.shared.execution_id
    }

    /// The events after `cursor` that exist now and are held in memory: all of them, but
    /// for a durable execution's log longer than the service's memory window, whose older
    /// events are in the store only ([`first_held`](Self::first_held) says where the
    /// snapshot starts then; [`subscribe`](Self::subscribe) reads them back).
    #[must_use]
    pub fn snapshot(&self, cursor: Cursor) -> Vec<Arc<Event>> {
        let state = self.shared.lock();
        let from = usize::try_from(cursor.after()).unwrap_or(usize::MAX);
        let visible = state.visible();
        state
            .events
            .range(from, visible.saturating_sub(from))
            .cloned()
            .collect()
    }

    /// The events after `cursor`: first those already appended, then each new one as it is
    /// appended. The stream ends after the terminal event.
    #[must_use]
    pub fn subscribe(&self, cursor: Cursor) -> EventStream {
        EventStream {
            shared: Arc::clone(&self.shared),
            next: usize::try_from(cursor.after()).unwrap_or(usize::MAX),
            waiter: self.shared.waiter_id(),
            buffer: std::collections::VecDeque::new(),
            fetch: None,
        }
    }

    /// Gates the log: from now on, [`snapshot`](Self::snapshot), [`subscribe`](Self::subscribe)
    /// and [`terminal`](Self::terminal) show only the events [`publish`](Self::publish)ed (a
    /// durable store acknowledged them), so that no reader sees an event a crash could still
    /// take back. Observers, [`state`](Self::state) and [`pending_action`](Self::pending_action)
    /// follow the appends as before.
    pub(crate) fn gate(&self) {
        let mut state = self.shared.lock();
        state.published.get_or_insert(0);
    }

    /// Shows the first `count` events to the readers of a gated log (never fewer than
    /// before); `None` lifts the gate.
    pub(crate) fn publish(&self, count: Option<usize>) {
        let waiters = {
            let mut state = self.shared.lock();
            state.published = match (state.published, count) {
                (Some(before), Some(count)) => Some(before.max(count)),
                _ => None,
            };
            // What the store holds need not stay in memory past the window; once the end
            // is stored nothing more is appended, and only the last chunk stays (`last`,
            // the outcome).
            if let (Some(published), Some(backing)) = (state.published, &state.backing) {
                let upto = if state.visible_end() {
                    published
                } else {
                    published.saturating_sub(backing.window)
                };
                state.events.trim(upto);
            }
            std::mem::take(&mut state.waiters)
        };
        wake(waiters);
    }

    /// Backs a gated log by its store: from now on it holds only the last `window` published
    /// events (whole chunks of 1,024 at a time); a reader behind them reads pages from
    /// `source`. [`snapshot`](Self::snapshot) and a late [`observe`](Self::observe) start at
    /// the first event held.
    pub(crate) fn back(&self, source: PageSource, window: usize) {
        self.shared.lock().backing = Some(Backing { source, window });
    }

    /// How many appended events readers do not see yet: those a gated log's store has not
    /// acknowledged (0 for a log that is not gated).
    #[must_use]
    pub fn backlog(&self) -> usize {
        let state = self.shared.lock();
        state.events.len() - state.visible()
    }

    /// Resolves once a log backed by a store ([`back`](Self::back)) has fewer than its
    /// window of events waiting for the store (at once for any other log): the writer of a
    /// durable execution awaits it before taking more from the adapter, so a stream faster
    /// than its store waits for it instead of piling events up in memory.
    pub(crate) fn room(&self) -> Room {
        Room {
            shared: Arc::clone(&self.shared),
            waiter: self.shared.waiter_id(),
        }
    }

    /// Whether the writer should wait for [`room`](Self::room).
    pub(crate) fn backlogged(&self) -> bool {
        self.shared.lock().backlogged()
    }

    /// The sequence number of the first event this log holds in memory (1 unless it is
    /// backed by a store and has dropped older ones: a stream reads those from the store).
    #[must_use]
    pub fn first_held(&self) -> u64 {
        self.shared.lock().events.first_held() as u64 + 1
    }

    /// Resolves to the terminal event once it is appended.
    #[must_use]
    pub fn terminal(&self) -> TerminalEvent {
        TerminalEvent {
            shared: Arc::clone(&self.shared),
            waiter: self.shared.waiter_id(),
        }
    }

    /// Calls `observer` with every event of the log, in order, each exactly once: first
    /// those already appended, then each new one right after it is appended, on the
    /// writer's thread. After the terminal event (or when the writer is dropped without one)
    /// the observer is dropped, so what it owns (a permit, a span, a gauge guard) is released
    /// when the execution ends, without a task of its own.
    ///
    /// An observer runs inside the writer's append: it must be quick and must not block. It
    /// may read the log, but must not register another observer on it. If it panics it is
    /// dropped and never called again; the writer carries on.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use harness_core::event::{Event, EventPayload, RunSucceeded};
    /// use harness_core::id::ExecutionId;
    /// use harness_core::log::EventLog;
    ///
    /// let log = EventLog::new(ExecutionId::generate());
    /// log.append(EventPayload::RunQueued).unwrap();
    /// let kinds = Arc::new(Mutex::new(Vec::new()));
    /// let seen = Arc::clone(&kinds);
    /// log.reader().observe(move |e: &Event| seen.lock().unwrap().push(e.kind().as_str()));
    /// log.append(EventPayload::RunSucceeded(RunSucceeded::default())).unwrap();
    /// assert_eq!(*kinds.lock().unwrap(), ["run.queued", "run.succeeded"]);
    /// assert_eq!(Arc::strong_count(&kinds), 1); // dropped after the terminal event
    /// ```
    pub fn observe(&self, observer: impl LogObserver) {
        self.shared.observe(Box::new(observer));
    }

    /// Calls `f` once with the terminal event, right after it is appended (after the
    /// observers have seen it), or at once if it already was. If the writer is dropped
    /// without a terminal event, `f` is dropped uncalled. As for an observer, `f` runs on
    /// the writer's thread and a panic in it is caught.
    ///
    /// Unlike an observer, a terminal hook costs nothing per event: what only acts at the
    /// end of an execution (a capacity permit, a span) does not sit on the event stream.
    pub fn on_terminal(&self, f: impl FnOnce(&Event) + Send + 'static) {
        self.shared.on_terminal(Box::new(f));
    }

    /// How many events the log holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.shared.lock().events.len()
    }

    /// Whether the log holds no event yet.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the terminal event has been appended.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.shared.lock().terminal
    }

    /// The last event appended, if any.
    #[must_use]
    pub fn last(&self) -> Option<Arc<Event>> {
        self.shared.lock().events.last().cloned()
    }

    /// The state implied by the last lifecycle event (`None` before the first one).
    ///
    /// It is derived under the same lock as the append: once a reader has seen an event,
    /// this never reports an older state.
    #[must_use]
    pub fn state(&self) -> Option<ExecutionState> {
        self.shared.lock().lifecycle
    }

    /// The open action request: requested, not yet resolved, and the run neither cancelling
    /// nor ended.
    #[must_use]
    pub fn pending_action(&self) -> Option<ActionRequest> {
        let state = self.shared.lock();
        let event = state.pending.as_ref()?;
        match event.payload() {
            EventPayload::ActionRequested(request) => Some(ActionRequest::clone(request)),
            _ => None,
        }
    }

    /// The `action.requested` event of the open action request (see
    /// [`pending_action`](Self::pending_action)): when it was asked.
    #[must_use]
    pub(crate) fn pending_event(&self) -> Option<Arc<Event>> {
        self.shared.lock().pending.clone()
    }

    /// The artifacts created so far, in creation order.
    #[must_use]
    pub fn artifacts(&self) -> Vec<ArtifactDescriptor> {
        let state = self.shared.lock();
        state
            .artifact_events
            .iter()
            .filter_map(|event| match event.payload() {
                EventPayload::ArtifactCreated(a) => Some(ArtifactDescriptor::clone(a)),
                _ => None,
            })
            .collect()
    }
}

impl fmt::Debug for LogReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogReader")
            .field("execution_id", &self.shared.execution_id)
            .finish_non_exhaustive()
    }
}

/// Sees the events of one log as they are appended: see [`LogReader::observe`].
///
/// Closures `FnMut(&Event) + Send + 'static` are observers.
pub trait LogObserver: Send + 'static {
    /// One event, in sequence order; the terminal one is the last call.
    fn on_event(&mut self, event: &Event);

    /// The same, with the log's own shared copy of the event: an observer that keeps events
    /// overrides this to keep the `Arc` rather than clone the event. Calls
    /// [`on_event`](Self::on_event) unless overridden; the log calls only this one.
    fn on_shared(&mut self, event: &Arc<Event>) {
        self.on_event(event);
    }
}

impl<F: FnMut(&Event) + Send + 'static> LogObserver for F {
    fn on_event(&mut self, event: &Event) {
        self(event);
    }
}

/// The replay-then-tail stream of [`LogReader::subscribe`].
///
/// Dropping it unregisters its waker; it holds no lock between polls.
pub struct EventStream {
    shared: Arc<Shared>,
    /// Index of the next event to take from the log.
    next: usize,
    waiter: u64,
    /// Events taken from the log under one lock, not yet yielded.
    buffer: std::collections::VecDeque<Arc<Event>>,
    /// A page being read from the store (the log no longer holds those events).
    fetch: Option<futures_util::future::BoxFuture<'static, Vec<Event>>>,
}

/// How many events a stream behind a trimmed log reads from the store per page: as many as
/// a durable execution appends at most at once, so that a store keeping each append as one
/// row (SQLite, PostgreSQL) decodes a row about once per page, not once per small page.
const PAGE: usize = 8192;

/// Reads `limit` events after `after` from `source`, retrying (with backoff up to a second)
/// until the store answers: a reader behind waits out a store outage, it loses nothing.
async fn page(source: PageSource, after: u64, limit: usize) -> Vec<Event> {
    let mut backoff = std::time::Duration::from_millis(10);
    loop {
        match source(after, limit).await {
            Ok(events) if !events.is_empty() => return events,
            Ok(_) => {
                tracing::warn!(after, "the store holds none of the events the log dropped");
            }
            Err(e) => {
                tracing::warn!(error = %e, after, "could not read the log's events back from the store");
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(std::time::Duration::from_secs(1));
    }
}

/// How many events a stream takes from the log per lock.
const READ_BATCH: usize = 64;

impl EventStream {
    /// The cursor this stream would resume from: after the last event it yielded.
    #[must_use]
    pub fn cursor(&self) -> Cursor {
        Cursor::after_seq((self.next - self.buffer.len()) as u64)
    }
}

impl Stream for EventStream {
    type Item = Arc<Event>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if let Some(event) = this.buffer.pop_front() {
            return Poll::Ready(Some(event));
        }
        if let Some(fetch) = this.fetch.as_mut() {
            let events = std::task::ready!(fetch.as_mut().poll(cx));
            this.fetch = None;
            // Only what continues this stream, in order (a page may overlap what is held).
            for event in events {
                if event.seq().get() == this.next as u64 + 1 {
                    this.next += 1;
                    this.buffer.push_back(Arc::new(event));
                }
            }
            if let Some(event) = this.buffer.pop_front() {
                return Poll::Ready(Some(event));
            }
        }
        let mut state = this.shared.lock();
        if this.next < state.events.first_held()
            && let Some(backing) = &state.backing
        {
            let limit = (state.events.first_held() - this.next).min(PAGE);
            let source = Arc::clone(&backing.source);
            drop(state);
            let mut fetch = Box::pin(page(source, this.next as u64, limit));
            // Polled here once so that its waker is registered.
            if let Poll::Ready(events) = fetch.as_mut().poll(cx) {
                this.fetch = Some(Box::pin(std::future::ready(events)));
                return self.poll_next(cx);
            }
            this.fetch = Some(fetch);
            return Poll::Pending;
        }
        let ready = state.visible().saturating_sub(this.next).min(READ_BATCH);
        for slice in state.events.slices(this.next, ready) {
            this.buffer.extend(slice.iter().cloned());
        }
        if let Some(first) = this.buffer.pop_front() {
            this.next += 1 + this.buffer.len();
            return Poll::Ready(Some(first));
        }
        if state.visible_end() {
            return Poll::Ready(None);
        }
        Shared::park(&mut state, this.waiter, cx.waker());
        Poll::Pending
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let state = self.shared.lock();
        let ready = state.visible().saturating_sub(self.next) + self.buffer.len();
        (ready, state.visible_end().then_some(ready))
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        self.shared.unpark(self.waiter);
    }
}

impl fmt::Debug for EventStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventStream")
            .field("execution_id", &self.shared.execution_id)
            .field("cursor", &self.cursor())
            .finish()
    }
}

/// The future of [`LogReader::terminal`].
pub struct TerminalEvent {
    shared: Arc<Shared>,
    waiter: u64,
}

impl Future for TerminalEvent {
    type Output = Arc<Event>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.shared.lock();
        if state.visible_end()
            && let Some(last) = state.events.last()
        {
            return Poll::Ready(Arc::clone(last));
        }
        Shared::park(&mut state, self.waiter, cx.waker());
        Poll::Pending
    }
}

impl Drop for TerminalEvent {
    fn drop(&mut self) {
        self.shared.unpark(self.waiter);
    }
}

impl fmt::Debug for TerminalEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TerminalEvent")
            .field("execution_id", &self.shared.execution_id)
            .finish()
    }
}

/// The future of [`LogReader::room`].
pub(crate) struct Room {
    shared: Arc<Shared>,
    waiter: u64,
}

impl Future for Room {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.shared.lock();
        if !state.backlogged() {
            return Poll::Ready(());
        }
        // Woken by every publish (and append).
        Shared::park(&mut state, self.waiter, cx.waker());
        Poll::Pending
    }
}

impl Drop for Room {
    fn drop(&mut self) {
        self.shared.unpark(self.waiter);
    }
}

#[cfg(test)]
mod tests {
    use futures_util::{FutureExt, StreamExt};

    use super::*;
    use crate::event::{RunSucceeded, TextDelta};

    fn delta(i: usize) -> Content {
        Content::MessageDelta(TextDelta::new(i.to_string()))
    }

    fn seqs(events: &[Arc<Event>]) -> Vec<u64> {
        events.iter().map(|e| e.seq().get()).collect()
    }

    #[test]
    fn slices_cover_exactly_the_range_across_chunk_boundaries() {
        let mut events = Events::default();
        let id = ExecutionId::generate();
        let total = 2 * CHUNK + 5;
        for i in 0..total {
            let seq = Sequence::new(i as u64 + 1).unwrap();
            let payload = EventPayload::MessageDelta(TextDelta::new(""));
            events.push(Arc::new(Event::new(
                id.clone(),
                seq,
                Timestamp::now(),
                payload,
            )));
        }
        for (from, max) in [
            (0, usize::MAX),
            (0, CHUNK),
            (CHUNK - 3, 7),
            (CHUNK - 1, CHUNK + 2),
            (2 * CHUNK, 64),
            (total - 1, 64),
            (total, 64),
            (total + 10, 64),
            (5, 0),
        ] {
            let slices: Vec<&[Arc<Event>]> = events.slices(from, max).collect();
            assert!(
                slices.iter().all(|s| !s.is_empty()),
                "empty slice at {from}"
            );
            assert!(slices.len() <= 3);
            let got: Vec<u64> = slices
                .iter()
                .flat_map(|s| s.iter().map(|e| e.seq().get()))
                .collect();
            let end = total.min(from.saturating_add(max));
            let want: Vec<u64> = (from.min(end)..end).map(|i| i as u64 + 1).collect();
            assert_eq!(got, want, "from {from}, max {max}");
            assert_eq!(events.range(from, max).count(), want.len());
        }
    }

    #[test]
    fn a_stream_reads_across_chunk_boundaries_in_batches() {
        let log = EventLog::new(ExecutionId::generate());
        let reader = log.reader();
        // Mid-chunk batches: a batch of the reader straddles every chunk boundary.
        let mut stream = reader.subscribe(Cursor::after_seq(CHUNK as u64 - 10));
        let total = 3 * CHUNK + 17;
        let mut appended = 0;
        while appended < total {
            let n = (total - appended).min(100);
            assert_eq!(
                log.append_content((appended..appended + n).map(delta)),
                Ok(n)
            );
            appended += n;
        }
        log.append(EventPayload::RunSucceeded(RunSucceeded::default()))
            .unwrap();
        let mut read = Vec::new();
        while let Some(Some(event)) = stream.next().now_or_never() {
            read.push(event);
            // The cursor counts what was yielded, not what was buffered.
            assert_eq!(
                stream.cursor(),
                Cursor::after_seq(read.last().unwrap().seq().get())
            );
        }
        let want: Vec<u64> = (CHUNK as u64 - 9..=total as u64 + 1).collect();
        assert_eq!(seqs(&read), want);
        // The stream hands out the stored events themselves.
        let stored = reader.snapshot(Cursor::after_seq(CHUNK as u64 - 10));
        assert!(read.iter().zip(&stored).all(|(a, b)| Arc::ptr_eq(a, b)));
        assert_eq!(stream.next().now_or_never(), Some(None));
    }
}
