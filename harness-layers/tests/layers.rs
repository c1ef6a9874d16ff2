//! Preflight, capacity, timeouts, retry and shutdown cancellation over the scripted adapter:
//! refusals cost no provider work, bounds hold under concurrency, retries happen only where
//! they are safe.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use harness_core::capability::CapabilityKey;
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::event::{CancelReason, CancelSource};
use harness_core::service::{AdapterService, ExecutionHandle, ExecutionRequest, Outcome};
use harness_layers::capacity::CapacityLayer;
use harness_layers::preflight::PreflightLayer;
use harness_layers::retry::{Backoff, RetryLayer};
use harness_layers::shutdown::ShutdownLayer;
use harness_layers::timeout::TimeoutLayer;
use harness_scripted::{Script, ScriptedAdapter};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tower::{Service, ServiceBuilder, ServiceExt};

/// Counts the calls that reach the adapter service.
#[derive(Clone)]
struct Counting<S> {
    inner: S,
    calls: Arc<AtomicUsize>,
}

impl<S> Service<ExecutionRequest> for Counting<S>
where
    S: Service<ExecutionRequest, Response = ExecutionHandle, Error = HarnessError>,
{
    type Response = ExecutionHandle;
    type Error = HarnessError;
    type Future = S::Future;
    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), HarnessError>> {
        self.inner.poll_ready(cx)
    }
    fn call(&mut self, request: ExecutionRequest) -> S::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.call(request)
    }
}

fn counting(
    adapter: ScriptedAdapter,
) -> (Counting<AdapterService<ScriptedAdapter>>, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    (
        Counting {
            inner: AdapterService::new(adapter),
            calls: Arc::clone(&calls),
        },
        calls,
    )
}

