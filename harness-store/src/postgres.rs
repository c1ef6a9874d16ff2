//! [`PostgresStore`]: the store for several replicas, on PostgreSQL.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as SyncMutex};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use harness_core::error::HarnessError;
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
use tokio::sync::{Mutex, watch};
use tokio_postgres::{AsyncMessage, Client, GenericClient, NoTls, Row};

use crate::common::{
    FirstCallers, RECORD_COLUMNS, corrupt, from_millis, lock, parse_state, state_name,
};
use crate::files::{FileInfo, FileStore, NewFile};

/// The schema version this code writes. 2: one `harness_event_batches` row per append.
/// 3: thread state. 4: the index of ended executions. 5: the index of principals' executions.
/// 6: bindings scoped by principal (no new table: existing bindings move). 7: uploaded files.
const SCHEMA_VERSION: i32 = 7;

/// The channel of the store's notifications: `<execution>:<last seq>` after an append,
/// `<execution>:` after an answer or a cancel request.
const CHANNEL: &str = "harness_store";

/// Connections for the store's operations (each runs in a transaction on one of them).
const POOL: usize = 4;

/// The database's clock, in milliseconds: leases lapse by one clock, whatever the replicas'.
const NOW_MS: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS harness_schema (version INT NOT NULL);
CREATE TABLE IF NOT EXISTS harness_executions (
    id TEXT PRIMARY KEY,
    created BIGSERIAL,
    principal TEXT NOT NULL,
    adapter TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    request TEXT NOT NULL,
    idempotency_key TEXT,
    created_at TEXT NOT NULL,
    state TEXT NOT NULL,
    ended BOOLEAN NOT NULL DEFAULT FALSE,
    last_seq BIGINT NOT NULL DEFAULT 0,
    cancel_requested TEXT,
    lease_owner TEXT,
    lease_token BIGINT NOT NULL DEFAULT 0,
    lease_expires BIGINT
);
CREATE UNIQUE INDEX IF NOT EXISTS harness_executions_by_key
    ON harness_executions (principal, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS harness_executions_unfinished
    ON harness_executions (created) WHERE NOT ended;
CREATE INDEX IF NOT EXISTS harness_executions_ended
    ON harness_executions (created) WHERE ended;
CREATE INDEX IF NOT EXISTS harness_executions_by_principal
    ON harness_executions (principal, created);
CREATE TABLE IF NOT EXISTS harness_event_batches (
    execution TEXT NOT NULL,
    first_seq BIGINT NOT NULL,
    last_seq BIGINT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (execution, first_seq)
);
-- Batches are written once and read whole: compressing them costs more than it saves.
ALTER TABLE harness_event_batches ALTER COLUMN body SET STORAGE EXTERNAL;
CREATE TABLE IF NOT EXISTS harness_thread_bindings (
    binding TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    epoch BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS harness_thread_state (
    binding TEXT NOT NULL,
    key TEXT NOT NULL,
    value BYTEA NOT NULL,
    version BIGINT NOT NULL,
    PRIMARY KEY (binding, key)
);
-- Thread-state versions: never reused, database-wide.
CREATE SEQUENCE IF NOT EXISTS harness_thread_versions;
CREATE TABLE IF NOT EXISTS harness_resolutions (
    execution TEXT NOT NULL,
    action TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (execution, action)
);
-- Uploaded files (see `crate::files`); expiry in the database's clock's milliseconds.
CREATE TABLE IF NOT EXISTS harness_files (
    id TEXT PRIMARY KEY,
    principal TEXT NOT NULL,
    name TEXT NOT NULL,
    media_type TEXT NOT NULL,
    size BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    data BYTEA NOT NULL
);
-- Images and PDFs are compressed already.
ALTER TABLE harness_files ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE INDEX IF NOT EXISTS harness_files_by_expiry ON harness_files (expires_at);
";

/// The [`ExecutionStore`] on PostgreSQL: for several replicas over one database.
///
/// - **Fencing and leases** are decided in the database, in the transaction of each write
///   (the execution's row locked `FOR UPDATE`), by the database's clock: a replica whose
///   lease lapsed or was taken over can append nothing, however wrong its own clock is.
/// - **Live tail across processes**: each append, answer and cancel request sends a
///   `NOTIFY` in its transaction (delivered on commit); every store listens and wakes its
///   [`Tail`]s, so a reader on one replica follows an execution another one runs.
/// - **Migrations** are embedded and applied on connect, under an advisory lock (replicas
///   starting together apply them once); a database of a newer schema is refused.
/// - **Durability** is PostgreSQL's: an acknowledged write is committed (with the server's
///   default `synchronous_commit = on`, flushed to its WAL).
///
/// `cargo test -p harness-store --test postgres` runs the store suite on a throwaway
/// cluster (Debian's `postgresql` package).
#[derive(Clone)]
pub struct PostgresStore {
    shared: Arc<Shared>,
}

struct Shared {
    clients: Vec<Mutex<Client>>,
    next: AtomicUsize,
    tails: Tails,
    /// Keeps the listening connection open.
    _listener: Client,
}

type Tails = Arc<SyncMutex<HashMap<ExecutionId, watch::Sender<u64>>>>;

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("connections", &self.shared.clients.len())
            .finish_non_exhaustive()
    }
}

