//! The store conformance suite: the rules of
//! [`ExecutionStore`], checked against any backend.
//!
//! [`check`] runs every check on one store (each on executions of its own, so a store may be
//! shared with other work) and panics naming the first rule broken. Backends run it in their
//! tests; `harness-store` runs it on [`MemoryStore`](harness_core::store::MemoryStore) and
//! [`SqliteStore`](crate::SqliteStore).
//!
//! ```
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
//! harness_store::suite::check(harness_core::store::MemoryStore::new()).await;
//! # });
//! ```

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use harness_core::error::ErrorCode;
use harness_core::event::{CancelReason, Event, EventKind, EventPayload, TextDelta};
use harness_core::id::{ActionId, Cursor, ExecutionId, IdempotencyKey, Sequence};
use harness_core::lifecycle::ExecutionState;
use harness_core::service::{AdapterService, ExecutionHandle, ExecutionRequest, Outcome};
use harness_core::store::{
    Created, ExecutionRecord, ExecutionStore, Lease, Listed, ReplicaId, Resolution, StoreError,
};
use harness_core::time::Timestamp;

const LONG: Duration = Duration::from_secs(60);

/// How many callers race in the concurrency checks.
pub const RACERS: usize = 500;

/// Runs every check on `store`.
///
/// # Panics
/// At the first rule the store breaks, naming it.
pub async fn check<S: ExecutionStore + Clone>(store: S) {
    records_and_idempotency(&store).await;
    leases_and_fencing(&store).await;
    appends(&store).await;
    a_newer_writers_events(&store).await;
    answers_and_cancels(&store).await;
    tails(&store).await;
    races(&store).await;
    retention(&store).await;
    listing(&store).await;
}

/// `list` pages one principal's executions newest first, by position; other principals'
/// never appear, and executions created while paging do not shift the pages.
async fn listing<S: ExecutionStore>(store: &S) {
    // A principal of its own: other checks' executions share the store.
    let principal = format!("lister-{}", ExecutionId::generate());
    let other = format!("{principal}-other");
    let mut ids = Vec::new();
    for n in 0..7 {
        let mine = record().with_principal(principal.as_str());
        ids.push(mine.id.clone());
        store.create(mine).await.expect("create");
        if n % 2 == 0 {
            store
                .create(record().with_principal(other.as_str()))
                .await
                .expect("create");
        }
    }
    let first = store.list(&principal, None, 3).await.expect("list");
    let ids_of = |page: &[Listed]| page.iter().map(|l| l.record.id.clone()).collect::<Vec<_>>();
    assert_eq!(
        ids_of(&first),
        vec![ids[6].clone(), ids[5].clone(), ids[4].clone()]
    );
    assert!(
        first.windows(2).all(|w| w[0].position > w[1].position),
        "positions fall down a page"
    );
    // One created between pages appears on none of the later ones.
    store
        .create(record().with_principal(principal.as_str()))
        .await
        .expect("create");
    let mut seen = ids_of(&first);
    let mut before = first.last().map(|l| l.position);
    loop {
        let page = store.list(&principal, before, 3).await.expect("list");
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 3, "a page holds at most its limit");
        seen.extend(ids_of(&page));
        before = page.last().map(|l| l.position);
    }
    ids.reverse();
    assert_eq!(
        seen, ids,
        "every execution once, newest first, and only the principal's"
    );
    assert!(
        store
            .list("nobody-has-this-principal", None, 10)
            .await
            .expect("list")
            .is_empty()
    );
}

