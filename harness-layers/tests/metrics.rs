//! The metrics layer, read through `metrics_util`'s `DebuggingRecorder`.
//!
//! Each test installs its own recorder for its thread (`metrics::with_local_recorder`) and runs
//! a current-thread Tokio runtime inside it, so the watcher tasks the layer spawns run on that
//! thread and record into that recorder; tests run in parallel without seeing each other.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use futures_util::StreamExt;
use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::event::{CancelReason, EventKind};
use harness_core::id::Cursor;
use harness_core::service::{AdapterService, ExecutionHandle, ExecutionRequest, Outcome};
use harness_layers::metrics::names::{self, MetricType};
use harness_layers::metrics::{Metrics, MetricsLayer, ResponseFuture};
use harness_scripted::{ADAPTER_ID, Script, ScriptedAdapter, ScriptedOptions};
use metrics::Unit;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use rstest::rstest;
use tower::{Service, ServiceBuilder, ServiceExt};

type Labels = Vec<(String, String)>;

/// Everything recorded so far. The recorder's snapshots drain counters, gauges and histograms,
/// so snapshots are accumulated: counters and gauges (only ever incremented and decremented
/// here) add up, histogram samples append.
#[derive(Debug, Default)]
struct Seen {
    counters: BTreeMap<(String, Labels), u64>,
    gauges: BTreeMap<(String, Labels), f64>,
    histograms: BTreeMap<(String, Labels), Vec<f64>>,
    meta: BTreeMap<String, (Option<Unit>, Option<String>)>,
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
        for (key, unit, description, value) in snapshotter.snapshot().into_vec() {
            let name = key.key().name().to_owned();
            let mut labels: Labels = key
                .key()
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            self.meta
                .insert(name.clone(), (unit, description.map(|d| d.to_string())));
            match value {
                DebugValue::Counter(n) => *self.counters.entry((name, labels)).or_default() += n,
                DebugValue::Gauge(g) => *self.gauges.entry((name, labels)).or_default() += g.0,
                DebugValue::Histogram(samples) => self
                    .histograms
                    .entry((name, labels))
                    .or_default()
                    .extend(samples.into_iter().map(|s| s.0)),
            }
        }
    }

    fn counter(&self, name: &str, pairs: &[(&str, &str)]) -> u64 {
        self.counters
            .get(&(name.to_owned(), labels(pairs)))
            .copied()
            .unwrap_or(0)
    }

    fn counter_total(&self, name: &str) -> u64 {
        self.counters
            .iter()
            .filter(|((n, _), _)| n == name)
            .map(|(_, v)| v)
            .sum()
    }

    fn gauge(&self, name: &str, pairs: &[(&str, &str)]) -> f64 {
        self.gauges
            .get(&(name.to_owned(), labels(pairs)))
            .copied()
            .unwrap_or(0.0)
    }

    fn in_flight_total(&self) -> f64 {
        self.gauges
            .iter()
            .filter(|((n, _), _)| n == names::EXECUTIONS_IN_FLIGHT)
            .map(|(_, v)| v)
            .sum()
    }

    fn samples(&self, name: &str, pairs: &[(&str, &str)]) -> &[f64] {
        self.histograms
            .get(&(name.to_owned(), labels(pairs)))
            .map_or(&[], Vec::as_slice)
    }

    fn all_label_values(&self) -> impl Iterator<Item = &str> {
        self.counters
            .keys()
            .chain(self.gauges.keys())
            .chain(self.histograms.keys())
            .flat_map(|(_, labels)| labels.iter().map(|(_, v)| v.as_str()))
    }
}

/// The test's view of its recorder.
#[derive(Clone)]
struct Probe {
    snapshotter: Snapshotter,
    seen: Arc<Mutex<Seen>>,
}

impl Probe {
    fn read<T>(&self, f: impl FnOnce(&Seen) -> T) -> T {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.absorb(&self.snapshotter);
        f(&seen)
    }

