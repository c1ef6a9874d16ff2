//! The typestate execution lifecycle: illegal transitions do not compile.
//!
//! [`Execution<S>`] is an execution in state `S`, one of the zero-sized types in [`state`].
//! Each transition consumes `self`, appends its lifecycle event to the execution's
//! [`EventLog`], and returns the execution in its next state. The transitions are exactly
//! those the runtime model draws:
//!
//! ```text
//! queued -> starting -> running
//!                        |-> awaiting_input -> running
//!                        |-> awaiting_approval -> running
//!                        |-> succeeded
//!                        |-> failed
//! any non-terminal state -> cancelling -> cancelled
//! ```
//!
//! | from | method | to | events appended |
//! |---|---|---|---|
//! | (new) | [`Execution::queue`] | queued | `run.queued` |
//! | queued | [`start`](Execution::start) | starting | `run.starting` |
//! | starting | [`run`](Execution::run) | running | `run.running` |
//! | running | [`request_input`](Execution::request_input) | awaiting_input | `action.requested`, `run.awaiting_input` |
//! | running | [`request_approval`](Execution::request_approval) | awaiting_approval | `action.requested`, `run.awaiting_approval` |
//! | awaiting_input / awaiting_approval | `resolve` | running | `action.resolved`, `run.running` |
//! | running | [`succeed`](Execution::succeed) | succeeded | `run.succeeded` |
//! | running | [`fail`](Execution::fail) | failed | `run.failed` |
//! | any non-terminal | [`begin_cancel`](Execution::begin_cancel) | cancelling | `run.cancelling` (none if already cancelling) |
//! | cancelling | [`confirm_cancelled`](Execution::confirm_cancelled) | cancelled | `run.cancelled` |
//!
//! Terminal states ([`state::Succeeded`], [`state::Failed`],
//! [`state::Cancelled`]) have no transition at all, and `begin_cancel` exists on
//! every non-terminal state and nowhere else. Content (text, reasoning, usage, tool calls,
//! native payloads, artifacts) may be emitted while running or cancelling (a provider may
//! flush output while it stops).
//!
//! **A failure while starting** (the runtime could not initialize) ends as
//! `starting -> running -> failed`: the diagram draws `failed` only from `running`, and a
//! consumer that checks transitions against the spec must never see an edge it does not
//! draw. There is deliberately no `Execution<Starting>::fail`; callers write
//! `starting.run().fail(error)`, and the `run.failed` event carries the cause.
//!
//! ```
//! use harness_core::event::{Content, RunSucceeded, TextDelta};
//! use harness_core::id::ExecutionId;
//! use harness_core::lifecycle::Execution;
//!
//! let queued = Execution::queue(ExecutionId::generate());
//! let mut running = queued.start().run();
//! running.emit(Content::MessageDelta(TextDelta::new("hello"))).unwrap();
//! let done = running.succeed(RunSucceeded::default());
//! let kinds: Vec<_> = done.events().snapshot(Default::default()).iter().map(|e| e.kind().as_str()).collect();
//! assert_eq!(kinds, ["run.queued", "run.starting", "run.running", "message.delta", "run.succeeded"]);
//! ```
//!
//! Skipping a state does not compile:
//!
//! ```compile_fail
//! # use harness_core::{id::ExecutionId, lifecycle::Execution, event::RunSucceeded};
//! let done = Execution::queue(ExecutionId::generate()).succeed(RunSucceeded::default());
//! ```

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::action::{
    ActionKind, ActionRequest, ActionResponseError, ApprovalRequest, ApprovalResponse, FormRequest,
    FormResponse, ValidatedApproval, ValidatedForm,
};
use crate::artifact::ArtifactDescriptor;
use crate::error::HarnessError;
use crate::event::{
    AwaitingAction, CancelReason, Content, Event, EventPayload, RunFailed, RunSucceeded,
};
use crate::id::{ActionId, ExecutionId};
use crate::log::{AppendError, EventLog, LogReader};
pub use crate::state::ExecutionState;

mod sealed {
    pub trait Sealed {}
}

/// A lifecycle state marker. Sealed: the nine states in [`state`] are the only ones.
pub trait State: sealed::Sealed + Send + Sync + 'static {
    /// The runtime value of this state.
    const STATE: ExecutionState;
    #[doc(hidden)]
    fn wrap(execution: Execution<Self>) -> AnyExecution
    where
        Self: Sized;
    #[doc(hidden)]
    fn unwrap(any: AnyExecution) -> Result<Execution<Self>, AnyExecution>
    where
        Self: Sized;
}

