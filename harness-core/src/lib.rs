#![warn(missing_docs)]
#![doc = include_str!("../README.md")]

pub mod action;
pub mod adapter;
pub mod artifact;
mod boxed;
pub mod capability;
pub mod context;
pub mod error;
pub mod event;
pub mod extensions;
pub mod file;
mod health;
pub mod id;
mod json_schema;
pub mod lifecycle;
pub mod limits;
pub mod log;
pub mod manifest;
pub mod program;
pub mod registry;
pub mod schema;
pub mod service;
pub mod session;
pub mod skill;
mod state;
pub mod store;
pub mod telemetry;
pub mod time;
pub mod tool;
pub use tool::middleware;
pub mod trace;
pub mod wire;

#[doc(hidden)]
pub mod __private;
