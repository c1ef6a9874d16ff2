//! The script: a list of [`Step`]s, its JSON form, its builder and its validation.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use harness_core::action::{
    ApprovalRequest, DecisionKind, FormField, FormRequest, ToolCallApproval,
};
use harness_core::artifact::ArtifactDescriptor;
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::event::{NativeEvent, ToolCall, ToolCallOutcome, Usage};
use harness_core::id::{ActionId, ArtifactId, ExecutionId, ToolCallId};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// The namespace of `native` steps that name none.
pub const DEFAULT_NAMESPACE: &str = "scripted";

/// The scripted adapter's bundled quickstart script (`scripts/quickstart.json`).
///
/// It streams reasoning and text, reports usage, asks for the approval of one `write_file`
/// call (editable), completes that call, creates a `text/markdown` artifact at
/// `file:///workspace/notes/summary.md` and completes with a summary. [`Script::quickstart`]
/// parses it.
pub const QUICKSTART: &str = include_str!("../scripts/quickstart.json");

// ---------------------------------------------------------------------------------------------
// Steps
// ---------------------------------------------------------------------------------------------

/// One step of a [`Script`].
///
/// On the wire a step is a JSON object tagged by `"type"`; field names are camelCase and
/// unknown fields are refused. See the crate documentation for the whole format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum Step {
    /// Streams `text` as a `message.delta`, `repeat` times (default 1). `{{field}}`
    /// placeholders are filled from submitted form values.
    Text {
        /// The delta.
        text: String,
        /// How many times the same delta is emitted (at least 1); for benchmarks.
        #[serde(default = "one", skip_serializing_if = "is_one")]
        #[schemars(range(min = 1))]
        repeat: u32,
    },
    /// Streams `text` as a `reasoning.delta`, `repeat` times (default 1). `{{field}}`
    /// placeholders are filled from submitted form values.
    Reasoning {
        /// The delta.
        text: String,
        /// How many times the same delta is emitted (at least 1).
        #[serde(default = "one", skip_serializing_if = "is_one")]
        #[schemars(range(min = 1))]
        repeat: u32,
    },
    /// Reports an increment of token usage.
    Usage {
        /// Input (prompt) tokens.
        #[serde(default, skip_serializing_if = "is_zero")]
        input_tokens: u64,
        /// Output (completion) tokens.
        #[serde(default, skip_serializing_if = "is_zero")]
        output_tokens: u64,
        /// Reasoning tokens.
        #[serde(default, skip_serializing_if = "is_zero")]
        reasoning_tokens: u64,
        /// Input tokens served from a cache.
        #[serde(default, skip_serializing_if = "is_zero")]
        cached_input_tokens: u64,
        /// Model requests (turns) this increment covers, as a model-calling adapter reports
        /// them.
        #[serde(default, skip_serializing_if = "is_zero")]
        model_turns: u64,
    },
    /// A tool call that runs without approval: `tool.call.started`, then
    /// `tool.call.completed` with `output` (success) or `failure` (a bounded failure message).
    ToolCall {
        /// The call id, unique within the execution.
        call_id: ToolCallId,
        /// The tool's stable name.
        tool: String,
        /// The arguments (default `{}`).
        #[serde(default = "empty_object")]
        arguments: Value,
        /// The output of a successful call (default `null`).
        #[serde(default, skip_serializing_if = "Value::is_null")]
        output: Value,
        /// When set, the call fails with this message instead (and `output` must be absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<String>,
    },
    /// Asks the caller to approve one or more tool calls: `tool.call.started` for each call,
    /// then the run pauses (the segment ends). On resume each call completes: approved →
    /// success with its `output`; edited → success with output `{"arguments": <edited>}`;
    /// rejected → rejected with the caller's reason; a dismissed approval rejects every call
    /// with reason `dismissed`.
    Approval {
        /// The action id (default: a fresh one each time the step runs).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<ActionId>,
        /// The calls, at least one, with distinct ids.
        #[schemars(length(min = 1))]
        calls: Vec<ApprovalCall>,
    },
    /// Asks the caller to fill a form; the run pauses (the segment ends). On resume the
    /// submitted values fill `{{field}}` placeholders of later `text`, `reasoning` and
    /// `complete` steps.
    Form {
        /// The action id (default: a fresh one each time the step runs).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<ActionId>,
        /// A heading for the form.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        /// The typed fields (none: a plain confirmation).
        #[serde(default)]
        fields: Vec<FormField>,
    },
    /// Creates an artifact; its descriptor names the execution that runs the script.
    Artifact {
        /// The artifact id (default: a fresh one).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<ArtifactId>,
        /// The media type, `type/subtype`.
        media_type: String,
        /// A display name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// Where the bytes live (never a `data:` URI).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        uri: Option<String>,
        /// The size of the bytes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        size_bytes: Option<u64>,
        /// Free-form metadata (at most 16 KiB serialized).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<Value>,
    },
    /// Emits a provider-native event.
    Native {
        /// The namespace (default `scripted`); portable namespaces are refused.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        /// The event name, `[a-z][a-z0-9_.]*`.
        name: String,
        /// The payload.
        #[serde(default, skip_serializing_if = "Value::is_null")]
        payload: Value,
    },
    /// Fails the run with an error of any category (the segment ends).
    Error {
        /// The category.
        category: ErrorCategory,
        /// The safe public message.
        message: String,
        /// A stable SCREAMING_SNAKE code (default: the category's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<ErrorCode>,
        /// The provider's own code: a short identifier `[A-Za-z0-9_.-]{1,64}`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider_code: Option<String>,
        /// Whether a retry may help (default: the category's default).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retryable: Option<bool>,
        /// The advised wait before a retry, in milliseconds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_ms: Option<u64>,
        /// Whether output or side effects may have occurred.
        #[serde(default, skip_serializing_if = "is_false")]
        side_effects: bool,
        /// An internal diagnostic: for operators, never serialized toward clients.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        diagnostic: Option<String>,
    },
    /// Waits `ms` milliseconds (`tokio::time::sleep`); cancellation ends the wait at once.
    Delay {
        /// The wait, in milliseconds.
        ms: u64,
    },
    /// Waits until the run is cancelled; never completes by itself.
    Hang {},
    /// Adds `text` to what the execution's conversation keeps (its thread state, which
    /// later turns of the conversation see, on any replica sharing the store). Fails the run
    /// (`configuration`) when the execution has no conversation, and (`persistence`) when
    /// the state cannot be saved or a concurrent turn of the conversation saved first; a
    /// conversation keeps at most 64 KiB (`configuration` beyond).
    Remember {
        /// What to keep.
        text: String,
    },
    /// Streams what the execution's conversation keeps (the texts of its `remember` steps,
    /// one per line) as one `message.delta`; nothing when it keeps nothing (a new or
    /// cleared conversation). Fails the run as `remember` does.
    Recall {},
    /// Panics with `message` (the control plane must survive it).
    Panic {
        /// The panic message.
        message: String,
    },
    /// Completes the run (the segment ends).
    Complete {
        /// A short summary; `{{field}}` placeholders are filled from submitted form values.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        summary: Option<String>,
    },
    /// A fault: completes the run, then emits one more `message.delta` (a protocol violation).
    EventAfterComplete {},
    /// A fault: ends the stream without completing, failing or pausing (a protocol
    /// violation). Unlike a script that simply runs out of steps, this is never
    /// auto-completed.
    EndWithoutTerminal {},
}

