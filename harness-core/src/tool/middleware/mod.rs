//! The portable middleware policy (the contract's `PortableMiddlewarePolicy`): the operator's
//! rules for tool calls, applied the same way whatever the harness.
//!
//! The operator writes a [`MiddlewareConfig`] (the library's
//! [`AdapterServiceBuilder::middleware`](crate::service::AdapterServiceBuilder::middleware),
//! or `[middleware]` in `harness.toml`); it is compiled once, at configuration time, into a
//! [`PortableMiddlewarePolicy`], refused with an [`InvalidMiddleware`] naming the rule and
//! what is wrong. The caller never sets it. The service gives it to every runtime
//! ([`RuntimeContext::middleware`](crate::adapter::RuntimeContext::middleware)) and attaches
//! it to every [`ToolHandle`](crate::tool::ToolHandle) it makes, so portable tools (the model
//! loop's, a script's, MCP tools) are governed by the handle, and an adapter consults
//! [`PortableMiddlewarePolicy::decide`] for the calls of a harness's own tools (the ACP
//! adapter for an agent's permission requests).
//!
//! ```
//! use harness_core::middleware::{MiddlewareConfig, PortableMiddlewarePolicy, ToolAction};
//! use serde_json::json;
//!
//! let config: MiddlewareConfig = serde_json::from_value(json!({
//!     "tools": [
//!         { "tool": "fs.read", "action": "allow" },
//!         { "tool": "fs.*", "action": "deny" },
//!         { "tool": "*delete*", "action": "require_approval" }
//!     ],
//!     "arguments": {
//!         "maxBytes": 4096,
//!         "rewrite": [{ "tool": "http.*", "set": { "timeoutMs": 5000 }, "remove": ["proxy"] }]
//!     },
//!     "results": { "maxBytes": 65536 },
//!     "limits": { "maxToolCalls": 20 }
//! }))?;
//! let policy = PortableMiddlewarePolicy::compile(&config)?;
//! assert_eq!(policy.decide("fs.read").action(), ToolAction::Allow);
//! assert_eq!(policy.decide("fs.write").action(), ToolAction::Deny);
//! assert_eq!(policy.decide("db.delete_row").action(), ToolAction::RequireApproval);
//! assert_eq!(policy.decide("weather.now").action(), ToolAction::Allow);
//! assert_eq!(policy.limits().max_tool_calls(), Some(20));
//!
//! // A bad rule is refused, naming it.
//! let bad: MiddlewareConfig =
//!     serde_json::from_value(json!({ "tools": [{ "tool": "fs.*", "action": "block" }] }))?;
//! let err = PortableMiddlewarePolicy::compile(&bad).unwrap_err();
//! assert!(err.to_string().contains("tools[0]"), "{err}");
//! assert!(err.to_string().contains("block"), "{err}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What happens when...
//!
//! - **a tool matches a rule**: the rules of `tools` are tried in order and the **first that
//!   matches decides** (like a firewall: write exceptions before the pattern they carve out
//!   of); none matching, `defaultAction` decides (`allow` unless set). A pattern is a tool id
//!   with `*` (any run of characters, `.` included) and `?` (one character); the whole id must
//!   match. The same pattern twice is refused.
//! - **the decision is `deny`**: the call fails [`ErrorCode::TOOL_DENIED_BY_POLICY`] (the
//!   model sees a bounded message naming the tool and the rule) and nothing runs; no
//!   approval is asked. It beats the tool's own [`ToolPolicy`](crate::tool::ToolPolicy)
//!   approval.
//! - **the decision is `require_approval`**: the call becomes a `tool_approval` action even
//!   if the tool's own policy does not ask. `allow` never removes the approval a tool's own
//!   policy asks for: the middleware narrows, it does not widen.
//! - **arguments are too large**: their serialized JSON is counted against
//!   `arguments.maxBytes` as the model sent them (before any rewrite); past it the call fails
//!   [`ErrorCode::TOOL_ARGUMENTS_TOO_LARGE`] and nothing runs.
//! - **a rewrite matches**: every rule of `arguments.rewrite` whose pattern matches applies,
//!   in order: `remove` drops top-level fields, then `set` puts top-level fields (replacing
//!   what the model or the caller's edit gave). Rewritten arguments are then validated
//!   against the tool's schema like any other. Arguments that are not a JSON object are left
//!   as they are (the schema decides).
//! - **a result comes back**: a success's value and a failure's message are first redacted
//!   (when a [`ResultRedactor`] is configured: every match replaced by a marker), then a
//!   success larger than `results.maxBytes` of JSON is **truncated**: it becomes a JSON
//!   string holding the first bytes of its JSON (cut on a character boundary) followed by
//!   [`TRUNCATION_MARKER`] and the original size. The tool's own `maxOutputBytes` (a hard
//!   bound, which fails the call) applies before.
//! - **caps**: `limits.maxModelTurns` and `limits.maxToolCalls` narrow the service's
//!   [`RunLimits`] (the smaller wins), so the driver's enforcement applies
//!   (`LIMIT_MODEL_TURNS`, `LIMIT_TOOL_CALLS`).
//!
//! # Decisions where the spec is silent
//!
//! - First match wins (not most specific): it is predictable from the order alone, and lets
//!   an operator write exceptions. Across layers the most restrictive wins: a denial beats
//!   any approval, `require_approval` beats a tool that does not ask.
//! - Results are truncated, not failed, past `results.maxBytes`: the model keeps the start of
//!   what it asked for and is told it was cut. Redaction runs before truncation, so a secret
//!   across the cut is never half kept.
//! - The argument cap counts what the model sent, before rewrites: the operator's own
//!   `set` values are bounded by the configuration.
//! - Rewrites touch top-level fields only (no paths): small and unambiguous.
//! - A tool's id is what patterns match; for an ACP agent's own tools (which have no id) the
//!   adapter matches the title the agent gives the call (see the ACP adapter's docs).
//! - Redaction needs a [`ResultRedactor`]: this crate has no pattern engine.
//!   `harness_layers::middleware` compiles `results.redact` with the project's redactor
//!   (markers `[REDACTED:<rule>]`); [`PortableMiddlewarePolicy::compile`] here refuses a
//!   configuration that asks for redaction rather than silently not redacting.

