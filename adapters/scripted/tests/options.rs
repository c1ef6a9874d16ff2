//! Options choose the script; the descriptor declares exactly what the adapter delivers.

mod common;

use common::{kinds, message_text};
use harness_core::capability::{CapabilityKey, Requirement, SupportLevel};
use harness_core::error::{ErrorCategory, ErrorCode};
use harness_core::manifest::{ContractVersion, Describe, TrustBoundary, open_object_schemas};
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
use harness_scripted::{ADAPTER_ID, Script, ScriptedAdapter, ScriptedOptions};
use serde_json::json;
use tower::ServiceExt;

fn default_script() -> Script {
    Script::builder().text("from the default script").build()
}

async fn run(options: serde_json::Value) -> (harness_core::service::ExecutionHandle, Outcome) {
    let service = AdapterService::new(ScriptedAdapter::new(default_script()));
    let execution = service
        .oneshot(ExecutionRequest::new("go").with_options(options))
        .await
        .unwrap();
    let outcome = execution.outcome().await;
    (execution, outcome)
}

#[tokio::test]
async fn without_a_script_the_default_one_runs() {
    for options in [serde_json::Value::Null, json!({}), json!({"script": null})] {
        let (execution, outcome) = run(options.clone()).await;
        assert!(matches!(outcome, Outcome::Succeeded(_)), "{options}");
        assert_eq!(message_text(&execution), ["from the default script"]);
    }
}

#[tokio::test]
async fn a_per_request_script_overrides_the_default() {
    let (execution, outcome) = run(
        json!({"script": {"steps": [{"type": "text", "text": "custom"},
                                        {"type": "complete", "summary": "mine"}]}}),
    )
    .await;
    let Outcome::Succeeded(done) = outcome else {
        panic!("{:?}", kinds(&execution))
    };
    assert_eq!(done.summary.as_deref(), Some("mine"));
    assert_eq!(message_text(&execution), ["custom"]);
}

#[tokio::test]
async fn an_unknown_option_fails_with_configuration_naming_the_field() {
    let adapter = ScriptedAdapter::new(default_script());
    let stats = adapter.stats();
    let service = AdapterService::new(adapter);
    // Refused at start, no execution made: the service evaluates every request.
    let err = service
        .oneshot(ExecutionRequest::new("go").with_options(json!({"scirpt": {"steps": []}})))
        .await
        .expect_err("refused at start");
    assert_eq!(err.category(), ErrorCategory::Configuration);
    assert_eq!(err.code(), &ErrorCode::OPTIONS_INVALID);
    assert!(err.message().contains("unknown field `scirpt`"), "{err}");
    assert_eq!(stats.snapshot().runtimes_created, 0);
}

#[tokio::test]
async fn an_invalid_script_in_the_options_names_the_step() {
    let service = AdapterService::new(ScriptedAdapter::new(default_script()));
    let err = service
        .oneshot(
            ExecutionRequest::new("go").with_options(json!({"script": {"steps": [
                {"type": "text", "text": "fine"},
                {"type": "usage", "inputTokens": -1}
            ]}})),
        )
        .await
        .expect_err("refused at start");
    assert_eq!(err.category(), ErrorCategory::Configuration);
    assert!(err.message().contains("steps[1] (usage)"), "{err}");
}

#[tokio::test]
async fn evaluate_refuses_invalid_options_before_any_work() {
    let service = AdapterService::new(ScriptedAdapter::new(default_script()));
    let request = ExecutionRequest::new("go")
        .with_options(json!({"nope": 1}))
        .require(CapabilityKey::StreamText);
    let err = service.start(request).await.unwrap_err();
    assert_eq!(err.category(), ErrorCategory::Configuration);
    assert!(err.message().contains("unknown field `nope`"), "{err}");
}

#[tokio::test]
async fn required_capabilities_are_checked_against_the_declaration() {
    let service = AdapterService::new(ScriptedAdapter::new(default_script()));
    let ok = ExecutionRequest::new("go")
        .require(Requirement::native(CapabilityKey::InterruptMultiTool))
        .require(CapabilityKey::RuntimeBoundedCleanup);
    let execution = service.start(ok).await.unwrap();
    assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));

    let err = service
        .start(ExecutionRequest::new("go").require(CapabilityKey::Skills))
        .await
        .unwrap_err();
    assert_eq!(err.code(), &ErrorCode::CAPABILITY_UNSUPPORTED);
}

