//! A durable execution's log keeps only its memory window of stored events; a reader far
//! behind reads the rest back from the store, in order, without a gap. A stream faster than
//! its store waits for it (the log never holds more than a window the store has not taken),
//! and a finished execution keeps only its last chunk of events.

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

mod slow {
    //! A [`MemoryStore`] whose appends take a while: a store slower than the stream.

    use std::sync::Arc;
    use std::time::Duration;

    use futures_util::future::BoxFuture;
    use harness_core::event::Event;
    use harness_core::id::{ActionId, Cursor, ExecutionId};
    use harness_core::store::{
        Created, ExecutionRecord, ExecutionStore, Lease, Listed, MemoryStore, ReplicaId,
        Resolution, StoreError, Tail,
    };
    use harness_core::time::Timestamp;

    pub(crate) struct Slow(pub(crate) MemoryStore, pub(crate) Duration);

    impl ExecutionStore for Slow {
        fn create(&self, record: ExecutionRecord) -> BoxFuture<'_, Result<Created, StoreError>> {
            self.0.create(record)
        }
        fn record<'a>(
            &'a self,
            id: &'a ExecutionId,
        ) -> BoxFuture<'a, Result<ExecutionRecord, StoreError>> {
            self.0.record(id)
        }
        fn unfinished(&self) -> BoxFuture<'_, Result<Vec<ExecutionRecord>, StoreError>> {
            self.0.unfinished()
        }
        fn list<'a>(
            &'a self,
            principal: &'a str,
            before: Option<u64>,
            limit: usize,
        ) -> BoxFuture<'a, Result<Vec<Listed>, StoreError>> {
            self.0.list(principal, before, limit)
        }
        fn acquire<'a>(
            &'a self,
            id: &'a ExecutionId,
            owner: &'a ReplicaId,
            ttl: Duration,
        ) -> BoxFuture<'a, Result<Lease, StoreError>> {
            self.0.acquire(id, owner, ttl)
        }
        fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
            self.0.release(lease)
        }
        fn append<'a>(
            &'a self,
            lease: &'a Lease,
            events: &'a [Event],
        ) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(async move {
                tokio::time::sleep(self.1).await;
                self.0.append(lease, events).await
            })
        }
        fn append_shared<'a>(
            &'a self,
            lease: &'a Lease,
            events: &'a [Arc<Event>],
        ) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(async move {
                tokio::time::sleep(self.1).await;
                self.0.append_shared(lease, events).await
            })
        }
        fn read<'a>(
            &'a self,
            id: &'a ExecutionId,
            after: Cursor,
            limit: usize,
        ) -> BoxFuture<'a, Result<Vec<Event>, StoreError>> {
            self.0.read(id, after, limit)
        }
        fn tail<'a>(&'a self, id: &'a ExecutionId) -> BoxFuture<'a, Result<Tail, StoreError>> {
            self.0.tail(id)
        }
        fn resolve<'a>(
            &'a self,
            id: &'a ExecutionId,
            resolution: Resolution,
        ) -> BoxFuture<'a, Result<(), StoreError>> {
            self.0.resolve(id, resolution)
        }
        fn resolution<'a>(
            &'a self,
            id: &'a ExecutionId,
            action: &'a ActionId,
        ) -> BoxFuture<'a, Result<Option<Resolution>, StoreError>> {
            self.0.resolution(id, action)
        }
        fn request_cancel<'a>(
            &'a self,
            id: &'a ExecutionId,
            reason: &'a str,
        ) -> BoxFuture<'a, Result<bool, StoreError>> {
            self.0.request_cancel(id, reason)
        }
        fn purge(
            &self,
            created_before: Timestamp,
            limit: usize,
        ) -> BoxFuture<'_, Result<usize, StoreError>> {
            self.0.purge(created_before, limit)
        }
    }
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_faster_than_its_store_waits_for_it_and_memory_stays_bounded() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (n, window) = (30_000, 1024);
    // Every append takes 5 ms: the adapter's stream (all ready at once) is far faster.
    let store = Arc::new(slow::Slow(MemoryStore::new(), Duration::from_millis(5)));
    let service = AdapterService::builder(deltas(n))
        .store(store, ReplicaId::new("one"))
        .memory_window(window)
        .build();
    let handle = service.start(ExecutionRequest::new("go")).await.unwrap();
    // Measured right after every append, on the writer's thread: nothing is missed.
    let (backlog, held) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let log = handle.log().clone();
    handle.log().observe({
        let (backlog, held) = (Arc::clone(&backlog), Arc::clone(&held));
        move |_: &harness_core::event::Event| {
            backlog.fetch_max(log.backlog(), Ordering::Relaxed);
            let in_memory = log.len() - (log.first_held() as usize - 1);
            held.fetch_max(in_memory, Ordering::Relaxed);
        }
    });
    let outcome = tokio::time::timeout(Duration::from_secs(60), handle.outcome())
        .await
        .unwrap();
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    let (backlog, held) = (
        backlog.load(Ordering::Relaxed),
        held.load(Ordering::Relaxed),
    );
    // At most a window not yet stored, plus the driver's batch of ready items (64) and the
    // lifecycle events around them.
    assert!(
        backlog <= window + 128,
        "{backlog} events waited for the store at once, for a window of {window}"
    );
    assert!(
        backlog >= window / 2,
        "the store was never behind: {backlog}"
    );
    // That, plus the window of stored events (trimmed by whole chunks of 1,024).
    assert!(
        held <= 2 * window + 1024 + 128,
        "{held} events in memory at once, for a window of {window}"
    );
    // Nothing was lost on the way.
    let seen: Vec<_> = handle.events(Cursor::START).collect().await;
    assert_eq!(seen.len(), n + 4);
    assert!(
        seen.iter()
            .enumerate()
            .all(|(i, e)| e.seq().get() == i as u64 + 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_durable_execution_keeps_only_its_last_chunk() {
    let n = 20_000;
    let service = AdapterService::builder(deltas(n))
        .durable(Arc::new(MemoryStore::new()), ReplicaId::new("one"))
        .memory_window(8192)
        .build();
    let handle = service.start(ExecutionRequest::new("go")).await.unwrap();
    let terminal = handle.log().terminal().await;
    assert_eq!(terminal.seq().get(), n as u64 + 4);
    let log = handle.log();
    let held = log.len() - (log.first_held() as usize - 1);
    assert!(
        held <= 1024,
        "{held} events still in memory after the end (window 8,192)"
    );
    // What a finished execution reports does not need the rest.
    assert!(matches!(handle.outcome().await, Outcome::Succeeded(_)));
    assert_eq!(log.last().map(|e| e.seq()), Some(terminal.seq()));
    // Every event is still there for a reader, from the store.
    let seen: Vec<_> = handle.events(Cursor::START).collect().await;
    assert_eq!(seen.len(), n + 4);
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
