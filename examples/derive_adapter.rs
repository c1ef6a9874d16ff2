//! An adapter authored with `#[derive(Adapter)]` and `#[derive(AdapterOptions)]`: the author
//! writes the options, the struct with its `#[adapter(...)]` attribute, and the behaviour; the
//! descriptor (checked at compile time) and the options schema (which rejects unknown fields)
//! come from the derives.
//!
//! ```sh
//! cargo run --example derive_adapter
//! ```
//!
//! The program prints, as JSON lines: the adapter's manifest, its options schema, the
//! violations found in a bad set of options (every one, with its JSON pointer), every event of
//! one execution run through the registry and the adapter service, and the outcome.

use std::process::ExitCode;
use std::sync::Arc;

use futures_util::StreamExt;
use harness::adapter::{
    AdapterEvent, AgentConfig, BoxStream, EventResult, HarnessAdapter, RunContext, Simple,
    SimpleAdapter,
};
use harness::capability::CapabilityReport;
use harness::error::HarnessError;
use harness::event::{Content, RunSucceeded, TextDelta, Usage};
use harness::id::{AdapterId, Cursor};
use harness::manifest::Adapter;
use harness::registry::Registry;
use harness::{Adapter, AdapterOptions, ExecutionRequest, HarnessStack, Outcome};
use serde_json::json;
use tower::ServiceExt;

/// The echo adapter's options. `deny_unknown_fields` is required: without it,
/// `#[derive(AdapterOptions)]` does not compile.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct EchoOptions {
    /// Put before the reply.
    #[serde(default)]
    prefix: String,
    /// How many times the message is repeated.
    #[serde(default = "once")]
    #[schemars(range(min = 1, max = 5))]
    repeat: u8,
    /// How the reply is split into `message.delta` events.
    #[serde(default)]
    split: Split,
}

fn once() -> u8 {
    1
}

/// A nested options type: it derives `AdapterOptions` too, or `EchoOptions` does not compile.
#[derive(Debug, Default, Clone, Copy, serde::Deserialize, schemars::JsonSchema, AdapterOptions)]
#[serde(rename_all = "snake_case")]
enum Split {
    /// One delta per word.
    #[default]
    Words,
    /// The whole reply at once.
    Whole,
}

/// Repeats the user's message back. The derive gives it its descriptor.
#[derive(Debug, Adapter)]
#[adapter(
    id = "echo",
    name = "Echo (derive example)",
    contract_versions = [1],
    execution_mode = in_process(compatibility_only),
    options = EchoOptions,
    capability("stream.text", native, explanation = "the reply streams as message.delta events"),
    capability(
        "stream.usage",
        degraded,
        explanation = "usage is counted in words, once, at the end of the turn",
        constraints(granularity = "turn", unit = "words"),
    ),
    capability("runtime.cancel", emulated, explanation = "cancellation stops between deltas"),
)]
struct Echo;

impl SimpleAdapter for Echo {
    fn evaluate(&self, config: &AgentConfig) -> Result<CapabilityReport, HarnessError> {
        Self::parse_options(&config.options)?;
        Ok(Self::static_descriptor().capabilities().clone())
    }

    fn stream(&self, run: RunContext) -> BoxStream<'static, EventResult> {
        let options = match Self::parse_options(&run.context.config.options) {
            Ok(options) => options,
            // `InvalidOptions` converts into a `configuration` error, `OPTIONS_INVALID`.
            Err(e) => return Box::pin(futures_util::stream::iter([Err(e.into())])),
        };
        let reply = format!(
            "{}{}",
            options.prefix,
            vec![run.turn.message.as_str(); usize::from(options.repeat)].join(" ")
        );
        let words = u64::try_from(reply.split_whitespace().count()).unwrap_or(u64::MAX);
        let deltas: Vec<String> = match options.split {
            Split::Whole => vec![reply],
            Split::Words => reply.split_inclusive(' ').map(ToOwned::to_owned).collect(),
        };
        let mut events: Vec<EventResult> = deltas
            .into_iter()
            .map(|d| {
                Ok(AdapterEvent::Content(Content::MessageDelta(
                    TextDelta::new(d),
                )))
            })
            .collect();
        let usage = Usage {
            output_tokens: words,
            ..Usage::default()
        };
        events.push(Ok(AdapterEvent::Content(Content::Usage(usage))));
        events.push(Ok(AdapterEvent::Completed(RunSucceeded {
            summary: Some(format!("echoed {words} words")),
        })));
        Box::pin(futures_util::stream::iter(events))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    // The manifest and the options schema, as the derives built them.
    println!("{}", json!({"manifest": Echo::static_descriptor()}));
    println!(
        "{}",
        json!({"optionsSchema": Echo::static_descriptor().options_schema()})
    );

    // Bad options are refused with every violation listed, each at its JSON pointer.
    let bad = json!({"prefx": "> ", "repeat": 9, "split": "lines"});
    if let Err(err) = Echo::parse_options(&bad) {
        println!(
            "{}",
            json!({"rejectedOptions": bad, "violations": err.violations})
        );
    }

    // Registration checks the descriptor (id, contract version, closed options schema).
    let mut registry: Registry<Arc<dyn HarnessAdapter>> =
        Registry::new().with_allowlist(["echo".parse().unwrap()]);
    if let Err(err) = registry.register(Arc::new(Simple::new(Echo))) {
        eprintln!("registration refused: {err}");
        return ExitCode::from(1);
    }
    let id: AdapterId = "echo".parse().unwrap();
    let Some(adapter) = registry.get(&id).cloned() else {
        return ExitCode::from(1);
    };

    // The default layer stack (tracing, metrics, idempotency, preflight against the derived
    // descriptor, capacity, retry, redaction) over the service that drives the execution.
    let stack = match HarnessStack::defaults_for(&adapter) {
        Ok(stack) => stack,
        Err(err) => {
            eprintln!("cannot build the layer stack: {err}");
            return ExitCode::from(1);
        }
    };
    let service = stack.service(adapter);

    // Preflight refuses options the derived schema rejects, before any adapter work.
    let refused = service
        .clone()
        .oneshot(ExecutionRequest::new("hello").with_options(bad))
        .await;
    if let Err(err) = refused {
        println!("{}", json!({"preflight": err.public()}));
    }

    let request = ExecutionRequest::new("hello derive")
        .with_options(json!({"prefix": "> ", "repeat": 2}))
        .require(harness::capability::CapabilityKey::StreamText);
    let execution = match service.oneshot(request).await {
        Ok(execution) => execution,
        Err(err) => {
            eprintln!("the execution was refused: {err}");
            return ExitCode::from(1);
        }
    };
    let mut events = execution.events(Cursor::START);
    while let Some(event) = events.next().await {
        println!("{}", serde_json::to_string(&*event).unwrap_or_default());
    }
    match execution.outcome().await {
        Outcome::Succeeded(s) => {
            println!("{}", json!({"outcome": "succeeded", "summary": s.summary}));
            ExitCode::SUCCESS
        }
        Outcome::Failed(err) => {
            println!("{}", json!({"outcome": "failed", "error": err.public()}));
            ExitCode::from(1)
        }
        Outcome::Cancelled(r) => {
            println!(
                "{}",
                json!({"outcome": "cancelled", "source": r.source, "reason": r.reason})
            );
            ExitCode::from(1)
        }
    }
}
