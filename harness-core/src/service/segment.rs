//! The runtime stack: the Tower service the driver calls once per run segment.
//!
//! A *run segment* is what one `stream` or `resume` of a runtime yields: content, then one
//! terminal item. The driver calls its runtime stack with a [`Segment`] for the first turn
//! and again for each resume after an action; the response is a [`SegmentStream`] of adapter
//! items. Innermost is [`RuntimeService`], the adapter itself: for a first segment it creates
//! and initializes the execution's runtime (a fresh one for each retried attempt, the old one
//! cleaned up first), then opens `stream` or `resume` on it. Layers around it act on the call
//! (an initialization deadline), on the stream (redaction maps it, a turn deadline ends it,
//! a retry starts it again before its first item) or on the execution (a shutdown token
//! cancels it), each in its own module of `harness-layers`; the order they are added in is
//! the order they run in, outermost (nearest the driver) first.
//!
//! ```
//! use std::pin::Pin;
//! use std::task::{Context, Poll};
//! use futures_util::StreamExt;
//! use harness_core::adapter::{AdapterEvent, EventResult};
//! use harness_core::event::{Content, TextDelta};
//! use harness_core::service::{AdapterService, ExecutionRequest, Segment, SegmentStream};
//! # use harness_core::adapter::{BoxStream, RunContext, Simple, SimpleAdapter};
//! # use harness_core::event::RunSucceeded;
//! # use harness_core::manifest::{ContractVersion, ExecutionMode, HarnessDescriptor};
//! # struct Echo(HarnessDescriptor);
//! # impl harness_core::manifest::Describe for Echo {
//! #     fn descriptor(&self) -> &HarnessDescriptor { &self.0 }
//! # }
//! # impl SimpleAdapter for Echo {
//! #     fn stream(&self, run: RunContext) -> BoxStream<'static, EventResult> {
//! #         let text = run.turn.message.clone();
//! #         Box::pin(futures_util::stream::iter([
//! #             Ok(AdapterEvent::Content(Content::MessageDelta(TextDelta::new(text)))),
//! #             Ok(AdapterEvent::Completed(RunSucceeded::default())),
//! #         ]))
//! #     }
//! # }
//! # let adapter = Simple::new(Echo(HarnessDescriptor::builder("echo".parse().unwrap(), "0.1.0")
//! #     .contract_version(ContractVersion::V1).execution_mode(ExecutionMode::in_process()).build().unwrap()));
//!
//! /// A runtime layer's stream: shouts every message delta.
//! struct Shout<S>(S);
//!
//! impl<S: SegmentStream + Unpin> futures_util::Stream for Shout<S> {
//!     type Item = EventResult;
//!     fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<EventResult>> {
//!         Pin::new(&mut self.0).poll_next(cx).map(|item| item.map(|item| item.map(|event| match event {
//!             AdapterEvent::Content(Content::MessageDelta(d)) => {
//!                 AdapterEvent::Content(Content::MessageDelta(TextDelta::new(d.text.to_uppercase())))
//!             }
//!             other => other,
//!         })))
//!     }
//! }
//!
//! impl<S: SegmentStream + Unpin> SegmentStream for Shout<S> {
//!     // Nothing held here; an inner stream's held items pass through this one too.
//!     fn drain(mut self: Pin<&mut Self>, out: &mut Vec<AdapterEvent>) {
//!         Pin::new(&mut self.0).drain(out);
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let service = AdapterService::builder(adapter)
//!     .layer(tower::layer::layer_fn(|inner| {
//!         tower::util::MapResponse::new(inner, Shout)
//!     }))
//!     .build();
//! let execution = service.start(ExecutionRequest::new("hello")).await.unwrap();
//! let text: Vec<String> = execution
//!     .events(Default::default())
//!     .filter_map(|e| async move {
//!         match e.payload() {
//!             harness_core::event::EventPayload::MessageDelta(d) => Some(d.text.clone()),
//!             _ => None,
//!         }
//!     })
//!     .collect()
//!     .await;
//! assert_eq!(text, ["HELLO"]);
//! # });
//! ```
//!
//! What the driver still owns, whatever the stack: one mutating operation at a time, events
//! numbered and checked in order, actions answered at most once, the runtime's cancel hook
//! and cleanup called at most once each, the one terminal event, and panics contained: a
//! panic in the adapter becomes an `ADAPTER_PANICKED` error item *inside* the stack (so the
//! layers, redaction included, see it as any other error), a panic in a layer an
//! `internal` failure with code `LAYER_PANICKED`.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use futures_util::FutureExt;
use tokio_util::sync::CancellationToken;

