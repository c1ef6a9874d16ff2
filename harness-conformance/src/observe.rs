//! Group 12 (metrics, tracing, trace propagation, redaction), observed in isolation.
//!
//! A metrics recorder and a tracing subscriber are process-wide unless scoped to a thread, and
//! a multi-threaded runtime polls tasks on any worker. So each of these fixtures runs on a
//! thread of its own, with a current-thread Tokio runtime (every task the service and the
//! layers spawn runs there), a thread-local [`DebuggingRecorder`] and a thread-local
//! subscriber: nothing is installed globally, and nothing another test records is seen.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::StreamExt;
use harness_core::action::ActionRequest;
use harness_core::adapter::{
    AgentConfig, BoxFuture, BoxStream, CancelResult, DeploymentContext, EventResult,
    HarnessAdapter, HarnessRuntime, ResumeDecision, RuntimeContext, RuntimeIdentity, RuntimeInit,
    TurnInput,
};
use harness_core::capability::CapabilityReport;
use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::event::{CancelReason, EventPayload};
use harness_core::id::ExecutionId;
use harness_core::manifest::{Describe, HarnessDescriptor};
use harness_core::service::{ExecutionRequest, Outcome};
use harness_core::trace::TraceContext;
use harness_layers::metrics::{MetricsLayer, names};
use harness_layers::redaction::{RedactionLayer, Redactor};
use harness_layers::stack::RuntimeLayers;
use harness_layers::trace::{SPAN_NAME, TraceLayer};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use serde_json::Value;
use tower::{Layer, ServiceExt};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::{LookupSpan, Registry};

use crate::probe::{self, Observed};
use crate::{Behaviour, Bounds, Knobs};

type Verdict = Result<String, String>;

/// The caller's trace context the suite sends (the W3C example).
const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

// ---------------------------------------------------------------------------------------------
// Isolation

/// What a fixture running in isolation can read.
#[derive(Clone)]
pub(crate) struct Observers {
    metrics: Snapshotter,
    seen: Arc<Mutex<Seen>>,
    capture: Capture,
}

impl Observers {
    /// Everything recorded so far (snapshots drain, so they are accumulated).
    fn metrics(&self) -> Seen {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.absorb(&self.metrics);
        seen.clone()
    }

    fn traces(&self) -> Captured {
        self.capture.get()
    }

    /// Every tracing event seen so far, as `field=value` pairs joined by spaces.
    pub(crate) fn event_messages(&self) -> Vec<String> {
        self.traces()
            .events
            .into_iter()
            .map(|e| e.message)
            .collect()
    }
}

/// Runs the future `make` returns on a thread of its own (see the module docs); a panic in
/// it becomes the fixture's failure. The runtime is then shut down, waiting at most `grace`
/// for what is left on it (dropping it would wait for its blocking tasks without bound).
pub(crate) fn isolated<F, Fut>(grace: std::time::Duration, make: F) -> Verdict
where
    F: FnOnce(Observers) -> Fut + Send,
    Fut: Future<Output = Verdict>,
{
    std::thread::scope(|scope| {
        scope
            .spawn(move || {
                let recorder = DebuggingRecorder::new();
                let capture = Capture::default();
                let observers = Observers {
                    metrics: recorder.snapshotter(),
                    seen: Arc::default(),
                    capture: capture.clone(),
                };
                let subscriber = Registry::default().with(capture);
                tracing::subscriber::with_default(subscriber, || {
                    metrics::with_local_recorder(&recorder, || {
                        let runtime = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                            .map_err(|e| format!("no Tokio runtime for the fixture: {e}"))?;
                        let verdict = runtime.block_on(probe::caught(make(observers)));
                        runtime.shutdown_timeout(grace);
                        verdict.map_err(|p| format!("the fixture panicked: {p}"))?
                    })
                })
            })
            .join()
            .unwrap_or_else(|_| Err("the fixture's thread panicked".to_owned()))
    })
}

/// Yields to the fixture's tasks until `done` holds, bounded by `bound`.
pub(crate) async fn until(bound: std::time::Duration, mut done: impl FnMut() -> bool) -> bool {
    let step = std::time::Duration::from_millis(5);
    let mut waited = std::time::Duration::ZERO;
    loop {
        for _ in 0..50 {
            if done() {
                return true;
            }
            tokio::task::yield_now().await;
        }
        if waited >= bound {
            return done();
        }
        tokio::time::sleep(step).await;
        waited += step;
    }
}

