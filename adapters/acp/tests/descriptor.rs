//! The descriptor, the options, and an evaluate whose probe cannot start the agent: no agent
//! runs. (What `evaluate` reports for real agents is tested in `sessions.rs`.)

use harness_acp::{AcpAdapter, AcpOptions, FileAccess, descriptor};
use harness_core::adapter::{AgentConfig, DeploymentContext, HarnessAdapter};
use harness_core::capability::{CapabilityKey, SupportLevel};
use harness_core::error::ErrorCategory;
use serde_json::json;

#[test]
fn the_descriptor_builds_and_reports_only_what_is_implemented() {
    let d = descriptor();
    assert_eq!(d.id().as_str(), "acp");
    let caps = d.capabilities();
    for key in [
        CapabilityKey::StreamText,
        CapabilityKey::StreamReasoning,
        CapabilityKey::InterruptToolApproval,
        CapabilityKey::InterruptFormInput,
        CapabilityKey::SessionMultiTurn,
        CapabilityKey::RuntimeCancel,
        CapabilityKey::RuntimeBoundedCleanup,
        CapabilityKey::ObservabilityMetrics,
        CapabilityKey::ObservabilityTracing,
        CapabilityKey::ObservabilityTracePropagation,
        CapabilityKey::ObservabilityRedaction,
    ] {
        assert_eq!(caps.level(key), SupportLevel::Native, "{key:?}");
    }
    assert_eq!(
        caps.get(CapabilityKey::ObservabilityTracePropagation)
            .constraints()["via"],
        json!("session/prompt _meta")
    );
    // The maximum, with what it depends on.
    assert_eq!(
        caps.get(CapabilityKey::SessionMultiTurn).constraints()["requires"],
        json!("agentCapabilities.loadSession")
    );
    assert_eq!(
        caps.get(CapabilityKey::InterruptFormInput).constraints()["when"],
        json!("the agent asks")
    );
    for key in [
        CapabilityKey::StreamUsage,
        CapabilityKey::RuntimeRestart,
        CapabilityKey::InputImages,
    ] {
        assert_eq!(caps.level(key), SupportLevel::Unsupported, "{key:?}");
    }
}

#[test]
fn the_options_schema_rejects_unknown_fields() {
    let schema = descriptor().options_schema();
    assert_eq!(schema["additionalProperties"], json!(false));
    assert!(AcpOptions::from_value(&json!({"command": ["a"], "cwd": "/", "sh": 1})).is_err());
    assert!(AcpOptions::from_value(&json!({"command": [], "cwd": "/"})).is_err());
    assert!(AcpOptions::from_value(&json!({"command": ["a"], "cwd": "rel"})).is_err());
    assert!(
        AcpOptions::from_value(&json!({"command": ["a"], "cwd": "/", "env": ["A=B"]})).is_err()
    );
    let ok = AcpOptions::from_value(&json!({"command": ["a"], "cwd": "/", "files": "read"}))
        .expect("valid options");
    assert_eq!(ok.files, FileAccess::Read);
    assert_eq!(
        AcpOptions::from_value(&ok.to_value()).expect("round trip"),
        ok
    );
}

#[tokio::test]
async fn an_agent_that_cannot_be_probed_is_an_evaluate_error_naming_the_probe() {
    let adapter = AcpAdapter::new();
    let config = AgentConfig {
        options: AcpOptions::new(["/nonexistent/acp-agent"], "/").to_value(),
        ..AgentConfig::default()
    };
    let err = adapter
        .evaluate(&config, &DeploymentContext::default())
        .await
        .expect_err("the probe cannot start the agent");
    assert_eq!(err.category(), ErrorCategory::Unavailable, "{err:?}");
    assert!(
        err.message()
            .contains("could not be probed for its capabilities"),
        "{err:?}"
    );
    assert!(
        err.diagnostic()
            .unwrap_or_default()
            .contains("/nonexistent/acp-agent"),
        "{err:?}"
    );
    assert_eq!(adapter.stats().snapshot().probes, 1);
}
