//! [`ExecutionHandle`]: the caller's side of one execution, and what it shares with the
//! driver.

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll};

use tokio::sync::{Notify, oneshot};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::action::{ActionRequest, ActionResponse};
use crate::artifact::ArtifactDescriptor;
use crate::error::{ErrorCategory, ErrorCode, HarnessError};
use crate::event::{CancelReason, CancelSource, EventPayload, RunSucceeded};
use crate::id::{ActionId, AdapterId, Cursor, ExecutionId};
use crate::log::{EventStream, LogReader};
use crate::state::ExecutionState;

/// How an execution ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// `run.succeeded`.
    Succeeded(RunSucceeded),
    /// `run.failed`, with the full error (its diagnostic included: this is for the
    /// application, not for its clients).
    Failed(HarnessError),
    /// `run.cancelled`.
    Cancelled(CancelReason),
}

impl Outcome {
    /// The terminal state.
    #[must_use]
    pub fn state(&self) -> ExecutionState {
        match self {
            Self::Succeeded(_) => ExecutionState::Succeeded,
            Self::Failed(_) => ExecutionState::Failed,
            Self::Cancelled(_) => ExecutionState::Cancelled,
        }
    }
}

/// What [`ExecutionHandle::cancel`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelStatus {
    /// This call requested cancellation. `run.cancelled` confirms it, unless the execution
    /// was already ending on its own (its terminal item seen, cleanup under way): a request is
    /// not a guarantee, and the outcome tells which way it ended.
    Accepted,
    /// Cancellation had already been requested; nothing more was done.
    AlreadyRequested,
    /// The execution had already ended in this state.
    AlreadyEnded(ExecutionState),
}

/// What the driver shares with handles beyond the log. State, pending action and artifacts
/// are *not* here: they are derived from the log under its append lock, so they can never
/// lag behind the events a caller has already seen.
pub(super) struct Snapshot {
    pub(super) resolved: HashSet<ActionId>,
    pub(super) cancel_reason: Option<CancelReason>,
    pub(super) outcome: Option<Outcome>,
}

pub(crate) struct Shared {
    pub(super) id: ExecutionId,
    pub(super) adapter: AdapterId,
    pub(super) reader: LogReader,
    pub(super) cancel: CancellationToken,
    pub(super) snapshot: Mutex<Snapshot>,
    /// Tokens a runtime layer tied the execution to ([`Segment::cancel_on`]).
    ///
    /// [`Segment::cancel_on`]: super::Segment::cancel_on
    has_links: AtomicBool,
    links: Mutex<Vec<Link>>,
    /// Answers for the driver, and whether it still takes them.
    inbox: Mutex<Inbox>,
    /// Wakes the driver: a command arrived, or the last handle went.
    wake: Notify,
}

/// The driver's queue of commands. Pushing and closing happen under its lock, so a command
/// is either taken by the driver or answered when it closes the inbox: never left waiting.
#[derive(Default)]
struct Inbox {
    queue: VecDeque<Command>,
    /// The driver has gone: nothing more is taken.
    closed: bool,
    /// Every handle has been dropped: nobody can answer any more.
    abandoned: bool,
}

/// A token that cancels the execution, and with which source.
struct Link {
    token: CancellationToken,
    source: CancelSource,
    cancelled: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl Shared {
    pub(super) fn new(
        id: ExecutionId,
        adapter: AdapterId,
        reader: LogReader,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            id,
            adapter,
            reader,
            cancel,
            snapshot: Mutex::new(Snapshot {
                resolved: HashSet::new(),
                cancel_reason: None,
                outcome: None,
            }),
            has_links: AtomicBool::new(false),
            links: Mutex::new(Vec::new()),
            inbox: Mutex::new(Inbox::default()),
            wake: Notify::new(),
        }
    }

    fn inbox(&self) -> MutexGuard<'_, Inbox> {
        // Every update is a push, a pop or a flag: a poisoned lock is still consistent.
        self.inbox.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `command` for the driver; gives it back if the driver has gone.
    pub(super) fn send(&self, command: Command) -> Result<(), Command> {
        {
            let mut inbox = self.inbox();
            if inbox.closed {
                return Err(command);
            }
            inbox.queue.push_back(command);
        }
        self.wake.notify_one();
        Ok(())
    }

