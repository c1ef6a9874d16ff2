//! The scripted adapter's knobs for the conformance suite: scripts for each behaviour it
//! asks for. Shared by the suite's run in process (`conformance.rs`) and through the
//! Sandbox Worker Protocol (`worker.rs`).

use harness_conformance::{Behaviour, Knobs};
use harness_core::service::ExecutionRequest;
use harness_scripted::{Script, ScriptedAdapter, ScriptedOptions};
use serde_json::{Value, json};

/// Scripts for each behaviour the suite asks for.
#[derive(Debug)]
pub(crate) struct ScriptedKnobs;

fn request(steps: Value) -> ExecutionRequest {
    let mut script = serde_json::Map::new();
    script.insert("steps".to_owned(), steps);
    let script: Script = serde_json::from_value(Value::Object(script)).expect("valid script");
    ExecutionRequest::new("conformance")
        .with_options(ScriptedOptions::with_script(script).to_value())
}

impl Knobs for ScriptedKnobs {
    type Adapter = ScriptedAdapter;

    fn adapter(&self) -> ScriptedAdapter {
        ScriptedAdapter::quickstart()
    }

    fn plain_request(&self) -> ExecutionRequest {
        request(json!([{"type": "text", "text": "hello"}, {"type": "complete"}]))
    }

    fn request_for(&self, behaviour: &Behaviour) -> Option<ExecutionRequest> {
        let steps = match behaviour {
            Behaviour::StreamText => json!([
                {"type": "text", "text": "one ", "repeat": 3},
                {"type": "complete", "summary": "done"}
            ]),
            Behaviour::StreamReasoning => json!([
                {"type": "reasoning", "text": "thinking", "repeat": 2},
                {"type": "text", "text": "answer"},
                {"type": "complete"}
            ]),
            Behaviour::StreamUsage => json!([
                {"type": "text", "text": "answer"},
                {"type": "usage", "inputTokens": 12, "outputTokens": 3},
                {"type": "complete"}
            ]),
            Behaviour::ToolSuccess => json!([
                {"type": "toolCall", "callId": "call_ok", "tool": "read_file",
                 "arguments": {"path": "a.txt"}, "output": {"bytes": 3}},
                {"type": "complete"}
            ]),
            Behaviour::ToolError => json!([
                {"type": "toolCall", "callId": "call_err", "tool": "read_file",
                 "arguments": {"path": "missing.txt"}, "failure": "no such file"},
                {"type": "complete"}
            ]),
            Behaviour::ToolApproval { calls, editable } => {
                let allowed = if *editable {
                    json!(["approve", "reject", "edit"])
                } else {
                    json!(["approve", "reject"])
                };
                let calls: Vec<Value> = (0..*calls)
                    .map(|n| {
                        json!({"callId": format!("call_{n}"), "tool": "shell",
                               "arguments": {"cmd": format!("echo {n}")},
                               "allowed": allowed, "output": {"exitCode": 0}})
                    })
                    .collect();
                json!([{"type": "approval", "calls": calls}, {"type": "complete"}])
            }
            Behaviour::FormInput => json!([
                {"type": "form", "title": "Who?", "fields": [
                    {"name": "name", "label": "Name", "required": false,
                     "kind": {"type": "text", "maxLength": 40}}
                ]},
                {"type": "text", "text": "hello {{name}}"},
                {"type": "complete"}
            ]),
            Behaviour::Hang => json!([{"type": "text", "text": "working"}, {"type": "hang"}]),
            Behaviour::Fail {
                category,
                diagnostic,
            } => json!([
                {"type": "text", "text": "trying"},
                {"type": "error", "category": category, "message": "the provider failed",
                 "diagnostic": diagnostic}
            ]),
            Behaviour::Panic { message } => json!([{"type": "panic", "message": message}]),
            Behaviour::MalformedOrder => json!([{"type": "eventAfterComplete"}]),
            Behaviour::SlowInitialize => {
                // Far past every bound: only a cancel ends it.
                let script = Script::builder().text("started").complete("done").build();
                let options = ScriptedOptions::with_script(script).with_initialize_delay_ms(60_000);
                return Some(ExecutionRequest::new("conformance").with_options(options.to_value()));
            }
            Behaviour::ApprovalThenHang => json!([
                {"type": "approval", "calls": [{"callId": "call_0", "tool": "shell",
                  "arguments": {"cmd": "echo 0"}, "output": {"exitCode": 0}}]},
                {"type": "text", "text": "working"},
                {"type": "hang"}
            ]),
            Behaviour::SequentialApprovals => json!([
                {"type": "approval", "calls": [{"callId": "call_a", "tool": "shell",
                  "arguments": {"cmd": "echo a"}, "output": {"exitCode": 0}}]},
                {"type": "text", "text": "one more"},
                {"type": "approval", "calls": [{"callId": "call_b", "tool": "shell",
                  "arguments": {"cmd": "echo b"}, "output": {"exitCode": 0}}]},
                {"type": "complete"}
            ]),
            Behaviour::EchoTraceContext => json!([
                {"type": "text", "text": "{{traceparent}}"},
                {"type": "complete"}
            ]),
            Behaviour::EmitSecret { secret } => json!([
                {"type": "text", "text": format!("the key is {secret}")},
                {"type": "complete"}
            ]),
            Behaviour::Remember { marker } => json!([
                {"type": "remember", "text": marker},
                {"type": "text", "text": "kept"},
                {"type": "complete"}
            ]),
            Behaviour::Recall => json!([{"type": "recall"}, {"type": "complete"}]),
            _ => return None,
        };
        Some(request(steps))
    }

    fn process_isolated(&self) -> bool {
        // This test binary runs one test: the suite is alone in its process.
        true
    }
}
