//! The network Runtime API: the runtime over HTTP+JSON, its event streams as resumable
//! server-sent events, and the `harness` command that serves it and is its client.
//!
//! ```
//! use std::sync::Arc;
//! use harness_core::store::{MemoryStore, ReplicaId};
//! use harness_layers::stack::HarnessStack;
//! use harness_scripted::ScriptedAdapter;
//! use harness_server::{auth::BearerTokens, Instance, Server};
//! use tower::ServiceExt;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let adapter = ScriptedAdapter::quickstart();
//! let stack = HarnessStack::defaults_for(&adapter).unwrap();
//! let store = Arc::new(MemoryStore::new());
//! let server = Server::builder()
//!     .instance(Instance::new(&stack, adapter, store, ReplicaId::new("r1")))
//!     .authenticate(BearerTokens::new().with_token("alice", "alice-token-0123456789").unwrap())
//!     .build()
//!     .unwrap();
//! let response = server.router().oneshot(
//!     axum::http::Request::post("/v1/executions")
//!         .header("authorization", "Bearer alice-token-0123456789")
//!         .header("content-type", "application/json")
//!         .body(axum::body::Body::from(r#"{"adapter":"scripted","message":"hi"}"#))
//!         .unwrap(),
//! ).await.unwrap();
//! assert_eq!(response.status(), 201);
//! # });
//! ```
//!
//! # Endpoints
//!
//! Every path under `/v1` needs a principal ([`auth`]); health and metrics do not (they are
//! the operator's, and say nothing of any caller's data).
//!
//! | method and path | what |
//! |---|---|
//! | `POST /v1/executions` | starts an execution: the [`ExecutionRequest`](harness_core::service::ExecutionRequest) fields, `adapter` (the instance id) and `callerCredentials` (the caller's own credentials for the instance's tool providers, by provider name, for this execution only: never stored, never in an event, redacted from all it yields); the `Idempotency-Key` header (not a body field) and `traceparent` (ignored when malformed, as W3C Trace Context says). `201` with the execution, `200` when the key returned an earlier one, `409 IDEMPOTENCY_CONFLICT` when it was used for a different request. With `?wait=` (`30s`, `500ms`, at most [`ServerBuilder::max_wait`]) it is started for its outcome and the answer waits until it ends, pauses on an action, or the wait runs out: the body is then a [`Waited`] (see [`wait`]) |
//! | `GET /v1/executions` | the caller's executions, newest first: `?limit=` (1 to 200, 50 by default), `?before=` the `next` of the previous page; each with its adapter, state, creation time, the first words of its message and its `conversationId` when it has one |
//! | `GET /v1/executions/{id}` | state, pending actions, artifacts, outcome, last sequence number, `conversationId` when it has one (what a follow-up turn names) |
//! | `GET /v1/executions/{id}/wait` | plain invocation: waits (`?timeout=`, 30 s by default, at most [`ServerBuilder::max_wait`]) until the execution ends or waits for an answer, and answers a [`Waited`]: `status` (`ended`, `awaiting_action`, `timed_out`), the `outcome` gathered from its log (text, reasoning, tool calls and results, artifacts, usage, state, pending action, the public error of a failure) and `next`, where to wait again; see [`wait`] |
//! | `GET /v1/executions/{id}/events` | with `Accept: text/event-stream`, server-sent events: `id: <seq>`, `event: <kind>`, `data: <event JSON>`, from after `Last-Event-ID` (else `?after=`, else the start), keep-alive comments after 15 s without a frame ([`ServerBuilder::keep_alive`]), frames ready together written as one chunk, the stream ending after the terminal event. Otherwise a JSON page: `?after=`, `?limit=` (up to 8,192; 1,000 by default) |
//! | `POST /v1/executions/{id}/actions/{actionId}` | answers an action: an [`ActionResponse`](harness_core::action::ActionResponse) (its `actionId` may be left out) |
//! | `POST /v1/executions/{id}/cancel` | requests cancellation (`{"reason": ...}` optional): `202` with `status`: `requested` for the first request (claimed in the store's record, so one of any number of concurrent requests on any replica), `already_requested` for the others, `already_ended` once the run has ended; confirmed by `run.cancelled` on the stream |
//! | `POST /v1/files` | uploads a file ([`files`]): the raw body, its type in `Content-Type`, `?name=` optional, or a `multipart/form-data` form of one part named `file`; validated by content and size as the engine validates input files (`413 FILE_TOO_LARGE`, `415 FILE_TYPE_MISMATCH` or `FILE_TYPE_UNSUPPORTED` naming the right type), kept as the caller's until the retention of `[files]`; `201` with `{"id", "name", "mediaType", "size", "createdAt", "expiresAt"}`. A start request names it: `"files": [{"fileId": ...}]`; a file inline in a start request is at most `[files] max_inline_bytes` (512 KiB) decoded, else `413` pointing here |
//! | `GET /v1/files/{id}`, `DELETE /v1/files/{id}` | an uploaded file's metadata (never its bytes), or its deletion (`204`); another principal's file, an expired one and a missing one are all `404 FILE_NOT_FOUND` |
//! | `POST /v1/agui/{adapter}` | the [AG-UI face](agui): a `RunAgentInput` in, AG-UI events out as server-sent events; actions are interrupts, resumed by the next run |
//! | `GET /v1/adapters`, `GET /v1/adapters/{id}` | the instances' manifests, options schemas included; `GET /v1/adapters` also their [`health`] by instance id (`{"ready", "reason", "checkedAt"}`) |
//! | `GET /v1/openapi.json` | the [OpenAPI document](openapi) (no token needed) |
//! | `GET /console` | the [console]: a page over this API (it asks for a token, or signs in with a one-time code) |
//! | `POST /console/session` | the console's sign-in: `{"code": ...}`, a [one-time code](Server::console_code), answered once with `{"token": ...}`; a code used, expired or unknown is `401` (no token needed) |
//! | `GET /healthz` | `200` while the process serves |
//! | `GET /readyz` | `200` when every instance's adapter is healthy (its agent's command executable, its model endpoint answering), every MCP server of its tools startable (its command executable) or answering HTTP, the store takes a write (a probe value put and deleted) and every required check of [`ServerBuilder::health`] passes, else `503` with the sanitized reasons, each naming the instance; checks are cached briefly ([`health`]) |
//! | `GET /metrics` | the Prometheus exposition, when the server was given one |
//!
//! # Connections
//!
//! [`serve`] (what `harness serve` runs) accepts the connections and bounds its clients
//! within [`ConnectionLimits`] (the `[connections]` table of [`config`]): a request head
//! must arrive within 10 s (from the accept, or from the first byte of the next request on a
//! kept-alive connection), else the connection is closed; a body within 30 s of its head,
//! else `408` and the connection is closed; a kept-alive connection idle for 60 s is closed;
//! at most 1,024 connections are open, 128 of them from one IP address, and a connection
//! past either cap gets `503` with `Retry-After: 1` and a `capacity` error naming the cap.
//! None of these runs while a response is being written, so an SSE stream that is read lasts
//! as long as its execution; a client that stops reading (no write progress for 60 s) is
//! reset, and resumes its SSE stream with `Last-Event-ID`. Refusals and timeouts are counted ([`socket::names`]). Serving
//! [`router`](Server::router) any other way (`axum::serve`, a test's `oneshot`) has none of
//! these bounds. See [`socket`] for the decisions behind them.
//!
//! When the store's disk fills up, a running execution pauses (its readers see nothing past
//! the last stored event) and goes on once space returns, without a restart; a request that
//! must write is answered `503` with a retryable `persistence` error, code `STORE_FULL`,
//! saying the disk is full. Nothing a reader was shown is lost: only stored events are shown.
//! A disk full for longer than the lease term ends a paused execution as any store outage
//! that long does (see `harness_core::store`).
//!
//! Every response carries `X-Content-Type-Options: nosniff`, and every one but the console's
//! page and assets (which allow their own script and style) `Content-Security-Policy:
//! default-src 'none'; frame-ancestors 'none'`: a JSON body, an event stream, an error or
//! `/metrics` opened in a browser is never sniffed into markup, run, or framed.
//!
//! An uploaded file is its principal's as an execution is: another principal naming its id
//! (reading, deleting, or starting an execution with it) finds nothing, exactly as for an id
//! that never existed; a start request naming such an id is refused `404 FILE_NOT_FOUND`.
//!
//! Skills ([`skills`], `[skills]` in `harness.toml`): a start request asks for skills by name
//! (`"skills": ["pdf-forms"]`); before anything runs, a name on the operator's block list is
//! refused `403 SKILL_BLOCKED` (installed or not), a name the instance does not offer to the
//! caller `404 SKILL_NOT_FOUND` (a skill restricted to other principals is answered exactly
//! as a missing one), and any skills at all on an instance whose adapter takes none `422
//! CAPABILITY_UNSUPPORTED`. Skill folders are checked when the server starts, which fails
//! naming the folder and what is wrong.
//!
//! Errors are `{"error": <public error>}` with the status of [`error::status_of`] and
//! `Retry-After` for `throttled` and `capacity`; no diagnostic ever leaves. Another
//! principal's execution is `404 EXECUTION_NOT_FOUND`, exactly as one that does not exist.
//! A conversation is its principal's too: the same `conversationId` (or AG-UI `threadId`)
//! under two principals is two unrelated conversations, each with its own thread state,
//! native session and history, so one never learns whether the other's exists, is busy or
//! conflicts ([`Conversation`](harness_core::session::Conversation)); an idempotency key
//! (and AG-UI's `runId`) is looked up within its principal's executions.
//!
//! Run limits: each adapter's table in `harness.toml` may set the operator's
//! [`RunLimits`](harness_core::limits::RunLimits) (`[openai.limits]`, ...); a request's
//! `limits` narrow them, never widen them, and a run past one ends with one `run.failed`
//! carrying the limit's code. Limits on tokens or model turns for an adapter that reports no
//! usage (ACP) stop the server from starting, naming them.
//!
//! Middleware: `[middleware]` in `harness.toml` (or an instance's own
//! `[scripted.middleware]`, `[acp.middleware]`, `[openai.middleware]`, which replaces it for
//! that instance) is the operator's
//! [`PortableMiddlewarePolicy`](harness_core::middleware::PortableMiddlewarePolicy), compiled
//! when the server starts (a bad pattern, an unknown action, a duplicate rule, a zero bound or
//! a pattern to redact that does not compile stops it, naming the table and the rule). Every
//! tool call of the instance's executions passes it: a denied tool fails
//! `TOOL_DENIED_BY_POLICY` without running, `require_approval` opens a tool approval,
//! arguments past `arguments.maxBytes` fail `TOOL_ARGUMENTS_TOO_LARGE`, rewrites set and
//! remove fields, results are redacted (`[REDACTED:<rule>]`) and truncated past
//! `results.maxBytes`; its caps narrow the instance's run limits. An ACP agent's permission
//! requests are decided by the same rules (a denied one is rejected without asking); the
//! agent's own tools are otherwise its own (`middleware.portable` is `degraded` there).
//! Callers cannot set or see it.
//!
//! Idle runtimes: `[runtimes]` in `harness.toml` (`max_idle`, 256 by default;
//! `idle_timeout_secs`, 300) bounds, per adapter instance, the runtimes of executions paused
//! on an action that stay alive
//! ([`pool`](harness_core::service::pool)): one more evicts the one paused longest, and the
//! answer (`POST .../actions/...`, on any replica) restores an evicted pause on a fresh
//! runtime. Only adapters that can restore a pause are pooled (scripted; the model loop for
//! executions of a conversation); an ACP agent's pause stays alive with its process.
//!
//! # The `harness` command
//!
//! `harness serve` serves this API, and the other verbs are its client ([`client`]):
//! `harness --help` and `harness <verb> --help` print every verb's usage, flags, defaults
//! and an example. Exit codes: 0 done; 1 the execution failed or was cancelled, or the
//! server refused or could not be reached; 2 usage or configuration.
//!
//! - `serve` reads `--config`'s file, else `./harness.toml`, else the file `$HARNESS_CONFIG`
//!   names, else none, and prints which. It refuses to start (exit 2) when an ACP agent's
//!   program cannot be found, naming it, the `PATH` searched and the OS error.
//! - Without `[[tokens]]`, the development token (principal `dev`) is kept in
//!   `harness.token` beside the database (mode 0600, refused when others can read it),
//!   reused across restarts and its file printed; `harness token --rotate` makes a new one.
//! - `harness run` asks at every approval (`y`, `n [reason]`, `e` then a JSON line, `d`); an
//!   answer the server refuses (`422`: an edit its schema refuses) is shown and asked again;
//!   Ctrl-C cancels the execution at any point. Tool names, arguments and messages are shown
//!   through [`visible::escape`]: bidirectional controls, zero-width and other invisible
//!   characters appear as `[\u{202e}]`, and the prompt says so.
//! - `harness answer ID json BODY` takes the body of `POST /v1/executions/{id}/actions/{actionId}`
//!   as it is (an [`ActionResponse`](harness_core::action::ActionResponse)); the short forms
//!   `approve`, `reject --reason`, `edit --args JSON`, `form NAME=VALUE ...` and `dismiss`
//!   build it from the pending action (`--action` names one when several are pending).
//!
//! `harness init` writes this sample ([`config::SAMPLE`]), which `harness serve` accepts as
//! written:
//!
//! ```toml
#![doc = include_str!("sample.toml")]
//! ```
//!
//! # Decisions
//!
//! - **Every execution is durable**: an [`Instance`] keeps its executions in a store
//!   ([`MemoryStore`](harness_core::store::MemoryStore) in tests, SQLite by default,
//!   PostgreSQL for several replicas), so any replica sharing the store reads, answers and
//!   cancels any execution, and its principal is stored with it.
//! - **Executions outlive connections**: the server holds each execution it started until
//!   its terminal event, so a client that disconnects while an approval is pending can
//!   reconnect and answer it (bounded by the stack's capacity; a deadline bounds the wait).
//! - **Memory is bounded per execution**: a live execution's log holds at most about two
//!   memory windows of events (the last ones stored, and those waiting for the store: an
//!   adapter faster than the store waits for it); the server lets an execution go at its
//!   end, and what a finished one still holds for a caller is its last chunk of events.
//!   `benches/memory.rs` prints the server's RSS through a 1,000,000-event execution and
//!   per idle finished execution.
//! - **Streams read behind, never hold back**: an SSE stream reads the execution's log (the
//!   process's own while it runs here, else the store, page by page), so a slow client
//!   never slows the execution and never misses an event. A resumed stream starts right
//!   after the cursor: the event at the cursor is not sent again.
//! - `Last-Event-ID` wins over `?after=`: a browser's `EventSource` reconnects with the
//!   header and its original URL.
//! - **A wait is bounded and holds no execution**: `?wait=` and `/wait` hold their
//!   connection at most [`ServerBuilder::max_wait`] (`max_wait_secs`, 60 s by default); a
//!   longer one is refused `400` naming the maximum. A run paused on an action answers a
//!   wait at once (`awaiting_action`, with the pending action); one still running when the
//!   wait ends answers `timed_out` and where to wait again. See [`wait`].
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod agui;
pub mod auth;
pub mod client;
pub mod config;
pub mod console;
pub mod error;
mod events;
pub mod files;
pub mod health;
mod instance;
pub mod openapi;
mod routes;
pub mod skills;
pub mod socket;
mod view;
pub mod visible;
pub mod wait;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::id::{AdapterId, ExecutionId};
use harness_core::service::ExecutionHandle;
use harness_layers::redaction::Redactor;
use harness_observe::health::Health;
use harness_observe::prometheus::PrometheusEndpoint;

