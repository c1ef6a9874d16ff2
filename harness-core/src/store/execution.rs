//! The [`ExecutionStore`] contract: its records, leases, errors and the checks every backend
//! shares.

use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::error::{ErrorCategory, ErrorCode, HarnessError};
use crate::event::Event;
use crate::id::{ActionId, Cursor, ExecutionId, IdempotencyKey, Sequence};
use crate::state::ExecutionState;
use crate::time::Timestamp;

/// The number of a lease: strictly increasing per execution, so a newer holder's writes and
/// an older holder's can always be told apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FencingToken(u64);

impl FencingToken {
    /// The token numbered `n`.
    #[must_use]
    pub const fn new(n: u64) -> Self {
        Self(n)
    }

    /// Its number.
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Who holds a lease: a replica's name, chosen by the operator (host and process, say).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ReplicaId(String);

impl ReplicaId {
    /// The replica named `name`.
    #[must_use]
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }

    /// The name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ReplicaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The right to write one execution's log until `expires_at`, unless renewed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The execution.
    pub execution_id: ExecutionId,
    /// The holder.
    pub owner: ReplicaId,
    /// The fencing token every write carries.
    pub token: FencingToken,
    /// When it lapses.
    pub expires_at: Timestamp,
}

/// An execution's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionRecord {
    /// The execution.
    pub id: ExecutionId,
    /// Who started it (the server's authenticated principal; empty for in-process use).
    pub principal: String,
    /// The adapter (instance) that runs it.
    pub adapter: String,
    /// A digest of the request: what makes two requests with one idempotency key the same.
    pub fingerprint: String,
    /// The request as accepted, for recovery on another replica.
    pub request: serde_json::Value,
    /// The idempotency key it was created with, if any.
    pub idempotency_key: Option<IdempotencyKey>,
    /// When it was created.
    pub created_at: Timestamp,
    /// The state implied by the last lifecycle event stored (`Queued` before any).
    pub state: ExecutionState,
    /// The first cancel request's reason, once one was made.
    pub cancel_requested: Option<String>,
}

impl ExecutionRecord {
    /// A new record of `id`, queued, created now.
    #[must_use]
    pub fn new(
        id: ExecutionId,
        adapter: impl Into<String>,
        fingerprint: impl Into<String>,
        request: serde_json::Value,
    ) -> Self {
        Self {
            id,
            principal: String::new(),
            adapter: adapter.into(),
            fingerprint: fingerprint.into(),
            request,
            idempotency_key: None,
            created_at: Timestamp::now(),
            state: ExecutionState::Queued,
            cancel_requested: None,
        }
    }

    /// With the principal that owns it.
    #[must_use]
    pub fn with_principal(mut self, principal: impl Into<String>) -> Self {
        self.principal = principal.into();
        self
    }

    /// With an idempotency key (scoped by the principal).
    #[must_use]
    pub fn with_idempotency_key(mut self, key: IdempotencyKey) -> Self {
        self.idempotency_key = Some(key);
        self
    }
}

/// One record of an [`ExecutionStore::list`] page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Where it is in creation order (the cursor of the next page).
    pub position: u64,
    /// The record.
    pub record: ExecutionRecord,
}

/// What [`ExecutionStore::create`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// The record was written.
    New,
    /// The idempotency key was used before with the same fingerprint: the first record.
    Existing(Box<ExecutionRecord>),
}

/// An answer recorded by [`ExecutionStore::resolve`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolution {
    /// The action answered.
    pub action_id: ActionId,
    /// The action's revision the answer was for.
    pub revision: u64,
    /// The answer (the action response, as JSON).
    pub response: serde_json::Value,
    /// When it was recorded.
    pub at: Timestamp,
}

