//! The idempotency layer over the scripted adapter: replays return the original execution,
//! conflicts cost no provider work, concurrent identical requests make one execution, keys are
//! scoped by caller, records expire, and the failure rules hold.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::StreamExt;
use harness_core::adapter::InputFile;
use harness_core::capability::{CapabilityKey, Requirement, SupportLevel};
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::id::{ConversationId, Cursor, ExecutionId, IdempotencyKey};
use harness_core::service::{AdapterService, ExecutionHandle, ExecutionRequest, Outcome};
use harness_core::time::Timestamp;
use harness_core::trace::TraceContext;
use harness_layers::idempotency::{
    CallerId, CanonicalFingerprint, Equivalence, Fingerprint, Idempotency, IdempotencyLayer,
    IdempotencyStore, InMemoryIdempotencyStore, Reservation, ReservationId, ScopedKey,
    canonical_form,
};
use harness_layers::metrics::{MetricsLayer, names};
use harness_scripted::{Script, ScriptedAdapter, ScriptedOptions};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use proptest::prelude::*;
use rstest::rstest;
use serde_json::{Map, Value, json};
use tokio::sync::watch;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

// ---------------------------------------------------------------------------------------------
// A counting inner service
// ---------------------------------------------------------------------------------------------

/// What the test controls and observes of the inner service.
struct Probe {
    /// Calls that reached the inner service.
    calls: AtomicUsize,
    /// Calls still to refuse with a `capacity` error, before any execution exists.
    refuse: AtomicUsize,
    /// While `false`, calls wait before starting their execution.
    open: watch::Sender<bool>,
}

impl Probe {
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn open(&self) {
        self.open.send_replace(true);
    }
}

/// Wraps the adapter service: counts calls, can hold them at a gate, can refuse them.
#[derive(Clone)]
struct Counting {
    service: AdapterService<ScriptedAdapter>,
    probe: Arc<Probe>,
}

impl Service<ExecutionRequest> for Counting {
    type Response = ExecutionHandle;
    type Error = HarnessError;
    type Future = Pin<Box<dyn Future<Output = Result<ExecutionHandle, HarnessError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), HarnessError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ExecutionRequest) -> Self::Future {
        self.probe.calls.fetch_add(1, Ordering::SeqCst);
        let probe = Arc::clone(&self.probe);
        let service = self.service.clone();
        Box::pin(async move {
            let mut open = probe.open.subscribe();
            let _ = open.wait_for(|open| *open).await;
            let refuse = probe
                .refuse
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
            if refuse.is_ok() {
                return Err(HarnessError::new(ErrorCategory::Capacity, "no capacity"));
            }
            service.start(request).await
        })
    }
}

/// A script that completes at once.
fn short() -> Script {
    Script::builder().text("hello").complete("done").build()
}

fn counting(open: bool) -> (Counting, Arc<Probe>) {
    let probe = Arc::new(Probe {
        calls: AtomicUsize::new(0),
        refuse: AtomicUsize::new(0),
        open: watch::channel(open).0,
    });
    let service = Counting {
        service: AdapterService::new(ScriptedAdapter::new(short())),
        probe: Arc::clone(&probe),
    };
    (service, probe)
}

type Stack = Idempotency<Counting>;

/// An idempotency layer over a counting service, with its store and probe.
fn stack(store: &InMemoryIdempotencyStore, open: bool) -> (Stack, Arc<Probe>) {
    let (inner, probe) = counting(open);
    let service = ServiceBuilder::new()
        .layer(IdempotencyLayer::new(store.clone()))
        .service(inner);
    (service, probe)
}

fn key(s: &str) -> IdempotencyKey {
    s.parse().unwrap()
}

fn keyed(message: &str, k: &str) -> ExecutionRequest {
    ExecutionRequest::new(message).with_idempotency_key(key(k))
}

fn as_caller(mut request: ExecutionRequest, caller: &str) -> ExecutionRequest {
    request
        .extensions
        .insert(caller.parse::<CallerId>().unwrap());
    request
}

fn file(name: &str) -> InputFile {
    InputFile::inline(
        name,
        "text/plain".parse().unwrap(),
        name.as_bytes().to_vec(),
    )
}

fn trace(n: u8) -> TraceContext {
    format!("00-4bf92f3577b34da6a3ce929d0e0e47{n:02x}-00f067aa0ba902b7-01")
        .parse()
        .unwrap()
}

async fn seqs(handle: &ExecutionHandle, cursor: Cursor) -> Vec<u64> {
    handle
        .events(cursor)
        .map(|event| event.seq().get())
        .collect()
        .await
}

