//! 100,000 deltas of one execution through the default layer stack, side by side in one run:
//! in memory (no store), and durable on `MemoryStore`, SQLite and PostgreSQL (a throwaway
//! cluster, as the tests start one). Events/s from start to outcome (every event stored
//! before it is shown) and the ratios to the in-memory run. One execution takes tens of
//! milliseconds, so the four alternate for several rounds and the medians are compared (a
//! single round's in-memory figure alone varied 1.4-1.9 M events/s on a shared machine).
//!
//! `cargo bench -p harness-store --bench durable`; `DURABLE_BENCH_EVENTS` for another size,
//! `DURABLE_BENCH_ROUNDS` for another number of rounds (default 7), and
//! `DURABLE_BENCH_ONLY=memory|memory-store|sqlite|postgres|recovery` runs one part alone (for
//! profiling; no ratios then).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use harness_core::id::Cursor;
use harness_core::service::{ExecutionHandle, ExecutionRequest};
use harness_core::store::{ExecutionStore, MemoryStore, ReplicaId};
use harness_layers::stack::{HarnessStack, StackService};
use harness_store::suite::Ticker;
use harness_store::{PostgresStore, SqliteStore};
use tower::{Service, ServiceExt};

#[path = "../tests/common/mod.rs"]
mod common;

async fn run(mut service: StackService) -> Duration {
    let begun = Instant::now();
    let execution: ExecutionHandle = service
        .ready()
        .await
        .expect("ready")
        .call(ExecutionRequest::new("tick"))
        .await
        .expect("starts");
    let mut events = execution.events(Cursor::START);
    let mut n = 0usize;
    while events.next().await.is_some() {
        n += 1;
    }
    let took = begun.elapsed();
    assert!(n > 0);
    took
}

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

const KINDS: [&str; 4] = ["memory", "memory-store", "sqlite", "postgres"];

/// `DURABLE_BENCH_ONLY=recovery`: the recovery figures alone.
const RECOVERY: &str = "recovery";