// ---------------------------------------------------------------------------------------------
// Metrics

type Labels = Vec<(String, String)>;

/// Everything the recorder saw: counters and gauges add up, histogram samples append.
#[derive(Debug, Default, Clone)]
struct Seen {
    counters: BTreeMap<(String, Labels), u64>,
    gauges: BTreeMap<(String, Labels), f64>,
    histograms: BTreeMap<(String, Labels), usize>,
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    let mut labels: Labels = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    labels.sort();
    labels
}

impl Seen {
    fn absorb(&mut self, snapshotter: &Snapshotter) {
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let name = key.key().name().to_owned();
            let mut labels: Labels = key
                .key()
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            match value {
                DebugValue::Counter(n) => *self.counters.entry((name, labels)).or_default() += n,
                DebugValue::Gauge(g) => *self.gauges.entry((name, labels)).or_default() += g.0,
                DebugValue::Histogram(samples) => {
                    *self.histograms.entry((name, labels)).or_default() += samples.len();
                }
            }
        }
    }

    fn counter(&self, name: &str, pairs: &[(&str, &str)]) -> u64 {
        self.counters
            .get(&(name.to_owned(), labels(pairs)))
            .copied()
            .unwrap_or(0)
    }

    fn total(&self, name: &str) -> u64 {
        self.counters
            .iter()
            .filter(|((n, _), _)| n == name)
            .map(|(_, v)| v)
            .sum()
    }

    fn samples(&self, name: &str, pairs: &[(&str, &str)]) -> usize {
        self.histograms
            .get(&(name.to_owned(), labels(pairs)))
            .copied()
            .unwrap_or(0)
    }

    fn in_flight(&self) -> f64 {
        self.gauges
            .iter()
            .filter(|((n, _), _)| n == names::EXECUTIONS_IN_FLIGHT)
            .map(|(_, v)| v)
            .sum()
    }

    fn label_values(&self) -> impl Iterator<Item = &str> {
        self.counters
            .keys()
            .chain(self.gauges.keys())
            .chain(self.histograms.keys())
            .flat_map(|(_, labels)| labels.iter().map(|(_, v)| v.as_str()))
    }
}

/// The outcome label of an execution, and its failure category.
fn outcome_label(outcome: &Outcome) -> (&'static str, Option<ErrorCategory>) {
    match outcome {
        Outcome::Succeeded(_) => (names::OUTCOME_SUCCEEDED, None),
        Outcome::Failed(e) => (names::OUTCOME_FAILED, Some(e.category())),
        Outcome::Cancelled(_) => (names::OUTCOME_CANCELLED, None),
    }
}

