//! Tower's own middleware between the harness layers: `timeout`, `load_shed` and
//! `concurrency_limit` at named places in the admission stack.
//!
//! ```sh
//! cargo run --example tower_middleware
//! ```
//!
//! Tower's layers fail with `tower::BoxError`; the harness layers above them take any error
//! `Into<HarnessError>`, and `HarnessError: From<BoxError>` classifies tower's own: a timeout's
//! `Elapsed` is `timeout` (`SERVICE_TIMEOUT`), a shed request's `Overloaded` is `capacity`
//! (`LOAD_SHED`, retryable). Below preflight, they see only requests the adapter can take, so
//! a refusal for a bad request is never turned into a shed one.
//!
//! Tower's middleware is behind its features: a crate of yours turns them on in its own
//! `tower` dependency (`features = ["timeout", "load-shed", "limit"]`), and `harness::tower`
//! is that same crate.

use std::time::Duration;

use harness::error::{ErrorCategory, ErrorCode};
use harness::layers::stack::AdmissionSlot;
use harness::prelude::*;
use harness::scripted::{Script, ScriptedAdapter};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let adapter = ScriptedAdapter::new(Script::builder().text("hello").complete("done").build());
    let service = HarnessStack::defaults_for(&adapter)
        .expect("the default stack builds")
        // A start that takes longer than a second (a slow store, a full queue) fails `timeout`.
        .admission_layer(
            AdmissionSlot::Outermost,
            tower::timeout::TimeoutLayer::new(Duration::from_secs(1)),
        )
        // One start at a time, the others shed at once rather than queued.
        .admission_layer(
            AdmissionSlot::BelowPreflight,
            ServiceBuilder::new()
                .load_shed()
                .concurrency_limit(1)
                .into_inner(),
        )
        // Starts that take a while, as against a busy store: 20 ms each.
        .admission_layer(
            AdmissionSlot::BelowCapacity,
            tower::util::AndThenLayer::new(|execution| async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok::<_, harness::error::HarnessError>(execution)
            }),
        )
        .service(adapter);

    // Fifty starts at once: those that find the one slot taken are shed, classified.
    let starts = (0..50).map(|i| {
        service
            .clone()
            .oneshot(ExecutionRequest::new(format!("run {i}")))
    });
    let (mut started, mut shed) = (0, 0);
    for result in futures_util::future::join_all(starts).await {
        match result {
            Ok(execution) => {
                assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
                started += 1;
            }
            Err(e) => {
                assert_eq!(
                    (e.category(), e.code()),
                    (ErrorCategory::Capacity, &ErrorCode::LOAD_SHED)
                );
                assert!(e.retryable());
                shed += 1;
            }
        }
    }
    assert!(started >= 1 && shed >= 1 && started + shed == 50);
    println!("{started} started, {shed} shed (capacity, LOAD_SHED, retryable)");
}
