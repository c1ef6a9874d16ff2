use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use ::metrics::{Counter, Gauge, SharedString};
use harness_core::error::HarnessError;
use harness_core::event::{Event, EventKind, EventPayload};
use harness_core::log::LogObserver;
use harness_core::service::ExecutionHandle;
use pin_project_lite::pin_project;

use super::names;
use super::names::{
    ERRORS, EVENTS, EXECUTION_DURATION, EXECUTIONS_FINISHED, EXECUTIONS_IN_FLIGHT,
    EXECUTIONS_STARTED, LABEL_ADAPTER, LABEL_CATEGORY, LABEL_KIND, LABEL_OUTCOME, LABEL_STAGE,
    OUTCOME_CANCELLED, OUTCOME_FAILED, OUTCOME_SUCCEEDED, STAGE_CALL, STAGE_EXECUTION,
    TIME_TO_FIRST_EVENT,
};

pin_project! {
    /// The response future of [`Metrics`](super::Metrics).
    ///
    /// It holds the call's in-flight guard: dropping the future before it resolves, or an
    /// error from the inner service, takes the in-flight gauge back down; a new execution
    /// hands the guard to the observer that follows its log.
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        call: Option<Call>,
    }
}

impl<F> ResponseFuture<F> {
    pub(super) fn new(inner: F, call: Call) -> Self {
        Self {
            inner,
            call: Some(call),
        }
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("call", &self.call)
            .finish_non_exhaustive()
    }
}

impl<F, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<ExecutionHandle, E>>,
    E: Into<HarnessError>,
{
    type Output = Result<ExecutionHandle, HarnessError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.inner.poll(cx)).map_err(Into::into);
        if let Some(call) = this.call.take() {
            match &result {
                Ok(handle) => call.answered(handle),
                Err(err) => call.refused(err),
            }
        }
        Poll::Ready(result)
    }
}

/// One call under way: when it began and its in-flight guard.
#[derive(Debug)]
pub(super) struct Call {
    adapter: SharedString,
    started: Instant,
    in_flight: InFlight,
}

impl Call {
    pub(super) fn new(adapter: SharedString, started: Instant) -> Self {
        let in_flight = InFlight::new(&adapter);
        Self {
            adapter,
            started,
            in_flight,
        }
    }

    /// The call failed: no execution exists. The guard drops with `self`.
    fn refused(self, err: &HarnessError) {
        ::metrics::counter!(
            ERRORS,
            LABEL_ADAPTER => self.adapter.clone(),
            LABEL_CATEGORY => err.category().as_str(),
            LABEL_STAGE => STAGE_CALL,
        )
        .increment(1);
    }

    /// The inner service returned `handle`: count a new execution and follow it.
    fn answered(self, handle: &ExecutionHandle) {
        if handle.is_replay() {
            // An existing execution, already counted and followed by whoever started it.
            return;
        }
        let Self {
            adapter,
            started,
            mut in_flight,
            ..
        } = self;
        let id = handle.adapter().as_str();
        let adapter = if *adapter == *id {
            adapter
        } else {
            let adapter = SharedString::from(Arc::<str>::from(id));
            in_flight.relabel(&adapter);
            adapter
        };
        ::metrics::counter!(EXECUTIONS_STARTED, LABEL_ADAPTER => adapter.clone()).increment(1);
        handle.log().observe(Follow {
            kinds: KindCounters::new(adapter.clone()),
            adapter,
            started,
            awaiting_first: true,
            _in_flight: in_flight,
        });
    }
}

/// Holds one unit of the in-flight gauge; gives it back exactly once, when dropped.
#[derive(Debug)]
struct InFlight(Gauge);

impl InFlight {
    fn new(adapter: &SharedString) -> Self {
        let gauge = ::metrics::gauge!(EXECUTIONS_IN_FLIGHT, LABEL_ADAPTER => adapter.clone());
        gauge.increment(1.0);
        Self(gauge)
    }

    /// Moves the unit to the series of `adapter` (up there first, then down here, so the
    /// total never dips).
    fn relabel(&mut self, adapter: &SharedString) {
        *self = Self::new(adapter);
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// Follows one execution's log as it is appended (a log observer, not a task); dropped after
/// the terminal event, and the in-flight guard with it.
struct Follow {
    adapter: SharedString,
    started: Instant,
    kinds: KindCounters,
    awaiting_first: bool,
    _in_flight: InFlight,
}

impl LogObserver for Follow {
    fn on_event(&mut self, event: &Event) {
        let kind = event.kind();
        self.kinds.increment(kind);
        if self.awaiting_first && !kind.is_lifecycle() {
            self.awaiting_first = false;
            ::metrics::histogram!(TIME_TO_FIRST_EVENT, LABEL_ADAPTER => self.adapter.clone())
                .record(self.started.elapsed().as_secs_f64());
        }
        if let EventPayload::RunCancelling(reason) = event.payload() {
            names::record_cancellation(&self.adapter, reason.source);
        }
        if kind.is_terminal() {
            finished(&self.adapter, event.payload(), self.started);
        }
    }
}

fn finished(adapter: &SharedString, payload: &EventPayload, started: Instant) {
    let seconds = started.elapsed().as_secs_f64();
    let outcome = match payload {
        EventPayload::RunSucceeded(_) => OUTCOME_SUCCEEDED,
        EventPayload::RunCancelled(_) => OUTCOME_CANCELLED,
        EventPayload::RunFailed(failed) => {
            let category = failed.error.category.as_str();
            ::metrics::counter!(
                EXECUTIONS_FINISHED,
                LABEL_ADAPTER => adapter.clone(),
                LABEL_OUTCOME => OUTCOME_FAILED,
                LABEL_CATEGORY => category,
            )
            .increment(1);
            ::metrics::counter!(
                ERRORS,
                LABEL_ADAPTER => adapter.clone(),
                LABEL_CATEGORY => category,
                LABEL_STAGE => STAGE_EXECUTION,
            )
            .increment(1);
            ::metrics::histogram!(
                EXECUTION_DURATION,
                LABEL_ADAPTER => adapter.clone(),
                LABEL_OUTCOME => OUTCOME_FAILED,
            )
            .record(seconds);
            return;
        }
        // The three above are the only terminal payloads.
        _ => return,
    };
    ::metrics::counter!(
        EXECUTIONS_FINISHED,
        LABEL_ADAPTER => adapter.clone(),
        LABEL_OUTCOME => outcome,
    )
    .increment(1);
    ::metrics::histogram!(
        EXECUTION_DURATION,
        LABEL_ADAPTER => adapter.clone(),
        LABEL_OUTCOME => outcome,
    )
    .record(seconds);
}

/// The event counters of one execution, registered once per kind seen.
struct KindCounters {
    adapter: SharedString,
    counters: Vec<(EventKind, Counter)>,
}

impl KindCounters {
    fn new(adapter: SharedString) -> Self {
        Self {
            adapter,
            counters: Vec::with_capacity(8),
        }
    }

    fn increment(&mut self, kind: EventKind) {
        if let Some((_, counter)) = self.counters.iter().find(|(k, _)| *k == kind) {
            counter.increment(1);
            return;
        }
        let counter = ::metrics::counter!(
            EVENTS,
            LABEL_ADAPTER => self.adapter.clone(),
            LABEL_KIND => kind.as_str(),
        );
        counter.increment(1);
        self.counters.push((kind, counter));
    }
}
