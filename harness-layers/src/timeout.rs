//! Timeouts: initialization and turn deadlines that end an execution with `timeout`.
//!
//! ```
//! use std::time::Duration;
//! use harness_core::error::ErrorCategory;
//! use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
//! use harness_layers::timeout::TimeoutLayer;
//! use harness_scripted::{Script, ScriptedAdapter};
//! use tower::ServiceExt;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let stuck = Script::builder().text("working...").hang().build();
//! let service = AdapterService::builder(ScriptedAdapter::new(stuck))
//!     .layer(TimeoutLayer::new().turn(Duration::from_millis(20)))
//!     .build();
//! let execution = service.oneshot(ExecutionRequest::new("go")).await.unwrap();
//! let Outcome::Failed(err) = execution.outcome().await else { panic!() };
//! assert_eq!(err.category(), ErrorCategory::Timeout);
//! # });
//! ```
//!
//! A layer of the runtime stack ([`AdapterService::builder`]), with two bounds, each
//! optional:
//!
//! - **init**: the call that creates and initializes the runtime (the first segment's call)
//!   must answer within it, else it fails with `timeout`
//!   ([`INIT_TIMEOUT`](ErrorCode::INIT_TIMEOUT)). The runtime it was making, if any, stays
//!   with the execution and is cleaned up once.
//! - **turn**: each run segment (the first stream, each resume) must end within it, counted
//!   from when its stream is returned: the contract's turn deadline, measured while the
//!   adapter works, not while the execution awaits a human (the request's own `deadline`
//!   bounds that). Past it the stream yields one `timeout` error
//!   ([`TURN_TIMEOUT`](ErrorCode::TURN_TIMEOUT)) and ends; the driver then fails the run and
//!   cleans up the runtime.
//!
//! Neighbours: inside [`retry`](crate::retry), each attempt has its own bounds and a
//! `timeout` may be retried (when the policy retries timeouts); outside it, one bound
//! covers every attempt and the waits between them. Tool deadlines belong to portable tools
//! (`ToolCallContext::deadline`).
//!
//! [`AdapterService::builder`]: harness_core::service::AdapterService::builder

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures_util::Stream;
use harness_core::adapter::{AdapterEvent, EventResult};
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::service::{Segment, SegmentKind, SegmentStream};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

/// Configures [`Timeout`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimeoutLayer {
    turn: Option<Duration>,
    init: Option<Duration>,
}

impl TimeoutLayer {
    /// No bounds yet.
    #[must_use]
    pub const fn new() -> Self {
        Self {
            turn: None,
            init: None,
        }
    }

    /// Bounds each run segment (the turn's working time) to `limit`.
    #[must_use]
    pub const fn turn(mut self, limit: Duration) -> Self {
        self.turn = Some(limit);
        self
    }

    /// Bounds creating and initializing the runtime to `limit`.
    #[must_use]
    pub const fn init(mut self, limit: Duration) -> Self {
        self.init = Some(limit);
        self
    }
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = Timeout<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Timeout {
            inner,
            limits: *self,
        }
    }
}

/// Bounds the calls and streams of the runtime stack; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Timeout<S> {
    inner: S,
    limits: TimeoutLayer,
}

impl<S> Timeout<S> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }
    /// The inner service, by value.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

fn timeout(code: ErrorCode, what: &str, limit: Duration) -> HarnessError {
    HarnessError::new(
        ErrorCategory::Timeout,
        format!("the execution exceeded its {what} of {limit:?}"),
    )
    .with_code(code)
}

impl<S> Service<Segment> for Timeout<S>
where
    S: Service<Segment, Error = HarnessError>,
    S::Response: SegmentStream,
{
    type Response = TimeoutStream<S::Response>;
    type Error = HarnessError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, segment: Segment) -> Self::Future {
        let init = self
            .limits
            .init
            .filter(|_| segment.kind() == SegmentKind::Turn);
        ResponseFuture {
            inner: self.inner.call(segment),
            init: init.map(|limit| (Box::pin(tokio::time::sleep(limit)), limit)),
            turn: self.limits.turn,
        }
    }
}

pin_project! {
    /// The future of [`Timeout`]: the inner call, bounded by the init deadline.
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        init: Option<(Pin<Box<tokio::time::Sleep>>, Duration)>,
        turn: Option<Duration>,
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("init", &self.init.as_ref().map(|i| i.1))
            .field("turn", &self.turn)
            .finish_non_exhaustive()
    }
}

impl<F, S> Future for ResponseFuture<F>
where
    F: Future<Output = Result<S, HarnessError>>,
{
    type Output = Result<TimeoutStream<S>, HarnessError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(result) = this.inner.poll(cx) {
            return Poll::Ready(result.map(|inner| {
                TimeoutStream {
                    inner,
                    // `sleep` saturates a limit too far for the clock.
                    turn: this
                        .turn
                        .map(|limit| (Box::pin(tokio::time::sleep(limit)), limit)),
                    expired: false,
                }
            }));
        }
        if let Some((sleep, limit)) = this.init {
            ready!(sleep.as_mut().poll(cx));
            return Poll::Ready(Err(timeout(
                ErrorCode::INIT_TIMEOUT,
                "initialization deadline",
                *limit,
            )));
        }
        Poll::Pending
    }
}

pin_project! {
    /// The stream of [`Timeout`]: the inner stream until the turn deadline, then one
    /// `timeout` error and the end.
    pub struct TimeoutStream<S> {
        #[pin]
        inner: S,
        turn: Option<(Pin<Box<tokio::time::Sleep>>, Duration)>,
        expired: bool,
    }
}

impl<S> fmt::Debug for TimeoutStream<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimeoutStream")
            .field("turn", &self.turn.as_ref().map(|t| t.1))
            .field("expired", &self.expired)
            .finish_non_exhaustive()
    }
}

impl<S: Stream<Item = EventResult>> Stream for TimeoutStream<S> {
    type Item = EventResult;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<EventResult>> {
        let this = self.project();
        if *this.expired {
            return Poll::Ready(None);
        }
        if let Poll::Ready(item) = this.inner.poll_next(cx) {
            return Poll::Ready(item);
        }
        if let Some((sleep, limit)) = this.turn {
            ready!(sleep.as_mut().poll(cx));
            *this.expired = true;
            return Poll::Ready(Some(Err(timeout(
                ErrorCode::TURN_TIMEOUT,
                "turn deadline",
                *limit,
            ))));
        }
        Poll::Pending
    }
}

impl<S: SegmentStream> SegmentStream for TimeoutStream<S> {
    fn drain(self: Pin<&mut Self>, out: &mut Vec<AdapterEvent>) {
        let this = self.project();
        if !*this.expired {
            this.inner.drain(out);
        }
    }
}
