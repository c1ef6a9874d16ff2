//! Policies that layers hand to the service's driver through request
//! [`Extensions`](crate::extensions::Extensions).
//!
//! Only the driver sees what a runtime yields before it is numbered and stored, so policies
//! that must act there travel with the request:
//!
//! | extension | effect in the driver |
//! |---|---|
//! | [`Interceptors`] | transform every adapter item (and error) before it is appended: redaction |
//! | [`ParentCancellation`] | cancelling the parent token cancels the execution (shutdown) |
//! | [`InitTimeout`] | creating + initializing the runtime past it fails the run with `timeout` |
//! | [`Retry`] | failures before any output are retried on a fresh runtime, as the policy says |
//!
//! The request's `deadline` is enforced by the driver too: past it, a starting or running
//! execution fails with the `timeout` category (the runtime is cancelled and cleaned up); an
//! execution awaiting an action is cancelled with the source `deadline`, because
//! the runtime model draws no edge from an awaiting state to `failed`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::adapter::AdapterEvent;
use crate::error::HarnessError;

/// Transforms what one execution's runtime yields, before the service appends it.
///
/// One instance serves one execution (see [`InterceptorFactory`]), so it may keep state
/// across items: a redactor holds back a bounded tail of text to catch a secret split across
/// two deltas. Whatever it holds back it must give back in [`on_segment_end`], which the
/// driver calls before the segment's terminal item, so nothing is lost or reordered.
///
/// [`on_segment_end`]: Interceptor::on_segment_end
pub trait Interceptor: Send + Sync {
    /// Handles one item; pushes zero or more items to `out`, in order.
    fn on_event(&mut self, event: AdapterEvent, out: &mut Vec<AdapterEvent>) {
        out.push(event);
    }

    /// The segment is ending (its terminal item comes next): push anything held back.
    fn on_segment_end(&mut self, out: &mut Vec<AdapterEvent>) {
        let _ = out;
    }

    /// Transforms an error the runtime yielded.
    fn on_error(&mut self, error: HarnessError) -> HarnessError {
        error
    }
}

/// Makes one [`Interceptor`] per execution.
pub trait InterceptorFactory: Send + Sync + 'static {
    /// A fresh interceptor for one execution.
    fn create(&self) -> Box<dyn Interceptor>;
}

impl<F> InterceptorFactory for F
where
    F: Fn() -> Box<dyn Interceptor> + Send + Sync + 'static,
{
    fn create(&self) -> Box<dyn Interceptor> {
        self()
    }
}

/// Extension: the interceptors an execution's items pass through, in order.
#[derive(Clone, Default)]
pub struct Interceptors(Vec<Arc<dyn InterceptorFactory>>);

impl Interceptors {
    /// Adds an interceptor after the existing ones.
    pub fn push(&mut self, factory: Arc<dyn InterceptorFactory>) {
        self.0.push(factory);
    }

    /// How many interceptors there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn instantiate(&self) -> Chain {
        Chain(self.0.iter().map(|f| f.create()).collect())
    }
}

impl fmt::Debug for Interceptors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Interceptors").field(&self.0.len()).finish()
    }
}

/// One execution's instantiated interceptors.
pub(crate) struct Chain(Vec<Box<dyn Interceptor>>);

impl Chain {
    /// Passes `items` through interceptors `from..`, in order.
    fn pass(&mut self, from: usize, mut items: Vec<AdapterEvent>) -> Vec<AdapterEvent> {
        for interceptor in &mut self.0[from..] {
            let mut next = Vec::with_capacity(items.len());
            for item in items {
                interceptor.on_event(item, &mut next);
            }
            items = next;
        }
        items
    }

    pub(crate) fn event(&mut self, event: AdapterEvent) -> Vec<AdapterEvent> {
        self.pass(0, vec![event])
    }

    /// Flushes every interceptor in order; what interceptor `i` gives back still passes
    /// through those after it, whose own held items precede it and are flushed next.
    pub(crate) fn segment_end(&mut self) -> Vec<AdapterEvent> {
        let mut out = Vec::new();
        for i in 0..self.0.len() {
            let mut flushed = Vec::new();
            self.0[i].on_segment_end(&mut flushed);
            out.extend(self.pass(i + 1, flushed));
        }
        out
    }

    pub(crate) fn error(&mut self, mut error: HarnessError) -> HarnessError {
        for interceptor in &mut self.0 {
            error = interceptor.on_error(error);
        }
        error
    }
}

/// Extension: cancelling this token cancels the execution (with source `shutdown` unless a
/// caller already gave one).
#[derive(Debug, Clone)]
pub struct ParentCancellation(pub CancellationToken);

/// Extension: the longest creating and initializing the runtime may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitTimeout(pub Duration);

/// Decides whether a failure before any output is retried.
///
/// Closures `Fn(u32, &HarnessError) -> Option<Duration>` are policies.
pub trait RetryPolicy: Send + Sync + 'static {
    /// After attempt number `attempt` (from 1) failed with `error`, how long to wait before
    /// the next attempt; `None` to give up. Only asked for errors that are retryable and
    /// before any output or side effect.
    fn retry_after(&self, attempt: u32, error: &HarnessError) -> Option<Duration>;

    /// A new request arrived (retry budgets deposit here).
    fn on_request(&self) {}
}

impl<F> RetryPolicy for F
where
    F: Fn(u32, &HarnessError) -> Option<Duration> + Send + Sync + 'static,
{
    fn retry_after(&self, attempt: u32, error: &HarnessError) -> Option<Duration> {
        self(attempt, error)
    }
}

/// Extension: the retry policy of an execution.
#[derive(Clone)]
pub struct Retry(pub Arc<dyn RetryPolicy>);

impl fmt::Debug for Retry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Retry(..)")
    }
}
