//! The AG-UI face: the same executions as [AG-UI](https://docs.ag-ui.com) runs, for front
//! ends built on its clients.
//!
//! `POST /v1/agui/{adapter}` takes a `RunAgentInput` and answers with server-sent AG-UI
//! events:
//!
//! - **A new run** (no `resume`): an execution of the last user message, on the thread
//!   `threadId` (its conversation, when the id is a valid conversation id), keyed by
//!   `runId` (its idempotency key: the same `runId` again returns the same execution).
//! - **Events**: `RUN_STARTED`; text as `TEXT_MESSAGE_START`/`CONTENT`/`END`; reasoning as
//!   `REASONING_START`, `REASONING_MESSAGE_START`/`CONTENT`/`END`, `REASONING_END`; each tool
//!   call as `TOOL_CALL_START`, `TOOL_CALL_ARGS` (its arguments), `TOOL_CALL_END`, and
//!   `TOOL_CALL_RESULT` when it completes; artifacts as `CUSTOM` `harness.artifact`; the end
//!   as `RUN_FINISHED` (a summary as `result`), `RUN_FINISHED` with outcome `cancelled`, or
//!   `RUN_ERROR` (the public error's message and code).
//! - **Actions are interrupts**: an approval or a form ends the AG-UI run with
//!   `RUN_FINISHED` and outcome `interrupt`; its interrupt's id is
//!   `<execution id>/<action id>`, its `metadata.action` the action request. The execution
//!   waits. A run with `resume` answers it: each entry's `payload` is the answer (an
//!   [`ActionResponse`], its `actionId` left out), or status `cancelled` dismisses the
//!   action; the events after the interrupt follow, as a new run.
//! - **Resumable**: every frame's SSE id is `<seq>:<n>` (the execution event it comes from,
//!   and its place among that event's frames); the same request again with `Last-Event-ID`
//!   sends only the frames after it.

use std::collections::VecDeque;
use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use harness_core::action::{ActionKind, ActionResponse};
use harness_core::event::{Event, EventPayload};
use harness_core::id::{ActionId, ExecutionId};
use serde_json::{Value, json};

/// Turns one execution's events into AG-UI events, as one AG-UI run.
pub(crate) struct Converter {
    thread: String,
    run: String,
    execution: ExecutionId,
    text: Option<String>,
    reasoning: Option<String>,
}

impl Converter {
    pub(crate) fn new(thread: String, run: String, execution: ExecutionId) -> Self {
        Self {
            thread,
            run,
            execution,
            text: None,
            reasoning: None,
        }
    }

    /// The frame that opens the run.
    pub(crate) fn started(&self) -> Value {
        json!({"type": "RUN_STARTED", "threadId": self.thread, "runId": self.run})
    }

    fn close(&mut self, out: &mut Vec<Value>) {
        if let Some(id) = self.text.take() {
            out.push(json!({"type": "TEXT_MESSAGE_END", "messageId": id}));
        }
        if let Some(id) = self.reasoning.take() {
            out.push(json!({"type": "REASONING_MESSAGE_END", "messageId": id}));
            out.push(json!({"type": "REASONING_END", "messageId": id}));
        }
    }

