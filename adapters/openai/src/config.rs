//! [`Endpoint`], the operator's configuration of one model endpoint, and [`OpenAiOptions`],
//! what a caller may choose per execution.
//!
//! The split is the same security boundary as the ACP adapter's: a request never chooses
//! the URL a turn is sent to, the key it carries or the instructions the model gets; it may
//! pick one of the operator's endpoints by name, and a model and sampling settings the
//! operator lets callers choose.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::manifest::ValidatorCell;
use harness_macros::AdapterOptions;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The default [`Endpoint::max_tool_rounds`].
pub const DEFAULT_MAX_TOOL_ROUNDS: u32 = 16;
/// The most [`Endpoint::max_tool_rounds`].
pub const MAX_TOOL_ROUNDS: u32 = 256;
/// The default [`Endpoint::connect_timeout_ms`].
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 10_000;
/// The default [`Endpoint::idle_timeout_ms`]: how long a stream may send nothing.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 120_000;
/// The default [`Endpoint::max_history_bytes`]: what a conversation keeps between turns.
pub const DEFAULT_MAX_HISTORY_BYTES: usize = 256 * 1024;

/// Which OpenAI-compatible API an endpoint speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// `POST {baseUrl}/chat/completions` with `stream: true` (the most widely implemented:
    /// OpenAI, Azure, vLLM, Ollama, LiteLLM, ...).
    #[default]
    ChatCompletions,
    /// `POST {baseUrl}/responses` with `stream: true` (OpenAI's newer API). The whole
    /// history is sent each round (`store: false`): nothing is kept on the provider.
    Responses,
}

/// How the operator runs one model endpoint: fixed per
/// [`OpenAiAdapter`](crate::OpenAiAdapter), never chosen by a caller.
///
/// The API key is the operator's (from the configuration, or an environment variable read
/// when the adapter is built): it is sent as `Authorization: Bearer` to this endpoint only,
/// never shown by `Debug`, never in an event or an error.
///
/// ```
/// use harness_openai::{Api, Endpoint};
/// let endpoint = Endpoint::new("http://127.0.0.1:4010/v1", "gpt-4.1")
///     .with_api(Api::Responses)
///     .with_api_key("sk-operator-key")
///     .with_instructions("You are a careful assistant.");
/// endpoint.check().unwrap();
/// assert!(!format!("{endpoint:?}").contains("sk-operator-key"));
///
/// // From the operator's configuration file, with the same checks.
/// let parsed = Endpoint::from_value(&serde_json::json!({
///     "baseUrl": "http://127.0.0.1:4010/v1", "model": "gpt-4.1", "api": "responses",
///     "apiKey": "sk-operator-key", "instructions": "You are a careful assistant."
/// })).unwrap();
/// assert_eq!(parsed, endpoint);
/// let err = Endpoint::from_value(&serde_json::json!({"baseUrl": "ftp://x", "model": "m"})).unwrap_err();
/// assert!(err.message().contains("http"), "{}", err.message());
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Endpoint {
    /// The API's base URL, up to the version: `https://api.openai.com/v1`. The API's path
    /// (`/chat/completions`, `/responses`) is appended.
    pub base_url: String,
    /// Which API the endpoint speaks.
    #[serde(default)]
    pub api: Api,
    /// The model a request gets unless it picks one of [`models`](Self::models).
    pub model: String,
    /// Other models a caller may pick (`{"model": ...}` in the request's options).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    /// The API key, sent as `Authorization: Bearer <key>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// The name of an environment variable holding the API key, read when the adapter is
    /// built (instead of [`api_key`](Self::api_key)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// The system instructions every turn starts with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// More headers for every request (an organization or project header). Values are
    /// never printed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The most rounds of tool calls in one execution (1 ..= 256): a model that keeps
    /// calling tools past it fails the run `TOOL_ROUNDS_EXHAUSTED`.
    #[serde(default = "default_rounds")]
    pub max_tool_rounds: u32,
    /// The most output tokens per model round, sent as `max_tokens` /
    /// `max_output_tokens`; the provider's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// How long connecting may take, in milliseconds.
    #[serde(default = "default_connect")]
    pub connect_timeout_ms: u64,
    /// How long a response may send nothing (before its headers, or between two chunks),
    /// in milliseconds: past it the round fails `timeout`, retryable.
    #[serde(default = "default_idle")]
    pub idle_timeout_ms: u64,
    /// The most bytes of history a conversation keeps between turns (in its thread
    /// state); the oldest turns are dropped beyond it.
    #[serde(default = "default_history")]
    pub max_history_bytes: usize,
}

