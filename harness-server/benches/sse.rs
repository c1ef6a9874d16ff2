//! Server-sent events against the in-process reader, side by side in one run. Prints, never
//! asserts (the machines are shared and noisy):
//!
//! 1. events/s of one execution of 100,000 text deltas, read in-process from its handle and
//!    read (and each event parsed) by one SSE client over loopback from `harness serve`
//!    (another process), in five alternating rounds, and the ratio's median and lowest
//!    (aim >= 0.5);
//! 2. the time from the event's timestamp (taken when the adapter's item is logged) to the
//!    frame read off the socket, median and p99, for deltas 2 ms apart;
//! 3. the server's memory per idle SSE connection (its RSS before and after 2,000 of them);
//! 4. how many concurrent streams the server holds (aim >= 10,000): each connection gets its
//!    first frames and stays open;
//! 5. executions started per second: `POST /v1/executions` one after another from one
//!    client, against `oneshot` on the same stack and store kind in-process (alternating
//!    rounds, the ratio's median);
//! 6. fan-out: one execution of 10,000 deltas read by 100 SSE clients at once, and one of 100
//!    deltas read by 10,000 clients at once, events delivered per second in all, against one
//!    in-process reader of the same script.
//!
//! ```sh
//! cargo bench -p harness-server --bench sse
//! ```
//!
//! LangGraph's own server side by side with ours on the same workload (a run streaming text
//! deltas, starts, concurrent runs), read by one Python client in one run:
//! `python3 harness-server/benches/langgraph/compare.py` (it makes its own virtual
//! environment with pinned versions). One run on this machine, two other builds running
//! (medians of 3 alternating rounds, harness / LangGraph): one run of 20,000 deltas 359 k vs
//! 1.98 k events/s (181x); starts one after another 522 vs 139 per second (4.0x, both bound
//! by the Python client); 10 runs at once 366 k vs 2.05 k events/s (208x).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use harness_core::event::Event;
use harness_core::id::Cursor;
use harness_core::service::ExecutionRequest;
use harness_core::store::{MemoryStore, ReplicaId};
use harness_core::time::Timestamp;
use harness_layers::stack::{HarnessStack, StackService};
use harness_scripted::{Script, ScriptedAdapter, ScriptedOptions};
use harness_server::client::SseParser;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::ServiceExt;

const TOKEN: &str = "bench-token-0123456789abcdef";
const DELTAS: usize = 100_000;
const IDLE: usize = 2_000;
const STREAMS: usize = 10_000;
const ROUNDS: usize = 5;

struct Serving {
    child: Child,
    url: String,
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serving {
    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }
}

