//! [`SqliteStore`]: the embedded durable store, one SQLite file in WAL mode.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use futures_util::future::BoxFuture;
use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::event::Event;
use harness_core::file::{FileId, FileWorkspace, StoredFile};
use harness_core::id::{ActionId, CallerId, Cursor, ExecutionId, IdempotencyKey};
use harness_core::session::{
    SessionBinding, StateEntry, StateError, StateKey, ThreadStateStore, Version,
};
use harness_core::store::{
    Created, ExecutionRecord, ExecutionStore, FencingToken, Lease, Listed, ReplicaId, Resolution,
    StoreError, Tail, check_batch,
};
use harness_core::time::Timestamp;
use rusqlite::{Connection, OptionalExtension, params};

use crate::common::{
    FirstCallers, RECORD_COLUMNS, corrupt, from_millis, lock, parse_state, state_name,
};
use crate::files::{FileInfo, FileStore, NewFile};
use tokio::sync::{oneshot, watch};

/// The schema version this code writes (`PRAGMA user_version`). 2: one `events` row per
/// append (a batch), not per event. 3: thread state. 4: the index of principals' executions.
/// 5: bindings scoped by principal (no new table: existing bindings move). 6: uploaded files.
const SCHEMA_VERSION: i64 = 6;

/// Uploaded files (schema 6; see [`crate::files`]): a rowid table, as SQLite advises for
/// rows this large.
const FILES: &str = "
CREATE TABLE IF NOT EXISTS files (
    id TEXT NOT NULL UNIQUE,
    principal TEXT NOT NULL,
    name TEXT NOT NULL,
    media_type TEXT NOT NULL,
    size INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS files_by_expiry ON files (expires_at);
";

/// The index that pages a principal's executions (schema 4).
const BY_PRINCIPAL: &str =
    "CREATE INDEX IF NOT EXISTS executions_by_principal ON executions (principal);";

/// The thread-state tables (schema 3).
const THREAD_STATE: &str = "
CREATE TABLE IF NOT EXISTS thread_bindings (
    binding TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    epoch INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS thread_state (
    binding TEXT NOT NULL,
    key TEXT NOT NULL,
    value BLOB NOT NULL,
    version INTEGER NOT NULL,
    PRIMARY KEY (binding, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS thread_versions (last INTEGER NOT NULL);
INSERT INTO thread_versions SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM thread_versions);
";

/// How many queued writes one transaction commits at most.
const GROUP_LIMIT: usize = 512;

const SCHEMA: &str = "
CREATE TABLE executions (
    id TEXT PRIMARY KEY,
    principal TEXT NOT NULL,
    adapter TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    request TEXT NOT NULL,
    idempotency_key TEXT,
    created_at TEXT NOT NULL,
    state TEXT NOT NULL,
    ended INTEGER NOT NULL DEFAULT 0,
    last_seq INTEGER NOT NULL DEFAULT 0,
    cancel_requested TEXT,
    lease_owner TEXT,
    lease_token INTEGER NOT NULL DEFAULT 0,
    lease_expires INTEGER
);
CREATE UNIQUE INDEX executions_by_key ON executions (principal, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX executions_unfinished ON executions (ended);
CREATE TABLE events (
    execution TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (execution, first_seq)
) WITHOUT ROWID;
CREATE TABLE resolutions (
    execution TEXT NOT NULL,
    action TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (execution, action)
) WITHOUT ROWID;
";

/// The [`ExecutionStore`] in one SQLite file: the embedded durable default for one machine.
///
/// **Durability.** The database runs in WAL mode with `synchronous = FULL`: a write is
/// acknowledged only after its transaction's WAL frames reached the disk, so neither a
/// crash of the process (`SIGKILL` included) nor one of the machine loses an acknowledged
/// event, answer or lease. What was not acknowledged may be lost, never half-applied (each
/// write is all or nothing).
///
/// **Group commit.** Every write goes to one writer thread, which takes all the writes
/// queued meanwhile (up to 512) into one transaction, each in a savepoint of its own (one
/// refused write does not undo the others), and pays one `fsync` for all of them: a stream
/// of deltas from many executions costs a sync per batch, not per delta. Checkpoints (the
/// WAL copied into the database) run on a thread of their own beside the writer, which only
/// checkpoints itself when the WAL grows past 4,000 pages.
///
/// **A full disk** (SQLite's `SQLITE_FULL`, or the cap of [`limit_size`](Self::limit_size))
/// fails the write with [`StoreError::Full`], retryable: nothing of it was written (SQLite
/// rolls the transaction back), what was acknowledged stays, and writes succeed again as
/// soon as space returns, on the same open store. Reads go on meanwhile.
///
/// **Several processes** may open one file: each write transaction takes SQLite's write lock
/// (`BEGIN IMMEDIATE`), so leases, fencing, idempotency and at-most-once answers hold across
/// them. A [`Tail`] wakes on this process's writes; another process's appear on the next
/// [`read`](ExecutionStore::read) (poll, or use PostgreSQL to tail across processes).
///
/// ```
/// use std::time::Duration;
/// use harness_core::store::{ExecutionRecord, ExecutionStore, ReplicaId};
/// use harness_core::id::ExecutionId;
/// use harness_store::SqliteStore;
///
/// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
/// let dir = std::env::temp_dir().join(format!("harness-store-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let store = SqliteStore::open(dir.join("harness.db"))?;
/// let id = ExecutionId::generate();
/// store.create(ExecutionRecord::new(id.clone(), "scripted", "fp", serde_json::json!({}))).await?;
/// let lease = store.acquire(&id, &ReplicaId::new("a"), Duration::from_secs(30)).await?;
/// assert_eq!(lease.token.get(), 1);
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok::<(), harness_core::store::StoreError>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct SqliteStore {
    shared: Arc<Shared>,
}

struct Shared {
    path: PathBuf,
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Copies the WAL into the database (see [`checkpointer`]); ends after the writer.
    checkpointer: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Reader connections (WAL lets them read while the writer commits), each used by one
    /// read at a time.
    readers: Vec<Mutex<Connection>>,
    next_reader: std::sync::atomic::AtomicUsize,
    tails: Tails,
}

/// How many reader connections a store opens: reads run at once up to this many.
const READERS: usize = 4;

type Tails = Arc<Mutex<HashMap<ExecutionId, watch::Sender<u64>>>>;

/// What the writer does with a job's connection (in a savepoint); `Done` says how it went.
/// Given no connection (its transaction failed before reaching it), a job does nothing and
/// fails.
type Job = Box<dyn FnOnce(Option<&Connection>) -> Done + Send>;

struct Done {
    ok: bool,
    /// Why the job failed, when it did.
    failed: Option<StoreError>,
    /// Called once the transaction is committed (`Ok`) or failed.
    finish: Box<dyn FnOnce(Result<(), StoreError>) + Send>,
    wake: Option<Wake>,
}

/// Which tail to wake after the commit, and with what.
struct Wake {
    id: ExecutionId,
    /// The new last sequence number; `None`: a signal (an answer, a cancel request).
    last: Option<u64>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.shared.path)
            .finish_non_exhaustive()
    }
}

/// The store's error for a failure of SQLite's: [`StoreError::Full`] when the disk is full
/// (`SQLITE_FULL`: the file could not grow, or reached [`SqliteStore::limit_size`]), else
/// [`StoreError::Unavailable`].
fn unavailable(e: &rusqlite::Error) -> StoreError {
    if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull) {
        return StoreError::Full(format!(
            "SQLite could not write the database: no space left on its disk, or its size \
             limit reached ({e}); nothing was written, free space and retry"
        ));
    }
    StoreError::Unavailable(e.to_string())
}

fn connect(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).map_err(|e| unavailable(&e))?;
    // Another process's write lock is waited for, not reported as an error at once.
    conn.busy_timeout(Duration::from_secs(5))
        .map_err(|e| unavailable(&e))?;
    conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;")
        .map_err(|e| unavailable(&e))?;
    Ok(conn)
}

