//! Fixtures of the runtime contract's lifecycle rules that need the suite *between* the
//! service and the adapter: a wrapping adapter ([`Wrapped`]) whose runtimes delegate to the
//! adapter's and watch (or disturb) what the service does with them.
//!
//! - `runtime.single_mutation` ([`Mode::Guard`]): "only one mutating stream, resume,
//!   restart or cleanup operation runs at a time". Every mutating call marks its runtime
//!   busy until it returns (a stream: until its terminal item, its end or its drop); a call
//!   that finds the runtime busy is an overlap, and fails the fixture. The suite drives the
//!   service with what could make it overlap: two runs at once, a cancel while streaming,
//!   an answer and a cancel at once, two answers at once, a cancel while the resumed segment
//!   streams, and a run cut by its turn deadline. The service never calls `restart` (a
//!   caller cannot ask it to), so restart cannot overlap there; the guard counts it all the
//!   same.
//! - `runtime.bounded_cleanup` ([`Mode::HangCleanup`]): a runtime whose cleanup never
//!   returns is cut at the service's cleanup deadline: the run's terminal event comes after
//!   at most that deadline, the outcome the run reached stands, the runtime (and the
//!   adapter's runtime it holds, with its processes and connections) is dropped, and the
//!   service reports the cut as a classified error (`timeout`, `TIMEOUT`, in its log).
//!   Before that, the adapter's own cleanup is checked bounded where it is hardest: with a
//!   hanging segment just given up, and with a pause open.
//! - `session.restart` ([`Mode::Restart`], on top of the runtime-boundary check): restart
//!   is called before every segment, so a conversation's later turn recalls what an
//!   earlier one kept across a restart, and a run paused on an approval is restarted before
//!   the answer: the interrupt is still the runtime's pending one, and the answer resumes
//!   the run to its end.
//! - `tool.builtin` and `thread.durable_commit` need no wrapper; they are here as the other
//!   claims the suite had no fixture behind.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::{Stream, StreamExt};
use harness_core::action::{ActionKind, ActionRequest, ApprovalResponse, ToolDecision};
use harness_core::adapter::{
    AgentConfig, BoxFuture, BoxStream, CancelResult, DeploymentContext, EventResult,
    HarnessAdapter, HarnessRuntime, ResumeDecision, RuntimeContext, RuntimeIdentity, RuntimeInit,
    TurnInput,
};
use harness_core::capability::{CapabilityKey as K, CapabilityReport};
use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::event::{CancelReason, EventPayload, ToolCallOutcome};
use harness_core::manifest::{Describe, HarnessDescriptor};
use harness_core::service::{ExecutionRequest, Outcome, ServiceConfig};
use serde_json::json;

use crate::observe::{self, Observers};
use crate::probe::{self, Observed};
use crate::tools::{self, Seen};
use crate::{Behaviour, Knobs};

type Verdict = Result<String, String>;

/// One tool approval over one call: what the action scenarios pause on.
const ONE_APPROVAL: Behaviour = Behaviour::ToolApproval {
    calls: 1,
    editable: false,
};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---------------------------------------------------------------------------------------------
// The wrapper

/// What a [`Wrapped`] runtime does around the adapter's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Delegates every call; records overlapping mutating calls.
    Guard,
    /// Delegates every call but cleanup, which never returns (and never reaches the
    /// adapter's runtime).
    HangCleanup,
    /// Calls the adapter's `restart` before every segment (`stream` and `resume`); before
    /// a resume, records whether the pending interrupt survived it.
    Restart,
}

/// What the wrapped runtimes saw, for one fixture.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    /// Each overlap: the call, and the one in flight.
    overlaps: Mutex<Vec<String>>,
    /// Mutating calls made.
    mutations: AtomicUsize,
    /// Runtimes created, and dropped.
    created: AtomicUsize,
    dropped: AtomicUsize,
    /// Each restart's result.
    restarts: Mutex<Vec<Result<(), String>>>,
    /// For each resume after a restart: whether the interrupt pending before the restart
    /// was the one pending after it.
    kept: Mutex<Vec<bool>>,
}

/// An adapter whose runtimes wrap the inner adapter's; see the [module docs](self).
#[derive(Debug)]
pub(crate) struct Wrapped<A> {
    inner: A,
    mode: Mode,
    watch: Arc<Watch>,
}

