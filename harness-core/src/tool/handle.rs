//! [`ToolHandle`]: the only way an adapter calls a tool, with common policy applied around
//! every call.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::middleware::{PortableMiddlewarePolicy, ToolAction, ToolDecision};
use super::{
    BoundedFailure, BoxFuture, InvalidToolPolicy, PortableTool, ToolCallContext, ToolDescriptor,
    ToolId, ToolOutcome, ToolPolicy,
};
use crate::action::resume::ResumeDecision;
use crate::action::{
    ActionRequest, ApprovalDefinitionError, ApprovalRequest, ToolCallApproval, ValidatedResponse,
};
use crate::error::ErrorCode;
use crate::id::ToolCallId;

/// The only way an adapter calls a tool.
///
/// It snapshots the tool's descriptor (and its compiled schema) at construction; every call
/// first validates the arguments against it and returns a
/// [`ErrorCode::TOOL_ARGUMENTS_INVALID`] failure listing every violation without calling the
/// tool. So an adapter can neither replace the schema nor widen the allowed arguments. The
/// handle exposes the descriptor and the [`ToolPolicy`] read-only and nothing else of the
/// tool: no accessor, no `Deref`, and `Debug` prints only the tool id. Cloning is cheap and
/// keeps the same tool.
///
/// Around each call it applies the handle's policy (see [`ToolPolicy`]): approval, deadline,
/// retries of an idempotent tool, the output bound; and it ends the call when the execution
/// it was made for is cancelled ([`cancelled_by`](Self::cancelled_by)): the tool's future is
/// dropped and the call fails [`ErrorCode::TOOL_CANCELLED`]. The service makes one handle per
/// tool per execution, with the policy the tool was registered with.
///
/// A deadline, retries and cancellation need a Tokio runtime (its timer for the first two);
/// a handle with none of them runs on any executor.
#[derive(Clone)]
pub struct ToolHandle {
    tool: Arc<dyn PortableTool>,
    descriptor: Arc<ToolDescriptor>,
    policy: ToolPolicy,
    cancellation: Option<CancellationToken>,
    /// The operator's middleware decision for this tool; `None` when it changes nothing.
    middleware: Option<ToolDecision>,
}

/// What [`ToolHandle::invoke_approved`] makes of the caller's decision on one call.
#[derive(Debug)]
pub enum Approved<'a> {
    /// The caller approved the call (or edited its arguments): run it with `arguments`.
    Run {
        /// The arguments the call runs with: as proposed, or as the caller edited them.
        arguments: Value,
        /// Whether the caller edited them.
        edited: bool,
        /// The call; it runs when polled.
        invocation: ToolInvocation<'a>,
    },
    /// The caller rejected the call (or dismissed the approval): it must not run.
    Rejected {
        /// The caller's reason, if any (`dismissed` for a dismissed approval).
        reason: Option<String>,
    },
}

/// [`ToolHandle::invoke_approved`] was given a decision that does not cover its call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotApproved {
    /// The decision answers a form, not a tool approval.
    #[error("the decision answers a form, not the approval of tool call `{call}`")]
    NotAnApproval {
        /// The call.
        call: ToolCallId,
    },
    /// The approval has no call of that id, or names another tool for it.
    #[error("the approval has no call `{call}` of tool `{tool}`")]
    NoSuchCall {
        /// The call.
        call: ToolCallId,
        /// The handle's tool.
        tool: ToolId,
    },
}

impl ToolHandle {
    /// Wraps `tool`, snapshotting its descriptor, with the default [`ToolPolicy`] (no
    /// approval, no deadline, no retries) and no cancellation.
    #[must_use]
    pub fn new(tool: Arc<dyn PortableTool>) -> Self {
        let descriptor = Arc::new(tool.descriptor().clone());
        Self {
            tool,
            descriptor,
            policy: ToolPolicy::new(),
            cancellation: None,
            middleware: None,
        }
    }

    /// Applies `policy` to every call.
    ///
    /// # Errors
    /// When the policy does not fit the tool ([`ToolPolicy::check`]).
    pub fn with_policy(mut self, policy: ToolPolicy) -> Result<Self, InvalidToolPolicy> {
        policy.check(&self.descriptor)?;
        self.policy = policy;
        Ok(self)
    }