    /// Lets spawned tasks run until `done` holds (bounded: fails rather than hangs).
    async fn settle(&self, done: impl Fn(&Seen) -> bool) {
        for _ in 0..10_000 {
            if self.read(&done) {
                return;
            }
            tokio::task::yield_now().await;
        }
        self.read(|seen| panic!("the metrics never settled: {seen:#?}"));
    }
}

/// Runs `test` on a current-thread runtime with a fresh recorder; returns what was recorded.
fn run<F, Fut>(test: F) -> Seen
where
    F: FnOnce(Probe) -> Fut,
    Fut: Future<Output = ()>,
{
    let recorder = DebuggingRecorder::new();
    let probe = Probe {
        snapshotter: recorder.snapshotter(),
        seen: Arc::default(),
    };
    let seen = Arc::clone(&probe.seen);
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(test(probe));
    });
    let mut seen = Arc::try_unwrap(seen)
        .map(|m| m.into_inner().unwrap_or_else(PoisonError::into_inner))
        .unwrap_or_default();
    seen.absorb(&snapshotter);
    seen
}

fn scripted() -> Metrics<AdapterService<ScriptedAdapter>> {
    ServiceBuilder::new()
        .layer(MetricsLayer::new())
        .service(AdapterService::new(ScriptedAdapter::new(
            Script::quickstart(),
        )))
}

fn request(script: Script) -> ExecutionRequest {
    ExecutionRequest::new("go").with_options(ScriptedOptions::with_script(script).to_value())
}

async fn start<S>(service: &mut S, script: Script) -> ExecutionHandle
where
    S: Service<ExecutionRequest, Response = ExecutionHandle, Error = HarnessError>,
{
    service
        .ready()
        .await
        .expect("ready")
        .call(request(script))
        .await
        .expect("started")
}

/// Waits until the execution has appended an event of `kind`.
async fn wait_for(execution: &ExecutionHandle, kind: EventKind) {
    let mut events = execution.events(Cursor::START);
    while let Some(event) = events.next().await {
        if event.kind() == kind {
            return;
        }
    }
    panic!("the execution ended without {kind}");
}

fn kinds_of(execution: &ExecutionHandle) -> Vec<EventKind> {
    execution
        .log()
        .snapshot(Cursor::START)
        .iter()
        .map(|e| e.kind())
        .collect()
}

const S: &str = ADAPTER_ID;

