use harness::{Adapter, AdapterOptions};

#[derive(serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(deny_unknown_fields)]
struct Options {}

#[derive(Adapter)]
#[adapter(
    id = "echo",
    contract_versions = [1],
    execution_mode = in_process(compatibility_only),
    options = Options,
    capability("stream.text", native),
    capability("runtime.cancel", emulated),
    capability("stream.text", degraded, explanation = "only whole messages"),
)]
struct Echo;

fn main() {}