/// `execute` through the connection's statement cache: the writer runs the same few
/// statements for every job, so parsing each once matters.
fn cached_execute<P: rusqlite::Params>(
    conn: &Connection,
    sql: &str,
    params: P,
) -> rusqlite::Result<usize> {
    conn.prepare_cached(sql)?.execute(params)
}

/// `query_row` through the statement cache.
fn cached_query_row<T, P: rusqlite::Params>(
    conn: &Connection,
    sql: &str,
    params: P,
    f: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    conn.prepare_cached(sql)?.query_row(params, f)
}

fn migrate(conn: &Connection) -> Result<(), StoreError> {
    // The version is read inside the write transaction: of two processes opening an old
    // file at once, the second finds it migrated.
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(|e| unavailable(&e))?;
    let result = cached_query_row(conn, "PRAGMA user_version", [], |r| r.get::<_, i64>(0))
        .map_err(|e| unavailable(&e))
        .and_then(|version| migrate_from(conn, version));
    let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
    conn.execute_batch(end).map_err(|e| unavailable(&e))?;
    result
}

/// Applies the schema to a database at `version`, inside the caller's transaction.
fn migrate_from(conn: &Connection, version: i64) -> Result<(), StoreError> {
    let ddl = match version {
        0 => format!("{SCHEMA} {THREAD_STATE} {BY_PRINCIPAL} {FILES}"),
        // Version 1 held one row per event: each becomes a batch of one.
        1 => format!(
            "CREATE TABLE events_v2 (
                 execution TEXT NOT NULL,
                 first_seq INTEGER NOT NULL,
                 last_seq INTEGER NOT NULL,
                 body TEXT NOT NULL,
                 PRIMARY KEY (execution, first_seq)
             ) WITHOUT ROWID;
             INSERT INTO events_v2 SELECT execution, seq, seq, '[' || body || ']' FROM events;
             DROP TABLE events;
             ALTER TABLE events_v2 RENAME TO events;
             {THREAD_STATE}
             {BY_PRINCIPAL}
             {FILES}"
        ),
        2 | 3 => format!("{THREAD_STATE} {BY_PRINCIPAL} {FILES}"),
        4 | 5 => FILES.to_owned(),
        SCHEMA_VERSION => return Ok(()),
        newer => {
            return Err(StoreError::Corrupt(format!(
                "the database's schema version is {newer}, this code knows up to \
                 {SCHEMA_VERSION}: open it with a newer version"
            )));
        }
    };
    conn.execute_batch(&ddl).map_err(|e| unavailable(&e))?;
    if (1..5).contains(&version) {
        scope_bindings(conn).map_err(|e| unavailable(&e))?;
    }
    conn.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION}"))
        .map_err(|e| unavailable(&e))
}

/// Schema 5: conversations are their principal's. A binding in the unscoped form
/// (`adapter:conversation`) whose conversation a named principal started moves, with its
/// state, to that principal's binding ([`FirstCallers::moved`]).
fn scope_bindings(conn: &Connection) -> rusqlite::Result<()> {
    let mut first = FirstCallers::default();
    {
        let mut select = conn.prepare(
            "SELECT adapter, conversation, principal FROM \
             (SELECT rowid, adapter, principal, \
                     json_extract(request, '$.conversationId') AS conversation \
              FROM executions) \
             WHERE conversation IS NOT NULL ORDER BY rowid",
        )?;
        let mut rows = select.query([])?;
        while let Some(row) = rows.next()? {
            first.note(row.get(0)?, row.get(1)?, row.get(2)?);
        }
    }
    let bindings = conn
        .prepare("SELECT binding, owner FROM thread_bindings")?
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    for (binding, owner) in bindings {
        let Some(to) = first.moved(&binding, &owner) else {
            continue;
        };
        // Written meanwhile by code that scopes already: that one is the principal's.
        let taken: bool = conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM thread_bindings WHERE binding = ?1)",
            [&to],
            |r| r.get(0),
        )?;
        if !taken {
            conn.execute(
                "UPDATE thread_bindings SET binding = ?2 WHERE binding = ?1",
                [&binding, &to],
            )?;
            conn.execute(
                "UPDATE thread_state SET binding = ?2 WHERE binding = ?1",
                [&binding, &to],
            )?;
        }
    }
    Ok(())
}

