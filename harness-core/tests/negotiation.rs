//! What the service refuses before anything runs because it could not keep its word: an
//! adapter that shares no contract version with the control plane, and run limits that
//! only usage reports can count on an adapter that makes none.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use harness_core::adapter::{
    AdapterEvent, BoxStream, EventResult, RunContext, Simple, SimpleAdapter,
};
use harness_core::capability::{Capability, CapabilityKey};
use harness_core::error::{ErrorCategory, ErrorCode};
use harness_core::event::RunSucceeded;
use harness_core::limits::RunLimits;
use harness_core::manifest::{ContractVersion, Describe, ExecutionMode, HarnessDescriptor};
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};

/// Completes at once, and notes each stream it opened and the contract version it was given.
struct Probe {
    descriptor: HarnessDescriptor,
    streams: Arc<AtomicUsize>,
    version: Arc<std::sync::Mutex<Option<ContractVersion>>>,
}

impl Describe for Probe {
    fn descriptor(&self) -> &HarnessDescriptor {
        &self.descriptor
    }
}

impl SimpleAdapter for Probe {
    fn stream(&self, run: RunContext) -> BoxStream<'static, EventResult> {
        self.streams.fetch_add(1, Ordering::SeqCst);
        *self.version.lock().unwrap() = Some(run.context.contract_version);
        Box::pin(futures_util::stream::iter([Ok(AdapterEvent::Completed(
            RunSucceeded::default(),
        ))]))
    }
}

type Streams = Arc<AtomicUsize>;
type Version = Arc<std::sync::Mutex<Option<ContractVersion>>>;

fn probe(versions: &[u32], usage: bool) -> (Simple<Probe>, Streams, Version) {
    let mut builder = HarnessDescriptor::builder("probe".parse().unwrap(), "0.1.0")
        .contract_versions(versions.iter().map(|v| ContractVersion::new(*v).unwrap()))
        .execution_mode(ExecutionMode::in_process());
    if usage {
        builder = builder.capability(CapabilityKey::StreamUsage, Capability::native());
    }
    let (streams, version) = (Streams::default(), Version::default());
    let adapter = Simple::new(Probe {
        descriptor: builder.build().unwrap(),
        streams: Arc::clone(&streams),
        version: Arc::clone(&version),
    });
    (adapter, streams, version)
}

#[tokio::test]
async fn an_adapter_speaking_no_version_of_the_control_plane_is_refused() {
    let (adapter, streams, _) = probe(&[2, 3], false);
    let service = AdapterService::new(adapter);
    assert_eq!(service.contract_version(), None);
    let err = service
        .start(ExecutionRequest::new("go"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), &ErrorCode::CONTRACT_VERSION_UNSUPPORTED);
    assert_eq!(err.category(), ErrorCategory::Configuration);
    let message = &err.public().message;
    assert!(
        message.contains("[2, 3]") && message.contains("[1]"),
        "{message}"
    );
    assert_eq!(streams.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn the_highest_common_version_is_the_one_the_runtime_receives() {
    let (adapter, _, version) = probe(&[1, 2], false);
    let service = AdapterService::new(adapter);
    assert_eq!(service.contract_version(), Some(ContractVersion::V1));
    let handle = service.start(ExecutionRequest::new("go")).await.unwrap();
    assert!(matches!(handle.outcome().await, Outcome::Succeeded(_)));
    assert_eq!(*version.lock().unwrap(), Some(ContractVersion::V1));
}

#[tokio::test]
async fn token_and_turn_limits_are_refused_on_an_adapter_that_reports_no_usage() {
    let tokens = RunLimits::none().with_max_tokens(100).unwrap();
    let turns = RunLimits::none().with_max_model_turns(3).unwrap();
    // Set by the operator, or by the caller.
    let (adapter, operator_streams, _) = probe(&[1], false);
    let operator = AdapterService::builder(adapter).limits(tokens).build();
    let (adapter, caller_streams, _) = probe(&[1], false);
    let caller = AdapterService::new(adapter);
    for (service, request, streams) in [
        (&operator, ExecutionRequest::new("go"), &operator_streams),
        (
            &caller,
            ExecutionRequest::new("go").with_limits(turns),
            &caller_streams,
        ),
    ] {
        let err = service.start(request).await.unwrap_err();
        assert_eq!(err.code(), &ErrorCode::LIMIT_UNENFORCEABLE);
        assert!(err.public().message.contains("stream.usage"), "{err}");
        assert_eq!(streams.load(Ordering::SeqCst), 0);
    }
    // Limits that need no usage run; so do usage limits on an adapter that reports usage.
    let bounded = RunLimits::none().with_max_tool_calls(1).unwrap();
    let handle = caller
        .start(ExecutionRequest::new("go").with_limits(bounded))
        .await
        .unwrap();
    assert!(matches!(handle.outcome().await, Outcome::Succeeded(_)));
    let reporting = AdapterService::builder(probe(&[1], true).0)
        .limits(tokens)
        .build();
    let handle = reporting.start(ExecutionRequest::new("go")).await.unwrap();
    assert!(matches!(handle.outcome().await, Outcome::Succeeded(_)));
}