fn unavailable(e: &tokio_postgres::Error) -> StoreError {
    // The server's own words ("db error" alone says nothing to an operator).
    match e.as_db_error() {
        // 53100: the server's disk is full.
        Some(db) if *db.code() == tokio_postgres::error::SqlState::DISK_FULL => {
            StoreError::Full(format!(
                "{}: {} (SQLSTATE {}): the database server's disk is full; nothing was written, free space and retry",
                db.severity(),
                db.message(),
                db.code().code()
            ))
        }
        Some(db) => StoreError::Unavailable(format!(
            "{}: {} (SQLSTATE {})",
            db.severity(),
            db.message(),
            db.code().code()
        )),
        None => StoreError::Unavailable(e.to_string()),
    }
}

async fn open(
    url: &str,
) -> Result<
    (
        Client,
        tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>,
    ),
    StoreError,
> {
    tokio_postgres::connect(url, NoTls)
        .await
        .map_err(|e| unavailable(&e))
}

impl PostgresStore {
    /// Connects to the database at `url` (a `postgresql://` URL or a `key=value`
    /// connection string), applying the schema.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the database cannot be reached or refuses,
    /// [`StoreError::Corrupt`] when it holds a newer schema.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let mut clients = Vec::with_capacity(POOL);
        for _ in 0..POOL {
            let (client, connection) = open(url).await?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            clients.push(client);
        }
        migrate(&mut clients[0]).await?;

        let tails: Tails = Arc::default();
        let (listener, mut connection) = open(url).await?;
        let wake = Arc::clone(&tails);
        tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(Ok(message)) = messages.next().await {
                if let AsyncMessage::Notification(note) = message {
                    dispatch(&wake, note.payload());
                }
            }
        });
        listener
            .batch_execute(&format!("LISTEN {CHANNEL}"))
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(Self {
            shared: Arc::new(Shared {
                clients: clients.into_iter().map(Mutex::new).collect(),
                next: AtomicUsize::new(0),
                tails,
                _listener: listener,
            }),
        })
    }

    /// Appends one batch (of events or of shared events) as one row: a JSON array.
    async fn append_batch<E>(&self, lease: &Lease, events: &[E]) -> Result<(), StoreError>
    where
        E: std::borrow::Borrow<Event> + Sync,
    {
        let body = serde_json::to_string(&events.iter().map(E::borrow).collect::<Vec<&Event>>())
            .map_err(|err| corrupt("an event", &err))?;
        let id = &lease.execution_id;
        let mut client = self.client().await;
        let tx = client.transaction().await.map_err(|e| unavailable(&e))?;
        let row = lock_row(&tx, id).await?;
        check_lease(&row, lease)?;
        let (state, ends) = check_batch(id, row.last, row.ended, events)?;
        if events.is_empty() {
            return Ok(());
        }
        let last = row.last + events.len() as u64;
        tx.execute(
            "INSERT INTO harness_event_batches (execution, first_seq, last_seq, body) \
             VALUES ($1, $2, $3, $4)",
            &[&id.as_str(), &as_i64(row.last + 1), &as_i64(last), &body],
        )
        .await
        .map_err(|e| unavailable(&e))?;
        tx.execute(
            "UPDATE harness_executions SET last_seq = $2, ended = ended OR $3, \
             state = COALESCE($4, state) WHERE id = $1",
            &[&id.as_str(), &as_i64(last), &ends, &state.map(state_name)],
        )
        .await
        .map_err(|e| unavailable(&e))?;
        notify(&tx, format!("{id}:{last}")).await?;
        tx.commit().await.map_err(|e| unavailable(&e))
    }

    /// One of the store's connections, for one operation.
    async fn client(&self) -> tokio::sync::MutexGuard<'_, Client> {
        let n = self.shared.next.fetch_add(1, Ordering::Relaxed) % self.shared.clients.len();
        self.shared.clients[n].lock().await
    }
}