pub use crate::instance::Instance;
pub use crate::socket::{ConnectionLimits, serve};
pub use crate::view::{
    Answered, CancelAnswer, CancelOutcome, ErrorBody, EventPage, ExecutionPage, ExecutionSummary,
    ExecutionView, InstanceHealth, Readiness,
};
pub use crate::wait::{WaitStatus, Waited};

/// The default bound on a request body: 1 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 1 << 20;

/// The default interval of SSE keep-alive comments (a comment line after this long
/// without a frame keeps proxies from closing an idle stream).
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The Runtime API over a set of adapter instances; [`router`](Self::router) is its axum
/// router. See the [crate docs](crate).
#[derive(Clone, Debug)]
pub struct Server {
    state: Arc<State>,
}

pub(crate) struct State {
    pub(crate) instances: BTreeMap<AdapterId, Instance>,
    pub(crate) auth: Arc<dyn auth::Authenticate>,
    pub(crate) redactor: Arc<Redactor>,
    pub(crate) health: Option<Health>,
    pub(crate) metrics: Option<PrometheusEndpoint>,
    pub(crate) body_limit: usize,
    pub(crate) keep_alive: Duration,
    /// The longest wait for an outcome ([`ServerBuilder::max_wait`]).
    pub(crate) max_wait: Duration,
    /// The executions this process started, until their terminal event: answered and
    /// streamed from the process's own log, and kept answerable when their callers go.
    pub(crate) local: Mutex<HashMap<ExecutionId, ExecutionHandle>>,
    /// The store's last health ([`health`]).
    pub(crate) store_health: health::Cached,
    /// The console's outstanding one-time sign-in codes ([`Server::console_code`]).
    pub(crate) console_codes: console::Codes,
    /// Where uploaded files are kept ([`ServerBuilder::files`]).
    pub(crate) uploads: Option<files::Uploads>,
    /// The most bytes of one inline file ([`ServerBuilder::max_inline_file_bytes`]).
    pub(crate) max_inline: u64,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("instances", &self.instances.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl State {
    pub(crate) fn local(&self, id: &ExecutionId) -> Option<ExecutionHandle> {
        self.local
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(id)
            .cloned()
    }

    /// Holds `handle` until its execution ends.
    pub(crate) fn hold(self: &Arc<Self>, handle: &ExecutionHandle) {
        let id = handle.id().clone();
        self.local
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id.clone(), handle.clone());
        let state = Arc::downgrade(self);
        // Runs at once when it has ended already.
        handle.log().on_terminal(move |_| {
            if let Some(state) = state.upgrade() {
                state
                    .local
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .remove(&id);
            }
        });
    }

    /// Any instance: they share one store, so each reaches every execution in it.
    pub(crate) fn any(&self) -> Option<&Instance> {
        self.instances.values().next()
    }
}

impl Server {
    /// A builder with no instances and no authentication (which [`build`](ServerBuilder::build)
    /// refuses).
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// The axum router of every endpoint.
    pub fn router(&self) -> Router {
        routes::router(Arc::clone(&self.state))
    }

