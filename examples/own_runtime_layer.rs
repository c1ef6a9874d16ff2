//! Runtime layers of your own: one that changes what the adapter streams, one that only
//! looks, at named places around the default layers.
//!
//! ```sh
//! cargo run --example own_runtime_layer
//! ```
//!
//! A runtime layer wraps the service the driver calls once per run segment; its response is
//! the segment's stream of adapter items (`SegmentStream`), seen before the items are
//! numbered and stored. The stream is wrapped with `pin_project_lite` (the default layers'
//! streams are not `Unpin`), maps each item in `poll_next`, and forwards `drain` (what inner
//! layers held back when the driver stops reading early). A layer that only looks is an
//! `InspectLayer`: a closure per segment, called for each item and once at the end. Neither
//! can sit below redaction: what they see has had its secrets removed.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use harness::adapter::{AdapterEvent, EventResult};
use harness::error::HarnessError;
use harness::event::{Content, EventPayload};
use harness::layers::inspect::{InspectLayer, Seen};
use harness::layers::stack::RuntimeSlot;
use harness::prelude::*;
use harness::scripted::{Script, ScriptedAdapter};
use harness::service::{Segment, SegmentStream};

/// Upper-cases the text the model streams.
#[derive(Clone)]
struct ShoutLayer;

#[derive(Clone)]
struct Shout<S>(S);

impl<S> Layer<S> for ShoutLayer {
    type Service = Shout<S>;
    fn layer(&self, inner: S) -> Shout<S> {
        Shout(inner)
    }
}

harness::pin_project! {
    struct ShoutStream<T> { #[pin] inner: T }
}

fn shout(event: &mut AdapterEvent) {
    if let AdapterEvent::Content(Content::MessageDelta(delta)) = event {
        delta.text = delta.text.to_uppercase();
    }
}

impl<T: SegmentStream> Stream for ShoutStream<T> {
    type Item = EventResult;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<EventResult>> {
        self.project().inner.poll_next(cx).map(|item| {
            item.map(|mut item| {
                if let Ok(event) = &mut item {
                    shout(event);
                }
                item
            })
        })
    }
}

impl<T: SegmentStream> SegmentStream for ShoutStream<T> {
    fn drain(self: Pin<&mut Self>, out: &mut Vec<AdapterEvent>) {
        let start = out.len();
        self.project().inner.drain(out);
        out[start..].iter_mut().for_each(shout);
    }
}

impl<S> Service<Segment> for Shout<S>
where
    S: Service<Segment, Error = HarnessError>,
    S::Response: SegmentStream + 'static,
    S::Future: Send + 'static,
{
    type Response = ShoutStream<S::Response>;
    type Error = HarnessError;
    type Future = BoxFuture<'static, Result<Self::Response, HarnessError>>;
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), HarnessError>> {
        self.0.poll_ready(cx)
    }
    fn call(&mut self, segment: Segment) -> Self::Future {
        self.0
            .call(segment)
            .map(|r| r.map(|inner| ShoutStream { inner }))
            .boxed()
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let adapter = ScriptedAdapter::new(
        Script::builder()
            .text("the token is sk-live-0123456789abcdefghij, ")
            .text("keep it quiet")
            .complete("done")
            .build(),
    );
    // What the looking layer saw, per segment: its execution, items, and how it ended.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let look = {
        let seen = Arc::clone(&seen);
        InspectLayer::new(move |segment: &Segment| {
            let (seen, id, mut items) = (Arc::clone(&seen), segment.execution_id().clone(), 0);
            move |event: Seen<'_>| match event {
                Seen::Item(_) => items += 1,
                Seen::End(end) => seen
                    .lock()
                    .unwrap()
                    .push(format!("{id}: {items} items, {:?}", end.how)),
            }
        })
    };
    let service = HarnessStack::defaults_for(&adapter)
        .expect("the default stack builds")
        .runtime_layer(RuntimeSlot::Outermost, look)
        .runtime_layer(RuntimeSlot::BelowShutdown, ShoutLayer)
        .service(adapter);
    let execution = service
        .oneshot(ExecutionRequest::new("go"))
        .await
        .expect("it starts");
    let text: String = execution
        .events(Default::default())
        .filter_map(|e| async move {
            match e.payload() {
                EventPayload::MessageDelta(d) => Some(d.text.clone()),
                _ => None,
            }
        })
        .collect::<Vec<_>>()
        .await
        .concat();
    // Shouted, and redacted below it: the credential never reached the layer.
    assert!(
        text.starts_with("THE TOKEN IS") && text.ends_with("KEEP IT QUIET"),
        "{text}"
    );
    assert!(
        !text.to_lowercase().contains("sk-live-0123456789abcdefghij"),
        "{text}"
    );
    println!("{text}");
    for line in seen.lock().unwrap().iter() {
        println!("{line}");
    }
}
