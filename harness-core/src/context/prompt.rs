//! [`PromptTemplate`] (the operator's instance prompt) and [`RenderedPrompt`] (what the
//! adapter receives).
//!
//! The template language is deliberately tiny and strict, so that rendering is total and
//! bounded and no request can reach anything but the values it fills:
//!
//! - `{{name}}` (spaces inside allowed: `{{ name }}`) is replaced by the parameter's value;
//!   `name` is 1 to 64 ASCII letters, digits or `_`, not starting with a digit;
//! - `{{{{` is a literal `{{`; a `}}` outside a placeholder is literal text;
//! - any other `{{` (unclosed, or around something that is not a name) is refused when the
//!   template is compiled, as is a placeholder of an undeclared parameter and a declared
//!   parameter the template never uses;
//! - values are inserted verbatim in one pass: a value that contains `{{x}}` is text, never
//!   a placeholder;
//! - a value may hold any character but control characters other than newline and tab,
//!   and at most its parameter's `maxBytes` (1,024 by default, at most [`MAX_VALUE_BYTES`]);
//! - the compiled template's largest rendering (its text, and every placeholder at its
//!   parameter's `maxBytes`) must fit [`MAX_RENDERED_BYTES`], so a render never fails for
//!   size.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{ErrorCategory, ErrorCode, HarnessError};

/// The longest template accepted, in bytes.
pub const MAX_TEMPLATE_BYTES: usize = 64 * 1024;
/// The largest `maxBytes` a parameter may declare.
pub const MAX_VALUE_BYTES: usize = 16 * 1024;
/// The largest rendering a template may produce (checked when it is compiled).
pub const MAX_RENDERED_BYTES: usize = 256 * 1024;
/// The most parameters a template may declare.
const MAX_PARAMETERS: usize = 64;
/// A parameter's `maxBytes` when it declares none.
const DEFAULT_VALUE_BYTES: usize = 1024;
const MAX_NAME_CHARS: usize = 64;

/// The operator's instance prompt as configured (`[<adapter>.prompt]` in `harness.toml`):
/// compile it with [`PromptTemplate::compile`].
///
/// ```
/// use harness_core::context::{PromptConfig, PromptTemplate};
///
/// let config: PromptConfig = serde_json::from_value(serde_json::json!({
///     "template": "You help the {{team}} team. Answer in {{ language }}.",
///     "parameters": {
///         "team": { "required": true, "maxBytes": 40 },
///         "language": { "default": "English" }
///     }
/// }))?;
/// let template = PromptTemplate::compile(&config)?;
/// let values = [("team".to_owned(), "payments".to_owned())].into();
/// let rendered = template.render(&values)?;
/// assert_eq!(rendered.as_str(), "You help the payments team. Answer in English.");
///
/// // The request's mistakes are named.
/// let unknown = [("tema".to_owned(), "x".to_owned())].into();
/// let err = template.render(&unknown).unwrap_err();
/// assert_eq!(err.code().as_str(), "PROMPT_PARAMETER_INVALID");
/// assert!(err.message().contains("unknown prompt parameter `tema`"), "{}", err.message());
/// let err = template.render(&Default::default()).unwrap_err();
/// assert!(err.message().contains("`team` is required"), "{}", err.message());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PromptConfig {
    /// The template: text with `{{name}}` placeholders.
    pub template: String,
    /// The parameters the template uses, by name.
    #[serde(default)]
    pub parameters: BTreeMap<String, ParameterSpec>,
}

/// One parameter of a [`PromptConfig`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ParameterSpec {
    /// Whether a request must fill it (then it has no default).
    #[serde(default)]
    pub required: bool,
    /// The value when the request does not fill it (empty when it has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// The longest value accepted, in UTF-8 bytes (1,024 when absent; at most
    /// [`MAX_VALUE_BYTES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Parameter(String),
}

/// A compiled instance prompt: what the service renders for each request
/// ([`AdapterServiceBuilder::prompt`](crate::service::AdapterServiceBuilder::prompt)). The
/// language: `{{name}}` is a named parameter, `{{{{` a literal `{{`; nothing else is special.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptTemplate {
    parts: Vec<Part>,
    parameters: BTreeMap<String, ParameterSpec>,
}

fn operator(message: &str) -> HarnessError {
    HarnessError::new(
        ErrorCategory::Configuration,
        format!("the prompt template is invalid: {message}"),
    )
}

