//! The descriptor, the operator's configuration and the caller's options, and an evaluate whose probe cannot start the agent: no agent
//! runs. (What `evaluate` reports for real agents is tested in `sessions.rs`.)

use harness_acp::{AcpAdapter, AcpAgent, AcpOptions, FileAccess, descriptor};
use harness_core::adapter::{AgentConfig, DeploymentContext, HarnessAdapter};
use harness_core::capability::{CapabilityKey, SupportLevel};
use harness_core::error::{ErrorCategory, ErrorCode};
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
use harness_layers::preflight::PreflightLayer;
use serde_json::json;
use tower::{Layer, ServiceExt};

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
        json!("the operator vouches that the agent asks")
    );
    // Skills at most native: an agent with a skills folder takes them (its evaluated report
    // says unsupported without one, `skills.rs`).
    assert_eq!(caps.level(CapabilityKey::Skills), SupportLevel::Native);
    for key in [CapabilityKey::StreamUsage, CapabilityKey::RuntimeRestart] {
        assert_eq!(caps.level(key), SupportLevel::Unsupported, "{key:?}");
    }
}

#[test]
fn a_caller_sets_no_option_and_the_schema_says_so() {
    let schema = descriptor().options_schema();
    assert_eq!(schema["additionalProperties"], json!(false));
    assert!(AcpOptions::from_value(&json!({})).is_ok());
    assert!(AcpOptions::from_value(&json!(null)).is_ok());
    for field in [
        json!({"command": ["/bin/sh"]}),
        json!({"cwd": "/"}),
        json!({"env": ["HOME"]}),
        json!({"files": "read_write"}),
        json!({"cancelGraceMs": 1}),
    ] {
        let err = AcpOptions::from_value(&field).expect_err("a caller may not set it");
        assert_eq!(err.code(), &ErrorCode::OPTIONS_INVALID, "{field}");
        assert!(err.message().contains("AcpAgent"), "{err:?}");
    }
}

/// Found by the `options` fuzz target: `Deserialize` takes a struct from a JSON array, so
/// `[]` and `["default"]` were accepted as options although the published schema refuses
/// them. What the schema refuses, the adapter refuses.
#[test]
fn options_that_are_not_an_object_are_refused_as_the_schema_refuses_them() {
    for options in [json!([]), json!(["default"]), json!("default"), json!(1)] {
        let err = AcpOptions::from_value(&options).unwrap_err();
        assert_eq!(err.code(), &ErrorCode::OPTIONS_INVALID, "{options}");
    }
    assert!(AcpOptions::from_value(&json!({"agent": "default"})).is_ok());
    assert!(AcpOptions::from_value(&json!(null)).is_ok());
}

#[test]
fn the_operator_configuration_is_checked() {
    assert!(AcpAgent::from_value(&json!({"command": ["a"], "cwd": "/", "sh": 1})).is_err());
    assert!(AcpAgent::from_value(&json!({"command": [], "cwd": "/"})).is_err());
    assert!(AcpAgent::from_value(&json!({"command": [""], "cwd": "/"})).is_err());
    assert!(AcpAgent::from_value(&json!({"command": ["a"], "cwd": "rel"})).is_err());
    assert!(AcpAgent::from_value(&json!({"command": ["a"], "cwd": "/", "env": ["A=B"]})).is_err());
    let ok = AcpAgent::from_value(&json!({"command": ["a"], "cwd": "/", "files": "read"}))
        .expect("a valid configuration");
    assert_eq!(ok.files, FileAccess::Read);
    let round = serde_json::to_value(&ok).expect("serializable");
    assert_eq!(AcpAgent::from_value(&round).expect("round trip"), ok);
    // Built in code, the same checks apply when the adapter is constructed.
    let err = AcpAdapter::new(AcpAgent::new(Vec::<String>::new(), "/")).expect_err("no program");
    assert_eq!(err.code(), &ErrorCode::OPTIONS_INVALID);
    assert!(AcpAdapter::new(AcpAgent::new(["a"], "relative")).is_err());
}

