//! The Sandbox Worker Protocol v1 against hostile workers, through the service: each
//! speaks the protocol by hand from the worker's side and breaks it one way. Each is ended
//! (`WORKER_PROTOCOL`, or `WORKER_LOST` for one that dies or falls silent) with exactly one
//! terminal event for its execution, and the same service then runs the next execution.
//! The facades answer a well-behaved worker within its binding and grants.
//! (The scripted adapter through the protocol passes the conformance suite: see
//! `adapters/scripted/tests/worker.rs`.)

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use harness_core::adapter::{BoxFuture, HarnessAdapter, HarnessRuntime, RuntimeContext};
use harness_core::capability::{Capability, CapabilityKey, PORTABLE_TOOLS};
use harness_core::error::HarnessError;
use harness_core::event::EventPayload;
use harness_core::id::{ConversationId, Cursor};
use harness_core::manifest::{ContractVersion, Describe, ExecutionMode, HarnessDescriptor};
use harness_core::service::{
    AdapterService, ExecutionHandle as Execution, ExecutionRequest, Outcome,
};
use harness_core::tool::{FnTool, ToolPolicy, ToolSet};
use harness_sandbox::worker::{WorkerLink, WorkerOptions, WorkerRuntime};
use harness_scripted::ScriptedAdapter;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, DuplexStream, ReadHalf, WriteHalf};
use tower::ServiceExt as _;

type Fake = Arc<dyn Fn(FakeWorker) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// The scripted adapter's capabilities, and portable tools; its runtimes are fake workers
/// behind the protocol.
#[derive(Clone)]
struct InWorker {
    descriptor: HarnessDescriptor,
    fake: Fake,
    options: WorkerOptions,
}

fn descriptor() -> HarnessDescriptor {
    let capabilities = ScriptedAdapter::quickstart()
        .descriptor()
        .capabilities()
        .clone()
        .with(
            CapabilityKey::ToolBuiltin,
            Capability::native().with_constraint(PORTABLE_TOOLS, true),
        );
    HarnessDescriptor::builder("worker_test".parse().unwrap(), "0.1.0")
        .contract_version(ContractVersion::V1)
        .execution_mode(ExecutionMode::in_process())
        .capabilities(capabilities)
        .build()
        .unwrap()
}

impl std::fmt::Debug for InWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InWorker")
    }
}

impl InWorker {
    fn fake<F, Fut>(heartbeat: Duration, f: F) -> Self
    where
        F: Fn(FakeWorker) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Self {
            descriptor: descriptor(),
            fake: Arc::new(move |w| Box::pin(f(w))),
            options: WorkerOptions {
                heartbeat,
                ..WorkerOptions::default()
            },
        }
    }
}

impl Describe for InWorker {
    fn descriptor(&self) -> &HarnessDescriptor {
        &self.descriptor
    }
}

fn link(control: DuplexStream, kill: impl Fn() + Send + Sync + 'static) -> WorkerLink {
    let (reader, writer) = tokio::io::split(control);
    WorkerLink::new(reader, writer, kill)
}

impl HarnessAdapter for InWorker {
    fn create_runtime(
        &self,
        context: RuntimeContext,
    ) -> BoxFuture<'_, Result<Box<dyn HarnessRuntime>, HarnessError>> {
        Box::pin(async move {
            let (control, worker) = tokio::io::duplex(64 << 10);
            let (reader, writer) = tokio::io::split(worker);
            let task = tokio::spawn((self.fake)(FakeWorker {
                reader,
                writer,
                turn: String::new(),
            }));
            let abort = task.abort_handle();
            let runtime = WorkerRuntime::start(
                link(control, move || abort.abort()),
                &context,
                Value::Null,
                self.options.clone(),
            )
            .await?;
            Ok(Box::new(runtime) as Box<dyn HarnessRuntime>)
        })
    }
}

