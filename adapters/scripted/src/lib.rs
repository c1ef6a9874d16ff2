#![warn(missing_docs)]
#![doc = include_str!("../README.md")]

mod adapter;
mod middleware;
mod script;
mod stream;

pub use adapter::{
    ADAPTER_ID, DISMISSED_REASON, ScriptedAdapter, ScriptedOptions, Stats, StatsSnapshot,
    TRACEPARENT,
};
pub use script::{
    ApprovalCall, DEFAULT_NAMESPACE, MAX_MEMORY, MAX_REPEAT, QUICKSTART, Script, ScriptBuilder,
    ScriptError, Step,
};
