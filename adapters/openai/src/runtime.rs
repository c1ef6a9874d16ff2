//! [`OpenAiAdapter`] and its runtime: the model loop.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use futures_util::{Stream, StreamExt};
use harness_core::action::{ActionRequest, ApprovalRequest};
use harness_core::adapter::{
    AdapterEvent, AgentConfig, BoxFuture, BoxStream, CancelResult, Delivery, DeploymentContext,
    EventResult, HarnessAdapter, HarnessRuntime, Restored, ResumeDecision, RunLimits,
    RuntimeContext, RuntimeIdentity, RuntimeInit, TurnInput,
};
use harness_core::capability::CapabilityReport;
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::event::{
    CancelReason, Content, RunSucceeded, TextDelta, ToolCall, ToolCallCompleted, ToolCallOutcome,
    Usage,
};
use harness_core::file::{FileKind, ValidatedInputFile};
use harness_core::id::{AdapterId, ExecutionId, ToolCallId};
use harness_core::manifest::{Adapter as _, HarnessDescriptor};
use harness_core::session::{ScopedThreadState, StateKey, Version};
use harness_core::skill::disclosure;
use harness_core::telemetry::TelemetrySink;
use harness_core::tool::{
    Approved, ProviderNameRule, ProviderToolNames, ToolCallContext, ToolHandle, ToolOutcome,
};
use harness_core::trace::TraceContext;
use harness_macros::Adapter;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::{Endpoint, OpenAiOptions, invalid};
use crate::error::{http_error, idle, protocol, transport_error};
use crate::sse::SseDecoder;
use crate::wire::{Attachment, Call, FunctionSpec, Item, Piece, Round, RoundRequest, cut_short};

/// The adapter's id.
pub const ADAPTER_ID: &str = "openai";
/// The name [`OpenAiAdapter::new`] registers its endpoint under: the endpoint a request that
/// names none gets.
pub const DEFAULT_ENDPOINT: &str = "default";
/// Where a conversation's history lives in its thread state.
pub const HISTORY_KEY: &str = "openai/history";
/// Where a conversation's turn paused on an approval keeps what a fresh runtime needs to
/// take the pause over (its transcript so far and the round's calls): one record per
/// conversation, the latest pause's.
pub const PAUSED_KEY: &str = "openai/paused";
/// The most bytes of an error response's body that are read.
const ERROR_BODY_BYTES: usize = 64 * 1024;
/// The most bytes of a whole (non-streaming) response that are read: past it, the round
/// fails `protocol`.
const MAX_RESPONSE_BYTES: usize = 32 << 20;
/// How many items a segment's producer may be ahead of its consumer.
const AHEAD: usize = 64;