async fn migrate(client: &mut Client) -> Result<(), StoreError> {
    let tx = client.transaction().await.map_err(|e| unavailable(&e))?;
    // One replica migrates at a time; the others find it done.
    tx.batch_execute("SELECT pg_advisory_xact_lock(7261830117)")
        .await
        .map_err(|e| unavailable(&e))?;
    // A current schema is left untouched: its DDL (even `IF NOT EXISTS`) takes table locks
    // that stall, or deadlock with, the replicas writing meanwhile.
    let exists: bool = tx
        .query_one("SELECT to_regclass('harness_schema') IS NOT NULL", &[])
        .await
        .map_err(|e| unavailable(&e))?
        .get(0);
    let current: Option<i32> = if exists {
        tx.query_one("SELECT max(version) FROM harness_schema", &[])
            .await
            .map_err(|e| unavailable(&e))?
            .get(0)
    } else {
        None
    };
    if current == Some(SCHEMA_VERSION) {
        return tx.commit().await.map_err(|e| unavailable(&e));
    }
    tx.batch_execute(SCHEMA)
        .await
        .map_err(|e| unavailable(&e))?;
    let version: Option<i32> = tx
        .query_opt("SELECT max(version) FROM harness_schema", &[])
        .await
        .map_err(|e| unavailable(&e))?
        .and_then(|row| row.get(0));
    match version {
        None => {
            tx.execute(
                "INSERT INTO harness_schema (version) VALUES ($1)",
                &[&SCHEMA_VERSION],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        }
        Some(old @ 1..=6) => {
            // Version 1 held one `harness_events` row per event: each becomes a batch of one.
            if old == 1 {
                tx.batch_execute(
                    "INSERT INTO harness_event_batches \
                     SELECT execution, seq, seq, '[' || body || ']' FROM harness_events; \
                     DROP TABLE harness_events;",
                )
                .await
                .map_err(|e| unavailable(&e))?;
            }
            // Versions 3 to 5 and 7 add tables and indexes only, created above; 6 moves
            // bindings.
            if old <= 5 {
                scope_bindings(&tx).await.map_err(|e| unavailable(&e))?;
            }
            tx.execute("UPDATE harness_schema SET version = $1", &[&SCHEMA_VERSION])
                .await
                .map_err(|e| unavailable(&e))?;
        }
        Some(SCHEMA_VERSION) => {}
        Some(newer) => {
            return Err(StoreError::Corrupt(format!(
                "the database's schema version is {newer}, this code knows up to \
                 {SCHEMA_VERSION}: connect with a newer version"
            )));
        }
    }
    tx.commit().await.map_err(|e| unavailable(&e))
}

/// Schema 6: conversations are their principal's. A binding in the unscoped form
/// (`adapter:conversation`) whose conversation a named principal started moves, with its
/// state, to that principal's binding ([`FirstCallers::moved`]).
async fn scope_bindings(tx: &tokio_postgres::Transaction<'_>) -> Result<(), tokio_postgres::Error> {
    let mut first = FirstCallers::default();
    let started = tx
        .query(
            "SELECT adapter, request::jsonb ->> 'conversationId', principal \
             FROM harness_executions \
             WHERE (request::jsonb ->> 'conversationId') IS NOT NULL ORDER BY created",
            &[],
        )
        .await?;
    for row in started {
        first.note(row.get(0), row.get(1), row.get(2));
    }
    let bindings = tx
        .query("SELECT binding, owner FROM harness_thread_bindings", &[])
        .await?;
    for row in bindings {
        let (binding, owner): (String, String) = (row.get(0), row.get(1));
        let Some(to) = first.moved(&binding, &owner) else {
            continue;
        };
        // Written meanwhile by code that scopes already: that one is the principal's.
        let moved = tx
            .execute(
                "UPDATE harness_thread_bindings SET binding = $2 WHERE binding = $1 \
                 AND NOT EXISTS (SELECT 1 FROM harness_thread_bindings WHERE binding = $2)",
                &[&binding, &to],
            )
            .await?;
        if moved == 1 {
            tx.execute(
                "UPDATE harness_thread_state SET binding = $2 WHERE binding = $1",
                &[&binding, &to],
            )
            .await?;
        }
    }
    Ok(())
}

fn dispatch(tails: &Tails, payload: &str) {
    let Some((id, last)) = payload.rsplit_once(':') else {
        return;
    };
    let Ok(id) = id.parse::<ExecutionId>() else {
        return;
    };
    let mut tails = lock(tails);
    let Some(tail) = tails.get(&id) else {
        return;
    };
    match last.parse::<u64>() {
        Ok(last) => {
            tail.send_if_modified(|seen| {
                let newer = last > *seen;
                if newer {
                    *seen = last;
                }
                newer
            });
        }
        Err(_) => tail.send_modify(|_| {}),
    }
    if tail.receiver_count() == 0 {
        tails.remove(&id);
    }
}

fn to_record(row: &Row) -> Result<ExecutionRecord, StoreError> {
    let get = |i: usize| -> Result<String, StoreError> {
        row.try_get(i).map_err(|e| corrupt("a record column", &e))
    };
    let key: Option<String> = row.try_get(5).map_err(|e| corrupt("a key", &e))?;
    let cancel: Option<String> = row.try_get(8).map_err(|e| corrupt("a cancel", &e))?;
    Ok(ExecutionRecord {
        id: get(0)?
            .parse()
            .map_err(|e| corrupt("an execution id", &e))?,
        principal: get(1)?,
        adapter: get(2)?,
        fingerprint: get(3)?,
        request: serde_json::from_str(&get(4)?).map_err(|e| corrupt("a request", &e))?,
        idempotency_key: key
            .map(|k| k.parse::<IdempotencyKey>())
            .transpose()
            .map_err(|e| corrupt("an idempotency key", &e))?,
        created_at: get(6)?
            .parse()
            .map_err(|e| corrupt("a creation time", &e))?,
        state: parse_state(&get(7)?)?,
        cancel_requested: cancel,
    })
}

/// `NotFound` unless the store holds a record of `id`.
async fn known(client: &impl GenericClient, id: &ExecutionId) -> Result<(), StoreError> {
    client
        .query_opt(
            "SELECT 1 FROM harness_executions WHERE id = $1",
            &[&id.as_str()],
        )
        .await
        .map_err(|e| unavailable(&e))?
        .map(drop)
        .ok_or_else(|| StoreError::NotFound(id.clone()))
}

async fn record_of(
    client: &impl GenericClient,
    id: &ExecutionId,
) -> Result<ExecutionRecord, StoreError> {
    let row = client
        .query_opt(
            &format!("SELECT {RECORD_COLUMNS} FROM harness_executions WHERE id = $1"),
            &[&id.as_str()],
        )
        .await
        .map_err(|e| unavailable(&e))?
        .ok_or_else(|| StoreError::NotFound(id.clone()))?;
    to_record(&row)
}

/// The execution's row, locked for the transaction: (owner, token, expires, now, last, ended).
struct Locked {
    owner: Option<String>,
    token: u64,
    expires: Option<i64>,
    now: i64,
    last: u64,
    ended: bool,
}

async fn lock_row(
    tx: &tokio_postgres::Transaction<'_>,
    id: &ExecutionId,
) -> Result<Locked, StoreError> {
    let row = tx
        .query_opt(
            &format!(
                "SELECT lease_owner, lease_token, lease_expires, {NOW_MS}, last_seq, ended \
                 FROM harness_executions WHERE id = $1 FOR UPDATE"
            ),
            &[&id.as_str()],
        )
        .await
        .map_err(|e| unavailable(&e))?
        .ok_or_else(|| StoreError::NotFound(id.clone()))?;
    Ok(Locked {
        owner: row.get(0),
        token: u64::try_from(row.get::<_, i64>(1)).unwrap_or(0),
        expires: row.get(2),
        now: row.get(3),
        last: u64::try_from(row.get::<_, i64>(4)).unwrap_or(0),
        ended: row.get(5),
    })
}

fn check_lease(row: &Locked, lease: &Lease) -> Result<(), StoreError> {
    let current = row.owner.as_deref() == Some(lease.owner.as_str())
        && row.token == lease.token.get()
        && row.expires.is_some_and(|e| e > row.now);
    if current {
        Ok(())
    } else {
        Err(StoreError::Fenced {
            execution: lease.execution_id.clone(),
            presented: lease.token,
            current: FencingToken::new(row.token),
        })
    }
}

fn as_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

async fn notify(tx: &tokio_postgres::Transaction<'_>, payload: String) -> Result<(), StoreError> {
    tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &payload])
        .await
        .map(drop)
        .map_err(|e| unavailable(&e))
}

