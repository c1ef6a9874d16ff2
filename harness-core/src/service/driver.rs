//! The driver: the one task of an execution. It owns the typestate lifecycle and calls the
//! runtime stack; see the [service docs](super) for what it guarantees.

use std::panic::AssertUnwindSafe;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures_util::FutureExt;
use tower::{Service, ServiceExt};
use tracing::Instrument;

use super::budget::{Admit, Budget};
use super::config::ServiceConfig;
use super::declared::Declared;
use super::handle::{Command, Outcome, Shared, already_resolved, not_pending};
use super::segment::{BoxSegmentStream, ExecutionRuntime, RuntimeStack, Segment};
use crate::action::{
    ActionKind, ActionRequest, ActionResponse, ActionResponseError, ValidatedResponse,
};
use crate::adapter::{AdapterEvent, EventResult, ResumeDecision};
use crate::error::{ErrorCategory, ErrorCode, HarnessError};
use crate::event::{CancelReason, CancelSource, Content, RunSucceeded};
use crate::lifecycle::{AnyExecution, Execution, NonTerminal, state};

/// How many ready items the driver takes from a segment before it looks at cancellation and
/// commands again: one `select!` per batch instead of one per item.
pub(super) const BATCH: usize = 64;

/// How a run segment ended.
enum SegmentEnd {
    Completed(RunSucceeded),
    Action(ActionRequest),
    Failed(HarnessError),
    Stopped(Stop),
}

/// Why the driver stopped waiting on the stack or the caller.
#[derive(Clone, Copy)]
enum Stop {
    /// Cancellation was requested (by a caller, a linked token, or abandonment).
    Cancelled,
    /// The request's deadline passed.
    Deadline,
    /// The execution's wall-time limit passed.
    WallTime,
}

/// When the execution must stop: the request's deadline and the wall-time limit.
#[derive(Clone, Copy)]
struct Clock {
    deadline: Option<tokio::time::Instant>,
    wall_by: Option<tokio::time::Instant>,
}

/// One item of a segment as the driver polls it: `None` when the stream ended, `Err` for a
/// panic in a layer's `poll_next` (after which the stream is never polled again).
type Polled = Option<Result<EventResult, ()>>;

pub(super) struct Driver {
    pub(super) config: ServiceConfig,
    pub(super) shared: Arc<Shared>,
    pub(super) execution: Arc<ExecutionRuntime>,
    pub(super) stack: RuntimeStack,
    /// Whether the driver still listens for commands: `false` once every handle is gone.
    pub(super) listening: bool,
    /// Whether any content or artifact was appended (output may have occurred).
    pub(super) emitted: bool,
    /// When the execution must end (the request's deadline).
    pub(super) deadline: Option<tokio::time::Instant>,
    /// What the adapter's descriptor declares it does not do, checked against every item.
    pub(super) declared: Declared,
    /// Content received in the current batch, appended together.
    pub(super) content: Vec<Content>,
    /// The run limits in force and what was counted against them.
    pub(super) budget: Budget,
    /// The service's store, when it is durable.
    pub(super) durable: Option<super::persist::Durable>,
    /// The service's pool of paused runtimes, when the adapter's may be evicted.
    pub(super) pool: Option<Arc<super::pool::Pool>>,
    /// The answers accepted so far, in order: what a runtime restoring a later pause gets.
    pub(super) answers: Vec<ActionResponse>,
}

/// Records `response` as the answer to the pending action in the store, when it is a valid
/// answer to it (an invalid one is left to the validation that follows, which refuses it).
///
/// # Errors
/// `ACTION_ALREADY_RESOLVED` when another answer (from any replica) was recorded first; the
/// store's error when it fails.
async fn claim(
    durable: &super::persist::Durable,
    shared: &Shared,
    response: &ActionResponse,
) -> Result<(), HarnessError> {
    let Some(request) = shared.reader.pending_action() else {
        return Ok(());
    };
    if request.validate(response.clone()).is_err() {
        return Ok(());
    }
    let resolution = crate::store::Resolution {
        action_id: response.action_id().clone(),
        revision: u64::from(request.revision.get()),
        response: serde_json::to_value(response).unwrap_or_default(),
        at: crate::time::Timestamp::now(),
    };
    match durable.store.resolve(&shared.id, resolution).await {
        Ok(()) => Ok(()),
        Err(crate::store::StoreError::AlreadyResolved { action, .. }) => {
            Err(already_resolved(&action))
        }
        Err(e) => Err(e.to_harness_error()),
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // Answers still queued when the driver goes (the run ended, or the runtime shut
        // down) are answered now; later ones are refused at once.
        self.shared.close_inbox();
    }
}

