//! Proves the event log's contract.
//!
//! - Appends are numbered contiguously from 1 and readers see exactly what was appended
//!   (the same shared `Arc<Event>`s, never copies).
//! - Every `AppendError` (`Closed` with its `terminal_seq`, `DuplicateArtifact`,
//!   `ForeignArtifact`) is raised when it should be, and a refused append leaves the log
//!   unchanged; a proptest checks the log against a `Vec` model over random appends.
//! - `snapshot` and `subscribe` at any cursor, including past the end, return exactly the
//!   suffix after it; a subscription then follows the live tail and ends after the terminal
//!   event.
//! - Under concurrency (multi-thread runtime, one writer, 64 readers at seeded cursors, one
//!   deliberately slow reader), every reader sees exactly its suffix, in order, without gap or
//!   duplicate, and the writer is never blocked by a reader.
//! - `terminal()` resolves with the terminal event for waiters registered before and after it;
//!   dropping a stream or a terminal future releases its waker and does not disturb others.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use futures_util::{FutureExt, Stream as _, StreamExt};
use harness_core::artifact::ArtifactDescriptor;
use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::event::{CancelReason, Event, EventPayload, RunFailed, RunSucceeded, TextDelta};
use harness_core::id::{Cursor, ExecutionId, Sequence};
use harness_core::log::{AppendError, EventLog, EventStream, LogReader};
use proptest::prelude::*;
use rstest::rstest;
use tokio::sync::oneshot;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn text(i: u64) -> EventPayload {
    EventPayload::MessageDelta(TextDelta::new(format!("t{i}")))
}

fn artifact(owner: &ExecutionId, id: &str) -> EventPayload {
    EventPayload::ArtifactCreated(Box::new(
        ArtifactDescriptor::builder(
            id.parse().expect("valid artifact id"),
            owner.clone(),
            "text/plain",
        )
        .build()
        .expect("valid descriptor"),
    ))
}

fn terminal(k: u8) -> EventPayload {
    match k % 3 {
        0 => EventPayload::RunSucceeded(RunSucceeded::default()),
        1 => EventPayload::RunFailed(Box::new(RunFailed {
            error: HarnessError::new(ErrorCategory::Internal, "boom").public(),
        })),
        _ => EventPayload::RunCancelled(CancelReason::new("stop")),
    }
}

fn seq(n: u64) -> Sequence {
    Sequence::new(n).expect("non-zero")
}

fn seqs(events: &[Arc<Event>]) -> Vec<u64> {
    events.iter().map(|e| e.seq().get()).collect()
}

fn assert_same_events(a: &[Arc<Event>], b: &[Arc<Event>]) {
    assert_eq!(seqs(a), seqs(b));
    for (x, y) in a.iter().zip(b) {
        assert!(
            Arc::ptr_eq(x, y),
            "event #{} is not the stored one",
            x.seq()
        );
    }
}

/// Asserts the log holds exactly `before`, with `last` its last event.
fn assert_unchanged(log: &EventLog, before: &[Arc<Event>]) {
    let reader = log.reader();
    assert_eq!(log.len(), before.len());
    assert_eq!(reader.len(), before.len());
    assert_same_events(&reader.snapshot(Cursor::START), before);
    match (reader.last(), before.last()) {
        (Some(a), Some(b)) => assert!(Arc::ptr_eq(&a, b)),
        (None, None) => {}
        (a, b) => panic!("last event changed: {a:?} vs {b:?}"),
    }
}

/// The items `stream` has ready now, and whether it has ended.
fn drain(stream: &mut EventStream) -> (Vec<Arc<Event>>, bool) {
    let mut items = Vec::new();
    loop {
        match stream.next().now_or_never() {
            Some(Some(e)) => items.push(e),
            Some(None) => return (items, true),
            None => return (items, false),
        }
    }
}

/// A waker that counts its wakes; `Arc::strong_count` of it counts the clones alive.
#[derive(Default)]
struct CountingWaker {
    wakes: AtomicUsize,
}

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting_waker() -> (Arc<CountingWaker>, Waker) {
    let counter = Arc::new(CountingWaker::default());
    let waker = Waker::from(Arc::clone(&counter));
    (counter, waker)
}

// ---------------------------------------------------------------------------------------------
// Basics and errors
// ---------------------------------------------------------------------------------------------

