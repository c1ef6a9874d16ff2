//! A `tracing` span per execution, continuing the caller's W3C trace context.
//!
//! ```
//! use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
//! use harness_core::trace::TraceContext;
//! use harness_layers::trace::TraceLayer;
//! use harness_scripted::{Script, ScriptedAdapter};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let script = Script::builder().text("hello").complete("done").build();
//! let service = ServiceBuilder::new()
//!     .layer(TraceLayer::new())
//!     .service(AdapterService::new(ScriptedAdapter::new(script)));
//! let caller: TraceContext = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".parse().unwrap();
//! // The adapter receives `00-4bf92f35...-<this execution's span id>-01`: our span is its parent.
//! let execution = service
//!     .oneshot(ExecutionRequest::new("hi").with_trace_context(caller))
//!     .await
//!     .unwrap();
//! assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
//! # });
//! ```
//!
//! # The span
//!
//! [`Trace`] opens one span named `harness.execution` (level INFO, target
//! `harness_layers::trace`) per call, with these fields:
//!
//! | field | value |
//! |---|---|
//! | `adapter` | the adapter id, once the inner service has answered |
//! | `execution_id` | the execution id, once the inner service has answered |
//! | `conversation_id` | the request's conversation, if any |
//! | `trace_id` | the W3C trace id: the caller's, or a new one |
//! | `span_id` | this execution's W3C span id (16 hex digits, never all zero) |
//! | `parent_span_id` | the caller's span id (the `parent-id` of its `traceparent`), if given |
//! | `outcome` | `succeeded`, `failed` or `cancelled` once the execution ends; `rejected` if the call fails |
//! | `error.category`, `error.code` | the error's category and stable code, for `failed` and `rejected` |
//!
//! Every field comes from identifiers, categories or stable codes: no message, option,
//! error text or client context ever goes on the span, so it holds nothing secret by
//! construction (a redaction layer has nothing to strip here).
//!
//! A child span `harness.admission` runs from the call to the inner service's answer (the
//! layers below, preflight, acceptance), with `outcome` `admitted` or `rejected`. It is
//! not entered: what runs meanwhile logs into the execution's span, and the execution's
//! driver, spawned meanwhile, has the execution's span, not the admission's, as its parent.
//!
//! The span is entered while the inner service's `call` and its future run, so whatever the
//! layers below and the service log while starting the execution is inside it. It stays open
//! until the execution's terminal event (a [terminal hook](harness_core::log::LogReader::on_terminal)
//! on the execution's log, not a task and not a handle clone, records the outcome and lets the
//! span go), so its duration is the execution's. The hook is only registered when a subscriber
//! records the span.
//!
//! # Trace context
//!
//! The request's [`trace_context`](harness_core::service::ExecutionRequest::trace_context) is
//! continued: the layer makes a span id for this execution and rewrites the request's context
//! to the child `00-<same trace id>-<our span id>-<same flags>` (with the same `tracestate`)
//! before calling the inner service, so the adapter (which receives it in its `TurnInput`)
//! sees this execution's span as its parent. A request without a context starts a new trace
//! (a fresh trace id; sampled when a subscriber records the span).
//!
//! # Exporters
//!
//! A `tracing` span has no W3C ids of its own; an exporter that has them (OpenTelemetry) must
//! be told that the execution's span continues the caller's trace. [`set_parent_hook`]
//! installs, once per process, a function the layer calls with each execution's span and the
//! caller's context, after the span is made and before it is first entered (the moment such
//! a backend can still take a parent). `harness_observe::otlp` installs one. A request
//! without a caller's context has no parent to give: the exporter's trace id is then its own.
//!
//! # Neighbours
//!
//! - Put it **outermost** (the default stack does): its span then covers every other layer,
//!   and metrics, preflight and idempotency see the context the adapter will get.
//! - An idempotency layer below fingerprints requests without their trace context (the
//!   context differs on every call by design).
//! - The core service spawns each execution's driver while the span is entered; for the
//!   driver's own logs (cleanup, cancel hooks, the adapter's work) to be inside the span, the
//!   driver task must be instrumented with the current span when spawned.

mod future;
mod layer;

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use harness_core::error::HarnessError;
use harness_core::service::{ExecutionHandle, ExecutionRequest};
use harness_core::trace::TraceContext;
use tower::Service;
use tracing::field::Empty;

