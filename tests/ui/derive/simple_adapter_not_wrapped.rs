use harness::adapter::{AdapterEvent, BoxStream, EventResult, RunContext, SimpleAdapter};
use harness::event::RunSucceeded;
use harness::{Adapter, AdapterOptions, AdapterService};

#[derive(serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(deny_unknown_fields)]
struct NoOptions {}

// A `SimpleAdapter` given where a `HarnessAdapter` is expected: the note says to wrap it.
#[derive(Adapter)]
#[adapter(
    id = "echo",
    contract_versions = [1],
    execution_mode = in_process(compatibility_only),
    options = NoOptions,
    capability("stream.text", native),
)]
struct Echo;

impl SimpleAdapter for Echo {
    fn stream(&self, _run: RunContext) -> BoxStream<'static, EventResult> {
        Box::pin(harness::stream::iter([Ok(AdapterEvent::Completed(
            RunSucceeded::default(),
        ))]))
    }
}

fn main() {
    let _service = AdapterService::new(Echo);
}
