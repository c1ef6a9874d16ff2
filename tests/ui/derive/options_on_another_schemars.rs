use harness::{Adapter, AdapterOptions};

// Options deriving another major version's `JsonSchema` (schemars 0.8 here): a different trait
// from the one the library's options are written against. The note names the way out.
#[derive(serde::Deserialize, schemars08::JsonSchema, AdapterOptions)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "schemars08")]
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