/// `observability.metrics`: through the metrics layer, every execution of the adapter is
/// counted once as started and once as finished with the outcome (and category) its log
/// ended with, has one duration sample under that outcome, its events are counted by kind as
/// the log holds them, the in-flight gauge returns to zero, and no label carries an execution
/// id.
pub(crate) async fn metrics<Kn: Knobs>(knobs: &Kn, obs: Observers) -> Verdict {
    let b = knobs.bounds();
    let adapter = knobs.adapter();
    let id = adapter.descriptor().id().as_str().to_owned();
    let service = MetricsLayer::new()
        .with_adapter(&id)
        .layer(probe::service(adapter, b));
    let mut runs: Vec<(ExecutionId, Observed)> = Vec::new();
    let mut requests = vec![knobs.plain_request()];
    requests.extend(knobs.request_for(&Behaviour::Fail {
        category: ErrorCategory::Unavailable,
        diagnostic: String::new(),
    }));
    for request in requests {
        let handle = service
            .clone()
            .oneshot(request)
            .await
            .map_err(|e| format!("the service refused the request: {}", e.message()))?;
        let observed = probe::finish(&handle, b).await?;
        runs.push((handle.id().clone(), observed));
    }
    if let Some(request) = knobs.request_for(&Behaviour::Hang) {
        let handle = service
            .clone()
            .oneshot(request)
            .await
            .map_err(|e| format!("the service refused the request: {}", e.message()))?;
        tokio::task::yield_now().await;
        handle.cancel(CancelReason::new("conformance"));
        let observed = probe::finish(&handle, b).await?;
        runs.push((handle.id().clone(), observed));
    }
    let n = runs.len() as u64;
    let settled = until(b.grace, || {
        let seen = obs.metrics();
        seen.total(names::EXECUTIONS_FINISHED) >= n && seen.in_flight() <= 0.0
    })
    .await;
    let seen = obs.metrics();
    let started = seen.counter(names::EXECUTIONS_STARTED, &[(names::LABEL_ADAPTER, &id)]);
    if started != n {
        return Err(format!(
            "metrics not recorded: {started} {} for adapter {id} after {n} executions",
            names::EXECUTIONS_STARTED
        ));
    }
    let mut expected: BTreeMap<(&str, Option<ErrorCategory>), u64> = BTreeMap::new();
    let mut kinds: BTreeMap<&str, u64> = BTreeMap::new();
    for (_, run) in &runs {
        *expected.entry(outcome_label(&run.outcome)).or_default() += 1;
        for kind in run.kinds() {
            *kinds.entry(kind).or_default() += 1;
        }
    }
    for ((outcome, category), count) in &expected {
        let mut pairs = vec![
            (names::LABEL_ADAPTER, id.as_str()),
            (names::LABEL_OUTCOME, *outcome),
        ];
        if let Some(category) = category {
            pairs.push((names::LABEL_CATEGORY, category.as_str()));
        }
        let finished = seen.counter(names::EXECUTIONS_FINISHED, &pairs);
        if finished != *count {
            return Err(format!(
                "metrics not recorded: {finished} {} with {pairs:?} for {count} such executions \
                 (settled: {settled})",
                names::EXECUTIONS_FINISHED
            ));
        }
        let samples = seen.samples(names::EXECUTION_DURATION, &pairs[..2]);
        if samples != *count as usize {
            return Err(format!(
                "metrics not recorded: {samples} {} samples with outcome {outcome} for {count} \
                 such executions",
                names::EXECUTION_DURATION
            ));
        }
    }
    if seen.total(names::EXECUTIONS_FINISHED) != n {
        return Err(format!(
            "metrics not recorded: {} executions finished in the metrics, {n} in the logs",
            seen.total(names::EXECUTIONS_FINISHED)
        ));
    }
    for (kind, count) in &kinds {
        let got = seen.counter(
            names::EVENTS,
            &[(names::LABEL_ADAPTER, &id), (names::LABEL_KIND, kind)],
        );
        if got != *count {
            return Err(format!(
                "metrics not recorded: {got} {} of kind {kind}, the logs hold {count}",
                names::EVENTS
            ));
        }
    }
    if seen.in_flight() != 0.0 {
        return Err(format!(
            "metrics not recorded: {} still in flight after every execution ended",
            seen.in_flight()
        ));
    }
    for (execution, _) in &runs {
        if seen.label_values().any(|v| v.contains(execution.as_str())) {
            return Err(format!(
                "a metric label carries the execution id {execution}"
            ));
        }
    }
    let outcomes: Vec<&str> = expected.keys().map(|(o, _)| *o).collect();
    Ok(format!(
        "{n} executions: started, finished by outcome ({}), durations, {} event kinds, \
         in-flight back to 0",
        outcomes.join(", "),
        kinds.len()
    ))
}

// ---------------------------------------------------------------------------------------------
// Tracing capture

/// One `harness.execution` span.
#[derive(Debug, Clone, Default)]
struct SpanRec {
    fields: BTreeMap<String, String>,
    closed: bool,
}

/// One tracing event.
#[derive(Debug, Clone)]
struct EventRec {
    target: String,
    message: String,
    /// The execution span it happened in (an index into `executions`).
    execution: Option<usize>,
}

/// Everything the capture layer saw.
#[derive(Debug, Clone, Default)]
struct Captured {
    executions: Vec<SpanRec>,
    /// Every field of every span: (span name, field, value).
    span_fields: Vec<(String, String, String)>,
    events: Vec<EventRec>,
    /// Live span ids of execution spans and of every span inside one (a segment's, a tool
    /// call's, the adapter's own), to the execution span's index: work in a child span of
    /// the execution's is inside it.
    ids: HashMap<u64, usize>,
}

