//! [`ResponseFuture`]: the inner call's future, with its error redacted.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use harness_core::error::HarnessError;
use pin_project_lite::pin_project;

use super::engine::Redactor;

pin_project! {
    /// The future of [`Redaction`](super::Redaction): the inner service's, whose error is
    /// passed through [`Redactor::redact_error`].
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        redactor: Arc<Redactor>,
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn new(inner: F, redactor: Arc<Redactor>) -> Self {
        Self { inner, redactor }
    }
}

impl<F: std::fmt::Debug> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<F, T> Future for ResponseFuture<F>
where
    F: Future<Output = Result<T, HarnessError>>,
{
    type Output = Result<T, HarnessError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.inner.poll(cx));
        Poll::Ready(result.map_err(|e| this.redactor.redact_error(e)))
    }
}