    /// A one-time code that signs the [console] in as `token`'s principal: the page at
    /// `/console#code=<code>` exchanges it once, within [`console::CODE_LIFETIME`], for the
    /// token (`POST /console/session`), so that no URL the browser keeps holds a credential.
    /// `harness serve` prints such a link.
    ///
    /// # Errors
    /// When the system has no randomness to make a code from.
    pub fn console_code(&self, token: &str) -> Result<String, HarnessError> {
        self.state.console_codes.mint(token)
    }

    /// The instances, by id.
    pub fn instances(&self) -> impl Iterator<Item = &Instance> {
        self.state.instances.values()
    }

    /// How many executions this process holds (started here, not yet ended).
    #[must_use]
    pub fn held(&self) -> usize {
        self.state
            .local
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}

/// Builds a [`Server`].
#[derive(Default)]
#[must_use]
pub struct ServerBuilder {
    instances: Vec<Instance>,
    auth: Option<Arc<dyn auth::Authenticate>>,
    redactor: Option<Arc<Redactor>>,
    health: Option<Health>,
    metrics: Option<PrometheusEndpoint>,
    body_limit: Option<usize>,
    keep_alive: Option<Duration>,
    max_wait: Option<Duration>,
    uploads: Option<files::Uploads>,
    max_inline: Option<u64>,
}

impl std::fmt::Debug for ServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerBuilder")
            .field("instances", &self.instances)
            .finish_non_exhaustive()
    }
}