impl ExecutionStore for PostgresStore {
    fn create(&self, record: ExecutionRecord) -> BoxFuture<'_, Result<Created, StoreError>> {
        Box::pin(async move {
            let client = self.client().await;
            let inserted = client
                .execute(
                    "INSERT INTO harness_executions (id, principal, adapter, fingerprint, request, \
                     idempotency_key, created_at, state, cancel_requested) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING",
                    &[
                        &record.id.as_str(),
                        &record.principal,
                        &record.adapter,
                        &record.fingerprint,
                        &record.request.to_string(),
                        &record.idempotency_key.as_ref().map(IdempotencyKey::as_str),
                        &record.created_at.to_string(),
                        &state_name(record.state),
                        &record.cancel_requested,
                    ],
                )
                .await
                .map_err(|e| unavailable(&e))?;
            if inserted == 1 {
                return Ok(Created::New);
            }
            // A conflict: on the id, or on the (principal, key) of an earlier record.
            if let Some(key) = &record.idempotency_key {
                let first = client
                    .query_opt(
                        &format!(
                            "SELECT {RECORD_COLUMNS} FROM harness_executions \
                             WHERE principal = $1 AND idempotency_key = $2"
                        ),
                        &[&record.principal, &key.as_str()],
                    )
                    .await
                    .map_err(|e| unavailable(&e))?;
                if let Some(first) = first {
                    let first = to_record(&first)?;
                    if first.id != record.id {
                        return if first.fingerprint == record.fingerprint {
                            Ok(Created::Existing(Box::new(first)))
                        } else {
                            Err(StoreError::IdempotencyConflict {
                                key: key.clone(),
                                existing: first.id,
                            })
                        };
                    }
                }
            }
            Err(StoreError::Exists(record.id))
        })
    }

    fn record<'a>(
        &'a self,
        id: &'a ExecutionId,
    ) -> BoxFuture<'a, Result<ExecutionRecord, StoreError>> {
        Box::pin(async move { record_of(&*self.client().await, id).await })
    }

    fn unfinished(&self) -> BoxFuture<'_, Result<Vec<ExecutionRecord>, StoreError>> {
        Box::pin(async move {
            let rows = self
                .client()
                .await
                .query(
                    &format!(
                        "SELECT {RECORD_COLUMNS} FROM harness_executions WHERE NOT ended \
                         ORDER BY created"
                    ),
                    &[],
                )
                .await
                .map_err(|e| unavailable(&e))?;
            rows.iter().map(to_record).collect()
        })
    }

    fn list<'a>(
        &'a self,
        principal: &'a str,
        before: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Listed>, StoreError>> {
        Box::pin(async move {
            let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            // `created` (a sequence) is the position: it grows with creation.
            let rows = self
                .client()
                .await
                .query(
                    &format!(
                        "SELECT {RECORD_COLUMNS}, created FROM harness_executions \
                         WHERE principal = $1 AND created < $2 ORDER BY created DESC LIMIT $3"
                    ),
                    &[&principal, &before, &limit],
                )
                .await
                .map_err(|e| unavailable(&e))?;
            rows.iter()
                .map(|row| {
                    let position: i64 = row.try_get(9).map_err(|e| corrupt("a position", &e))?;
                    Ok(Listed {
                        position: u64::try_from(position)
                            .map_err(|e| corrupt("a record's position", &e))?,
                        record: to_record(row)?,
                    })
                })
                .collect()
        })
    }

    fn acquire<'a>(
        &'a self,
        id: &'a ExecutionId,
        owner: &'a ReplicaId,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Lease, StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await;
            let tx = client.transaction().await.map_err(|e| unavailable(&e))?;
            let row = lock_row(&tx, id).await?;
            let live = row.expires.is_some_and(|e| e > row.now);
            let token = match &row.owner {
                Some(held) if live && held == owner.as_str() => row.token,
                Some(held) if live => {
                    return Err(StoreError::Leased {
                        execution: id.clone(),
                        owner: ReplicaId::new(held.as_str()),
                        until: from_millis(row.expires.unwrap_or_default())?,
                    });
                }
                _ => row.token + 1,
            };
            let until = row
                .now
                .saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
            tx.execute(
                "UPDATE harness_executions SET lease_owner = $2, lease_token = $3, \
                 lease_expires = $4 WHERE id = $1",
                &[&id.as_str(), &owner.as_str(), &as_i64(token), &until],
            )
            .await
            .map_err(|e| unavailable(&e))?;
            tx.commit().await.map_err(|e| unavailable(&e))?;
            Ok(Lease {
                execution_id: id.clone(),
                owner: owner.clone(),
                token: FencingToken::new(token),
                expires_at: from_millis(until)?,
            })
        })
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await;
            let tx = client.transaction().await.map_err(|e| unavailable(&e))?;
            let row = lock_row(&tx, &lease.execution_id).await?;
            check_lease(&row, lease)?;
            tx.execute(
                "UPDATE harness_executions SET lease_owner = NULL, lease_expires = NULL \
                 WHERE id = $1",
                &[&lease.execution_id.as_str()],
            )
            .await
            .map_err(|e| unavailable(&e))?;
            tx.commit().await.map_err(|e| unavailable(&e))
        })
    }

    fn append<'a>(
        &'a self,
        lease: &'a Lease,
        events: &'a [Event],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.append_batch(lease, events))
    }

    fn append_shared<'a>(
        &'a self,
        lease: &'a Lease,
        events: &'a [Arc<Event>],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.append_batch(lease, events))
    }

    fn read<'a>(
        &'a self,
        id: &'a ExecutionId,
        after: Cursor,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Event>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await;
            known(&*client, id).await?;
            // From the batch holding the event after the cursor, until `limit` events.
            let rows = client
                .query(
                    "SELECT body, last_seq FROM harness_event_batches WHERE execution = $1 \
                     AND first_seq >= (SELECT COALESCE(MAX(first_seq), 0) \
                     FROM harness_event_batches WHERE execution = $1 AND first_seq <= $2) \
                     AND first_seq <= $3 ORDER BY first_seq",
                    &[
                        &id.as_str(),
                        &as_i64(after.after().saturating_add(1)),
                        &as_i64(after.after().saturating_add(limit as u64)),
                    ],
                )
                .await
                .map_err(|e| unavailable(&e))?;
            let mut out = Vec::new();
            for row in &rows {
                let body: String = row.get(0);
                let batch: Vec<Event> =
                    serde_json::from_str(&body).map_err(|e| corrupt("an event", &e))?;
                out.extend(
                    batch
                        .into_iter()
                        .filter(|e| e.seq().get() > after.after())
                        .take(limit - out.len()),
                );
                if out.len() >= limit {
                    break;
                }
            }
            Ok(out)
        })
    }

    fn tail<'a>(&'a self, id: &'a ExecutionId) -> BoxFuture<'a, Result<Tail, StoreError>> {
        Box::pin(async move {
            // Registered before the stored position is read: a notification in between is
            // not lost (the higher of the two wins).
            let receiver = {
                let mut tails = lock(&self.shared.tails);
                tails
                    .entry(id.clone())
                    .or_insert_with(|| watch::Sender::new(0))
                    .subscribe()
            };
            let stored = self
                .client()
                .await
                .query_opt(
                    "SELECT last_seq FROM harness_executions WHERE id = $1",
                    &[&id.as_str()],
                )
                .await
                .map_err(|e| unavailable(&e))?
                .ok_or_else(|| StoreError::NotFound(id.clone()))?;
            let stored = u64::try_from(stored.get::<_, i64>(0)).unwrap_or(0);
            if let Some(sender) = lock(&self.shared.tails).get(id) {
                sender.send_if_modified(|last| {
                    let newer = stored > *last;
                    if newer {
                        *last = stored;
                    }
                    newer
                });
            }
            Ok(Tail::new(receiver))
        })
    }

    fn resolve<'a>(
        &'a self,
        id: &'a ExecutionId,
        resolution: Resolution,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let body = serde_json::to_string(&resolution).map_err(|e| corrupt("an answer", &e))?;
            let mut client = self.client().await;
            let tx = client.transaction().await.map_err(|e| unavailable(&e))?;
            known(&tx, id).await?;
            let inserted = tx
                .execute(
                    "INSERT INTO harness_resolutions (execution, action, body) \
                     VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                    &[&id.as_str(), &resolution.action_id.as_str(), &body],
                )
                .await
                .map_err(|e| unavailable(&e))?;
            if inserted == 0 {
                return Err(StoreError::AlreadyResolved {
                    execution: id.clone(),
                    action: resolution.action_id,
                });
            }
            notify(&tx, format!("{id}:")).await?;
            tx.commit().await.map_err(|e| unavailable(&e))
        })
    }

    fn resolution<'a>(
        &'a self,
        id: &'a ExecutionId,
        action: &'a ActionId,
    ) -> BoxFuture<'a, Result<Option<Resolution>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await;
            known(&*client, id).await?;
            let row = client
                .query_opt(
                    "SELECT body FROM harness_resolutions WHERE execution = $1 AND action = $2",
                    &[&id.as_str(), &action.as_str()],
                )
                .await
                .map_err(|e| unavailable(&e))?;
            row.map(|row| {
                let body: String = row.get(0);
                serde_json::from_str(&body).map_err(|e| corrupt("an answer", &e))
            })
            .transpose()
        })
    }

    fn request_cancel<'a>(
        &'a self,
        id: &'a ExecutionId,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await;
            let tx = client.transaction().await.map_err(|e| unavailable(&e))?;
            let changed = tx
                .execute(
                    "UPDATE harness_executions SET cancel_requested = $2 \
                     WHERE id = $1 AND cancel_requested IS NULL",
                    &[&id.as_str(), &reason],
                )
                .await
                .map_err(|e| unavailable(&e))?;
            if changed == 0 {
                return known(&tx, id).await.map(|()| false);
            }
            notify(&tx, format!("{id}:")).await?;
            tx.commit().await.map_err(|e| unavailable(&e))?;
            Ok(true)
        })
    }

    fn purge(
        &self,
        created_before: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await;
            let tx = client.transaction().await.map_err(|e| unavailable(&e))?;
            // Creation order (the `ended` index, schema 4): the oldest ended first, none
            // older after the first too new.
            let rows = tx
                .query(
                    "SELECT id, created_at FROM harness_executions WHERE ended \
                     ORDER BY created LIMIT $1",
                    &[&i64::try_from(limit).unwrap_or(i64::MAX)],
                )
                .await
                .map_err(|e| unavailable(&e))?;
            let mut doomed: Vec<String> = Vec::new();
            for row in rows {
                let created_at: Timestamp = row
                    .get::<_, String>(1)
                    .parse()
                    .map_err(|e| corrupt("a creation time", &e))?;
                if created_at >= created_before {
                    break;
                }
                doomed.push(row.get(0));
            }
            for sql in [
                "DELETE FROM harness_event_batches WHERE execution = ANY($1)",
                "DELETE FROM harness_resolutions WHERE execution = ANY($1)",
                "DELETE FROM harness_executions WHERE id = ANY($1)",
            ] {
                tx.execute(sql, &[&doomed])
                    .await
                    .map_err(|e| unavailable(&e))?;
            }
            tx.commit().await.map_err(|e| unavailable(&e))?;
            Ok(doomed.len())
        })
    }
}

