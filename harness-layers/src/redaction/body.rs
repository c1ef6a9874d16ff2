//! [`RedactedStream`]: a run segment's stream, redacted item by item.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use futures_util::Stream;
use harness_core::adapter::{AdapterEvent, EventResult};
use harness_core::error::HarnessError;
use harness_core::service::SegmentStream;
use pin_project_lite::pin_project;

use super::stream::StreamRedactor;

pin_project! {
    /// The stream of [`Redaction`](super::Redaction): passes every item of the inner stream
    /// through a [`StreamRedactor`], which may hold text back (a possible secret's beginning)
    /// and gives it back before the segment's terminal item, before an error, at the end,
    /// and on [`drain`](SegmentStream::drain).
    pub struct RedactedStream<S> {
        #[pin]
        inner: S,
        redactor: StreamRedactor,
        // What the redactor settled and the driver has not taken yet, then an error to
        // yield after it.
        ready: VecDeque<AdapterEvent>,
        error: Option<HarnessError>,
        scratch: Vec<AdapterEvent>,
        done: bool,
    }
}

impl<S> RedactedStream<S> {
    /// Redacts `inner` with `redactor` (one per segment).
    pub fn new(inner: S, redactor: StreamRedactor) -> Self {
        Self {
            inner,
            redactor,
            ready: VecDeque::new(),
            error: None,
            scratch: Vec::new(),
            done: false,
        }
    }
}

impl<S> fmt::Debug for RedactedStream<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedactedStream")
            .field("redactor", &self.redactor)
            .field("ready", &self.ready.len())
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<S: Stream<Item = EventResult>> Stream for RedactedStream<S> {
    type Item = EventResult;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<EventResult>> {
        let mut this = self.project();
        loop {
            if let Some(event) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(event)));
            }
            if let Some(err) = this.error.take() {
                return Poll::Ready(Some(Err(err)));
            }
            if *this.done {
                return Poll::Ready(None);
            }
            match ready!(this.inner.as_mut().poll_next(cx)) {
                Some(Ok(event)) => {
                    this.redactor.on_event(event, this.scratch);
                    // The common case, one settled delta out for one in, skips the queue.
                    if this.scratch.len() == 1 && this.ready.is_empty() {
                        let event = this.scratch.pop().expect("one item");
                        return Poll::Ready(Some(Ok(event)));
                    }
                    this.ready.extend(this.scratch.drain(..));
                }
                Some(Err(err)) => {
                    // The text before the error keeps its place before it.
                    this.redactor.on_segment_end(this.scratch);
                    this.ready.extend(this.scratch.drain(..));
                    *this.error = Some(this.redactor.on_error(err));
                }
                None => {
                    this.redactor.on_segment_end(this.scratch);
                    this.ready.extend(this.scratch.drain(..));
                    *this.done = true;
                }
            }
        }
    }
}

impl<S: SegmentStream> SegmentStream for RedactedStream<S> {
    fn drain(self: Pin<&mut Self>, out: &mut Vec<AdapterEvent>) {
        let this = self.project();
        // Settled first, then this redactor's held text, then what the inner stream held,
        // redacted after it: the order in which the adapter yielded them.
        out.extend(this.ready.drain(..));
        let mut held = Vec::new();
        this.inner.drain(&mut held);
        for event in held {
            this.redactor.on_event(event, out);
        }
        this.redactor.on_segment_end(out);
        *this.done = true;
    }
}
