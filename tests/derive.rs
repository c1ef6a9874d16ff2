//! `#[derive(Adapter)]` and `#[derive(AdapterOptions)]` at run time: the generated manifest
//! validates against the committed manifest schema, options are validated with every violation
//! listed at its JSON pointer, derived adapters register, and the contract rules duplicated in
//! `harness-macros` agree with `harness-core`.

use std::collections::HashMap;
use std::sync::Arc;

use harness::adapter::{AgentConfig, BoxStream, EventResult, RunContext, Simple, SimpleAdapter};
use harness::capability::{CapabilityKey, EvidenceId, SupportLevel};
use harness::error::{ErrorCategory, ErrorCode, HarnessError};
use harness::id::AdapterId;
use harness::manifest::{
    Adapter, AdapterOptions, ContractVersion, Dependency, DependencyKind, ExecutionMode,
    HarnessDescriptor, ManifestError, OperatorProfileId, OptionsValidator, TrustBoundary,
};
use harness::registry::{Describe, Registry};
use harness::{Adapter, AdapterOptions};
use serde_json::{Value, json};

/// The rules `harness-macros` checks at compile time, included from its source.
#[allow(dead_code)]
mod macro_contract {
    include!("../harness-macros/src/contract.rs");
}

// ---------------------------------------------------------------------------------------------
// A sample adapter
// ---------------------------------------------------------------------------------------------

#[derive(Debug, serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ClaudeOptions {
    /// The model.
    model: String,
    /// At most this many turns.
    #[schemars(range(min = 1, max = 50))]
    max_turns: Option<u32>,
    /// Retries.
    #[serde(default)]
    retry: Option<Retry>,
    /// Where the agent runs.
    #[serde(default)]
    backend: Option<Backend>,
    /// Tools to allow.
    #[serde(default)]
    tools: Vec<Tool>,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(deny_unknown_fields)]
struct Retry {
    max: u8,
    backoff_ms: Option<u64>,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "snake_case")]
enum Backend {
    Api { region: String },
    Local { path: String },
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(rename_all = "snake_case")]
enum Tool {
    Bash,
    Edit,
}

#[derive(Debug, Default, Adapter)]
#[adapter(
    id = "claude_code",
    name = "Claude Code",
    contract_versions = [1, 2],
    execution_mode = sandbox_pod(profile = "gvisor-small"),
    dependency(kind = binary, name = "claude", version = ">=2.0"),
    dependency(kind = service, name = "api.anthropic.com", version = "*", optional),
    options = ClaudeOptions,
    capability("stream.text", native, evidence = "conformance:v1:claude_code"),
    capability(
        "stream.usage",
        degraded,
        explanation = "usage is reported once, at the end of the turn",
        constraints(granularity = "turn"),
    ),
    capability("interrupt.tool_approval", native),
    capability("tool.mcp", unavailable, explanation = "no MCP server is configured"),
    certification_evidence_version = "conformance-1.0.0",
)]
struct ClaudeCode;

impl SimpleAdapter for ClaudeCode {
    fn stream(&self, _run: RunContext) -> BoxStream<'static, EventResult> {
        Box::pin(futures_util::stream::empty())
    }
}

fn manifest_schema() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/schemas/manifest.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn the_generated_manifest_validates_against_the_committed_manifest_schema() {
    let schema = manifest_schema();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let wire = serde_json::to_value(ClaudeCode::static_descriptor()).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&wire)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}\n{wire:#}");
    // And it round-trips through the validating deserializer.
    let back: HarnessDescriptor = serde_json::from_value(wire).unwrap();
    assert_eq!(&back, ClaudeCode::static_descriptor());
}

