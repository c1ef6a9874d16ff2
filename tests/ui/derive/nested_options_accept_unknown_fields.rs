use harness::AdapterOptions;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Retry {
    max: u8,
}

#[derive(serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(deny_unknown_fields)]
struct EchoOptions {
    // Derives serde and schemars but not `AdapterOptions`: may accept unknown fields.
    retry: Option<Retry>,
    // Free-form without saying so.
    extra: serde_json::Value,
    // Fine: deliberately free-form.
    #[adapter_options(unchecked)]
    headers: Option<serde_json::Value>,
}

fn main() {}
