//! Plain invocation (`invoke.non_streaming`): an execution's finished outcome, without a
//! stream.
//!
//! ```
//! use harness_core::adapter::{AdapterEvent, BoxStream, Delivery, EventResult, RunContext, Simple, SimpleAdapter};
//! use harness_core::event::{Content, RunSucceeded, TextDelta, Usage};
//! use harness_core::lifecycle::ExecutionState;
//! use harness_core::manifest::{Describe, HarnessDescriptor};
//! use harness_core::service::invoke::InvokeExt;
//! use harness_core::service::{AdapterService, ExecutionRequest};
//! use tower::ServiceBuilder;
//!
//! struct Echo(HarnessDescriptor);
//! impl Describe for Echo {
//!     fn descriptor(&self) -> &HarnessDescriptor { &self.0 }
//! }
//! impl SimpleAdapter for Echo {
//!     fn stream(&self, run: RunContext) -> BoxStream<'static, EventResult> {
//!         // The caller asked for the outcome: a provider with a non-streaming call may make it.
//!         assert_eq!(run.context.delivery, Delivery::Outcome);
//!         Box::pin(futures_util::stream::iter([
//!             Ok(AdapterEvent::Content(Content::MessageDelta(TextDelta::new("hel")))),
//!             Ok(AdapterEvent::Content(Content::MessageDelta(TextDelta::new("lo")))),
//!             Ok(AdapterEvent::Content(Content::Usage(Usage { input_tokens: 3, output_tokens: 2, ..Usage::default() }))),
//!             Ok(AdapterEvent::Completed(RunSucceeded::default())),
//!         ]))
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! # use harness_core::capability::{Capability, CapabilityKey};
//! # use harness_core::manifest::{ContractVersion, ExecutionMode};
//! # let descriptor = HarnessDescriptor::builder("echo".parse().unwrap(), "0.1.0")
//! #     .contract_version(ContractVersion::V1).execution_mode(ExecutionMode::in_process())
//! #     .capability(CapabilityKey::StreamUsage, Capability::native()).build().unwrap();
//! // Any admission stack over the service: its layers apply as to any execution.
//! let stack = ServiceBuilder::new().service(AdapterService::new(Simple::new(Echo(descriptor))));
//! let invocation = stack.invoke(ExecutionRequest::new("hi")).await.unwrap();
//! let outcome = invocation.outcome();
//! assert_eq!(outcome.state, ExecutionState::Succeeded);
//! assert_eq!(outcome.text, "hello");
//! assert_eq!((outcome.usage.input_tokens, outcome.usage.output_tokens), (3, 2));
//! # });
//! ```
//!
//! [`InvokeExt::invoke`] (on any admission stack) and
//! [`AdapterService::invoke`](super::AdapterService::invoke) start an execution the usual
//! way, through every layer of the stack they are called on (preflight, idempotency,
//! capacity, metrics and tracing; the runtime stack's redaction, retries and deadlines; the
//! run limits), with [`Delivery::Outcome`], and wait for it. They return an
//! [`Invocation`]: the execution's handle and its [`InvokeOutcome`], which is what the
//! execution's log says, gathered by a [`Collector`]: the text, the reasoning, each tool
//! call with its arguments and result, the artifacts, the usage summed, the state and, for
//! a failure, the classified error ([`Invocation::ended`] holds the full
//! [`Outcome`], its diagnostic included).
//!
//! What happens when...
//!
//! - **the run pauses on an action** (a form or a tool approval): the call returns then,
//!   with the action pending ([`Invocation::pending_action`], state `awaiting_input` or
//!   `awaiting_approval`) and the output so far. A call that waits for an outcome cannot
//!   answer an action itself, and failing it would throw away a run that can go on:
//!   [`Invocation::resume`] answers it and waits again (or [`Invocation::wait`], once
//!   another party answered). Dropping the invocation drops its handle: with no other
//!   handle alive, the paused execution is abandoned (cancelled, source `abandoned`), as
//!   for any handle.
//! - **the provider has a non-streaming call**: the runtime may make it, seeing
//!   [`RuntimeContext::delivery`](crate::adapter::RuntimeContext::delivery) (the model-loop
//!   adapter does: `invoke.non_streaming` native); any other runtime streams and the
//!   outcome is collected from its events (emulated). Either way every event is in the
//!   log, where every layer saw it.
//! - **the output is huge**: the outcome keeps at most [`DEFAULT_MAX_COLLECTED`] bytes of
//!   text, reasoning, tool calls and artifacts ([`Collector::with_max_collected`]); what
//!   comes past that is not kept, and [`InvokeOutcome::truncated`] says so. The log keeps
//!   everything (within the run's limits).
//! - **the waiting future is dropped**: only its handle goes; the execution runs on under
//!   whatever else holds it (a paused one is abandoned when no handle is left).
//! - **the request is refused** (preflight, capacity, an idempotency conflict): the error,
//!   as from the stack; nothing ran.
//!
//! Decisions where the spec is silent:
//!
//! - The text is every `message.delta` of the execution, in order (every model request's,
//!   across tool rounds): the portable stream has no message boundaries.
//! - An idempotent retry gets the original execution's outcome, collected from its log
//!   from the start: `delivery` is not part of a request's identity.