mod glob;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::portable::{BoundedFailure, ToolOutcome};
use crate::error::ErrorCode;
use crate::limits::RunLimits;

use self::glob::Glob;
pub use self::glob::MAX_PATTERN_BYTES;

/// The most rules of each list (`tools`, `arguments.rewrite`).
pub const MAX_RULES: usize = 1024;
/// Ends a result truncated to `results.maxBytes`; the original size follows it.
pub const TRUNCATION_MARKER: &str = "…[TRUNCATED]";

/// What the policy does with a call of one tool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ToolAction {
    /// The call goes ahead as the tool's own policy says.
    #[default]
    Allow,
    /// The call fails `TOOL_DENIED_BY_POLICY`; nothing runs.
    Deny,
    /// The call waits for the caller's approval.
    RequireApproval,
}

impl ToolAction {
    /// The action's configuration name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
            Self::RequireApproval => "require_approval",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "allow" => Some(Self::Allow),
            "deny" => Some(Self::Deny),
            "require_approval" => Some(Self::RequireApproval),
            _ => None,
        }
    }
}

impl fmt::Display for ToolAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The operator's middleware rules, as configured (see the [module docs](self)).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MiddlewareConfig {
    /// Per tool, in order, the first match deciding: `{ tool, action }`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolRuleConfig>,
    /// The action for a tool no rule matches: `allow` (the default), `deny` or
    /// `require_approval`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_action: Option<String>,
    /// Bounds and rewrites of tool arguments.
    #[serde(default, skip_serializing_if = "ArgumentsConfig::is_empty")]
    pub arguments: ArgumentsConfig,
    /// Bounds and redaction of tool results.
    #[serde(default, skip_serializing_if = "ResultsConfig::is_empty")]
    pub results: ResultsConfig,
    /// Caps per execution; they narrow the service's run limits.
    #[serde(default, skip_serializing_if = "MiddlewareLimits::is_empty")]
    pub limits: MiddlewareLimits,
}