use super::handle::Shared;
use crate::adapter::{
    AdapterEvent, BoxFuture, BoxStream, EventResult, HarnessAdapter, HarnessRuntime, Restored,
    ResumeDecision, RuntimeContext, TurnInput,
};
use crate::error::{ErrorCategory, ErrorCode, HarnessError};
use crate::event::{CancelReason, CancelSource, Content, ToolUnavailable};
use crate::extensions::Extensions;
use crate::id::{AdapterId, ExecutionId};
use crate::tool::{CallerCredentials, ResolvedTools, ToolHandle, ToolId, ToolSet};

/// A stream of adapter items that the driver reads one run segment from: what every service
/// of the runtime stack returns.
///
/// On top of [`Stream`], it can give back what it holds: when the driver stops reading before
/// the end (a cancellation, the request's deadline), it calls [`drain`](Self::drain) once
/// and appends what comes back before it ends the run, so text a redactor held back (a
/// possible secret's beginning, until it knew) is not lost. A wrapper first drains the
/// stream it wraps, passes those items through its own processing, then adds its own held
/// items; one that holds nothing forwards the call. Required, so a wrapper cannot lose an
/// inner stream's items by forgetting it.
///
/// Writing a runtime layer: its stream wraps the inner one with `pin_project_lite` (the
/// default layers' streams hold timers, so they are not `Unpin`: neither a `Box::pin` per
/// segment nor an `Unpin` bound is needed), maps items in `poll_next`, and in `drain` drains
/// the inner stream first and maps what it gave back. `harness_layers::inspect` has a whole
/// layer written so, compiled and run around the default layers, and `InspectLayer` for a
/// layer that only looks (a callback per item and one at the segment's end).
pub trait SegmentStream: Stream<Item = EventResult> + Send {
    /// The driver stops reading: push what is held back, in order, processed as this stream
    /// would have yielded it. The stream is not polled again.
    fn drain(self: Pin<&mut Self>, out: &mut Vec<AdapterEvent>);
}

impl<S: SegmentStream + ?Sized> SegmentStream for Pin<Box<S>> {
    fn drain(self: Pin<&mut Self>, out: &mut Vec<AdapterEvent>) {
        self.get_mut().as_mut().drain(out);
    }
}

/// A boxed [`SegmentStream`]: what the driver holds.
pub type BoxSegmentStream = Pin<Box<dyn SegmentStream>>;

/// The boxed runtime stack an [`AdapterService`](super::AdapterService) calls: cloned per
/// segment (as tower services are), `Sync` so the service stays shareable.
pub type RuntimeStack = tower::util::BoxCloneSyncService<Segment, BoxSegmentStream, HarnessError>;

/// Which call of the runtime a segment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SegmentKind {
    /// The execution's turn: `stream` on a runtime created (and initialized) for it.
    Turn,
    /// The continuation after an action: `resume` on the runtime that paused.
    Resume,
}

/// One call of the runtime stack: the first turn of an execution, one retried attempt of
/// it, or one resume. Only the driver makes one (a layer can clone it, or ask for the next
/// attempt with [`retry`](Self::retry)), so no layer can rebuild it without what another
/// layer relies on.
#[derive(Clone)]
pub struct Segment {
    work: Work,
    attempt: u32,
    execution: Arc<ExecutionRuntime>,
}

#[derive(Clone)]
enum Work {
    Turn,
    Resume(ResumeDecision),
}

impl fmt::Debug for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Segment")
            .field("execution_id", self.execution_id())
            .field("kind", &self.kind())
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

impl Segment {
    pub(super) fn turn_of(execution: Arc<ExecutionRuntime>) -> Self {
        Self {
            work: Work::Turn,
            attempt: 1,
            execution,
        }
    }