#[tokio::test]
async fn preflight_refusals_reach_no_adapter_and_list_every_problem() {
    let adapter = ScriptedAdapter::quickstart();
    let preflight = PreflightLayer::for_adapter(&adapter).unwrap();
    let (inner, calls) = counting(adapter);
    let service = ServiceBuilder::new().layer(preflight).service(inner);

    // Two unknown option fields and a wrong type: every one is listed with its pointer.
    let bad = ExecutionRequest::new("go").with_options(json!({"a": 1, "b": 2, "script": 7}));
    let err = service.clone().oneshot(bad).await.unwrap_err();
    assert_eq!(err.code(), &ErrorCode::OPTIONS_INVALID);
    assert_eq!(err.category(), ErrorCategory::Configuration);
    for expected in ["`/a`", "`/b`", "`/script`"] {
        assert!(
            err.message().contains(expected),
            "{expected} missing: {}",
            err.message()
        );
    }

    // Every unmet capability is listed.
    let bad = ExecutionRequest::new("go")
        .require(CapabilityKey::Skills)
        .require(CapabilityKey::ToolMcp)
        .require(CapabilityKey::StreamText);
    let err = service.clone().oneshot(bad).await.unwrap_err();
    assert_eq!(err.code(), &ErrorCode::CAPABILITY_UNSUPPORTED);
    assert!(err.message().contains("skills"), "{}", err.message());
    assert!(err.message().contains("tool.mcp"), "{}", err.message());
    assert!(!err.message().contains("stream.text"), "{}", err.message());

    // Caller credentials for an adapter without `tool.caller_credentials` (the scripted
    // adapter runs no provider's tools): refused rather than dropped without a word.
    let mut bad = ExecutionRequest::new("go");
    bad.extensions
        .insert(harness_core::tool::CallerCredentials::new().with(
            "github",
            harness_core::tool::Credential::new("ghp_callers_own_token"),
        ));
    let err = service.clone().oneshot(bad).await.unwrap_err();
    assert_eq!(err.code(), &ErrorCode::CAPABILITY_UNSUPPORTED);
    assert!(
        err.message().contains("tool.caller_credentials"),
        "{}",
        err.message()
    );
    assert!(!err.message().contains("ghp_"), "{}", err.message());

    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "no refusal reached the adapter"
    );

    // A request the adapter can serve passes.
    let ok = ExecutionRequest::new("go")
        .require(CapabilityKey::StreamText)
        .with_options(json!({"script": {"steps": [{"type": "complete"}]}}));
    let execution = service.clone().oneshot(ok).await.unwrap();
    assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // The scripted adapter keeps conversations: a request continuing one passes too.
    let continued = ExecutionRequest::new("go")
        .with_conversation("conv_1".parse().unwrap())
        .with_options(json!({"script": {"steps": [{"type": "complete"}]}}));
    let execution = service.oneshot(continued).await.unwrap();
    assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_admits_exactly_the_limit_under_concurrency_and_frees_on_end() {
    let hang = Script::builder().hang().build();
    let (inner, calls) = counting(ScriptedAdapter::new(hang));
    let service = ServiceBuilder::new()
        .layer(CapacityLayer::new(5))
        .service(inner);

    let attempts = (0..50).map(|_| {
        let service = service.clone();
        tokio::spawn(async move { service.oneshot(ExecutionRequest::new("go")).await })
    });
    let results = futures_util::future::join_all(attempts).await;
    let (admitted, refused): (Vec<_>, Vec<_>) = results
        .into_iter()
        .map(|r| r.unwrap())
        .partition(Result::is_ok);
    assert_eq!(admitted.len(), 5);
    assert_eq!(refused.len(), 45);
    for err in refused.iter().map(|r| r.as_ref().unwrap_err()) {
        assert_eq!(err.category(), ErrorCategory::Capacity);
        assert!(err.retryable());
        assert!(err.retry_after().is_some());
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        5,
        "refusals reached no adapter"
    );

    // Ending one execution frees exactly one slot.
    let handles: Vec<ExecutionHandle> = admitted.into_iter().map(Result::unwrap).collect();
    handles[0].cancel(CancelReason::default());
    handles[0].outcome().await;
    // The permit is released by a terminal hook right after the terminal event is appended
    // (on the driver's thread, which may still be in it): poll the layer's count (bounded,
    // never a blind sleep).
    for _ in 0..5000 {
        if service.active() == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(
        service.active(),
        4,
        "the ended execution still holds its slot"
    );
    let again = service
        .clone()
        .oneshot(ExecutionRequest::new("again"))
        .await;
    assert!(
        again.is_ok(),
        "the freed slot was not reused: {:?}",
        again.err()
    );
    let err = service
        .clone()
        .oneshot(ExecutionRequest::new("full"))
        .await
        .unwrap_err();
    assert_eq!(err.category(), ErrorCategory::Capacity);
}

#[tokio::test]
async fn a_turn_timeout_fails_the_execution_with_timeout_and_cleans_up() {
    let adapter = ScriptedAdapter::new(Script::builder().text("working").hang().build());
    let stats = adapter.stats();
    let service = AdapterService::builder(adapter)
        .layer(TimeoutLayer::new().turn(Duration::from_millis(30)))
        .build();
    let execution = service.oneshot(ExecutionRequest::new("go")).await.unwrap();
    let Outcome::Failed(err) = execution.outcome().await else {
        panic!("expected a timeout failure");
    };
    assert_eq!(err.category(), ErrorCategory::Timeout);
    assert_eq!(err.code(), &ErrorCode::TURN_TIMEOUT);
    let stats = stats.snapshot();
    assert_eq!(
        stats.cancel_calls, 1,
        "a timed-out runtime is asked to stop first"
    );
    assert_eq!(stats.cleanups, 1);
}

#[tokio::test]
async fn retries_a_failure_before_output_on_fresh_runtimes_up_to_the_limit() {
    let fails = Script::builder()
        .error(ErrorCategory::Unavailable, "provider down")
        .build();
    let adapter = ScriptedAdapter::new(fails);
    let stats = adapter.stats();
    let service = AdapterService::builder(adapter)
        .layer(RetryLayer::new(
            Backoff::new()
                .max_attempts(3)
                .base(Duration::from_millis(1)),
        ))
        .build();
    let execution = service.oneshot(ExecutionRequest::new("go")).await.unwrap();
    let Outcome::Failed(err) = execution.outcome().await else {
        panic!("expected failure");
    };
    assert_eq!(err.category(), ErrorCategory::Unavailable);
    let stats = stats.snapshot();
    assert_eq!(stats.runtimes_created, 3, "three attempts");
    assert_eq!(stats.cleanups, 3, "each runtime cleaned once");
}

#[rstest::rstest]
#[case::after_output(Script::builder().text("partial").error(ErrorCategory::Unavailable, "down").build())]
#[case::not_retryable(Script::builder().error(ErrorCategory::Authorization, "denied").build())]
#[tokio::test]
async fn never_retries_after_output_or_non_retryable_categories(#[case] script: Script) {
    let adapter = ScriptedAdapter::new(script);
    let stats = adapter.stats();
    let service = AdapterService::builder(adapter)
        .layer(RetryLayer::new(
            Backoff::new()
                .max_attempts(5)
                .base(Duration::from_millis(1)),
        ))
        .build();
    let execution = service.oneshot(ExecutionRequest::new("go")).await.unwrap();
    assert!(matches!(execution.outcome().await, Outcome::Failed(_)));
    assert_eq!(stats.snapshot().runtimes_created, 1);
}

#[tokio::test]
async fn retries_retryable_call_refusals_with_the_policy() {
    // A capacity layer inside the retry layer, full at first: the retry waits and succeeds
    // once the slot frees.
    let hang = ScriptedAdapter::new(Script::builder().hang().build());
    let service = ServiceBuilder::new()
        .layer(RetryLayer::new(|attempt: u32, _: &HarnessError| {
            (attempt < 500).then_some(Duration::from_millis(2))
        }))
        .layer(CapacityLayer::new(1).retry_after(Duration::from_millis(1)))
        .service(AdapterService::new(hang));
    let first = service
        .clone()
        .oneshot(ExecutionRequest::new("one"))
        .await
        .unwrap();
    let second = tokio::spawn(service.clone().oneshot(ExecutionRequest::new("two")));
    tokio::time::sleep(Duration::from_millis(5)).await;
    first.cancel(CancelReason::default());
    let second = second
        .await
        .unwrap()
        .expect("the retried call got the freed slot");
    assert_ne!(second.id(), first.id());

    // A policy that gives up returns the refusal.
    let service = ServiceBuilder::new()
        .layer(RetryLayer::new(|_: u32, _: &HarnessError| None))
        .layer(CapacityLayer::new(0))
        .service(AdapterService::new(ScriptedAdapter::quickstart()));
    let err = service
        .oneshot(ExecutionRequest::new("x"))
        .await
        .unwrap_err();
    assert_eq!(err.category(), ErrorCategory::Capacity);
}

#[tokio::test]
async fn shutdown_cancels_every_execution() {
    let shutdown = CancellationToken::new();
    let service = AdapterService::builder(ScriptedAdapter::new(Script::builder().hang().build()))
        .layer(ShutdownLayer::new(shutdown.clone()))
        .build();
    let mut executions = Vec::new();
    for _ in 0..20 {
        executions.push(
            service
                .clone()
                .oneshot(ExecutionRequest::new("go"))
                .await
                .unwrap(),
        );
    }
    // One caller cancels first with its own reason, which wins for that execution.
    executions[0].cancel(CancelReason::new("user"));
    executions[0].outcome().await;
    shutdown.cancel();
    for (i, execution) in executions.iter().enumerate() {
        let Outcome::Cancelled(reason) = execution.outcome().await else {
            panic!("expected cancellation");
        };
        let expected = if i == 0 {
            CancelReason::new("user")
        } else {
            CancelReason::from_source(CancelSource::Shutdown)
        };
        assert_eq!(reason, expected);
    }
}

#[test]
fn layers_and_futures_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    fn assert_send<T: Send>() {}
    type Inner = AdapterService<ScriptedAdapter>;
    type InnerFuture = <Inner as Service<ExecutionRequest>>::Future;
    assert_send_sync::<harness_layers::preflight::Preflight<Inner>>();
    assert_send_sync::<harness_layers::capacity::Capacity<Inner>>();
    assert_send_sync::<harness_layers::retry::Retry<Inner>>();
    assert_send_sync::<harness_layers::timeout::Timeout<Inner>>();
    assert_send_sync::<harness_layers::shutdown::Shutdown<Inner>>();
    assert_send::<harness_layers::preflight::ResponseFuture<InnerFuture>>();
    assert_send::<harness_layers::capacity::ResponseFuture<InnerFuture>>();
    assert_send::<harness_layers::retry::ResponseFuture<Inner>>();
}

