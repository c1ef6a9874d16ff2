//! The Runtime API over real HTTP on loopback, with a real HTTP client (reqwest): each
//! endpoint, who may see what, errors, idempotency, answers, cancels, resumable SSE, and
//! a second replica serving the first one's executions through the shared store.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

mod support;

use futures_util::StreamExt;
use harness_core::event::{Event, EventPayload};
use harness_core::store::MemoryStore;
use harness_scripted::{ApprovalCall, Script, ScriptedOptions};
use harness_server::CancelOutcome;
use harness_server::client::{Client, SseParser};
use serde_json::{Value, json};

const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789ab";

/// A server on a free loopback port over `store`, as replica `replica`.
struct Running {
    url: String,
    http: reqwest::Client,
}

async fn serve(store: Arc<MemoryStore>, replica: &str) -> Running {
    Running {
        url: support::serve(store, replica, &[("alice", ALICE), ("bob", BOB)]).await,
        http: reqwest::Client::new(),
    }
}

async fn server() -> Running {
    serve(Arc::new(MemoryStore::new()), "r1").await
}

impl Running {
    fn client(&self, token: &str) -> Client {
        Client::new(&self.url, token)
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.url));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn start(&self, token: &str, script: Script) -> String {
        let (status, body) = self
            .call(
                reqwest::Method::POST,
                "/v1/executions",
                Some(token),
                Some(json!({
                    "adapter": "scripted",
                    "message": "go",
                    "options": ScriptedOptions::with_script(script).to_value(),
                })),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        body["id"].as_str().unwrap().to_owned()
    }

    /// Every event of `id` through one SSE connection from after `after`, to the end.
    async fn sse(&self, token: &str, id: &str, after: Option<u64>) -> Vec<Event> {
        let mut request = self
            .http
            .get(format!("{}/v1/executions/{id}/events", self.url))
            .bearer_auth(token)
            .header("accept", "text/event-stream");
        if let Some(after) = after {
            request = request.header("last-event-id", after.to_string());
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let mut body = response.bytes_stream();
        let mut parser = SseParser::default();
        let mut events = Vec::new();
        while let Some(chunk) = body.next().await {
            for data in parser.push(&chunk.unwrap()) {
                events.push(serde_json::from_str::<Event>(&data).unwrap());
            }
        }
        events
    }
}

fn script_with_approval() -> Script {
    Script::builder()
        .text("before ")
        .approval([ApprovalCall::new(
            "call_1".parse().unwrap(),
            "write_file",
            json!({"path": "a.txt"}),
        )])
        .text("after")
        .complete("done")
        .build()
}

fn seqs(events: &[Event]) -> Vec<u64> {
    events.iter().map(|e| e.seq().get()).collect()
}

fn error_code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn every_v1_endpoint_needs_a_valid_token_and_health_needs_none() {
    let s = server().await;
    let id = s
        .start(ALICE, Script::builder().complete("ok").build())
        .await;
    let endpoints = [
        (reqwest::Method::POST, "/v1/executions".to_owned()),
        (reqwest::Method::GET, "/v1/executions".to_owned()),
        (reqwest::Method::GET, format!("/v1/executions/{id}")),
        (reqwest::Method::GET, format!("/v1/executions/{id}/events")),
        (
            reqwest::Method::POST,
            format!("/v1/executions/{id}/actions/act_1"),
        ),
        (reqwest::Method::POST, format!("/v1/executions/{id}/cancel")),
        (reqwest::Method::GET, "/v1/adapters".to_owned()),
        (reqwest::Method::GET, "/v1/adapters/scripted".to_owned()),
    ];
    for (method, path) in endpoints {
        for token in [None, Some("not-a-token-at-all-0000")] {
            let (status, body) = s.call(method.clone(), &path, token, Some(json!({}))).await;
            assert_eq!(status, 401, "{method} {path}: {body}");
            assert_eq!(error_code(&body), "CREDENTIAL_INVALID", "{body}");
        }
    }
    let (status, body) = s.call(reqwest::Method::GET, "/healthz", None, None).await;
    assert_eq!((status, body), (200, Value::String("ok".into())));
    let (status, body) = s.call(reqwest::Method::GET, "/readyz", None, None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["ready"], true);
    // No exporter given: no metrics here (and no error body pretending otherwise).
    let (status, _) = s.call(reqwest::Method::GET, "/metrics", None, None).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn another_principal_gets_404_on_every_endpoint_and_an_empty_list() {
    let s = server().await;
    let id = s.start(ALICE, script_with_approval()).await;
    let alice = s.client(ALICE);
    // Wait for the approval, so that answering would otherwise be possible.
    let view = loop {
        let view = alice.execution(&id).await.unwrap();
        if !view.pending_actions.is_empty() {
            break view;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let action = view.pending_actions[0].clone();
    let answer = serde_json::to_value(action.approve_all()).unwrap();
    let missing = "exec_doesnotexist0000";
    for target in [id.as_str(), missing] {
        let paths = [
            (
                reqwest::Method::GET,
                format!("/v1/executions/{target}"),
                None,
            ),
            (
                reqwest::Method::GET,
                format!("/v1/executions/{target}/events"),
                None,
            ),
            (
                reqwest::Method::POST,
                format!("/v1/executions/{target}/actions/{}", action.id),
                Some(answer.clone()),
            ),
            (
                reqwest::Method::POST,
                format!("/v1/executions/{target}/cancel"),
                Some(json!({})),
            ),
        ];
        for (method, path, body) in paths {
            let (status, body) = s.call(method.clone(), &path, Some(BOB), body).await;
            assert_eq!(status, 404, "{method} {path}: {body}");
            assert_eq!(error_code(&body), "EXECUTION_NOT_FOUND", "{body}");
            // Bob cannot tell Alice's execution from one that does not exist.
            assert_eq!(
                body["error"]["message"],
                format!("no execution `{target}`"),
                "{body}"
            );
        }
    }
    // SSE too.
    let response = s
        .http
        .get(format!("{}/v1/executions/{id}/events", s.url))
        .bearer_auth(BOB)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let page = s.client(BOB).list(None, 50).await.unwrap();
    assert!(page.executions.is_empty(), "{page:?}");
    // Nothing Bob did reached the execution: it still awaits Alice's answer.
    let view = alice.execution(&id).await.unwrap();
    assert_eq!(view.pending_actions.len(), 1);
    assert!(!view.cancel_requested);
    alice.answer(&id, &action.approve_all()).await.unwrap();
}

#[tokio::test]
async fn bad_requests_name_what_is_wrong() {
    let s = server().await;
    let post = |body: Value| {
        s.call(
            reqwest::Method::POST,
            "/v1/executions",
            Some(ALICE),
            Some(body),
        )
    };
    let (status, body) = post(json!({"adapter": "scripted", "mesage": "typo"})).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(error_code(&body), "REQUEST_INVALID");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `mesage`"),
        "{body}"
    );

    let (status, body) = post(json!({"adapter": "scripted", "message": "x",
        "requiredCapabilities": [{"capability": "stream.text", "minimum": "superb"}]}))
    .await;
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("requiredCapabilities[0]"), "{message}");

    let (status, body) = post(json!({"message": "x"})).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`adapter` is missing"),
        "{body}"
    );

    let (status, body) = post(json!({"adapter": "nope", "message": "x"})).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(error_code(&body), "ADAPTER_NOT_FOUND");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`scripted`"),
        "{body}"
    );

    // Options the adapter's schema does not know: refused before anything runs.
    let (status, body) =
        post(json!({"adapter": "scripted", "message": "x", "options": {"command": ["/bin/sh"]}}))
            .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(error_code(&body), "OPTIONS_INVALID", "{body}");

    let (status, body) =
        post(json!({"adapter": "scripted", "message": "x".repeat(70 * 1024)})).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(error_code(&body), "REQUEST_TOO_LARGE");

    let response = s
        .http
        .post(format!("{}/v1/executions", s.url))
        .bearer_auth(ALICE)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not JSON"),
        "{body}"
    );

    let (status, body) = s
        .call(
            reqwest::Method::GET,
            "/v1/executions?limit=0",
            Some(ALICE),
            None,
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("use 1 to 200"),
        "{body}"
    );
    let (status, body) = s
        .call(reqwest::Method::GET, "/v2/executions", Some(ALICE), None)
        .await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(error_code(&body), "ENDPOINT_NOT_FOUND");
    // Nothing was started by any of these.
    let page = s.client(ALICE).list(None, 50).await.unwrap();
    assert!(page.executions.is_empty(), "{page:?}");
}