#[rstest]
#[case::successes_only(3, &[], 0)]
#[case::failures_only(0, &[ErrorCategory::Throttled, ErrorCategory::Throttled, ErrorCategory::Internal], 0)]
#[case::cancellations_only(0, &[], 2)]
#[case::a_mix(2, &[ErrorCategory::Unavailable, ErrorCategory::Timeout, ErrorCategory::Throttled], 3)]
fn metrics_match_what_ran(
    #[case] successes: usize,
    #[case] failures: &'static [ErrorCategory],
    #[case] cancellations: usize,
) {
    let total = successes + failures.len() + cancellations;
    let kinds: Arc<Mutex<Vec<EventKind>>> = Arc::default();
    let ids: Arc<Mutex<Vec<String>>> = Arc::default();
    let (kinds_in, ids_in) = (Arc::clone(&kinds), Arc::clone(&ids));
    let seen = run(move |probe| async move {
        let mut service = scripted();
        let mut executions = Vec::new();
        for _ in 0..successes {
            let script = Script::builder()
                .text("hello ")
                .text("world")
                .usage(3, 5)
                .complete("done")
                .build();
            executions.push(start(&mut service, script).await);
        }
        for category in failures {
            // No output before the failure: no time to first event either.
            let script = Script::builder().error(*category, "it broke").build();
            executions.push(start(&mut service, script).await);
        }
        for _ in 0..cancellations {
            let execution = start(
                &mut service,
                Script::builder().text("working").hang().build(),
            )
            .await;
            wait_for(&execution, EventKind::MessageDelta).await;
            execution.cancel(CancelReason::new("user stop"));
            executions.push(execution);
        }
        for execution in &executions {
            execution.outcome().await;
        }
        probe
            .settle(|seen| {
                seen.counter_total(names::EXECUTIONS_FINISHED) == total as u64
                    && seen.in_flight_total() == 0.0
            })
            .await;
        for execution in &executions {
            kinds_in.lock().unwrap().extend(kinds_of(execution));
            ids_in
                .lock()
                .unwrap()
                .push(execution.id().as_str().to_owned());
        }
    });

    let adapter = [(names::LABEL_ADAPTER, S)];
    assert_eq!(
        seen.counter(names::EXECUTIONS_STARTED, &adapter),
        total as u64
    );
    let finished = |outcome: &str| {
        seen.counter(
            names::EXECUTIONS_FINISHED,
            &[(names::LABEL_ADAPTER, S), (names::LABEL_OUTCOME, outcome)],
        )
    };
    assert_eq!(finished(names::OUTCOME_SUCCEEDED), successes as u64);
    assert_eq!(finished(names::OUTCOME_CANCELLED), cancellations as u64);
    for category in ErrorCategory::ALL {
        let expected = failures.iter().filter(|c| **c == category).count() as u64;
        let by_category = [
            (names::LABEL_ADAPTER, S),
            (names::LABEL_OUTCOME, names::OUTCOME_FAILED),
            (names::LABEL_CATEGORY, category.as_str()),
        ];
        assert_eq!(
            seen.counter(names::EXECUTIONS_FINISHED, &by_category),
            expected,
            "{category}"
        );
        let errors = [
            (names::LABEL_ADAPTER, S),
            (names::LABEL_CATEGORY, category.as_str()),
            (names::LABEL_STAGE, names::STAGE_EXECUTION),
        ];
        assert_eq!(seen.counter(names::ERRORS, &errors), expected, "{category}");
    }
    assert_eq!(seen.counter_total(names::EXECUTIONS_FINISHED), total as u64);
    assert_eq!(seen.counter_total(names::ERRORS), failures.len() as u64);

    // One duration per execution, under its outcome; a time to first event for each one that
    // produced output (the failures here produce none).
    let durations = |outcome: &str| {
        seen.samples(
            names::EXECUTION_DURATION,
            &[(names::LABEL_ADAPTER, S), (names::LABEL_OUTCOME, outcome)],
        )
        .len()
    };
    assert_eq!(durations(names::OUTCOME_SUCCEEDED), successes);
    assert_eq!(durations(names::OUTCOME_FAILED), failures.len());
    assert_eq!(durations(names::OUTCOME_CANCELLED), cancellations);
    let first = seen.samples(names::TIME_TO_FIRST_EVENT, &adapter);
    assert_eq!(first.len(), successes + cancellations);
    assert!(first.iter().all(|s| *s >= 0.0 && *s < 60.0), "{first:?}");

    // Events by kind equal the logs' counts, kind by kind, and nothing else.
    let mut expected: BTreeMap<&str, u64> = BTreeMap::new();
    for kind in kinds.lock().unwrap().iter() {
        *expected.entry(kind.as_str()).or_default() += 1;
    }
    let mut counted: BTreeMap<&str, u64> = BTreeMap::new();
    for kind in EventKind::ALL {
        let n = seen.counter(
            names::EVENTS,
            &[
                (names::LABEL_ADAPTER, S),
                (names::LABEL_KIND, kind.as_str()),
            ],
        );
        if n > 0 {
            counted.insert(kind.as_str(), n);
        }
    }
    assert_eq!(counted, expected);
    assert_eq!(
        seen.counter_total(names::EVENTS),
        kinds.lock().unwrap().len() as u64
    );

    // In flight is back to zero on every series; no label carries an execution id.
    assert!(seen.gauges.values().all(|g| *g == 0.0), "{:?}", seen.gauges);
    let ids = ids.lock().unwrap();
    let values: HashSet<&str> = seen.all_label_values().collect();
    assert!(
        ids.iter().all(|id| !values.contains(id.as_str())),
        "{values:?}"
    );
}