impl Step {
    /// The wire name of the step's type (`text`, `toolCall`, ...).
    #[must_use]
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::Text { .. } => "text",
            Self::Reasoning { .. } => "reasoning",
            Self::Usage { .. } => "usage",
            Self::ToolCall { .. } => "toolCall",
            Self::Approval { .. } => "approval",
            Self::Form { .. } => "form",
            Self::Artifact { .. } => "artifact",
            Self::Native { .. } => "native",
            Self::Error { .. } => "error",
            Self::Delay { .. } => "delay",
            Self::Hang {} => "hang",
            Self::Remember { .. } => "remember",
            Self::Recall {} => "recall",
            Self::Panic { .. } => "panic",
            Self::Complete { .. } => "complete",
            Self::EventAfterComplete {} => "eventAfterComplete",
            Self::EndWithoutTerminal {} => "endWithoutTerminal",
        }
    }

    /// Whether the step ends a run segment (completes, fails, pauses or ends the stream).
    #[must_use]
    pub const fn is_terminal(&self) -> bool {
        matches!(
            self,
            Self::Approval { .. }
                | Self::Form { .. }
                | Self::Error { .. }
                | Self::Complete { .. }
                | Self::EventAfterComplete {}
                | Self::EndWithoutTerminal {}
        )
    }
}

/// One tool call of an [`Step::Approval`].
///
/// ```
/// use harness_scripted::ApprovalCall;
/// use serde_json::json;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let call = ApprovalCall::new("call_1".parse()?, "shell", json!({"cmd": "ls"}))
///     .with_input_schema(json!({"type": "object", "properties": {"cmd": {"type": "string"}}}))
///     .allow_edit()
///     .with_output(json!({"stdout": "README.md"}));
/// assert_eq!(serde_json::to_value(&call)?["allowed"], json!(["approve", "reject", "edit"]));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(description = "One tool call of an `approval` step.")]
pub struct ApprovalCall {
    /// The call id, unique within the approval.
    pub call_id: ToolCallId,
    /// The tool's stable name.
    pub tool: String,
    /// The proposed arguments (default `{}`); they must satisfy `inputSchema`.
    #[serde(default = "empty_object")]
    pub arguments: Value,
    /// The tool's input JSON Schema (default `{"type": "object"}`); edited arguments are
    /// revalidated against it.
    #[serde(default = "object_schema")]
    pub input_schema: Value,
    /// The decisions the caller may take (default `["approve", "reject"]`).
    #[serde(default = "default_allowed")]
    #[schemars(length(min = 1))]
    pub allowed: BTreeSet<DecisionKind>,
    /// The output of the call when approved (default `null`).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub output: Value,
}

