//! The stream that runs a script: one run segment per call, lean on the per-delta path.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};

use futures_core::Stream;
use futures_util::future::{Either, select};
use harness_core::action::ActionRequest;
use harness_core::adapter::{AdapterEvent, EventResult};
use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::event::{Content, RunSucceeded, TextDelta, ToolCall, ToolCallCompleted};
use harness_core::id::{ActionId, ExecutionId};
use harness_core::session::{ScopedThreadState, StateKey};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::script::{Op, Script, build_artifact};

/// Submitted form values, rendered once as the text that replaces `{{name}}`.
pub(crate) type Values = BTreeMap<String, String>;

/// The text a submitted value renders as: a string as itself, anything else as JSON.
pub(crate) fn render_value(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Fills `{{name}}` placeholders (spaces inside the braces allowed) from `values`; a
/// placeholder without a value stays as written. `None` when nothing would change.
pub(crate) fn render(template: &str, values: &Values) -> Option<String> {
    if values.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    let mut changed = false;
    while let Some(open) = rest.find("{{") {
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            break;
        };
        out.push_str(&rest[..open]);
        match values.get(after[..close].trim()) {
            Some(value) => {
                out.push_str(value);
                changed = true;
            }
            None => out.push_str(&rest[open..open + 2 + close + 2]),
        }
        rest = &after[close + 2..];
    }
    out.push_str(rest);
    changed.then_some(out)
}

/// An interrupt the runtime is paused on, and the step that raised it.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub(crate) interrupt: ActionRequest,
    pub(crate) step: usize,
}

/// A runtime's position in its script, shared with the stream of the current segment.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// The index of the next step to run.
    pub(crate) next: usize,
    /// The open interrupt.
    pub(crate) pending: Option<Pending>,
    /// Whether a segment is running (started and not yet ended).
    pub(crate) active: bool,
    /// Submitted form values, for placeholders.
    pub(crate) values: Arc<Values>,
}

pub(crate) fn lock(progress: &Mutex<Progress>) -> std::sync::MutexGuard<'_, Progress> {
    // Every update under this lock is a plain assignment: a poisoned lock is consistent.
    progress.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn cancelled_error() -> HarnessError {
    HarnessError::new(ErrorCategory::Cancelled, "the run was cancelled")
}

/// A `delay` or `hang` in progress: resolves to `true` when the wait elapsed and `false`
/// when the run was cancelled.
type Wait = Pin<Box<dyn Future<Output = bool> + Send>>;

/// A `remember` or `recall` in progress: what to yield next, if anything.
type Io = Pin<Box<dyn Future<Output = Result<Option<AdapterEvent>, HarnessError>> + Send>>;

/// Where `remember` keeps its texts in the conversation's thread state.
const MEMORY_KEY: &str = "scripted/memory";

fn memory_key() -> StateKey {
    MEMORY_KEY.parse().expect("a valid state key")
}

fn no_conversation(step: &str) -> HarnessError {
    HarnessError::new(
        ErrorCategory::Configuration,
        format!("a `{step}` step needs a conversation: start the execution with a conversation id"),
    )
}

async fn remember(
    state: ScopedThreadState,
    text: String,
) -> Result<Option<AdapterEvent>, HarnessError> {
    let key = memory_key();
    let (mut kept, version) = match state.get_json::<Vec<String>>(&key).await? {
        Some((kept, version)) => (kept, Some(version)),
        None => (Vec::new(), None),
    };
    let size: usize = kept.iter().map(String::len).sum::<usize>() + text.len();
    if size > crate::script::MAX_MEMORY {
        return Err(HarnessError::new(
            ErrorCategory::Configuration,
            format!(
                "the conversation would keep {size} bytes: a conversation keeps at most {}; \
                 clear the session to start afresh",
                crate::script::MAX_MEMORY
            ),
        ));
    }
    kept.push(text);
    state.put_json(&key, &kept, version).await?;
    Ok(None)
}

async fn recall(state: ScopedThreadState) -> Result<Option<AdapterEvent>, HarnessError> {
    let kept = state
        .get_json::<Vec<String>>(&memory_key())
        .await?
        .map(|(kept, _)| kept)
        .unwrap_or_default();
    Ok((!kept.is_empty()).then(|| delta(false, kept.join("\n"))))
}

/// The remaining deltas of a `repeat`ed text step.
struct Repeat {
    op: usize,
    remaining: u32,
    rendered: Option<String>,
}

/// Runs a script from a position to the end of one run segment.
pub(crate) struct ScriptStream {
    script: Script,
    pos: usize,
    repeat: Option<Repeat>,
    /// Items to yield before anything else (tool activity around interrupts, trailing faults).
    queue: VecDeque<EventResult>,
    wait: Option<Wait>,
    io: Option<Io>,
    /// The conversation's thread state, when the execution has a conversation.
    state: Option<ScopedThreadState>,
    token: CancellationToken,
    values: Arc<Values>,
    execution_id: ExecutionId,
    /// Where the runtime learns how the segment ended; `None` for a raw stream.
    progress: Option<Arc<Mutex<Progress>>>,
    done: bool,
}