/// `harness serve` on a memory store, in its own process, its connection caps raised past the
/// 10,000 streams of part 4 (all from this one address).
fn serve() -> Serving {
    let dir = std::env::temp_dir().join(format!("harness-bench-sse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("harness.toml");
    std::fs::write(
        &config,
        format!(
            "body_limit = 16777216\n[connections]\nmax = 20000\nmax_per_peer = 20000\n[store]\nkind = \"memory\"\n[[tokens]]\nprincipal = \"bench\"\nsha256 = \"{}\"\n",
            harness_server::auth::digest(TOKEN)
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args([
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
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
    Serving { child, url }
}

fn deltas(n: usize, gap: Option<Duration>) -> Script {
    let Some(gap) = gap else {
        return Script::builder()
            .text_repeated("word ", u32::try_from(n).unwrap_or(u32::MAX))
            .complete("ok")
            .build();
    };
    let mut script = Script::builder();
    for i in 0..n {
        script = script.text(format!("word{} ", i % 10)).delay(gap);
    }
    script.complete("ok").build()
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

/// Every event of `id` through one SSE connection; `each` sees each as it arrives.
async fn sse(http: &reqwest::Client, url: &str, id: &str, mut each: impl FnMut(&Event)) -> usize {
    let response = http
        .get(format!("{url}/v1/executions/{id}/events"))
        .bearer_auth(TOKEN)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    let mut body = response.bytes_stream();
    let mut parser = SseParser::default();
    let mut n = 0;
    while let Some(chunk) = body.next().await {
        for data in parser.push(&chunk.unwrap()) {
            let event: Event = serde_json::from_str(&data).unwrap();
            each(&event);
            n += 1;
        }
    }
    n
}

/// The server's stack and store kind, in this process.
fn in_process_service() -> StackService {
    let adapter = ScriptedAdapter::quickstart();
    let stack = HarnessStack::defaults_for(&adapter).unwrap();
    stack.durable_service(
        adapter,
        Arc::new(MemoryStore::new()),
        ReplicaId::new("bench"),
    )
}

/// The in-process run: the same stack and store kind, read from the handle.
/// One execution of `deltas` deltas read by `clients` SSE clients at once: events delivered
/// per second in all, against one in-process reader of the same script.
async fn fan_out(http: &reqwest::Client, url: &str, clients: usize, deltas_n: usize) {
    let rate = |n: usize, t: Duration| n as f64 / t.as_secs_f64();
    let (in_n, in_time) = in_process(deltas(deltas_n, None)).await;
    let id = start(http, url, deltas(deltas_n, None)).await;
    let began = Instant::now();
    let readers: Vec<_> = (0..clients)
        .map(|_| {
            let http = http.clone();
            let url = url.to_owned();
            let id = id.clone();
            tokio::spawn(async move { sse(&http, &url, &id, |_| {}).await })
        })
        .collect();
    let mut delivered = 0;
    for reader in readers {
        delivered += reader.await.unwrap();
    }
    let fan_time = began.elapsed();
    println!(
        "fan-out: {clients} SSE clients read one execution of {deltas_n} deltas: {delivered} \
         events in {fan_time:?} ({:.0}/s in all); one in-process reader {:.0}/s: ratio {:.2}",
        rate(delivered, fan_time),
        rate(in_n, in_time),
        rate(delivered, fan_time) / rate(in_n, in_time)
    );
}

async fn in_process(script: Script) -> (usize, Duration) {
    let service = in_process_service();
    let began = Instant::now();
    let execution = service
        .oneshot(
            ExecutionRequest::new("bench")
                .with_options(ScriptedOptions::with_script(script).to_value()),
        )
        .await
        .unwrap();
    let n = execution.events(Cursor::START).count().await;
    (n, began.elapsed())
}

/// `n` executions started one after another in-process, on the same stack and store kind as
/// the server's, each awaited to its handle only (the server's `201` comes at acceptance
/// too, not at the execution's end).
async fn in_process_starts(script: Script, n: usize) -> (usize, Duration) {
    let service = in_process_service();
    let options = ScriptedOptions::with_script(script).to_value();
    let began = Instant::now();
    // At most 64 in flight (the oldest is awaited, usually long ended), so the stack's
    // capacity of 256 running executions never refuses one when starts outrun the runs.
    let mut running = std::collections::VecDeque::new();
    for _ in 0..n {
        let execution = service
            .clone()
            .oneshot(ExecutionRequest::new("bench").with_options(options.clone()))
            .await
            .unwrap();
        running.push_back(execution);
        if running.len() > 64
            && let Some(oldest) = running.pop_front()
        {
            oldest.outcome().await;
        }
    }
    (n, began.elapsed())
}

/// An idle SSE connection: the request written, the first `frames` frames read, then held.
async fn idle_stream(address: &str, id: &str, frames: usize) -> tokio::net::TcpStream {
    let mut socket = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!(
        "GET /v1/executions/{id}/events HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {TOKEN}\r\n\
         Accept: text/event-stream\r\n\r\n"
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    while seen.windows(4).filter(|w| w == b"\nid:").count() < frames {
        let n = socket.read(&mut buffer).await.unwrap();
        assert!(n > 0, "the stream closed early");
        seen.extend_from_slice(&buffer[..n]);
    }
    socket
}

fn raise_open_files() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    limit.current = limit.maximum;
    let _ = setrlimit(Resource::Nofile, limit);
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

#[tokio::main]
async fn main() {
    let open_files = raise_open_files();
    let serving = serve();
    let http = reqwest::Client::new();

    // 1. Throughput, side by side, in alternating rounds (the machine is shared: one round
    // alone says little).
    let rate = |n: usize, t: Duration| n as f64 / t.as_secs_f64();
    println!("throughput, {DELTAS} deltas through the default stack on a memory store:");
    let mut ratios = Vec::new();
    for round in 1..=ROUNDS {
        let (in_n, in_time) = in_process(deltas(DELTAS, None)).await;
        let began = Instant::now();
        let id = start(&http, &serving.url, deltas(DELTAS, None)).await;
        let sse_n = sse(&http, &serving.url, &id, |_| {}).await;
        let sse_time = began.elapsed();
        let (in_rate, sse_rate) = (rate(in_n, in_time), rate(sse_n, sse_time));
        println!(
            "  round {round}: in-process reader {in_n} events in {in_time:?} ({in_rate:.0}/s), \
             one SSE client {sse_n} events in {sse_time:?} ({sse_rate:.0}/s): ratio {:.2}",
            sse_rate / in_rate
        );
        ratios.push(sse_rate / in_rate);
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "  ratio SSE / in-process: median {:.2}, lowest {:.2} (aim >= 0.5)",
        ratios[ratios.len() / 2],
        ratios[0]
    );

    // 5. Starts per second.
    const STARTS: usize = 1_000;
    let hello = || Script::builder().text("hello").complete("ok").build();
    let mut start_ratios = Vec::new();
    for round in 1..=ROUNDS {
        let (in_n, in_time) = in_process_starts(hello(), STARTS).await;
        let began = Instant::now();
        for _ in 0..STARTS {
            start(&http, &serving.url, hello()).await;
        }
        let http_time = began.elapsed();
        let (in_rate, http_rate) = (rate(in_n, in_time), rate(STARTS, http_time));
        println!(
            "  starts round {round}: in-process {in_rate:.0}/s, over HTTP {http_rate:.0}/s: ratio {:.2}",
            http_rate / in_rate
        );
        start_ratios.push(http_rate / in_rate);
    }
    start_ratios.sort_by(f64::total_cmp);
    println!(
        "  ratio HTTP starts / in-process starts: median {:.2}, lowest {:.2}",
        start_ratios[start_ratios.len() / 2],
        start_ratios[0]
    );

    // 6. Fan-out: to 100 clients, then to 10,000.
    fan_out(&http, &serving.url, 100, 10_000).await;
    fan_out(&http, &serving.url, 10_000, 100).await;

    // `cargo bench --bench sse -- throughput` stops here (for profiling the first part).
    if std::env::args().any(|a| a == "throughput") {
        return;
    }

    // 2. Latency: the event's timestamp to the frame read off the socket.
    let id = start(
        &http,
        &serving.url,
        deltas(2_000, Some(Duration::from_millis(2))),
    )
    .await;
    let mut lags = Vec::new();
    sse(&http, &serving.url, &id, |event| {
        let now = Timestamp::now();
        lags.push((now.as_micros() - event.time().as_micros()) as f64 / 1000.0);
    })
    .await;
    lags.sort_by(f64::total_cmp);
    let at = |q: f64| lags[((lags.len() - 1) as f64 * q) as usize];
    println!(
        "latency, event logged -> frame read, {} events 2 ms apart:",
        lags.len()
    );
    println!("  median {:.2} ms, p99 {:.2} ms", at(0.5), at(0.99));

    // 3. Memory per idle connection, on an execution that waits.
    let address = serving.url.trim_start_matches("http://").to_owned();
    let waiting = start(
        &http,
        &serving.url,
        Script::builder().text("waiting ").hang().build(),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = serving.rss_kib();
    let mut held = Vec::with_capacity(STREAMS);
    for _ in 0..IDLE {
        held.push(idle_stream(&address, &waiting, 3).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = serving.rss_kib();
    println!(
        "memory, {IDLE} idle SSE connections: server RSS {before} KiB -> {after} KiB, \
              {:.1} KiB per connection",
        (after.saturating_sub(before)) as f64 / IDLE as f64
    );

    // 4. Concurrent streams.
    let target = STREAMS.min(usize::try_from(open_files.saturating_sub(256)).unwrap_or(STREAMS));
    let began = Instant::now();
    while held.len() < target {
        held.push(idle_stream(&address, &waiting, 3).await);
    }
    let rss = serving.rss_kib();
    println!(
        "concurrent streams: {} held open, each with its first frames, opened in {:?}; \
              server RSS {rss} KiB (aim >= {STREAMS}; open-file limit {open_files})",
        held.len(),
        began.elapsed()
    );
    drop(held);
}