    pub(super) fn resume_of(execution: Arc<ExecutionRuntime>, decision: ResumeDecision) -> Self {
        let attempt = execution.slot().attempt;
        Self {
            work: Work::Resume(decision),
            attempt,
            execution,
        }
    }

    /// The execution.
    #[must_use]
    pub fn execution_id(&self) -> &ExecutionId {
        &self.execution.shared.id
    }

    /// The adapter.
    #[must_use]
    pub fn adapter(&self) -> &AdapterId {
        &self.execution.shared.adapter
    }

    /// Whether this is the turn or a resume.
    #[must_use]
    pub fn kind(&self) -> SegmentKind {
        match self.work {
            Work::Turn => SegmentKind::Turn,
            Work::Resume(_) => SegmentKind::Resume,
        }
    }

    /// The execution's turn (for a resume too: the turn it continues).
    #[must_use]
    pub fn turn(&self) -> &TurnInput {
        &self.execution.turn
    }

    /// The validated decision a resume carries.
    #[must_use]
    pub fn decision(&self) -> Option<&ResumeDecision> {
        match &self.work {
            Work::Turn => None,
            Work::Resume(decision) => Some(decision),
        }
    }

    /// Which attempt at the turn this is, from 1 (a resume has the attempt of the runtime it
    /// resumes).
    #[must_use]
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The request's [`Extensions`]: caller data, read-only.
    #[must_use]
    pub fn extensions(&self) -> &Extensions {
        &self.execution.extensions
    }

    /// The next attempt at the turn, on a fresh runtime: [`RuntimeService`] cleans up the
    /// runtime of this attempt before it creates the next one. `None` for a resume: the
    /// pause it answers lives in its runtime, so it cannot move to another.
    #[must_use]
    pub fn retry(&self) -> Option<Self> {
        match self.work {
            Work::Turn => Some(Self {
                work: Work::Turn,
                attempt: self.attempt.saturating_add(1),
                execution: Arc::clone(&self.execution),
            }),
            Work::Resume(_) => None,
        }
    }

    /// Releases the runtime this attempt made, now (its cleanup, once, bounded by the
    /// service's cleanup deadline), so that nothing of a failed attempt is held while a retry
    /// waits; the next attempt makes a fresh one. Does nothing for a resume (its runtime is
    /// the execution's), or if the runtime is not this attempt's.
    pub fn release(&self) -> BoxFuture<'static, ()> {
        let execution = Arc::clone(&self.execution);
        let attempt = self.attempt;
        let is_turn = matches!(self.work, Work::Turn);
        Box::pin(async move {
            let cell = {
                let mut slot = execution.slot();
                if !is_turn || slot.attempt != attempt {
                    return;
                }
                slot.cell.take()
            };
            if let Some(cell) = cell {
                cell.cleanup(execution.cleanup_deadline, &execution.shared.id)
                    .await;
            }
        })
    }

    /// Cancelled when the execution is; cancelling it does not cancel the execution (use
    /// [`cancel`](Self::cancel)).
    #[must_use]
    pub fn cancellation(&self) -> CancellationToken {
        self.execution.shared.cancel.child_token()
    }

    /// Requests cancellation of the execution, as a handle's `cancel` would, with `source`:
    /// `run.cancelled` confirms it. A reason already given wins.
    pub fn cancel(&self, source: CancelSource) {
        self.execution
            .shared
            .request_cancel(CancelReason::from_source(source));
    }

    /// Cancels the execution with `source` when `token` is cancelled, in whatever state it
    /// is then (awaiting an action included), for the rest of its life. The driver watches
    /// the token; no task is spawned.
    pub fn cancel_on(&self, token: &CancellationToken, source: CancelSource) {
        self.execution.shared.link(token, source);
    }
}

