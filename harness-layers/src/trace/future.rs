use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use harness_core::error::HarnessError;
use harness_core::event::{Event, EventPayload};
use harness_core::service::ExecutionHandle;
use pin_project_lite::pin_project;
use tracing::Span;

pin_project! {
    /// The response future of [`Trace`](super::Trace): polls the inner future inside the
    /// execution's span.
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        span: Span,
        // Closed (dropped) when the inner future answers.
        admission: Option<Span>,
    }
}

impl<F> ResponseFuture<F> {
    pub(super) fn new(inner: F, span: Span, admission: Span) -> Self {
        Self {
            inner,
            span,
            admission: Some(admission),
        }
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("span", &self.span)
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
        let span: &Span = this.span;
        let result = {
            let _entered = span.enter();
            ready!(this.inner.poll(cx)).map_err(Into::into)
        };
        if let Some(admission) = this.admission.take() {
            admission.record(
                "outcome",
                if result.is_ok() {
                    "admitted"
                } else {
                    "rejected"
                },
            );
        }
        match &result {
            Ok(handle) => {
                span.record("adapter", handle.adapter().as_str());
                span.record("execution_id", handle.id().as_str());
                if !span.is_disabled() {
                    // Keep the span open until the execution ends, and say how it ended.
                    let span = span.clone();
                    handle
                        .log()
                        .on_terminal(move |terminal| record(&span, terminal));
                }
            }
            Err(err) => {
                span.record("outcome", "rejected");
                span.record("error.category", err.category().as_str());
                span.record("error.code", err.code().as_str());
            }
        }
        Poll::Ready(result)
    }
}

/// Records how the execution ended on its span; the span closes when the observer holding
/// it is dropped, right after.
fn record(span: &Span, terminal: &Event) {
    match terminal.payload() {
        EventPayload::RunSucceeded(_) => {
            span.record("outcome", "succeeded");
        }
        EventPayload::RunCancelled(_) => {
            span.record("outcome", "cancelled");
        }
        EventPayload::RunFailed(failed) => {
            span.record("outcome", "failed");
            span.record("error.category", failed.error.category.as_str());
            span.record("error.code", failed.error.code.as_str());
        }
        _ => {}
    }
}
