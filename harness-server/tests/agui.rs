//! The AG-UI face with the official client: `@ag-ui/client` 1.0.0's `HttpAgent`, run by
//! node (installed by `.ci/install-agui.sh`), through an interrupt and its resume; and the
//! face's own promises over plain HTTP (frame ids, resuming after `Last-Event-ID`, who may
//! resume what).

mod support;

use std::path::Path;
use std::sync::Arc;

use harness_core::store::MemoryStore;
use serde_json::{Value, json};

const ALICE: &str = "alice-agui-token-0123456789";
const BOB: &str = "bob-agui-token-0123456789ab";

async fn serve() -> String {
    support::serve(
        Arc::new(MemoryStore::new()),
        "r",
        &[("alice", ALICE), ("bob", BOB)],
    )
    .await
}

fn types(events: &Value) -> Vec<&str> {
    events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_client_runs_to_an_interrupt_and_resumes_it() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/agui");
    assert!(
        dir.join("node_modules/@ag-ui/client/package.json").exists(),
        "@ag-ui/client is not installed: run .ci/install-agui.sh"
    );
    let url = serve().await;
    let out = tokio::process::Command::new("node")
        .arg("run.mjs")
        .args([url.as_str(), ALICE, "thread-1"])
        .current_dir(&dir)
        .output()
        .await
        .expect("node runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the client failed: {stderr}");
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (first, second) = (&result["runs"][0], &result["runs"][1]);
    let first_types = types(first);
    assert_eq!(first_types.first(), Some(&"RUN_STARTED"), "{first_types:?}");
    for expected in [
        "REASONING_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
    ] {
        assert!(
            first_types.contains(&expected),
            "{expected} in {first_types:?}"
        );
    }
    let interrupted = first.as_array().unwrap().last().unwrap();
    assert_eq!(interrupted["type"], "RUN_FINISHED");
    assert_eq!(interrupted["outcome"]["type"], "interrupt", "{interrupted}");
    let interrupt = &interrupted["outcome"]["interrupts"][0];
    assert_eq!(interrupt["reason"], "tool_approval");
    assert_eq!(interrupt["toolCallId"], "call_write_summary");

    let second_types = types(second);
    assert_eq!(
        second_types.first(),
        Some(&"RUN_STARTED"),
        "{second_types:?}"
    );
    assert!(
        second_types.contains(&"TOOL_CALL_RESULT"),
        "{second_types:?}"
    );
    assert!(
        second_types.contains(&"CUSTOM"),
        "the artifact: {second_types:?}"
    );
    let done = second.as_array().unwrap().last().unwrap();
    assert_eq!(done["type"], "RUN_FINISHED", "{done}");
    assert!(
        done.get("outcome").is_none() || done["outcome"]["type"] == "success",
        "{done}"
    );
    assert_eq!(
        done["result"],
        "Drafted a summary of your notes for notes/summary.md; the write_file call's outcome says whether it was written."
    );
    // The client assembled the conversation from the events: the assistant's text is there.
    let messages = result["messages"].to_string();
    assert!(
        messages.contains("Here is a short summary of your notes."),
        "{messages}"
    );
}

/// Every frame of one AG-UI POST: (SSE id, event).
async fn post(
    url: &str,
    token: &str,
    body: &Value,
    last: Option<&str>,
) -> (u16, Vec<(String, Value)>) {
    let mut request = reqwest::Client::new()
        .post(format!("{url}/v1/agui/scripted"))
        .bearer_auth(token)
        .header("accept", "text/event-stream")
        .json(body);
    if let Some(last) = last {
        request = request.header("last-event-id", last);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let frames = text
        .split("\n\n")
        .filter_map(|frame| {
            let id = frame.lines().find_map(|l| l.strip_prefix("id: "))?;
            let data = frame.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some((id.to_owned(), serde_json::from_str(data).unwrap()))
        })
        .collect();
    (status, frames)
}

#[tokio::test]
async fn a_repeated_run_resumes_after_its_last_event_id_and_strangers_cannot_resume() {
    let url = serve().await;
    let input = json!({
        "threadId": "thread-resume",
        "runId": "run-resume-1",
        "messages": [{"id": "m1", "role": "user", "content": "Summarize my notes"}],
    });
    let (status, whole) = post(&url, ALICE, &input, None).await;
    assert_eq!(status, 200);
    assert!(whole.len() > 5, "{whole:?}");
    assert_eq!(whole.last().unwrap().1["outcome"]["type"], "interrupt");
    // Ids grow, unique.
    let ids: Vec<&str> = whole.iter().map(|(id, _)| id.as_str()).collect();
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "{ids:?}");
    // The same run again from any frame: exactly the frames after it (the same runId is the
    // same execution).
    for cut in [0, 1, whole.len() / 2, whole.len() - 2] {
        let (status, rest) = post(&url, ALICE, &input, Some(&whole[cut].0)).await;
        assert_eq!(status, 200);
        assert_eq!(rest, whole[cut + 1..].to_vec(), "after {}", whole[cut].0);
    }
    // Bob cannot resume Alice's interrupt.
    let interrupt = whole.last().unwrap().1["outcome"]["interrupts"][0]["id"].clone();
    let resume = json!({
        "threadId": "thread-resume",
        "runId": "run-resume-2",
        "messages": [],
        "resume": [{"interruptId": interrupt, "status": "cancelled"}],
    });
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/agui/scripted"))
        .bearer_auth(BOB)
        .json(&resume)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    // Alice dismisses it: the run goes on and finishes.
    let (status, frames) = post(&url, ALICE, &resume, None).await;
    assert_eq!(status, 200);
    assert_eq!(frames.first().unwrap().1["type"], "RUN_STARTED");
    assert_eq!(
        frames.last().unwrap().1["type"],
        "RUN_FINISHED",
        "{frames:?}"
    );
    // A bad input names what is wrong.
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/agui/scripted"))
        .bearer_auth(ALICE)
        .json(&json!({"runId": "r", "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("threadId"),
        "{body}"
    );
}

#[tokio::test]
async fn a_resume_naming_two_executions_is_refused_and_answers_neither() {
    let url = serve().await;
    let mut interrupts = Vec::new();
    for n in 0..2 {
        let input = json!({
            "threadId": format!("thread-two-{n}"),
            "runId": format!("run-two-{n}"),
            "messages": [{"id": "m1", "role": "user", "content": "Summarize my notes"}],
        });
        let (_, frames) = post(&url, ALICE, &input, None).await;
        interrupts.push(frames.last().unwrap().1["outcome"]["interrupts"][0].clone());
    }
    let resume = json!({
        "threadId": "thread-two-0",
        "runId": "run-two-resume",
        "messages": [],
        "resume": [
            {"interruptId": interrupts[0]["id"], "status": "cancelled"},
            {"interruptId": interrupts[1]["id"], "status": "cancelled"},
        ],
    });
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/agui/scripted"))
        .bearer_auth(ALICE)
        .json(&resume)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    // Both still wait for their answers: nothing was half-applied.
    for interrupt in &interrupts {
        let execution = interrupt["metadata"]["executionId"].as_str().unwrap();
        let view: Value = reqwest::Client::new()
            .get(format!("{url}/v1/executions/{execution}"))
            .bearer_auth(ALICE)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            view["pendingActions"].as_array().unwrap().len(),
            1,
            "{view}"
        );
    }
}