/// `purge` deletes ended executions created before the cutoff (records, events, answers,
/// idempotency keys), oldest first and at most `limit`; never an unfinished one.
async fn retention<S: ExecutionStore>(store: &S) {
    let owner = ReplicaId::new("retention");
    // Three old executions (two ended, one not), then the cutoff, then a new ended one.
    let mut old = Vec::new();
    for (n, ends) in [(0, true), (1, false), (2, true)] {
        let key: IdempotencyKey = format!("retention-{}-{n}", ExecutionId::generate())
            .parse()
            .expect("a key");
        let record = record().with_idempotency_key(key.clone());
        let id = record.id.clone();
        store.create(record).await.expect("create");
        let lease = store
            .acquire(&id, &owner, Duration::from_secs(30))
            .await
            .expect("lease");
        let mut batch = events(&id, 1, 2);
        if ends {
            batch.push(event_with(
                &id,
                3,
                EventPayload::RunSucceeded(Default::default()),
            ));
        }
        store.append(&lease, &batch).await.expect("append");
        store
            .resolve(
                &id,
                Resolution {
                    action_id: ActionId::generate(),
                    revision: 1,
                    response: serde_json::json!({}),
                    at: Timestamp::now(),
                },
            )
            .await
            .expect("an answer to purge with it");
        old.push((id, key, ends));
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    let cutoff = Timestamp::now();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let young = record();
    let young_id = young.id.clone();
    store.create(young).await.expect("create");
    let lease = store
        .acquire(&young_id, &owner, Duration::from_secs(30))
        .await
        .expect("lease");
    let mut batch = events(&young_id, 1, 2);
    batch.push(event_with(
        &young_id,
        3,
        EventPayload::RunSucceeded(Default::default()),
    ));
    store.append(&lease, &batch).await.expect("append");

    // Other tests' executions share the store: purge ours in steps of one, oldest first.
    let mut purged = 0;
    while store.record(&old[2].0).await.is_ok() {
        purged += store.purge(cutoff, 1).await.expect("purge");
        assert!(purged < 10_000, "purge made no progress");
    }
    assert!(purged >= 2);
    for (id, key, ends) in &old {
        let kept = store.record(id).await;
        if *ends {
            assert!(matches!(kept, Err(StoreError::NotFound(_))), "{kept:?}");
            assert!(
                store
                    .read(id, Cursor::START, 10)
                    .await
                    .map_or(true, |e| e.is_empty()),
                "the events went with the record"
            );
            // The key is free again: a retry under it starts a new execution.
            let again = record().with_idempotency_key(key.clone());
            assert!(matches!(
                store.create(again).await.expect("create"),
                Created::New
            ));
        } else {
            assert!(kept.is_ok(), "an unfinished execution is never purged");
        }
    }
    assert!(
        store.record(&young_id).await.is_ok(),
        "younger than the cutoff"
    );
}

/// A record of a new execution, `fingerprint` "fp".
#[must_use]
pub fn record() -> ExecutionRecord {
    ExecutionRecord::new(
        ExecutionId::generate(),
        "scripted",
        "fp",
        serde_json::json!({"message": "hi"}),
    )
}

/// Event `seq` of `id`: `run.queued` for 1, `run.running` for 2, a delta after.
#[must_use]
pub fn event(id: &ExecutionId, seq: u64) -> Event {
    let payload = match seq {
        1 => EventPayload::RunQueued,
        2 => EventPayload::RunRunning,
        n => EventPayload::MessageDelta(TextDelta::new(format!("delta {n}"))),
    };
    event_with(id, seq, payload)
}

/// Event `seq` of `id` with `payload`.
#[must_use]
pub fn event_with(id: &ExecutionId, seq: u64, payload: EventPayload) -> Event {
    Event::new(
        id.clone(),
        Sequence::new(seq).expect("sequence numbers start at 1"),
        Timestamp::now(),
        payload,
    )
}

/// Events `from..=to` of `id`.
#[must_use]
pub fn events(id: &ExecutionId, from: u64, to: u64) -> Vec<Event> {
    (from..=to).map(|n| event(id, n)).collect()
}

/// The events `execution`'s handle shows (its log's snapshot), owned.
#[must_use]
pub fn shown(execution: &ExecutionHandle) -> Vec<Event> {
    execution
        .log()
        .snapshot(Cursor::START)
        .iter()
        .map(|e| Event::clone(e))
        .collect()
}

async fn created<S: ExecutionStore>(store: &S) -> ExecutionId {
    let record = record();
    let id = record.id.clone();
    assert_eq!(store.create(record).await, Ok(Created::New), "create");
    id
}

async fn leased<S: ExecutionStore>(store: &S, owner: &str) -> (ExecutionId, Lease) {
    let id = created(store).await;
    let lease = store
        .acquire(&id, &ReplicaId::new(owner), LONG)
        .await
        .expect("a fresh execution's lease is free");
    (id, lease)
}

async fn records_and_idempotency<S: ExecutionStore>(store: &S) {
    let written = record().with_principal("alice");
    let id = written.id.clone();
    assert_eq!(store.create(written.clone()).await, Ok(Created::New));
    let read = store.record(&id).await.expect("the record reads back");
    assert_eq!(read, written, "a record reads back as written");
    assert_eq!(
        store.create(written).await,
        Err(StoreError::Exists(id)),
        "an id is created once"
    );
    let unknown = ExecutionId::generate();
    assert_eq!(
        store.record(&unknown).await,
        Err(StoreError::NotFound(unknown.clone())),
        "an unknown execution is NotFound"
    );
    assert!(
        matches!(
            store.read(&unknown, Cursor::START, 10).await,
            Err(StoreError::NotFound(_))
        ),
        "the log of an unknown execution is NotFound, not empty"
    );

    let key: IdempotencyKey = format!("key-{}", ExecutionId::generate())
        .parse()
        .expect("a valid key");
    let first = record()
        .with_principal("alice")
        .with_idempotency_key(key.clone());
    assert_eq!(store.create(first.clone()).await, Ok(Created::New));
    let again = ExecutionRecord {
        id: ExecutionId::generate(),
        ..first.clone()
    };
    assert_eq!(
        store.create(again).await,
        Ok(Created::Existing(Box::new(first.clone()))),
        "the same key and request give the first execution"
    );
    let other = ExecutionRecord {
        id: ExecutionId::generate(),
        fingerprint: "another".into(),
        ..first.clone()
    };
    assert_eq!(
        store.create(other).await,
        Err(StoreError::IdempotencyConflict {
            key: key.clone(),
            existing: first.id.clone()
        }),
        "the same key for another request is a conflict"
    );
    let bob = ExecutionRecord {
        id: ExecutionId::generate(),
        principal: "bob".into(),
        ..first
    };
    assert_eq!(
        store.create(bob).await,
        Ok(Created::New),
        "keys are scoped by principal"
    );
}

async fn leases_and_fencing<S: ExecutionStore>(store: &S) {
    let (id, a) = leased(store, "a").await;
    assert_eq!(a.token.get(), 1, "the first lease is token 1");
    let b = ReplicaId::new("b");
    assert!(
        matches!(
            store.acquire(&id, &b, LONG).await,
            Err(StoreError::Leased { ref owner, .. }) if owner.as_str() == "a"
        ),
        "a held lease is not taken"
    );
    let renewed = store
        .acquire(&id, &a.owner, LONG)
        .await
        .expect("the holder renews");
    assert_eq!(renewed.token, a.token, "a renewal keeps the token");
    store.release(&renewed).await.expect("the holder releases");
    let taken = store
        .acquire(&id, &b, LONG)
        .await
        .expect("a released lease is free");
    assert!(taken.token > a.token, "a new holder gets a greater token");

    // The old holder can write nothing: the store refuses it.
    assert!(
        matches!(
            store.append(&a, &events(&id, 1, 1)).await,
            Err(StoreError::Fenced { presented, current, .. })
                if presented == a.token && current == taken.token
        ),
        "an append under a lost lease is fenced"
    );
    assert!(
        matches!(store.release(&a).await, Err(StoreError::Fenced { .. })),
        "a release under a lost lease is fenced"
    );
    store
        .append(&taken, &events(&id, 1, 2))
        .await
        .expect("the current holder appends");

    // A lapsed lease fences its holder, and anyone may take it.
    let (id, short) = {
        let id = created(store).await;
        let lease = store
            .acquire(&id, &ReplicaId::new("a"), Duration::from_millis(50))
            .await
            .expect("lease");
        (id, lease)
    };
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert!(
        matches!(
            store.append(&short, &events(&id, 1, 1)).await,
            Err(StoreError::Fenced { .. })
        ),
        "an append under a lapsed lease is fenced"
    );
    let next = store
        .acquire(&id, &b, LONG)
        .await
        .expect("a lapsed lease is free");
    assert!(next.token > short.token);
    assert_eq!(store.read(&id, Cursor::START, 10).await, Ok(Vec::new()));
}

/// Events `from..=to` of `id` as a newer version writes them: an envelope field (`traceId`)
/// and a `data` field (`lang`) this version does not know, read by today's [`Event`] (which
/// keeps them; see `harness_core::wire`).
///
/// # Panics
/// Never for valid ids (the JSON is built from known values).
#[must_use]
pub fn newer_writers_events(id: &ExecutionId, from: u64, to: u64) -> Vec<Event> {
    events(id, from, to)
        .iter()
        .map(|event| {
            let mut wire = serde_json::to_value(event).expect("an event serializes");
            wire["traceId"] = serde_json::json!("4bf92f3577b34da6a3ce929d0e0e4736");
            if let Some(data) = wire
                .get_mut("data")
                .and_then(serde_json::Value::as_object_mut)
            {
                data.insert("lang".into(), serde_json::json!("en"));
            }
            serde_json::from_value(wire).expect("a newer writer's event reads")
        })
        .collect()
}

/// A rolling upgrade: events a newer replica appended, with fields this version does not
/// know, are read back by this one with those fields (so that serving them again strips
/// nothing), and the execution goes on with this version's events.
async fn a_newer_writers_events<S: ExecutionStore>(store: &S) {
    let (id, lease) = leased(store, "a").await;
    let newer = newer_writers_events(&id, 1, 3);
    assert_eq!(
        newer[2].unknown_data_fields().get("lang"),
        Some(&serde_json::json!("en"))
    );
    store.append(&lease, &newer).await.expect("append");
    let ours = events(&id, 4, 4);
    store
        .append(&lease, &ours)
        .await
        .expect("append this version's");
    let read = store.read(&id, Cursor::START, 10).await.expect("read");
    assert_eq!(
        read[..3],
        newer[..],
        "a newer writer's fields are kept through the store"
    );
    assert_eq!(read[3..], ours[..]);
    let served = serde_json::to_value(&read[2]).expect("serialize");
    assert_eq!(
        (&served["traceId"], &served["data"]["lang"]),
        (
            &serde_json::json!("4bf92f3577b34da6a3ce929d0e0e4736"),
            &serde_json::json!("en")
        ),
        "served again as the newer writer wrote it"
    );
}

async fn appends<S: ExecutionStore>(store: &S) {
    let (id, lease) = leased(store, "a").await;
    let written = events(&id, 1, 3);
    store
        .append(&lease, &written)
        .await
        .expect("a contiguous batch");
    assert_eq!(
        store.read(&id, Cursor::START, 10).await.expect("read"),
        written,
        "events read back whole: envelope, time and payload"
    );
    assert_eq!(
        store.record(&id).await.expect("record").state,
        ExecutionState::Running,
        "the state follows the lifecycle events"
    );
    assert!(
        matches!(
            store.append(&lease, &events(&id, 5, 6)).await,
            Err(StoreError::Sequence {
                expected: 4,
                got: 5,
                ..
            })
        ),
        "a gap is refused"
    );
    assert!(
        matches!(
            store.append(&lease, &events(&id, 3, 4)).await,
            Err(StoreError::Sequence {
                expected: 4,
                got: 3,
                ..
            })
        ),
        "a repeat is refused"
    );
    // All or nothing: a batch that goes wrong half-way writes none of it.
    let mut broken = events(&id, 4, 5);
    broken.push(event(&id, 7));
    assert!(store.append(&lease, &broken).await.is_err());
    assert_eq!(
        store
            .read(&id, Cursor::START, 100)
            .await
            .expect("read")
            .len(),
        3,
        "a refused batch wrote nothing"
    );
    // Events shared with a log (as the service's persister appends them) follow the same
    // rules and read back the same.
    let later = events(&id, 4, 10);
    let shared: Vec<Arc<Event>> = later.iter().cloned().map(Arc::new).collect();
    assert!(
        matches!(
            store.append_shared(&lease, &shared[1..]).await,
            Err(StoreError::Sequence {
                expected: 4,
                got: 5,
                ..
            })
        ),
        "a gap is refused in shared events too"
    );
    store
        .append_shared(&lease, &shared)
        .await
        .expect("the log goes on");
    assert_eq!(
        store.read(&id, Cursor::after_seq(3), 100).await,
        Ok(later),
        "shared events read back whole"
    );
    let page = store
        .read(&id, Cursor::after_seq(2), 3)
        .await
        .expect("a page");
    let seqs: Vec<u64> = page.iter().map(|e| e.seq().get()).collect();
    assert_eq!(
        seqs,
        [3, 4, 5],
        "read returns `limit` events after the cursor"
    );
    assert!(
        store
            .unfinished()
            .await
            .expect("unfinished")
            .iter()
            .any(|r| r.id == id),
        "a running execution is unfinished"
    );
    store
        .append(
            &lease,
            &[event_with(
                &id,
                11,
                EventPayload::RunCancelled(CancelReason::new("stop")),
            )],
        )
        .await
        .expect("the terminal event");
    assert_eq!(
        store.append(&lease, &events(&id, 12, 12)).await,
        Err(StoreError::Ended(id.clone())),
        "nothing follows the terminal event"
    );
    let record = store.record(&id).await.expect("record");
    assert_eq!(record.state, ExecutionState::Cancelled);
    assert!(
        !store
            .unfinished()
            .await
            .expect("unfinished")
            .iter()
            .any(|r| r.id == id),
        "an ended execution is not unfinished"
    );
    let all = store.read(&id, Cursor::START, 1000).await.expect("read");
    assert_eq!(all.len(), 11);
    assert!(
        all.iter()
            .enumerate()
            .all(|(i, e)| e.seq().get() == i as u64 + 1),
        "contiguous from 1"
    );
    assert_eq!(
        store.read(&id, Cursor::after_seq(11), 10).await,
        Ok(Vec::new()),
        "nothing after the last event"
    );
}

fn resolution(action: &ActionId, n: u64) -> Resolution {
    Resolution {
        action_id: action.clone(),
        revision: 1,
        response: serde_json::json!({"answer": n}),
        at: Timestamp::now(),
    }
}

async fn answers_and_cancels<S: ExecutionStore>(store: &S) {
    let id = created(store).await;
    let action = ActionId::generate();
    assert_eq!(store.resolution(&id, &action).await, Ok(None));
    let first = resolution(&action, 1);
    store
        .resolve(&id, first.clone())
        .await
        .expect("the first answer");
    assert_eq!(
        store.resolve(&id, resolution(&action, 2)).await,
        Err(StoreError::AlreadyResolved {
            execution: id.clone(),
            action: action.clone()
        }),
        "a second answer is refused"
    );
    assert_eq!(
        store.resolution(&id, &action).await,
        Ok(Some(first)),
        "the first answer is kept"
    );
    assert_eq!(store.request_cancel(&id, "first").await, Ok(true));
    assert_eq!(store.request_cancel(&id, "second").await, Ok(false));
    assert_eq!(
        store
            .record(&id)
            .await
            .expect("record")
            .cancel_requested
            .as_deref(),
        Some("first"),
        "the first cancel request's reason wins"
    );
}

async fn tails<S: ExecutionStore>(store: &S) {
    let (id, lease) = leased(store, "a").await;
    let mut tail = store.tail(&id).await.expect("a tail");
    assert_eq!(tail.last(), 0);
    let waiter = tokio::spawn(async move {
        let woke = tail.after(Cursor::START).await;
        (woke, tail.last())
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    store
        .append(&lease, &events(&id, 1, 2))
        .await
        .expect("append");
    let (woke, last) = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the tail wakes on an append")
        .expect("the waiter");
    assert!(woke);
    assert_eq!(last, 2);

    // A tail taken after events were stored starts from them.
    let mut late = store.tail(&id).await.expect("a tail");
    assert_eq!(late.last(), 2);
    assert!(
        tokio::time::timeout(Duration::from_secs(1), late.after(Cursor::after_seq(1)))
            .await
            .expect("at once: an event after the cursor is stored")
    );
    // An answer and a cancel request wake the owner too.
    let mut owner = store.tail(&id).await.expect("a tail");
    let action = ActionId::generate();
    store
        .resolve(&id, resolution(&action, 1))
        .await
        .expect("resolve");
    assert!(
        tokio::time::timeout(Duration::from_secs(5), owner.changed())
            .await
            .expect("the tail wakes on an answer")
    );
    store.request_cancel(&id, "stop").await.expect("cancel");
    assert!(
        tokio::time::timeout(Duration::from_secs(5), owner.changed())
            .await
            .expect("the tail wakes on a cancel request")
    );
}

async fn races<S: ExecutionStore + Clone>(store: &S) {
    // RACERS concurrent answers to one action: exactly one is recorded.
    let id = created(store).await;
    let action = ActionId::generate();
    let tasks: Vec<_> = (0..RACERS as u64)
        .map(|n| {
            let (store, id, action) = (store.clone(), id.clone(), action.clone());
            tokio::spawn(async move { store.resolve(&id, resolution(&action, n)).await })
        })
        .collect();
    let mut accepted = 0;
    for task in tasks {
        match task.await.expect("a racer") {
            Ok(()) => accepted += 1,
            Err(StoreError::AlreadyResolved { .. }) => {}
            Err(other) => panic!("a racing answer failed otherwise: {other}"),
        }
    }
    assert_eq!(accepted, 1, "{RACERS} concurrent answers: one accepted");

    // Concurrent creates with one key: one execution.
    let key: IdempotencyKey = format!("race-{}", ExecutionId::generate())
        .parse()
        .expect("key");
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let store = store.clone();
            let record = record().with_idempotency_key(key.clone());
            tokio::spawn(async move { (record.id.clone(), store.create(record).await) })
        })
        .collect();
    let mut new = Vec::new();
    let mut existing = std::collections::HashSet::new();
    for task in tasks {
        match task.await.expect("a racer") {
            (id, Ok(Created::New)) => new.push(id),
            (_, Ok(Created::Existing(first))) => {
                existing.insert(first.id);
            }
            (_, Err(e)) => panic!("a racing create failed: {e}"),
        }
    }
    assert_eq!(new.len(), 1, "one key, one execution");
    assert!(existing.iter().all(|id| *id == new[0]), "the others got it");

    // Replicas racing for one lease: one holds it.
    let id = Arc::new(created(store).await);
    let tasks: Vec<_> = (0..50)
        .map(|n| {
            let (store, id) = (store.clone(), Arc::clone(&id));
            tokio::spawn(async move {
                store
                    .acquire(&id, &ReplicaId::new(format!("replica-{n}")), LONG)
                    .await
            })
        })
        .collect();
    let mut holders = 0;
    for task in tasks {
        match task.await.expect("a racer") {
            Ok(_) => holders += 1,
            Err(StoreError::Leased { .. }) => {}
            Err(other) => panic!("a racing acquire failed otherwise: {other}"),
        }
    }
    assert_eq!(holders, 1, "one lease holder");

    // Concurrent appends from many executions: each log whole and contiguous.
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                let (id, lease) = leased(&store, "a").await;
                for n in 1..=50 {
                    store
                        .append(&lease, &[event(&id, n)])
                        .await
                        .expect("append");
                }
                let all = store.read(&id, Cursor::START, 100).await.expect("read");
                assert_eq!(all.len(), 50);
                assert!(
                    all.iter()
                        .enumerate()
                        .all(|(i, e)| e.seq().get() == i as u64 + 1)
                );
            })
        })
        .collect();
    for task in tasks {
        task.await
            .expect("concurrent appends keep each log contiguous");
    }
}

