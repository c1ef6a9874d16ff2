//! The tracing layer, observed through a small capturing `tracing` subscriber, with an adapter
//! that records the trace context it receives.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use harness_core::adapter::{
    AdapterEvent, BoxStream, EventResult, RunContext, Simple, SimpleAdapter,
};
use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::event::{CancelReason, Content, RunSucceeded, TextDelta};
use harness_core::id::ConversationId;
use harness_core::manifest::{ContractVersion, Describe, ExecutionMode, HarnessDescriptor};
use harness_core::service::{AdapterService, ExecutionHandle, ExecutionRequest, Outcome};
use harness_core::trace::TraceContext;
use harness_layers::trace::{ResponseFuture, SPAN_NAME, Trace, TraceLayer};
use rstest::rstest;
use tower::{Service, ServiceBuilder, ServiceExt};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::{Context as LayerContext, Layer, SubscriberExt};
use tracing_subscriber::registry::{LookupSpan, Registry};

// ---------------------------------------------------------------------------------------------
// A capturing layer over tracing-subscriber's `Registry` (which tracks the current span): spans
// with their fields and open/closed state, events with the span they happened in.

#[derive(Debug, Clone, Default)]
struct SpanRecord {
    name: &'static str,
    fields: BTreeMap<String, String>,
    closed: bool,
}

#[derive(Debug, Clone)]
struct EventRecord {
    message: String,
    /// The index of the span the event happened in.
    span: Option<usize>,
    /// The indexes of that span and its ancestors, innermost first.
    scope: Vec<usize>,
}

#[derive(Debug, Default)]
struct Captured {
    /// Every span ever opened, in order (the registry reuses the ids of closed spans).
    spans: Vec<SpanRecord>,
    /// Open spans: registry id to index in `spans`.
    open: BTreeMap<u64, usize>,
    events: Vec<EventRecord>,
}

#[derive(Clone, Default)]
struct Capture {
    state: Arc<Mutex<Captured>>,
}

