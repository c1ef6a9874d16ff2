//! A harness adapter that drives any [Agent Client Protocol](https://agentclientprotocol.com)
//! agent (Gemini CLI, Claude Code or Codex through their ACP bridges, ...) over stdio.
//!
//! The operator configures the agents ([`AcpAgent`]: command, workspace, allowlisted and set
//! environment, file access, approval policy, session mode and configuration options) when
//! building [`AcpAdapter`]; a request picks one of them by name at most, and a mode or options
//! among those the operator lets callers choose ([`AcpOptions`]), never a program, a directory
//! or the host's environment.
//!
//! Each execution spawns its agent's command in its own process group, with
//! an environment built only from the allowlisted host variables, negotiates protocol
//! version 1 at `initialize`, opens an ACP session (`session/new`, or `session/load` for a
//! later turn of a conversation when the agent offers `loadSession`) and sends the turn's
//! message as `session/prompt` (with the turn's W3C trace context as `traceparent` /
//! `tracestate` in its `_meta`). The agent's `session/update` notifications become portable
//! events (or namespaced native ones), its `session/request_permission` requests become
//! tool-approval interrupts, its form-mode `elicitation/create` requests become form-input
//! interrupts, and the prompt's stop reason ends the run.
//!
//! The connection is the client side of the `agent-client-protocol` crate (`Client.v1()` over
//! the crate's `Lines` transport on the child's stdio, typed handlers), driven on its own Tokio
//! task, so it runs on any multi-threaded Tokio runtime. A wire guard in front of the crate
//! ends the run as `protocol` on output that is not ACP JSON-RPC, which the crate would answer
//! and skip.
//!
//! At most [`INBOUND_LIMIT`] messages (and [`INBOUND_BYTES`] bytes) the agent sent wait for
//! the run: beyond that, the adapter stops reading the agent's output (backpressure), so a
//! flooding agent does not grow the adapter's memory. A run's terminal event does not wait
//! for its agent's process group: cleanup hands the group to a bounded reaper task
//! (`SIGTERM`, the cancel grace, `SIGKILL`, reap), counted in [`Stats`]; no task the adapter
//! spawned for an agent outlives that reaping, and no process outlives the reaper.
//!
//! [`AcpAdapter`]'s `evaluate` probes the agent (start, `initialize`, shut down; cached per
//! agent) and reports what it negotiated. The mapping table, the capabilities and how
//! conversations map to sessions are in the crate's `README.md`.
//!
//! What is not implemented is reported as unsupported, never emulated: portable token usage
//! (ACP v1 reports context-window occupancy, emitted as the native `acp.usage_update`),
//! URL-mode elicitation (declined), terminals (always declined), restart.
#![warn(missing_docs)]

mod client;
mod elicitation;
mod health;
mod held;
pub mod mcp;
mod options;
mod runtime;
mod setup;
pub mod skills;
mod worker;

#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub use client::fuzz_wire;
pub use client::{INBOUND_BYTES, INBOUND_LIMIT, READ_LIMIT, REPLAY_SETTLE_LIMIT};
pub use options::{
    ASKING_MODES, AcpAgent, AcpMcpServer, AcpMcpTransport, AcpOptions, ApprovalPolicy, ConfigValue,
    DEFAULT_CANCEL_GRACE_MS, DEFAULT_REPLAY_QUIET_MS, FileAccess,
};
pub use runtime::{
    ADAPTER_ID, AcpAdapter, DEFAULT_AGENT, MAX_AGENT_NAME, NAMESPACE, PROBE_TIMEOUT, Stats,
    StatsSnapshot, descriptor,
};
pub use skills::{CLAUDE_SKILLS_DIR, CODEX_SKILLS_DIR};
pub use worker::adapter_from_settings;
