//! Memory held by idle conversations, with and without the service's pool of paused runtimes
//! (`ServiceConfig::runtime_pool`), side by side.
//!
//! Each conversation runs one turn that remembers a line (thread state) and pauses on a tool
//! approval: an idle conversation is one waiting for its answer, the only state in which a
//! runtime outlives a turn. For each pool setting the bench starts `N` such conversations
//! (10,000; `HARNESS_BENCH_QUICK=1`: 1,000), waits until every one awaits its approval and
//! the pool has let go of what it evicts, and prints the heap held (an instrumented system
//! allocator: bytes allocated minus bytes freed, exact whatever the allocator caches), the
//! resident set growth as a cross-check, and how many runtimes are alive. Then it answers
//! every conversation (an evicted one is restored on a fresh runtime) and checks each ended
//! `run.succeeded`, so the figures are those of conversations that still work.
//!
//! ```sh
//! cargo bench --bench eviction
//! ```
//!
//! Prints, never asserts on memory. What a scripted runtime holds is small (its script and
//! position); a real provider's runtime holds more (an agent process, an HTTP client and its
//! buffers, a transcript), which the pool bounds the same way: the difference between the
//! rows is what the evicted runtimes held, the rest (driver, log, handle, thread state) is
//! the conversation's own.

use std::alloc::System;
use std::time::{Duration, Instant};

use harness_core::id::ConversationId;
use harness_core::lifecycle::ExecutionState;
use harness_core::service::{
    AdapterService, ExecutionHandle, ExecutionRequest, Outcome, RuntimePoolConfig, ServiceConfig,
};
use harness_scripted::{ApprovalCall, Script, ScriptedAdapter};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn conversations() -> usize {
    if std::env::var_os("HARNESS_BENCH_QUICK").is_some() {
        1_000
    } else {
        10_000
    }
}

/// Remembers a line, says something, pauses on one approval, then completes.
fn script() -> Script {
    let call = ApprovalCall::new(
        "call_1".parse().expect("a valid call id"),
        "shell",
        serde_json::json!({"cmd": "ls"}),
    );
    Script::builder()
        .remember("the user likes short answers")
        .text("Listing the files.")
        .approval([call])
        .complete("listed")
        .try_build()
        .expect("the bench script is valid")
}

fn held() -> i64 {
    let stats = INSTRUMENTED_SYSTEM.stats();
    stats.bytes_allocated as i64 - stats.bytes_deallocated as i64
}

fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

struct Measured {
    label: &'static str,
    per_conversation: f64,
    total_mib: f64,
    rss_per_conversation: Option<f64>,
    live_runtimes: u64,
    evictions: u64,
    answered_in: Duration,
}

async fn measure(label: &'static str, pool: RuntimePoolConfig, n: usize) -> Measured {
    let adapter = ScriptedAdapter::new(script());
    let stats = adapter.stats();
    let service = AdapterService::with_config(
        adapter,
        ServiceConfig {
            runtime_pool: pool,
            ..ServiceConfig::default()
        },
    );
    let mut handles: Vec<ExecutionHandle> = Vec::with_capacity(n);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (before, rss_before) = (held(), resident_bytes());
    for _ in 0..n {
        let request =
            ExecutionRequest::new("list the files").with_conversation(ConversationId::generate());
        handles.push(service.start(request).await.expect("started"));
    }
    // Every conversation paused, and what the pool evicts let go.
    loop {
        let waiting = handles
            .iter()
            .filter(|h| h.state() == ExecutionState::AwaitingApproval)
            .count();
        let live = stats.snapshot().live_runtimes();
        if waiting == n && live <= pool.max_idle.min(n) as u64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let after = held();
    let rss = resident_bytes()
        .zip(rss_before)
        .map(|(a, b)| a.saturating_sub(b) as f64 / n as f64);
    let live_runtimes = stats.snapshot().live_runtimes();
    let evictions = service.runtime_pool().map_or(0, |p| p.evictions);

    // Every conversation still works: the answer resumes it (restored if evicted).
    let start = Instant::now();
    for handle in &handles {
        let asked = handle
            .log()
            .pending_action()
            .expect("paused on an approval");
        handle.respond(asked.approve_all()).await.expect("answered");
    }
    for handle in &handles {
        assert!(
            matches!(handle.outcome().await, Outcome::Succeeded(_)),
            "every conversation ends well"
        );
    }
    let answered_in = start.elapsed();
    assert_eq!(stats.snapshot().live_runtimes(), 0);
    Measured {
        label,
        per_conversation: (after - before) as f64 / n as f64,
        total_mib: (after - before) as f64 / (1024.0 * 1024.0),
        rss_per_conversation: rss,
        live_runtimes,
        evictions,
        answered_in,
    }
}

fn main() {
    let n = conversations();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a multi-thread Tokio runtime");
    println!(
        "harness eviction bench: {n} idle conversations, each paused on an approval \
         (scripted adapter, in-memory service)"
    );
    let minutes = Duration::from_secs(300);
    let settings = [
        ("no cap (unbounded)", RuntimePoolConfig::unbounded()),
        ("cap 256 (default)", RuntimePoolConfig::new(256, minutes)),
        ("cap 16", RuntimePoolConfig::new(16, minutes)),
        ("cap 0", RuntimePoolConfig::new(0, minutes)),
    ];
    // Warm-up (not counted): the allocator's and Tokio's first structures.
    runtime.block_on(measure("warm-up", RuntimePoolConfig::new(4, minutes), 256));
    let rows: Vec<Measured> = settings
        .into_iter()
        .map(|(label, pool)| runtime.block_on(measure(label, pool, n)))
        .collect();
    println!(
        "{:<20} {:>12} {:>9} {:>12} {:>14} {:>10} {:>11}",
        "pool", "heap/conv", "heap MiB", "RSS/conv", "live runtimes", "evictions", "answer all"
    );
    for m in &rows {
        println!(
            "{:<20} {:>10.0} B {:>9.1} {:>10} B {:>14} {:>10} {:>8.0} ms",
            m.label,
            m.per_conversation,
            m.total_mib,
            m.rss_per_conversation
                .map_or_else(|| "n/a".to_owned(), |r| format!("{r:.0}")),
            m.live_runtimes,
            m.evictions,
            m.answered_in.as_secs_f64() * 1e3,
        );
    }
}
