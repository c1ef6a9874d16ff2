//! Every key of `#[adapter(...)]`, against `harness-core` and `harness-macros` directly (the
//! default `crate` path), on a generic adapter type, over two attributes.

use std::collections::BTreeMap;
use std::marker::PhantomData;

use harness_core::capability::{CapabilityKey, SupportLevel};
use harness_core::manifest::{
    Adapter, ContractVersion, DependencyKind, ExecutionMode, TrustBoundary,
};
use harness_macros::{Adapter, AdapterOptions};
use serde_json::json;

#[derive(Debug, serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ClaudeOptions {
    model: String,
    max_turns: Option<u32>,
    retry: Retry,
    backend: Backend,
    labels: BTreeMap<String, String>,
    tools: Vec<Tool>,
    #[adapter_options(unchecked)]
    metadata: Option<serde_json::Value>,
    #[serde(skip)]
    _cache: (),
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(deny_unknown_fields)]
struct Retry {
    max: u8,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "snake_case")]
enum Backend {
    Api { region: String },
    Local,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(rename_all = "snake_case")]
enum Tool {
    Bash,
    Edit,
}

#[derive(Adapter)]
#[adapter(
    id = "claude_code",
    name = "Claude Code",
    implementation_version = "2.0.0-rc.1+build.7",
    contract_versions = [1, 2],
    execution_mode = sandbox_pod(profile = "gvisor-small"),
    trust_boundary = sandbox,
    dependency(kind = binary, name = "claude", version = ">=2.0"),
    dependency(kind = service, name = "api.anthropic.com", version = "*", optional),
    dependency(kind = crate, name = "tokio", version = "1"),
    options = ClaudeOptions,
)]
#[adapter(
    capability("stream.text", native, evidence = "conformance:v1:claude_code"),
    capability(
        "stream.usage",
        degraded,
        explanation = "usage is reported once, at the end of the turn",
        constraints(granularity = "turn", "max-delay-ms" = 250, ratio = -1.5, exact = false,
                    units = ["input_tokens", "output_tokens"], empty = []),
    ),
    capability("tool.mcp", unavailable, explanation = "no MCP server is configured"),
    certification_evidence_version = "conformance-1.0.0+2026-09-02",
)]
struct ClaudeCode<C: Send> {
    client: PhantomData<C>,
}

fn main() {
    let d = <ClaudeCode<u8> as Adapter>::static_descriptor();
    // Shared by every instantiation.
    assert!(std::ptr::eq(
        d,
        <ClaudeCode<String> as Adapter>::static_descriptor()
    ));
    let _ = ClaudeCode::<u8> {
        client: PhantomData,
    };

    assert_eq!(d.id().as_str(), "claude_code");
    assert_eq!(d.name(), "Claude Code");
    assert_eq!(d.implementation_version(), "2.0.0-rc.1+build.7");
    let v = |n| ContractVersion::new(n).unwrap();
    assert_eq!(d.contract_versions(), [v(1), v(2)]);
    assert_eq!(
        d.execution_mode(),
        &ExecutionMode::sandbox_pod("gvisor-small".parse().unwrap())
    );
    assert_eq!(d.trust_boundary(), TrustBoundary::Sandbox);
    let deps: Vec<_> = d
        .dependencies()
        .iter()
        .map(|d| (d.kind(), d.name(), d.is_optional()))
        .collect();
    assert_eq!(
        deps,
        [
            (DependencyKind::Binary, "claude", false),
            (DependencyKind::Service, "api.anthropic.com", true),
            (DependencyKind::Crate, "tokio", false),
        ]
    );
    assert_eq!(
        d.certification_evidence_version(),
        Some("conformance-1.0.0+2026-09-02")
    );

    let caps = d.capabilities();
    assert_eq!(caps.len(), 3);
    assert_eq!(
        caps.get(CapabilityKey::StreamText)
            .evidence()
            .unwrap()
            .as_str(),
        "conformance:v1:claude_code"
    );
    let usage = caps.get(CapabilityKey::StreamUsage);
    assert_eq!(usage.level(), SupportLevel::Degraded);
    assert_eq!(
        serde_json::Value::Object(usage.constraints().clone()),
        json!({"granularity": "turn", "max-delay-ms": 250, "ratio": -1.5, "exact": false,
               "units": ["input_tokens", "output_tokens"], "empty": []})
    );
    assert_eq!(
        caps.level(CapabilityKey::ToolMcp),
        SupportLevel::Unavailable
    );

    let ok = json!({
        "model": "sonnet", "retry": {"max": 3}, "backend": {"kind": "api", "region": "eu"},
        "labels": {"team": "a"}, "tools": ["bash"], "metadata": {"anything": [1, 2]}
    });
    let options = ClaudeCode::<u8>::parse_options(&ok).unwrap();
    assert_eq!(options.model, "sonnet");

    let bad = json!({
        "model": 7, "retry": {"max": 3, "backoff": 2}, "backend": {"kind": "api", "region": "eu", "zone": 1},
        "labels": {"team": 1}, "tools": ["rm"], "maxTurns": -1
    });
    let err = ClaudeCode::<u8>::parse_options(&bad).unwrap_err();
    let pointers: Vec<&str> = err.violations.iter().map(|v| v.pointer.as_str()).collect();
    assert_eq!(
        pointers,
        [
            "/backend/zone",
            "/labels/team",
            "/maxTurns",
            "/model",
            "/retry/backoff",
            "/tools/0"
        ],
        "{err}"
    );
}