#[test]
fn appends_are_numbered_from_one_and_shared_with_readers() {
    let id = ExecutionId::generate();
    let log = EventLog::new(id.clone());
    let reader = log.reader();
    assert!(log.is_empty() && reader.is_empty());
    assert_eq!((log.len(), reader.len()), (0, 0));
    assert!(reader.last().is_none());
    assert!(!log.is_closed() && !reader.is_closed());
    assert!(reader.snapshot(Cursor::START).is_empty());
    assert_eq!(log.execution_id(), &id);
    assert_eq!(reader.execution_id(), &id);

    let payloads = [
        EventPayload::RunQueued,
        EventPayload::RunStarting,
        text(1),
        text(2),
    ];
    let mut appended = Vec::new();
    for (i, p) in payloads.iter().enumerate() {
        let e = log.append(p.clone()).expect("open log");
        assert_eq!(e.seq().get(), i as u64 + 1);
        assert_eq!(e.execution_id(), &id);
        assert_eq!(e.payload(), p);
        assert_eq!(log.len(), i + 1);
        assert!(Arc::ptr_eq(&reader.last().expect("an event"), &e));
        appended.push(e);
    }
    assert!(!log.is_empty() && !reader.is_empty());
    assert!(!log.is_closed());

    // Readers, and clones of readers, see the very events appended.
    assert_same_events(&reader.snapshot(Cursor::START), &appended);
    let cloned = reader.clone();
    assert_same_events(&cloned.snapshot(Cursor::START), &appended);
    assert_eq!(cloned.len(), reader.len());
    assert_same_events(&log.reader().snapshot(Cursor::after_seq(1)), &appended[1..]);
    assert_same_events(&reader.snapshot(Cursor::from(seq(3))), &appended[3..]);
    assert!(reader.snapshot(Cursor::after_seq(4)).is_empty());
    assert!(reader.snapshot(Cursor::after_seq(1_000)).is_empty());
    assert!(reader.snapshot(Cursor::after_seq(u64::MAX)).is_empty());
}

#[rstest]
fn nothing_may_follow_the_terminal_event(
    #[values(0, 1, 2)] kind: u8,
    #[values(0, 1, 2, 3)] next: u8,
) {
    let id = ExecutionId::generate();
    let log = EventLog::new(id.clone());
    log.append(EventPayload::RunQueued).expect("open");
    log.append(text(1)).expect("open");
    let end = log.append(terminal(kind)).expect("open");
    assert_eq!(end.seq(), seq(3));
    assert!(log.is_closed() && log.reader().is_closed());
    let before = log.reader().snapshot(Cursor::START);

    let refused = match next {
        0 => text(2),
        1 => EventPayload::RunRunning,
        2 => terminal(kind + 1),
        _ => artifact(&id, "art_new"),
    };
    for _ in 0..2 {
        assert_eq!(
            log.append(refused.clone()),
            Err(AppendError::Closed {
                execution_id: id.clone(),
                terminal_seq: seq(3),
            })
        );
        assert_unchanged(&log, &before);
        assert!(log.is_closed());
    }
}

#[test]
fn a_terminal_first_event_closes_the_log_at_seq_one() {
    let id = ExecutionId::generate();
    let log = EventLog::new(id.clone());
    log.append(terminal(2)).expect("open");
    assert_eq!(
        log.append(EventPayload::RunQueued),
        Err(AppendError::Closed {
            execution_id: id,
            terminal_seq: Sequence::FIRST,
        })
    );
    assert_eq!(log.len(), 1);
}

#[test]
fn a_duplicate_artifact_is_refused_and_changes_nothing() {
    let id = ExecutionId::generate();
    let log = EventLog::new(id.clone());
    log.append(EventPayload::RunQueued).expect("open");
    log.append(artifact(&id, "art_1")).expect("fresh id");
    log.append(text(1)).expect("open");
    let before = log.reader().snapshot(Cursor::START);

    let again = EventPayload::ArtifactCreated(Box::new(
        ArtifactDescriptor::builder("art_1".parse().expect("valid"), id.clone(), "image/png")
            .name("other")
            .build()
            .expect("valid"),
    ));
    assert_eq!(
        log.append(again),
        Err(AppendError::DuplicateArtifact {
            execution_id: id.clone(),
            artifact_id: "art_1".parse().expect("valid"),
        })
    );
    assert_unchanged(&log, &before);
    // Another id is still accepted, and numbered right after the last accepted event.
    let e = log.append(artifact(&id, "art_2")).expect("fresh id");
    assert_eq!(e.seq(), seq(4));
}

#[test]
fn a_foreign_artifact_is_refused_changes_nothing_and_reserves_no_id() {
    let id = ExecutionId::generate();
    let other = ExecutionId::generate();
    let log = EventLog::new(id.clone());
    log.append(EventPayload::RunQueued).expect("open");
    let before = log.reader().snapshot(Cursor::START);

    assert_eq!(
        log.append(artifact(&other, "art_1")),
        Err(AppendError::ForeignArtifact {
            execution_id: id.clone(),
            artifact_id: "art_1".parse().expect("valid"),
            owner: other,
        })
    );
    assert_unchanged(&log, &before);
    let e = log
        .append(artifact(&id, "art_1"))
        .expect("the refused descriptor did not take the id");
    assert_eq!(e.seq(), seq(2));
}