fn request(message: String) -> HarnessError {
    HarnessError::new(ErrorCategory::Configuration, message)
        .with_code(ErrorCode::PROMPT_PARAMETER_INVALID)
}

fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.chars().count() <= MAX_NAME_CHARS
}

/// A caller's string, bounded for an error message.
fn shown(value: &str) -> String {
    const SHOWN: usize = 64;
    match value.char_indices().nth(SHOWN) {
        Some((end, _)) => format!("{}…", &value[..end]),
        None => value.to_owned(),
    }
}

/// The first character a value may not hold: a control character other than `\n` and `\t`.
fn forbidden_char(value: &str) -> Option<char> {
    value
        .chars()
        .find(|&c| c.is_control() && c != '\n' && c != '\t')
}

impl ParameterSpec {
    fn max_bytes(&self) -> usize {
        self.max_bytes.unwrap_or(DEFAULT_VALUE_BYTES)
    }
}

/// Splits `template` into text and placeholders.
fn parse(template: &str) -> Result<Vec<Part>, HarnessError> {
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        text.push_str(&rest[..open]);
        let at = template.len() - rest.len() + open;
        let after = &rest[open + 2..];
        if let Some(literal) = after.strip_prefix("{{") {
            text.push_str("{{");
            rest = literal;
            continue;
        }
        let Some(close) = after.find("}}") else {
            return Err(operator(&format!(
                "`{{{{` at byte {at} is never closed: write `{{{{name}}}}`, or `{{{{{{{{` for a \
                 literal `{{{{`"
            )));
        };
        let name = after[..close].trim_matches(' ');
        if !is_name(name) {
            return Err(operator(&format!(
                "`{{{{{}}}}}` at byte {at} does not name a parameter: a name is 1 to \
                 {MAX_NAME_CHARS} letters, digits or `_`, not starting with a digit (`{{{{{{{{` \
                 is a literal `{{{{`)",
                shown(&after[..close])
            )));
        }
        if !text.is_empty() {
            parts.push(Part::Text(std::mem::take(&mut text)));
        }
        parts.push(Part::Parameter(name.to_owned()));
        rest = &after[close + 2..];
    }
    text.push_str(rest);
    if !text.is_empty() {
        parts.push(Part::Text(text));
    }
    Ok(parts)
}

impl PromptTemplate {
    /// Compiles the operator's `config`.
    ///
    /// # Errors
    /// `configuration`, naming the problem: a template over [`MAX_TEMPLATE_BYTES`], a `{{`
    /// that opens no placeholder, a placeholder of an undeclared parameter, a declared
    /// parameter the template never uses, a parameter name that is not a name, a required
    /// parameter with a default, a `maxBytes` of 0 or over [`MAX_VALUE_BYTES`], a default
    /// over its `maxBytes` or with a control character, more than 64 parameters, or a
    /// largest rendering over [`MAX_RENDERED_BYTES`].
    pub fn compile(config: &PromptConfig) -> Result<Self, HarnessError> {
        if config.template.len() > MAX_TEMPLATE_BYTES {
            return Err(operator(&format!(
                "it is {} bytes, more than the {MAX_TEMPLATE_BYTES} allowed",
                config.template.len()
            )));
        }
        if config.parameters.len() > MAX_PARAMETERS {
            return Err(operator(&format!(
                "it declares {} parameters, more than the {MAX_PARAMETERS} allowed",
                config.parameters.len()
            )));
        }
        for (name, spec) in &config.parameters {
            if !is_name(name) {
                return Err(operator(&format!(
                    "parameter {:?} is not a name: 1 to {MAX_NAME_CHARS} letters, digits or `_`, \
                     not starting with a digit",
                    shown(name)
                )));
            }
            let max = spec.max_bytes();
            if max == 0 || max > MAX_VALUE_BYTES {
                return Err(operator(&format!(
                    "parameter `{name}` has `maxBytes` {max}: it must be 1 to {MAX_VALUE_BYTES}"
                )));
            }
            if let Some(default) = &spec.default {
                if spec.required {
                    return Err(operator(&format!(
                        "parameter `{name}` is `required` and has a `default`: a required \
                         parameter has none (drop one of the two)"
                    )));
                }
                if default.len() > max {
                    return Err(operator(&format!(
                        "the default of parameter `{name}` is {} bytes, more than its \
                         `maxBytes` {max}",
                        default.len()
                    )));
                }
                if forbidden_char(default).is_some() {
                    return Err(operator(&format!(
                        "the default of parameter `{name}` has a control character"
                    )));
                }
            }
        }
        let parts = parse(&config.template)?;
        let mut largest = 0usize;
        for part in &parts {
            match part {
                Part::Text(text) => largest += text.len(),
                Part::Parameter(name) => match config.parameters.get(name) {
                    Some(spec) => largest += spec.max_bytes(),
                    None => {
                        return Err(operator(&format!(
                            "it uses `{{{{{name}}}}}`, which is not declared: declare it under \
                             `parameters`"
                        )));
                    }
                },
            }
        }
        for name in config.parameters.keys() {
            if !parts
                .iter()
                .any(|p| matches!(p, Part::Parameter(n) if n == name))
            {
                return Err(operator(&format!(
                    "parameter `{name}` is declared but the template never uses it"
                )));
            }
        }
        if largest > MAX_RENDERED_BYTES {
            return Err(operator(&format!(
                "its largest rendering (its text, each placeholder at its `maxBytes`) is \
                 {largest} bytes, more than the {MAX_RENDERED_BYTES} allowed: lower `maxBytes`"
            )));
        }
        Ok(Self {
            parts,
            parameters: config.parameters.clone(),
        })
    }

