//! [`ResponseFuture`]: the inner call's future, its stream wrapped, its error redacted.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use harness_core::error::{ErrorCategory, HarnessError};
use pin_project_lite::pin_project;

use super::body::RedactedStream;
use super::stream::StreamRedactor;

pin_project! {
    /// The future of [`Redaction`](super::Redaction): the inner service's, whose stream is
    /// wrapped in a [`RedactedStream`] and whose error is redacted; or a refusal made
    /// before the inner service was called.
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = Projected]
    enum Kind<F> {
        Inner {
            #[pin]
            inner: F,
            redactor: Option<StreamRedactor>,
        },
        Refused { error: Option<HarnessError> },
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn new(inner: F, redactor: StreamRedactor) -> Self {
        Self {
            kind: Kind::Inner {
                inner,
                redactor: Some(redactor),
            },
        }
    }

    /// A segment refused without calling the inner service.
    pub(crate) fn refused(error: HarnessError) -> Self {
        Self {
            kind: Kind::Refused { error: Some(error) },
        }
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

fn polled_again() -> HarnessError {
    HarnessError::new(
        ErrorCategory::Internal,
        "redaction future polled after completion",
    )
}

impl<F, S> Future for ResponseFuture<F>
where
    F: Future<Output = Result<S, HarnessError>>,
{
    type Output = Result<RedactedStream<S>, HarnessError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            Projected::Inner { inner, redactor } => {
                let result = ready!(inner.poll(cx));
                let Some(mut redactor) = redactor.take() else {
                    return Poll::Ready(Err(polled_again()));
                };
                Poll::Ready(match result {
                    Ok(stream) => Ok(RedactedStream::new(stream, redactor)),
                    Err(err) => Err(redactor.on_error(err)),
                })
            }
            Projected::Refused { error } => {
                Poll::Ready(Err(error.take().unwrap_or_else(polled_again)))
            }
        }
    }
}