#[test]
fn append_errors_name_what_went_wrong() {
    let id: ExecutionId = "exec_a".parse().expect("valid");
    let other: ExecutionId = "exec_b".parse().expect("valid");
    let closed = AppendError::Closed {
        execution_id: id.clone(),
        terminal_seq: seq(7),
    }
    .to_string();
    assert!(
        closed.contains("exec_a") && closed.contains('7'),
        "{closed}"
    );
    let foreign = AppendError::ForeignArtifact {
        execution_id: id,
        artifact_id: "art_x".parse().expect("valid"),
        owner: other,
    }
    .to_string();
    assert!(
        foreign.contains("exec_a") && foreign.contains("exec_b") && foreign.contains("art_x"),
        "{foreign}"
    );
}

// ---------------------------------------------------------------------------------------------
// The log against a model
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum LogOp {
    Content(u8),
    Lifecycle,
    Artifact { id: u8, foreign: bool },
    Terminal(u8),
}

fn log_op() -> impl Strategy<Value = LogOp> {
    prop_oneof![
        6 => any::<u8>().prop_map(LogOp::Content),
        1 => Just(LogOp::Lifecycle),
        4 => (0u8..5, prop::bool::weighted(0.2))
            .prop_map(|(id, foreign)| LogOp::Artifact { id, foreign }),
        1 => (0u8..3).prop_map(LogOp::Terminal),
    ]
}

proptest! {
    #[test]
    fn the_log_equals_a_vec_model(ops in prop::collection::vec(log_op(), 0..80)) {
        let id = ExecutionId::generate();
        let other = ExecutionId::generate();
        let log = EventLog::new(id.clone());
        let reader = log.reader();

        let mut model: Vec<EventPayload> = Vec::new();
        let mut closed = false;
        let mut artifacts: BTreeSet<u8> = BTreeSet::new();
        let mut accepted: Vec<Arc<Event>> = Vec::new();

        for op in &ops {
            let payload = match op {
                LogOp::Content(n) => text(u64::from(*n)),
                LogOp::Lifecycle => EventPayload::RunRunning,
                LogOp::Artifact { id: n, foreign } => {
                    artifact(if *foreign { &other } else { &id }, &format!("art_{n}"))
                }
                LogOp::Terminal(k) => terminal(*k),
            };
            let result = log.append(payload.clone());
            let artifact_id = format!("art_{}", match op { LogOp::Artifact { id: n, .. } => *n, _ => 0 });
            match (op, result) {
                (_, Err(AppendError::Closed { execution_id, terminal_seq })) => {
                    prop_assert!(closed, "refused as closed before the terminal event");
                    prop_assert_eq!(&execution_id, &id);
                    prop_assert_eq!(terminal_seq.get(), model.len() as u64);
                }
                (LogOp::Artifact { foreign: true, .. }, Err(AppendError::ForeignArtifact { execution_id, artifact_id: a, owner })) => {
                    prop_assert!(!closed);
                    prop_assert_eq!(&execution_id, &id);
                    prop_assert_eq!(&owner, &other);
                    prop_assert_eq!(a.as_str(), artifact_id.as_str());
                }
                // A foreign descriptor reusing a created id may be refused either way.
                (LogOp::Artifact { id: n, .. }, Err(AppendError::DuplicateArtifact { execution_id, artifact_id: a })) => {
                    prop_assert!(!closed);
                    prop_assert!(artifacts.contains(n), "fresh artifact {} refused as duplicate", n);
                    prop_assert_eq!(&execution_id, &id);
                    prop_assert_eq!(a.as_str(), artifact_id.as_str());
                }
                (op, Ok(event)) => {
                    prop_assert!(!closed, "accepted {:?} after the terminal event", op);
                    if let LogOp::Artifact { id: n, foreign } = op {
                        prop_assert!(!*foreign, "accepted a foreign artifact");
                        prop_assert!(artifacts.insert(*n), "accepted duplicate artifact {}", n);
                    }
                    model.push(payload);
                    prop_assert_eq!(event.seq().get(), model.len() as u64);
                    prop_assert_eq!(event.execution_id(), &id);
                    closed = matches!(op, LogOp::Terminal(_));
                    accepted.push(event);
                }
                (op, Err(err)) => {
                    return Err(TestCaseError::fail(format!("{op:?} refused with {err:?}")));
                }
            }
            prop_assert_eq!(log.len(), model.len());
            prop_assert_eq!(log.is_closed(), closed);
            prop_assert_eq!(reader.is_closed(), closed);
            prop_assert_eq!(reader.last().map(|e| e.payload().clone()), model.last().cloned());
        }

        let events = reader.snapshot(Cursor::START);
        let payloads: Vec<EventPayload> = events.iter().map(|e| e.payload().clone()).collect();
        prop_assert_eq!(payloads, model);
        prop_assert_eq!(seqs(&events), (1..=events.len() as u64).collect::<Vec<_>>());
        prop_assert_eq!(events.len(), accepted.len());
        for (x, y) in events.iter().zip(&accepted) {
            prop_assert!(Arc::ptr_eq(x, y));
        }
    }

    #[test]
    fn snapshot_and_subscribe_return_exactly_the_suffix(
        n in 0u64..40,
        closed in any::<bool>(),
        cursor in 0u64..60,
        more in 0u64..10,
    ) {
        let log = EventLog::new(ExecutionId::generate());
        let reader = log.reader();
        for i in 1..=n {
            log.append(text(i)).expect("open");
        }
        if closed {
            log.append(terminal(0)).expect("open");
        }
        let all = reader.snapshot(Cursor::START);
        let from = usize::try_from(cursor.min(all.len() as u64)).expect("small");

        assert_same_events(&reader.snapshot(Cursor::after_seq(cursor)), &all[from..]);

        let mut stream = reader.subscribe(Cursor::after_seq(cursor));
        let ready = all.len() - from;
        prop_assert_eq!(stream.size_hint(), (ready, closed.then_some(ready)));
        let (items, ended) = drain(&mut stream);
        assert_same_events(&items, &all[from..]);
        prop_assert_eq!(ended, closed);
        if let Some(last) = items.last() {
            prop_assert_eq!(stream.cursor(), Cursor::from(last.seq()));
        }

        if !closed {
            // The stream follows the tail: later events after the cursor, then the end.
            for i in 1..=more {
                log.append(text(n + i)).expect("open");
            }
            log.append(terminal(1)).expect("open");
            let full = reader.snapshot(Cursor::START);
            let from = usize::try_from(cursor.min(full.len() as u64)).expect("small");
            let (tail, ended) = drain(&mut stream);
            prop_assert!(ended, "the stream did not end after the terminal event");
            let mut seen = items;
            seen.extend(tail);
            assert_same_events(&seen, &full[from..]);
            assert_same_events(&reader.snapshot(Cursor::after_seq(cursor)), &full[from..]);
        }
        // An ended stream stays ended.
        prop_assert!(matches!(stream.next().now_or_never(), Some(None)));
    }
}

