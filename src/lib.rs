#![warn(missing_docs)]
// docs.rs: a badge naming the feature on each item that needs one.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![doc = include_str!("../README.md")]

pub use harness_core::{
    action, adapter, artifact, capability, context, error, event, id, lifecycle, log, manifest,
    registry, schema, service, session, telemetry, time, tool, trace,
};

/// The Tower layers of both stacks and the default stacks (feature `layers`).
#[cfg(feature = "layers")]
pub use harness_layers as layers;
#[cfg(feature = "layers")]
pub use harness_layers::stack::HarnessStack;

/// The embedded default adapter: deterministic, driven by a script (feature `scripted`).
#[cfg(feature = "scripted")]
pub use harness_scripted as scripted;

pub use harness_core::service::invoke::{Invocation, InvokeExt};
pub use harness_core::service::{AdapterService, ExecutionHandle, ExecutionRequest, Outcome};

/// Derive macros for adapter authors (feature `macros`): `#[derive(Adapter)]` builds a checked
/// descriptor from an `#[adapter(...)]` attribute; `#[derive(AdapterOptions)]` makes an
/// options type whose schema rejects unknown fields. In a crate that depends on this facade
/// they need no `crate = "..."` attribute. See `examples/derive_adapter.rs`.
#[cfg(feature = "macros")]
pub use harness_macros::{Adapter, AdapterOptions};

/// The version of Tower this crate is built on: its `Service`, `Layer` and `ServiceBuilder`
/// are the ones every layer and service here implements.
pub use tower;

/// The version of serde the library's types and an adapter's options deserialize with.
/// Derive through it, so that a crate on another serde needs nothing at a matching version:
///
/// ```
/// #[derive(Debug, harness::serde::Deserialize, harness::schemars::JsonSchema, harness::AdapterOptions)]
/// #[serde(crate = "harness::serde", deny_unknown_fields)]
/// #[schemars(crate = "harness::schemars")]
/// struct Options {
///     /// How loud.
///     #[serde(default)]
///     volume: u8,
/// }
///
/// use harness::manifest::AdapterOptions as _;
/// let schema = Options::options_schema();
/// assert_eq!(schema["additionalProperties"], false);
/// let err = Options::from_options(&harness::serde_json::json!({"volum": 3})).unwrap_err();
/// assert!(err.to_string().contains("volum"), "{err}");
/// ```
pub use serde;

/// The version of schemars whose `JsonSchema` an adapter's options must implement: another
/// major version's `JsonSchema` is another trait. Derive it as `harness::schemars::JsonSchema`
/// with `#[schemars(crate = "harness::schemars")]` (see [`serde`]).
pub use schemars;

/// The JSON values options, events and actions carry (`serde_json::Value`, `json!`).
pub use serde_json;

/// `pin_project!` (of `pin-project-lite`): how a runtime layer's stream wraps the stream it
/// maps without requiring `Unpin` of it (see `harness::layers::inspect` for a whole layer).
pub use pin_project_lite::pin_project;

/// A boxed, sendable future: what the adapter contract's methods return.
pub use harness_core::adapter::BoxFuture;

/// Operators' metrics and traces (feature `observe`): the Prometheus recorder and endpoint,
/// the metric names, and tracing set-up.
#[cfg(feature = "observe")]
pub use harness_observe as observe;

/// Streams: the constructors and combinators of `futures-util` (`stream::iter`,
/// `stream::once`, `StreamExt`, ...), for adapters that build the streams they yield.
pub use futures_util::stream;

#[cfg(all(feature = "layers", feature = "scripted", feature = "macros"))]
pub mod cookbook;

/// What most programs using the library import.
///
/// ```
/// use harness::prelude::*;
/// use harness::scripted::{Script, ScriptedAdapter};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let adapter = ScriptedAdapter::new(Script::builder().text("hello").complete("done").build());
/// let service = HarnessStack::defaults_for(&adapter).unwrap().service(adapter);
/// let execution = service.oneshot(ExecutionRequest::new("hi")).await.unwrap();
/// let kinds: Vec<_> = execution.events(Default::default()).map(|e| e.kind().as_str()).collect().await;
/// assert_eq!(kinds, ["run.queued", "run.starting", "run.running", "message.delta", "run.succeeded"]);
/// # });
/// ```
pub mod prelude {
    pub use futures_util::{Stream, StreamExt};
    pub use tower::{Layer, Service, ServiceBuilder, ServiceExt};

    #[cfg(feature = "layers")]
    pub use crate::HarnessStack;
    pub use crate::action::{ActionKind, ActionRequest, ActionResponse};
    pub use crate::adapter::{
        AdapterEvent, BoxStream, EventResult, HarnessAdapter, HarnessRuntime, RunContext, Simple,
        SimpleAdapter,
    };
    pub use crate::error::{ErrorCategory, ErrorCode, HarnessError};
    pub use crate::event::{CancelReason, Content, Event, EventPayload, RunSucceeded, TextDelta};
    pub use crate::manifest::{Adapter, Describe, HarnessDescriptor};
    pub use crate::service::invoke::{Invocation, InvokeExt};
    pub use crate::service::{AdapterService, ExecutionHandle, ExecutionRequest, Outcome};
    #[cfg(feature = "macros")]
    pub use crate::{Adapter, AdapterOptions};
}

/// What the derives' generated code reaches, for crates that depend on this facade only. Not
/// public API.
#[doc(hidden)]
pub use harness_core::__private;