pub use self::future::ResponseFuture;
pub use self::layer::TraceLayer;

/// The name of the span of one execution.
pub const SPAN_NAME: &str = "harness.execution";

/// What [`set_parent_hook`] installs: gives an execution's span (first argument) the caller's
/// trace context (second) as its parent in a tracing backend.
pub type ParentHook = fn(&tracing::Span, &TraceContext);

static PARENT_HOOK: OnceLock<ParentHook> = OnceLock::new();

/// Installs `hook` for the whole process: every [`Trace`] calls it with each execution's span
/// and the caller's context (see [Exporters](self#exporters)). The first hook stays; `false`
/// when one was already installed (the hook follows the global subscriber, which is also set
/// once).
pub fn set_parent_hook(hook: ParentHook) -> bool {
    PARENT_HOOK.set(hook).is_ok()
}

/// Opens a span per execution and continues the request's trace context. See the
/// [module docs](self).
#[derive(Debug, Clone)]
pub struct Trace<S> {
    inner: S,
}

impl<S> Trace<S> {
    /// Wraps `inner`.
    #[must_use]
    pub const fn new(inner: S) -> Self {
        Self { inner }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S> Service<ExecutionRequest> for Trace<S>
where
    S: Service<ExecutionRequest, Response = ExecutionHandle>,
    S::Error: Into<HarnessError>,
{
    type Response = ExecutionHandle;
    type Error = HarnessError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: ExecutionRequest) -> Self::Future {
        // Keep in sync with `SPAN_NAME` (the macro needs a literal).
        let span = tracing::info_span!(
            "harness.execution",
            adapter = Empty,
            execution_id = Empty,
            conversation_id = Empty,
            trace_id = Empty,
            span_id = Empty,
            parent_span_id = Empty,
            outcome = Empty,
            error.category = Empty,
            error.code = Empty,
        );
        if let Some(conversation) = &request.conversation_id {
            span.record("conversation_id", conversation.as_str());
        }
        let span_id = span_id();
        let context = match request.trace_context.take() {
            Some(parent) => {
                span.record("parent_span_id", parent.parent_id());
                if let Some(hook) = PARENT_HOOK.get() {
                    hook(&span, &parent);
                }
                // `span_id` is always valid; should `child` refuse it, pass the caller's on.
                Some(parent.child(&span_id).unwrap_or(parent))
            }
            None => root(&span_id, !span.is_disabled()),
        };
        if let Some(context) = &context {
            span.record("trace_id", context.trace_id());
            if context.parent_id() == span_id {
                span.record("span_id", span_id.as_str());
            }
        }
        request.trace_context = context;
        // After the parent hook: a child makes an exporter start its parent.
        let admission = tracing::info_span!(parent: &span, "harness.admission", outcome = Empty);
        let inner = {
            let _entered = span.enter();
            self.inner.call(request)
        };
        ResponseFuture::new(inner, span, admission)
    }
}

/// A random `u64`: std's randomly seeded hasher over a process-wide counter. Unique enough
/// for span ids; not a security token.
fn random() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.finish()
}

/// A new W3C span id: 16 lowercase hex digits, not all zero.
fn span_id() -> String {
    format!("{:016x}", random().max(1))
}

/// The context of a new trace whose first span is `span_id` (`None` only if `span_id` is
/// not a valid span id, which [`span_id`] never makes).
fn root(span_id: &str, sampled: bool) -> Option<TraceContext> {
    let flags = if sampled { "01" } else { "00" };
    format!(
        "00-{:016x}{:016x}-{span_id}-{flags}",
        random(),
        random().max(1)
    )
    .parse()
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn span_ids_are_valid_and_distinct() {
        let ids: std::collections::HashSet<String> = (0..1000).map(|_| span_id()).collect();
        assert_eq!(ids.len(), 1000);
        for id in &ids {
            assert_eq!(id.len(), 16);
            assert!(
                id.bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            );
            assert_ne!(id, "0000000000000000");
        }
    }

    #[test]
    fn a_root_context_names_its_span_and_a_fresh_trace() {
        let id = span_id();
        let a = root(&id, true).unwrap();
        let b = root(&id, false).unwrap();
        assert_eq!(a.parent_id(), id);
        assert!(a.sampled() && !b.sampled());
        assert_ne!(a.trace_id(), b.trace_id());
    }
}