fn state_unavailable(e: &tokio_postgres::Error) -> StateError {
    StateError::Unavailable {
        reason: e.to_string(),
    }
}

/// Records `b`'s binding on first use and locks its row for the transaction; refuses another
/// conversation or an older epoch; a newer epoch moves the binding there and drops the older
/// state.
async fn admit(tx: &tokio_postgres::Transaction<'_>, b: &SessionBinding) -> Result<(), StateError> {
    let binding = b.binding_id().as_str();
    let epoch = i64::try_from(b.epoch()).unwrap_or(i64::MAX);
    tx.execute(
        "INSERT INTO harness_thread_bindings (binding, owner, epoch) VALUES ($1, $2, $3) \
         ON CONFLICT DO NOTHING",
        &[&binding, &b.conversation_id().as_str(), &epoch],
    )
    .await
    .map_err(|e| state_unavailable(&e))?;
    let row = tx
        .query_one(
            "SELECT owner, epoch FROM harness_thread_bindings WHERE binding = $1 FOR UPDATE",
            &[&binding],
        )
        .await
        .map_err(|e| state_unavailable(&e))?;
    let (owner, current): (String, i64) = (row.get(0), row.get(1));
    if owner != b.conversation_id().as_str() {
        return Err(StateError::BindingMismatch {
            binding: b.binding_id().clone(),
            owner: owner.parse().map_err(|e| StateError::Unavailable {
                reason: format!("a stored conversation id: {e}"),
            })?,
            claimed: b.conversation_id().clone(),
        });
    }
    if epoch < current {
        return Err(StateError::StaleEpoch {
            binding: b.binding_id().clone(),
            epoch: b.epoch(),
            current: u64::try_from(current).unwrap_or(0),
        });
    }
    if epoch > current {
        tx.execute(
            "UPDATE harness_thread_bindings SET epoch = $2 WHERE binding = $1",
            &[&binding, &epoch],
        )
        .await
        .map_err(|e| state_unavailable(&e))?;
        tx.execute(
            "DELETE FROM harness_thread_state WHERE binding = $1",
            &[&binding],
        )
        .await
        .map_err(|e| state_unavailable(&e))?;
    }
    Ok(())
}

