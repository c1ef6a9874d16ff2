//! The store conformance suite on every backend of this crate, and a model-based property
//! test of the lease, fencing and append rules.

use std::time::Duration;

use harness_core::id::Cursor;
use harness_core::store::{ExecutionStore, MemoryStore, ReplicaId, StoreError};
use harness_store::SqliteStore;
use harness_store::suite;
use proptest::prelude::*;

mod common;
use common::{op, run_model, scratch};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_store_passes_the_store_suite() {
    suite::check(MemoryStore::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_store_passes_the_store_suite() {
    let dir = scratch("suite");
    suite::check(SqliteStore::open(dir.join("harness.db")).expect("open")).await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploaded_files_are_their_callers_until_they_expire_on_sqlite_and_in_memory() {
    suite::files(harness_store::files::MemoryFiles::new()).await;
    let dir = scratch("files");
    let path = dir.join("harness.db");
    suite::files(SqliteStore::open(&path).expect("open")).await;
    // Durable: a file put before a reopen is found after it, bytes and all.
    let alice: harness_core::id::CallerId = "alice".parse().unwrap();
    let store = SqliteStore::open(&path).expect("open");
    let info = harness_store::files::FileStore::put(
        &store,
        &alice,
        harness_store::files::NewFile {
            name: "a.txt".into(),
            media_type: "text/plain".parse().unwrap(),
            bytes: b"kept".to_vec().into(),
            retention: Duration::from_secs(60),
        },
    )
    .await
    .expect("put");
    drop(store);
    let again = SqliteStore::open(&path).expect("reopen");
    let file = harness_core::file::FileWorkspace::open(&again, &alice, &info.id)
        .await
        .expect("open")
        .expect("found after a reopen");
    assert_eq!(&file.handle.read().await.expect("read")[..], b"kept");
    drop((file, again));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reopened_sqlite_store_holds_what_was_acknowledged() {
    let dir = scratch("reopen");
    let path = dir.join("harness.db");
    let store = SqliteStore::open(&path).expect("open");
    let record = suite::record();
    let id = record.id.clone();
    store.create(record.clone()).await.expect("create");
    let lease = store
        .acquire(&id, &ReplicaId::new("a"), Duration::from_secs(60))
        .await
        .expect("lease");
    let written = suite::events(&id, 1, 40);
    for event in &written {
        store
            .append(&lease, std::slice::from_ref(event))
            .await
            .expect("append");
    }
    drop(store);
    let again = SqliteStore::open(&path).expect("reopen");
    assert_eq!(again.read(&id, Cursor::START, 100).await, Ok(written));
    assert_eq!(
        again.record(&id).await.map(|r| r.fingerprint),
        Ok(record.fingerprint)
    );
    // The lease survives too: the holder keeps it, another replica waits.
    assert!(matches!(
        again
            .acquire(&id, &ReplicaId::new("b"), Duration::from_secs(60))
            .await,
        Err(StoreError::Leased { .. })
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_database_of_a_newer_schema_is_refused_naming_the_versions() {
    let dir = scratch("newer");
    let path = dir.join("harness.db");
    drop(SqliteStore::open(&path).expect("open"));
    let conn = rusqlite_free_bump(&path);
    drop(conn);
    let error = SqliteStore::open(&path).expect_err("a newer schema");
    assert!(
        matches!(&error, StoreError::Corrupt(m) if m.contains("schema version is 99")),
        "{error}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Sets the file's `user_version` to 99 by editing the header (bytes 60..64, big-endian), as
/// a newer release's migration would have: no second SQLite binding needed.
fn rusqlite_free_bump(path: &std::path::Path) -> std::fs::File {
    use std::io::{Seek, SeekFrom, Write};
    // The WAL must be checkpointed into the file first: a closed store leaves none behind.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("the database file");
    file.seek(SeekFrom::Start(60)).unwrap();
    file.write_all(&99u32.to_be_bytes()).unwrap();
    file
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn the_memory_store_follows_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(run_model(&MemoryStore::new(), &ops))?;
    }

    #[test]
    fn the_sqlite_store_follows_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        static STORE: std::sync::OnceLock<(SqliteStore, tokio::runtime::Runtime)> =
            std::sync::OnceLock::new();
        let (store, rt) = STORE.get_or_init(|| {
            let dir = scratch("model");
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            (SqliteStore::open(dir.join("harness.db")).expect("open"), rt)
        });
        rt.block_on(run_model(store, &ops))?;
    }
}

/// A rolling upgrade: rows a newer replica wrote (events and an answer, with fields this
/// version does not know in the envelope and in `data`) are read by this version's store,
/// and the events are served again as the newer writer wrote them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_a_newer_writer_stored_are_read() {
    use harness_core::store::Resolution;
    let dir = scratch("newer-rows");
    let path = dir.join("harness.db");
    let record = suite::record();
    let id = record.id.clone();
    let action: harness_core::id::ActionId = "act_1".parse().unwrap();
    let answer = Resolution {
        action_id: action.clone(),
        revision: 1,
        response: serde_json::json!({"type": "form_input", "actionId": "act_1", "revision": 1,
                                     "answer": {"type": "dismiss"}}),
        at: "2026-11-30T12:00:00Z".parse().unwrap(),
    };
    {
        let store = SqliteStore::open(&path).expect("open");
        store.create(record).await.expect("create");
        let lease = store
            .acquire(&id, &ReplicaId::new("newer"), Duration::from_secs(30))
            .await
            .expect("lease");
        store
            .append(&lease, &suite::events(&id, 1, 3))
            .await
            .expect("append");
        store.resolve(&id, answer.clone()).await.expect("resolve");
    }
    // What the newer replica wrote instead: the same rows with its new fields.
    let mut body = serde_json::to_value(suite::events(&id, 1, 3)).unwrap();
    body[0]["traceId"] = serde_json::json!("4bf92f3577b34da6a3ce929d0e0e4736");
    body[1]["replica"] = serde_json::json!({"zone": "b"});
    body[2]["data"]["lang"] = serde_json::json!("en");
    body[2]["data"]["style"] = serde_json::json!({"bold": true});
    let mut stored_answer = serde_json::to_value(&answer).unwrap();
    stored_answer["answeredBy"] = serde_json::json!("replica-b");
    {
        let conn = rusqlite::Connection::open(&path).expect("the file");
        let changed = conn
            .execute(
                "UPDATE events SET body = ?1 WHERE execution = ?2",
                rusqlite::params![body.to_string(), id.as_str()],
            )
            .expect("rewrite the events row");
        assert_eq!(changed, 1, "one batch row");
        let changed = conn
            .execute(
                "UPDATE resolutions SET body = ?1 WHERE execution = ?2",
                rusqlite::params![stored_answer.to_string(), id.as_str()],
            )
            .expect("rewrite the answer row");
        assert_eq!(changed, 1);
    }
    let store = SqliteStore::open(&path).expect("reopen");
    let read = store
        .read(&id, Cursor::START, 10)
        .await
        .expect("a newer writer's events row reads");
    assert_eq!(read.len(), 3);
    assert_eq!(read[2].payload(), suite::event(&id, 3).payload());
    assert_eq!(
        serde_json::to_value(&read).unwrap(),
        body,
        "served again with the newer writer's fields"
    );
    assert_eq!(
        store.resolution(&id, &action).await,
        Ok(Some(answer)),
        "a newer writer's answer row reads (its extra field is not this version's to keep)"
    );
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_database_is_migrated_with_its_events() {
    let dir = scratch("v1");
    let path = dir.join("harness.db");
    let record = suite::record();
    let id = record.id.clone();
    let events = suite::events(&id, 1, 3);
    {
        // The version 1 schema: one row per event.
        let conn = rusqlite::Connection::open(&path).expect("a file");
        conn.execute_batch(
            "CREATE TABLE executions (id TEXT PRIMARY KEY, principal TEXT NOT NULL,
                 adapter TEXT NOT NULL, fingerprint TEXT NOT NULL, request TEXT NOT NULL,
                 idempotency_key TEXT, created_at TEXT NOT NULL, state TEXT NOT NULL,
                 ended INTEGER NOT NULL DEFAULT 0, last_seq INTEGER NOT NULL DEFAULT 0,
                 cancel_requested TEXT, lease_owner TEXT, lease_token INTEGER NOT NULL DEFAULT 0,
                 lease_expires INTEGER);
             CREATE TABLE events (execution TEXT NOT NULL, seq INTEGER NOT NULL,
                 body TEXT NOT NULL, PRIMARY KEY (execution, seq)) WITHOUT ROWID;
             CREATE TABLE resolutions (execution TEXT NOT NULL, action TEXT NOT NULL,
                 body TEXT NOT NULL, PRIMARY KEY (execution, action)) WITHOUT ROWID;
             PRAGMA user_version = 1;",
        )
        .expect("the v1 schema");
        conn.execute(
            "INSERT INTO executions (id, principal, adapter, fingerprint, request, created_at,
                 state, last_seq) VALUES (?1, '', 'scripted', 'fp', '{}', ?2, 'running', 3)",
            rusqlite::params![id.as_str(), record.created_at.to_string()],
        )
        .expect("a record");
        for event in &events {
            conn.execute(
                "INSERT INTO events (execution, seq, body) VALUES (?1, ?2, ?3)",
                rusqlite::params![
                    id.as_str(),
                    event.seq().get() as i64,
                    serde_json::to_string(event).unwrap()
                ],
            )
            .expect("an event");
        }
    }
    let store = SqliteStore::open(&path).expect("migrated");
    assert_eq!(store.read(&id, Cursor::START, 10).await, Ok(events.clone()));
    assert_eq!(
        store.read(&id, Cursor::after_seq(1), 1).await,
        Ok(events[1..2].to_vec())
    );
    // And it goes on in the new form.
    let lease = store
        .acquire(&id, &ReplicaId::new("a"), Duration::from_secs(30))
        .await
        .expect("lease");
    store
        .append(&lease, &suite::events(&id, 4, 6))
        .await
        .expect("append");
    assert_eq!(
        store
            .read(&id, Cursor::after_seq(2), 10)
            .await
            .map(|e| e.len()),
        Ok(4)
    );
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thread_state_follows_the_rules_in_memory_and_in_sqlite() {
    suite::thread_state(harness_core::session::InMemoryThreadStateStore::new()).await;
    let dir = scratch("thread-state");
    let path = dir.join("harness.db");
    let store = SqliteStore::open(&path).expect("open");
    suite::thread_state(store.clone()).await;

    // It survives a restart.
    use harness_core::session::{BindingId, SessionBinding, ThreadStateStore};
    let binding = SessionBinding::new(
        BindingId::generate(),
        harness_core::id::ConversationId::generate(),
    );
    let key = "session".parse().expect("a key");
    let version = store
        .put(&binding, &key, b"acp-session-1".to_vec(), None)
        .await
        .expect("write");
    drop(store);
    let again = SqliteStore::open(&path).expect("reopen");
    let entry = again
        .get(&binding, &key)
        .await
        .expect("read")
        .expect("kept");
    assert_eq!(
        (entry.value.as_slice(), entry.version),
        (&b"acp-session-1"[..], version)
    );
    drop(again);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Schema 5 scopes conversations by principal: see [`common::seed_unscoped_conversations`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_4_database_gives_each_conversation_to_the_principal_who_started_it() {
    let dir = scratch("v4");
    let path = dir.join("harness.db");
    common::seed_unscoped_conversations(&SqliteStore::open(&path).expect("open")).await;
    rusqlite::Connection::open(&path)
        .expect("the file")
        .execute_batch("PRAGMA user_version = 4")
        .expect("back to version 4");
    common::check_scoped_conversations(&SqliteStore::open(&path).expect("migrated")).await;
    // Opening again changes nothing.
    common::check_scoped_conversations(&SqliteStore::open(&path).expect("reopen")).await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The WAL is copied into the database by the checkpointer thread while the store runs (the
/// writer no longer checkpoints inside its commits): without it, everything would stay in the
/// WAL until the last connection closed and the database file would not grow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checkpointer_copies_the_wal_into_the_database_while_the_store_runs() {
    let dir = scratch("checkpoint");
    let path = dir.join("harness.db");
    let store = SqliteStore::open(&path).expect("open");
    let lease = leased(&store).await;
    let empty = std::fs::metadata(&path).expect("the database file").len();
    // About 8 MB of events: some 2,000 WAL pages, twice the checkpoint threshold.
    fill(&store, &lease, 1, 200).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let grown = loop {
        let len = std::fs::metadata(&path).expect("the database file").len();
        if len >= empty + 4_000_000 || std::time::Instant::now() > deadline {
            break len;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        grown >= empty + 4_000_000,
        "the database file grew from {empty} to only {grown} bytes: the WAL was not checkpointed"
    );
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Without a pause between appends, a checkpoint running beside the writer may never copy the
/// whole WAL, and the WAL restarts from its start only after one that did: the writer then
/// checkpoints itself past 4,000 pages, so the WAL file stays near that size however much is
/// written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_stays_bounded_under_appends_without_pause() {
    let dir = scratch("wal-bound");
    let path = dir.join("harness.db");
    let store = SqliteStore::open(&path).expect("open");
    let lease = leased(&store).await;
    // About 64 MB: some 16,000 pages, four times the bound.
    fill(&store, &lease, 1, 1600).await;
    let wal = std::fs::metadata(dir.join("harness.db-wal"))
        .expect("the WAL file")
        .len();
    assert!(
        wal <= 32 << 20,
        "the WAL grew to {wal} bytes for some 64 MB written: it never restarted"
    );
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A new execution in `store`, leased to replica "a".
async fn leased(store: &SqliteStore) -> harness_core::store::Lease {
    let record = suite::record();
    let id = record.id.clone();
    store.create(record).await.expect("create");
    store
        .acquire(&id, &ReplicaId::new("a"), Duration::from_secs(60))
        .await
        .expect("lease")
}

/// Appends `appends` batches of ten 4 KB deltas under `lease`, from sequence number `seq`, each
/// awaited; returns the next sequence number.
async fn fill(
    store: &SqliteStore,
    lease: &harness_core::store::Lease,
    mut seq: u64,
    appends: usize,
) -> u64 {
    let padding = "x".repeat(4000);
    for _ in 0..appends {
        let batch: Vec<_> = (seq..seq + 10)
            .map(|n| {
                suite::event_with(
                    &lease.execution_id,
                    n,
                    harness_core::event::EventPayload::MessageDelta(
                        harness_core::event::TextDelta::new(padding.clone()),
                    ),
                )
            })
            .collect();
        store.append(lease, &batch).await.expect("append");
        seq += 10;
    }
    seq
}