/// A model loop over an OpenAI-compatible endpoint, running the execution's portable tools.
///
/// The operator registers endpoints ([`Endpoint`]: URL, API, model, key, instructions,
/// limits); a request picks one by name at most, and a model and temperature among those the
/// endpoint allows ([`OpenAiOptions`]). Each turn is a loop: the model streams a response
/// (text and reasoning become `message.delta` and `reasoning.delta` as they arrive, usage
/// becomes `usage`); when it calls tools, each call is a `tool.call.started`, the calls run
/// through the execution's [`ToolHandle`]s (concurrently; those whose policy needs approval
/// wait for one `tool_approval` action covering them all, approve / reject / edit per call,
/// the edits checked against the tool's schema again), each ends with its
/// `tool.call.completed`, the results go back to the model, and the next round starts. A
/// round without tool calls ends the run. At most [`Endpoint::max_tool_rounds`] rounds, and
/// within the execution's run limits: each round's `usage` counts its model request
/// (`modelTurns`), and the loop makes no request past `maxModelTurns`
/// (`LIMIT_MODEL_TURNS`) and announces no tool call past `maxToolCalls`
/// (`LIMIT_TOOL_CALLS`), before the service's driver would have to stop it.
///
/// A conversation's history (its user messages, the model's replies and calls, the tool
/// results) is kept in the conversation's thread state under [`HISTORY_KEY`], written once
/// when a turn succeeds (compare-and-set: of two turns of one conversation at once, the
/// second to finish fails `STATE_VERSION_CONFLICT` rather than lose the first), and read
/// back by the next turn on any replica. [`Endpoint::max_history_bytes`] bounds it (oldest
/// turns dropped first).
///
/// ```
/// use harness_openai::{Endpoint, OpenAiAdapter, OpenAiOptions, DEFAULT_ENDPOINT};
/// let adapter = OpenAiAdapter::new(Endpoint::new("http://127.0.0.1:4010/v1", "gpt-4.1"))?
///     .with_endpoint("local", Endpoint::new("http://127.0.0.1:11434/v1", "llama3.1"))?;
/// assert_eq!(adapter.endpoints().collect::<Vec<_>>(), [DEFAULT_ENDPOINT, "local"]);
/// // What a request sets to use the other endpoint.
/// assert_eq!(OpenAiOptions::endpoint("local").to_value(), serde_json::json!({"endpoint": "local"}));
/// # Ok::<(), harness_core::error::HarnessError>(())
/// ```
#[derive(Clone, Adapter)]
#[adapter(
    id = "openai",
    name = "Model loop over an OpenAI-compatible API (Chat Completions or Responses)",
    contract_versions = [1],
    execution_mode = in_process(compatibility_only),
    dependency(kind = service, name = "openai-compatible-api", version = "v1"),
    options = OpenAiOptions,
    capability(
        "stream.text",
        native,
        explanation = "streamed content deltas (delta.content, response.output_text.delta) \
            become message.delta as they arrive",
    ),
    capability(
        "stream.reasoning",
        native,
        explanation = "streamed reasoning (delta.reasoning_content, reasoning summary and \
            reasoning text deltas) becomes reasoning.delta, when the model sends it",
        constraints(when = "the model streams reasoning"),
    ),
    capability(
        "middleware.portable",
        native,
        explanation = "every tool call of the loop runs through a ToolHandle the service made \
            with the operator's middleware policy: denied tools fail TOOL_DENIED_BY_POLICY \
            (the model reads why), approval is required where the policy says, arguments \
            are bounded and rewritten, results redacted and capped before the model reads \
            them; the caps narrow the run limits",
    ),
    capability(
        "stream.usage",
        native,
        explanation = "each round's usage (stream_options.include_usage, response.completed) \
            becomes one usage event, which also counts the round's model request (modelTurns: \
            1; a round whose server reports no usage has a usage event of its own for it)",
    ),
    capability(
        "invoke.non_streaming",
        native,
        explanation = "an execution started for its outcome (the service's invoke, or a wait \
            over HTTP) makes non-streaming model requests (\"stream\": false): each round's \
            text is one message.delta, its reasoning one reasoning.delta",
    ),
    capability(
        "session.multi_turn",
        native,
        explanation = "a conversation's history is kept in its thread state and sent again with \
            the next turn",
    ),
    capability(
        "session.clear",
        native,
        explanation = "a cleared session (a new epoch) has no history: its next turn starts afresh",
    ),
    capability(
        "thread.eviction_restore",
        native,
        explanation = "the history is read back from the thread state by any runtime, process or \
            replica",
    ),
    capability(
        "runtime.eviction_recovery",
        native,
        explanation = "a turn paused on an approval keeps its transcript and the round's calls \
            in the conversation's thread state (key openai/paused): a runtime evicted by the \
            service's pool of idle runtimes is restored from it on a fresh runtime when the \
            answer comes; a pause of an execution without a conversation has nowhere to be \
            kept, so its runtime stays alive until answered",
        constraints(requires = "a conversation id"),
    ),
    capability(
        "thread.durable_commit",
        native,
        explanation = "a successful turn commits the whole history with one compare-and-set \
            write; a concurrent turn's commit fails STATE_VERSION_CONFLICT",
    ),
    capability(
        "interrupt.tool_approval",
        native,
        explanation = "calls of tools whose policy needs approval wait for one tool_approval \
            action (approve, reject, or edit the arguments, checked against the tool's schema)",
    ),
    capability(
        "interrupt.multi_tool",
        native,
        explanation = "the calls of one round that need approval are one action, decided per call",
    ),
    capability(
        "tool.builtin",
        native,
        explanation = "the execution's portable tools are offered to the model as functions \
            (reversible provider-safe names) and run through their handles",
        constraints("portableTools" = true),
    ),
    capability(
        "tool.mcp",
        native,
        explanation = "the tools of MCP servers the service offers (harness-mcp providers) are \
            portable tools like any other",
    ),
    capability(
        "tool.caller_credentials",
        native,
        explanation = "a caller's credential reaches only its tool provider through the service; \
            this adapter never sees it",
    ),
    capability(
        "tool.partial_availability",
        native,
        explanation = "a tool provider that is down is reported tool.unavailable and the model \
            gets the other tools",
    ),
    capability(
        "tool.cancellation",
        native,
        explanation = "cancelling the execution stops the tool calls in flight (their futures \
            are dropped) and the model's stream",
    ),
    capability(
        "input.images",
        native,
        explanation = "images go to the model as image parts (Chat Completions `image_url`, \
            Responses `input_image`) with a base64 data URL; whether the model reads them is the \
            model's",
        constraints(mediaTypes = ["image/png", "image/jpeg", "image/gif", "image/webp"]),
    ),
    capability(
        "input.documents",
        native,
        explanation = "PDFs go to the model as file parts (Chat Completions `file`, Responses \
            `input_file`) with a base64 data URL; text, Markdown and JSON as text parts naming \
            the file",
        constraints(mediaTypes = ["application/pdf", "text/plain", "text/markdown", "application/json"]),
    ),
    capability(
        "skills",
        emulated,
        explanation = "the provider has no skills of its own: the granted skills' names and \
            descriptions go in the model's instructions, and the adapter runs two tools of its \
            own, skills.load (a skill's body and the list of its files) and skills.read (one \
            file, as text, at most 256 KiB)",
        constraints(tools = ["skills.load", "skills.read"]),
    ),
    capability(
        "observability.metrics",
        native,
        explanation = "every outcome reaches the execution's log, so the metrics layer counts and \
            times each execution by outcome and its events by kind",
    ),
    capability(
        "observability.tracing",
        native,
        explanation = "the loop runs inside the execution's stream: no task of its own",
    ),
    capability(
        "observability.trace_propagation",
        native,
        explanation = "the turn's W3C trace context is sent as the traceparent and tracestate \
            headers of every model request",
        constraints(via = "HTTP headers"),
    ),
    capability(
        "observability.redaction",
        native,
        explanation = "everything the model and the tools produce is yielded to the runtime \
            stack, where redaction applies; the adapter logs no content",
    ),
    capability(
        "runtime.cancel",
        native,
        explanation = "cancelling drops the model's HTTP stream (the connection closes) and the \
            tool calls in flight",
    ),
    capability(
        "runtime.restart",
        native,
        explanation = "restart drops the runtime's HTTP client (its connections); the next \
            round makes a new one. Durable conversation state stays: the history (in the \
            thread state), the turn's transcript, and a pause with its pending interrupt, \
            which an answer after the restart resumes",
    ),
    capability(
        "runtime.bounded_cleanup",
        native,
        explanation = "cleanup cancels the turn in progress and drops the HTTP client with its \
            connections",
    ),
    capability(
        "runtime.lease_fencing",
        native,
        explanation = "a fenced replica cancels the run, which drops the model's stream",
    ),
)]
pub struct OpenAiAdapter {
    profiles: Arc<BTreeMap<String, Arc<Profile>>>,
}