#[test]
fn the_generated_manifest_says_what_the_attribute_says() {
    let d = ClaudeCode::static_descriptor();
    assert_eq!(d.id().as_str(), "claude_code");
    assert_eq!(d.name(), "Claude Code");
    assert_eq!(d.implementation_version(), env!("CARGO_PKG_VERSION"));
    let v = |n| ContractVersion::new(n).unwrap();
    assert_eq!(d.contract_versions(), [v(1), v(2)]);
    assert_eq!(
        d.execution_mode(),
        &ExecutionMode::sandbox_pod("gvisor-small".parse().unwrap())
    );
    assert_eq!(d.trust_boundary(), TrustBoundary::Sandbox);
    assert_eq!(
        d.dependencies(),
        [
            Dependency::new(DependencyKind::Binary, "claude", ">=2.0"),
            Dependency::new(DependencyKind::Service, "api.anthropic.com", "*").optional(),
        ]
    );
    assert_eq!(
        d.certification_evidence_version(),
        Some("conformance-1.0.0")
    );
    assert_eq!(d.options_schema(), &ClaudeOptions::options_schema());
    let caps = d.capabilities();
    assert_eq!(caps.len(), 4);
    assert_eq!(
        caps.get(CapabilityKey::StreamText).evidence(),
        Some(&"conformance:v1:claude_code".parse::<EvidenceId>().unwrap())
    );
    assert_eq!(
        serde_json::to_value(caps.get(CapabilityKey::StreamUsage)).unwrap(),
        json!({"level": "degraded", "constraints": {"granularity": "turn"},
               "explanation": "usage is reported once, at the end of the turn"})
    );
    // Undeclared capabilities are unsupported, with an explanation saying so.
    for key in CapabilityKey::ALL {
        if caps.declared(key).is_none() {
            let cap = caps.get(key);
            assert_eq!(cap.level(), SupportLevel::Unsupported, "{key}");
            assert_eq!(
                cap.explanation(),
                Some(format!("the adapter does not declare `{key}`").as_str())
            );
        }
    }
}

#[test]
fn the_manifest_is_built_once_and_shared() {
    let a: *const HarnessDescriptor = ClaudeCode::static_descriptor();
    let handles: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(|| ClaudeCode::static_descriptor() as *const _ as usize))
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), a as usize);
    }
    assert!(std::ptr::eq(
        Describe::descriptor(&ClaudeCode),
        ClaudeCode::static_descriptor()
    ));
}

#[test]
fn a_derived_adapter_registers_and_negotiates() {
    let mut registry: Registry<Arc<dyn harness::adapter::HarnessAdapter>> =
        Registry::with_supported_versions([ContractVersion::V1, ContractVersion::new(2).unwrap()]);
    registry
        .register(Arc::new(Simple::new(ClaudeCode)))
        .unwrap();
    let id: AdapterId = "claude_code".parse().unwrap();
    assert_eq!(registry.negotiated_version(&id), ContractVersion::new(2));
    assert_eq!(
        registry.get(&id).unwrap().descriptor().name(),
        "Claude Code"
    );
}

// ---------------------------------------------------------------------------------------------
// Options validation
// ---------------------------------------------------------------------------------------------

fn violations(options: &Value) -> Vec<(String, String)> {
    ClaudeCode::parse_options(options)
        .unwrap_err()
        .violations
        .into_iter()
        .map(|v| (v.pointer, v.message))
        .collect()
}

#[test]
fn valid_options_parse() {
    let options = ClaudeCode::parse_options(&json!({
        "model": "sonnet",
        "maxTurns": 10,
        "retry": {"max": 3},
        "backend": {"kind": "api", "region": "eu"},
        "tools": ["bash", "edit"]
    }))
    .unwrap();
    assert_eq!(options.model, "sonnet");
    assert_eq!(options.max_turns, Some(10));
    let retry = options.retry.unwrap();
    assert_eq!((retry.max, retry.backoff_ms), (3, None));
    assert!(matches!(options.backend, Some(Backend::Api { region }) if region == "eu"));
    assert_eq!(options.tools.len(), 2);
    let local = ClaudeCode::parse_options(&json!({
        "model": "m",
        "backend": {"kind": "local", "path": "/srv/agent"}
    }))
    .unwrap();
    assert!(matches!(local.backend, Some(Backend::Local { path }) if path == "/srv/agent"));
}

#[test]
fn unknown_fields_are_rejected_at_every_level_each_at_its_pointer() {
    let found = violations(&json!({
        "model": "sonnet",
        "modle": "typo",
        "retry": {"max": 3, "jitter": true},
        "backend": {"kind": "local", "path": "/srv", "image": "evil"}
    }));
    assert_eq!(
        found,
        [
            (
                "/backend/image".to_owned(),
                "unknown field `image`: expected `kind` or `path`".to_owned()
            ),
            (
                "/modle".to_owned(),
                "unknown field `modle`: expected `backend`, `maxTurns`, `model`, `retry` or \
                 `tools`"
                    .to_owned()
            ),
            (
                "/retry/jitter".to_owned(),
                "unknown field `jitter`: expected `backoff_ms` or `max`".to_owned()
            ),
        ]
    );
}

