//! The cost of calling an MCP tool through harness against calling it with rmcp directly,
//! measured side by side in one run.
//!
//! ```sh
//! bash .ci/install-mcp.sh && cargo bench -p harness-mcp --bench mcp_call
//! HARNESS_BENCH_QUICK=1 cargo bench -p harness-mcp --bench mcp_call   # a smoke run
//! ```
//!
//! Two stdio connections to `@modelcontextprotocol/server-everything` (one process each):
//! one an rmcp client calling `echo` itself, the other harness's `McpProvider`, its `echo`
//! called through the `ToolHandle` an adapter gets (argument validation against the schema,
//! policy, cancellation, output bound, result mapping). `N` sequential calls each, alternating,
//! median of 5 rounds: microseconds per call, and the overhead per call.

use std::path::PathBuf;
use std::time::Instant;

use harness_core::id::{ExecutionId, ToolCallId};
use harness_core::tool::{ToolCallContext, ToolSet};
use harness_mcp::{McpProvider, McpServer};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn entry() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(path.exists(), "run .ci/install-mcp.sh first");
    path.display().to_string()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let calls: usize = if std::env::var_os("HARNESS_BENCH_QUICK").is_some() {
        50
    } else {
        2000
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // rmcp directly.
        let mut cmd = tokio::process::Command::new("node");
        cmd.args([entry().as_str(), "stdio"]).kill_on_drop(true);
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let direct = ().serve(transport).await.unwrap();
        // Through harness.
        let server = McpServer::stdio(
            "everything",
            ["node".to_owned(), entry(), "stdio".to_owned()],
        )
        .allow_env("PATH");
        let set = ToolSet::new()
            .provider(McpProvider::new(server).unwrap())
            .unwrap();
        let resolved = set
            .resolve(
                None,
                &ExecutionId::generate(),
                None,
                &CancellationToken::new(),
            )
            .await;
        let echo = resolved
            .handles
            .iter()
            .find(|h| h.id().as_str() == "everything.echo")
            .expect("the echo tool")
            .clone();

        let mut raw = Vec::new();
        let mut ours = Vec::new();
        for _ in 0..5 {
            let started = Instant::now();
            for i in 0..calls {
                let args = json!({"message": format!("m{i}")});
                let params = CallToolRequestParams::new("echo")
                    .with_arguments(args.as_object().cloned().unwrap());
                let result = direct.peer().call_tool(params).await.unwrap();
                assert_ne!(result.is_error, Some(true));
            }
            raw.push(started.elapsed().as_secs_f64() * 1e6 / calls as f64);

            let started = Instant::now();
            for i in 0..calls {
                let ctx = ToolCallContext::new(ToolCallId::generate(), ExecutionId::generate());
                let outcome = echo.invoke(json!({"message": format!("m{i}")}), ctx).await;
                assert!(outcome.is_success(), "{outcome:?}");
            }
            ours.push(started.elapsed().as_secs_f64() * 1e6 / calls as f64);
        }
        let (r, o) = (median(raw), median(ours));
        println!("MCP echo over stdio (server-everything), {calls} sequential calls, median of 5");
        println!(
            "  rmcp directly                  {r:>9.1} us/call   {:>8.0} calls/s",
            1e6 / r
        );
        println!(
            "  through harness (ToolHandle)   {o:>9.1} us/call   {:>8.0} calls/s",
            1e6 / o
        );
        println!(
            "  overhead per call              {:>9.1} us         ratio {:.3}",
            o - r,
            o / r
        );
        let _ = direct.cancel().await;
    });
}