impl SqliteStore {
    /// Opens (creating it if needed) the store in the file at `path`, applying the schema.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the file cannot be opened or written,
    /// [`StoreError::Corrupt`] when it holds a newer schema.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let mut writer = connect(&path)?;
        migrate(&writer)?;
        let readers = (0..READERS)
            .map(|_| connect(&path).map(Mutex::new))
            .collect::<Result<Vec<_>, _>>()?;
        let tails: Tails = Arc::default();
        let checkpointer = checkpointer(&path, &mut writer)?;
        let (jobs, queue) = mpsc::channel::<Job>();
        let wake = Arc::clone(&tails);
        let thread = std::thread::Builder::new()
            .name("harness-sqlite-writer".into())
            .spawn(move || write_loop(&writer, &queue, &wake))
            .map_err(|e| StoreError::Unavailable(format!("cannot start the writer: {e}")))?;
        Ok(Self {
            shared: Arc::new(Shared {
                path,
                jobs: Mutex::new(Some(jobs)),
                writer: Mutex::new(Some(thread)),
                checkpointer: Mutex::new(Some(checkpointer)),
                readers,
                next_reader: std::sync::atomic::AtomicUsize::new(0),
                tails,
            }),
        })
    }

    /// The database file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Caps the database at about `bytes` (whole pages, never below its size now: `Some(0)`
    /// stops it growing at all); `None` lifts the cap. A write that would grow the database
    /// past it fails with [`StoreError::Full`], exactly as on a full disk (SQLite's own
    /// `SQLITE_FULL`, through `PRAGMA max_page_count`): a quota on a shared disk, and the
    /// fault the disk-full tests inject where they cannot make a small filesystem. The cap
    /// holds while this store is open (it is not kept in the file). Resolves to the cap in
    /// bytes.
    ///
    /// ```
    /// use harness_core::store::{ExecutionRecord, ExecutionStore, StoreError};
    /// use harness_core::id::ExecutionId;
    /// use harness_store::SqliteStore;
    ///
    /// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
    /// let dir = std::env::temp_dir().join(format!("harness-store-limit-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let store = SqliteStore::open(dir.join("harness.db"))?;
    /// store.limit_size(Some(0)).await?;
    /// let big = serde_json::json!({ "text": "x".repeat(1 << 20) });
    /// let refused = store.create(ExecutionRecord::new(ExecutionId::generate(), "a", "fp", big.clone())).await;
    /// assert!(matches!(refused, Err(StoreError::Full(_))), "{refused:?}");
    /// store.limit_size(None).await?;
    /// store.create(ExecutionRecord::new(ExecutionId::generate(), "a", "fp", big)).await?;
    /// # drop(store);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), StoreError>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the writer has stopped.
    pub fn limit_size(&self, bytes: Option<u64>) -> BoxFuture<'static, Result<u64, StoreError>> {
        self.write(move |conn| {
            let page: i64 = cached_query_row(conn, "PRAGMA page_size", [], |r| r.get(0))
                .map_err(|e| unavailable(&e))?;
            let page = u64::try_from(page).unwrap_or(4096).max(1);
            // SQLite clamps the count: up to its largest, down to the pages in use (0 would
            // only read it).
            let pages = bytes.map_or(i64::MAX, |b| {
                i64::try_from(b / page).unwrap_or(i64::MAX).max(1)
            });
            let set: i64 = conn
                .query_row(&format!("PRAGMA max_page_count = {pages}"), [], |r| {
                    r.get(0)
                })
                .map_err(|e| unavailable(&e))?;
            Ok((u64::try_from(set).unwrap_or(0).saturating_mul(page), None))
        })
    }

    /// Queues a write; resolves once its transaction is committed.
    fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<(T, Option<Wake>), StoreError> + Send + 'static,
    ) -> BoxFuture<'static, Result<T, StoreError>> {
        let (reply, answer) = oneshot::channel();
        let job: Job = Box::new(move |conn| match conn.map(f) {
            // Given the transaction's failure.
            None => Done {
                ok: false,
                failed: None,
                finish: Box::new(move |failed| {
                    let _ = reply.send(Err(failed.err().unwrap_or_else(|| {
                        StoreError::Unavailable("the store's transaction failed".into())
                    })));
                }),
                wake: None,
            },
            Some(Ok((value, wake))) => Done {
                ok: true,
                failed: None,
                finish: Box::new(move |committed| {
                    let _ = reply.send(committed.map(|()| value));
                }),
                wake,
            },
            Some(Err(e)) => Done {
                ok: false,
                failed: Some(e.clone()),
                finish: Box::new(move |_| {
                    let _ = reply.send(Err(e));
                }),
                wake: None,
            },
        });
        let sent = lock(&self.shared.jobs)
            .as_ref()
            .is_some_and(|jobs| jobs.send(job).is_ok());
        Box::pin(async move {
            if !sent {
                return Err(StoreError::Unavailable("the store's writer stopped".into()));
            }
            answer.await.unwrap_or_else(|_| {
                Err(StoreError::Unavailable("the store's writer stopped".into()))
            })
        })
    }

    /// Appends one batch as one row: its JSON array `body` (serialized on the caller's
    /// thread: the writer only writes) and its events, shared, for the checks.
    fn append_batch(
        &self,
        lease: &Lease,
        body: Result<String, StoreError>,
        checked: Vec<Arc<Event>>,
    ) -> BoxFuture<'static, Result<(), StoreError>> {
        let lease = lease.clone();
        self.write(move |conn| {
            let body = body?;
            check_lease(conn, &lease)?;
            let id = &lease.execution_id;
            let (last, ended): (i64, bool) = cached_query_row(
                conn,
                "SELECT last_seq, ended FROM executions WHERE id = ?1",
                [id.as_str()],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(|e| unavailable(&e))?;
            let last = u64::try_from(last).unwrap_or(0);
            let (state, ends) = check_batch(id, last, ended, &checked)?;
            if checked.is_empty() {
                return Ok(((), None));
            }
            let new_last = last + checked.len() as u64;
            cached_execute(
                conn,
                "INSERT INTO events (execution, first_seq, last_seq, body) \
                 VALUES (?1, ?2, ?3, ?4)",
                params![
                    id.as_str(),
                    i64::try_from(last + 1).unwrap_or(i64::MAX),
                    i64::try_from(new_last).unwrap_or(i64::MAX),
                    body
                ],
            )
            .map_err(|e| unavailable(&e))?;
            cached_execute(
                conn,
                "UPDATE executions SET last_seq = ?2, ended = ended OR ?3, \
                 state = COALESCE(?4, state) WHERE id = ?1",
                params![
                    id.as_str(),
                    i64::try_from(new_last).unwrap_or(i64::MAX),
                    ends,
                    state.map(state_name),
                ],
            )
            .map_err(|e| unavailable(&e))?;
            Ok((
                (),
                Some(Wake {
                    id: id.clone(),
                    last: Some(new_last),
                }),
            ))
        })
    }

    /// Runs a read on a free reader connection (the next one when all are busy), off the
    /// async threads.
    fn read_with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> BoxFuture<'static, Result<T, StoreError>> {
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let readers = &shared.readers;
                let free = readers.iter().find_map(|r| r.try_lock().ok());
                let connection = free.unwrap_or_else(|| {
                    let n = shared
                        .next_reader
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    lock(&readers[n % readers.len()])
                });
                f(&connection)
            })
            .await
            .unwrap_or_else(|e| Err(StoreError::Unavailable(format!("a read failed: {e}"))))
        })
    }
}