fn main() {
    let n: u64 = env("DURABLE_BENCH_EVENTS").unwrap_or(100_000);
    let rounds: usize = env::<usize>("DURABLE_BENCH_ROUNDS").unwrap_or(7).max(1);
    let only: Option<String> = env("DURABLE_BENCH_ONLY");
    if let Some(only) = &only {
        assert!(
            KINDS.contains(&only.as_str()),
            "DURABLE_BENCH_ONLY is one of {KINDS:?}"
        );
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let cluster = common::Cluster::start();
    rt.block_on(async {
        let adapter = || Ticker::new(Some(n), Duration::ZERO);
        let stack = HarnessStack::defaults_for(&adapter()).expect("the default stack");
        let replica = ReplicaId::new("bench");
        let dir = common::scratch("durable-bench");
        let sqlite = Arc::new(SqliteStore::open(dir.join("bench.db")).expect("open"));
        let postgres = Arc::new(common::connect(&cluster).await as PostgresStore);
        let memory_store = Arc::new(MemoryStore::new());

        let mut took: Vec<Vec<Duration>> = vec![Vec::new(); KINDS.len()];
        for _ in 0..rounds {
            for (k, kind) in KINDS.iter().enumerate() {
                if only.as_deref().is_some_and(|o| o != *kind) {
                    continue;
                }
                let service = match k {
                    0 => stack.service(adapter()),
                    1 => {
                        stack.durable_service(adapter(), Arc::clone(&memory_store), replica.clone())
                    }
                    2 => stack.durable_service(adapter(), Arc::clone(&sqlite), replica.clone()),
                    _ => stack.durable_service(adapter(), Arc::clone(&postgres), replica.clone()),
                };
                took[k].push(run(service).await);
            }
        }
        let rate = |d: Duration| (n + 5) as f64 / d.as_secs_f64();
        println!(
            "{n} deltas of one execution through the default stack, start to outcome \
             (median of {rounds} alternating rounds):"
        );
        let medians: Vec<Option<Duration>> = took
            .into_iter()
            .map(|t| (!t.is_empty()).then(|| median(t)))
            .collect();
        if let Some(base) = medians[0] {
            println!("  in memory, no store  {:>10.0} events/s", rate(base));
        }
        for (name, took) in ["MemoryStore", "SQLite", "PostgreSQL"]
            .iter()
            .zip(&medians[1..])
        {
            let Some(took) = *took else { continue };
            match medians[0] {
                Some(base) => println!(
                    "  durable, {name:<11} {:>10.0} events/s   ratio to in memory {:.3}",
                    rate(took),
                    base.as_secs_f64() / took.as_secs_f64()
                ),
                None => println!("  durable, {name:<11} {:>10.0} events/s", rate(took)),
            }
        }
        if only.as_deref().is_none_or(|o| o == RECOVERY) {
            recovery(&dir).await;
        }
        let _ = std::fs::remove_dir_all(&dir);
    });
}

/// 10,000 executions awaiting an approval whose replica died (their leases lapsed): the
/// time one replica's `recover` takes on SQLite to end them all (an adapter that cannot
/// take a pause over), and to restore them all (one that can: each then awaits its answer
/// on the survivor), side by side.
async fn recovery(dir: &std::path::Path) {
    let ended = recover_awaiting(dir, "recovery-ended.db", false).await;
    let restored = recover_awaiting(dir, "recovery-restored.db", true).await;
    println!(
        "recovery: 10000 executions awaiting approval, their replica dead, on SQLite: ended \
         in {} ms, restored in {} ms",
        ended.as_millis(),
        restored.as_millis()
    );
}

async fn recover_awaiting(dir: &std::path::Path, file: &str, resumable: bool) -> Duration {
    use futures_util::stream::{self, StreamExt as _};
    use harness_core::action::{ActionRequest, ApprovalRequest, ToolCallApproval};
    use harness_core::event::{AwaitingAction, EventPayload};
    use harness_core::service::{AdapterService, Recovery};
    use harness_store::suite;
    let count = 10_000;
    let store = Arc::new(SqliteStore::open(dir.join(file)).expect("open"));
    let dead = ReplicaId::new("dead");
    stream::iter(0..count)
        .for_each_concurrent(256, |_| {
            let (store, dead) = (Arc::clone(&store), dead.clone());
            async move {
                let record = suite::record();
                let id = record.id.clone();
                let record = harness_core::store::ExecutionRecord {
                    adapter: "ticker".into(),
                    request: serde_json::json!({"message": "ask"}),
                    ..record
                };
                store.create(record).await.expect("create");
                let renewed = store
                    .acquire(&id, &dead, Duration::from_secs(1))
                    .await
                    .expect("lease");
                let call = ToolCallApproval::new(
                    "t1".parse().expect("a call id"),
                    "touch",
                    serde_json::json!({"path": "approved.txt"}),
                    serde_json::json!({"type": "object"}),
                )
                .expect("a call");
                let action =
                    ActionRequest::approval(ApprovalRequest::new([call]).expect("an approval"));
                let action_id = action.id.clone();
                store
                    .append(
                        &renewed,
                        &[
                            suite::event(&id, 1),
                            suite::event(&id, 2),
                            suite::event_with(
                                &id,
                                3,
                                EventPayload::ActionRequested(Box::new(action)),
                            ),
                            suite::event_with(
                                &id,
                                4,
                                EventPayload::RunAwaitingApproval(AwaitingAction { action_id }),
                            ),
                        ],
                    )
                    .await
                    .expect("append");
                // The replica dies: its lease lapses.
                store
                    .acquire(&id, &dead, Duration::from_millis(1))
                    .await
                    .expect("shorten");
            }
        })
        .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let adapter = if resumable {
        Ticker::resumable(Some(1), Duration::ZERO)
    } else {
        Ticker::asking(Some(1), Duration::ZERO)
    };
    let service = AdapterService::builder(adapter)
        .durable(Arc::clone(&store), ReplicaId::new("survivor"))
        .build();
    let begun = Instant::now();
    let recovered = service.recover().await.expect("recover");
    let took = begun.elapsed();
    assert_eq!(recovered.len(), count);
    let all_restored = recovered.iter().all(|r| matches!(r, Recovery::Restored(_)));
    assert_eq!(all_restored, resumable);
    if let Some(Recovery::Restored(id)) = recovered.first() {
        // A restored execution is live: its answer resumes it to the end.
        let execution = service.attach(id).await.expect("attach");
        let mut events = execution.events(harness_core::id::Cursor::START);
        let request = loop {
            let event = events.next().await.expect("the action");
            if let EventPayload::ActionRequested(request) = event.payload() {
                break (**request).clone();
            }
        };
        service
            .respond_to(id, request.approve_all())
            .await
            .expect("answered");
        let outcome = tokio::time::timeout(Duration::from_secs(30), execution.outcome())
            .await
            .expect("ends");
        assert!(
            matches!(outcome, harness_core::service::Outcome::Succeeded(_)),
            "{outcome:?}"
        );
    }
    took
}
