//! Runs one execution on the embedded default adapter and prints every event as a JSON line.
//!
//! ```sh
//! cargo run --example quickstart                 # the bundled script
//! cargo run --example quickstart -- my.json      # any scripted-adapter script
//! ```
//!
//! The execution runs through the default layer stack (`HarnessStack::defaults_for`). The
//! bundled script streams reasoning and text, asks to approve a `write_file` tool call
//! (this program approves it), creates an artifact and succeeds. For other scripts, the
//! program approves every tool call and dismisses forms (or submits them empty when they
//! cannot be dismissed). The outcome is printed last; the exit code is 0 only on success.

use std::process::ExitCode;

use futures_util::StreamExt;
use harness::action::{ActionKind, ActionRequest, ActionResponse, FormValues};
use harness::event::EventPayload;
use harness::id::Cursor;
use harness::scripted::{Script, ScriptedAdapter};
use harness::{ExecutionRequest, HarnessStack, Outcome};
use serde_json::json;
use tower::ServiceExt;

/// Approves every tool call; dismisses a form when it may, else submits it empty.
fn answer(request: &ActionRequest) -> ActionResponse {
    match &request.kind {
        ActionKind::ToolApproval(_) => request.approve_all(),
        ActionKind::FormInput(_) if request.dismissible => request.dismiss(),
        ActionKind::FormInput(_) => request.submit(FormValues::new()),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let script = match std::env::args_os().nth(1) {
        Some(path) => match Script::from_path(&path) {
            Ok(script) => script,
            Err(err) => {
                eprintln!("cannot use {}: {err}", path.to_string_lossy());
                return ExitCode::from(2);
            }
        },
        None => Script::quickstart(),
    };
    // The default layer stack (tracing, metrics, idempotency, preflight, capacity, retry,
    // redaction) over the service that drives the execution.
    let adapter = ScriptedAdapter::new(script);
    let stack = match HarnessStack::defaults_for(&adapter) {
        Ok(stack) => stack,
        Err(err) => {
            eprintln!("cannot build the layer stack: {err}");
            return ExitCode::from(1);
        }
    };
    let service = stack.service(adapter);
    let execution = match service
        .oneshot(ExecutionRequest::new("Summarize my notes"))
        .await
    {
        Ok(execution) => execution,
        Err(err) => {
            eprintln!("the execution was refused: {err}");
            return ExitCode::from(1);
        }
    };

    let mut events = execution.events(Cursor::START);
    while let Some(event) = events.next().await {
        println!("{}", serde_json::to_string(&*event).unwrap_or_default());
        if let EventPayload::ActionRequested(request) = event.payload()
            && let Err(err) = execution.respond(answer(request)).await
        {
            eprintln!("answering {} failed: {err}", request.id);
        }
    }

    let outcome = execution.outcome().await;
    let line = match &outcome {
        Outcome::Succeeded(s) => json!({"outcome": "succeeded", "summary": s.summary}),
        Outcome::Failed(err) => json!({"outcome": "failed", "error": err.public()}),
        Outcome::Cancelled(r) => {
            json!({"outcome": "cancelled", "source": r.source, "reason": r.reason})
        }
    };
    println!("{line}");
    if matches!(outcome, Outcome::Succeeded(_)) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