impl<A> Wrapped<A> {
    pub(crate) fn new(inner: A, mode: Mode) -> (Self, Arc<Watch>) {
        let watch = Arc::new(Watch::default());
        (
            Self {
                inner,
                mode,
                watch: Arc::clone(&watch),
            },
            watch,
        )
    }
}

impl<A: HarnessAdapter> Describe for Wrapped<A> {
    fn descriptor(&self) -> &HarnessDescriptor {
        self.inner.descriptor()
    }
}

impl<A: HarnessAdapter> HarnessAdapter for Wrapped<A> {
    fn evaluate<'a>(
        &'a self,
        config: &'a AgentConfig,
        deployment: &'a DeploymentContext,
    ) -> BoxFuture<'a, Result<CapabilityReport, HarnessError>> {
        self.inner.evaluate(config, deployment)
    }

    fn create_runtime(
        &self,
        context: RuntimeContext,
    ) -> BoxFuture<'_, Result<Box<dyn HarnessRuntime>, HarnessError>> {
        let created = self.inner.create_runtime(context);
        let (mode, watch) = (self.mode, Arc::clone(&self.watch));
        Box::pin(async move {
            let inner = created.await?;
            watch.created.fetch_add(1, SeqCst);
            Ok(Box::new(WrappedRuntime {
                inner,
                mode,
                watch,
                busy: Arc::default(),
            }) as Box<dyn HarnessRuntime>)
        })
    }
}

struct WrappedRuntime {
    inner: Box<dyn HarnessRuntime>,
    mode: Mode,
    watch: Arc<Watch>,
    /// The mutating call in flight on this runtime.
    busy: Arc<Mutex<Option<&'static str>>>,
}

impl std::fmt::Debug for WrappedRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WrappedRuntime")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl Drop for WrappedRuntime {
    fn drop(&mut self) {
        self.watch.dropped.fetch_add(1, SeqCst);
    }
}

/// A mutating call in flight: the runtime is free again when it is dropped.
struct Busy(Option<Arc<Mutex<Option<&'static str>>>>);

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(busy) = &self.0 {
            *lock(busy) = None;
        }
    }
}

impl WrappedRuntime {
    /// Marks the runtime busy with `op`; an overlap when it already is (then the call in
    /// flight keeps the mark).
    fn enter(&self, op: &'static str) -> Busy {
        self.watch.mutations.fetch_add(1, SeqCst);
        let mut current = lock(&self.busy);
        if let Some(other) = *current {
            lock(&self.watch.overlaps).push(format!("{op} called while {other} was in flight"));
            return Busy(None);
        }
        *current = Some(op);
        Busy(Some(Arc::clone(&self.busy)))
    }

    async fn restart_recorded(&self) -> Result<(), HarnessError> {
        let result = self.inner.restart().await;
        lock(&self.watch.restarts).push(
            result
                .as_ref()
                .map(|_| ())
                .map_err(|e| format!("{}: {}", e.code().as_str(), e.message())),
        );
        result
    }
}

/// A segment that keeps its runtime busy until its terminal item, its end or its drop.
struct Held<'a> {
    inner: BoxStream<'a, EventResult>,
    busy: Option<Busy>,
}

impl Stream for Held<'_> {
    type Item = EventResult;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<EventResult>> {
        let polled = self.inner.poll_next_unpin(cx);
        match &polled {
            Poll::Ready(Some(item)) if probe::is_terminal_item(item) => self.busy = None,
            Poll::Ready(None) => self.busy = None,
            _ => {}
        }
        polled
    }
}

fn failed_segment<'a>(err: HarnessError) -> BoxStream<'a, EventResult> {
    Box::pin(futures_util::stream::iter([Err(err)]))
}

impl HarnessRuntime for WrappedRuntime {
    fn identity(&self) -> RuntimeIdentity {
        self.inner.identity()
    }