    /// The declared parameters' names, in order.
    pub fn parameters(&self) -> impl Iterator<Item = &str> {
        self.parameters.keys().map(String::as_str)
    }

    /// Checks `values` (the request's `promptParameters`) without rendering.
    ///
    /// # Errors
    /// As [`render`](Self::render).
    pub fn check(&self, values: &BTreeMap<String, String>) -> Result<(), HarnessError> {
        for (name, value) in values {
            let Some(spec) = self.parameters.get(name) else {
                let known: Vec<&str> = self.parameters().collect();
                return Err(request(format!(
                    "unknown prompt parameter `{}`; this instance's prompt takes: {}",
                    shown(name),
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                )));
            };
            let max = spec.max_bytes();
            if value.len() > max {
                return Err(request(format!(
                    "prompt parameter `{name}` is {} bytes, more than its limit of {max}",
                    value.len()
                )));
            }
            if let Some(c) = forbidden_char(value) {
                return Err(request(format!(
                    "prompt parameter `{name}` holds the control character U+{:04X}: only \
                     newlines and tabs are allowed",
                    u32::from(c)
                )));
            }
        }
        for (name, spec) in &self.parameters {
            if spec.required && !values.contains_key(name) {
                return Err(request(format!(
                    "prompt parameter `{name}` is required: give it in `promptParameters`"
                )));
            }
        }
        Ok(())
    }

    /// The prompt for a request that fills `values`; total once [`check`](Self::check)
    /// passes, and never larger than [`MAX_RENDERED_BYTES`].
    ///
    /// # Errors
    /// `configuration`, `PROMPT_PARAMETER_INVALID`, naming the parameter: an unknown one, a
    /// required one missing, a value over its `maxBytes` or holding a control character
    /// other than newline and tab.
    pub fn render(
        &self,
        values: &BTreeMap<String, String>,
    ) -> Result<RenderedPrompt, HarnessError> {
        self.check(values)?;
        let mut text = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => text.push_str(t),
                Part::Parameter(name) => {
                    let value = values
                        .get(name)
                        .or_else(|| self.parameters.get(name).and_then(|s| s.default.as_ref()));
                    text.push_str(value.map_or("", String::as_str));
                }
            }
        }
        Ok(RenderedPrompt { text })
    }
}

/// The instance prompt rendered for one execution by the engine (the operator's
/// [`PromptTemplate`] with the request's parameters): what the adapter receives in
/// [`RuntimeContext::prompt`](crate::adapter::RuntimeContext::prompt). A model loop makes
/// it its system message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RenderedPrompt {
    text: String,
}

impl RenderedPrompt {
    /// A prompt of `text` (for adapters' tests; the service renders its own).
    #[must_use]
    pub fn new(text: impl Into<String>) -> Self {
        Self { text: text.into() }
    }

    /// The prompt's text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The prompt's text, by value.
    #[must_use]
    pub fn into_string(self) -> String {
        self.text
    }
}

