#![doc = include_str!("../README.md")]

pub use harness_core::{
    action, adapter, artifact, capability, error, event, id, lifecycle, log, manifest, registry,
    schema, service, session, time, tool, trace,
};

/// The Tower layers and the default stack.
pub use harness_layers as layers;
pub use harness_layers::stack::HarnessStack;

/// The embedded default adapter: deterministic, driven by a script.
pub use harness_scripted as scripted;

pub use harness_core::service::{AdapterService, ExecutionHandle, ExecutionRequest, Outcome};

/// Derive macros for adapter authors: `#[derive(Adapter)]` builds a checked descriptor from an
/// `#[adapter(...)]` attribute; `#[derive(AdapterOptions)]` makes an options type whose schema
/// rejects unknown fields. See `examples/derive_adapter.rs`.
pub use harness_macros::{Adapter, AdapterOptions};

/// What the derives' generated code reaches, for crates that depend on this facade only (they
/// write `#[adapter(crate = "::harness")]`). Not public API.
#[doc(hidden)]
pub use harness_core::__private;