#[test]
fn the_descriptor_declares_exactly_what_the_adapter_delivers() {
    let adapter = ScriptedAdapter::quickstart();
    let descriptor = adapter.descriptor();
    assert_eq!(descriptor.id().as_str(), ADAPTER_ID);
    assert_eq!(descriptor.contract_versions(), [ContractVersion::V1]);
    assert_eq!(descriptor.execution_mode().as_str(), "in_process");
    assert_eq!(descriptor.trust_boundary(), TrustBoundary::HostProcess);
    assert_eq!(
        descriptor.implementation_version(),
        env!("CARGO_PKG_VERSION")
    );

    let declared: Vec<_> = descriptor.capabilities().iter().collect();
    let keys: Vec<_> = declared.iter().map(|(k, _)| *k).collect();
    assert_eq!(
        keys,
        [
            CapabilityKey::StreamText,
            CapabilityKey::StreamReasoning,
            CapabilityKey::StreamUsage,
            CapabilityKey::InvokeNonStreaming,
            CapabilityKey::SessionMultiTurn,
            CapabilityKey::SessionCrossReplicaResume,
            CapabilityKey::SessionClear,
            CapabilityKey::ThreadDurableCommit,
            CapabilityKey::ThreadEvictionRestore,
            CapabilityKey::InterruptFormInput,
            CapabilityKey::InterruptToolApproval,
            CapabilityKey::InterruptMultiTool,
            CapabilityKey::MiddlewarePortable,
            CapabilityKey::ObservabilityMetrics,
            CapabilityKey::ObservabilityTracing,
            CapabilityKey::ObservabilityTracePropagation,
            CapabilityKey::ObservabilityRedaction,
            CapabilityKey::RuntimeCancel,
            CapabilityKey::RuntimeRestart,
            CapabilityKey::RuntimeBoundedCleanup,
            CapabilityKey::RuntimeLeaseFencing,
            CapabilityKey::RuntimeEvictionRecovery,
        ]
    );
    for (key, capability) in declared {
        // A finished outcome is collected from the stream: the only emulated capability.
        let level = if key == CapabilityKey::InvokeNonStreaming {
            SupportLevel::Emulated
        } else {
            SupportLevel::Native
        };
        assert_eq!(capability.level(), level, "{key}");
        assert!(
            capability.explanation().is_some_and(|e| !e.is_empty()),
            "{key}"
        );
    }
    for key in CapabilityKey::ALL {
        if !keys.contains(&key) {
            assert_eq!(
                descriptor.capabilities().level(key),
                SupportLevel::Unsupported,
                "{key}"
            );
        }
    }
}

#[test]
fn the_options_schema_is_the_schema_of_scripted_options_and_rejects_unknown_fields() {
    let adapter = ScriptedAdapter::quickstart();
    let schema = adapter.descriptor().options_schema();
    assert_eq!(open_object_schemas(schema), Vec::<String>::new());
    assert_eq!(schema["additionalProperties"], false);
    assert!(schema["properties"]["script"].is_object());
    for def in ["Script", "Step", "ApprovalCall", "FormField"] {
        assert!(schema["$defs"][def].is_object(), "missing $defs/{def}");
    }
    let fresh = schemars::generate::SchemaSettings::draft2020_12()
        .for_deserialize()
        .into_generator()
        .into_root_schema_for::<ScriptedOptions>();
    assert_eq!(&fresh.to_value(), schema);
}

#[test]
fn options_round_trip() {
    let options = ScriptedOptions::with_script(Script::quickstart());
    let value = options.to_value();
    assert_eq!(ScriptedOptions::from_value(&value).unwrap(), options);
    assert_eq!(
        ScriptedOptions::from_value(&serde_json::Value::Null).unwrap(),
        ScriptedOptions::default()
    );
}

/// Found by the `options` fuzz target: `Deserialize` takes a struct from a JSON array, so an
/// array was accepted as options although the published schema refuses it.
#[test]
fn options_that_are_not_an_object_are_refused_as_the_schema_refuses_them() {
    for options in [json!([]), json!([null]), json!("x")] {
        let err = ScriptedOptions::from_value(&options).unwrap_err();
        assert_eq!(err.code(), &ErrorCode::OPTIONS_INVALID, "{options}");
    }
    assert!(ScriptedOptions::from_value(&json!({})).is_ok());
}
