//! The two APIs on the wire: the transcript a turn sends, and what a streamed round says.
//!
//! A [`Round`] accumulates one streamed model response, whichever API: text and reasoning
//! deltas are handed out as [`Piece`]s as they come (the runtime yields them at once), tool
//! calls are assembled from their argument deltas, and usage and the end are noted. What it
//! accumulates is bounded ([`MAX_CALLS`], [`MAX_ARGUMENT_BYTES`], [`MAX_TEXT_BYTES`]):
//! model output is hostile input.

use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::event::Usage;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::config::Api;
use crate::error::{protocol, provider_error};

/// The most tool calls one model round may make.
pub const MAX_CALLS: usize = 128;
/// The most bytes of arguments one tool call may carry.
pub const MAX_ARGUMENT_BYTES: usize = 1 << 20;
/// The most bytes of assistant text one round may carry (it is kept for the transcript).
pub const MAX_TEXT_BYTES: usize = 8 << 20;

/// One entry of a conversation's transcript, as the adapter keeps it (in the thread state
/// between turns).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Item {
    /// The user's message, and the files that came with it.
    User {
        text: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        files: Vec<Attachment>,
    },
    /// A model round: its text and the tool calls it made.
    Assistant {
        text: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        calls: Vec<Call>,
    },
    /// The result of a tool call, as the model reads it.
    ToolResult { call_id: String, output: String },
}

impl Item {
    /// About how many bytes the item holds.
    pub(crate) fn size(&self) -> usize {
        match self {
            Self::User { text, files } => {
                text.len() + files.iter().map(Attachment::size).sum::<usize>()
            }
            Self::Assistant { text, calls } => {
                text.len()
                    + calls
                        .iter()
                        .map(|c| c.id.len() + c.name.len() + c.arguments.len())
                        .sum::<usize>()
            }
            Self::ToolResult { call_id, output } => call_id.len() + output.len(),
        }
    }
}

/// A file of a user's message, as the model reads it: images and PDFs as base64 data URLs,
/// text as text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Attachment {
    /// An image: `data:<type>;base64,...`.
    Image { url: String },
    /// A PDF: its name and `data:application/pdf;base64,...`.
    File { name: String, url: String },
    /// A text document (UTF-8, validated), named.
    Text { name: String, text: String },
}

impl Attachment {
    fn size(&self) -> usize {
        match self {
            Self::Image { url } => url.len(),
            Self::File { name, url } => name.len() + url.len(),
            Self::Text { name, text } => name.len() + text.len(),
        }
    }

    /// A text document as the model reads it: named, fenced off from the message.
    fn text_part(name: &str, text: &str) -> String {
        format!(
            "<file name=\"{}\">\n{text}\n</file>",
            name.replace('"', "'")
        )
    }

    /// A Chat Completions content part.
    fn chat_part(&self) -> Value {
        match self {
            Self::Image { url } => json!({"type": "image_url", "image_url": {"url": url}}),
            Self::File { name, url } => {
                json!({"type": "file", "file": {"filename": name, "file_data": url}})
            }
            Self::Text { name, text } => {
                json!({"type": "text", "text": Self::text_part(name, text)})
            }
        }
    }

    /// A Responses input content part.
    fn responses_part(&self) -> Value {
        match self {
            Self::Image { url } => json!({"type": "input_image", "image_url": url}),
            Self::File { name, url } => {
                json!({"type": "input_file", "filename": name, "file_data": url})
            }
            Self::Text { name, text } => {
                json!({"type": "input_text", "text": Self::text_part(name, text)})
            }
        }
    }
}

/// A tool call as the model made it (provider names and ids).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Call {
    /// The provider's call id.
    pub(crate) id: String,
    /// The provider-safe tool name.
    pub(crate) name: String,
    /// The arguments, as the JSON text the model wrote.
    pub(crate) arguments: String,
}

/// A function the model may call: its provider name, description and parameters schema.
pub(crate) struct FunctionSpec<'a> {
    pub(crate) name: &'a str,
    pub(crate) description: &'a str,
    pub(crate) parameters: &'a Value,
}