/// Lets every task run until it waits on something only the test can change. With a paused
/// clock, a sleep resolves only once the runtime has nothing else to do.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

fn assert_conflict(err: &HarnessError, k: &str) {
    assert_eq!(err.code(), &ErrorCode::IDEMPOTENCY_CONFLICT);
    assert_eq!(err.category(), ErrorCategory::Configuration);
    assert!(!err.retryable());
    assert!(
        err.message().contains(&format!("`{k}`")),
        "the message names the key: {}",
        err.message()
    );
    assert!(
        err.message().contains("different request"),
        "{}",
        err.message()
    );
}

// ---------------------------------------------------------------------------------------------
// Replays and conflicts
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_equivalent_request_returns_the_original_execution_replayable_from_any_cursor() {
    let store = InMemoryIdempotencyStore::new();
    let (service, probe) = stack(&store, true);
    let first = service
        .clone()
        .oneshot(keyed("hello", "k1").with_trace_context(trace(1)))
        .await
        .unwrap();
    first.outcome().await;

    // Another trace, a deadline and other extensions: still the same request.
    let mut again = keyed("hello", "k1")
        .with_trace_context(trace(2))
        .with_deadline(Timestamp::from_millis(4_102_444_800_000).unwrap());
    again.extensions.insert(7_u32);
    let replay = service.clone().oneshot(again).await.unwrap();

    assert_eq!(replay.id(), first.id());
    assert_eq!(probe.calls(), 1, "a replay does no provider work");
    let all = seqs(&replay, Cursor::START).await;
    assert_eq!(all, seqs(&first, Cursor::START).await);
    assert!(all.len() > 3, "{all:?}");
    assert_eq!(all, (1..=all.len() as u64).collect::<Vec<_>>());
    assert_eq!(
        seqs(&replay, Cursor::after_seq(3)).await,
        (4..=all.len() as u64).collect::<Vec<_>>()
    );
    assert_eq!(store.len(), 1);
}

#[tokio::test]
async fn a_replay_follows_the_live_tail_of_a_running_execution() {
    let store = InMemoryIdempotencyStore::new();
    let (inner, probe) = counting(true);
    let hang = Script::builder().text("working").hang().build();
    let request = || {
        keyed("long job", "live")
            .with_options(ScriptedOptions::with_script(hang.clone()).to_value())
    };
    let service = IdempotencyLayer::new(store.clone()).layer(inner);
    let first = service.clone().oneshot(request()).await.unwrap();
    let replay = service.oneshot(request()).await.unwrap();
    assert_eq!(replay.id(), first.id());
    assert_eq!(probe.calls(), 1);

    let tail = tokio::spawn({
        let replay = replay.clone();
        async move { seqs(&replay, Cursor::START).await }
    });
    first.cancel(Default::default());
    let seen = tail.await.unwrap();
    let last = replay.log().last().unwrap();
    assert_eq!(seen.last().copied(), Some(last.seq().get()));
    assert!(matches!(replay.outcome().await, Outcome::Cancelled(_)));
}

