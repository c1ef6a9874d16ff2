//! A durable `AdapterService`: every event reaches the store before any reader sees it, a
//! replica killed with SIGKILL mid-stream leaves an execution that another replica process
//! ends with exactly one terminal event, and nothing a reader saw is taken back.

mod common;
use common::scratch;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use harness_core::event::{Event, EventKind, EventPayload};
use harness_core::id::{ActionId, Cursor, ExecutionId};
use harness_core::lifecycle::ExecutionState;
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
use harness_core::store::{
    Created, ExecutionRecord, ExecutionStore, Lease, MemoryStore, ReplicaId, Resolution,
    StoreError, Tail,
};
use harness_store::suite::{self, Ticker};
use harness_store::{PostgresStore, SqliteStore};
use tokio::sync::Semaphore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_execution_is_in_the_store_event_for_event() {
    suite::durable_service(Arc::new(MemoryStore::new())).await;
    let dir = scratch("durable");
    suite::durable_service(Arc::new(
        SqliteStore::open(dir.join("harness.db")).expect("open"),
    ))
    .await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_right_after_start_wakes_the_owner() {
    suite::cancels_wake_the_owner(Arc::new(MemoryStore::new())).await;
    let dir = scratch("cancel-wake");
    suite::cancels_wake_the_owner(Arc::new(
        SqliteStore::open(dir.join("harness.db")).expect("open"),
    ))
    .await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A store whose appends wait for permits the test hands out: fault injection for the gate.
#[derive(Clone)]
struct Held {
    inner: MemoryStore,
    permits: Arc<Semaphore>,
    /// While set, replica `a` cannot reach the store (its writes and renewals fail).
    partitioned: Arc<std::sync::atomic::AtomicBool>,
    /// When set, the next append is stored but answered `Unavailable` (an answer lost after
    /// the commit).
    lose_answer: Arc<std::sync::atomic::AtomicBool>,
}

impl Held {
    /// A store granting `permits` appends, reachable, answering every write.
    fn new(permits: usize) -> Self {
        Self {
            inner: MemoryStore::new(),
            permits: Arc::new(Semaphore::new(permits)),
            partitioned: Arc::default(),
            lose_answer: Arc::default(),
        }
    }

    fn cut_off(&self, owner: &ReplicaId) -> bool {
        owner.as_str() == "a" && self.partitioned.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl ExecutionStore for Held {
    fn create(&self, record: ExecutionRecord) -> BoxFuture<'_, Result<Created, StoreError>> {
        self.inner.create(record)
    }
    fn record<'a>(
        &'a self,
        id: &'a ExecutionId,
    ) -> BoxFuture<'a, Result<ExecutionRecord, StoreError>> {
        self.inner.record(id)
    }
    fn unfinished(&self) -> BoxFuture<'_, Result<Vec<ExecutionRecord>, StoreError>> {
        self.inner.unfinished()
    }
    fn list<'a>(
        &'a self,
        principal: &'a str,
        before: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<harness_core::store::Listed>, StoreError>> {
        self.inner.list(principal, before, limit)
    }
    fn acquire<'a>(
        &'a self,
        id: &'a ExecutionId,
        owner: &'a ReplicaId,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Lease, StoreError>> {
        if self.cut_off(owner) {
            return Box::pin(async { Err(StoreError::Unavailable("partitioned".into())) });
        }
        self.inner.acquire(id, owner, ttl)
    }
    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.release(lease)
    }
    fn append<'a>(
        &'a self,
        lease: &'a Lease,
        events: &'a [Event],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            if self.cut_off(&lease.owner) {
                return Err(StoreError::Unavailable("partitioned".into()));
            }
            let permit = self.permits.acquire().await.expect("permits");
            permit.forget();
            let stored = self.inner.append(lease, events).await;
            if stored.is_ok()
                && self
                    .lose_answer
                    .swap(false, std::sync::atomic::Ordering::SeqCst)
            {
                return Err(StoreError::Unavailable("the answer was lost".into()));
            }
            stored
        })
    }
    fn read<'a>(
        &'a self,
        id: &'a ExecutionId,
        after: Cursor,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Event>, StoreError>> {
        self.inner.read(id, after, limit)
    }
    fn tail<'a>(&'a self, id: &'a ExecutionId) -> BoxFuture<'a, Result<Tail, StoreError>> {
        self.inner.tail(id)
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
        created_before: harness_core::time::Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        self.inner.purge(created_before, limit)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_see_only_what_the_store_acknowledged() {
    let store = Held::new(0);
    let service = AdapterService::builder(Ticker::new(Some(5), Duration::from_millis(1)))
        .store(Arc::new(store.clone()), ReplicaId::new("a"))
        .build();
    let execution = service
        .start(ExecutionRequest::new("tick"))
        .await
        .expect("starts");
    // The run ends in memory; the store has acknowledged nothing yet.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !execution.log().state().is_some_and(|s| s.is_terminal())
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(execution.log().state(), Some(ExecutionState::Succeeded));
    assert!(
        execution.log().snapshot(Cursor::START).is_empty(),
        "nothing shown"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(100), execution.outcome())
            .await
            .is_err(),
        "no outcome before the store has the terminal event"
    );
    // One append acknowledged: exactly its events are shown.
    store.permits.add_permits(1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let shown = loop {
        let shown = execution.log().snapshot(Cursor::START);
        if !shown.is_empty() || tokio::time::Instant::now() > deadline {
            break shown;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let stored = store
        .read(execution.id(), Cursor::START, 100)
        .await
        .expect("read");
    let shown: Vec<Event> = shown.iter().map(|e| Event::clone(e)).collect();
    assert!(!shown.is_empty());
    assert_eq!(shown, stored, "shown: what the store holds");
    store.permits.add_permits(100);
    let outcome = tokio::time::timeout(Duration::from_secs(5), execution.outcome())
        .await
        .expect("the outcome once stored");
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
}

fn replica(db: &str, name: &str, mode: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_store-replica"))
        .arg(db)
        .args([name, mode])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the replica starts")
}

fn lines(child: &mut Child) -> impl Iterator<Item = String> + use<> {
    BufReader::new(child.stdout.take().expect("stdout"))
        .lines()
        .map_while(Result::ok)
}

/// One crash scenario as two tests: on an SQLite file in a scratch directory, and on a
/// throwaway PostgreSQL cluster.
macro_rules! on_both_stores {
    ($scenario:ident: $sqlite:ident, $postgres:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $sqlite() {
            let dir = scratch(stringify!($scenario));
            $scenario(dir.join("harness.db").to_str().expect("UTF-8")).await;
            std::fs::remove_dir_all(&dir).unwrap();
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $postgres() {
            let cluster = common::Cluster::start();
            drop(common::connect(&cluster).await);
            $scenario(&cluster.url).await;
        }
    };
}

/// The stored log of `id`, checked: contiguous from 1, with exactly one terminal event, last.
async fn stored_once(store: &dyn ExecutionStore, id: &ExecutionId) -> Vec<Event> {
    let all = store
        .read(id, Cursor::START, usize::MAX)
        .await
        .expect("read");
    assert!(
        all.iter()
            .enumerate()
            .all(|(i, e)| e.seq().get() == i as u64 + 1),
        "contiguous"
    );
    assert_eq!(all.iter().filter(|e| e.kind().is_terminal()).count(), 1);
    assert!(
        all.last().is_some_and(|e| e.kind().is_terminal()),
        "the end is last"
    );
    all
}

/// The store at `db` (as `store-replica` opens it).
async fn open(db: &str) -> Arc<dyn ExecutionStore> {
    if db.starts_with("host=") {
        Arc::new(PostgresStore::connect(db).await.expect("connect"))
    } else {
        Arc::new(SqliteStore::open(db).expect("open"))
    }
}

on_both_stores!(killed_mid_stream: a_replica_killed_mid_stream_is_ended_once_by_another_on_sqlite, a_replica_killed_mid_stream_is_ended_once_by_another_on_postgres);

/// A replica process runs an execution and is killed with SIGKILL mid-stream; two replica
/// processes recover at once: exactly one ends it, with one `run.failed` (`OWNER_LOST`), the
/// log contiguous, and every event the killed replica's reader saw is in the store unchanged.
async fn killed_mid_stream(db: &str) {
    let mut owner = replica(db, "owner", "run");
    let mut out = lines(&mut owner);
    let id: ExecutionId = out
        .next()
        .and_then(|l| l.strip_prefix("execution ").map(str::to_owned))
        .expect("the execution id")
        .parse()
        .expect("an id");
    let mut seen = Vec::new();
    for line in out.by_ref() {
        let mut parts = line.split(' ');
        assert_eq!(parts.next(), Some("seen"), "{line}");
        let seq: u64 = parts.next().and_then(|s| s.parse().ok()).expect("a seq");
        let kind = parts.next().expect("a kind").to_owned();
        seen.push((seq, kind));
        if seen.len() >= 150 {
            break;
        }
    }
    owner.kill().expect("SIGKILL");
    owner.wait().expect("reaped");

    // Two replicas recover at once: exactly one ends the execution.
    let mut first = replica(db, "first", "recover");
    let mut second = replica(db, "second", "recover");
    let reports: Vec<Vec<String>> = [&mut first, &mut second]
        .into_iter()
        .map(|child| lines(child).collect())
        .collect();
    assert!(first.wait().expect("reaped").success());
    assert!(second.wait().expect("reaped").success());
    let recovered: Vec<&String> = reports
        .iter()
        .flatten()
        .filter(|l| l.starts_with("recovered"))
        .collect();
    assert_eq!(
        recovered,
        [&format!("recovered {id} failed")],
        "{reports:?}"
    );

    let store = open(db).await;
    let all = stored_once(&*store, &id).await;
    let Some(EventPayload::RunFailed(failed)) = all.last().map(Event::payload) else {
        panic!("ends run.failed: {:?}", all.last());
    };
    assert_eq!(failed.error.code.as_str(), "OWNER_LOST");
    assert!(failed.error.retryable);
    // Everything the killed replica's reader saw is in the store, unchanged.
    for (seq, kind) in &seen {
        let stored = &all[usize::try_from(*seq).unwrap() - 1];
        assert_eq!(stored.kind().as_str(), kind, "event {seq}");
    }
    assert!(
        all.len() > seen.len(),
        "the terminal event came after all it saw"
    );
}

on_both_stores!(killed_awaiting: a_replica_killed_awaiting_approval_is_resumed_once_by_another_on_sqlite, a_replica_killed_awaiting_approval_is_resumed_once_by_another_on_postgres);

/// The owner's `execution <id>` line, then its `seen` lines up to one of kind `until`.
fn until_seen(out: &mut impl Iterator<Item = String>, until: &str) -> (ExecutionId, Vec<String>) {
    let id: ExecutionId = out
        .next()
        .and_then(|l| l.strip_prefix("execution ").map(str::to_owned))
        .expect("the execution id")
        .parse()
        .expect("an id");
    let mut seen = Vec::new();
    for line in out.by_ref() {
        let kind = line.rsplit(' ').next().expect("a kind").to_owned();
        seen.push(kind.clone());
        if kind == until {
            break;
        }
    }
    (id, seen)
}

/// Two recovering replica processes at once, each to its end; their lines.
fn two_recoverers(db: &str) -> Vec<String> {
    let mut first = replica(db, "first", "recover");
    let mut second = replica(db, "second", "recover");
    let reports: Vec<Vec<String>> = [&mut first, &mut second]
        .into_iter()
        .map(|child| lines(child).collect())
        .collect();
    assert!(first.wait().expect("reaped").success(), "{reports:?}");
    assert!(second.wait().expect("reaped").success(), "{reports:?}");
    reports.into_iter().flatten().collect()
}

/// A replica process pauses on a tool approval and is killed with SIGKILL; two replica
/// processes recover at once: exactly one restores the execution with its pending action,
/// answers it and runs it to `run.succeeded`; the stored log is contiguous, holds the one
/// answer and one terminal event, and keeps everything the killed replica's reader saw.
async fn killed_awaiting(db: &str) {
    let mut owner = replica(db, "owner", "ask");
    let mut out = lines(&mut owner);
    let (id, seen) = until_seen(&mut out, "run.awaiting_approval");
    owner.kill().expect("SIGKILL");
    owner.wait().expect("reaped");

    let report = two_recoverers(db);
    let handled: Vec<&String> = report
        .iter()
        .filter(|l| l.starts_with("recovered") || l.starts_with("resumed"))
        .collect();
    assert_eq!(
        handled,
        [
            &format!("recovered {id} restored"),
            &format!("resumed {id} run.succeeded")
        ],
        "{report:?}"
    );
    let store = open(db).await;
    let all = stored_once(&*store, &id).await;
    let count = |kind: EventKind| all.iter().filter(|e| e.kind() == kind).count();
    assert_eq!(all.last().map(Event::kind), Some(EventKind::RunSucceeded));
    assert_eq!(count(EventKind::ActionRequested), 1);
    assert_eq!(count(EventKind::ActionResolved), 1);
    assert_eq!(count(EventKind::MessageDelta), 3, "the resumed run ticked");
    for (n, kind) in seen.iter().enumerate() {
        assert_eq!(all[n].kind().as_str(), kind, "event {}", n + 1);
    }
}

on_both_stores!(killed_mid_cancel: a_replica_killed_mid_cancel_ends_cancelled_once_on_sqlite, a_replica_killed_mid_cancel_ends_cancelled_once_on_postgres);

/// A replica process streams; a cancel is requested through the store (as another replica
/// does) and the owner is killed with SIGKILL right after, whether or not it had applied
/// the cancel; two replica processes recover at once: the store ends with exactly one
/// terminal event, `run.cancelled` with the requested reason, written by one replica.
async fn killed_mid_cancel(db: &str) {
    let mut owner = replica(db, "owner", "run");
    let mut out = lines(&mut owner);
    let (id, _) = until_seen(&mut out, "message.delta");
    let store = open(db).await;
    assert!(
        store
            .request_cancel(&id, "cancelled from elsewhere")
            .await
            .expect("the request is recorded")
    );
    owner.kill().expect("SIGKILL");
    owner.wait().expect("reaped");

    let report = two_recoverers(db);
    let handled: Vec<&String> = report
        .iter()
        .filter(|l| l.starts_with("recovered"))
        .collect();
    assert!(
        handled.len() <= 1
            && handled
                .iter()
                .all(|l| **l == format!("recovered {id} cancelled")),
        "at most one replica ends it, as cancelled: {report:?}"
    );
    let all = stored_once(&*store, &id).await;
    let Some(EventPayload::RunCancelled(reason)) = all.last().map(Event::payload) else {
        panic!("ends run.cancelled: {:?}", all.last());
    };
    assert_eq!(reason.reason.as_deref(), Some("cancelled from elsewhere"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_leaves_the_replicas_own_live_executions_alone() {
    let store: Arc<dyn ExecutionStore> = Arc::new(MemoryStore::new());
    let service = AdapterService::builder(Ticker::new(None, Duration::from_millis(2)))
        .store(Arc::clone(&store), ReplicaId::new("a"))
        .build();
    let execution = service
        .start(ExecutionRequest::new("tick"))
        .await
        .expect("starts");
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(
        service.recover().await,
        Ok(Vec::new()),
        "nothing to recover"
    );
    assert!(
        !execution.log().state().is_some_and(|s| s.is_terminal()),
        "the live execution runs on"
    );
    let _ = execution.cancel(harness_core::event::CancelReason::new("done"));
    let outcome = tokio::time::timeout(Duration::from_secs(5), execution.outcome())
        .await
        .expect("ends");
    assert!(matches!(outcome, Outcome::Cancelled(_)), "{outcome:?}");
}

/// A replica cut off from the store past its lease: another takes the execution over, and
/// when the first one reaches the store again its writes are fenced; it stops its run, and
/// the store holds nothing it wrote after losing the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_lost_its_lease_is_fenced_and_stops() {
    let store = Held::new(1_000_000);
    let service = AdapterService::builder(Ticker::new(None, Duration::from_millis(5)))
        .store(Arc::new(store.clone()), ReplicaId::new("a"))
        .lease_ttl(Duration::from_millis(300))
        .build();
    let execution = service
        .start(ExecutionRequest::new("tick"))
        .await
        .expect("starts");
    tokio::time::sleep(Duration::from_millis(100)).await;
    store
        .partitioned
        .store(true, std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let id = execution.id().clone();
    let taken = store
        .inner
        .acquire(&id, &ReplicaId::new("b"), Duration::from_secs(30))
        .await
        .expect("the lapsed lease is taken over");
    let stored_before = store
        .inner
        .read(&id, Cursor::START, 100_000)
        .await
        .expect("read");
    assert!(!stored_before.is_empty());
    store
        .partitioned
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let outcome = tokio::time::timeout(Duration::from_secs(10), execution.outcome())
        .await
        .expect("the fenced replica's run ends");
    assert!(!matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stored_after = store
        .inner
        .read(&id, Cursor::START, 100_000)
        .await
        .expect("read");
    assert_eq!(
        stored_after, stored_before,
        "nothing written by the replica after it lost the lease"
    );
    assert!(taken.token.get() > 1);
}

/// The store commits a batch but its answer is lost: the retry finds the batch stored and the
/// execution goes on, whole, instead of being taken for fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_stored_but_answered_unavailable_is_not_written_twice_nor_lost() {
    let store = Held::new(1_000_000);
    store
        .lose_answer
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let service = AdapterService::builder(Ticker::new(Some(50), Duration::from_millis(1)))
        .store(Arc::new(store.clone()), ReplicaId::new("a"))
        .build();
    let execution = service
        .start(ExecutionRequest::new("tick"))
        .await
        .expect("starts");
    let outcome = tokio::time::timeout(Duration::from_secs(10), execution.outcome())
        .await
        .expect("ends");
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert!(
        !store.lose_answer.load(std::sync::atomic::Ordering::SeqCst),
        "the fault fired"
    );
    let stored = store
        .inner
        .read(execution.id(), Cursor::START, 1000)
        .await
        .expect("read");
    assert_eq!(stored, suite::shown(&execution));
}
