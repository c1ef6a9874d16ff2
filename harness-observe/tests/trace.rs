//! Trace context through the whole default stack, seen in the JSON logs; and no secret of a
//! redaction canary in any span field, log line or metric label.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};

use harness_core::adapter::{
    AdapterEvent, BoxStream, EventResult, RunContext, Simple, SimpleAdapter,
};
use harness_core::event::{Content, RunSucceeded, TextDelta};
use harness_core::id::Cursor;
use harness_core::manifest::{ContractVersion, Describe, ExecutionMode, HarnessDescriptor};
use harness_core::service::{ExecutionRequest, Outcome};
use harness_core::trace::TraceContext;
use harness_layers::redaction::{RedactionLayer, Redactor};
use harness_layers::stack::HarnessStack;
use harness_observe::logging::json_layer;
use harness_observe::prometheus::PrometheusExporter;
use harness_scripted::{Script, ScriptedAdapter};
use serde_json::{Value, json};
use tower::ServiceExt;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::{LookupSpan, Registry};

const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const CANARY: &str = "canary-7f3a9c1e5b-do-not-leak";

// ---------------------------------------------------------------------------------------------
// Where logs go: a shared buffer of JSON lines; and a raw capture of every span and event field.

#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    fn json(&self) -> Vec<Value> {
        let bytes = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        String::from_utf8(bytes)
            .expect("utf-8 logs")
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }

    /// The close lines of execution spans.
    fn closed_executions(&self) -> Vec<Value> {
        self.json()
            .into_iter()
            .filter(|l| {
                l["fields"]["message"] == "close" && l["span"]["name"] == "harness.execution"
            })
            .collect()
    }
}

/// Every span field and event field ever recorded, raw (before any redaction of the output).
#[derive(Clone, Default)]
struct Raw(Arc<Mutex<Vec<(String, String)>>>);

struct Collect<'a>(&'a mut Vec<(String, String)>);

impl Visit for Collect<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
}

#[derive(Clone, Default)]
struct RawCapture {
    spans: Raw,
    events: Raw,
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for RawCapture {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }
    fn on_new_span(&self, attrs: &Attributes<'_>, _: &Id, _: Context<'_, S>) {
        attrs.record(&mut Collect(&mut self.spans.0.lock().unwrap()));
    }
    fn on_record(&self, _: &Id, values: &Record<'_>, _: Context<'_, S>) {
        values.record(&mut Collect(&mut self.spans.0.lock().unwrap()));
    }
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        event.record(&mut Collect(&mut self.events.0.lock().unwrap()));
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Lets the tasks that follow executions run until `done` (bounded).
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..100_000 {
        if done() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("{what}: never happened");
}

// ---------------------------------------------------------------------------------------------
// An adapter that records the trace context it is given and logs from inside the execution.

type Contexts = Arc<Mutex<Vec<Option<TraceContext>>>>;

struct Probe {
    descriptor: HarnessDescriptor,
    contexts: Contexts,
}

impl Describe for Probe {
    fn descriptor(&self) -> &HarnessDescriptor {
        &self.descriptor
    }
}

impl SimpleAdapter for Probe {
    fn stream(&self, run: RunContext) -> BoxStream<'static, EventResult> {
        self.contexts
            .lock()
            .unwrap()
            .push(run.turn.trace_context.clone());
        // Careless adapter code: logs the user's message as a field.
        tracing::info!(prompt = %run.turn.message, "adapter stream opened");
        Box::pin(futures_util::stream::iter([
            Ok(AdapterEvent::Content(Content::MessageDelta(
                TextDelta::new("hi"),
            ))),
            Ok(AdapterEvent::Completed(RunSucceeded::default())),
        ]))
    }
}

fn probe() -> (Simple<Probe>, Contexts) {
    let descriptor = HarnessDescriptor::builder("probe".parse().unwrap(), "0.1.0")
        .contract_version(ContractVersion::V1)
        .execution_mode(ExecutionMode::in_process())
        .build()
        .unwrap();
    let contexts = Arc::default();
    let adapter = Probe {
        descriptor,
        contexts: Arc::clone(&contexts),
    };
    (Simple::new(adapter), contexts)
}