/// What one execution's segments share with the driver: the runtime and how it was made.
pub(crate) struct ExecutionRuntime {
    pub(super) shared: Arc<Shared>,
    context: RuntimeContext,
    turn: TurnInput,
    extensions: Extensions,
    cleanup_deadline: Duration,
    slot: Mutex<Slot>,
    /// Set for an execution taken over while paused, or whose paused runtime the pool
    /// evicted: the next resume creates a runtime and restores the pause on it.
    restore: Mutex<Option<RestoreFrom>>,
    /// The service's tools and the request's selection of them, when the service has tools.
    tools: Option<(Arc<ToolSet>, Option<Vec<ToolId>>)>,
    /// The tools resolved for this execution (once: every runtime of the execution gets the
    /// same handles), and what was unavailable, until the first turn reports it.
    resolved: tokio::sync::Mutex<Option<Resolved>>,
}

/// Where the pause a fresh runtime takes over comes from.
enum RestoreFrom {
    /// What the store kept, read when the execution was taken over from another replica.
    Stored(Box<Restored>),
    /// The runtime that paused was evicted by the pool: the log is read back when the
    /// answer comes (from memory, or from the store past the memory window), so that an
    /// evicted execution holds no copy of it meanwhile.
    Evicted {
        pending: crate::action::ActionRequest,
        answers: Vec<crate::action::ActionResponse>,
    },
}

/// The tools of one execution, once resolved.
struct Resolved {
    handles: Vec<ToolHandle>,
    unavailable: Vec<ToolUnavailable>,
}

/// The execution's current runtime and the attempt it was made for.
struct Slot {
    cell: Option<Arc<RuntimeCell>>,
    attempt: u32,
}

/// A runtime, with what was done to it: its cancel hook and cleanup run at most once each.
pub(crate) struct RuntimeCell {
    runtime: Arc<dyn HarnessRuntime>,
    cancelled: AtomicBool,
    cleaned: AtomicBool,
}

impl ExecutionRuntime {
    pub(super) fn new(
        shared: Arc<Shared>,
        context: RuntimeContext,
        turn: TurnInput,
        extensions: Extensions,
        cleanup_deadline: Duration,
    ) -> Self {
        Self {
            shared,
            context,
            turn,
            extensions,
            cleanup_deadline,
            slot: Mutex::new(Slot {
                cell: None,
                attempt: 0,
            }),
            restore: Mutex::new(None),
            tools: None,
            resolved: tokio::sync::Mutex::new(None),
        }
    }

    /// Gives the execution `tools` (those `selection` names, all when `None`).
    pub(super) fn with_tools(
        mut self,
        tools: Arc<ToolSet>,
        selection: Option<Vec<ToolId>>,
    ) -> Self {
        self.tools = Some((tools, selection));
        self
    }

    /// The execution's tool handles, resolved on first use (providers asked then, with the
    /// caller's credentials from the request's extensions); empty without tools.
    async fn tool_handles(&self) -> Vec<ToolHandle> {
        let Some((tools, selection)) = &self.tools else {
            return Vec::new();
        };
        let mut resolved = self.resolved.lock().await;
        if let Some(resolved) = &*resolved {
            return resolved.handles.clone();
        }
        let ResolvedTools {
            handles,
            unavailable,
        } = tools
            .resolve(
                selection.as_deref(),
                &self.shared.id,
                self.extensions.get::<CallerCredentials>(),
                &self.context.cancellation,
            )
            .await;
        // The operator's middleware, decided once per tool for the execution.
        let handles: Vec<ToolHandle> = handles
            .into_iter()
            .map(|h| h.with_middleware(&self.context.middleware))
            .collect();
        *resolved = Some(Resolved {
            handles: handles.clone(),
            unavailable,
        });
        handles
    }

    /// What was unavailable of the execution's tools, once (for its first turn's stream).
    async fn take_unavailable(&self) -> Vec<AdapterEvent> {
        self.resolved
            .lock()
            .await
            .as_mut()
            .map(|r| std::mem::take(&mut r.unavailable))
            .unwrap_or_default()
            .into_iter()
            .map(|u| AdapterEvent::Content(Content::ToolUnavailable(u)))
            .collect()
    }

    /// For an execution taken over while paused on `restored.pending`.
    pub(super) fn with_restored(self, restored: Restored) -> Self {
        *lock(&self.restore) = Some(RestoreFrom::Stored(Box::new(restored)));
        self
    }

