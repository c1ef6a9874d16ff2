//! An adapter's (or a tool provider's) health, below both so that either can report it.
//! Its public path is [`crate::adapter::HarnessHealth`].

use crate::time::Timestamp;

/// The result of a bounded, side-effect-free health check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HarnessHealth {
    /// Whether the adapter can take executions.
    pub ready: bool,
    /// A sanitized reason when not ready.
    pub reason: Option<String>,
    /// When the check ran.
    pub checked_at: Timestamp,
}

impl HarnessHealth {
    /// A ready adapter.
    #[must_use]
    pub fn ready() -> Self {
        Self {
            ready: true,
            reason: None,
            checked_at: Timestamp::now(),
        }
    }

    /// An adapter that cannot take executions, with a sanitized reason.
    #[must_use]
    pub fn not_ready(reason: impl Into<String>) -> Self {
        Self {
            ready: false,
            reason: Some(reason.into()),
            checked_at: Timestamp::now(),
        }
    }
}