/// A durable [`AdapterService`] over `store` runs a
/// [`Ticker`] execution to its end: the store holds exactly the events its readers saw, the
/// record's state, adapter and request, and the lease is free afterwards.
///
/// # Panics
/// When any of that does not hold.
pub async fn durable_service(store: Arc<dyn ExecutionStore>) {
    let service = AdapterService::builder(Ticker::new(Some(20), Duration::from_millis(1)))
        .store(Arc::clone(&store), ReplicaId::new("a"))
        .build();
    let execution = service
        .start(ExecutionRequest::new("tick"))
        .await
        .expect("starts");
    let outcome = tokio::time::timeout(Duration::from_secs(10), execution.outcome())
        .await
        .expect("ends");
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    let id = execution.id().clone();
    let seen = shown(&execution);
    let stored = store.read(&id, Cursor::START, 1000).await.expect("read");
    assert_eq!(stored, seen, "the store holds exactly what readers saw");
    assert_eq!(
        seen.iter()
            .filter(|e| e.kind() == EventKind::MessageDelta)
            .count(),
        20
    );
    let record = store.record(&id).await.expect("record");
    assert_eq!(record.state, ExecutionState::Succeeded);
    assert_eq!(record.adapter, "ticker");
    assert_eq!(record.request["message"], "tick");
    // The lease was released at the end: another replica takes it at once.
    store
        .acquire(&id, &ReplicaId::new("b"), Duration::from_secs(5))
        .await
        .expect("released");
    assert!(
        !store
            .unfinished()
            .await
            .expect("unfinished")
            .iter()
            .any(|r| r.id == id)
    );
}