use std::collections::HashMap;

use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tower::{Service, ServiceExt};

use super::handle::{ExecutionHandle, Outcome};
use super::{AdapterService, ExecutionRequest};
use crate::action::{ActionRequest, ActionResponse};
use crate::adapter::{BoxFuture, Delivery, HarnessAdapter};
use crate::artifact::ArtifactDescriptor;
use crate::error::{HarnessError, PublicError};
use crate::event::{
    CancelReason, Event, EventPayload, ToolCall, ToolCallCompleted, ToolCallOutcome, Usage,
};
use crate::id::{Cursor, ExecutionId, ToolCallId};
use crate::lifecycle::ExecutionState;

/// The most bytes of text, reasoning, tool calls and artifacts a [`Collector`] keeps by
/// default: 16 MiB.
pub const DEFAULT_MAX_COLLECTED: usize = 16 << 20;

/// What an execution's log says, gathered: its outcome as a non-streaming caller takes it.
///
/// Filled by a [`Collector`]; returned by [`Invocation::outcome`] and, over HTTP, by the
/// server's waits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct InvokeOutcome {
    /// The execution.
    pub execution_id: ExecutionId,
    /// Its state after the last event gathered: terminal once it ended, `awaiting_input`
    /// or `awaiting_approval` while it waits for an answer.
    pub state: ExecutionState,
    /// The text of its `message.delta` events, in order.
    pub text: String,
    /// The text of its `reasoning.delta` events, in order.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reasoning: String,
    /// Its tool calls, in the order they started, each with its latest arguments and, once
    /// it ended, its result.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallResult>,
    /// Its artifacts, in creation order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<ArtifactDescriptor>,
    /// Its `usage` events, summed.
    pub usage: Usage,
    /// The action it waits for, while it is paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_action: Option<ActionRequest>,
    /// The summary of `run.succeeded`, when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The error of `run.failed` (its public projection: category, code, retryability).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<PublicError>,
    /// The reason of `run.cancelled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled: Option<CancelReason>,
    /// Whether some output was not kept (past the collector's bound; the log has it all).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// The sequence number of the last event gathered (0 before any).
    pub last_seq: u64,
}

impl InvokeOutcome {
    /// An outcome of `execution_id` before any event.
    #[must_use]
    pub fn new(execution_id: ExecutionId) -> Self {
        Self {
            execution_id,
            state: ExecutionState::Queued,
            text: String::new(),
            reasoning: String::new(),
            tool_calls: Vec::new(),
            artifacts: Vec::new(),
            usage: Usage::default(),
            pending_action: None,
            summary: None,
            error: None,
            cancelled: None,
            truncated: false,
            last_seq: 0,
        }
    }

    /// Whether the execution has ended.
    #[must_use]
    pub fn is_ended(&self) -> bool {
        self.state.is_terminal()
    }

    /// Whether the execution waits for an answer.
    #[must_use]
    pub fn is_paused(&self) -> bool {
        matches!(
            self.state,
            ExecutionState::AwaitingInput | ExecutionState::AwaitingApproval
        )
    }
}