fn default_rounds() -> u32 {
    DEFAULT_MAX_TOOL_ROUNDS
}
fn default_connect() -> u64 {
    DEFAULT_CONNECT_TIMEOUT_MS
}
fn default_idle() -> u64 {
    DEFAULT_IDLE_TIMEOUT_MS
}
fn default_history() -> usize {
    DEFAULT_MAX_HISTORY_BYTES
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("base_url", &self.base_url)
            .field("api", &self.api)
            .field("model", &self.model)
            .field("models", &self.models)
            .field("api_key", &self.api_key.as_ref().map(|_| ".."))
            .field("api_key_env", &self.api_key_env)
            .field("instructions", &self.instructions.as_ref().map(String::len))
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("max_tool_rounds", &self.max_tool_rounds)
            .field("max_output_tokens", &self.max_output_tokens)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("idle_timeout_ms", &self.idle_timeout_ms)
            .field("max_history_bytes", &self.max_history_bytes)
            .finish()
    }
}

impl Endpoint {
    /// An endpoint at `base_url` serving `model` over Chat Completions, without a key.
    #[must_use]
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api: Api::default(),
            model: model.into(),
            models: Vec::new(),
            api_key: None,
            api_key_env: None,
            instructions: None,
            headers: BTreeMap::new(),
            max_tool_rounds: DEFAULT_MAX_TOOL_ROUNDS,
            max_output_tokens: None,
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
            idle_timeout_ms: DEFAULT_IDLE_TIMEOUT_MS,
            max_history_bytes: DEFAULT_MAX_HISTORY_BYTES,
        }
    }

    /// Speaks `api`.
    #[must_use]
    pub fn with_api(mut self, api: Api) -> Self {
        self.api = api;
        self
    }

    /// Sends `key` as the bearer token.
    #[must_use]
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Starts every turn with these system instructions.
    #[must_use]
    pub fn with_instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = Some(instructions.into());
        self
    }

    /// Lets callers pick `model` too.
    #[must_use]
    pub fn allow_model(mut self, model: impl Into<String>) -> Self {
        self.models.push(model.into());
        self
    }

    /// Bounds the rounds of tool calls per execution.
    #[must_use]
    pub fn with_max_tool_rounds(mut self, rounds: u32) -> Self {
        self.max_tool_rounds = rounds;
        self
    }

    /// Bounds how long a response may send nothing.
    #[must_use]
    pub fn with_idle_timeout(mut self, idle: Duration) -> Self {
        self.idle_timeout_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// Parses the operator's configuration of an endpoint and [checks](Self::check) it.
    ///
    /// # Errors
    /// `configuration` (`OPTIONS_INVALID`) naming the field.
    pub fn from_value(value: &Value) -> Result<Self, HarnessError> {
        let endpoint = Self::deserialize(value)
            .map_err(|e| invalid(format!("invalid model endpoint: {e}")))?;
        endpoint.check()?;
        Ok(endpoint)
    }

    /// Checks what a request could not fix: the URL's scheme (and, without the `tls`
    /// feature, that it is not `https`), a model name, the bounds, header names and values.
    ///
    /// # Errors
    /// `configuration` (`OPTIONS_INVALID`) saying what to change.
    pub fn check(&self) -> Result<(), HarnessError> {
        let url = self.base_url.trim_end_matches('/');
        let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
        if !scheme_ok || url.len() <= "https://".len() {
            return Err(invalid(format!(
                "baseUrl {:?} is not an http:// or https:// URL (e.g. https://api.openai.com/v1)",
                self.base_url
            )));
        }
        if url.starts_with("https://") && !cfg!(feature = "tls") {
            return Err(invalid(format!(
                "baseUrl {:?} is https, but harness-openai was built without its `tls` feature: \
                 enable it, or put the endpoint behind a local http proxy",
                self.base_url
            )));
        }
        if self.model.trim().is_empty() || self.models.iter().any(|m| m.trim().is_empty()) {
            return Err(invalid(
                "a model name is empty: name the model the endpoint serves",
            ));
        }
        if !(1..=MAX_TOOL_ROUNDS).contains(&self.max_tool_rounds) {
            return Err(invalid(format!(
                "maxToolRounds is {}: give 1 to {MAX_TOOL_ROUNDS}",
                self.max_tool_rounds
            )));
        }
        for (what, ms) in [
            ("connectTimeoutMs", self.connect_timeout_ms),
            ("idleTimeoutMs", self.idle_timeout_ms),
        ] {
            if !(1..=86_400_000).contains(&ms) {
                return Err(invalid(format!(
                    "{what} is {ms}: give 1 to 86400000 milliseconds"
                )));
            }
        }
        if self.max_history_bytes > 64 << 20 {
            return Err(invalid(format!(
                "maxHistoryBytes is {}: give at most 67108864",
                self.max_history_bytes
            )));
        }
        if self.api_key.is_some() && self.api_key_env.is_some() {
            return Err(invalid("give apiKey or apiKeyEnv, not both"));
        }
        for (name, value) in &self.headers {
            let name_ok = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
            if !name_ok || name.eq_ignore_ascii_case("authorization") {
                return Err(invalid(format!(
                    "header name {name:?} is not allowed: use letters, digits, `-` and `_` \
                     (the key goes in apiKey, not in an Authorization header)"
                )));
            }
            if value.bytes().any(|b| b < 0x20 || b == 0x7f) {
                return Err(invalid(format!(
                    "the value of header {name:?} holds a control character"
                )));
            }
        }
        Ok(())
    }

    /// The key to send: [`api_key`](Self::api_key), or the variable
    /// [`api_key_env`](Self::api_key_env) names.
    pub(crate) fn resolve_key(&self) -> Result<Option<String>, HarnessError> {
        match (&self.api_key, &self.api_key_env) {
            (Some(key), _) => Ok(Some(key.clone())),
            (None, Some(var)) => std::env::var(var).map(Some).map_err(|_| {
                invalid(format!(
                    "apiKeyEnv names {var:?}, which is not set (or not Unicode) in the \
                     adapter's environment"
                ))
            }),
            (None, None) => Ok(None),
        }
    }

    /// The endpoint's URL for its API.
    pub(crate) fn url(&self) -> String {
        let base = self.base_url.trim_end_matches('/');
        match self.api {
            Api::ChatCompletions => format!("{base}/chat/completions"),
            Api::Responses => format!("{base}/responses"),
        }
    }
}

