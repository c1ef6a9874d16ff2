use harness::AdapterOptions;

#[derive(serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(deny_unknown_fields)]
struct Common {
    model: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(deny_unknown_fields)]
struct EchoOptions {
    #[serde(flatten)]
    common: Common,
    prefix: String,
}

fn main() {}
