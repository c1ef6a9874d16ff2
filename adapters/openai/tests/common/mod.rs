//! The mock model server (`@copilotkit/aimock`) the tests run, and helpers around an
//! execution's log.

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures_util::StreamExt;
use harness_core::event::EventPayload;
use harness_core::id::Cursor;
use harness_core::service::ExecutionHandle;
use serde_json::{Value, json};

fn modules() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/aimock/node_modules");
    assert!(
        dir.join("@copilotkit/aimock/package.json").exists(),
        "the mock model server is not installed: run .ci/install-aimock.sh (npm ci in {})",
        dir.display()
    );
    dir
}

/// aimock on a free loopback port with `fixtures`, killed on drop.
pub struct Mock {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    _dir: TempDir,
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "harness-openai-{tag}-{}-{}",
            std::process::id(),
            harness_core::id::ExecutionId::generate()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Mock {
    pub fn start(fixtures: &Value) -> Self {
        let dir = TempDir::new("aimock");
        let file = dir.0.join("fixtures.json");
        std::fs::write(
            &file,
            serde_json::to_vec_pretty(&json!({"fixtures": fixtures})).unwrap(),
        )
        .unwrap();
        let mut child = Command::new("node")
            .arg(modules().join("@copilotkit/aimock/dist/cli.js"))
            .args(["-p", "0", "-h", "127.0.0.1", "-f"])
            .arg(&file)
            .env("AIMOCK_STRICT_TURN_INDEX", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("node runs aimock");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(at) = line.find("listening on ") {
                    let _ = tx.send(line[at + "listening on ".len()..].trim().to_owned());
                }
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("aimock says where it listens");
        Self {
            child,
            url,
            _dir: dir,
        }
    }

    /// The base URL of its OpenAI-compatible API.
    pub fn base(&self) -> String {
        format!("{}/v1", self.url)
    }

    /// What it received, oldest first (request bodies; Responses requests in chat form).
    pub async fn journal(&self) -> Vec<Value> {
        let body = reqwest::get(format!("{}/__aimock/journal", self.url))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        serde_json::from_slice(&body).unwrap()
    }
}

impl Mock {
    /// Replaces its fixtures with `fixtures` (first match wins), over plain blocking HTTP:
    /// for callers that are not async (a conformance knob building its request).
    pub fn set_fixtures_blocking(&self, fixtures: &[Value]) {
        let address = self.url.trim_start_matches("http://").to_owned();
        let send = |method: &str, body: &str| {
            use std::io::{Read, Write};
            let mut stream = std::net::TcpStream::connect(&address).unwrap();
            write!(
                stream,
                "{method} /__aimock/fixtures HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            let mut answer = String::new();
            stream.read_to_string(&mut answer).unwrap();
            assert!(
                answer.starts_with("HTTP/1.1 200"),
                "aimock refused {method}: {answer}"
            );
        };
        send("DELETE", "");
        send("POST", &json!({"fixtures": fixtures}).to_string());
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every event of the execution, to its end.
pub async fn payloads(execution: &ExecutionHandle) -> Vec<EventPayload> {
    tokio::time::timeout(
        Duration::from_secs(60),
        execution
            .events(Cursor::START)
            .map(|e| e.payload().clone())
            .collect::<Vec<_>>(),
    )
    .await
    .expect("the execution ended within a minute")
}

/// The kinds of `log`.
pub fn kinds(log: &[EventPayload]) -> Vec<&'static str> {
    log.iter().map(|p| p.kind().as_str()).collect()
}

/// The kinds of `log`, runs of one delta kind as one.
pub fn squeezed(log: &[EventPayload]) -> Vec<&'static str> {
    let mut out = kinds(log);
    out.dedup_by(|a, b| a == b && matches!(*a, "message.delta" | "reasoning.delta"));
    out
}

/// The text of the `message.delta` events of `log`.
pub fn text(log: &[EventPayload]) -> String {
    log.iter()
        .filter_map(|p| match p {
            EventPayload::MessageDelta(d) => Some(d.text.as_str()),
            _ => None,
        })
        .collect()
}

/// The text of the `reasoning.delta` events of `log`.
pub fn reasoning(log: &[EventPayload]) -> String {
    log.iter()
        .filter_map(|p| match p {
            EventPayload::ReasoningDelta(d) => Some(d.text.as_str()),
            _ => None,
        })
        .collect()
}

/// Waits until the execution has a pending action.
pub async fn pending(execution: &ExecutionHandle) -> harness_core::action::ActionRequest {
    for _ in 0..6000 {
        if let Some(action) = execution.pending_actions().pop() {
            return action;
        }
        if execution.state().is_terminal() {
            let log: Vec<_> = execution
                .log()
                .snapshot(Cursor::START)
                .iter()
                .map(|e| e.payload().clone())
                .collect();
            panic!("the execution ended without an action: {log:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no action was requested within a minute")
}

// ---------------------------------------------------------------------------------------------
// Tools the tests offer the model
// ---------------------------------------------------------------------------------------------

/// The name the model knows tool `id` by (reversible, provider-safe).
pub fn name(id: &str) -> String {
    let id: harness_core::tool::ToolId = id.parse().unwrap();
    harness_core::tool::ProviderToolNames::new([&id], harness_core::tool::ProviderNameRule::COMMON)
        .to_provider(&id)
        .unwrap()
        .to_owned()
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct City {
    /// The city.
    pub city: String,
}

/// `weather.now` (counts its calls) and `files.delete` (needs approval).
pub fn tools(
    calls: &std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> harness_core::tool::ToolSet {
    let counted = std::sync::Arc::clone(calls);
    let weather = harness_core::tool::FnTool::new(
        "weather.now".parse().unwrap(),
        "The weather in a city now.",
        move |c: City, _| {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move { Ok::<_, String>(format!("sunny in {}", c.city)) }
        },
    )
    .unwrap();
    let delete = harness_core::tool::FnTool::new(
        "files.delete".parse().unwrap(),
        "Deletes a file.",
        |c: City, _| async move { Ok::<_, String>(serde_json::json!({"deleted": c.city})) },
    )
    .unwrap();
    harness_core::tool::ToolSet::new()
        .tool(weather)
        .unwrap()
        .tool_with_policy(
            delete,
            harness_core::tool::ToolPolicy::new().needs_approval(),
        )
        .unwrap()
}
