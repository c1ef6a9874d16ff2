//! [`ResponseFuture`]: the inner call's future, its stream wrapped, its error redacted.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use harness_core::error::HarnessError;
use pin_project_lite::pin_project;

use super::body::RedactedStream;
use super::stream::StreamRedactor;

pin_project! {
    /// The future of [`Redaction`](super::Redaction): the inner service's, whose stream is
    /// wrapped in a [`RedactedStream`] and whose error is redacted.
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        redactor: Option<StreamRedactor>,
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn new(inner: F, redactor: StreamRedactor) -> Self {
        Self {
            inner,
            redactor: Some(redactor),
        }
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<F, S> Future for ResponseFuture<F>
where
    F: Future<Output = Result<S, HarnessError>>,
{
    type Output = Result<RedactedStream<S>, HarnessError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.inner.poll(cx));
        let Some(mut redactor) = this.redactor.take() else {
            return Poll::Ready(Err(HarnessError::new(
                harness_core::error::ErrorCategory::Internal,
                "redaction future polled after completion",
            )));
        };
        Poll::Ready(match result {
            Ok(stream) => Ok(RedactedStream::new(stream, redactor)),
            Err(err) => Err(redactor.on_error(err)),
        })
    }
}
