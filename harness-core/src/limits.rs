//! [`RunLimits`]: the budget of one execution, enforced by the service's driver.
//!
//! The operator sets limits on the service
//! ([`AdapterServiceBuilder::limits`](crate::service::AdapterServiceBuilder::limits)); a
//! caller may narrow them for one execution ([`ExecutionRequest::limits`]), never widen
//! them: each limit in force is the smaller of the two. The driver counts what passes
//! through it and ends the run with one `run.failed` when a limit is passed, each limit with
//! its own error code (see [`AdapterService`](crate::service::AdapterService) for what
//! happens then). The runtime also receives the limits in force
//! ([`RuntimeContext::limits`](crate::adapter::RuntimeContext::limits)), so an adapter that
//! runs its own loop can stop before it passes one (the model-loop adapter does not make a
//! model request past `maxModelTurns`, nor start a tool call past `maxToolCalls`).
//!
//! | limit | counts | code |
//! |---|---|---|
//! | `wallTimeMs` | time since the execution was accepted, in every state | `LIMIT_WALL_TIME` |
//! | `maxEvents` | events in the log (also bounded by `ServiceConfig::max_events`) | `EVENT_LIMIT_REACHED` |
//! | `maxToolCalls` | `tool.call.started` events | `LIMIT_TOOL_CALLS` |
//! | `maxModelTurns` | model requests, as `usage` events report them (`modelTurns`) | `LIMIT_MODEL_TURNS` |
//! | `maxOutputBytes` | UTF-8 bytes of `message.delta` and `reasoning.delta` text | `LIMIT_OUTPUT_BYTES` |
//! | `maxTokens` | input + output tokens, as `usage` events report them | `LIMIT_TOKENS` |
//!
//! There is no cost limit: no adapter of this project receives a cost from its provider
//! (the OpenAI-compatible APIs report tokens only), so `usage` carries none and a cost
//! budget would be a promise without code behind it. A token budget is the bound to use.
//!
//! [`ExecutionRequest::limits`]: crate::service::ExecutionRequest::limits
//!
//! ```
//! use std::time::Duration;
//! use harness_core::limits::RunLimits;
//!
//! // The operator's budget.
//! let operator = RunLimits::none()
//!     .with_wall_time(Duration::from_secs(600))?
//!     .with_max_tool_calls(50)?
//!     .with_max_tokens(200_000)?;
//! // A caller's request narrows it (and cannot widen it).
//! let caller: RunLimits = serde_json::from_value(serde_json::json!({
//!     "maxToolCalls": 10, "maxTokens": 1_000_000, "maxModelTurns": 8
//! }))?;
//! let in_force = operator.narrowed_by(&caller);
//! assert_eq!(in_force.max_tool_calls(), Some(10));
//! assert_eq!(in_force.max_tokens(), Some(200_000));
//! assert_eq!(in_force.max_model_turns(), Some(8));
//! assert_eq!(in_force.wall_time(), Some(Duration::from_secs(600)));
//!
//! // Zero is no budget at all: refused, naming the field.
//! let err = serde_json::from_value::<RunLimits>(serde_json::json!({"maxModelTurns": 0}))
//!     .unwrap_err();
//! assert!(err.to_string().contains("`maxModelTurns` is 0"), "{err}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::{ErrorCategory, HarnessError};

/// The budget of one execution: each limit optional (none by default) and at least 1 when
/// set. The operator's limits apply to every execution; a request's narrow them, never
/// widen them. See the module docs of `harness_core::limits`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, try_from = "Wire")]
pub struct RunLimits {
    /// Milliseconds the execution may take from its acceptance to its end, in every state
    /// (awaiting an answer included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    wall_time_ms: Option<u64>,
    /// Events the execution's log may hold before its terminal event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_events: Option<u64>,
    /// Tool calls the execution may start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_tool_calls: Option<u32>,
    /// Model requests the execution may make (needs an adapter that reports usage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_model_turns: Option<u32>,
    /// UTF-8 bytes of message and reasoning text the execution may stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_output_bytes: Option<u64>,
    /// Input plus output tokens the execution may spend (needs an adapter that reports
    /// usage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u64>,
}

