//! [`RetryStream`]: a segment's stream that starts again when it fails before its first item.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures_util::Stream;
use harness_core::adapter::{AdapterEvent, BoxFuture, EventResult};
use harness_core::error::HarnessError;
use harness_core::service::{Segment, SegmentStream};
use pin_project_lite::pin_project;
use tower::Service;

use super::future::Attempts;

pin_project! {
    #[project = StateProj]
    enum State<R, F> {
        Streaming { #[pin] stream: R },
        Releasing { release: BoxFuture<'static, ()>, wait: Duration },
        Waiting { #[pin] sleep: tokio::time::Sleep },
        Ready,
        Calling { #[pin] future: F },
        Done,
    }
}

pin_project! {
    /// The stream of [`Retry`](super::Retry) in the runtime stack: the inner stream, until
    /// its first item. If that item is a retryable error, the error is not passed on: after
    /// the policy's delay the inner service is called again with the next attempt (a fresh
    /// runtime) and its stream takes over. From the first item passed on, it only forwards.
    pub struct RetryStream<S: Service<Segment>> {
        #[pin]
        state: State<S::Response, S::Future>,
        attempts: Attempts<S>,
        yielded: bool,
    }
}

impl<S: Service<Segment>> RetryStream<S> {
    pub(super) fn new(stream: S::Response, attempts: Attempts<S>) -> Self {
        Self {
            state: State::Streaming { stream },
            attempts,
            yielded: false,
        }
    }
}

impl<S: Service<Segment>> fmt::Debug for RetryStream<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryStream")
            .field("segment", &self.attempts.segment)
            .field("yielded", &self.yielded)
            .finish_non_exhaustive()
    }
}

impl<S> Stream for RetryStream<S>
where
    S: Service<Segment, Error = HarnessError>,
    S::Response: Stream<Item = EventResult>,
{
    type Item = EventResult;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<EventResult>> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Streaming { stream } => match ready!(stream.poll_next(cx)) {
                    Some(Err(err)) if !*this.yielded => {
                        let Some((release, wait)) = this.attempts.after(&err) else {
                            *this.yielded = true;
                            return Poll::Ready(Some(Err(err)));
                        };
                        this.state.set(State::Releasing { release, wait });
                    }
                    Some(item) => {
                        *this.yielded = true;
                        return Poll::Ready(Some(item));
                    }
                    None => {
                        this.state.set(State::Done);
                        return Poll::Ready(None);
                    }
                },
                StateProj::Releasing { release, wait } => {
                    ready!(release.as_mut().poll(cx));
                    let sleep = tokio::time::sleep(*wait);
                    this.state.set(State::Waiting { sleep });
                }
                StateProj::Waiting { sleep } => {
                    ready!(sleep.poll(cx));
                    this.state.set(State::Ready);
                }
                StateProj::Ready => {
                    let attempts = &mut *this.attempts;
                    if let Err(err) = ready!(attempts.service.poll_ready(cx)) {
                        this.state.set(State::Done);
                        return Poll::Ready(Some(Err(err)));
                    }
                    let future = attempts.service.call(attempts.segment.clone());
                    this.state.set(State::Calling { future });
                }
                StateProj::Calling { future } => match ready!(future.poll(cx)) {
                    Ok(stream) => this.state.set(State::Streaming { stream }),
                    Err(err) => {
                        let Some((release, wait)) = this.attempts.after(&err) else {
                            this.state.set(State::Done);
                            return Poll::Ready(Some(Err(err)));
                        };
                        this.state.set(State::Releasing { release, wait });
                    }
                },
                StateProj::Done => return Poll::Ready(None),
            }
        }
    }
}

impl<S> SegmentStream for RetryStream<S>
where
    S: Service<Segment, Error = HarnessError> + Send,
    S::Response: SegmentStream,
    S::Future: Send,
{
    fn drain(self: Pin<&mut Self>, out: &mut Vec<AdapterEvent>) {
        if let StateProj::Streaming { stream } = self.project().state.project() {
            stream.drain(out);
        }
    }
}