/// The worker's end of a link, spoken by hand: frames are a 4-byte big-endian length and
/// a JSON body.
struct FakeWorker {
    reader: ReadHalf<DuplexStream>,
    writer: WriteHalf<DuplexStream>,
    /// The message of the turn asked for, once the handshake saw it.
    turn: String,
}

impl FakeWorker {
    async fn recv(&mut self) -> Option<Value> {
        let mut len = [0u8; 4];
        self.reader.read_exact(&mut len).await.ok()?;
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        self.reader.read_exact(&mut body).await.ok()?;
        Some(serde_json::from_slice(&body).expect("the control plane sends JSON"))
    }

    async fn raw(&mut self, bytes: &[u8]) {
        let _ = self.writer.write_all(bytes).await;
    }

    async fn send(&mut self, message: Value) {
        let body = serde_json::to_vec(&message).unwrap();
        let mut frame = u32::try_from(body.len()).unwrap().to_be_bytes().to_vec();
        frame.extend_from_slice(&body);
        self.raw(&frame).await;
    }

    /// Answers `start` and `initialize`; returns the `start` context and the id of the first
    /// segment asked for.
    async fn handshake(&mut self) -> (Value, u64) {
        let start = self.recv().await.expect("start");
        assert_eq!(start["type"], "start");
        assert_eq!(start["protocol"], 1);
        self.send(json!({"type": "ready", "protocol": 1, "result": {"ok": null}}))
            .await;
        loop {
            let m = self.recv().await.expect("a request");
            match m["type"].as_str() {
                Some("initialize") => {
                    self.send(
                        json!({"type": "initialized", "id": m["id"], "result": {"ok": null}}),
                    )
                    .await;
                }
                Some("stream") => {
                    self.turn = m["turn"]["message"].as_str().unwrap_or_default().to_owned();
                    return (start["context"].clone(), m["id"].as_u64().unwrap());
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    /// Keeps the link open, answering nothing but `cleanup`, until the control plane
    /// closes it.
    async fn linger(mut self) {
        while let Some(m) = self.recv().await {
            if m["type"] == "cleanup" {
                self.send(json!({"type": "cleanedUp", "id": m["id"]})).await;
                return;
            }
        }
    }
}

async fn run_on(
    service: &AdapterService<InWorker>,
    request: ExecutionRequest,
) -> (Execution, Outcome, Vec<String>) {
    let execution = service.clone().oneshot(request).await.expect("started");
    let outcome = tokio::time::timeout(Duration::from_secs(30), execution.outcome())
        .await
        .expect("the execution ends");
    let kinds: Vec<String> = execution
        .events(Cursor::START)
        .map(|e| e.kind().as_str().to_owned())
        .collect()
        .await;
    (execution, outcome, kinds)
}

/// The test tools' arguments.
#[derive(Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct Args {
    #[serde(default)]
    x: Option<i64>,
}

fn tools() -> ToolSet {
    let echo = FnTool::new(
        "test.echo".parse().unwrap(),
        "Echoes its arguments.",
        |v: Args, _| async move { Ok::<_, String>(v) },
    )
    .unwrap();
    let slow = FnTool::new(
        "test.slow".parse().unwrap(),
        "Takes its time.",
        |v: Args, _| async move {
            tokio::time::sleep(Duration::from_secs(20)).await;
            Ok::<_, String>(v)
        },
    )
    .unwrap();
    let gated = FnTool::new(
        "test.gated".parse().unwrap(),
        "Needs the caller's approval.",
        |v: Args, _| async move { Ok::<_, String>(v) },
    )
    .unwrap();
    ToolSet::new()
        .tool(echo)
        .unwrap()
        .tool(slow)
        .unwrap()
        .tool_with_policy(gated, ToolPolicy::new().needs_approval())
        .unwrap()
}

fn request(message: &str) -> ExecutionRequest {
    ExecutionRequest::new(message)
        .with_conversation(ConversationId::generate())
        .with_tools([
            "test.echo".parse().unwrap(),
            "test.slow".parse().unwrap(),
            "test.gated".parse().unwrap(),
        ])
}

fn terminals(kinds: &[String]) -> usize {
    kinds
        .iter()
        .filter(|k| matches!(k.as_str(), "run.succeeded" | "run.failed" | "run.cancelled"))
        .count()
}

fn failed_with(outcome: &Outcome, code: &str) -> HarnessError {
    match outcome {
        Outcome::Failed(e) if e.code().as_str() == code => e.clone(),
        other => panic!("expected a failure {code}, got {other:?}"),
    }
}

fn completed(id: u64) -> [Value; 2] {
    [
        json!({"type": "event", "id": id, "event": {"kind": "completed", "result": {}}}),
        json!({"type": "segmentEnd", "id": id}),
    ]
}

/// Runs a hostile worker's act (after the handshake, on its first segment), then the same
/// service's next execution through a worker that behaves; returns the hostile run's
/// outcome.
async fn hostile<F, Fut>(act: F) -> Outcome
where
    F: Fn(FakeWorker, u64, Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let act = Arc::new(act);
    let adapter = InWorker::fake(Duration::from_secs(5), move |mut w| {
        let act = Arc::clone(&act);
        async move {
            let (context, id) = w.handshake().await;
            if w.turn == "behave" {
                for m in completed(id) {
                    w.send(m).await;
                }
                w.linger().await;
            } else {
                act(w, id, context).await;
            }
        }
    });
    let service = AdapterService::builder(adapter).tools(tools()).build();
    let (_, outcome, kinds) = run_on(&service, request("attack")).await;
    assert_eq!(terminals(&kinds), 1, "{kinds:?}");
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("run.failed"),
        "{kinds:?}"
    );
    // The server is unharmed: the same service runs the next execution.
    let (_, next, _) = run_on(&service, request("behave")).await;
    assert!(matches!(next, Outcome::Succeeded(_)), "{next:?}");
    outcome
}

/// Sends `messages`, then keeps the link open.
async fn sends(mut w: FakeWorker, messages: Vec<Value>) {
    for m in messages {
        w.send(m).await;
    }
    w.linger().await;
}

#[tokio::test]
async fn a_frame_that_is_not_json_ends_the_worker() {
    let outcome = hostile(|mut w, _, _| async move {
        w.raw(&[0, 0, 0, 5, b'{', b'n', b'o', b'p', b'e']).await;
        w.linger().await;
    })
    .await;
    let e = failed_with(&outcome, "WORKER_PROTOCOL");
    assert!(e.diagnostic().unwrap().contains("bad message"), "{e:?}");
}

#[tokio::test]
async fn a_frame_longer_than_the_protocol_allows_is_refused_before_its_body() {
    // 4 GiB announced, nothing sent: refused from the length alone.
    let outcome = hostile(|mut w, _, _| async move {
        w.raw(&[0xff, 0xff, 0xff, 0xff]).await;
        w.linger().await;
    })
    .await;
    let e = failed_with(&outcome, "WORKER_PROTOCOL");
    assert!(
        e.diagnostic().unwrap().contains("4294967295 bytes"),
        "{e:?}"
    );
}

#[tokio::test]
async fn an_unknown_message_and_an_unknown_field_end_the_worker() {
    let outcome = hostile(|w, _, _| sends(w, vec![json!({"type": "shell", "cmd": "id"})])).await;
    failed_with(&outcome, "WORKER_PROTOCOL");
    // Another binding's state: the request has no field to name one, so naming one is
    // refused by its shape.
    let outcome = hostile(|w, _, context| {
        let mut other = context["binding"].clone();
        other["bindingId"] = json!("bnd_someone_else");
        sends(
            w,
            vec![json!({"type": "stateGet", "id": 1, "key": "k", "binding": other})],
        )
    })
    .await;
    let e = failed_with(&outcome, "WORKER_PROTOCOL");
    assert!(e.diagnostic().unwrap().contains("binding"), "{e:?}");
}

#[tokio::test]
async fn events_out_of_order_end_the_worker() {
    // An event for a segment never opened.
    let outcome = hostile(|w, id, _| {
        sends(w, vec![json!({"type": "event", "id": id + 100, "event": {"kind": "completed", "result": {}}})])
    })
    .await;
    let e = failed_with(&outcome, "WORKER_PROTOCOL");
    assert!(e.diagnostic().unwrap().contains("not open"), "{e:?}");
    // A reply to a request never made.
    let outcome = hostile(|w, _, _| {
        sends(
            w,
            vec![json!({"type": "cancelled", "id": 9999, "requested": true})],
        )
    })
    .await;
    failed_with(&outcome, "WORKER_PROTOCOL");
    // A second `ready`.
    let outcome = hostile(|w, _, _| {
        sends(
            w,
            vec![json!({"type": "ready", "protocol": 1, "result": {"ok": null}})],
        )
    })
    .await;
    failed_with(&outcome, "WORKER_PROTOCOL");
}

#[tokio::test]
async fn a_worker_cannot_make_lifecycle_events_or_another_executions_artifacts() {
    let outcome = hostile(|w, id, _| {
        sends(
            w,
            vec![
                json!({"type": "event", "id": id, "event": {"kind": "content",
            "payload": {"kind": "run.succeeded", "data": {}}}}),
            ],
        )
    })
    .await;
    let e = failed_with(&outcome, "WORKER_PROTOCOL");
    assert!(e.diagnostic().unwrap().contains("run.succeeded"), "{e:?}");
    let outcome = hostile(|w, id, _| {
        let other = harness_core::id::ExecutionId::generate();
        sends(
            w,
            vec![
                json!({"type": "event", "id": id, "event": {"kind": "artifact",
            "descriptor": {"id": "art_1", "executionId": other, "mediaType": "text/plain",
                           "createdAt": "2026-12-07T00:00:00Z"}}}),
            ],
        )
    })
    .await;
    let e = failed_with(&outcome, "WORKER_PROTOCOL");
    assert!(e.diagnostic().unwrap().contains("not its own"), "{e:?}");
}

#[tokio::test]
async fn a_worker_calls_only_the_tools_it_was_granted_and_gated_ones_only_as_approved() {
    // A tool the service has but the execution did not select.
    let adapter_tool = |tool: &'static str| {
        move |w: FakeWorker, _: u64, _: Value| {
            sends(
                w,
                vec![json!({"type": "toolCall", "id": 1, "tool": tool,
                "callId": "call_1", "arguments": {}})],
            )
        }
    };
    let outcome = hostile(adapter_tool("host.shell")).await;
    let e = failed_with(&outcome, "WORKER_PROTOCOL");
    assert!(e.diagnostic().unwrap().contains("not granted"), "{e:?}");
    // A granted tool that needs the caller's approval, called with none given.
    let outcome = hostile(adapter_tool("test.gated")).await;
    let e = failed_with(&outcome, "WORKER_PROTOCOL");
    assert!(e.diagnostic().unwrap().contains("approval"), "{e:?}");
}

#[tokio::test]
async fn a_worker_with_too_many_requests_open_is_ended() {
    let outcome = hostile(|w, _, _| {
        let calls = (0..=harness_sandbox::worker::MAX_WORKER_REQUESTS as u64)
            .map(|n| {
                json!({"type": "toolCall", "id": n, "tool": "test.slow",
                            "callId": format!("call_{n}"), "arguments": {}})
            })
            .collect();
        sends(w, calls)
    })
    .await;
    let e = failed_with(&outcome, "WORKER_PROTOCOL");
    assert!(e.diagnostic().unwrap().contains("requests open"), "{e:?}");
}

#[tokio::test]
async fn a_worker_that_dies_mid_run_ends_its_execution_once() {
    let outcome = hostile(|mut w, id, _| async move {
        w.send(
            json!({"type": "event", "id": id, "event": {"kind": "content",
            "payload": {"kind": "message.delta", "data": {"text": "half"}}}}),
        )
        .await;
        // Gone: the link drops with the task.
    })
    .await;
    failed_with(&outcome, "WORKER_LOST");
}

#[tokio::test]
async fn a_worker_that_falls_silent_loses_its_lease() {
    let adapter = InWorker::fake(Duration::from_millis(100), |mut w| async move {
        let _ = w.handshake().await;
        // No heartbeat, no event: silent, but the link stays open.
        w.linger().await;
    });
    let service = AdapterService::builder(adapter).tools(tools()).build();
    let (_, outcome, kinds) = run_on(&service, request("attack")).await;
    assert_eq!(terminals(&kinds), 1, "{kinds:?}");
    let e = failed_with(&outcome, "WORKER_LOST");
    assert!(e.diagnostic().unwrap().contains("lease"), "{e:?}");
}

/// A worker that behaves: writes, reads and calls through its facades, and reports what
/// it got as its message.
async fn facade_user(mut w: FakeWorker) {
    let (_, id) = w.handshake().await;
    let mut report = Vec::new();
    let first = w.turn == "write";
    let requests = if first {
        vec![
            json!({"type": "statePut", "id": 1, "key": "notes", "value": "c2VjcmV0", "expected": null}),
            json!({"type": "stateGet", "id": 2, "key": "notes"}),
            json!({"type": "toolCall", "id": 3, "tool": "test.echo", "callId": "call_1", "arguments": {"x": 1}}),
        ]
    } else {
        vec![json!({"type": "stateGet", "id": 1, "key": "notes"})]
    };
    for r in requests {
        w.send(r).await;
        loop {
            let m = w.recv().await.expect("an answer");
            if m["type"] == "stateReply" || m["type"] == "toolReply" {
                report.push(m);
                break;
            }
        }
    }
    let text = serde_json::to_string(&report).unwrap();
    w.send(
        json!({"type": "event", "id": id, "event": {"kind": "content",
        "payload": {"kind": "message.delta", "data": {"text": text}}}}),
    )
    .await;
    for m in completed(id) {
        w.send(m).await;
    }
    w.linger().await;
}

async fn message_of(execution: &Execution) -> Value {
    let text: String = execution
        .events(Cursor::START)
        .filter_map(|e| async move {
            match e.payload() {
                EventPayload::MessageDelta(d) => Some(d.text.clone()),
                _ => None,
            }
        })
        .collect()
        .await;
    serde_json::from_str(&text).expect("the worker's report")
}

#[tokio::test]
async fn the_facades_serve_the_workers_own_binding_and_its_granted_tools() {
    let adapter = InWorker::fake(Duration::from_secs(5), facade_user);
    let service = AdapterService::builder(adapter).tools(tools()).build();
    let (execution, outcome, _) = run_on(&service, request("write")).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    let report = message_of(&execution).await;
    assert_eq!(report[0]["result"]["ok"]["kind"], "written", "{report}");
    assert_eq!(report[1]["result"]["ok"]["value"], "c2VjcmV0", "{report}");
    assert_eq!(report[2]["outcome"]["status"], "success", "{report}");
    // Another conversation's worker asks for the same key: its own binding has none.
    let (execution, outcome, _) = run_on(&service, request("read")).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    let report = message_of(&execution).await;
    assert_eq!(
        report[0]["result"]["ok"],
        json!({"kind": "entry", "value": null, "version": null}),
        "{report}"
    );
}

#[tokio::test]
async fn a_worker_reads_only_the_input_files_it_was_given() {
    let outcome = hostile(|w, _, _| {
        sends(
            w,
            vec![json!({"type": "fileRead", "id": 1, "index": 0, "offset": 0, "len": 1})],
        )
    })
    .await;
    let e = failed_with(&outcome, "WORKER_PROTOCOL");
    assert!(e.diagnostic().unwrap().contains("not given"), "{e:?}");
}