/// States from which cancellation may begin (every non-terminal state).
pub trait NonTerminal: State {}
/// States that end an execution.
pub trait Terminal: State {}
/// States in which content (text, tool calls, artifacts, ...) may be appended.
pub trait Emitting: State {}

/// The zero-sized state markers.
pub mod state {
    macro_rules! states {
        ($($name:ident => $doc:literal),* $(,)?) => {$(
            #[doc = $doc]
            #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
            pub struct $name;
        )*};
    }
    states! {
        Queued => "Accepted, not started.",
        Starting => "The provider runtime is being prepared.",
        Running => "The provider is working.",
        AwaitingInput => "Paused until the caller submits form input.",
        AwaitingApproval => "Paused until the caller decides on tool calls.",
        Cancelling => "Cancellation requested, not yet confirmed.",
        Succeeded => "Terminal: succeeded.",
        Failed => "Terminal: failed.",
        Cancelled => "Terminal: cancelled.",
    }
}

use state::{
    AwaitingApproval, AwaitingInput, Cancelled, Cancelling, Failed, Queued, Running, Starting,
    Succeeded,
};

macro_rules! impl_state {
    ($($name:ident: $($marker:ident),*;)*) => {$(
        impl sealed::Sealed for $name {}
        impl State for $name {
            const STATE: ExecutionState = ExecutionState::$name;
            fn wrap(execution: Execution<Self>) -> AnyExecution {
                AnyExecution::$name(execution)
            }
            fn unwrap(any: AnyExecution) -> Result<Execution<Self>, AnyExecution> {
                match any {
                    AnyExecution::$name(e) => Ok(e),
                    other => Err(other),
                }
            }
        }
        $(impl $marker for $name {})*
    )*};
}

impl_state! {
    Queued: NonTerminal;
    Starting: NonTerminal;
    Running: NonTerminal, Emitting;
    AwaitingInput: NonTerminal;
    AwaitingApproval: NonTerminal;
    Cancelling: NonTerminal, Emitting;
    Succeeded: Terminal;
    Failed: Terminal;
    Cancelled: Terminal;
}

struct Core {
    log: EventLog,
    pending: Option<ActionRequest>,
    cancel_reason: Option<CancelReason>,
    error: Option<HarnessError>,
    /// See [`Execution::fail_on_drop`].
    fail_on_drop: bool,
}

impl Drop for Core {
    fn drop(&mut self) {
        if self.fail_on_drop && !self.log.is_closed() {
            let error = HarnessError::new(
                crate::error::ErrorCategory::Internal,
                "the execution stopped unexpectedly",
            )
            .with_code(crate::error::ErrorCode::EXECUTION_LOST);
            let _ = self.log.append(EventPayload::RunFailed(Box::new(RunFailed {
                error: error.public(),
            })));
        }
    }
}

/// An execution in lifecycle state `S`.
///
/// It owns the single writer of the execution's event log; [`Execution::events`] hands out
/// readers. The whole execution is one pointer wide, so transitions move nothing but a box.
pub struct Execution<S: State> {
    core: Box<Core>,
    _state: PhantomData<fn() -> S>,
}

impl<S: State> Execution<S> {
    fn into_state<T: State>(self) -> Execution<T> {
        Execution {
            core: self.core,
            _state: PhantomData,
        }
    }

    /// Appends a lifecycle event. The typestate guarantees the log is open here: only the
    /// terminal transitions append a terminal event, and they consume the execution.
    fn append_lifecycle(&mut self, payload: EventPayload) {
        let appended = self.core.log.append(payload);
        debug_assert!(
            appended.is_ok(),
            "lifecycle append on a closed log: {appended:?}"
        );
    }

    fn transition<T: State>(mut self, payload: EventPayload) -> Execution<T> {
        debug_assert!(S::STATE.can_transition_to(T::STATE));
        self.append_lifecycle(payload);
        self.into_state()
    }

    /// The execution id.
    #[must_use]
    pub fn id(&self) -> &ExecutionId {
        self.core.log.execution_id()
    }

    /// The current state as a runtime value.
    #[must_use]
    pub fn state(&self) -> ExecutionState {
        S::STATE
    }

    /// A reader of the execution's events.
    #[must_use]
    pub fn events(&self) -> LogReader {
        self.core.log.reader()
    }

