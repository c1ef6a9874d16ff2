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
    suite::cancels_wake_the_owner(Arc::new(store.clone())).await;

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

    // Thread state, on two connections at once.
    suite::thread_state(connect(&cluster).await).await;

    // Uploaded files.
    suite::files(connect(&cluster).await).await;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_database_is_migrated_with_its_events() {
    let cluster = Cluster::start();
    // A plain connection (a store would apply the current schema), once the server is up.
    let begun = std::time::Instant::now();
    let (client, connection) = loop {
        match tokio_postgres::connect(&cluster.url, tokio_postgres::NoTls).await {
            Ok(connected) => break connected,
            Err(e) if begun.elapsed() < Duration::from_secs(30) => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("PostgreSQL did not come up: {e}"),
        }
    };
    tokio::spawn(connection);
    let record = suite::record();
    let id = record.id.clone();
    let events = suite::events(&id, 1, 3);
    // The version 1 schema (one row per event), as that version left it.
    client
        .batch_execute(
            "CREATE TABLE harness_schema (version INT NOT NULL);
             INSERT INTO harness_schema VALUES (1);
             CREATE TABLE harness_executions (id TEXT PRIMARY KEY, created BIGSERIAL,
                 principal TEXT NOT NULL, adapter TEXT NOT NULL, fingerprint TEXT NOT NULL,
                 request TEXT NOT NULL, idempotency_key TEXT, created_at TEXT NOT NULL,
                 state TEXT NOT NULL, ended BOOLEAN NOT NULL DEFAULT FALSE,
                 last_seq BIGINT NOT NULL DEFAULT 0, cancel_requested TEXT, lease_owner TEXT,
                 lease_token BIGINT NOT NULL DEFAULT 0, lease_expires BIGINT);
             CREATE TABLE harness_events (execution TEXT NOT NULL, seq BIGINT NOT NULL,
                 body TEXT NOT NULL, PRIMARY KEY (execution, seq));
             CREATE TABLE harness_resolutions (execution TEXT NOT NULL, action TEXT NOT NULL,
                 body TEXT NOT NULL, PRIMARY KEY (execution, action));",
        )
        .await
        .expect("the v1 schema");
    client
        .execute(
            "INSERT INTO harness_executions (id, principal, adapter, fingerprint, request, \
             created_at, state, last_seq) VALUES ($1, '', 'scripted', 'fp', '{}', $2, \
             'running', 3)",
            &[&id.as_str(), &record.created_at.to_string()],
        )
        .await
        .expect("a record");
    for event in &events {
        client
            .execute(
                "INSERT INTO harness_events (execution, seq, body) VALUES ($1, $2, $3)",
                &[
                    &id.as_str(),
                    &(event.seq().get() as i64),
                    &serde_json::to_string(event).unwrap(),
                ],
            )
            .await
            .expect("an event");
    }
    let store = connect(&cluster).await;
    assert_eq!(store.read(&id, Cursor::START, 10).await, Ok(events.clone()));
    assert_eq!(
        store.read(&id, Cursor::after_seq(1), 1).await,
        Ok(events[1..2].to_vec())
    );
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
    let version: i32 = client
        .query_one("SELECT max(version) FROM harness_schema", &[])
        .await
        .expect("the version")
        .get(0);
    assert_eq!(version, 7);
}

/// A rolling upgrade: rows a newer replica wrote (an events batch and an answer, with fields
/// this version does not know) are read by this version's store, and the events are served
/// again as the newer writer wrote them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_a_newer_writer_stored_are_read() {
    use harness_core::store::Resolution;
    let cluster = Cluster::start();
    let store = connect(&cluster).await;
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
    // What the newer replica wrote instead: the same rows with its new fields.
    let mut body = serde_json::to_value(suite::events(&id, 1, 3)).unwrap();
    body[0]["traceId"] = serde_json::json!("4bf92f3577b34da6a3ce929d0e0e4736");
    body[2]["data"]["lang"] = serde_json::json!("en");
    let mut stored_answer = serde_json::to_value(&answer).unwrap();
    stored_answer["answeredBy"] = serde_json::json!("replica-b");
    let (client, connection) = tokio_postgres::connect(&cluster.url, tokio_postgres::NoTls)
        .await
        .expect("a plain connection");
    tokio::spawn(connection);
    let changed = client
        .execute(
            "UPDATE harness_event_batches SET body = $1 WHERE execution = $2",
            &[&body.to_string(), &id.as_str()],
        )
        .await
        .expect("rewrite the events row");
    assert_eq!(changed, 1, "one batch row");
    let changed = client
        .execute(
            "UPDATE harness_resolutions SET body = $1 WHERE execution = $2",
            &[&stored_answer.to_string(), &id.as_str()],
        )
        .await
        .expect("rewrite the answer row");
    assert_eq!(changed, 1);
    // Another replica (this version) reads them.
    let older = connect(&cluster).await;
    let read = older
        .read(&id, Cursor::START, 10)
        .await
        .expect("a newer writer's events row reads");
    assert_eq!(
        serde_json::to_value(&read).unwrap(),
        body,
        "served again with the newer writer's fields"
    );
    assert_eq!(older.resolution(&id, &action).await, Ok(Some(answer)));
}

/// Schema 6 scopes conversations by principal: see [`common::seed_unscoped_conversations`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_5_database_gives_each_conversation_to_the_principal_who_started_it() {
    let cluster = Cluster::start();
    let store = connect(&cluster).await;
    common::seed_unscoped_conversations(&store).await;
    let (client, connection) = tokio_postgres::connect(&cluster.url, tokio_postgres::NoTls)
        .await
        .expect("a plain connection");
    tokio::spawn(connection);
    client
        .batch_execute("UPDATE harness_schema SET version = 5")
        .await
        .expect("back to version 5");
    drop(store);
    common::check_scoped_conversations(&connect(&cluster).await).await;
    // Connecting again changes nothing.
    common::check_scoped_conversations(&connect(&cluster).await).await;
}

/// Replicas connect while another writes: a connect to a database whose schema is current
/// changes nothing (its DDL would take table locks that stall or deadlock the writer), so
/// every connect succeeds and the writer never fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_connect_while_another_writes() {
    let cluster = Cluster::start();
    let writer = connect(&cluster).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writing: Vec<_> = (0..4)
        .map(|_| {
            let (writer, stop) = (writer.clone(), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut written = 0u64;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let record = suite::record();
                    let id = record.id.clone();
                    writer.create(record).await.expect("create");
                    let lease = writer
                        .acquire(&id, &ReplicaId::new("writer"), Duration::from_secs(30))
                        .await
                        .expect("lease");
                    for n in 0..10 {
                        writer
                            .append(&lease, &suite::events(&id, n * 3 + 1, 3))
                            .await
                            .expect("the writer is never refused");
                    }
                    written += 1;
                }
                written
            })
        })
        .collect();
    let connects: Vec<_> = (0..12)
        .map(|_| {
            let url = cluster.url.clone();
            tokio::spawn(async move { PostgresStore::connect(&url).await.map(drop) })
        })
        .collect();
    for connect in connects {
        connect
            .await
            .expect("a connect task")
            .expect("a replica connects while another writes");
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for writer in writing {
        assert!(writer.await.expect("a writer") > 0);
    }
}
