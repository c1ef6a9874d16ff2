use harness::{Adapter, AdapterOptions};

#[derive(serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(deny_unknown_fields)]
struct Options {}

// Seven mistakes, seven errors, each at its own token.
#[derive(Adapter)]
#[adapter(
    id = "x",
    implementation_version = "1.0",
    contract_versions = [1],
    execution_mode = sandbox_pod(profile = "Gvisor Small"),
    dependency(kind = apt_package, name = "claude", version = ">=2"),
    options = Options,
    capability("tool.mpc", native),
    capability("stream.usage", degraded),
    capability("runtime.cancel", native, evidence = "not an evidence id"),
)]
struct Echo;

fn main() {}
