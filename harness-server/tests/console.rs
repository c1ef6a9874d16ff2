//! The console page end to end in a real browser: Debian's Chromium, headless, driven by
//! playwright-core under node (`tests/console/run.mjs`), against a server on loopback. A user
//! signs in (a wrong token is refused), starts the quickstart, watches its text stream in,
//! edits the tool call's arguments (arguments the schema refuses are caught first), sees it
//! succeed with its artifact; fills in a form; cancels a running execution; and hostile agent
//! text stays text. The screenshots are checked: each is a rendered page, and each state's
//! colour is on screen when that state is.
//!
//! `.ci/install-console.sh` installs Chromium and playwright-core. The screenshots are left
//! in `harness-server/tests/console/screenshots/` to look at.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

mod support;

use harness_core::action::{FieldKind, FormField};
use harness_core::event::{Event, EventKind, EventPayload};
use harness_core::store::MemoryStore;
use harness_scripted::{Script, ScriptedOptions};
use harness_server::client::Client;
use serde_json::{Value, json};

const TOKEN: &str = "alice-console-token-0123456789";

async fn start(client: &Client, script: Script) -> String {
    client
        .start(
            "scripted",
            json!({"message": "go", "options": ScriptedOptions::with_script(script).to_value()}),
            None,
        )
        .await
        .unwrap()
        .id
        .to_string()
}

