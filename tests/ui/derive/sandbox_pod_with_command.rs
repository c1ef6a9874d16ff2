use harness::{Adapter, AdapterOptions};

#[derive(serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(deny_unknown_fields)]
struct Options {}

// A raw command (or service account) instead of an operator profile.
#[derive(Adapter)]
#[adapter(
    id = "claude_code",
    contract_versions = [1],
    execution_mode = sandbox_pod(command = ["claude", "--print"], service_account = "root"),
    options = Options,
)]
struct ClaudeCode;

fn main() {}