impl fmt::Debug for OpenAiAdapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiAdapter")
            .field("endpoints", &self.profiles.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// One endpoint, checked, with its key resolved.
struct Profile {
    endpoint: Endpoint,
    key: Option<String>,
}

impl OpenAiAdapter {
    /// The adapter with `endpoint` as [`DEFAULT_ENDPOINT`].
    ///
    /// # Errors
    /// `configuration` (`OPTIONS_INVALID`) when [`Endpoint::check`] refuses it or its
    /// `apiKeyEnv` is not set.
    pub fn new(endpoint: Endpoint) -> Result<Self, HarnessError> {
        let adapter = Self {
            profiles: Arc::new(BTreeMap::new()),
        };
        adapter.with_endpoint(DEFAULT_ENDPOINT, endpoint)
    }

    /// Also offers `endpoint` under `name`, for requests whose options name it.
    ///
    /// # Errors
    /// `configuration` (`OPTIONS_INVALID`) when `name` is taken or not 1 to 64 ASCII
    /// letters, digits, `-`, `_` or `.`, or the endpoint is refused (see [`new`](Self::new)).
    pub fn with_endpoint(
        mut self,
        name: impl Into<String>,
        endpoint: Endpoint,
    ) -> Result<Self, HarnessError> {
        let name = name.into();
        let valid = (1..=64).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !valid {
            return Err(invalid(format!(
                "invalid endpoint name {name:?}: use 1 to 64 ASCII letters, digits, `-`, `_` or `.`"
            )));
        }
        if self.profiles.contains_key(&name) {
            return Err(invalid(format!(
                "the openai adapter already has an endpoint named `{name}`"
            )));
        }
        endpoint.check()?;
        let key = endpoint.resolve_key()?;
        Arc::make_mut(&mut self.profiles).insert(name, Arc::new(Profile { endpoint, key }));
        Ok(self)
    }

    /// The endpoint registered as `name`.
    #[must_use]
    pub fn endpoint(&self, name: &str) -> Option<&Endpoint> {
        self.profiles.get(name).map(|p| &p.endpoint)
    }

    /// The names of the registered endpoints, in order.
    pub fn endpoints(&self) -> impl Iterator<Item = &str> {
        self.profiles.keys().map(String::as_str)
    }

    /// The endpoint and model a request picks: the engine's narrowed choice (`chosen`, from
    /// the instance's model policy: the operator's word, used as is) or else its options'
    /// `model` among the endpoint's, else the endpoint's model.
    fn pick(
        &self,
        options: &Value,
        chosen: Option<&harness_core::context::ModelSelection>,
    ) -> Result<(Arc<Profile>, String, Option<f64>), HarnessError> {
        let options = OpenAiOptions::from_value(options)?;
        let name = options.endpoint.as_deref().unwrap_or(DEFAULT_ENDPOINT);
        let profile = self.profiles.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.endpoints().collect();
            invalid(format!(
                "the openai adapter has no endpoint named {name:?}; its endpoints are: {}",
                known.join(", ")
            ))
        })?;
        let endpoint = &profile.endpoint;
        if let Some(chosen) = chosen {
            if let Some(other) = options.model.as_deref().filter(|m| *m != chosen.as_str()) {
                return Err(invalid(format!(
                    "the request chooses model {other:?} in its options but runs {:?} (its \
                     `model`, or the instance's default): choose the model once, with `model`",
                    chosen.as_str()
                )));
            }
            return Ok((
                Arc::clone(profile),
                chosen.as_str().to_owned(),
                options.temperature,
            ));
        }
        let model = match options.model {
            None => endpoint.model.clone(),
            Some(m) if m == endpoint.model || endpoint.models.contains(&m) => m,
            Some(m) => {
                let mut allowed = vec![endpoint.model.as_str()];
                allowed.extend(endpoint.models.iter().map(String::as_str));
                return Err(invalid(format!(
                    "endpoint `{name}` does not offer model {m:?}; it offers: {}",
                    allowed.join(", ")
                )));
            }
        };
        Ok((Arc::clone(profile), model, options.temperature))
    }
}

impl HarnessAdapter for OpenAiAdapter {
    /// Ready when every endpoint answers HTTP: one bounded `GET` (2 s) of
    /// its models list each, without the key.
    fn health(&self) -> BoxFuture<'_, harness_core::adapter::HarnessHealth> {
        let endpoints = self
            .profiles
            .iter()
            .map(|(name, profile)| (name.clone(), profile.endpoint.clone()))
            .collect();
        Box::pin(crate::health::endpoints(endpoints))
    }

    /// Checks the request's options (endpoint, model, temperature) without a network call,
    /// and reports the descriptor's capabilities.
    fn evaluate<'a>(
        &'a self,
        config: &'a AgentConfig,
        _deployment: &'a DeploymentContext,
    ) -> BoxFuture<'a, Result<CapabilityReport, HarnessError>> {
        let picked = self.pick(&config.options, config.model.as_ref());
        Box::pin(async move {
            picked?;
            Ok(Self::static_descriptor().capabilities().clone())
        })
    }

    fn create_runtime(
        &self,
        context: RuntimeContext,
    ) -> BoxFuture<'_, Result<Box<dyn HarnessRuntime>, HarnessError>> {
        let result = self
            .pick(&context.config.options, context.config.model.as_ref())
            .map(|(profile, model, temperature)| {
                // Progressive disclosure of the granted skills: listed in the instructions,
                // loaded on demand through the adapter's own tools.
                let mut tools = context.tools;
                tools.extend(
                    disclosure::tools(&context.skills)
                        .into_iter()
                        .map(|t| t.cancelled_by(context.cancellation.clone())),
                );
                let prompt = match (
                    context
                        .prompt
                        .map(harness_core::context::RenderedPrompt::into_string),
                    disclosure::listing(&context.skills),
                ) {
                    (Some(p), Some(l)) => Some(format!("{p}\n\n{l}")),
                    (p, l) => p.or(l),
                };
                let names = ProviderToolNames::new(
                    tools.iter().map(ToolHandle::id),
                    ProviderNameRule::COMMON,
                );
                Box::new(OpenAiRuntime {
                    adapter: context.adapter.clone(),
                    execution_id: context.execution_id.clone(),
                    profile,
                    model,
                    temperature,
                    client: Mutex::new(None),
                    prompt,
                    tools,
                    names,
                    thread_state: context.thread_state,
                    limits: context.limits,
                    whole: context.delivery == Delivery::Outcome,
                    cancellation: context.cancellation.child_token(),
                    turn: tokio::sync::Mutex::new(Turn::default()),
                    pending: Mutex::new(None),
                    kept: AtomicBool::new(false),
                    // The name is a valid constant; a refusal would only lose the metric.
                    model_seconds: context
                        .telemetry
                        .histogram(MODEL_REQUEST_SECONDS)
                        .unwrap_or_else(|_| metrics::Histogram::noop()),
                    telemetry: context.telemetry,
                }) as Box<dyn HarnessRuntime>
            });
        Box::pin(async move { result })
    }
}

/// The operator's instructions, then the execution's rendered prompt, if any.
fn instructions(operator: Option<&str>, prompt: Option<&str>) -> Option<String> {
    match (operator, prompt) {
        (Some(a), Some(b)) => Some(format!("{a}\n\n{b}")),
        (Some(a), None) => Some(a.to_owned()),
        (None, Some(b)) => Some(b.to_owned()),
        (None, None) => None,
    }
}

/// The static descriptor (also what `Describe` returns).
#[must_use]
pub fn descriptor() -> &'static HarnessDescriptor {
    OpenAiAdapter::static_descriptor()
}

/// A conversation's history as its thread state keeps it.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct History {
    /// The format's version (1).
    version: u32,
    items: Vec<Item>,
}

fn history_key() -> StateKey {
    HISTORY_KEY.parse().expect("a valid state key")
}

/// What a call of a round becomes.
#[derive(Debug)]
enum Plan {
    /// It runs now, through tool `handle`.
    Run { handle: usize, arguments: Value },
    /// It waits for the caller's decision, through tool `handle`.
    Approve { handle: usize, arguments: Value },
    /// It cannot run: the result the model reads says why.
    Refused { message: String },
}

#[derive(Debug)]
struct Planned {
    call_id: ToolCallId,
    provider: Call,
    plan: Plan,
}

/// A round paused on an approval: its calls, and the results of those already done.
#[derive(Debug)]
struct Awaiting {
    calls: Vec<Planned>,
    results: Vec<Option<String>>,
}

