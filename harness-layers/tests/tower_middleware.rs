//! Tower's own middleware between this crate's admission layers: `timeout`, `load_shed`,
//! `concurrency_limit` and `buffer` fail with `tower::BoxError`; the layers above accept it
//! and classify it (`HarnessError: From<BoxError>`), so each one's effect reaches the caller
//! as a typed error with a category and a code.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::service::{AdapterService, ExecutionHandle, ExecutionRequest, Outcome};
use harness_layers::capacity::CapacityLayer;
use harness_layers::metrics::MetricsLayer;
use harness_layers::preflight::PreflightLayer;
use harness_layers::stack::HarnessStack;
use harness_layers::trace::TraceLayer;
use harness_scripted::{Script, ScriptedAdapter};
use tokio::sync::Semaphore;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

fn adapter() -> ScriptedAdapter {
    ScriptedAdapter::new(Script::builder().text("hello").complete("done").build())
}

/// The adapter service behind a gate: each call waits for a permit of `gate` (none unless the
/// test adds them) and counts itself in `started` first.
#[derive(Clone)]
struct Gated {
    inner: AdapterService<ScriptedAdapter>,
    gate: Arc<Semaphore>,
    started: Arc<AtomicUsize>,
}

impl Gated {
    fn new() -> Self {
        Self {
            inner: AdapterService::new(adapter()),
            gate: Arc::new(Semaphore::new(0)),
            started: Arc::new(AtomicUsize::new(0)),
        }
    }
}

impl Service<ExecutionRequest> for Gated {
    type Response = ExecutionHandle;
    type Error = HarnessError;
    type Future = Pin<Box<dyn Future<Output = Result<ExecutionHandle, HarnessError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), HarnessError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: ExecutionRequest) -> Self::Future {
        self.started.fetch_add(1, Ordering::SeqCst);
        let gate = Arc::clone(&self.gate);
        let future = self.inner.call(request);
        Box::pin(async move {
            gate.acquire()
                .await
                .expect("the gate is never closed")
                .forget();
            future.await
        })
    }
}

async fn succeeded(handle: ExecutionHandle) {
    assert!(
        matches!(handle.outcome().await, Outcome::Succeeded(_)),
        "the execution succeeds"
    );
}

/// The composition the crate docs promise compiles: our layers, then all four of tower's,
/// then the adapter service; and an execution runs through it.
#[tokio::test]
async fn all_four_compose_between_our_layers_and_an_execution_runs() {
    let adapter = adapter();
    let service = ServiceBuilder::new()
        .layer(TraceLayer::new())
        .layer(MetricsLayer::new())
        .layer(PreflightLayer::for_adapter(&adapter).unwrap())
        .timeout(Duration::from_secs(30))
        .load_shed()
        .concurrency_limit(4)
        .buffer(16)
        .layer(CapacityLayer::new(8))
        .service(AdapterService::new(adapter));
    let handle = service.oneshot(ExecutionRequest::new("go")).await.unwrap();
    succeeded(handle).await;
}

/// A refusal from below the middleware comes through it as the `HarnessError` it was.
#[tokio::test]
async fn an_error_from_below_crosses_the_middleware_unchanged() {
    let service = ServiceBuilder::new()
        .layer(MetricsLayer::new())
        .timeout(Duration::from_secs(30))
        .load_shed()
        .concurrency_limit(4)
        .buffer(16)
        .layer(CapacityLayer::new(0))
        .service(AdapterService::new(adapter()));
    let err = service
        .oneshot(ExecutionRequest::new("go"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), &ErrorCode::CAPACITY_EXHAUSTED, "{err:?}");
    assert!(err.message().contains("all 0 execution slots are busy"));
}

