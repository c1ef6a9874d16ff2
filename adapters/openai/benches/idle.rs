//! Memory held by idle model-loop conversations, with and without the service's pool of
//! paused runtimes (`ServiceConfig::runtime_pool`), side by side.
//!
//! ```sh
//! cargo bench -p harness-openai --bench idle
//! HARNESS_BENCH_QUICK=1 cargo bench -p harness-openai --bench idle   # 1,000 conversations
//! ```
//!
//! A model stub on loopback (a plain HTTP/1.1 server in this process, speaking Chat
//! Completions) answers a conversation's message with a call of `files.delete`, which needs
//! approval, and a request holding the call's result with text. Each of `N` conversations
//! (10,000; 1,000 quick) sends one message of 8 KiB (a prompt with its context pasted in) and
//! pauses on that approval: an idle conversation is one waiting for its answer. The thread
//! state (histories, kept pauses) is in a SQLite file in a temporary directory, as a
//! deployment keeps it. For each pool setting the bench prints the heap held once every
//! conversation waits and the pool let go of what it evicts (an instrumented system
//! allocator: bytes allocated minus bytes freed; SQLite's own allocations are not Rust's and
//! are not counted), the resident set growth as a cross-check, and the evictions; then it
//! answers every conversation (an evicted one is restored from the thread state) and checks
//! each succeeded. Prints, never asserts on memory.

use std::alloc::System;
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness_core::id::ConversationId;
use harness_core::lifecycle::ExecutionState;
use harness_core::service::{
    AdapterService, ExecutionHandle, ExecutionRequest, Outcome, RuntimePoolConfig, ServiceConfig,
};
use harness_core::session::ThreadStateStore;
use harness_core::tool::{
    FnTool, ProviderNameRule, ProviderToolNames, ToolId, ToolPolicy, ToolSet,
};
use harness_openai::{Endpoint, OpenAiAdapter};
use serde_json::json;
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The user's message: 8 KiB.
const MESSAGE_BYTES: usize = 8 * 1024;
/// Conversations started before waiting for them to pause (bounds open sockets).
const BATCH: usize = 200;

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct File {
    /// The file.
    path: String,
}

fn tools() -> ToolSet {
    let delete = FnTool::new(
        "files.delete".parse().unwrap(),
        "Deletes a file.",
        |f: File, _| async move { Ok::<_, String>(json!({"deleted": f.path})) },
    )
    .unwrap();
    ToolSet::new()
        .tool_with_policy(delete, ToolPolicy::new().needs_approval())
        .unwrap()
}

/// Serves Chat Completions: a call of `name` for a message, text once a result is in.
async fn model(name: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let name = Arc::new(name);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let name = Arc::clone(&name);
            tokio::spawn(async move {
                let mut request = Vec::with_capacity(16 * 1024);
                let mut buf = vec![0u8; 16 * 1024];
                let (head_end, length) = loop {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                    if let Some(at) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&request[..at]).to_lowercase();
                        let length = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        break (at + 4, length);
                    }
                };
                while request.len() < head_end + length {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                }
                let body: serde_json::Value =
                    serde_json::from_slice(&request[head_end..head_end + length]).unwrap();
                let answered = body["messages"]
                    .as_array()
                    .is_some_and(|m| m.last().is_some_and(|m| m["role"] == "tool"));
                let chunk = if answered {
                    json!({"choices": [{"index": 0, "delta": {"content": "done"}, "finish_reason": "stop"}]})
                } else {
                    json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                        {"index": 0, "id": "call_1", "type": "function",
                         "function": {"name": &*name, "arguments": "{\"path\":\"old.txt\"}"}}
                    ]}, "finish_reason": "tool_calls"}]})
                };
                let sse = format!("data: {chunk}\n\ndata: [DONE]\n\n");
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{sse}",
                    sse.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    url
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
    evictions: u64,
    paused_in: Duration,
    answered_in: Duration,
}