impl Drop for Shared {
    /// Closes the queue and waits for the writer to commit what was queued and close the
    /// database: once the last clone is dropped, the file is complete and closed.
    fn drop(&mut self) {
        lock(&self.jobs).take();
        for thread in [lock(&self.writer).take(), lock(&self.checkpointer).take()]
            .into_iter()
            .flatten()
        {
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

/// A batch's row body, the JSON array of its events, written into a buffer sized for
/// them at once (an append of 32,768 deltas is some 5 MB: growing it by doubling copied
/// it twice over).
fn batch_body<E: serde::Serialize>(events: &[E]) -> Result<String, StoreError> {
    let mut body = Vec::with_capacity(events.len().saturating_mul(192).min(64 << 20));
    serde_json::to_writer(&mut body, events).map_err(|err| corrupt("an event", &err))?;
    String::from_utf8(body).map_err(|err| corrupt("an event", &err))
}

/// WAL frames (pages) past which the checkpointer copies the WAL into the database: SQLite's
/// own auto-checkpoint threshold. The writer wakes it again after as many more.
const CHECKPOINT_FRAMES: i32 = 1000;

/// WAL frames past which the writer checkpoints itself, between two commits, as SQLite's
/// auto-checkpoint does: the WAL restarts from its start only after a checkpoint that copied
/// all of it, which one running beside a writer that never pauses may not manage.
const INLINE_CHECKPOINT_FRAMES: i32 = 4 * CHECKPOINT_FRAMES;

/// Starts the thread that checkpoints the WAL on a connection of its own, and hands the
/// writer's commits to it instead of SQLite's auto-checkpoint.
///
/// SQLite checkpoints inside the commit that crosses its threshold: the writer stops writing
/// while it reads the WAL back and syncs the database, and every execution streaming through
/// it waits (with appends of thousands of events, every few commits). Here a commit past
/// [`CHECKPOINT_FRAMES`] only wakes the checkpointer (once per that many new frames), which
/// runs a `PASSIVE` checkpoint (never blocking the writer or readers) while the writer goes
/// on; past [`INLINE_CHECKPOINT_FRAMES`] the writer checkpoints itself, so the WAL stays
/// bounded. Durability is unchanged: a commit is acknowledged once the WAL is synced,
/// whatever the checkpoints' progress.
fn checkpointer(
    path: &Path,
    writer: &mut Connection,
) -> Result<std::thread::JoinHandle<()>, StoreError> {
    let conn = connect(path)?;
    let (kick, kicked) = mpsc::sync_channel::<()>(1);
    let mut next = CHECKPOINT_FRAMES;
    let mut last = 0;
    // Replaces the auto-checkpoint (which is a WAL hook too). Dropped with the writer's
    // connection: the checkpointer then ends.
    writer
        .wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, frames: i32| {
            if frames < last {
                // The WAL restarted from its start.
                next = CHECKPOINT_FRAMES;
            }
            last = frames;
            if frames >= INLINE_CHECKPOINT_FRAMES {
                // Busy while the checkpointer runs one: the next commit tries again.
                match wal.checkpoint_v2(rusqlite::wal::CheckpointMode::PASSIVE) {
                    Err(e) if e.sqlite_error_code() != Some(rusqlite::ErrorCode::DatabaseBusy) => {
                        tracing::warn!(error = %e, "a WAL checkpoint failed; a later commit retries");
                    }
                    _ => {}
                }
            } else if frames >= next {
                next = frames + CHECKPOINT_FRAMES;
                let _ = kick.try_send(());
            }
            Ok(())
        }))
        .map_err(|e| unavailable(&e))?;
    std::thread::Builder::new()
        .name("harness-sqlite-checkpointer".into())
        .spawn(move || {
            while kicked.recv().is_ok() {
                if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                    tracing::warn!(error = %e, "a WAL checkpoint failed; a later commit retries");
                }
            }
        })
        .map_err(|e| StoreError::Unavailable(format!("cannot start the checkpointer: {e}")))
}

fn write_loop(conn: &Connection, queue: &mpsc::Receiver<Job>, tails: &Tails) {
    while let Ok(first) = queue.recv() {
        let mut jobs = vec![first];
        while jobs.len() < GROUP_LIMIT {
            match queue.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        let mut done = Vec::with_capacity(jobs.len());
        let committed = (|| {
            let run = |sql: &str| cached_execute(conn, sql, []).map(drop);
            run("BEGIN IMMEDIATE").map_err(|e| unavailable(&e))?;
            for job in jobs.drain(..) {
                if let Err(e) = run("SAVEPOINT job") {
                    let _ = run("ROLLBACK");
                    return Err(unavailable(&e));
                }
                let outcome = job(Some(conn));
                let end = if outcome.ok {
                    run("RELEASE job")
                } else {
                    run("ROLLBACK TO job").and_then(|()| run("RELEASE job"))
                };
                // After `SQLITE_FULL` SQLite may roll the whole transaction back itself (the
                // savepoint is then gone): the full disk is the transaction's failure.
                let full = match &outcome.failed {
                    Some(full @ StoreError::Full(_)) => Some(full.clone()),
                    _ => None,
                };
                done.push(outcome);
                if let Err(e) = end {
                    let _ = run("ROLLBACK");
                    return Err(full.unwrap_or_else(|| unavailable(&e)));
                }
            }
            run("COMMIT").map_err(|e| {
                let _ = run("ROLLBACK");
                unavailable(&e)
            })
        })();
        // Jobs a failed transaction never reached fail like the others.
        let mut wakes = Vec::new();
        for outcome in done {
            if committed.is_ok()
                && let Some(wake) = outcome.wake
            {
                wakes.push(wake);
            }
            (outcome.finish)(committed.clone());
        }
        for job in jobs {
            (job(None).finish)(committed.clone());
        }
        let mut tails = lock(tails);
        for Wake { id, last } in wakes {
            if let Some(tail) = tails.get(&id) {
                match last {
                    Some(last) => {
                        tail.send_replace(last);
                    }
                    None => tail.send_modify(|_| {}),
                }
                if tail.receiver_count() == 0 {
                    tails.remove(&id);
                }
            }
        }
    }
}

fn millis(ts: Timestamp) -> i64 {
    ts.as_millis()
}

type RawRecord = (
    String,
    String,
    String,
    String,
    String,
    Option<String>,
    String,
    String,
    Option<String>,
);

fn raw_record(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawRecord> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
        row.get(6)?,
        row.get(7)?,
        row.get(8)?,
    ))
}

fn to_record(raw: RawRecord) -> Result<ExecutionRecord, StoreError> {
    let (id, principal, adapter, fingerprint, request, key, created_at, state, cancel) = raw;
    Ok(ExecutionRecord {
        id: id.parse().map_err(|e| corrupt("an execution id", &e))?,
        principal,
        adapter,
        fingerprint,
        request: serde_json::from_str(&request).map_err(|e| corrupt("a request", &e))?,
        idempotency_key: key
            .map(|k| k.parse::<IdempotencyKey>())
            .transpose()
            .map_err(|e| corrupt("an idempotency key", &e))?,
        created_at: created_at
            .parse()
            .map_err(|e| corrupt("a creation time", &e))?,
        state: parse_state(&state)?,
        cancel_requested: cancel,
    })
}

fn record_of(conn: &Connection, id: &ExecutionId) -> Result<ExecutionRecord, StoreError> {
    let raw = cached_query_row(
        conn,
        &format!("SELECT {RECORD_COLUMNS} FROM executions WHERE id = ?1"),
        [id.as_str()],
        raw_record,
    )
    .optional()
    .map_err(|e| unavailable(&e))?
    .ok_or_else(|| StoreError::NotFound(id.clone()))?;
    to_record(raw)
}

