//! The default layer stack against the bare adapter service, measured side by side in one run.
//!
//! ```sh
//! cargo bench --bench stack                      # full sizes
//! HARNESS_BENCH_QUICK=1 cargo bench --bench stack # a smoke run
//! ```
//!
//! 1. Throughput: one execution streaming N deltas (100,000), one reader consuming them, the
//!    bare `AdapterService` against `HarnessStack::defaults_for` over it (tracing, metrics,
//!    idempotency, preflight, capacity, retry, redaction), alternating, median of 11 rounds.
//!    Aim: the stack keeps at least 0.8 of the bare throughput. A third target adds a user's
//!    layer (an `InspectLayer` counting items at `RuntimeSlot::BelowShutdown`, the slot
//!    nearest the adapter) and prints its throughput against the stack's and the bare one's.
//! 2. Start to first event: the time from the call to the first `message.delta`, median over
//!    many executions, bare against stack, and the overhead in microseconds (aim: 10 us
//!    through the stack). Measured inside a task on a worker thread, as an application's
//!    handler runs: `block_on`'s own thread would add two cross-thread wake-ups to each.
//!
//! Figures are ratios from one run on one machine; they are printed, never asserted.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use harness::event::EventKind;
use harness::id::Cursor;
use harness::layers::stack::StackService;
use harness::scripted::{Script, ScriptedAdapter};
use harness::{AdapterService, ExecutionRequest, HarnessStack, Outcome};
use tower::ServiceExt;

fn quick() -> bool {
    std::env::var_os("HARNESS_BENCH_QUICK").is_some()
}

#[derive(Clone)]
enum Target {
    Bare(AdapterService<ScriptedAdapter>),
    Stack(StackService),
}

impl Target {
    fn new(script: Script, stacked: bool) -> Self {
        let adapter = ScriptedAdapter::new(script);
        if stacked {
            let stack = HarnessStack::defaults_for(&adapter).expect("the default stack builds");
            Self::Stack(stack.service(adapter))
        } else {
            Self::Bare(AdapterService::new(adapter))
        }
    }

    /// The default stack with a user's layer at the slot nearest the adapter: an
    /// `InspectLayer` counting items (the boxed slot and the observer's call per item).
    fn with_user_layer(script: Script) -> Self {
        use harness::layers::inspect::{InspectLayer, Seen};
        use harness::layers::stack::RuntimeSlot;
        let adapter = ScriptedAdapter::new(script);
        let count = InspectLayer::new(|_: &harness::service::Segment| {
            let mut items = 0_u64;
            move |seen: Seen<'_>| match seen {
                Seen::Item(_) => items += 1,
                Seen::End(end) => assert_eq!(end.items, items),
            }
        });
        let stack = HarnessStack::defaults_for(&adapter)
            .expect("the default stack builds")
            .runtime_layer(RuntimeSlot::BelowShutdown, count);
        Self::Stack(stack.service(adapter))
    }

    async fn start(&self) -> harness::ExecutionHandle {
        let request = ExecutionRequest::new("bench");
        match self.clone() {
            Self::Bare(s) => s.oneshot(request).await,
            Self::Stack(s) => s.oneshot(request).await,
        }
        .expect("the execution starts")
    }
}

async fn stream_round(target: &Target, deltas: u32) -> Duration {
    let start = Instant::now();
    let handle = target.start().await;
    let mut seen = 0_u32;
    let mut events = handle.events(Cursor::START);
    while let Some(event) = events.next().await {
        if event.kind() == EventKind::MessageDelta {
            seen += 1;
        }
    }
    let outcome = handle.outcome().await;
    let elapsed = start.elapsed();
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert_eq!(seen, deltas);
    elapsed
}