impl Captured {
    fn execution(&self, id: &ExecutionId) -> Vec<&SpanRec> {
        self.executions
            .iter()
            .filter(|s| s.fields.get("execution_id").map(String::as_str) == Some(id.as_str()))
            .collect()
    }
}

/// The index of an execution span, kept in the span's extensions.
#[derive(Debug, Clone, Copy)]
struct ExecIndex(usize);

/// The index of the execution span a span is inside of, kept in its extensions.
#[derive(Debug, Clone, Copy)]
struct Within(usize);

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Captured>>);

impl fmt::Debug for Capture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Capture")
    }
}

impl Capture {
    fn lock(&self) -> std::sync::MutexGuard<'_, Captured> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get(&self) -> Captured {
        self.lock().clone()
    }
}

struct Fields<'a>(&'a mut Vec<(String, String)>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
}

impl Capture {
    fn fields(&self, name: &str, values: Vec<(String, String)>, index: Option<usize>) {
        let mut captured = self.lock();
        for (field, value) in values {
            if let Some(i) = index
                && let Some(span) = captured.executions.get_mut(i)
            {
                span.fields.insert(field.clone(), value.clone());
            }
            captured.span_fields.push((name.to_owned(), field, value));
        }
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Capture {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut values = Vec::new();
        attrs.record(&mut Fields(&mut values));
        let name = attrs.metadata().name();
        let index = (name == SPAN_NAME).then(|| {
            let mut captured = self.lock();
            captured.executions.push(SpanRec::default());
            captured.executions.len() - 1
        });
        if let Some(span) = ctx.span(id) {
            let within = index.or_else(|| Some(span.parent()?.extensions().get::<Within>()?.0));
            if let Some(index) = index {
                span.extensions_mut().insert(ExecIndex(index));
            }
            if let Some(within) = within {
                span.extensions_mut().insert(Within(within));
                self.lock().ids.insert(id.into_u64(), within);
            }
        }
        self.fields(name, values, index);
    }

    fn on_record(&self, id: &Id, record: &Record<'_>, ctx: Context<'_, S>) {
        let mut values = Vec::new();
        record.record(&mut Fields(&mut values));
        let Some(span) = ctx.span(id) else { return };
        let index = span.extensions().get::<ExecIndex>().map(|i| i.0);
        self.fields(span.name(), values, index);
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut values = Vec::new();
        event.record(&mut Fields(&mut values));
        let execution = ctx.event_scope(event).and_then(|scope| {
            scope
                .into_iter()
                .find_map(|span| span.extensions().get::<ExecIndex>().map(|i| i.0))
        });
        let message = values
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ");
        self.lock().events.push(EventRec {
            target: event.metadata().target().to_owned(),
            message,
            execution,
        });
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let mut captured = self.lock();
        if let Some(ExecIndex(i)) = span.extensions().get::<ExecIndex>().copied()
            && let Some(span) = captured.executions.get_mut(i)
        {
            span.closed = true;
        }
        captured.ids.remove(&id.into_u64());
    }
}

// ---------------------------------------------------------------------------------------------
// A spy between the service and the adapter: where each hook runs, what each turn carries.

#[derive(Debug, Clone)]
pub(crate) struct Call {
    hook: &'static str,
    execution: ExecutionId,
    /// The execution span the hook ran in (an index into the capture's executions).
    span: Option<usize>,
}

/// A turn a runtime was given: its execution and trace context.
type Turn = (ExecutionId, Option<TraceContext>);

/// What a [`Spied`] adapter saw: each runtime hook call, and each turn's trace context.
#[derive(Debug, Clone, Default)]
pub(crate) struct Spy {
    calls: Arc<Mutex<Vec<Call>>>,
    turns: Arc<Mutex<Vec<Turn>>>,
    capture: Capture,
}

impl Spy {
    /// How many times `hook` was called.
    pub(crate) fn count(&self, hook: &str) -> usize {
        self.calls().iter().filter(|c| c.hook == hook).count()
    }

    /// Wraps `adapter` so this spy sees its runtimes.
    pub(crate) fn wrap<A>(&self, adapter: A) -> Spied<A> {
        Spied {
            inner: adapter,
            spy: self.clone(),
        }
    }

    fn new(obs: &Observers) -> Self {
        Self {
            capture: obs.capture.clone(),
            ..Self::default()
        }
    }

