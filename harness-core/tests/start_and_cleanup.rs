//! The service's side of two contract rules:
//!
//! - `evaluate` answers for every request (not only one that requires capabilities): an
//!   instance that cannot serve the request's configuration refuses before any runtime is
//!   created, and a conversation needs `session.multi_turn` as evaluated;
//! - a runtime whose cleanup hangs is cut at the cleanup deadline: the outcome stands, and
//!   the runtime is dropped (what it holds released) while the caller still holds the handle.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

use futures_util::stream;
use harness_core::action::ActionRequest;
use harness_core::adapter::{
    AdapterEvent, AgentConfig, BoxFuture, BoxStream, CancelResult, DeploymentContext, EventResult,
    HarnessAdapter, HarnessRuntime, ResumeDecision, RuntimeContext, RuntimeIdentity, RuntimeInit,
    TurnInput,
};
use harness_core::capability::{Capability, CapabilityKey, CapabilityReport};
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::event::{CancelReason, RunSucceeded};
use harness_core::id::ConversationId;
use harness_core::manifest::{ContractVersion, Describe, ExecutionMode, HarnessDescriptor};
use harness_core::service::{AdapterService, ExecutionRequest, Outcome, ServiceConfig};

#[derive(Debug, Default)]
struct Counts {
    evaluated: AtomicUsize,
    created: AtomicUsize,
    dropped: AtomicUsize,
}

#[derive(Debug)]
struct Picky {
    descriptor: HarnessDescriptor,
    counts: Arc<Counts>,
    hang_cleanup: bool,
}

impl Picky {
    fn new(hang_cleanup: bool) -> (Self, Arc<Counts>) {
        let descriptor = HarnessDescriptor::builder("picky".parse().unwrap(), "0.0.1")
            .contract_version(ContractVersion::V1)
            .execution_mode(ExecutionMode::in_process())
            .capability(CapabilityKey::StreamText, Capability::native())
            .capability(CapabilityKey::SessionMultiTurn, Capability::native())
            .build()
            .unwrap();
        let counts = Arc::new(Counts::default());
        (
            Self {
                descriptor,
                counts: Arc::clone(&counts),
                hang_cleanup,
            },
            counts,
        )
    }
}

impl Describe for Picky {
    fn descriptor(&self) -> &HarnessDescriptor {
        &self.descriptor
    }
}

impl HarnessAdapter for Picky {
    /// Refuses options `{"refuse": true}`; with `{"ephemeral": true}`, narrows
    /// `session.multi_turn` away (an agent that cannot reopen a session).
    fn evaluate<'a>(
        &'a self,
        config: &'a AgentConfig,
        _: &'a DeploymentContext,
    ) -> BoxFuture<'a, Result<CapabilityReport, HarnessError>> {
        self.counts.evaluated.fetch_add(1, SeqCst);
        let mut report = self.descriptor.capabilities().clone();
        let result = if config.options["refuse"] == true {
            Err(HarnessError::new(
                ErrorCategory::Configuration,
                "this instance cannot serve that configuration",
            ))
        } else {
            if config.options["ephemeral"] == true {
                report.declare(
                    CapabilityKey::SessionMultiTurn,
                    Capability::unsupported("this configuration keeps no session"),
                );
            }
            Ok(report)
        };
        Box::pin(async move { result })
    }

    fn create_runtime(
        &self,
        context: RuntimeContext,
    ) -> BoxFuture<'_, Result<Box<dyn HarnessRuntime>, HarnessError>> {
        self.counts.created.fetch_add(1, SeqCst);
        let runtime = PickyRuntime {
            context,
            counts: Arc::clone(&self.counts),
            hang_cleanup: self.hang_cleanup,
        };
        Box::pin(async move { Ok(Box::new(runtime) as Box<dyn HarnessRuntime>) })
    }
}

#[derive(Debug)]
struct PickyRuntime {
    context: RuntimeContext,
    counts: Arc<Counts>,
    hang_cleanup: bool,
}

impl Drop for PickyRuntime {
    fn drop(&mut self) {
        self.counts.dropped.fetch_add(1, SeqCst);
    }
}

impl HarnessRuntime for PickyRuntime {
    fn identity(&self) -> RuntimeIdentity {
        RuntimeIdentity {
            adapter: self.context.adapter.clone(),
            execution_id: self.context.execution_id.clone(),
            provider_session_id: None,
        }
    }