/// One rule of [`MiddlewareConfig::tools`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolRuleConfig {
    /// A tool id, or a pattern (`*` any run of characters, `?` one character).
    pub tool: String,
    /// `allow`, `deny` or `require_approval`.
    pub action: String,
}

/// [`MiddlewareConfig::arguments`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ArgumentsConfig {
    /// The largest arguments, in bytes of serialized JSON, as the model sent them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<usize>,
    /// Rewrites, each applying to the tools its pattern matches, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rewrite: Vec<RewriteConfig>,
}

impl ArgumentsConfig {
    fn is_empty(&self) -> bool {
        self.max_bytes.is_none() && self.rewrite.is_empty()
    }
}

/// One rule of [`ArgumentsConfig::rewrite`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RewriteConfig {
    /// A tool id or pattern.
    pub tool: String,
    /// Top-level fields to put (replacing any given).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set: BTreeMap<String, Value>,
    /// Top-level fields to drop.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
}

/// [`MiddlewareConfig::results`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResultsConfig {
    /// The largest result the model sees, in bytes of JSON; larger ones are truncated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<usize>,
    /// What is redacted from results before the model sees them.
    #[serde(default, skip_serializing_if = "RedactConfig::is_empty")]
    pub redact: RedactConfig,
}

impl ResultsConfig {
    fn is_empty(&self) -> bool {
        self.max_bytes.is_none() && self.redact.is_empty()
    }
}

/// [`ResultsConfig::redact`]: compiled by a [`ResultRedactor`] provider
/// (`harness_layers::middleware`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RedactConfig {
    /// Exact strings to redact (credentials).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// Named regular expressions to redact.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub patterns: BTreeMap<String, String>,
    /// Also the redactor's built-in rules (API keys, bearer tokens, ...).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub builtin: bool,
}

impl RedactConfig {
    /// Whether nothing is to be redacted.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty() && self.patterns.is_empty() && !self.builtin
    }
}

/// [`MiddlewareConfig::limits`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MiddlewareLimits {
    /// Model requests per execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_turns: Option<u32>,
    /// Tool calls per execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_calls: Option<u32>,
}

impl MiddlewareLimits {
    fn is_empty(&self) -> bool {
        self.max_model_turns.is_none() && self.max_tool_calls.is_none()
    }
}

/// Redacts tool results before the model sees them; implemented by the project's redactor
/// (`harness_layers::redaction::Redactor`).
pub trait ResultRedactor: Send + Sync + fmt::Debug {
    /// Redacts every string of `value` in place; `true` if anything changed.
    fn redact_value(&self, value: &mut Value) -> bool;
    /// `text` redacted, or `None` when nothing matched.
    fn redact_text(&self, text: &str) -> Option<String>;
}

/// A [`MiddlewareConfig`] that does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("middleware rule `{rule}`: {reason}")]
pub struct InvalidMiddleware {
    /// Where the rule is (`tools[2]`, `arguments.maxBytes`, ...).
    pub rule: String,
    /// What is wrong and what would be right.
    pub reason: String,
}

impl InvalidMiddleware {
    fn new(rule: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            rule: rule.into(),
            reason: reason.into(),
        }
    }
}

/// The compiled middleware policy (the contract's `PortableMiddlewarePolicy`); see the
/// [module docs](self). The default allows everything and costs nothing per call. Cloning
/// shares the compiled rules.
#[derive(Clone, Default)]
pub struct PortableMiddlewarePolicy {
    inner: Option<Arc<Compiled>>,
}

#[derive(Debug)]
struct Compiled {
    config: MiddlewareConfig,
    /// Rules without a wildcard, by id: the index of the first such rule.
    exact: HashMap<Box<str>, usize>,
    rules: Vec<(Glob, ToolAction)>,
    default: ToolAction,
    max_argument_bytes: Option<usize>,
    rewrites: Vec<(Glob, Arc<Rewrite>)>,
    max_result_bytes: Option<usize>,
    redactor: Option<Arc<dyn ResultRedactor>>,
    limits: RunLimits,
}

