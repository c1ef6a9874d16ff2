//! The service's timing knobs and bounds.

use std::time::Duration;

/// Timing knobs and bounds of the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceConfig {
    /// How long the runtime's cancel hook may take before cleanup runs anyway.
    pub cancel_grace: Duration,
    /// How long cleanup may take.
    pub cleanup_deadline: Duration,
    /// The most events one execution's log may hold before its terminal event: an adapter
    /// that yields more fails the run with `EVENT_LIMIT_REACHED` (the terminal event is
    /// appended beyond it). Without a store each event is held in memory for the life of the
    /// execution (about 110 bytes, plus its text), so this bounds an execution's memory; a
    /// durable service holds at most two memory windows of each live execution
    /// ([`AdapterServiceBuilder::memory_window`](super::AdapterServiceBuilder::memory_window)).
    pub max_events: usize,
    /// How many runtimes of executions paused on an action stay alive, and for how long
    /// (see [`pool`](super::pool)): evicted ones are restored from durable state when the
    /// answer comes.
    pub runtime_pool: super::pool::RuntimePoolConfig,
}

/// The default [`ServiceConfig::max_events`]: a million events, about 110 MB of log.
pub const DEFAULT_MAX_EVENTS: usize = 1_000_000;

impl Default for ServiceConfig {
    fn default() -> Self {
        Self {
            cancel_grace: Duration::from_secs(5),
            cleanup_deadline: Duration::from_secs(10),
            max_events: DEFAULT_MAX_EVENTS,
            runtime_pool: super::pool::RuntimePoolConfig::default(),
        }
    }
}