async fn first_event(target: &Target) -> Duration {
    let start = Instant::now();
    let handle = target.start().await;
    let mut events = handle.events(Cursor::START);
    while let Some(event) = events.next().await {
        if event.kind() == EventKind::MessageDelta {
            break;
        }
    }
    let elapsed = start.elapsed();
    handle.outcome().await;
    elapsed
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() {
    let (deltas, rounds, starts) = if quick() {
        (10_000, 3, 200)
    } else {
        (100_000, 11, 2_000)
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    // The whole run inside a task on a worker thread (see the module docs).
    let run = runtime.spawn(async move {
        let script = Script::builder()
            .text_repeated("tok ", deltas)
            .complete("done")
            .build();
        let bare = Target::new(script.clone(), false);
        let stacked = Target::new(script.clone(), true);
        let with_user = Target::with_user_layer(script);
        // Warm the paths once.
        stream_round(&bare, deltas).await;
        stream_round(&stacked, deltas).await;
        stream_round(&with_user, deltas).await;
        let mut bare_samples = Vec::new();
        let mut stack_samples = Vec::new();
        let mut user_samples = Vec::new();
        for round in 0..rounds {
            if round % 2 == 0 {
                bare_samples.push(stream_round(&bare, deltas).await);
                stack_samples.push(stream_round(&stacked, deltas).await);
                user_samples.push(stream_round(&with_user, deltas).await);
            } else {
                user_samples.push(stream_round(&with_user, deltas).await);
                stack_samples.push(stream_round(&stacked, deltas).await);
                bare_samples.push(stream_round(&bare, deltas).await);
            }
        }
        let user_ratios: Vec<String> = stack_samples
            .iter()
            .zip(&user_samples)
            .map(|(s, u)| format!("{:.2}", s.as_secs_f64() / u.as_secs_f64()))
            .collect();
        let user_t = median(user_samples);
        let rounds_ratios: Vec<String> = bare_samples
            .iter()
            .zip(&stack_samples)
            .map(|(b, s)| format!("{:.2}", b.as_secs_f64() / s.as_secs_f64()))
            .collect();
        let bare_t = median(bare_samples);
        let stack_t = median(stack_samples);
        let rate = |t: Duration| f64::from(deltas) / t.as_secs_f64();
        let ratio = rate(stack_t) / rate(bare_t);
        println!("harness layer stack bench (tokio multi-thread, 2 workers)");
        println!("throughput: {deltas} deltas, median of {rounds} alternating rounds");
        println!(
            "  bare AdapterService  {:>12.0} deltas/s  ({:.1} ns/delta)",
            rate(bare_t),
            bare_t.as_secs_f64() * 1e9 / f64::from(deltas)
        );
        println!(
            "  default stack        {:>12.0} deltas/s  ({:.1} ns/delta)",
            rate(stack_t),
            stack_t.as_secs_f64() * 1e9 / f64::from(deltas)
        );
        println!(
            "  per-round ratios stack/bare: [{}]",
            rounds_ratios.join(", ")
        );
        println!(
            "  ratio stack/bare: {ratio:.3}  (aim >= 0.8)  {}",
            if ratio >= 0.8 { "PASS" } else { "BELOW" }
        );
        println!(
            "  stack + a user layer {:>12.0} deltas/s  ({:.1} ns/delta): {:.3} of the stack, {:.3} of bare",
            rate(user_t),
            user_t.as_secs_f64() * 1e9 / f64::from(deltas),
            rate(user_t) / rate(stack_t),
            rate(user_t) / rate(bare_t)
        );
        println!(
            "  per-round ratios (stack + user layer)/stack: [{}]",
            user_ratios.join(", ")
        );

        let first = Script::builder().text("hello").complete("done").build();
        let bare = Target::new(first.clone(), false);
        let stacked = Target::new(first, true);
        let mut bare_samples = Vec::new();
        let mut stack_samples = Vec::new();
        for i in 0..starts {
            if i % 2 == 0 {
                bare_samples.push(first_event(&bare).await);
                stack_samples.push(first_event(&stacked).await);
            } else {
                stack_samples.push(first_event(&stacked).await);
                bare_samples.push(first_event(&bare).await);
            }
        }
        let bare_t = median(bare_samples);
        let stack_t = median(stack_samples);
        println!("start to first event: median of {starts} executions each, alternating");
        println!(
            "  bare AdapterService  {:>8.1} us",
            bare_t.as_secs_f64() * 1e6
        );
        println!(
            "  default stack        {:>8.1} us",
            stack_t.as_secs_f64() * 1e6
        );
        println!(
            "  overhead: {:+.1} us  (ratio stack/bare {:.2})",
            (stack_t.as_secs_f64() - bare_t.as_secs_f64()) * 1e6,
            stack_t.as_secs_f64() / bare_t.as_secs_f64()
        );
    });
    runtime.block_on(run).expect("the bench task");
}
