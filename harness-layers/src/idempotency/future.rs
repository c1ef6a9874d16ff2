//! The response future of [`Idempotency`](super::Idempotency).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::service::{ExecutionHandle, ExecutionRequest};
use harness_core::tool::BoxFuture;
use pin_project_lite::pin_project;
use tower::Service;

use super::fingerprint::Fingerprint;
use super::store::{IdempotencyStore, InFlight, Reservation, ReservationId, ScopedKey};

/// A keyed request's place in the store.
#[derive(Debug, Clone)]
struct Scope {
    store: Arc<dyn IdempotencyStore>,
    key: ScopedKey,
    fingerprint: Fingerprint,
}

impl Scope {
    fn reserve(&self) -> BoxFuture<'static, Result<Reservation, HarnessError>> {
        self.store.reserve(self.key.clone(), self.fingerprint)
    }
}

/// Holds a reservation: dropped while armed (the request failed before an execution existed,
/// or the future itself was dropped), it releases the key so that a waiter can take over.
#[derive(Debug)]
struct ReservationGuard {
    store: Arc<dyn IdempotencyStore>,
    key: ScopedKey,
    id: ReservationId,
    armed: bool,
}

impl Drop for ReservationGuard {
    fn drop(&mut self) {
        if self.armed {
            self.store.release(&self.key, self.id);
        }
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        // Looking the key up (again, after waiting).
        Reserving {
            future: BoxFuture<'static, Result<Reservation, HarnessError>>,
            scope: Scope,
        },
        // An equivalent request holds the key: waiting for it to finish.
        Waiting {
            in_flight: InFlight,
            scope: Scope,
        },
        // Calling the inner service: first waiting for its readiness.
        Ready {
            guard: Option<ReservationGuard>,
        },
        Calling {
            #[pin]
            future: F,
            guard: Option<ReservationGuard>,
        },
        // Recording the execution under the key.
        Committing {
            future: BoxFuture<'static, Result<(), HarnessError>>,
            execution: ExecutionHandle,
            guard: ReservationGuard,
        },
        Done,
    }
}

pin_project! {
    /// The response future of [`Idempotency`](super::Idempotency).
    ///
    /// A request without a key goes straight to the inner service. A keyed request looks its
    /// key up, waits while an equivalent request holds it, and either replays the recorded
    /// execution, is refused with `IDEMPOTENCY_CONFLICT`, or calls the inner service under a
    /// reservation. The reservation is a drop guard of this future: dropping the future
    /// before the execution is recorded releases the key.
    pub struct ResponseFuture<S>
    where
        S: Service<ExecutionRequest>,
    {
        #[pin]
        state: State<S::Future>,
        service: S,
        request: Option<ExecutionRequest>,
    }
}

