//! Event (de)serialization, as a store writes and reads a batch: nanoseconds per event to
//! write a batch of events as one JSON array (`serde_json::to_writer`, what `harness-store`
//! does for a batch row) and to read it back (`serde_json::from_str::<Vec<Event>>`), for the
//! mix a streaming execution writes (mostly text deltas, some usage and tool calls), then for
//! events a newer writer wrote (an unknown field in the envelope and in `data`: the rare
//! path that keeps them).
//!
//! ```sh
//! cargo bench -p harness-core --bench events
//! ```
//!
//! Figures are from one run on one machine; they are printed, never asserted. On a machine
//! busy with other work, times swing by tens of percent: count instructions instead
//! (`HARNESS_BENCH_QUICK=1 HARNESS_BENCH_PLAIN_ONLY=1 valgrind --tool=callgrind
//! --toggle-collect='*write_batch*' <the bench binary>`, and `*read_batch*`).
//!
//! Measured when unknown fields began to be kept (`harness_core::wire`), instructions per
//! event under callgrind (`HARNESS_BENCH_QUICK=1`, 30,000 events; the machine was too busy
//! for times to mean anything, load 9 on 2 cores):
//!
//! | | write | read |
//! |---|---|---|
//! | before (`deny_unknown_fields`, unknown envelope fields skipped) | 2,559 | 4,565 |
//! | after (unknown fields kept) | 2,577 (+0.7%) | 4,705 (+3.1%) |
//!
//! The write path of an event this version wrote is the derive it was (one pointer compared
//! on top); the read path notes each `data` key on its way and keeps the value of one the
//! struct skips. An event a newer writer wrote takes the rare path (its payload through a
//! `Value` to add the kept fields back): about five times the time of a plain one, paid only
//! for such events.

use std::hint::black_box;
use std::time::{Duration, Instant};

use harness_core::event::{Event, EventPayload, TextDelta, ToolCall, Usage};
use harness_core::id::Sequence;

/// Events per batch and rounds: `HARNESS_BENCH_QUICK=1` shrinks them (a smoke run, or a run
/// under `valgrind --tool=callgrind --toggle-collect='*write_batch*'` (or `*read_batch*`),
/// which counts instructions: the figure to compare on a machine shared with other work).
fn sizes() -> (usize, usize) {
    if std::env::var_os("HARNESS_BENCH_QUICK").is_some() {
        (10_000, 3)
    } else {
        (100_000, 15)
    }
}

fn events(count: usize) -> Vec<Event> {
    let id: harness_core::id::ExecutionId = "exec_1".parse().unwrap();
    let time = "2026-11-30T12:00:00.123Z".parse().unwrap();
    (1..=count)
        .map(|n| {
            let payload = match n % 50 {
                0 => EventPayload::Usage(Usage {
                    input_tokens: 120,
                    output_tokens: 40,
                    ..Usage::default()
                }),
                25 => EventPayload::ToolCallStarted(Box::new(ToolCall {
                    call_id: format!("call_{n}").parse().unwrap(),
                    tool: "search".into(),
                    arguments: serde_json::json!({"q": "rust serde", "limit": 10}),
                })),
                _ => EventPayload::MessageDelta(TextDelta::new("Hello, wor")),
            };
            Event::new(id.clone(), Sequence::new(n as u64).unwrap(), time, payload)
        })
        .collect()
}

/// The fastest and the median round, in ns per event: the fastest is the one least disturbed
/// by other work on the machine.
fn per_event(mut samples: Vec<Duration>, events: usize) -> (f64, f64) {
    samples.sort_unstable();
    let ns = |d: Duration| d.as_nanos() as f64 / events as f64;
    (ns(samples[0]), ns(samples[samples.len() / 2]))
}

#[inline(never)]
fn write_batch(body: &mut Vec<u8>, events: &[Event]) {
    serde_json::to_writer(body, black_box(events)).unwrap();
}

#[inline(never)]
fn read_batch(text: &str) -> Vec<Event> {
    serde_json::from_str(black_box(text)).unwrap()
}

fn measure(label: &str, events: &[Event], rounds: usize) {
    let mut writes = Vec::with_capacity(rounds);
    let mut reads = Vec::with_capacity(rounds);
    let mut body = Vec::new();
    for _ in 0..rounds {
        body.clear();
        let start = Instant::now();
        write_batch(&mut body, events);
        writes.push(start.elapsed());
        let text = std::str::from_utf8(&body).unwrap();
        let start = Instant::now();
        let back = read_batch(text);
        reads.push(start.elapsed());
        assert_eq!(back.len(), events.len());
    }
    let (write_min, write_median) = per_event(writes, events.len());
    let (read_min, read_median) = per_event(reads, events.len());
    println!(
        "{label:<30} write {write_min:>6.1} (median {write_median:>6.1}) ns/event   \
         read {read_min:>6.1} (median {read_median:>6.1}) ns/event   ({} bytes/event)",
        body.len() / events.len()
    );
}

fn main() {
    let (count, rounds) = sizes();
    println!(
        "harness event bench: {count} events per batch, fastest and median of {rounds} rounds"
    );
    let plain = events(count);
    measure("events this version wrote", &plain, rounds);
    if std::env::var_os("HARNESS_BENCH_PLAIN_ONLY").is_some() {
        return;
    }
    // The same events as a newer writer would write them: read once to get events that
    // keep an unknown envelope field and an unknown data field.
    let mut newer = serde_json::to_value(&plain).unwrap();
    for event in newer.as_array_mut().unwrap() {
        event["traceId"] = "4bf92f3577b34da6a3ce929d0e0e4736".into();
        if let Some(data) = event.get_mut("data") {
            data["lang"] = "en".into();
        }
    }
    match serde_json::from_value::<Vec<Event>>(newer) {
        Ok(newer) => measure("events a newer writer wrote", &newer, rounds),
        Err(e) => println!("events a newer writer wrote: refused ({e})"),
    }
}
