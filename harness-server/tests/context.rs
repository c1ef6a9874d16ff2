//! The construction context over HTTP, configured in `harness.toml`: the model loop's
//! `[openai.models]` and `[openai.prompt]` (the chosen model and the rendered prompt reach
//! the mock model server; a model or parameter the instance does not offer is refused
//! `422` before any work, naming what it offers), and a request's `interruptPolicy` on the
//! scripted instance (a forbidden pause fails `INTERRUPT_FORBIDDEN` instead of pausing, an
//! unanswered action expires `ACTION_EXPIRED`, each with one terminal event).

use std::time::{Duration, Instant};

use harness_scripted::{Script, ScriptedOptions};
use serde_json::{Value, json};

#[path = "support/processes.rs"]
mod processes;

use processes::aimock;

const ALICE: &str = "alice-context-token-0123456789";

async fn serve(model: &str) -> String {
    let config = harness_server::config::Config::from_toml(&format!(
        r#"[store]
kind = "memory"

[[tokens]]
principal = "alice"
sha256 = "{alice}"

[scripted]

[openai.endpoints.default]
baseUrl = "{model}/v1"
model = "gpt-4.1"
instructions = "You are the test model."

[openai.models]
allowed = ["gpt-4.1-mini", "o4-mini"]
default = "gpt-4.1-mini"

[openai.prompt]
template = "You help the {{{{team}}}} team."
parameters = {{ team = {{ required = true, maxBytes = 20 }} }}
"#,
        alice = harness_server::auth::digest(ALICE),
    ))
    .unwrap();
    let (server, _) = config.server(config.tokens().unwrap()).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, server.router()).await });
    url
}