/// A turn paused on an approval, as the thread state keeps it ([`PAUSED_KEY`]).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PausedTurn {
    /// The format's version (1).
    version: u32,
    /// The execution that paused, and the action it awaits: a restore checks both.
    execution: String,
    action: String,
    transcript: Vec<Item>,
    history_version: Option<Version>,
    rounds: u32,
    tool_calls: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    trace: Option<TraceContext>,
    calls: Vec<PausedCall>,
    results: Vec<Option<String>>,
}

/// One call of the paused round: its tool by id (handles are found again by id).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PausedCall {
    call_id: ToolCallId,
    provider: Call,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    arguments: Option<Value>,
    /// `run`, `approve` or `refused`.
    plan: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

fn paused_key() -> StateKey {
    PAUSED_KEY.parse().expect("a valid state key")
}

/// The state of the turn in progress.
#[derive(Debug, Default)]
struct Turn {
    transcript: Vec<Item>,
    /// The version of the history read when the turn started (`None`: none was stored).
    history_version: Option<Version>,
    rounds: u32,
    /// Tool calls started in this execution (`tool.call.started` events).
    tool_calls: u32,
    trace: Option<TraceContext>,
    awaiting: Option<Awaiting>,
}

/// The span of one model round (the execution's telemetry).
const MODEL_REQUEST_SPAN: &str = "model.request";
/// The histogram of model round durations, in seconds (the execution's telemetry).
const MODEL_REQUEST_SECONDS: &str = "model_request_seconds";

struct OpenAiRuntime {
    adapter: AdapterId,
    execution_id: ExecutionId,
    profile: Arc<Profile>,
    model: String,
    temperature: Option<f64>,
    /// The HTTP client, made on first use and dropped by `restart` and `cleanup`. Each round
    /// has a connection of its own (`Connection: close`).
    client: Mutex<Option<reqwest::Client>>,
    /// The execution's rendered prompt, after the operator's instructions.
    prompt: Option<String>,
    tools: Vec<ToolHandle>,
    names: ProviderToolNames,
    thread_state: Option<ScopedThreadState>,
    /// The execution's run limits: the loop stops before a model request or a tool call
    /// past them (the service's driver would end the run there too, but only after the
    /// request was made or the call started).
    limits: RunLimits,
    /// Whether the caller wants the outcome only ([`Delivery::Outcome`]): each round is one
    /// non-streaming model request.
    whole: bool,
    cancellation: CancellationToken,
    turn: tokio::sync::Mutex<Turn>,
    pending: Mutex<Option<ActionRequest>>,
    /// Whether the current pause is kept in the thread state (a fresh runtime could take
    /// it over).
    kept: AtomicBool,
    /// The execution's telemetry: a `model.request` span per round, under the execution's
    /// span.
    telemetry: TelemetrySink,
    /// `harness_adapter_<adapter id>_model_request_seconds`: how long each model round took,
    /// from the request to the end of its response (failed rounds included).
    model_seconds: metrics::Histogram,
}

impl fmt::Debug for OpenAiRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiRuntime")
            .field("execution_id", &self.execution_id)
            .field("model", &self.model)
            .field("tools", &self.tools)
            .finish_non_exhaustive()
    }
}

/// Where a segment's items go before its terminal one.
struct Emit(mpsc::Sender<EventResult>);

impl Emit {
    async fn content(&self, content: Content) {
        // A closed channel means the segment's stream was dropped: so is this future.
        let _ = self.0.send(Ok(AdapterEvent::Content(content))).await;
    }
}

/// The turn's files as the model reads them, read now (the engine validated them: images
/// and PDFs by their bytes, text as UTF-8).
async fn attachments(files: &[ValidatedInputFile]) -> Result<Vec<Attachment>, HarnessError> {
    use base64::Engine as _;
    let mut out = Vec::with_capacity(files.len());
    for file in files {
        let bytes = file.read().await?;
        let media_type = file.media_type().essence();
        out.push(if file.is_text() {
            Attachment::Text {
                name: file.name().to_owned(),
                text: String::from_utf8_lossy(&bytes).into_owned(),
            }
        } else {
            let url = format!(
                "data:{media_type};base64,{}",
                base64::engine::general_purpose::STANDARD.encode(&bytes)
            );
            match file.kind() {
                FileKind::Image => Attachment::Image { url },
                FileKind::Document => Attachment::File {
                    name: file.name().to_owned(),
                    url,
                },
            }
        });
    }
    Ok(out)
}

fn cancelled() -> HarnessError {
    HarnessError::new(ErrorCategory::Cancelled, "the execution was cancelled")
}

impl OpenAiRuntime {
    fn endpoint(&self) -> &Endpoint {
        &self.profile.endpoint
    }

    /// A new turn: the conversation's history, the user's message, then the rounds.
    async fn run_turn(&self, emit: Emit, turn: TurnInput) -> EventResult {
        let mut state = self.turn.lock().await;
        *state = Turn {
            trace: turn.trace_context.clone(),
            ..Turn::default()
        };
        if let Some(thread) = &self.thread_state
            && let Some((history, version)) = thread.get_json::<History>(&history_key()).await?
        {
            state.transcript = history.items;
            state.history_version = Some(version);
        }
        let files = attachments(&turn.files).await?;
        state.transcript.push(Item::User {
            text: turn.message,
            files,
        });
        self.rounds(&emit, &mut state).await
    }

    /// The caller decided: the paused calls end as decided, then the rounds go on.
    async fn run_resume(&self, emit: Emit, decision: ResumeDecision) -> EventResult {
        let mut state = self.turn.lock().await;
        let Some(awaiting) = state.awaiting.take() else {
            return Err(protocol(
                "resume was called, but no tool call awaits a decision",
            ));
        };
        *lock(&self.pending) = None;
        self.forget_pause().await;
        let Awaiting { calls, mut results } = awaiting;
        for (planned, result) in calls.iter().zip(results.iter_mut()) {
            let Plan::Approve { handle, .. } = &planned.plan else {
                continue;
            };
            let ctx = ToolCallContext::new(planned.call_id.clone(), self.execution_id.clone());
            let outcome = match self.tools[*handle].invoke_approved(&decision, ctx) {
                Ok(Approved::Run {
                    invocation,
                    arguments,
                    edited,
                }) => {
                    if edited {
                        emit.content(Content::ToolCallUpdated(ToolCall {
                            call_id: planned.call_id.clone(),
                            tool: self.tools[*handle].id().to_string(),
                            arguments,
                        }))
                        .await;
                    }
                    tokio::select! {
                        biased;
                        () = self.cancellation.cancelled() => return Err(cancelled()),
                        outcome = invocation => Ok(outcome),
                    }
                }
                Ok(Approved::Rejected { reason }) => Err(reason),
                Err(e) => return Err(protocol(e.to_string())),
            };
            let (completed, text) = match outcome {
                Ok(outcome) => completed_with(outcome),
                Err(reason) => (
                    ToolCallOutcome::Rejected {
                        reason: reason.clone(),
                    },
                    json!({"error": "the user rejected this call", "reason": reason}).to_string(),
                ),
            };
            emit.content(Content::ToolCallCompleted(ToolCallCompleted {
                call_id: planned.call_id.clone(),
                outcome: completed,
            }))
            .await;
            *result = Some(text);
        }
        push_results(&mut state.transcript, &calls, results);
        self.rounds(&emit, &mut state).await
    }