#[rstest]
#[case::message(|mut r: ExecutionRequest| { r.message = "goodbye".into(); r })]
#[case::options(|r: ExecutionRequest| r.with_options(json!({"script": null})))]
#[case::files(|mut r: ExecutionRequest| { r.files.push(file("a.txt")); r })]
#[case::client_context(|mut r: ExecutionRequest| { r.client_context.insert("tenant".into(), json!("acme")); r })]
#[case::conversation(|r: ExecutionRequest| r.with_conversation("conv-1".parse().unwrap()))]
#[case::capability(|r: ExecutionRequest| r.require(CapabilityKey::StreamText))]
#[tokio::test]
async fn a_different_request_under_a_used_key_is_refused_with_zero_provider_work(
    #[case] change: fn(ExecutionRequest) -> ExecutionRequest,
) {
    let store = InMemoryIdempotencyStore::new();
    let (service, probe) = stack(&store, true);
    let base = || keyed("hello", "order-42");
    let first = service.clone().oneshot(base()).await.unwrap();
    assert_eq!(probe.calls(), 1);

    let err = service.clone().oneshot(change(base())).await.unwrap_err();
    assert_conflict(&err, "order-42");
    for content in [
        "hello",
        "goodbye",
        "script",
        "a.txt",
        "acme",
        "conv-1",
        "stream.text",
    ] {
        assert!(
            !err.message().contains(content),
            "the message echoes no request content: {}",
            err.message()
        );
    }
    assert_eq!(probe.calls(), 1, "a conflict reaches no provider");

    // The record is untouched: the original request still replays.
    let replay = service.oneshot(base()).await.unwrap();
    assert_eq!(replay.id(), first.id());
    assert_eq!(probe.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_different_request_is_refused_at_once_while_the_first_is_in_flight() {
    let store = InMemoryIdempotencyStore::new();
    let (service, probe) = stack(&store, false);
    let first = tokio::spawn(service.clone().oneshot(keyed("hello", "k")));
    settle().await;
    assert_eq!(probe.calls(), 1);

    let err = service
        .clone()
        .oneshot(keyed("other", "k"))
        .await
        .unwrap_err();
    assert_conflict(&err, "k");
    assert_eq!(probe.calls(), 1);
    assert!(!first.is_finished());

    probe.open();
    first.await.unwrap().unwrap();
    assert_eq!(probe.calls(), 1);
}

#[tokio::test]
async fn requests_without_a_key_pass_straight_through() {
    let store = InMemoryIdempotencyStore::new();
    let (service, probe) = stack(&store, true);
    let a = service
        .clone()
        .oneshot(ExecutionRequest::new("hello"))
        .await
        .unwrap();
    let b = service
        .oneshot(ExecutionRequest::new("hello"))
        .await
        .unwrap();
    assert_ne!(a.id(), b.id());
    assert_eq!(probe.calls(), 2);
    assert!(store.is_empty());
}

#[tokio::test]
async fn a_closure_can_decide_equivalence() {
    let store = InMemoryIdempotencyStore::new();
    let (inner, probe) = counting(true);
    let by_message = |r: &ExecutionRequest| Fingerprint::of_bytes(r.message.as_bytes());
    let service = ServiceBuilder::new()
        .layer(IdempotencyLayer::new(store).with_equivalence(by_message))
        .service(inner);
    let first = service
        .clone()
        .oneshot(keyed("hello", "k").with_options(json!({"script": null})))
        .await
        .unwrap();
    let same = service.clone().oneshot(keyed("hello", "k")).await.unwrap();
    assert_eq!(same.id(), first.id());
    let err = service.oneshot(keyed("bye", "k")).await.unwrap_err();
    assert_conflict(&err, "k");
    assert_eq!(probe.calls(), 1);
}

// ---------------------------------------------------------------------------------------------
// Concurrency and cancellation
// ---------------------------------------------------------------------------------------------

/// 100 requests all waiting while the first one is held at the gate: one execution.
#[tokio::test(start_paused = true)]
async fn one_hundred_concurrent_identical_requests_create_one_execution() {
    let store = InMemoryIdempotencyStore::new();
    let (service, probe) = stack(&store, false);
    let tasks: Vec<_> = (0..100)
        .map(|_| tokio::spawn(service.clone().oneshot(keyed("hello", "same"))))
        .collect();
    settle().await;
    assert_eq!(probe.calls(), 1, "one request reached the provider");
    assert!(
        tasks.iter().all(|t| !t.is_finished()),
        "the others are waiting for it"
    );

    probe.open();
    let mut ids = BTreeSet::new();
    for task in tasks {
        ids.insert(task.await.unwrap().unwrap().id().clone());
    }
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(probe.calls(), 1);
    assert_eq!(store.len(), 1);
}

/// The same on several threads, racing for real: in even rounds the first call is held at
/// the gate for a moment so that the others surely arrive while it is in flight, in odd rounds
/// nothing is held. The outcome must not depend on the timing either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_hundred_requests_racing_on_threads_create_one_execution() {
    for round in 0..10 {
        let store = InMemoryIdempotencyStore::new();
        let held = round % 2 == 0;
        let (service, probe) = stack(&store, !held);
        let barrier = Arc::new(tokio::sync::Barrier::new(100));
        let tasks: Vec<_> = (0..100)
            .map(|_| {
                let service = service.clone();
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    barrier.wait().await;
                    service.oneshot(keyed("hello", "same")).await
                })
            })
            .collect();
        if held {
            tokio::time::sleep(Duration::from_millis(10)).await;
            probe.open();
        }
        let mut ids = BTreeSet::<ExecutionId>::new();
        for task in tasks {
            ids.insert(task.await.unwrap().unwrap().id().clone());
        }
        assert_eq!(ids.len(), 1, "round {round}: {ids:?}");
        assert_eq!(probe.calls(), 1, "round {round}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_dropped_first_caller_releases_its_reservation_to_a_waiter() {
    let store = InMemoryIdempotencyStore::new();
    let (service, probe) = stack(&store, false);
    let first = tokio::spawn(service.clone().oneshot(keyed("hello", "k")));
    settle().await;
    let second = tokio::spawn(service.clone().oneshot(keyed("hello", "k")));
    settle().await;
    assert_eq!(probe.calls(), 1, "the second waits for the first");

    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    settle().await;
    assert_eq!(probe.calls(), 2, "the waiter took the key over");

    probe.open();
    let execution = second.await.unwrap().unwrap();
    let replay = service.oneshot(keyed("hello", "k")).await.unwrap();
    assert_eq!(replay.id(), execution.id());
    assert_eq!(probe.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_caller_without_waiters_leaves_the_key_free() {
    let store = InMemoryIdempotencyStore::new();
    let (service, probe) = stack(&store, false);
    let mut future = Box::pin(service.clone().oneshot(keyed("hello", "k")));
    assert!((&mut future).now_or_never().is_none());
    assert_eq!((probe.calls(), store.len()), (1, 1));
    drop(future);
    assert!(store.is_empty(), "the drop guard released the key");

    probe.open();
    // Even a different request may use the key now: nothing was recorded.
    service.oneshot(keyed("other", "k")).await.unwrap();
    assert_eq!(probe.calls(), 2);
}

// ---------------------------------------------------------------------------------------------
// Callers
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn callers_with_the_same_key_are_independent() {
    let store = InMemoryIdempotencyStore::new();
    let (service, probe) = stack(&store, true);
    let alice = service
        .clone()
        .oneshot(as_caller(keyed("hello", "k"), "alice"))
        .await
        .unwrap();
    // Same key, another caller, another request: no conflict, a new execution.
    let bob = service
        .clone()
        .oneshot(as_caller(keyed("something else", "k"), "bob"))
        .await
        .unwrap();
    // Same key and request, another caller (the anonymous scope): a new execution too.
    let anonymous = service.clone().oneshot(keyed("hello", "k")).await.unwrap();
    assert_eq!(probe.calls(), 3);
    let ids: BTreeSet<_> = [alice.id(), bob.id(), anonymous.id()].into_iter().collect();
    assert_eq!(ids.len(), 3);

    // Each caller still gets its own.
    let again = service
        .clone()
        .oneshot(as_caller(keyed("hello", "k"), "alice"))
        .await
        .unwrap();
    assert_eq!(again.id(), alice.id());
    let explicit = service
        .clone()
        .oneshot(as_caller(keyed("hello", "k"), "anonymous"))
        .await
        .unwrap();
    assert_eq!(explicit.id(), anonymous.id(), "no caller is `anonymous`");
    let err = service
        .oneshot(as_caller(keyed("hello", "k"), "bob"))
        .await
        .unwrap_err();
    assert_conflict(&err, "k");
    assert_eq!(probe.calls(), 3);
}

#[rstest]
#[case("billing-service", true)]
#[case("tenant:42/user", false)]
#[case("a.b_c:d-e", true)]
#[case("", false)]
#[case("two words", false)]
fn caller_ids_are_validated(#[case] input: &str, #[case] valid: bool) {
    let parsed = input.parse::<CallerId>();
    assert_eq!(parsed.is_ok(), valid, "{input:?}");
    if let Err(err) = parsed {
        assert!(err.to_string().contains("caller id"), "{err}");
    }
    assert!("x".repeat(128).parse::<CallerId>().is_ok());
    assert!("x".repeat(129).parse::<CallerId>().is_err());
    assert_eq!(CallerId::ANONYMOUS.as_str(), "anonymous");
}

// ---------------------------------------------------------------------------------------------
// Retention
// ---------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn records_expire_after_the_retention() {
    let store = InMemoryIdempotencyStore::with_retention(Duration::from_secs(60));
    let (service, probe) = stack(&store, true);
    let first = service.clone().oneshot(keyed("hello", "k")).await.unwrap();
    first.outcome().await;

    tokio::time::advance(Duration::from_secs(59)).await;
    let replay = service.clone().oneshot(keyed("hello", "k")).await.unwrap();
    assert_eq!(replay.id(), first.id());
    let err = service
        .clone()
        .oneshot(keyed("other", "k"))
        .await
        .unwrap_err();
    assert_conflict(&err, "k");

    tokio::time::advance(Duration::from_secs(2)).await;
    // Expired: the key is free, even for another request.
    let fresh = service.clone().oneshot(keyed("other", "k")).await.unwrap();
    assert_ne!(fresh.id(), first.id());
    assert_eq!(probe.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn purge_expired_removes_only_expired_records() {
    let store = InMemoryIdempotencyStore::with_retention(Duration::from_secs(60));
    let (service, _probe) = stack(&store, true);
    for k in ["a", "b", "c"] {
        service.clone().oneshot(keyed("hello", k)).await.unwrap();
    }
    tokio::time::advance(Duration::from_secs(30)).await;
    service.clone().oneshot(keyed("hello", "d")).await.unwrap();
    assert_eq!(store.purge_expired().await.unwrap(), 0);

    tokio::time::advance(Duration::from_secs(31)).await;
    assert_eq!(store.len(), 4);
    assert_eq!(store.purge_expired().await.unwrap(), 3);
    assert_eq!(store.len(), 1);

    tokio::time::advance(Duration::from_secs(30)).await;
    assert_eq!(store.purge_expired().await.unwrap(), 1);
    assert!(store.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Failure rules
// ---------------------------------------------------------------------------------------------

/// (a) Refused before an execution existed: no record, so a corrected retry with the same key
/// proceeds (and so does the same request, which the provider sees again).
#[rstest]
#[case::capacity_refusal(true)]
#[case::unsupported_capability(false)]
#[tokio::test]
async fn a_request_refused_before_an_execution_existed_keeps_no_record(#[case] capacity: bool) {
    let store = InMemoryIdempotencyStore::new();
    let (service, probe) = stack(&store, true);
    let refused = if capacity {
        probe.refuse.store(2, Ordering::SeqCst);
        keyed("hello", "k")
    } else {
        keyed("hello", "k").require(CapabilityKey::Skills)
    };
    let expected = if capacity {
        ErrorCategory::Capacity
    } else {
        ErrorCategory::Configuration
    };

    let err = service.clone().oneshot(refused.clone()).await.unwrap_err();
    assert_eq!(err.category(), expected);
    assert!(store.is_empty(), "no record, no reservation");
    // The same request again is not a replay of the refusal: it reaches the provider again.
    let err = service.clone().oneshot(refused).await.unwrap_err();
    assert_eq!(err.category(), expected);
    assert_eq!(probe.calls(), 2);

    // A corrected request with the same key proceeds, and is recorded.
    let execution = service.clone().oneshot(keyed("hello", "k")).await.unwrap();
    assert_eq!(probe.calls(), 3);
    let replay = service.oneshot(keyed("hello", "k")).await.unwrap();
    assert_eq!(replay.id(), execution.id());
    assert_eq!(probe.calls(), 3);
}

/// (b) Started, then failed: the record stands; the key returns the failed execution.
#[tokio::test]
async fn a_failed_execution_keeps_its_record() {
    let store = InMemoryIdempotencyStore::new();
    let (service, probe) = stack(&store, true);
    let failing = Script::builder()
        .error(ErrorCategory::Unavailable, "the provider is down")
        .build();
    let request = || {
        keyed("hello", "k").with_options(ScriptedOptions::with_script(failing.clone()).to_value())
    };

    let first = service.clone().oneshot(request()).await.unwrap();
    let Outcome::Failed(error) = first.outcome().await else {
        panic!("the script fails its run");
    };
    assert_eq!(error.category(), ErrorCategory::Unavailable);

    let again = service.clone().oneshot(request()).await.unwrap();
    assert_eq!(again.id(), first.id(), "the original, failed execution");
    assert!(matches!(again.outcome().await, Outcome::Failed(_)));
    assert_eq!(probe.calls(), 1);

    // Trying something else needs a new key.
    let err = service
        .clone()
        .oneshot(keyed("hello", "k"))
        .await
        .unwrap_err();
    assert_conflict(&err, "k");
    service.oneshot(keyed("hello", "k2")).await.unwrap();
    assert_eq!(probe.calls(), 2);
}

// ---------------------------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------------------------

#[test]
fn replays_and_conflicts_are_counted_and_a_replay_is_not_a_new_start() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let store = InMemoryIdempotencyStore::new();
                let service = ServiceBuilder::new()
                    .layer(MetricsLayer::new())
                    .layer(IdempotencyLayer::new(store))
                    .service(AdapterService::new(ScriptedAdapter::new(short())));
                let first = service.clone().oneshot(keyed("hello", "k")).await.unwrap();
                let replay = service.clone().oneshot(keyed("hello", "k")).await.unwrap();
                assert_eq!(replay.id(), first.id());
                service.oneshot(keyed("other", "k")).await.unwrap_err();
                first.outcome().await;
            });
    });
    // One snapshot: taking one resets the debugging recorder's counters.
    let snapshot = snapshotter.snapshot().into_vec();
    let counter = |name: &str| {
        snapshot
            .iter()
            .filter(|(key, ..)| key.key().name() == name)
            .map(|(key, _, _, value)| {
                let value = match value {
                    DebugValue::Counter(n) => *n,
                    other => panic!("{name} is a counter, not {other:?}"),
                };
                let adapter = key
                    .key()
                    .labels()
                    .find(|l| l.key() == names::LABEL_ADAPTER)
                    .map(|l| l.value().to_owned());
                (adapter, value)
            })
            .collect::<Vec<_>>()
    };
    let scripted = Some("scripted".to_owned());
    assert_eq!(counter(names::IDEMPOTENT_REPLAYS), [(scripted.clone(), 1)]);
    assert_eq!(
        counter(names::IDEMPOTENCY_CONFLICTS),
        [(scripted.clone(), 1)]
    );
    assert_eq!(counter(names::EXECUTIONS_STARTED), [(scripted, 1)]);
}

// ---------------------------------------------------------------------------------------------
// Shape
// ---------------------------------------------------------------------------------------------

#[test]
fn the_store_and_the_equivalence_policy_are_object_safe() {
    let store: Arc<dyn IdempotencyStore> = Arc::new(InMemoryIdempotencyStore::new());
    let policies: Vec<Box<dyn Equivalence + Send + Sync>> = vec![
        Box::new(CanonicalFingerprint),
        Box::new(|r: &ExecutionRequest| Fingerprint::of_bytes(r.message.as_bytes())),
    ];
    let request = ExecutionRequest::new("hi");
    assert_eq!(policies[0].fingerprint(&request), Fingerprint::of(&request));
    // A boxed policy plugs in through a closure.
    let boxed = policies.into_iter().nth(1).unwrap();
    let shared: Arc<dyn Equivalence + Send + Sync> = Arc::from(boxed);
    let layer = IdempotencyLayer::from_shared(Arc::clone(&store))
        .with_equivalence(move |r: &ExecutionRequest| shared.fingerprint(r));
    let _service = layer.layer(AdapterService::new(ScriptedAdapter::quickstart()));
    assert!(format!("{store:?}").contains("InMemoryIdempotencyStore"));
}

#[tokio::test]
async fn the_store_contract_reserve_wait_complete_release() {
    let store = InMemoryIdempotencyStore::new();
    let dyn_store: &dyn IdempotencyStore = &store;
    let k = ScopedKey::new(CallerId::ANONYMOUS, key("k"));
    let fp = Fingerprint::from_u128(1);
    let Reservation::Reserved(id) = dyn_store.reserve(k.clone(), fp).await.unwrap() else {
        panic!("a free key is reserved");
    };
    let Reservation::InFlight(wait) = dyn_store.reserve(k.clone(), fp).await.unwrap() else {
        panic!("an equivalent request waits");
    };
    assert!(matches!(
        dyn_store
            .reserve(k.clone(), Fingerprint::from_u128(2))
            .await
            .unwrap(),
        Reservation::Conflict { adapter: None }
    ));
    // A stale id releases nothing.
    dyn_store.release(&k, ReservationId::new(id.get() + 1));
    assert_eq!(store.len(), 1);
    dyn_store.release(&k, id);
    wait.await;
    assert!(store.is_empty());
    // Completing a released reservation is an error.
    let execution = AdapterService::new(ScriptedAdapter::quickstart())
        .start(ExecutionRequest::new("x"))
        .await
        .unwrap();
    assert!(dyn_store.complete(k, id, execution).await.is_err());
}

#[test]
fn the_service_the_layer_and_the_future_are_send_and_sync() {
    fn assert_send<T: Send>() {}
    fn assert_sync<T: Sync>() {}
    type Service = Idempotency<AdapterService<ScriptedAdapter>>;
    assert_send::<Service>();
    assert_sync::<Service>();
    assert_send::<<Service as tower::Service<ExecutionRequest>>::Future>();
    assert_send::<IdempotencyLayer>();
    assert_sync::<IdempotencyLayer>();
    assert_send::<InMemoryIdempotencyStore>();
    assert_sync::<InMemoryIdempotencyStore>();
    assert_send::<Reservation>();
}

#[test]
fn the_service_gives_access_to_its_inner_service() {
    let store: Arc<dyn IdempotencyStore> = Arc::new(InMemoryIdempotencyStore::new());
    let mut service = Idempotency::new(AdapterService::new(ScriptedAdapter::quickstart()), store);
    let _: &AdapterService<ScriptedAdapter> = service.get_ref();
    let _: &mut AdapterService<ScriptedAdapter> = service.get_mut();
    assert!(format!("{service:?}").starts_with("Idempotency"));
    let _: AdapterService<ScriptedAdapter> = service.into_inner();
}

// ---------------------------------------------------------------------------------------------
// The fingerprint
// ---------------------------------------------------------------------------------------------

#[test]
fn the_hash_is_fnv1a_128() {
    // Reference vectors of the FNV-1a 128 specification.
    assert_eq!(
        Fingerprint::of_bytes(b"").to_string(),
        "6c62272e07bb014262b821756295c58d"
    );
    assert_eq!(
        Fingerprint::of_bytes(b"a").to_string(),
        "d228cb696f1a8caf78912b704e4a8964"
    );
    // Stable across processes and versions: this request's fingerprint is pinned.
    let request = ExecutionRequest::new("hello").require(CapabilityKey::StreamText);
    assert_eq!(
        Fingerprint::of(&request),
        Fingerprint::of_bytes(canonical_form(&request).as_bytes())
    );
    assert_eq!(
        canonical_form(&request),
        r#"{"clientContext":{},"conversationId":null,"files":[],"fingerprintVersion":1,"message":"hello","options":null,"requiredCapabilities":[{"capability":"stream.text","minimum":"degraded"}]}"#
    );
}

#[test]
fn strings_are_escaped_canonically() {
    let request = ExecutionRequest::new("a\"b\\c\nd\u{1}é");
    assert!(
        canonical_form(&request).contains(r#""message":"a\"b\\c\nd\u0001é""#),
        "{}",
        canonical_form(&request)
    );
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        // Quarters: exact in binary and in short decimal, so the text round trip is exact.
        (-4000..4000_i32).prop_map(|n| Value::from(f64::from(n) / 4.0)),
        "[a-z\"\\\\ é\n]{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z_]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Writes `value` as JSON text, with the members of every object reversed when `reverse`.
fn write_with_order(value: &Value, reverse: bool) -> String {
    match value {
        Value::Object(map) => {
            let mut members: Vec<_> = map.iter().collect();
            if reverse {
                members.reverse();
            }
            let inner: Vec<String> = members
                .into_iter()
                .map(|(k, v)| {
                    format!(
                        "{}:{}",
                        Value::from(k.clone()),
                        write_with_order(v, reverse)
                    )
                })
                .collect();
            format!("{{ {} }}", inner.join(" , "))
        }
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(|v| write_with_order(v, reverse)).collect();
            format!("[{}]", inner.join(", "))
        }
        other => other.to_string(),
    }
}

fn requirement() -> impl Strategy<Value = Requirement> {
    (
        0..CapabilityKey::ALL.len(),
        prop_oneof![
            Just(SupportLevel::Native),
            Just(SupportLevel::Emulated),
            Just(SupportLevel::Degraded)
        ],
    )
        .prop_map(|(i, level)| Requirement::at_least(CapabilityKey::ALL[i], level).unwrap())
}

prop_compose! {
    fn request()(
        message in ".{0,12}",
        options in json_value(),
        context in prop::collection::btree_map("[a-z]{1,5}", json_value(), 0..4),
        files in prop::collection::vec("[a-z]{1,6}", 0..3),
        conversation in prop::option::of("[a-z0-9]{1,8}"),
        requirements in prop::collection::vec(requirement(), 0..5),
    ) -> ExecutionRequest {
        let mut request = ExecutionRequest::new(message).with_options(options);
        request.client_context = context.into_iter().collect::<Map<_, _>>();
        request.files = files.iter().map(|f| file(f)).collect();
        request.conversation_id = conversation.map(|c| c.parse::<ConversationId>().unwrap());
        request.required_capabilities = requirements;
        request
    }
}

proptest! {
    #[test]
    fn the_fingerprint_ignores_member_order_and_capability_order(
        request in request(),
        shuffle_seed in any::<u64>(),
    ) {
        // The same request as the wire would carry it, with every object's members reversed.
        let mut wire = serde_json::to_value(&request).unwrap();
        wire.as_object_mut().unwrap().remove("requiredCapabilities");
        let mut reordered: ExecutionRequest =
            serde_json::from_str(&write_with_order(&wire, true)).unwrap();
        // Capabilities rotated, and one repeated: a set.
        let mut caps = request.required_capabilities.clone();
        if !caps.is_empty() {
            let n = caps.len();
            caps.rotate_left((shuffle_seed as usize) % n);
            caps.push(caps[(shuffle_seed as usize / 7) % n]);
        }
        reordered.required_capabilities = caps;
        prop_assert_eq!(canonical_form(&reordered), canonical_form(&request));
        prop_assert_eq!(Fingerprint::of(&reordered), Fingerprint::of(&request));
    }

    #[test]
    fn the_fingerprint_ignores_the_fields_left_out(request in request(), n in any::<u8>()) {
        let mut other = request.clone()
            .with_idempotency_key(key(&format!("key-{n}")))
            .with_trace_context(trace(n))
            .with_deadline(Timestamp::from_millis(i64::from(n) * 1000).unwrap());
        other.extensions.insert(n);
        other.extensions.insert(format!("caller-{n}").parse::<CallerId>().unwrap());
        prop_assert_eq!(Fingerprint::of(&other), Fingerprint::of(&request));
    }

    #[test]
    fn the_fingerprint_changes_with_every_field_it_covers(request in request(), which in 0..7_u8) {
        let mut other = request.clone();
        match which {
            0 => other.message.push('x'),
            1 => other.options = json!({"wrapped": other.options.take()}),
            2 => {
                let fresh = (0..).map(|i| format!("k{i}"))
                    .find(|k| !other.client_context.contains_key(k)).unwrap();
                other.client_context.insert(fresh, Value::Null);
            }
            3 => other.files.push(file("new")),
            4 => other.files.insert(0, file("first")),
            5 => {
                let next = match &other.conversation_id {
                    Some(c) => format!("{c}x"),
                    None => "conv".to_owned(),
                };
                other.conversation_id = Some(next.parse().unwrap());
            }
            _ => {
                let absent = CapabilityKey::ALL.iter()
                    .find(|k| !other.required_capabilities.iter().any(|r| r.capability() == **k))
                    .unwrap();
                other.required_capabilities.push(Requirement::new(*absent));
            }
        }
        prop_assert_ne!(Fingerprint::of(&other), Fingerprint::of(&request));
    }
}

/// A keyed execution awaiting an action is abandoned when its callers let go, as any other:
/// the store's record does not keep it answerable (256 such executions used to hold every
/// capacity permit for a day).
#[tokio::test]
async fn a_keyed_execution_whose_callers_let_go_is_abandoned() {
    use harness_core::event::CancelSource;
    let adapter = ScriptedAdapter::new(
        Script::builder()
            .approval([harness_scripted::ApprovalCall::new(
                "call_1".parse().unwrap(),
                "shell",
                serde_json::json!({}),
            )])
            .complete("done")
            .build(),
    );
    let service = ServiceBuilder::new()
        .layer(IdempotencyLayer::default())
        .service(AdapterService::new(adapter));
    let request = || ExecutionRequest::new("go").with_idempotency_key("k-1".parse().unwrap());
    let handle = service.clone().oneshot(request()).await.unwrap();
    let log = handle.log().clone();
    drop(handle);
    let terminal = tokio::time::timeout(Duration::from_secs(10), log.terminal())
        .await
        .expect("the execution was abandoned, not kept by the store");
    let harness_core::event::EventPayload::RunCancelled(reason) = terminal.payload() else {
        panic!("expected run.cancelled, got {:?}", terminal.kind());
    };
    assert_eq!(reason.source, CancelSource::Abandoned);
    // A replay still finds the original execution, ended.
    let replay = service.oneshot(request()).await.unwrap();
    assert!(replay.is_replay());
    assert!(replay.state().is_terminal());
}

/// The store holds at most its limit of keys: the oldest ended record makes room, and with
/// none ended a new key is refused with IDEMPOTENCY_STORE_FULL.
#[tokio::test]
async fn the_store_is_bounded_and_evicts_the_oldest_ended_record() {
    use harness_layers::idempotency::InMemoryIdempotencyStore;
    let store = InMemoryIdempotencyStore::with_limits(std::time::Duration::from_secs(3600), 2);
    let keyed = |key: &str| ExecutionRequest::new("go").with_idempotency_key(key.parse().unwrap());
    let hang = ScriptedAdapter::new(Script::builder().hang().build());
    let service = ServiceBuilder::new()
        .layer(IdempotencyLayer::new(store.clone()))
        .service(AdapterService::new(hang));
    let a = service.clone().oneshot(keyed("a")).await.unwrap();
    let b = service.clone().oneshot(keyed("b")).await.unwrap();
    let err = service.clone().oneshot(keyed("c")).await.unwrap_err();
    assert_eq!(err.code(), &ErrorCode::IDEMPOTENCY_STORE_FULL);
    assert!(err.retryable());
    a.cancel(harness_core::event::CancelReason::new("done"));
    a.outcome().await;
    let c = service.clone().oneshot(keyed("c")).await.unwrap();
    assert_eq!(store.len(), 2);
    // "a" was evicted: its key starts a new execution; "b" still replays.
    let again = service.clone().oneshot(keyed("b")).await.unwrap();
    assert_eq!(again.id(), b.id());
    drop((b, c));
}
