//! [`InterruptPolicy`]: which pauses a caller permits, and how long an answer may take.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::action::ActionType;
use crate::error::{ErrorCategory, ErrorCode, HarnessError};

/// The longest `answerWithinMs` accepted: seven days.
pub const MAX_ANSWER_WITHIN: Duration = Duration::from_secs(7 * 24 * 3600);

/// Which pauses the caller of an execution permits, and how long an action may wait for
/// its answer ([`ExecutionRequest::interrupt_policy`](crate::service::ExecutionRequest::interrupt_policy)).
///
/// The service's driver enforces it whatever the adapter does:
///
/// - a pause of a kind not in `allow` is not opened: the run ends with one `run.failed`,
///   `configuration`, `INTERRUPT_FORBIDDEN` (not retryable: the same request would pause
///   again), after the runtime's cleanup. `allow: []` is "never pause: fail instead";
/// - an action unanswered `answerWithinMs` after it was requested is withdrawn
///   (`run.running`) and the run ends with one `run.failed`, `timeout`, `ACTION_EXPIRED`,
///   after cleanup: an answer arriving after that is refused as for any ended execution.
///
/// The runtime receives it too
/// ([`RuntimeContext::interrupt_policy`](crate::adapter::RuntimeContext::interrupt_policy)),
/// so an adapter that can avoid a pause (run without asking) may; it is not required to.
/// Absent, every pause the adapter declares is permitted and an action waits without limit
/// (up to the execution's deadline and wall time, which still hold).
///
/// Decisions where the spec is silent: the deadline of an action runs from the moment the
/// driver recorded it (`action.requested`'s time, kept in the store, so a replica that takes
/// a paused execution over keeps the same deadline); an expired action fails the run rather
/// than cancelling it, since the caller set a bound the run did not meet (as for
/// `wallTimeMs`), and the log says why.
///
/// ```
/// use std::time::Duration;
/// use harness_core::action::ActionType;
/// use harness_core::context::InterruptPolicy;
///
/// let policy: InterruptPolicy = serde_json::from_value(serde_json::json!({
///     "allow": ["tool_approval"], "answerWithinMs": 60000
/// }))?;
/// assert!(policy.permits(ActionType::ToolApproval));
/// assert!(!policy.permits(ActionType::FormInput));
/// assert_eq!(policy.answer_within(), Some(Duration::from_secs(60)));
/// assert!(!InterruptPolicy::no_pauses().permits(ActionType::ToolApproval));
/// assert!(InterruptPolicy::default().permits(ActionType::FormInput));
///
/// let err = serde_json::from_value::<InterruptPolicy>(serde_json::json!({"alow": []}))
///     .unwrap_err();
/// assert!(err.to_string().contains("unknown field `alow`"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InterruptPolicy {
    /// The kinds of pause permitted (`form_input`, `tool_approval`): every kind when
    /// absent, none when empty (the run fails instead of pausing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<ActionType>>,
    /// How long an action may wait for its answer, in milliseconds (1 to 604,800,000):
    /// past it the action expires and the run fails (`ACTION_EXPIRED`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 604_800_000))]
    pub answer_within_ms: Option<u64>,
}

impl InterruptPolicy {
    /// Every pause permitted, no answer deadline (the default).
    #[must_use]
    pub fn permit_all() -> Self {
        Self::default()
    }

    /// No pause permitted: the run fails instead of pausing.
    #[must_use]
    pub fn no_pauses() -> Self {
        Self {
            allow: Some(Vec::new()),
            answer_within_ms: None,
        }
    }

    /// Only the pauses of `kinds` permitted.
    #[must_use]
    pub fn allowing(kinds: impl IntoIterator<Item = ActionType>) -> Self {
        Self {
            allow: Some(kinds.into_iter().collect()),
            answer_within_ms: None,
        }
    }

    /// The same policy, with an answer deadline (whole milliseconds, at least 1).
    #[must_use]
    pub fn with_answer_within(mut self, within: Duration) -> Self {
        let ms = u64::try_from(within.as_millis()).unwrap_or(u64::MAX).max(1);
        self.answer_within_ms = Some(ms);
        self
    }

    /// Whether a pause of `kind` is permitted.
    #[must_use]
    pub fn permits(&self, kind: ActionType) -> bool {
        self.allow
            .as_ref()
            .is_none_or(|allow| allow.contains(&kind))
    }

    /// How long an action may wait for its answer, if bounded.
    #[must_use]
    pub fn answer_within(&self) -> Option<Duration> {
        self.answer_within_ms.map(Duration::from_millis)
    }

    /// Checks the policy a request carries.
    ///
    /// # Errors
    /// `configuration` when `answerWithinMs` is 0 or more than seven days.
    pub fn check(&self) -> Result<(), HarnessError> {
        match self.answer_within_ms {
            Some(0) => Err(HarnessError::new(
                ErrorCategory::Configuration,
                "`interruptPolicy.answerWithinMs` is 0: no action could be answered; leave it \
                 out for no bound, or use `allow: []` to forbid pauses",
            )),
            Some(ms) if u128::from(ms) > MAX_ANSWER_WITHIN.as_millis() => Err(HarnessError::new(
                ErrorCategory::Configuration,
                format!(
                    "`interruptPolicy.answerWithinMs` is {ms}, more than seven days \
                     ({} ms): leave it out for no bound",
                    MAX_ANSWER_WITHIN.as_millis()
                ),
            )),
            _ => Ok(()),
        }
    }

    /// The failure of a run that paused for `kind` against this policy.
    pub(crate) fn forbidden(&self, kind: ActionType) -> HarnessError {
        HarnessError::new(
            ErrorCategory::Configuration,
            format!(
                "the run asked for {}, which the request's `interruptPolicy` does not permit \
                 (it allows: {}): the run fails instead of pausing",
                match kind {
                    ActionType::FormInput => "form input (`form_input`)",
                    ActionType::ToolApproval => "a tool approval (`tool_approval`)",
                },
                match &self.allow {
                    Some(allow) if !allow.is_empty() => allow
                        .iter()
                        .map(|k| k.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    _ => "no pause".to_owned(),
                }
            ),
        )
        .with_code(ErrorCode::INTERRUPT_FORBIDDEN)
    }

    /// The failure of a run whose action was not answered in time.
    pub(crate) fn expired(&self) -> HarnessError {
        HarnessError::new(
            ErrorCategory::Timeout,
            format!(
                "the action was not answered within {} ms (`interruptPolicy.answerWithinMs`): \
                 it expired",
                self.answer_within_ms.unwrap_or_default()
            ),
        )
        .with_code(ErrorCode::ACTION_EXPIRED)
    }
}
