//! The model-loop adapter, certified by the shared conformance suite against the mock model
//! server, on both APIs.
//!
//! Run with `--nocapture` to see the reports; they are published in
//! `harness-conformance/reports/openai-{chat,responses}.txt`.

mod common;

use std::sync::{Mutex, PoisonError};

use common::Mock;
use harness_conformance::{Behaviour, FixtureOutcome, Knobs, certify, tools};
use harness_core::error::ErrorCategory;
use harness_core::service::ExecutionRequest;
use harness_openai::{Api, Endpoint, OpenAiAdapter, OpenAiOptions};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The fixtures every knob relies on; dynamic ones (markers, secrets) go before them.
fn fixtures() -> Vec<Value> {
    let call = |id: &str, tool: &str| json!({"id": id, "name": tools::provider_name(tool), "arguments": tools::arguments(tool)});
    let tool_loop = |token: &str, calls: Value| {
        [
            json!({"match": {"userMessage": token, "hasToolResult": true}, "response": {"content": "The tool is done."}}),
            json!({"match": {"userMessage": token}, "response": {"toolCalls": calls}}),
        ]
    };
    let mut all = vec![
        json!({"match": {"userMessage": "conformance text"}, "response": {"content": "Hello from the conformance model."}, "chunkSize": 6}),
        json!({"match": {"userMessage": "conformance reasoning"}, "response": {"content": "Four.", "reasoning": "Two and two make four."}}),
        json!({"match": {"userMessage": "conformance usage"}, "response": {"content": "Counted.",
               "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15, "input_tokens": 12, "output_tokens": 3}}}),
        json!({"match": {"userMessage": "conformance hang"}, "response": {"content": "never"}, "latency": 3_600_000}),
        json!({"match": {"userMessage": "conformance fails"}, "response": {"error": {"message": "the provider failed", "type": "server_error",
               "param": "sk-conformance-canary-7f3e9a1c5b"}, "status": 503}}),
        json!({"match": {"userMessage": "conformance auth fails"}, "response": {"error": {"message": "bad key", "type": "invalid_request_error",
               "code": "invalid_api_key"}, "status": 401}}),
        // The sequence: call a, then (its result in) call b, then (b's result in) the end.
        json!({"match": {"userMessage": "conformance sequence", "toolCallId": "call_seq_b"}, "response": {"content": "Both done."}}),
        json!({"match": {"userMessage": "conformance sequence", "toolCallId": "call_seq_a"}, "response": {"toolCalls": [call("call_seq_b", tools::GATED)]}}),
        json!({"match": {"userMessage": "conformance sequence"}, "response": {"toolCalls": [call("call_seq_a", tools::GATED)]}}),
        json!({"match": {"userMessage": "conformance approve then hang", "hasToolResult": true}, "response": {"content": "never"}, "latency": 3_600_000}),
        json!({"match": {"userMessage": "conformance approve then hang"}, "response": {"toolCalls": [call("call_h", tools::GATED)]}}),
        json!({"match": {"userMessage": "conformance recall"}, "response": {"content": "I remember nothing."}}),
        json!({"match": {"userMessage": "conformance"}, "response": {"content": "A short sentence."}}),
    ];
    for (token, calls) in [
        (
            "conformance tool success",
            json!([call("call_ok", tools::ECHO)]),
        ),
        (
            "conformance tool error",
            json!([call("call_err", tools::FAIL)]),
        ),
        (
            "conformance approve one",
            json!([call("call_g1", tools::GATED)]),
        ),
        (
            "conformance approve two",
            json!([call("call_g1", tools::GATED), call("call_g2", tools::GATED)]),
        ),
        (
            "conformance slow tool",
            json!([call("call_slow", tools::SLOW)]),
        ),
        (
            "conformance provider tool",
            json!([call("call_up", tools::UP_ECHO)]),
        ),
        (
            "conformance credential tool",
            json!([call("call_who", tools::WHOAMI)]),
        ),
    ] {
        // Before the catch-all.
        let at = all.len() - 1;
        for (n, f) in tool_loop(token, calls).into_iter().enumerate() {
            all.insert(at + n, f);
        }
    }
    all
}

/// A server that streams back, as text, the `traceparent` header of each request.
async fn echo_trace_server(api: Api) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&request).to_lowercase();
                let traceparent = head
                    .lines()
                    .find_map(|l| l.strip_prefix("traceparent:"))
                    .map(str::trim)
                    .unwrap_or("none")
                    .to_owned();
                let body = match api {
                    Api::ChatCompletions => format!(
                        "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
                        json!({"choices": [{"index": 0, "delta": {"content": traceparent}}]}),
                        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                    ),
                    Api::Responses => format!(
                        "event: response.output_text.delta\ndata: {}\n\nevent: response.completed\ndata: {}\n\n",
                        json!({"type": "response.output_text.delta", "delta": traceparent}),
                        json!({"type": "response.completed", "response": {"status": "completed"}})
                    ),
                };
                let _ = socket
                    .write_all(format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n{body}").as_bytes())
                    .await;
            });
        }
    });
    url
}