    /// Lets the paused runtime go (the pool evicted it): the next resume restores the
    /// pause on `pending` on a fresh runtime, with `answers` (those before it, in order).
    /// Returns the runtime, for the driver to clean up.
    pub(super) fn evict(
        &self,
        pending: crate::action::ActionRequest,
        answers: Vec<crate::action::ActionResponse>,
    ) -> Option<Arc<RuntimeCell>> {
        let cell = self.slot().cell.take()?;
        *lock(&self.restore) = Some(RestoreFrom::Evicted { pending, answers });
        Some(cell)
    }

    /// What a fresh runtime restores, once: the stored pause, or the evicted one with the
    /// log read back up to its `action.requested`.
    async fn take_restore(&self) -> Option<Result<Restored, HarnessError>> {
        let from = lock(&self.restore).take()?;
        Some(match from {
            RestoreFrom::Stored(restored) => Ok(*restored),
            RestoreFrom::Evicted { pending, answers } => {
                use futures_util::StreamExt;
                let mut log = Vec::new();
                let mut events = self.shared.reader.subscribe(crate::id::Cursor::START);
                let mut found = false;
                while let Some(event) = events.next().await {
                    let asked = matches!(
                        event.payload(),
                        crate::event::EventPayload::ActionRequested(request) if request.id == pending.id
                    );
                    log.push(event);
                    if asked {
                        found = true;
                        break;
                    }
                }
                if found {
                    Ok(Restored::new(self.turn.clone(), pending, log, answers))
                } else {
                    Err(HarnessError::new(
                        ErrorCategory::Internal,
                        "the paused execution's log could not be read back to restore it",
                    )
                    .with_diagnostic(format!(
                        "the log ended before the action.requested of {}",
                        pending.id
                    )))
                }
            }
        })
    }

    fn slot(&self) -> MutexGuard<'_, Slot> {
        // Every update is a single assignment: a poisoned lock still holds a consistent slot.
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The execution's session binding, if it has a conversation.
    pub(super) fn binding(&self) -> Option<&crate::session::SessionBinding> {
        self.context.binding.as_ref()
    }

    /// The interrupt policy of the execution's request.
    pub(super) fn interrupt_policy(&self) -> &crate::context::InterruptPolicy {
        &self.context.interrupt_policy
    }

    /// The runtime of the latest attempt, if one was created.
    pub(super) fn current(&self) -> Option<Arc<RuntimeCell>> {
        self.slot().cell.clone()
    }

    /// The runtime for `attempt`: the current one if it was made for it, else a new one
    /// (the old one cleaned up first), created and initialized. A runtime that fails to
    /// initialize stays current, for the driver to clean up.
    async fn runtime_for(
        &self,
        attempt: u32,
        adapter: &dyn HarnessAdapter,
    ) -> Result<Arc<RuntimeCell>, HarnessError> {
        let stale = {
            let mut slot = self.slot();
            if let Some(cell) = &slot.cell
                && slot.attempt >= attempt
            {
                return Ok(Arc::clone(cell));
            }
            slot.attempt = attempt;
            slot.cell.take()
        };
        if let Some(stale) = stale {
            stale.cleanup(self.cleanup_deadline, &self.shared.id).await;
        }
        let mut context = self.context.clone();
        context.tools = self.tool_handles().await;
        // Inside the async block: a panic in the synchronous part of the call is caught too.
        let created = catch(async { adapter.create_runtime(context).await }).await??;
        let cell = Arc::new(RuntimeCell {
            runtime: Arc::from(created),
            cancelled: AtomicBool::new(false),
            cleaned: AtomicBool::new(false),
        });
        self.slot().cell = Some(Arc::clone(&cell));
        catch(async { cell.runtime.initialize().await }).await??;
        Ok(cell)
    }
}

impl RuntimeCell {
    /// Calls the cancel hook once, bounded by `grace`; never after cleanup.
    pub(super) async fn cancel(&self, reason: CancelReason, grace: Duration, id: &ExecutionId) {
        if self.cleaned.load(Ordering::Acquire) || self.cancelled.swap(true, Ordering::AcqRel) {
            return;
        }
        let hook = catch(async { self.runtime.cancel(reason).await });
        if tokio::time::timeout(grace, hook).await.is_err() {
            tracing::warn!(execution = %id, ?grace, "runtime cancel hook exceeded its grace period");
        }
    }