    /// Ends every call in flight, and refuses every later one, once `token` is cancelled
    /// (the execution's token: `RuntimeContext::cancellation`).
    #[must_use]
    pub fn cancelled_by(mut self, token: CancellationToken) -> Self {
        self.cancellation = Some(token);
        self
    }

    /// Applies the operator's middleware `policy` to every call (see
    /// [`middleware`](super::middleware)): decided once here for the tool's id, so a call
    /// costs no matching. A denied tool's calls fail `TOOL_DENIED_BY_POLICY` without running;
    /// one that requires approval asks for it whatever the tool's own policy; arguments are
    /// bounded and rewritten before they are validated, results redacted and bounded before
    /// the adapter sees them.
    #[must_use]
    pub fn with_middleware(mut self, policy: &PortableMiddlewarePolicy) -> Self {
        let decision = policy.decide(self.id().as_str());
        self.middleware = (!decision.is_noop()).then_some(decision);
        self
    }

    /// The descriptor the handle validates against.
    #[must_use]
    pub fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    /// The stable tool id.
    #[must_use]
    pub fn id(&self) -> &ToolId {
        self.descriptor.id()
    }

    /// The policy applied to every call.
    #[must_use]
    pub fn policy(&self) -> ToolPolicy {
        self.policy
    }

    /// Whether calls wait for the caller's approval ([`ToolPolicy::needs_approval`], or
    /// the middleware's `require_approval`).
    #[must_use]
    pub fn requires_approval(&self) -> bool {
        self.policy.approval()
            || self
                .middleware
                .as_ref()
                .is_some_and(|d| d.action() == ToolAction::RequireApproval)
    }

    /// The arguments as the middleware admits them, or the failure that ends the call.
    fn admit(&self, arguments: Value) -> Result<Value, ToolOutcome> {
        match &self.middleware {
            None => Ok(arguments),
            Some(decision) => decision
                .admit(self.id().as_str(), arguments)
                .map_err(ToolOutcome::Failure),
        }
    }

    /// The call `call_id` with `arguments`, as one call of a `tool_approval` action (the
    /// caller may approve, reject or edit it; edits are checked against the tool's schema).
    /// An adapter that has several calls to approve puts them in one
    /// [`ApprovalRequest`].
    ///
    /// # Errors
    /// As [`ToolCallApproval::new`] (not for a tool whose descriptor was built: its schema
    /// compiled already).
    pub fn approval_call(
        &self,
        call_id: ToolCallId,
        arguments: Value,
    ) -> Result<ToolCallApproval, ApprovalDefinitionError> {
        Ok(ToolCallApproval::new(
            call_id,
            self.id().as_str(),
            arguments,
            self.descriptor.input_schema().clone(),
        )?
        .allow_edit())
    }

