use harness::{Adapter, AdapterOptions};

// A unit-variant enum deserializes from a string, not an object: it can be a field of the
// options, not the options.
#[derive(serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(rename_all = "snake_case")]
enum Mode {
    Fast,
    Careful,
}

#[derive(Adapter)]
#[adapter(
    id = "echo",
    contract_versions = [1],
    execution_mode = in_process(compatibility_only),
    options = Mode,
)]
struct Echo;

fn main() {}
