#![doc = include_str!("../README.md")]

pub use harness_core::{
    action, adapter, artifact, capability, error, event, id, lifecycle, log, manifest, registry,
    schema, service, session, time, tool, trace,
};

/// The embedded default adapter: deterministic, driven by a script.
pub use harness_scripted as scripted;

pub use harness_core::service::{AdapterService, ExecutionHandle, ExecutionRequest, Outcome};