/// A fault-injecting model server (a mock for fault injection only: the mock model server
/// cannot misbehave this way). What it does depends on the request's body:
///
/// - `conformance panic`: the server panics mid-response, as a model server's worker does:
///   the status and one streamed text delta go out (chunked), then the next chunk, which
///   announces more bytes than it holds, carries the panic's text (`thread 'main' panicked
///   at …: <the panic message>` and a stack backtrace), and the connection is closed in the
///   middle of it. The model loop must end the run classified (the stream broke off) with
///   the panic's text in no event and not in the public error.
/// - `conformance malformed`: a stream event whose data is not JSON, then the connection is
///   held open (the run must end `protocol` by itself, not by waiting).
struct Faults {
    url: String,
    /// The panic message the server writes (the suite's canary), set by the knobs.
    panic: std::sync::Arc<Mutex<String>>,
}

impl Faults {
    async fn start(api: Api) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let panic = std::sync::Arc::new(Mutex::new(String::new()));
        let message = std::sync::Arc::clone(&panic);
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let message = message
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                tokio::spawn(fault(socket, api, message));
            }
        });
        Self { url, panic }
    }
}

/// Reads one request (head and body, by its content length).
async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<String> {
    let mut request = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&request[..end]).to_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if request.len() >= end + 4 + length {
                return Some(String::from_utf8_lossy(&request).into_owned());
            }
        }
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
}

async fn fault(mut socket: tokio::net::TcpStream, api: Api, message: String) {
    let Some(request) = read_request(&mut socket).await else {
        return;
    };
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
    let chunk = |body: &str| format!("{:x}\r\n{body}\r\n", body.len());
    if request.contains("conformance malformed") {
        let _ = socket
            .write_all(format!("{head}{}", chunk("data: this is not json\n\n")).as_bytes())
            .await;
        // Held open: the model loop must not wait for more.
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
        return;
    }
    if request.contains("conformance panic") {
        let delta = match api {
            Api::ChatCompletions => format!(
                "data: {}\n\n",
                json!({"choices": [{"index": 0, "delta": {"content": "partial"}}]})
            ),
            Api::Responses => format!(
                "event: response.output_text.delta\ndata: {}\n\n",
                json!({"type": "response.output_text.delta", "delta": "partial"})
            ),
        };
        let trace = format!(
            "thread 'main' panicked at src/server.rs:42:7:\n{message}\nstack backtrace:\n   \
             0: rust_begin_unwind\n   1: core::panicking::panic_fmt\n   2: model_server::stream\n"
        );
        // The chunk announces more than it holds: the response breaks off mid-chunk.
        let broken = format!("{:x}\r\n{trace}", trace.len() + 4096);
        let _ = socket
            .write_all(format!("{head}{}{broken}", chunk(&delta)).as_bytes())
            .await;
        let _ = socket.flush().await;
        return;
    }
    let _ = socket
        .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        .await;
}

struct OpenAiKnobs {
    mock: Mock,
    api: Api,
    trace: String,
    faults: Faults,
    /// Fixtures added for markers and secrets, newest first.
    dynamic: Mutex<Vec<Value>>,
}

impl OpenAiKnobs {
    fn add(&self, fixture: Value) {
        let mut dynamic = self.dynamic.lock().unwrap_or_else(PoisonError::into_inner);
        dynamic.insert(0, fixture);
        let mut all = dynamic.clone();
        all.extend(fixtures());
        self.mock.set_fixtures_blocking(&all);
    }
}

fn request(message: &str) -> ExecutionRequest {
    ExecutionRequest::new(message)
}

impl Knobs for OpenAiKnobs {
    type Adapter = OpenAiAdapter;

    fn adapter(&self) -> OpenAiAdapter {
        let endpoint = Endpoint::new(self.mock.base(), "gpt-4.1")
            .with_api(self.api)
            .with_api_key("sk-operator-key-for-the-mock");
        let trace = Endpoint::new(self.trace.clone(), "gpt-4.1").with_api(self.api);
        let faults = Endpoint::new(self.faults.url.clone(), "gpt-4.1").with_api(self.api);
        OpenAiAdapter::new(endpoint)
            .and_then(|a| a.with_endpoint("trace", trace))
            .and_then(|a| a.with_endpoint("faults", faults))
            .expect("valid endpoints")
    }

    fn plain_request(&self) -> ExecutionRequest {
        request("conformance: reply with one short sentence")
    }

