#![warn(missing_docs)]
#![doc = include_str!("../README.md")]

mod config;
mod health;
mod names;
mod provider;

pub use config::{
    CallerCredential, DEFAULT_CONNECT_TIMEOUT_MS, MAX_TOOLS, McpServer, McpTransport,
};
pub use provider::{McpProvider, providers};
