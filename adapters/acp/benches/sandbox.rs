//! What the operator's sandbox costs an ACP agent: start to first event, and events per
//! second, for the same agent as a plain child process, in a bubblewrap sandbox (the
//! strict profile), and in one with its ACP client hosted by `acp-sandbox-worker` (every
//! event then crosses the Sandbox Worker Protocol v1), measured side by side in one run.
//!
//! ```sh
//! cargo bench -p harness-acp --bench sandbox
//! HARNESS_BENCH_QUICK=1 cargo bench -p harness-acp --bench sandbox   # a smoke run
//! ```
//!
//! The agent is `acp-test-agent burst`: a turn answers with as many one-character message
//! chunks as its prompt says. Each round runs both placements, alternating which goes
//! first:
//!
//! 1. **start**: from the request to the first `message.delta` of a one-chunk turn (spawn,
//!    ACP `initialize` and `session/new`, the prompt; in the sandbox also the namespaces,
//!    cgroups and limits), median over the rounds, and the sandbox's extra milliseconds;
//! 2. **throughput**: message deltas per second over a turn of `N` chunks, median, and the
//!    sandboxed/plain and hosted/plain ratios.
//!
//! Printed, never asserted. Aims (issue 37): start at most 50 ms over the plain start,
//! throughput at least 0.8 of plain.

use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use harness_acp::{AcpAdapter, AcpAgent};
use harness_core::event::EventKind;
use harness_core::id::Cursor;
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
use harness_sandbox::{Sandbox, SandboxProfile};
use tower::ServiceExt as _;

/// Where the agent runs: 0 plain, 1 sandboxed, 2 sandboxed with its client in a worker.
fn agent(workspace: &std::path::Path, placement: usize) -> AcpAdapter {
    let agent = AcpAgent::new([env!("CARGO_BIN_EXE_acp-test-agent"), "burst"], workspace);
    let sandbox = || Sandbox::new(SandboxProfile::default()).expect("bwrap is installed");
    let agent = match placement {
        0 => agent,
        1 => agent.in_sandbox(sandbox()),
        _ => agent
            .in_sandbox(sandbox())
            .hosted_by_worker(env!("CARGO_BIN_EXE_acp-sandbox-worker")),
    };
    AcpAdapter::new(agent).expect("a valid agent")
}

/// Time to the first delta, time for all `chunks` deltas.
async fn turn(adapter: &AcpAdapter, chunks: usize) -> (Duration, Duration) {
    let begun = Instant::now();
    let execution = AdapterService::new(adapter.clone())
        .oneshot(ExecutionRequest::new(chunks.to_string()))
        .await
        .expect("the execution starts");
    let mut events = execution.events(Cursor::START);
    let mut first = None;
    let mut seen = 0;
    let mut from_first = Instant::now();
    while let Some(event) = events.next().await {
        if event.kind() == EventKind::MessageDelta {
            if first.is_none() {
                first = Some(begun.elapsed());
                from_first = Instant::now();
            }
            seen += 1;
        }
        if event.kind().is_terminal() {
            break;
        }
    }
    assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
    assert_eq!(seen, chunks, "every chunk arrived");
    (first.expect("a delta"), from_first.elapsed())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::var_os("HARNESS_BENCH_QUICK").is_some();
    let (rounds, chunks) = if quick { (3, 2_000) } else { (11, 50_000) };
    let workspace = std::env::temp_dir().join(format!("harness-acp-bench-{}", std::process::id()));
    std::fs::create_dir_all(&workspace).unwrap();
    let adapters: Vec<AcpAdapter> = (0..3).map(|p| agent(&workspace, p)).collect();
    // Warm up each (page cache, the binaries).
    for adapter in &adapters {
        turn(adapter, 10).await;
    }
    let mut starts: [Vec<f64>; 3] = Default::default();
    let mut rates: [Vec<f64>; 3] = Default::default();
    for round in 0..rounds {
        for k in 0..3 {
            let placement = (round + k) % 3;
            let (first, _) = turn(&adapters[placement], 1).await;
            let (_, all) = turn(&adapters[placement], chunks).await;
            starts[placement].push(first.as_secs_f64() * 1e3);
            rates[placement].push(chunks as f64 / all.as_secs_f64());
        }
    }
    let [sp, ss, sh] = starts.map(median);
    let [rp, rs, rh] = rates.map(median);
    println!("sandbox bench: {rounds} rounds, {chunks} deltas per throughput turn");
    println!(
        "start to first delta: plain {sp:.1} ms, sandboxed {ss:.1} ms (+{:.1}), hosted by a \
         worker {sh:.1} ms (+{:.1}) (aim <= +50)",
        ss - sp,
        sh - sp
    );
    println!(
        "deltas/s: plain {rp:.0}, sandboxed {rs:.0} (ratio {:.3}), hosted by a worker {rh:.0} \
         (ratio {:.3}) (aim >= 0.8)",
        rs / rp,
        rh / rp
    );
    let _ = std::fs::remove_dir_all(&workspace);
}