#[tokio::test]
async fn an_init_timeout_fails_a_slow_start_with_timeout_and_cleans_it_up() {
    let adapter = ScriptedAdapter::quickstart();
    let stats = adapter.stats();
    let service = AdapterService::builder(adapter)
        .layer(TimeoutLayer::new().init(Duration::from_millis(20)))
        .build();
    let options = harness_scripted::ScriptedOptions::with_script(Script::quickstart())
        .with_initialize_delay_ms(60_000)
        .to_value();
    let execution = service
        .oneshot(ExecutionRequest::new("go").with_options(options))
        .await
        .unwrap();
    let Outcome::Failed(err) = execution.outcome().await else {
        panic!("expected a timeout failure");
    };
    assert_eq!(err.code(), &ErrorCode::INIT_TIMEOUT);
    let kinds: Vec<&str> = execution
        .log()
        .snapshot(Default::default())
        .iter()
        .map(|e| e.kind().as_str())
        .collect();
    assert_eq!(
        kinds,
        ["run.queued", "run.starting", "run.running", "run.failed"]
    );
    let stats = stats.snapshot();
    assert_eq!((stats.runtimes_created, stats.cleanups), (1, 1));
}

#[tokio::test]
async fn a_retry_releases_the_failed_runtime_before_it_waits() {
    let fails = Script::builder()
        .error(ErrorCategory::Unavailable, "down")
        .build();
    let adapter = ScriptedAdapter::new(fails);
    let stats = adapter.stats();
    let service = AdapterService::builder(adapter)
        .layer(RetryLayer::new(|_: u32, _: &HarnessError| {
            Some(Duration::from_secs(3600))
        }))
        .build();
    let execution = service.oneshot(ExecutionRequest::new("go")).await.unwrap();
    // The first attempt failed and its runtime was cleaned: the wait has begun.
    while stats.snapshot().cleanups == 0 {
        tokio::task::yield_now().await;
    }
    execution.cancel(CancelReason::new("stop"));
    assert!(matches!(execution.outcome().await, Outcome::Cancelled(_)));
    let stats = stats.snapshot();
    assert_eq!(stats.cancel_calls, 0, "no hook on a cleaned runtime");
    assert_eq!((stats.runtimes_created, stats.cleanups), (1, 1));
}