/// What one round's request carries besides the transcript.
pub(crate) struct RoundRequest<'a> {
    pub(crate) api: Api,
    pub(crate) model: &'a str,
    pub(crate) instructions: Option<&'a str>,
    pub(crate) functions: &'a [FunctionSpec<'a>],
    pub(crate) max_output_tokens: Option<u32>,
    pub(crate) temperature: Option<f64>,
    /// Whether the response streams (`"stream": true`), or comes whole (the caller wants the
    /// outcome only: `invoke.non_streaming`).
    pub(crate) stream: bool,
}

impl RoundRequest<'_> {
    /// The request body for `transcript`.
    pub(crate) fn body(&self, transcript: &[Item]) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), self.model.into());
        body.insert("stream".into(), self.stream.into());
        match self.api {
            Api::ChatCompletions => {
                if self.stream {
                    body.insert("stream_options".into(), json!({"include_usage": true}));
                }
                body.insert(
                    "messages".into(),
                    chat_messages(self.instructions, transcript),
                );
                if !self.functions.is_empty() {
                    let tools: Vec<Value> = self
                        .functions
                        .iter()
                        .map(|f| {
                            json!({"type": "function", "function": {
                                "name": f.name, "description": f.description, "parameters": f.parameters
                            }})
                        })
                        .collect();
                    body.insert("tools".into(), tools.into());
                }
                if let Some(max) = self.max_output_tokens {
                    body.insert("max_tokens".into(), max.into());
                }
            }
            Api::Responses => {
                body.insert("store".into(), false.into());
                if let Some(instructions) = self.instructions {
                    body.insert("instructions".into(), instructions.into());
                }
                body.insert("input".into(), responses_input(transcript));
                if !self.functions.is_empty() {
                    let tools: Vec<Value> = self
                        .functions
                        .iter()
                        .map(|f| {
                            json!({"type": "function", "name": f.name,
                                   "description": f.description, "parameters": f.parameters})
                        })
                        .collect();
                    body.insert("tools".into(), tools.into());
                }
                if let Some(max) = self.max_output_tokens {
                    body.insert("max_output_tokens".into(), max.into());
                }
            }
        }
        if let Some(t) = self.temperature {
            body.insert("temperature".into(), t.into());
        }
        Value::Object(body)
    }
}

fn chat_messages(instructions: Option<&str>, transcript: &[Item]) -> Value {
    let mut messages = Vec::with_capacity(transcript.len() + 1);
    if let Some(instructions) = instructions {
        messages.push(json!({"role": "system", "content": instructions}));
    }
    for item in transcript {
        messages.push(match item {
            Item::User { text, files } if files.is_empty() => {
                json!({"role": "user", "content": text})
            }
            Item::User { text, files } => {
                let mut parts = vec![json!({"type": "text", "text": text})];
                parts.extend(files.iter().map(Attachment::chat_part));
                json!({"role": "user", "content": parts})
            }
            Item::Assistant { text, calls } => {
                let mut message = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { text.as_str().into() }});
                if !calls.is_empty() {
                    message["tool_calls"] = calls
                        .iter()
                        .map(|c| {
                            json!({"id": c.id, "type": "function",
                                   "function": {"name": c.name, "arguments": c.arguments}})
                        })
                        .collect();
                }
                message
            }
            Item::ToolResult { call_id, output } => {
                json!({"role": "tool", "tool_call_id": call_id, "content": output})
            }
        });
    }
    messages.into()
}

fn responses_input(transcript: &[Item]) -> Value {
    let mut input = Vec::with_capacity(transcript.len());
    for item in transcript {
        match item {
            Item::User { text, files } if files.is_empty() => {
                input.push(json!({"role": "user", "content": text}));
            }
            Item::User { text, files } => {
                let mut parts = vec![json!({"type": "input_text", "text": text})];
                parts.extend(files.iter().map(Attachment::responses_part));
                input.push(json!({"role": "user", "content": parts}));
            }
            Item::Assistant { text, calls } => {
                if !text.is_empty() {
                    input.push(json!({"role": "assistant", "content": text}));
                }
                for c in calls {
                    input.push(json!({"type": "function_call", "call_id": c.id,
                                      "name": c.name, "arguments": c.arguments}));
                }
            }
            Item::ToolResult { call_id, output } => input.push(
                json!({"type": "function_call_output", "call_id": call_id, "output": output}),
            ),
        }
    }
    input.into()
}