    fn request_for(&self, behaviour: &Behaviour) -> Option<ExecutionRequest> {
        Some(match behaviour {
            Behaviour::StreamText => request("conformance text"),
            Behaviour::StreamReasoning => request("conformance reasoning"),
            Behaviour::StreamUsage => request("conformance usage"),
            Behaviour::ToolSuccess => request("conformance tool success"),
            Behaviour::ToolError => request("conformance tool error"),
            Behaviour::ToolApproval { calls: 1, .. } => request("conformance approve one"),
            Behaviour::ToolApproval { calls: 2, .. } => request("conformance approve two"),
            Behaviour::Hang => request("conformance hang"),
            Behaviour::Fail {
                category: ErrorCategory::Unavailable,
                ..
            } => request("conformance fails"),
            Behaviour::Fail {
                category: ErrorCategory::Authentication,
                ..
            } => request("conformance auth fails"),
            Behaviour::ApprovalThenHang => request("conformance approve then hang"),
            Behaviour::SequentialApprovals => request("conformance sequence"),
            Behaviour::EchoTraceContext => request("conformance trace")
                .with_options(OpenAiOptions::endpoint("trace").to_value()),
            Behaviour::EmitSecret { secret } => {
                self.add(json!({"match": {"userMessage": "conformance secret"}, "response": {"content": format!("the key is {secret}")}}));
                request("conformance secret")
            }
            Behaviour::Remember { marker } => {
                // The recall of a conversation that holds one earlier turn says the marker.
                self.add(json!({"match": {"userMessage": "conformance recall", "turnIndex": 1}, "response": {"content": marker}}));
                request(&format!("conformance remember {marker}"))
            }
            Behaviour::Recall => request("conformance recall"),
            // The fault-injecting server: a panic mid-response, an event that is not JSON.
            Behaviour::Panic { message } => {
                message.clone_into(
                    &mut self
                        .faults
                        .panic
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner),
                );
                request("conformance panic")
                    .with_options(OpenAiOptions::endpoint("faults").to_value())
            }
            Behaviour::MalformedOrder => request("conformance malformed")
                .with_options(OpenAiOptions::endpoint("faults").to_value()),
            Behaviour::ToolSlow => request("conformance slow tool"),
            Behaviour::ProviderTool => request("conformance provider tool"),
            Behaviour::CredentialTool => request("conformance credential tool"),
            Behaviour::UseSkill { name, marker } => {
                // The model loads the skill only if its instructions list it, and says the
                // marker only if the load's result (the body) holds it.
                self.add(json!({"match": {"userMessage": "conformance skill", "systemMessage": harness_conformance::skills::DESCRIPTION},
                    "response": {"toolCalls": [{"id": "call_skill", "name": tools::provider_name("skills.load"), "arguments": json!({"name": name}).to_string()}]}}));
                self.add(json!({"match": {"userMessage": "conformance skill", "toolResultContains": marker},
                    "response": {"content": format!("The skill says {marker}.")}}));
                request("conformance skill")
            }
            // Not produced: the model loop's `initialize` does no provider work (no process,
            // no session; its HTTP client is made on the first round), so there is no slow
            // start for a cancel to interrupt, and `cancel.during_initialize` stays not
            // exercised rather than faked.
            Behaviour::SlowInitialize => return None,
            _ => return None,
        })
    }

    fn process_isolated(&self) -> bool {
        // This test binary runs one test, which certifies one API after the other: the
        // suite is alone in its process (the mock server was started before its counts).
        true
    }
}

async fn certify_one(api: Api, report_name: &str) {
    let mock = Mock::start(&Value::Array(fixtures()));
    let knobs = OpenAiKnobs {
        mock,
        api,
        trace: echo_trace_server(api).await,
        faults: Faults::start(api).await,
        dynamic: Mutex::new(Vec::new()),
    };
    let report = certify(&knobs).await;
    println!("{report}");
    report.assert_passed();
    report
        .check_published(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
                "../../harness-conformance/reports/{report_name}.txt"
            )),
        )
        .unwrap_or_else(|drift| panic!("{drift}"));
    // The tool fixtures ran the suite's real tools, and the MCP ones passed.
    for id in [
        "tool.success",
        "tool.error",
        "tool.approval.approve",
        "tool.approval.edit",
        "tool.approval.reject",
        "tool.approval.multi",
        "tool.cancellation",
        "mcp.partial_failure",
        "mcp.caller_credential_isolation",
        "session.multi_turn",
        "session.clear",
        "session.expired_state",
        "observability.trace_propagation",
        "runtime.eviction_recovery",
        "skills.missing_blocked",
        "faults.panic_sanitized",
        "faults.malformed_events",
        "session.restart",
        "tool.builtin",
        "thread.durable_commit",
        "runtime.bounded_cleanup",
        "runtime.single_mutation",
    ] {
        assert!(
            matches!(
                report.result(id).map(|r| &r.outcome),
                Some(FixtureOutcome::Passed { .. })
            ),
            "{id}: {:?}",
            report.result(id)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_loop_passes_the_conformance_suite_over_both_apis() {
    certify_one(Api::ChatCompletions, "openai-chat").await;
    certify_one(Api::Responses, "openai-responses").await;
}
