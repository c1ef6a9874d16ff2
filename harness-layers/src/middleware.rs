//! The portable middleware policy with the project's redactor: compiles a
//! [`MiddlewareConfig`] whose `results.redact` is done by a [`Redactor`].
//!
//! `harness_core` holds the policy ([`harness_core::middleware`]) but no pattern engine;
//! this module gives it one. `results.redact` takes exact `secrets`, named regex
//! `patterns` and, with `builtin = true`, the redactor's built-in rules (API keys, bearer
//! tokens, private keys, JWTs) and sensitive field names (`password`, `apiKey`, ...). Each
//! match in a tool's result (or failure message) becomes `[REDACTED:<rule>]` before the
//! adapter, and so the model, sees it.
//!
//! ```
//! use harness_core::middleware::MiddlewareConfig;
//! use serde_json::json;
//!
//! let config: MiddlewareConfig = serde_json::from_value(json!({
//!     "results": { "redact": { "secrets": ["hunter2-db"], "patterns": { "ticket": "TCK-[0-9]{6}" } } }
//! }))?;
//! let policy = harness_layers::middleware::compile(&config)?;
//! assert!(policy.redacts_results());
//!
//! let bad: MiddlewareConfig =
//!     serde_json::from_value(json!({ "results": { "redact": { "patterns": { "x": "(" } } } }))?;
//! let err = harness_layers::middleware::compile(&bad).unwrap_err();
//! assert!(err.to_string().contains("results.redact"), "{err}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Decisions where the spec is silent
//!
//! - Markers are the redactor's (`[REDACTED:secret]`, `[REDACTED:<pattern name>]`), not a
//!   bare `[REDACTED]`: the operator sees which rule fired, the model nothing of the value.
//! - Without `builtin`, only what the operator lists is redacted (no built-in patterns, no
//!   sensitive field names): a result is not changed by rules nobody asked for.

use std::sync::Arc;

use harness_core::middleware::{
    InvalidMiddleware, MiddlewareConfig, PortableMiddlewarePolicy, RedactConfig, ResultRedactor,
};
use serde_json::Value;

use crate::redaction::Redactor;

/// Compiles `config`, redacting results with a [`Redactor`] built from `results.redact`.
///
/// # Errors
/// As [`PortableMiddlewarePolicy::compile`]; a pattern that does not compile (or a secret
/// too short to redact safely) as the rule `results.redact`, naming it.
pub fn compile(config: &MiddlewareConfig) -> Result<PortableMiddlewarePolicy, InvalidMiddleware> {
    PortableMiddlewarePolicy::compile_with(config, |redact| {
        redactor(redact).map(|r| Arc::new(r) as Arc<dyn ResultRedactor>)
    })
}

/// The [`Redactor`] `redact` describes.
///
/// # Errors
/// What is wrong, naming the pattern or secret.
pub fn redactor(redact: &RedactConfig) -> Result<Redactor, String> {
    let mut builder = Redactor::builder();
    if !redact.builtin {
        builder = builder.without_builtin_patterns().without_default_fields();
    }
    builder = builder.secrets(redact.secrets.iter().cloned());
    for (name, pattern) in &redact.patterns {
        builder = builder
            .pattern(name.clone(), pattern)
            .map_err(|e| format!("pattern `{name}`: {e}"))?;
    }
    builder.build().map_err(|e| e.to_string())
}

impl ResultRedactor for Redactor {
    fn redact_value(&self, value: &mut Value) -> bool {
        self.redact_json(value)
    }

    fn redact_text(&self, text: &str) -> Option<String> {
        match self.redact_str(text) {
            std::borrow::Cow::Borrowed(_) => None,
            std::borrow::Cow::Owned(s) => Some(s),
        }
    }
}