/// A cancel sent through the store right after `start` (before the owner's store watcher
/// may have run) ends the run at once, [`CANCELS`] times: the watcher reads the store after
/// subscribing to its tail, so a cancel stored before the subscription is not left to the
/// watcher's periodic re-check. The lease term is long (the re-check comes every 20 s) and
/// the [`Ticker`] silent (no append wakes the watcher), so a missed wake-up fails here.
///
/// # Panics
/// When a cancel takes more than 5 s to end its run, or the run ends otherwise.
pub async fn cancels_wake_the_owner(store: Arc<dyn ExecutionStore>) {
    let service = AdapterService::builder(Ticker::new(None, LONG))
        .store(store, ReplicaId::new("a"))
        .lease_ttl(LONG)
        .build();
    for i in 0..CANCELS {
        let execution = service
            .start(ExecutionRequest::new("tick"))
            .await
            .expect("starts");
        assert!(
            service
                .request_cancel(execution.id(), "at once")
                .await
                .expect("a cancel request")
        );
        let outcome = tokio::time::timeout(Duration::from_secs(5), execution.outcome())
            .await
            .unwrap_or_else(|_| {
                panic!("cancel {i}: not applied within 5 s: the owner missed its wake-up")
            });
        assert!(matches!(outcome, Outcome::Cancelled(_)), "{outcome:?}");
    }
}

