//! Tower layers for harness executions, in two stacks (see [`stack`]).
//!
//! Every layer here has [`HarnessError`] as its error: every failure in this domain already
//! has a category, a stable code and retry advice, so the layers share the one typed error
//! instead of boxing their own. The admission layers accept an inner service whose error is
//! anything `Into<HarnessError>` and convert it once, at their edge: so tower's own
//! middleware (`timeout`, `load_shed`, `concurrency_limit`, `buffer`, which fail with
//! `tower::BoxError`) can sit between them, its errors classified by
//! [`HarnessError`'s `From<BoxError>`](harness_core::error#towers-own-middleware). In the
//! runtime stack a tower layer may be the outermost (the adapter service's builder converts
//! its error); the runtime layers here still need `HarnessError` from what they wrap.
//!
//! - **The admission stack** wraps a service of [`ExecutionRequest`] to [`ExecutionHandle`]
//!   (the [`ExecutionService`] bound). Its layers act on the request and the call
//!   (preflight, idempotency, capacity: before the inner service is called, so a refusal
//!   costs no provider work) or on the handle they get back (metrics, tracing, and the
//!   capacity permit: through a terminal hook on the execution's log, not a task).
//! - **The runtime stack** wraps a service of
//!   [`Segment`](harness_core::service::Segment) to a
//!   [`SegmentStream`](harness_core::service::SegmentStream): the adapter service's driver
//!   calls it once per run segment, so its layers see what the adapter yields *before* it is
//!   numbered and stored. Redaction maps the stream, retry starts it again before its first
//!   item, timeouts bound the call and the stream, shutdown ties the execution to a token.
//!   [`inspect`] shows every item to a callback (counting, logging, mirroring) and documents
//!   how to write a runtime layer of your own.
//!   Configured on the service itself
//!   ([`AdapterService::builder`](harness_core::service::AdapterService::builder)), none of
//!   them travels in the request: rebuilding a request drops nothing.
#![warn(missing_docs)]

use harness_core::error::HarnessError;
use harness_core::service::{ExecutionHandle, ExecutionRequest};
use tower::Service;

pub mod capacity;
pub mod idempotency;
pub mod inspect;
pub mod metrics;
pub mod middleware;
pub mod preflight;
pub mod redaction;
pub mod retry;
pub mod shutdown;
pub mod stack;
pub mod timeout;
pub mod trace;

/// A service that starts executions: what every admission layer here is. What they wrap may
/// fail with anything `Into<HarnessError>`.
pub trait ExecutionService:
    Service<ExecutionRequest, Response = ExecutionHandle, Error = HarnessError>
{
}

impl<S> ExecutionService for S where
    S: Service<ExecutionRequest, Response = ExecutionHandle, Error = HarnessError>
{
}
