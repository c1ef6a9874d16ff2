//! The driver's accounting of an execution's [`RunLimits`]: what it counted so far, and
//! whether the next item fits.

use std::sync::Arc;

use crate::error::{ErrorCategory, ErrorCode, HarnessError};
use crate::event::{Content, Event, EventPayload, Usage};
use crate::limits::RunLimits;
use crate::time::Timestamp;

/// Whether an item of content fits the budget.
pub(super) enum Admit {
    /// It fits: append it.
    Yes,
    /// It reports what was already spent past a limit (usage): append it, then fail.
    Last(HarnessError),
    /// It would pass a limit: do not append it; fail.
    No(HarnessError),
}

/// The limits in force and what was counted against them.
#[derive(Debug)]
pub(super) struct Budget {
    limits: RunLimits,
    /// The event limit in force: the service's bound or the run limit, whichever is lower.
    max_events: usize,
    /// Which of the two it is, for the error message.
    events_from_limits: bool,
    /// When the wall time runs out.
    pub(super) wall_by: Option<tokio::time::Instant>,
    tool_calls: u64,
    model_turns: u64,
    output_bytes: u64,
    tokens: u64,
}

fn over(what: String) -> HarnessError {
    HarnessError::new(ErrorCategory::Capacity, what).with_retryable(false)
}

impl Budget {
    /// The budget of an execution accepted at `accepted`, under `limits` and the service's
    /// bound of `service_max_events`.
    pub(super) fn new(limits: RunLimits, service_max_events: usize, accepted: Timestamp) -> Self {
        let run_max = limits
            .max_events()
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
        let (max_events, events_from_limits) = match run_max {
            Some(n) if n < service_max_events => (n, true),
            _ => (service_max_events, false),
        };
        let wall_by = limits.wall_time().map(|wall| {
            let ms = i64::try_from(wall.as_millis()).unwrap_or(i64::MAX);
            let end = Timestamp::from_millis(accepted.as_millis().saturating_add(ms));
            end.map_or_else(
                || tokio::time::Instant::now() + super::clock::FAR,
                super::clock::instant_of,
            )
        });
        Self {
            limits,
            max_events,
            events_from_limits,
            wall_by,
            tool_calls: 0,
            model_turns: 0,
            output_bytes: 0,
            tokens: 0,
        }
    }

    /// Counts what a restored execution's stored log already spent.
    pub(super) fn replay(&mut self, log: &[Arc<Event>]) {
        for event in log {
            match event.payload() {
                EventPayload::MessageDelta(d) | EventPayload::ReasoningDelta(d) => {
                    self.output_bytes = self.output_bytes.saturating_add(d.text.len() as u64);
                }
                EventPayload::ToolCallStarted(_) => self.tool_calls += 1,
                EventPayload::Usage(u) => self.spend(u),
                _ => {}
            }
        }
    }

    fn spend(&mut self, usage: &Usage) {
        self.tokens = self
            .tokens
            .saturating_add(usage.input_tokens)
            .saturating_add(usage.output_tokens);
        self.model_turns = self.model_turns.saturating_add(usage.model_turns);
    }

    /// Whether `content` fits; counts it when it is appended.
    pub(super) fn admit(&mut self, content: &Content) -> Admit {
        match content {
            Content::MessageDelta(d) | Content::ReasoningDelta(d) => {
                let bytes = self.output_bytes.saturating_add(d.text.len() as u64);
                if let Some(max) = self.limits.max_output_bytes()
                    && bytes > max
                {
                    return Admit::No(
                        over(format!(
                            "the execution reached its limit of {max} bytes of message and \
                             reasoning text (`maxOutputBytes`); the text past it was not kept"
                        ))
                        .with_code(ErrorCode::LIMIT_OUTPUT_BYTES),
                    );
                }
                self.output_bytes = bytes;
            }
            Content::ToolCallStarted(_) => {
                if let Some(max) = self.limits.max_tool_calls()
                    && self.tool_calls >= u64::from(max)
                {
                    return Admit::No(
                        over(format!(
                            "the execution reached its limit of {max} tool calls \
                             (`maxToolCalls`); the call past it was not started"
                        ))
                        .with_code(ErrorCode::LIMIT_TOOL_CALLS),
                    );
                }
                self.tool_calls += 1;
            }
            Content::Usage(usage) => {
                self.spend(usage);
                if let Some(max) = self.limits.max_tokens()
                    && self.tokens > max
                {
                    return Admit::Last(
                        over(format!(
                            "the execution spent {} tokens, past its limit of {max} (`maxTokens`)",
                            self.tokens
                        ))
                        .with_code(ErrorCode::LIMIT_TOKENS),
                    );
                }
                if let Some(max) = self.limits.max_model_turns()
                    && self.model_turns > u64::from(max)
                {
                    return Admit::Last(
                        over(format!(
                            "the execution made {} model requests, past its limit of {max} \
                             (`maxModelTurns`)",
                            self.model_turns
                        ))
                        .with_code(ErrorCode::LIMIT_MODEL_TURNS),
                    );
                }
            }
            _ => {}
        }
        Admit::Yes
    }

    /// The event limit in force.
    pub(super) fn max_events(&self) -> usize {
        self.max_events
    }

    /// The error of an execution at its event limit.
    pub(super) fn events_error(&self) -> HarnessError {
        let knob = if self.events_from_limits {
            "its run limit `maxEvents`"
        } else {
            "`ServiceConfig::max_events`"
        };
        over(format!(
            "the execution reached its limit of {} events ({knob}); raise it or give the \
             adapter less to do per execution",
            self.max_events
        ))
        .with_code(ErrorCode::EVENT_LIMIT_REACHED)
    }

    /// The error of an execution past its wall time.
    pub(super) fn wall_time_error(&self) -> HarnessError {
        let ms = self
            .limits
            .wall_time()
            .map_or(0, |w| u64::try_from(w.as_millis()).unwrap_or(u64::MAX));
        HarnessError::new(
            ErrorCategory::Timeout,
            format!("the execution reached its wall-time limit of {ms} ms (`wallTimeMs`)"),
        )
        .with_code(ErrorCode::LIMIT_WALL_TIME)
        .with_retryable(false)
    }
}