/// The lease columns of `id`: (owner, token, expires).
fn lease_of(
    conn: &Connection,
    id: &ExecutionId,
) -> Result<(Option<String>, u64, Option<i64>), StoreError> {
    cached_query_row(
        conn,
        "SELECT lease_owner, lease_token, lease_expires FROM executions WHERE id = ?1",
        [id.as_str()],
        |r| Ok((r.get(0)?, r.get::<_, i64>(1)?, r.get(2)?)),
    )
    .optional()
    .map_err(|e| unavailable(&e))?
    .map(|(owner, token, expires)| (owner, u64::try_from(token).unwrap_or(0), expires))
    .ok_or_else(|| StoreError::NotFound(id.clone()))
}

/// Refuses a write under `lease` unless it is the current, unexpired one.
fn check_lease(conn: &Connection, lease: &Lease) -> Result<(), StoreError> {
    let (owner, token, expires) = lease_of(conn, &lease.execution_id)?;
    let now = millis(Timestamp::now());
    let current = owner.as_deref() == Some(lease.owner.as_str())
        && token == lease.token.get()
        && expires.is_some_and(|e| e > now);
    if current {
        Ok(())
    } else {
        Err(StoreError::Fenced {
            execution: lease.execution_id.clone(),
            presented: lease.token,
            current: FencingToken::new(token),
        })
    }
}

fn signal(id: &ExecutionId) -> Option<Wake> {
    Some(Wake {
        id: id.clone(),
        last: None,
    })
}