/// Why a store refused or failed an operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No record of that execution.
    #[error("no execution {0} in the store")]
    NotFound(ExecutionId),
    /// A record with that id exists already.
    #[error("execution {0} exists already")]
    Exists(ExecutionId),
    /// The idempotency key was used for a different request.
    #[error("idempotency key {key} was used for another request (execution {existing})")]
    IdempotencyConflict {
        /// The key.
        key: IdempotencyKey,
        /// The execution it belongs to.
        existing: ExecutionId,
    },
    /// The lease is held by another replica and has not expired.
    #[error("execution {execution} is leased by {owner} until {until}")]
    Leased {
        /// The execution.
        execution: ExecutionId,
        /// The holder.
        owner: ReplicaId,
        /// When its lease lapses.
        until: Timestamp,
    },
    /// The write carried a lease that is no longer the execution's current one (or lapsed).
    #[error(
        "fenced: lease {presented} of execution {execution} is not current (current {current})"
    )]
    Fenced {
        /// The execution.
        execution: ExecutionId,
        /// The token the writer presented.
        presented: FencingToken,
        /// The current token (the presented one when it merely lapsed).
        current: FencingToken,
    },
    /// The batch does not continue the stored log.
    #[error("execution {execution}: expected event {expected}, got {got}")]
    Sequence {
        /// The execution.
        execution: ExecutionId,
        /// The next sequence number the log takes.
        expected: u64,
        /// The one presented.
        got: u64,
    },
    /// The batch holds events of another execution.
    #[error("execution {execution}: the batch holds an event of {other}")]
    WrongExecution {
        /// The execution appended to.
        execution: ExecutionId,
        /// The other execution.
        other: ExecutionId,
    },
    /// The log ended with a terminal event: nothing may follow.
    #[error("execution {0} has ended: nothing may follow its terminal event")]
    Ended(ExecutionId),
    /// The action was answered already.
    #[error("action {action} of execution {execution} was answered already")]
    AlreadyResolved {
        /// The execution.
        execution: ExecutionId,
        /// The action.
        action: ActionId,
    },
    /// The backend could not be reached or failed; the operation may be retried.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The backend's disk is full (or its size limit reached): nothing was written; the
    /// operation may be retried once space is freed.
    #[error("store full: {0}")]
    Full(String),
    /// What the backend holds cannot be read back.
    #[error("store corrupt: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// The error a client sees: category `persistence` (retryable when the backend was
    /// unavailable or full; a full one is `STORE_FULL`), the store's words kept as the diagnostic; a reused idempotency key is
    /// the caller's `IDEMPOTENCY_CONFLICT` (`configuration`).
    #[must_use]
    pub fn to_harness_error(&self) -> HarnessError {
        if let Self::IdempotencyConflict { .. } = self {
            return HarnessError::new(
                ErrorCategory::Configuration,
                "the idempotency key was used for a different request",
            )
            .with_code(ErrorCode::IDEMPOTENCY_CONFLICT)
            .with_diagnostic(self.to_string());
        }
        let (code, message, retryable) = match self {
            Self::Unavailable(_) => (ErrorCode::PERSISTENCE, "the store is unavailable", true),
            Self::Full(_) => (
                ErrorCode::STORE_FULL,
                "the store's disk is full: nothing was written; retry once space is freed",
                true,
            ),
            Self::Fenced { .. } => (
                ErrorCode::PERSISTENCE,
                "this replica no longer owns the execution",
                false,
            ),
            _ => (
                ErrorCode::PERSISTENCE,
                "the store refused the operation",
                false,
            ),
        };
        HarnessError::new(ErrorCategory::Persistence, message)
            .with_code(code)
            .with_retryable(retryable)
            .with_diagnostic(self.to_string())
    }
}

/// Wakes readers of one execution when events are stored (it holds the last stored sequence
/// number, 0 before any), and its owner when an answer or a cancel request is recorded.
#[derive(Debug, Clone)]
pub struct Tail(watch::Receiver<u64>);

impl Tail {
    /// A tail fed by `receiver`.
    #[must_use]
    pub fn new(receiver: watch::Receiver<u64>) -> Self {
        Self(receiver)
    }

    /// The last stored sequence number seen.
    #[must_use]
    pub fn last(&self) -> u64 {
        *self.0.borrow()
    }

    /// Waits for the next change of the execution: events stored, an answer recorded, a
    /// cancel requested. `false` when the store stops feeding this tail.
    pub async fn changed(&mut self) -> bool {
        self.0.changed().await.is_ok()
    }

    /// Waits until the log holds an event after `cursor` (at once when it does), or the store
    /// stops feeding this tail (then `false`).
    pub async fn after(&mut self, cursor: Cursor) -> bool {
        self.0.wait_for(|last| *last > cursor.after()).await.is_ok()
    }
}