    /// Erases the state, for storage next to executions in other states.
    #[must_use]
    pub fn into_any(self) -> AnyExecution {
        S::wrap(self)
    }
}

impl Execution<Queued> {
    /// A new execution; appends `run.queued`.
    #[must_use]
    pub fn queue(id: ExecutionId) -> Self {
        let mut e = Self {
            core: Box::new(Core {
                log: EventLog::new(id),
                pending: None,
                cancel_reason: None,
                error: None,
                fail_on_drop: false,
            }),
            _state: PhantomData,
        };
        e.append_lifecycle(EventPayload::RunQueued);
        e
    }

    /// Makes the execution end its own log if it is dropped before reaching a terminal state
    /// (its owner panicked, or its task was aborted at runtime shutdown): a `run.failed`
    /// (`internal`, code `EXECUTION_LOST`) is appended, so every reader still sees exactly one
    /// terminal event and no `outcome` waits forever. Off by default, so that code using the
    /// typestate directly decides what a dropped execution means.
    ///
    /// ```
    /// use harness_core::id::{Cursor, ExecutionId};
    /// use harness_core::lifecycle::Execution;
    ///
    /// let running = Execution::queue(ExecutionId::generate()).fail_on_drop().start().run();
    /// let log = running.events();
    /// drop(running);
    /// assert_eq!(log.last().unwrap().kind().as_str(), "run.failed");
    /// ```
    #[must_use]
    pub fn fail_on_drop(mut self) -> Self {
        self.core.fail_on_drop = true;
        self
    }

    /// `queued -> starting`.
    #[must_use]
    pub fn start(self) -> Execution<Starting> {
        self.transition(EventPayload::RunStarting)
    }
}

impl Execution<Starting> {
    /// `starting -> running`. A start that fails continues with `.run().fail(error)`; see the
    /// [module docs](self).
    #[must_use]
    pub fn run(self) -> Execution<Running> {
        self.transition(EventPayload::RunRunning)
    }
}

impl<S: Emitting> Execution<S> {
    /// Appends a content event (text, reasoning, usage, tool call, native payload).
    ///
    /// # Errors
    /// Never in practice (the log is open in emitting states); kept fallible so a future
    /// store-backed log can report persistence failures.
    pub fn emit(&mut self, content: Content) -> Result<Arc<Event>, AppendError> {
        self.core.log.append(content.into())
    }

    /// Appends several content events at once (one lock, one timestamp): the streaming hot
    /// path. Returns how many were appended.
    ///
    /// # Errors
    /// As [`emit`](Self::emit).
    pub fn emit_all(
        &mut self,
        contents: impl IntoIterator<Item = Content>,
    ) -> Result<usize, AppendError> {
        self.core.log.append_content(contents)
    }

    /// Appends `artifact.created`.
    ///
    /// # Errors
    /// [`AppendError::DuplicateArtifact`] for an id already created in this execution,
    /// [`AppendError::ForeignArtifact`] for a descriptor owned by another execution.
    pub fn create_artifact(
        &mut self,
        artifact: ArtifactDescriptor,
    ) -> Result<Arc<Event>, AppendError> {
        self.core
            .log
            .append(EventPayload::ArtifactCreated(Box::new(artifact)))
    }
}

impl Execution<Running> {
    fn request(mut self, request: ActionRequest) -> Self {
        self.append_lifecycle(EventPayload::ActionRequested(Box::new(request.clone())));
        self.core.pending = Some(request);
        self
    }

    /// `running -> awaiting_input`: opens a form input action with id `action_id`.
    #[must_use]
    pub fn request_input(self, action_id: ActionId, form: FormRequest) -> Execution<AwaitingInput> {
        let request = ActionRequest::form(form).with_id(action_id.clone());
        self.request(request)
            .transition(EventPayload::RunAwaitingInput(AwaitingAction { action_id }))
    }

    /// `running -> awaiting_approval`: opens a tool approval action with id `action_id`.
    #[must_use]
    pub fn request_approval(
        self,
        action_id: ActionId,
        approval: ApprovalRequest,
    ) -> Execution<AwaitingApproval> {
        let request = ActionRequest::approval(approval).with_id(action_id.clone());
        self.request(request)
            .transition(EventPayload::RunAwaitingApproval(AwaitingAction {
                action_id,
            }))
    }

    /// `running -> succeeded`.
    #[must_use]
    pub fn succeed(self, summary: RunSucceeded) -> Execution<Succeeded> {
        self.transition(EventPayload::RunSucceeded(summary))
    }

