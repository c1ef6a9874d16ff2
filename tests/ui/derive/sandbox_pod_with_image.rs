use harness::{Adapter, AdapterOptions};

#[derive(serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(deny_unknown_fields)]
struct Options {}

#[derive(Adapter)]
#[adapter(
    id = "claude_code",
    contract_versions = [1],
    execution_mode = sandbox_pod(profile = "gvisor-small", image = "ghcr.io/acme/claude:latest"),
    options = Options,
)]
struct ClaudeCode;

fn main() {}
