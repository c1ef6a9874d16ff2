//! `harness serve` configured with a model endpoint and an MCP server, as an operator writes
//! it in `harness.toml`: an execution started over HTTP runs the model loop (on the mock
//! model server), whose model calls the MCP server's tool (the reference server, over
//! stdio); the answer goes back to the model, and the log says so.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_harness");
const TOKEN: &str = "alice-tools-token-0123456789";

#[path = "support/processes.rs"]
mod processes;

use processes::{Killed, aimock, root, wait_for_line};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_model_loop_calls_an_mcp_servers_tool() {
    let everything = root().join("harness-mcp/tests/servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(everything.exists(), "run .ci/install-mcp.sh");
    let dir = std::env::temp_dir().join(format!("harness-tools-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // The model: asked to echo, it calls `everything.echo`; given the result, it answers.
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
    let _serve = Killed(serve);

    let http = reqwest::Client::new();
    let started: Value = http
        .post(format!("{url}/v1/executions"))
        .bearer_auth(TOKEN)
        .json(&json!({"adapter": "openai", "message": "please echo this", "tools": ["everything"]}))
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
    let events = events_until_ended(&http, &url, &id).await;
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    assert_eq!(kinds.last(), Some(&"run.succeeded"), "{kinds:?}");
    let started = events
        .iter()
        .find(|e| e["kind"] == "tool.call.started")
        .unwrap();
    assert_eq!(started["data"]["tool"], "everything.echo");
    let completed = events
        .iter()
        .find(|e| e["kind"] == "tool.call.completed")
        .unwrap();
    assert_eq!(
        completed["data"]["outcome"],
        json!({"status": "success", "output": "Echo: served"})
    );
    let text: String = events
        .iter()
        .filter(|e| e["kind"] == "message.delta")
        .filter_map(|e| e["data"]["text"].as_str())
        .collect();
    assert_eq!(text, "The server echoed it.");

    // A tool the configuration does not offer is refused before anything runs.
    let refused = http
        .post(format!("{url}/v1/executions"))
        .bearer_auth(TOKEN)
        .json(&json!({"adapter": "openai", "message": "hi", "tools": ["elsewhere.tool"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 400);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "TOOL_NOT_FOUND", "{body}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `callerCredentials` over HTTP (`tool.caller_credentials`): the caller's own credential
/// reaches its MCP server (as the variable the operator named) and nothing else: not an
/// event, not the store's files, not the server's log; what the server echoes comes back
/// redacted. Bad credentials are refused naming what is wrong, never the value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_credential_over_http_reaches_its_server_and_nothing_else() {
    const SECRET: &str = "caller-secret-over-http-4e5f6a7b";
    let everything = root().join("harness-mcp/tests/servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(everything.exists(), "run .ci/install-mcp.sh");
    let dir = std::env::temp_dir().join(format!("harness-credentials-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    let id: harness_core::tool::ToolId = "mine.get_env".parse().unwrap();
    let name = harness_core::tool::ProviderToolNames::new(
        [&id],
        harness_core::tool::ProviderNameRule::COMMON,
    )
    .to_provider(&id)
    .unwrap()
    .to_owned();
    let fixtures = json!([
        {"match": {"userMessage": "environment", "hasToolResult": true}, "response": {"content": "Read it."}},
        {"match": {"userMessage": "environment"}, "response": {"toolCalls": [{"id": "call_1", "name": name, "arguments": {}}]}},
    ]);
    let (_mock, mock_url) = aimock(&dir, &fixtures);
    std::fs::write(
        dir.join("harness.toml"),
        format!(
            r#"[store]
kind = "sqlite"
path = "harness.db"

[[tokens]]
principal = "alice"
sha256 = "{digest}"

[scripted]

[openai.endpoints.default]
baseUrl = "{mock_url}/v1"
model = "gpt-4.1"

[[mcp.servers]]
name = "mine"
transport = {{ stdio = {{ command = ["node", "{everything}", "stdio"], env = ["PATH"] }} }}
callerCredential = {{ env = "MY_CRED" }}
"#,
            digest = harness_server::auth::digest(TOKEN),
            everything = everything.display(),
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("serve.log")).unwrap();
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
        .stderr(log)
        .spawn()
        .unwrap();
    let url = wait_for_line(&mut serve, "harness serving on ");
    let serve = Killed(serve);

    let http = reqwest::Client::new();
    let start = |body: Value| {
        http.post(format!("{url}/v1/executions"))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
    };
    let response = start(json!({
        "adapter": "openai",
        "message": "show me the environment",
        "tools": ["mine"],
        "callerCredentials": {"mine": SECRET},
    }))
    .await
    .unwrap();
    assert_eq!(response.status().as_u16(), 201);
    let started: Value = response.json().await.unwrap();
    assert!(!started.to_string().contains(SECRET), "{started}");
    let id = started["id"].as_str().unwrap().to_owned();
    let events = events_until_ended(&http, &url, &id).await;
    let all = Value::Array(events.clone()).to_string();
    assert!(
        !all.contains(SECRET),
        "an event holds the credential: {all}"
    );
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    assert_eq!(kinds.last(), Some(&"run.succeeded"), "{kinds:?}");
    // The server got it (its variable is set: the tool ran), and its echo came back redacted.
    let completed = events
        .iter()
        .find(|e| e["kind"] == "tool.call.completed")
        .unwrap_or_else(|| panic!("{kinds:?}"));
    assert_eq!(
        completed["data"]["outcome"]["status"], "success",
        "{completed}"
    );
    let output = completed["data"]["outcome"]["output"].as_str().unwrap();
    let env: Value = serde_json::from_str(output).unwrap();
    assert_eq!(env["MY_CRED"], "[REDACTED:secret]", "{output}");

    // Refusals, before anything runs, naming what is wrong and never the value.
    for (body, says) in [
        (
            json!({"adapter": "openai", "message": "hi", "callerCredentials": {"theirs": SECRET}}),
            "`theirs`, which instance `openai` does not have: its tool providers are mine",
        ),
        (
            json!({"adapter": "openai", "message": "hi", "callerCredentials": {"mine": "abc"}}),
            "`callerCredentials.mine` has 3 bytes",
        ),
        (
            json!({"adapter": "openai", "message": "hi", "callerCredentials": {"mine": 7}}),
            "`callerCredentials.mine` must be a string",
        ),
        (
            json!({"adapter": "openai", "message": "hi", "callerCredentials": [SECRET]}),
            "`callerCredentials` must be an object",
        ),
    ] {
        let refused = start(body).await.unwrap();
        assert_eq!(refused.status().as_u16(), 400);
        let body: Value = refused.json().await.unwrap();
        assert_eq!(body["error"]["code"], "CALLER_CREDENTIAL_INVALID", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
        assert!(
            !message.contains(SECRET) && !message.contains("abc"),
            "{message}"
        );
    }
    // An instance without tool providers (the scripted adapter runs no portable tools) has
    // nothing to give one to.
    let refused = start(
        json!({"adapter": "scripted", "message": "hi", "callerCredentials": {"mine": SECRET}}),
    )
    .await
    .unwrap();
    assert_eq!(refused.status().as_u16(), 400);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "CALLER_CREDENTIAL_INVALID", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("this instance has no tool provider"),
        "{body}"
    );

    // Never stored, never logged: the database (and its log) and the server's output
    // hold no trace of it once the server is gone.
    drop(serve);
    for file in ["harness.db", "harness.db-wal", "serve.log"] {
        let Ok(bytes) = std::fs::read(dir.join(file)) else {
            continue;
        };
        assert!(
            !bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
            "{file} holds the credential"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The events of execution `id` once it has ended (polled; at most a minute).
async fn events_until_ended(http: &reqwest::Client, url: &str, id: &str) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let page: Value = http
            .get(format!("{url}/v1/executions/{id}/events?after=0"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if page["ended"] == true {
            return page["events"].as_array().unwrap().clone();
        }
        assert!(
            Instant::now() < deadline,
            "the execution did not end: {page}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
