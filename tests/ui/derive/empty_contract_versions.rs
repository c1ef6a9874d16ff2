use harness::{Adapter, AdapterOptions};

#[derive(serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(deny_unknown_fields)]
struct Options {}

#[derive(Adapter)]
#[adapter(
    id = "echo",
    contract_versions = [],
    execution_mode = in_process(compatibility_only),
    options = Options,
)]
struct Echo;

fn main() {}
