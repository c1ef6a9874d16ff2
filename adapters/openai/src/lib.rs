#![doc = include_str!("../README.md")]

mod config;
mod error;
mod runtime;
mod sse;
mod wire;

pub use config::{
    Api, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_IDLE_TIMEOUT_MS, DEFAULT_MAX_HISTORY_BYTES,
    DEFAULT_MAX_TOOL_ROUNDS, Endpoint, MAX_TOOL_ROUNDS, OpenAiOptions,
};
pub use runtime::{ADAPTER_ID, DEFAULT_ENDPOINT, HISTORY_KEY, OpenAiAdapter, descriptor};
pub use wire::{MAX_ARGUMENT_BYTES, MAX_CALLS, MAX_TEXT_BYTES};
