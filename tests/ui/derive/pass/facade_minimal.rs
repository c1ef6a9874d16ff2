//! The smallest adapter, written against the `harness` facade only (`crate = "::harness"`).

use harness::adapter::{BoxFuture, HarnessAdapter, HarnessRuntime, RuntimeContext};
use harness::capability::{CapabilityKey, SupportLevel};
use harness::error::{ErrorCategory, HarnessError};
use harness::manifest::{Adapter, Describe, ExecutionMode, TrustBoundary};
use harness::{Adapter, AdapterOptions};

#[derive(serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[adapter_options(crate = "::harness")]
#[serde(deny_unknown_fields)]
struct NoOptions {}

#[derive(Adapter)]
#[adapter(
    crate = "::harness",
    id = "minimal",
    contract_versions = [1],
    execution_mode = in_process(compatibility_only),
    options = NoOptions,
    capability("stream.text", native),
)]
struct Minimal;

// The author writes the behaviour; the descriptor comes from the derive.
impl HarnessAdapter for Minimal {
    fn create_runtime(
        &self,
        _context: RuntimeContext,
    ) -> BoxFuture<'_, Result<Box<dyn HarnessRuntime>, HarnessError>> {
        Box::pin(async {
            Err(HarnessError::new(
                ErrorCategory::Unavailable,
                "not in this test",
            ))
        })
    }
}

fn main() {
    let d = Describe::descriptor(&Minimal);
    assert_eq!(d.id().as_str(), "minimal");
    assert_eq!(d.name(), "minimal");
    // Defaults to the version of the crate that derives (trybuild's test crate).
    assert_eq!(d.implementation_version(), env!("CARGO_PKG_VERSION"));
    assert_eq!(d.execution_mode(), &ExecutionMode::in_process());
    assert_eq!(d.trust_boundary(), TrustBoundary::HostProcess);
    assert_eq!(
        d.capabilities().level(CapabilityKey::StreamText),
        SupportLevel::Native
    );
    // Built once: the same descriptor every time.
    assert!(std::ptr::eq(d, Minimal::static_descriptor()));
    // Undeclared capabilities are unsupported, and say why.
    let mcp = d.capabilities().get(CapabilityKey::ToolMcp);
    assert_eq!(mcp.level(), SupportLevel::Unsupported);
    assert_eq!(
        mcp.explanation(),
        Some("the adapter does not declare `tool.mcp`")
    );
    // The options reject unknown fields.
    assert!(Minimal::parse_options(&serde_json::json!(null)).is_ok());
    assert!(Minimal::parse_options(&serde_json::json!({"x": 1})).is_err());
}