    /// The next command; `None` once every handle is gone and nothing is queued.
    pub(super) async fn next_command(&self) -> Option<Command> {
        loop {
            {
                let mut inbox = self.inbox();
                if let Some(command) = inbox.queue.pop_front() {
                    return Some(command);
                }
                if inbox.abandoned {
                    return None;
                }
            }
            // A push between the check above and this wait left a permit: no wake-up lost.
            self.wake.notified().await;
        }
    }

    /// The driver goes: no command is taken any more, and those still queued are answered.
    pub(super) fn close_inbox(&self) {
        let queued = {
            let mut inbox = self.inbox();
            inbox.closed = true;
            std::mem::take(&mut inbox.queue)
        };
        for Command::Respond(respond) in queued {
            let (response, reply, _) = *respond;
            let _ = reply.send(Err(self.late_answer(response.action_id())));
        }
    }

    /// The last handle went.
    fn abandon(&self) {
        self.inbox().abandoned = true;
        self.wake.notify_one();
    }

    /// A handle is made again after every handle went (see [`WeakExecutionHandle::upgrade`]):
    /// a driver that has not seen the abandonment yet keeps listening.
    fn revive(&self) {
        self.inbox().abandoned = false;
    }

    fn links(&self) -> MutexGuard<'_, Vec<Link>> {
        self.links.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Ties the execution to `token`: its cancellation cancels the execution with `source`.
    pub(super) fn link(&self, token: &CancellationToken, source: CancelSource) {
        let link = Link {
            token: token.clone(),
            source,
            cancelled: Box::pin(token.clone().cancelled_owned()),
        };
        self.links().push(link);
        self.has_links.store(true, Ordering::Release);
    }

    /// Ready with the source of the first linked token that is cancelled (the driver polls
    /// this wherever it waits).
    pub(super) fn poll_links(&self, cx: &mut Context<'_>) -> Poll<CancelSource> {
        if !self.has_links.load(Ordering::Acquire) {
            return Poll::Pending;
        }
        for link in self.links().iter_mut() {
            if link.cancelled.as_mut().poll(cx).is_ready() {
                return Poll::Ready(link.source);
            }
        }
        Poll::Pending
    }

    /// The source of a linked token already cancelled, if any: the execution counts as
    /// cancelled from that moment, before the driver has noticed.
    fn linked_cancel(&self) -> Option<CancelSource> {
        if !self.has_links.load(Ordering::Acquire) {
            return None;
        }
        self.links()
            .iter()
            .find(|link| link.token.is_cancelled())
            .map(|link| link.source)
    }

    pub(super) fn state(&self) -> ExecutionState {
        self.reader.state().unwrap_or(ExecutionState::Queued)
    }

    pub(super) fn snapshot(&self) -> MutexGuard<'_, Snapshot> {
        // Every update under this lock is a single assignment, so a poisoned lock still holds
        // a consistent snapshot.
        self.snapshot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The error for an answer that arrives after the driver stopped listening.
    pub(super) fn late_answer(&self, action_id: &ActionId) -> HarnessError {
        if self.snapshot().resolved.contains(action_id) {
            already_resolved(action_id)
        } else {
            HarnessError::new(
                ErrorCategory::Configuration,
                format!(
                    "execution {} has ended ({}); action {action_id} can no longer be answered",
                    self.id,
                    self.state()
                ),
            )
            .with_code(ErrorCode::EXECUTION_TERMINAL)
        }
    }

    /// Records `reason` (unless one was given before) and trips the execution's token.
    pub(super) fn request_cancel(&self, reason: CancelReason) -> CancelStatus {
        let state = self.state();
        if state.is_terminal() {
            return CancelStatus::AlreadyEnded(state);
        }
        let linked = self.linked_cancel();
        let mut snapshot = self.snapshot();
        if snapshot.cancel_reason.is_some() || self.cancel.is_cancelled() {
            return CancelStatus::AlreadyRequested;
        }
        if let Some(source) = linked {
            // A linked token was cancelled first: its cancellation is the one on record.
            snapshot.cancel_reason = Some(CancelReason::from_source(source));
            drop(snapshot);
            self.cancel.cancel();
            return CancelStatus::AlreadyRequested;
        }
        snapshot.cancel_reason = Some(reason);
        drop(snapshot);
        self.cancel.cancel();
        CancelStatus::Accepted
    }
}

