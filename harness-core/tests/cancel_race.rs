//! A cancel accepted while the driver is inside the poll that fails (in `initialize`, or in a
//! run segment) ends the run `run.cancelled`: the failure is the runtime's answer to the
//! cancel. Barriers pin the interleaving, so these tests do not depend on timing.

use std::sync::{Arc, Barrier};

use futures_util::stream;
use harness_core::action::ActionRequest;
use harness_core::adapter::{
    AgentConfig, BoxFuture, BoxStream, CancelResult, DeploymentContext, EventResult,
    HarnessAdapter, HarnessRuntime, ResumeDecision, RuntimeContext, RuntimeIdentity, RuntimeInit,
    TurnInput,
};
use harness_core::capability::CapabilityReport;
use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::event::{CancelReason, EventPayload};
use harness_core::id::Cursor;
use harness_core::manifest::{ContractVersion, Describe, ExecutionMode, HarnessDescriptor};
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
use tokio_util::sync::CancellationToken;

/// Where the runtime fails once the caller has cancelled.
#[derive(Debug, Clone, Copy)]
enum FailIn {
    Initialize,
    Stream,
}

#[derive(Debug)]
struct Racing {
    descriptor: HarnessDescriptor,
    fail_in: FailIn,
    /// The driver is inside the failing poll.
    entered: Arc<Barrier>,
    /// The caller's cancel was accepted.
    cancelled: Arc<Barrier>,
}

impl Describe for Racing {
    fn descriptor(&self) -> &HarnessDescriptor {
        &self.descriptor
    }
}

impl HarnessAdapter for Racing {
    fn evaluate<'a>(
        &'a self,
        _: &'a AgentConfig,
        _: &'a DeploymentContext,
    ) -> BoxFuture<'a, Result<CapabilityReport, HarnessError>> {
        let report = self.descriptor.capabilities().clone();
        Box::pin(async move { Ok(report) })
    }

    fn create_runtime(
        &self,
        context: RuntimeContext,
    ) -> BoxFuture<'_, Result<Box<dyn HarnessRuntime>, HarnessError>> {
        let runtime = RacingRuntime {
            token: context.cancellation.clone(),
            context,
            fail_in: self.fail_in,
            entered: Arc::clone(&self.entered),
            cancelled: Arc::clone(&self.cancelled),
        };
        Box::pin(async move { Ok(Box::new(runtime) as Box<dyn HarnessRuntime>) })
    }
}

#[derive(Debug)]
struct RacingRuntime {
    context: RuntimeContext,
    token: CancellationToken,
    fail_in: FailIn,
    entered: Arc<Barrier>,
    cancelled: Arc<Barrier>,
}

impl RacingRuntime {
    /// Blocks inside the driver's poll until the caller has cancelled (the OS preempting the
    /// driver's thread right there), then fails the way a runtime aborted by its token does.
    fn fail_after_cancel(&self) -> HarnessError {
        self.entered.wait();
        self.cancelled.wait();
        assert!(
            self.token.is_cancelled(),
            "the execution's token trips on cancel"
        );
        HarnessError::new(
            ErrorCategory::Unavailable,
            "aborted by the execution's token",
        )
    }
}

impl HarnessRuntime for RacingRuntime {
    fn identity(&self) -> RuntimeIdentity {
        RuntimeIdentity {
            adapter: self.context.adapter.clone(),
            execution_id: self.context.execution_id.clone(),
            provider_session_id: None,
        }
    }

    fn initialize(&self) -> BoxFuture<'_, Result<RuntimeInit, HarnessError>> {
        let result = match self.fail_in {
            FailIn::Initialize => Err(self.fail_after_cancel()),
            FailIn::Stream => Ok(RuntimeInit::default()),
        };
        Box::pin(async move { result })
    }

    fn stream(&self, _: TurnInput) -> BoxStream<'_, EventResult> {
        Box::pin(stream::once(async move { Err(self.fail_after_cancel()) }))
    }

    fn resume(&self, _: ResumeDecision) -> BoxStream<'_, EventResult> {
        Box::pin(stream::empty())
    }

    fn pending_action(&self) -> BoxFuture<'_, Option<ActionRequest>> {
        Box::pin(async { None })
    }

    fn cancel(&self, _: CancelReason) -> BoxFuture<'_, CancelResult> {
        Box::pin(async { CancelResult::Requested })
    }

    fn restart(&self) -> BoxFuture<'_, Result<(), HarnessError>> {
        Box::pin(async { Ok(()) })
    }

    fn cleanup(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

async fn cancel_inside_the_failing_poll(fail_in: FailIn) {
    let descriptor = HarnessDescriptor::builder("racing".parse().unwrap(), "0.0.1")
        .contract_version(ContractVersion::V1)
        .execution_mode(ExecutionMode::in_process())
        .build()
        .unwrap();
    let entered = Arc::new(Barrier::new(2));
    let cancelled = Arc::new(Barrier::new(2));
    let service = AdapterService::new(Racing {
        descriptor,
        fail_in,
        entered: Arc::clone(&entered),
        cancelled: Arc::clone(&cancelled),
    });
    let handle = service.start(ExecutionRequest::new("go")).await.unwrap();
    tokio::task::spawn_blocking(move || entered.wait())
        .await
        .unwrap();
    handle.cancel(CancelReason::new("caller"));
    tokio::task::spawn_blocking(move || cancelled.wait())
        .await
        .unwrap();
    let outcome = tokio::time::timeout(std::time::Duration::from_secs(30), handle.outcome())
        .await
        .expect("the run ends");
    assert!(
        matches!(outcome, Outcome::Cancelled(_)),
        "a cancel accepted before the failure was seen ends the run cancelled, not {outcome:?}"
    );
    let events = handle.log().snapshot(Cursor::START);
    let terminals = events.iter().filter(|e| e.payload().is_terminal()).count();
    assert_eq!(terminals, 1, "exactly one terminal event");
    assert!(matches!(
        events.last().map(|e| e.payload()),
        Some(EventPayload::RunCancelled(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_inside_the_initialize_poll_ends_cancelled() {
    cancel_inside_the_failing_poll(FailIn::Initialize).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_inside_the_stream_poll_ends_cancelled() {
    cancel_inside_the_failing_poll(FailIn::Stream).await;
}