#[test]
fn a_running_execution_is_in_flight_under_its_adapter() {
    let seen = run(|probe| async move {
        let mut service = scripted();
        let execution = start(&mut service, Script::builder().text("x").hang().build()).await;
        wait_for(&execution, EventKind::MessageDelta).await;
        probe
            .settle(|seen| {
                seen.counter(
                    names::EVENTS,
                    &[
                        (names::LABEL_ADAPTER, S),
                        (names::LABEL_KIND, "message.delta"),
                    ],
                ) == 1
            })
            .await;
        probe.read(|seen| {
            assert_eq!(
                seen.gauge(names::EXECUTIONS_IN_FLIGHT, &[(names::LABEL_ADAPTER, S)]),
                1.0
            );
            // The unit moved from the label of the pending call to the adapter's.
            assert_eq!(
                seen.gauge(
                    names::EXECUTIONS_IN_FLIGHT,
                    &[(names::LABEL_ADAPTER, names::UNKNOWN_ADAPTER)]
                ),
                0.0
            );
            assert_eq!(seen.counter_total(names::EXECUTIONS_FINISHED), 0);
        });
        execution.cancel(CancelReason::new("stop"));
        assert!(matches!(execution.outcome().await, Outcome::Cancelled(_)));
        probe.settle(|seen| seen.in_flight_total() == 0.0).await;
    });
    assert_eq!(
        seen.gauge(names::EXECUTIONS_IN_FLIGHT, &[(names::LABEL_ADAPTER, S)]),
        0.0
    );
    assert_eq!(seen.counter_total(names::EXECUTIONS_FINISHED), 1);
}

#[test]
fn a_failed_call_is_in_flight_until_it_fails_then_counts_its_error() {
    let seen = run(|probe| async move {
        let (release, wait) = tokio::sync::oneshot::channel::<()>();
        let wait = Arc::new(Mutex::new(Some(wait)));
        let inner = tower::service_fn(move |_: ExecutionRequest| {
            let wait = wait.lock().unwrap().take();
            async move {
                if let Some(wait) = wait {
                    let _ = wait.await;
                }
                Err::<ExecutionHandle, _>(HarnessError::new(ErrorCategory::Capacity, "full"))
            }
        });
        let service = ServiceBuilder::new()
            .layer(MetricsLayer::new().with_adapter("billing"))
            .service(inner);
        let call = tokio::spawn(service.oneshot(ExecutionRequest::new("x")));
        probe
            .settle(|seen| {
                seen.gauge(
                    names::EXECUTIONS_IN_FLIGHT,
                    &[(names::LABEL_ADAPTER, "billing")],
                ) == 1.0
            })
            .await;
        release.send(()).unwrap();
        let err = call.await.unwrap().unwrap_err();
        assert_eq!(err.category(), ErrorCategory::Capacity);
    });
    assert_eq!(
        seen.gauge(
            names::EXECUTIONS_IN_FLIGHT,
            &[(names::LABEL_ADAPTER, "billing")]
        ),
        0.0
    );
    let errors = [
        (names::LABEL_ADAPTER, "billing"),
        (names::LABEL_CATEGORY, "capacity"),
        (names::LABEL_STAGE, names::STAGE_CALL),
    ];
    assert_eq!(seen.counter(names::ERRORS, &errors), 1);
    assert_eq!(seen.counter_total(names::EXECUTIONS_STARTED), 0);
    assert_eq!(seen.counter_total(names::EXECUTIONS_FINISHED), 0);
}