/// An answer, where its result goes, and whether the store already holds it (another
/// replica's, or claimed already): then the driver applies it without claiming it again.
pub(super) type Respond = (
    ActionResponse,
    oneshot::Sender<Result<(), HarnessError>>,
    bool,
);

/// A caller's request to the driver. Boxed so the queue's slots stay small.
pub(super) enum Command {
    Respond(Box<Respond>),
}

/// The caller's handle on one execution. Cheap to clone.
///
/// While an execution awaits an action, at least one handle must be alive for anyone to
/// answer it: when every handle is dropped, the driver cancels it (source `abandoned`).
#[derive(Clone)]
pub struct ExecutionHandle {
    /// Shared by the handle's clones; when the last one goes, the driver hears of it.
    pub(super) holders: Arc<Holders>,
    pub(super) replay: bool,
}

/// What every clone of an execution's handles shares: dropped with the last of them.
pub(super) struct Holders(pub(super) Arc<Shared>);

impl Drop for Holders {
    fn drop(&mut self) {
        self.0.abandon();
    }
}

impl fmt::Debug for ExecutionHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecutionHandle")
            .field("id", &self.holders.0.id)
            .field("adapter", &self.holders.0.adapter)
            .field("state", &self.state())
            .finish()
    }
}

impl ExecutionHandle {
    fn shared(&self) -> &Shared {
        &self.holders.0
    }

    /// A handle that does not keep the execution answerable: holding only weak handles, an
    /// execution awaiting an action is abandoned as if every handle were gone. What a store
    /// that keeps executions for later (idempotent replays) holds.
    #[must_use]
    pub fn downgrade(&self) -> WeakExecutionHandle {
        WeakExecutionHandle {
            shared: Arc::clone(&self.holders.0),
            holders: Arc::downgrade(&self.holders),
        }
    }

    /// The execution id.
    #[must_use]
    pub fn id(&self) -> &ExecutionId {
        &self.shared().id
    }

    /// The adapter running it.
    #[must_use]
    pub fn adapter(&self) -> &AdapterId {
        &self.shared().adapter
    }

    /// Whether this handle answers a request with an execution that already existed (an
    /// idempotent replay), rather than one started for it: a layer that counts or follows
    /// new executions skips it. The mark is on the handle a layer returns, never in the
    /// request, so no layer can lose it.
    #[must_use]
    pub fn is_replay(&self) -> bool {
        self.replay
    }

    /// This handle, marked as a replay (see [`is_replay`](Self::is_replay)): what an
    /// idempotency layer returns for a request an existing execution answers.
    #[must_use]
    pub fn into_replay(mut self) -> Self {
        self.replay = true;
        self
    }

    /// The current state.
    #[must_use]
    pub fn state(&self) -> ExecutionState {
        self.shared().state()
    }

    /// The events after `cursor`: replay, then the live tail, ending after the terminal event.
    #[must_use]
    pub fn events(&self, cursor: Cursor) -> EventStream {
        self.shared().reader.subscribe(cursor)
    }

    /// A reader of the event log (it does not keep the execution answerable: see the type's
    /// docs).
    #[must_use]
    pub fn log(&self) -> &LogReader {
        &self.shared().reader
    }

    /// The pending action requests (at most one in this version of the runtime).
    #[must_use]
    pub fn pending_actions(&self) -> Vec<ActionRequest> {
        self.shared().reader.pending_action().into_iter().collect()
    }

    /// The artifacts created so far.
    #[must_use]
    pub fn artifacts(&self) -> Vec<ArtifactDescriptor> {
        self.shared().reader.artifacts()
    }