/// What a caller may set per execution.
///
/// Every other field a request names is refused (`deny_unknown_fields`, in the published
/// schema too): where a turn goes, with which key and instructions, is the operator's
/// [`Endpoint`].
///
/// ```
/// use harness_openai::OpenAiOptions;
/// let options = OpenAiOptions::from_value(&serde_json::json!({"model": "gpt-4.1-mini"})).unwrap();
/// assert_eq!(options.model.as_deref(), Some("gpt-4.1-mini"));
/// let err = OpenAiOptions::from_value(&serde_json::json!({"baseUrl": "http://evil"})).unwrap_err();
/// assert_eq!(err.code().as_str(), "OPTIONS_INVALID");
/// let err = OpenAiOptions::from_value(&serde_json::json!({"temperature": 3})).unwrap_err();
/// assert!(err.message().contains("temperature"), "{}", err.message());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, AdapterOptions)]
#[serde(deny_unknown_fields)]
pub struct OpenAiOptions {
    /// The name of an endpoint the operator registered
    /// ([`OpenAiAdapter::with_endpoint`](crate::OpenAiAdapter::with_endpoint)); absent, the
    /// adapter's default ([`DEFAULT_ENDPOINT`](crate::DEFAULT_ENDPOINT)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// A model among the endpoint's: its `model` or one of its `models`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The sampling temperature, 0 to 2; the provider's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 2.0))]
    pub temperature: Option<f64>,
}

impl OpenAiOptions {
    /// Options naming the operator's endpoint `name`.
    #[must_use]
    pub fn endpoint(name: impl Into<String>) -> Self {
        Self {
            endpoint: Some(name.into()),
            ..Self::default()
        }
    }

    /// Also picks `model`.
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// The options as JSON, for an execution request.
    #[must_use]
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Parses a request's options (`null` is no option), checked against the published
    /// schema.
    ///
    /// # Errors
    /// `configuration` (`OPTIONS_INVALID`) naming what a caller may not set.
    pub fn from_value(options: &Value) -> Result<Self, HarnessError> {
        if options.is_null() {
            return Ok(Self::default());
        }
        static SCHEMA: ValidatorCell = ValidatorCell::new();
        SCHEMA.validate::<Self>(options).map_err(|e| {
            invalid(format!(
                "{e}; a request names at most an `endpoint` the operator registered, a \
                     `model` it allows and a `temperature`: the URL, key and instructions are \
                     the operator's"
            ))
        })?;
        Self::deserialize(options).map_err(|e| invalid(e.to_string()))
    }
}

pub(crate) fn invalid(message: impl Into<String>) -> HarnessError {
    HarnessError::new(ErrorCategory::Configuration, message.into())
        .with_code(ErrorCode::OPTIONS_INVALID)
}
