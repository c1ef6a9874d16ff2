#![doc = include_str!("../README.md")]

pub use harness_core::{
    action, artifact, capability, error, event, id, lifecycle, log, manifest, registry, schema,
    time,
};