    fn initialize(&self) -> BoxFuture<'_, Result<RuntimeInit, HarnessError>> {
        self.inner.initialize()
    }

    fn stream(&self, turn: TurnInput) -> BoxStream<'_, EventResult> {
        match self.mode {
            Mode::Restart => Box::pin(
                futures_util::stream::once(async move {
                    match self.restart_recorded().await {
                        Ok(()) => self.inner.stream(turn),
                        Err(e) => failed_segment(e),
                    }
                })
                .flatten(),
            ),
            Mode::Guard | Mode::HangCleanup => {
                let busy = self.enter("stream");
                Box::pin(Held {
                    inner: self.inner.stream(turn),
                    busy: Some(busy),
                })
            }
        }
    }

    fn resume(&self, decision: ResumeDecision) -> BoxStream<'_, EventResult> {
        match self.mode {
            Mode::Restart => Box::pin(
                futures_util::stream::once(async move {
                    let before = self.inner.pending_action().await.map(|a| a.id);
                    if let Err(e) = self.restart_recorded().await {
                        return failed_segment(e);
                    }
                    let after = self.inner.pending_action().await.map(|a| a.id);
                    lock(&self.watch.kept).push(before.is_some() && before == after);
                    self.inner.resume(decision)
                })
                .flatten(),
            ),
            Mode::Guard | Mode::HangCleanup => {
                let busy = self.enter("resume");
                Box::pin(Held {
                    inner: self.inner.resume(decision),
                    busy: Some(busy),
                })
            }
        }
    }

    fn pending_action(&self) -> BoxFuture<'_, Option<ActionRequest>> {
        self.inner.pending_action()
    }

    fn cancel(&self, reason: CancelReason) -> BoxFuture<'_, CancelResult> {
        self.inner.cancel(reason)
    }

    fn restart(&self) -> BoxFuture<'_, Result<(), HarnessError>> {
        Box::pin(async move {
            let _busy = self.enter("restart");
            self.restart_recorded().await
        })
    }

    fn cleanup(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let _busy = self.enter("cleanup");
            if self.mode == Mode::HangCleanup {
                std::future::pending::<()>().await;
            }
            self.inner.cleanup().await;
        })
    }

    fn restore(
        &self,
        restored: harness_core::adapter::Restored,
    ) -> BoxFuture<'_, Result<(), HarnessError>> {
        self.inner.restore(restored)
    }

    fn restorable(&self) -> bool {
        self.inner.restorable()
    }

    fn lost(&self) -> BoxFuture<'_, ()> {
        self.inner.lost()
    }
}

/// The answer approving every call of `action`.
fn approve_all(action: &ActionRequest) -> Result<ApprovalResponse, String> {
    let ActionKind::ToolApproval(approval) = &action.kind else {
        return Err(format!("action {} is not a tool approval", action.id));
    };
    Ok(ApprovalResponse::decide(
        action.id.clone(),
        action.revision,
        approval
            .calls()
            .iter()
            .map(|c| ToolDecision::approve(c.call_id().clone())),
    ))
}

// ---------------------------------------------------------------------------------------------
// runtime.single_mutation

/// `runtime.single_mutation`: see the [module docs](self).
pub(crate) async fn single_mutation<Kn: Knobs>(knobs: &Kn) -> Verdict {
    let b = knobs.bounds();
    let (wrapped, watch) = Wrapped::new(knobs.adapter(), Mode::Guard);
    let service = probe::tooled(wrapped, b).0.build();
    let mut scenarios = vec!["two runs at once"];
    let (x, y) = futures_util::future::join(
        probe::run_to_end(&service, knobs.plain_request(), b),
        probe::run_to_end(&service, knobs.plain_request(), b),
    )
    .await;
    x?;
    y?;
    if let Some(request) = knobs.request_for(&Behaviour::Hang) {
        let handle = probe::start(&service, request).await?;
        for _ in 0..16 {
            tokio::task::yield_now().await;
        }
        handle.cancel(CancelReason::new("conformance: cancel while streaming"));
        probe::finish(&handle, b).await?;
        scenarios.push("a cancel while streaming");
    }
    if let Some(request) = knobs.request_for(&ONE_APPROVAL) {
        let handle = probe::start(&service, request).await?;
        let action = probe::wait_action(&handle, b).await?;
        let answer = approve_all(&action)?;
        let (_, _) = futures_util::future::join(handle.respond(answer.into()), async {
            handle.cancel(CancelReason::new("conformance: cancel with the answer"))
        })
        .await;
        probe::finish(&handle, b).await?;
        scenarios.push("an answer and a cancel at once");
    }
    if let Some(request) = knobs.request_for(&Behaviour::ApprovalThenHang) {
        let handle = probe::start(&service, request).await?;
        let action = probe::wait_action(&handle, b).await?;
        let answer = approve_all(&action)?;
        let (first, second) = futures_util::future::join(
            handle.respond(answer.clone().into()),
            handle.respond(answer.into()),
        )
        .await;
        if first.is_ok() == second.is_ok() {
            handle.cancel(CancelReason::new("conformance"));
            return Err(format!(
                "two answers at once to one action: {} accepted (exactly one expected)",
                usize::from(first.is_ok()) + usize::from(second.is_ok())
            ));
        }
        for _ in 0..16 {
            tokio::task::yield_now().await;
        }
        handle.cancel(CancelReason::new("conformance: cancel while resumed"));
        probe::finish(&handle, b).await?;
        scenarios.push("two answers at once, then a cancel while resumed");
    }
    if let Some(request) = knobs.request_for(&Behaviour::Hang) {
        let (wrapped, timed_watch) = Wrapped::new(knobs.adapter(), Mode::Guard);
        let timed = probe::tooled(wrapped, b)
            .0
            .layer(harness_layers::timeout::TimeoutLayer::new().turn(b.grace / 10))
            .build();
        probe::run_to_end(&timed, request, b).await?;
        let overlaps = lock(&timed_watch.overlaps).clone();
        lock(&watch.overlaps).extend(overlaps);
        watch
            .mutations
            .fetch_add(timed_watch.mutations.load(SeqCst), SeqCst);
        scenarios.push("a run cut by its turn deadline");
    }
    let overlaps = lock(&watch.overlaps).clone();
    if !overlaps.is_empty() {
        return Err(format!(
            "mutating calls overlapped on one runtime: {}",
            overlaps.join("; ")
        ));
    }
    if watch.mutations.load(SeqCst) == 0 {
        return Err("the guard saw no mutating call: the wrapper was bypassed".to_owned());
    }
    // How many calls were made varies with the races: the evidence does not say.
    Ok(format!(
        "{} scenario(s) ({}): no mutating call overlapped another on its runtime",
        scenarios.len(),
        scenarios.join(", ")
    ))
}