    /// The AG-UI events of `event`, and whether the AG-UI run ends with it.
    pub(crate) fn convert(&mut self, event: &Event) -> (Vec<Value>, bool) {
        let mut out = Vec::new();
        let seq = event.seq().get();
        let ends = match event.payload() {
            EventPayload::MessageDelta(delta) if !delta.text.is_empty() => {
                if let Some(id) = self.reasoning.take() {
                    out.push(json!({"type": "REASONING_MESSAGE_END", "messageId": id}));
                    out.push(json!({"type": "REASONING_END", "messageId": id}));
                }
                let id = match &self.text {
                    Some(id) => id.clone(),
                    None => {
                        let id = format!("msg_{}_{seq}", self.execution);
                        out.push(json!({"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant"}));
                        self.text = Some(id.clone());
                        id
                    }
                };
                out.push(
                    json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": delta.text}),
                );
                false
            }
            EventPayload::ReasoningDelta(delta) if !delta.text.is_empty() => {
                if let Some(id) = self.text.take() {
                    out.push(json!({"type": "TEXT_MESSAGE_END", "messageId": id}));
                }
                let id = match &self.reasoning {
                    Some(id) => id.clone(),
                    None => {
                        let id = format!("reasoning_{}_{seq}", self.execution);
                        out.push(json!({"type": "REASONING_START", "messageId": id}));
                        out.push(json!({"type": "REASONING_MESSAGE_START", "messageId": id, "role": "reasoning"}));
                        self.reasoning = Some(id.clone());
                        id
                    }
                };
                out.push(json!({"type": "REASONING_MESSAGE_CONTENT", "messageId": id, "delta": delta.text}));
                false
            }
            EventPayload::ToolCallStarted(call) => {
                self.close(&mut out);
                let id = call.call_id.to_string();
                out.push(
                    json!({"type": "TOOL_CALL_START", "toolCallId": id, "toolCallName": call.tool}),
                );
                out.push(json!({"type": "TOOL_CALL_ARGS", "toolCallId": id, "delta": call.arguments.to_string()}));
                out.push(json!({"type": "TOOL_CALL_END", "toolCallId": id}));
                false
            }
            EventPayload::ToolCallCompleted(done) => {
                self.close(&mut out);
                let content = serde_json::to_value(&**done)
                    .ok()
                    .and_then(|v| v.get("output").cloned())
                    .unwrap_or(Value::Null);
                out.push(json!({
                    "type": "TOOL_CALL_RESULT",
                    "messageId": format!("tool_{}_{seq}", self.execution),
                    "toolCallId": done.call_id.to_string(),
                    "content": content.to_string(),
                    "role": "tool",
                }));
                false
            }
            EventPayload::ArtifactCreated(artifact) => {
                self.close(&mut out);
                out.push(json!({"type": "CUSTOM", "name": "harness.artifact", "value": artifact}));
                false
            }
            EventPayload::ActionRequested(request) => {
                self.close(&mut out);
                let (reason, tool_call) = match &request.kind {
                    ActionKind::ToolApproval(approval) => (
                        "tool_approval",
                        approval.calls().first().map(|c| c.call_id().to_string()),
                    ),
                    ActionKind::FormInput(_) => ("form_input", None),
                };
                let mut interrupt = json!({
                    "id": format!("{}/{}", self.execution, request.id),
                    "reason": reason,
                    "metadata": {"action": request, "executionId": self.execution},
                });
                if let Some(call) = tool_call {
                    interrupt["toolCallId"] = json!(call);
                }
                out.push(json!({
                    "type": "RUN_FINISHED",
                    "threadId": self.thread,
                    "runId": self.run,
                    "outcome": {"type": "interrupt", "interrupts": [interrupt]},
                }));
                true
            }
            EventPayload::RunSucceeded(done) => {
                self.close(&mut out);
                let mut finished =
                    json!({"type": "RUN_FINISHED", "threadId": self.thread, "runId": self.run});
                if let Some(summary) = &done.summary {
                    finished["result"] = json!(summary);
                }
                out.push(finished);
                true
            }
            EventPayload::RunFailed(failed) => {
                self.close(&mut out);
                out.push(json!({
                    "type": "RUN_ERROR",
                    "message": failed.error.message,
                    "code": failed.error.code.as_str(),
                }));
                true
            }
            EventPayload::RunCancelled(_) => {
                self.close(&mut out);
                out.push(json!({
                    "type": "RUN_FINISHED",
                    "threadId": self.thread,
                    "runId": self.run,
                    "outcome": {"type": "cancelled"},
                }));
                true
            }
            _ => false,
        };
        (out, ends)
    }
}

/// Where a stream resumes: after frame `n` of event `seq` (`Last-Event-ID: <seq>:<n>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Resume {
    pub(crate) seq: u64,
    pub(crate) frame: Option<usize>,
}

impl Resume {
    /// Parses `<seq>:<n>` (or a bare `<seq>`: after all of its frames).
    pub(crate) fn parse(text: &str) -> Option<Self> {
        match text.trim().split_once(':') {
            Some((seq, n)) => Some(Self {
                seq: seq.parse().ok()?,
                frame: Some(n.parse().ok()?),
            }),
            None => Some(Self {
                seq: text.trim().parse().ok()?,
                frame: None,
            }),
        }
    }
}