/// How many executions [`cancels_wake_the_owner`] cancels.
pub const CANCELS: usize = 100;

/// A service over the [`Ticker`].
type Service = AdapterService<harness_core::adapter::Simple<Ticker>>;

fn replicas(
    stores: &(Arc<dyn ExecutionStore>, Arc<dyn ExecutionStore>),
    adapter: impl Fn() -> harness_core::adapter::Simple<Ticker>,
) -> (Service, Service) {
    let make = |store: &Arc<dyn ExecutionStore>, name: &str| {
        AdapterService::builder(adapter())
            .store(Arc::clone(store), ReplicaId::new(name))
            .lease_ttl(Duration::from_secs(3))
            .build()
    };
    (make(&stores.0, "a"), make(&stores.1, "b"))
}

async fn one_key_one_execution_on_two_replicas(
    stores: &(Arc<dyn ExecutionStore>, Arc<dyn ExecutionStore>),
) {
    let (a, b) = replicas(stores, || Ticker::asking(Some(3), Duration::from_millis(1)));
    let key: IdempotencyKey = format!("two-{}", ExecutionId::generate())
        .parse()
        .expect("a key");
    let request = || ExecutionRequest::new("ask").with_idempotency_key(key.clone());
    // Both replicas at once: one execution; the loser's handle mirrors it.
    let (first, second) = tokio::join!(a.start(request()), b.start(request()));
    let (first, second) = (first.expect("starts"), second.expect("starts"));
    assert_eq!(first.id(), second.id(), "one key, one execution");
    let action = until_action(&second).await;
    assert_eq!(until_action(&first).await.id, action.id);
    // Answered through either handle (whichever runs it): the run goes on, once.
    second
        .respond(action.approve_all())
        .await
        .expect("the answer through either handle");
    assert!(matches!(outcome(&first).await, Outcome::Succeeded(_)));
    assert!(matches!(outcome(&second).await, Outcome::Succeeded(_)));
    assert_eq!(
        shown(&first),
        shown(&second),
        "the mirror shows the same log"
    );
    let other = b
        .start(ExecutionRequest::new("something else").with_idempotency_key(key.clone()))
        .await
        .expect_err("another request under the key");
    assert_eq!(other.code(), &ErrorCode::IDEMPOTENCY_CONFLICT);

    // A cancel through a mirror reaches the owner.
    let (a, b) = replicas(stores, || Ticker::new(None, Duration::from_millis(2)));
    let key: IdempotencyKey = format!("cancel-{}", ExecutionId::generate())
        .parse()
        .expect("a key");
    let owner = a
        .start(ExecutionRequest::new("tick").with_idempotency_key(key.clone()))
        .await
        .expect("starts");
    let mirror = b
        .start(ExecutionRequest::new("tick").with_idempotency_key(key))
        .await
        .expect("the mirror");
    let _ = mirror.cancel(CancelReason::new("through the mirror"));
    assert!(matches!(outcome(&owner).await, Outcome::Cancelled(_)));
    assert!(matches!(outcome(&mirror).await, Outcome::Cancelled(_)));
}

async fn until_action(execution: &ExecutionHandle) -> harness_core::action::ActionRequest {
    let mut events = execution.events(Cursor::START);
    let found = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = events.next().await {
            if let EventPayload::ActionRequested(request) = event.payload() {
                return Some((**request).clone());
            }
        }
        None
    })
    .await
    .expect("the action within 10 s");
    found.expect("an action before the end")
}

async fn outcome(execution: &ExecutionHandle) -> Outcome {
    tokio::time::timeout(Duration::from_secs(10), execution.outcome())
        .await
        .expect("the outcome within 10 s")
}

