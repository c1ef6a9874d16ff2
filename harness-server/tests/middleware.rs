//! `[middleware]` in `harness.toml`, end to end over HTTP: the server's scripted instance
//! runs a script whose tool calls the operator's rules govern (a denied tool, a redacted
//! and capped result), an instance's own `middleware` table replaces the global one, and a
//! bad rule stops the server from starting, naming the table and the rule.

use serde_json::{Value, json};

const ALICE: &str = "alice-token-0123456789";
const SECRET: &str = "sk-live-0123456789";

fn script(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("script.json");
    let script = json!({"steps": [
        {"type": "toolCall", "callId": "c1", "tool": "files.delete", "arguments": {"path": "a"}, "output": {"deleted": true}},
        {"type": "toolCall", "callId": "c2", "tool": "notes.read", "arguments": {}, "output": format!("key {SECRET} then {}", "lorem ".repeat(40))},
        {"type": "complete", "summary": "done"}
    ]});
    std::fs::write(&path, script.to_string()).unwrap();
    path
}

fn toml(dir: &std::path::Path, instance_middleware: &str) -> String {
    format!(
        r#"[store]
kind = "memory"

[[tokens]]
principal = "alice"
sha256 = "{alice}"

[middleware]
tools = [{{ tool = "files.*", action = "deny" }}]
results = {{ maxBytes = 120, redact = {{ secrets = ["{SECRET}"] }} }}

[scripted]
script = "{script}"
{instance_middleware}"#,
        alice = harness_server::auth::digest(ALICE),
        script = script(dir).display(),
    )
}

/// The completed tool calls of a run of the server configured by `text`: `(call, outcome)`.
async fn run(text: &str) -> Vec<(String, Value)> {
    let config = harness_server::config::Config::from_toml(text).unwrap();
    let (server, _) = config.server(config.tokens().unwrap()).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, server.router()).await });
    let http = reqwest::Client::new();
    let started: Value = http
        .post(format!("{url}/v1/executions?wait=10s"))
        .bearer_auth(ALICE)
        .json(&json!({"adapter": "scripted", "message": "go"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(started["status"], "ended", "{started}");
    let id = started["outcome"]["executionId"].as_str().unwrap();
    let page: Value = http
        .get(format!("{url}/v1/executions/{id}/events"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    page["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "tool.call.completed")
        .map(|e| {
            (
                e["data"]["callId"].as_str().unwrap_or_default().to_owned(),
                e["data"]["outcome"].clone(),
            )
        })
        .collect()
}

fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("harness-mw-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_rules_govern_the_instance() {
    let dir = scratch("global");
    let calls = run(&toml(&dir, "")).await;
    assert_eq!(calls.len(), 2, "{calls:?}");
    let denied = calls[0].1.to_string();
    assert!(
        denied.contains("denied by the operator's middleware policy"),
        "{denied}"
    );
    let result = calls[1].1.to_string();
    assert!(!result.contains(SECRET), "{result}");
    assert!(result.contains("[REDACTED:secret]"), "{result}");
    assert!(result.contains("[TRUNCATED]"), "{result}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_table_replaces_the_global_one() {
    let dir = scratch("instance");
    let calls = run(&toml(
        &dir,
        "[scripted.middleware]\ntools = [{ tool = \"notes.*\", action = \"deny\" }]\n",
    ))
    .await;
    // `files.delete` runs as scripted; `notes.read` is denied; nothing is redacted.
    assert_eq!(calls[0].1["output"], json!({"deleted": true}), "{calls:?}");
    assert!(calls[1].1.to_string().contains("denied"), "{calls:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn bad_rules_stop_the_server_naming_the_table_and_the_rule() {
    let dir = scratch("bad");
    let base = format!(
        "[store]\nkind = \"memory\"\n[scripted]\nscript = \"{}\"\n",
        script(&dir).display()
    );
    for (table, expected) in [
        (
            "[middleware]\ntools = [{ tool = \"fs.*\", action = \"block\" }]\n",
            vec!["[middleware]", "tools[0]", "unknown action `block`"],
        ),
        (
            "[scripted.middleware]\ntools = [{ tool = \"a\", action = \"deny\" }, { tool = \"a\", action = \"allow\" }]\n",
            vec![
                "[scripted.middleware]",
                "tools[1]",
                "already the pattern of tools[0]",
            ],
        ),
        (
            "[middleware]\ntools = [{ tool = \"fs *\", action = \"deny\" }]\n",
            vec!["tools[0]", "no tool id holds"],
        ),
        (
            "[middleware.results.redact.patterns]\nbad = \"(\"\n",
            vec!["results.redact", "pattern `bad`"],
        ),
    ] {
        let config = harness_server::config::Config::from_toml(&format!("{base}{table}")).unwrap();
        let Err(err) = config
            .server(harness_server::auth::BearerTokens::new())
            .await
        else {
            panic!("the server started with {table}")
        };
        for part in expected {
            assert!(err.message().contains(part), "{table}: {}", err.message());
        }
    }
    // An unknown key is refused when the file is read.
    let err =
        harness_server::config::Config::from_toml(&format!("{base}[middleware]\ntool = []\n"))
            .unwrap_err();
    assert!(err.to_string().contains("tool"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