    /// Model rounds until one makes no tool call (the run succeeds) or some calls need the
    /// caller's approval (the run pauses).
    async fn rounds(&self, emit: &Emit, state: &mut Turn) -> EventResult {
        loop {
            let max = self.endpoint().max_tool_rounds;
            if state.rounds >= max {
                return Err(HarnessError::new(
                    ErrorCategory::Configuration,
                    format!(
                        "the model was still calling tools after {max} rounds: raise the \
                         endpoint's maxToolRounds, or give it less to do per execution"
                    ),
                )
                .with_code(ErrorCode::TOOL_ROUNDS_EXHAUSTED));
            }
            if let Some(max) = self.limits.max_model_turns()
                && state.rounds >= max
            {
                return Err(HarnessError::new(
                    ErrorCategory::Capacity,
                    format!(
                        "the execution made {max} model requests, its limit (`maxModelTurns`), \
                         and the model was still calling tools"
                    ),
                )
                .with_code(ErrorCode::LIMIT_MODEL_TURNS)
                .with_retryable(false));
            }
            state.rounds += 1;
            let (text, calls) = self
                .measured_round(emit, &state.transcript, state.trace.as_ref())
                .await?;
            state.transcript.push(Item::Assistant {
                text,
                calls: calls.clone(),
            });
            if calls.is_empty() {
                self.commit(state).await?;
                return Ok(AdapterEvent::Completed(RunSucceeded::default()));
            }
            let planned = self.plan(emit, calls, &mut state.tool_calls).await?;
            let mut results: Vec<Option<String>> = vec![None; planned.len()];
            let mut running = FuturesUnordered::new();
            let mut approvals = Vec::new();
            for (at, p) in planned.iter().enumerate() {
                match &p.plan {
                    Plan::Refused { message } => {
                        emit.content(Content::ToolCallCompleted(ToolCallCompleted {
                            call_id: p.call_id.clone(),
                            outcome: ToolCallOutcome::Failure {
                                message: message.clone(),
                            },
                        }))
                        .await;
                        results[at] = Some(json!({"error": message}).to_string());
                    }
                    Plan::Run { handle, arguments } => {
                        let ctx =
                            ToolCallContext::new(p.call_id.clone(), self.execution_id.clone());
                        let call = self.tools[*handle].invoke(arguments.clone(), ctx);
                        running.push(async move { (at, call.await) });
                    }
                    Plan::Approve { handle, arguments } => {
                        match self.tools[*handle]
                            .approval_call(p.call_id.clone(), arguments.clone())
                        {
                            Ok(call) => approvals.push(call),
                            Err(e) => return Err(protocol(e.to_string())),
                        }
                    }
                }
            }
            loop {
                let next = tokio::select! {
                    biased;
                    () = self.cancellation.cancelled() => return Err(cancelled()),
                    next = running.next() => next,
                };
                let Some((at, outcome)) = next else { break };
                let (completed, text) = completed_with(outcome);
                emit.content(Content::ToolCallCompleted(ToolCallCompleted {
                    call_id: planned[at].call_id.clone(),
                    outcome: completed,
                }))
                .await;
                results[at] = Some(text);
            }
            drop(running);
            if !approvals.is_empty() {
                let request = ActionRequest::approval(
                    ApprovalRequest::new(approvals).map_err(|e| protocol(e.to_string()))?,
                );
                *lock(&self.pending) = Some(request.clone());
                state.awaiting = Some(Awaiting {
                    calls: planned,
                    results,
                });
                self.keep_pause(state, &request).await;
                return Ok(AdapterEvent::Action(request));
            }
            push_results(&mut state.transcript, &planned, results);
        }
    }

    /// Announces each call (`tool.call.started`) and decides what becomes of it; fails
    /// before announcing a call past the execution's `maxToolCalls` (none of this round's
    /// calls has run yet).
    async fn plan(
        &self,
        emit: &Emit,
        calls: Vec<Call>,
        started: &mut u32,
    ) -> Result<Vec<Planned>, HarnessError> {
        let mut planned = Vec::with_capacity(calls.len());
        for call in calls {
            if let Some(max) = self.limits.max_tool_calls()
                && *started >= max
            {
                return Err(HarnessError::new(
                    ErrorCategory::Capacity,
                    format!(
                        "the execution reached its limit of {max} tool calls (`maxToolCalls`); \
                         the call past it was not started"
                    ),
                )
                .with_code(ErrorCode::LIMIT_TOOL_CALLS)
                .with_retryable(false));
            }
            *started += 1;
            let call_id = ToolCallId::generate();
            let handle = self
                .names
                .from_provider(&call.name)
                .and_then(|id| self.tools.iter().position(|h| h.id() == id));
            let parsed = parse_arguments(&call.arguments);
            let tool = handle.map_or_else(|| call.name.clone(), |h| self.tools[h].id().to_string());
            let shown = parsed
                .clone()
                .unwrap_or_else(|_| Value::String(call.arguments.clone()));
            emit.content(Content::ToolCallStarted(ToolCall {
                call_id: call_id.clone(),
                tool: tool.clone(),
                arguments: shown,
            }))
            .await;
            let plan = match (handle, parsed) {
                (None, _) => Plan::Refused {
                    message: format!("there is no tool named `{}` in this execution", call.name),
                },
                (Some(_), Err(e)) => Plan::Refused {
                    message: format!("the arguments for tool `{tool}` are not a JSON object: {e}"),
                },
                (Some(handle), Ok(arguments)) if self.tools[handle].requires_approval() => {
                    Plan::Approve { handle, arguments }
                }
                (Some(handle), Ok(arguments)) => Plan::Run { handle, arguments },
            };
            planned.push(Planned {
                call_id,
                provider: call,
                plan,
            });
        }
        Ok(planned)
    }

    /// [`round`](Self::round) inside a `model.request` span of the execution's telemetry,
    /// its duration recorded in the model request histogram.
    async fn measured_round(
        &self,
        emit: &Emit,
        transcript: &[Item],
        trace: Option<&TraceContext>,
    ) -> Result<(String, Vec<Call>), HarnessError> {
        let started = std::time::Instant::now();
        let round = self.round(emit, transcript, trace);
        let result = match self.telemetry.span(MODEL_REQUEST_SPAN) {
            Ok(span) => round.instrument(span).await,
            Err(_) => round.await,
        };
        self.model_seconds.record(started.elapsed().as_secs_f64());
        result
    }