    /// `running -> failed`. The event carries only the error's safe projection; the full
    /// error stays available through [`Execution::<Failed>::error`].
    #[must_use]
    pub fn fail(mut self, error: HarnessError) -> Execution<Failed> {
        let public = error.public();
        self.core.error = Some(error);
        self.transition(EventPayload::RunFailed(Box::new(RunFailed {
            error: public,
        })))
    }
}

macro_rules! awaiting {
    ($state:ident, $response:ty, $request:ty, $variant:ident, $validate:ident, $validated:ty) => {
        impl Execution<$state> {
            /// The pending action.
            #[must_use]
            pub fn pending(&self) -> &ActionRequest {
                self.core
                    .pending
                    .as_ref()
                    .expect("an awaiting execution always holds its pending action")
            }

            /// The pending request's typed body.
            #[must_use]
            pub fn request(&self) -> &$request {
                match &self.pending().kind {
                    ActionKind::$variant(r) => r,
                    _ => unreachable!("the awaiting state fixes the action kind"),
                }
            }

            /// Answers the pending action and resumes: appends `action.resolved` then
            /// `run.running`, and returns the running execution with the validated answer
            /// (to hand to the runtime's `resume`).
            ///
            /// # Errors
            /// When the response does not fit the pending request (wrong id, stale revision,
            /// invalid values or decisions), the execution comes back unchanged with the error.
            pub fn resolve(
                mut self,
                response: $response,
            ) -> Result<(Execution<Running>, $validated), (Self, ActionResponseError)> {
                let validated = match self.pending().$validate(response) {
                    Ok(validated) => validated,
                    Err(err) => return Err((self, err)),
                };
                self.core.pending = None;
                self.append_lifecycle(EventPayload::ActionResolved(Box::new(
                    validated.resolution(),
                )));
                Ok((self.transition(EventPayload::RunRunning), validated))
            }

            /// `awaiting -> running` without an answer: the provider can no longer continue
            /// from the pending action (its process exited), so the caller fails the run
            /// next. Appends `run.running`; the action is no longer pending (a late answer
            /// gets `EXECUTION_TERMINAL` once the run has failed).
            #[must_use]
            pub fn withdraw(mut self) -> Execution<Running> {
                self.core.pending = None;
                self.transition(EventPayload::RunRunning)
            }
        }
    };
}

awaiting!(
    AwaitingInput,
    FormResponse,
    FormRequest,
    FormInput,
    validate_form,
    ValidatedForm
);
awaiting!(
    AwaitingApproval,
    ApprovalResponse,
    ApprovalRequest,
    ToolApproval,
    validate_approval,
    ValidatedApproval
);

impl<S: NonTerminal> Execution<S> {
    /// `any non-terminal -> cancelling`: records the request and appends `run.cancelling`.
    /// On an execution already cancelling it appends nothing: cancellation is idempotent.
    #[must_use]
    pub fn begin_cancel(mut self, reason: CancelReason) -> Execution<Cancelling> {
        if S::STATE == ExecutionState::Cancelling {
            return self.into_state();
        }
        self.core.pending = None;
        self.core.cancel_reason = Some(reason.clone());
        self.transition(EventPayload::RunCancelling(reason))
    }
}

impl Execution<Cancelling> {
    /// `cancelling -> cancelled`: appends the one `run.cancelled`, with the reason given to
    /// [`begin_cancel`](Execution::begin_cancel).
    #[must_use]
    pub fn confirm_cancelled(mut self) -> Execution<Cancelled> {
        let reason = self.core.cancel_reason.take().unwrap_or_default();
        self.transition(EventPayload::RunCancelled(reason))
    }
}

impl Execution<Failed> {
    /// The full error (with its internal diagnostic). Only its
    /// [public projection](HarnessError::public) is in the event log.
    #[must_use]
    pub fn error(&self) -> &HarnessError {
        self.core
            .error
            .as_ref()
            .expect("a failed execution always holds its error")
    }
}

impl<S: State> fmt::Debug for Execution<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Execution")
            .field("id", self.id())
            .field("state", &S::STATE)
            .field("events", &self.core.log.len())
            .finish()
    }
}