/// The data of `id`'s first event of `kind`, as JSON.
async fn first(client: &Client, id: &str, kind: EventKind) -> Value {
    let events: Vec<Event> = client.events_page(id, 0, 1000).await.unwrap().events;
    let event = events
        .iter()
        .find(|e| e.kind() == kind)
        .unwrap_or_else(|| panic!("{id} has no {kind} event"));
    serde_json::to_value(event).unwrap()["data"].take()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_signs_in_watches_answers_edits_and_cancels_in_chromium() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/console");
    assert!(
        dir.join("node_modules/playwright-core").exists(),
        "playwright-core is missing: run `bash .ci/install-console.sh` (the README's test command does)"
    );
    let url = support::serve(Arc::new(MemoryStore::new()), "r1", &[("alice", TOKEN)]).await;
    let client = Client::new(&url, TOKEN);

    let form = start(
        &client,
        Script::builder()
            .form([
                FormField::new("name".parse().unwrap(), "Name", FieldKind::text()).required(),
                FormField::new(
                    "color".parse().unwrap(),
                    "Colour",
                    FieldKind::choice(["red", "green"]),
                ),
                FormField::new("count".parse().unwrap(), "Count", FieldKind::integer()),
            ])
            .complete("thanks")
            .build(),
    )
    .await;
    let hostile = start(
        &client,
        Script::builder()
            .text(r#"<img src=x onerror="window.__pwned=1"> <b>bold</b> <script>window.__pwned=1</script>"#)
            .complete("ok")
            .build(),
    )
    .await;
    let hanging = start(
        &client,
        Script::builder().text("working on it").hang().build(),
    )
    .await;

    let shots = dir.join("screenshots");
    let ids = json!({"form": form, "hostile": hostile, "hanging": hanging}).to_string();
    let output = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new("node")
            .arg(dir.join("run.mjs"))
            .args([url.as_str(), TOKEN, ids.as_str()])
            .arg(&shots)
            .output(),
    )
    .await
    .expect("the browser run finished within two minutes")
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let run: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| {
            panic!(
                "node printed no result ({e}):\n{stdout}\n{}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
    assert!(
        run.get("error").is_none(),
        "the browser run failed: {}",
        run["error"]
    );
    assert_eq!(run["console"], json!([]), "the page logged errors");
    // The only refused requests are the wrong token's.
    let mut failed: Vec<&str> = run["failed"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    failed.sort_unstable();
    assert_eq!(failed, ["401 /v1/adapters", "401 /v1/executions"]);
    let steps = &run["steps"];

    assert_eq!(steps["wrongTokenRefused"], true);
    // The quickstart, started and answered from the page.
    assert_eq!(
        steps["streamedText"],
        "Here is a short summary of your notes."
    );
    assert_eq!(steps["stateAtApproval"], "awaiting_approval");
    assert_eq!(steps["tool"], "write_file");
    let refused = steps["editRefused"].as_str().unwrap();
    assert!(
        refused.contains("/path is shorter than 1") && refused.contains("/content is required"),
        "{refused}"
    );
    assert!(
        steps["outcome"].as_str().unwrap().starts_with("Succeeded"),
        "{steps}"
    );
    assert_eq!(steps["toolStatus"], "success");
    assert_eq!(steps["artifacts"].as_array().unwrap().len(), 1, "{steps}");
    let started = steps["startedId"].as_str().unwrap();
    let resolved = first(&client, started, EventKind::ActionResolved).await;
    assert_eq!(
        resolved["outcome"]["calls"][0]["decision"], "edit",
        "{resolved}"
    );
    let completed = first(&client, started, EventKind::ToolCallCompleted).await;
    assert_eq!(
        completed["outcome"]["output"]["arguments"]["path"], "notes/edited.md",
        "the edited arguments ran: {completed}"
    );

    // The form: a required field is asked for, then the values arrive as typed.
    assert!(
        steps["formRequired"]
            .as_str()
            .unwrap()
            .contains("Name is required"),
        "{steps}"
    );
    assert_eq!(steps["formOutcome"], "Succeeded: thanks");
    let answered = first(&client, &form, EventKind::ActionResolved).await;
    // The resolution names the fields submitted (values stay out of the log); the server
    // checked each against its kind, so `count` went as a number.
    assert_eq!(
        answered["outcome"],
        json!({"type": "submitted", "fields": ["name", "color", "count"]}),
        "{answered}"
    );

    // Hostile text: shown as written, nothing of it parsed or run.
    assert!(
        steps["hostileText"]
            .as_str()
            .unwrap()
            .contains(r#"<img src=x onerror="window.__pwned=1">"#),
        "{steps}"
    );
    assert_eq!(steps["hostileElements"], 0);
    assert_eq!(steps["pwned"], false);

    // Cancel, confirmed by the stream.
    assert!(
        steps["cancelOutcome"]
            .as_str()
            .unwrap()
            .starts_with("Cancelled"),
        "{steps}"
    );
    assert_eq!(steps["cancelState"], "cancelled");
    let ended = client.execution(&hanging).await.unwrap();
    assert!(
        matches!(
            ended.outcome.as_ref().map(|e| e.payload()),
            Some(EventPayload::RunCancelled(_))
        ),
        "{ended:?}"
    );
    assert_eq!(steps["listed"], 4);

    // The screenshots: rendered pages (not blank), each showing its state's colour.
    let census = |name: &str| &run["shots"][name]["census"];
    for name in ["approval", "succeeded", "form", "cancelled"] {
        let c = census(name);
        assert_eq!(
            (c["width"].as_u64(), c["height"].as_u64()),
            (Some(1280), Some(900)),
            "{name}"
        );
        assert!(
            c["colours"].as_u64().unwrap() > 50,
            "{name} looks blank: {c}"
        );
        assert!(
            run["shots"][name]["file"]
                .as_str()
                .is_some_and(|f| std::path::Path::new(f).exists())
        );
    }
    let pixels = |name: &str, colour: &str| census(name)[colour].as_u64().unwrap();
    // The approval panel's border is the awaiting colour; once answered it is gone (what
    // is left of that colour is the list's pill of the execution awaiting its form).
    assert!(
        pixels("approval", "wait") > pixels("succeeded", "wait") + 2000,
        "approval {}, succeeded {}",
        census("approval"),
        census("succeeded")
    );
    assert!(
        pixels("succeeded", "ok") > 200,
        "no success colour: {}",
        census("succeeded")
    );
    assert!(
        pixels("cancelled", "stop") > 200,
        "no cancelled colour: {}",
        census("cancelled")
    );
}
