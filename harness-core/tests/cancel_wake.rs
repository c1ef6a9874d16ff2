//! A cancel written to the store reaches the execution's owner at once, wherever it lands
//! relative to the owner's store watcher: before the watcher subscribed to the store's tail
//! (right after `start`), or between the watcher's read of the record and its wait.
//!
//! The lease term is long here, so the watcher's periodic re-check (a third of it) comes
//! long after the bound these tests allow: a missed wake-up fails instead of hiding behind
//! the re-check.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use futures_util::{StreamExt, stream};
use harness_core::adapter::{
    AdapterEvent, BoxStream, EventResult, RunContext, Simple, SimpleAdapter,
};
use harness_core::event::{Content, EventPayload, TextDelta};
use harness_core::id::{ActionId, Cursor, ExecutionId};
use harness_core::manifest::{ContractVersion, Describe, ExecutionMode, HarnessDescriptor};
use harness_core::service::{AdapterService, ExecutionHandle, ExecutionRequest, Outcome};
use harness_core::store::{
    Created, ExecutionRecord, ExecutionStore, Lease, Listed, MemoryStore, ReplicaId, Resolution,
    StoreError, Tail,
};
use harness_core::time::Timestamp;
use tokio::sync::{oneshot, watch};

/// The periodic re-check runs every 20 s with this term.
const LEASE: Duration = Duration::from_secs(60);

/// Generous (the machine is shared), and far below the re-check's 20 s.
const BOUND: Duration = Duration::from_secs(5);

const ITERATIONS: usize = 200;

/// Streams one delta, then waits for ever.
struct Hangs(HarnessDescriptor);

impl Describe for Hangs {
    fn descriptor(&self) -> &HarnessDescriptor {
        &self.0
    }
}

impl SimpleAdapter for Hangs {
    fn stream(&self, _: RunContext) -> BoxStream<'static, EventResult> {
        let delta = Ok(AdapterEvent::Content(Content::MessageDelta(
            TextDelta::new("working"),
        )));
        Box::pin(stream::iter([delta]).chain(stream::pending()))
    }
}

fn service(store: Arc<dyn ExecutionStore>) -> Arc<AdapterService<Simple<Hangs>>> {
    let adapter = Simple::new(Hangs(
        HarnessDescriptor::builder("hangs".parse().unwrap(), "0.1.0")
            .contract_version(ContractVersion::V1)
            .execution_mode(ExecutionMode::in_process())
            .build()
            .unwrap(),
    ));
    Arc::new(
        AdapterService::builder(adapter)
            .store(store, ReplicaId::new("one"))
            .lease_ttl(LEASE)
            .build(),
    )
}

/// Waits for the first delta: the execution runs.
async fn running(handle: &ExecutionHandle) {
    let mut events = handle.events(Cursor::START);
    while let Some(event) = events.next().await {
        if matches!(event.payload(), EventPayload::MessageDelta(_)) {
            return;
        }
    }
    panic!("the execution ended before its delta");
}