/// The AG-UI frames (SSE id and event) of `events`, from after `from` (the execution event
/// this AG-UI run starts after), resumed after `resume`, ending with the frame that ends
/// the AG-UI run.
pub(crate) fn frames(
    converter: Converter,
    events: impl Stream<Item = Arc<Event>> + Send + 'static,
    from: u64,
    resume: Option<Resume>,
) -> impl Stream<Item = (String, Value)> + Send + 'static {
    struct State<E> {
        converter: Converter,
        events: std::pin::Pin<Box<E>>,
        pending: VecDeque<(String, Value)>,
        opened: bool,
        ended: bool,
    }
    let after = move |seq: u64, n: usize| match resume {
        None => true,
        Some(Resume {
            seq: at,
            frame: None,
        }) => seq > at,
        Some(Resume {
            seq: at,
            frame: Some(k),
        }) => seq > at || (seq == at && n > k),
    };
    let state = State {
        converter,
        events: Box::pin(events),
        pending: VecDeque::new(),
        opened: false,
        ended: false,
    };
    futures_util::stream::unfold(state, move |mut s| async move {
        loop {
            if let Some(frame) = s.pending.pop_front() {
                return Some((frame, s));
            }
            if s.ended {
                return None;
            }
            if !s.opened {
                s.opened = true;
                if after(from, 0) {
                    s.pending
                        .push_back((format!("{from}:0"), s.converter.started()));
                }
                continue;
            }
            let event = s.events.next().await?;
            let seq = event.seq().get();
            if seq <= from {
                continue;
            }
            // Converted even when resumed past it: the converter's state (an open message)
            // comes from every event of the run.
            let (out, ends) = s.converter.convert(&event);
            for (n, frame) in out.into_iter().enumerate() {
                if after(seq, n + 1) {
                    s.pending.push_back((format!("{seq}:{}", n + 1), frame));
                }
            }
            s.ended = ends;
        }
    })
}

/// What an interrupt id names: the execution and the action.
pub(crate) fn interrupt(id: &str) -> Option<(ExecutionId, ActionId)> {
    let (execution, action) = id.split_once('/')?;
    Some((execution.parse().ok()?, action.parse().ok()?))
}

/// The answer a resume entry gives (`payload`: an action response without its `actionId`;
/// status `cancelled`: dismissed).
pub(crate) fn answer(
    entry: &Value,
    request: &harness_core::action::ActionRequest,
) -> Result<ActionResponse, String> {
    match entry["status"].as_str() {
        Some("cancelled") => Ok(request.dismiss()),
        Some("resolved") => {
            let mut payload = entry["payload"].clone();
            let Some(map) = payload.as_object_mut() else {
                return Err(
                    "a resolved resume entry's `payload` must be the answer: an action \
                            response object such as {\"type\": \"tool_approval\", \"revision\": 1, \
                            \"answer\": {...}}"
                        .into(),
                );
            };
            map.insert("actionId".into(), json!(request.id));
            serde_json::from_value(payload)
                .map_err(|e| format!("the resume entry's `payload`: {e}"))
        }
        _ => Err("a resume entry's `status` is `resolved` or `cancelled`".into()),
    }
}

/// The seq of the `action.requested` event of `action` in `events`, if any.
pub(crate) fn requested_at(events: &[Event], action: &ActionId) -> Option<u64> {
    events.iter().find_map(|e| match e.payload() {
        EventPayload::ActionRequested(request) if request.id == *action => Some(e.seq().get()),
        _ => None,
    })
}

/// The text of the last user message of a `RunAgentInput` (a string, or the text parts of
/// a list of parts).
pub(crate) fn last_user_message(input: &serde_json::Map<String, Value>) -> Option<String> {
    let message = input
        .get("messages")?
        .as_array()?
        .iter()
        .rev()
        .find(|m| m["role"] == "user")?;
    let text = match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|p| p["type"] == "text")
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => return None,
    };
    (!text.is_empty()).then_some(text)
}