impl<S> ResponseFuture<S>
where
    S: Service<ExecutionRequest>,
{
    /// A request without an idempotency key.
    pub(super) fn passthrough(service: S, request: ExecutionRequest) -> Self {
        Self {
            state: State::Ready { guard: None },
            service,
            request: Some(request),
        }
    }

    /// A keyed request.
    pub(super) fn keyed(
        service: S,
        request: ExecutionRequest,
        store: Arc<dyn IdempotencyStore>,
        key: ScopedKey,
        fingerprint: Fingerprint,
    ) -> Self {
        let scope = Scope {
            store,
            key,
            fingerprint,
        };
        Self {
            state: State::Reserving {
                future: scope.reserve(),
                scope,
            },
            service,
            request: Some(request),
        }
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
                StateProj::Reserving { future, scope } => {
                    let reservation = match ready!(future.as_mut().poll(cx)) {
                        Ok(reservation) => reservation,
                        Err(error) => {
                            this.state.set(State::Done);
                            return Poll::Ready(Err(error));
                        }
                    };
                    match reservation {
                        Reservation::Reserved(id) => {
                            let guard = ReservationGuard {
                                store: Arc::clone(&scope.store),
                                key: scope.key.clone(),
                                id,
                                armed: true,
                            };
                            this.state.set(State::Ready { guard: Some(guard) });
                        }
                        Reservation::Existing(execution) => {
                            super::observe_replay(&scope.key, &execution);
                            this.state.set(State::Done);
                            return Poll::Ready(Ok(execution.into_replay()));
                        }
                        Reservation::Conflict { adapter } => {
                            super::observe_conflict(&scope.key, adapter.as_ref());
                            let error = conflict(&scope.key);
                            this.state.set(State::Done);
                            return Poll::Ready(Err(error));
                        }
                        Reservation::InFlight(in_flight) => {
                            let scope = scope.clone();
                            this.state.set(State::Waiting { in_flight, scope });
                        }
                    }
                }
                StateProj::Waiting { in_flight, scope } => {
                    ready!(Pin::new(in_flight).poll(cx));
                    let scope = scope.clone();
                    this.state.set(State::Reserving {
                        future: scope.reserve(),
                        scope,
                    });
                }
                StateProj::Ready { guard } => {
                    if let Err(error) = ready!(this.service.poll_ready(cx)) {
                        // Dropping the guard releases the key: no execution exists.
                        this.state.set(State::Done);
                        return Poll::Ready(Err(error.into()));
                    }
                    let Some(request) = this.request.take() else {
                        this.state.set(State::Done);
                        return Poll::Ready(Err(polled_after_completion()));
                    };
                    let guard = guard.take();
                    let future = this.service.call(request);
                    this.state.set(State::Calling { future, guard });
                }
                StateProj::Calling { future, guard } => {
                    let execution = match ready!(future.poll(cx)) {
                        Ok(execution) => execution,
                        Err(error) => {
                            // Refused before an execution existed: dropping the guard releases
                            // the key and keeps no record, so a corrected retry may reuse it.
                            this.state.set(State::Done);
                            return Poll::Ready(Err(error.into()));
                        }
                    };
                    let Some(guard) = guard.take() else {
                        this.state.set(State::Done);
                        return Poll::Ready(Ok(execution));
                    };
                    let future =
                        guard
                            .store
                            .complete(guard.key.clone(), guard.id, execution.clone());
                    this.state.set(State::Committing {
                        future,
                        execution,
                        guard,
                    });
                }
                StateProj::Committing {
                    future,
                    execution,
                    guard,
                } => {
                    let committed = ready!(future.as_mut().poll(cx));
                    match committed {
                        Ok(()) => guard.armed = false,
                        Err(error) => {
                            // The execution runs whatever the store says: hand it over rather
                            // than lose it. The guard releases the key, so a retry with it
                            // would start another execution.
                            tracing::warn!(
                                key = %guard.key,
                                execution = %execution.id(),
                                error = ?error,
                                "the idempotency store could not record an execution"
                            );
                        }
                    }
                    let execution = execution.clone();
                    this.state.set(State::Done);
                    return Poll::Ready(Ok(execution));
                }
                StateProj::Done => return Poll::Ready(Err(polled_after_completion())),
            }
        }
    }
}

impl<S> fmt::Debug for ResponseFuture<S>
where
    S: Service<ExecutionRequest>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Reserving { .. } => "reserving",
            State::Waiting { .. } => "waiting",
            State::Ready { .. } => "ready",
            State::Calling { .. } => "calling",
            State::Committing { .. } => "committing",
            State::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

/// The refusal of a key reused for a different request. Names the key, never the request.
pub(super) fn conflict(key: &ScopedKey) -> HarnessError {
    HarnessError::new(
        ErrorCategory::Configuration,
        format!(
            "idempotency key `{}` was already used for a different request; \
             retry with the same request to get the original execution, or use a new key",
            key.key
        ),
    )
    .with_code(ErrorCode::IDEMPOTENCY_CONFLICT)
    .with_retryable(false)
    .with_diagnostic(format!(
        "caller `{}`: the request's fingerprint differs from the one reserved or recorded \
         under this key",
        key.caller
    ))
}

fn polled_after_completion() -> HarnessError {
    HarnessError::new(
        ErrorCategory::Internal,
        "an idempotency response future was polled after it completed",
    )
}
