use harness::{Adapter, AdapterOptions};

// No `#[serde(deny_unknown_fields)]`: `{"modle": "x"}` would be silently ignored.
#[derive(serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(rename_all = "camelCase")]
struct EchoOptions {
    model: Option<String>,
}

#[derive(Adapter)]
#[adapter(
    id = "echo",
    contract_versions = [1],
    execution_mode = in_process(compatibility_only),
    options = EchoOptions,
)]
struct Echo;

fn main() {}