async fn answers_race_on_two_replicas(stores: &(Arc<dyn ExecutionStore>, Arc<dyn ExecutionStore>)) {
    let (a, b) = replicas(stores, || Ticker::asking(Some(3), Duration::from_millis(1)));
    let execution = a.start(ExecutionRequest::new("ask")).await.expect("starts");
    let request = until_action(&execution).await;
    let id = execution.id().clone();
    let (a, b) = (Arc::new(a), Arc::new(b));
    // 250 answers through the owner's handle, 250 through the other replica, at once.
    let tasks: Vec<_> = (0..500)
        .map(|n| {
            let (execution, b, id, answer) = (
                execution.clone(),
                Arc::clone(&b),
                id.clone(),
                request.approve_all(),
            );
            tokio::spawn(async move {
                if n % 2 == 0 {
                    execution.respond(answer).await
                } else {
                    b.respond_to(&id, answer).await
                }
            })
        })
        .collect();
    let mut accepted = 0;
    for task in tasks {
        match task.await.expect("a racer") {
            Ok(()) => accepted += 1,
            Err(e) => assert!(
                [
                    ErrorCode::ACTION_ALREADY_RESOLVED,
                    ErrorCode::ACTION_NOT_FOUND,
                    ErrorCode::EXECUTION_TERMINAL
                ]
                .contains(e.code()),
                "{e:?}"
            ),
        }
    }
    assert_eq!(
        accepted, 1,
        "two replicas, 500 concurrent answers: one accepted"
    );
    assert!(matches!(outcome(&execution).await, Outcome::Succeeded(_)));
    let stored = stores.0.read(&id, Cursor::START, 1000).await.expect("read");
    assert_eq!(
        stored
            .iter()
            .filter(|e| e.kind() == EventKind::ActionResolved)
            .count(),
        1
    );
    drop(a);
}

async fn an_answer_sent_to_another_replica_reaches_the_owner(
    stores: &(Arc<dyn ExecutionStore>, Arc<dyn ExecutionStore>),
) {
    let (a, b) = replicas(stores, || Ticker::asking(Some(3), Duration::from_millis(1)));
    let execution = a.start(ExecutionRequest::new("ask")).await.expect("starts");
    let request = until_action(&execution).await;
    b.respond_to(execution.id(), request.approve_all())
        .await
        .expect("the other replica takes the answer");
    assert!(matches!(outcome(&execution).await, Outcome::Succeeded(_)));
    let ticks = execution
        .log()
        .snapshot(Cursor::START)
        .iter()
        .filter(|e| e.kind() == EventKind::MessageDelta)
        .count();
    assert_eq!(ticks, 3, "the run went on after the answer");
    let again = b
        .respond_to(execution.id(), request.approve_all())
        .await
        .expect_err("answered already");
    // A duplicate is a duplicate, even after the execution ended (the runtime model's rule).
    assert_eq!(again.code(), &ErrorCode::ACTION_ALREADY_RESOLVED);
}