/// Defect: the agent's `command`, `cwd` and `env` were execution options, so any caller
/// able to start an execution chose the program the host runs. They are the operator's now;
/// a request naming them is refused at preflight, and, without a preflight layer, by the
/// adapter itself, before any process starts.
#[tokio::test]
async fn a_request_choosing_a_program_is_refused_before_any_process_starts() {
    let witness = std::env::temp_dir().join(format!("acp-caller-program-{}", std::process::id()));
    let _ = std::fs::remove_file(&witness);
    let hostile = json!({
        "command": ["/bin/sh", "-c", format!("touch {}", witness.display())],
        "cwd": "/",
    });
    let adapter = AcpAdapter::new(AcpAgent::new(["/nonexistent/acp-agent"], "/"))
        .expect("a valid configuration");
    let preflight = PreflightLayer::for_adapter(&adapter).expect("the descriptor is valid");
    let service = preflight.layer(AdapterService::new(adapter.clone()));
    let request = ExecutionRequest::new("go").with_options(hostile.clone());
    let err = service
        .oneshot(request)
        .await
        .expect_err("refused at preflight");
    assert_eq!(err.code(), &ErrorCode::OPTIONS_INVALID, "{err:?}");
    assert!(err.message().contains("command"), "{err:?}");

    // Without a preflight layer: `evaluate` and `create_runtime` refuse the options too.
    let config = AgentConfig {
        options: hostile.clone(),
        ..AgentConfig::default()
    };
    let err = adapter
        .evaluate(&config, &DeploymentContext::default())
        .await
        .expect_err("evaluate refuses");
    assert_eq!(err.code(), &ErrorCode::OPTIONS_INVALID, "{err:?}");
    let execution = AdapterService::new(adapter.clone())
        .oneshot(ExecutionRequest::new("go").with_options(hostile))
        .await;
    let failed = match execution {
        Err(err) => err,
        Ok(handle) => match handle.outcome().await {
            Outcome::Failed(err) => err,
            other => panic!("expected a failure, got {other:?}"),
        },
    };
    assert_eq!(failed.code(), &ErrorCode::OPTIONS_INVALID, "{failed:?}");

    let stats = adapter.stats().snapshot();
    assert_eq!((stats.agents_started, stats.probes), (0, 0), "{stats:?}");
    assert!(!witness.exists(), "the caller's program ran");
}

#[tokio::test]
async fn an_agent_that_cannot_be_probed_is_an_evaluate_error_naming_the_probe() {
    let adapter = AcpAdapter::new(AcpAgent::new(["/nonexistent/acp-agent"], "/"))
        .expect("a valid configuration");
    let config = AgentConfig::default();
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

/// Defect: a request requiring what the descriptor declares unsupported was evaluated first,
/// so the adapter started its agent (a probe) before the refusal. The declared maximum is
/// checked first now: no provider work.
#[tokio::test]
async fn a_requirement_the_descriptor_cannot_meet_is_refused_without_a_probe() {
    let adapter = AcpAdapter::new(AcpAgent::new(["/nonexistent/acp-agent"], "/"))
        .expect("a valid configuration");
    let err = AdapterService::new(adapter.clone())
        .oneshot(ExecutionRequest::new("go").require(CapabilityKey::StreamUsage))
        .await
        .expect_err("refused");
    assert_eq!(err.code(), &ErrorCode::CAPABILITY_UNSUPPORTED, "{err:?}");
    assert!(err.message().contains("stream.usage"), "{err:?}");
    assert_eq!(adapter.stats().snapshot().probes, 0);
}

/// An ACP agent chooses its own model and builds its own system prompt: a service that
/// would hand it either is refused, before any process starts, rather than dropping them.
#[tokio::test]
async fn a_model_choice_or_an_instance_prompt_is_refused_before_any_process_starts() {
    let adapter = AcpAdapter::new(AcpAgent::new(["/nonexistent/acp-agent"], "/"))
        .expect("a valid configuration");
    let config = AgentConfig {
        model: Some(harness_core::context::ModelSelection::requested("gpt-x")),
        ..AgentConfig::default()
    };
    let err = adapter
        .evaluate(&config, &DeploymentContext::default())
        .await
        .expect_err("evaluate refuses a model");
    assert_eq!(err.code(), &ErrorCode::CAPABILITY_UNSUPPORTED, "{err:?}");
    assert!(err.message().contains("chooses its own model"), "{err:?}");

    let models = harness_core::context::ModelPolicy::new(["gpt-x"])
        .unwrap()
        .with_default("gpt-x")
        .unwrap();
    // The service evaluates every request, and evaluate refuses the model before it
    // probes: refused at start, before any execution or process. (An instance prompt, which
    // evaluate cannot see, is refused when the runtime is made; `harness serve` refuses
    // `[acp.prompt]` when it starts.)
    let service = AdapterService::builder(adapter.clone())
        .models(models)
        .build();
    let err = service
        .start(ExecutionRequest::new("go"))
        .await
        .expect_err("the start must be refused");
    assert_eq!(err.code(), &ErrorCode::CAPABILITY_UNSUPPORTED, "{err:?}");
    assert_eq!(err.category(), ErrorCategory::Configuration);
    let stats = adapter.stats().snapshot();
    assert_eq!((stats.agents_started, stats.probes), (0, 0), "{stats:?}");
}
