//! The example of `harness-macros/README.md` (keep the two in sync), compiled and run.

use harness::adapter::{AdapterEvent, BoxStream, EventResult, RunContext, SimpleAdapter};
use harness::event::{Content, RunSucceeded, TextDelta};
use harness::manifest::{Adapter, Describe};
use harness::{Adapter, AdapterOptions};

#[derive(serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct EchoOptions {
    /// Put before the reply.
    #[serde(default)]
    prefix: String,
}

#[derive(Adapter)]
#[adapter(
    id = "echo",
    contract_versions = [1],
    execution_mode = in_process(compatibility_only),
    options = EchoOptions,
    capability("stream.text", native, explanation = "the reply is one message.delta"),
)]
struct Echo;

impl SimpleAdapter for Echo {
    fn stream(&self, run: RunContext) -> BoxStream<'static, EventResult> {
        let reply = Self::parse_options(&run.context.config.options)
            .map(|o| format!("{}{}", o.prefix, run.turn.message));
        Box::pin(futures_util::stream::iter(match reply {
            Ok(text) => vec![
                Ok(AdapterEvent::Content(Content::MessageDelta(TextDelta::new(text)))),
                Ok(AdapterEvent::Completed(RunSucceeded::default())),
            ],
            Err(invalid) => vec![Err(invalid.into())], // configuration, OPTIONS_INVALID
        }))
    }
}

fn main() {
    let descriptor = Describe::descriptor(&Echo);
    assert_eq!(descriptor.id().as_str(), "echo");
    let options = Echo::parse_options(&serde_json::json!({"prefix": "> "})).unwrap();
    assert_eq!(options.prefix, "> ");
    assert!(Echo::parse_options(&serde_json::json!({"prefx": "> "})).is_err());
}