/// The rewrite of one tool's arguments: fields to drop, then fields to put.
#[derive(Debug, Default, PartialEq)]
struct Rewrite {
    remove: Vec<String>,
    set: Vec<(String, Value)>,
}

impl Rewrite {
    fn apply(&self, arguments: &mut Value) {
        let Value::Object(map) = arguments else {
            return;
        };
        for field in &self.remove {
            map.remove(field);
        }
        for (field, value) in &self.set {
            map.insert(field.clone(), value.clone());
        }
    }
}

/// What the policy decided for one tool: its action, the rule that decided it, and what it
/// does to the tool's arguments and results. Made once per tool (a handle keeps it), so a
/// call costs no matching.
#[derive(Clone, Default)]
pub struct ToolDecision {
    action: ToolAction,
    /// The deciding rule: its index and pattern (`None`: the default action).
    rule: Option<(usize, Box<str>)>,
    rewrite: Option<Arc<Rewrite>>,
    policy: Option<Arc<Compiled>>,
}

impl fmt::Debug for ToolDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolDecision")
            .field("action", &self.action)
            .field("rule", &self.rule)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for PortableMiddlewarePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            None => f.write_str("PortableMiddlewarePolicy(allow all)"),
            Some(c) => f
                .debug_struct("PortableMiddlewarePolicy")
                .field("config", &c.config)
                .field("redactor", &c.redactor.is_some())
                .finish(),
        }
    }
}