    /// One model round: the request, then the stream, read to its end.
    async fn round(
        &self,
        emit: &Emit,
        transcript: &[Item],
        trace: Option<&TraceContext>,
    ) -> Result<(String, Vec<Call>), HarnessError> {
        let endpoint = self.endpoint();
        let functions: Vec<FunctionSpec<'_>> = self
            .tools
            .iter()
            .map(|h| FunctionSpec {
                name: self.names.to_provider(h.id()).unwrap_or(h.id().as_str()),
                description: h.descriptor().description(),
                parameters: h.descriptor().input_schema(),
            })
            .collect();
        let instructions = instructions(endpoint.instructions.as_deref(), self.prompt.as_deref());
        let body = RoundRequest {
            api: endpoint.api,
            model: &self.model,
            instructions: instructions.as_deref(),
            functions: &functions,
            max_output_tokens: endpoint.max_output_tokens,
            temperature: self.temperature,
            stream: !self.whole,
        }
        .body(transcript);
        let accept = if self.whole {
            "application/json"
        } else {
            "text/event-stream"
        };
        let body = serde_json::to_vec(&body).map_err(|e| protocol(e.to_string()))?;
        let mut request = self
            .client()?
            .post(endpoint.url())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, accept)
            // One connection per round, closed with it: nothing of a round (a pooled
            // connection, the task that returns it to a pool) outlives it, so everything the
            // HTTP stack does happens inside the execution, and cleanup holds no socket.
            .header(reqwest::header::CONNECTION, "close")
            .body(body);
        if let Some(key) = &self.profile.key {
            request = request.bearer_auth(key);
        }
        for (name, value) in &endpoint.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        if let Some(trace) = trace {
            request = request.header("traceparent", trace.traceparent());
            if let Some(state) = trace.tracestate() {
                request = request.header("tracestate", state);
            }
        }
        let quiet = Duration::from_millis(endpoint.idle_timeout_ms);
        let response = self
            .bounded(quiet, request.send())
            .await?
            .map_err(|e| transport_error(&e))?;
        let status = response.status();
        if !status.is_success() {
            let headers = response.headers().clone();
            let body = self.read_bounded(quiet, response).await;
            return Err(http_error(status.as_u16(), &headers, &body));
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        if self.whole {
            return self.whole_round(emit, quiet, &content_type, response).await;
        }
        if !content_type.starts_with("text/event-stream") {
            let body = self.read_bounded(quiet, response).await;
            return Err(protocol(format!(
                "the model endpoint answered {content_type:?} instead of an event stream"
            ))
            .with_diagnostic(String::from_utf8_lossy(&body[..body.len().min(2048)]).into_owned()));
        }
        let mut bytes = response.bytes_stream();
        let mut decoder = SseDecoder::default();
        let mut round = Round::new(endpoint.api);
        let mut events = Vec::new();
        let mut pieces = Vec::new();
        // The round's first usage event also counts the model request (`modelTurns`); a
        // round whose server reports no usage counts it in one of its own, at its end.
        let mut turn_counted = false;
        while !round.is_done() {
            let chunk = self.bounded(quiet, bytes.next()).await?;
            // The events decoded before a decoding error are applied first: what the model
            // said before its stream broke is the same however the bytes were chunked.
            let (decoded, ended) = match chunk {
                Some(Ok(chunk)) => (decoder.push(&chunk, &mut events), false),
                Some(Err(e)) => return Err(transport_error(&e)),
                None => (decoder.finish(&mut events), true),
            };
            for event in events.drain(..) {
                round.apply(event.event.as_deref(), &event.data, &mut pieces)?;
                for piece in pieces.drain(..) {
                    emit.content(match piece {
                        Piece::Text(text) => Content::MessageDelta(TextDelta::new(text)),
                        Piece::Reasoning(text) => Content::ReasoningDelta(TextDelta::new(text)),
                        Piece::Usage(usage) => Content::Usage(Usage {
                            model_turns: u64::from(!std::mem::replace(&mut turn_counted, true)),
                            ..usage
                        }),
                    })
                    .await;
                }
            }
            decoded.map_err(|e| protocol(e.to_string()))?;
            if ended {
                break;
            }
        }
        // A chat stream that said why it finished but closed before `[DONE]` is complete.
        if !round.is_done() && round.finish.is_none() {
            return Err(cut_short());
        }
        if !turn_counted {
            emit.content(Content::Usage(Usage {
                model_turns: 1,
                ..Usage::default()
            }))
            .await;
        }
        round.into_parts()
    }

