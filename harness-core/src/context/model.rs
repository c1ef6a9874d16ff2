//! [`ModelPolicy`] (the operator's) and [`ModelSelection`] (what the adapter receives).

use serde::{Deserialize, Serialize};

use crate::error::{ErrorCategory, ErrorCode, HarnessError};

/// The longest model name accepted, in bytes.
const MAX_MODEL_BYTES: usize = 256;

/// The models a caller may choose on one instance, and the one a request that names none
/// gets: the operator's, set with
/// [`AdapterServiceBuilder::models`](crate::service::AdapterServiceBuilder::models)
/// (`[<adapter>.models]` in `harness.toml`).
///
/// A request's `model` must be one of [`allowed`](Self::allowed), or it is refused before
/// anything runs (`configuration`, `MODEL_NOT_ALLOWED`, naming the models offered). Without
/// a policy an instance offers no choice: a request that names a model is refused, and the
/// adapter uses its own configured model. Without a [`default`](Self::with_default) a request
/// that names none leaves the choice to the adapter's own configuration.
///
/// ```
/// use harness_core::context::ModelPolicy;
///
/// let policy: ModelPolicy = serde_json::from_value(serde_json::json!({
///     "allowed": ["gpt-4.1-mini", "gpt-4.1"], "default": "gpt-4.1-mini"
/// }))?;
/// assert_eq!(policy.select(Some("gpt-4.1"))?.unwrap().as_str(), "gpt-4.1");
/// assert_eq!(policy.select(None)?.unwrap().as_str(), "gpt-4.1-mini");
/// let err = policy.select(Some("o3")).unwrap_err();
/// assert_eq!(err.code().as_str(), "MODEL_NOT_ALLOWED");
/// assert!(err.message().contains("gpt-4.1-mini, gpt-4.1"), "{}", err.message());
///
/// // A default the policy does not allow is refused when the configuration is read.
/// let bad = serde_json::from_value::<ModelPolicy>(serde_json::json!({
///     "allowed": ["a"], "default": "b"
/// }));
/// assert!(bad.unwrap_err().to_string().contains("`default` model \"b\""));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    rename_all = "camelCase",
    deny_unknown_fields,
    try_from = "PolicyWire",
    into = "PolicyWire"
)]
pub struct ModelPolicy {
    allowed: Vec<String>,
    default: Option<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PolicyWire {
    /// The models a caller may choose (at least one).
    allowed: Vec<String>,
    /// The model of a request that names none (one of `allowed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    default: Option<String>,
}

impl TryFrom<PolicyWire> for ModelPolicy {
    type Error = HarnessError;
    fn try_from(wire: PolicyWire) -> Result<Self, HarnessError> {
        let mut policy = Self::new(wire.allowed)?;
        if let Some(default) = wire.default {
            policy = policy.with_default(default)?;
        }
        Ok(policy)
    }
}

impl From<ModelPolicy> for PolicyWire {
    fn from(policy: ModelPolicy) -> Self {
        Self {
            allowed: policy.allowed,
            default: policy.default,
        }
    }
}

fn invalid(message: String) -> HarnessError {
    HarnessError::new(ErrorCategory::Configuration, message)
}

impl ModelPolicy {
    /// A policy allowing `allowed`, with no default.
    ///
    /// # Errors
    /// `configuration` when `allowed` is empty, or a name is empty, longer than 256 bytes,
    /// has spaces or control characters at its ends or inside, or appears twice.
    pub fn new(allowed: impl IntoIterator<Item = impl Into<String>>) -> Result<Self, HarnessError> {
        let allowed: Vec<String> = allowed.into_iter().map(Into::into).collect();
        if allowed.is_empty() {
            return Err(invalid(
                "a model policy needs at least one `allowed` model (leave the policy out to \
                 offer no choice)"
                    .into(),
            ));
        }
        for (i, model) in allowed.iter().enumerate() {
            if model.is_empty()
                || model.len() > MAX_MODEL_BYTES
                || model.chars().any(|c| c.is_whitespace() || c.is_control())
            {
                return Err(invalid(format!(
                    "allowed model {model:?} is not a model name: 1 to {MAX_MODEL_BYTES} bytes, \
                     no spaces or control characters"
                )));
            }
            if allowed[..i].contains(model) {
                return Err(invalid(format!("allowed model {model:?} is listed twice")));
            }
        }
        Ok(Self {
            allowed,
            default: None,
        })
    }

    /// The same policy, with `default` for a request that names no model.
    ///
    /// # Errors
    /// `configuration` when `default` is not among the allowed models.
    pub fn with_default(mut self, default: impl Into<String>) -> Result<Self, HarnessError> {
        let default = default.into();
        if !self.allowed.contains(&default) {
            return Err(invalid(format!(
                "the `default` model {default:?} is not among the `allowed` models ({})",
                self.allowed.join(", ")
            )));
        }
        self.default = Some(default);
        Ok(self)
    }

    /// The models a caller may choose, in the operator's order.
    #[must_use]
    pub fn allowed(&self) -> &[String] {
        &self.allowed
    }