impl ScriptStream {
    pub(crate) fn new(
        script: Script,
        pos: usize,
        token: CancellationToken,
        values: Arc<Values>,
        execution_id: ExecutionId,
        progress: Option<Arc<Mutex<Progress>>>,
    ) -> Self {
        Self {
            script,
            pos,
            repeat: None,
            queue: VecDeque::new(),
            wait: None,
            io: None,
            state: None,
            token,
            values,
            execution_id,
            progress,
            done: false,
        }
    }

    /// Gives `remember` and `recall` steps the conversation's thread state.
    pub(crate) fn with_state(mut self, state: Option<ScopedThreadState>) -> Self {
        self.state = state;
        self
    }

    /// Queues items to yield before the next step (the completions of a resumed approval).
    pub(crate) fn with_prefix(mut self, items: impl IntoIterator<Item = EventResult>) -> Self {
        self.queue.extend(items);
        self
    }

    /// Ends the segment and tells the runtime where it stopped.
    fn finish(&mut self, pending: Option<Pending>) {
        self.done = true;
        self.repeat = None;
        self.wait = None;
        self.io = None;
        if let Some(progress) = &self.progress {
            let mut progress = lock(progress);
            progress.next = self.pos;
            progress.active = false;
            progress.pending = pending;
        }
    }

    fn cancelled(&mut self) -> EventResult {
        self.finish(None);
        Err(cancelled_error())
    }

    /// The next delta of a repeated text step.
    fn next_repeat(&mut self) -> Option<AdapterEvent> {
        let repeat = self.repeat.as_mut()?;
        let Some(Op::Delta {
            text, reasoning, ..
        }) = self.script.ops().get(repeat.op)
        else {
            self.repeat = None;
            return None;
        };
        repeat.remaining = repeat.remaining.saturating_sub(1);
        let text = if repeat.remaining == 0 {
            let last = self.repeat.take().and_then(|r| r.rendered);
            last.unwrap_or_else(|| text.clone())
        } else {
            repeat.rendered.clone().unwrap_or_else(|| text.clone())
        };
        Some(delta(*reasoning, text))
    }

    /// Runs the next step: `Some(item)` to yield, `None` when the step only queued items,
    /// started a wait or ended the segment.
    fn advance(&mut self) -> Option<EventResult> {
        let index = self.pos;
        let script = self.script.clone();
        let Some(op) = script.ops().get(index) else {
            // The script ran out of steps: the run completes.
            self.finish(None);
            return Some(Ok(AdapterEvent::Completed(RunSucceeded::default())));
        };
        self.pos += 1;
        match op {
            Op::Delta {
                text,
                reasoning,
                repeat,
                templated,
            } => {
                let rendered = if *templated {
                    render(text, &self.values)
                } else {
                    None
                };
                if *repeat > 1 {
                    self.repeat = Some(Repeat {
                        op: index,
                        remaining: repeat - 1,
                        rendered: rendered.clone(),
                    });
                }
                Some(Ok(delta(
                    *reasoning,
                    rendered.unwrap_or_else(|| text.clone()),
                )))
            }
            Op::Usage(usage) => Some(Ok(Content::Usage(*usage).into())),
            Op::ToolCall { call, outcome } => {
                self.queue
                    .push_back(Ok(Content::ToolCallCompleted(ToolCallCompleted {
                        call_id: call.call_id.clone(),
                        outcome: outcome.clone(),
                    })
                    .into()));
                Some(Ok(Content::ToolCallStarted(call.clone()).into()))
            }
            Op::Approval { id, request, .. } => {
                for call in request.calls() {
                    self.queue.push_back(Ok(Content::ToolCallStarted(ToolCall {
                        call_id: call.call_id().clone(),
                        tool: call.tool().to_owned(),
                        arguments: call.arguments().clone(),
                    })
                    .into()));
                }
                let interrupt = ActionRequest::approval(request.clone())
                    .with_id(id.clone().unwrap_or_else(ActionId::generate));
                self.pause(interrupt, index);
                None
            }
            Op::Form { id, request } => {
                let interrupt = ActionRequest::form(request.clone())
                    .with_id(id.clone().unwrap_or_else(ActionId::generate));
                self.pause(interrupt, index);
                None
            }
            Op::Artifact { .. } => match build_artifact(op, self.execution_id.clone()) {
                Ok(artifact) => Some(Ok(AdapterEvent::Artifact(artifact))),
                Err(problem) => {
                    self.finish(None);
                    Some(Err(HarnessError::new(
                        ErrorCategory::Internal,
                        "the scripted artifact could not be described",
                    )
                    .with_diagnostic(problem)))
                }
            },
            Op::Native(event) => Some(Ok(Content::Native(event.clone()).into())),
            Op::Error(error) | Op::Invalid(error) => {
                self.finish(None);
                Some(Err(error.clone()))
            }
            Op::Delay(duration) => {
                if tokio::runtime::Handle::try_current().is_err() {
                    self.finish(None);
                    return Some(Err(HarnessError::new(
                        ErrorCategory::Internal,
                        "a scripted delay needs a Tokio runtime with its timer enabled",
                    )));
                }
                let token = self.token.clone();
                let duration = *duration;
                self.wait = Some(Box::pin(async move {
                    let cancelled = std::pin::pin!(token.cancelled());
                    let sleep = std::pin::pin!(tokio::time::sleep(duration));
                    matches!(select(cancelled, sleep).await, Either::Right(_))
                }));
                None
            }
            Op::Hang => {
                let token = self.token.clone();
                self.wait = Some(Box::pin(async move {
                    token.cancelled().await;
                    false
                }));
                None
            }
            Op::Remember(text) => {
                let Some(state) = self.state.clone() else {
                    self.finish(None);
                    return Some(Err(no_conversation("remember")));
                };
                self.io = Some(Box::pin(remember(state, text.clone())));
                None
            }
            Op::Recall => {
                let Some(state) = self.state.clone() else {
                    self.finish(None);
                    return Some(Err(no_conversation("recall")));
                };
                self.io = Some(Box::pin(recall(state)));
                None
            }
            Op::Panic(message) => panic!("{message}"),
            Op::Complete { summary, templated } => {
                let summary = match summary {
                    Some(s) if *templated => {
                        Some(render(s, &self.values).unwrap_or_else(|| s.clone()))
                    }
                    other => other.clone(),
                };
                self.finish(None);
                Some(Ok(AdapterEvent::Completed(RunSucceeded { summary })))
            }
            Op::EventAfterComplete => {
                self.queue
                    .push_back(Ok(delta(false, "an event after completion".to_owned())));
                self.finish(None);
                Some(Ok(AdapterEvent::Completed(RunSucceeded::default())))
            }
            Op::EndWithoutTerminal => {
                self.finish(None);
                None
            }
        }
    }

