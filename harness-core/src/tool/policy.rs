//! [`ToolPolicy`]: what common policy does around each call of one tool (approval, deadline,
//! retries, the size of its output), set by the operator or the application that registers
//! the tool, never by the adapter.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ToolDescriptor, ToolId};

/// The longest [`ToolPolicy::deadline`]: a day.
pub const MAX_TOOL_DEADLINE: Duration = Duration::from_secs(86_400);
/// The most [`ToolPolicy::retries`].
pub const MAX_TOOL_RETRIES: u8 = 10;
/// The default [`ToolPolicy::max_output_bytes`]: 1 MiB of serialized JSON.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 1 << 20;
/// The largest [`ToolPolicy::max_output_bytes`]: 64 MiB.
pub const MAX_OUTPUT_BYTES: usize = 64 << 20;

/// What common policy does around each call of one tool.
///
/// - **approval**: the call becomes a `tool_approval` action before it runs: a
///   [`ToolHandle`](super::ToolHandle) with this policy never runs the tool from
///   [`invoke`](super::ToolHandle::invoke) (it returns the action to open) but only from
///   [`invoke_approved`](super::ToolHandle::invoke_approved), with the caller's decision;
/// - **deadline**: a call still running past it is dropped (the tool's future is cancelled)
///   and fails `TOOL_DEADLINE_EXCEEDED`; it bounds every attempt together;
/// - **retries**: a call whose outcome is a *retryable* failure is made again, up to this
///   many more times, with a short backoff (50 ms, doubling, at most 1 s): only for a tool
///   whose descriptor declares it idempotent (a policy with retries for another tool is
///   refused where it is set, [`ToolPolicy::check`]);
/// - **max output bytes**: a successful output whose JSON is larger fails
///   `TOOL_OUTPUT_TOO_LARGE` instead of reaching the adapter (a hostile tool or MCP server
///   cannot make an execution hold unbounded output).
///
/// Cancelling the execution cancels a call in flight whatever the policy: it fails
/// `TOOL_CANCELLED` and the tool's future is dropped.
///
/// ```
/// use std::time::Duration;
/// use harness_core::tool::ToolPolicy;
///
/// let policy = ToolPolicy::new().needs_approval().deadline(Duration::from_secs(30));
/// assert!(policy.approval());
/// assert_eq!(policy.deadline_duration(), Some(Duration::from_secs(30)));
///
/// // From the operator's configuration, checked the same way.
/// let parsed: ToolPolicy = serde_json::from_value(serde_json::json!({
///     "approval": true, "deadlineMs": 30000
/// })).unwrap();
/// assert_eq!(parsed, policy);
/// let err = serde_json::from_value::<ToolPolicy>(serde_json::json!({"deadlineMs": 0})).unwrap_err();
/// assert!(err.to_string().contains("deadlineMs"), "{err}");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(
    rename_all = "camelCase",
    try_from = "PolicyFields",
    into = "PolicyFields"
)]
#[schemars(with = "PolicyFields")]
pub struct ToolPolicy {
    approval: bool,
    deadline: Option<Duration>,
    retries: u8,
    max_output_bytes: usize,
}

impl Default for ToolPolicy {
    fn default() -> Self {
        Self::new()
    }
}

impl ToolPolicy {
    /// No approval, no deadline, no retries, outputs up to [`DEFAULT_MAX_OUTPUT_BYTES`].
    #[must_use]
    pub const fn new() -> Self {
        Self {
            approval: false,
            deadline: None,
            retries: 0,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
        }
    }

    /// Every call waits for the caller's approval before it runs.
    #[must_use]
    pub const fn needs_approval(mut self) -> Self {
        self.approval = true;
        self
    }

    /// Bounds each call by `deadline`, clamped to 1 ms ..= [`MAX_TOOL_DEADLINE`].
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline.clamp(Duration::from_millis(1), MAX_TOOL_DEADLINE));
        self
    }

    /// Retries a retryable failure up to `retries` more times (at most
    /// [`MAX_TOOL_RETRIES`]); only for an idempotent tool (see [`check`](Self::check)).
    #[must_use]
    pub const fn retries(mut self, retries: u8) -> Self {
        self.retries = if retries > MAX_TOOL_RETRIES {
            MAX_TOOL_RETRIES
        } else {
            retries
        };
        self
    }

    /// The largest successful output, in bytes of JSON, clamped to 1 ..= [`MAX_OUTPUT_BYTES`].
    #[must_use]
    pub const fn max_output_bytes(mut self, bytes: usize) -> Self {
        self.max_output_bytes = if bytes == 0 {
            1
        } else if bytes > MAX_OUTPUT_BYTES {
            MAX_OUTPUT_BYTES
        } else {
            bytes
        };
        self
    }

    /// Whether calls wait for approval.
    #[must_use]
    pub const fn approval(self) -> bool {
        self.approval
    }

    /// The per-call deadline, if any.
    #[must_use]
    pub const fn deadline_duration(self) -> Option<Duration> {
        self.deadline
    }

    /// How many more times a retryable failure is tried.
    #[must_use]
    pub const fn retry_count(self) -> u8 {
        self.retries
    }

    /// The largest successful output, in bytes of JSON.
    #[must_use]
    pub const fn output_limit(self) -> usize {
        self.max_output_bytes
    }

    /// Checks the policy against the tool it is for.
    ///
    /// # Errors
    /// When it retries a tool whose descriptor does not declare it idempotent: repeating a
    /// call with side effects is not common policy's guess to make.
    pub fn check(self, descriptor: &ToolDescriptor) -> Result<(), InvalidToolPolicy> {
        if self.retries > 0 && !descriptor.annotations().idempotent {
            return Err(InvalidToolPolicy {
                tool: descriptor.id().clone(),
                reason: format!(
                    "the policy retries it {} time(s), but the tool does not declare itself \
                     idempotent: set `retries` to 0, or annotate the tool idempotent if \
                     repeating a call is harmless",
                    self.retries
                ),
            });
        }
        Ok(())
    }
}

