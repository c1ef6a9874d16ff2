//! [`InspectLayer`]: a runtime layer that shows each item of every run segment to an
//! observer, and then how the segment ended, in the style of tower-http's `on_eos`: counting
//! events, logging them, or mirroring them somewhere is a closure, with no task of its own
//! and nothing that races shutdown.
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
//! use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
//! use harness_layers::inspect::{InspectLayer, Seen};
//! use harness_layers::stack::HarnessStack;
//! use harness_scripted::{Script, ScriptedAdapter};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let adapter = ScriptedAdapter::new(Script::builder().text("a").text("b").complete("ok").build());
//! let stack = HarnessStack::defaults_for(&adapter).unwrap();
//! let (items, segments) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
//! let (i, s) = (Arc::clone(&items), Arc::clone(&segments));
//! let count = InspectLayer::new(move |_segment: &harness_core::service::Segment| {
//!     let (i, s) = (Arc::clone(&i), Arc::clone(&s));
//!     move |seen: Seen<'_>| match seen {
//!         Seen::Item(_) => { i.fetch_add(1, Relaxed); }
//!         Seen::End(_) => { s.fetch_add(1, Relaxed); }
//!     }
//! });
//! // Outside the default runtime layers: it sees what redaction let through.
//! let service = AdapterService::builder(adapter).layer(count).layer(stack.runtime().clone()).build();
//! let execution = service.start(ExecutionRequest::new("go")).await.unwrap();
//! assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
//! assert_eq!((items.load(Relaxed), segments.load(Relaxed)), (3, 1)); // two deltas, the completion
//! # });
//! ```
//!
//! # What happens when...
//!
//! - **the segment ends** (its stream returns `None`): the observer gets
//!   [`Seen::End`] with [`Ended::Finished`] and the number of items it saw.
//! - **the driver stops reading early** (a cancellation, a deadline) and drains the stream:
//!   the items the inner stream gave back are shown as items too, then [`Ended::Drained`].
//! - **the stream is dropped** without either (the execution's task ended, a layer outside
//!   gave up on it): [`Ended::Dropped`], from the drop. The end is shown exactly once whichever
//!   comes first.
//! - **the observer panics**: the panic is the layer's, so the driver contains it as it does
//!   any layer's (`LAYER_PANICKED`).
//!
//! A new observer is made per segment by the closure the layer holds (so per-segment state,
//! a counter or a buffer, needs no lock), given the [`Segment`] to read the execution id,
//! the attempt or the kind from.
//!
//! # Writing your own runtime layer
//!
//! A runtime layer is a `tower::Layer` whose service takes a [`Segment`] and answers a
//! [`SegmentStream`]. Its stream wraps the inner one; with `pin_project_lite` it needs no
//! `Unpin` of what it wraps (the default layers' streams hold timers and are not `Unpin`),
//! and it must forward [`drain`](SegmentStream::drain), so that what an inner layer held back
//! reaches the log when the driver stops reading early:
//!
//! ```
//! use std::pin::Pin;
//! use std::task::{Context, Poll};
//! use futures_util::{FutureExt, Stream, future::BoxFuture};
//! use harness_core::adapter::{AdapterEvent, EventResult};
//! use harness_core::error::HarnessError;
//! use harness_core::event::Content;
//! use harness_core::service::{Segment, SegmentStream};
//!
//! /// Upper-cases the text the model streams.
//! #[derive(Clone)]
//! struct Shout<S>(S);
//!
//! pin_project_lite::pin_project! {
//!     struct ShoutStream<T> { #[pin] inner: T }
//! }
//!
//! fn shout(event: &mut AdapterEvent) {
//!     if let AdapterEvent::Content(Content::MessageDelta(delta)) = event {
//!         delta.text = delta.text.to_uppercase();
//!     }
//! }
//!
//! impl<T: SegmentStream> Stream for ShoutStream<T> {
//!     type Item = EventResult;
//!     fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<EventResult>> {
//!         self.project().inner.poll_next(cx).map(|item| {
//!             item.map(|mut item| {
//!                 if let Ok(event) = &mut item { shout(event) }
//!                 item
//!             })
//!         })
//!     }
//! }
//!
//! impl<T: SegmentStream> SegmentStream for ShoutStream<T> {
//!     fn drain(self: Pin<&mut Self>, out: &mut Vec<AdapterEvent>) {
//!         let start = out.len();
//!         self.project().inner.drain(out); // what the inner stream held, first
//!         out[start..].iter_mut().for_each(shout);
//!     }
//! }
//!
//! impl<S> tower::Service<Segment> for Shout<S>
//! where
//!     S: tower::Service<Segment, Error = HarnessError>,
//!     S::Response: SegmentStream + 'static,
//!     S::Future: Send + 'static,
//! {
//!     type Response = ShoutStream<S::Response>;
//!     type Error = HarnessError;
//!     type Future = BoxFuture<'static, Result<Self::Response, HarnessError>>;
//!     fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), HarnessError>> {
//!         self.0.poll_ready(cx)
//!     }
//!     fn call(&mut self, segment: Segment) -> Self::Future {
//!         self.0.call(segment).map(|r| r.map(|inner| ShoutStream { inner })).boxed()
//!     }
//! }
//!
//! // Around the default runtime layers:
//! # use harness_core::service::{AdapterService, ExecutionRequest};
//! # use harness_layers::stack::HarnessStack;
//! # use harness_scripted::{Script, ScriptedAdapter};
//! # use futures_util::StreamExt;
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let adapter = ScriptedAdapter::new(Script::builder().text("quiet").complete("ok").build());
//! let stack = HarnessStack::defaults_for(&adapter).unwrap();
//! let service = AdapterService::builder(adapter)
//!     .layer(tower::layer::layer_fn(Shout))
//!     .layer(stack.runtime().clone())
//!     .build();
//! let execution = service.start(ExecutionRequest::new("go")).await.unwrap();
//! let text: Vec<String> = execution.events(Default::default())
//!     .filter_map(|e| async move { match e.payload() {
//!         harness_core::event::EventPayload::MessageDelta(d) => Some(d.text.clone()),
//!         _ => None,
//!     }})
//!     .collect().await;
//! assert_eq!(text, ["QUIET"]);
//! # });
//! ```
//!
//! A layer that only needs to look, not change, is an [`InspectLayer`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::Stream;
use harness_core::adapter::{AdapterEvent, EventResult};
use harness_core::error::HarnessError;
use harness_core::service::{Segment, SegmentStream};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