#[test]
fn a_dropped_call_future_gives_its_in_flight_unit_back() {
    let seen = run(|probe| async move {
        let inner = tower::service_fn(|_: ExecutionRequest| {
            std::future::pending::<Result<ExecutionHandle, HarnessError>>()
        });
        let mut service = ServiceBuilder::new()
            .layer(MetricsLayer::new())
            .service(inner);
        let mut call = std::pin::pin!(service.call(ExecutionRequest::new("x")));
        let waker = futures_util::task::noop_waker();
        assert!(
            call.as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        probe.read(|seen| assert_eq!(seen.in_flight_total(), 1.0));
        // A future created and never polled holds a unit too.
        let never_polled = service.call(ExecutionRequest::new("y"));
        probe.read(|seen| assert_eq!(seen.in_flight_total(), 2.0));
        drop(never_polled);
        call.set(service.call(ExecutionRequest::new("z")));
        probe.read(|seen| assert_eq!(seen.in_flight_total(), 1.0));
    });
    // The last future was dropped with the runtime.
    assert_eq!(seen.in_flight_total(), 0.0);
    assert_eq!(seen.counter_total(names::ERRORS), 0);
    assert_eq!(seen.counter_total(names::EXECUTIONS_STARTED), 0);
}

/// Returns the first execution again for every later call, as an idempotency layer does for
/// a replay: the handle marked `into_replay`.
#[derive(Clone)]
struct Replaying<S> {
    inner: S,
    first: Arc<Mutex<Option<ExecutionHandle>>>,
}

impl<S> Service<ExecutionRequest> for Replaying<S>
where
    S: Service<ExecutionRequest, Response = ExecutionHandle, Error = HarnessError>,
    S::Future: Send + 'static,
{
    type Response = ExecutionHandle;
    type Error = HarnessError;
    type Future = futures_util::future::BoxFuture<'static, Result<ExecutionHandle, HarnessError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), HarnessError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: ExecutionRequest) -> Self::Future {
        if let Some(handle) = self.first.lock().unwrap().clone() {
            names::record_idempotent_replay(handle.adapter().as_str());
            return Box::pin(async move { Ok(handle.into_replay()) });
        }
        let first = Arc::clone(&self.first);
        let call = self.inner.call(request);
        Box::pin(async move {
            let handle = call.await?;
            *first.lock().unwrap() = Some(handle.clone());
            Ok(handle)
        })
    }
}

#[test]
fn a_replayed_execution_is_counted_once() {
    let logged: Arc<Mutex<usize>> = Arc::default();
    let logged_in = Arc::clone(&logged);
    let seen = run(move |probe| async move {
        let mut service = ServiceBuilder::new()
            .layer(MetricsLayer::new())
            .layer_fn(|inner| Replaying {
                inner,
                first: Arc::default(),
            })
            .service(AdapterService::new(ScriptedAdapter::new(
                Script::quickstart(),
            )));
        let script = || Script::builder().text("once").complete("done").build();
        let first = start(&mut service, script()).await;
        let again = start(&mut service, script()).await;
        assert_eq!(first.id(), again.id());
        first.outcome().await;
        let late = start(&mut service, script()).await;
        assert_eq!(late.id(), first.id());
        probe
            .settle(|seen| {
                seen.counter_total(names::EXECUTIONS_FINISHED) == 1 && seen.in_flight_total() == 0.0
            })
            .await;
        // Give a wrongly started second watcher every chance to count.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        *logged_in.lock().unwrap() = first.log().len();
    });
    let adapter = [(names::LABEL_ADAPTER, S)];
    assert_eq!(seen.counter(names::EXECUTIONS_STARTED, &adapter), 1);
    assert_eq!(seen.counter(names::IDEMPOTENT_REPLAYS, &adapter), 2);
    assert_eq!(seen.counter_total(names::EXECUTIONS_FINISHED), 1);
    assert_eq!(
        seen.counter_total(names::EVENTS),
        *logged.lock().unwrap() as u64
    );
    assert_eq!(seen.in_flight_total(), 0.0);
}