    fn initialize(&self) -> BoxFuture<'_, Result<RuntimeInit, HarnessError>> {
        Box::pin(async { Ok(RuntimeInit::default()) })
    }

    fn stream(&self, _: TurnInput) -> BoxStream<'_, EventResult> {
        Box::pin(stream::iter([Ok(AdapterEvent::Completed(
            RunSucceeded::default(),
        ))]))
    }

    fn resume(&self, _: ResumeDecision) -> BoxStream<'_, EventResult> {
        Box::pin(stream::empty())
    }

    fn pending_action(&self) -> BoxFuture<'_, Option<ActionRequest>> {
        Box::pin(async { None })
    }

    fn cancel(&self, _: CancelReason) -> BoxFuture<'_, CancelResult> {
        Box::pin(async { CancelResult::NothingToCancel })
    }

    fn restart(&self) -> BoxFuture<'_, Result<(), HarnessError>> {
        Box::pin(async { Ok(()) })
    }

    fn cleanup(&self) -> BoxFuture<'_, ()> {
        let hang = self.hang_cleanup;
        Box::pin(async move {
            if hang {
                std::future::pending::<()>().await;
            }
        })
    }
}

#[tokio::test]
async fn evaluate_refuses_a_configuration_without_required_capabilities() {
    let (adapter, counts) = Picky::new(false);
    let service = AdapterService::new(adapter);
    let err = service
        .start(ExecutionRequest::new("go").with_options(serde_json::json!({"refuse": true})))
        .await
        .expect_err("refused at start");
    assert_eq!(err.category(), ErrorCategory::Configuration, "{err:?}");
    assert!(err.message().contains("cannot serve"), "{err:?}");
    assert_eq!(counts.evaluated.load(SeqCst), 1);
    assert_eq!(counts.created.load(SeqCst), 0, "no runtime was created");

    // A plain request is evaluated too, and runs.
    let handle = service.start(ExecutionRequest::new("go")).await.unwrap();
    assert!(matches!(handle.outcome().await, Outcome::Succeeded(_)));
    assert_eq!(counts.evaluated.load(SeqCst), 2);
}

#[tokio::test]
async fn a_conversation_needs_multi_turn_as_evaluated_for_its_configuration() {
    let (adapter, counts) = Picky::new(false);
    let service = AdapterService::new(adapter);
    let conversation = ConversationId::generate();
    let err = service
        .start(
            ExecutionRequest::new("go")
                .with_options(serde_json::json!({"ephemeral": true}))
                .with_conversation(conversation.clone()),
        )
        .await
        .expect_err("refused at start");
    assert_eq!(err.code(), &ErrorCode::CAPABILITY_UNSUPPORTED, "{err:?}");
    assert!(err.message().contains("session.multi_turn"), "{err:?}");
    assert_eq!(counts.created.load(SeqCst), 0, "no runtime was created");
    // The same configuration without a conversation runs; so does a conversation on a
    // configuration that keeps sessions.
    let plain = service
        .start(ExecutionRequest::new("go").with_options(serde_json::json!({"ephemeral": true})))
        .await
        .unwrap();
    assert!(matches!(plain.outcome().await, Outcome::Succeeded(_)));
    let kept = service
        .start(ExecutionRequest::new("go").with_conversation(conversation))
        .await
        .unwrap();
    assert!(matches!(kept.outcome().await, Outcome::Succeeded(_)));
}

#[tokio::test]
async fn a_cleanup_that_hangs_is_cut_at_its_deadline_and_the_runtime_dropped() {
    let (adapter, counts) = Picky::new(true);
    let deadline = Duration::from_millis(200);
    let service = AdapterService::builder(adapter)
        .config(ServiceConfig {
            cleanup_deadline: deadline,
            ..ServiceConfig::default()
        })
        .build();
    let started = Instant::now();
    let handle = service.start(ExecutionRequest::new("go")).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(10), handle.outcome())
        .await
        .expect("the run ends although its cleanup hangs");
    assert!(
        matches!(outcome, Outcome::Succeeded(_)),
        "the outcome stands: {outcome:?}"
    );
    let took = started.elapsed();
    assert!(
        took >= deadline && took < deadline + Duration::from_secs(5),
        "{took:?}"
    );
    // Released while the caller still holds the handle.
    let released = async {
        while counts.dropped.load(SeqCst) < counts.created.load(SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), released)
        .await
        .expect("the runtime whose cleanup was cut is dropped");
    drop(handle);
}