impl PartialEq for PortableMiddlewarePolicy {
    fn eq(&self, other: &Self) -> bool {
        match (&self.inner, &other.inner) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl PortableMiddlewarePolicy {
    /// The policy that allows everything (the default).
    #[must_use]
    pub const fn allow_all() -> Self {
        Self { inner: None }
    }

    /// Compiles `config`.
    ///
    /// # Errors
    /// An [`InvalidMiddleware`] naming the first rule that is wrong: a bad pattern, an unknown
    /// action, a duplicate pattern, a zero bound, an empty rewrite; and a configuration that
    /// asks for redaction (this crate cannot redact: use `harness_layers::middleware::compile`,
    /// or [`compile_with`](Self::compile_with)).
    pub fn compile(config: &MiddlewareConfig) -> Result<Self, InvalidMiddleware> {
        Self::compile_with(config, |_| {
            Err("this build has no redactor: compile the policy with \
                 `harness_layers::middleware::compile`, or leave `results.redact` out"
                .to_owned())
        })
    }

    /// Compiles `config`, making the result redactor (when `results.redact` asks for one)
    /// with `redactor`, whose error names what is wrong.
    ///
    /// # Errors
    /// As [`compile`](Self::compile); `redactor`'s error as the rule `results.redact`.
    pub fn compile_with(
        config: &MiddlewareConfig,
        redactor: impl FnOnce(&RedactConfig) -> Result<Arc<dyn ResultRedactor>, String>,
    ) -> Result<Self, InvalidMiddleware> {
        if *config == MiddlewareConfig::default() {
            return Ok(Self::allow_all());
        }
        if config.tools.len() > MAX_RULES || config.arguments.rewrite.len() > MAX_RULES {
            return Err(InvalidMiddleware::new(
                if config.tools.len() > MAX_RULES {
                    "tools"
                } else {
                    "arguments.rewrite"
                },
                format!("more than {MAX_RULES} rules: merge them with patterns"),
            ));
        }
        let mut exact = HashMap::new();
        let mut rules = Vec::with_capacity(config.tools.len());
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, rule) in config.tools.iter().enumerate() {
            let name = format!("tools[{i}]");
            let glob = Glob::new(&rule.tool)
                .map_err(|e| InvalidMiddleware::new(&name, format!("`{}`: {e}", rule.tool)))?;
            let action = ToolAction::parse(&rule.action).ok_or_else(|| {
                InvalidMiddleware::new(
                    &name,
                    format!(
                        "unknown action `{}` for `{}`: give `allow`, `deny` or \
                         `require_approval`",
                        rule.action, rule.tool
                    ),
                )
            })?;
            if let Some(first) = seen.insert(&rule.tool, i) {
                return Err(InvalidMiddleware::new(
                    &name,
                    format!(
                        "`{}` is already the pattern of tools[{first}], which decides first: \
                         remove one",
                        rule.tool
                    ),
                ));
            }
            if glob.is_exact() {
                exact.entry(rule.tool.as_str().into()).or_insert(i);
            }
            rules.push((glob, action));
        }
        let default = match &config.default_action {
            None => ToolAction::Allow,
            Some(a) => ToolAction::parse(a).ok_or_else(|| {
                InvalidMiddleware::new(
                    "defaultAction",
                    format!("unknown action `{a}`: give `allow`, `deny` or `require_approval`"),
                )
            })?,
        };
        let mut rewrites = Vec::with_capacity(config.arguments.rewrite.len());
        for (i, rule) in config.arguments.rewrite.iter().enumerate() {
            let name = format!("arguments.rewrite[{i}]");
            let glob = Glob::new(&rule.tool)
                .map_err(|e| InvalidMiddleware::new(&name, format!("`{}`: {e}", rule.tool)))?;
            if rule.set.is_empty() && rule.remove.is_empty() {
                return Err(InvalidMiddleware::new(
                    &name,
                    format!(
                        "the rewrite of `{}` neither sets nor removes a field: give `set`, \
                         `remove`, or drop the rule",
                        rule.tool
                    ),
                ));
            }
            if let Some(both) = rule.remove.iter().find(|f| rule.set.contains_key(*f)) {
                return Err(InvalidMiddleware::new(
                    &name,
                    format!("`{both}` is both set and removed: keep one"),
                ));
            }
            if let Some(empty) = rule
                .remove
                .iter()
                .chain(rule.set.keys())
                .find(|f| f.is_empty())
            {
                return Err(InvalidMiddleware::new(
                    &name,
                    format!("a field name is empty ({empty:?}): name a top-level field"),
                ));
            }
            rewrites.push((
                glob,
                Arc::new(Rewrite {
                    remove: rule.remove.clone(),
                    set: rule
                        .set
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                }),
            ));
        }
        let positive = |value: Option<usize>, rule: &str| match value {
            Some(0) => Err(InvalidMiddleware::new(
                rule,
                "0 bytes: give at least 1, or leave it out for no bound",
            )),
            v => Ok(v),
        };
        let max_argument_bytes = positive(config.arguments.max_bytes, "arguments.maxBytes")?;
        let max_result_bytes = positive(config.results.max_bytes, "results.maxBytes")?;
        if max_result_bytes.is_some_and(|n| n < 64) {
            return Err(InvalidMiddleware::new(
                "results.maxBytes",
                "less than 64 bytes leaves no room for the truncation marker: give at least 64",
            ));
        }
        let mut limits = RunLimits::none();
        if let Some(turns) = config.limits.max_model_turns {
            limits = limits
                .with_max_model_turns(turns)
                .map_err(|e| InvalidMiddleware::new("limits.maxModelTurns", e.message()))?;
        }
        if let Some(calls) = config.limits.max_tool_calls {
            limits = limits
                .with_max_tool_calls(calls)
                .map_err(|e| InvalidMiddleware::new("limits.maxToolCalls", e.message()))?;
        }
        let redactor = if config.results.redact.is_empty() {
            None
        } else {
            Some(
                redactor(&config.results.redact)
                    .map_err(|e| InvalidMiddleware::new("results.redact", e))?,
            )
        };
        Ok(Self {
            inner: Some(Arc::new(Compiled {
                config: config.clone(),
                exact,
                rules,
                default,
                max_argument_bytes,
                rewrites,
                max_result_bytes,
                redactor,
                limits,
            })),
        })
    }

    /// Redacts results with `redactor` too (replacing a configured one).
    #[must_use]
    pub fn with_result_redactor(self, redactor: Arc<dyn ResultRedactor>) -> Self {
        let mut compiled = match self.inner {
            Some(c) => Arc::unwrap_or_clone(c),
            None => Compiled::empty(),
        };
        compiled.redactor = Some(redactor);
        Self {
            inner: Some(Arc::new(compiled)),
        }
    }

    /// Whether the policy allows everything and changes nothing.
    #[must_use]
    pub fn is_allow_all(&self) -> bool {
        self.inner.is_none()
    }

    /// The configuration it was compiled from (empty for [`allow_all`](Self::allow_all)).
    #[must_use]
    pub fn config(&self) -> MiddlewareConfig {
        self.inner
            .as_ref()
            .map(|c| c.config.clone())
            .unwrap_or_default()
    }

    /// The caps as run limits, to narrow the service's with.
    #[must_use]
    pub fn limits(&self) -> RunLimits {
        self.inner
            .as_ref()
            .map_or_else(RunLimits::none, |c| c.limits)
    }

    /// Whether results are redacted.
    #[must_use]
    pub fn redacts_results(&self) -> bool {
        self.inner.as_ref().is_some_and(|c| c.redactor.is_some())
    }

    /// What the policy does with calls of the tool `id` (a tool id, or the name an adapter
    /// gives a harness's own tool).
    #[must_use]
    pub fn decide(&self, id: &str) -> ToolDecision {
        let Some(c) = &self.inner else {
            return ToolDecision::default();
        };
        // The first matching rule: an exact rule is a candidate, a glob before it may win.
        let exact = c.exact.get(id).copied();
        let upto = exact.unwrap_or(c.rules.len());
        let found = c.rules[..upto]
            .iter()
            .position(|(glob, _)| !glob.is_exact() && glob.matches(id))
            .or(exact);
        let (action, rule) = match found {
            Some(i) => (c.rules[i].1, Some((i, c.rules[i].0.as_str().into()))),
            None => (c.default, None),
        };
        let mut matching = c.rewrites.iter().filter(|(g, _)| g.matches(id));
        let rewrite = match (matching.next(), matching.next()) {
            (None, _) => None,
            (Some((_, one)), None) => Some(Arc::clone(one)),
            (Some((_, first)), Some((_, second))) => {
                let mut merged = Rewrite::default();
                for r in [first, second].into_iter().chain(matching.map(|(_, r)| r)) {
                    merged.remove.extend(r.remove.iter().cloned());
                    merged.set.retain(|(k, _)| !r.remove.contains(k));
                    merged.set.extend(r.set.iter().cloned());
                }
                Some(Arc::new(merged))
            }
        };
        ToolDecision {
            action,
            rule,
            rewrite,
            policy: Some(Arc::clone(c)),
        }
    }
}

impl Compiled {
    fn empty() -> Self {
        Self {
            config: MiddlewareConfig::default(),
            exact: HashMap::new(),
            rules: Vec::new(),
            default: ToolAction::Allow,
            max_argument_bytes: None,
            rewrites: Vec::new(),
            max_result_bytes: None,
            redactor: None,
            limits: RunLimits::none(),
        }
    }
}

impl Clone for Compiled {
    fn clone(&self) -> Self {
        Self {
            config: self.config.clone(),
            exact: self.exact.clone(),
            rules: self.rules.clone(),
            default: self.default,
            max_argument_bytes: self.max_argument_bytes,
            rewrites: self.rewrites.clone(),
            max_result_bytes: self.max_result_bytes,
            redactor: self.redactor.clone(),
            limits: self.limits,
        }
    }
}

impl ToolDecision {
    /// The action.
    #[must_use]
    pub fn action(&self) -> ToolAction {
        self.action
    }