/// What schemathesis found the document and the handlers disagreeing on, each settled.
#[tokio::test]
async fn the_edges_schemathesis_found_are_settled() {
    let s = server().await;
    // W3C Trace Context: a malformed `traceparent` is ignored, not refused.
    for traceparent in [
        "0",
        "",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
    ] {
        let response = s
            .http
            .post(format!("{}/v1/executions", s.url))
            .bearer_auth(ALICE)
            .header("traceparent", traceparent)
            .json(&json!({"adapter": "scripted", "message": "hi",
                "options": ScriptedOptions::with_script(Script::builder().complete("ok").build()).to_value()}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201, "traceparent {traceparent:?}");
    }

    // `1.0` is the integer 1 to JSON Schema, and so to the API.
    let id = s.start(ALICE, script_with_approval()).await;
    let alice = s.client(ALICE);
    let request = loop {
        let view = alice.execution(&id).await.unwrap();
        if let Some(request) = view.pending_actions.first() {
            break request.clone();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let mut answer = serde_json::to_value(request.approve_all()).unwrap();
    answer["revision"] = json!(answer["revision"].as_f64().unwrap());
    assert!(answer["revision"].is_f64());
    let (status, body) = s
        .call(
            reqwest::Method::POST,
            &format!("/v1/executions/{id}/actions/{}", request.id),
            Some(ALICE),
            Some(answer),
        )
        .await;
    assert_eq!(status, 200, "{body}");

    // An AG-UI input whose `resume` or `messages` is not an array is refused, whatever
    // else it holds.
    let agui = |input: Value| {
        s.call(
            reqwest::Method::POST,
            "/v1/agui/scripted",
            Some(ALICE),
            Some(input),
        )
    };
    let user = json!([{"id": "m1", "role": "user", "content": "hi"}]);
    for input in [
        json!({"threadId": "t", "runId": "r1", "messages": user, "resume": "yes"}),
        json!({"threadId": "t", "runId": "r2", "messages": "hi"}),
        json!({"threadId": "t", "runId": "r3", "messages": [{"content": "no role"}]}),
        json!({"threadId": "t", "runId": "", "messages": user}),
    ] {
        let (status, body) = agui(input.clone()).await;
        assert_eq!(status, 400, "{input} answered {body}");
        assert_eq!(error_code(&body), "REQUEST_INVALID", "{body}");
    }

    // A cancel's body is optional, but one of whitespace is not JSON (it was accepted).
    let id = s.start(ALICE, script_with_approval()).await;
    let cancel = |body: &'static str| {
        s.http
            .post(format!("{}/v1/executions/{id}/cancel", s.url))
            .bearer_auth(ALICE)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    for body in ["\t", " ", "\n"] {
        let response = cancel(body).await.unwrap();
        assert_eq!(response.status(), 400, "{body:?}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(error_code(&answer), "REQUEST_INVALID", "{answer}");
    }
    assert_eq!(cancel("").await.unwrap().status(), 202, "no body at all");
}

#[tokio::test]
async fn an_idempotency_key_returns_the_original_per_principal_and_conflicts_otherwise() {
    let s = server().await;
    let send = |token: &'static str, message: &'static str| {
        s.http
            .post(format!("{}/v1/executions", s.url))
            .bearer_auth(token)
            .header("idempotency-key", "order-42")
            .json(&json!({"adapter": "scripted", "message": message}))
            .send()
    };
    let first = send(ALICE, "hello").await.unwrap();
    assert_eq!(first.status(), 201);
    let location = first.headers()["location"].to_str().unwrap().to_owned();
    let first: Value = first.json().await.unwrap();
    assert_eq!(
        location,
        format!("/v1/executions/{}", first["id"].as_str().unwrap())
    );

    let again = send(ALICE, "hello").await.unwrap();
    assert_eq!(again.status(), 200);
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["id"], first["id"]);

    let other = send(ALICE, "goodbye").await.unwrap();
    assert_eq!(other.status(), 409);
    let other: Value = other.json().await.unwrap();
    assert_eq!(error_code(&other), "IDEMPOTENCY_CONFLICT", "{other}");

    // Bob's key is his own.
    let bobs = send(BOB, "goodbye").await.unwrap();
    assert_eq!(bobs.status(), 201);
    let bobs: Value = bobs.json().await.unwrap();
    assert_ne!(bobs["id"], first["id"]);
    let page = s.client(ALICE).list(None, 50).await.unwrap();
    assert_eq!(page.executions.len(), 1, "{page:?}");
}

#[tokio::test]
async fn an_action_is_answered_once_and_the_stream_ends_after_the_terminal_event() {
    let s = server().await;
    let id = s.start(ALICE, script_with_approval()).await;
    let alice = s.client(ALICE);
    let mut events = Box::pin(alice.events(&id, 0));
    let mut seen = Vec::new();
    while let Some(event) = events.next().await {
        let event = event.unwrap();
        if let EventPayload::ActionRequested(request) = event.payload() {
            // A stale revision first: refused, the action stays pending.
            let mut stale = serde_json::to_value(request.approve_all()).unwrap();
            stale["revision"] = json!(request.revision.get() + 1);
            let (status, body) = s
                .call(
                    reqwest::Method::POST,
                    &format!("/v1/executions/{id}/actions/{}", request.id),
                    Some(ALICE),
                    Some(stale),
                )
                .await;
            assert_eq!(status, 409, "{body}");
            assert_eq!(error_code(&body), "ACTION_REVISION_STALE");
            // The path's action and the body's must agree.
            let mut elsewhere = serde_json::to_value(request.approve_all()).unwrap();
            elsewhere["actionId"] = json!("act_other");
            let (status, _) = s
                .call(
                    reqwest::Method::POST,
                    &format!("/v1/executions/{id}/actions/{}", request.id),
                    Some(ALICE),
                    Some(elsewhere),
                )
                .await;
            assert_eq!(status, 400);
            alice.answer(&id, &request.approve_all()).await.unwrap();
            let second = alice.answer(&id, &request.approve_all()).await.unwrap_err();
            assert_eq!(second.code(), Some("ACTION_ALREADY_RESOLVED"), "{second}");
        }
        seen.push(event);
    }
    let last = seen.last().unwrap();
    assert!(
        matches!(last.payload(), EventPayload::RunSucceeded(_)),
        "{last:?}"
    );
    assert_eq!(seqs(&seen), (1..=last.seq().get()).collect::<Vec<_>>());
    let view = alice.execution(&id).await.unwrap();
    assert_eq!(view.outcome.as_ref().map(|e| e.seq()), Some(last.seq()));
    assert!(view.pending_actions.is_empty());
}

#[tokio::test]
async fn a_cancel_is_confirmed_by_one_run_cancelled() {
    let s = server().await;
    let id = s
        .start(ALICE, Script::builder().text("working").hang().build())
        .await;
    let alice = s.client(ALICE);
    let mut events = Box::pin(alice.events(&id, 0));
    // Wait until it runs.
    while let Some(event) = events.next().await {
        if matches!(event.unwrap().payload(), EventPayload::MessageDelta(_)) {
            break;
        }
    }
    let (status, body) = s
        .call(
            reqwest::Method::POST,
            &format!("/v1/executions/{id}/cancel"),
            Some(ALICE),
            Some(json!({"reason": "enough"})),
        )
        .await;
    assert_eq!(
        (status, &body["status"]),
        (202, &json!("requested")),
        "{body}"
    );
    let rest: Vec<Event> = events.map(Result::unwrap).collect().await;
    let cancelled: Vec<_> = rest
        .iter()
        .filter(|e| matches!(e.payload(), EventPayload::RunCancelled(_)))
        .collect();
    assert_eq!(cancelled.len(), 1, "{rest:?}");
    assert!(rest.last().unwrap().payload().is_terminal());
    let again = alice.cancel(&id, None).await.unwrap();
    assert_eq!(again, CancelOutcome::AlreadyEnded);
}

#[tokio::test]
async fn a_resumed_stream_gives_exactly_the_missing_suffix_wherever_it_was_dropped() {
    let s = server().await;
    // Streams while the test reads: some drops happen mid-run, some after the end.
    let mut script = Script::builder();
    for n in 0..120 {
        script = script.text(format!("delta {n} "));
        if n % 10 == 0 {
            script = script.delay(Duration::from_millis(5));
        }
    }
    let id = s.start(ALICE, script.complete("ok").build()).await;
    // Drop points spread over the whole log, the first and the last included.
    let mut drops: Vec<usize> = (0..24).map(|k| 1 + (k * 37) % 120).collect();
    drops.extend([1, 2, 119, 120]);
    let mut joined: Vec<Event> = Vec::new();
    let mut cursor = 0u64;
    for take in drops {
        let mut request = s
            .http
            .get(format!("{}/v1/executions/{id}/events", s.url))
            .bearer_auth(ALICE)
            .header("accept", "text/event-stream");
        if cursor > 0 {
            request = request.header("last-event-id", cursor.to_string());
        }
        let mut body = request.send().await.unwrap().bytes_stream();
        let mut parser = SseParser::default();
        let mut got = 0;
        'read: while let Some(chunk) = body.next().await {
            for data in parser.push(&chunk.unwrap()) {
                let event: Event = serde_json::from_str(&data).unwrap();
                assert_eq!(
                    event.seq().get(),
                    cursor + 1,
                    "no gap and no repeat after the cursor"
                );
                cursor = event.seq().get();
                joined.push(event);
                got += 1;
                if got == take {
                    break 'read;
                }
            }
        }
        drop(body); // the connection goes mid-stream
        if joined.last().is_some_and(|e| e.payload().is_terminal()) {
            break;
        }
    }
    // Then the rest, if the drops did not reach the end.
    if !joined.last().is_some_and(|e| e.payload().is_terminal()) {
        joined.extend(s.sse(ALICE, &id, Some(cursor)).await);
    }
    let whole = s.sse(ALICE, &id, None).await;
    assert_eq!(joined, whole, "the pieces make the whole log");
    assert_eq!(seqs(&whole), (1..=whole.len() as u64).collect::<Vec<_>>());
    // A resume from the terminal event's id sends nothing and ends.
    let last = whole.last().unwrap().seq().get();
    assert!(s.sse(ALICE, &id, Some(last)).await.is_empty());
    // `Last-Event-ID` wins over `?after=`; `?after=` alone works.
    let response = s
        .http
        .get(format!("{}/v1/executions/{id}/events?after=3", s.url))
        .bearer_auth(ALICE)
        .header("accept", "text/event-stream")
        .header("last-event-id", "5")
        .send()
        .await
        .unwrap();
    let text = response.text().await.unwrap();
    assert!(
        text.starts_with("id: 6\n") || text.contains("\nid: 6\n") || text.starts_with("id:6"),
        "{}",
        &text[..80.min(text.len())]
    );
    let page = s.client(ALICE).events_page(&id, 3, 2).await.unwrap();
    assert_eq!(page.events[0].seq().get(), 4, "{page:?}");
    assert_eq!(page.next, 5);
    assert!(!page.ended);
    let tail = s
        .client(ALICE)
        .events_page(&id, last - 1, 10)
        .await
        .unwrap();
    assert!(tail.ended, "{tail:?}");
}

#[tokio::test]
async fn frames_carry_the_sequence_as_id_and_the_kind_as_event() {
    let s = server().await;
    let id = s
        .start(ALICE, Script::builder().text("hi").complete("ok").build())
        .await;
    let text = s
        .http
        .get(format!("{}/v1/executions/{id}/events", s.url))
        .bearer_auth(ALICE)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let frames: Vec<&str> = text
        .split("\n\n")
        .filter(|f| !f.trim().is_empty())
        .collect();
    for (n, frame) in frames.iter().enumerate() {
        let lines: Vec<&str> = frame.lines().collect();
        let data = lines.iter().find_map(|l| l.strip_prefix("data: ")).unwrap();
        let event: Value = serde_json::from_str(data).unwrap();
        assert!(
            lines.contains(&format!("id: {}", n + 1).as_str()),
            "{frame}"
        );
        assert!(
            lines.contains(&format!("event: {}", event["kind"].as_str().unwrap()).as_str()),
            "{frame}"
        );
        assert_eq!(event["seq"], n + 1);
    }
    assert!(
        frames.last().unwrap().contains("event: run.succeeded"),
        "{text}"
    );
}

#[tokio::test]
async fn listing_pages_newest_first_without_repeats() {
    let s = server().await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(
            s.start(ALICE, Script::builder().complete("ok").build())
                .await,
        );
    }
    let alice = s.client(ALICE);
    let mut seen = Vec::new();
    let mut before: Option<String> = None;
    loop {
        let page = alice.list(before.as_deref(), 2).await.unwrap();
        assert!(page.executions.len() <= 2);
        seen.extend(page.executions.iter().map(|e| e.id.to_string()));
        match page.next {
            Some(next) => before = Some(next),
            None => break,
        }
    }
    ids.reverse();
    assert_eq!(seen, ids);
}

#[tokio::test]
async fn a_second_replica_reads_streams_answers_and_cancels_the_first_ones_executions() {
    let store = Arc::new(MemoryStore::new());
    let a = serve(Arc::clone(&store), "replica-a").await;
    let b = serve(store, "replica-b").await;
    let id = a.start(ALICE, script_with_approval()).await;
    let on_b = b.client(ALICE);
    // B streams from the store and answers through it; A applies the answer.
    let mut events = Box::pin(on_b.events(&id, 0));
    let mut seen = Vec::new();
    while let Some(event) = events.next().await {
        let event = event.unwrap();
        if let EventPayload::ActionRequested(request) = event.payload() {
            let view = on_b.execution(&id).await.unwrap();
            assert_eq!(view.pending_actions.len(), 1, "B sees the pending action");
            on_b.answer(&id, &request.approve_all()).await.unwrap();
            let twice = on_b.answer(&id, &request.approve_all()).await.unwrap_err();
            assert_eq!(twice.code(), Some("ACTION_ALREADY_RESOLVED"), "{twice}");
        }
        seen.push(event);
    }
    assert!(matches!(
        seen.last().unwrap().payload(),
        EventPayload::RunSucceeded(_)
    ));
    assert_eq!(
        seen,
        a.sse(ALICE, &id, None).await,
        "both replicas send one log"
    );
    let view = on_b.execution(&id).await.unwrap();
    assert_eq!(serde_json::to_value(view.state).unwrap(), "succeeded");
    assert_eq!(view.last_seq, seen.len() as u64);
    // Bob is a stranger on B too.
    assert_eq!(
        b.client(BOB).execution(&id).await.unwrap_err().code(),
        Some("EXECUTION_NOT_FOUND")
    );

    // A cancel sent to B reaches the execution running on A.
    // (A text the redactor releases at once: a short one such as `x` could begin a secret's
    // prefix, and is held until more output comes, which a hanging script never sends.)
    let hanging = a
        .start(ALICE, Script::builder().text("working").hang().build())
        .await;
    let mut events = Box::pin(on_b.events(&hanging, 0));
    while let Some(event) = events.next().await {
        if matches!(event.unwrap().payload(), EventPayload::MessageDelta(_)) {
            break;
        }
    }
    assert_eq!(
        on_b.cancel(&hanging, Some("from b")).await.unwrap(),
        CancelOutcome::Requested
    );
    let rest: Vec<Event> = events.map(Result::unwrap).collect().await;
    assert!(
        matches!(
            rest.last().unwrap().payload(),
            EventPayload::RunCancelled(_)
        ),
        "{rest:?}"
    );
    let kinds: BTreeSet<&str> = rest.iter().map(|e| e.kind().as_str()).collect();
    assert!(kinds.contains("run.cancelled"));
}

#[tokio::test]
async fn adapters_list_their_manifests_with_options_schemas() {
    let s = server().await;
    let (status, body) = s
        .call(reqwest::Method::GET, "/v1/adapters", Some(ALICE), None)
        .await;
    assert_eq!(status, 200);
    let adapters = body["adapters"].as_array().unwrap();
    assert_eq!(adapters.len(), 1);
    assert_eq!(adapters[0]["id"], "scripted");
    assert_eq!(
        adapters[0]["optionsSchema"]["additionalProperties"], false,
        "{body}"
    );
    let (status, one) = s
        .call(
            reqwest::Method::GET,
            "/v1/adapters/scripted",
            Some(ALICE),
            None,
        )
        .await;
    assert_eq!((status, &one), (200, &adapters[0]));
    let (status, body) = s
        .call(reqwest::Method::GET, "/v1/adapters/nope", Some(ALICE), None)
        .await;
    assert_eq!((status, error_code(&body)), (404, "ADAPTER_NOT_FOUND"));
}

#[tokio::test]
async fn an_idle_stream_gets_keep_alive_comments() {
    let s = server().await;
    let id = s
        .start(ALICE, Script::builder().text("working").hang().build())
        .await;
    let mut body = s
        .http
        .get(format!("{}/v1/executions/{id}/events", s.url))
        .bearer_auth(ALICE)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap()
        .bytes_stream();
    let mut text = String::new();
    // The frames so far, then comments while nothing happens (every 100 ms here).
    while text.matches(": keep-alive\n\n").count() < 2 {
        let chunk = tokio::time::timeout(Duration::from_secs(5), body.next())
            .await
            .expect("a keep-alive comment within 5 s")
            .unwrap()
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains("event: message.delta"), "{text}");
    s.client(ALICE).cancel(&id, None).await.unwrap();
}