impl ServerBuilder {
    /// Offers `instance` (its id must be unique).
    pub fn instance(mut self, instance: Instance) -> Self {
        self.instances.push(instance);
        self
    }

    /// Who may call: every `/v1` request is authenticated by `auth`.
    pub fn authenticate(mut self, auth: impl auth::Authenticate) -> Self {
        self.auth = Some(Arc::new(auth));
        self
    }

    /// The redactor error messages pass before they leave (the built-in rules by default).
    /// Events are redacted by each instance's stack before they are logged.
    pub fn redactor(mut self, redactor: Arc<Redactor>) -> Self {
        self.redactor = Some(redactor);
        self
    }

    /// What `/readyz` asks.
    pub fn health(mut self, health: Health) -> Self {
        self.health = Some(health);
        self
    }

    /// What `/metrics` renders.
    pub fn metrics(mut self, endpoint: PrometheusEndpoint) -> Self {
        self.metrics = Some(endpoint);
        self
    }

    /// The largest request body accepted ([`DEFAULT_BODY_LIMIT`] by default); a larger one
    /// is refused `413 REQUEST_TOO_LARGE`.
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = Some(bytes);
        self
    }

    /// Takes uploads (`POST /v1/files`) into `uploads`' store, and sweeps its expired files
    /// periodically ([`files`]). The instances must find uploaded files in the same store
    /// ([`HarnessStack::files`](harness_layers::stack::HarnessStack::files)). Without it the
    /// `/v1/files` endpoints answer `404` and files go inline.
    pub fn files(mut self, uploads: files::Uploads) -> Self {
        self.uploads = Some(uploads);
        self
    }

    /// The most bytes of one file given inline in a start request (decoded;
    /// [`files::DEFAULT_MAX_INLINE_FILE_BYTES`] by default). A larger one is refused
    /// `413 FILE_TOO_LARGE`, pointing to `POST /v1/files`: inline files are for small
    /// inputs, and the request body carrying them is held whole while it is parsed. The
    /// engine's per-file limit still applies below it.
    pub fn max_inline_file_bytes(mut self, bytes: u64) -> Self {
        self.max_inline = Some(bytes);
        self
    }

    /// How long a stream may go without a frame before a keep-alive comment is sent
    /// ([`KEEP_ALIVE`] by default).
    pub fn keep_alive(mut self, interval: Duration) -> Self {
        self.keep_alive = Some(interval);
        self
    }

    /// The longest a request may wait for an execution's outcome
    /// (`POST /v1/executions?wait=`, `GET /v1/executions/{id}/wait?timeout=`;
    /// [`wait::DEFAULT_MAX_WAIT`] by default): a longer wait is refused `400`, naming it. See
    /// [`wait`].
    pub fn max_wait(mut self, max: Duration) -> Self {
        self.max_wait = Some(max);
        self
    }

    /// The server.
    ///
    /// # Errors
    /// `configuration` without an instance, with two of one id, or without authentication.
    pub fn build(self) -> Result<Server, HarnessError> {
        let refuse = |m: String| HarnessError::new(ErrorCategory::Configuration, m);
        if self.instances.is_empty() {
            return Err(refuse(
                "the server needs at least one adapter instance".into(),
            ));
        }
        let mut instances = BTreeMap::new();
        for instance in self.instances {
            let id = instance.id().clone();
            if instances.insert(id.clone(), instance).is_some() {
                return Err(refuse(format!("two adapter instances are named `{id}`")));
            }
        }
        let auth = self.auth.ok_or_else(|| {
            refuse("the server needs an authentication scheme (BearerTokens, say)".into())
        })?;
        let redactor = match self.redactor {
            Some(redactor) => redactor,
            None => Arc::new(Redactor::builder().build().map_err(|e| {
                HarnessError::new(
                    ErrorCategory::Internal,
                    "the built-in redaction rules do not build",
                )
                .with_diagnostic(e.to_string())
            })?),
        };
        if let Some(uploads) = &self.uploads {
            uploads.sweep_periodically();
        }
        Ok(Server {
            state: Arc::new(State {
                instances,
                auth,
                redactor,
                health: self.health,
                metrics: self.metrics,
                body_limit: self.body_limit.unwrap_or(DEFAULT_BODY_LIMIT),
                keep_alive: self.keep_alive.unwrap_or(KEEP_ALIVE),
                max_wait: self.max_wait.unwrap_or(wait::DEFAULT_MAX_WAIT),
                local: Mutex::new(HashMap::new()),
                store_health: health::Cached::default(),
                console_codes: console::Codes::default(),
                uploads: self.uploads,
                max_inline: self
                    .max_inline
                    .unwrap_or(files::DEFAULT_MAX_INLINE_FILE_BYTES),
            }),
        })
    }
}