    /// The rest of a round asked for whole (`"stream": false`): its body, read to its end
    /// within [`MAX_RESPONSE_BYTES`] (a response whose text and calls fit the round's bounds
    /// fits), then yielded as one text, one reasoning and one usage item.
    async fn whole_round(
        &self,
        emit: &Emit,
        quiet: Duration,
        content_type: &str,
        response: reqwest::Response,
    ) -> Result<(String, Vec<Call>), HarnessError> {
        let mut bytes = response.bytes_stream();
        let mut body = Vec::new();
        while let Some(chunk) = self.bounded(quiet, bytes.next()).await? {
            let chunk = chunk.map_err(|e| transport_error(&e))?;
            if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(protocol(format!(
                    "the model's response is longer than {MAX_RESPONSE_BYTES} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        let value: Value = serde_json::from_slice(&body).map_err(|e| {
            protocol(format!(
                "the model endpoint answered {content_type:?} that is not a JSON response: {e}"
            ))
            .with_diagnostic(String::from_utf8_lossy(&body[..body.len().min(2048)]).into_owned())
        })?;
        let mut round = Round::new(self.endpoint().api);
        let mut pieces = Vec::new();
        round.apply_whole(&value, &mut pieces)?;
        // The whole text (and reasoning) of the round is one delta each.
        let (mut text, mut reasoning, mut usage) = (String::new(), String::new(), None);
        for piece in pieces {
            match piece {
                Piece::Text(t) => text.push_str(&t),
                Piece::Reasoning(t) => reasoning.push_str(&t),
                Piece::Usage(u) => *usage.get_or_insert_with(Usage::default) += u,
            }
        }
        if !reasoning.is_empty() {
            emit.content(Content::ReasoningDelta(TextDelta::new(reasoning)))
                .await;
        }
        if !text.is_empty() {
            emit.content(Content::MessageDelta(TextDelta::new(text)))
                .await;
        }
        emit.content(Content::Usage(Usage {
            model_turns: 1,
            ..usage.unwrap_or_default()
        }))
        .await;
        round.into_parts()
    }

    /// The runtime's HTTP client (made now if there is none).
    fn client(&self) -> Result<reqwest::Client, HarnessError> {
        let mut client = lock(&self.client);
        if let Some(client) = &*client {
            return Ok(client.clone());
        }
        let made = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(self.endpoint().connect_timeout_ms))
            .build()
            .map_err(|e| {
                HarnessError::new(ErrorCategory::Internal, "the HTTP client cannot be built")
                    .with_diagnostic(e.to_string())
            })?;
        *client = Some(made.clone());
        Ok(made)
    }

    /// `future`, unless the execution is cancelled or it takes longer than `quiet`.
    async fn bounded<T>(
        &self,
        quiet: Duration,
        future: impl Future<Output = T>,
    ) -> Result<T, HarnessError> {
        tokio::select! {
            biased;
            () = self.cancellation.cancelled() => Err(cancelled()),
            out = tokio::time::timeout(quiet, future) => out.map_err(|_| idle(quiet)),
        }
    }

    /// At most [`ERROR_BODY_BYTES`] of a body (what could be read in time).
    async fn read_bounded(&self, quiet: Duration, response: reqwest::Response) -> Vec<u8> {
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while body.len() < ERROR_BODY_BYTES {
            match self.bounded(quiet, stream.next()).await {
                Ok(Some(Ok(chunk))) => {
                    let room = ERROR_BODY_BYTES - body.len();
                    body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
                _ => break,
            }
        }
        body
    }

    /// Keeps the paused turn in the conversation's thread state, for a fresh runtime to take
    /// over ([`HarnessRuntime::restore`]) if this one is evicted. Without a conversation, or
    /// when the write fails, the pause is not kept: this runtime then says it cannot be
    /// restored, and the service keeps it alive.
    async fn keep_pause(&self, state: &Turn, request: &ActionRequest) {
        self.kept.store(false, Ordering::SeqCst);
        let (Some(thread), Some(awaiting)) = (&self.thread_state, &state.awaiting) else {
            return;
        };
        let calls = awaiting
            .calls
            .iter()
            .map(|p| {
                let (plan, tool, arguments, message) = match &p.plan {
                    Plan::Run { handle, arguments } => (
                        "run",
                        Some(self.tools[*handle].id().to_string()),
                        Some(arguments.clone()),
                        None,
                    ),
                    Plan::Approve { handle, arguments } => (
                        "approve",
                        Some(self.tools[*handle].id().to_string()),
                        Some(arguments.clone()),
                        None,
                    ),
                    Plan::Refused { message } => ("refused", None, None, Some(message.clone())),
                };
                PausedCall {
                    call_id: p.call_id.clone(),
                    provider: p.provider.clone(),
                    tool,
                    arguments,
                    plan: plan.to_owned(),
                    message,
                }
            })
            .collect();
        let paused = PausedTurn {
            version: 1,
            execution: self.execution_id.to_string(),
            action: request.id.to_string(),
            transcript: state.transcript.clone(),
            history_version: state.history_version,
            rounds: state.rounds,
            tool_calls: state.tool_calls,
            trace: state.trace.clone(),
            calls,
            results: awaiting.results.clone(),
        };
        let kept = async {
            let current = thread.get(&paused_key()).await?.map(|v| v.version);
            thread.put_json(&paused_key(), &paused, current).await
        };
        match kept.await {
            Ok(_) => self.kept.store(true, Ordering::SeqCst),
            Err(e) => {
                tracing::warn!(error = %e, "the paused turn could not be kept in the thread state; its runtime stays alive");
            }
        }
    }

    /// Forgets the kept pause once it is answered (best effort: a record left behind is
    /// the conversation's one, overwritten by its next pause, and a restore checks whose
    /// it is).
    async fn forget_pause(&self) {
        if !self.kept.swap(false, Ordering::SeqCst) {
            return;
        }
        let Some(thread) = &self.thread_state else {
            return;
        };
        if let Ok(Some(kept)) = thread.get(&paused_key()).await {
            let _ = thread.delete(&paused_key(), kept.version).await;
        }
    }

    /// Takes over the pause `restored` describes from the thread state.
    async fn take_over(&self, restored: Restored) -> Result<(), HarnessError> {
        let lost = |why: &str| {
            HarnessError::new(
                ErrorCategory::Persistence,
                "the paused turn could not be restored from the conversation's state",
            )
            .with_diagnostic(why.to_owned())
        };
        let Some(thread) = &self.thread_state else {
            return Err(lost("the execution has no conversation: nothing was kept"));
        };
        let Some((paused, _)) = thread.get_json::<PausedTurn>(&paused_key()).await? else {
            return Err(lost("no paused turn is kept for the conversation"));
        };
        if paused.execution != self.execution_id.as_str()
            || paused.action != restored.pending.id.as_str()
        {
            return Err(lost(
                "the kept paused turn is another execution's or another action's (a later \
                 turn of the conversation paused since)",
            ));
        }
        let handle_of = |tool: Option<&String>| {
            tool.and_then(|t| self.tools.iter().position(|h| h.id().as_str() == t))
                .ok_or_else(|| lost("a paused call's tool is not among the execution's tools"))
        };
        let mut calls = Vec::with_capacity(paused.calls.len());
        for call in paused.calls {
            let plan = match call.plan.as_str() {
                "run" => Plan::Run {
                    handle: handle_of(call.tool.as_ref())?,
                    arguments: call.arguments.unwrap_or(Value::Null),
                },
                "approve" => Plan::Approve {
                    handle: handle_of(call.tool.as_ref())?,
                    arguments: call.arguments.unwrap_or(Value::Null),
                },
                "refused" => Plan::Refused {
                    message: call.message.unwrap_or_default(),
                },
                other => return Err(lost(&format!("unknown plan `{other}`"))),
            };
            calls.push(Planned {
                call_id: call.call_id,
                provider: call.provider,
                plan,
            });
        }
        *self.turn.lock().await = Turn {
            transcript: paused.transcript,
            history_version: paused.history_version,
            rounds: paused.rounds,
            tool_calls: paused.tool_calls,
            trace: paused.trace,
            awaiting: Some(Awaiting {
                calls,
                results: paused.results,
            }),
        };
        *lock(&self.pending) = Some(restored.pending);
        self.kept.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Commits the conversation's history (bounded): once per successful turn.
    async fn commit(&self, state: &mut Turn) -> Result<(), HarnessError> {
        let Some(thread) = &self.thread_state else {
            return Ok(());
        };
        let items = bounded_history(&state.transcript, self.endpoint().max_history_bytes);
        let history = History { version: 1, items };
        let version = thread
            .put_json(&history_key(), &history, state.history_version)
            .await?;
        state.history_version = Some(version);
        Ok(())
    }
}

/// The transcript's newest whole turns (each from a user message) within `limit` bytes.
fn bounded_history(transcript: &[Item], limit: usize) -> Vec<Item> {
    let mut size: usize = transcript.iter().map(Item::size).sum();
    let mut start = 0;
    while size > limit && start < transcript.len() {
        // Drop the oldest turn: up to the next user message.
        let next = transcript[start + 1..]
            .iter()
            .position(|i| matches!(i, Item::User { .. }))
            .map_or(transcript.len(), |p| start + 1 + p);
        size -= transcript[start..next]
            .iter()
            .map(Item::size)
            .sum::<usize>();
        start = next;
    }
    if start > 0 {
        tracing::debug!(
            dropped = start,
            "the conversation's history was trimmed to its bound"
        );
    }
    transcript[start..].to_vec()
}

/// The model's arguments for a call: a JSON object (empty text counts as `{}`).
fn parse_arguments(raw: &str) -> Result<Value, String> {
    if raw.trim().is_empty() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(_) => Err("a JSON value that is not an object".to_owned()),
        Err(e) => Err(e.to_string()),
    }
}

/// The completion event of a call that ran, and the text the model reads.
fn completed_with(outcome: ToolOutcome) -> (ToolCallOutcome, String) {
    match outcome {
        ToolOutcome::Success(output) => {
            let text = match &output {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (ToolCallOutcome::Success { output }, text)
        }
        ToolOutcome::Failure(f) => (
            ToolCallOutcome::Failure {
                message: f.message().to_owned(),
            },
            json!({"error": f.message()}).to_string(),
        ),
        ToolOutcome::Action(_) => {
            let message = "the tool asked for the caller's input, which this adapter does not \
                           support inside a tool call";
            (
                ToolCallOutcome::Failure {
                    message: message.to_owned(),
                },
                json!({"error": message}).to_string(),
            )
        }
    }
}

/// The round's results, in call order, for the model's next round.
fn push_results(transcript: &mut Vec<Item>, calls: &[Planned], results: Vec<Option<String>>) {
    for (planned, result) in calls.iter().zip(results) {
        transcript.push(Item::ToolResult {
            call_id: planned.provider.id.clone(),
            output: result.unwrap_or_else(|| json!({"error": "no result"}).to_string()),
        });
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl HarnessRuntime for OpenAiRuntime {
    fn identity(&self) -> RuntimeIdentity {
        RuntimeIdentity {
            adapter: self.adapter.clone(),
            execution_id: self.execution_id.clone(),
            provider_session_id: None,
        }
    }

    fn initialize(&self) -> BoxFuture<'_, Result<RuntimeInit, HarnessError>> {
        Box::pin(async { Ok(RuntimeInit::default()) })
    }

    fn stream(&self, turn: TurnInput) -> BoxStream<'_, EventResult> {
        let (tx, rx) = mpsc::channel(AHEAD);
        Box::pin(Segment {
            rx,
            run: Some(Box::pin(self.run_turn(Emit(tx), turn))),
            last: None,
        })
    }

    fn resume(&self, decision: ResumeDecision) -> BoxStream<'_, EventResult> {
        let (tx, rx) = mpsc::channel(AHEAD);
        Box::pin(Segment {
            rx,
            run: Some(Box::pin(self.run_resume(Emit(tx), decision))),
            last: None,
        })
    }

    fn pending_action(&self) -> BoxFuture<'_, Option<ActionRequest>> {
        let pending = lock(&self.pending).clone();
        Box::pin(async move { pending })
    }

    fn cancel(&self, _reason: CancelReason) -> BoxFuture<'_, CancelResult> {
        let result = if self.cancellation.is_cancelled() {
            CancelResult::NothingToCancel
        } else {
            self.cancellation.cancel();
            CancelResult::Requested
        };
        Box::pin(async move { result })
    }

