//! A harness adapter that drives any [Agent Client Protocol](https://agentclientprotocol.com)
//! agent (Gemini CLI, Claude Code or Codex through their ACP bridges, ...) over stdio.
//!
//! Each execution spawns the agent command from [`AcpOptions`] in its own process group, with
//! an environment built only from the allowlisted host variables, negotiates protocol
//! version 1 at `initialize`, opens one ACP session (`session/new`) and sends the turn's
//! message as `session/prompt`. The agent's `session/update` notifications become portable
//! events, its `session/request_permission` requests become tool-approval interrupts, and
//! the prompt's stop reason ends the run. The protocol types are those of the
//! `agent-client-protocol` crate (`v1::schema`); the JSON-RPC connection is this crate's
//! own small client, so that it runs on any multi-threaded Tokio runtime.
//!
//! The mapping table is in the crate's `README.md`.
//!
//! What is not implemented is reported as unsupported, never emulated: continuing a
//! conversation (`session/load`), elicitation (form input), token usage, terminals (always
//! declined), restart.

mod connection;
mod options;
mod runtime;

pub use options::{AcpOptions, DEFAULT_CANCEL_GRACE_MS, FileAccess};
pub use runtime::{ADAPTER_ID, AcpAdapter, NAMESPACE, Stats, StatsSnapshot, descriptor};