/// How long the cancel of `handle` requested at `asked` took to end it; fails past [`BOUND`].
async fn cancelled_within_bound(handle: &ExecutionHandle, asked: Instant, what: &str) -> Duration {
    let outcome = tokio::time::timeout(BOUND, handle.outcome())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{what}: the cancel stored {BOUND:?} ago has not ended the run: the owner's \
                 store watcher missed its wake-up (its re-check comes only every {:?})",
                LEASE / 3
            )
        });
    assert!(
        matches!(outcome, Outcome::Cancelled(_)),
        "{what}: {outcome:?}"
    );
    asked.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_right_after_start_ends_the_run_at_once() {
    let service = service(Arc::new(MemoryStore::new()));
    let mut slowest = Duration::ZERO;
    for i in 0..ITERATIONS {
        let handle = service.start(ExecutionRequest::new("go")).await.unwrap();
        // Before the owner's tasks have run, as a client that cancels at once does.
        let asked = Instant::now();
        assert!(
            service
                .request_cancel(handle.id(), "at once")
                .await
                .unwrap()
        );
        let took = cancelled_within_bound(&handle, asked, &format!("iteration {i}")).await;
        slowest = slowest.max(took);
    }
    eprintln!("{ITERATIONS} cancels right after start: the slowest took {slowest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_of_a_running_execution_ends_it_at_once() {
    let service = service(Arc::new(MemoryStore::new()));
    let mut slowest = Duration::ZERO;
    for i in 0..ITERATIONS {
        let handle = service.start(ExecutionRequest::new("go")).await.unwrap();
        running(&handle).await;
        let asked = Instant::now();
        assert!(
            service
                .request_cancel(handle.id(), "running")
                .await
                .unwrap()
        );
        let took = cancelled_within_bound(&handle, asked, &format!("iteration {i}")).await;
        slowest = slowest.max(took);
    }
    eprintln!("{ITERATIONS} cancels of running executions: the slowest took {slowest:?}");
}

/// A [`MemoryStore`] whose tails are handed out only once `tails` is open (a watcher
/// subscribing late: its task not yet scheduled, or a slow store), and whose next `record`
/// read can be held once it has read (a watcher between its check and its wait).
struct Hooked {
    inner: MemoryStore,
    tails: watch::Receiver<bool>,
    /// Taken by the next `record`: told when the record was read, then waits to return it.
    hold_record: Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>,
}

impl Hooked {
    fn new(tails: watch::Receiver<bool>) -> Self {
        Self {
            inner: MemoryStore::new(),
            tails,
            hold_record: Mutex::new(None),
        }
    }
}

impl ExecutionStore for Hooked {
    fn create(&self, record: ExecutionRecord) -> BoxFuture<'_, Result<Created, StoreError>> {
        self.inner.create(record)
    }

    fn record<'a>(
        &'a self,
        id: &'a ExecutionId,
    ) -> BoxFuture<'a, Result<ExecutionRecord, StoreError>> {
        let held = self.hold_record.lock().unwrap().take();
        Box::pin(async move {
            let record = self.inner.record(id).await;
            if let Some((read, go)) = held {
                let _ = read.send(());
                let _ = go.await;
            }
            record
        })
    }

    fn unfinished(&self) -> BoxFuture<'_, Result<Vec<ExecutionRecord>, StoreError>> {
        self.inner.unfinished()
    }

    fn list<'a>(
        &'a self,
        principal: &'a str,
        before: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Listed>, StoreError>> {
        self.inner.list(principal, before, limit)
    }

    fn acquire<'a>(
        &'a self,
        id: &'a ExecutionId,
        owner: &'a ReplicaId,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Lease, StoreError>> {
        self.inner.acquire(id, owner, ttl)
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.release(lease)
    }

    fn append<'a>(
        &'a self,
        lease: &'a Lease,
        events: &'a [harness_core::event::Event],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.append(lease, events)
    }

    fn read<'a>(
        &'a self,
        id: &'a ExecutionId,
        after: Cursor,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<harness_core::event::Event>, StoreError>> {
        self.inner.read(id, after, limit)
    }

    fn tail<'a>(&'a self, id: &'a ExecutionId) -> BoxFuture<'a, Result<Tail, StoreError>> {
        let mut open = self.tails.clone();
        Box::pin(async move {
            let _ = open.wait_for(|open| *open).await;
            self.inner.tail(id).await
        })
    }

    fn resolve<'a>(
        &'a self,
        id: &'a ExecutionId,
        resolution: Resolution,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.resolve(id, resolution)
    }

    fn resolution<'a>(
        &'a self,
        id: &'a ExecutionId,
        action: &'a ActionId,
    ) -> BoxFuture<'a, Result<Option<Resolution>, StoreError>> {
        self.inner.resolution(id, action)
    }

    fn request_cancel<'a>(
        &'a self,
        id: &'a ExecutionId,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.inner.request_cancel(id, reason)
    }

    fn purge(
        &self,
        created_before: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        self.inner.purge(created_before, limit)
    }
}

/// The cancel is stored before the owner's watcher subscribes to the tail: the watcher
/// reads the record after subscribing, and finds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_stored_before_the_watcher_subscribed_is_applied_at_once() {
    let (open, tails) = watch::channel(false);
    let service = service(Arc::new(Hooked::new(tails)));
    let handle = service.start(ExecutionRequest::new("go")).await.unwrap();
    running(&handle).await;
    let asked = Instant::now();
    assert!(service.request_cancel(handle.id(), "early").await.unwrap());
    open.send_replace(true);
    let took = cancelled_within_bound(&handle, asked, "subscribed after the cancel").await;
    eprintln!("a cancel stored before the subscription took {took:?}");
}

/// The cancel is stored after the watcher read the record (no cancel yet) and before it
/// waits on the tail: the tail's version counts the change, so the wait returns at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_stored_between_the_watchers_check_and_its_wait_is_applied_at_once() {
    for i in 0..20 {
        let (_open, tails) = watch::channel(true);
        let store = Arc::new(Hooked::new(tails));
        let (read_tx, read) = oneshot::channel();
        let (go, go_rx) = oneshot::channel();
        *store.hold_record.lock().unwrap() = Some((read_tx, go_rx));
        let service = service(Arc::clone(&store) as Arc<dyn ExecutionStore>);
        let handle = service.start(ExecutionRequest::new("go")).await.unwrap();
        // Only the owner's watcher reads the record here.
        tokio::time::timeout(BOUND, read)
            .await
            .expect("the watcher reads the record")
            .unwrap();
        let asked = Instant::now();
        assert!(
            service
                .request_cancel(handle.id(), "between")
                .await
                .unwrap()
        );
        go.send(()).unwrap();
        cancelled_within_bound(&handle, asked, &format!("iteration {i}")).await;
    }
}