    fn pause(&mut self, interrupt: ActionRequest, step: usize) {
        self.queue
            .push_back(Ok(AdapterEvent::Action(interrupt.clone())));
        self.finish(Some(Pending { interrupt, step }));
    }
}

fn delta(reasoning: bool, text: String) -> AdapterEvent {
    let delta = TextDelta { text };
    AdapterEvent::Content(if reasoning {
        Content::ReasoningDelta(delta)
    } else {
        Content::MessageDelta(delta)
    })
}

impl Stream for ScriptStream {
    type Item = EventResult;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<EventResult>> {
        let this = self.get_mut();
        loop {
            if let Some(item) = this.queue.pop_front() {
                return Poll::Ready(Some(item));
            }
            if this.done {
                return Poll::Ready(None);
            }
            if let Some(wait) = this.wait.as_mut() {
                let elapsed = ready!(wait.as_mut().poll(cx));
                this.wait = None;
                if !elapsed {
                    return Poll::Ready(Some(this.cancelled()));
                }
                continue;
            }
            if let Some(io) = this.io.as_mut() {
                let done = ready!(io.as_mut().poll(cx));
                this.io = None;
                match done {
                    Ok(Some(event)) => return Poll::Ready(Some(Ok(event))),
                    Ok(None) => continue,
                    Err(error) => {
                        this.finish(None);
                        return Poll::Ready(Some(Err(error)));
                    }
                }
            }
            if this.token.is_cancelled() {
                return Poll::Ready(Some(this.cancelled()));
            }
            if let Some(event) = this.next_repeat() {
                return Poll::Ready(Some(Ok(event)));
            }
            if let Some(item) = this.advance() {
                return Poll::Ready(Some(item));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_or_left_as_written() {
        let values: Values = [("name".to_owned(), "Ada".to_owned())].into();
        assert_eq!(render("Hi {{name}}!", &values).as_deref(), Some("Hi Ada!"));
        assert_eq!(render("Hi {{ name }}", &values).as_deref(), Some("Hi Ada"));
        assert_eq!(
            render("{{other}} {{name}}", &values).as_deref(),
            Some("{{other}} Ada")
        );
        assert_eq!(render("{{other}}", &values), None);
        assert_eq!(render("open {{name", &values), None);
        assert_eq!(render("{{name}}", &Values::new()), None);
        assert_eq!(render_value(&serde_json::json!(42)), "42");
        assert_eq!(render_value(&serde_json::json!("x")), "x");
    }
}
