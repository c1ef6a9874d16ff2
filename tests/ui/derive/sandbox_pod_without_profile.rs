use harness::{Adapter, AdapterOptions};

#[derive(serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(deny_unknown_fields)]
struct Options {}

#[derive(Adapter)]
#[adapter(
    id = "claude_code",
    contract_versions = [1],
    execution_mode = sandbox_pod,
    options = Options,
)]
struct ClaudeCode;

#[derive(Adapter)]
#[adapter(
    id = "codex",
    contract_versions = [1],
    execution_mode = sandbox_pod(),
    options = Options,
)]
struct Codex;

fn main() {}