#[tokio::test]
async fn an_elapsed_timeout_is_a_timeout_error() {
    let gated = Gated::new();
    let service = ServiceBuilder::new()
        .layer(MetricsLayer::new())
        .timeout(Duration::from_millis(20))
        .service(gated.clone());
    let err = service
        .oneshot(ExecutionRequest::new("go"))
        .await
        .unwrap_err();
    assert_eq!(err.category(), ErrorCategory::Timeout, "{err:?}");
    assert_eq!(err.code(), &ErrorCode::SERVICE_TIMEOUT);
    assert!(!err.retryable());
    assert_eq!(gated.started.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn load_shed_refuses_with_capacity_while_the_service_below_is_not_ready() {
    let gated = Gated::new();
    let service = ServiceBuilder::new()
        .layer(PreflightLayer::for_adapter(&adapter()).unwrap())
        .load_shed()
        .concurrency_limit(1)
        .service(gated.clone());
    // The first call holds the one slot of the concurrency limit, waiting at the gate.
    let first = tokio::spawn(service.clone().oneshot(ExecutionRequest::new("one")));
    while gated.started.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    // So the limit is not ready, and the second is shed at once, never reaching the adapter.
    let err = service
        .clone()
        .oneshot(ExecutionRequest::new("two"))
        .await
        .unwrap_err();
    assert_eq!(err.category(), ErrorCategory::Capacity, "{err:?}");
    assert_eq!(err.code(), &ErrorCode::LOAD_SHED);
    assert!(err.retryable());
    assert_eq!(gated.started.load(Ordering::SeqCst), 1);

    gated.gate.add_permits(1);
    succeeded(first.await.unwrap().unwrap()).await;
    // With the slot free again, a call goes through.
    gated.gate.add_permits(1);
    succeeded(
        service
            .oneshot(ExecutionRequest::new("three"))
            .await
            .unwrap(),
    )
    .await;
}

#[tokio::test]
async fn under_a_concurrency_limit_the_second_call_waits_for_the_first() {
    let gated = Gated::new();
    let service = ServiceBuilder::new()
        .layer(MetricsLayer::new())
        .concurrency_limit(1)
        .service(gated.clone());
    let first = tokio::spawn(service.clone().oneshot(ExecutionRequest::new("one")));
    let second = tokio::spawn(service.clone().oneshot(ExecutionRequest::new("two")));
    while gated.started.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    // Give the second every chance to pass the limit: it must not.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(gated.started.load(Ordering::SeqCst), 1, "the second waits");
    assert!(!second.is_finished());

    gated.gate.add_permits(2);
    succeeded(first.await.unwrap().unwrap()).await;
    succeeded(second.await.unwrap().unwrap()).await;
    assert_eq!(gated.started.load(Ordering::SeqCst), 2);
}

/// A buffer is shared by many tasks (its worker drives the service); the default admission
/// stack sits above it, composed by hand: `HarnessStack` has no place for a tower layer
/// between its layers and the adapter service, so its admission stack wraps the service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffer_serves_many_tasks_under_the_default_admission_stack() {
    let adapter = adapter();
    let stack = HarnessStack::defaults_for(&adapter).unwrap();
    let below = ServiceBuilder::new().buffer(8).service(
        AdapterService::builder(adapter)
            .layer(stack.runtime().clone())
            .build(),
    );
    let service = stack.admission().clone().layer(below);
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let service = service.clone();
            tokio::spawn(async move {
                let handle = service
                    .oneshot(ExecutionRequest::new(format!("task {i}")))
                    .await
                    .unwrap();
                succeeded(handle).await;
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

#[tokio::test]
async fn a_closed_buffer_is_unavailable() {
    let (buffer, worker) = tower::buffer::Buffer::pair(AdapterService::new(adapter()), 8);
    drop(worker);
    let service = ServiceBuilder::new()
        .layer(MetricsLayer::new())
        .service(buffer);
    let err = service
        .oneshot(ExecutionRequest::new("go"))
        .await
        .unwrap_err();
    assert_eq!(err.category(), ErrorCategory::Unavailable, "{err:?}");
    assert_eq!(err.code(), &ErrorCode::SERVICE_CLOSED);
}

/// A service that is never ready: it fails `poll_ready` with `error`.
#[derive(Clone)]
struct Broken(HarnessError);

impl Service<ExecutionRequest> for Broken {
    type Response = ExecutionHandle;
    type Error = HarnessError;
    type Future = std::future::Ready<Result<ExecutionHandle, HarnessError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), HarnessError>> {
        Poll::Ready(Err(self.0.clone()))
    }

    fn call(&mut self, _: ExecutionRequest) -> Self::Future {
        std::future::ready(Err(self.0.clone()))
    }
}

/// A buffered service that fails its readiness fails every call after with a `ServiceError`
/// holding that error: the layer above gets the error itself back.
#[tokio::test]
async fn a_buffered_services_own_failure_is_unwrapped() {
    let broken = HarnessError::new(ErrorCategory::Unavailable, "the agent is gone")
        .with_code(ErrorCode::PROVIDER_LOST);
    let service = ServiceBuilder::new()
        .layer(MetricsLayer::new())
        .buffer(8)
        .service(Broken(broken.clone()));
    for _ in 0..2 {
        let err = service
            .clone()
            .oneshot(ExecutionRequest::new("go"))
            .await
            .unwrap_err();
        assert_eq!(err, broken);
    }
}

/// In the runtime stack, a tower layer may be the outermost (its `BoxError` converted where
/// the service builds the stack): here a tower timeout bounds each segment call, runtime
/// creation and a slow `initialize` included, around the default runtime layers.
#[tokio::test]
async fn a_tower_timeout_around_the_runtime_layers_fails_the_run_with_timeout() {
    let adapter = adapter();
    let stack = HarnessStack::defaults_for(&adapter).unwrap();
    let service = AdapterService::builder(adapter)
        .layer(tower::timeout::TimeoutLayer::new(Duration::from_millis(50)))
        .layer(stack.runtime().clone())
        .build();
    let options = harness_scripted::ScriptedOptions::default().with_initialize_delay_ms(60_000);
    let handle = service
        .oneshot(ExecutionRequest::new("go").with_options(options.to_value()))
        .await
        .unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(30), handle.outcome())
        .await
        .expect("the run ends");
    let Outcome::Failed(err) = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(err.category(), ErrorCategory::Timeout, "{err:?}");
    assert_eq!(err.code(), &ErrorCode::SERVICE_TIMEOUT);
}