async fn measure(label: &'static str, url: &str, pool: RuntimePoolConfig, n: usize) -> Measured {
    let dir = std::env::temp_dir().join(format!(
        "harness-bench-idle-{}-{}",
        std::process::id(),
        ConversationId::generate()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let store = Arc::new(harness_store::SqliteStore::open(dir.join("state.db")).unwrap());
    let service = AdapterService::builder(
        OpenAiAdapter::new(Endpoint::new(url, "stub").with_api_key("sk-bench")).unwrap(),
    )
    .tools(tools())
    .config(ServiceConfig {
        runtime_pool: pool,
        ..ServiceConfig::default()
    })
    .thread_state(store as Arc<dyn ThreadStateStore>)
    .build();
    let message = format!("please tidy up: {}", "context ".repeat(MESSAGE_BYTES / 8));
    let mut handles: Vec<ExecutionHandle> = Vec::with_capacity(n);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (before, rss_before) = (held(), resident_bytes());
    let start = Instant::now();
    while handles.len() < n {
        let from = handles.len();
        for _ in from..n.min(from + BATCH) {
            let request = ExecutionRequest::new(message.clone())
                .with_conversation(ConversationId::generate());
            handles.push(service.start(request).await.expect("started"));
        }
        for h in &handles[from..] {
            while h.state() != ExecutionState::AwaitingApproval {
                assert!(!h.state().is_terminal(), "{:?}", h.outcome().await);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    }
    let paused_in = start.elapsed();
    let expected = n.saturating_sub(pool.max_idle) as u64;
    while service.runtime_pool().map_or(0, |p| p.evictions) < expected {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after = held();
    let rss = resident_bytes()
        .zip(rss_before)
        .map(|(a, b)| a.saturating_sub(b) as f64 / n as f64);
    let evictions = service.runtime_pool().map_or(0, |p| p.evictions);

    let start = Instant::now();
    for chunk in handles.chunks(BATCH) {
        for h in chunk {
            let asked = h.log().pending_action().expect("paused on an approval");
            h.respond(asked.approve_all()).await.expect("answered");
        }
        for h in chunk {
            assert!(
                matches!(h.outcome().await, Outcome::Succeeded(_)),
                "every conversation ends well"
            );
        }
    }
    let answered_in = start.elapsed();
    drop(handles);
    drop(service);
    let _ = std::fs::remove_dir_all(&dir);
    Measured {
        label,
        per_conversation: (after - before) as f64 / n as f64,
        total_mib: (after - before) as f64 / (1024.0 * 1024.0),
        rss_per_conversation: rss,
        evictions,
        paused_in,
        answered_in,
    }
}

fn main() {
    let n = if std::env::var_os("HARNESS_BENCH_QUICK").is_some() {
        1_000
    } else {
        10_000
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let id: ToolId = "files.delete".parse().unwrap();
    let name = ProviderToolNames::new([&id], ProviderNameRule::COMMON)
        .to_provider(&id)
        .unwrap()
        .to_owned();
    let url = rt.block_on(model(name));
    println!(
        "harness-openai idle bench: {n} model-loop conversations, each paused on an approval \
         after an {MESSAGE_BYTES}-byte message (thread state in SQLite)"
    );
    let minutes = Duration::from_secs(300);
    let settings = [
        ("no cap (unbounded)", RuntimePoolConfig::unbounded()),
        ("cap 256 (default)", RuntimePoolConfig::new(256, minutes)),
        ("cap 16", RuntimePoolConfig::new(16, minutes)),
    ];
    rt.block_on(measure(
        "warm-up",
        &url,
        RuntimePoolConfig::new(4, minutes),
        64,
    ));
    let rows: Vec<Measured> = settings
        .into_iter()
        .map(|(label, pool)| rt.block_on(measure(label, &url, pool, n)))
        .collect();
    println!(
        "{:<20} {:>12} {:>9} {:>12} {:>10} {:>10} {:>11}",
        "pool", "heap/conv", "heap MiB", "RSS/conv", "evictions", "pause all", "answer all"
    );
    for m in &rows {
        println!(
            "{:<20} {:>10.0} B {:>9.1} {:>10} B {:>10} {:>7.0} ms {:>8.0} ms",
            m.label,
            m.per_conversation,
            m.total_mib,
            m.rss_per_conversation
                .map_or_else(|| "n/a".to_owned(), |r| format!("{r:.0}")),
            m.evictions,
            m.paused_in.as_secs_f64() * 1e3,
            m.answered_in.as_secs_f64() * 1e3,
        );
    }
}