impl ExecutionStore for SqliteStore {
    fn create(&self, record: ExecutionRecord) -> BoxFuture<'_, Result<Created, StoreError>> {
        self.write(move |conn| {
            let exists: bool = cached_query_row(
                conn,
                "SELECT 1 FROM executions WHERE id = ?1",
                [record.id.as_str()],
                |_| Ok(true),
            )
            .optional()
            .map_err(|e| unavailable(&e))?
            .unwrap_or(false);
            if exists {
                return Err(StoreError::Exists(record.id));
            }
            if let Some(key) = &record.idempotency_key {
                let first: Option<String> = cached_query_row(
                    conn,
                    "SELECT id FROM executions WHERE principal = ?1 AND idempotency_key = ?2",
                    params![record.principal, key.as_str()],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| unavailable(&e))?;
                if let Some(first) = first {
                    let first_id: ExecutionId =
                        first.parse().map_err(|e| corrupt("an execution id", &e))?;
                    let first = record_of(conn, &first_id)?;
                    return if first.fingerprint == record.fingerprint {
                        Ok((Created::Existing(Box::new(first)), None))
                    } else {
                        Err(StoreError::IdempotencyConflict {
                            key: key.clone(),
                            existing: first_id,
                        })
                    };
                }
            }
            cached_execute(
                conn,
                "INSERT INTO executions (id, principal, adapter, fingerprint, request, \
                 idempotency_key, created_at, state, cancel_requested) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    record.id.as_str(),
                    record.principal,
                    record.adapter,
                    record.fingerprint,
                    record.request.to_string(),
                    record.idempotency_key.as_ref().map(IdempotencyKey::as_str),
                    record.created_at.to_string(),
                    state_name(record.state),
                    record.cancel_requested,
                ],
            )
            .map_err(|e| unavailable(&e))?;
            Ok((Created::New, None))
        })
    }

    fn record<'a>(
        &'a self,
        id: &'a ExecutionId,
    ) -> BoxFuture<'a, Result<ExecutionRecord, StoreError>> {
        let id = id.clone();
        self.read_with(move |conn| record_of(conn, &id))
    }

    fn unfinished(&self) -> BoxFuture<'_, Result<Vec<ExecutionRecord>, StoreError>> {
        self.read_with(|conn| {
            let mut statement = conn
                .prepare(&format!(
                    "SELECT {RECORD_COLUMNS} FROM executions WHERE ended = 0 \
                     ORDER BY rowid"
                ))
                .map_err(|e| unavailable(&e))?;
            let rows = statement
                .query_map([], raw_record)
                .map_err(|e| unavailable(&e))?;
            let mut records = Vec::new();
            for row in rows {
                records.push(to_record(row.map_err(|e| unavailable(&e))?)?);
            }
            Ok(records)
        })
    }

    fn list<'a>(
        &'a self,
        principal: &'a str,
        before: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Listed>, StoreError>> {
        let principal = principal.to_owned();
        let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read_with(move |conn| {
            // The rowid is the position: it grows with creation (`executions_by_principal`
            // holds it, so a page is one index range).
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {RECORD_COLUMNS}, rowid FROM executions \
                     WHERE principal = ?1 AND rowid < ?2 ORDER BY rowid DESC LIMIT ?3"
                ))
                .map_err(|e| unavailable(&e))?;
            let rows = statement
                .query_map(rusqlite::params![principal, before, limit], |row| {
                    Ok((raw_record(row)?, row.get::<_, i64>(9)?))
                })
                .map_err(|e| unavailable(&e))?;
            let mut page = Vec::new();
            for row in rows {
                let (raw, position) = row.map_err(|e| unavailable(&e))?;
                page.push(Listed {
                    position: u64::try_from(position)
                        .map_err(|e| corrupt("a record's position", &e))?,
                    record: to_record(raw)?,
                });
            }
            Ok(page)
        })
    }

    fn acquire<'a>(
        &'a self,
        id: &'a ExecutionId,
        owner: &'a ReplicaId,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Lease, StoreError>> {
        let (id, owner) = (id.clone(), owner.clone());
        self.write(move |conn| {
            let (held_by, token, expires) = lease_of(conn, &id)?;
            let now = Timestamp::now();
            let live = expires.is_some_and(|e| e > millis(now));
            let token = match held_by {
                Some(held) if live && held == owner.as_str() => token,
                Some(held) if live => {
                    return Err(StoreError::Leased {
                        execution: id,
                        owner: ReplicaId::new(held),
                        until: from_millis(expires.unwrap_or_default())?,
                    });
                }
                _ => token + 1,
            };
            let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
            let until = millis(now).saturating_add(ttl);
            cached_execute(
                conn,
                "UPDATE executions SET lease_owner = ?2, lease_token = ?3, lease_expires = ?4 \
                 WHERE id = ?1",
                params![
                    id.as_str(),
                    owner.as_str(),
                    i64::try_from(token).unwrap_or(i64::MAX),
                    until
                ],
            )
            .map_err(|e| unavailable(&e))?;
            let lease = Lease {
                execution_id: id,
                owner,
                token: FencingToken::new(token),
                expires_at: from_millis(until)?,
            };
            Ok((lease, None))
        })
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        let lease = lease.clone();
        self.write(move |conn| {
            check_lease(conn, &lease)?;
            cached_execute(
                conn,
                "UPDATE executions SET lease_owner = NULL, lease_expires = NULL WHERE id = ?1",
                [lease.execution_id.as_str()],
            )
            .map_err(|e| unavailable(&e))?;
            Ok(((), None))
        })
    }

    fn append<'a>(
        &'a self,
        lease: &'a Lease,
        events: &'a [Event],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let body = batch_body(events);
        self.append_batch(lease, body, events.iter().cloned().map(Arc::new).collect())
    }

    fn append_shared<'a>(
        &'a self,
        lease: &'a Lease,
        events: &'a [Arc<Event>],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let body = batch_body(events);
        self.append_batch(lease, body, events.to_vec())
    }

    fn read<'a>(
        &'a self,
        id: &'a ExecutionId,
        after: Cursor,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Event>, StoreError>> {
        let id = id.clone();
        self.read_with(move |conn| {
            // An unknown execution is an error, not an empty log.
            lease_of(conn, &id)?;
            // From the batch holding the event after the cursor, in order, until `limit`.
            let mut statement = conn
                .prepare_cached(
                    "SELECT body FROM events WHERE execution = ?1 AND first_seq >= \
                     (SELECT COALESCE(MAX(first_seq), 0) FROM events \
                      WHERE execution = ?1 AND first_seq <= ?2) \
                     ORDER BY first_seq",
                )
                .map_err(|e| unavailable(&e))?;
            let mut rows = statement
                .query(params![
                    id.as_str(),
                    i64::try_from(after.after().saturating_add(1)).unwrap_or(i64::MAX)
                ])
                .map_err(|e| unavailable(&e))?;
            let mut events = Vec::new();
            while events.len() < limit {
                let Some(row) = rows.next().map_err(|e| unavailable(&e))? else {
                    break;
                };
                let body: String = row.get(0).map_err(|e| unavailable(&e))?;
                let batch: Vec<Event> =
                    serde_json::from_str(&body).map_err(|e| corrupt("an event", &e))?;
                events.extend(
                    batch
                        .into_iter()
                        .filter(|e| e.seq().get() > after.after())
                        .take(limit - events.len()),
                );
            }
            Ok(events)
        })
    }

    fn tail<'a>(&'a self, id: &'a ExecutionId) -> BoxFuture<'a, Result<Tail, StoreError>> {
        let id = id.clone();
        let tails = Arc::clone(&self.shared.tails);
        let last = self.read_with({
            let id = id.clone();
            move |conn| {
                cached_query_row(
                    conn,
                    "SELECT last_seq FROM executions WHERE id = ?1",
                    [id.as_str()],
                    |r| r.get::<_, i64>(0),
                )
                .optional()
                .map_err(|e| unavailable(&e))?
                .ok_or(StoreError::NotFound(id))
            }
        });
        Box::pin(async move {
            let stored = u64::try_from(last.await?).unwrap_or(0);
            let mut tails = lock(&tails);
            let sender = tails
                .entry(id)
                .or_insert_with(|| watch::Sender::new(stored));
            // A write committed between the read and now already woke (or created) it.
            sender.send_if_modified(|last| {
                let newer = stored > *last;
                if newer {
                    *last = stored;
                }
                newer
            });
            Ok(Tail::new(sender.subscribe()))
        })
    }

    fn resolve<'a>(
        &'a self,
        id: &'a ExecutionId,
        resolution: Resolution,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let id = id.clone();
        self.write(move |conn| {
            lease_of(conn, &id)?;
            let body = serde_json::to_string(&resolution).map_err(|e| corrupt("an answer", &e))?;
            let inserted = cached_execute(
                conn,
                "INSERT INTO resolutions (execution, action, body) VALUES (?1, ?2, ?3) \
                     ON CONFLICT DO NOTHING",
                params![id.as_str(), resolution.action_id.as_str(), body],
            )
            .map_err(|e| unavailable(&e))?;
            if inserted == 0 {
                return Err(StoreError::AlreadyResolved {
                    execution: id,
                    action: resolution.action_id,
                });
            }
            Ok(((), signal(&id)))
        })
    }

    fn resolution<'a>(
        &'a self,
        id: &'a ExecutionId,
        action: &'a ActionId,
    ) -> BoxFuture<'a, Result<Option<Resolution>, StoreError>> {
        let (id, action) = (id.clone(), action.clone());
        self.read_with(move |conn| {
            lease_of(conn, &id)?;
            let body: Option<String> = cached_query_row(
                conn,
                "SELECT body FROM resolutions WHERE execution = ?1 AND action = ?2",
                params![id.as_str(), action.as_str()],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| unavailable(&e))?;
            body.map(|b| serde_json::from_str(&b).map_err(|e| corrupt("an answer", &e)))
                .transpose()
        })
    }

    fn request_cancel<'a>(
        &'a self,
        id: &'a ExecutionId,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let (id, reason) = (id.clone(), reason.to_owned());
        self.write(move |conn| {
            lease_of(conn, &id)?;
            let changed = cached_execute(
                conn,
                "UPDATE executions SET cancel_requested = ?2 \
                     WHERE id = ?1 AND cancel_requested IS NULL",
                params![id.as_str(), reason],
            )
            .map_err(|e| unavailable(&e))?;
            let first = changed == 1;
            Ok((first, first.then(|| signal(&id)).flatten()))
        })
    }

    fn purge(
        &self,
        created_before: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        self.write(move |conn| {
            // Rowid order is creation order: the oldest ended first (the `ended` index
            // holds rowids in order), none older after the first too new.
            let mut statement = conn
                .prepare_cached(
                    "SELECT id, created_at FROM executions WHERE ended = 1 \
                     ORDER BY rowid LIMIT ?1",
                )
                .map_err(|e| unavailable(&e))?;
            let rows = statement
                .query_map([i64::try_from(limit).unwrap_or(i64::MAX)], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
                })
                .map_err(|e| unavailable(&e))?;
            let mut doomed = Vec::new();
            for row in rows {
                let (id, created_at) = row.map_err(|e| unavailable(&e))?;
                let created_at: Timestamp = created_at
                    .parse()
                    .map_err(|e| corrupt("a creation time", &e))?;
                if created_at >= created_before {
                    break;
                }
                doomed.push(id);
            }
            drop(statement);
            for id in &doomed {
                for sql in [
                    "DELETE FROM events WHERE execution = ?1",
                    "DELETE FROM resolutions WHERE execution = ?1",
                    "DELETE FROM executions WHERE id = ?1",
                ] {
                    cached_execute(conn, sql, [id.as_str()]).map_err(|e| unavailable(&e))?;
                }
            }
            Ok((doomed.len(), None))
        })
    }
}

