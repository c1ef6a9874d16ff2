//! What the operator's sandbox costs an ACP agent: start to first event, and events per
//! second, for the same agent as a plain child process and in a bubblewrap sandbox (the
//! strict profile), measured side by side in one run.
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
//!    sandboxed/plain ratio.
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

fn agent(workspace: &std::path::Path, sandboxed: bool) -> AcpAdapter {
    let agent = AcpAgent::new([env!("CARGO_BIN_EXE_acp-test-agent"), "burst"], workspace);
    let agent = if sandboxed {
        agent.in_sandbox(Sandbox::new(SandboxProfile::default()).expect("bwrap is installed"))
    } else {
        agent
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
    let plain = agent(&workspace, false);
    let sandboxed = agent(&workspace, true);
    // Warm up both (page cache, the binary).
    turn(&plain, 10).await;
    turn(&sandboxed, 10).await;

    let (mut start_plain, mut start_sandboxed) = (Vec::new(), Vec::new());
    let (mut rate_plain, mut rate_sandboxed) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for in_sandbox in order {
            let adapter = if in_sandbox { &sandboxed } else { &plain };
            let (first, _) = turn(adapter, 1).await;
            let (_, all) = turn(adapter, chunks).await;
            let rate = chunks as f64 / all.as_secs_f64();
            if in_sandbox {
                start_sandboxed.push(first.as_secs_f64() * 1e3);
                rate_sandboxed.push(rate);
            } else {
                start_plain.push(first.as_secs_f64() * 1e3);
                rate_plain.push(rate);
            }
        }
    }
    let (sp, ss) = (median(start_plain), median(start_sandboxed));
    let (rp, rs) = (median(rate_plain), median(rate_sandboxed));
    println!("sandbox bench: {rounds} rounds, {chunks} deltas per throughput turn");
    println!(
        "start to first delta: plain {sp:.1} ms, sandboxed {ss:.1} ms, extra {:.1} ms (aim <= 50)",
        ss - sp
    );
    println!(
        "deltas/s: plain {rp:.0}, sandboxed {rs:.0}, ratio {:.3} (aim >= 0.8)",
        rs / rp
    );
    let _ = std::fs::remove_dir_all(&workspace);
}