/// Fails its first stream before any output (`unavailable`), then answers on the next.
struct FlakyOnce {
    descriptor: harness_core::manifest::HarnessDescriptor,
    streams: Arc<AtomicUsize>,
}

impl harness_core::manifest::Describe for FlakyOnce {
    fn descriptor(&self) -> &harness_core::manifest::HarnessDescriptor {
        &self.descriptor
    }
}

impl harness_core::adapter::SimpleAdapter for FlakyOnce {
    fn stream(
        &self,
        _run: harness_core::adapter::RunContext,
    ) -> harness_core::adapter::BoxStream<'static, harness_core::adapter::EventResult> {
        use harness_core::adapter::AdapterEvent;
        use harness_core::event::{Content, RunSucceeded, TextDelta};
        let items = if self.streams.fetch_add(1, Ordering::SeqCst) == 0 {
            vec![Err(HarnessError::new(
                ErrorCategory::Unavailable,
                "warming up",
            ))]
        } else {
            vec![
                Ok(AdapterEvent::Content(Content::MessageDelta(
                    TextDelta::new("ok"),
                ))),
                Ok(AdapterEvent::Completed(RunSucceeded::default())),
            ]
        };
        Box::pin(futures_util::stream::iter(items))
    }
}

fn flaky_once() -> (harness_core::adapter::Simple<FlakyOnce>, Arc<AtomicUsize>) {
    use harness_core::manifest::{ContractVersion, ExecutionMode, HarnessDescriptor};
    let descriptor = HarnessDescriptor::builder("flaky".parse().unwrap(), "0.1.0")
        .contract_version(ContractVersion::V1)
        .execution_mode(ExecutionMode::in_process())
        .build()
        .unwrap();
    let streams = Arc::new(AtomicUsize::new(0));
    let adapter = FlakyOnce {
        descriptor,
        streams: Arc::clone(&streams),
    };
    (harness_core::adapter::Simple::new(adapter), streams)
}

