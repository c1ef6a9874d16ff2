//! Cancel answers once: of many concurrent cancels of one running execution, over HTTP on
//! loopback, exactly one is told `requested`, every other one `already_requested` (or
//! `already_ended`, once the run has ended), and exactly one `run.cancelled` follows.

use std::sync::Arc;

mod support;

use futures_util::StreamExt;
use harness_core::event::EventPayload;
use harness_core::store::MemoryStore;
use harness_scripted::{Script, ScriptedOptions};
use harness_server::CancelOutcome;
use harness_server::client::Client;
use serde_json::json;

const ALICE: &str = "alice-token-0123456789";

/// Starts a run that streams a delta and then hangs, and waits until it runs.
async fn running(url: &str, alice: &Client) -> String {
    let http = reqwest::Client::new();
    let body: serde_json::Value = http
        .post(format!("{url}/v1/executions"))
        .bearer_auth(ALICE)
        .json(&json!({
            "adapter": "scripted",
            "message": "go",
            "options": ScriptedOptions::with_script(
                Script::builder().text("working").hang().build()
            ).to_value(),
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = body["id"].as_str().unwrap().to_owned();
    let mut events = Box::pin(alice.events(&id, 0));
    while let Some(event) = events.next().await {
        if matches!(event.unwrap().payload(), EventPayload::MessageDelta(_)) {
            break;
        }
    }
    id
}

/// Sends `n` cancels of `id` at once (each on its own connection, all released together),
/// and counts what they were told.
async fn cancel_at_once(url: &str, id: &str, n: usize) -> [usize; 3] {
    let start = Arc::new(tokio::sync::Barrier::new(n));
    let calls: Vec<_> = (0..n)
        .map(|i| {
            let (url, id, start) = (url.to_owned(), id.to_owned(), Arc::clone(&start));
            tokio::spawn(async move {
                // A client each: one connection each, none waiting on a pool.
                let http = reqwest::Client::new();
                let request = http
                    .post(format!("{url}/v1/executions/{id}/cancel"))
                    .bearer_auth(ALICE)
                    .json(&json!({"reason": format!("caller {i}")}));
                start.wait().await;
                let response = request.send().await.unwrap();
                assert_eq!(response.status(), 202);
                let body: serde_json::Value = response.json().await.unwrap();
                serde_json::from_value::<CancelOutcome>(body["status"].clone()).unwrap()
            })
        })
        .collect();
    let mut counts = [0; 3];
    for call in calls {
        match call.await.unwrap() {
            CancelOutcome::Requested => counts[0] += 1,
            CancelOutcome::AlreadyRequested => counts[1] += 1,
            CancelOutcome::AlreadyEnded => counts[2] += 1,
            other => panic!("an outcome this test does not know: {other:?}"),
        }
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_cancels_get_one_requested_and_one_run_cancelled() {
    let store = Arc::new(MemoryStore::new());
    let url = support::serve(store, "r1", &[("alice", ALICE)]).await;
    let alice = Client::new(&url, ALICE);
    // Several rounds: the race this guards against was in a window of microseconds.
    for round in 0..5 {
        let id = running(&url, &alice).await;
        let [requested, already, ended] = cancel_at_once(&url, &id, 200).await;
        assert_eq!(
            requested, 1,
            "round {round}: {requested} requested, {already} already requested, {ended} \
             already ended"
        );
        // Those answered after the run ended are told so.
        assert_eq!(already + ended, 199);
        let events: Vec<_> = alice
            .events(&id, 0)
            .map(Result::unwrap)
            .collect::<Vec<_>>()
            .await;
        let cancelled = events
            .iter()
            .filter(|e| matches!(e.payload(), EventPayload::RunCancelled(_)))
            .count();
        assert_eq!(cancelled, 1, "round {round}: {events:?}");
        assert!(events.last().unwrap().payload().is_terminal());
        let view = alice.execution(&id).await.unwrap();
        assert!(
            view.cancel_requested,
            "round {round}: the store records the request"
        );
        assert_eq!(
            alice.cancel(&id, None).await.unwrap(),
            CancelOutcome::AlreadyEnded
        );
    }
}
