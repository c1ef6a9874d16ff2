//! Two replicas over one store: an answer or a cancel sent to either reaches the owner and
//! is applied once, however many callers race on both.

mod common;

use std::sync::Arc;

use harness_core::store::{ExecutionStore, MemoryStore};
use harness_store::{SqliteStore, suite};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_over_memory() {
    let store: Arc<dyn ExecutionStore> = Arc::new(MemoryStore::new());
    suite::two_replicas(Arc::clone(&store), store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_over_sqlite() {
    let dir = common::scratch("replicas");
    let store: Arc<dyn ExecutionStore> =
        Arc::new(SqliteStore::open(dir.join("harness.db")).expect("open"));
    suite::two_replicas(Arc::clone(&store), store).await;
    std::fs::remove_dir_all(&dir).unwrap();
}
