//! Tower layers for harness executions.
//!
//! Every layer here wraps a service of [`ExecutionRequest`] to [`ExecutionHandle`] with
//! [`HarnessError`] as its error (the [`ExecutionService`] bound): every failure in this domain
//! already has a category, a stable code and retry advice, so the layers share the one typed
//! error instead of boxing their own.
//!
//! Where a layer acts:
//! - on the request and the call (preflight, idempotency, capacity): before the inner service
//!   is called, so a refusal costs no provider work;
//! - on the handle it gets back (metrics, tracing): watching the execution's log;
//! - inside the driver (redaction, retry, timeouts, shutdown cancellation): these policies must
//!   see what the adapter yields *before* it is numbered and stored, which only the
//!   service's driver does, so the layer puts a policy in the request's
//!   [`extensions`](harness_core::extensions) (see [`harness_core::policy`]).

use harness_core::error::HarnessError;
use harness_core::service::{ExecutionHandle, ExecutionRequest};
use tower::Service;

pub mod cancellation;
pub mod capacity;
pub mod idempotency;
pub mod metrics;
pub mod preflight;
pub mod redaction;
pub mod retry;
pub mod stack;
pub mod timeout;
pub mod trace;

/// A service that starts executions: what every layer here wraps and is.
pub trait ExecutionService:
    Service<ExecutionRequest, Response = ExecutionHandle, Error = HarnessError>
{
}

impl<S> ExecutionService for S where
    S: Service<ExecutionRequest, Response = ExecutionHandle, Error = HarnessError>
{
}
