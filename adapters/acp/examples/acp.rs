//! Runs any ACP agent command, streams its events and asks on the terminal for approvals and
//! for the fields of the forms the agent asks for (elicitation).
//!
//! ```text
//! cargo run -p harness-acp --example acp -- "<message>" <agent program> [args...]
//! ```
//!
//! Here the operator and the caller are one person: the command line configures the agent
//! ([`AcpAgent`], the operator's side), and the execution request carries only the message.
//!
//! The agent runs in the current directory with only `PATH` and `HOME` from the environment,
//! plus the variables named (comma-separated) in `HARNESS_ACP_ENV`, and may read files in
//! the current directory.

use std::io::Write as _;

use futures_util::StreamExt;
use harness_acp::{AcpAdapter, AcpAgent, FileAccess};
use harness_core::action::{
    ActionKind, ApprovalResponse, DecisionKind, FieldKind, FormResponse, FormValues, ToolDecision,
};
use harness_core::event::EventPayload;
use harness_core::id::Cursor;
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
use tower::ServiceExt;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(message), command) = (args.next(), args.collect::<Vec<_>>()) else {
        return Err("usage: acp <message> <agent program> [args...]".into());
    };
    if command.is_empty() {
        return Err("usage: acp <message> <agent program> [args...]".into());
    }
    let mut agent = AcpAgent::new(command, std::env::current_dir()?)
        .allow_env("PATH")
        .allow_env("HOME")
        .with_files(FileAccess::Read);
    if let Ok(extra) = std::env::var("HARNESS_ACP_ENV") {
        for name in extra.split(',').filter(|n| !n.is_empty()) {
            agent = agent.allow_env(name);
        }
    }

    let service = AdapterService::new(AcpAdapter::new(agent)?);
    let execution = service.oneshot(ExecutionRequest::new(message)).await?;
    let mut events = execution.events(Cursor::START);
    while let Some(event) = events.next().await {
        match event.payload() {
            EventPayload::MessageDelta(d) => print!("{}", d.text),
            EventPayload::ReasoningDelta(d) => print!("\x1b[2m{}\x1b[0m", d.text),
            EventPayload::ToolCallStarted(c) => println!("\n[tool {}: {}]", c.call_id, c.tool),
            EventPayload::ToolCallCompleted(c) => println!("\n[tool {} ended]", c.call_id),
            EventPayload::ActionRequested(request) => {
                let approval = match &request.kind {
                    ActionKind::ToolApproval(approval) => approval,
                    ActionKind::FormInput(form) => {
                        println!("\n{}", form.title().unwrap_or("the agent asks:"));
                        let mut values = FormValues::new();
                        for field in form.fields() {
                            let optional = if field.required { "" } else { " (optional)" };
                            let value = loop {
                                let line = ask(&format!("{}{optional}: ", field.label)).await?;
                                let line = line.trim();
                                if line.is_empty() {
                                    break None;
                                }
                                match &field.kind {
                                    FieldKind::Number { .. } => match line.parse::<f64>() {
                                        Ok(n) => break Some(serde_json::Value::from(n)),
                                        Err(_) => println!("(a number, please)"),
                                    },
                                    FieldKind::Boolean => {
                                        break Some(line.eq_ignore_ascii_case("y").into());
                                    }
                                    _ => break Some(line.into()),
                                }
                            };
                            if let Some(value) = value {
                                values.insert(field.name.as_str(), value);
                            }
                        }
                        execution
                            .respond(
                                FormResponse::submit(request.id.clone(), request.revision, values)
                                    .into(),
                            )
                            .await?;
                        continue;
                    }
                };
                let mut decisions = Vec::new();
                for call in approval.calls() {
                    let line = ask(&format!(
                        "\nallow `{}` {}? [y/N] ",
                        call.tool(),
                        call.arguments()
                    ))
                    .await?;
                    let yes = line.trim().eq_ignore_ascii_case("y");
                    decisions.push(if yes && call.allows(DecisionKind::Approve) {
                        ToolDecision::approve(call.call_id().clone())
                    } else {
                        ToolDecision::reject(call.call_id().clone())
                    });
                }
                execution
                    .respond(
                        ApprovalResponse::decide(request.id.clone(), request.revision, decisions)
                            .into(),
                    )
                    .await?;
            }
            _ => {}
        }
        std::io::stdout().flush()?;
        if event.kind().is_terminal() {
            break;
        }
    }
    match execution.outcome().await {
        Outcome::Succeeded(_) => println!("\noutcome: succeeded"),
        Outcome::Failed(err) => println!("\noutcome: failed ({})", err.public().message),
        Outcome::Cancelled(_) => println!("\noutcome: cancelled"),
    }
    Ok(())
}

/// Prints `prompt` and reads one line from the terminal.
async fn ask(prompt: &str) -> Result<String, Box<dyn std::error::Error>> {
    print!("{prompt}");
    std::io::stdout().flush()?;
    let line = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await??;
    Ok(line)
}
