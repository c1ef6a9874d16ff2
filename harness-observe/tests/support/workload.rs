//! A steady mix of executions on the scripted adapter through the default `HarnessStack`:
//! shared by `examples/prometheus.rs` (included with `#[path]`) and the tests of
//! `harness-observe`, so the tests check the very workload the example runs.
//!
//! One [`round`] runs seven executions and one idempotent replay:
//!
//! | execution | outcome |
//! |---|---|
//! | text, then complete | succeeded |
//! | an `authentication` error | failed (authentication) |
//! | an `unavailable` error, not retryable | failed (unavailable) |
//! | a segment that ends without a terminal item | failed (protocol) |
//! | a hang, cancelled by the caller once running | cancelled |
//! | a tool approval, approved | succeeded |
//! | an idempotent request, sent twice | succeeded (once) + one replay |

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::error::Error;

use futures_util::StreamExt;
use harness_core::action::{ApprovalResponse, ToolDecision};
use harness_core::event::{CancelReason, EventPayload};
use harness_core::id::Cursor;
use harness_core::service::{ExecutionHandle, ExecutionRequest, Outcome};
use harness_layers::stack::{HarnessStack, StackService};
use harness_scripted::{Script, ScriptedAdapter};
use serde_json::{Value, json};
use tower::ServiceExt;

/// Any error of the workload.
pub type BoxError = Box<dyn Error + Send + Sync>;

/// What the workload ran, by outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Executions started (replays excluded).
    pub started: u64,
    /// Executions that succeeded.
    pub succeeded: u64,
    /// Executions that failed, by error category.
    pub failed: BTreeMap<String, u64>,
    /// Executions cancelled.
    pub cancelled: u64,
    /// Calls answered with an existing execution.
    pub replays: u64,
    /// Approvals answered.
    pub approvals: u64,
}

impl Tally {
    /// Executions that failed, all categories.
    pub fn failed_total(&self) -> u64 {
        self.failed.values().sum()
    }

    /// Executions that ended.
    pub fn finished(&self) -> u64 {
        self.succeeded + self.failed_total() + self.cancelled
    }

    fn count(&mut self, outcome: &Outcome) {
        match outcome {
            Outcome::Succeeded(_) => self.succeeded += 1,
            Outcome::Failed(error) => {
                *self
                    .failed
                    .entry(error.category().as_str().to_owned())
                    .or_default() += 1;
            }
            Outcome::Cancelled(_) => self.cancelled += 1,
        }
    }
}

/// The scripted adapter and the default stack over it.
pub fn service() -> Result<StackService, BoxError> {
    let adapter = ScriptedAdapter::new(Script::quickstart());
    let stack = HarnessStack::defaults_for(&adapter)?;
    Ok(stack.service(adapter))
}

fn script(steps: &Value) -> Value {
    json!({"script": {"steps": steps}})
}

async fn run(
    service: &StackService,
    request: ExecutionRequest,
    tally: &mut Tally,
) -> Result<ExecutionHandle, BoxError> {
    let execution = service.clone().oneshot(request).await?;
    tally.started += 1;
    Ok(execution)
}

/// Runs one round (see the module docs); `round` makes its idempotency key unique.
pub async fn round(service: &StackService, round: u64, tally: &mut Tally) -> Result<(), BoxError> {
    // Success, and three failures of different categories.
    let plain = [
        json!([{"type": "text", "text": "hello"}, {"type": "complete", "summary": "done"}]),
        json!([{"type": "error", "category": "authentication", "message": "the API key was refused"}]),
        json!([{"type": "error", "category": "unavailable", "message": "the provider is down", "retryable": false}]),
        json!([{"type": "text", "text": "partial"}, {"type": "endWithoutTerminal"}]),
    ];
    for steps in plain {
        let request = ExecutionRequest::new("go").with_options(script(&steps));
        let execution = run(service, request, tally).await?;
        tally.count(&execution.outcome().await);
    }

    // Cancelled by the caller once it runs.
    let request = ExecutionRequest::new("wait").with_options(script(&json!([{"type": "hang"}])));
    let execution = run(service, request, tally).await?;
    let mut events = execution.events(Cursor::START);
    while let Some(event) = events.next().await {
        if matches!(event.payload(), EventPayload::RunRunning) {
            break;
        }
    }
    execution.cancel(CancelReason::new("the caller changed its mind"));
    tally.count(&execution.outcome().await);

    // A tool approval, approved.
    let steps = json!([
        {"type": "approval", "calls": [{"callId": "call_1", "tool": "shell", "arguments": {"cmd": "ls"}}]},
        {"type": "complete", "summary": "listed"}
    ]);
    let request = ExecutionRequest::new("list").with_options(script(&steps));
    let execution = run(service, request, tally).await?;
    let mut events = execution.events(Cursor::START);
    let action = loop {
        let event = events.next().await.ok_or("the run ended without asking")?;
        if let EventPayload::ActionRequested(action) = event.payload() {
            break action.clone();
        }
    };
    let approve = ApprovalResponse::decide(
        action.id,
        action.revision,
        [ToolDecision::approve("call_1".parse()?)],
    );
    execution.respond(approve.into()).await?;
    tally.approvals += 1;
    tally.count(&execution.outcome().await);

    // The same idempotent request twice: one execution, one replay.
    let steps = json!([{"type": "text", "text": "once"}, {"type": "complete"}]);
    let key = format!("round-{round}");
    let request = ExecutionRequest::new("once")
        .with_options(script(&steps))
        .with_idempotency_key(key.parse()?);
    let first = run(service, request, tally).await?;
    let request = ExecutionRequest::new("once")
        .with_options(script(&steps))
        .with_idempotency_key(key.parse()?);
    let again = service.clone().oneshot(request).await?;
    if again.id() != first.id() {
        return Err("an idempotent replay started a second execution".into());
    }
    tally.replays += 1;
    tally.count(&first.outcome().await);
    Ok(())
}
