//! The operator's middleware policy over a script's tool calls.
//!
//! A script's `toolCall` steps are the harness's own tools (nothing runs: the script gives
//! the outcome), so the runtime applies the policy ([`RuntimeContext::middleware`]) to them
//! when it is created, step by step, as a `ToolHandle` would to a portable tool:
//!
//! - a denied tool's call fails with the policy's `TOOL_DENIED_BY_POLICY` message instead
//!   of its scripted outcome; arguments past the cap fail the same way
//!   (`TOOL_ARGUMENTS_TOO_LARGE`); rewrites change the arguments the call reports;
//! - a call of a tool that requires approval becomes a one-call tool approval (approve or
//!   reject; its approved output the scripted one), as if the script had an `approval`
//!   step there;
//! - the outputs of calls (and of `approval` steps' calls) and failure messages are
//!   redacted and truncated as the policy says.
//!
//! # Decisions where the spec is silent
//!
//! - A scripted call that fails and requires approval stays a failing call (an approval's
//!   calls only succeed or are rejected).
//! - `approval` steps are the script's own interrupts: their calls are not denied (the
//!   caller decides them anyway), only their outputs redacted and bounded.
//!
//! [`RuntimeContext::middleware`]: harness_core::adapter::RuntimeContext::middleware

use harness_core::action::{ApprovalRequest, ToolCallApproval};
use harness_core::event::ToolCallOutcome;
use harness_core::middleware::{PortableMiddlewarePolicy, ToolAction};
use harness_core::tool::{BoundedFailure, ToolOutcome};
use serde_json::{Value, json};

use crate::script::{Op, Script};

/// `script` with `policy` applied to its tool calls (itself when the policy allows all).
pub(crate) fn governed(script: Script, policy: &PortableMiddlewarePolicy) -> Script {
    if policy.is_allow_all() {
        return script;
    }
    let ops = script.ops().iter().map(|op| govern(op, policy)).collect();
    script.with_ops(ops)
}

fn govern(op: &Op, policy: &PortableMiddlewarePolicy) -> Op {
    match op {
        Op::ToolCall { call, outcome } => {
            let decision = policy.decide(&call.tool);
            let mut call = call.clone();
            let arguments = match decision.admit(&call.tool, call.arguments.clone()) {
                Ok(arguments) => arguments,
                Err(failure) => {
                    return Op::ToolCall {
                        call,
                        outcome: ToolCallOutcome::Failure {
                            message: failure.message().to_owned(),
                        },
                    };
                }
            };
            call.arguments = arguments;
            let outcome = match outcome {
                ToolCallOutcome::Success { output } => {
                    match decision.result(ToolOutcome::Success(output.clone())) {
                        ToolOutcome::Success(output) => ToolCallOutcome::Success { output },
                        _ => outcome.clone(),
                    }
                }
                ToolCallOutcome::Failure { message } => {
                    match decision.result(ToolOutcome::Failure(BoundedFailure::new(message))) {
                        ToolOutcome::Failure(f) => ToolCallOutcome::Failure {
                            message: f.message().to_owned(),
                        },
                        _ => outcome.clone(),
                    }
                }
                other => other.clone(),
            };
            if decision.action() == ToolAction::RequireApproval
                && let ToolCallOutcome::Success { output } = &outcome
                && let Ok(request) = ToolCallApproval::new(
                    call.call_id.clone(),
                    call.tool.clone(),
                    call.arguments.clone(),
                    json!({"type": "object"}),
                )
                .and_then(|a| ApprovalRequest::new([a]))
            {
                return Op::Approval {
                    id: None,
                    request,
                    outputs: vec![output.clone()],
                };
            }
            Op::ToolCall { call, outcome }
        }
        Op::Approval {
            id,
            request,
            outputs,
        } => Op::Approval {
            id: id.clone(),
            request: request.clone(),
            outputs: request
                .calls()
                .iter()
                .zip(outputs)
                .map(|(call, output)| {
                    match policy
                        .decide(call.tool())
                        .result(ToolOutcome::Success(output.clone()))
                    {
                        ToolOutcome::Success(v) => v,
                        _ => Value::Null,
                    }
                })
                .collect(),
        },
        other => other.clone(),
    }
}