    fn record(&self, hook: &'static str, execution: &ExecutionId) {
        // The current span, resolved now: span ids are reused once a span closes.
        let span = tracing::Span::current()
            .id()
            .and_then(|id| self.capture.lock().ids.get(&id.into_u64()).copied());
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Call {
                hook,
                execution: execution.clone(),
                span,
            });
    }

    fn calls(&self) -> Vec<Call> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn turns(&self) -> Vec<Turn> {
        self.turns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// An adapter whose runtimes report to a [`Spy`].
#[derive(Debug)]
pub(crate) struct Spied<A> {
    inner: A,
    spy: Spy,
}

impl<A: HarnessAdapter> Describe for Spied<A> {
    fn descriptor(&self) -> &HarnessDescriptor {
        self.inner.descriptor()
    }
}

impl<A: HarnessAdapter> HarnessAdapter for Spied<A> {
    fn evaluate<'a>(
        &'a self,
        config: &'a AgentConfig,
        deployment: &'a DeploymentContext,
    ) -> BoxFuture<'a, Result<CapabilityReport, HarnessError>> {
        self.inner.evaluate(config, deployment)
    }

    fn create_runtime(
        &self,
        context: RuntimeContext,
    ) -> BoxFuture<'_, Result<Box<dyn HarnessRuntime>, HarnessError>> {
        let execution = context.execution_id.clone();
        self.spy.record("create_runtime", &execution);
        let spy = self.spy.clone();
        let created = self.inner.create_runtime(context);
        Box::pin(async move {
            let inner = created.await?;
            Ok(Box::new(SpiedRuntime {
                inner,
                spy,
                execution,
            }) as Box<dyn HarnessRuntime>)
        })
    }
}

struct SpiedRuntime {
    inner: Box<dyn HarnessRuntime>,
    spy: Spy,
    execution: ExecutionId,
}

impl fmt::Debug for SpiedRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpiedRuntime")
            .field("execution", &self.execution)
            .finish_non_exhaustive()
    }
}

impl SpiedRuntime {
    fn watched<'a>(&'a self, stream: BoxStream<'a, EventResult>) -> BoxStream<'a, EventResult> {
        let spy = self.spy.clone();
        let execution = self.execution.clone();
        Box::pin(stream.inspect(move |_| spy.record("stream item", &execution)))
    }
}

impl HarnessRuntime for SpiedRuntime {
    fn identity(&self) -> RuntimeIdentity {
        self.inner.identity()
    }

    fn initialize(&self) -> BoxFuture<'_, Result<RuntimeInit, HarnessError>> {
        self.spy.record("initialize", &self.execution);
        self.inner.initialize()
    }

    fn stream(&self, turn: TurnInput) -> BoxStream<'_, EventResult> {
        self.spy.record("stream", &self.execution);
        self.spy
            .turns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((self.execution.clone(), turn.trace_context.clone()));
        self.watched(self.inner.stream(turn))
    }

    fn resume(&self, decision: ResumeDecision) -> BoxStream<'_, EventResult> {
        self.spy.record("resume", &self.execution);
        self.watched(self.inner.resume(decision))
    }

    fn pending_action(&self) -> BoxFuture<'_, Option<ActionRequest>> {
        self.inner.pending_action()
    }

    fn cancel(&self, reason: CancelReason) -> BoxFuture<'_, CancelResult> {
        self.spy.record("cancel", &self.execution);
        self.inner.cancel(reason)
    }

    fn restart(&self) -> BoxFuture<'_, Result<(), HarnessError>> {
        self.spy.record("restart", &self.execution);
        self.inner.restart()
    }

    fn cleanup(&self) -> BoxFuture<'_, ()> {
        self.spy.record("cleanup", &self.execution);
        self.inner.cleanup()
    }

    fn restore(
        &self,
        restored: harness_core::adapter::Restored,
    ) -> BoxFuture<'_, Result<(), HarnessError>> {
        self.inner.restore(restored)
    }

    fn restorable(&self) -> bool {
        self.inner.restorable()
    }

    fn lost(&self) -> BoxFuture<'_, ()> {
        self.inner.lost()
    }
}