#[test]
fn wrong_types_and_values_are_all_listed_without_echoing_values() {
    let found = violations(&json!({
        "maxTurns": "ten",
        "retry": {"max": 300},
        "tools": ["bash", "rm -rf"]
    }));
    assert_eq!(
        found,
        [
            (
                "/maxTurns".to_owned(),
                "expected integer or null, found string".to_owned()
            ),
            (
                "/model".to_owned(),
                "missing required field `model`".to_owned()
            ),
            (
                "/retry/max".to_owned(),
                "value is greater than the maximum of 255".to_owned()
            ),
            (
                "/tools/1".to_owned(),
                "expected \"bash\" or \"edit\"".to_owned()
            ),
        ]
    );
    let text = ClaudeCode::parse_options(&json!({"maxTurns": "ten"}))
        .unwrap_err()
        .to_string();
    assert!(!text.contains("ten"), "{text}");
}

#[test]
fn absent_options_count_as_an_empty_object() {
    assert_eq!(
        violations(&Value::Null),
        [(
            "/model".to_owned(),
            "missing required field `model`".to_owned()
        )]
    );
}

#[test]
fn invalid_options_become_a_configuration_error() {
    let err: HarnessError = ClaudeCode::parse_options(&json!({"model": 1}))
        .unwrap_err()
        .into();
    assert_eq!(err.category(), ErrorCategory::Configuration);
    assert_eq!(err.code(), &ErrorCode::OPTIONS_INVALID);
    assert!(
        err.to_string()
            .contains("invalid adapter options: at `/model`: expected string, found integer"),
        "{err}"
    );
}

#[test]
fn the_options_schema_rejects_unknown_fields_everywhere() {
    let schema = ClaudeOptions::options_schema();
    assert_eq!(
        harness::manifest::open_object_schemas(&schema),
        Vec::<String>::new()
    );
    // The same validation through a validator compiled from the published schema, as a
    // preflight layer would run it.
    let validator =
        OptionsValidator::new(ClaudeCode::static_descriptor().options_schema()).unwrap();
    assert_eq!(
        validator
            .validate(&json!({"model": "m", "x": 1}))
            .unwrap_err()
            .violations[0]
            .pointer,
        "/x"
    );
    assert!(matches!(
        OptionsValidator::new(&json!({"type": 12})),
        Err(ManifestError::InvalidOptionsSchema { .. })
    ));
}

/// An `unchecked` field may still make the schema open: building the descriptor refuses it,
/// naming where.
#[derive(serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(deny_unknown_fields)]
struct LeakyOptions {
    #[adapter_options(unchecked)]
    #[allow(dead_code)]
    headers: HashMap<String, Value>,
}

#[derive(Adapter)]
#[adapter(
    id = "leaky",
    contract_versions = [1],
    execution_mode = provider_managed,
    options = LeakyOptions,
)]
struct Leaky;

#[test]
fn an_open_schema_behind_unchecked_is_still_refused_when_the_manifest_is_built() {
    let panic = std::panic::catch_unwind(Leaky::static_descriptor).unwrap_err();
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.starts_with("`#[derive(Adapter)]` on `Leaky` declares an invalid descriptor"),
        "{message}"
    );
    assert!(
        message.contains("accepts unknown fields at `/properties/headers`"),
        "{message}"
    );
}

#[test]
fn evaluate_rejects_bad_options_through_the_contract() {
    let adapter = Simple::new(ClaudeCode);
    let config = AgentConfig {
        options: json!({"model": "m", "extra": 1}),
        model: None,
        conversation: None,
    };
    let report = futures_util::FutureExt::now_or_never(harness::adapter::HarnessAdapter::evaluate(
        &adapter,
        &config,
        &Default::default(),
    ));
    // The default `evaluate` does not look at options; the adapter's own parse does.
    assert!(report.unwrap().is_ok());
    assert!(ClaudeCode::parse_options(&config.options).is_err());
}

// ---------------------------------------------------------------------------------------------
// The rules duplicated in harness-macros agree with harness-core
// ---------------------------------------------------------------------------------------------