    /// Answers a pending action.
    ///
    /// # Errors
    /// `ACTION_ALREADY_RESOLVED` for an action already answered, `ACTION_NOT_FOUND` for an id
    /// that is not pending, `ACTION_REVISION_STALE` for another revision,
    /// `ACTION_RESPONSE_INVALID` for an answer that does not fit the request (the action
    /// stays pending), `EXECUTION_TERMINAL` once the execution has ended.
    pub async fn respond(&self, response: ActionResponse) -> Result<(), HarnessError> {
        let (tx, rx) = oneshot::channel();
        let action_id = response.action_id().clone();
        if self
            .shared()
            .send(Command::Respond(Box::new((response, tx, false))))
            .is_err()
        {
            return Err(self.shared().late_answer(&action_id));
        }
        // The driver answers every queued command, even those still queued when it ends (it
        // closes the inbox then, under the lock the push took), so this always resolves.
        match rx.await {
            Ok(result) => result,
            Err(_) => Err(self.shared().late_answer(&action_id)),
        }
    }

    /// Requests cancellation. Returns at once; `run.cancelled` confirms it. Safe to call any
    /// number of times, from any number of tasks, before, during or after the run. The
    /// reason's [`source`](CancelReason::source) is recorded as given (a caller's, unless
    /// the application says otherwise).
    pub fn cancel(&self, reason: CancelReason) -> CancelStatus {
        self.shared().request_cancel(reason)
    }

    /// Resolves when the execution has ended, with its outcome.
    pub async fn outcome(&self) -> Outcome {
        let terminal = self.shared().reader.terminal().await;
        if let Some(outcome) = self.shared().snapshot().outcome.clone() {
            return outcome;
        }
        // The driver records the outcome before appending the terminal event, so this is
        // only reached for a log filled by other means; derive it from the event.
        match terminal.payload() {
            EventPayload::RunSucceeded(s) => Outcome::Succeeded(s.clone()),
            EventPayload::RunFailed(f) => Outcome::Failed(f.error.clone().into()),
            EventPayload::RunCancelled(r) => Outcome::Cancelled(r.clone()),
            _ => Outcome::Failed(HarnessError::new(
                ErrorCategory::Internal,
                "the execution ended without a terminal event",
            )),
        }
    }
}

/// A handle on an execution that does not keep it answerable: see
/// [`ExecutionHandle::downgrade`]. It keeps the execution's log readable.
#[derive(Clone)]
pub struct WeakExecutionHandle {
    shared: Arc<Shared>,
    holders: Weak<Holders>,
}

impl fmt::Debug for WeakExecutionHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WeakExecutionHandle")
            .field("id", &self.shared.id)
            .field("state", &self.shared.state())
            .finish_non_exhaustive()
    }
}

impl WeakExecutionHandle {
    /// The execution id.
    #[must_use]
    pub fn id(&self) -> &ExecutionId {
        &self.shared.id
    }

    /// The adapter running it.
    #[must_use]
    pub fn adapter(&self) -> &AdapterId {
        &self.shared.adapter
    }

    /// The current state.
    #[must_use]
    pub fn state(&self) -> ExecutionState {
        self.shared.state()
    }

    /// A reader of the event log.
    #[must_use]
    pub fn log(&self) -> &LogReader {
        &self.shared.reader
    }

    /// A full handle: one sharing the other handles' if any is alive, else a new one. If
    /// every handle was gone while the execution awaited an action, it was abandoned
    /// (cancelled, source `abandoned`), and this handle shows that.
    #[must_use]
    pub fn upgrade(&self) -> ExecutionHandle {
        let holders = self.holders.upgrade().unwrap_or_else(|| {
            self.shared.revive();
            Arc::new(Holders(Arc::clone(&self.shared)))
        });
        ExecutionHandle {
            holders,
            replay: false,
        }
    }
}

pub(super) fn already_resolved(action_id: &ActionId) -> HarnessError {
    HarnessError::new(
        ErrorCategory::Configuration,
        format!("action {action_id} was already answered; an action is answered at most once"),
    )
    .with_code(ErrorCode::ACTION_ALREADY_RESOLVED)
}

pub(super) fn not_pending(action_id: &ActionId, pending: Option<&ActionId>) -> HarnessError {
    let detail = match pending {
        Some(p) => format!("the pending action is {p}"),
        None => "no action is pending".to_owned(),
    };
    HarnessError::new(
        ErrorCategory::Configuration,
        format!("action {action_id} is not pending: {detail}"),
    )
    .with_code(ErrorCode::ACTION_NOT_FOUND)
}