/// One tool call of an [`InvokeOutcome`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct ToolCallResult {
    /// The call.
    pub call_id: ToolCallId,
    /// The tool.
    pub tool: String,
    /// Its arguments (as last updated).
    #[serde(default)]
    pub arguments: Value,
    /// How it ended; absent while it runs or waits for approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<ToolCallOutcome>,
}

/// Gathers an [`InvokeOutcome`] from an execution's events, pushed in order.
///
/// ```
/// use harness_core::event::{Event, EventPayload, TextDelta};
/// use harness_core::id::{ExecutionId, Sequence};
/// use harness_core::service::invoke::Collector;
/// use harness_core::time::Timestamp;
///
/// let id = ExecutionId::generate();
/// let mut collector = Collector::new(id.clone()).with_max_collected(4);
/// for (n, text) in ["abc", "def"].into_iter().enumerate() {
///     let seq = Sequence::new(n as u64 + 1).unwrap();
///     let delta = EventPayload::MessageDelta(TextDelta::new(text));
///     collector.push(&Event::new(id.clone(), seq, Timestamp::now(), delta));
/// }
/// // Past its bound, a collector keeps nothing more, and says so.
/// assert_eq!(collector.outcome().text, "abc");
/// assert!(collector.outcome().truncated);
/// assert_eq!(collector.outcome().last_seq, 2);
/// ```
#[derive(Debug, Clone)]
pub struct Collector {
    outcome: InvokeOutcome,
    /// Where each call is in `outcome.tool_calls`.
    calls: HashMap<ToolCallId, usize>,
    kept: usize,
    max: usize,
}

impl Collector {
    /// A collector for `execution_id`, keeping at most [`DEFAULT_MAX_COLLECTED`] bytes.
    #[must_use]
    pub fn new(execution_id: ExecutionId) -> Self {
        Self {
            outcome: InvokeOutcome::new(execution_id),
            calls: HashMap::new(),
            kept: 0,
            max: DEFAULT_MAX_COLLECTED,
        }
    }

    /// Keeps at most `bytes` of text, reasoning, tool calls (their arguments and results,
    /// as JSON) and artifacts (as JSON).
    #[must_use]
    pub fn with_max_collected(mut self, bytes: usize) -> Self {
        self.max = bytes;
        self
    }

    /// What was gathered so far.
    #[must_use]
    pub fn outcome(&self) -> &InvokeOutcome {
        &self.outcome
    }

    /// What was gathered.
    #[must_use]
    pub fn into_outcome(self) -> InvokeOutcome {
        self.outcome
    }

    /// The cursor after the last event pushed: where to read on from.
    #[must_use]
    pub fn cursor(&self) -> Cursor {
        Cursor::after_seq(self.outcome.last_seq)
    }

    /// Whether `bytes` more may be kept; marks the outcome truncated when not.
    fn room(&mut self, bytes: usize) -> bool {
        if self.kept.saturating_add(bytes) > self.max {
            self.outcome.truncated = true;
            return false;
        }
        self.kept += bytes;
        true
    }

    /// Gathers `event`. Events at or before the last one pushed are ignored (a stream
    /// read again from an earlier cursor).
    pub fn push(&mut self, event: &Event) {
        let seq = event.seq().get();
        if seq <= self.outcome.last_seq {
            return;
        }
        self.outcome.last_seq = seq;
        let payload = event.payload();
        if let Some(state) = payload.implied_state() {
            self.outcome.state = state;
        }
        match payload {
            EventPayload::MessageDelta(delta) => self.text(&delta.text),
            EventPayload::ReasoningDelta(delta) => self.reasoning(&delta.text),
            EventPayload::Usage(usage) => self.outcome.usage += *usage,
            EventPayload::ToolCallStarted(call) => self.started(call),
            EventPayload::ToolCallUpdated(call) => self.updated(call),
            EventPayload::ToolCallCompleted(completed) => self.completed(completed),
            EventPayload::ArtifactCreated(artifact) => self.artifact(artifact),
            EventPayload::ActionRequested(request) => {
                self.outcome.pending_action = Some((**request).clone());
            }
            EventPayload::ActionResolved(resolved) => self.resolved(&resolved.action_id),
            EventPayload::RunRunning => self.outcome.pending_action = None,
            EventPayload::RunSucceeded(succeeded) => {
                self.outcome.summary.clone_from(&succeeded.summary);
            }
            EventPayload::RunFailed(failed) => self.outcome.error = Some(failed.error.clone()),
            EventPayload::RunCancelled(reason) => self.outcome.cancelled = Some(reason.clone()),
            _ => {}
        }
        if payload.is_terminal() {
            self.outcome.pending_action = None;
        }
    }
}