/// What an [`InspectLayer`]'s observer is shown.
#[derive(Debug)]
pub enum Seen<'a> {
    /// An item of the segment, as the layer passes it on (an event, or the error that ends
    /// the segment).
    Item(&'a EventResult),
    /// The segment's end, once.
    End(SegmentEnd),
}

/// How a segment ended, and how many items the observer was shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SegmentEnd {
    /// How it ended.
    pub how: Ended,
    /// The items shown before it, drained ones included.
    pub items: u64,
}

/// How a segment's stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ended {
    /// It returned its last item.
    Finished,
    /// The driver stopped reading and drained it.
    Drained,
    /// It was dropped before either.
    Dropped,
}

/// Shows each item of every run segment to an observer made per segment by `make`, then the
/// segment's end; see the [module docs](self).
#[derive(Clone)]
#[must_use]
pub struct InspectLayer<M> {
    make: Arc<M>,
}

impl<M> std::fmt::Debug for InspectLayer<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InspectLayer").finish_non_exhaustive()
    }
}

impl<M, O> InspectLayer<M>
where
    M: Fn(&Segment) -> O + Send + Sync + 'static,
    O: FnMut(Seen<'_>) + Send + 'static,
{
    /// A layer that calls `make` once per segment for that segment's observer.
    pub fn new(make: M) -> Self {
        Self {
            make: Arc::new(make),
        }
    }
}

impl<M, S> Layer<S> for InspectLayer<M> {
    type Service = Inspect<M, S>;

    fn layer(&self, inner: S) -> Self::Service {
        Inspect {
            inner,
            make: Arc::clone(&self.make),
        }
    }
}

/// The service of an [`InspectLayer`].
pub struct Inspect<M, S> {
    inner: S,
    make: Arc<M>,
}

impl<M, S: Clone> Clone for Inspect<M, S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            make: Arc::clone(&self.make),
        }
    }
}

impl<M, S: std::fmt::Debug> std::fmt::Debug for Inspect<M, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inspect")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<M, O, S> Service<Segment> for Inspect<M, S>
where
    M: Fn(&Segment) -> O + Send + Sync + 'static,
    O: FnMut(Seen<'_>) + Send + 'static,
    S: Service<Segment, Error = HarnessError>,
    S::Response: SegmentStream,
{
    type Response = InspectStream<S::Response, O>;
    type Error = HarnessError;
    type Future = InspectFuture<S::Future, O>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), HarnessError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, segment: Segment) -> Self::Future {
        let observer = (self.make)(&segment);
        InspectFuture {
            future: self.inner.call(segment),
            observer: Some(observer),
        }
    }
}