/// The wire form, checked into [`RunLimits`]: each limit optional, at least 1 when set.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(rename = "RunLimits")]
struct Wire {
    /// Milliseconds the execution may take from its acceptance to its end, in every state
    /// (`LIMIT_WALL_TIME`).
    #[serde(default)]
    #[schemars(range(min = 1, max = u64::MAX))]
    wall_time_ms: Option<u64>,
    /// Events the execution's log may hold before its terminal event
    /// (`EVENT_LIMIT_REACHED`).
    #[serde(default)]
    #[schemars(range(min = 1, max = u64::MAX))]
    max_events: Option<u64>,
    /// Tool calls the execution may start (`LIMIT_TOOL_CALLS`).
    #[serde(default)]
    #[schemars(range(min = 1, max = u32::MAX))]
    max_tool_calls: Option<u32>,
    /// Model requests the execution may make, as `usage` events report them
    /// (`LIMIT_MODEL_TURNS`; needs an adapter that reports usage).
    #[serde(default)]
    #[schemars(range(min = 1, max = u32::MAX))]
    max_model_turns: Option<u32>,
    /// UTF-8 bytes of message and reasoning text the execution may stream
    /// (`LIMIT_OUTPUT_BYTES`).
    #[serde(default)]
    #[schemars(range(min = 1, max = u64::MAX))]
    max_output_bytes: Option<u64>,
    /// Input plus output tokens the execution may spend, as `usage` events report them
    /// (`LIMIT_TOKENS`; needs an adapter that reports usage).
    #[serde(default)]
    #[schemars(range(min = 1, max = u64::MAX))]
    max_tokens: Option<u64>,
}

impl TryFrom<Wire> for RunLimits {
    type Error = HarnessError;

    fn try_from(w: Wire) -> Result<Self, HarnessError> {
        let limits = Self {
            wall_time_ms: w.wall_time_ms,
            max_events: w.max_events,
            max_tool_calls: w.max_tool_calls,
            max_model_turns: w.max_model_turns,
            max_output_bytes: w.max_output_bytes,
            max_tokens: w.max_tokens,
        };
        limits.validate()?;
        Ok(limits)
    }
}

fn zero(field: &str) -> HarnessError {
    HarnessError::new(
        ErrorCategory::Configuration,
        format!(
            "run limit `{field}` is 0: a limit is at least 1 (leave it out for no limit; to give \
             an execution no tools, select none with `tools: []`)"
        ),
    )
}

fn nonzero<T: Into<u64> + Copy>(value: T, field: &str) -> Result<T, HarnessError> {
    if value.into() == 0 {
        Err(zero(field))
    } else {
        Ok(value)
    }
}

