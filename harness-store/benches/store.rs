//! Store throughput, memory and SQLite side by side in one run: appends/s for one execution
//! writing one event at a time (each append awaited: the worst case, no batching), for one
//! execution appending 64 events at a time, for 1,000 concurrent executions (group commit),
//! and SQLite's bytes per event on disk.
//!
//! `cargo bench -p harness-store --bench store` (set `STORE_BENCH_EVENTS` for another size).

use std::time::{Duration, Instant};

use harness_core::store::{ExecutionStore, MemoryStore, ReplicaId};
use harness_store::{SqliteStore, suite};

fn events_total() -> u64 {
    std::env::var("STORE_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

/// One execution, `n` appends of one event, each awaited.
async fn sequential<S: ExecutionStore>(store: &S, n: u64) -> Duration {
    let record = suite::record();
    let id = record.id.clone();
    store.create(record).await.expect("create");
    let lease = store
        .acquire(&id, &ReplicaId::new("bench"), Duration::from_secs(600))
        .await
        .expect("lease");
    let begun = Instant::now();
    for seq in 1..=n {
        store
            .append(&lease, &[suite::event(&id, seq)])
            .await
            .expect("append");
    }
    begun.elapsed()
}

/// One execution, `n` events in appends of `batch` (what a streaming execution's persister
/// does: the deltas that arrived during one commit go in the next).
async fn batched<S: ExecutionStore>(store: &S, n: u64, batch: u64) -> Duration {
    let record = suite::record();
    let id = record.id.clone();
    store.create(record).await.expect("create");
    let lease = store
        .acquire(&id, &ReplicaId::new("bench"), Duration::from_secs(600))
        .await
        .expect("lease");
    let begun = Instant::now();
    let mut seq = 1;
    while seq <= n {
        let last = (seq + batch - 1).min(n);
        store
            .append(&lease, &suite::events(&id, seq, last))
            .await
            .expect("append");
        seq = last + 1;
    }
    begun.elapsed()
}

/// `executions` concurrent executions, `n / executions` appends each.
async fn concurrent<S: ExecutionStore + Clone>(store: &S, n: u64, executions: u64) -> Duration {
    let per = n / executions;
    let mut ready = Vec::new();
    for _ in 0..executions {
        let record = suite::record();
        let id = record.id.clone();
        store.create(record).await.expect("create");
        let lease = store
            .acquire(&id, &ReplicaId::new("bench"), Duration::from_secs(600))
            .await
            .expect("lease");
        ready.push((id, lease));
    }
    let begun = Instant::now();
    let tasks: Vec<_> = ready
        .into_iter()
        .map(|(id, lease)| {
            let store = store.clone();
            tokio::spawn(async move {
                for seq in 1..=per {
                    store
                        .append(&lease, &[suite::event(&id, seq)])
                        .await
                        .expect("append");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    begun.elapsed()
}

fn rate(n: u64, took: Duration) -> f64 {
    n as f64 / took.as_secs_f64()
}

fn main() {
    let n = events_total();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = std::env::temp_dir().join(format!("harness-store-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    rt.block_on(async {
        let memory = MemoryStore::new();
        let sqlite = SqliteStore::open(dir.join("bench.db")).expect("open");

        let m = rate(n, sequential(&memory, n).await);
        let s = rate(n, sequential(&sqlite, n).await);
        println!("one execution, {n} appends of one event, each awaited:");
        println!("  memory  {m:>12.0} events/s");
        println!(
            "  sqlite  {s:>12.0} events/s   ratio sqlite/memory {:.3}",
            s / m
        );

        let m = rate(n, batched(&memory, n, 64).await);
        let s = rate(n, batched(&sqlite, n, 64).await);
        println!("one execution, {n} events in appends of 64:");
        println!("  memory  {m:>12.0} events/s");
        println!(
            "  sqlite  {s:>12.0} events/s   ratio sqlite/memory {:.3}",
            s / m
        );

        let m = rate(n, concurrent(&memory, n, 1000).await);
        let s = rate(n, concurrent(&sqlite, n, 1000).await);
        println!("1,000 concurrent executions, {n} appends of one event in all:");
        println!("  memory  {m:>12.0} events/s");
        println!(
            "  sqlite  {s:>12.0} events/s   ratio sqlite/memory {:.3}",
            s / m
        );
        drop(sqlite);
    });
    let bytes: u64 = std::fs::read_dir(&dir)
        .expect("dir")
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    println!(
        "sqlite on disk: {bytes} bytes for {} events ({} executions): {:.0} bytes per event",
        3 * n,
        1002,
        bytes as f64 / (3 * n) as f64
    );
    let _ = std::fs::remove_dir_all(&dir);
}