// ---------------------------------------------------------------------------------------------
// runtime.bounded_cleanup

/// `runtime.bounded_cleanup`: see the [module docs](self). Runs isolated (its tracing
/// events are read).
pub(crate) async fn bounded_cleanup<Kn: Knobs>(knobs: &Kn, obs: Observers) -> Verdict {
    let b = knobs.bounds();
    let mut evidence = Vec::new();
    let adapter = knobs.adapter();
    // The adapter's own cleanup, where it is hardest: a segment that hangs, given up.
    if let Some(request) = knobs.request_for(&Behaviour::Hang) {
        let d = probe::direct(&adapter, &request, b).await?;
        d.initialize(b).await?;
        {
            let mut segment = d.runtime.stream(d.turn.clone());
            let _ = tokio::time::timeout(b.grace / 10, segment.next()).await;
        }
        let _ = probe::hook("cancel", b.grace, || {
            d.runtime.cancel(CancelReason::new("conformance"))
        })
        .await;
        probe::hook("cleanup after a hanging segment", b.grace, || {
            d.runtime.cleanup()
        })
        .await?;
        evidence.push("after a hanging segment");
    }
    // And with a pause open.
    if let Some(request) = knobs.request_for(&ONE_APPROVAL) {
        let d = probe::direct(&adapter, &request, b).await?;
        let segment = d.first_segment(b).await?;
        if !matches!(
            segment.terminal(),
            Some(Ok(harness_core::adapter::AdapterEvent::Action(_)))
        ) {
            let _ = probe::hook("cleanup", b.grace, || d.runtime.cleanup()).await;
            return Err("the approval's segment did not end on an interrupt".to_owned());
        }
        probe::hook("cleanup while paused", b.grace, || d.runtime.cleanup()).await?;
        evidence.push("while paused");
    }
    // The service's side: a runtime whose cleanup hangs is cut at the deadline.
    let cut = (b.grace / 5).max(Duration::from_millis(100));
    let (wrapped, watch) = Wrapped::new(knobs.adapter(), Mode::HangCleanup);
    let service = probe::tooled(wrapped, b)
        .0
        .config(ServiceConfig {
            cleanup_deadline: cut,
            ..probe::config(b)
        })
        .build();
    let started = Instant::now();
    let handle = probe::start(&service, knobs.plain_request()).await?;
    let run = probe::finish(&handle, b).await?;
    let took = started.elapsed();
    run.check_log()?;
    if !matches!(run.outcome, Outcome::Succeeded(_)) {
        return Err(format!(
            "a run whose cleanup hangs ended {}: the outcome it reached must stand",
            run.ended()
        ));
    }
    if took > cut + b.run {
        return Err(format!(
            "a hanging cleanup held the run's end for {took:?} (the cleanup deadline is {cut:?})"
        ));
    }
    // Released: the runtime that hung (and the adapter's it holds) dropped, the caller's
    // handle still alive.
    let released = observe::until(b.grace, || {
        watch.dropped.load(SeqCst) == watch.created.load(SeqCst)
    })
    .await;
    if !released {
        return Err(format!(
            "the runtime whose cleanup was cut was not dropped within {:?} of the run's end: \
             what it holds (processes, connections) is not released",
            b.grace
        ));
    }
    let classified = obs
        .event_messages()
        .into_iter()
        .any(|m| m.contains("cleanup") && m.contains("TIMEOUT") && m.contains("timeout"));
    drop(handle);
    if !classified {
        return Err(
            "the service cut the hanging cleanup but reported no classified error \
             (timeout/TIMEOUT)"
                .to_owned(),
        );
    }
    let own = if evidence.is_empty() {
        "the adapter's own cleanup not tested in a hard state (no Hang or approval knob)".to_owned()
    } else {
        format!(
            "the adapter's cleanup returned within {:?} {}",
            b.grace,
            evidence.join(" and ")
        )
    };
    Ok(format!(
        "{own}; a cleanup that hangs was cut at the service's deadline: run.succeeded stood, \
         timeout/TIMEOUT reported, the runtime dropped"
    ))
}