// ---------------------------------------------------------------------------------------------

#[test]
fn trace_context_on_a_request_reaches_the_adapter_and_the_executions_span() {
    let lines = Lines::default();
    let writer = lines.clone();
    let redactor = Arc::new(Redactor::builder().build().unwrap());
    let subscriber = Registry::default().with(json_layer(move || writer.clone(), redactor));
    let _default = tracing::subscriber::set_default(subscriber);
    let (adapter, contexts) = probe();
    let service = HarnessStack::defaults_for(&adapter)
        .unwrap()
        .service(adapter);

    runtime().block_on(async {
        let caller: TraceContext = CALLER.parse().unwrap();
        let request =
            ExecutionRequest::new("hello").with_trace_context(caller.with_tracestate("vendor=abc"));
        let execution = service.oneshot(request).await.unwrap();
        assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
        until("the execution span closes", || {
            !lines.closed_executions().is_empty()
        })
        .await;

        let closed = lines.closed_executions();
        let [span] = closed.as_slice() else {
            panic!("{closed:#?}")
        };
        let span = &span["span"];
        assert_eq!(
            span["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736",
            "{span}"
        );
        assert_eq!(span["parent_span_id"], "00f067aa0ba902b7", "{span}");
        assert_eq!(span["adapter"], "probe");
        assert_eq!(span["execution_id"], execution.id().as_str());
        assert_eq!(span["outcome"], "succeeded");
        let span_id = span["span_id"].as_str().expect("a span id").to_owned();
        assert_ne!(span_id, "00f067aa0ba902b7");

        // Out: the adapter got the child context, our span as its parent, the state kept.
        let contexts = contexts.lock().unwrap();
        let [Some(received)] = contexts.as_slice() else {
            panic!("{contexts:?}")
        };
        assert_eq!(
            received.traceparent(),
            format!("00-4bf92f3577b34da6a3ce929d0e0e4736-{span_id}-01")
        );
        assert_eq!(received.tracestate(), Some("vendor=abc"));

        // The adapter's own log line is inside the execution's span: the whole story.
        let logs = lines.json();
        let opened = logs
            .iter()
            .find(|l| l["fields"]["message"] == "adapter stream opened")
            .expect("the adapter's log line");
        // Its own span is the turn's segment, whose parent is the execution's span.
        assert_eq!(opened["span"]["name"], "harness.segment", "{opened}");
        assert_eq!(opened["span"]["kind"], "turn", "{opened}");
        let outer = &opened["spans"][0];
        assert_eq!(outer["name"], "harness.execution", "{opened}");
        assert_eq!(outer["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(outer["span_id"], span_id.as_str());
    });
}

#[test]
fn no_secret_of_the_canary_reaches_a_span_field_a_log_line_or_a_metric_label() {
    let endpoint = PrometheusExporter::new()
        .without_listener()
        .install()
        .expect("install the exporter");
    let lines = Lines::default();
    let writer = lines.clone();
    let raw = RawCapture::default();
    let redactor = Arc::new(Redactor::builder().secret(CANARY).build().unwrap());
    let subscriber = Registry::default()
        .with(raw.clone())
        .with(json_layer(move || writer.clone(), Arc::clone(&redactor)));
    let _default = tracing::subscriber::set_default(subscriber);

    let scripted = ScriptedAdapter::new(Script::quickstart());
    let id = harness_core::manifest::Describe::descriptor(&scripted)
        .id()
        .clone();
    let scripted_service = HarnessStack::defaults_for(&scripted)
        .unwrap()
        .redaction(RedactionLayer::new(Arc::clone(&redactor)).adapter(&id))
        .service(scripted);
    let (probe, _) = probe();
    let id = harness_core::manifest::Describe::descriptor(&probe)
        .id()
        .clone();
    let probe_service = HarnessStack::defaults_for(&probe)
        .unwrap()
        .redaction(RedactionLayer::new(Arc::clone(&redactor)).adapter(&id))
        .service(probe);

    runtime().block_on(async {
        // The canary in the prompt, in output text, in a summary, in an error's message and
        // diagnostic, in tool arguments and in a native payload.
        let scripts = [
            json!([{"type": "text", "text": format!("the key is {CANARY}")}, {"type": "complete", "summary": CANARY}]),
            json!([{"type": "error", "category": "authentication", "message": format!("refused {CANARY}"), "diagnostic": CANARY}]),
            json!([{"type": "toolCall", "callId": "call_1", "tool": "shell", "arguments": {"cmd": CANARY}, "output": CANARY}, {"type": "complete"}]),
            json!([{"type": "native", "name": "note", "payload": {"secret": CANARY}}, {"type": "complete"}]),
        ];
        let mut executions = Vec::new();
        for steps in scripts {
            let request = ExecutionRequest::new(format!("use {CANARY}"))
                .with_options(json!({"script": {"steps": steps}}));
            let execution = scripted_service.clone().oneshot(request).await.unwrap();
            execution.outcome().await;
            executions.push(execution);
        }
        let execution = probe_service
            .clone()
            .oneshot(ExecutionRequest::new(format!("use {CANARY}")))
            .await
            .unwrap();
        execution.outcome().await;
        executions.push(execution);
        until("every execution span closes", || lines.closed_executions().len() == 5).await;
        for execution in &executions {
            let stored = serde_json::to_string(&execution.log().snapshot(Cursor::START)).unwrap();
            assert!(!stored.contains(CANARY), "{stored}");
        }
    });

    let span_fields = raw.spans.0.lock().unwrap().clone();
    assert!(span_fields.iter().any(|(name, _)| name == "trace_id"));
    let leaked: Vec<_> = span_fields
        .iter()
        .filter(|(_, v)| v.contains(CANARY))
        .collect();
    assert!(
        leaked.is_empty(),
        "span fields carry the canary: {leaked:?}"
    );

    // The adapter logged the prompt raw; the JSON output redacted it.
    let event_fields: BTreeMap<String, String> =
        raw.events.0.lock().unwrap().iter().cloned().collect();
    assert!(
        event_fields
            .get("prompt")
            .is_some_and(|p| p.contains(CANARY))
    );
    let text = lines.text();
    assert!(!text.contains(CANARY), "the logs carry the canary:\n{text}");
    assert!(text.contains("use [REDACTED:secret]"), "{text}");

    let exposition = endpoint.render();
    assert!(!exposition.contains(CANARY), "{exposition}");
    assert!(
        exposition.contains("harness_redactions_total{adapter=\"scripted\",rule=\"secret\"}"),
        "{exposition}"
    );
}

/// The JSON log writer applies the sensitive-field rule to the fields of a line, not only
/// the secret and pattern rules to its text.
#[test]
fn sensitive_fields_of_a_log_line_are_redacted() {
    let lines = Lines::default();
    let writer = lines.clone();
    let redactor = Arc::new(Redactor::builder().build().unwrap());
    let subscriber = Registry::default().with(json_layer(move || writer.clone(), redactor));
    tracing::subscriber::with_default(subscriber, || {
        tracing::info!(
            password = "hunter2-plain",
            api_key = "plain-key-value",
            user = "ada",
            "logging in"
        );
    });
    let text = lines.text();
    assert!(!text.contains("hunter2-plain"), "{text}");
    assert!(!text.contains("plain-key-value"), "{text}");
    let line = &lines.json()[0];
    assert_eq!(line["fields"]["password"], "[REDACTED:field]");
    assert_eq!(line["fields"]["api_key"], "[REDACTED:field]");
    assert_eq!(line["fields"]["user"], "ada");
    assert_eq!(line["fields"]["message"], "logging in");
}