impl std::fmt::Display for RenderedPrompt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(template: &str, parameters: serde_json::Value) -> PromptConfig {
        let mut config = serde_json::json!({"template": template});
        config["parameters"] = parameters;
        serde_json::from_value(config).unwrap()
    }

    fn values(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn compile_err(template: &str, parameters: serde_json::Value) -> String {
        PromptTemplate::compile(&config(template, parameters))
            .unwrap_err()
            .message()
            .to_owned()
    }

    #[test]
    fn values_are_inserted_once_and_never_read_as_placeholders() {
        let t = PromptTemplate::compile(&config(
            "{{a}}-{{ b }}-{{a}} {{{{literal}} }}",
            serde_json::json!({"a": {}, "b": {"default": "B"}}),
        ))
        .unwrap();
        let r = t.render(&values(&[("a", "{{b}}")])).unwrap();
        assert_eq!(r.as_str(), "{{b}}-B-{{b}} {{literal}} }}");
        // An optional parameter with no default renders empty.
        let t = PromptTemplate::compile(&config("[{{x}}]", serde_json::json!({"x": {}}))).unwrap();
        assert_eq!(t.render(&values(&[])).unwrap().as_str(), "[]");
        // A template without parameters is a fixed prompt.
        let t = PromptTemplate::compile(&config("Be brief.", serde_json::json!({}))).unwrap();
        assert_eq!(t.render(&values(&[])).unwrap().as_str(), "Be brief.");
    }

    #[test]
    fn the_operator_s_mistakes_are_named() {
        assert!(compile_err("{{a", serde_json::json!({"a": {}})).contains("never closed"));
        assert!(
            compile_err("{{a b}}", serde_json::json!({})).contains("does not name a parameter")
        );
        assert!(compile_err("{{9x}}", serde_json::json!({})).contains("does not name"));
        assert!(
            compile_err("{{a}}", serde_json::json!({})).contains("`{{a}}`, which is not declared")
        );
        assert!(compile_err("x", serde_json::json!({"a": {}})).contains("`a` is declared but"));
        assert!(
            compile_err(
                "{{a}}",
                serde_json::json!({"a": {"required": true, "default": "x"}})
            )
            .contains("is `required` and has a `default`")
        );
        assert!(
            compile_err("{{a}}", serde_json::json!({"a": {"maxBytes": 0}}))
                .contains("`maxBytes` 0")
        );
        assert!(
            compile_err(
                "{{a}}",
                serde_json::json!({"a": {"maxBytes": 2, "default": "abc"}})
            )
            .contains("more than its `maxBytes` 2")
        );
        let many: String = (0..20).map(|i| format!("{{{{p{i}}}}}")).collect();
        let params: serde_json::Map<_, _> = (0..20)
            .map(|i| {
                (
                    format!("p{i}"),
                    serde_json::json!({"maxBytes": MAX_VALUE_BYTES}),
                )
            })
            .collect();
        assert!(compile_err(&many, params.into()).contains("largest rendering"));
        let huge = "x".repeat(MAX_TEMPLATE_BYTES + 1);
        assert!(compile_err(&huge, serde_json::json!({})).contains("more than the 65536 allowed"));
        let err = serde_json::from_value::<PromptConfig>(serde_json::json!({
            "template": "x", "parameters": {"a": {"requird": true}}
        }))
        .unwrap_err();
        assert!(err.to_string().contains("unknown field `requird`"), "{err}");
    }

    #[test]
    fn the_request_s_mistakes_are_named() {
        let t = PromptTemplate::compile(&config(
            "{{who}}: {{what}}",
            serde_json::json!({"who": {"required": true, "maxBytes": 8}, "what": {}}),
        ))
        .unwrap();
        let msg = |v: &[(&str, &str)]| t.render(&values(v)).unwrap_err().message().to_owned();
        assert!(msg(&[("what", "x")]).contains("`who` is required"));
        assert!(
            msg(&[("who", "123456789")]).contains("`who` is 9 bytes, more than its limit of 8")
        );
        assert!(msg(&[("who", "a\u{7}")]).contains("U+0007"));
        assert!(
            msg(&[("who", "a"), ("whom", "b")]).contains(
                "unknown prompt parameter `whom`; this instance's prompt takes: what, who"
            )
        );
        assert_eq!(
            t.render(&values(&[("who", "a\tb\nc")])).unwrap().as_str(),
            "a\tb\nc: "
        );
        let err = t
            .render(&values(&[("who", "")]))
            .map(|_| ())
            .and_then(|()| t.check(&values(&[("x", "")])));
        assert_eq!(
            err.unwrap_err().code(),
            &ErrorCode::PROMPT_PARAMETER_INVALID
        );
    }
}