async fn stored_version(
    tx: &tokio_postgres::Transaction<'_>,
    binding: &str,
    key: &str,
) -> Result<Option<Version>, StateError> {
    Ok(tx
        .query_opt(
            "SELECT version FROM harness_thread_state WHERE binding = $1 AND key = $2",
            &[&binding, &key],
        )
        .await
        .map_err(|e| state_unavailable(&e))?
        .and_then(|row| u64::try_from(row.get::<_, i64>(0)).ok())
        .and_then(Version::new))
}

/// Thread state in the same database (schema 3): each operation one transaction with the
/// binding's row locked, versions from a sequence (never reused), so the rules hold across
/// replicas.
impl ThreadStateStore for PostgresStore {
    fn get<'a>(
        &'a self,
        binding: &'a SessionBinding,
        key: &'a StateKey,
    ) -> BoxFuture<'a, Result<Option<StateEntry>, StateError>> {
        Box::pin(async move {
            let mut client = self.client().await;
            let tx = client
                .transaction()
                .await
                .map_err(|e| state_unavailable(&e))?;
            admit(&tx, binding).await?;
            let row = tx
                .query_opt(
                    "SELECT value, version FROM harness_thread_state WHERE binding = $1 AND key = $2",
                    &[&binding.binding_id().as_str(), &key.as_str()],
                )
                .await
                .map_err(|e| state_unavailable(&e))?;
            tx.commit().await.map_err(|e| state_unavailable(&e))?;
            Ok(row.and_then(|row| {
                let version = Version::new(u64::try_from(row.get::<_, i64>(1)).ok()?)?;
                Some(StateEntry {
                    value: row.get(0),
                    version,
                })
            }))
        })
    }

    fn put<'a>(
        &'a self,
        binding: &'a SessionBinding,
        key: &'a StateKey,
        value: Vec<u8>,
        expected: Option<Version>,
    ) -> BoxFuture<'a, Result<Version, StateError>> {
        Box::pin(async move {
            let mut client = self.client().await;
            let tx = client
                .transaction()
                .await
                .map_err(|e| state_unavailable(&e))?;
            admit(&tx, binding).await?;
            let id = binding.binding_id().as_str();
            let actual = stored_version(&tx, id, key.as_str()).await?;
            if actual != expected {
                // Keeps the binding recorded, as a refused write leaves it.
                tx.commit().await.map_err(|e| state_unavailable(&e))?;
                return Err(StateError::VersionConflict {
                    key: key.clone(),
                    expected,
                    actual,
                });
            }
            let next: i64 = tx
                .query_one("SELECT nextval('harness_thread_versions')", &[])
                .await
                .map_err(|e| state_unavailable(&e))?
                .get(0);
            let version = u64::try_from(next)
                .ok()
                .and_then(Version::new)
                .ok_or_else(|| StateError::Unavailable {
                    reason: "the store has no versions left".to_owned(),
                })?;
            tx.execute(
                "INSERT INTO harness_thread_state (binding, key, value, version) \
                 VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (binding, key) DO UPDATE SET value = $3, version = $4",
                &[&id, &key.as_str(), &value, &next],
            )
            .await
            .map_err(|e| state_unavailable(&e))?;
            tx.commit().await.map_err(|e| state_unavailable(&e))?;
            Ok(version)
        })
    }

    fn delete<'a>(
        &'a self,
        binding: &'a SessionBinding,
        key: &'a StateKey,
        expected: Version,
    ) -> BoxFuture<'a, Result<(), StateError>> {
        Box::pin(async move {
            let mut client = self.client().await;
            let tx = client
                .transaction()
                .await
                .map_err(|e| state_unavailable(&e))?;
            admit(&tx, binding).await?;
            let id = binding.binding_id().as_str();
            let actual = stored_version(&tx, id, key.as_str()).await?;
            if actual != Some(expected) {
                tx.commit().await.map_err(|e| state_unavailable(&e))?;
                return Err(StateError::VersionConflict {
                    key: key.clone(),
                    expected: Some(expected),
                    actual,
                });
            }
            tx.execute(
                "DELETE FROM harness_thread_state WHERE binding = $1 AND key = $2",
                &[&id, &key.as_str()],
            )
            .await
            .map_err(|e| state_unavailable(&e))?;
            tx.commit().await.map_err(|e| state_unavailable(&e))
        })
    }

    fn list_keys<'a>(
        &'a self,
        binding: &'a SessionBinding,
    ) -> BoxFuture<'a, Result<Vec<StateKey>, StateError>> {
        Box::pin(async move {
            let mut client = self.client().await;
            let tx = client
                .transaction()
                .await
                .map_err(|e| state_unavailable(&e))?;
            admit(&tx, binding).await?;
            let rows = tx
                .query(
                    "SELECT key FROM harness_thread_state WHERE binding = $1 ORDER BY key",
                    &[&binding.binding_id().as_str()],
                )
                .await
                .map_err(|e| state_unavailable(&e))?;
            tx.commit().await.map_err(|e| state_unavailable(&e))?;
            rows.iter()
                .map(|row| {
                    row.get::<_, String>(0)
                        .parse()
                        .map_err(|e| StateError::Unavailable {
                            reason: format!("a stored state key: {e}"),
                        })
                })
                .collect()
        })
    }

    fn clear<'a>(
        &'a self,
        binding: &'a SessionBinding,
    ) -> BoxFuture<'a, Result<SessionBinding, StateError>> {
        Box::pin(async move {
            let mut client = self.client().await;
            let tx = client
                .transaction()
                .await
                .map_err(|e| state_unavailable(&e))?;
            admit(&tx, binding).await?;
            let next = binding
                .epoch()
                .checked_add(1)
                .ok_or_else(|| StateError::Unavailable {
                    reason: format!("binding `{}` has no epoch left", binding.binding_id()),
                })?;
            let id = binding.binding_id().as_str();
            tx.execute(
                "DELETE FROM harness_thread_state WHERE binding = $1",
                &[&id],
            )
            .await
            .map_err(|e| state_unavailable(&e))?;
            tx.execute(
                "UPDATE harness_thread_bindings SET epoch = $2 WHERE binding = $1",
                &[&id, &i64::try_from(next).unwrap_or(i64::MAX)],
            )
            .await
            .map_err(|e| state_unavailable(&e))?;
            tx.commit().await.map_err(|e| state_unavailable(&e))?;
            Ok(binding.clone().with_epoch(next))
        })
    }
}

