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