/// The smaller of two optional limits (none is no limit).
fn min<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl RunLimits {
    /// No limit at all (the default).
    #[must_use]
    pub const fn none() -> Self {
        Self {
            wall_time_ms: None,
            max_events: None,
            max_tool_calls: None,
            max_model_turns: None,
            max_output_bytes: None,
            max_tokens: None,
        }
    }

    /// Bounds the execution's total time, from its acceptance to its end (whole
    /// milliseconds).
    ///
    /// # Errors
    /// `configuration` when `wall_time` is under a millisecond.
    pub fn with_wall_time(mut self, wall_time: Duration) -> Result<Self, HarnessError> {
        let ms = u64::try_from(wall_time.as_millis()).unwrap_or(u64::MAX);
        self.wall_time_ms = Some(nonzero(ms, "wallTimeMs")?);
        Ok(self)
    }

    /// Bounds the events of the execution's log.
    ///
    /// # Errors
    /// `configuration` when `events` is 0.
    pub fn with_max_events(mut self, events: u64) -> Result<Self, HarnessError> {
        self.max_events = Some(nonzero(events, "maxEvents")?);
        Ok(self)
    }

    /// Bounds the tool calls the execution starts.
    ///
    /// # Errors
    /// `configuration` when `calls` is 0.
    pub fn with_max_tool_calls(mut self, calls: u32) -> Result<Self, HarnessError> {
        self.max_tool_calls = Some(nonzero(calls, "maxToolCalls")?);
        Ok(self)
    }

    /// Bounds the model requests the execution makes.
    ///
    /// # Errors
    /// `configuration` when `turns` is 0.
    pub fn with_max_model_turns(mut self, turns: u32) -> Result<Self, HarnessError> {
        self.max_model_turns = Some(nonzero(turns, "maxModelTurns")?);
        Ok(self)
    }

    /// Bounds the bytes of message and reasoning text the execution streams.
    ///
    /// # Errors
    /// `configuration` when `bytes` is 0.
    pub fn with_max_output_bytes(mut self, bytes: u64) -> Result<Self, HarnessError> {
        self.max_output_bytes = Some(nonzero(bytes, "maxOutputBytes")?);
        Ok(self)
    }

    /// Bounds the input plus output tokens the execution spends.
    ///
    /// # Errors
    /// `configuration` when `tokens` is 0.
    pub fn with_max_tokens(mut self, tokens: u64) -> Result<Self, HarnessError> {
        self.max_tokens = Some(nonzero(tokens, "maxTokens")?);
        Ok(self)
    }

    /// Checks every limit set is at least 1.
    ///
    /// # Errors
    /// `configuration`, naming the first limit that is 0.
    pub fn validate(&self) -> Result<(), HarnessError> {
        let checks: [(Option<u64>, &str); 6] = [
            (self.wall_time_ms, "wallTimeMs"),
            (self.max_events, "maxEvents"),
            (self.max_tool_calls.map(u64::from), "maxToolCalls"),
            (self.max_model_turns.map(u64::from), "maxModelTurns"),
            (self.max_output_bytes, "maxOutputBytes"),
            (self.max_tokens, "maxTokens"),
        ];
        for (value, field) in checks {
            if value == Some(0) {
                return Err(zero(field));
            }
        }
        Ok(())
    }

    /// The limits in force when a caller asks for `caller` under these: each the smaller of
    /// the two, so a caller can narrow a limit or add one, never widen or remove one.
    #[must_use]
    pub fn narrowed_by(&self, caller: &Self) -> Self {
        Self {
            wall_time_ms: min(self.wall_time_ms, caller.wall_time_ms),
            max_events: min(self.max_events, caller.max_events),
            max_tool_calls: min(self.max_tool_calls, caller.max_tool_calls),
            max_model_turns: min(self.max_model_turns, caller.max_model_turns),
            max_output_bytes: min(self.max_output_bytes, caller.max_output_bytes),
            max_tokens: min(self.max_tokens, caller.max_tokens),
        }
    }

    /// Whether no limit is set.
    #[must_use]
    pub fn is_none(&self) -> bool {
        *self == Self::none()
    }

    /// The execution's total time.
    #[must_use]
    pub fn wall_time(&self) -> Option<Duration> {
        self.wall_time_ms.map(Duration::from_millis)
    }

    /// The events of the execution's log.
    #[must_use]
    pub fn max_events(&self) -> Option<u64> {
        self.max_events
    }

    /// The tool calls the execution starts.
    #[must_use]
    pub fn max_tool_calls(&self) -> Option<u32> {
        self.max_tool_calls
    }

    /// The model requests the execution makes.
    #[must_use]
    pub fn max_model_turns(&self) -> Option<u32> {
        self.max_model_turns
    }

    /// The bytes of message and reasoning text the execution streams.
    #[must_use]
    pub fn max_output_bytes(&self) -> Option<u64> {
        self.max_output_bytes
    }

    /// The input plus output tokens the execution spends.
    #[must_use]
    pub fn max_tokens(&self) -> Option<u64> {
        self.max_tokens
    }

    /// The names of the limits set that only `usage` events can count (tokens, model
    /// turns): an adapter that does not report usage (`stream.usage`) cannot honour them.
    #[must_use]
    pub fn needing_usage(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        if self.max_model_turns.is_some() {
            names.push("maxModelTurns");
        }
        if self.max_tokens.is_some() {
            names.push("maxTokens");
        }
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn zero_is_refused_naming_the_field_and_unknown_fields_too() {
        for field in [
            "wallTimeMs",
            "maxEvents",
            "maxToolCalls",
            "maxModelTurns",
            "maxOutputBytes",
            "maxTokens",
        ] {
            let err = serde_json::from_value::<RunLimits>(json!({ field: 0 })).unwrap_err();
            assert!(
                err.to_string().contains(&format!("`{field}` is 0")),
                "{err}"
            );
            let ok: RunLimits = serde_json::from_value(json!({ field: 3 })).unwrap();
            assert_eq!(serde_json::to_value(ok).unwrap(), json!({ field: 3 }));
        }
        let err = serde_json::from_value::<RunLimits>(json!({"maxTurns": 3})).unwrap_err();
        assert!(
            err.to_string().contains("unknown field `maxTurns`"),
            "{err}"
        );
        assert!(RunLimits::none().with_max_tool_calls(0).is_err());
        assert!(
            RunLimits::none()
                .with_wall_time(Duration::from_micros(10))
                .is_err()
        );
        assert_eq!(serde_json::to_value(RunLimits::none()).unwrap(), json!({}));
    }

    #[test]
    fn a_caller_narrows_and_never_widens() {
        let operator = RunLimits::none()
            .with_max_tool_calls(5)
            .unwrap()
            .with_max_tokens(100)
            .unwrap();
        let wider = RunLimits::none()
            .with_max_tool_calls(50)
            .unwrap()
            .with_max_output_bytes(10)
            .unwrap();
        let in_force = operator.narrowed_by(&wider);
        assert_eq!(in_force.max_tool_calls(), Some(5));
        assert_eq!(in_force.max_tokens(), Some(100));
        assert_eq!(in_force.max_output_bytes(), Some(10));
        assert_eq!(operator.narrowed_by(&RunLimits::none()), operator);
        assert_eq!(RunLimits::none().narrowed_by(&operator), operator);
    }
}
