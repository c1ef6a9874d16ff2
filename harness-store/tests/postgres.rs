//! The store suite, the model-based property test and a durable service on `PostgresStore`,
//! against a real PostgreSQL: a throwaway cluster the test starts in a temporary directory
//! on a free loopback port (Debian's `postgresql` package, `.ci/install-postgres.sh`), run
//! as the `postgres` user when the tests run as root (the server refuses root).

use std::sync::Arc;
use std::time::Duration;

use common::{Cluster, connect};
use harness_core::id::Cursor;
use harness_core::store::{ExecutionStore, ReplicaId};
use harness_store::{PostgresStore, suite};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_store_passes_the_suite_tails_across_replicas_and_follows_the_model() {
    // One test holds the cluster: it is stopped (Drop) when the test ends, pass or fail.
    let cluster = Cluster::start();
    let store = connect(&cluster).await;
    suite::check(store.clone()).await;
    suite::durable_service(Arc::new(store.clone())).await;

    // A second store on the same database (another replica) follows an execution this one
    // writes, woken by NOTIFY: the live tail across connections.
    let other = connect(&cluster).await;
    let record = suite::record();
    let id = record.id.clone();
    store.create(record).await.expect("create");
    let lease = store
        .acquire(&id, &ReplicaId::new("writer"), Duration::from_secs(30))
        .await
        .expect("lease");
    let mut tail = other.tail(&id).await.expect("a tail on the other replica");
    let waiter = tokio::spawn(async move { tail.after(Cursor::after_seq(2)).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    store
        .append(&lease, &suite::events(&id, 1, 3))
        .await
        .expect("append");
    assert!(
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the other replica's tail wakes")
            .expect("the waiter")
    );
    assert_eq!(
        other
            .read(&id, Cursor::START, 10)
            .await
            .expect("read")
            .len(),
        3
    );

    // Two replicas on two connections: answers and cancels sent to one reach the other,
    // woken by NOTIFY.
    suite::two_replicas(
        Arc::new(connect(&cluster).await),
        Arc::new(connect(&cluster).await),
    )
    .await;

    // Migrations are applied once, whoever connects: a third connection finds them done.
    drop(connect(&cluster).await);

    // The model-based property test, a few dozen sequences.
    let runtime = tokio::runtime::Handle::current();
    let result = tokio::task::spawn_blocking(move || model(&runtime, &other)).await;
    result.expect("the model test");
}

fn model(runtime: &tokio::runtime::Handle, store: &PostgresStore) {
    use proptest::test_runner::{Config, TestRunner};
    let mut runner = TestRunner::new(Config {
        cases: 24,
        ..Config::default()
    });
    runner
        .run(&proptest::collection::vec(common::op(), 1..30), |ops| {
            runtime.block_on(common::run_model(store, &ops))
        })
        .expect("PostgresStore follows the model");
}

mod common;