    /// Calls the tool.
    ///
    /// Lazy: nothing happens until the returned future is polled. Then, in order: a tool
    /// whose policy [needs approval](ToolPolicy::needs_approval) is not called, and the
    /// outcome is the [`ToolOutcome::Action`] to open (one call, editable; run it later with
    /// [`invoke_approved`](Self::invoke_approved)); a cancelled execution fails
    /// [`ErrorCode::TOOL_CANCELLED`]; a passed deadline (`ctx`'s or the policy's, whichever
    /// is first) [`ErrorCode::TOOL_DEADLINE_EXCEEDED`]; arguments that miss the schema
    /// [`ErrorCode::TOOL_ARGUMENTS_INVALID`] (in these cases without calling the tool).
    /// Otherwise the tool runs under the policy; a panic becomes a
    /// [`ErrorCode::TOOL_PANICKED`] failure whose message does not include the panic text.
    /// The future borrows the handle; clone the handle to move a call into a spawned task.
    pub fn invoke(&self, arguments: Value, ctx: ToolCallContext) -> ToolInvocation<'_> {
        if self.requires_approval() {
            // The caller approves what would run: the arguments as the middleware rewrites
            // them (a denied call is not offered for approval).
            let arguments = match self.admit(arguments) {
                Ok(arguments) => arguments,
                Err(outcome) => return ToolInvocation::ready(outcome),
            };
            let outcome = match self.approval_call(ctx.call_id, arguments) {
                Ok(call) => ApprovalRequest::new([call]).map_or_else(
                    |e| ToolOutcome::failure(e.to_string()),
                    |approval| ToolOutcome::Action(Box::new(ActionRequest::approval(approval))),
                ),
                Err(e) => ToolOutcome::failure(e.to_string()),
            };
            return ToolInvocation::ready(outcome);
        }
        self.run(arguments, ctx)
    }

    /// Runs the call `ctx.call_id` as the caller decided in `decision` (the answer to the
    /// approval the call was part of): with the proposed arguments when approved, the
    /// edited ones when edited (checked against the schema again before the tool runs);
    /// [`Approved::Rejected`] when the caller rejected it or dismissed the approval. The
    /// arguments come from the decision, never from the adapter.
    ///
    /// # Errors
    /// When `decision` is not a tool approval or has no call `ctx.call_id` of this tool.
    pub fn invoke_approved(
        &self,
        decision: &ResumeDecision,
        ctx: ToolCallContext,
    ) -> Result<Approved<'_>, NotApproved> {
        let ValidatedResponse::Approval(approval) = decision.response() else {
            return Err(NotApproved::NotAnApproval { call: ctx.call_id });
        };
        let no_such_call = || NotApproved::NoSuchCall {
            call: ctx.call_id.clone(),
            tool: self.id().clone(),
        };
        if approval.is_dismissed() {
            return Ok(Approved::Rejected {
                reason: Some("dismissed".to_owned()),
            });
        }
        match approval.approved(&ctx.call_id) {
            Some(call) if call.tool == self.id().as_str() => {
                let arguments = call.arguments.clone();
                let edited = call.edited;
                Ok(Approved::Run {
                    invocation: self.run(arguments.clone(), ctx),
                    arguments,
                    edited,
                })
            }
            Some(_) => Err(no_such_call()),
            None => match approval.decision_for(&ctx.call_id) {
                Some(crate::action::Decision::Reject { reason }) => Ok(Approved::Rejected {
                    reason: reason.clone(),
                }),
                _ => Err(no_such_call()),
            },
        }
    }

    /// The call under the policy, approval aside.
    fn run(&self, arguments: Value, ctx: ToolCallContext) -> ToolInvocation<'_> {
        // Also for approved calls: a caller's edit is bounded and rewritten like the model's.
        let arguments = match self.admit(arguments) {
            Ok(arguments) => arguments,
            Err(outcome) => return ToolInvocation::ready(outcome),
        };
        let deadline = match (ctx.deadline, self.policy.deadline_duration()) {
            (Some(at), Some(d)) => Some(at.min(Instant::now() + d)),
            (at, None) => at,
            (None, Some(d)) => Some(Instant::now() + d),
        };
        let ctx = ToolCallContext { deadline, ..ctx };
        if ctx.is_expired() {
            // Decided now, without arming a timer.
            return ToolInvocation::ready(self.deadline_passed(false));
        }
        // Identifiers only: never the arguments or the outcome (they may hold anything).
        let span = tracing::info_span!(
            "harness.tool_call",
            tool = self.id().as_str(),
            call_id = ctx.call_id.as_str(),
            execution_id = ctx.execution_id.as_str(),
        );
        // A recorded span takes the boxed path (the plain one has no room for it).
        if span.is_disabled()
            && self.cancellation.is_none()
            && deadline.is_none()
            && self.policy.retry_count() == 0
        {
            // Nothing to race: the plain call, unboxed.
            return ToolInvocation {
                state: InvocationState::Once {
                    handle: self,
                    call: Some((arguments, ctx)),
                    running: None,
                },
            };
        }
        ToolInvocation {
            state: InvocationState::Boxed {
                future: Box::pin(tracing::Instrument::instrument(
                    self.governed(arguments, ctx),
                    span,
                )),
            },
        }
    }

    /// The call with its deadline, retries and cancellation.
    async fn governed(&self, arguments: Value, ctx: ToolCallContext) -> ToolOutcome {
        let attempts = async {
            let mut backoff = Duration::from_millis(50);
            let mut left = self.policy.retry_count();
            loop {
                let outcome = Once::new(self, arguments.clone(), ctx.clone()).await;
                match &outcome {
                    ToolOutcome::Failure(f) if f.retryable() && left > 0 => {
                        left -= 1;
                        tracing::debug!(tool = %self.id(), left, "retrying a tool call");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(1));
                    }
                    _ => return outcome,
                }
            }
        };
        let bounded = async {
            match ctx.deadline {
                Some(at) => tokio::time::timeout_at(at.into(), attempts)
                    .await
                    .unwrap_or_else(|_| self.deadline_passed(true)),
                None => attempts.await,
            }
        };
        match &self.cancellation {
            Some(token) => tokio::select! {
                biased;
                () = token.cancelled() => self.cancelled(),
                outcome = bounded => outcome,
            },
            None => bounded.await,
        }
    }

    /// The first step of one attempt: refusals, then the tool's own future.
    fn begin(&self, arguments: Value, ctx: ToolCallContext) -> Begin<'_> {
        if self
            .cancellation
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled)
        {
            return Begin::Done(self.cancelled());
        }
        if ctx.is_expired() {
            return Begin::Done(self.deadline_passed(false));
        }
        if let Err(invalid) = self.descriptor.validate_arguments(&arguments) {
            return Begin::Done(ToolOutcome::Failure(invalid.to_failure()));
        }
        let tool = &*self.tool;
        match catch_unwind(AssertUnwindSafe(|| tool.invoke(arguments, ctx))) {
            Ok(future) => Begin::Running(future),
            Err(payload) => Begin::Done(self.panicked(payload)),
        }
    }

    /// An outcome as the middleware lets the adapter see it.
    fn shown(&self, outcome: ToolOutcome) -> ToolOutcome {
        match &self.middleware {
            None => outcome,
            Some(decision) => decision.result(outcome),
        }
    }

    /// An outcome as it leaves the handle: a success larger than the policy allows fails;
    /// then the middleware's redaction and bound.
    fn bounded(&self, outcome: ToolOutcome) -> ToolOutcome {
        let ToolOutcome::Success(output) = &outcome else {
            return self.shown(outcome);
        };
        let limit = self.policy.output_limit();
        if !super::middleware::json_len_over(output, limit) {
            return self.shown(outcome);
        }
        ToolOutcome::Failure(
            BoundedFailure::new(format!(
                "the output of tool `{}` is larger than its limit of {limit} bytes of JSON; \
                 ask for less, or raise the tool's `maxOutputBytes`",
                self.id()
            ))
            .with_code(ErrorCode::TOOL_OUTPUT_TOO_LARGE),
        )
    }

    fn cancelled(&self) -> ToolOutcome {
        ToolOutcome::Failure(
            BoundedFailure::new(format!(
                "the call to tool `{}` was cancelled with its execution",
                self.id()
            ))
            .with_code(ErrorCode::TOOL_CANCELLED),
        )
    }

    fn deadline_passed(&self, started: bool) -> ToolOutcome {
        let message = if started {
            format!(
                "the call to tool `{}` did not finish before its deadline; it was stopped",
                self.id()
            )
        } else {
            format!(
                "the deadline of the call to tool `{}` passed before it started",
                self.id()
            )
        };
        ToolOutcome::Failure(
            BoundedFailure::new(message).with_code(ErrorCode::TOOL_DEADLINE_EXCEEDED),
        )
    }

    fn panicked(&self, payload: Box<dyn Any + Send>) -> ToolOutcome {
        drop(payload);
        tracing::warn!(tool = %self.id(), "tool panicked; reported as a generic failure");
        ToolOutcome::Failure(
            BoundedFailure::new(format!("tool `{}` failed unexpectedly", self.id()))
                .with_code(ErrorCode::TOOL_PANICKED),
        )
    }
}

