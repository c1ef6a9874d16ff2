//! [`Holding`]: a runtime that holds something (installed skills, an MCP relay) until its
//! cleanup, when it is dropped after the runtime's own cleanup.

use std::sync::{Mutex, PoisonError};

use harness_core::action::ActionRequest;
use harness_core::adapter::{
    BoxFuture, BoxStream, CancelResult, EventResult, HarnessRuntime, Restored, ResumeDecision,
    RuntimeIdentity, RuntimeInit, TurnInput,
};
use harness_core::error::HarnessError;
use harness_core::event::CancelReason;

/// `inner`, holding `held` until cleanup: everything else is `inner`'s. What is held is
/// dropped once, after `inner`'s cleanup (a second cleanup finds nothing), so that what it
/// removes (skills in the workspace, a relay's bridged processes) outlives the agent that
/// used it.
pub(crate) struct Holding<T> {
    inner: Box<dyn HarnessRuntime>,
    held: Mutex<Option<T>>,
}

impl<T: Send + 'static> Holding<T> {
    /// `inner`, holding `held`, boxed as a runtime.
    pub(crate) fn boxed(inner: Box<dyn HarnessRuntime>, held: T) -> Box<dyn HarnessRuntime> {
        Box::new(Self {
            inner,
            held: Mutex::new(Some(held)),
        })
    }
}

impl<T: Send + 'static> HarnessRuntime for Holding<T> {
    fn identity(&self) -> RuntimeIdentity {
        self.inner.identity()
    }
    fn initialize(&self) -> BoxFuture<'_, Result<RuntimeInit, HarnessError>> {
        self.inner.initialize()
    }
    fn stream(&self, turn: TurnInput) -> BoxStream<'_, EventResult> {
        self.inner.stream(turn)
    }
    fn resume(&self, decision: ResumeDecision) -> BoxStream<'_, EventResult> {
        self.inner.resume(decision)
    }
    fn pending_action(&self) -> BoxFuture<'_, Option<ActionRequest>> {
        self.inner.pending_action()
    }
    fn cancel(&self, reason: CancelReason) -> BoxFuture<'_, CancelResult> {
        self.inner.cancel(reason)
    }
    fn restart(&self) -> BoxFuture<'_, Result<(), HarnessError>> {
        self.inner.restart()
    }
    fn cleanup(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.inner.cleanup().await;
            drop(
                self.held
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take(),
            );
        })
    }
    fn restore(&self, restored: Restored) -> BoxFuture<'_, Result<(), HarnessError>> {
        self.inner.restore(restored)
    }
    fn restorable(&self) -> bool {
        self.inner.restorable()
    }
    fn lost(&self) -> BoxFuture<'_, ()> {
        self.inner.lost()
    }
}