/// Runs `request` through the trace layer over the spied adapter, to its end, and waits
/// (bounded) for its execution span to close.
async fn traced<A: HarnessAdapter>(
    adapter: A,
    spy: &Spy,
    request: ExecutionRequest,
    redactor: Option<Arc<Redactor>>,
    obs: &Observers,
    b: Bounds,
) -> Result<(ExecutionId, Observed), String> {
    let id = adapter.descriptor().id().clone();
    let spied = Spied {
        inner: adapter,
        spy: spy.clone(),
    };
    let mut layers = RuntimeLayers::new();
    if let Some(redactor) = redactor {
        layers = layers.redaction(RedactionLayer::new(redactor).adapter(&id));
    }
    let service = probe::builder(spied, b).layer(layers).build();
    let handle = TraceLayer::new()
        .layer(service)
        .oneshot(request)
        .await
        .map_err(|e| format!("the service refused the request: {}", e.message()))?;
    let observed = probe::finish(&handle, b).await?;
    let execution = handle.id().clone();
    drop(handle);
    until(b.grace, || {
        obs.traces().execution(&execution).iter().all(|s| s.closed)
    })
    .await;
    Ok((execution, observed))
}

/// `observability.tracing`: each execution has exactly one `harness.execution` span naming
/// the adapter, the execution and (once ended) its outcome; every hook of the runtime and
/// every poll of its streams runs inside that span; and every tracing event emitted on the
/// execution's runtime while it ran belongs to an execution span (work the adapter moves
/// to an uninstrumented task breaks the story).
pub(crate) async fn tracing_spans<Kn: Knobs>(knobs: &Kn, obs: Observers) -> Verdict {
    let b = knobs.bounds();
    let adapter_id = knobs.adapter().descriptor().id().as_str().to_owned();
    let mut requests = vec![knobs.plain_request()];
    requests.extend(knobs.request_for(&Behaviour::Fail {
        category: ErrorCategory::Unavailable,
        diagnostic: String::new(),
    }));
    let spy = Spy::new(&obs);
    let mut runs = Vec::new();
    for request in requests {
        runs.push(traced(knobs.adapter(), &spy, request, None, &obs, b).await?);
    }
    let captured = obs.traces();
    for (execution, run) in &runs {
        let spans = captured.execution(execution);
        let [span] = spans.as_slice() else {
            return Err(format!(
                "span missing: {} {SPAN_NAME} span(s) name execution {execution} (exactly one \
                 expected)",
                spans.len()
            ));
        };
        if span.fields.get("adapter") != Some(&adapter_id) {
            return Err(format!(
                "the {SPAN_NAME} span names adapter {:?}, not {adapter_id}",
                span.fields.get("adapter")
            ));
        }
        let (outcome, _) = outcome_label(&run.outcome);
        if span.fields.get("outcome").map(String::as_str) != Some(outcome) {
            return Err(format!(
                "the {SPAN_NAME} span of a run that ended {outcome} records outcome {:?}",
                span.fields.get("outcome")
            ));
        }
        if !span.closed {
            return Err(format!(
                "the {SPAN_NAME} span of execution {execution} is still open {:?} after its end",
                b.grace
            ));
        }
    }
    let calls = spy.calls();
    if calls.is_empty() {
        return Err("the runtime was never called".to_owned());
    }
    for call in &calls {
        let inside = call.span.is_some_and(|i| {
            captured.executions[i]
                .fields
                .get("execution_id")
                .map(String::as_str)
                == Some(call.execution.as_str())
        });
        if !inside {
            return Err(format!(
                "work outside the execution span: the runtime's {} for execution {} ran \
                 outside its {SPAN_NAME} span",
                call.hook, call.execution
            ));
        }
    }
    if let Some(stray) = captured.events.iter().find(|e| e.execution.is_none()) {
        return Err(format!(
            "work outside the execution span: a tracing event of {} ({}) was emitted outside \
             any {SPAN_NAME} span",
            stray.target, stray.message
        ));
    }
    Ok(format!(
        "{} executions, one {SPAN_NAME} span each with adapter, id and outcome; every runtime \
         call and tracing event inside it",
        runs.len(),
    ))
}