/// Order in the runtime stack means something. A turn deadline of 50 ms and a retry that
/// waits 100 to 200 ms after a failure before the first item:
/// - retry *outside* the deadline: each attempt has its own 50 ms, the wait counts against
///   none, and the second attempt succeeds;
/// - retry *inside* the deadline: one 50 ms covers the attempts and the wait between them,
///   so the turn fails with `TURN_TIMEOUT` during the wait, after one attempt.
#[tokio::test]
async fn the_order_of_retry_and_timeout_decides_what_a_deadline_covers() {
    let retry = || {
        RetryLayer::new(
            Backoff::new()
                .max_attempts(2)
                .base(Duration::from_millis(200)),
        )
    };
    let deadline = || TimeoutLayer::new().turn(Duration::from_millis(50));

    let (adapter, streams) = flaky_once();
    let retry_outside = AdapterService::builder(adapter)
        .layer(retry())
        .layer(deadline())
        .build();
    let execution = retry_outside
        .oneshot(ExecutionRequest::new("go"))
        .await
        .unwrap();
    assert!(
        matches!(execution.outcome().await, Outcome::Succeeded(_)),
        "retry outside the deadline: the second attempt gets its own"
    );
    assert_eq!(streams.load(Ordering::SeqCst), 2);

    let (adapter, streams) = flaky_once();
    let retry_inside = AdapterService::builder(adapter)
        .layer(deadline())
        .layer(retry())
        .build();
    let execution = retry_inside
        .oneshot(ExecutionRequest::new("go"))
        .await
        .unwrap();
    let Outcome::Failed(err) = execution.outcome().await else {
        panic!("retry inside the deadline: the wait runs it out");
    };
    assert_eq!(err.code(), &ErrorCode::TURN_TIMEOUT);
    assert_eq!(streams.load(Ordering::SeqCst), 1);
}

/// A provider that asks to wait longer than the backoff's cap is not waited for: the run fails
/// at once, retryable, with the provider's interval in the error (a day's `retryAfterMs` used
/// to keep the run, and its capacity permit, for a day).
#[tokio::test]
async fn a_retry_interval_beyond_the_cap_fails_at_once_with_the_interval() {
    let day = Duration::from_secs(86_400);
    let step = harness_scripted::Step::Error {
        category: ErrorCategory::Unavailable,
        message: "come back tomorrow".to_owned(),
        code: None,
        provider_code: None,
        retryable: None,
        retry_after_ms: Some(day.as_millis() as u64),
        side_effects: false,
        diagnostic: None,
    };
    let adapter = ScriptedAdapter::new(Script::builder().step(step).build());
    let stats = adapter.stats();
    let service = AdapterService::builder(adapter)
        .layer(RetryLayer::new(Backoff::new()))
        .build();
    let started = std::time::Instant::now();
    let execution = service.oneshot(ExecutionRequest::new("go")).await.unwrap();
    let Outcome::Failed(err) = execution.outcome().await else {
        panic!("expected a failure");
    };
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(err.retryable());
    assert_eq!(err.retry_after(), Some(day));
    assert_eq!(stats.snapshot().runtimes_created, 1, "no retry");
}