    /// The model of a request that names none, if the operator set one.
    #[must_use]
    pub fn default_model(&self) -> Option<&str> {
        self.default.as_deref()
    }

    /// The model for a request that names `requested` (or none): the narrowed choice.
    ///
    /// # Errors
    /// `configuration`, `MODEL_NOT_ALLOWED`, naming the models offered, when `requested`
    /// is not one of them.
    pub fn select(&self, requested: Option<&str>) -> Result<Option<ModelSelection>, HarnessError> {
        match requested {
            None => Ok(self.default.clone().map(|model| ModelSelection {
                model,
                requested: false,
            })),
            Some(model) if self.allowed.iter().any(|m| m == model) => Ok(Some(ModelSelection {
                model: model.to_owned(),
                requested: true,
            })),
            Some(model) => Err(HarnessError::new(
                ErrorCategory::Configuration,
                format!(
                    "model {:?} is not offered by this instance; choose one of: {}",
                    shown(model),
                    self.allowed.join(", ")
                ),
            )
            .with_code(ErrorCode::MODEL_NOT_ALLOWED)),
        }
    }

    /// [`select`](Self::select) under an optional policy: without one, a request that names
    /// a model is refused (the instance offers no choice) and one that names none gets none.
    ///
    /// # Errors
    /// As [`select`](Self::select); `MODEL_NOT_ALLOWED` for any model without a policy.
    pub fn select_under(
        policy: Option<&Self>,
        requested: Option<&str>,
    ) -> Result<Option<ModelSelection>, HarnessError> {
        match (policy, requested) {
            (Some(policy), requested) => policy.select(requested),
            (None, None) => Ok(None),
            (None, Some(model)) => Err(HarnessError::new(
                ErrorCategory::Configuration,
                format!(
                    "the request chooses model {:?}, but this instance offers no choice of \
                     model: leave `model` out",
                    shown(model)
                ),
            )
            .with_code(ErrorCode::MODEL_NOT_ALLOWED)),
        }
    }
}

/// A caller's string, bounded for an error message.
fn shown(value: &str) -> String {
    const SHOWN: usize = 64;
    match value.char_indices().nth(SHOWN) {
        Some((end, _)) => format!("{}…", &value[..end]),
        None => value.to_owned(),
    }
}

/// The model an execution runs with, narrowed by the engine: one the operator's
/// [`ModelPolicy`] allows, chosen by the request or the policy's default. What the adapter
/// receives in [`AgentConfig::model`](crate::adapter::AgentConfig::model).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModelSelection {
    model: String,
    requested: bool,
}

impl ModelSelection {
    /// A selection of `model`, as if a request chose it (for adapters' tests; the service
    /// makes its own through [`ModelPolicy::select`]).
    #[must_use]
    pub fn requested(model: impl Into<String>) -> Self {
        Self::new(model, true)
    }

    /// A selection of `model`, chosen by the request or not (the operator's default): for
    /// a runtime host that relays the engine's choice (the sandbox worker).
    #[must_use]
    pub fn new(model: impl Into<String>, by_request: bool) -> Self {
        Self {
            model: model.into(),
            requested: by_request,
        }
    }

    /// The model's name, as the operator wrote it.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.model
    }

    /// Whether the request chose it (`false`: the operator's default).
    #[must_use]
    pub fn by_request(&self) -> bool {
        self.requested
    }
}

impl std::fmt::Display for ModelSelection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_refuses_what_it_cannot_mean() {
        assert!(ModelPolicy::new(Vec::<String>::new()).is_err());
        assert!(ModelPolicy::new(["a", "a"]).is_err());
        assert!(ModelPolicy::new(["has space"]).is_err());
        assert!(ModelPolicy::new([""]).is_err());
        let err = serde_json::from_value::<ModelPolicy>(serde_json::json!({
            "allowed": ["a"], "defualt": "a"
        }))
        .unwrap_err();
        assert!(err.to_string().contains("unknown field `defualt`"), "{err}");
    }

    #[test]
    fn no_policy_offers_no_choice() {
        assert_eq!(ModelPolicy::select_under(None, None).unwrap(), None);
        let err = ModelPolicy::select_under(None, Some("gpt")).unwrap_err();
        assert_eq!(err.code(), &ErrorCode::MODEL_NOT_ALLOWED);
        assert!(err.message().contains("offers no choice"));
        let long = "m".repeat(500);
        let err = ModelPolicy::new(["a"])
            .unwrap()
            .select(Some(&long))
            .unwrap_err();
        assert!(err.message().len() < 200, "the caller's value is bounded");
    }

    #[test]
    fn the_default_is_not_a_request() {
        let policy = ModelPolicy::new(["a", "b"]).unwrap();
        assert_eq!(policy.select(None).unwrap(), None);
        let policy = policy.with_default("b").unwrap();
        let chosen = policy.select(None).unwrap().unwrap();
        assert_eq!((chosen.as_str(), chosen.by_request()), ("b", false));
        assert!(policy.select(Some("a")).unwrap().unwrap().by_request());
    }
}