/// `observability.trace_propagation`: the caller's trace context reaches the runtime as the
/// child of the execution's span (same trace id and `tracestate`, the span's id as parent),
/// and the runtime propagates that context, not the caller's nor a new one.
pub(crate) async fn trace_propagation<Kn: Knobs>(knobs: &Kn, obs: Observers) -> Verdict {
    let b = knobs.bounds();
    let request = knobs
        .request_for(&Behaviour::EchoTraceContext)
        .ok_or_else(|| "no knob".to_owned())?;
    let caller: TraceContext = CALLER
        .parse()
        .map_err(|e| format!("the suite's trace context does not parse: {e:?}"))?;
    let request = request.with_trace_context(caller.clone().with_tracestate("conformance=1"));
    let spy = Spy::new(&obs);
    let (execution, run) = traced(knobs.adapter(), &spy, request, None, &obs, b).await?;
    run.check_log()?;
    let captured = obs.traces();
    let spans = captured.execution(&execution);
    let Some(span_id) = spans.first().and_then(|s| s.fields.get("span_id")) else {
        return Err(format!("the {SPAN_NAME} span records no span_id"));
    };
    let turns = spy.turns();
    let Some((_, received)) = turns.iter().find(|(e, _)| e == &execution) else {
        return Err("the runtime was never given a turn".to_owned());
    };
    let Some(received) = received else {
        return Err(
            "trace context not propagated: the runtime's turn carries no trace context".to_owned(),
        );
    };
    if received.trace_id() != caller.trace_id()
        || received.parent_id() != span_id
        || received.tracestate() != Some("conformance=1")
    {
        return Err(format!(
            "trace context not propagated: the runtime received {received}, expected the \
             caller's trace {} with the execution span {span_id} as parent",
            caller.trace_id()
        ));
    }
    let echoed: String = run
        .events
        .iter()
        .filter_map(|e| match e.payload() {
            EventPayload::MessageDelta(d) => Some(d.text.as_str()),
            _ => None,
        })
        .collect();
    if !echoed.contains(received.traceparent()) {
        return Err(format!(
            "trace context not propagated: the runtime propagates {echoed:?}, not the \
             traceparent it was given ({})",
            received.traceparent()
        ));
    }
    Ok(format!(
        "the caller's trace {} reached the runtime as the child of the execution span, and \
         the runtime propagated it",
        caller.trace_id()
    ))
}

/// `observability.redaction`: with the redaction layer on, a secret the caller plants in the
/// request's client context and one the adapter produces reach no event, no public error and no span field;
/// and the adapter's output was redacted (proof it carried the secret).
pub(crate) async fn redaction<Kn: Knobs>(knobs: &Kn, secret: &str, obs: Observers) -> Verdict {
    let b = knobs.bounds();
    let emit = knobs
        .request_for(&Behaviour::EmitSecret {
            secret: secret.to_owned(),
        })
        .ok_or_else(|| "no knob".to_owned())?;
    let redactor = Redactor::builder()
        .secret(secret)
        .build()
        .map_err(|e| format!("the redactor does not build: {e}"))?;
    let redactor = Arc::new(redactor);
    let mut requests = vec![emit];
    requests.extend(knobs.request_for(&Behaviour::Fail {
        category: ErrorCategory::Unavailable,
        diagnostic: secret.to_owned(),
    }));
    let spy = Spy::new(&obs);
    let mut redacted = 0;
    for mut request in requests {
        request
            .client_context
            .insert("note".to_owned(), Value::String(format!("key {secret}")));
        let (_, run) = traced(
            knobs.adapter(),
            &spy,
            request,
            Some(Arc::clone(&redactor)),
            &obs,
            b,
        )
        .await?;
        if let Some(at) = run.leaks(secret) {
            return Err(format!(
                "secret not redacted: the secret reached {at} with the redaction layer on"
            ));
        }
        redacted += run
            .events
            .iter()
            .filter(|e| {
                serde_json::to_string(&***e)
                    .unwrap_or_default()
                    .contains("[REDACTED")
            })
            .count();
    }
    if let Some((span, field, _)) = obs
        .traces()
        .span_fields
        .iter()
        .find(|(_, _, v)| v.contains(secret))
    {
        return Err(format!(
            "secret not redacted: the secret reached field {field} of span {span}"
        ));
    }
    if redacted == 0 {
        return Err(
            "the adapter's knob did not produce the secret: no event was redacted".to_owned(),
        );
    }
    Ok(format!(
        "the secret (request, client context, adapter output) reached no event, error or span \
         field; {redacted} event(s) redacted"
    ))
}
