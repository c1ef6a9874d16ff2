use harness::Adapter;

// serde and schemars alone: nothing checked that the schema rejects unknown fields.
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
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