/// Something a round says that the runtime yields at once.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Piece {
    Text(String),
    Reasoning(String),
    Usage(Usage),
}

/// A tool call being assembled.
#[derive(Debug, Default)]
struct Assembling {
    /// Chat: the call's index; Responses: the output item's id.
    key: String,
    id: String,
    name: String,
    arguments: String,
}

/// One streamed model response, accumulated.
#[derive(Debug)]
pub(crate) struct Round {
    api: Api,
    text: String,
    calls: Vec<Assembling>,
    done: bool,
    /// The provider's reason for stopping, once said (`stop`, `tool_calls`, `length`, ...).
    pub(crate) finish: Option<String>,
}

impl Round {
    pub(crate) fn new(api: Api) -> Self {
        Self {
            api,
            text: String::new(),
            calls: Vec::new(),
            done: false,
            finish: None,
        }
    }

    /// Whether the round said it is over (`[DONE]`, `response.completed`).
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    /// Reads one event of the stream (`name` is its `event:` field, if any).
    ///
    /// # Errors
    /// `protocol` for data that is not what the API says, over a bound, or a call without an
    /// id or a name; the provider's own error (classified) for an error event.
    pub(crate) fn apply(
        &mut self,
        name: Option<&str>,
        data: &str,
        pieces: &mut Vec<Piece>,
    ) -> Result<(), HarnessError> {
        if self.done {
            return Ok(()); // Whatever follows the end (an extra [DONE]) changes nothing.
        }
        if self.api == Api::ChatCompletions && data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let value: Value = serde_json::from_str(data)
            .map_err(|e| protocol(format!("an event of the model's stream is not JSON: {e}")))?;
        match self.api {
            Api::ChatCompletions => self.apply_chat(&value, pieces),
            Api::Responses => {
                let kind = value
                    .get("type")
                    .and_then(Value::as_str)
                    .or(name)
                    .unwrap_or_default()
                    .to_owned();
                self.apply_responses(&kind, &value, pieces)
            }
        }
    }

