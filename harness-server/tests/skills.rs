//! Skills over HTTP (`[skills]` in `harness.toml`): installed folders are checked at start,
//! naming the folder and what is wrong; a start request's `skills` is granted per principal
//! and instance, or refused before anything runs: `404 SKILL_NOT_FOUND` for a missing skill
//! and for one restricted to other principals alike, `403 SKILL_BLOCKED` for a blocked one,
//! `422 CAPABILITY_UNSUPPORTED` on an instance whose adapter takes no skills.

use std::path::{Path, PathBuf};

use harness_server::auth::BearerTokens;
use harness_server::config::Config;
use serde_json::{Value, json};

const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789ab";

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "harness-skills-{name}-{}-{}",
        std::process::id(),
        harness_core::id::ExecutionId::generate()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn install(root: &Path, name: &str, skill_md: &str) {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), skill_md).unwrap();
}

fn skill_md(name: &str) -> String {
    format!("---\nname: {name}\ndescription: The {name} skill.\n---\nDo {name}.\n")
}

fn config(root: &Path, extra: &str) -> String {
    format!(
        r#"
[store]
kind = "memory"

[skills]
dirs = ["{root}"]
blocked = ["shell-admin"]

[skills.principals]
private = ["alice"]

[scripted]

[openai]
{extra}

[openai.endpoints.default]
baseUrl = "http://127.0.0.1:9/v1"
model = "gpt-4.1"
"#,
        root = root.display()
    )
}

async fn refused(text: &str) -> String {
    let config = Config::from_toml(text).unwrap();
    match config.server(BearerTokens::new()).await {
        Ok(_) => panic!("the configuration was taken: {text}"),
        Err(e) => e.message().to_owned(),
    }
}

async fn serve(text: &str) -> String {
    let tokens = BearerTokens::new()
        .with_token("alice", ALICE)
        .unwrap()
        .with_token("bob", BOB)
        .unwrap();
    let (server, _) = Config::from_toml(text)
        .unwrap()
        .server(tokens)
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let router = server.router();
    tokio::spawn(async move { axum::serve(listener, router).await });
    url
}

async fn start(url: &str, token: &str, adapter: &str, skills: &[&str]) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/executions"))
        .bearer_auth(token)
        .json(&json!({"adapter": adapter, "message": "go", "skills": skills}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn refusals_by_principal_instance_and_block_list() {
    let root = scratch("serve");
    for name in ["pdf-forms", "private", "shell-admin", "unoffered"] {
        install(&root, name, &skill_md(name));
    }
    let url = serve(&config(
        &root,
        r#"skills = ["pdf-forms", "private", "shell-admin"]"#,
    ))
    .await;
    let (status, missing) = start(&url, BOB, "openai", &["nope"]).await;
    assert_eq!(
        (status, code(&missing)),
        (404, "SKILL_NOT_FOUND"),
        "{missing}"
    );
    let (status, hidden) = start(&url, BOB, "openai", &["private"]).await;
    assert_eq!(
        (status, code(&hidden)),
        (404, "SKILL_NOT_FOUND"),
        "{hidden}"
    );
    // The restricted skill's refusal is the missing one's, the name aside.
    assert_eq!(
        hidden["error"]["message"]
            .as_str()
            .unwrap()
            .replace("private", "X"),
        missing["error"]["message"]
            .as_str()
            .unwrap()
            .replace("nope", "X"),
    );
    // Installed but not offered by this instance: the same.
    let (status, body) = start(&url, ALICE, "openai", &["unoffered"]).await;
    assert_eq!((status, code(&body)), (404, "SKILL_NOT_FOUND"), "{body}");
    let (status, body) = start(&url, ALICE, "openai", &["pdf-forms", "shell-admin"]).await;
    assert_eq!((status, code(&body)), (403, "SKILL_BLOCKED"), "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("shell-admin"),
        "{body}"
    );
    // The scripted adapter takes no skills: refused before the names are looked at.
    let (status, body) = start(&url, ALICE, "scripted", &["pdf-forms"]).await;
    assert_eq!(
        (status, code(&body)),
        (422, "CAPABILITY_UNSUPPORTED"),
        "{body}"
    );
    // Granted: the execution starts (its model is unreachable; the grant came first).
    let (status, body) = start(&url, ALICE, "openai", &["private", "pdf-forms"]).await;
    assert_eq!(status, 201, "{body}");
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test]
async fn bad_folders_and_names_are_refused_at_start_naming_them() {
    let root = scratch("bad");
    install(&root, "good", &skill_md("good"));
    install(&root, "private", &skill_md("private"));
    install(&root, "misnamed", &skill_md("other-name"));
    let message = refused(&config(&root, "")).await;
    assert!(
        message.contains("misnamed") && message.contains("folder is `misnamed`"),
        "{message}"
    );
    std::fs::remove_dir_all(root.join("misnamed")).unwrap();
    install(&root, "nofront", "just text");
    let message = refused(&config(&root, "")).await;
    assert!(
        message.contains("nofront") && message.contains("front matter"),
        "{message}"
    );
    std::fs::remove_dir_all(root.join("nofront")).unwrap();
    std::os::unix::fs::symlink(root.join("good"), root.join("linked")).unwrap();
    let message = refused(&config(&root, "")).await;
    assert!(
        message.contains("linked") && message.contains("symbolic link"),
        "{message}"
    );
    std::fs::remove_file(root.join("linked")).unwrap();
    // An instance offering, or a principals entry naming, what is not installed.
    let message = refused(&config(&root, r#"skills = ["absent"]"#)).await;
    assert!(
        message.contains("`[openai]` offers skill `absent`"),
        "{message}"
    );
    let message =
        refused(&config(&root, "").replace("private = [\"alice\"]", "ghost = [\"alice\"]")).await;
    assert!(
        message.contains("`skills.principals` names `ghost`"),
        "{message}"
    );
    let message = refused(&config(&root.join("none"), "")).await;
    assert!(message.contains("cannot list"), "{message}");
    let _ = std::fs::remove_dir_all(&root);
}
