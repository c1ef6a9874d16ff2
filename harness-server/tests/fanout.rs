//! One execution, 1,000 SSE clients on their own connections, all joined while it runs:
//! every client sees every event, in order, exactly once, the same as the stored log.

mod support;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use harness_core::event::Event;
use harness_core::store::MemoryStore;
use harness_scripted::{Script, ScriptedOptions};
use harness_server::client::SseParser;
use serde_json::json;

const TOKEN: &str = "fanout-token-0123456789";
const CLIENTS: usize = 1000;

/// Two sockets per client (its own and the server's) and some to spare.
fn enough_descriptors() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let needed = (2 * CLIENTS + 256) as u64;
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current.is_some_and(|c| c < needed) {
        limit.current = Some(limit.maximum.map_or(needed, |max| max.min(needed)));
        setrlimit(Resource::Nofile, limit).expect("raise the open-file limit");
    }
    let limit = getrlimit(Resource::Nofile);
    assert!(
        limit.current.is_none_or(|c| c >= needed),
        "this test needs {needed} open files; the hard limit is {:?}",
        limit.maximum
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_sse_clients_all_see_every_event() {
    enough_descriptors();
    let url = support::serve(Arc::new(MemoryStore::new()), "r", &[("alice", TOKEN)]).await;

    // Waits while the clients connect, then streams.
    let mut script = Script::builder()
        .text("starting ")
        .delay(Duration::from_millis(3000));
    for n in 0..300 {
        script = script.text(format!("delta {n} "));
        if n % 25 == 0 {
            script = script.delay(Duration::from_millis(10));
        }
    }
    let http = reqwest::Client::new();
    let started: serde_json::Value = http
        .post(format!("{url}/v1/executions"))
        .bearer_auth(TOKEN)
        .json(&json!({
            "adapter": "scripted",
            "message": "go",
            "options": ScriptedOptions::with_script(script.complete("ok").build()).to_value(),
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = started["id"].as_str().unwrap().to_owned();

    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (http, url, id) = (http.clone(), url.clone(), id.clone());
            tokio::spawn(async move {
                let response = http
                    .get(format!("{url}/v1/executions/{id}/events"))
                    .bearer_auth(TOKEN)
                    .header("accept", "text/event-stream")
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), 200);
                let mut body = response.bytes_stream();
                let mut parser = SseParser::default();
                let mut events = Vec::new();
                while let Some(chunk) = body.next().await {
                    for data in parser.push(&chunk.unwrap()) {
                        events.push(serde_json::from_str::<Event>(&data).unwrap());
                    }
                }
                events
            })
        })
        .collect();
    let mut seen = Vec::with_capacity(CLIENTS);
    for client in clients {
        seen.push(client.await.unwrap());
    }
    // The whole log, as stored.
    let page: serde_json::Value = http
        .get(format!("{url}/v1/executions/{id}/events?limit=8192"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let stored: Vec<Event> = serde_json::from_value(page["events"].clone()).unwrap();
    assert!(stored.len() > 300, "{}", stored.len());
    assert!(stored.last().unwrap().payload().is_terminal());
    for (n, events) in seen.iter().enumerate() {
        assert_eq!(
            events, &stored,
            "client {n} saw the whole log, once, in order"
        );
    }
}