/// Whether `b` may use its binding: the binding's conversation and epoch, recorded on first
/// use; a newer epoch moves the binding there and drops the older state.
fn admit(conn: &Connection, b: &SessionBinding) -> Result<Result<(), StateError>, StoreError> {
    let binding = b.binding_id().as_str();
    let known: Option<(String, i64)> = cached_query_row(
        conn,
        "SELECT owner, epoch FROM thread_bindings WHERE binding = ?1",
        [binding],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .optional()
    .map_err(|e| unavailable(&e))?;
    let epoch = i64::try_from(b.epoch()).unwrap_or(i64::MAX);
    let Some((owner, current)) = known else {
        cached_execute(
            conn,
            "INSERT INTO thread_bindings (binding, owner, epoch) VALUES (?1, ?2, ?3)",
            params![binding, b.conversation_id().as_str(), epoch],
        )
        .map_err(|e| unavailable(&e))?;
        return Ok(Ok(()));
    };
    if owner != b.conversation_id().as_str() {
        return Ok(Err(StateError::BindingMismatch {
            binding: b.binding_id().clone(),
            owner: owner
                .parse()
                .map_err(|e| corrupt("a conversation id", &e))?,
            claimed: b.conversation_id().clone(),
        }));
    }
    if epoch < current {
        return Ok(Err(StateError::StaleEpoch {
            binding: b.binding_id().clone(),
            epoch: b.epoch(),
            current: u64::try_from(current).unwrap_or(0),
        }));
    }
    if epoch > current {
        cached_execute(
            conn,
            "UPDATE thread_bindings SET epoch = ?2 WHERE binding = ?1",
            params![binding, epoch],
        )
        .map_err(|e| unavailable(&e))?;
        cached_execute(
            conn,
            "DELETE FROM thread_state WHERE binding = ?1",
            [binding],
        )
        .map_err(|e| unavailable(&e))?;
    }
    Ok(Ok(()))
}

fn state_version(
    conn: &Connection,
    binding: &str,
    key: &str,
) -> Result<Option<Version>, StoreError> {
    Ok(cached_query_row(
        conn,
        "SELECT version FROM thread_state WHERE binding = ?1 AND key = ?2",
        [binding, key],
        |r| r.get::<_, i64>(0),
    )
    .optional()
    .map_err(|e| unavailable(&e))?
    .and_then(|v| u64::try_from(v).ok())
    .and_then(Version::new))
}

impl SqliteStore {
    /// Runs a thread-state operation on the writer (every operation may record the binding
    /// or move its epoch): SQL failures are `Unavailable`.
    fn state<T: Send + 'static>(
        &self,
        binding: &SessionBinding,
        f: impl FnOnce(&Connection, &SessionBinding) -> Result<Result<T, StateError>, StoreError>
        + Send
        + 'static,
    ) -> BoxFuture<'static, Result<T, StateError>> {
        let binding = binding.clone();
        let done = self.write(move |conn| {
            let result = match admit(conn, &binding)? {
                Ok(()) => f(conn, &binding)?,
                Err(refused) => Err(refused),
            };
            Ok((result, None))
        });
        Box::pin(async move {
            done.await.unwrap_or_else(|e| {
                Err(StateError::Unavailable {
                    reason: e.to_string(),
                })
            })
        })
    }
}

/// The thread state of each binding in the same file (schema 3): compare-and-set by version
/// (versions never reused, file-wide), epochs fenced, a binding bound to its first
/// conversation; every write through the writer thread, so it holds across the processes
/// that share the file.
impl ThreadStateStore for SqliteStore {
    fn get<'a>(
        &'a self,
        binding: &'a SessionBinding,
        key: &'a StateKey,
    ) -> BoxFuture<'a, Result<Option<StateEntry>, StateError>> {
        let key = key.clone();
        self.state(binding, move |conn, b| {
            let entry = cached_query_row(
                conn,
                "SELECT value, version FROM thread_state WHERE binding = ?1 AND key = ?2",
                [b.binding_id().as_str(), key.as_str()],
                |r| Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, i64>(1)?)),
            )
            .optional()
            .map_err(|e| unavailable(&e))?;
            Ok(Ok(entry.and_then(|(value, version)| {
                let version = Version::new(u64::try_from(version).ok()?)?;
                Some(StateEntry { value, version })
            })))
        })
    }

    fn put<'a>(
        &'a self,
        binding: &'a SessionBinding,
        key: &'a StateKey,
        value: Vec<u8>,
        expected: Option<Version>,
    ) -> BoxFuture<'a, Result<Version, StateError>> {
        let key = key.clone();
        self.state(binding, move |conn, b| {
            let binding = b.binding_id().as_str();
            let actual = state_version(conn, binding, key.as_str())?;
            if actual != expected {
                return Ok(Err(StateError::VersionConflict {
                    key,
                    expected,
                    actual,
                }));
            }
            let next: i64 = cached_query_row(
                conn,
                "UPDATE thread_versions SET last = last + 1 RETURNING last",
                [],
                |r| r.get(0),
            )
            .map_err(|e| unavailable(&e))?;
            let Some(version) = u64::try_from(next).ok().and_then(Version::new) else {
                return Ok(Err(StateError::Unavailable {
                    reason: "the store has no versions left".to_owned(),
                }));
            };
            cached_execute(
                conn,
                "INSERT INTO thread_state (binding, key, value, version) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (binding, key) DO UPDATE SET value = ?3, version = ?4",
                params![binding, key.as_str(), value, next],
            )
            .map_err(|e| unavailable(&e))?;
            Ok(Ok(version))
        })
    }

    fn delete<'a>(
        &'a self,
        binding: &'a SessionBinding,
        key: &'a StateKey,
        expected: Version,
    ) -> BoxFuture<'a, Result<(), StateError>> {
        let key = key.clone();
        self.state(binding, move |conn, b| {
            let binding = b.binding_id().as_str();
            let actual = state_version(conn, binding, key.as_str())?;
            if actual != Some(expected) {
                return Ok(Err(StateError::VersionConflict {
                    key,
                    expected: Some(expected),
                    actual,
                }));
            }
            cached_execute(
                conn,
                "DELETE FROM thread_state WHERE binding = ?1 AND key = ?2",
                [binding, key.as_str()],
            )
            .map_err(|e| unavailable(&e))?;
            Ok(Ok(()))
        })
    }

    fn list_keys<'a>(
        &'a self,
        binding: &'a SessionBinding,
    ) -> BoxFuture<'a, Result<Vec<StateKey>, StateError>> {
        self.state(binding, |conn, b| {
            let mut statement = conn
                .prepare_cached("SELECT key FROM thread_state WHERE binding = ?1 ORDER BY key")
                .map_err(|e| unavailable(&e))?;
            let rows = statement
                .query_map([b.binding_id().as_str()], |r| r.get::<_, String>(0))
                .map_err(|e| unavailable(&e))?;
            let mut keys = Vec::new();
            for key in rows {
                let key = key.map_err(|e| unavailable(&e))?;
                keys.push(key.parse().map_err(|e| corrupt("a state key", &e))?);
            }
            Ok(Ok(keys))
        })
    }

    fn clear<'a>(
        &'a self,
        binding: &'a SessionBinding,
    ) -> BoxFuture<'a, Result<SessionBinding, StateError>> {
        self.state(binding, |conn, b| {
            let Some(next) = b.epoch().checked_add(1) else {
                return Ok(Err(StateError::Unavailable {
                    reason: format!("binding `{}` has no epoch left", b.binding_id()),
                }));
            };
            let id = b.binding_id().as_str();
            cached_execute(conn, "DELETE FROM thread_state WHERE binding = ?1", [id])
                .map_err(|e| unavailable(&e))?;
            cached_execute(
                conn,
                "UPDATE thread_bindings SET epoch = ?2 WHERE binding = ?1",
                params![id, i64::try_from(next).unwrap_or(i64::MAX)],
            )
            .map_err(|e| unavailable(&e))?;
            Ok(Ok(b.clone().with_epoch(next)))
        })
    }
}

