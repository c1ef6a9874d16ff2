//! Plain invocation over HTTP: `POST /v1/executions?wait=` and `GET
//! /v1/executions/{id}/wait`, over real HTTP on loopback: a run that ends in time, one that
//! does not (then waited for again), one paused on an action (answered, then waited past),
//! another principal's execution, and waits the server refuses.

use std::sync::Arc;
use std::time::{Duration, Instant};

use harness_core::store::{MemoryStore, ReplicaId};
use harness_layers::stack::HarnessStack;
use harness_scripted::{Script, ScriptedAdapter, ScriptedOptions};
use harness_server::auth::BearerTokens;
use harness_server::{Instance, Server};
use serde_json::{Value, json};

#[path = "support/processes.rs"]
mod processes;

const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789ab";

/// The server's maximum wait in these tests.
const MAX_WAIT: Duration = Duration::from_secs(5);

struct Running {
    url: String,
    http: reqwest::Client,
}

async fn server() -> Running {
    let adapter = ScriptedAdapter::quickstart();
    let stack = HarnessStack::defaults_for(&adapter).unwrap();
    let server = Server::builder()
        .instance(Instance::new(
            &stack,
            adapter,
            Arc::new(MemoryStore::new()),
            ReplicaId::new("r1"),
        ))
        .authenticate(
            BearerTokens::new()
                .with_token("alice", ALICE)
                .unwrap()
                .with_token("bob", BOB)
                .unwrap(),
        )
        .max_wait(MAX_WAIT)
        .build()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, server.router()).await });
    Running {
        url,
        http: reqwest::Client::new(),
    }
}

impl Running {
    /// `(status, Location, body)`.
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> (u16, Option<String>, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let location = response
            .headers()
            .get("location")
            .map(|l| l.to_str().unwrap().to_owned());
        let text = response.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, location, body)
    }

    async fn start(&self, query: &str, body: Value) -> (u16, Option<String>, Value) {
        self.send(
            reqwest::Method::POST,
            &format!("/v1/executions{query}"),
            ALICE,
            Some(body),
        )
        .await
    }

    async fn get(&self, path: &str, token: &str) -> (u16, Value) {
        let (status, _, body) = self.send(reqwest::Method::GET, path, token, None).await;
        (status, body)
    }
}