impl ApprovalCall {
    /// A call with the default input schema (`{"type": "object"}`), allowing approve and
    /// reject, whose approved output is `null`.
    #[must_use]
    pub fn new(call_id: ToolCallId, tool: impl Into<String>, arguments: Value) -> Self {
        Self {
            call_id,
            tool: tool.into(),
            arguments,
            input_schema: object_schema(),
            allowed: default_allowed(),
            output: Value::Null,
        }
    }

    /// Sets the tool's input schema.
    #[must_use]
    pub fn with_input_schema(mut self, schema: Value) -> Self {
        self.input_schema = schema;
        self
    }

    /// Also allows editing the arguments.
    #[must_use]
    pub fn allow_edit(mut self) -> Self {
        self.allowed.insert(DecisionKind::Edit);
        self
    }

    /// Replaces the allowed decisions.
    #[must_use]
    pub fn with_allowed(mut self, allowed: impl IntoIterator<Item = DecisionKind>) -> Self {
        self.allowed = allowed.into_iter().collect();
        self
    }

    /// Sets the output of the call when approved.
    #[must_use]
    pub fn with_output(mut self, output: Value) -> Self {
        self.output = output;
        self
    }
}

fn one() -> u32 {
    1
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_one(n: &u32) -> bool {
    *n == 1
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_false(b: &bool) -> bool {
    !*b
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

fn object_schema() -> Value {
    serde_json::json!({"type": "object"})
}

fn default_allowed() -> BTreeSet<DecisionKind> {
    BTreeSet::from([DecisionKind::Approve, DecisionKind::Reject])
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// A script could not be read, parsed or validated.
///
/// Problems with one step name its index in the `steps` array (from 0) and its type:
/// `steps[3] (approval): ...`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScriptError {
    /// The script file could not be read.
    #[error("cannot read script file `{}`: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The document is not a script object (`{"steps": [...]}`), or not JSON at all.
    #[error("invalid script: {message}")]
    Document {
        /// What was wrong.
        message: String,
    },
    /// One step is malformed or invalid.
    #[error("steps[{index}] ({kind}): {problem}")]
    Step {
        /// The step's index in `steps`, from 0.
        index: usize,
        /// The step's `type` as written (`?` when missing).
        kind: String,
        /// What was wrong, and what would be right.
        problem: String,
    },
}

impl ScriptError {
    /// The index of the offending step, when one step is at fault.
    #[must_use]
    pub fn step_index(&self) -> Option<usize> {
        match self {
            Self::Step { index, .. } => Some(*index),
            Self::Read { .. } | Self::Document { .. } => None,
        }
    }

    fn step(index: usize, kind: &str, problem: impl Into<String>) -> Self {
        Self::Step {
            index,
            kind: kind.to_owned(),
            problem: problem.into(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Compiled steps
// ---------------------------------------------------------------------------------------------

/// A step checked and turned into what the stream emits; built once per script.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    Delta {
        text: String,
        reasoning: bool,
        repeat: u32,
        templated: bool,
    },
    Usage(Usage),
    ToolCall {
        call: ToolCall,
        outcome: ToolCallOutcome,
    },
    Approval {
        id: Option<ActionId>,
        request: ApprovalRequest,
        /// The approved output of each call, in call order.
        outputs: Vec<Value>,
    },
    Form {
        id: Option<ActionId>,
        request: FormRequest,
    },
    Artifact {
        id: Option<ArtifactId>,
        media_type: String,
        name: Option<String>,
        uri: Option<String>,
        size_bytes: Option<u64>,
        metadata: Map<String, Value>,
    },
    Native(NativeEvent),
    Error(HarnessError),
    Delay(Duration),
    Hang,
    Remember(String),
    Recall,
    Panic(String),
    Complete {
        summary: Option<String>,
        templated: bool,
    },
    EventAfterComplete,
    EndWithoutTerminal,
    /// A step built in code that failed validation: running it fails the run with a
    /// `configuration` error naming the step.
    Invalid(HarnessError),
}

fn is_templated(text: &str) -> bool {
    text.contains("{{")
}

/// The most times one step may repeat its text: one event each, so a request's options
/// cannot ask the service for unbounded work (the service's event limit bounds the whole
/// execution too).
pub const MAX_REPEAT: u32 = 100_000;

/// The most bytes a conversation keeps through `remember` steps.
pub const MAX_MEMORY: usize = 64 * 1024;

fn compile(step: &Step) -> Result<Op, String> {
    Ok(match step {
        Step::Text { text, repeat } | Step::Reasoning { text, repeat } => {
            if *repeat == 0 {
                return Err("`repeat` must be at least 1".to_owned());
            }
            if *repeat > MAX_REPEAT {
                return Err(format!(
                    "`repeat` is at most {MAX_REPEAT} (one event each): split the step, or ask \
                     for less"
                ));
            }
            Op::Delta {
                text: text.clone(),
                reasoning: matches!(step, Step::Reasoning { .. }),
                repeat: *repeat,
                templated: is_templated(text),
            }
        }
        Step::Usage {
            input_tokens,
            output_tokens,
            reasoning_tokens,
            cached_input_tokens,
            model_turns,
        } => Op::Usage(Usage {
            input_tokens: *input_tokens,
            output_tokens: *output_tokens,
            reasoning_tokens: *reasoning_tokens,
            cached_input_tokens: *cached_input_tokens,
            model_turns: *model_turns,
        }),
        Step::ToolCall {
            call_id,
            tool,
            arguments,
            output,
            failure,
        } => {
            if tool.trim().is_empty() {
                return Err(format!(
                    "tool call `{call_id}` has a blank tool name; name the tool being called"
                ));
            }
            let outcome = match failure {
                Some(_) if !output.is_null() => {
                    return Err(format!(
                        "tool call `{call_id}` has both `output` and `failure`; a call either \
                         succeeds with an output or fails with a message"
                    ));
                }
                Some(message) => ToolCallOutcome::Failure {
                    message: message.clone(),
                },
                None => ToolCallOutcome::Success {
                    output: output.clone(),
                },
            };
            Op::ToolCall {
                call: ToolCall {
                    call_id: call_id.clone(),
                    tool: tool.clone(),
                    arguments: arguments.clone(),
                },
                outcome,
            }
        }
        Step::Approval { id, calls } => {
            let mut approvals = Vec::with_capacity(calls.len());
            for call in calls {
                let approval = ToolCallApproval::new(
                    call.call_id.clone(),
                    call.tool.clone(),
                    call.arguments.clone(),
                    call.input_schema.clone(),
                )
                .and_then(|a| a.with_allowed(call.allowed.iter().copied()))
                .map_err(|e| e.to_string())?;
                if let Err(violations) = approval.validate_arguments(&call.arguments) {
                    let listed: Vec<String> = violations.iter().map(ToString::to_string).collect();
                    return Err(format!(
                        "the proposed arguments of tool call `{}` do not satisfy its \
                         `inputSchema`: {}",
                        call.call_id,
                        listed.join("; ")
                    ));
                }
                approvals.push(approval);
            }
            Op::Approval {
                id: id.clone(),
                request: ApprovalRequest::new(approvals).map_err(|e| e.to_string())?,
                outputs: calls.iter().map(|c| c.output.clone()).collect(),
            }
        }
        Step::Form { id, title, fields } => {
            let mut request = FormRequest::new(fields.iter().cloned()).map_err(|e| {
                let problems: Vec<String> = e.problems().iter().map(ToString::to_string).collect();
                format!("invalid form: {}", problems.join("; "))
            })?;
            if let Some(title) = title {
                request = request.with_title(title.clone());
            }
            Op::Form {
                id: id.clone(),
                request,
            }
        }
        Step::Artifact {
            id,
            media_type,
            name,
            uri,
            size_bytes,
            metadata,
        } => {
            let metadata = match metadata {
                None => Map::new(),
                Some(Value::Object(map)) => map.clone(),
                Some(_) => return Err("`metadata` must be a JSON object".to_owned()),
            };
            let op = Op::Artifact {
                id: id.clone(),
                media_type: media_type.clone(),
                name: name.clone(),
                uri: uri.clone(),
                size_bytes: *size_bytes,
                metadata,
            };
            // Check the descriptor now (it does no I/O), so that running the step cannot fail.
            build_artifact(&op, ExecutionId::generate())?;
            op
        }
        Step::Native {
            namespace,
            name,
            payload,
        } => Op::Native(
            NativeEvent::new(
                namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE),
                name,
                payload.clone(),
            )
            .map_err(|e| e.to_string())?,
        ),
        Step::Error {
            category,
            message,
            code,
            provider_code,
            retryable,
            retry_after_ms,
            side_effects,
            diagnostic,
        } => {
            let mut error =
                HarnessError::new(*category, message.clone()).with_side_effects(*side_effects);
            if let Some(code) = code {
                error = error.with_code(code.clone());
            }
            if let Some(provider_code) = provider_code {
                error = error.with_provider_code(provider_code);
                if error.provider_code().is_none() {
                    return Err(format!(
                        "`providerCode` `{}` would be dropped as possibly sensitive: use a short \
                         identifier of [A-Za-z0-9_.-], at most 64 characters",
                        provider_code.chars().take(80).collect::<String>()
                    ));
                }
            }
            if let Some(retryable) = retryable {
                error = error.with_retryable(*retryable);
            }
            if let Some(ms) = retry_after_ms {
                error = error.with_retry_after(Duration::from_millis(*ms));
            }
            if let Some(diagnostic) = diagnostic {
                error = error.with_diagnostic(diagnostic.clone());
            }
            Op::Error(error)
        }
        Step::Delay { ms } => Op::Delay(Duration::from_millis(*ms)),
        Step::Hang {} => Op::Hang,
        Step::Remember { text } => {
            if text.len() > MAX_MEMORY {
                return Err(format!(
                    "`text` is {} bytes: a conversation keeps at most {MAX_MEMORY}",
                    text.len()
                ));
            }
            Op::Remember(text.clone())
        }
        Step::Recall {} => Op::Recall,
        Step::Panic { message } => Op::Panic(message.clone()),
        Step::Complete { summary } => Op::Complete {
            templated: summary.as_deref().is_some_and(is_templated),
            summary: summary.clone(),
        },
        Step::EventAfterComplete {} => Op::EventAfterComplete,
        Step::EndWithoutTerminal {} => Op::EndWithoutTerminal,
    })
}

/// Builds the descriptor of an artifact step for `execution_id`.
pub(crate) fn build_artifact(
    op: &Op,
    execution_id: ExecutionId,
) -> Result<ArtifactDescriptor, String> {
    let Op::Artifact {
        id,
        media_type,
        name,
        uri,
        size_bytes,
        metadata,
    } = op
    else {
        return Err("not an artifact step".to_owned());
    };
    let id = id.clone().unwrap_or_else(ArtifactId::generate);
    let mut builder = ArtifactDescriptor::builder(id, execution_id, media_type.as_str());
    if let Some(name) = name {
        builder = builder.name(name.as_str());
    }
    if let Some(uri) = uri {
        builder = builder.uri(uri.as_str());
    }
    if let Some(size) = size_bytes {
        builder = builder.size_bytes(*size);
    }
    for (key, value) in metadata {
        builder = builder.metadata(key.as_str(), value.clone());
    }
    builder.build().map_err(|e| e.to_string())
}

/// Checks the identifiers that must be unique across the script's steps.
fn check_unique_ids(steps: &[Step]) -> Result<(), ScriptError> {
    let mut actions: HashMap<&ActionId, usize> = HashMap::new();
    let mut artifacts: HashMap<&ArtifactId, usize> = HashMap::new();
    for (index, step) in steps.iter().enumerate() {
        match step {
            Step::Approval { id: Some(id), .. } | Step::Form { id: Some(id), .. } => {
                if let Some(first) = actions.insert(id, index) {
                    return Err(ScriptError::step(
                        index,
                        step.kind(),
                        format!(
                            "action id `{id}` is already used by steps[{first}]; an action is \
                             answered at most once, so each interrupt needs its own id"
                        ),
                    ));
                }
            }
            Step::Artifact { id: Some(id), .. } => {
                if let Some(first) = artifacts.insert(id, index) {
                    return Err(ScriptError::step(
                        index,
                        step.kind(),
                        format!(
                            "artifact id `{id}` is already used by steps[{first}]; artifact ids \
                             are unique within an execution"
                        ),
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Script
// ---------------------------------------------------------------------------------------------

struct Inner {
    steps: Vec<Step>,
    ops: Vec<Op>,
}

/// A deterministic script: the steps one execution runs, in order.
///
/// Cheap to clone (the steps, checked and compiled once, are shared). Build one from JSON
/// ([`Script::from_json_str`], [`Script::from_path`], or serde) or with
/// [`Script::builder`]. JSON input is validated up front and refused with an error naming the
/// offending step; see the crate documentation for the format.
///
/// ```
/// use harness_scripted::Script;
/// let script = Script::from_json_str(r#"{"steps": [
///     {"type": "text", "text": "Hello"},
///     {"type": "complete", "summary": "greeted"}
/// ]}"#).unwrap();
/// assert_eq!(script.steps().len(), 2);
///
/// let err = Script::from_json_str(r#"{"steps": [
///     {"type": "text", "text": "Hello"},
///     {"type": "text", "txt": "typo"}
/// ]}"#).unwrap_err();
/// assert_eq!(err.step_index(), Some(1));
/// assert!(err.to_string().starts_with("steps[1] (text): unknown field `txt`"), "{err}");
/// ```
#[derive(Clone)]
pub struct Script {
    inner: Arc<Inner>,
}

// A script's schema rejects unknown fields at every level (each step is a tagged struct with
// `deny_unknown_fields`); the descriptor builder checks it again when the options schema is
// published.
impl harness_core::manifest::ClosedSchema for Script {}

impl Script {
    /// Starts a script in code.
    pub fn builder() -> ScriptBuilder {
        ScriptBuilder::default()
    }

    /// The bundled quickstart script ([`QUICKSTART`]).
    ///
    /// Should the bundled file ever fail to parse (a test guards against it), the script
    /// returned fails its run with an `internal` error saying so, rather than panicking.
    #[must_use]
    pub fn quickstart() -> Self {
        Self::from_json_str(QUICKSTART).unwrap_or_else(|err| {
            Self::builder()
                .step(Step::Error {
                    category: ErrorCategory::Internal,
                    message: "the bundled quickstart script is invalid".to_owned(),
                    code: None,
                    provider_code: None,
                    retryable: None,
                    retry_after_ms: None,
                    side_effects: false,
                    diagnostic: Some(err.to_string()),
                })
                .build()
        })
    }

    /// Parses and validates a JSON script.
    ///
    /// # Errors
    /// [`ScriptError::Document`] when the text is not a `{"steps": [...]}` object, and
    /// [`ScriptError::Step`], naming the step's index, when a step is malformed or invalid.
    pub fn from_json_str(json: &str) -> Result<Self, ScriptError> {
        let raw: RawScript = serde_json::from_str(json).map_err(|e| ScriptError::Document {
            message: e.to_string(),
        })?;
        Self::from_values(raw.steps)
    }

    /// Reads, parses and validates a JSON script file.
    ///
    /// # Errors
    /// [`ScriptError::Read`] naming the file when it cannot be read, then as
    /// [`Script::from_json_str`].
    pub fn from_path(path: impl AsRef<Path>) -> Result<Self, ScriptError> {
        let path = path.as_ref();
        let json = std::fs::read_to_string(path).map_err(|source| ScriptError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_json_str(&json)
    }

    /// Validates already-built steps.
    ///
    /// # Errors
    /// The first invalid step, by index.
    pub fn from_steps(steps: impl IntoIterator<Item = Step>) -> Result<Self, ScriptError> {
        let script = Self::new_unchecked(steps.into_iter().collect());
        script.validate()?;
        Ok(script)
    }

    fn from_values(values: Vec<Value>) -> Result<Self, ScriptError> {
        let mut steps = Vec::with_capacity(values.len());
        for (index, value) in values.into_iter().enumerate() {
            let kind = value
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned();
            let step = Step::deserialize(value)
                .map_err(|e| ScriptError::step(index, &kind, e.to_string()))?;
            steps.push(step);
        }
        Self::from_steps(steps)
    }

    /// Compiles the steps, keeping invalid ones as run-time failures.
    fn new_unchecked(steps: Vec<Step>) -> Self {
        let ops = steps
            .iter()
            .enumerate()
            .map(|(index, step)| {
                compile(step).unwrap_or_else(|problem| {
                    let err = ScriptError::step(index, step.kind(), problem);
                    Op::Invalid(
                        HarnessError::new(
                            ErrorCategory::Configuration,
                            format!("the script is invalid: {err}"),
                        )
                        .with_code(ErrorCode::OPTIONS_INVALID),
                    )
                })
            })
            .collect();
        Self {
            inner: Arc::new(Inner { steps, ops }),
        }
    }

    /// Checks every step: what [`Script::from_json_str`] does after parsing.
    ///
    /// # Errors
    /// The first invalid step, by index.
    pub fn validate(&self) -> Result<(), ScriptError> {
        for (index, step) in self.inner.steps.iter().enumerate() {
            if matches!(self.inner.ops.get(index), Some(Op::Invalid(_))) {
                // Recompile for the precise problem (only on the error path).
                if let Err(problem) = compile(step) {
                    return Err(ScriptError::step(index, step.kind(), problem));
                }
            }
        }
        check_unique_ids(&self.inner.steps)
    }

    /// The steps, in order.
    #[must_use]
    pub fn steps(&self) -> &[Step] {
        &self.inner.steps
    }

    /// Whether the script has no step (it completes at once).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.inner.steps.is_empty()
    }

    /// The script as pretty-printed JSON.
    #[must_use]
    pub fn to_json_pretty(&self) -> String {
        // Serializing plain data (strings, numbers, `Value`s) to a string cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    pub(crate) fn ops(&self) -> &[Op] {
        &self.inner.ops
    }

    /// The same steps with `ops` in place of their compiled form (one op per step, in
    /// order: a restored run finds its step by index).
    pub(crate) fn with_ops(&self, ops: Vec<Op>) -> Self {
        debug_assert_eq!(ops.len(), self.inner.ops.len());
        Self {
            inner: Arc::new(Inner {
                steps: self.inner.steps.clone(),
                ops,
            }),
        }
    }
}

impl Default for Script {
    /// The empty script: its run completes at once.
    fn default() -> Self {
        Self::new_unchecked(Vec::new())
    }
}

impl fmt::Debug for Script {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Script")
            .field("steps", &self.inner.steps)
            .finish()
    }
}

impl PartialEq for Script {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner) || self.inner.steps == other.inner.steps
    }
}

/// The unchecked document: `{"steps": [...]}` and nothing else (not even a sequence, which
/// serde's derive would accept for a struct).
struct RawScript {
    steps: Vec<Value>,
}

impl<'de> Deserialize<'de> for RawScript {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = RawScript;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#"a script object, `{"steps": [...]}`"#)
            }

            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> Result<RawScript, M::Error> {
                let mut steps = None;
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if key != "steps" {
                        return Err(serde::de::Error::unknown_field(&key, &["steps"]));
                    }
                    if steps.is_some() {
                        return Err(serde::de::Error::duplicate_field("steps"));
                    }
                    steps = Some(map.next_value()?);
                }
                steps
                    .map(|steps| RawScript { steps })
                    .ok_or_else(|| serde::de::Error::missing_field("steps"))
            }
        }
        d.deserialize_map(Visit)
    }
}

/// The wire shape, for serialization and the JSON Schema.
#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    rename = "Script",
    description = "A deterministic script for the scripted adapter: steps run in order."
)]
struct ScriptWire<'a> {
    /// The steps, run in order. A script that runs out of steps completes the run.
    steps: Cow<'a, [Step]>,
}

impl Serialize for Script {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ScriptWire {
            steps: Cow::Borrowed(&self.inner.steps),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Script {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawScript::deserialize(d)?;
        Self::from_values(raw.steps).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Script {
    fn schema_name() -> Cow<'static, str> {
        "Script".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        ScriptWire::json_schema(generator)
    }
}

// ---------------------------------------------------------------------------------------------
// Builder
// ---------------------------------------------------------------------------------------------

/// Builds a [`Script`] in code; see [`Script::builder`].
///
/// ```
/// use harness_scripted::{ApprovalCall, Script};
/// use serde_json::json;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let script = Script::builder()
///     .text("Hel")
///     .text("lo")
///     .tool_call("call_1".parse()?, "read_file", json!({"path": "a.txt"}), json!("contents"))
///     .approval([ApprovalCall::new("call_2".parse()?, "write_file", json!({"path": "b.txt"}))])
///     .artifact("text/plain", "b.txt", "file:///workspace/b.txt")
///     .complete("done")
///     .try_build()?;
/// assert_eq!(script.steps().len(), 6);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct ScriptBuilder {
    steps: Vec<Step>,
}

impl ScriptBuilder {
    /// Adds any step.
    pub fn step(mut self, step: Step) -> Self {
        self.steps.push(step);
        self
    }

    /// Adds a `message.delta` of `text`.
    pub fn text(self, text: impl Into<String>) -> Self {
        self.text_repeated(text, 1)
    }

    /// Adds `repeat` identical `message.delta`s of `text` (one step).
    pub fn text_repeated(self, text: impl Into<String>, repeat: u32) -> Self {
        self.step(Step::Text {
            text: text.into(),
            repeat,
        })
    }

    /// Adds a `reasoning.delta` of `text`.
    pub fn reasoning(self, text: impl Into<String>) -> Self {
        self.step(Step::Reasoning {
            text: text.into(),
            repeat: 1,
        })
    }

    /// Adds a `usage` increment.
    pub fn usage(self, input_tokens: u64, output_tokens: u64) -> Self {
        self.step(Step::Usage {
            input_tokens,
            output_tokens,
            reasoning_tokens: 0,
            cached_input_tokens: 0,
            model_turns: 0,
        })
    }

    /// Adds a `usage` increment for one model request (turn) of `input_tokens` and
    /// `output_tokens`.
    pub fn model_turn(self, input_tokens: u64, output_tokens: u64) -> Self {
        self.step(Step::Usage {
            input_tokens,
            output_tokens,
            reasoning_tokens: 0,
            cached_input_tokens: 0,
            model_turns: 1,
        })
    }

    /// Adds a tool call that succeeds with `output`.
    pub fn tool_call(
        self,
        call_id: ToolCallId,
        tool: impl Into<String>,
        arguments: Value,
        output: Value,
    ) -> Self {
        self.step(Step::ToolCall {
            call_id,
            tool: tool.into(),
            arguments,
            output,
            failure: None,
        })
    }

    /// Adds a tool call that fails with `message`.
    pub fn failing_tool_call(
        self,
        call_id: ToolCallId,
        tool: impl Into<String>,
        arguments: Value,
        message: impl Into<String>,
    ) -> Self {
        self.step(Step::ToolCall {
            call_id,
            tool: tool.into(),
            arguments,
            output: Value::Null,
            failure: Some(message.into()),
        })
    }

    /// Adds a tool approval over `calls` (an interrupt).
    pub fn approval(self, calls: impl IntoIterator<Item = ApprovalCall>) -> Self {
        self.step(Step::Approval {
            id: None,
            calls: calls.into_iter().collect(),
        })
    }

    /// Adds a form with `fields` (an interrupt).
    pub fn form(self, fields: impl IntoIterator<Item = FormField>) -> Self {
        self.step(Step::Form {
            id: None,
            title: None,
            fields: fields.into_iter().collect(),
        })
    }

    /// Adds an artifact of `media_type`, named `name`, at `uri`.
    pub fn artifact(
        self,
        media_type: impl Into<String>,
        name: impl Into<String>,
        uri: impl Into<String>,
    ) -> Self {
        self.step(Step::Artifact {
            id: None,
            media_type: media_type.into(),
            name: Some(name.into()),
            uri: Some(uri.into()),
            size_bytes: None,
            metadata: None,
        })
    }

    /// Adds a native event `name` in the `scripted` namespace.
    pub fn native(self, name: impl Into<String>, payload: Value) -> Self {
        self.step(Step::Native {
            namespace: None,
            name: name.into(),
            payload,
        })
    }

    /// Adds an error of `category` with a safe `message` and the category's defaults.
    pub fn error(self, category: ErrorCategory, message: impl Into<String>) -> Self {
        self.step(Step::Error {
            category,
            message: message.into(),
            code: None,
            provider_code: None,
            retryable: None,
            retry_after_ms: None,
            side_effects: false,
            diagnostic: None,
        })
    }

    /// Adds a delay (whole milliseconds; longer than `u64::MAX` ms saturates).
    pub fn delay(self, duration: Duration) -> Self {
        self.step(Step::Delay {
            ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
        })
    }

    /// Adds a hang: the run waits until cancelled.
    pub fn hang(self) -> Self {
        self.step(Step::Hang {})
    }

    /// Adds a `remember` step: `text` is kept for the conversation's later turns.
    pub fn remember(self, text: impl Into<String>) -> Self {
        self.step(Step::Remember { text: text.into() })
    }

    /// Adds a `recall` step: streams what the conversation keeps.
    pub fn recall(self) -> Self {
        self.step(Step::Recall {})
    }

    /// Adds a panic with `message`.
    pub fn panic(self, message: impl Into<String>) -> Self {
        self.step(Step::Panic {
            message: message.into(),
        })
    }

    /// Completes the run with `summary`.
    pub fn complete(self, summary: impl Into<String>) -> Self {
        self.step(Step::Complete {
            summary: Some(summary.into()),
        })
    }

    /// Completes the run without a summary.
    pub fn complete_without_summary(self) -> Self {
        self.step(Step::Complete { summary: None })
    }

    /// Adds the `eventAfterComplete` fault.
    pub fn event_after_complete(self) -> Self {
        self.step(Step::EventAfterComplete {})
    }

    /// Adds the `endWithoutTerminal` fault.
    pub fn end_without_terminal(self) -> Self {
        self.step(Step::EndWithoutTerminal {})
    }

    /// Builds the script without refusing invalid steps: an invalid step fails the run that
    /// reaches it with a `configuration` error naming the step (`OPTIONS_INVALID`). Use
    /// [`ScriptBuilder::try_build`] to refuse them up front.
    #[must_use]
    pub fn build(self) -> Script {
        Script::new_unchecked(self.steps)
    }

    /// Builds and validates the script.
    ///
    /// # Errors
    /// The first invalid step, by index.
    pub fn try_build(self) -> Result<Script, ScriptError> {
        Script::from_steps(self.steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundled_quickstart_parses() {
        let script = Script::from_json_str(QUICKSTART).unwrap();
        assert_eq!(Script::quickstart(), script);
        assert!(matches!(script.steps().last(), Some(Step::Complete { .. })));
    }

    #[test]
    fn invalid_built_steps_become_run_failures_and_validation_errors() {
        let script = Script::builder().text("a").text_repeated("b", 0).build();
        assert!(matches!(script.ops()[1], Op::Invalid(_)));
        let err = script.validate().unwrap_err();
        assert_eq!(err.step_index(), Some(1));
        assert!(
            err.to_string().contains("`repeat` must be at least 1"),
            "{err}"
        );
        // From a request's options: a step asking for u32::MAX events is refused up front.
        let options = serde_json::json!({"script": {"steps": [
            {"type": "text", "text": "x", "repeat": u32::MAX}, {"type": "complete"}
        ]}});
        let err = crate::ScriptedOptions::from_value(&options).unwrap_err();
        assert!(
            err.message().contains("`repeat` is at most 100000"),
            "{}",
            err.message()
        );
    }
}
