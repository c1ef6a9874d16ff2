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
//! adapter, message, started, duration and outcome. Then: the timeline and steps of the
//! quickstart with their durations (the approval's wait at least the time the test waited),
//! a link to one event that lands on it after a reload and after a sign-in, the filters, an
//! execution started elsewhere appearing live with its badge and approved by the `a` key, a
//! follow-up turn in the same conversation rejected by `r`, the artifact viewer (text, JSON,
//! an image, a diff; an address elsewhere not fetched), the adapter view, labels, focus order,
//! visible focus and text contrast. The screenshots (1280x800, and 390x844 for a phone) are
//! checked: each is a rendered page, no wider than its viewport, its key elements within it,
//! and each state's colour is on screen when that state is.
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

/// A duration as the page writes it (`850 ms`, `12.3 s`, `4 min 5 s`, `2 h 3 min`, with a
/// `so far` or not), in milliseconds.
fn ms(text: &str) -> f64 {
    let words: Vec<&str> = text.trim_end_matches(" so far").split(' ').collect();
    let mut total = 0.0;
    for pair in words.chunks(2) {
        let value: f64 = pair[0]
            .parse()
            .unwrap_or_else(|_| panic!("`{text}` is not a duration"));
        total += value
            * match pair.get(1).copied() {
                Some("ms") => 1.0,
                Some("s") => 1000.0,
                Some("min") => 60_000.0,
                Some("h") => 3_600_000.0,
                _ => panic!("`{text}` is not a duration"),
            };
    }
    total
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

    // Artifacts whose bytes are on the page's own origin (the browser run serves them) and
    // one elsewhere.
    let file = |name: &str| format!("{url}/files/{name}");
    let artifacts = start(
        &client,
        Script::from_json_str(
            &json!({"steps": [
                {"type": "artifact", "mediaType": "text/plain", "name": "report.txt", "uri": file("report.txt")},
                {"type": "artifact", "mediaType": "application/json", "name": "data.json",
                 "uri": file("data.json"), "metadata": {"rows": 2}},
                {"type": "artifact", "mediaType": "text/x-diff", "name": "change.diff", "uri": file("change.diff")},
                {"type": "artifact", "mediaType": "image/png", "name": "picture.png", "uri": file("picture.png")},
                {"type": "artifact", "mediaType": "text/plain", "name": "elsewhere.txt",
                 "uri": "https://files.example.com/elsewhere.txt"},
                {"type": "artifact", "mediaType": "application/json", "name": "api.json",
                 "uri": format!("{url}/v1/executions")},
                {"type": "artifact", "mediaType": "text/plain", "name": "huge.txt", "uri": file("huge.txt")},
                {"type": "complete", "summary": "seven artifacts"}
            ]})
            .to_string(),
        )
        .unwrap(),
    )
    .await;

    let shots = dir.join("screenshots");
    let ids = json!({"form": form, "hostile": hostile, "hanging": hanging, "bidi": bidi,
        "artifacts": artifacts, "code": code})
    .to_string();
    let output = tokio::time::timeout(
        Duration::from_secs(240),
        tokio::process::Command::new("node")
            .arg(dir.join("run.mjs"))
            .args([url.as_str(), TOKEN, ids.as_str()])
            .arg(&shots)
            .output(),
    )
    .await
    .expect("the browser run finished within four minutes")
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
    assert_eq!(steps["listed"], 6);
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

    // The timeline: every event of the quickstart, in order, each with its offset from the
    // start and a link to itself; runs of text deltas as one row.
    let timeline = steps["timeline"].as_array().unwrap();
    let events = client.events_page(started, 0, 1000).await.unwrap().events;
    let covered: Vec<u64> = timeline
        .iter()
        .flat_map(|r| r["seq"].as_u64().unwrap()..=r["last"].as_u64().unwrap())
        .collect();
    let logged: Vec<u64> = events.iter().map(|e| e.seq().get()).collect();
    assert_eq!(covered, logged, "{timeline:?}");
    assert!(
        timeline.len() < events.len(),
        "deltas are grouped: {timeline:?}"
    );
    for row in timeline {
        assert!(row["at"].as_str().unwrap().starts_with('+'), "{row}");
        assert!(row["iso"].as_str().unwrap().contains('T'), "{row}");
        assert_eq!(
            row["link"],
            format!("#/executions/{started}/events/{}", row["seq"]),
            "{row}"
        );
    }
    let row_of = |kind: &str| {
        timeline
            .iter()
            .find(|r| r["kind"].as_str().unwrap().starts_with(kind))
            .unwrap_or_else(|| panic!("no {kind} row: {timeline:?}"))
    };
    assert!(row_of("message.delta ×")["kind"].is_string());
    // The approval was answered no sooner than 1.2 s after it was asked.
    let awaited = row_of("action.resolved")["took"].as_str().unwrap();
    assert!(
        awaited.starts_with("awaited ") && ms(&awaited["awaited ".len()..]) >= 1200.0,
        "{awaited}"
    );
    assert!(
        ms(row_of("tool.call.completed")["took"].as_str().unwrap()) >= 1200.0,
        "{timeline:?}"
    );
    // The steps: model turns, the approval, the tool call, the end, in that order.
    let kinds: Vec<&str> = steps["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"turn"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"end"), "{kinds:?}");
    let at = |k: &str| kinds.iter().position(|x| *x == k).unwrap();
    // The call starts, then waits for its approval: the approval is inside the tool call.
    assert!(
        at("turn") < at("tool") && at("tool") < at("action"),
        "{kinds:?}"
    );
    let tool_step = steps["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == "tool")
        .unwrap();
    assert!(
        tool_step["type"].as_str().unwrap().contains("write_file")
            && tool_step["what"] == "success",
        "{tool_step}"
    );
    assert!(
        ms(tool_step["took"].as_str().unwrap()) >= 1200.0,
        "{tool_step}"
    );
    // The summary: first event, first output, awaiting (at least the 1.2 s), tools, total.
    let timing = &steps["timing"];
    let first_event = ms(timing["first-event"].as_str().unwrap());
    let first_output = ms(timing["first-output"].as_str().unwrap());
    let ran = ms(timing["ran"].as_str().unwrap());
    assert!(
        first_event <= first_output && first_output <= ran,
        "{timing}"
    );
    assert!(
        ms(timing["awaiting"].as_str().unwrap()) >= 1200.0,
        "{timing}"
    );
    assert!(
        timing["tools"].as_str().unwrap().starts_with("1, "),
        "{timing}"
    );

    // A deep link to one event: after a reload, and in a tab that had to sign in first.
    let deep = &steps["deepLink"];
    for after in ["afterReload", "afterSignIn"] {
        let landed = &deep[after];
        assert_eq!(landed["seq"], deep["wanted"], "{after}: {deep}");
        assert_eq!(landed["focused"], true, "{after}: {deep}");
        assert_eq!(landed["inView"], true, "{after}: {deep}");
        assert_eq!(landed["exec"], started, "{after}: {deep}");
        let address = landed["address"].as_str().unwrap();
        assert!(
            address.ends_with(deep["link"].as_str().unwrap()) && !address.contains(TOKEN),
            "{after}: {address}"
        );
    }
    let missing = deep["missing"].as_str().unwrap();
    assert!(
        missing.starts_with("This execution has no event 9999: it ended at event "),
        "{missing}"
    );
    assert_eq!(
        deep["beforeSignIn"]["app"],
        json!({"display": "none", "visible": 0, "box": 0}),
        "{deep}"
    );

    // Filters, in the page: text, state, adapter, time range.
    let filters = &steps["filters"];
    let set = |name: &str| -> Vec<String> {
        let mut v: Vec<String> = filters[name]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(set("all").len(), 6, "{filters}");
    assert_eq!(set("text"), [started.to_owned()], "{filters}");
    assert_eq!(filters["textCount"], "1 of 6 loaded shown");
    assert_eq!(
        set("cancelled"),
        std::slice::from_ref(&hanging),
        "{filters}"
    );
    assert!(set("active").is_empty(), "{filters}");
    assert_eq!(set("adapter"), set("all"));
    assert_eq!(set("recent"), set("all"));
    assert_eq!(set("reset"), set("all"));

    // Live: it appeared on its own, first, marked new, badged; `?` opened the help; `p`
    // focused the approval, `a` approved it, and the badge went.
    let live = &steps["live"];
    assert_eq!(live["isNew"], true, "{live}");
    assert_eq!(live["first"], live["id"], "{live}");
    assert_eq!(live["badge"], "needs answer");
    assert_eq!(live["count"], "1");
    assert_eq!(live["title"], "(1) harness console");
    assert_eq!(live["focused"], true);
    assert!(
        live["outcome"].as_str().unwrap().starts_with("Succeeded"),
        "{live}"
    );
    assert_eq!(live["countAfter"], true);
    let approved = first(
        &client,
        live["id"].as_str().unwrap(),
        EventKind::ActionResolved,
    )
    .await;
    assert_eq!(
        approved["outcome"]["calls"][0]["decision"], "approve",
        "{approved}"
    );
    let help = &steps["help"];
    assert_eq!(
        (&help["open"], &help["closed"]),
        (&json!(true), &json!(true))
    );
    for key in ["approve every call", "reject every call", "search"] {
        assert!(help["text"].as_str().unwrap().contains(key), "{help}");
    }

    // The follow-up: a new execution, same adapter and conversation; `r` rejected its call.
    let follow = &steps["followUp"];
    assert_eq!(steps["conversation"], "conv-live-1");
    assert_eq!(follow["conversation"], "conv-live-1", "{follow}");
    assert_eq!(follow["adapter"], "scripted");
    let next = follow["id"].as_str().unwrap();
    assert_ne!(next, live["id"].as_str().unwrap());
    assert!(
        follow["address"]
            .as_str()
            .unwrap()
            .ends_with(&format!("#/executions/{next}"))
    );
    let view = client.execution(next).await.unwrap();
    assert_eq!(
        view.conversation_id.as_ref().map(|c| c.as_str()),
        Some("conv-live-1")
    );
    assert_eq!(view.adapter, "scripted");
    // The list says so too: the two turns of the conversation, the newest first.
    let listed = client.list(None, 50).await.unwrap().executions;
    let turns: Vec<&str> = listed
        .iter()
        .filter(|e| e.conversation_id.as_ref().map(|c| c.as_str()) == Some("conv-live-1"))
        .map(|e| e.id.as_str())
        .collect();
    assert_eq!(turns, [next, live["id"].as_str().unwrap()]);
    assert_eq!(follow["tool"], "rejected", "{follow}");
    let rejected = first(&client, next, EventKind::ActionResolved).await;
    assert_eq!(
        rejected["outcome"]["calls"][0]["decision"], "reject",
        "{rejected}"
    );
    // An execution started from the page has a conversation of the page's making.
    let own = client.execution(started).await.unwrap();
    assert!(
        own.conversation_id
            .as_ref()
            .is_some_and(|c| c.as_str().starts_with("console-")),
        "{own:?}"
    );

    // The artifact viewer.
    let viewer = &steps["artifactViewer"];
    assert_eq!(viewer["text"], "The report, in plain text.\nSecond line.");
    assert_eq!(
        viewer["json"],
        "{\n  \"b\": [\n    1,\n    2\n  ],\n  \"a\": {\n    \"c\": \"d\"\n  }\n}"
    );
    assert_eq!(viewer["metadata"], "{\n  \"rows\": 2\n}");
    assert_eq!(
        viewer["diff"],
        json!([
            ["file", "--- a/notes.md"],
            ["file", "+++ b/notes.md"],
            ["hunk", "@@ -1,2 +1,2 @@"],
            ["same", " context"],
            ["del", "-old line"],
            ["add", "+new line"],
            ["same", ""]
        ])
    );
    assert_eq!(viewer["diffColours"], "rgb(230, 244, 234)");
    assert_eq!(
        viewer["image"],
        json!({"width": 1280, "height": 800, "src": "blob:"})
    );
    // Elsewhere, and on this server's API: shown, not fetched.
    for name in ["elsewhere", "api"] {
        assert!(
            viewer[name].as_str().unwrap().contains("does not fetch"),
            "{name}: {viewer}"
        );
    }
    // More than the viewer reads: refused, not read to its end.
    assert!(
        viewer["huge"]
            .as_str()
            .unwrap()
            .contains("more than the 1048576 bytes"),
        "{viewer}"
    );
    // Each readable artifact read once, with the token; the others never.
    let fetched = viewer["fetched"].as_array().unwrap();
    assert_eq!(fetched.len(), 5, "{fetched:?}");
    // The token never goes to an address an agent chose.
    assert!(fetched.iter().all(|f| f["auth"] == false), "{fetched:?}");

    // The adapters: health, capabilities, and the certification the manifest states.
    let adapters = &steps["adapters"];
    assert!(
        adapters["address"]
            .as_str()
            .unwrap()
            .ends_with("#/adapters")
    );
    assert_eq!(adapters["health"], "ready");
    assert_eq!(adapters["detailHidden"], true);
    assert_eq!(
        adapters["current"], "page",
        "the navigation says where the page is"
    );
    let capabilities = adapters["capabilities"].as_object().unwrap();
    assert_eq!(capabilities["session.multi_turn"], "native", "{adapters}");
    assert!(capabilities.len() >= 5, "{adapters}");
    let facts = adapters["facts"].as_str().unwrap();
    assert!(
        facts.contains("Certified by evidence") && facts.contains("Trust boundary"),
        "{facts}"
    );

    // Accessibility: labels, contrast, a visible focus in the page's order.
    let a11y = &steps["a11y"];
    assert_eq!(a11y["unlabelled"], json!([]), "{a11y}");
    assert_eq!(a11y["lows"], json!([]), "{a11y}");
    assert!(a11y["checked"].as_u64().unwrap() > 30, "{a11y}");
    let order: Vec<&str> = a11y["order"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        order[..6],
        [
            "nav-executions",
            "nav-adapters",
            "help-open",
            "sign-out",
            "start-adapter",
            "start-message"
        ],
        "{a11y}"
    );
    for o in a11y["order"].as_array().unwrap() {
        assert_eq!(o["outline"], "solid 3px", "{o}");
    }

    // Every screenshot's page fits its viewport, its key elements shown within it; at phone
    // width too, where tables scroll in their own box.
    for (name, shot) in run["shots"].as_object().unwrap() {
        let layout = &shot["layout"];
        let width = layout["innerWidth"].as_f64().unwrap();
        assert!(
            layout["scrollWidth"].as_f64().unwrap() <= width,
            "{name} overflows sideways: {layout}"
        );
        let height = layout["innerHeight"].as_f64().unwrap();
        for (key, place) in layout["keys"].as_object().unwrap() {
            assert_eq!(place["visible"], true, "{name}: {key} {layout}");
            // Within the viewport across, and starting in it (a long list may go on below).
            assert!(
                place["left"].as_f64().unwrap() >= 0.0
                    && place["right"].as_f64().unwrap() <= width
                    // (less a pixel: scrolled to, a box may sit a fraction above the edge)
                    && place["top"].as_f64().unwrap() >= -1.0
                    && place["top"].as_f64().unwrap() < height
                    && place["width"].as_f64().unwrap() > 0.0
                    && place["height"].as_f64().unwrap() > 0.0,
                "{name}: {key} is not within the viewport: {layout}"
            );
        }
    }
    for name in [
        "phone-list",
        "phone-execution",
        "phone-timeline",
        "phone-adapters",
    ] {
        let c = &run["shots"][name]["census"];
        assert_eq!(
            (c["width"].as_u64(), c["height"].as_u64()),
            (Some(390), Some(844)),
            "{name}"
        );
        assert!(
            c["colours"].as_u64().unwrap() > 50,
            "{name} looks blank: {c}"
        );
        assert!(
            !run["shots"][name]["layout"]["keys"]
                .as_object()
                .unwrap()
                .is_empty()
        );
    }
    // The capabilities table is wider than a phone: it scrolls in its own box, not the page.
    let table_box = &steps["phoneTableBox"];
    assert_eq!(table_box["overflowX"], "auto", "{table_box}");
    assert_eq!(table_box["scrolls"], true, "{table_box}");

    // The screenshots: rendered pages (not blank), each showing its state's colour.
    let census = |name: &str| &run["shots"][name]["census"];
    for name in [
        "sign-in",
        "approval",
        "succeeded",
        "form",
        "bidi",
        "cancelled",
        "timeline",
        "live",
        "artifact",
        "adapters",
    ] {
        let c = census(name);
        assert_eq!(
            (c["width"].as_u64(), c["height"].as_u64()),
            (Some(1280), Some(800)),
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