async fn cancels_race_on_two_replicas(stores: &(Arc<dyn ExecutionStore>, Arc<dyn ExecutionStore>)) {
    let (a, b) = replicas(stores, || Ticker::new(None, Duration::from_millis(2)));
    let execution = a
        .start(ExecutionRequest::new("tick"))
        .await
        .expect("starts");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let b = Arc::new(b);
    let tasks: Vec<_> = (0..100)
        .map(|n| {
            let (execution, b) = (execution.clone(), Arc::clone(&b));
            tokio::spawn(async move {
                if n % 2 == 0 {
                    let _ = execution.cancel(CancelReason::new("local"));
                } else {
                    let _ = b.request_cancel(execution.id(), "remote").await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a racer");
    }
    assert!(matches!(outcome(&execution).await, Outcome::Cancelled(_)));
    let stored = stores
        .0
        .read(execution.id(), Cursor::START, 100_000)
        .await
        .expect("read");
    assert_eq!(
        stored
            .iter()
            .filter(|e| e.kind() == EventKind::RunCancelled)
            .count(),
        1,
        "one run.cancelled"
    );
    assert_eq!(
        stored
            .iter()
            .filter(|e| e.kind() == EventKind::RunCancelling)
            .count(),
        1,
        "one cancel began"
    );

    // A cancel sent only to the other replica reaches the owner.
    let execution = a
        .start(ExecutionRequest::new("tick"))
        .await
        .expect("starts");
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(b.request_cancel(execution.id(), "from b").await, Ok(true));
    let Outcome::Cancelled(reason) = outcome(&execution).await else {
        panic!("cancelled from the other replica");
    };
    assert_eq!(reason.reason.as_deref(), Some("from b"));
}

/// Two durable services (replicas `a` and `b`) over `stores` (the same store twice, or two
/// connections to one database) running [`Ticker`]s: an answer sent to `b` reaches the
/// execution `a` runs; 500 concurrent answers, half through `a`'s handle and half through
/// `b`, one accepted; 100 concurrent cancels on both, one `run.cancelled`; a cancel sent to
/// `b` alone reaches `a`.
///
/// # Panics
/// When any of that does not hold.
pub async fn two_replicas(a: Arc<dyn ExecutionStore>, b: Arc<dyn ExecutionStore>) {
    let stores = (a, b);
    one_key_one_execution_on_two_replicas(&stores).await;
    an_answer_sent_to_another_replica_reaches_the_owner(&stores).await;
    answers_race_on_two_replicas(&stores).await;
    cancels_race_on_two_replicas(&stores).await;
}

/// An adapter for durability tests: each run streams `deltas` message deltas (`tick 1`,
/// `tick 2`, ...) `interval` apart, then succeeds; `deltas: None` streams until cancelled.
#[derive(Debug)]
pub struct Ticker {
    descriptor: harness_core::manifest::HarnessDescriptor,
    deltas: Option<u64>,
    interval: Duration,
    asks: bool,
}

impl Ticker {
    /// The adapter `ticker`.
    ///
    /// # Panics
    /// Never: its descriptor is valid.
    #[must_use]
    pub fn new(deltas: Option<u64>, interval: Duration) -> harness_core::adapter::Simple<Self> {
        harness_core::adapter::Simple::new(Self::plain(deltas, interval))
    }

    fn plain(deltas: Option<u64>, interval: Duration) -> Self {
        Self {
            descriptor: Self::descriptor_with(harness_core::capability::CapabilityReport::new()),
            deltas,
            interval,
            asks: false,
        }
    }

    /// The ticker's descriptor, declaring `capabilities`.
    fn descriptor_with(
        capabilities: harness_core::capability::CapabilityReport,
    ) -> harness_core::manifest::HarnessDescriptor {
        use harness_core::manifest::{ContractVersion, ExecutionMode, HarnessDescriptor};
        HarnessDescriptor::builder("ticker".parse().expect("an id"), "0.1.0")
            .contract_version(ContractVersion::V1)
            .execution_mode(ExecutionMode::in_process())
            .capabilities(capabilities)
            .build()
            .expect("a valid descriptor")
    }

    /// The same, but each execution first asks to approve one tool call (`t1`, tool `touch`)
    /// and ticks only once it is answered; it declares `interrupt.tool_approval` (a pause its
    /// descriptor did not declare would fail the run).
    #[must_use]
    pub fn asking(deltas: Option<u64>, interval: Duration) -> harness_core::adapter::Simple<Self> {
        Self::asking_with(deltas, interval, &[])
    }

    /// [`asking`](Self::asking), declaring `session.cross_replica_resume`: an execution
    /// paused on its approval is taken over by the replica that recovers it (a
    /// [`SimpleAdapter`](harness_core::adapter::SimpleAdapter) keeps nothing between
    /// segments, so the bridge's restore is all it needs).
    #[must_use]
    pub fn resumable(
        deltas: Option<u64>,
        interval: Duration,
    ) -> harness_core::adapter::Simple<Self> {
        Self::asking_with(
            deltas,
            interval,
            &[harness_core::capability::CapabilityKey::SessionCrossReplicaResume],
        )
    }

    fn asking_with(
        deltas: Option<u64>,
        interval: Duration,
        more: &[harness_core::capability::CapabilityKey],
    ) -> harness_core::adapter::Simple<Self> {
        use harness_core::capability::{Capability, CapabilityKey, CapabilityReport};
        let mut ticker = Self::plain(deltas, interval);
        ticker.asks = true;
        let declared = more
            .iter()
            .chain([&CapabilityKey::InterruptToolApproval])
            .fold(CapabilityReport::new(), |report, key| {
                report.with(*key, Capability::native())
            });
        ticker.descriptor = Self::descriptor_with(declared);
        harness_core::adapter::Simple::new(ticker)
    }
}

impl harness_core::manifest::Describe for Ticker {
    fn descriptor(&self) -> &harness_core::manifest::HarnessDescriptor {
        &self.descriptor
    }
}

impl harness_core::adapter::SimpleAdapter for Ticker {
    fn stream(
        &self,
        context: harness_core::adapter::RunContext,
    ) -> harness_core::adapter::BoxStream<'static, harness_core::adapter::EventResult> {
        use harness_core::adapter::AdapterEvent;
        use harness_core::event::{Content, RunSucceeded};
        let (deltas, interval) = (self.deltas, self.interval);
        if self.asks && context.resume.is_none() {
            use harness_core::action::{ActionRequest, ApprovalRequest, ToolCallApproval};
            let call = ToolCallApproval::new(
                "t1".parse().expect("a call id"),
                "touch",
                serde_json::json!({"path": "approved.txt"}),
                serde_json::json!({"type": "object"}),
            )
            .expect("a valid call");
            let request =
                ActionRequest::approval(ApprovalRequest::new([call]).expect("a valid approval"));
            return Box::pin(futures_util::stream::once(async move {
                Ok(AdapterEvent::Action(request))
            }));
        }
        Box::pin(futures_util::stream::unfold(1u64, move |n| {
            let cancel = context.cancellation.clone();
            async move {
                if deltas.is_some_and(|d| n > d) {
                    if deltas.is_some_and(|d| n == d + 1) {
                        return Some((Ok(AdapterEvent::Completed(RunSucceeded::default())), n + 1));
                    }
                    return None;
                }
                if interval.is_zero() {
                    if cancel.is_cancelled() {
                        return None;
                    }
                } else {
                    tokio::select! {
                        () = tokio::time::sleep(interval) => {}
                        () = cancel.cancelled() => return None,
                    }
                }
                let delta = Content::MessageDelta(TextDelta::new(format!("tick {n}")));
                Some((Ok(AdapterEvent::Content(delta)), n + 1))
            }
        }))
    }
}

/// The rules of [`ThreadStateStore`](harness_core::session::ThreadStateStore), checked on
/// `store`: bindings isolated, a binding bound to its first conversation, compare-and-set by
/// version with versions never reused, epochs fenced (a newer one drops the older state),
/// `clear` moving to the next epoch with one winner among racing clears.
///
/// # Panics
/// At the first rule the store breaks, naming it.
pub async fn thread_state<S: harness_core::session::ThreadStateStore + Clone + 'static>(store: S) {
    use harness_core::id::ConversationId;
    use harness_core::session::{BindingId, SessionBinding, StateError};
    let conv = ConversationId::generate();
    let mine = SessionBinding::new(BindingId::generate(), conv.clone());
    let theirs = SessionBinding::new(BindingId::generate(), conv.clone());
    let key: harness_core::session::StateKey = "head".parse().expect("a key");

    let v1 = store
        .put(&mine, &key, b"one".to_vec(), None)
        .await
        .expect("a first write");
    assert_eq!(
        store.get(&theirs, &key).await,
        Ok(None),
        "another binding sees nothing"
    );
    assert!(store.list_keys(&theirs).await.expect("keys").is_empty());
    let entry = store
        .get(&mine, &key)
        .await
        .expect("read")
        .expect("written");
    assert_eq!((entry.value.as_slice(), entry.version), (&b"one"[..], v1));

    // Compare-and-set.
    assert!(
        matches!(
            store.put(&mine, &key, b"x".to_vec(), None).await,
            Err(StateError::VersionConflict { actual: Some(a), .. }) if a == v1
        ),
        "a write expecting no value conflicts"
    );
    let v2 = store
        .put(&mine, &key, b"two".to_vec(), Some(v1))
        .await
        .expect("the expected version");
    assert!(v2 > v1, "versions grow");
    let v3 = store
        .put(&theirs, &key, b"t".to_vec(), None)
        .await
        .expect("the other binding");
    assert!(
        v3 != v1 && v3 != v2,
        "versions are never reused, store-wide"
    );
    assert!(matches!(
        store.delete(&mine, &key, v1).await,
        Err(StateError::VersionConflict { .. })
    ));
    store.delete(&mine, &key, v2).await.expect("delete");
    assert_eq!(store.get(&mine, &key).await, Ok(None));

    // One conversation per binding.
    let stranger = SessionBinding::new(mine.binding_id().clone(), ConversationId::generate());
    assert!(
        matches!(
            store.get(&stranger, &key).await,
            Err(StateError::BindingMismatch { .. })
        ),
        "a binding serves one conversation"
    );

    // Epochs: clear moves on; the old epoch is fenced; racing clears, one wins.
    store
        .put(
            &theirs,
            &"other".parse().expect("a key"),
            b"o".to_vec(),
            None,
        )
        .await
        .expect("write");
    let next = store.clear(&theirs).await.expect("clear");
    assert_eq!(next.epoch(), theirs.epoch() + 1);
    assert!(
        store.list_keys(&next).await.expect("keys").is_empty(),
        "cleared"
    );
    assert!(
        matches!(
            store.get(&theirs, &key).await,
            Err(StateError::StaleEpoch { .. })
        ),
        "the old epoch is fenced"
    );
    let racers: Vec<_> = (0..20)
        .map(|_| {
            let (store, next) = (store.clone(), next.clone());
            tokio::spawn(async move { store.clear(&next).await })
        })
        .collect();
    let mut won = 0;
    for racer in racers {
        match racer.await.expect("a racer") {
            Ok(_) => won += 1,
            Err(StateError::StaleEpoch { .. }) => {}
            Err(other) => panic!("a racing clear failed otherwise: {other}"),
        }
    }
    assert_eq!(won, 1, "of racing clears of one epoch, one wins");
    // A handle at a newer epoch moves the binding there, dropping what the older held.
    let fresh = SessionBinding::new(BindingId::generate(), conv);
    store
        .put(&fresh, &key, b"old".to_vec(), None)
        .await
        .expect("write");
    let later = fresh.clone().with_epoch(fresh.epoch() + 5);
    assert_eq!(store.get(&later, &key).await, Ok(None));
    assert!(matches!(
        store.get(&fresh, &key).await,
        Err(StateError::StaleEpoch { .. })
    ));
}

/// The rules of a [`FileStore`](crate::files::FileStore): a file is its caller's alone
/// (another caller's id is not found, not deletable), reads its bytes on demand, is gone once
/// deleted (a handle opened before fails `FILE_NOT_FOUND`), is not found from its expiry on
/// and is swept then while unexpired files stay; concurrent puts by many callers each find
/// their own file only.
///
/// # Panics
/// At the first rule the store breaks, naming it.
pub async fn files<S: crate::files::FileStore + Clone>(store: S) {
    use crate::files::NewFile;
    use harness_core::file::FileId;
    use harness_core::id::CallerId;

    let caller = |name: &str| -> CallerId {
        format!(
            "{name}-{}",
            ExecutionId::generate().as_str().replace('_', "-")
        )
        .parse()
        .expect("a caller id")
    };
    let new = |bytes: &[u8], retention: Duration| NewFile {
        name: "notes.md".into(),
        media_type: "text/markdown".parse().expect("a media type"),
        bytes: bytes.to_vec().into(),
        retention,
    };
    let (alice, bob) = (caller("alice"), caller("bob"));

    let info = store.put(&alice, new(b"# hello", LONG)).await.expect("put");
    assert_eq!(info.size, 7, "a put file reports its size");
    assert_eq!(info.name, "notes.md");
    assert_eq!(info.media_type.as_str(), "text/markdown");
    assert!(
        info.expires_at > info.created_at,
        "a file expires after it is put"
    );
    assert_eq!(
        store.info(&alice, &info.id).await.expect("info"),
        Some(info.clone()),
        "the owner finds its file as it was put"
    );
    let opened = store
        .open(&alice, &info.id)
        .await
        .expect("open")
        .expect("the owner opens its file");
    assert_eq!(opened.name, "notes.md");
    assert_eq!(opened.handle.size(), 7);
    assert_eq!(&opened.handle.read().await.expect("read")[..], b"# hello");

    // Another caller: not found, exactly as an id that never existed.
    let never = FileId::generate();
    for (who, id) in [(&bob, &info.id), (&alice, &never)] {
        assert_eq!(store.info(who, id).await.expect("info"), None);
        assert!(store.open(who, id).await.expect("open").is_none());
        assert!(!store.delete(who, id).await.expect("delete"));
    }
    assert!(
        store.info(&alice, &info.id).await.expect("info").is_some(),
        "another caller's delete leaves the file"
    );

    // Deleted: not found, and a handle opened before fails its read.
    assert!(store.delete(&alice, &info.id).await.expect("delete"));
    assert_eq!(store.info(&alice, &info.id).await.expect("info"), None);
    assert!(!store.delete(&alice, &info.id).await.expect("delete again"));
    let err = opened
        .handle
        .read()
        .await
        .expect_err("a deleted file's read fails");
    assert_eq!(err.code(), &ErrorCode::FILE_NOT_FOUND, "{err}");

    // Expiry: not found from then on, swept; an unexpired file stays.
    let brief = store
        .put(&alice, new(b"brief", Duration::from_millis(300)))
        .await
        .expect("put");
    let kept = store.put(&alice, new(b"kept", LONG)).await.expect("put");
    assert!(store.info(&alice, &brief.id).await.expect("info").is_some());
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        store.info(&alice, &brief.id).await.expect("info"),
        None,
        "an expired file is not found, swept or not"
    );
    assert!(store.open(&alice, &brief.id).await.expect("open").is_none());
    assert!(
        store.sweep().await.expect("sweep") >= 1,
        "the sweep deletes it"
    );
    assert!(
        store.info(&alice, &kept.id).await.expect("info").is_some(),
        "the sweep leaves unexpired files"
    );

    // Many callers at once, each finding its own file only.
    let racers: Vec<_> = (0..64)
        .map(|n| {
            let store = store.clone();
            let who = caller(&format!("racer{n}"));
            tokio::spawn(async move {
                let body = format!("file of racer {n}");
                let info = store
                    .put(&who, new(body.as_bytes(), LONG))
                    .await
                    .expect("put");
                (who, info, body)
            })
        })
        .collect();
    let mut put = Vec::new();
    for racer in racers {
        put.push(racer.await.expect("a racer"));
    }
    for (n, (who, info, body)) in put.iter().enumerate() {
        let file = store
            .open(who, &info.id)
            .await
            .expect("open")
            .expect("each racer finds its file");
        assert_eq!(
            &file.handle.read().await.expect("read")[..],
            body.as_bytes()
        );
        let (other, _, _) = &put[(n + 1) % put.len()];
        assert!(store.open(other, &info.id).await.expect("open").is_none());
    }
}