/// The store every execution's durable state lives in. See the [module docs](crate::store) for the
/// rules every implementation keeps.
pub trait ExecutionStore: Send + Sync + 'static {
    /// Writes `record`, unless its idempotency key was used before.
    fn create(&self, record: ExecutionRecord) -> BoxFuture<'_, Result<Created, StoreError>>;

    /// The record of `id`.
    fn record<'a>(
        &'a self,
        id: &'a ExecutionId,
    ) -> BoxFuture<'a, Result<ExecutionRecord, StoreError>>;

    /// The records not yet in a terminal state, oldest first: what recovery looks at.
    fn unfinished(&self) -> BoxFuture<'_, Result<Vec<ExecutionRecord>, StoreError>>;

    /// A page of `principal`'s executions, newest first: up to `limit` records created
    /// before `before` (a [`Listed::position`] from an earlier page; `None`: from the
    /// newest), each with its position. Positions grow with creation, so paging on from the
    /// last position of a page misses no older execution, however many were created since.
    fn list<'a>(
        &'a self,
        principal: &'a str,
        before: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Listed>, StoreError>>;

    /// Takes the lease of `id` for `owner` for `ttl`: when none is held, when the held one has
    /// lapsed, or to renew `owner`'s own (same token). A new holder gets a greater token.
    fn acquire<'a>(
        &'a self,
        id: &'a ExecutionId,
        owner: &'a ReplicaId,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Lease, StoreError>>;

    /// Gives `lease` up (a later `acquire` by anyone succeeds at once). Fenced when it is no
    /// longer current.
    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Appends `events` (one execution's, contiguous, continuing its log) under `lease`,
    /// atomically.
    fn append<'a>(
        &'a self,
        lease: &'a Lease,
        events: &'a [Event],
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// [`append`](Self::append) for events shared with a log, as the service's persister
    /// holds them: the same contract. The default copies them and calls `append`; the
    /// stores of this workspace override it to write them without the copy (one clone of
    /// every event less on the path of a streaming execution).
    fn append_shared<'a>(
        &'a self,
        lease: &'a Lease,
        events: &'a [Arc<Event>],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let owned: Vec<Event> = events.iter().map(|e| Event::clone(e)).collect();
        Box::pin(async move { self.append(lease, &owned).await })
    }

    /// Up to `limit` events of `id` after `after`, in order.
    fn read<'a>(
        &'a self,
        id: &'a ExecutionId,
        after: Cursor,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Event>, StoreError>>;

    /// A [`Tail`] of `id`'s log.
    fn tail<'a>(&'a self, id: &'a ExecutionId) -> BoxFuture<'a, Result<Tail, StoreError>>;

    /// Records `resolution` as the answer to its action, once.
    fn resolve<'a>(
        &'a self,
        id: &'a ExecutionId,
        resolution: Resolution,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The recorded answer to `action`, if any.
    fn resolution<'a>(
        &'a self,
        id: &'a ExecutionId,
        action: &'a ActionId,
    ) -> BoxFuture<'a, Result<Option<Resolution>, StoreError>>;

    /// Records a cancel request for `id` (the first reason wins; later ones change nothing).
    /// Returns whether this one was the first.
    fn request_cancel<'a>(
        &'a self,
        id: &'a ExecutionId,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Retention: deletes up to `limit` executions that have **ended** and were created
    /// before `created_before`, oldest first, each with its events, answers and idempotency
    /// key (a retry under the key then starts a new execution). An unfinished execution is
    /// never deleted, however old. Returns how many were deleted; fewer than `limit` means
    /// none older is left.
    fn purge(
        &self,
        created_before: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<usize, StoreError>>;
}

/// Checks a batch before a backend writes it: one execution's events, numbered on from
/// `last` (the stored log's last sequence number, 0 when empty), nothing after a terminal
/// event (`ended`: the stored log has one). Returns the state the batch's last lifecycle
/// event implies, if any, and whether the batch ends the log. Backends call this inside
/// their write transaction.
///
/// # Errors
/// [`StoreError::WrongExecution`], [`StoreError::Sequence`] or [`StoreError::Ended`].
pub fn check_batch<E: Borrow<Event>>(
    id: &ExecutionId,
    last: u64,
    ended: bool,
    events: &[E],
) -> Result<(Option<ExecutionState>, bool), StoreError> {
    let mut state = None;
    let mut ends = ended;
    for (expected, event) in (last + 1..).zip(events.iter().map(Borrow::borrow)) {
        if event.execution_id() != id {
            return Err(StoreError::WrongExecution {
                execution: id.clone(),
                other: event.execution_id().clone(),
            });
        }
        if ends {
            return Err(StoreError::Ended(id.clone()));
        }
        let got = event.seq().get();
        if got != expected {
            return Err(StoreError::Sequence {
                execution: id.clone(),
                expected,
                got,
            });
        }
        if let Some(s) = event.payload().implied_state() {
            state = Some(s);
        }
        ends = event.kind().is_terminal();
    }
    Ok((state, ends && !ended))
}

/// A digest of a request's JSON (FNV-1a, 64 bits, hex): what makes two requests with one
/// idempotency key the same. Not a security measure: it only tells requests apart.
#[must_use]
pub fn fingerprint(request: &serde_json::Value) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in request.to_string().bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// The sequence number a batch appended after `last` starts at.
#[must_use]
pub fn next_sequence(last: u64) -> Sequence {
    Sequence::new(last + 1).unwrap_or(Sequence::FIRST)
}