// ---------------------------------------------------------------------------------------------
// session.restart: durable state across restart

/// `session.restart`, through the service: restart before every segment keeps a
/// conversation's memory and a pending interrupt (see the [module docs](self)).
pub(crate) async fn restart_keeps_state<Kn: Knobs>(knobs: &Kn) -> Verdict {
    let b = knobs.bounds();
    let (wrapped, watch) = Wrapped::new(knobs.adapter(), Mode::Restart);
    let caps = wrapped.descriptor().capabilities().clone();
    let (builder, seen) = probe::tooled(wrapped, b);
    let service = builder.build();
    let mut evidence = Vec::new();
    if caps.level(K::SessionMultiTurn).is_usable() {
        let marker = crate::sessions::marker();
        let remember = knobs.request_for(&Behaviour::Remember {
            marker: marker.clone(),
        });
        let recall = knobs.request_for(&Behaviour::Recall);
        let (Some(remember), Some(recall)) = (remember, recall) else {
            return Err(
                "declares session.multi_turn but its knobs cannot produce Remember and Recall: \
                 recall across a restart cannot be verified"
                    .to_owned(),
            );
        };
        let conversation = harness_core::id::ConversationId::generate();
        let kept = probe::run_to_end(
            &service,
            remember.with_conversation(conversation.clone()),
            b,
        )
        .await?;
        kept.check_log()?;
        let later = probe::run_to_end(&service, recall.with_conversation(conversation), b).await?;
        later.check_log()?;
        if !matches!(later.outcome, Outcome::Succeeded(_))
            || !crate::sessions::message_text(&later).contains(&marker)
        {
            return Err(format!(
                "after a restart, the conversation's later turn did not recall what an earlier \
                 turn kept (it ended {}): restart cleared durable conversation state",
                later.ended()
            ));
        }
        evidence.push("a later turn recalled the marker across a restart");
    }
    if caps.level(K::InterruptToolApproval).is_usable()
        && let Some(request) = knobs.request_for(&ONE_APPROVAL)
    {
        let handle = probe::start(&service, request).await?;
        let action = probe::wait_action(&handle, b).await?;
        handle
            .respond(approve_all(&action)?.into())
            .await
            .map_err(|e| format!("the answer was refused: {}", e.message()))?;
        let obs = probe::finish(&handle, b).await?;
        obs.check_log()?;
        if lock(&watch.kept).as_slice() != [true] {
            return Err(
                "restart while paused dropped the pending interrupt: pending_action no longer \
                 returned it after the restart"
                    .to_owned(),
            );
        }
        if !matches!(obs.outcome, Outcome::Succeeded(_)) {
            return Err(format!(
                "restarted while paused, the answered run ended {}",
                obs.ended()
            ));
        }
        if let Some(seen) = &seen
            && seen.gated().len() != 1
        {
            return Err(format!(
                "restarted while paused, the approved call of the suite's tool ran {} time(s)",
                seen.gated().len()
            ));
        }
        evidence.push(
            "restarted while paused, the interrupt stayed pending and its answer resumed the \
             run to run.succeeded",
        );
    }
    let failed: Vec<String> = lock(&watch.restarts)
        .iter()
        .filter_map(|r| r.clone().err())
        .collect();
    if !failed.is_empty() {
        return Err(format!("restart failed: {}", failed.join("; ")));
    }
    Ok(evidence.join("; "))
}

