//! A durable execution's log keeps only its memory window of stored events; a reader far
//! behind reads the rest back from the store, in order, without a gap.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{StreamExt, stream};
use harness_core::adapter::{
    AdapterEvent, BoxStream, EventResult, RunContext, Simple, SimpleAdapter,
};
use harness_core::event::{Content, EventPayload, RunSucceeded, TextDelta};
use harness_core::id::Cursor;
use harness_core::manifest::{ContractVersion, Describe, ExecutionMode, HarnessDescriptor};
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
use harness_core::store::{ExecutionStore, MemoryStore, ReplicaId};

/// Streams `n` deltas, then succeeds.
struct Deltas(HarnessDescriptor, usize);

impl Describe for Deltas {
    fn descriptor(&self) -> &HarnessDescriptor {
        &self.0
    }
}

impl SimpleAdapter for Deltas {
    fn stream(&self, _: RunContext) -> BoxStream<'static, EventResult> {
        let deltas = (0..self.1).map(|i| {
            Ok(AdapterEvent::Content(Content::MessageDelta(
                TextDelta::new(format!("d{i}")),
            )))
        });
        let done = std::iter::once(Ok(AdapterEvent::Completed(RunSucceeded::default())));
        Box::pin(stream::iter(deltas.chain(done)))
    }
}

fn deltas(n: usize) -> Simple<Deltas> {
    Simple::new(Deltas(
        HarnessDescriptor::builder("deltas".parse().unwrap(), "0.1.0")
            .contract_version(ContractVersion::V1)
            .execution_mode(ExecutionMode::in_process())
            .build()
            .unwrap(),
        n,
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_far_behind_reads_the_dropped_events_back_from_the_store() {
    let n = 20_000;
    let store = Arc::new(MemoryStore::new());
    let service = AdapterService::builder(deltas(n))
        .durable(Arc::clone(&store), ReplicaId::new("one"))
        .memory_window(2048)
        .build();
    let handle = service.start(ExecutionRequest::new("go")).await.unwrap();
    // A reader that subscribed at the start but reads nothing until the end: far behind.
    let behind = handle.events(Cursor::START);
    let outcome = tokio::time::timeout(Duration::from_secs(30), handle.outcome())
        .await
        .unwrap();
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");

    // The log holds its window (whole chunks of 1,024), not every event.
    let first_held = handle.log().first_held();
    let total = n as u64 + 4; // queued, starting, running, the deltas, succeeded
    assert!(first_held > 1, "nothing was dropped");
    let held = total - first_held + 1;
    assert!(
        held <= 2048 + 1024,
        "{held} events held for a window of 2,048"
    );
    assert_eq!(
        handle
            .log()
            .snapshot(Cursor::START)
            .first()
            .map(|e| e.seq().get()),
        Some(first_held),
        "a snapshot starts at the first event held"
    );

    // Every event, in order, from the store then the log.
    let seen: Vec<_> = behind.collect().await;
    assert_eq!(seen.len() as u64, total);
    assert!(
        seen.iter()
            .enumerate()
            .all(|(i, e)| e.seq().get() == i as u64 + 1)
    );
    let stored = store
        .read(handle.id(), Cursor::START, usize::MAX)
        .await
        .unwrap();
    assert!(seen.iter().zip(&stored).all(|(a, b)| **a == *b));
    // A reader that resumes from a cursor in the dropped part also gets the rest.
    let resumed: Vec<_> = handle.events(Cursor::after_seq(10)).collect().await;
    assert_eq!(resumed.first().map(|e| e.seq().get()), Some(11));
    assert_eq!(resumed.len() as u64, total - 10);
    // Derived state does not depend on the dropped events.
    assert!(matches!(
        seen.last().map(|e| e.payload()),
        Some(EventPayload::RunSucceeded(_))
    ));
}

#[tokio::test]
async fn a_log_without_a_store_keeps_every_event() {
    let service = AdapterService::new(deltas(5_000));
    let handle = service.start(ExecutionRequest::new("go")).await.unwrap();
    assert!(matches!(handle.outcome().await, Outcome::Succeeded(_)));
    assert_eq!(handle.log().first_held(), 1);
    assert_eq!(handle.log().snapshot(Cursor::START).len(), 5_004);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_purges_ended_executions_older_than_asked_and_nothing_else() {
    let store = Arc::new(MemoryStore::new());
    let service = AdapterService::builder(deltas(3))
        .durable(Arc::clone(&store), ReplicaId::new("one"))
        .build();
    let mut ended = Vec::new();
    for _ in 0..3 {
        let handle = service.start(ExecutionRequest::new("go")).await.unwrap();
        assert!(matches!(handle.outcome().await, Outcome::Succeeded(_)));
        ended.push(handle.id().clone());
    }
    // One that has not ended (its record only), however old.
    let unfinished = harness_core::store::ExecutionRecord::new(
        harness_core::id::ExecutionId::generate(),
        "deltas",
        "fp",
        serde_json::json!({"message": "go"}),
    );
    let unfinished_id = unfinished.id.clone();
    store.create(unfinished).await.unwrap();

    assert_eq!(
        service
            .purge_ended(Duration::from_secs(3600))
            .await
            .unwrap(),
        0
    );
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(service.purge_ended(Duration::ZERO).await.unwrap(), 3);
    for id in &ended {
        assert!(store.record(id).await.is_err(), "purged");
    }
    assert!(store.record(&unfinished_id).await.is_ok());
    // Without a store there is nothing to purge: said so.
    let plain = AdapterService::new(deltas(1));
    assert!(plain.purge_ended(Duration::ZERO).await.is_err());
}