/// The columns a file's [`FileInfo`] is read from, in [`file_info`]'s order.
const FILE_COLUMNS: &str = "id, name, media_type, size, created_at, expires_at";

fn file_info(row: &rusqlite::Row<'_>) -> rusqlite::Result<(String, String, String, i64, i64, i64)> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
    ))
}

/// The [`FileInfo`] of a row read by [`file_info`].
fn to_file_info(
    (id, name, media_type, size, created_at, expires_at): (String, String, String, i64, i64, i64),
) -> Result<FileInfo, HarnessError> {
    let time = |ms| from_millis(ms).map_err(|e| e.to_harness_error());
    Ok(FileInfo {
        id: crate::files::file_id(&id)?,
        name,
        media_type: crate::files::media_type(&media_type)?,
        size: u64::try_from(size).unwrap_or(0),
        created_at: time(created_at)?,
        expires_at: time(expires_at)?,
    })
}

impl SqliteStore {
    /// `caller`'s unexpired file `id`.
    fn find_file(
        &self,
        caller: &CallerId,
        id: &FileId,
    ) -> BoxFuture<'static, Result<Option<FileInfo>, HarnessError>> {
        let (caller, id) = (caller.to_string(), id.to_string());
        let read = self.read_with(move |conn| {
            cached_query_row(
                conn,
                &format!(
                    "SELECT {FILE_COLUMNS} FROM files \
                     WHERE id = ?1 AND principal = ?2 AND expires_at > ?3"
                ),
                params![id, caller, Timestamp::now().as_millis()],
                file_info,
            )
            .optional()
            .map_err(|e| unavailable(&e))
        });
        Box::pin(async move {
            read.await
                .map_err(|e| e.to_harness_error())?
                .map(to_file_info)
                .transpose()
        })
    }
}

impl FileWorkspace for SqliteStore {
    fn open<'a>(
        &'a self,
        caller: &'a CallerId,
        id: &'a FileId,
    ) -> BoxFuture<'a, Result<Option<StoredFile>, HarnessError>> {
        Box::pin(async move {
            let Some(info) = self.find_file(caller, id).await? else {
                return Ok(None);
            };
            let store = self.clone();
            let (caller, id) = (caller.to_string(), id.clone());
            Ok(Some(crate::files::stored(info, move || {
                let (caller, id) = (caller.clone(), id.clone());
                let key = id.to_string();
                let read = store.read_with(move |conn| {
                    cached_query_row(
                        conn,
                        "SELECT data FROM files WHERE id = ?1 AND principal = ?2",
                        params![key, caller],
                        |r| r.get::<_, Vec<u8>>(0),
                    )
                    .optional()
                    .map_err(|e| unavailable(&e))
                });
                Box::pin(async move {
                    match read.await.map_err(|e| e.to_harness_error())? {
                        Some(bytes) => Ok(Arc::from(bytes)),
                        None => Err(crate::files::gone(&id)),
                    }
                })
            })))
        })
    }
}

impl FileStore for SqliteStore {
    fn put<'a>(
        &'a self,
        caller: &'a CallerId,
        file: NewFile,
    ) -> BoxFuture<'a, Result<FileInfo, HarnessError>> {
        // Milliseconds, as stored.
        let now =
            Timestamp::from_millis(Timestamp::now().as_millis()).unwrap_or_else(Timestamp::now);
        let expires = now
            .as_millis()
            .saturating_add(crate::files::retention_ms(file.retention));
        let info = Timestamp::from_millis(expires).map(|expires_at| FileInfo {
            id: FileId::generate(),
            name: file.name,
            media_type: file.media_type,
            size: file.bytes.len() as u64,
            created_at: now,
            expires_at,
        });
        let caller = caller.to_string();
        let bytes = file.bytes;
        Box::pin(async move {
            let info = info.ok_or_else(|| {
                HarnessError::new(
                    ErrorCategory::Configuration,
                    "the file's retention is too long",
                )
            })?;
            let row = info.clone();
            self.write(move |conn| {
                cached_execute(
                    conn,
                    "INSERT INTO files (id, principal, name, media_type, size, created_at, \
                     expires_at, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                    params![
                        row.id.as_str(),
                        caller,
                        row.name,
                        row.media_type.as_str(),
                        i64::try_from(row.size).unwrap_or(i64::MAX),
                        row.created_at.as_millis(),
                        row.expires_at.as_millis(),
                        &bytes[..],
                    ],
                )
                .map_err(|e| unavailable(&e))?;
                Ok(((), None))
            })
            .await
            .map_err(|e| e.to_harness_error())?;
            Ok(info)
        })
    }

    fn info<'a>(
        &'a self,
        caller: &'a CallerId,
        id: &'a FileId,
    ) -> BoxFuture<'a, Result<Option<FileInfo>, HarnessError>> {
        self.find_file(caller, id)
    }

    fn delete<'a>(
        &'a self,
        caller: &'a CallerId,
        id: &'a FileId,
    ) -> BoxFuture<'a, Result<bool, HarnessError>> {
        let (caller, id) = (caller.to_string(), id.to_string());
        let write = self.write(move |conn| {
            let n = cached_execute(
                conn,
                "DELETE FROM files WHERE id = ?1 AND principal = ?2 AND expires_at > ?3",
                params![id, caller, Timestamp::now().as_millis()],
            )
            .map_err(|e| unavailable(&e))?;
            Ok((n > 0, None))
        });
        Box::pin(async move { write.await.map_err(|e| e.to_harness_error()) })
    }

    fn sweep(&self) -> BoxFuture<'_, Result<u64, HarnessError>> {
        let write = self.write(move |conn| {
            let n = cached_execute(
                conn,
                "DELETE FROM files WHERE expires_at <= ?1",
                params![Timestamp::now().as_millis()],
            )
            .map_err(|e| unavailable(&e))?;
            Ok((n as u64, None))
        });
        Box::pin(async move { write.await.map_err(|e| e.to_harness_error()) })
    }
}
