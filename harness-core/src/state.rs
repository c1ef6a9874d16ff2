//! The nine portable execution states as a runtime value, below events and the log that
//! carry it. Its public path is [`crate::lifecycle::ExecutionState`].

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The nine portable execution states, as a runtime value.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionState {
    /// Accepted, not started.
    Queued,
    /// The provider runtime is being prepared.
    Starting,
    /// The provider is working.
    Running,
    /// Paused on form input.
    AwaitingInput,
    /// Paused on tool approval.
    AwaitingApproval,
    /// Cancellation requested, not yet confirmed.
    Cancelling,
    /// Terminal: succeeded.
    Succeeded,
    /// Terminal: failed.
    Failed,
    /// Terminal: cancelled.
    Cancelled,
}

impl ExecutionState {
    /// Every state.
    pub const ALL: [Self; 9] = [
        Self::Queued,
        Self::Starting,
        Self::Running,
        Self::AwaitingInput,
        Self::AwaitingApproval,
        Self::Cancelling,
        Self::Succeeded,
        Self::Failed,
        Self::Cancelled,
    ];

    /// Whether the state is terminal.
    #[must_use]
    pub const fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }

    /// The wire name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Starting => "starting",
            Self::Running => "running",
            Self::AwaitingInput => "awaiting_input",
            Self::AwaitingApproval => "awaiting_approval",
            Self::Cancelling => "cancelling",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Whether the runtime model draws an edge from `self` to `next`.
    #[must_use]
    pub const fn can_transition_to(self, next: Self) -> bool {
        use ExecutionState as S;
        match (self, next) {
            (S::Queued, S::Starting)
            | (S::Starting, S::Running)
            | (S::Running, S::AwaitingInput | S::AwaitingApproval | S::Succeeded | S::Failed)
            | (S::AwaitingInput | S::AwaitingApproval, S::Running)
            | (S::Cancelling, S::Cancelled) => true,
            (from, S::Cancelling) => !from.is_terminal() && !matches!(from, S::Cancelling),
            _ => false,
        }
    }
}

impl fmt::Display for ExecutionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
