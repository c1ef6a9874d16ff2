//! Memory of long and of finished executions on the default durable store (SQLite in a
//! temporary directory). Prints, never asserts:
//!
//! 1. `harness serve` (another process): its RSS (`VmRSS` of `/proc/<pid>/status`) before,
//!    during (the highest sample) and after one execution of 1,000,000 events that nobody
//!    reads, and again a while after the server let it go; then its RSS before and after
//!    `IDLE` short executions that ended and are left alone, per execution;
//! 2. the same with the server in this process, where an instrumented system allocator
//!    also counts the heap held (bytes allocated minus bytes freed, whatever the allocator
//!    caches): RSS that grows while the heap held does not is the allocator keeping freed
//!    pages (or SQLite's own allocations, which it does not count), not the server;
//! 3. through the service alone (same stack and store kind): the heap held at its highest
//!    during the long execution and how many events its log held then, after its end with
//!    the handle kept, and after the handle is dropped; then per finished execution.
//!
//! ```sh
//! cargo bench -p harness-server --bench memory
//! ```
//!
//! `HARNESS_BENCH_EVENTS=<n>` changes the long execution's size. `HARNESS_BENCH_SERVER=<path>`
//! measures another `harness` binary (say, one built from another commit) in part 1.
//! `HARNESS_BENCH_STORE=memory` uses the memory store instead. `HARNESS_BENCH_TRIM=1`
//! (diagnosis only, needs `gdb`) also prints the RSS after `malloc_trim(0)`, which hands
//! glibc's free pages back to the system, and what SQLite says it holds.

use std::alloc::System;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use harness_core::id::Cursor;
use harness_core::service::ExecutionRequest;
use harness_core::store::ReplicaId;
use harness_layers::stack::HarnessStack;
use harness_scripted::{Script, ScriptedAdapter, ScriptedOptions};
use serde_json::{Value, json};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use tower::ServiceExt;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const TOKEN: &str = "bench-token-0123456789abcdef";
/// Events of the long execution, all told (its lifecycle events included).
const EVENTS: usize = 1_000_000;
/// Idle finished executions.
const IDLE: usize = 1_000;
/// The most deltas one scripted step repeats.
const STEP: usize = 100_000;