pin_project! {
    /// The future of [`Inspect`]: the inner service's, then its stream wrapped.
    pub struct InspectFuture<F, O> {
        #[pin]
        future: F,
        observer: Option<O>,
    }
}

impl<F, O, T> Future for InspectFuture<F, O>
where
    F: Future<Output = Result<T, HarnessError>>,
    O: FnMut(Seen<'_>),
{
    type Output = Result<InspectStream<T, O>, HarnessError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let stream = std::task::ready!(this.future.poll(cx))?;
        Poll::Ready(Ok(InspectStream {
            inner: stream,
            observer: Watch {
                observer: this.observer.take(),
                items: 0,
            },
        }))
    }
}

/// The observer, and the end it still owes: shown once, from the stream's end, its drain,
/// or its drop.
struct Watch<O: FnMut(Seen<'_>)> {
    observer: Option<O>,
    items: u64,
}

impl<O: FnMut(Seen<'_>)> Watch<O> {
    fn item(&mut self, item: &EventResult) {
        if let Some(observer) = &mut self.observer {
            self.items += 1;
            observer(Seen::Item(item));
        }
    }

    fn end(&mut self, how: Ended) {
        if let Some(mut observer) = self.observer.take() {
            observer(Seen::End(SegmentEnd {
                how,
                items: self.items,
            }));
        }
    }
}

impl<O: FnMut(Seen<'_>)> Drop for Watch<O> {
    fn drop(&mut self) {
        self.end(Ended::Dropped);
    }
}

pin_project! {
    /// The stream of [`Inspect`]: the inner one, each item shown on its way through.
    pub struct InspectStream<T, O: FnMut(Seen<'_>)> {
        #[pin]
        inner: T,
        observer: Watch<O>,
    }
}

impl<T, O: FnMut(Seen<'_>)> std::fmt::Debug for InspectStream<T, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InspectStream")
            .field("items", &self.observer.items)
            .finish_non_exhaustive()
    }
}

impl<T, O> Stream for InspectStream<T, O>
where
    T: Stream<Item = EventResult>,
    O: FnMut(Seen<'_>),
{
    type Item = EventResult;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<EventResult>> {
        let this = self.project();
        let next = std::task::ready!(this.inner.poll_next(cx));
        match &next {
            Some(item) => this.observer.item(item),
            None => this.observer.end(Ended::Finished),
        }
        Poll::Ready(next)
    }
}

impl<T, O> SegmentStream for InspectStream<T, O>
where
    T: SegmentStream,
    O: FnMut(Seen<'_>) + Send,
{
    fn drain(self: Pin<&mut Self>, out: &mut Vec<AdapterEvent>) {
        let this = self.project();
        let start = out.len();
        this.inner.drain(out);
        if this.observer.observer.is_some() {
            // Shown as the items they are; moved out and back, never cloned.
            for slot in &mut out[start..] {
                let item: EventResult = Ok(std::mem::replace(
                    slot,
                    AdapterEvent::Completed(Default::default()),
                ));
                this.observer.item(&item);
                if let Ok(event) = item {
                    *slot = event;
                }
            }
        }
        this.observer.end(Ended::Drained);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use harness_core::event::{Content, TextDelta};

    /// Two deltas, then the end; drains nothing.
    struct Two(Vec<EventResult>);

    impl Stream for Two {
        type Item = EventResult;
        fn poll_next(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<EventResult>> {
            Poll::Ready(self.0.pop())
        }
    }

    impl SegmentStream for Two {
        fn drain(self: Pin<&mut Self>, _out: &mut Vec<AdapterEvent>) {}
    }

    fn delta() -> EventResult {
        Ok(AdapterEvent::Content(Content::MessageDelta(
            TextDelta::new("x"),
        )))
    }

    #[test]
    fn a_stream_dropped_before_its_end_shows_dropped_once() {
        let ends = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&ends);
        let mut stream = Box::pin(InspectStream {
            inner: Two(vec![delta(), delta()]),
            observer: Watch {
                observer: Some(move |s: Seen<'_>| {
                    if let Seen::End(end) = s {
                        seen.lock().unwrap().push(end);
                    }
                }),
                items: 0,
            },
        });
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(matches!(
            stream.as_mut().poll_next(&mut cx),
            Poll::Ready(Some(Ok(_)))
        ));
        assert!(ends.lock().unwrap().is_empty(), "no end while it runs");
        drop(stream);
        assert_eq!(
            *ends.lock().unwrap(),
            [SegmentEnd {
                how: Ended::Dropped,
                items: 1
            }]
        );
    }
}