async fn post(http: &reqwest::Client, url: &str, body: Value) -> (u16, Value) {
    let response = http
        .post(format!("{url}/v1/executions"))
        .bearer_auth(ALICE)
        .json(&body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

/// The events of `id` once it ended.
async fn ended(http: &reqwest::Client, url: &str, id: &str) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let page: Value = http
            .get(format!("{url}/v1/executions/{id}/events?after=0"))
            .bearer_auth(ALICE)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let events = page["events"].as_array().cloned().unwrap_or_default();
        if events.last().is_some_and(|last| {
            ["run.succeeded", "run.failed", "run.cancelled"]
                .contains(&last["kind"].as_str().unwrap_or_default())
        }) {
            return events;
        }
        assert!(Instant::now() < deadline, "{id} did not end: {page}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn kinds(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["kind"].as_str().unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_and_prompt_per_request_reach_the_model_server() {
    let dir = std::env::temp_dir().join(format!("harness-context-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (_mock, model) = aimock(
        &dir,
        &json!([{"match": {"userMessage": "hello"}, "response": {"content": "Hi."}}]),
    );
    let url = serve(&model).await;
    let http = reqwest::Client::new();

    let (status, started) = post(
        &http,
        &url,
        json!({"adapter": "openai", "message": "hello", "model": "o4-mini",
               "promptParameters": {"team": "payments"}}),
    )
    .await;
    assert_eq!(status, 201, "{started}");
    let events = ended(&http, &url, started["id"].as_str().unwrap()).await;
    assert_eq!(kinds(&events).last(), Some(&"run.succeeded"), "{events:?}");
    let journal: Vec<Value> = http
        .get(format!("{model}/__aimock/journal"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let body = &journal.last().unwrap()["body"];
    assert_eq!(body["model"], "o4-mini", "{body}");
    assert_eq!(body["messages"][0]["role"], "system", "{body}");
    assert_eq!(
        body["messages"][0]["content"], "You are the test model.\n\nYou help the payments team.",
        "{body}"
    );

    // Refused before any work, naming what the instance offers.
    for (request, code, says) in [
        (
            json!({"adapter": "openai", "message": "hello", "model": "gpt-5",
                   "promptParameters": {"team": "x"}}),
            "MODEL_NOT_ALLOWED",
            "choose one of: gpt-4.1-mini, o4-mini",
        ),
        (
            json!({"adapter": "openai", "message": "hello"}),
            "PROMPT_PARAMETER_INVALID",
            "`team` is required",
        ),
        (
            json!({"adapter": "openai", "message": "hello",
                   "promptParameters": {"team": "x", "tone": "dry"}}),
            "PROMPT_PARAMETER_INVALID",
            "unknown prompt parameter `tone`",
        ),
        (
            json!({"adapter": "openai", "message": "hello",
                   "promptParameters": {"team": "x".repeat(21)}}),
            "PROMPT_PARAMETER_INVALID",
            "more than its limit of 20",
        ),
        (
            json!({"adapter": "scripted", "message": "hello", "model": "o4-mini"}),
            "MODEL_NOT_ALLOWED",
            "offers no choice of model",
        ),
    ] {
        let (status, body) = post(&http, &url, request).await;
        assert_eq!(status, 422, "{body}");
        assert_eq!(body["error"]["code"], code, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
    }
    // A mistyped field of the policy is refused naming it.
    let (status, body) = post(
        &http,
        &url,
        json!({"adapter": "scripted", "message": "hello", "interruptPolicy": {"allw": []}}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("allw"), "{body}");
    let journal: Vec<Value> = http
        .get(format!("{model}/__aimock/journal"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        journal.len(),
        1,
        "only the accepted request reached the model"
    );
}

fn form_script() -> Value {
    let script = Script::from_json_str(
        &json!({"steps": [
            {"type": "text", "text": "Before the form."},
            {"type": "form", "title": "Who?", "fields": [
                {"name": "name", "label": "Name", "kind": {"type": "text"}}
            ]},
            {"type": "complete", "summary": "done"}
        ]})
        .to_string(),
    )
    .unwrap();
    ScriptedOptions::with_script(script).to_value()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_caller_s_interrupt_policy_holds_over_http() {
    let dir = std::env::temp_dir().join(format!("harness-context-i-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (_mock, model) = aimock(&dir, &json!([]));
    let url = serve(&model).await;
    let http = reqwest::Client::new();

    // No pause permitted: the form fails the run instead of pausing it.
    let (status, started) = post(
        &http,
        &url,
        json!({"adapter": "scripted", "message": "go", "options": form_script(),
               "interruptPolicy": {"allow": ["tool_approval"]}}),
    )
    .await;
    assert_eq!(status, 201, "{started}");
    let events = ended(&http, &url, started["id"].as_str().unwrap()).await;
    let kinds_seen = kinds(&events);
    assert!(!kinds_seen.contains(&"action.requested"), "{kinds_seen:?}");
    assert_eq!(kinds_seen.iter().filter(|k| **k == "run.failed").count(), 1);
    let failed = events.last().unwrap();
    assert_eq!(failed["kind"], "run.failed");
    assert_eq!(
        failed["data"]["error"]["code"], "INTERRUPT_FORBIDDEN",
        "{failed}"
    );

    // An answer deadline: unanswered, the action expires, and the run ends once.
    let (status, started) = post(
        &http,
        &url,
        json!({"adapter": "scripted", "message": "go", "options": form_script(),
               "interruptPolicy": {"answerWithinMs": 300}}),
    )
    .await;
    assert_eq!(status, 201, "{started}");
    let id = started["id"].as_str().unwrap().to_owned();
    let events = ended(&http, &url, &id).await;
    let kinds_seen = kinds(&events);
    assert_eq!(
        &kinds_seen[kinds_seen.len() - 4..],
        [
            "action.requested",
            "run.awaiting_input",
            "run.running",
            "run.failed"
        ],
        "{kinds_seen:?}"
    );
    let failed = events.last().unwrap();
    assert_eq!(
        failed["data"]["error"]["code"], "ACTION_EXPIRED",
        "{failed}"
    );
    assert_eq!(failed["data"]["error"]["category"], "timeout", "{failed}");
    // The late answer is refused: the execution has ended.
    let action = events
        .iter()
        .find(|e| e["kind"] == "action.requested")
        .unwrap();
    let request: harness_core::action::ActionRequest =
        serde_json::from_value(action["data"].clone()).unwrap();
    let answer = request.submit(harness_core::action::FormValues::new().with("name", "Ada"));
    let late = http
        .post(format!("{url}/v1/executions/{id}/actions/{}", request.id))
        .bearer_auth(ALICE)
        .json(&answer)
        .send()
        .await
        .unwrap();
    assert_eq!(late.status(), 409);
}
