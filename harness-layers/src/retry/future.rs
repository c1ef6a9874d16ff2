//! The response futures of [`Retry`](super::Retry): a call retried until it answers.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use harness_core::adapter::BoxFuture;
use harness_core::error::HarnessError;
use harness_core::service::{ExecutionHandle, ExecutionRequest, Segment};
use pin_project_lite::pin_project;
use tower::Service;

use super::delay;
use super::policy::RetryPolicy;
use super::stream::RetryStream;

pin_project! {
    #[project = StateProj]
    enum State<F> {
        Calling { #[pin] future: F },
        Waiting { #[pin] sleep: tokio::time::Sleep },
        Ready,
    }
}

pin_project! {
    /// The states of [`SegmentFuture`]: a retry first releases the failed runtime, then
    /// waits.
    #[project = SegmentStateProj]
    enum SegmentState<F> {
        Calling { #[pin] future: F },
        Releasing { release: BoxFuture<'static, ()>, wait: Duration },
        Waiting { #[pin] sleep: tokio::time::Sleep },
        Ready,
    }
}

pin_project! {
    /// The response future of [`Retry`](super::Retry) in the admission stack: calls, and
    /// after a retryable refusal waits and calls again.
    pub struct ResponseFuture<S: Service<ExecutionRequest>> {
        #[pin]
        state: State<S::Future>,
        service: S,
        request: ExecutionRequest,
        attempt: u32,
        policy: Arc<dyn RetryPolicy>,
    }
}

impl<S: Service<ExecutionRequest>> ResponseFuture<S> {
    pub(super) fn new(
        future: S::Future,
        service: S,
        request: ExecutionRequest,
        policy: Arc<dyn RetryPolicy>,
    ) -> Self {
        Self {
            state: State::Calling { future },
            service,
            request,
            attempt: 1,
            policy,
        }
    }
}

impl<S: Service<ExecutionRequest>> fmt::Debug for ResponseFuture<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

impl<S> Future for ResponseFuture<S>
where
    S: Service<ExecutionRequest, Response = ExecutionHandle>,
    S::Error: Into<HarnessError>,
{
    type Output = Result<ExecutionHandle, HarnessError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Calling { future } => match ready!(future.poll(cx)) {
                    Ok(handle) => return Poll::Ready(Ok(handle)),
                    Err(err) => {
                        let err = err.into();
                        let Some(after) = delay(&**this.policy, *this.attempt, &err) else {
                            return Poll::Ready(Err(err));
                        };
                        *this.attempt += 1;
                        this.state.set(State::Waiting {
                            sleep: tokio::time::sleep(after),
                        });
                    }
                },
                StateProj::Waiting { sleep } => {
                    ready!(sleep.poll(cx));
                    this.state.set(State::Ready);
                }
                StateProj::Ready => {
                    ready!(this.service.poll_ready(cx)).map_err(Into::into)?;
                    let future = this.service.call(this.request.clone());
                    this.state.set(State::Calling { future });
                }
            }
        }
    }
}

/// The attempts at one turn: the service to call again, the segment of the current attempt,
/// and the policy.
pub(super) struct Attempts<S> {
    pub(super) service: S,
    pub(super) segment: Segment,
    pub(super) policy: Arc<dyn RetryPolicy>,
}

impl<S> Attempts<S> {
    /// After the current attempt failed with `err`: how long to wait before the next one
    /// (the segment then names it) and the release of the failed attempt's runtime, to run
    /// before the wait; or `None` to give up.
    pub(super) fn after(
        &mut self,
        err: &HarnessError,
    ) -> Option<(BoxFuture<'static, ()>, Duration)> {
        let wait = delay(&*self.policy, self.segment.attempt(), err)?;
        let next = self.segment.retry()?;
        let release = self.segment.release();
        self.segment = next;
        Some((release, wait))
    }
}

pin_project! {
    /// The response future of [`Retry`](super::Retry) in the runtime stack: calls (creating
    /// the runtime), and after a retryable failure waits and calls again with the next
    /// attempt; then hands the stream to a [`RetryStream`].
    pub struct SegmentFuture<S: Service<Segment>> {
        #[pin]
        state: SegmentState<S::Future>,
        attempts: Option<Attempts<S>>,
    }
}

impl<S: Service<Segment>> SegmentFuture<S> {
    pub(super) fn new(
        future: S::Future,
        service: S,
        segment: Segment,
        policy: Arc<dyn RetryPolicy>,
    ) -> Self {
        Self {
            state: SegmentState::Calling { future },
            attempts: Some(Attempts {
                service,
                segment,
                policy,
            }),
        }
    }
}

impl<S: Service<Segment>> fmt::Debug for SegmentFuture<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SegmentFuture")
            .field("segment", &self.attempts.as_ref().map(|a| &a.segment))
            .finish_non_exhaustive()
    }
}

impl<S> Future for SegmentFuture<S>
where
    S: Service<Segment, Error = HarnessError>,
{
    type Output = Result<RetryStream<S>, HarnessError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let Some(attempts) = this.attempts.as_mut() else {
            return Poll::Ready(Err(HarnessError::new(
                harness_core::error::ErrorCategory::Internal,
                "retry future polled after completion",
            )));
        };
        loop {
            match this.state.as_mut().project() {
                SegmentStateProj::Calling { future } => match ready!(future.poll(cx)) {
                    Ok(stream) => {
                        let attempts = this.attempts.take().expect("checked above");
                        return Poll::Ready(Ok(RetryStream::new(stream, attempts)));
                    }
                    Err(err) => {
                        let Some((release, wait)) = attempts.after(&err) else {
                            return Poll::Ready(Err(err));
                        };
                        this.state.set(SegmentState::Releasing { release, wait });
                    }
                },
                SegmentStateProj::Releasing { release, wait } => {
                    ready!(release.as_mut().poll(cx));
                    let sleep = tokio::time::sleep(*wait);
                    this.state.set(SegmentState::Waiting { sleep });
                }
                SegmentStateProj::Waiting { sleep } => {
                    ready!(sleep.poll(cx));
                    this.state.set(SegmentState::Ready);
                }
                SegmentStateProj::Ready => {
                    ready!(attempts.service.poll_ready(cx))?;
                    let future = attempts.service.call(attempts.segment.clone());
                    this.state.set(SegmentState::Calling { future });
                }
            }
        }
    }
}