/// Every string constant (`const` / `enum`) in a schema: the wire names of an enum.
fn wire_names(schema: &Value, out: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("const", Value::String(s)) => out.push(s.clone()),
                    ("enum", Value::Array(items)) => {
                        out.extend(items.iter().filter_map(Value::as_str).map(str::to_owned));
                    }
                    _ => wire_names(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| wire_names(v, out)),
        _ => {}
    }
}

fn schema_wire_names<T: schemars::JsonSchema>() -> Vec<String> {
    let mut out = Vec::new();
    wire_names(&harness::schema::schema_for::<T>().to_value(), &mut out);
    out
}

#[test]
fn the_capability_keys_in_harness_macros_are_harness_cores() {
    let core: Vec<(String, String)> = CapabilityKey::ALL
        .iter()
        .map(|k| (k.as_str().to_owned(), format!("{k:?}")))
        .collect();
    let macros: Vec<(String, String)> = macro_contract::CAPABILITY_KEYS
        .iter()
        .map(|(w, v)| ((*w).to_owned(), (*v).to_owned()))
        .collect();
    assert_eq!(
        macros, core,
        "harness-macros/src/contract.rs has drifted from harness-core's capability keys"
    );
}

#[test]
fn the_other_lists_in_harness_macros_are_harness_cores() {
    let levels: Vec<(String, String)> = SupportLevel::ALL
        .iter()
        .map(|l| (l.as_str().to_owned(), format!("{l:?}")))
        .collect();
    let macro_levels: Vec<(String, String)> = macro_contract::SUPPORT_LEVELS
        .iter()
        .map(|(w, v)| ((*w).to_owned(), (*v).to_owned()))
        .collect();
    assert_eq!(macro_levels, levels);
    for level in macro_contract::LEVELS_NEEDING_EXPLANATION {
        assert!(SupportLevel::ALL.iter().any(|l| l.as_str() == level));
    }

    let boundaries: Vec<&str> = macro_contract::TRUST_BOUNDARIES
        .iter()
        .map(|(w, _)| *w)
        .collect();
    assert_eq!(schema_wire_names::<TrustBoundary>(), boundaries);
    for (wire, variant) in macro_contract::TRUST_BOUNDARIES {
        let b: TrustBoundary = serde_json::from_value(json!(wire)).unwrap();
        assert_eq!(format!("{b:?}"), variant);
    }

    let kinds: Vec<&str> = macro_contract::DEPENDENCY_KINDS
        .iter()
        .map(|(w, _)| *w)
        .collect();
    assert_eq!(schema_wire_names::<DependencyKind>(), kinds);
    for (wire, variant) in macro_contract::DEPENDENCY_KINDS {
        let k: DependencyKind = serde_json::from_value(json!(wire)).unwrap();
        assert_eq!(format!("{k:?}"), variant);
    }

    let modes = [
        ExecutionMode::sandbox_pod("p1".parse().unwrap()),
        ExecutionMode::ProviderManaged,
        ExecutionMode::in_process(),
    ];
    assert_eq!(modes.len(), macro_contract::EXECUTION_MODES.len());
    for (mode, (name, permitted)) in modes.iter().zip(macro_contract::EXECUTION_MODES) {
        assert_eq!(mode.as_str(), name);
        let core: Vec<&str> = mode
            .permitted_trust_boundaries()
            .iter()
            .map(|b| b.as_str())
            .collect();
        assert_eq!(core, permitted, "{name}");
    }

    for field in macro_contract::POD_FIELDS {
        let wire = json!({"mode": "sandbox_pod", "profileId": "p1", field: "x"});
        let err = serde_json::from_value::<ExecutionMode>(wire).unwrap_err();
        assert!(
            err.to_string().contains("it cannot supply"),
            "{field}: {err}"
        );
    }
}