    fn apply_chat(&mut self, value: &Value, pieces: &mut Vec<Piece>) -> Result<(), HarnessError> {
        if let Some(error) = value.get("error") {
            return Err(provider_error(error));
        }
        if let Some(usage) = value.get("usage").filter(|u| u.is_object()) {
            push_usage(chat_usage(usage), pieces);
        }
        let Some(choice) = value
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            return Ok(());
        };
        if let Some(delta) = choice.get("delta") {
            for field in ["reasoning_content", "reasoning"] {
                if let Some(text) = delta
                    .get(field)
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty())
                {
                    pieces.push(Piece::Reasoning(text.to_owned()));
                }
            }
            if let Some(text) = delta
                .get("content")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                self.push_text(text, pieces)?;
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for call in calls {
                    let key = match call.get("index") {
                        Some(Value::Number(n)) => n.to_string(),
                        _ => self.calls.len().to_string(),
                    };
                    let function = call.get("function");
                    let assembling = self.call(&key)?;
                    if let Some(id) = call.get("id").and_then(Value::as_str) {
                        id.clone_into(&mut assembling.id);
                    }
                    if let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str)
                    {
                        name.clone_into(&mut assembling.name);
                    }
                    if let Some(args) = function
                        .and_then(|f| f.get("arguments"))
                        .and_then(Value::as_str)
                    {
                        append_arguments(assembling, args)?;
                    }
                }
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish = Some(reason.to_owned());
        }
        Ok(())
    }

    fn apply_responses(
        &mut self,
        kind: &str,
        value: &Value,
        pieces: &mut Vec<Piece>,
    ) -> Result<(), HarnessError> {
        let text = |field: &str| value.get(field).and_then(Value::as_str).unwrap_or_default();
        match kind {
            "response.output_text.delta" => self.push_text(text("delta"), pieces)?,
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let delta = text("delta");
                if !delta.is_empty() {
                    pieces.push(Piece::Reasoning(delta.to_owned()));
                }
            }
            "response.output_item.added" | "response.output_item.done" => {
                let Some(item) = value.get("item").filter(|i| i["type"] == "function_call") else {
                    return Ok(());
                };
                let key = item
                    .get("id")
                    .and_then(Value::as_str)
                    .or_else(|| item.get("call_id").and_then(Value::as_str))
                    .unwrap_or_default()
                    .to_owned();
                let assembling = self.call(&key)?;
                if let Some(id) = item.get("call_id").and_then(Value::as_str) {
                    id.clone_into(&mut assembling.id);
                }
                if let Some(name) = item.get("name").and_then(Value::as_str) {
                    name.clone_into(&mut assembling.name);
                }
                let arguments = item
                    .get("arguments")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if kind == "response.output_item.done" || !arguments.is_empty() {
                    assembling.arguments.clear();
                    append_arguments(assembling, arguments)?;
                }
            }
            "response.function_call_arguments.delta" => {
                let key = text("item_id").to_owned();
                let delta = text("delta");
                append_arguments(self.call(&key)?, delta)?;
            }
            "response.function_call_arguments.done" => {
                let key = text("item_id").to_owned();
                let assembling = self.call(&key)?;
                assembling.arguments.clear();
                append_arguments(assembling, text("arguments"))?;
            }
            "response.completed" | "response.incomplete" => {
                let response = value.get("response").unwrap_or(&Value::Null);
                if let Some(usage) = response.get("usage").filter(|u| u.is_object()) {
                    push_usage(responses_usage(usage), pieces);
                }
                let incomplete =
                    kind == "response.incomplete" || response["status"] == "incomplete";
                self.finish = Some(if incomplete { "length" } else { "stop" }.to_owned());
                self.done = true;
            }
            "response.failed" => {
                let error = value
                    .get("response")
                    .and_then(|r| r.get("error"))
                    .filter(|e| !e.is_null())
                    .unwrap_or(&Value::Null);
                return Err(provider_error(error));
            }
            "error" => return Err(provider_error(value.get("error").unwrap_or(value))),
            _ => {}
        }
        Ok(())
    }

    fn push_text(&mut self, text: &str, pieces: &mut Vec<Piece>) -> Result<(), HarnessError> {
        if text.is_empty() {
            return Ok(());
        }
        if self.text.len() + text.len() > MAX_TEXT_BYTES {
            return Err(protocol(format!(
                "the model's reply is longer than {MAX_TEXT_BYTES} bytes in one round"
            )));
        }
        self.text.push_str(text);
        pieces.push(Piece::Text(text.to_owned()));
        Ok(())
    }

    /// The call assembled under `key`, new if unseen.
    fn call(&mut self, key: &str) -> Result<&mut Assembling, HarnessError> {
        let at = match self.calls.iter().position(|c| c.key == key) {
            Some(at) => at,
            None => {
                if self.calls.len() == MAX_CALLS {
                    return Err(protocol(format!(
                        "the model made more than {MAX_CALLS} tool calls in one round"
                    )));
                }
                self.calls.push(Assembling {
                    key: key.to_owned(),
                    ..Assembling::default()
                });
                self.calls.len() - 1
            }
        };
        Ok(&mut self.calls[at])
    }

    /// Reads a whole (non-streaming) response: a Chat Completions `chat.completion` or a
    /// Responses `response` object. The round is over after it.
    ///
    /// # Errors
    /// As [`apply`](Self::apply): `protocol` for what the API does not say or past a bound,
    /// the provider's own error (classified) for an error body or a failed response.
    pub(crate) fn apply_whole(
        &mut self,
        value: &Value,
        pieces: &mut Vec<Piece>,
    ) -> Result<(), HarnessError> {
        if !value.is_object() {
            return Err(protocol("the model's response is not a JSON object"));
        }
        match self.api {
            Api::ChatCompletions => {
                if let Some(error) = value.get("error").filter(|e| !e.is_null()) {
                    return Err(provider_error(error));
                }
                // A choice's `message` reads as one delta holding everything.
                let choice = value
                    .get("choices")
                    .and_then(Value::as_array)
                    .and_then(|c| c.first())
                    .ok_or_else(|| protocol("the model's response has no choice"))?;
                let mut delta = json!({
                    "choices": [{
                        "delta": choice.get("message").cloned().unwrap_or(Value::Null),
                        "finish_reason": choice.get("finish_reason").cloned().unwrap_or(Value::Null),
                    }],
                });
                if let Some(usage) = value.get("usage") {
                    delta["usage"] = usage.clone();
                }
                self.apply_chat(&delta, pieces)?;
            }
            Api::Responses => {
                if value["status"] == "failed" || value.get("error").is_some_and(|e| !e.is_null()) {
                    return Err(provider_error(
                        value.get("error").filter(|e| !e.is_null()).unwrap_or(value),
                    ));
                }
                let output = value
                    .get("output")
                    .and_then(Value::as_array)
                    .ok_or_else(|| protocol("the model's response has no output"))?;
                for item in output {
                    match item["type"].as_str().unwrap_or_default() {
                        "reasoning" => {
                            for part in ["summary", "content"] {
                                for piece in item[part].as_array().into_iter().flatten() {
                                    if let Some(text) =
                                        piece["text"].as_str().filter(|t| !t.is_empty())
                                    {
                                        pieces.push(Piece::Reasoning(text.to_owned()));
                                    }
                                }
                            }
                        }
                        "message" => {
                            for part in item["content"].as_array().into_iter().flatten() {
                                if part["type"] == "output_text" {
                                    self.push_text(
                                        part["text"].as_str().unwrap_or_default(),
                                        pieces,
                                    )?;
                                }
                            }
                        }
                        "function_call" => {
                            let event = json!({"type": "response.output_item.done", "item": item});
                            self.apply_responses("response.output_item.done", &event, pieces)?;
                        }
                        _ => {}
                    }
                }
                if let Some(usage) = value.get("usage").filter(|u| u.is_object()) {
                    push_usage(responses_usage(usage), pieces);
                }
                let incomplete = value["status"] == "incomplete";
                self.finish = Some(if incomplete { "length" } else { "stop" }.to_owned());
            }
        }
        self.done = true;
        Ok(())
    }

    /// The round's text and calls, once it is over.
    ///
    /// # Errors
    /// `protocol` for a call without a name; a call without an id gets one
    /// (`call_<n>`), as some servers leave it out.
    pub(crate) fn into_parts(self) -> Result<(String, Vec<Call>), HarnessError> {
        let mut calls = Vec::with_capacity(self.calls.len());
        for (n, c) in self.calls.into_iter().enumerate() {
            if c.name.is_empty() {
                return Err(protocol("the model made a tool call without a tool name"));
            }
            let id = if c.id.is_empty() {
                format!("call_{n}")
            } else {
                c.id
            };
            calls.push(Call {
                id,
                name: c.name,
                arguments: c.arguments,
            });
        }
        Ok((self.text, calls))
    }
}