#[test]
fn describe_registers_every_catalog_metric_once_with_its_unit_and_help() {
    let seen = run(|_| async {
        names::describe();
        for def in names::CATALOG {
            match def.metric_type {
                MetricType::Counter => metrics::counter!(def.name).increment(0),
                MetricType::Gauge => metrics::gauge!(def.name).increment(0.0),
                MetricType::Histogram => metrics::histogram!(def.name).record(0.0),
            }
        }
    });
    let mut unique = HashSet::new();
    for def in names::CATALOG {
        assert!(unique.insert(def.name), "{} twice in the catalog", def.name);
        let (unit, help) = seen
            .meta
            .get(def.name)
            .unwrap_or_else(|| panic!("{} not recorded", def.name));
        assert_eq!(*unit, Some(def.unit), "{}", def.name);
        assert_eq!(help.as_deref(), Some(def.help), "{}", def.name);
        assert!(def.name.starts_with("harness_"), "{}", def.name);
        match def.metric_type {
            MetricType::Counter => assert!(def.name.ends_with("_total"), "{}", def.name),
            MetricType::Histogram => {
                assert!(
                    def.name.ends_with("_seconds") && def.unit == Unit::Seconds,
                    "{}",
                    def.name
                );
                assert!(def.buckets.is_some(), "{} has no buckets", def.name);
            }
            MetricType::Gauge => assert!(!def.name.ends_with("_total"), "{}", def.name),
        }
        assert!(
            !def.labels.is_empty() && def.labels.contains(&names::LABEL_ADAPTER),
            "{}",
            def.name
        );
    }
    assert_eq!(seen.meta.len(), names::CATALOG.len());
}

#[test]
fn the_catalog_table_in_the_docs_lists_every_metric() {
    let source = include_str!("../src/metrics/names.rs");
    for def in names::CATALOG {
        let row = format!("//! | `{}` | {} |", def.name, def.metric_type.as_str());
        assert!(source.contains(&row), "no docs row for {}", def.name);
    }
}

#[rstest]
#[case::duration(names::EXECUTION_DURATION_BUCKETS, 3600.0)]
#[case::first_event(names::TIME_TO_FIRST_EVENT_BUCKETS, 300.0)]
fn buckets_span_milliseconds_to_their_bound(#[case] buckets: &[f64], #[case] last: f64) {
    assert!(buckets.windows(2).all(|w| w[0] < w[1]), "{buckets:?}");
    assert!(buckets[0] > 0.0 && buckets[0] <= 0.005, "{buckets:?}");
    assert_eq!(buckets.last().copied(), Some(last));
}

#[test]
fn the_record_helpers_use_the_catalog_names_and_labels() {
    let seen = run(|_| async {
        names::record_preflight_rejection("scripted", "stream.text");
        names::record_preflight_rejection("scripted", names::CAPABILITY_OPTIONS);
        names::record_idempotent_replay("scripted");
        names::record_idempotency_conflict("scripted");
        names::record_retry("scripted", ErrorCategory::Throttled);
        names::record_retry("scripted", ErrorCategory::Throttled);
        names::record_cancellation("scripted", names::CancelSource::Caller);
        names::record_redactions("scripted", names::RedactionRule::Pattern, 3);
        names::record_redactions("scripted", names::RedactionRule::Secret, 0);
    });
    let a = (names::LABEL_ADAPTER, "scripted");
    assert_eq!(
        seen.counter(
            names::PREFLIGHT_REJECTIONS,
            &[a, (names::LABEL_CAPABILITY, "stream.text")]
        ),
        1
    );
    assert_eq!(
        seen.counter(
            names::PREFLIGHT_REJECTIONS,
            &[a, (names::LABEL_CAPABILITY, "options")]
        ),
        1
    );
    assert_eq!(seen.counter(names::IDEMPOTENT_REPLAYS, &[a]), 1);
    assert_eq!(seen.counter(names::IDEMPOTENCY_CONFLICTS, &[a]), 1);
    assert_eq!(
        seen.counter(names::RETRIES, &[a, (names::LABEL_CATEGORY, "throttled")]),
        2
    );
    assert_eq!(
        seen.counter(names::CANCELLATIONS, &[a, (names::LABEL_SOURCE, "caller")]),
        1
    );
    assert_eq!(
        seen.counter(names::REDACTIONS, &[a, (names::LABEL_RULE, "pattern")]),
        3
    );
    assert_eq!(seen.counter_total(names::REDACTIONS), 3);
    // Every series recorded uses exactly the label keys its catalog entry declares.
    for (name, labels) in seen.counters.keys() {
        let def = names::CATALOG.iter().find(|d| d.name == name).unwrap();
        let keys: Vec<&str> = labels.iter().map(|(k, _)| k.as_str()).collect();
        let mut declared: Vec<&str> = def.labels.to_vec();
        declared.sort_unstable();
        assert_eq!(keys, declared, "{name}");
    }
}

