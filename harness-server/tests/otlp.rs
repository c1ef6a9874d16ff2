//! `harness serve` exporting traces over OTLP/HTTP (`[telemetry.otlp]` in `harness.toml`) to a
//! real OTLP receiver the test starts (tests/otlp/receiver.py, decoding with the official
//! `opentelemetry-proto` bindings; installed by .ci/install-otlp.sh). An execution started
//! with a caller's `traceparent` runs the model loop (on the mock model server), which calls
//! an MCP server's tool; when the server stops (SIGTERM) what is left is flushed, and the
//! receiver holds one trace: the caller's trace id throughout, the execution's span a child of
//! the caller's span, and admission, the segment, the tool call and the adapter's own model
//! request spans inside it.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_harness");
const TOKEN: &str = "alice-otlp-token-0123456789";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

#[path = "support/processes.rs"]
mod processes;

use processes::{Killed, aimock, root, wait_for_line};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_is_one_trace_continuing_the_callers() {
    let python = root().join("harness-server/tests/otlp/.venv/bin/python");
    assert!(python.exists(), "run .ci/install-otlp.sh");
    let everything = root().join("harness-mcp/tests/servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(everything.exists(), "run .ci/install-mcp.sh");
    let dir = std::env::temp_dir().join(format!("harness-otlp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // The receiver: every exported span, one JSON line each.
    let spans_file = dir.join("spans.jsonl");
    let mut receiver = Command::new(&python)
        .arg(root().join("harness-server/tests/otlp/receiver.py"))
        .arg(&spans_file)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let port = wait_for_line(&mut receiver, "listening ");
    let _receiver = Killed(receiver);

    let id: harness_core::tool::ToolId = "everything.echo".parse().unwrap();
    let name = harness_core::tool::ProviderToolNames::new(
        [&id],
        harness_core::tool::ProviderNameRule::COMMON,
    )
    .to_provider(&id)
    .unwrap()
    .to_owned();
    let fixtures = json!([
        {"match": {"userMessage": "echo", "hasToolResult": true}, "response": {"content": "The server echoed it."}},
        {"match": {"userMessage": "echo"}, "response": {"toolCalls": [{"id": "call_1", "name": name, "arguments": {"message": "served"}}]}},
    ]);
    let (_mock, mock_url) = aimock(&dir, &fixtures);

    std::fs::write(
        dir.join("harness.toml"),
        format!(
            r#"[store]
kind = "memory"

[telemetry.otlp]
endpoint = "http://127.0.0.1:{port}"
service_name = "harness-otlp-test"

[[tokens]]
principal = "alice"
sha256 = "{digest}"

[openai.endpoints.default]
baseUrl = "{mock_url}/v1"
model = "gpt-4.1"

[[mcp.servers]]
name = "everything"
transport = {{ stdio = {{ command = ["node", "{everything}", "stdio"], env = ["PATH"] }} }}
"#,
            digest = harness_server::auth::digest(TOKEN),
            everything = everything.display(),
        ),
    )
    .unwrap();
    let mut serve = Command::new(BIN)
        .args([
            "serve",
            "--config",
            "harness.toml",
            "--listen",
            "127.0.0.1:0",
        ])
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let url = wait_for_line(&mut serve, "harness serving on ");
    let mut serve = Killed(serve);

    let http = reqwest::Client::new();
    let started: Value = http
        .post(format!("{url}/v1/executions"))
        .bearer_auth(TOKEN)
        .header("traceparent", format!("00-{TRACE_ID}-{CALLER_SPAN}-01"))
        .json(&json!({"adapter": "openai", "message": "please echo this", "tools": ["everything"]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let execution = started["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{started}"))
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let page: Value = http
            .get(format!("{url}/v1/executions/{execution}/events?after=0"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if page["ended"] == true {
            let kinds: Vec<&str> = page["events"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|e| e["kind"].as_str())
                .collect();
            assert_eq!(kinds.last(), Some(&"run.succeeded"), "{kinds:?}");
            assert!(kinds.contains(&"tool.call.completed"), "{kinds:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the execution did not end: {page}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(http);

    // Stopping the server flushes the spans still batched.
    let pid = rustix::process::Pid::from_raw(i32::try_from(serve.0.id()).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while serve.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "harness serve did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }

    let spans: Vec<Value> = std::fs::read_to_string(&spans_file)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!spans.is_empty(), "nothing exported");
    for span in &spans {
        assert_eq!(span["service"], "harness-otlp-test");
    }
    let by_id: HashMap<&str, &Value> = spans
        .iter()
        .map(|s| (s["span_id"].as_str().unwrap(), s))
        .collect();
    let root = spans
        .iter()
        .find(|s| s["name"] == "harness.execution")
        .unwrap_or_else(|| panic!("no execution span: {spans:#?}"));
    assert_eq!(root["attributes"]["execution_id"], execution.as_str());
    assert_eq!(root["attributes"]["outcome"], "succeeded");
    assert_eq!(root["trace_id"], TRACE_ID, "the caller's trace");
    assert_eq!(
        root["parent_span_id"], CALLER_SPAN,
        "the caller's span is the parent"
    );
    // The spans under the execution's span, each found by walking up its parents.
    let descends = |span: &Value| {
        let mut at = span;
        for _ in 0..16 {
            if at["span_id"] == root["span_id"] {
                return true;
            }
            match by_id.get(at["parent_span_id"].as_str().unwrap_or_default()) {
                Some(parent) => at = parent,
                None => return false,
            }
        }
        false
    };
    let ours: Vec<&Value> = spans.iter().filter(|s| descends(s)).collect();
    // One trace, the caller's; every span naming the execution is in it.
    for span in &ours {
        assert_eq!(span["trace_id"], TRACE_ID, "{span}");
    }
    for span in &spans {
        if span["attributes"]["execution_id"] == execution.as_str() {
            assert!(descends(span), "outside the execution's trace: {span}");
        }
    }
    let named = |name: &str| -> Vec<&Value> {
        ours.iter().copied().filter(|s| s["name"] == name).collect()
    };
    for name in [
        "harness.admission",
        "harness.segment",
        "harness.tool_call",
        "model.request",
    ] {
        let found = named(name);
        assert!(!found.is_empty(), "no {name} span: {spans:#?}");
    }
    assert_eq!(
        named("harness.admission")[0]["parent_span_id"],
        root["span_id"]
    );
    assert_eq!(
        named("harness.admission")[0]["attributes"]["outcome"],
        "admitted"
    );
    assert_eq!(
        named("harness.tool_call")[0]["attributes"]["tool"],
        "everything.echo"
    );
    assert_eq!(named("model.request").len(), 2, "one per model round");
    for span in named("model.request") {
        assert_eq!(span["parent_span_id"], root["span_id"]);
        assert_eq!(span["attributes"]["adapter"], "openai");
    }
    // The tool call ran inside the turn's segment.
    let segment = named("harness.segment")[0];
    assert_eq!(segment["attributes"]["kind"], "turn");
    assert_eq!(
        named("harness.tool_call")[0]["parent_span_id"],
        segment["span_id"]
    );
    // Nothing secret left: the bearer token never reaches a span.
    assert!(
        !std::fs::read_to_string(&spans_file)
            .unwrap()
            .contains(TOKEN),
        "the token was exported"
    );
}