/// Limits too large for the clock or the semaphore neither panic nor break the service.
#[tokio::test]
async fn extreme_limits_neither_panic_nor_fail_the_run() {
    let service = AdapterService::builder(ScriptedAdapter::new(
        Script::builder().text("hi").complete("done").build(),
    ))
    .config(harness_core::service::ServiceConfig {
        cancel_grace: Duration::MAX,
        cleanup_deadline: Duration::MAX,
        max_events: usize::MAX,
        ..harness_core::service::ServiceConfig::default()
    })
    .layer(TimeoutLayer::new().init(Duration::MAX).turn(Duration::MAX))
    .build();
    let service = ServiceBuilder::new()
        .layer(CapacityLayer::new(usize::MAX))
        .service(service);
    assert_eq!(service.limit(), CapacityLayer::MAX_LIMIT);
    let far: harness_core::time::Timestamp = "9999-01-01T00:00:00Z".parse().unwrap();
    let execution = service
        .oneshot(ExecutionRequest::new("go").with_deadline(far))
        .await
        .unwrap();
    assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
}

/// The default stack bounds start-up: a runtime that never finishes initializing fails the
/// run with `timeout` after `DEFAULT_INIT_TIMEOUT` (paused time: no real wait).
#[tokio::test(start_paused = true)]
async fn the_default_stack_bounds_a_start_that_never_ends() {
    use harness_layers::stack::{DEFAULT_INIT_TIMEOUT, HarnessStack};
    let adapter = ScriptedAdapter::quickstart();
    let service = HarnessStack::defaults_for(&adapter)
        .unwrap()
        .service(adapter);
    let options = harness_scripted::ScriptedOptions::with_script(Script::quickstart())
        .with_initialize_delay_ms(u64::MAX / 4)
        .to_value();
    let started = tokio::time::Instant::now();
    let execution = service
        .oneshot(ExecutionRequest::new("go").with_options(options))
        .await
        .unwrap();
    let Outcome::Failed(err) = execution.outcome().await else {
        panic!("expected a timeout failure");
    };
    assert_eq!(err.code(), &ErrorCode::INIT_TIMEOUT);
    assert!(started.elapsed() >= DEFAULT_INIT_TIMEOUT);
}

/// An adapter that keeps no conversation (`session.multi_turn` undeclared).
struct Forgetful(harness_core::manifest::HarnessDescriptor);

impl harness_core::manifest::Describe for Forgetful {
    fn descriptor(&self) -> &harness_core::manifest::HarnessDescriptor {
        &self.0
    }
}

impl harness_core::adapter::SimpleAdapter for Forgetful {
    fn stream(
        &self,
        _: harness_core::adapter::RunContext,
    ) -> harness_core::adapter::BoxStream<'static, harness_core::adapter::EventResult> {
        panic!("preflight lets no request through to this adapter in this test")
    }
}

#[tokio::test]
async fn preflight_refuses_a_conversation_the_adapter_cannot_keep() {
    use harness_core::manifest::{ContractVersion, ExecutionMode, HarnessDescriptor};
    let adapter = harness_core::adapter::Simple::new(Forgetful(
        HarnessDescriptor::builder("forgetful".parse().unwrap(), "0.1.0")
            .contract_version(ContractVersion::V1)
            .execution_mode(ExecutionMode::in_process())
            .build()
            .unwrap(),
    ));
    let preflight = PreflightLayer::for_adapter(&adapter).unwrap();
    let service = ServiceBuilder::new()
        .layer(preflight)
        .service(AdapterService::new(adapter));
    let bad = ExecutionRequest::new("go").with_conversation("conv_1".parse().unwrap());
    let err = service.oneshot(bad).await.unwrap_err();
    assert_eq!(err.code(), &ErrorCode::CAPABILITY_UNSUPPORTED);
    assert!(err.message().contains("conversation"), "{}", err.message());
    assert!(
        err.message().contains("session.multi_turn"),
        "{}",
        err.message()
    );
}