    fn restart(&self) -> BoxFuture<'_, Result<(), HarnessError>> {
        Box::pin(async move {
            // Releases the provider client only (its connections); the next round makes a
            // new one. The conversation's state stays: the turn's transcript, its counters
            // and a pause with its pending interrupt, so that an answer after a restart
            // resumes the run (no segment runs meanwhile: one mutating call at a time).
            *lock(&self.client) = None;
            Ok(())
        })
    }

    fn cleanup(&self) -> BoxFuture<'_, ()> {
        self.cancellation.cancel();
        *lock(&self.pending) = None;
        *lock(&self.client) = None;
        Box::pin(async {})
    }

    fn restorable(&self) -> bool {
        self.kept.load(Ordering::SeqCst)
    }

    /// Takes over a pause kept in the conversation's thread state (see [`PAUSED_KEY`]).
    fn restore(&self, restored: Restored) -> BoxFuture<'_, Result<(), HarnessError>> {
        Box::pin(self.take_over(restored))
    }
}

/// A segment: the loop's future, polled by the stream itself (no task), its items passed
/// through a bounded channel, its result last. Dropping it drops the loop: the HTTP stream
/// and the tool calls in flight with it.
struct Segment<'a> {
    rx: mpsc::Receiver<EventResult>,
    run: Option<BoxFuture<'a, EventResult>>,
    last: Option<EventResult>,
}

impl Stream for Segment<'_> {
    type Item = EventResult;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<EventResult>> {
        let this = &mut *self;
        loop {
            if let Poll::Ready(Some(item)) = this.rx.poll_recv(cx) {
                return Poll::Ready(Some(item));
            }
            let Some(run) = this.run.as_mut() else {
                return Poll::Ready(this.last.take());
            };
            match run.as_mut().poll(cx) {
                Poll::Ready(last) => {
                    this.run = None;
                    this.last = Some(last);
                }
                // It may have sent items before it waited.
                Poll::Pending => {
                    return match this.rx.poll_recv(cx) {
                        Poll::Ready(Some(item)) => Poll::Ready(Some(item)),
                        _ => Poll::Pending,
                    };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(t: &str) -> Item {
        Item::User {
            text: t.to_owned(),
            files: Vec::new(),
        }
    }
    fn reply(t: &str) -> Item {
        Item::Assistant {
            text: t.to_owned(),
            calls: Vec::new(),
        }
    }

    #[test]
    fn history_keeps_the_newest_whole_turns_within_its_bound() {
        let transcript = [
            user("aaaa"),
            reply("bbbb"),
            user("cc"),
            reply("dd"),
            user("e"),
            reply("f"),
        ];
        assert_eq!(bounded_history(&transcript, 1000).len(), 6);
        assert_eq!(
            bounded_history(&transcript, 6),
            [user("cc"), reply("dd"), user("e"), reply("f")]
        );
        assert_eq!(bounded_history(&transcript, 2), [user("e"), reply("f")]);
        assert!(bounded_history(&transcript, 1).is_empty());
    }

    #[test]
    fn arguments_are_objects() {
        assert_eq!(parse_arguments("").unwrap(), json!({}));
        assert_eq!(parse_arguments(r#"{"a":1}"#).unwrap(), json!({"a": 1}));
        assert!(parse_arguments("[1]").is_err());
        assert!(parse_arguments("{").is_err());
    }
}