/// An execution in any state: for storage, with typed access back through `TryFrom`.
///
/// ```
/// use harness_core::id::ExecutionId;
/// use harness_core::lifecycle::{AnyExecution, Execution, ExecutionState, state};
///
/// let any: AnyExecution = Execution::queue(ExecutionId::generate()).start().into();
/// assert_eq!(any.state(), ExecutionState::Starting);
/// // Asking for the wrong state gives the execution back, unharmed.
/// let err = Execution::<state::Running>::try_from(any).unwrap_err();
/// assert_eq!(err.actual(), ExecutionState::Starting);
/// let starting = Execution::<state::Starting>::try_from(err.into_inner()).unwrap();
/// let _running = starting.run();
/// ```
#[derive(Debug)]
#[allow(missing_docs)] // variants are named after the states they hold
pub enum AnyExecution {
    Queued(Execution<Queued>),
    Starting(Execution<Starting>),
    Running(Execution<Running>),
    AwaitingInput(Execution<AwaitingInput>),
    AwaitingApproval(Execution<AwaitingApproval>),
    Cancelling(Execution<Cancelling>),
    Succeeded(Execution<Succeeded>),
    Failed(Execution<Failed>),
    Cancelled(Execution<Cancelled>),
}

macro_rules! any_dispatch {
    ($self:expr, $e:ident => $body:expr) => {
        match $self {
            AnyExecution::Queued($e) => $body,
            AnyExecution::Starting($e) => $body,
            AnyExecution::Running($e) => $body,
            AnyExecution::AwaitingInput($e) => $body,
            AnyExecution::AwaitingApproval($e) => $body,
            AnyExecution::Cancelling($e) => $body,
            AnyExecution::Succeeded($e) => $body,
            AnyExecution::Failed($e) => $body,
            AnyExecution::Cancelled($e) => $body,
        }
    };
}

impl AnyExecution {
    /// The current state.
    #[must_use]
    pub fn state(&self) -> ExecutionState {
        any_dispatch!(self, e => e.state())
    }

    /// The execution id.
    #[must_use]
    pub fn id(&self) -> &ExecutionId {
        any_dispatch!(self, e => e.id())
    }

    /// A reader of the execution's events.
    #[must_use]
    pub fn events(&self) -> LogReader {
        any_dispatch!(self, e => e.events())
    }

    /// The pending action, when awaiting one.
    #[must_use]
    pub fn pending(&self) -> Option<&ActionRequest> {
        match self {
            Self::AwaitingInput(e) => Some(e.pending()),
            Self::AwaitingApproval(e) => Some(e.pending()),
            _ => None,
        }
    }

    /// Begins cancellation from any non-terminal state; a terminal execution comes back as
    /// `Err(self)` unchanged.
    ///
    /// # Errors
    /// `Err(self)` when the execution is already terminal.
    pub fn begin_cancel(self, reason: CancelReason) -> Result<Execution<Cancelling>, Self> {
        match self {
            Self::Queued(e) => Ok(e.begin_cancel(reason)),
            Self::Starting(e) => Ok(e.begin_cancel(reason)),
            Self::Running(e) => Ok(e.begin_cancel(reason)),
            Self::AwaitingInput(e) => Ok(e.begin_cancel(reason)),
            Self::AwaitingApproval(e) => Ok(e.begin_cancel(reason)),
            Self::Cancelling(e) => Ok(e.begin_cancel(reason)),
            terminal @ (Self::Succeeded(_) | Self::Failed(_) | Self::Cancelled(_)) => Err(terminal),
        }
    }
}

/// A stored log an execution cannot be restored from; see [`AnyExecution::restore`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("execution {execution} cannot be restored from its stored log: {problem}")]
pub struct RestoreError {
    execution: ExecutionId,
    problem: String,
}

