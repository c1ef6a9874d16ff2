//! The tool loop's throughput: tool calls per second through approval-free tools, measured
//! side by side in one run.
//!
//! ```sh
//! cargo bench -p harness-openai --bench tool_loop
//! HARNESS_BENCH_QUICK=1 cargo bench -p harness-openai --bench tool_loop   # a smoke run
//! ```
//!
//! A model stub on loopback (a plain HTTP/1.1 server in this process, speaking Chat
//! Completions) answers each round of an execution with `K` parallel calls of one tool until
//! the execution has made `R` rounds, then with text. Three figures, alternating, median of
//! 5 rounds:
//!
//! 1. the tool alone: the same number of calls through its `ToolHandle` (validation, policy),
//!    `K` at a time: what a call costs without a model;
//! 2. the loop on the bare `AdapterService`: each round a request, a streamed response
//!    parsed, `K` `tool.call.started`/`completed` pairs, the results sent back;
//! 3. the loop through `HarnessStack::defaults_for` (tracing, metrics, idempotency,
//!    preflight, capacity, retry, redaction).
//!
//! Printed as calls/s and as ratios to (1); never asserted.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::join_all;
use harness_core::id::{ExecutionId, ToolCallId};
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
use harness_core::tool::{
    FnTool, ProviderNameRule, ProviderToolNames, ToolCallContext, ToolHandle, ToolId, ToolSet,
};
use harness_layers::stack::HarnessStack;
use harness_openai::{Endpoint, OpenAiAdapter};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::ServiceExt;

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Input {
    /// A number.
    n: u64,
}

fn tool() -> FnTool<
    Input,
    impl Fn(Input, ToolCallContext) -> std::future::Ready<Result<u64, String>> + Send + Sync + 'static,
> {
    FnTool::new(
        "bench.double".parse().unwrap(),
        "Doubles a number.",
        |i: Input, _| std::future::ready(Ok::<_, String>(i.n * 2)),
    )
    .unwrap()
}

/// Serves Chat Completions: `calls` calls of `name` per round until `rounds` rounds, then
/// text.
async fn model(rounds: usize, calls: usize, name: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let name = Arc::new(name);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let name = Arc::clone(&name);
            tokio::spawn(async move {
                let mut request = Vec::with_capacity(64 * 1024);
                let mut buf = vec![0u8; 64 * 1024];
                // Headers, then the body by its length.
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
                let done = body["messages"]
                    .as_array()
                    .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
                let mut sse = String::new();
                if done < rounds {
                    let tool_calls: Vec<_> = (0..calls)
                        .map(|i| {
                            json!({"index": i, "id": format!("c{done}_{i}"), "type": "function",
                                   "function": {"name": &*name, "arguments": format!("{{\"n\":{i}}}")}})
                        })
                        .collect();
                    let chunk =
                        json!({"choices": [{"index": 0, "delta": {"tool_calls": tool_calls}}]});
                    sse.push_str(&format!("data: {chunk}\n\n"));
                    let end = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]});
                    sse.push_str(&format!("data: {end}\n\n"));
                } else {
                    let text = json!({"choices": [{"index": 0, "delta": {"content": "done"}, "finish_reason": "stop"}]});
                    sse.push_str(&format!("data: {text}\n\n"));
                }
                sse.push_str("data: [DONE]\n\n");
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let quick = std::env::var_os("HARNESS_BENCH_QUICK").is_some();
    let (executions, rounds, calls) = if quick { (4, 2, 8) } else { (40, 8, 32) };
    let total = executions * rounds * calls;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let id: ToolId = "bench.double".parse().unwrap();
        let name = ProviderToolNames::new([&id], ProviderNameRule::COMMON)
            .to_provider(&id)
            .unwrap()
            .to_owned();
        let url = model(rounds, calls, name).await;
        let adapter = || OpenAiAdapter::new(Endpoint::new(url.clone(), "bench")).unwrap();
        let bare = AdapterService::builder(adapter())
            .tools(ToolSet::new().tool(tool()).unwrap())
            .build();
        let stacked = {
            let adapter = adapter();
            HarnessStack::defaults_for(&adapter)
                .unwrap()
                .tools(ToolSet::new().tool(tool()).unwrap())
                .service(adapter)
        };
        let handle = ToolHandle::new(Arc::new(tool()));

        let mut alone = Vec::new();
        let mut loop_bare = Vec::new();
        let mut loop_stack = Vec::new();
        for _ in 0..5 {
            // 1. The tool alone, `calls` at a time.
            let started = Instant::now();
            for _ in 0..executions * rounds {
                let batch = (0..calls).map(|i| {
                    let ctx = ToolCallContext::new(ToolCallId::generate(), ExecutionId::generate());
                    handle.invoke(json!({"n": i}), ctx)
                });
                let outcomes = join_all(batch).await;
                assert!(outcomes.iter().all(|o| o.is_success()));
            }
            alone.push(total as f64 / started.elapsed().as_secs_f64());

            // 2. and 3. The loop, executions one after the other.
            for (stacked_run, out) in [(false, &mut loop_bare), (true, &mut loop_stack)] {
                let started = Instant::now();
                for _ in 0..executions {
                    let request = ExecutionRequest::new("call the tool");
                    let execution = if stacked_run {
                        stacked.clone().oneshot(request).await
                    } else {
                        bare.start(request).await
                    }
                    .unwrap();
                    match execution.outcome().await {
                        Outcome::Succeeded(_) => {}
                        other => panic!("the bench execution did not succeed: {other:?}"),
                    }
                }
                out.push(total as f64 / started.elapsed().as_secs_f64());
            }
        }
        let (a, b, s) = (median(alone), median(loop_bare), median(loop_stack));
        println!(
            "tool loop: {executions} executions x {rounds} rounds x {calls} parallel calls = {total} calls, median of 5"
        );
        println!("  the tool alone (ToolHandle::invoke)   {a:>12.0} calls/s   1.00");
        println!("  the loop, bare AdapterService         {b:>12.0} calls/s   {:.3}", b / a);
        println!("  the loop, HarnessStack::defaults_for  {s:>12.0} calls/s   {:.3}", s / a);
        println!(
            "  per call in the loop: {:.1} us bare, {:.1} us stacked (round trips included)",
            1e6 / b,
            1e6 / s
        );
    });
}
