//! The descriptor, the options and preflight: no agent is started.

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
        CapabilityKey::RuntimeCancel,
        CapabilityKey::RuntimeBoundedCleanup,
    ] {
        assert_eq!(caps.level(key), SupportLevel::Native, "{key:?}");
    }
    for key in [
        CapabilityKey::SessionMultiTurn,
        CapabilityKey::InterruptFormInput,
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
async fn conversations_are_refused_at_preflight() {
    let adapter = AcpAdapter::new();
    let options = AcpOptions::new(["agent"], "/").to_value();
    let config = AgentConfig {
        options: options.clone(),
        conversation: Some("conv_1".parse().expect("id")),
        ..AgentConfig::default()
    };
    let err = adapter
        .evaluate(&config, &DeploymentContext::default())
        .await
        .expect_err("refused");
    assert_eq!(err.category(), ErrorCategory::Configuration);
    let config = AgentConfig {
        options,
        ..AgentConfig::default()
    };
    assert!(
        adapter
            .evaluate(&config, &DeploymentContext::default())
            .await
            .is_ok()
    );
}
