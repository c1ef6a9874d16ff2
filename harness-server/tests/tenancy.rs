//! A conversation is its caller's. Two principals name the same `conversationId` (and the
//! same AG-UI `threadId` and `runId`) on the model loop, served over HTTP against the mock
//! model server: the model's request on bob's turn holds none of alice's messages, alice's
//! own later turn holds them all, and bob's lists, reads and concurrent turns neither reveal
//! nor disturb hers.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

const ALICE: &str = "alice-tenancy-token-0123456789";
const BOB: &str = "bob-tenancy-token-0123456789ab";

#[path = "support/processes.rs"]
mod processes;

use processes::aimock;

/// The `harness.toml` server (alice's and bob's tokens, the model loop on `model`), in
/// this process: its base URL.
async fn serve(model: &str) -> String {
    let config = harness_server::config::Config::from_toml(&format!(
        r#"[store]
kind = "memory"

[[tokens]]
principal = "alice"
sha256 = "{alice}"

[[tokens]]
principal = "bob"
sha256 = "{bob}"

[openai.endpoints.default]
baseUrl = "{model}/v1"
model = "gpt-4.1"
"#,
        alice = harness_server::auth::digest(ALICE),
        bob = harness_server::auth::digest(BOB),
    ))
    .unwrap();
    let (server, _) = config.server(config.tokens().unwrap()).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, server.router()).await });
    url
}

/// Starts an execution as `token` and waits for its end: its id and its last event's kind.
async fn run(http: &reqwest::Client, url: &str, token: &str, body: Value) -> (String, String) {
    let started: Value = http
        .post(format!("{url}/v1/executions"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = started["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{started}"))
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let page: Value = http
            .get(format!("{url}/v1/executions/{id}/events?after=0"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let events = page["events"].as_array().cloned().unwrap_or_default();
        if let Some(last) = events.last()
            && last["kind"]
                .as_str()
                .is_some_and(|k| ["run.succeeded", "run.failed", "run.cancelled"].contains(&k))
        {
            return (id, last["kind"].as_str().unwrap().to_owned());
        }
        assert!(Instant::now() < deadline, "{id} did not end: {page}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What the model received, oldest first.
async fn journal(http: &reqwest::Client, model: &str) -> Vec<Value> {
    http.get(format!("{model}/__aimock/journal"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The text of every message of the `n`th model request.
fn said(journal: &[Value], n: usize) -> String {
    journal[n]["body"]["messages"].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_principals_naming_one_conversation_have_two() {
    let dir = std::env::temp_dir().join(format!("harness-tenancy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (_mock, model) = aimock(
        &dir,
        &json!([
            {"match": {"userMessage": "secret"}, "response": {"content": "Noted."}},
            {"match": {"userMessage": "know"}, "response": {"content": "I know what you told me."}},
        ]),
    );
    let url = serve(&model).await;
    let http = reqwest::Client::new();
    let turn = |message: &str| json!({"adapter": "openai", "message": message, "conversationId": "shared"});

    // Alice tells the model a secret; bob names her conversation id.
    let (alices, end) = run(&http, &url, ALICE, turn("my secret is alpha-7")).await;
    assert_eq!(end, "run.succeeded");
    let (bobs, end) = run(&http, &url, BOB, turn("what do you know?")).await;
    assert_eq!(end, "run.succeeded");
    // Alice's own next turn carries her history.
    let (_, end) = run(&http, &url, ALICE, turn("what do you know?")).await;
    assert_eq!(end, "run.succeeded");
    let log = journal(&http, &model).await;
    assert_eq!(log.len(), 3, "{log:?}");
    assert!(said(&log, 0).contains("alpha-7"));
    assert!(
        !said(&log, 1).contains("alpha-7") && !said(&log, 1).contains("Noted."),
        "bob's turn carried alice's conversation: {}",
        said(&log, 1)
    );
    assert!(
        said(&log, 2).contains("alpha-7") && !said(&log, 2).contains("I know what you told me"),
        "alice's second turn holds her history and nothing of bob's: {}",
        said(&log, 2)
    );

    // Bob neither lists nor reads alice's executions, nor her events.
    let listed: Value = http
        .get(format!("{url}/v1/executions"))
        .bearer_auth(BOB)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = listed["executions"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .filter_map(|e| e["id"].as_str())
        .collect();
    assert_eq!(ids, [bobs.as_str()], "{listed}");
    for path in ["", "/events?after=0"] {
        let read = http
            .get(format!("{url}/v1/executions/{alices}{path}"))
            .bearer_auth(BOB)
            .send()
            .await
            .unwrap();
        assert_eq!(read.status(), 404, "{path}");
    }

    // Concurrent turns of the two on the one id never conflict, and each request to the
    // model holds its own caller's history only.
    for _ in 0..5 {
        let (a, b) = tokio::join!(
            run(&http, &url, ALICE, turn("alice asks: what do you know?")),
            run(&http, &url, BOB, turn("bob asks: what do you know?")),
        );
        assert_eq!(
            (a.1.as_str(), b.1.as_str()),
            ("run.succeeded", "run.succeeded")
        );
    }
    let log = journal(&http, &model).await;
    assert_eq!(log.len(), 13);
    for n in 3..log.len() {
        let text = said(&log, n);
        let mine = |who: &str| {
            log[n]["body"]["messages"]
                .as_array()
                .unwrap()
                .iter()
                .rev()
                .find(|m| m["role"] == "user")
                .is_some_and(|m| m["content"].to_string().contains(who))
        };
        if mine("bob asks") {
            assert!(
                !text.contains("alpha-7") && !text.contains("alice asks"),
                "{text}"
            );
        } else {
            assert!(mine("alice asks") && text.contains("alpha-7"), "{text}");
            assert!(!text.contains("bob asks"), "{text}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// AG-UI: the same `threadId` and the same `runId` under two principals are two threads and
/// two runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_principals_naming_one_agui_thread_have_two() {
    let dir = std::env::temp_dir().join(format!("harness-tenancy-agui-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (_mock, model) = aimock(
        &dir,
        &json!([
            {"match": {"userMessage": "secret"}, "response": {"content": "Noted."}},
            {"match": {"userMessage": "know"}, "response": {"content": "I know what you told me."}},
        ]),
    );
    let url = serve(&model).await;
    let http = reqwest::Client::new();
    let agui = |token: &'static str, run: &'static str, message: &'static str| {
        let http = http.clone();
        let url = url.clone();
        async move {
            let body = json!({
                "threadId": "shared-thread",
                "runId": run,
                "messages": [{"id": "m1", "role": "user", "content": message}],
            });
            http.post(format!("{url}/v1/agui/openai"))
                .bearer_auth(token)
                .header("Accept", "text/event-stream")
                .json(&body)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    };
    let first = agui(ALICE, "run-1", "my secret is beta-9").await;
    assert!(
        first.contains("RUN_FINISHED") && first.contains("Noted."),
        "{first}"
    );
    // Bob's run names alice's thread and run id: a run of his own, not a replay of hers.
    let second = agui(BOB, "run-1", "what do you know?").await;
    assert!(
        second.contains("RUN_FINISHED") && !second.contains("Noted."),
        "{second}"
    );
    let log = journal(&http, &model).await;
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(
        !said(&log, 1).contains("beta-9"),
        "bob's run carried alice's thread: {}",
        said(&log, 1)
    );
    let third = agui(ALICE, "run-2", "what do you know?").await;
    assert!(third.contains("RUN_FINISHED"), "{third}");
    assert!(said(&journal(&http, &model).await, 2).contains("beta-9"));
    let _ = std::fs::remove_dir_all(&dir);
}
