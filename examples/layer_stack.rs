//! Both layer stacks over the scripted adapter, composed by hand in the default order.
//!
//! ```sh
//! cargo run --example layer_stack
//! ```
//!
//! It runs four executions and prints one line for each: a normal run, a retried idempotent
//! request (the same execution comes back), a run whose output carries a credential (the
//! redaction layer scrubs it before it is stored), and a request preflight refuses.
//! `HarnessStack::defaults_for` builds the same stacks in one call; composing them by hand
//! shows the order and lets an application reorder or drop layers. The runtime stack is
//! configured on the adapter service (its driver calls it once per run segment); the
//! admission stack wraps the service.

use harness::manifest::Describe;

use std::sync::Arc;
use std::time::Duration;

use harness::capability::CapabilityKey;
use harness::id::Cursor;
use harness::layers::capacity::CapacityLayer;
use harness::layers::idempotency::IdempotencyLayer;
use harness::layers::metrics::MetricsLayer;
use harness::layers::preflight::PreflightLayer;
use harness::layers::redaction::{RedactionLayer, Redactor};
use harness::layers::retry::{Backoff, RetryLayer};
use harness::layers::shutdown::ShutdownLayer;
use harness::layers::timeout::TimeoutLayer;
use harness::layers::trace::TraceLayer;
use harness::scripted::{Script, ScriptedAdapter};
use harness::{AdapterService, ExecutionRequest, Outcome};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tower::{ServiceBuilder, ServiceExt};

const CREDENTIAL: &str = "pk_live_51HxYzExampleCredential";

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let adapter = ScriptedAdapter::new(
        Script::builder()
            .text("Hello from the stack.")
            .complete("done")
            .build(),
    );
    let id = adapter.descriptor().id().clone();
    let shutdown = CancellationToken::new();
    let redactor = Redactor::builder().secret(CREDENTIAL).build()?;

    let preflight = PreflightLayer::for_adapter(&adapter)?;
    // The runtime stack, outermost first: what the adapter yields passes redaction first.
    let adapter_service = AdapterService::builder(adapter)
        .layer(RetryLayer::new(Backoff::new()).adapter(&id))
        .layer(TimeoutLayer::new().turn(Duration::from_secs(30)))
        .layer(ShutdownLayer::new(shutdown.clone()))
        .layer(RedactionLayer::new(Arc::new(redactor)))
        .build();
    // The admission stack, outermost first.
    let service = ServiceBuilder::new()
        .layer(TraceLayer::new())
        .layer(MetricsLayer::new().with_adapter(id.as_str()))
        .layer(IdempotencyLayer::default())
        .layer(preflight)
        .layer(CapacityLayer::new(16))
        .service(adapter_service);

    // 1. A normal run.
    let execution = service.clone().oneshot(ExecutionRequest::new("hi")).await?;
    report("normal", &execution.outcome().await, execution.log().len());

    // 2. The same idempotency key twice: one execution.
    let key = "order-42".parse()?;
    let first = service
        .clone()
        .oneshot(ExecutionRequest::new("hi").with_idempotency_key(key))
        .await?;
    let key = "order-42".parse()?;
    let again = service
        .clone()
        .oneshot(ExecutionRequest::new("hi").with_idempotency_key(key))
        .await?;
    println!(
        "{}",
        json!({"case": "idempotent", "sameExecution": first.id() == again.id()})
    );

    // 3. A credential in the output never reaches the log.
    let leaky = json!({"script": {"steps": [
        {"type": "text", "text": format!("the key is {CREDENTIAL}")},
        {"type": "complete"}
    ]}});
    let execution = service
        .clone()
        .oneshot(ExecutionRequest::new("hi").with_options(leaky))
        .await?;
    execution.outcome().await;
    let stored = serde_json::to_string(&execution.log().snapshot(Cursor::START))?;
    println!(
        "{}",
        json!({"case": "redaction", "credentialStored": stored.contains(CREDENTIAL)})
    );

    // 4. Preflight refuses what the adapter cannot do, before any provider work.
    let refused = service
        .clone()
        .oneshot(ExecutionRequest::new("hi").require(CapabilityKey::Skills))
        .await;
    let error = refused.err().map(|e| e.public());
    println!("{}", json!({"case": "preflight", "error": error}));

    shutdown.cancel();
    Ok(())
}

fn report(case: &str, outcome: &Outcome, events: usize) {
    let state = outcome.state();
    println!(
        "{}",
        json!({"case": case, "outcome": state, "events": events})
    );
}
