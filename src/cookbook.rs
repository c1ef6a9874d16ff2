//! Recipes: the things a program built on harness does first, each a whole program that
//! runs (this page's examples are tested, and each is also under `examples/`, built by CI:
//! `cargo run --example <name>`).
//!
//! | recipe | example |
//! |---|---|
//! | [Your own adapter](#your-own-adapter) | `derive_adapter` |
//! | [Your own admission layer](#your-own-admission-layer) | `own_admission_layer` |
//! | [Your own runtime layer](#your-own-runtime-layer) | `own_runtime_layer` |
//! | [Tower's middleware in the stack](#towers-middleware-in-the-stack) | `tower_middleware` |
//! | [The stack in an axum handler](#the-stack-in-an-axum-handler) | `axum_handler` |
//! | [Metrics scraped](#metrics-scraped) | `prometheus` |
//! | [An execution's typestate](#an-executions-typestate) | `typestate` |
//!
//! # Your own adapter
//!
//! `#[derive(Adapter)]` builds a checked descriptor from an attribute (every mistake is a
//! compile error at its token), `#[derive(AdapterOptions)]` an options type whose JSON Schema
//! rejects unknown fields; the options derive serde and schemars through the facade
//! (`harness::serde`, `harness::schemars`), so nothing need match its versions. A
//! [`SimpleAdapter`](crate::adapter::SimpleAdapter) is one stream per run, wrapped in
//! [`Simple`](crate::adapter::Simple) to be a `HarnessAdapter`. Certify it with
//! `harness-conformance`.
//!
//! ```
#![doc = include_str!("../examples/derive_adapter.rs")]
//! ```
//!
//! # Your own admission layer
//!
//! A `tower::Layer` over the service that starts executions, put at a named place
//! ([`AdmissionSlot`](crate::layers::stack::AdmissionSlot)): where it sits decides what it
//! sees (replays, refusals, permits).
//!
//! ```
#![doc = include_str!("../examples/own_admission_layer.rs")]
//! ```
//!
//! # Your own runtime layer
//!
//! A `tower::Layer` over the service the driver calls once per run segment, whose response
//! is the segment's stream ([`SegmentStream`](crate::service::SegmentStream)); or an
//! [`InspectLayer`](crate::layers::inspect::InspectLayer) to only look. Never below
//! redaction ([`RuntimeSlot`](crate::layers::stack::RuntimeSlot)).
//!
//! ```
#![doc = include_str!("../examples/own_runtime_layer.rs")]
//! ```
//!
//! # Tower's middleware in the stack
//!
//! `timeout`, `load_shed`, `concurrency_limit` and `buffer` between the harness layers; their
//! `BoxError` becomes a classified [`HarnessError`](crate::error::HarnessError).
//!
//! ```
#![doc = include_str!("../examples/tower_middleware.rs")]
//! ```
//!
//! # The stack in an axum handler
//!
//! ```
#![doc = include_str!("../examples/axum_handler.rs")]
//! ```
//!
//! # Metrics scraped
//!
//! The `observe` feature (`harness::observe`, harness-observe) installs the Prometheus
//! recorder; the metric layer of the default stack counts every execution. `examples/prometheus.rs`
//! serves a steady workload on `/metrics` (`cargo run --example prometheus -- --for 10`); here
//! the exposition is rendered in place:
//!
//! ```
//! use harness::prelude::*;
//! use harness::scripted::{Script, ScriptedAdapter};
//! use harness_observe::prometheus::PrometheusExporter; // `harness::observe::prometheus` with the feature
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let endpoint = PrometheusExporter::new().without_listener().install().expect("the recorder");
//! let adapter = ScriptedAdapter::new(Script::builder().text("hi").complete("ok").build());
//! let service = HarnessStack::defaults_for(&adapter).unwrap().service(adapter);
//! let execution = service.oneshot(ExecutionRequest::new("go")).await.unwrap();
//! execution.outcome().await;
//! let text = endpoint.render();
//! assert!(text.contains("harness_executions_started_total{adapter=\"scripted\"} 1"), "{text}");
//! assert!(text.contains("harness_executions_finished_total"), "{text}");
//! # });
//! ```
//!
//! # An execution's typestate
//!
//! Each lifecycle step is a method of the state it leaves: a run that skips or repeats a
//! step does not compile.
//!
//! ```
#![doc = include_str!("../examples/typestate.rs")]
//! ```
//!
//! Succeeding a run that never started, or cancelling one that ended, does not compile:
//!
//! ```compile_fail
//! # use harness::{id::ExecutionId, lifecycle::Execution, event::RunSucceeded};
//! let done = Execution::queue(ExecutionId::generate()).succeed(RunSucceeded::default());
//! ```
//!
//! ```compile_fail
//! # use harness::{id::ExecutionId, lifecycle::Execution, event::{CancelReason, RunSucceeded}};
//! let running = Execution::queue(ExecutionId::generate()).start().run();
//! running.succeed(RunSucceeded::default()).begin_cancel(CancelReason::default());
//! ```