fn events() -> usize {
    std::env::var("HARNESS_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(EVENTS)
}

/// A script of `events` events: `run.queued`, `run.starting`, `run.running`, the deltas and
/// `run.succeeded`.
fn long_script(events: usize) -> Script {
    let mut left = events.saturating_sub(4).max(1);
    let mut script = Script::builder();
    while left > 0 {
        let n = left.min(STEP);
        script = script.text_repeated("token ", u32::try_from(n).unwrap_or(1));
        left -= n;
    }
    script.complete_without_summary().build()
}

fn short_script() -> Script {
    Script::builder()
        .text("hello ")
        .text("world")
        .complete("ok")
        .build()
}

struct Serving {
    /// `None`: the server runs in this process.
    child: Option<Child>,
    pid: u32,
    url: String,
    dir: std::path::PathBuf,
}

impl Drop for Serving {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `field` (`VmRSS`, `RssAnon`, ...) of `/proc/<pid>/status`, in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// `VmRSS` of `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS")
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// The anonymous (heap, stacks) and file-backed shares of `pid`'s RSS.
fn split(pid: u32) -> String {
    format!(
        "(anonymous {}, files {})",
        mib(status_kib(pid, "RssAnon")),
        mib(status_kib(pid, "RssFile") + status_kib(pid, "RssShmem"))
    )
}

impl Serving {
    fn rss(&self) -> u64 {
        rss_kib(self.pid)
    }

    /// The heap this process holds, when the server runs in it.
    fn heap(&self) -> Option<i128> {
        self.child.is_none().then(heap)
    }

    /// Asks the server's allocator to hand its free pages back (diagnosis, through gdb), and
    /// SQLite how much it holds: the RSS after the trim, and SQLite's bytes.
    fn trimmed(&self) -> Option<(u64, Option<i64>)> {
        let out = Command::new("gdb")
            .args(["-p", &self.pid.to_string(), "-batch", "-nx"])
            .args(["-ex", "call (int) malloc_trim(0)"])
            .args(["-ex", "print (long long) sqlite3_memory_used()"])
            .stderr(Stdio::null())
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let sqlite = text
            .lines()
            .filter_map(|l| {
                l.strip_prefix('$')?
                    .split_once(" = ")?
                    .1
                    .trim()
                    .parse()
                    .ok()
            })
            .nth(1);
        out.status.success().then(|| (self.rss(), sqlite))
    }
}

/// `harness serve` on a SQLite store in a new temporary directory: in another process, or
/// (`in_process`) in this one.
async fn serve(in_process: bool) -> Serving {
    let dir = std::env::temp_dir().join(format!(
        "harness-bench-memory-{}-{in_process}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("harness.toml");
    let store = std::env::var("HARNESS_BENCH_STORE").unwrap_or_else(|_| "sqlite".into());
    let path = if store == "sqlite" {
        "path = \"harness.db\"\n"
    } else {
        ""
    };
    std::fs::write(
        &config,
        format!(
            "[store]\nkind = \"{store}\"\n{path}[[tokens]]\nprincipal = \"bench\"\nsha256 = \"{}\"\n",
            harness_server::auth::digest(TOKEN)
        ),
    )
    .unwrap();
    if in_process {
        let config = harness_server::config::Config::from_path(&config).unwrap();
        let tokens = config.tokens().unwrap();
        let (server, _) = config.server(tokens).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let limits = harness_server::ConnectionLimits::default();
        tokio::spawn(harness_server::serve(listener, server.router(), limits).into_future());
        return Serving {
            child: None,
            pid: std::process::id(),
            url,
            dir,
        };
    }
    let binary = std::env::var("HARNESS_BENCH_SERVER")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_harness").to_owned());
    let mut child = Command::new(binary)
        .args(["serve", "--config", config.to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = loop {
        let line = lines.next().unwrap().unwrap();
        if let Some(url) = line.strip_prefix("harness serving on ") {
            break url.to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Serving {
        pid: child.id(),
        child: Some(child),
        url,
        dir,
    }
}

async fn start(http: &reqwest::Client, url: &str, script: Script) -> String {
    let started: Value = http
        .post(format!("{url}/v1/executions"))
        .bearer_auth(TOKEN)
        .json(&json!({
            "adapter": "scripted",
            "message": "bench",
            "options": ScriptedOptions::with_script(script).to_value(),
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    started["id"]
        .as_str()
        .unwrap_or_else(|| panic!("the execution did not start: {started}"))
        .to_owned()
}

/// The execution's view, polled (never its events).
async fn view(http: &reqwest::Client, url: &str, id: &str) -> Value {
    http.get(format!("{url}/v1/executions/{id}"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn ended(view: &Value) -> bool {
    matches!(
        view["state"].as_str(),
        Some("succeeded" | "failed" | "cancelled")
    )
}

async fn until_ended(http: &reqwest::Client, url: &str, id: &str) -> Value {
    loop {
        let seen = view(http, url, id).await;
        if ended(&seen) {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// RSS, and the heap counted when the server runs in this process.
fn memory(serving: &Serving, heap_before: Option<i128>) -> String {
    let rss = mib(serving.rss());
    match serving.heap().zip(heap_before) {
        Some((now, before)) => format!("{rss}, heap held {:+.1} MiB", mb(now - before)),
        None => rss,
    }
}

fn mb(bytes: i128) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

async fn server_part(events: usize, in_process: bool) {
    let serving = serve(in_process).await;
    let http = reqwest::Client::new();
    let trim = std::env::var("HARNESS_BENCH_TRIM").is_ok_and(|v| v == "1");
    let trimmed = |serving: &Serving| {
        serving.trimmed().map_or_else(
            || "(gdb failed)".to_owned(),
            |(rss, sqlite)| {
                let sqlite = sqlite.map_or_else(|| "?".to_owned(), |b| format!("{b}"));
                format!("{} (SQLite holds {sqlite} bytes)", mib(rss))
            },
        )
    };

    // A few short executions first: the stack and the store's connections warmed up.
    for _ in 0..8 {
        let id = start(&http, &serving.url, short_script()).await;
        until_ended(&http, &serving.url, &id).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let where_ = if in_process {
        "in this process (heap counted)"
    } else {
        "`harness serve`"
    };
    println!("server ({where_}, SQLite), one execution of {events} events, no reader:");
    let heap_before = serving.heap();
    println!(
        "  before:                     {}",
        memory(&serving, heap_before)
    );

    let began = Instant::now();
    let id = start(&http, &serving.url, long_script(events)).await;
    // Sampled on a thread of its own: a slow answer must not hide the peak.
    let pid = serving.pid;
    let counted = serving.child.is_none();
    let peak = Arc::new(std::sync::Mutex::new((0u64, i128::MIN)));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = std::thread::spawn({
        let (peak, done) = (Arc::clone(&peak), Arc::clone(&done));
        move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let (rss, held) = (rss_kib(pid), if counted { heap() } else { 0 });
                let mut peak = peak.lock().unwrap();
                *peak = (peak.0.max(rss), peak.1.max(held));
                drop(peak);
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    });
    let mut next_print = Duration::ZERO;
    let last = loop {
        let seen = view(&http, &serving.url, &id).await;
        if began.elapsed() >= next_print {
            println!(
                "  during, at {:>5.1} s:         {} ({} events logged)",
                began.elapsed().as_secs_f64(),
                memory(&serving, heap_before),
                seen["lastSeq"]
            );
            next_print += Duration::from_secs(2);
        }
        if ended(&seen) {
            break seen;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    sampler.join().unwrap();
    let (peak_rss, peak_heap) = *peak.lock().unwrap();
    let elapsed = began.elapsed();
    println!(
        "  ended {} after {:.1} s ({:.0} events/s), {} events",
        last["state"],
        elapsed.as_secs_f64(),
        last["lastSeq"].as_f64().unwrap_or(0.0) / elapsed.as_secs_f64(),
        last["lastSeq"]
    );
    match heap_before.filter(|_| counted) {
        Some(before) => println!(
            "  highest during:             {}, heap held {:+.1} MiB",
            mib(peak_rss),
            mb(peak_heap - before)
        ),
        None => println!("  highest during:             {}", mib(peak_rss)),
    }
    println!(
        "  at its end:                 {}",
        memory(&serving, heap_before)
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    println!(
        "  3 s after it was let go:    {} {}",
        memory(&serving, heap_before),
        split(serving.pid)
    );
    if trim {
        println!("  RSS after malloc_trim(0):   {}", trimmed(&serving));
    }

    // 2. Idle finished executions, 16 at a time.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = serving.rss();
    let heap_before = serving.heap();
    let began = Instant::now();
    futures_util::stream::iter(0..IDLE)
        .for_each_concurrent(16, |_| {
            let (http, url) = (&http, &serving.url);
            async move {
                let id = start(http, url, short_script()).await;
                until_ended(http, url, &id).await;
            }
        })
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = serving.rss();
    let per_heap = serving
        .heap()
        .zip(heap_before)
        .map_or_else(String::new, |(now, before)| {
            format!(
                ", heap held {:.0} bytes per execution",
                (now - before) as f64 / IDLE as f64
            )
        });
    println!(
        "  {IDLE} finished executions left idle (run in {:.1} s): RSS {} -> {}, \
         {:.2} KiB per execution{per_heap}",
        began.elapsed().as_secs_f64(),
        mib(before),
        mib(after),
        after.saturating_sub(before) as f64 / IDLE as f64
    );
    println!("  {}", split(serving.pid));
    if trim {
        println!("  RSS after malloc_trim(0):   {}", trimmed(&serving));
    }
}

/// Heap bytes held now (allocated minus freed).
fn heap() -> i128 {
    let stats = GLOBAL.stats();
    stats.bytes_allocated as i128 - stats.bytes_deallocated as i128
}

fn heap_mib(bytes: i128) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

async fn in_process_part(events: usize) {
    let dir = std::env::temp_dir().join(format!("harness-bench-memory-in-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let store = Arc::new(harness_store::SqliteStore::open(dir.join("harness.db")).unwrap());
    let adapter = ScriptedAdapter::quickstart();
    let stack = HarnessStack::defaults_for(&adapter).unwrap();
    let service = stack.durable_service(adapter, store, ReplicaId::new("bench"));
    let run = |script: Script| {
        let service = service.clone();
        async move {
            service
                .oneshot(
                    ExecutionRequest::new("bench")
                        .with_options(ScriptedOptions::with_script(script).to_value()),
                )
                .await
                .unwrap()
        }
    };
    // Warm-up: the store's connections and the stack's first allocations.
    for _ in 0..8 {
        let handle = run(short_script()).await;
        handle.events(Cursor::START).count().await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = heap();
    println!("in process (service on SQLite), heap held (allocated - freed):");

    let handle = run(long_script(events)).await;
    let terminal = handle.log().terminal();
    tokio::pin!(terminal);
    let mut peak = before;
    let mut held_events = 0;
    loop {
        tokio::select! {
            _ = &mut terminal => break,
            () = tokio::time::sleep(Duration::from_millis(50)) => {
                let now = heap();
                if now > peak {
                    peak = now;
                    held_events = handle.log().snapshot(Cursor::START).len();
                }
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let at_end = heap();
    let held_at_end = handle.log().snapshot(Cursor::START).len();
    drop(handle);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let dropped = heap();
    println!(
        "  one execution of {events} events, no reader: highest {} above the start \
         ({held_events} events held then)",
        heap_mib(peak - before)
    );
    println!(
        "  at its end, handle kept: {} ({held_at_end} events held); handle dropped: {}",
        heap_mib(at_end - before),
        heap_mib(dropped - before)
    );

    // Finished executions whose handles are kept (as a caller, or the server until the end).
    let before = heap();
    let mut handles = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        let handle = run(short_script()).await;
        handle.log().terminal().await;
        handles.push(handle);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let kept = heap() - before;
    handles.clear();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = heap() - before;
    println!(
        "  {IDLE} finished executions, handles kept: {:.0} bytes per execution; \
         after dropping them: {:.0} bytes per execution",
        kept as f64 / IDLE as f64,
        released as f64 / IDLE as f64
    );
    drop(handles);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::main]
async fn main() {
    let events = events();
    server_part(events, false).await;
    server_part(events, true).await;
    in_process_part(events).await;
}