impl From<Arc<dyn PortableTool>> for ToolHandle {
    fn from(tool: Arc<dyn PortableTool>) -> Self {
        Self::new(tool)
    }
}

impl fmt::Debug for ToolHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolHandle")
            .field("id", &self.id().as_str())
            .finish()
    }
}

enum Begin<'a> {
    Done(ToolOutcome),
    Running(BoxFuture<'a, ToolOutcome>),
}

/// One attempt: refusals, then the tool's future, panics caught, the output bounded.
struct Once<'a> {
    handle: &'a ToolHandle,
    call: Option<(Value, ToolCallContext)>,
    running: Option<BoxFuture<'a, ToolOutcome>>,
}

impl<'a> Once<'a> {
    fn new(handle: &'a ToolHandle, arguments: Value, ctx: ToolCallContext) -> Self {
        Self {
            handle,
            call: Some((arguments, ctx)),
            running: None,
        }
    }
}

impl Future for Once<'_> {
    type Output = ToolOutcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<ToolOutcome> {
        let this = &mut *self;
        poll_once(this.handle, &mut this.call, &mut this.running, cx)
    }
}

fn poll_once<'a>(
    handle: &'a ToolHandle,
    call: &mut Option<(Value, ToolCallContext)>,
    running: &mut Option<BoxFuture<'a, ToolOutcome>>,
    cx: &mut Context<'_>,
) -> Poll<ToolOutcome> {
    if let Some((arguments, ctx)) = call.take() {
        match handle.begin(arguments, ctx) {
            Begin::Done(outcome) => return Poll::Ready(outcome),
            Begin::Running(future) => *running = Some(future),
        }
    }
    let Some(future) = running.as_mut() else {
        // Polled again after it completed.
        return Poll::Pending;
    };
    match catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx))) {
        Ok(Poll::Pending) => Poll::Pending,
        Ok(Poll::Ready(outcome)) => {
            *running = None;
            Poll::Ready(handle.bounded(outcome))
        }
        Err(payload) => {
            *running = None;
            Poll::Ready(handle.panicked(payload))
        }
    }
}