#[test]
fn services_and_futures_are_send_and_sync() {
    fn assert_send<T: Send>() {}
    fn assert_sync<T: Sync>() {}
    type Service = Metrics<AdapterService<ScriptedAdapter>>;
    assert_send::<Service>();
    assert_sync::<Service>();
    assert_send::<MetricsLayer>();
    assert_sync::<MetricsLayer>();
    assert_send::<
        ResponseFuture<
            <AdapterService<ScriptedAdapter> as tower::Service<ExecutionRequest>>::Future,
        >,
    >();
    type Ready = std::future::Ready<Result<ExecutionHandle, HarnessError>>;
    assert_send::<ResponseFuture<Ready>>();
    assert_sync::<ResponseFuture<Ready>>();
}

#[test]
fn redactions_and_cancellations_are_counted_by_kind_and_source() {
    use harness_layers::redaction::{RedactionLayer, Redactor};
    use harness_layers::shutdown::ShutdownLayer;

    const CREDENTIAL: &str = "cred-0123456789-abcdef";
    let shutdown = tokio_util::sync::CancellationToken::new();
    let shutdown_in = shutdown.clone();
    let seen = run(move |probe| async move {
        let redactor = Redactor::builder().secret(CREDENTIAL).build().unwrap();
        let adapter_service = AdapterService::builder(ScriptedAdapter::new(Script::quickstart()))
            .layer(ShutdownLayer::new(shutdown_in.clone()))
            .layer(RedactionLayer::new(Arc::new(redactor)).adapter(&S.parse().unwrap()))
            .build();
        let mut service = ServiceBuilder::new()
            .layer(MetricsLayer::new())
            .service(adapter_service);
        // Two secrets and one bearer token in text; one sensitive field in a tool call.
        let leaky = Script::builder()
            .text(format!("a {CREDENTIAL} b {CREDENTIAL}"))
            .text(" Bearer abcdefghijklmnopqrstuvwxyz0123")
            .tool_call(
                "call_1".parse().unwrap(),
                "login",
                serde_json::json!({"password": "hunter2"}),
                serde_json::json!({"ok": true}),
            )
            .complete("done")
            .build();
        let done = start(&mut service, leaky).await;
        done.outcome().await;

        // One cancellation by a caller, one by shutdown.
        let hang = || Script::builder().hang().build();
        let by_caller = start(&mut service, hang()).await;
        let by_shutdown = start(&mut service, hang()).await;
        // The text is the caller's own: it never decides the source.
        by_caller.cancel(CancelReason::new("shutdown"));
        by_caller.outcome().await;
        shutdown_in.cancel();
        by_shutdown.outcome().await;
        probe
            .settle(|seen| seen.counter_total(names::EXECUTIONS_FINISHED) == 3)
            .await;
    });
    drop(shutdown);
    let redactions = |rule: &str| {
        seen.counter(
            names::REDACTIONS,
            &[(names::LABEL_ADAPTER, S), (names::LABEL_RULE, rule)],
        )
    };
    assert_eq!(redactions("secret"), 2);
    assert_eq!(redactions("pattern"), 1);
    assert_eq!(redactions("field"), 1);
    let cancellations = |source: &str| {
        seen.counter(
            names::CANCELLATIONS,
            &[(names::LABEL_ADAPTER, S), (names::LABEL_SOURCE, source)],
        )
    };
    assert_eq!(cancellations("caller"), 1);
    assert_eq!(cancellations("shutdown"), 1);
}
