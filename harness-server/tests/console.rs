//! The console page end to end in a real browser: Debian's Chromium, headless, driven by
//! playwright-core under node (`tests/console/run.mjs`), against a server on loopback. A user
//! sees nothing of the app before signing in (a wrong token is refused), signs in by a
//! one-time code that leaves no credential in the address bar or the tab's history and works
//! once (a typed token works too), starts the quickstart, watches its text stream in,
//! edits the tool call's arguments (arguments the schema refuses are caught first), sees it
//! succeed with its artifact; fills in a form; cancels a running execution; and hostile agent
//! text stays text; an approval whose arguments hold a right-to-left override shows it
//! marked, and says so beside the buttons (the page's rule for invisible characters is the
//! server's, code point for code point); a failed tool call is coloured; the list shows
//! adapter, message, started, duration and outcome. The screenshots are checked: each is a
//! rendered page, and each state's colour is on screen when that state is.
//!
//! Without a browser: every API response (JSON, SSE, errors, `/metrics`-less 404s) carries
//! `nosniff` and a closed Content-Security-Policy, and a console code works once.
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
    let (url, server) =
        support::serve_with(Arc::new(MemoryStore::new()), "r1", &[("alice", TOKEN)]).await;
    let client = Client::new(&url, TOKEN);
    let code = server.console_code(TOKEN).unwrap();

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
    let bidi = start(
        &client,
        Script::from_json_str(
            &json!({"steps": [
                {"type": "toolCall", "callId": "call_read", "tool": "read_file",
                 "arguments": {"path": "notes/missing.md"}, "failure": "no such file"},
                {"type": "approval", "calls": [{
                    "callId": "call_bidi", "tool": "write_file",
                    "arguments": {"path": "reports/\u{202e}fdp.exe", "content": "safe\u{200b}text"},
                    "inputSchema": {"type": "object"},
                    "allowed": ["approve", "reject", "edit"],
                    "output": {"ok": true}
                }]},
                {"type": "complete", "summary": "done"}
            ]})
            .to_string(),
        )
        .unwrap(),
    )
    .await;
    let hanging = start(
        &client,
        Script::builder().text("working on it").hang().build(),
    )
    .await;

    let shots = dir.join("screenshots");
    let ids =
        json!({"form": form, "hostile": hostile, "hanging": hanging, "bidi": bidi, "code": code})
            .to_string();
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
    // The only refused requests are the wrong token's and the used code's.
    let mut failed: Vec<&str> = run["failed"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    failed.sort_unstable();
    assert_eq!(
        failed,
        [
            "401 /console/session",
            "401 /v1/adapters",
            "401 /v1/executions"
        ]
    );
    let steps = &run["steps"];

    // Nothing of the app is rendered before sign-in, nor after a refusal; all of it after.
    for before in ["appBeforeSignIn", "appAfterRefusal"] {
        assert_eq!(
            steps[before],
            json!({"display": "none", "visible": 0, "box": 0}),
            "{before}"
        );
    }
    assert!(
        steps["appAfterSignIn"]["visible"].as_u64().unwrap() > 10,
        "{steps}"
    );
    assert_eq!(steps["wrongTokenRefused"], true);
    // The code signed in, and no address the tab held or holds names it or the token.
    let addresses: Vec<&str> = steps["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(addresses.len(), 5, "{addresses:?}");
    for address in &addresses {
        assert!(
            !address.contains(&code) && !address.contains(TOKEN) && !address.contains('#'),
            "{address} holds a credential"
        );
    }
    assert_eq!(addresses[2], "about:blank", "{addresses:?}");
    assert_eq!(addresses[0], format!("{url}/console"));
    // Once only: the same link in another tab is refused, and the form signs in instead.
    assert!(
        steps["codeAgain"]
            .as_str()
            .unwrap()
            .contains("used or expired"),
        "{steps}"
    );
    assert_eq!(steps["codeAgainAddress"], format!("{url}/console"));
    assert_eq!(steps["typedTokenSignsIn"], true);
    // The quickstart, started and answered from the page.
    assert_eq!(
        steps["streamedText"],
        "Here is a short summary of your notes."
    );
    assert_eq!(steps["stateAtApproval"], "awaiting_approval");
    assert_eq!(steps["toolStatusAtApproval"], json!(["awaiting approval"]));
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

    // The right-to-left override and the zero-width space, marked where the operator reads
    // and decides, and said so beside the buttons; the edit box holds them as `\u` escapes.
    let shown = steps["bidiShown"].as_str().unwrap();
    assert!(
        shown.contains("reports/[U+202E]fdp.exe") && shown.contains("safe[U+200B]text"),
        "{shown}"
    );
    assert!(
        !shown.contains('\u{202e}') && !shown.contains('\u{200b}'),
        "{shown}"
    );
    assert_eq!(steps["bidiMarks"], json!(["[U+202E]", "[U+200B]"]));
    assert!(
        steps["bidiToolList"]
            .as_str()
            .unwrap()
            .contains("reports/[U+202E]fdp.exe"),
        "{steps}"
    );
    let note = steps["bidiNote"].as_str().unwrap();
    assert!(note.contains("U+200B, U+202E"), "{note}");
    let edit = steps["bidiEditBox"].as_str().unwrap();
    assert!(
        edit.contains(r"reports/\u202efdp.exe") && !edit.contains('\u{202e}'),
        "{edit}"
    );
    // Approved as shown: the escaped edit is the same arguments.
    let completed = client.events_page(&bidi, 0, 1000).await.unwrap().events;
    let ran: Vec<Value> = completed
        .iter()
        .filter(|e| e.kind() == EventKind::ToolCallCompleted)
        .map(|e| serde_json::to_value(e).unwrap()["data"].take())
        .collect();
    assert_eq!(
        ran[1]["outcome"]["output"]["arguments"]["path"], "reports/\u{202e}fdp.exe",
        "{ran:?}"
    );
    // The failed tool call: labelled and coloured (the failure colour, #c62828).
    assert_eq!(
        steps["failedTool"],
        json!({"text": "failed: no such file", "background": "rgb(198, 40, 40)"})
    );
    // The page's rule is the server's, on every code point.
    let mut ranges: Vec<[u32; 2]> = Vec::new();
    for cp in 0..=0x10_ffff_u32 {
        if !char::from_u32(cp).is_some_and(harness_server::visible::is_hidden) {
            continue;
        }
        match ranges.last_mut() {
            Some(last) if last[1] + 1 == cp => last[1] = cp,
            _ => ranges.push([cp, cp]),
        }
    }
    assert_eq!(steps["hiddenRanges"], json!(ranges));

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
    assert_eq!(steps["listed"], 5);
    // The list's columns, from `GET /v1/executions` and the ended execution's outcome.
    let row = &steps["row"];
    assert_eq!(row["adapter"], "scripted", "{row}");
    assert_eq!(row["message"], "Summarize my notes", "{row}");
    assert_eq!(row["state"], "succeeded", "{row}");
    assert!(
        row["outcome"]
            .as_str()
            .unwrap()
            .starts_with("succeeded: Drafted a summary"),
        "{row}"
    );
    assert!(
        row["started"].as_str().unwrap().contains('T')
            && !row["startedText"].as_str().unwrap().is_empty(),
        "{row}"
    );
    let took = row["duration"].as_str().unwrap();
    assert!(took.ends_with(" ms") || took.ends_with(" s"), "{row}");
    assert_eq!(steps["formRow"], "succeeded: thanks");

    // The screenshots: rendered pages (not blank), each showing its state's colour.
    let census = |name: &str| &run["shots"][name]["census"];
    for name in [
        "sign-in",
        "approval",
        "succeeded",
        "form",
        "bidi",
        "cancelled",
    ] {
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

/// `nosniff` and a closed policy on every kind of API answer; the console keeps its own.
fn guarded(what: &str, response: &reqwest::Response) {
    let headers = response.headers();
    assert_eq!(
        headers
            .get("x-content-type-options")
            .map(|v| v.to_str().unwrap()),
        Some("nosniff"),
        "{what}: {headers:?}"
    );
    assert_eq!(
        headers.get_all("content-security-policy").iter().count(),
        1,
        "{what}: {headers:?}"
    );
    let policy = headers["content-security-policy"].to_str().unwrap();
    if what.starts_with("/console") && !what.contains("session") {
        assert!(policy.contains("script-src 'self'"), "{what}: {policy}");
    } else {
        assert_eq!(
            policy, "default-src 'none'; frame-ancestors 'none'",
            "{what}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_answers_carry_nosniff_and_a_closed_policy_and_a_console_code_works_once() {
    let (url, server) =
        support::serve_with(Arc::new(MemoryStore::new()), "r1", &[("alice", TOKEN)]).await;
    let client = Client::new(&url, TOKEN);
    let id = start(&client, Script::builder().text("hi").complete("ok").build()).await;
    let http = reqwest::Client::new();
    let bearer = format!("Bearer {TOKEN}");
    for (what, request) in [
        ("JSON", http.get(format!("{url}/v1/executions"))),
        (
            "SSE",
            http.get(format!("{url}/v1/executions/{id}/events"))
                .header("accept", "text/event-stream"),
        ),
        ("an error", http.get(format!("{url}/v1/executions/nope"))),
        ("no such endpoint", http.get(format!("{url}/nowhere"))),
        ("/metrics", http.get(format!("{url}/metrics"))),
        ("/healthz", http.get(format!("{url}/healthz"))),
        (
            "/v1/openapi.json",
            http.get(format!("{url}/v1/openapi.json")),
        ),
        ("/console", http.get(format!("{url}/console"))),
        ("/console/app.js", http.get(format!("{url}/console/app.js"))),
    ] {
        let response = request
            .header("authorization", &bearer)
            .send()
            .await
            .unwrap();
        guarded(what, &response);
        // Read to the end (the stream ends after the terminal event).
        response.bytes().await.unwrap();
    }
    let unauthenticated = http.get(format!("{url}/v1/adapters")).send().await.unwrap();
    assert_eq!(unauthenticated.status(), 401);
    guarded("a 401", &unauthenticated);

    // A code: its token once, then refused, with nothing cached.
    let code = server.console_code(TOKEN).unwrap();
    let exchange = || {
        http.post(format!("{url}/console/session"))
            .json(&json!({"code": code}))
            .send()
    };
    let first = exchange().await.unwrap();
    assert_eq!(first.status(), 200);
    guarded("/console/session", &first);
    assert_eq!(first.headers()["cache-control"], "no-store");
    assert_eq!(
        first.json::<Value>().await.unwrap(),
        json!({"token": TOKEN})
    );
    let again = exchange().await.unwrap();
    assert_eq!(again.status(), 401);
    guarded("/console/session again", &again);
    let refused: Value = again.json().await.unwrap();
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown, used or expired"),
        "{refused}"
    );
    // A malformed body says what is expected.
    let malformed = http
        .post(format!("{url}/console/session"))
        .json(&json!({"token": TOKEN}))
        .send()
        .await
        .unwrap();
    assert_eq!(malformed.status(), 400);
    let said: Value = malformed.json().await.unwrap();
    assert!(
        said["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"code\""),
        "{said}"
    );
}