impl Capture {
    fn with<T>(&self, f: impl FnOnce(&mut Captured) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The execution spans, in creation order, with their indexes.
    fn executions(&self) -> Vec<(usize, SpanRecord)> {
        self.with(|c| {
            c.spans
                .iter()
                .enumerate()
                .filter(|(_, s)| s.name == SPAN_NAME)
                .map(|(i, s)| (i, s.clone()))
                .collect()
        })
    }

    fn only_execution(&self) -> (usize, SpanRecord) {
        let mut spans = self.executions();
        assert_eq!(spans.len(), 1, "{spans:#?}");
        spans.remove(0)
    }

    /// Lets spawned tasks run until every execution span is closed (bounded).
    async fn until_closed(&self) {
        for _ in 0..10_000 {
            let spans = self.executions();
            if !spans.is_empty() && spans.iter().all(|(_, s)| s.closed) {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("the execution span never closed: {:#?}", self.executions());
    }
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S> Layer<S> for Capture
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        // `sometimes`, not `always`: on threads without this subscriber (tests running in
        // parallel) spans must stay disabled.
        Interest::sometimes()
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: LayerContext<'_, S>) {
        let mut record = SpanRecord {
            name: attrs.metadata().name(),
            ..SpanRecord::default()
        };
        attrs.record(&mut Fields(&mut record.fields));
        self.with(|c| {
            c.open.insert(id.into_u64(), c.spans.len());
            c.spans.push(record);
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: LayerContext<'_, S>) {
        self.with(|c| {
            if let Some(&index) = c.open.get(&id.into_u64()) {
                values.record(&mut Fields(&mut c.spans[index].fields));
            }
        });
    }

    fn on_event(&self, event: &Event<'_>, ctx: LayerContext<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let span = ctx.event_span(event).map(|s| s.id().into_u64());
        let scope: Vec<u64> = ctx
            .event_scope(event)
            .map(|scope| scope.map(|s| s.id().into_u64()).collect())
            .unwrap_or_default();
        self.with(|c| {
            let span = span.and_then(|id| c.open.get(&id).copied());
            let scope = scope
                .iter()
                .filter_map(|id| c.open.get(id).copied())
                .collect();
            c.events.push(EventRecord {
                message: fields.remove("message").unwrap_or_default(),
                span,
                scope,
            });
        });
    }

    fn on_close(&self, id: Id, _: LayerContext<'_, S>) {
        self.with(|c| {
            if let Some(index) = c.open.remove(&id.into_u64()) {
                c.spans[index].closed = true;
            }
        });
    }
}

/// Runs `test` on a current-thread runtime with the capturing subscriber as this thread's
/// default.
fn traced<F, Fut>(test: F) -> Capture
where
    F: FnOnce(Capture) -> Fut,
    Fut: Future<Output = ()>,
{
    let capture = Capture::default();
    let _default = tracing::subscriber::set_default(Registry::default().with(capture.clone()));
    runtime().block_on(test(capture.clone()));
    capture
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

// ---------------------------------------------------------------------------------------------
// An adapter that records the trace context of every run it is given.

const PROBE: &str = "probe";

struct Probe {
    descriptor: HarnessDescriptor,
    contexts: Arc<Mutex<Vec<Option<TraceContext>>>>,
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
        tracing::info!("adapter stream opened");
        match run.turn.message.as_str() {
            "fail" => Box::pin(futures_util::stream::iter([Err(HarnessError::new(
                ErrorCategory::Unavailable,
                "the provider is down",
            ))])),
            "hang" => Box::pin(futures_util::stream::pending()),
            text => Box::pin(futures_util::stream::iter([
                Ok(AdapterEvent::Content(Content::MessageDelta(
                    TextDelta::new(text),
                ))),
                Ok(AdapterEvent::Completed(RunSucceeded::default())),
            ])),
        }
    }
}

type Contexts = Arc<Mutex<Vec<Option<TraceContext>>>>;

fn probe() -> (Trace<AdapterService<Simple<Probe>>>, Contexts) {
    let descriptor = HarnessDescriptor::builder(PROBE.parse().unwrap(), "0.1.0")
        .contract_version(ContractVersion::V1)
        .execution_mode(ExecutionMode::in_process())
        .build()
        .unwrap();
    let contexts = Contexts::default();
    let adapter = Probe {
        descriptor,
        contexts: Arc::clone(&contexts),
    };
    let service = ServiceBuilder::new()
        .layer(TraceLayer::new())
        .service(AdapterService::new(Simple::new(adapter)));
    (service, contexts)
}

async fn start<S>(service: &mut S, request: ExecutionRequest) -> ExecutionHandle
where
    S: Service<ExecutionRequest, Response = ExecutionHandle, Error = HarnessError>,
{
    service.ready().await.unwrap().call(request).await.unwrap()
}

const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn is_span_id(s: &str) -> bool {
    s.len() == 16
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && s != "0000000000000000"
}

// ---------------------------------------------------------------------------------------------

#[test]
fn the_span_continues_the_callers_trace_and_the_adapter_sees_it_as_parent() {
    let (mut service, contexts) = probe();
    let handle: Arc<Mutex<Option<ExecutionHandle>>> = Arc::default();
    let handle_in = Arc::clone(&handle);
    let capture = traced(|capture| async move {
        let caller: TraceContext = CALLER.parse().unwrap();
        let request = ExecutionRequest::new("hello")
            .with_trace_context(caller.with_tracestate("vendor=abc"))
            .with_conversation("conv_42".parse::<ConversationId>().unwrap());
        let execution = start(&mut service, request).await;
        assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
        capture.until_closed().await;
        *handle_in.lock().unwrap() = Some(execution);
    });
    let execution = handle.lock().unwrap().take().unwrap();
    let (_, span) = capture.only_execution();
    let f = |name: &str| span.fields.get(name).cloned().unwrap_or_default();
    assert_eq!(f("trace_id"), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(f("parent_span_id"), "00f067aa0ba902b7");
    let span_id = f("span_id");
    assert!(
        is_span_id(&span_id) && span_id != "00f067aa0ba902b7",
        "{span_id}"
    );
    assert_eq!(f("adapter"), PROBE);
    assert_eq!(f("execution_id"), execution.id().as_str());
    assert_eq!(f("conversation_id"), "conv_42");
    assert_eq!(f("outcome"), "succeeded");
    assert!(!span.fields.contains_key("error.category"));

    // The adapter got the child context: same trace, our span as parent, same flags and state.
    let contexts = contexts.lock().unwrap();
    let [Some(received)] = contexts.as_slice() else {
        panic!("{contexts:?}")
    };
    assert_eq!(
        received.traceparent(),
        format!("00-4bf92f3577b34da6a3ce929d0e0e4736-{span_id}-01")
    );
    assert_eq!(received.tracestate(), Some("vendor=abc"));
}

#[test]
fn a_request_without_context_starts_a_trace_the_adapter_continues() {
    let (mut service, contexts) = probe();
    let capture = traced(|capture| async move {
        let first = start(&mut service, ExecutionRequest::new("one")).await;
        let second = start(&mut service, ExecutionRequest::new("two")).await;
        first.outcome().await;
        second.outcome().await;
        capture.until_closed().await;
    });
    let spans = capture.executions();
    assert_eq!(spans.len(), 2);
    let contexts = contexts.lock().unwrap();
    assert_eq!(contexts.len(), 2);
    for ((_, span), received) in spans.iter().zip(contexts.iter()) {
        let received = received.as_ref().expect("a context");
        assert_eq!(span.fields["trace_id"], received.trace_id());
        assert_eq!(span.fields["span_id"], received.parent_id());
        assert!(!span.fields.contains_key("parent_span_id"), "{span:?}");
        assert!(received.sampled());
    }
    assert_ne!(spans[0].1.fields["trace_id"], spans[1].1.fields["trace_id"]);
}

#[rstest]
#[case::succeeded("hello", "succeeded", None)]
#[case::failed("fail", "failed", Some(("unavailable", "UNAVAILABLE")))]
#[case::cancelled("hang", "cancelled", None)]
fn the_span_lasts_until_the_execution_ends_and_records_how(
    #[case] message: &'static str,
    #[case] outcome: &str,
    #[case] error: Option<(&str, &str)>,
) {
    let (mut service, _) = probe();
    let capture = traced(|capture| async move {
        let execution = start(&mut service, ExecutionRequest::new(message)).await;
        if message == "hang" {
            for _ in 0..100 {
                tokio::task::yield_now().await;
            }
            let (_, span) = capture.only_execution();
            assert!(!span.closed, "the span closed before the execution ended");
            assert!(!span.fields.contains_key("outcome"));
            execution.cancel(CancelReason::new("stop"));
        }
        execution.outcome().await;
        capture.until_closed().await;
    });
    let (_, span) = capture.only_execution();
    assert!(span.closed);
    assert_eq!(span.fields["outcome"], outcome);
    assert_eq!(
        span.fields.get("error.category").map(String::as_str),
        error.map(|e| e.0)
    );
    assert_eq!(
        span.fields.get("error.code").map(String::as_str),
        error.map(|e| e.1)
    );
}

#[test]
fn a_refused_call_is_recorded_on_its_span_and_runs_inside_it() {
    let received: Arc<Mutex<Option<TraceContext>>> = Arc::default();
    let received_in = Arc::clone(&received);
    let capture = traced(|_| async move {
        let inner = tower::service_fn(move |request: ExecutionRequest| {
            *received_in.lock().unwrap() = request.trace_context;
            tracing::info!("inner called");
            async {
                tokio::task::yield_now().await;
                tracing::info!("inner polled");
                Err::<ExecutionHandle, _>(HarnessError::new(ErrorCategory::Capacity, "full"))
            }
        });
        let service = ServiceBuilder::new()
            .layer(TraceLayer::new())
            .service(inner);
        let request = ExecutionRequest::new("x").with_trace_context(CALLER.parse().unwrap());
        let err = service.oneshot(request).await.unwrap_err();
        assert_eq!(err.category(), ErrorCategory::Capacity);
    });
    let (id, span) = capture.only_execution();
    assert!(span.closed);
    assert_eq!(span.fields["outcome"], "rejected");
    assert_eq!(span.fields["error.category"], "capacity");
    assert_eq!(span.fields["error.code"], "CAPACITY");
    assert!(!span.fields.contains_key("execution_id"));
    let received = received.lock().unwrap().clone().expect("a context");
    assert_eq!(received.parent_id(), span.fields["span_id"]);
    // The inner service's call and its future both ran inside the span.
    let events = capture.with(|c| c.events.clone());
    for message in ["inner called", "inner polled"] {
        let event = events.iter().find(|e| e.message == message).expect(message);
        assert_eq!(event.span, Some(id), "{message}: {events:?}");
    }
}

#[test]
fn span_fields_carry_ids_only_never_request_content() {
    const SECRET: &str = "sk-live-0123456789abcdef";
    let (mut service, _) = probe();
    let capture = traced(|capture| async move {
        let mut request = ExecutionRequest::new(format!("use {SECRET}"))
            .with_options(serde_json::json!({ "apiKey": SECRET }))
            .with_trace_context(CALLER.parse().unwrap());
        request
            .client_context
            .insert("token".to_owned(), SECRET.into());
        let execution = start(&mut service, request).await;
        execution.outcome().await;
        capture.until_closed().await;
    });
    let (_, span) = capture.only_execution();
    for (name, value) in &span.fields {
        assert!(!value.contains("sk-live"), "{name} = {value}");
    }
    let names: Vec<&str> = span.fields.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "adapter",
            "execution_id",
            "outcome",
            "parent_span_id",
            "span_id",
            "trace_id"
        ]
    );
}

#[test]
fn without_a_subscriber_the_context_is_still_continued() {
    let (mut service, contexts) = probe();
    runtime().block_on(async {
        let caller = ExecutionRequest::new("a").with_trace_context(CALLER.parse().unwrap());
        start(&mut service, caller).await.outcome().await;
        start(&mut service, ExecutionRequest::new("b"))
            .await
            .outcome()
            .await;
    });
    let contexts = contexts.lock().unwrap();
    let [Some(continued), Some(root)] = contexts.as_slice() else {
        panic!("{contexts:?}")
    };
    assert_eq!(continued.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert!(is_span_id(continued.parent_id()) && continued.parent_id() != "00f067aa0ba902b7");
    assert!(continued.sampled());
    // A new trace nobody records is not marked sampled.
    assert!(is_span_id(root.parent_id()));
    assert!(!root.sampled());
}

/// The core service spawns each driver instrumented with the current span, which this layer
/// makes the execution's: the adapter's work logs inside it (in the turn's `harness.segment`
/// span, a child of the execution's).
#[test]
fn the_adapters_work_runs_inside_the_execution_span() {
    let (mut service, _) = probe();
    let capture = traced(|capture| async move {
        start(&mut service, ExecutionRequest::new("hello"))
            .await
            .outcome()
            .await;
        capture.until_closed().await;
    });
    let (id, _) = capture.only_execution();
    let events = capture.with(|c| c.events.clone());
    let opened = events
        .iter()
        .find(|e| e.message == "adapter stream opened")
        .expect("the adapter logged");
    let segment = opened.span.expect("in a span");
    assert_eq!(
        capture.with(|c| c.spans[segment].name),
        "harness.segment",
        "{events:?}"
    );
    assert_eq!(opened.scope, [segment, id], "{events:?}");
}

#[test]
fn services_and_futures_are_send_and_sync() {
    fn assert_send<T: Send>() {}
    fn assert_sync<T: Sync>() {}
    type Traced = Trace<AdapterService<Simple<Probe>>>;
    assert_send::<Traced>();
    assert_sync::<Traced>();
    assert_send::<TraceLayer>();
    assert_sync::<TraceLayer>();
    assert_send::<
        ResponseFuture<<AdapterService<Simple<Probe>> as Service<ExecutionRequest>>::Future>,
    >();
    type Ready = std::future::Ready<Result<ExecutionHandle, HarnessError>>;
    assert_send::<ResponseFuture<Ready>>();
    assert_sync::<ResponseFuture<Ready>>();
}
