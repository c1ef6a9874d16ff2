//! The store conformance suite on every backend of this crate, and a model-based property
//! test of the lease, fencing and append rules.

use std::path::PathBuf;
use std::time::Duration;

use harness_core::id::Cursor;
use harness_core::store::{ExecutionStore, Lease, MemoryStore, ReplicaId, StoreError};
use harness_store::SqliteStore;
use harness_store::suite;
use proptest::prelude::*;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join("harness-store-tests")
        .join(format!("{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

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

/// One step of the model-based test.
#[derive(Debug, Clone)]
enum Op {
    /// Replica `r` takes (or renews) the lease.
    Acquire(usize),
    /// Replica `r` gives its last lease up.
    Release(usize),
    /// Replica `r` appends `n` events after the log (or, `gap`, one too far).
    Append { r: usize, n: u64, gap: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..3usize).prop_map(Op::Acquire),
        (0..3usize).prop_map(Op::Release),
        (0..3usize, 1..4u64, proptest::bool::weighted(0.2)).prop_map(|(r, n, gap)| Op::Append {
            r,
            n,
            gap
        }),
    ]
}

/// What the contract says each step does, on an execution with three replicas.
#[derive(Default)]
struct Model {
    holder: Option<usize>,
    token: u64,
    /// The token each replica last received.
    tokens: [Option<u64>; 3],
    last: u64,
}

async fn run_model<S: ExecutionStore>(store: &S, ops: &[Op]) -> Result<(), TestCaseError> {
    let record = suite::record();
    let id = record.id.clone();
    store.create(record).await.expect("create");
    let replicas: Vec<ReplicaId> = (0..3).map(|r| ReplicaId::new(format!("r{r}"))).collect();
    let mut leases: [Option<Lease>; 3] = Default::default();
    let mut model = Model::default();
    for op in ops {
        match *op {
            Op::Acquire(r) => {
                let got = store
                    .acquire(&id, &replicas[r], Duration::from_secs(60))
                    .await;
                match model.holder {
                    Some(h) if h != r => {
                        prop_assert!(matches!(got, Err(StoreError::Leased { .. })), "{got:?}");
                    }
                    Some(_) => {
                        let lease = got.expect("a renewal");
                        prop_assert_eq!(lease.token.get(), model.token);
                        leases[r] = Some(lease);
                    }
                    None => {
                        model.token += 1;
                        model.holder = Some(r);
                        model.tokens[r] = Some(model.token);
                        let lease = got.expect("a free lease");
                        prop_assert_eq!(lease.token.get(), model.token);
                        leases[r] = Some(lease);
                    }
                }
            }
            Op::Release(r) => {
                let Some(lease) = &leases[r] else { continue };
                let got = store.release(lease).await;
                if model.holder == Some(r) && model.tokens[r] == Some(model.token) {
                    prop_assert_eq!(got, Ok(()));
                    model.holder = None;
                } else {
                    prop_assert!(matches!(got, Err(StoreError::Fenced { .. })), "{got:?}");
                }
            }
            Op::Append { r, n, gap } => {
                let Some(lease) = &leases[r] else { continue };
                let from = model.last + 1 + u64::from(gap);
                let batch = suite::events(&id, from, from + n - 1);
                let got = store.append(lease, &batch).await;
                let current = model.holder == Some(r) && model.tokens[r] == Some(model.token);
                if !current {
                    prop_assert!(matches!(got, Err(StoreError::Fenced { .. })), "{got:?}");
                } else if gap {
                    prop_assert!(matches!(got, Err(StoreError::Sequence { .. })), "{got:?}");
                } else {
                    prop_assert_eq!(got, Ok(()));
                    model.last += n;
                }
            }
        }
        let stored = store.read(&id, Cursor::START, 10_000).await.expect("read");
        prop_assert_eq!(stored.len() as u64, model.last);
        prop_assert!(
            stored
                .iter()
                .enumerate()
                .all(|(i, e)| e.seq().get() == i as u64 + 1)
        );
    }
    Ok(())
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
