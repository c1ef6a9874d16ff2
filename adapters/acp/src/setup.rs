//! A session's mode and configuration options: what the operator (and, where allowed, the
//! caller) chose, checked against what the agent offers in its `session/new` or
//! `session/load` answer, then applied with `session/set_mode` and
//! `session/set_config_option` before the first prompt.

use agent_client_protocol::v1::schema::{
    SessionConfigKind, SessionConfigOption, SessionConfigOptionValue, SessionConfigSelectOptions,
    SessionId, SessionModeState, SetSessionConfigOptionRequest, SetSessionModeRequest,
};
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use serde_json::{Value, json};

use crate::client::AgentProcess;
use crate::options::{AcpAgent, ConfigValue, SessionSetup};

/// Applies `setup` to the session `session`, whose agent offered `modes` and `options`;
/// returns what the session now runs with (`{"mode": ..., "config": {...}}`), for the
/// native `acp.session_configured` event.
///
/// # Errors
/// `configuration` (`OPTIONS_INVALID`) when the agent does not offer a chosen mode, option or
/// value, or when the approval policy asks and none of its modes is known to ask; the agent's
/// own error when it refuses `session/set_mode` or `session/set_config_option`.
pub(crate) async fn apply(
    agent: &AgentProcess,
    session: &SessionId,
    config: &AcpAgent,
    setup: &SessionSetup,
    modes: Option<&SessionModeState>,
    options: Option<&[SessionConfigOption]>,
) -> Result<Value, HarnessError> {
    let mode = target_mode(config, setup, modes)?;
    if let (Some(mode), Some(state)) = (&mode, modes)
        && *state.current_mode_id.0 != **mode
    {
        agent
            .call(SetSessionModeRequest::new(session.clone(), mode.clone()))
            .await
            .map_err(|e| refused(e, &format!("session/set_mode {mode:?}")))?;
    }
    let current = mode.or_else(|| modes.map(|m| m.current_mode_id.0.to_string()));
    for (id, value) in &setup.config {
        let value = checked_value(id, value, options)?;
        agent
            .call(SetSessionConfigOptionRequest::new(
                session.clone(),
                id.clone(),
                value,
            ))
            .await
            .map_err(|e| refused(e, &format!("session/set_config_option {id:?}")))?;
    }
    Ok(json!({"mode": current, "config": setup.config}))
}

/// The mode to switch to, if any.
fn target_mode(
    config: &AcpAgent,
    setup: &SessionSetup,
    modes: Option<&SessionModeState>,
) -> Result<Option<String>, HarnessError> {
    let offered = |state: &SessionModeState| {
        state
            .available_modes
            .iter()
            .map(|m| m.id.0.to_string())
            .collect::<Vec<_>>()
    };
    match (&setup.mode, modes) {
        (Some(mode), None) => Err(invalid(format!(
            "session mode {mode:?} is configured, but the agent offers no session modes"
        ))),
        (Some(mode), Some(state)) => {
            let offered = offered(state);
            if offered.contains(mode) {
                Ok(Some(mode.clone()))
            } else {
                Err(invalid(format!(
                    "the agent offers no session mode {mode:?}; it offers: {}",
                    offered.join(", ")
                )))
            }
        }
        (None, Some(state)) if setup.ask => {
            if config.asks(&state.current_mode_id.0) {
                return Ok(None);
            }
            let offered = offered(state);
            match offered.iter().find(|m| config.asks(m)) {
                Some(mode) => Ok(Some(mode.clone())),
                None => Err(invalid(format!(
                    "the approval policy is `ask`, but none of the agent's session modes ({}) \
                     is known to ask before running tools: declare one in `askingModes`, or \
                     set `approval` to `agent`",
                    offered.join(", ")
                ))),
            }
        }
        (None, _) => Ok(None),
    }
}

/// The wire value for option `id`, checked against what the agent offers.
fn checked_value(
    id: &str,
    value: &ConfigValue,
    options: Option<&[SessionConfigOption]>,
) -> Result<SessionConfigOptionValue, HarnessError> {
    let options = options.unwrap_or_default();
    let Some(option) = options.iter().find(|o| *o.id.0 == *id) else {
        let ids: Vec<&str> = options.iter().map(|o| &*o.id.0).collect();
        return Err(invalid(format!(
            "the agent offers no configuration option {id:?}; it offers: {}",
            if ids.is_empty() {
                "none".to_owned()
            } else {
                ids.join(", ")
            }
        )));
    };
    match (&option.kind, value) {
        (SessionConfigKind::Boolean(_), ConfigValue::Bool(on)) => {
            Ok(SessionConfigOptionValue::boolean(*on))
        }
        (SessionConfigKind::Select(select), ConfigValue::Id(choice)) => {
            let values: Vec<&str> = match &select.options {
                SessionConfigSelectOptions::Ungrouped(options) => {
                    options.iter().map(|o| &*o.value.0).collect()
                }
                SessionConfigSelectOptions::Grouped(groups) => groups
                    .iter()
                    .flat_map(|g| g.options.iter().map(|o| &*o.value.0))
                    .collect(),
                _ => Vec::new(),
            };
            if values.contains(&choice.as_str()) {
                Ok(SessionConfigOptionValue::value_id(choice.clone()))
            } else {
                Err(invalid(format!(
                    "configuration option {id:?} has no value {choice:?}; its values are: {}",
                    values.join(", ")
                )))
            }
        }
        (SessionConfigKind::Boolean(_), ConfigValue::Id(_)) => Err(invalid(format!(
            "configuration option {id:?} is a boolean: set it to true or false"
        ))),
        (SessionConfigKind::Select(_), ConfigValue::Bool(_)) => Err(invalid(format!(
            "configuration option {id:?} is a select: set it to one of its values' ids"
        ))),
        _ => Err(invalid(format!(
            "configuration option {id:?} is of a kind this adapter cannot set"
        ))),
    }
}

fn invalid(message: String) -> HarnessError {
    HarnessError::new(ErrorCategory::Configuration, message).with_code(ErrorCode::OPTIONS_INVALID)
}

/// The agent refused a setup request: its own error, said to be about `what`.
fn refused(err: HarnessError, what: &str) -> HarnessError {
    let diagnostic = err.diagnostic().unwrap_or_default().to_owned();
    err.with_diagnostic(format!("{what}: {diagnostic}"))
}