// ---------------------------------------------------------------------------------------------
// tool.builtin

/// `tool.builtin`: the harness's tool calls are reported as the contract says: every
/// `tool.call.started` is followed by exactly one `tool.call.completed` of the same call,
/// and a call the knobs made succeed completed with success. For an adapter that runs the
/// execution's portable tools, the suite's [`tools::ECHO`] ran exactly once, with the
/// arguments the log reports, and its completion carries what it returned.
pub(crate) async fn tool_builtin<Kn: Knobs>(knobs: &Kn, request: ExecutionRequest) -> Verdict {
    let b = knobs.bounds();
    let (builder, seen) = probe::tooled(knobs.adapter(), b);
    let obs = probe::run_to_end(&builder.build(), request, b).await?;
    obs.check_log()?;
    paired_calls(&obs)?;
    if !matches!(obs.outcome, Outcome::Succeeded(_)) {
        return Err(format!("the tool run ended {}", obs.ended()));
    }
    let Some(seen) = seen else {
        return Ok(
            "the harness's own tool call: started, then completed once with success".to_owned(),
        );
    };
    check_echo_ran(&seen, &obs)?;
    Ok(format!(
        "the portable tool {} ran once through its handle, with the arguments the log reports; \
         its completion carries what it returned",
        tools::ECHO
    ))
}

/// Every started call completes exactly once, after its start, and at least one succeeds.
fn paired_calls(obs: &Observed) -> Result<(), String> {
    let mut open: Vec<String> = Vec::new();
    let mut succeeded = 0;
    for e in &obs.events {
        match e.payload() {
            EventPayload::ToolCallStarted(call) => open.push(call.call_id.to_string()),
            EventPayload::ToolCallCompleted(done) => {
                let id = done.call_id.to_string();
                let Some(at) = open.iter().position(|o| *o == id) else {
                    return Err(format!(
                        "tool.call.completed for {id} without a tool.call.started before it \
                         (or a second completion)"
                    ));
                };
                open.remove(at);
                if matches!(done.outcome, ToolCallOutcome::Success { .. }) {
                    succeeded += 1;
                }
            }
            _ => {}
        }
    }
    if !open.is_empty() {
        return Err(format!("tool call(s) {open:?} started and never completed"));
    }
    if succeeded == 0 {
        return Err(format!(
            "no tool call completed with success; events: {}",
            obs.kinds().join(" ")
        ));
    }
    Ok(())
}

fn check_echo_ran(seen: &Seen, obs: &Observed) -> Result<(), String> {
    let ran = seen.echo.load(SeqCst);
    if ran != 1 {
        return Err(format!(
            "the suite's tool {} ran {ran} time(s) (once expected, through its handle)",
            tools::ECHO
        ));
    }
    let started: Vec<&serde_json::Value> = obs
        .events
        .iter()
        .filter_map(|e| match e.payload() {
            EventPayload::ToolCallStarted(call) if call.tool == tools::ECHO => {
                Some(&call.arguments)
            }
            _ => None,
        })
        .collect();
    if started.as_slice() != [&tools::arguments(tools::ECHO)] {
        return Err(format!(
            "the log reports {} called with {started:?}; it ran with {}",
            tools::ECHO,
            tools::arguments(tools::ECHO)
        ));
    }
    let returned = ToolCallOutcome::Success {
        output: json!({"echo": "ping"}),
    };
    let completed =
        obs.count(|p| matches!(p, EventPayload::ToolCallCompleted(c) if c.outcome == returned));
    if completed != 1 {
        return Err(format!(
            "the call's completion does not carry what the tool returned ({returned:?})"
        ));
    }
    Ok(())
}

/// A classified failure of a run: `category/CODE`.
pub(crate) fn classified(err: &HarnessError) -> String {
    format!("{}/{}", err.category().as_str(), err.code().as_str())
}

/// Whether a failure is one a provider fault may end a run with: anything but `protocol`
/// from the service's own checks and `internal` without a code.
pub(crate) fn is_provider_fault(err: &HarnessError) -> bool {
    matches!(
        err.category(),
        ErrorCategory::Unavailable | ErrorCategory::Internal
    )
}