    /// The pattern of the rule that decided (`None`: the default action).
    #[must_use]
    pub fn rule(&self) -> Option<&str> {
        self.rule.as_ref().map(|(_, p)| &**p)
    }

    /// Whether the decision changes anything about a call (so a handle can skip it).
    #[must_use]
    pub fn is_noop(&self) -> bool {
        self.policy.as_ref().is_none_or(|c| {
            self.action == ToolAction::Allow
                && self.rewrite.is_none()
                && c.max_argument_bytes.is_none()
                && c.max_result_bytes.is_none()
                && c.redactor.is_none()
        })
    }

    /// The failure of a denied call of `tool`.
    #[must_use]
    pub fn denial(&self, tool: &str) -> BoundedFailure {
        let by = match &self.rule {
            Some((i, pattern)) => format!("rule tools[{i}] (`{pattern}`)"),
            None => "its default action".to_owned(),
        };
        BoundedFailure::new(format!(
            "the call to tool `{tool}` was denied by the operator's middleware policy ({by}); \
             it did not run: do not call it again"
        ))
        .with_code(ErrorCode::TOOL_DENIED_BY_POLICY)
    }

    /// Admits a call of `tool`: `Err` with the failure to return (denied, or arguments past
    /// the cap), else the arguments rewritten.
    ///
    /// # Errors
    /// The failure the call ends with; nothing must run.
    pub fn admit(&self, tool: &str, mut arguments: Value) -> Result<Value, BoundedFailure> {
        let Some(c) = &self.policy else {
            return Ok(arguments);
        };
        if self.action == ToolAction::Deny {
            return Err(self.denial(tool));
        }
        if let Some(limit) = c.max_argument_bytes
            && json_len_over(&arguments, limit)
        {
            return Err(BoundedFailure::new(format!(
                "the arguments of the call to tool `{tool}` are larger than the operator's \
                 limit of {limit} bytes of JSON; it did not run: send smaller arguments"
            ))
            .with_code(ErrorCode::TOOL_ARGUMENTS_TOO_LARGE));
        }
        if let Some(rewrite) = &self.rewrite {
            rewrite.apply(&mut arguments);
        }
        Ok(arguments)
    }