fn scripted(script: &Script) -> Value {
    json!({
        "adapter": "scripted",
        "message": "go",
        "options": ScriptedOptions::with_script(script.clone()).to_value(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_ends_in_time_answers_its_outcome() {
    let server = server().await;
    let script = Script::builder()
        .reasoning("hmm")
        .text("It is ")
        .text("sunny.")
        .usage(12, 3)
        .tool_call(
            "call_1".parse().unwrap(),
            "weather",
            json!({"city": "Paris"}),
            json!("sunny"),
        )
        .artifact("text/plain", "report", "file:///workspace/report.txt")
        .complete("done")
        .build();
    let (status, location, waited) = server.start("?wait=4s", scripted(&script)).await;
    assert_eq!(status, 201, "{waited}");
    assert_eq!(waited["status"], "ended", "{waited}");
    assert!(waited.get("next").is_none(), "{waited}");
    let outcome = &waited["outcome"];
    let id = outcome["executionId"].as_str().unwrap().to_owned();
    assert_eq!(location.as_deref(), Some(&*format!("/v1/executions/{id}")));
    assert_eq!(outcome["state"], "succeeded");
    assert_eq!(outcome["text"], "It is sunny.");
    assert_eq!(outcome["reasoning"], "hmm");
    assert_eq!(outcome["summary"], "done");
    assert_eq!(outcome["usage"]["inputTokens"], 12);
    assert_eq!(outcome["usage"]["outputTokens"], 3);
    assert_eq!(
        outcome["toolCalls"],
        json!([{"callId": "call_1", "tool": "weather", "arguments": {"city": "Paris"},
                "outcome": {"status": "success", "output": "sunny"}}])
    );
    assert_eq!(outcome["artifacts"][0]["mediaType"], "text/plain");
    assert!(outcome["lastSeq"].as_u64().unwrap() > 5);

    // Waiting on an ended execution answers the same outcome at once.
    let (status, again) = server
        .get(&format!("/v1/executions/{id}/wait"), ALICE)
        .await;
    assert_eq!(status, 200);
    assert_eq!(again, waited);
    // A wait of 0 reads what is stored, then waits no more.
    let (status, stored) = server
        .get(&format!("/v1/executions/{id}/wait?timeout=0"), ALICE)
        .await;
    assert_eq!(status, 200);
    assert_eq!(stored, waited);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_answers_its_classified_error() {
    let server = server().await;
    let script = Script::builder()
        .error(
            harness_core::error::ErrorCategory::Unavailable,
            "provider down",
        )
        .build();
    let (status, _, waited) = server.start("?wait=4s", scripted(&script)).await;
    assert_eq!(status, 201, "{waited}");
    assert_eq!(waited["status"], "ended");
    assert_eq!(waited["outcome"]["state"], "failed");
    assert_eq!(waited["outcome"]["error"]["category"], "unavailable");
    assert_eq!(waited["outcome"]["error"]["retryable"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_still_going_when_the_wait_runs_out_is_waited_for_again() {
    let server = server().await;
    let script = Script::builder()
        .text("first ")
        .delay(Duration::from_millis(1500))
        .text("second")
        .complete("ok")
        .build();
    let started = Instant::now();
    let (status, _, waited) = server.start("?wait=300ms", scripted(&script)).await;
    assert_eq!(status, 201, "{waited}");
    assert!(
        started.elapsed() < Duration::from_millis(1400),
        "it waited too long"
    );
    assert_eq!(waited["status"], "timed_out", "{waited}");
    let state = waited["outcome"]["state"].as_str().unwrap();
    assert!(
        ["queued", "starting", "running"].contains(&state),
        "{waited}"
    );
    let id = waited["outcome"]["executionId"].as_str().unwrap();
    let next = waited["next"].as_str().unwrap();
    assert_eq!(next, format!("/v1/executions/{id}/wait"));

    let (status, waited) = server.get(&format!("{next}?timeout=5s"), ALICE).await;
    assert_eq!(status, 200, "{waited}");
    assert_eq!(waited["status"], "ended", "{waited}");
    assert_eq!(waited["outcome"]["text"], "first second");
    assert_eq!(waited["outcome"]["state"], "succeeded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_paused_on_an_action_answers_at_once_and_is_waited_past_its_answer() {
    let server = server().await;
    // The bundled script asks to approve one `write_file` call.
    let body = json!({"adapter": "scripted", "message": "summarize my notes"});
    let (status, _, waited) = server.start("?wait=4s", body).await;
    assert_eq!(status, 201, "{waited}");
    assert_eq!(waited["status"], "awaiting_action", "{waited}");
    assert_eq!(waited["outcome"]["state"], "awaiting_approval");
    let action = waited["outcome"]["pendingAction"].clone();
    let action_id = action["id"].as_str().unwrap();
    let id = waited["outcome"]["executionId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(waited["outcome"]["toolCalls"][0]["tool"], "write_file");
    assert!(waited["outcome"]["toolCalls"][0].get("outcome").is_none());

    // Waiting while it is paused answers at once: only an answer moves it.
    let started = Instant::now();
    let (status, again) = server
        .get(&format!("/v1/executions/{id}/wait?timeout=5s"), ALICE)
        .await;
    assert_eq!(status, 200);
    assert_eq!(again["status"], "awaiting_action");
    assert_eq!(again["outcome"]["pendingAction"], action);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "a paused run's wait did not answer at once"
    );

    let (status, _, answered) = server
        .send(
            reqwest::Method::POST,
            &format!("/v1/executions/{id}/actions/{action_id}"),
            ALICE,
            Some(json!({"type": "tool_approval", "revision": action["revision"], "answer": {
                "type": "decide",
                "decisions": [{"callId": "call_write_summary", "decision": {"type": "approve"}}],
            }})),
        )
        .await;
    assert_eq!(status, 200, "{answered}");

    let (status, done) = server
        .get(&format!("/v1/executions/{id}/wait?timeout=5s"), ALICE)
        .await;
    assert_eq!(status, 200);
    assert_eq!(done["status"], "ended", "{done}");
    assert_eq!(done["outcome"]["state"], "succeeded");
    assert!(done["outcome"].get("pendingAction").is_none());
    assert_eq!(
        done["outcome"]["toolCalls"][0]["outcome"]["status"], "success",
        "{done}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_principals_execution_is_not_found() {
    let server = server().await;
    let script = Script::builder().text("mine").complete("ok").build();
    let (_, _, waited) = server.start("?wait=4s", scripted(&script)).await;
    let id = waited["outcome"]["executionId"].as_str().unwrap();
    let (status, body) = server.get(&format!("/v1/executions/{id}/wait"), BOB).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "EXECUTION_NOT_FOUND");
    assert!(!body.to_string().contains("mine"));
    // Exactly as one that does not exist.
    let (status, missing) = server
        .get("/v1/executions/exec_00000000000000000000000000/wait", ALICE)
        .await;
    assert_eq!(status, 404);
    assert_eq!(missing["error"]["code"], body["error"]["code"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_the_server_refuses_start_nothing() {
    let server = server().await;
    let script = Script::builder().text("x").complete("ok").build();
    for (query, says) in [
        ("?wait=6s", "at most 5s"),
        ("?wait=10000ms", "at most 5s"),
        ("?wait=soon", "`wait=30s`"),
        ("?wait=-1", "`wait=30s`"),
        ("?wait=1s&stream=no", "unknown field `stream`"),
    ] {
        let (status, _, body) = server.start(query, scripted(&script)).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["error"]["code"], "REQUEST_INVALID", "{query}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{query}: {message}");
    }
    let (_, list) = server.get("/v1/executions", ALICE).await;
    assert_eq!(list["executions"], json!([]), "nothing was started");

    let (_, _, waited) = server.start("?wait=0", scripted(&script)).await;
    let id = waited["outcome"]["executionId"].as_str().unwrap();
    let (status, body) = server
        .get(&format!("/v1/executions/{id}/wait?timeout=1m"), ALICE)
        .await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = server
        .get(&format!("/v1/executions/{id}/wait?timeout=6s"), ALICE)
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 5s")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_asks_the_model_loop_for_whole_responses() {
    let dir = std::env::temp_dir().join(format!("harness-wait-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (_mock, model) = processes::aimock(
        &dir,
        &json!([{"match": {"userMessage": "hello"}, "response": {"content": "Hello there, friend.",
            "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}}, "chunkSize": 4}]),
    );
    let config = harness_server::config::Config::from_toml(&format!(
        r#"max_wait_secs = 10

[store]
kind = "memory"

[[tokens]]
principal = "alice"
sha256 = "{alice}"

[openai.endpoints.default]
baseUrl = "{model}/v1"
model = "gpt-4.1"
"#,
        alice = harness_server::auth::digest(ALICE),
    ))
    .unwrap();
    let (server, _) = config.server(config.tokens().unwrap()).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, server.router()).await });
    let running = Running {
        url,
        http: reqwest::Client::new(),
    };
    let body = json!({"adapter": "openai", "message": "hello"});
    let (status, _, waited) = running.start("?wait=10s", body.clone()).await;
    assert_eq!(status, 201, "{waited}");
    assert_eq!(waited["status"], "ended", "{waited}");
    assert_eq!(waited["outcome"]["text"], "Hello there, friend.");
    assert_eq!(waited["outcome"]["usage"]["outputTokens"], 4);
    // The operator's `max_wait_secs` bounds it.
    let (status, _, refused) = running.start("?wait=11s", body.clone()).await;
    assert_eq!(status, 400, "{refused}");
    // One whole response: one text delta where a stream made several.
    let id = waited["outcome"]["executionId"].as_str().unwrap();
    let (_, page) = running
        .get(&format!("/v1/executions/{id}/events"), ALICE)
        .await;
    let deltas = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "message.delta")
        .count();
    assert_eq!(deltas, 1, "{page}");
    // Without a wait, the same request streams.
    let (status, _, view) = running.start("", body).await;
    assert_eq!(status, 201);
    let id = view["id"].as_str().unwrap();
    let (_, waited) = running
        .get(&format!("/v1/executions/{id}/wait?timeout=5s"), ALICE)
        .await;
    assert_eq!(waited["status"], "ended", "{waited}");
    let journal: Value = reqwest::get(format!("{model}/__aimock/journal"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let streamed: Vec<&Value> = journal
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| &entry["body"]["stream"])
        .collect();
    assert_eq!(streamed, [&json!(false), &json!(true)], "{journal}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_waits_each_get_their_own_outcome() {
    let server = Arc::new(server().await);
    let waits = (0..48).map(|i| {
        let server = Arc::clone(&server);
        async move {
            let script = Script::builder()
                .text(format!("reply {i}"))
                .delay(Duration::from_millis(20))
                .complete("ok")
                .build();
            let (status, _, waited) = server.start("?wait=5s", scripted(&script)).await;
            (i, status, waited)
        }
    });
    for (i, status, waited) in futures_util::future::join_all(waits).await {
        assert_eq!(status, 201, "{waited}");
        assert_eq!(waited["status"], "ended", "{waited}");
        assert_eq!(waited["outcome"]["text"], format!("reply {i}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_that_waits_finds_the_execution_a_plain_start_made() {
    let server = server().await;
    let script = Script::builder().text("once").complete("ok").build();
    let start = |query: &'static str| {
        let body = scripted(&script);
        let server = &server;
        async move {
            server
                .http
                .post(format!("{}/v1/executions{query}", server.url))
                .bearer_auth(ALICE)
                .header("idempotency-key", "retry-1")
                .json(&body)
                .send()
                .await
                .unwrap()
        }
    };
    let first = start("").await;
    assert_eq!(first.status(), 201);
    let first: Value = first.json().await.unwrap();
    // The same request, waited for: not a different one (`delivery` is not its identity).
    let again = start("?wait=4s").await;
    assert_eq!(again.status(), 200);
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["outcome"]["executionId"], first["id"], "{again}");
    assert_eq!(again["status"], "ended");
    assert_eq!(again["outcome"]["text"], "once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_of_zero_answers_what_the_store_holds() {
    // SQLite answers reads off the caller's task: a wait of 0 still reads what is stored.
    let dir = std::env::temp_dir().join(format!("harness-wait-zero-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = harness_server::config::Config::from_toml(&format!(
        r#"[store]
kind = "sqlite"
path = "{db}"

[[tokens]]
principal = "alice"
sha256 = "{alice}"

[scripted]
"#,
        db = dir.join("harness.db").display(),
        alice = harness_server::auth::digest(ALICE),
    ))
    .unwrap();
    let (server, _) = config.server(config.tokens().unwrap()).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, server.router()).await });
    let running = Running {
        url,
        http: reqwest::Client::new(),
    };
    // The bundled script pauses on an approval.
    let body = json!({"adapter": "scripted", "message": "summarize my notes"});
    let (status, _, paused) = running.start("?wait=4s", body).await;
    assert_eq!(status, 201, "{paused}");
    assert_eq!(paused["status"], "awaiting_action", "{paused}");
    let id = paused["outcome"]["executionId"].as_str().unwrap();
    for _ in 0..20 {
        let (status, now) = running
            .get(&format!("/v1/executions/{id}/wait?timeout=0"), ALICE)
            .await;
        assert_eq!(status, 200);
        assert_eq!(now, paused);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