/// The future of [`ToolHandle::invoke`].
///
/// Polling it again after it completed returns `Pending` forever. Dropping it drops the
/// tool's future, which cancels the call.
#[must_use = "futures do nothing unless polled"]
pub struct ToolInvocation<'a> {
    state: InvocationState<'a>,
}

enum InvocationState<'a> {
    /// Decided without calling the tool.
    Ready(Option<ToolOutcome>),
    /// One plain attempt (no deadline, retries or cancellation to race).
    Once {
        handle: &'a ToolHandle,
        call: Option<(Value, ToolCallContext)>,
        running: Option<BoxFuture<'a, ToolOutcome>>,
    },
    /// The call under its policy.
    Boxed { future: BoxFuture<'a, ToolOutcome> },
}

impl ToolInvocation<'_> {
    fn ready(outcome: ToolOutcome) -> Self {
        Self {
            state: InvocationState::Ready(Some(outcome)),
        }
    }
}

impl Future for ToolInvocation<'_> {
    type Output = ToolOutcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<ToolOutcome> {
        // Every field is `Unpin` (boxed futures, values): no projection needed.
        match &mut self.state {
            InvocationState::Ready(outcome) => outcome.take().map_or(Poll::Pending, Poll::Ready),
            InvocationState::Once {
                handle,
                call,
                running,
            } => poll_once(handle, call, running, cx),
            InvocationState::Boxed { future } => future.as_mut().poll(cx),
        }
    }
}

impl fmt::Debug for ToolInvocation<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            InvocationState::Ready(Some(_)) => "ready",
            InvocationState::Ready(None) => "finished",
            InvocationState::Once { call: Some(_), .. } => "start",
            InvocationState::Once {
                running: Some(_), ..
            } => "running",
            InvocationState::Once { .. } => "finished",
            InvocationState::Boxed { .. } => "governed",
        };
        f.debug_struct("ToolInvocation")
            .field("state", &state)
            .finish()
    }
}