fn append_arguments(call: &mut Assembling, delta: &str) -> Result<(), HarnessError> {
    if call.arguments.len() + delta.len() > MAX_ARGUMENT_BYTES {
        return Err(protocol(format!(
            "the model's arguments for one tool call are longer than {MAX_ARGUMENT_BYTES} bytes"
        )));
    }
    call.arguments.push_str(delta);
    Ok(())
}

/// A round's usage, unless it says nothing (a server that reports zeros).
fn push_usage(usage: Usage, pieces: &mut Vec<Piece>) {
    if usage != Usage::default() {
        pieces.push(Piece::Usage(usage));
    }
}

fn count(value: &Value, path: &[&str]) -> u64 {
    path.iter()
        .try_fold(value, |v, key| v.get(key))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

fn chat_usage(usage: &Value) -> Usage {
    Usage {
        input_tokens: count(usage, &["prompt_tokens"]),
        output_tokens: count(usage, &["completion_tokens"]),
        reasoning_tokens: count(usage, &["completion_tokens_details", "reasoning_tokens"]),
        cached_input_tokens: count(usage, &["prompt_tokens_details", "cached_tokens"]),
        model_turns: 0,
    }
}

fn responses_usage(usage: &Value) -> Usage {
    Usage {
        input_tokens: count(usage, &["input_tokens"]),
        output_tokens: count(usage, &["output_tokens"]),
        reasoning_tokens: count(usage, &["output_tokens_details", "reasoning_tokens"]),
        cached_input_tokens: count(usage, &["input_tokens_details", "cached_tokens"]),
        model_turns: 0,
    }
}

/// The model's stream ended before the round said it was over.
pub(crate) fn cut_short() -> HarnessError {
    HarnessError::new(
        ErrorCategory::Unavailable,
        "the model's stream ended before its response was complete",
    )
    .with_retryable(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Ran = (
        Vec<Piece>,
        Result<(String, Vec<Call>), HarnessError>,
        Option<String>,
    );

    fn run(api: Api, events: &[(Option<&str>, &str)]) -> Ran {
        let mut round = Round::new(api);
        let mut pieces = Vec::new();
        for (name, data) in events {
            if let Err(e) = round.apply(*name, data, &mut pieces) {
                return (pieces, Err(e), None);
            }
        }
        let finish = round.finish.clone();
        (pieces, round.into_parts(), finish)
    }

    #[test]
    fn chat_text_reasoning_calls_and_usage() {
        let events = [
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"think"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"Let me check."}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","function":{"name":"get_time","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":5,"completion_tokens_details":{"reasoning_tokens":2}}}"#,
            "[DONE]",
        ];
        let events: Vec<_> = events.iter().map(|d| (None, *d)).collect();
        let (pieces, parts, finish) = run(Api::ChatCompletions, &events);
        assert_eq!(
            pieces,
            [
                Piece::Reasoning("think".into()),
                Piece::Text("Let me check.".into()),
                Piece::Usage(Usage {
                    input_tokens: 7,
                    output_tokens: 5,
                    reasoning_tokens: 2,
                    cached_input_tokens: 0,
                    model_turns: 0
                }),
            ]
        );
        let (text, calls) = parts.unwrap();
        assert_eq!(text, "Let me check.");
        assert_eq!(
            calls,
            [
                Call {
                    id: "call_a".into(),
                    name: "get_weather".into(),
                    arguments: r#"{"city":"Paris"}"#.into()
                },
                Call {
                    id: "call_b".into(),
                    name: "get_time".into(),
                    arguments: "{}".into()
                },
            ]
        );
        assert_eq!(finish.as_deref(), Some("tool_calls"));
    }

    #[test]
    fn responses_text_reasoning_calls_and_usage() {
        let events = [
            (
                Some("response.created"),
                r#"{"type":"response.created","response":{}}"#,
            ),
            (
                Some("response.reasoning_summary_text.delta"),
                r#"{"type":"response.reasoning_summary_text.delta","delta":"2+2"}"#,
            ),
            (
                Some("response.output_text.delta"),
                r#"{"type":"response.output_text.delta","delta":"Hi"}"#,
            ),
            (
                Some("response.output_item.added"),
                r#"{"type":"response.output_item.added","item":{"type":"function_call","id":"fc-1","call_id":"call_w1","name":"get_weather","arguments":""}}"#,
            ),
            (
                Some("response.function_call_arguments.delta"),
                r#"{"type":"response.function_call_arguments.delta","item_id":"fc-1","delta":"{\"city\""}"#,
            ),
            (
                Some("response.function_call_arguments.delta"),
                r#"{"type":"response.function_call_arguments.delta","item_id":"fc-1","delta":":\"Paris\"}"}"#,
            ),
            (
                Some("response.output_item.done"),
                r#"{"type":"response.output_item.done","item":{"type":"function_call","id":"fc-1","call_id":"call_w1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}"#,
            ),
            (
                Some("response.completed"),
                r#"{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":11,"output_tokens":5,"input_tokens_details":{"cached_tokens":3}}}}"#,
            ),
        ];
        let (pieces, parts, finish) = run(Api::Responses, &events);
        assert_eq!(
            pieces,
            [
                Piece::Reasoning("2+2".into()),
                Piece::Text("Hi".into()),
                Piece::Usage(Usage {
                    input_tokens: 11,
                    output_tokens: 5,
                    reasoning_tokens: 0,
                    cached_input_tokens: 3,
                    model_turns: 0
                }),
            ]
        );
        let (text, calls) = parts.unwrap();
        assert_eq!(text, "Hi");
        assert_eq!(
            calls,
            [Call {
                id: "call_w1".into(),
                name: "get_weather".into(),
                arguments: r#"{"city":"Paris"}"#.into()
            }]
        );
        assert_eq!(finish.as_deref(), Some("stop"));
    }

    #[test]
    fn errors_in_the_stream_are_the_providers_and_garbage_is_protocol() {
        let (_, parts, _) = run(
            Api::ChatCompletions,
            &[(
                None,
                r#"{"error":{"message":"overloaded","type":"server_error"}}"#,
            )],
        );
        assert_eq!(parts.unwrap_err().category(), ErrorCategory::Unavailable);
        let (_, parts, _) = run(
            Api::Responses,
            &[(
                None,
                r#"{"type":"response.failed","response":{"error":{"code":"rate_limit_exceeded","message":"slow down"}}}"#,
            )],
        );
        assert_eq!(parts.unwrap_err().category(), ErrorCategory::Throttled);
        let (_, parts, _) = run(Api::ChatCompletions, &[(None, "{not json")]);
        assert_eq!(parts.unwrap_err().category(), ErrorCategory::Protocol);
        let (_, parts, _) = run(
            Api::ChatCompletions,
            &[(
                None,
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}"#,
            )],
        );
        assert_eq!(
            parts.unwrap_err().category(),
            ErrorCategory::Protocol,
            "a call without a name"
        );
    }

    #[test]
    fn bounds_hold_against_a_flood() {
        let mut round = Round::new(Api::ChatCompletions);
        let mut pieces = Vec::new();
        let mut failed = None;
        for i in 0..=MAX_CALLS {
            let data = format!(
                r#"{{"choices":[{{"delta":{{"tool_calls":[{{"index":{i},"id":"c{i}","function":{{"name":"t"}}}}]}}}}]}}"#
            );
            if let Err(e) = round.apply(None, &data, &mut pieces) {
                failed = Some((i, e));
                break;
            }
        }
        let (at, err) = failed.expect("the call bound held");
        assert_eq!(at, MAX_CALLS);
        assert!(err.message().contains("tool calls"), "{}", err.message());

        let mut round = Round::new(Api::ChatCompletions);
        let chunk = "x".repeat(64 * 1024);
        let data = serde_json::json!({"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"t","arguments":chunk}}]}}]}).to_string();
        let mut result = Ok(());
        for _ in 0..=(MAX_ARGUMENT_BYTES / chunk.len()) {
            result = round.apply(None, &data, &mut pieces);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result.unwrap_err().category(), ErrorCategory::Protocol);
    }

    #[test]
    fn transcripts_become_each_apis_messages() {
        let transcript = [
            Item::User {
                text: "weather?".into(),
                files: Vec::new(),
            },
            Item::Assistant {
                text: String::new(),
                calls: vec![Call {
                    id: "call_1".into(),
                    name: "get_weather".into(),
                    arguments: "{}".into(),
                }],
            },
            Item::ToolResult {
                call_id: "call_1".into(),
                output: "sunny".into(),
            },
        ];
        let spec = [FunctionSpec {
            name: "get_weather",
            description: "Weather.",
            parameters: &json!({"type": "object"}),
        }];
        let request = RoundRequest {
            api: Api::ChatCompletions,
            model: "m",
            instructions: Some("Be brief."),
            functions: &spec,
            max_output_tokens: Some(100),
            temperature: None,
            stream: true,
        };
        let body = request.body(&transcript);
        assert_eq!(
            body["messages"][0],
            json!({"role": "system", "content": "Be brief."})
        );
        assert_eq!(
            body["messages"][2]["tool_calls"][0]["function"]["name"],
            "get_weather"
        );
        assert_eq!(body["messages"][2]["content"], Value::Null);
        assert_eq!(
            body["messages"][3],
            json!({"role": "tool", "tool_call_id": "call_1", "content": "sunny"})
        );
        assert_eq!(body["tools"][0]["function"]["name"], "get_weather");
        assert_eq!(body["max_tokens"], 100);
        assert_eq!(body["stream_options"]["include_usage"], true);

        let request = RoundRequest {
            api: Api::Responses,
            ..request
        };
        let body = request.body(&transcript);
        assert_eq!(body["instructions"], "Be brief.");
        assert_eq!(body["store"], false);
        assert_eq!(
            body["input"][1],
            json!({"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"})
        );
        assert_eq!(
            body["input"][2],
            json!({"type": "function_call_output", "call_id": "call_1", "output": "sunny"})
        );
        assert_eq!(body["tools"][0]["name"], "get_weather");
        assert_eq!(body["max_output_tokens"], 100);
    }
}
