//! An adapter written by a crate that depends on the facade `harness` alone: the derives
//! need no `crate = "..."` attribute (they find the facade in this crate's `Cargo.toml`), and
//! the options derive serde's and schemars' traits through the facade's re-exports.
#![warn(missing_docs)]

use harness::adapter::{
    AdapterEvent, BoxStream, EventResult, HarnessAdapter, RunContext, SimpleAdapter,
};
use harness::event::{Content, RunSucceeded, TextDelta};
use harness::manifest::Adapter;
use harness::{Adapter, AdapterOptions};

/// Options of [`Shout`].
#[derive(Debug, harness::serde::Deserialize, harness::schemars::JsonSchema, AdapterOptions)]
#[serde(crate = "harness::serde", deny_unknown_fields)]
#[schemars(crate = "harness::schemars")]
pub struct ShoutOptions {
    /// Add an exclamation mark.
    #[serde(default)]
    pub bang: bool,
}

/// Replies with the message in capitals.
#[derive(Debug, Default, Adapter)]
#[adapter(
    id = "shout",
    contract_versions = [1],
    execution_mode = in_process(compatibility_only),
    options = ShoutOptions,
    capability("stream.text", native, explanation = "one message delta"),
)]
pub struct Shout;

impl SimpleAdapter for Shout {
    fn stream(&self, run: RunContext) -> BoxStream<'static, EventResult> {
        let bang = Self::parse_options(&run.context.config.options).is_ok_and(|o| o.bang);
        let mut text = run.turn.message.to_uppercase();
        if bang {
            text.push('!');
        }
        Box::pin(harness::stream::iter([
            Ok(AdapterEvent::Content(Content::MessageDelta(
                TextDelta::new(text),
            ))),
            Ok(AdapterEvent::Completed(RunSucceeded::default())),
        ]))
    }
}

/// The descriptor, through the adapter trait, for the test.
pub fn id_of(adapter: &impl HarnessAdapter) -> &str {
    adapter.descriptor().id().as_str()
}

#[cfg(test)]
mod tests {
    use harness::adapter::Simple;
    use harness::event::EventPayload;
    use harness::prelude::StreamExt;
    use harness::{AdapterService, ExecutionRequest, Outcome};

    use super::*;

    #[tokio::test]
    async fn the_derived_adapter_runs_through_the_facade() {
        let adapter = Simple::new(Shout);
        assert_eq!(id_of(&adapter), "shout");
        let schema =
            harness::serde_json::to_string(Shout::static_descriptor().options_schema()).unwrap();
        assert!(
            schema.contains("\"additionalProperties\":false"),
            "{schema}"
        );
        let service = AdapterService::new(adapter);
        let request =
            ExecutionRequest::new("hi").with_options(harness::serde_json::json!({"bang": true}));
        let execution = service.start(request).await.unwrap();
        let text: Vec<String> = execution
            .events(Default::default())
            .filter_map(|e| async move {
                match e.payload() {
                    EventPayload::MessageDelta(d) => Some(d.text.clone()),
                    _ => None,
                }
            })
            .collect()
            .await;
        assert_eq!(text, ["HI!"]);
        assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
    }
}