/// Waits for the next command (`None`: every handle is gone), or forever once the driver
/// stopped listening.
async fn next_command(shared: &Shared, listening: bool) -> Option<Command> {
    if listening {
        shared.next_command().await
    } else {
        std::future::pending().await
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn timeout_error(what: &str) -> HarnessError {
    HarnessError::new(
        ErrorCategory::Timeout,
        format!("the execution exceeded its {what}"),
    )
    .with_code(ErrorCode::DEADLINE_EXCEEDED)
}

/// The provider was lost while the execution awaited an action.
fn provider_lost() -> HarnessError {
    HarnessError::new(
        ErrorCategory::Unavailable,
        "the provider was lost while the execution awaited an action",
    )
    .with_code(ErrorCode::PROVIDER_LOST)
    .with_retryable(true)
}

/// Why an execution awaiting an action goes on without an answer.
enum Unanswered {
    /// A stop (cancellation, the deadline) or nobody left to answer: cancellation.
    Cancel(Execution<state::Cancelling>),
    /// The provider is gone ([`HarnessRuntime::lost`]), or the wall-time limit passed: the
    /// action is withdrawn, and the run fails with this error (the lifecycle has no edge
    /// from awaiting to failed, but one to running).
    ///
    /// [`HarnessRuntime::lost`]: crate::adapter::HarnessRuntime::lost
    Withdrawn(Execution<state::Running>, HarnessError),
}

fn protocol(message: &str, diagnostic: String) -> HarnessError {
    HarnessError::new(ErrorCategory::Protocol, message.to_owned())
        .with_code(ErrorCode::EVENT_ORDER_VIOLATION)
        .with_diagnostic(diagnostic)
}

/// The span of one segment (`harness.segment`, INFO): the stack's call and the runtime's
/// stream, read to the segment's end. A child of the span current in the driver's task (the
/// execution's, under `harness_layers::trace`); the adapter's spans and the tool calls made
/// meanwhile are its children. `kind` is `turn` or `resume`.
fn segment_span(kind: &'static str, execution: &crate::id::ExecutionId) -> tracing::Span {
    tracing::info_span!("harness.segment", kind, execution_id = execution.as_str())
}

/// A panic in a layer of the runtime stack. Its message went to the process's panic hook; it
/// is not copied here, where no redactor would see it.
fn layer_panicked(what: &str) -> HarnessError {
    HarnessError::new(ErrorCategory::Internal, "the execution failed unexpectedly")
        .with_code(ErrorCode::LAYER_PANICKED)
        .with_diagnostic(format!(
            "a layer of the runtime stack panicked in {what} (its message went to the panic hook)"
        ))
}

/// Resolves when the execution must stop waiting: cancelled (directly, or through a token a
/// layer linked), past its deadline, or past its wall time.
async fn stop(shared: &Shared, clock: Clock) -> Stop {
    tokio::select! {
        biased;
        () = shared.cancel.cancelled() => Stop::Cancelled,
        source = std::future::poll_fn(|cx| shared.poll_links(cx)) => {
            shared.request_cancel(CancelReason::from_source(source));
            Stop::Cancelled
        }
        () = sleep_until(clock.deadline) => Stop::Deadline,
        () = sleep_until(clock.wall_by) => Stop::WallTime,
    }
}

/// Polls the stack's stream once, turning a panic in a layer into an `Err` item.
fn poll_stream(stream: &mut BoxSegmentStream, cx: &mut Context<'_>) -> Poll<Polled> {
    match std::panic::catch_unwind(AssertUnwindSafe(|| stream.as_mut().poll_next(cx))) {
        Ok(Poll::Ready(item)) => Poll::Ready(item.map(Ok)),
        Ok(Poll::Pending) => Poll::Pending,
        Err(_) => Poll::Ready(Some(Err(()))),
    }
}

impl Driver {
    fn clock(&self) -> Clock {
        Clock {
            deadline: self.deadline,
            wall_by: self.budget.wall_by,
        }
    }

    /// The error a stop past a deadline ends the run with (after tripping the execution's
    /// token, as for the request's deadline); `None` for a cancellation.
    fn expired(&self, stop: Stop, what: &str) -> Option<HarnessError> {
        match stop {
            Stop::Cancelled => None,
            Stop::Deadline => {
                self.deadline_passed();
                Some(timeout_error(what))
            }
            Stop::WallTime => {
                self.deadline_passed();
                Some(self.budget.wall_time_error())
            }
        }
    }

    fn cancel_reason(&self) -> CancelReason {
        self.shared
            .snapshot()
            .cancel_reason
            .clone()
            .unwrap_or_default()
    }

    /// The deadline passed: record why (unless a caller already gave a reason) and trip the
    /// execution's token, the abort signal runtimes watch, alongside the cancel hook.
    fn deadline_passed(&self) {
        self.shared
            .snapshot()
            .cancel_reason
            .get_or_insert_with(|| CancelReason::from_source(CancelSource::Deadline));
        self.shared.cancel.cancel();
    }

    /// Answers a command that arrives while no action is pending.
    fn refuse(&self, command: Command) {
        let Command::Respond(respond) = command;
        let (response, reply, _) = *respond;
        let id = response.action_id();
        let resolved = self.shared.snapshot().resolved.contains(id);
        let err = if resolved {
            already_resolved(id)
        } else {
            not_pending(id, None)
        };
        let _ = reply.send(Err(err));
    }

    /// Handles a command while no action is pending: refuse it, or note that every handle is
    /// gone.
    fn on_command(&mut self, command: Option<Command>) {
        match command {
            Some(command) => self.refuse(command),
            None => self.listening = false,
        }
    }

    /// A failure observed after a cancel was accepted is the runtime's answer to that cancel
    /// (an `initialize` or a stream aborted by the execution's token), so the run ends
    /// `run.cancelled`, not `run.failed`. Only failures the driver has not yet recorded are
    /// taken over: a segment that completed or paused did its work and ends as it ended, and a
    /// cancel accepted while an already-recorded failure runs its cleanup does not change it
    /// (cancellation is a request; `run.cancelled` is what confirms it).
    fn cancel_wins(&self, end: SegmentEnd) -> SegmentEnd {
        match end {
            SegmentEnd::Failed(_) if self.shared.cancel.is_cancelled() => {
                SegmentEnd::Stopped(Stop::Cancelled)
            }
            end => end,
        }
    }

    /// Calls the runtime stack with `segment`: waits until it is ready, then for its stream.
    /// Answers that arrive meanwhile are refused at once (nothing is pending); a stop ends
    /// the wait, dropping the call (what it created stays in the execution's runtime slot,
    /// for cleanup).
    async fn call(&mut self, segment: Segment) -> Result<BoxSegmentStream, SegmentEnd> {
        let mut stack = self.stack.clone();
        let shared = Arc::clone(&self.shared);
        let clock = self.clock();
        let calling = async move {
            let stack = stack.ready().await?;
            stack.call(segment).await
        };
        let mut calling = pin!(AssertUnwindSafe(calling).catch_unwind());
        let called = loop {
            tokio::select! {
                biased;
                stop = stop(&shared, clock) => return Err(SegmentEnd::Stopped(stop)),
                command = next_command(&shared, self.listening) => self.on_command(command),
                called = &mut calling => break called,
            }
        };
        match called {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(err)) => Err(self.cancel_wins(SegmentEnd::Failed(err))),
            Err(_) => Err(SegmentEnd::Failed(layer_panicked("a call"))),
        }
    }

    pub(super) async fn run(mut self, queued: Execution<state::Queued>) {
        if self.shared.cancel.is_cancelled() {
            return self.finish_cancel(queued).await;
        }
        let starting = queued.start();
        let span = segment_span("turn", &self.shared.id);
        let stream = match self
            .call(Segment::turn_of(Arc::clone(&self.execution)))
            .instrument(span.clone())
            .await
        {
            Ok(stream) => stream,
            Err(end) => return self.end_starting(starting, end).await,
        };
        let mut running = starting.run();
        let end = self.consume(&mut running, stream).instrument(span).await;
        self.drive(running, end).await;
    }

    /// Drives an execution taken over while awaiting an action (its runtime lost with its
    /// replica): waits for the answer, then resumes on a fresh runtime that restores the
    /// pause, and goes on as any execution.
    pub(super) async fn run_restored(mut self, restored: AnyExecution) {
        let resumed = match restored {
            AnyExecution::AwaitingInput(awaiting) => self.await_answer(awaiting).await,
            AnyExecution::AwaitingApproval(awaiting) => self.await_answer(awaiting).await,
            other => {
                // Only a paused execution is restored; anything else ends as lost.
                if let Ok(cancelling) = other.begin_cancel(self.cancel_reason()) {
                    self.confirm_cancel(cancelling).await;
                }
                return;
            }
        };
        match resumed {
            Ok((mut running, decision)) => {
                let segment = Segment::resume_of(Arc::clone(&self.execution), decision);
                let span = segment_span("resume", &self.shared.id);
                let end = match self.call(segment).instrument(span.clone()).await {
                    Ok(stream) => self.consume(&mut running, stream).instrument(span).await,
                    Err(end) => end,
                };
                self.drive(running, end).await;
            }
            Err(Unanswered::Cancel(cancelling)) => self.confirm_cancel(cancelling).await,
            Err(Unanswered::Withdrawn(running, err)) => self.fail(running, err).await,
        }
    }

    /// Runs the execution from the end of a segment to its terminal event.
    async fn drive(&mut self, mut running: Execution<state::Running>, mut end: SegmentEnd) {
        loop {
            match end {
                SegmentEnd::Completed(summary) => {
                    self.cleanup().await;
                    self.record(Outcome::Succeeded(summary.clone()));
                    let _done = running.succeed(summary);
                    return;
                }
                SegmentEnd::Failed(err) => return self.fail(running, err).await,
                SegmentEnd::Stopped(stop) => {
                    return match self.expired(stop, "deadline") {
                        Some(err) => self.fail(running, err).await,
                        None => self.finish_cancel(running).await,
                    };
                }
                SegmentEnd::Action(request) => {
                    let resumed = match request.kind {
                        ActionKind::FormInput(form) => {
                            let awaiting = running.request_input(request.id, form);
                            self.await_answer(awaiting).await
                        }
                        ActionKind::ToolApproval(approval) => {
                            let awaiting = running.request_approval(request.id, approval);
                            self.await_answer(awaiting).await
                        }
                    };
                    match resumed {
                        Ok((next, decision)) => {
                            running = next;
                            let segment = Segment::resume_of(Arc::clone(&self.execution), decision);
                            let span = segment_span("resume", &self.shared.id);
                            end = match self.call(segment).instrument(span.clone()).await {
                                Ok(stream) => {
                                    self.consume(&mut running, stream).instrument(span).await
                                }
                                Err(end) => end,
                            };
                        }
                        Err(Unanswered::Cancel(cancelling)) => {
                            return self.confirm_cancel(cancelling).await;
                        }
                        Err(Unanswered::Withdrawn(running, err)) => {
                            return self.fail(running, err).await;
                        }
                    }
                }
            }
        }
    }

    /// Ends an execution whose first call of the stack did not return a stream.
    async fn end_starting(&mut self, starting: Execution<state::Starting>, end: SegmentEnd) {
        match end {
            SegmentEnd::Stopped(stop) => match self.expired(stop, "deadline while starting") {
                Some(err) => self.fail(starting.run(), err).await,
                None => self.finish_cancel(starting).await,
            },
            SegmentEnd::Failed(err) => self.fail(starting.run(), err).await,
            SegmentEnd::Completed(_) | SegmentEnd::Action(_) => {
                unreachable!("a call of the stack yields no segment end")
            }
        }
    }

    /// Appends one item; `Some` when the segment must end here.
    fn apply(
        &mut self,
        running: &mut Execution<state::Running>,
        event: AdapterEvent,
        ending: &mut Option<SegmentEnd>,
    ) -> Option<SegmentEnd> {
        if ending.is_some() {
            return Some(SegmentEnd::Failed(protocol(
                "the adapter produced events after the end of a run segment",
                "item after Completed/Action".to_owned(),
            )));
        }
        if let AdapterEvent::Content(content) = event {
            if let Err(err) = self.declared.content(&content, &self.shared.adapter) {
                return Some(SegmentEnd::Failed(err));
            }
            self.content.push(content);
            self.emitted = true;
            return None;
        }
        // Everything else keeps its place after the content before it.
        if let Some(end) = self.flush_content(running) {
            return Some(end);
        }
        match event {
            AdapterEvent::Content(_) => unreachable!("handled above"),
            AdapterEvent::Artifact(artifact) => {
                if self.over_limit(1) {
                    return Some(SegmentEnd::Failed(self.budget.events_error()));
                }
                if let Err(e) = running.create_artifact(artifact) {
                    return Some(SegmentEnd::Failed(protocol(
                        "the adapter produced an invalid artifact",
                        e.to_string(),
                    )));
                }
                self.emitted = true;
            }
            AdapterEvent::Action(request) => {
                if let Err(err) = self.declared.action(&request, &self.shared.adapter) {
                    return Some(SegmentEnd::Failed(err));
                }
                // The caller's interrupt policy: a pause it does not permit is never opened.
                let policy = self.execution.interrupt_policy();
                if !policy.permits(request.action_type()) {
                    return Some(SegmentEnd::Failed(policy.forbidden(request.action_type())));
                }
                *ending = Some(SegmentEnd::Action(request));
            }
            AdapterEvent::Completed(summary) => *ending = Some(SegmentEnd::Completed(summary)),
        }
        None
    }

    /// Appends the content buffered in this batch, as far as the run limits allow: content
    /// past a limit is not appended, and the limit's failure ends the segment after the
    /// content before it.
    fn flush_content(&mut self, running: &mut Execution<state::Running>) -> Option<SegmentEnd> {
        if self.content.is_empty() {
            return None;
        }
        let mut breach = None;
        for (i, content) in self.content.iter().enumerate() {
            match self.budget.admit(content) {
                Admit::Yes => continue,
                Admit::Last(err) => {
                    breach = Some((i + 1, err));
                }
                Admit::No(err) => {
                    breach = Some((i, err));
                }
            }
            break;
        }
        let breach = breach.map(|(keep, err)| {
            self.content.truncate(keep);
            SegmentEnd::Failed(err)
        });
        if self.over_limit(self.content.len()) {
            self.content.clear();
            return Some(SegmentEnd::Failed(self.budget.events_error()));
        }
        if self.content.is_empty() {
            return breach;
        }
        match running.emit_all(self.content.drain(..)) {
            Ok(_) => breach,
            Err(e) => Some(SegmentEnd::Failed(protocol(
                "the adapter produced an invalid event",
                e.to_string(),
            ))),
        }
    }

    /// Whether appending `more` events would pass the execution's event limit.
    fn over_limit(&self, more: usize) -> bool {
        self.shared.reader.len().saturating_add(more) > self.budget.max_events()
    }

    /// Handles one item of a segment (`None`: the stream ended); `Some` ends the segment.
    fn handle(
        &mut self,
        running: &mut Execution<state::Running>,
        item: Polled,
        ending: &mut Option<SegmentEnd>,
    ) -> Option<SegmentEnd> {
        match item {
            None => Some(ending.take().unwrap_or_else(|| {
                SegmentEnd::Failed(protocol(
                    "the adapter ended a run segment without completing, failing or pausing",
                    "stream ended with no terminal item".to_owned(),
                ))
            })),
            Some(Err(())) => Some(SegmentEnd::Failed(layer_panicked("polling its stream"))),
            Some(Ok(Err(err))) => {
                let err = if self.emitted {
                    err.with_side_effects(true)
                } else {
                    err
                };
                Some(SegmentEnd::Failed(err))
            }
            Some(Ok(Ok(event))) => self.apply(running, event, ending),
        }
    }

    /// The driver stops reading `stream`: appends what its layers hold back (a redactor's
    /// tail), unless the segment already ended.
    fn drain(
        &mut self,
        running: &mut Execution<state::Running>,
        stream: &mut BoxSegmentStream,
        ending: &mut Option<SegmentEnd>,
    ) -> Option<SegmentEnd> {
        let mut held = Vec::new();
        let drained =
            std::panic::catch_unwind(AssertUnwindSafe(|| Pin::as_mut(stream).drain(&mut held)));
        if drained.is_err() {
            return Some(SegmentEnd::Failed(layer_panicked("drain")));
        }
        for item in held {
            if let Some(end) = self.apply(running, item, ending) {
                return Some(end);
            }
        }
        None
    }

    /// Consumes one run segment, appending its content, until its terminal item and the end
    /// of the stream (or a stop).
    async fn consume(
        &mut self,
        running: &mut Execution<state::Running>,
        stream: BoxSegmentStream,
    ) -> SegmentEnd {
        let end = self.consume_segment(running, stream).await;
        self.cancel_wins(end)
    }

    async fn consume_segment(
        &mut self,
        running: &mut Execution<state::Running>,
        mut stream: BoxSegmentStream,
    ) -> SegmentEnd {
        let shared = Arc::clone(&self.shared);
        let clock = self.clock();
        let grace = self.config.cancel_grace;
        // The terminal item seen, waiting for the end of the stream; bounded by the grace
        // period, so an adapter that keeps its stream open cannot hold the execution.
        let mut ending: Option<SegmentEnd> = None;
        let mut end_by: Option<tokio::time::Instant> = None;
        loop {
            if ending.is_some() && end_by.is_none() {
                let now = tokio::time::Instant::now();
                end_by = Some(
                    now.checked_add(grace)
                        .unwrap_or(now + Duration::from_secs(3600)),
                );
            }
            // Backpressure: a durable log holding a window of events its store has not taken
            // yet is not fed more until it has (stops and commands still count meanwhile).
            let backlogged = shared.reader.backlogged();
            let first = tokio::select! {
                biased;
                () = sleep_until(end_by), if end_by.is_some() => {
                    return SegmentEnd::Failed(protocol(
                        "the adapter did not end its run segment after its terminal item",
                        format!("stream still open {grace:?} after Completed/Action"),
                    ));
                }
                stop = stop(&shared, clock) => {
                    let end = if ending.is_none() {
                        self.drain(running, &mut stream, &mut ending)
                    } else {
                        None
                    };
                    if let Some(end) = self.flush_content(running).or(end) {
                        return end;
                    }
                    return SegmentEnd::Stopped(stop);
                }
                command = next_command(&shared, self.listening) => {
                    self.on_command(command);
                    continue;
                }
                () = shared.reader.room(), if backlogged => continue,
                item = std::future::poll_fn(|cx| poll_stream(&mut stream, cx)), if !backlogged => item,
            };
            // Take what is already ready without another `select!`: the cancel and command
            // futures cost more than appending an event.
            let mut item = first;
            let mut budget = BATCH;
            let mut ready = Context::from_waker(Waker::noop());
            loop {
                match item {
                    // The hot path: plain content, staged as is.
                    Some(Ok(Ok(AdapterEvent::Content(content)))) if ending.is_none() => {
                        if let Err(err) = self.declared.content(&content, &self.shared.adapter) {
                            return self
                                .flush_content(running)
                                .unwrap_or(SegmentEnd::Failed(err));
                        }
                        self.content.push(content);
                        self.emitted = true;
                    }
                    other => {
                        if let Some(end) = self.handle(running, other, &mut ending) {
                            // Content before the end keeps its place; a failure to append it
                            // wins.
                            return self.flush_content(running).unwrap_or(end);
                        }
                    }
                }
                budget -= 1;
                if budget == 0 {
                    break;
                }
                // Pending here is seen again by the `select!` above, with the task's waker.
                match poll_stream(&mut stream, &mut ready) {
                    Poll::Ready(next) => item = next,
                    Poll::Pending => break,
                }
            }
            if let Some(end) = self.flush_content(running) {
                return end;
            }
        }
    }

    /// Waits for a valid answer while awaiting an action; a stop (cancellation, or the
    /// deadline: the diagram has no edge from awaiting to failed) begins cancellation, and
    /// a lost provider withdraws the action.
    async fn await_answer<S>(
        &mut self,
        mut awaiting: Execution<S>,
    ) -> Result<(Execution<state::Running>, ResumeDecision), Unanswered>
    where
        S: NonTerminal,
        Execution<S>: Awaiting,
    {
        let pending_id = awaiting.pending_request().id.clone();
        let shared = Arc::clone(&self.shared);
        let clock = self.clock();
        if !self.listening {
            // Every handle was dropped before the run paused: nobody can answer.
            return Err(Unanswered::Cancel(self.abandon(awaiting)));
        }
        let cell = self.execution.current();
        // A paused runtime takes a place in the pool, which may evict it while it waits.
        let mut idle = match (&self.pool, &cell) {
            (Some(pool), Some(_)) => Some(pool.enter()),
            _ => None,
        };
        let expires = self.expiry(&pending_id);
        let id = self.shared.id.clone();
        let mut lost: Pin<Box<dyn std::future::Future<Output = ()> + Send>> =
            Box::pin(async move {
                match cell {
                    Some(cell) => cell.lost(&id).await,
                    None => std::future::pending().await,
                }
            });
        loop {
            let evicted = async {
                match idle.as_mut() {
                    Some(idle) => idle.evicted().await,
                    None => std::future::pending().await,
                }
            };
            let command = tokio::select! {
                biased;
                stop = stop(&shared, clock) => {
                    match stop {
                        // Past the wall time the run fails with its own code: the action
                        // is withdrawn first, as for a lost provider.
                        Stop::WallTime => {
                            let err = self.expired(stop, "wall time");
                            let err = err.unwrap_or_else(|| self.budget.wall_time_error());
                            return Err(Unanswered::Withdrawn(awaiting.withdraw(), err));
                        }
                        Stop::Deadline => self.deadline_passed(),
                        Stop::Cancelled => {}
                    }
                    return Err(Unanswered::Cancel(awaiting.begin_cancel(self.cancel_reason())));
                }
                () = &mut lost => {
                    return Err(Unanswered::Withdrawn(awaiting.withdraw(), provider_lost()));
                }
                // The caller's bound on an answer: the action expires, withdrawn, and the run
                // fails with its own code.
                () = sleep_until(expires) => {
                    let err = self.execution.interrupt_policy().expired().with_retryable(false);
                    return Err(Unanswered::Withdrawn(awaiting.withdraw(), err));
                }
                () = evicted => {
                    idle = None;
                    if self.evict(awaiting.pending_request().clone()).await {
                        // The runtime is gone: its provider's loss means nothing any more.
                        lost = Box::pin(std::future::pending());
                    }
                    continue;
                }
                command = next_command(&shared, self.listening) => command,
            };
            let Some(Command::Respond(respond)) = command else {
                // Every handle is gone: nobody can answer any more.
                self.listening = false;
                return Err(Unanswered::Cancel(self.abandon(awaiting)));
            };
            let (response, reply, stored) = *respond;
            let id = response.action_id().clone();
            if id != pending_id {
                let resolved = self.shared.snapshot().resolved.contains(&id);
                let err = if resolved {
                    already_resolved(&id)
                } else {
                    not_pending(&id, Some(&pending_id))
                };
                let _ = reply.send(Err(err));
                continue;
            }
            // A durable execution's answer is claimed in the store first, so that of answers
            // sent to any replicas one wins; only a valid one claims it.
            if !stored
                && let Some(durable) = &self.durable
                && let Err(err) = claim(durable, &shared, &response).await
            {
                let _ = reply.send(Err(err));
                continue;
            }
            let kept = response.clone();
            match awaiting.answer(response) {
                Ok((running, validated)) => {
                    self.answers.push(kept);
                    self.shared.snapshot().resolved.insert(id);
                    let _ = reply.send(Ok(()));
                    let decision = ResumeDecision::new(validated)
                        .for_binding(self.execution.binding().cloned());
                    return Ok((running, decision));
                }
                Err((back, err)) => {
                    awaiting = back;
                    let _ = reply.send(Err(err));
                }
            }
        }
    }

    /// When the pending action `pending` expires under the request's interrupt policy: its
    /// `answerWithinMs` after the `action.requested` the log holds for it (recorded now for
    /// a fresh pause, earlier for one taken over), so a takeover keeps the deadline.
    fn expiry(&self, pending: &crate::id::ActionId) -> Option<tokio::time::Instant> {
        let within = self.execution.interrupt_policy().answer_within()?;
        let now = tokio::time::Instant::now();
        let requested =
            self.shared
                .reader
                .pending_event()
                .and_then(|event| match event.payload() {
                    crate::event::EventPayload::ActionRequested(request)
                        if request.id == *pending =>
                    {
                        Some(event.time())
                    }
                    _ => None,
                });
        let elapsed = requested.map_or(Duration::ZERO, |at| {
            let ms = crate::time::Timestamp::now()
                .as_millis()
                .saturating_sub(at.as_millis());
            Duration::from_millis(u64::try_from(ms).unwrap_or(0))
        });
        let left = within.saturating_sub(elapsed);
        Some(now.checked_add(left).unwrap_or(now))
    }

    /// Lets the paused runtime go (the pool evicted it): cleaned up now, bounded by the
    /// cleanup deadline; the answer restores the pause on a fresh one.
    ///
    /// A runtime that says it could not be restored now
    /// ([`HarnessRuntime::restorable`](crate::adapter::HarnessRuntime::restorable)) is
    /// kept, out of the pool. Returns whether the runtime went.
    async fn evict(&self, pending: ActionRequest) -> bool {
        let restorable = self.execution.current().is_some_and(|cell| {
            std::panic::catch_unwind(AssertUnwindSafe(|| cell.restorable())).unwrap_or(false)
        });
        if !restorable {
            tracing::debug!(execution = %self.shared.id, "paused runtime kept: it cannot be restored");
            return false;
        }
        let Some(cell) = self.execution.evict(pending, self.answers.clone()) else {
            return false;
        };
        if let Some(pool) = &self.pool {
            pool.evicted_one();
        }
        tracing::debug!(execution = %self.shared.id, "paused runtime evicted from the pool");
        cell.cleanup(self.config.cleanup_deadline, &self.shared.id)
            .await;
        true
    }

    /// Cancels an execution nobody can answer any more (every handle dropped).
    fn abandon<S: NonTerminal>(&self, awaiting: Execution<S>) -> Execution<state::Cancelling> {
        self.shared
            .snapshot()
            .cancel_reason
            .get_or_insert_with(|| CancelReason::from_source(CancelSource::Abandoned));
        self.shared.cancel.cancel();
        awaiting.begin_cancel(self.cancel_reason())
    }

    fn record(&self, outcome: Outcome) {
        self.shared.snapshot().outcome = Some(outcome);
    }

    /// Calls the current runtime's cancel hook once, bounded by the grace period.
    async fn cancel_runtime(&self, reason: CancelReason) {
        if let Some(cell) = self.execution.current() {
            cell.cancel(reason, self.config.cancel_grace, &self.shared.id)
                .await;
        }
    }

    /// Calls the current runtime's cleanup once, bounded by its deadline.
    async fn cleanup(&self) {
        if let Some(cell) = self.execution.current() {
            cell.cleanup(self.config.cleanup_deadline, &self.shared.id)
                .await;
        }
    }

    /// The one failure path: cleanup, then the one `run.failed`. A runtime that timed out
    /// may still be working: its cancel hook runs first (once, bounded).
    async fn fail(&mut self, running: Execution<state::Running>, err: HarnessError) {
        if err.category() == ErrorCategory::Timeout {
            self.cancel_runtime(CancelReason::from_source(CancelSource::Deadline))
                .await;
        }
        self.cleanup().await;
        // The operator's record of why: the diagnostic never reaches a client, so without
        // this line it reaches no one when the application does not read the outcome.
        tracing::warn!(
            execution_id = %self.shared.id,
            code = %err.code(),
            category = err.category().as_str(),
            diagnostic = err.diagnostic().unwrap_or(""),
            "execution failed: {}",
            err.message()
        );
        self.record(Outcome::Failed(err.clone()));
        let _done = running.fail(err);
    }

    async fn finish_cancel<S: NonTerminal>(&self, execution: Execution<S>) {
        let cancelling = execution.begin_cancel(self.cancel_reason());
        self.confirm_cancel(cancelling).await;
    }

    /// The one cancellation path: cancel hook (bounded by the grace period), cleanup
    /// (bounded by its deadline), then the one `run.cancelled`.
    async fn confirm_cancel(&self, cancelling: Execution<state::Cancelling>) {
        let reason = self.cancel_reason();
        self.cancel_runtime(reason.clone()).await;
        self.cleanup().await;
        self.record(Outcome::Cancelled(reason));
        let _done = cancelling.confirm_cancelled();
    }
}

/// The two awaiting states, seen alike by the driver.
trait Awaiting: Sized {
    fn pending_request(&self) -> &ActionRequest;
    fn withdraw(self) -> Execution<state::Running>;
    fn answer(
        self,
        response: ActionResponse,
    ) -> Result<(Execution<state::Running>, ValidatedResponse), (Self, HarnessError)>;
}

macro_rules! awaiting {
    ($state:ident, $into:ident, $validated:ident) => {
        impl Awaiting for Execution<state::$state> {
            fn pending_request(&self) -> &ActionRequest {
                self.pending()
            }

            fn withdraw(self) -> Execution<state::Running> {
                Execution::<state::$state>::withdraw(self)
            }

            fn answer(
                self,
                response: ActionResponse,
            ) -> Result<(Execution<state::Running>, ValidatedResponse), (Self, HarnessError)> {
                let typed = match response.$into() {
                    Ok(typed) => typed,
                    Err(other) => {
                        let err = ActionResponseError::KindMismatch {
                            action: self.pending().id.clone(),
                            expected: self.pending().action_type(),
                            found: other.action_type(),
                        };
                        return Err((self, err.into()));
                    }
                };
                match self.resolve(typed) {
                    Ok((running, validated)) => {
                        Ok((running, ValidatedResponse::$validated(validated)))
                    }
                    Err((back, err)) => Err((back, err.into())),
                }
            }
        }
    };
}

awaiting!(AwaitingInput, into_form, Form);
awaiting!(AwaitingApproval, into_approval, Approval);

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;

    use super::*;
    use crate::adapter::{BoxStream, RunContext, Simple, SimpleAdapter};
    use crate::event::{EventPayload, TextDelta};
    use crate::id::Cursor;
    use crate::manifest::{ContractVersion, Describe, ExecutionMode, HarnessDescriptor};
    use crate::service::{AdapterService, ExecutionHandle, ExecutionRequest};

    /// How the test stream behaves after its deltas.
    #[derive(Clone, Copy)]
    enum Then {
        Complete,
        Panic,
    }

    /// Streams `count` deltas (going pending before every `pending_every`-th one, if set),
    /// then completes or panics.
    struct Deltas {
        descriptor: HarnessDescriptor,
        count: usize,
        pending_every: Option<usize>,
        then: Then,
    }

    impl Deltas {
        fn new(count: usize, pending_every: Option<usize>, then: Then) -> Simple<Self> {
            let descriptor = HarnessDescriptor::builder("deltas".parse().unwrap(), "0.1.0")
                .contract_version(ContractVersion::V1)
                .execution_mode(ExecutionMode::in_process())
                .build()
                .unwrap();
            Simple::new(Self {
                descriptor,
                count,
                pending_every,
                then,
            })
        }
    }

    impl Describe for Deltas {
        fn descriptor(&self) -> &HarnessDescriptor {
            &self.descriptor
        }
    }

    impl SimpleAdapter for Deltas {
        fn stream(&self, _run: RunContext) -> BoxStream<'static, EventResult> {
            let (count, every, then) = (self.count, self.pending_every, self.then);
            Box::pin(
                futures_util::stream::iter(0..=count).then(move |i| async move {
                    if every.is_some_and(|every| i % every == every - 1) {
                        tokio::task::yield_now().await;
                    }
                    if i < count {
                        let text = TextDelta::new(i.to_string());
                        return Ok(AdapterEvent::Content(Content::MessageDelta(text)));
                    }
                    match then {
                        Then::Complete => Ok(AdapterEvent::Completed(RunSucceeded::default())),
                        Then::Panic => panic!("boom after the deltas"),
                    }
                }),
            )
        }
    }

    async fn texts(handle: &ExecutionHandle) -> Vec<String> {
        handle
            .events(Cursor::START)
            .filter_map(|e| async move {
                match e.payload() {
                    EventPayload::MessageDelta(d) => Some(d.text.clone()),
                    _ => None,
                }
            })
            .collect()
            .await
    }

    fn numbers(count: usize) -> Vec<String> {
        (0..count).map(|i| i.to_string()).collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_delta_arrives_in_order_whether_the_stream_is_ready_or_pending() {
        // Several batches, always ready; then pending inside and at the edge of batches.
        for pending_every in [None, Some(1), Some(7), Some(BATCH), Some(BATCH + 1)] {
            let count = 3 * BATCH + 5;
            let handle = AdapterService::new(Deltas::new(count, pending_every, Then::Complete))
                .start(ExecutionRequest::new("go"))
                .await
                .unwrap();
            assert!(matches!(handle.outcome().await, Outcome::Succeeded(_)));
            assert_eq!(texts(&handle).await, numbers(count), "{pending_every:?}");
            let seqs: Vec<u64> = handle
                .log()
                .snapshot(Cursor::START)
                .iter()
                .map(|e| e.seq().get())
                .collect();
            assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
        }
    }

    #[tokio::test]
    async fn a_panic_mid_batch_keeps_the_content_before_it() {
        // The panic comes in the same batch as the deltas before it (all ready at once), and
        // in a later poll (pending before it).
        for pending_every in [None, Some(BATCH / 2)] {
            let count = BATCH / 2 + 3;
            let handle = AdapterService::new(Deltas::new(count, pending_every, Then::Panic))
                .start(ExecutionRequest::new("go"))
                .await
                .unwrap();
            let Outcome::Failed(err) = handle.outcome().await else {
                panic!("expected a failure");
            };
            assert_eq!(err.code(), &ErrorCode::ADAPTER_PANICKED);
            assert_eq!(texts(&handle).await, numbers(count), "{pending_every:?}");
            let last = handle.log().last().unwrap();
            assert!(matches!(last.payload(), EventPayload::RunFailed(_)));
        }
    }
}
