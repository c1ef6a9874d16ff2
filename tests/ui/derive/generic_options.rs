use harness::AdapterOptions;

#[derive(serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(deny_unknown_fields)]
struct EchoOptions<T> {
    value: T,
}

fn main() {}