    /// Whether a fresh runtime could take this one's pause over
    /// ([`HarnessRuntime::restorable`]).
    pub(super) fn restorable(&self) -> bool {
        self.runtime.restorable()
    }

    /// Completes when the runtime reports its provider lost
    /// ([`HarnessRuntime::lost`]); a hook that panics never completes (it is logged).
    pub(super) async fn lost(&self, id: &ExecutionId) {
        if catch(async { self.runtime.lost().await }).await.is_err() {
            tracing::warn!(execution = %id, "runtime lost hook panicked");
            std::future::pending::<()>().await;
        }
    }

    /// Calls cleanup once, bounded by `deadline`. Marked done before it runs: a cleanup cut
    /// short (by its deadline, or a dropped future) is not run again.
    pub(super) async fn cleanup(&self, deadline: Duration, id: &ExecutionId) {
        if self.cleaned.swap(true, Ordering::AcqRel) {
            return;
        }
        match tokio::time::timeout(deadline, catch(async { self.runtime.cleanup().await })).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                // The code only: the diagnostic holds the panic text, which may hold a secret.
                tracing::warn!(execution = %id, code = %err.code(), "runtime cleanup panicked");
            }
            Err(_) => {
                // Cut here: the cleanup's future is dropped, and the runtime with it once the
                // execution lets it go (its processes and connections released by their
                // drop). The outcome the run reached stands; the cut is reported classified.
                let err = HarnessError::new(
                    ErrorCategory::Timeout,
                    "the runtime's cleanup passed its deadline and was cut",
                );
                tracing::warn!(
                    execution = %id,
                    ?deadline,
                    code = %err.code(),
                    category = err.category().as_str(),
                    "runtime cleanup exceeded its deadline: {}",
                    err.message()
                );
            }
        }
    }
}

/// The innermost service of every runtime stack: the adapter. See the [module docs](self).
pub struct RuntimeService<A> {
    adapter: Arc<A>,
}

impl<A> RuntimeService<A> {
    pub(super) fn new(adapter: Arc<A>) -> Self {
        Self { adapter }
    }
}

impl<A> Clone for RuntimeService<A> {
    fn clone(&self) -> Self {
        Self {
            adapter: Arc::clone(&self.adapter),
        }
    }
}

impl<A: HarnessAdapter> fmt::Debug for RuntimeService<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuntimeService")
            .field("adapter", self.adapter.descriptor().id())
            .finish()
    }
}

impl<A: HarnessAdapter> tower::Service<Segment> for RuntimeService<A> {
    type Response = AdapterStream;
    type Error = HarnessError;
    type Future = BoxFuture<'static, Result<AdapterStream, HarnessError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), HarnessError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, segment: Segment) -> Self::Future {
        let adapter = Arc::clone(&self.adapter);
        Box::pin(async move {
            let Segment {
                work,
                attempt,
                execution,
            } = segment;
            match work {
                Work::Turn => {
                    let cell = execution.runtime_for(attempt, &*adapter).await?;
                    let turn = execution.turn.clone();
                    let first = execution.take_unavailable().await;
                    Ok(AdapterStream::open(&cell.runtime, move |rt| rt.stream(turn)).after(first))
                }
                Work::Resume(decision) => {
                    // The engine's own check: a decision made for another binding (another
                    // conversation, or an epoch a clear left behind) resumes nothing.
                    decision.check_binding(execution.context.binding.as_ref())?;
                    let current = execution.current();
                    let restore = match current {
                        Some(_) => None,
                        None => execution.take_restore().await,
                    };
                    let cell = match (current, restore) {
                        (Some(cell), _) => cell,
                        // Taken over while paused, or evicted: a fresh runtime takes the
                        // pause over.
                        (None, Some(restored)) => {
                            let restored = restored?;
                            let cell = execution.runtime_for(attempt, &*adapter).await?;
                            catch(async { cell.runtime.restore(restored).await }).await??;
                            cell
                        }
                        (None, None) => {
                            return Err(HarnessError::new(
                                ErrorCategory::Internal,
                                "there is no runtime to resume",
                            )
                            .with_diagnostic(
                                "a resume segment was called before any turn segment",
                            ));
                        }
                    };
                    Ok(AdapterStream::open(&cell.runtime, move |rt| {
                        rt.resume(decision)
                    }))
                }
            }
        })
    }
}