impl Collector {
    fn text(&mut self, text: &str) {
        if self.room(text.len()) {
            self.outcome.text.push_str(text);
        }
    }

    fn reasoning(&mut self, text: &str) {
        if self.room(text.len()) {
            self.outcome.reasoning.push_str(text);
        }
    }

    fn started(&mut self, call: &ToolCall) {
        if self.room(call.tool.len() + json_len(&call.arguments)) {
            self.calls
                .insert(call.call_id.clone(), self.outcome.tool_calls.len());
            self.outcome.tool_calls.push(ToolCallResult {
                call_id: call.call_id.clone(),
                tool: call.tool.clone(),
                arguments: call.arguments.clone(),
                outcome: None,
            });
        }
    }

    fn updated(&mut self, call: &ToolCall) {
        if let Some(&at) = self.calls.get(&call.call_id)
            && self.room(call.tool.len() + json_len(&call.arguments))
        {
            let kept = &mut self.outcome.tool_calls[at];
            kept.tool.clone_from(&call.tool);
            kept.arguments = call.arguments.clone();
        }
    }

    fn completed(&mut self, completed: &ToolCallCompleted) {
        let Some(&at) = self.calls.get(&completed.call_id) else {
            return;
        };
        let size = match &completed.outcome {
            ToolCallOutcome::Success { output } => json_len(output),
            other => json_len(other),
        };
        if self.room(size) {
            self.outcome.tool_calls[at].outcome = Some(completed.outcome.clone());
        }
    }

    fn artifact(&mut self, artifact: &ArtifactDescriptor) {
        if self.room(json_len(artifact)) {
            self.outcome.artifacts.push(artifact.clone());
        }
    }

    fn resolved(&mut self, action: &crate::id::ActionId) {
        if self
            .outcome
            .pending_action
            .as_ref()
            .is_some_and(|p| p.id == *action)
        {
            self.outcome.pending_action = None;
        }
    }
}

/// The length of `value` as JSON (0 if it cannot be written: nothing kept depends on it).
fn json_len<T: Serialize + ?Sized>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// An execution started for its outcome: its handle, and what its log said up to its end
/// or its pause. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct Invocation {
    handle: ExecutionHandle,
    collector: Collector,
    ended: Option<Outcome>,
}

impl Invocation {
    /// Waits for `handle`'s execution to end or pause, gathering its log from the start.
    pub async fn collect(handle: ExecutionHandle) -> Self {
        let collector = Collector::new(handle.id().clone());
        Self::with_collector(handle, collector).wait().await
    }

    /// An invocation of `handle` gathering with `collector` (from its cursor on), not yet
    /// waited for: call [`wait`](Self::wait).
    #[must_use]
    pub fn with_collector(handle: ExecutionHandle, collector: Collector) -> Self {
        Self {
            handle,
            collector,
            ended: None,
        }
    }

    /// Waits until the execution ends, or pauses on an action after the events gathered so
    /// far (an invocation that is paused waits for the answer someone else gives, then for
    /// the next end or pause).
    pub async fn wait(mut self) -> Self {
        if self.ended.is_some() {
            return self;
        }
        // A pause before the last event there is now was answered already (a log read
        // from its start: an idempotent replay of a run that went on).
        let now = self.handle.log().last().map_or(0, |e| e.seq().get());
        let mut events = self.handle.events(self.collector.cursor());
        while let Some(event) = events.next().await {
            self.collector.push(&event);
            let outcome = self.collector.outcome();
            // The pause is the lifecycle event that enters it (`run.awaiting_*`): one
            // gathered before is waited past (its `action.resolved`, then `run.running`).
            let entered = event.payload().implied_state().is_some() && event.seq().get() >= now;
            if outcome.is_ended() || (outcome.is_paused() && entered) {
                break;
            }
        }
        // What the log said is what this reports: an end only once the log holds it.
        if self.collector.outcome().is_ended() {
            self.ended = Some(self.handle.outcome().await);
        }
        self
    }