/// A deterministic corpus of strings near the interesting ones: every key, id and version
/// with characters deleted, replaced and inserted.
fn corpus(seeds: &[&str]) -> Vec<String> {
    const ALPHABET: &[char] = &[
        'a', 'z', 'A', 'Z', '0', '9', '_', '-', '.', ':', '+', ' ', 'é', '\n',
    ];
    let mut out: Vec<String> = seeds.iter().map(|s| (*s).to_owned()).collect();
    for seed in seeds {
        let chars: Vec<char> = seed.chars().collect();
        for i in 0..=chars.len() {
            if i < chars.len() {
                let mut deleted = chars.clone();
                deleted.remove(i);
                out.push(deleted.into_iter().collect());
            }
            for c in ALPHABET {
                let mut inserted = chars.clone();
                inserted.insert(i, *c);
                out.push(inserted.into_iter().collect());
                if i < chars.len() {
                    let mut replaced = chars.clone();
                    replaced[i] = *c;
                    out.push(replaced.into_iter().collect());
                }
            }
        }
    }
    out.extend(["", "a", &"a".repeat(64), &"a".repeat(65), &"1".repeat(129)].map(str::to_owned));
    out
}

#[test]
fn the_identifier_and_version_rules_in_harness_macros_are_harness_cores() {
    let seeds = [
        "claude_code",
        "gvisor-small",
        "kata.gpu_a100",
        "conformance:v1:x",
        "1.2.3",
        "1.0.0-rc.1+build.7",
        "01.2.3",
        "1.2.3-01",
        "Claude Code",
        ">=2.0",
    ];
    for s in corpus(&seeds) {
        assert_eq!(
            macro_contract::is_adapter_id(&s),
            AdapterId::is_valid(&s),
            "adapter id {s:?}"
        );
        assert_eq!(
            macro_contract::is_profile_id(&s),
            OperatorProfileId::is_valid(&s),
            "profile id {s:?}"
        );
        assert_eq!(
            macro_contract::is_evidence_id(&s),
            s.parse::<EvidenceId>().is_ok(),
            "evidence id {s:?}"
        );

        let build = |b: harness::manifest::HarnessDescriptorBuilder| {
            b.contract_version(ContractVersion::V1)
                .execution_mode(ExecutionMode::ProviderManaged)
                .build()
                .err()
                .map(|e| e.errors)
                .unwrap_or_default()
        };
        let id: AdapterId = "probe".parse().unwrap();

        let errors = build(HarnessDescriptor::builder(id.clone(), s.clone()));
        let core = errors.iter().find_map(|e| match e {
            ManifestError::InvalidImplementationVersion { reason, .. } => Some(*reason),
            _ => None,
        });
        assert_eq!(
            macro_contract::implementation_version_problem(&s),
            core,
            "version {s:?}"
        );

        let errors = build(HarnessDescriptor::builder(id.clone(), "1.0.0").name(s.clone()));
        let core_ok = !errors
            .iter()
            .any(|e| matches!(e, ManifestError::InvalidName { .. }));
        assert_eq!(macro_contract::is_display_name(&s), core_ok, "name {s:?}");

        let errors = build(
            HarnessDescriptor::builder(id.clone(), "1.0.0")
                .certification_evidence_version(s.clone()),
        );
        let core_ok = !errors
            .iter()
            .any(|e| matches!(e, ManifestError::InvalidCertificationEvidenceVersion { .. }));
        assert_eq!(
            macro_contract::is_certification_evidence_version(&s),
            core_ok,
            "certification evidence version {s:?}"
        );

        for (name, version) in [(s.as_str(), "1"), ("claude", s.as_str())] {
            let errors = build(
                HarnessDescriptor::builder(id.clone(), "1.0.0").dependency(Dependency::new(
                    DependencyKind::Binary,
                    name,
                    version,
                )),
            );
            let core = errors.iter().find_map(|e| match e {
                ManifestError::InvalidDependency { problem, .. } => Some(*problem),
                _ => None,
            });
            assert_eq!(
                macro_contract::dependency_problem(name, version),
                core,
                "dependency {name:?} {version:?}"
            );
        }
    }
}

#[test]
fn the_nearest_capability_in_harness_macros_is_harness_cores() {
    let keys: Vec<&str> = CapabilityKey::ALL.iter().map(|k| k.as_str()).collect();
    let mut probes = corpus(&keys);
    probes.extend(
        [
            "runtime_cancel",
            "Stream.Text",
            "memory",
            "tools.mcp",
            "x.y.z",
            "skill",
        ]
        .map(str::to_owned),
    );
    for probe in probes {
        assert_eq!(
            macro_contract::nearest_capability(&probe),
            CapabilityKey::nearest(&probe).as_str(),
            "{probe:?}"
        );
    }
}