/// The columns a file's [`FileInfo`] is read from, in [`to_file_info`]'s order.
const FILE_COLUMNS: &str = "id, name, media_type, size, created_at, expires_at";

fn to_file_info(row: &Row) -> Result<FileInfo, HarnessError> {
    let bad = |e: tokio_postgres::Error| corrupt("a file column", &e).to_harness_error();
    let time = |ms: i64| from_millis(ms).map_err(|e| e.to_harness_error());
    Ok(FileInfo {
        id: crate::files::file_id(row.try_get(0).map_err(bad)?)?,
        name: row.try_get(1).map_err(bad)?,
        media_type: crate::files::media_type(row.try_get(2).map_err(bad)?)?,
        size: u64::try_from(row.try_get::<_, i64>(3).map_err(bad)?).unwrap_or(0),
        created_at: time(row.try_get(4).map_err(bad)?)?,
        expires_at: time(row.try_get(5).map_err(bad)?)?,
    })
}

fn failed(e: &tokio_postgres::Error) -> HarnessError {
    unavailable(e).to_harness_error()
}

impl PostgresStore {
    /// `caller`'s unexpired file `id`, by the database's clock.
    async fn find_file(
        &self,
        caller: &CallerId,
        id: &FileId,
    ) -> Result<Option<FileInfo>, HarnessError> {
        let client = self.client().await;
        let row = client
            .query_opt(
                &format!(
                    "SELECT {FILE_COLUMNS} FROM harness_files \
                     WHERE id = $1 AND principal = $2 AND expires_at > {NOW_MS}"
                ),
                &[&id.as_str(), &caller.as_str()],
            )
            .await
            .map_err(|e| failed(&e))?;
        row.as_ref().map(to_file_info).transpose()
    }
}