    /// Answers the pending action, then waits as [`wait`](Self::wait) does.
    ///
    /// # Errors
    /// As [`ExecutionHandle::respond`] (`ACTION_ALREADY_RESOLVED`, `ACTION_NOT_FOUND`,
    /// `ACTION_REVISION_STALE`, `ACTION_RESPONSE_INVALID`, `EXECUTION_TERMINAL`); the
    /// invocation is dropped then, and [`handle`](Self::handle) taken before still reaches
    /// the execution.
    pub async fn resume(self, response: ActionResponse) -> Result<Self, HarnessError> {
        self.handle.respond(response).await?;
        Ok(self.wait().await)
    }

    /// The execution's handle.
    #[must_use]
    pub fn handle(&self) -> &ExecutionHandle {
        &self.handle
    }

    /// What the log said, up to the end or the pause.
    #[must_use]
    pub fn outcome(&self) -> &InvokeOutcome {
        self.collector.outcome()
    }

    /// What the log said.
    #[must_use]
    pub fn into_outcome(self) -> InvokeOutcome {
        self.collector.into_outcome()
    }

    /// How the execution ended, with the full error of a failure (its diagnostic included:
    /// for the application, not its clients); `None` while it is paused.
    #[must_use]
    pub fn ended(&self) -> Option<&Outcome> {
        self.ended.as_ref()
    }

    /// The action the execution waits for, when it paused.
    #[must_use]
    pub fn pending_action(&self) -> Option<&ActionRequest> {
        self.collector.outcome().pending_action.as_ref()
    }
}

/// [`invoke`](Self::invoke) on any admission stack: a service of [`ExecutionRequest`]s
/// answering [`ExecutionHandle`]s (an [`AdapterService`], or one with layers around it).
///
/// It takes `&self` and calls a clone of the service, as [`ServiceExt::oneshot`] on a
/// clone would (a clone starts unready, and is readied for this one request): the stack
/// stays the caller's, for the next call.
pub trait InvokeExt: Service<ExecutionRequest, Response = ExecutionHandle> + Clone {
    /// Starts `request` for its outcome ([`Delivery::Outcome`]) through (a clone of) this
    /// service, and waits until it ends or pauses on an action (see the
    /// [module docs](self)).
    ///
    /// # Errors
    /// The service's refusal (nothing ran). A run that fails is not an error of this call:
    /// its outcome says how it failed.
    fn invoke(
        &self,
        request: ExecutionRequest,
    ) -> BoxFuture<'static, Result<Invocation, Self::Error>>;
}

impl<S> InvokeExt for S
where
    S: Service<ExecutionRequest, Response = ExecutionHandle> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
{
    fn invoke(
        &self,
        mut request: ExecutionRequest,
    ) -> BoxFuture<'static, Result<Invocation, Self::Error>> {
        request.delivery = Delivery::Outcome;
        let service = self.clone();
        Box::pin(async move {
            let handle = service.oneshot(request).await?;
            Ok(Invocation::collect(handle).await)
        })
    }
}

impl<A: HarnessAdapter> AdapterService<A> {
    /// Plain invocation (`invoke.non_streaming`): starts `request` for its outcome and
    /// waits until it ends, or pauses on an action (then [`Invocation::resume`] answers and
    /// waits again). This service alone: call [`InvokeExt::invoke`] on an admission stack
    /// to go through its layers. See the [module docs](self).
    ///
    /// # Errors
    /// As [`start`](Self::start): nothing ran. A run that fails is an outcome, not an error.
    pub async fn invoke(&self, request: ExecutionRequest) -> Result<Invocation, HarnessError> {
        InvokeExt::invoke(self, request).await
    }
}
