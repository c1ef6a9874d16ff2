//! An admission layer of your own: a quota of executions, at a named place in the stack.
//!
//! ```sh
//! cargo run --example own_admission_layer
//! ```
//!
//! An admission layer is a `tower::Layer` over the service that starts executions
//! (`ExecutionRequest` in, `ExecutionHandle` out). This one refuses past a number of starts
//! with a `throttled` error. Where it sits decides what it counts: below idempotency, a
//! replayed request (the same `Idempotency-Key`) is answered above it and costs no quota; below
//! preflight, a request the adapter cannot take is refused before it is counted.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll};

use harness::error::{ErrorCategory, HarnessError};
use harness::layers::stack::AdmissionSlot;
use harness::prelude::*;
use harness::scripted::ScriptedAdapter;

/// At most `limit` executions started through it.
#[derive(Clone)]
struct QuotaLayer {
    limit: u32,
    used: Arc<AtomicU32>,
}

#[derive(Clone)]
struct Quota<S> {
    inner: S,
    limit: u32,
    used: Arc<AtomicU32>,
}

impl<S> Layer<S> for QuotaLayer {
    type Service = Quota<S>;
    fn layer(&self, inner: S) -> Quota<S> {
        Quota {
            inner,
            limit: self.limit,
            used: Arc::clone(&self.used),
        }
    }
}

impl<S> Service<ExecutionRequest> for Quota<S>
where
    S: Service<ExecutionRequest, Response = ExecutionHandle, Error = HarnessError>,
    S::Future: Send + 'static,
{
    type Response = ExecutionHandle;
    type Error = HarnessError;
    type Future = Pin<Box<dyn Future<Output = Result<ExecutionHandle, HarnessError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), HarnessError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: ExecutionRequest) -> Self::Future {
        // Taken only if under the limit: a refused start uses nothing.
        let taken = self
            .used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.limit).then_some(n + 1)
            });
        if taken.is_err() {
            let limit = self.limit;
            return Box::pin(async move {
                Err(HarnessError::new(
                    ErrorCategory::Throttled,
                    format!("the quota of {limit} executions is used up"),
                )
                .with_retryable(false))
            });
        }
        Box::pin(self.inner.call(request))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let adapter = ScriptedAdapter::quickstart();
    let quota = QuotaLayer {
        limit: 2,
        used: Arc::default(),
    };
    let service = HarnessStack::defaults_for(&adapter)
        .expect("the default stack builds")
        .admission_layer(AdmissionSlot::BelowIdempotency, quota)
        .service(adapter);

    let key: harness::id::IdempotencyKey = "order-42".parse().expect("a key");
    let first = service
        .clone()
        .oneshot(ExecutionRequest::new("one").with_idempotency_key(key.clone()))
        .await
        .expect("the first start");
    let second = service
        .clone()
        .oneshot(ExecutionRequest::new("two"))
        .await
        .expect("the second");
    // The same key again: idempotency answers it above the quota, with the first execution.
    let replay = service
        .clone()
        .oneshot(ExecutionRequest::new("one").with_idempotency_key(key))
        .await
        .expect("the replay");
    assert!(replay.is_replay() && replay.id() == first.id());
    let third = service
        .oneshot(ExecutionRequest::new("three"))
        .await
        .unwrap_err();
    assert_eq!(third.category(), ErrorCategory::Throttled);
    println!(
        "started {} and {}; replayed {}; refused the third: {third}",
        first.id(),
        second.id(),
        replay.id()
    );
}
