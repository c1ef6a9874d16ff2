use harness::AdapterOptions;

#[derive(serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(tag = "backend", rename_all = "snake_case")]
enum Backend {
    OpenAi { model: String },
    Local { path: std::path::PathBuf },
}

fn main() {}