// ---------------------------------------------------------------------------------------------
// Concurrency
// ---------------------------------------------------------------------------------------------

const EVENTS: u64 = 10_000;
const READERS: usize = 64;

/// A tiny deterministic generator (Knuth's MMIX LCG), so failures reproduce.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

/// The readers' cursors: a quarter before any event, half mid-way, a quarter at or past the
/// end (the terminal event is `EVENTS + 1`), plus the exact boundaries.
fn cursors() -> Vec<u64> {
    let mut rng = Lcg(0x5eed_1234);
    let mut cursors: Vec<u64> = (0..READERS)
        .map(|i| match i % 4 {
            0 => 0,
            1 | 2 => 1 + rng.next() % EVENTS,
            _ => EVENTS + 1 + rng.next() % 100,
        })
        .collect();
    cursors[1] = EVENTS; // only the terminal event
    cursors[3] = EVENTS + 1; // right after the terminal event
    cursors[5] = 1;
    cursors[READERS / 2 + 1] = EVENTS;
    cursors
}

fn spawn_reader(
    reader: &LogReader,
    cursor: u64,
) -> (u64, tokio::task::JoinHandle<Vec<Arc<Event>>>) {
    let stream = reader.subscribe(Cursor::after_seq(cursor));
    (cursor, tokio::spawn(stream.collect::<Vec<_>>()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_readers_see_exact_suffixes_and_never_block_the_writer() {
    // A guard against a deadlock only (the test normally takes well under a second); no
    // assertion depends on time.
    tokio::time::timeout(Duration::from_secs(60), concurrent_readers())
        .await
        .expect("the concurrency test deadlocked");
}

async fn concurrent_readers() {
    let log = EventLog::new(ExecutionId::generate());
    let reader = log.reader();
    let cursors = cursors();
    let (early, late) = cursors.split_at(READERS / 2);

    // Half the readers subscribe before any event exists.
    let mut readers: Vec<_> = early.iter().map(|c| spawn_reader(&reader, *c)).collect();

    // The slow reader takes one event, then waits until the writer is done, then crawls.
    let order = Arc::new(AtomicUsize::new(0));
    let slow_progress = Arc::new(AtomicU64::new(0));
    let (gate_tx, gate_rx) = oneshot::channel::<()>();
    let slow = {
        let mut stream = reader.subscribe(Cursor::START);
        let order = Arc::clone(&order);
        let progress = Arc::clone(&slow_progress);
        tokio::spawn(async move {
            let mut seen = vec![stream.next().await.expect("a first event")];
            progress.store(1, Ordering::SeqCst);
            gate_rx.await.expect("the writer opens the gate");
            while let Some(e) = stream.next().await {
                seen.push(e);
                progress.fetch_add(1, Ordering::SeqCst);
                if seen.len() % 100 == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            (seen, order.fetch_add(1, Ordering::SeqCst))
        })
    };

    let (mid_tx, mid_rx) = oneshot::channel::<()>();
    let writer = {
        let order = Arc::clone(&order);
        let progress = Arc::clone(&slow_progress);
        tokio::spawn(async move {
            let mut mid_tx = Some(mid_tx);
            for i in 1..=EVENTS {
                let e = log.append(text(i)).expect("the log is open");
                assert_eq!(e.seq().get(), i);
                if i % 97 == 0 {
                    tokio::task::yield_now().await;
                }
                if i == EVENTS / 2 {
                    mid_tx
                        .take()
                        .expect("once")
                        .send(())
                        .expect("the test awaits the midpoint");
                }
            }
            let end = log
                .append(EventPayload::RunSucceeded(RunSucceeded::default()))
                .expect("the log is open");
            let slow_seen = progress.load(Ordering::SeqCst);
            let finished = order.fetch_add(1, Ordering::SeqCst);
            gate_tx.send(()).expect("the slow reader waits at the gate");
            (log, end, slow_seen, finished)
        })
    };

    // The other half subscribe while the writer is mid-way.
    mid_rx.await.expect("the writer reaches the midpoint");
    readers.extend(late.iter().map(|c| spawn_reader(&reader, *c)));

    let (log, end, slow_seen_when_writer_done, writer_finished) =
        writer.await.expect("the writer does not panic");
    assert_eq!(end.seq().get(), EVENTS + 1);
    assert!(log.is_closed());
    let all = reader.snapshot(Cursor::START);
    assert_eq!(all.len() as u64, EVENTS + 1);

    let mut finished = 0;
    for (cursor, handle) in readers {
        let seen = handle.await.expect("a reader does not panic");
        let from = usize::try_from(cursor.min(EVENTS + 1)).expect("small");
        let expected: Vec<u64> = (cursor + 1..=EVENTS + 1).collect();
        assert_eq!(
            seqs(&seen),
            expected,
            "reader at cursor {cursor} saw a gap, a duplicate or a reordering"
        );
        assert_same_events(&seen, &all[from..]);
        if cursor <= EVENTS {
            assert!(Arc::ptr_eq(seen.last().expect("non-empty"), &end));
        }
        finished += 1;
    }
    assert_eq!(finished, READERS);

    let (slow_seen, slow_finished) = slow.await.expect("the slow reader does not panic");
    assert_same_events(&slow_seen, &all);
    // The writer appended everything while the slow reader held at most one event: a reader
    // never blocks the writer.
    assert!(
        slow_seen_when_writer_done <= 1,
        "the writer waited for the slow reader ({slow_seen_when_writer_done} events read)"
    );
    assert!(writer_finished < slow_finished);
}

// ---------------------------------------------------------------------------------------------
// terminal() and dropped readers
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_resolves_for_waiters_registered_before_and_after() {
    let log = EventLog::new(ExecutionId::generate());
    let reader = log.reader();
    let before: Vec<_> = (0..8).map(|_| tokio::spawn(reader.terminal())).collect();
    let mut probe = reader.terminal();
    assert!((&mut probe).now_or_never().is_none());

    log.append(EventPayload::RunQueued).expect("open");
    log.append(text(1)).expect("open");
    // Non-terminal events do not resolve it.
    assert!((&mut probe).now_or_never().is_none());

    let end = log
        .append(EventPayload::RunCancelled(CancelReason::new("stop")))
        .expect("open");
    for waiter in before {
        let got = waiter.await.expect("a waiter does not panic");
        assert!(Arc::ptr_eq(&got, &end));
    }
    let got = probe.now_or_never().expect("resolved");
    assert!(Arc::ptr_eq(&got, &end));
    // Registered after the terminal event.
    let got = reader.terminal().now_or_never().expect("already resolved");
    assert!(Arc::ptr_eq(&got, &end));
    let got = log.reader().terminal().await;
    assert!(Arc::ptr_eq(&got, &end));
}

#[rstest]
fn terminal_resolves_with_each_terminal_kind(#[values(0, 1, 2)] kind: u8) {
    let log = EventLog::new(ExecutionId::generate());
    let reader = log.reader();
    let mut waiting = reader.terminal();
    assert!((&mut waiting).now_or_never().is_none());
    log.append(EventPayload::RunQueued).expect("open");
    let end = log.append(terminal(kind)).expect("open");
    assert!(Arc::ptr_eq(
        &waiting.now_or_never().expect("resolved"),
        &end
    ));
    assert!(Arc::ptr_eq(
        &reader.terminal().now_or_never().expect("resolved"),
        &end
    ));
}

#[test]
fn parked_readers_hold_one_waker_and_release_it_when_dropped() {
    let log = EventLog::new(ExecutionId::generate());
    let reader = log.reader();
    log.append(EventPayload::RunQueued).expect("open");

    let (counter, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    assert_eq!(Arc::strong_count(&counter), 2); // ours + the waker

    let mut stream = reader.subscribe(Cursor::START);
    assert!(matches!(
        stream.poll_next_unpin(&mut cx),
        Poll::Ready(Some(_))
    ));
    for _ in 0..10 {
        assert!(stream.poll_next_unpin(&mut cx).is_pending());
    }
    assert_eq!(
        Arc::strong_count(&counter),
        3,
        "the log keeps exactly one waker"
    );

    let mut end = reader.terminal();
    for _ in 0..10 {
        assert!(end.poll_unpin(&mut cx).is_pending());
    }
    assert_eq!(
        Arc::strong_count(&counter),
        4,
        "one waker per parked reader"
    );

    drop(stream);
    assert_eq!(
        Arc::strong_count(&counter),
        3,
        "a dropped stream leaked its waker"
    );
    drop(end);
    assert_eq!(
        Arc::strong_count(&counter),
        2,
        "a dropped terminal future leaked its waker"
    );

    // Nothing left to wake.
    log.append(text(1)).expect("open");
    assert_eq!(counter.wakes.load(Ordering::SeqCst), 0);
}

#[test]
fn a_stream_repolled_from_another_task_keeps_only_the_latest_waker() {
    let log = EventLog::new(ExecutionId::generate());
    let reader = log.reader();
    let (old, old_waker) = counting_waker();
    let (new, new_waker) = counting_waker();

    let mut stream = reader.subscribe(Cursor::START);
    assert!(
        stream
            .poll_next_unpin(&mut Context::from_waker(&old_waker))
            .is_pending()
    );
    assert_eq!(Arc::strong_count(&old), 3);
    assert!(
        stream
            .poll_next_unpin(&mut Context::from_waker(&new_waker))
            .is_pending()
    );
    assert_eq!(Arc::strong_count(&old), 2, "the replaced waker was kept");
    assert_eq!(Arc::strong_count(&new), 3);

    let first = log.append(EventPayload::RunQueued).expect("open");
    assert_eq!(
        old.wakes.load(Ordering::SeqCst),
        0,
        "the stale waker was woken"
    );
    assert_eq!(
        new.wakes.load(Ordering::SeqCst),
        1,
        "the current waker was not woken"
    );
    match stream.poll_next_unpin(&mut Context::from_waker(&new_waker)) {
        Poll::Ready(Some(e)) => assert!(Arc::ptr_eq(&e, &first)),
        other => panic!("expected the first event, got {other:?}"),
    }
}

#[test]
fn dropping_readers_before_the_end_does_not_disturb_the_others() {
    const N: usize = 16;
    let log = EventLog::new(ExecutionId::generate());
    let reader = log.reader();
    log.append(EventPayload::RunQueued).expect("open");

    let mut streams = Vec::new();
    let mut ends = Vec::new();
    for _ in 0..N {
        let (counter, waker) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        let mut stream = reader.subscribe(Cursor::START);
        assert!(matches!(
            stream.poll_next_unpin(&mut cx),
            Poll::Ready(Some(_))
        ));
        assert!(stream.poll_next_unpin(&mut cx).is_pending());
        streams.push(Some((stream, counter, waker)));

        let (counter, waker) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        let mut end = reader.terminal();
        assert!(end.poll_unpin(&mut cx).is_pending());
        ends.push(Some((end, counter, waker)));
    }

    // Drop every other reader while parked, keeping its counter.
    let mut dropped = Vec::new();
    for i in (0..N).step_by(2) {
        let (stream, counter, waker) = streams[i].take().expect("present");
        drop((stream, waker));
        assert_eq!(
            Arc::strong_count(&counter),
            1,
            "a dropped stream leaked its waker"
        );
        dropped.push(counter);
        let (end, counter, waker) = ends[i].take().expect("present");
        drop((end, waker));
        assert_eq!(
            Arc::strong_count(&counter),
            1,
            "a dropped terminal future leaked its waker"
        );
        dropped.push(counter);
    }

    log.append(text(1)).expect("open");
    let end = log.append(terminal(0)).expect("open");
    let all = reader.snapshot(Cursor::START);

    for counter in &dropped {
        assert_eq!(
            counter.wakes.load(Ordering::SeqCst),
            0,
            "a dropped reader was woken"
        );
    }
    let mut finished = 0;
    for (mut stream, counter, waker) in streams.into_iter().flatten() {
        assert!(
            counter.wakes.load(Ordering::SeqCst) >= 1,
            "a parked stream was not woken"
        );
        let mut cx = Context::from_waker(&waker);
        let mut rest = Vec::new();
        loop {
            match stream.poll_next_unpin(&mut cx) {
                Poll::Ready(Some(e)) => rest.push(e),
                Poll::Ready(None) => break,
                Poll::Pending => panic!("a stream did not end after the terminal event"),
            }
        }
        assert_same_events(&rest, &all[1..]);
        finished += 1;
    }
    for (mut fut, counter, waker) in ends.into_iter().flatten() {
        assert!(
            counter.wakes.load(Ordering::SeqCst) >= 1,
            "a terminal waiter was not woken"
        );
        let mut cx = Context::from_waker(&waker);
        match fut.poll_unpin(&mut cx) {
            Poll::Ready(e) => assert!(Arc::ptr_eq(&e, &end)),
            Poll::Pending => panic!("a terminal future did not resolve"),
        }
        finished += 1;
    }
    assert_eq!(finished, N);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborted_reader_tasks_do_not_stop_the_others() {
    const TASKS: usize = 32;
    let log = EventLog::new(ExecutionId::generate());
    let reader = log.reader();
    let completed = Arc::new(AtomicUsize::new(0));

    let mut tasks = Vec::new();
    let mut started = Vec::new();
    for i in 0..TASKS {
        let (tx, rx) = oneshot::channel::<()>();
        started.push(rx);
        let completed = Arc::clone(&completed);
        let reader = reader.clone();
        tasks.push(tokio::spawn(async move {
            if i % 4 == 3 {
                let mut end = reader.terminal();
                // Registered (polled once) before signalling.
                assert!((&mut end).now_or_never().is_none());
                tx.send(()).expect("the test listens");
                let e = end.await;
                completed.fetch_add(1, Ordering::SeqCst);
                vec![e]
            } else {
                let mut stream = reader.subscribe(Cursor::START);
                let first = stream.next().await.expect("run.queued");
                tx.send(()).expect("the test listens");
                let mut seen = vec![first];
                seen.extend(stream.collect::<Vec<_>>().await);
                completed.fetch_add(1, Ordering::SeqCst);
                seen
            }
        }));
    }
    log.append(EventPayload::RunQueued).expect("open");
    for rx in started {
        rx.await.expect("every reader starts");
    }
    // Abort half the readers while they wait for more events.
    let mut kept = Vec::new();
    for (i, task) in tasks.into_iter().enumerate() {
        if i % 2 == 0 {
            task.abort();
            assert!(task.await.expect_err("aborted").is_cancelled());
        } else {
            kept.push((i, task));
        }
    }
    for i in 1..=100 {
        log.append(text(i)).expect("open");
    }
    let end = log.append(terminal(0)).expect("open");
    let all = reader.snapshot(Cursor::START);
    for (i, task) in kept {
        let seen = task.await.expect("a kept reader does not panic");
        if i % 4 == 3 {
            assert!(Arc::ptr_eq(&seen[0], &end));
        } else {
            assert_same_events(&seen, &all);
        }
    }
    assert_eq!(completed.load(Ordering::SeqCst), TASKS / 2);
}

// ---------------------------------------------------------------------------------------------
// Observers: every event once, in order, on the writer's thread; dropped at the end
// ---------------------------------------------------------------------------------------------

/// Records the sequence numbers it sees; `done` is set when it is dropped.
struct Recorder {
    seen: Arc<std::sync::Mutex<Vec<u64>>>,
    dropped: Arc<std::sync::atomic::AtomicBool>,
}

impl harness_core::log::LogObserver for Recorder {
    fn on_event(&mut self, event: &Event) {
        self.seen.lock().unwrap().push(event.seq().get());
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

#[allow(clippy::type_complexity)]
fn recorder() -> (
    Recorder,
    Arc<std::sync::Mutex<Vec<u64>>>,
    Arc<std::sync::atomic::AtomicBool>,
) {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let r = Recorder {
        seen: Arc::clone(&seen),
        dropped: Arc::clone(&dropped),
    };
    (r, seen, dropped)
}

#[test]
fn observers_registered_while_the_writer_appends_see_every_event_exactly_once() {
    // Registration races single and batched appends: an observer registered at any point
    // sees 1..=N, in order, and is dropped after the terminal event.
    for round in 0..300u64 {
        let log = EventLog::new(ExecutionId::generate());
        let reader = log.reader();
        let total = 40 + round % 17;
        let registrar = std::thread::spawn(move || {
            let mut observed = Vec::new();
            for _ in 0..4 {
                let (r, seen, dropped) = recorder();
                reader.observe(r);
                observed.push((seen, dropped));
                std::thread::yield_now();
            }
            observed
        });
        let mut seq = 0;
        while seq < total {
            if seq % 3 == 0 {
                log.append(text(seq)).unwrap();
                seq += 1;
            } else {
                let n = log
                    .append_content((0..5).map(|i| {
                        harness_core::event::Content::MessageDelta(TextDelta::new(i.to_string()))
                    }))
                    .unwrap();
                seq += n as u64;
            }
        }
        log.append(terminal(round as u8)).unwrap();
        let last = seq + 1;
        for (seen, dropped) in registrar.join().unwrap() {
            assert_eq!(
                *seen.lock().unwrap(),
                (1..=last).collect::<Vec<_>>(),
                "round {round}"
            );
            assert!(
                dropped.load(Ordering::SeqCst),
                "kept after the terminal event"
            );
        }
    }
}

#[test]
fn an_observer_registered_after_the_end_sees_the_whole_log_at_once_and_is_not_kept() {
    let log = EventLog::new(ExecutionId::generate());
    log.append(EventPayload::RunQueued).unwrap();
    log.append(terminal(0)).unwrap();
    let (r, seen, dropped) = recorder();
    log.reader().observe(r);
    assert_eq!(*seen.lock().unwrap(), [1, 2]);
    assert!(dropped.load(Ordering::SeqCst));
    let fired = Arc::new(AtomicUsize::new(0));
    let f = Arc::clone(&fired);
    log.reader().on_terminal(move |e| {
        assert_eq!(e.seq().get(), 2);
        f.fetch_add(1, Ordering::SeqCst);
    });
    assert_eq!(fired.load(Ordering::SeqCst), 1);
}

#[test]
fn a_panicking_observer_is_dropped_and_neither_the_writer_nor_other_observers_notice() {
    let log = EventLog::new(ExecutionId::generate());
    let (r, seen, _) = recorder();
    log.reader().observe(r);
    let calls = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&calls);
    log.reader().observe(move |e: &Event| {
        c.fetch_add(1, Ordering::SeqCst);
        assert!(e.seq().get() < 2, "observer panics on the second event");
    });
    for i in 0..4 {
        log.append(text(i)).unwrap();
    }
    log.append(terminal(1)).unwrap();
    assert_eq!(*seen.lock().unwrap(), [1, 2, 3, 4, 5]);
    // Called for events 1 and 2 (where it panicked), never again.
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[test]
fn a_writer_dropped_without_a_terminal_event_drops_its_observers_uncalled() {
    let log = EventLog::new(ExecutionId::generate());
    let reader = log.reader();
    let (r, _, dropped) = recorder();
    reader.observe(r);
    let fired = Arc::new(AtomicUsize::new(0));
    let f = Arc::clone(&fired);
    reader.on_terminal(move |_| {
        f.fetch_add(1, Ordering::SeqCst);
    });
    log.append(EventPayload::RunQueued).unwrap();
    assert!(!dropped.load(Ordering::SeqCst));
    drop(log);
    // The reader still holds the log; the observers are gone anyway.
    assert!(dropped.load(Ordering::SeqCst));
    assert_eq!(fired.load(Ordering::SeqCst), 0);
    assert_eq!(reader.len(), 1);
}

/// Terminal hooks registered from many threads while the writer appends and ends the log:
/// each runs exactly once, with the terminal event, whichever side wins the race.
#[test]
fn terminal_hooks_registered_concurrently_with_the_end_each_run_exactly_once() {
    const HOOKS: usize = 16;
    for round in 0..200_u64 {
        let log = EventLog::new(ExecutionId::generate());
        let reader = log.reader();
        let fired: Arc<Vec<AtomicUsize>> =
            Arc::new((0..HOOKS).map(|_| AtomicUsize::new(0)).collect());
        let registering: Vec<_> = (0..HOOKS)
            .map(|i| {
                let reader = reader.clone();
                let fired = Arc::clone(&fired);
                std::thread::spawn(move || {
                    if (i as u64 + round).is_multiple_of(3) {
                        std::thread::yield_now();
                    }
                    reader.on_terminal(move |e| {
                        assert!(e.kind().is_terminal());
                        fired[i].fetch_add(1, Ordering::SeqCst);
                    });
                })
            })
            .collect();
        for i in 0..(round % 8) {
            log.append(text(i)).unwrap();
        }
        log.append(terminal((round % 3) as u8)).unwrap();
        for t in registering {
            t.join().unwrap();
        }
        let counts: Vec<usize> = fired.iter().map(|c| c.load(Ordering::SeqCst)).collect();
        assert!(counts.iter().all(|&c| c == 1), "round {round}: {counts:?}");
    }
}

/// A panicking terminal hook neither stops the others nor unwinds into the writer.
#[test]
fn a_panicking_terminal_hook_leaves_the_writer_and_the_other_hooks_alone() {
    let log = EventLog::new(ExecutionId::generate());
    let reader = log.reader();
    let fired = Arc::new(AtomicUsize::new(0));
    reader.on_terminal(|_| panic!("a hook that fails"));
    let f = Arc::clone(&fired);
    reader.on_terminal(move |_| {
        f.fetch_add(1, Ordering::SeqCst);
    });
    log.append(text(0)).unwrap();
    assert_eq!(fired.load(Ordering::SeqCst), 0, "not before the end");
    log.append(terminal(0)).unwrap();
    assert_eq!(fired.load(Ordering::SeqCst), 1);
}

/// A terminal hook that registers another one from inside: the inner one runs at once (the
/// log has ended), and nothing deadlocks.
#[test]
fn a_terminal_hook_may_register_another_from_inside() {
    let log = EventLog::new(ExecutionId::generate());
    let reader = log.reader();
    let (done, ran) = std::sync::mpsc::channel();
    let inner = reader.clone();
    reader.on_terminal(move |_| {
        inner.on_terminal(move |e| {
            done.send(e.seq().get()).unwrap();
        });
    });
    let writer = std::thread::spawn(move || {
        log.append(text(0)).unwrap();
        log.append(terminal(0)).unwrap();
    });
    assert_eq!(ran.recv_timeout(Duration::from_secs(5)), Ok(2));
    writer.join().unwrap();
}