self_cell::self_cell!(
    /// A runtime and the stream it lent: `stream` and `resume` borrow the runtime, the driver
    /// needs a stream that does not.
    struct Lent {
        owner: Arc<dyn HarnessRuntime>,
        #[covariant]
        dependent: Items,
    }
);

type Items<'a> = BoxStream<'a, EventResult>;

/// What [`RuntimeService`] returns: the runtime's stream, owning a reference to the runtime.
/// A panic while it is polled (or opened) becomes one `ADAPTER_PANICKED` error item, after
/// which the stream ends.
pub struct AdapterStream {
    lent: Option<Lent>,
    panicked: Option<HarnessError>,
    /// Items the service yields before the runtime's (the execution's unavailable tools).
    first: std::collections::VecDeque<AdapterEvent>,
}

impl fmt::Debug for AdapterStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdapterStream")
            .field("open", &self.lent.is_some())
            .finish()
    }
}

impl AdapterStream {
    fn open(
        runtime: &Arc<dyn HarnessRuntime>,
        open: impl for<'a> FnOnce(&'a Arc<dyn HarnessRuntime>) -> Items<'a>,
    ) -> Self {
        let runtime = Arc::clone(runtime);
        match std::panic::catch_unwind(AssertUnwindSafe(|| Lent::new(runtime, open))) {
            Ok(lent) => Self {
                lent: Some(lent),
                panicked: None,
                first: std::collections::VecDeque::new(),
            },
            Err(panic) => Self {
                lent: None,
                panicked: Some(panic_error("opening its event stream", &*panic)),
                first: std::collections::VecDeque::new(),
            },
        }
    }

    /// Yields `first` before the runtime's items.
    fn after(mut self, first: Vec<AdapterEvent>) -> Self {
        self.first = first.into();
        self
    }
}

impl Stream for AdapterStream {
    type Item = EventResult;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<EventResult>> {
        let this = &mut *self;
        if let Some(first) = this.first.pop_front() {
            return Poll::Ready(Some(Ok(first)));
        }
        if let Some(err) = this.panicked.take() {
            return Poll::Ready(Some(Err(err)));
        }
        let Some(lent) = this.lent.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| {
            lent.with_dependent_mut(|_, items| items.as_mut().poll_next(cx))
        }));
        match polled {
            Ok(Poll::Ready(None)) => {
                // Let go of the runtime's stream (and what it borrows) at once.
                this.lent = None;
                Poll::Ready(None)
            }
            Ok(poll) => poll,
            Err(panic) => {
                this.lent = None;
                Poll::Ready(Some(Err(panic_error("its event stream", &*panic))))
            }
        }
    }
}

impl SegmentStream for AdapterStream {
    fn drain(self: Pin<&mut Self>, _out: &mut Vec<AdapterEvent>) {}
}

pub(super) fn panic_error(what: &str, payload: &(dyn Any + Send)) -> HarnessError {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned());
    HarnessError::new(ErrorCategory::Internal, "the adapter failed unexpectedly")
        .with_code(ErrorCode::ADAPTER_PANICKED)
        .with_diagnostic(format!("adapter panicked in {what}: {text}"))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs an adapter future, turning a panic into an `ADAPTER_PANICKED` error.
pub(super) async fn catch<T>(fut: impl Future<Output = T>) -> Result<T, HarnessError> {
    AssertUnwindSafe(fut)
        .catch_unwind()
        .await
        .map_err(|p| panic_error("a future", &*p))
}

#[cfg(test)]
mod tests {
    use tower::Service;