impl FileWorkspace for PostgresStore {
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
            let (caller, id) = (caller.clone(), id.clone());
            Ok(Some(crate::files::stored(info, move || {
                let (store, caller, id) = (store.clone(), caller.clone(), id.clone());
                Box::pin(async move {
                    let client = store.client().await;
                    let row = client
                        .query_opt(
                            "SELECT data FROM harness_files WHERE id = $1 AND principal = $2",
                            &[&id.as_str(), &caller.as_str()],
                        )
                        .await
                        .map_err(|e| failed(&e))?;
                    match row {
                        Some(row) => {
                            let bytes: Vec<u8> = row
                                .try_get(0)
                                .map_err(|e| corrupt("a file's bytes", &e).to_harness_error())?;
                            Ok(Arc::from(bytes))
                        }
                        None => Err(crate::files::gone(&id)),
                    }
                })
            })))
        })
    }
}

impl FileStore for PostgresStore {
    fn put<'a>(
        &'a self,
        caller: &'a CallerId,
        file: NewFile,
    ) -> BoxFuture<'a, Result<FileInfo, HarnessError>> {
        Box::pin(async move {
            let id = FileId::generate();
            let client = self.client().await;
            let row = client
                .query_one(
                    &format!(
                        "INSERT INTO harness_files (id, principal, name, media_type, size, \
                         created_at, expires_at, data) \
                         VALUES ($1, $2, $3, $4, $5, {NOW_MS}, {NOW_MS} + $6, $7) \
                         RETURNING {FILE_COLUMNS}"
                    ),
                    &[
                        &id.as_str(),
                        &caller.as_str(),
                        &file.name,
                        &file.media_type.as_str(),
                        &as_i64(file.bytes.len() as u64),
                        &crate::files::retention_ms(file.retention),
                        &&file.bytes[..],
                    ],
                )
                .await
                .map_err(|e| failed(&e))?;
            to_file_info(&row)
        })
    }

    fn info<'a>(
        &'a self,
        caller: &'a CallerId,
        id: &'a FileId,
    ) -> BoxFuture<'a, Result<Option<FileInfo>, HarnessError>> {
        Box::pin(self.find_file(caller, id))
    }

    fn delete<'a>(
        &'a self,
        caller: &'a CallerId,
        id: &'a FileId,
    ) -> BoxFuture<'a, Result<bool, HarnessError>> {
        Box::pin(async move {
            let client = self.client().await;
            let n = client
                .execute(
                    &format!(
                        "DELETE FROM harness_files \
                         WHERE id = $1 AND principal = $2 AND expires_at > {NOW_MS}"
                    ),
                    &[&id.as_str(), &caller.as_str()],
                )
                .await
                .map_err(|e| failed(&e))?;
            Ok(n > 0)
        })
    }

    fn sweep(&self) -> BoxFuture<'_, Result<u64, HarnessError>> {
        Box::pin(async move {
            let client = self.client().await;
            client
                .execute(
                    &format!("DELETE FROM harness_files WHERE expires_at <= {NOW_MS}"),
                    &[],
                )
                .await
                .map_err(|e| failed(&e))
        })
    }
}