    /// An outcome as the model is to see it: redacted, then a success past the cap
    /// truncated (see the [module docs](self)). An action passes unchanged.
    #[must_use]
    pub fn result(&self, outcome: ToolOutcome) -> ToolOutcome {
        let Some(c) = &self.policy else {
            return outcome;
        };
        match outcome {
            ToolOutcome::Success(mut value) => {
                if let Some(redactor) = &c.redactor {
                    redactor.redact_value(&mut value);
                }
                if let Some(limit) = c.max_result_bytes {
                    value = truncated(value, limit);
                }
                ToolOutcome::Success(value)
            }
            ToolOutcome::Failure(failure) => match c
                .redactor
                .as_ref()
                .and_then(|r| r.redact_text(failure.message()))
            {
                Some(message) => ToolOutcome::Failure(
                    BoundedFailure::new(message)
                        .with_code(failure.code().clone())
                        .with_retryable(failure.retryable()),
                ),
                None => ToolOutcome::Failure(failure),
            },
            action @ ToolOutcome::Action(_) => action,
        }
    }
}

/// Whether `value`'s JSON is longer than `limit` bytes; stops counting past it.
pub(crate) fn json_len_over(value: &Value, limit: usize) -> bool {
    struct Counter {
        left: usize,
    }
    // Fails once past the limit, so a huge value is not written whole.
    impl io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.left = self
                .left
                .checked_sub(buf.len())
                .ok_or_else(|| io::Error::other("over the limit"))?;
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    serde_json::to_writer(&mut Counter { left: limit }, value).is_err()
}

/// `value` as is when its JSON fits `limit` bytes, else a string of its JSON's first bytes,
/// the marker and the original size, at most `limit` bytes of JSON text before escaping.
fn truncated(value: Value, limit: usize) -> Value {
    if !json_len_over(&value, limit) {
        return value;
    }
    let text = serde_json::to_string(&value).unwrap_or_default();
    let suffix = format!("{TRUNCATION_MARKER} ({} bytes)", text.len());
    let mut keep = limit.saturating_sub(suffix.len());
    while !text.is_char_boundary(keep) {
        keep -= 1;
    }
    let mut out = String::with_capacity(keep + suffix.len());
    out.push_str(&text[..keep]);
    out.push_str(&suffix);
    Value::String(out)
}

#[cfg(test)]
mod tests;