    use super::*;
    use crate::action::{ActionRequest, FieldKind, FormField, FormRequest, FormValues};
    use crate::adapter::{RunContext, Simple, SimpleAdapter};
    use crate::lifecycle::Execution;
    use crate::manifest::{ContractVersion, Describe, ExecutionMode, HarnessDescriptor};
    use crate::session::SessionBinding;

    struct Nop(HarnessDescriptor);
    impl Describe for Nop {
        fn descriptor(&self) -> &HarnessDescriptor {
            &self.0
        }
    }
    impl SimpleAdapter for Nop {
        fn stream(&self, _: RunContext) -> BoxStream<'static, EventResult> {
            Box::pin(futures_util::stream::empty())
        }
    }

    /// The engine's own check, below every layer: a resume whose decision names another
    /// binding than the execution's is refused before any runtime is looked for.
    #[tokio::test]
    async fn a_resume_on_another_binding_is_refused_by_the_runtime_service() {
        let descriptor = HarnessDescriptor::builder("nop".parse().unwrap(), "0.1.0")
            .contract_version(ContractVersion::V1)
            .execution_mode(ExecutionMode::in_process())
            .build()
            .unwrap();
        let adapter = Arc::new(Simple::new(Nop(descriptor)));
        let id = ExecutionId::generate();
        let queued = Execution::queue(id.clone());
        let shared = Arc::new(Shared::new(
            id.clone(),
            "nop".parse().unwrap(),
            queued.events(),
            CancellationToken::new(),
        ));
        let mine = SessionBinding::new("nop:c-1".parse().unwrap(), "c-1".parse().unwrap());
        let context = RuntimeContext {
            contract_version: ContractVersion::V1,
            adapter: "nop".parse().unwrap(),
            execution_id: id.clone(),
            config: crate::adapter::AgentConfig::default(),
            binding: Some(mine.clone()),
            prompt: None,
            interrupt_policy: crate::context::InterruptPolicy::default(),
            tools: Vec::new(),
            limits: crate::limits::RunLimits::default(),
            thread_state: None,
            cancellation: CancellationToken::new(),
            delivery: crate::adapter::Delivery::default(),
            middleware: crate::tool::middleware::PortableMiddlewarePolicy::allow_all(),
            skills: crate::skill::SkillManifest::default(),
            telemetry: crate::telemetry::TelemetrySink::detached(
                "nop".parse().unwrap(),
                id.clone(),
            ),
        };
        let turn = TurnInput {
            execution_id: id,
            conversation_id: Some("c-1".parse().unwrap()),
            message: "go".into(),
            files: Vec::new(),
            user: None,
            client_context: serde_json::Map::new(),
            trace_context: None,
            deadline: None,
            idempotency_key: None,
        };
        let execution = Arc::new(ExecutionRuntime::new(
            shared,
            context,
            turn,
            Extensions::default(),
            Duration::from_secs(1),
        ));
        let form = FormRequest::new([FormField::new(
            "name".parse().unwrap(),
            "Name",
            FieldKind::text(),
        )])
        .unwrap();
        let request = ActionRequest::form(form);
        let validated = || {
            request
                .validate(request.submit(FormValues::new().with("name", "Ada")))
                .unwrap()
        };
        let mut service = RuntimeService::new(adapter);
        let other = SessionBinding::new("nop:c-2".parse().unwrap(), "c-2".parse().unwrap());
        for wrong in [Some(other), Some(mine.clone().with_epoch(3)), None] {
            let decision = ResumeDecision::new(validated()).for_binding(wrong);
            let segment = Segment::resume_of(Arc::clone(&execution), decision);
            let Err(err) = service.call(segment).await else {
                panic!("a decision on another binding must be refused");
            };
            assert_eq!(err.code(), &ErrorCode::ACTION_BINDING_MISMATCH);
        }
        // The execution's own binding passes the check (and finds no runtime to resume).
        let decision = ResumeDecision::new(validated()).for_binding(Some(mine));
        let Err(err) = service
            .call(Segment::resume_of(Arc::clone(&execution), decision))
            .await
        else {
            panic!("no runtime was created");
        };
        assert_eq!(err.category(), ErrorCategory::Internal, "{err:?}");
    }
}
