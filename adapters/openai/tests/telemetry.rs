//! The adapter's own telemetry, through the execution's `TelemetrySink`: a `model.request`
//! span per model round, a child of the execution's span (the trace layer's) carrying the
//! execution and adapter ids, and the model request histogram labelled with the adapter (and
//! not with the execution). One test in this binary: it installs the global subscriber and
//! recorder.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use common::{Mock, name, tools};
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
use harness_core::trace::TraceContext;
use harness_layers::trace::TraceLayer;
use harness_openai::{Endpoint, OpenAiAdapter};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use serde_json::json;
use tower::{ServiceBuilder, ServiceExt};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A span as recorded: its name, its fields, and its parent's id.
#[derive(Debug, Clone, Default)]
struct Recorded {
    name: &'static str,
    fields: BTreeMap<String, String>,
    parent: Option<u64>,
}

#[derive(Clone, Default)]
struct Spans(Arc<Mutex<BTreeMap<u64, Recorded>>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut span = Recorded {
            name: attrs.metadata().name(),
            parent: ctx
                .span(id)
                .and_then(|s| s.parent())
                .map(|p| p.id().into_u64()),
            ..Recorded::default()
        };
        attrs.record(&mut Fields(&mut span.fields));
        self.0.lock().unwrap().insert(id.into_u64(), span);
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some(span) = self.0.lock().unwrap().get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut span.fields));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_requests_are_spans_of_the_execution_and_measured_under_the_adapter() {
    let spans = Spans::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(spans.clone()))
        .unwrap();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::set_global_recorder(recorder).unwrap();

    let mock = Mock::start(&json!([
        {"match": {"userMessage": "weather", "hasToolResult": true}, "response": {"content": "It is sunny in Paris."}},
        {"match": {"userMessage": "weather"}, "response": {"toolCalls": [{"id": "call_w1", "name": name("weather.now"), "arguments": {"city": "Paris"}}]}},
    ]));
    let endpoint = Endpoint::new(mock.base(), "gpt-4.1").with_api_key("sk-test-operator-key");
    let service = ServiceBuilder::new().layer(TraceLayer::new()).service(
        AdapterService::builder(OpenAiAdapter::new(endpoint).unwrap())
            .tools(tools(&Arc::new(AtomicUsize::new(0))))
            .build(),
    );
    let caller: TraceContext = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        .parse()
        .unwrap();
    let execution = service
        .oneshot(ExecutionRequest::new("what is the weather in Paris?").with_trace_context(caller))
        .await
        .unwrap();
    let id = execution.id().clone();
    assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));

    let spans = spans.0.lock().unwrap().clone();
    let (execution_span, _) = spans
        .iter()
        .find(|(_, s)| s.name == "harness.execution")
        .expect("the trace layer's span");
    let requests: Vec<&Recorded> = spans
        .values()
        .filter(|s| s.name == "harness.adapter")
        .collect();
    assert_eq!(requests.len(), 2, "one span per model round: {spans:#?}");
    for span in requests {
        assert_eq!(span.fields["otel.name"], "model.request");
        assert_eq!(span.fields["adapter"], "openai");
        assert_eq!(span.fields["execution_id"], id.as_str());
        assert_eq!(
            span.parent,
            Some(*execution_span),
            "a child of the execution's span"
        );
    }

    let snapshot = snapshotter.snapshot().into_vec();
    let (key, _, _, value) = snapshot
        .iter()
        .find(|(key, ..)| key.key().name() == "harness_adapter_openai_model_request_seconds")
        .unwrap_or_else(|| panic!("the model request histogram: {snapshot:?}"));
    let labels: Vec<(String, String)> = key
        .key()
        .labels()
        .map(|l| (l.key().to_owned(), l.value().to_owned()))
        .collect();
    assert_eq!(
        labels,
        [("adapter".to_owned(), "openai".to_owned())],
        "the adapter's label, never the execution id"
    );
    let DebugValue::Histogram(values) = value else {
        panic!("a histogram: {value:?}")
    };
    assert_eq!(values.len(), 2, "one duration per model round");
    assert!(values.iter().all(|v| v.into_inner() > 0.0));
}