/// A [`ToolPolicy`] does not fit its tool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid policy for tool `{tool}`: {reason}")]
pub struct InvalidToolPolicy {
    /// The tool.
    pub tool: ToolId,
    /// What is wrong and how to fix it.
    pub reason: String,
}

/// The configuration form of a [`ToolPolicy`].
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PolicyFields {
    /// Every call waits for the caller's approval before it runs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    approval: bool,
    /// The per-call deadline, in milliseconds (1 ..= 86,400,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86_400_000))]
    deadline_ms: Option<u64>,
    /// How many more times a retryable failure is tried (0 ..= 10; only for an idempotent
    /// tool).
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(max = 10))]
    retries: u8,
    /// The largest successful output, in bytes of JSON (1 ..= 67,108,864; default 1 MiB).
    #[serde(default = "default_output", skip_serializing_if = "is_default_output")]
    #[schemars(range(min = 1, max = 67_108_864))]
    max_output_bytes: usize,
}

fn is_zero(n: &u8) -> bool {
    *n == 0
}

fn default_output() -> usize {
    DEFAULT_MAX_OUTPUT_BYTES
}

fn is_default_output(n: &usize) -> bool {
    *n == DEFAULT_MAX_OUTPUT_BYTES
}

impl TryFrom<PolicyFields> for ToolPolicy {
    type Error = String;

    fn try_from(f: PolicyFields) -> Result<Self, String> {
        let deadline = match f.deadline_ms {
            None => None,
            Some(ms @ 1..=86_400_000) => Some(Duration::from_millis(ms)),
            Some(ms) => {
                return Err(format!(
                    "`deadlineMs` is {ms}: give 1 to 86400000 milliseconds, or leave it out for \
                     no deadline"
                ));
            }
        };
        if f.retries > MAX_TOOL_RETRIES {
            return Err(format!(
                "`retries` is {}: give 0 to {MAX_TOOL_RETRIES}",
                f.retries
            ));
        }
        if f.max_output_bytes == 0 || f.max_output_bytes > MAX_OUTPUT_BYTES {
            return Err(format!(
                "`maxOutputBytes` is {}: give 1 to {MAX_OUTPUT_BYTES}",
                f.max_output_bytes
            ));
        }
        Ok(Self {
            approval: f.approval,
            deadline,
            retries: f.retries,
            max_output_bytes: f.max_output_bytes,
        })
    }
}

impl From<ToolPolicy> for PolicyFields {
    fn from(p: ToolPolicy) -> Self {
        Self {
            approval: p.approval,
            deadline_ms: p
                .deadline
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            retries: p.retries,
            max_output_bytes: p.max_output_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn descriptor(idempotent: bool) -> ToolDescriptor {
        ToolDescriptor::new(
            "demo.lookup".parse().unwrap(),
            "Looks up.",
            json!({"type": "object"}),
        )
        .unwrap()
        .with_annotations(super::super::ToolAnnotations::default().with_idempotent(idempotent))
    }

    #[test]
    fn retries_need_an_idempotent_tool() {
        let policy = ToolPolicy::new().retries(2);
        let err = policy.check(&descriptor(false)).unwrap_err();
        assert!(err.to_string().contains("idempotent"), "{err}");
        assert!(err.to_string().contains("demo.lookup"), "{err}");
        policy.check(&descriptor(true)).unwrap();
        ToolPolicy::new().check(&descriptor(false)).unwrap();
    }

    #[test]
    fn builders_clamp_to_their_bounds() {
        let p = ToolPolicy::new()
            .deadline(Duration::MAX)
            .retries(200)
            .max_output_bytes(usize::MAX);
        assert_eq!(p.deadline_duration(), Some(MAX_TOOL_DEADLINE));
        assert_eq!(p.retry_count(), MAX_TOOL_RETRIES);
        assert_eq!(p.output_limit(), MAX_OUTPUT_BYTES);
        let p = ToolPolicy::new()
            .deadline(Duration::ZERO)
            .max_output_bytes(0);
        assert_eq!(p.deadline_duration(), Some(Duration::from_millis(1)));
        assert_eq!(p.output_limit(), 1);
    }

    #[test]
    fn configuration_round_trips_and_names_what_is_wrong() {
        let p = ToolPolicy::new()
            .needs_approval()
            .deadline(Duration::from_millis(1500))
            .retries(3)
            .max_output_bytes(4096);
        let json = serde_json::to_value(p).unwrap();
        assert_eq!(
            json,
            json!({"approval": true, "deadlineMs": 1500, "retries": 3, "maxOutputBytes": 4096})
        );
        assert_eq!(serde_json::from_value::<ToolPolicy>(json).unwrap(), p);
        assert_eq!(serde_json::to_value(ToolPolicy::new()).unwrap(), json!({}));
        for (bad, named) in [
            (json!({"retries": 11}), "retries"),
            (json!({"deadlineMs": 86_400_001u64}), "deadlineMs"),
            (json!({"maxOutputBytes": 0}), "maxOutputBytes"),
            (json!({"aproval": true}), "aproval"),
        ] {
            let err = serde_json::from_value::<ToolPolicy>(bad).unwrap_err();
            assert!(err.to_string().contains(named), "{err}");
        }
    }
}