impl AnyExecution {
    /// The execution whose log so far is `events` (as a store kept it), in the state that
    /// log leaves it in, with its pending action: for a replica taking over an execution
    /// whose owner was lost. Its log holds `events` (readers see them) and continues after
    /// them. Like one queued with [`Execution::fail_on_drop`], it appends `run.failed`
    /// (`EXECUTION_LOST`) if it is dropped before it ends.
    ///
    /// ```
    /// use harness_core::id::ExecutionId;
    /// use harness_core::lifecycle::{AnyExecution, Execution, ExecutionState};
    ///
    /// let id = ExecutionId::generate();
    /// let running = Execution::queue(id.clone()).start().run();
    /// let stored: Vec<_> = running.events().snapshot(Default::default()).iter().map(|e| (**e).clone()).collect();
    /// let restored = AnyExecution::restore(&id, stored).unwrap();
    /// assert_eq!(restored.state(), ExecutionState::Running);
    /// assert_eq!(restored.events().len(), 3);
    /// # drop(running);
    /// ```
    ///
    /// # Errors
    /// When `events` is empty, names another execution, is not numbered from 1 without a
    /// gap, has ended, or leaves an awaiting state without its action.
    pub fn restore(
        id: &ExecutionId,
        events: impl IntoIterator<Item = Event>,
    ) -> Result<Self, RestoreError> {
        let refuse = |problem: String| RestoreError {
            execution: id.clone(),
            problem,
        };
        let log = EventLog::new(id.clone());
        let mut state = None;
        let mut pending: Option<ActionRequest> = None;
        let mut cancel_reason = None;
        for event in events {
            let (seq, kind) = (event.seq(), event.kind());
            match event.payload() {
                EventPayload::ActionRequested(request) => pending = Some((**request).clone()),
                EventPayload::ActionResolved(_) => pending = None,
                EventPayload::RunCancelling(reason) => {
                    pending = None;
                    cancel_reason = Some(reason.clone());
                }
                payload => {
                    if payload.is_terminal() {
                        return Err(refuse(format!("it ended ({})", kind.as_str())));
                    }
                }
            }
            if let Some(next) = event.payload().implied_state() {
                state = Some(next);
            }
            if !log.append_stored(event) {
                return Err(refuse(format!(
                    "event {seq} ({}) does not continue the log of {} event(s) (another \
                     execution's, or out of order)",
                    kind.as_str(),
                    log.len()
                )));
            }
        }
        let Some(state) = state else {
            return Err(refuse("it holds no lifecycle event".to_owned()));
        };
        let awaiting = matches!(
            state,
            ExecutionState::AwaitingInput | ExecutionState::AwaitingApproval
        );
        if awaiting != pending.is_some() {
            return Err(refuse(format!(
                "it is {state} with {} pending action",
                if pending.is_some() { "a" } else { "no" }
            )));
        }
        let fits = match (state, &pending) {
            (ExecutionState::AwaitingInput, Some(p)) => matches!(p.kind, ActionKind::FormInput(_)),
            (ExecutionState::AwaitingApproval, Some(p)) => {
                matches!(p.kind, ActionKind::ToolApproval(_))
            }
            _ => true,
        };
        if !fits {
            return Err(refuse(format!(
                "it is {state} but its pending action is of another kind"
            )));
        }
        let core = Box::new(Core {
            log,
            pending,
            cancel_reason,
            error: None,
            fail_on_drop: true,
        });
        fn at<S: State>(core: Box<Core>) -> AnyExecution {
            S::wrap(Execution {
                core,
                _state: PhantomData,
            })
        }
        Ok(match state {
            ExecutionState::Queued => at::<Queued>(core),
            ExecutionState::Starting => at::<Starting>(core),
            ExecutionState::Running => at::<Running>(core),
            ExecutionState::AwaitingInput => at::<AwaitingInput>(core),
            ExecutionState::AwaitingApproval => at::<AwaitingApproval>(core),
            ExecutionState::Cancelling => at::<Cancelling>(core),
            ExecutionState::Succeeded | ExecutionState::Failed | ExecutionState::Cancelled => {
                unreachable!("a terminal event was refused above")
            }
        })
    }
}

impl<S: State> From<Execution<S>> for AnyExecution {
    fn from(e: Execution<S>) -> Self {
        S::wrap(e)
    }
}

/// An [`AnyExecution`] was not in the requested state; it is handed back intact.
#[derive(Debug, thiserror::Error)]
#[error("execution {} is {actual}, not {expected}", .execution.id())]
pub struct WrongState {
    expected: ExecutionState,
    actual: ExecutionState,
    execution: AnyExecution,
}

impl WrongState {
    /// The state that was asked for.
    #[must_use]
    pub fn expected(&self) -> ExecutionState {
        self.expected
    }
    /// The state the execution is in.
    #[must_use]
    pub fn actual(&self) -> ExecutionState {
        self.actual
    }
    /// The execution, unharmed.
    #[must_use]
    pub fn into_inner(self) -> AnyExecution {
        self.execution
    }
}

impl<S: State> TryFrom<AnyExecution> for Execution<S> {
    type Error = WrongState;
    fn try_from(any: AnyExecution) -> Result<Self, Self::Error> {
        S::unwrap(any).map_err(|execution| WrongState {
            expected: S::STATE,
            actual: execution.state(),
            execution,
        })
    }
}
