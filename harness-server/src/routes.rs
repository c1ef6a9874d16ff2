//! The handlers of every endpoint (see the [crate docs](crate) for the table).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequestParts, Path, Query, State as Extract};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::StreamExt;
use harness_core::action::ActionResponse;
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::event::CancelReason;
use harness_core::id::{ActionId, CallerId, Cursor, ExecutionId, IdempotencyKey};
use harness_core::service::ExecutionRequest;
use harness_core::store::ExecutionRecord;
use harness_core::trace::TraceContext;
use serde::Deserialize;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::State;
use crate::error::ApiError;
use crate::events;
use crate::view::{
    Answered, CancelAnswer, CancelOutcome, EventPage, ExecutionPage, ExecutionSummary,
    ExecutionView, Readiness,
};

pub(crate) type Shared = Arc<State>;

pub(crate) fn router(state: Shared) -> Router {
    let limit = state.body_limit;
    Router::new()
        .route("/v1/executions", post(start).get(list))
        .route("/v1/executions/{id}", get(read))
        .route("/v1/executions/{id}/events", get(events))
        .route("/v1/executions/{id}/wait", get(crate::wait::route))
        .route("/v1/executions/{id}/actions/{action}", post(answer))
        .route("/v1/executions/{id}/cancel", post(cancel))
        .route("/v1/files", post(crate::files::upload))
        .route(
            "/v1/files/{id}",
            get(crate::files::read).delete(crate::files::delete),
        )
        .route("/v1/agui/{adapter}", post(agui_run))
        .route("/v1/adapters", get(adapters))
        .route("/v1/adapters/{id}", get(adapter))
        .route("/v1/openapi.json", get(openapi))
        .route("/console", get(crate::console::page))
        .route("/console/app.js", get(crate::console::script))
        .route("/console/style.css", get(crate::console::style))
        .route("/console/session", post(crate::console::session))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics))
        .fallback(|| async {
            ApiError::new(
                HarnessError::new(
                    ErrorCategory::Configuration,
                    "no such endpoint: the API is under /v1 (see GET /v1/adapters)",
                )
                .with_code(ErrorCode::ENDPOINT_NOT_FOUND),
            )
        })
        .layer(axum::extract::DefaultBodyLimit::max(limit))
        .layer(axum::middleware::map_response(guard))
        .with_state(state)
}

/// The headers every response carries (the console's assets set their own, wider, policy):
/// a JSON body, an event stream or an error opened in a browser is never sniffed into
/// markup, run, or framed.
async fn guard(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers
        .entry(header::X_CONTENT_TYPE_OPTIONS)
        .or_insert(header::HeaderValue::from_static("nosniff"));
    headers
        .entry(header::CONTENT_SECURITY_POLICY)
        .or_insert(header::HeaderValue::from_static(
            "default-src 'none'; frame-ancestors 'none'",
        ));
    response
}

/// The authenticated principal of a request.
pub(crate) struct Caller(pub(crate) CallerId);

impl FromRequestParts<Shared> for Caller {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &Shared) -> Result<Self, Response> {
        state
            .auth
            .authenticate(&parts.headers)
            .await
            .map(Caller)
            .map_err(|e| fail(state, e))
    }
}

pub(crate) fn fail(state: &State, error: impl Into<ApiError>) -> Response {
    error.into().redacted(&state.redactor).into_response()
}

/// A body that may be too large, as the API answers it.
fn body(state: &State, body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        let error = if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            HarnessError::new(
                ErrorCategory::Configuration,
                format!(
                    "the request body is larger than the {} bytes this server accepts",
                    state.body_limit
                ),
            )
            .with_code(ErrorCode::REQUEST_TOO_LARGE)
        } else {
            HarnessError::new(
                ErrorCategory::Configuration,
                format!("the request body could not be read: {rejection}"),
            )
            .with_code(ErrorCode::REQUEST_INVALID)
        };
        ApiError::new(error)
    })
}

/// Numbers with a zero fraction (`3.0`) as integers, as JSON Schema reads them, except under
/// the keys whose values the server passes on as they are (adapter options, client context,
/// an action's answer: their owners' schemas judge them).
fn integral(value: &mut Value) {
    const OPAQUE: [&str; 3] = ["options", "clientContext", "answer"];
    match value {
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|f| n.is_f64() && f.fract() == 0.0) {
                // Exactly representable integers only (|f| < 2^53).
                if f.abs() < 9_007_199_254_740_992.0 {
                    #[allow(clippy::cast_possible_truncation)]
                    let i = f as i64;
                    *value = Value::from(i);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral),
        Value::Object(map) => map
            .iter_mut()
            .filter(|(key, _)| !OPAQUE.contains(&key.as_str()))
            .for_each(|(_, v)| integral(v)),
        _ => {}
    }
}

/// `T` from JSON, the error naming where it went wrong (`requiredCapabilities[0]: ...`).
fn parse<T: serde::de::DeserializeOwned>(what: &str, mut value: Value) -> Result<T, ApiError> {
    integral(&mut value);
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            ApiError::invalid(format!("{what}: {inner}"))
        } else {
            ApiError::invalid(format!("{what}: `{path}`: {inner}"))
        }
    })
}

/// The JSON object `bytes` hold; no body at all (zero bytes) is the empty object. A body of
/// whitespace is not JSON, and is refused as any other (schemathesis sent `\t` to cancel).
fn json_object(bytes: &[u8], what: &str) -> Result<serde_json::Map<String, Value>, ApiError> {
    if bytes.is_empty() {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::invalid(format!("{what} must be a JSON object"))),
        Err(e) => Err(ApiError::invalid(format!("{what} is not JSON: {e}"))),
    }
}

/// The record of `id` if `caller` owns it; `404` alike for a missing id and another
/// principal's execution.
pub(crate) async fn owned(
    state: &State,
    caller: &CallerId,
    id: &str,
) -> Result<ExecutionRecord, ApiError> {
    let Ok(parsed) = id.parse::<ExecutionId>() else {
        return Err(ApiError::not_found(id));
    };
    let instance = state.any().ok_or_else(|| ApiError::not_found(id))?;
    match instance.control.record(&parsed).await? {
        Some(record) if record.principal == caller.as_str() => Ok(record),
        _ => Err(ApiError::not_found(id)),
    }
}

/// A page size: `given`, else `default`; `400` outside 1 to `max`.
fn page_size(given: Option<usize>, default: usize, max: usize) -> Result<usize, ApiError> {
    let limit = given.unwrap_or(default);
    if (1..=max).contains(&limit) {
        Ok(limit)
    } else {
        Err(ApiError::invalid(format!(
            "`limit` is {limit}: use 1 to {max}"
        )))
    }
}

fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, ApiError> {
    headers
        .get(name)
        .map(|v| {
            v.to_str()
                .map_err(|_| ApiError::invalid(format!("the `{name}` header is not text")))
        })
        .transpose()
}

/// `?wait=` of `POST /v1/executions`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StartQuery {
    wait: Option<String>,
}

async fn start(
    Extract(state): Extract<Shared>,
    Caller(caller): Caller,
    headers: HeaderMap,
    query: Result<Query<StartQuery>, axum::extract::rejection::QueryRejection>,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let bytes = match body(&state, bytes) {
        Ok(bytes) => bytes,
        Err(e) => return fail(&state, e),
    };
    let wait = query
        .map_err(|e| ApiError::invalid(format!("the query: {e} (`wait` is a duration, as `30s`)")))
        .and_then(|Query(q)| {
            q.wait
                .map(|w| crate::wait::parse_wait("wait", &w, state.max_wait))
                .transpose()
        });
    let wait = match wait {
        Ok(wait) => wait,
        Err(e) => return fail(&state, e),
    };
    match start_execution(&state, caller, &headers, &bytes, wait).await {
        Ok(response) => response,
        Err(e) => fail(&state, e),
    }
}

/// The instances' ids, for messages: `` `scripted`, `acp` ``.
fn offered(state: &State) -> String {
    state
        .instances
        .keys()
        .map(|id| format!("`{id}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The view of `record`: from this process's handle while it runs here, else from the
/// store.
async fn view_of(state: &State, record: &ExecutionRecord) -> Result<ExecutionView, ApiError> {
    match state.local(&record.id) {
        Some(handle) => Ok(ExecutionView::of_handle(record, &handle)),
        None => {
            let instance = state
                .any()
                .ok_or_else(|| ApiError::not_found(record.id.as_str()))?;
            ExecutionView::of_store(record, &*instance.control).await
        }
    }
}

/// The sequence number of the event that requested `action` of `id`, read from the store
/// page by page.
async fn requested_at(
    state: &State,
    id: &ExecutionId,
    action: &ActionId,
) -> Result<Option<u64>, ApiError> {
    let instance = state
        .any()
        .ok_or_else(|| ApiError::not_found(id.as_str()))?;
    let mut after = 0;
    loop {
        let page = instance
            .control
            .read_events(id, Cursor::after_seq(after), events::PAGE)
            .await?;
        let Some(last) = page.last() else {
            return Ok(None);
        };
        after = last.seq().get();
        if let Some(seq) = crate::agui::requested_at(&page, action) {
            return Ok(Some(seq));
        }
    }
}

/// The instance `adapter`, or `404 ADAPTER_NOT_FOUND` naming the ones there are.
fn instance_named<'a>(state: &'a State, adapter: &str) -> Result<&'a crate::Instance, ApiError> {
    adapter
        .parse()
        .ok()
        .and_then(|id| state.instances.get(&id))
        .ok_or_else(|| {
            let shown: String = adapter.chars().take(64).collect();
            ApiError::new(
                HarnessError::new(
                    ErrorCategory::Configuration,
                    format!(
                        "no adapter instance `{shown}`: this server offers {}",
                        offered(state)
                    ),
                )
                .with_code(ErrorCode::ADAPTER_NOT_FOUND),
            )
        })
}

/// The events of `id` after `after`: from the process's own log while it runs here, else
/// from the store.
pub(crate) fn event_source(
    state: &State,
    id: &ExecutionId,
    after: u64,
) -> Result<futures_util::stream::BoxStream<'static, Arc<harness_core::event::Event>>, ApiError> {
    if let Some(handle) = state.local(id) {
        return Ok(handle.events(Cursor::after_seq(after)).boxed());
    }
    let instance = state
        .any()
        .ok_or_else(|| ApiError::not_found(id.as_str()))?;
    Ok(events::stored(Arc::clone(&instance.control), id.clone(), after).boxed())
}

/// Answers an action of `record`: through this process's handle when it runs here, else
/// through the store.
async fn respond(
    state: &State,
    record: &ExecutionRecord,
    response: ActionResponse,
) -> Result<(), ApiError> {
    match state.local(&record.id) {
        Some(handle) => Ok(handle.respond(response).await?),
        None => {
            let instance = state
                .any()
                .ok_or_else(|| ApiError::not_found(record.id.as_str()))?;
            Ok(instance.control.respond_to(&record.id, response).await?)
        }
    }
}

async fn start_execution(
    state: &Shared,
    caller: CallerId,
    headers: &HeaderMap,
    bytes: &[u8],
    wait: Option<std::time::Duration>,
) -> Result<Response, ApiError> {
    let mut body = json_object(bytes, "the request body")?;
    let adapter = match body.remove("adapter") {
        Some(Value::String(adapter)) => adapter,
        Some(_) => return Err(ApiError::invalid("`adapter` must be a string")),
        None => {
            return Err(ApiError::invalid(format!(
                "`adapter` is missing: name the adapter instance to run, one of {}",
                offered(state)
            )));
        }
    };
    let instance = instance_named(state, &adapter)?;
    // One place for the key, the HTTP one: a body that also named it could disagree.
    if body.contains_key("idempotencyKey") {
        return Err(ApiError::invalid(
            "`idempotencyKey` goes in the `Idempotency-Key` header over HTTP, not in the body",
        ));
    }
    let credentials = body
        .remove("callerCredentials")
        .map(|value| caller_credentials(instance, value))
        .transpose()?;
    let mut request: ExecutionRequest = parse("the request body", Value::Object(body))?;
    crate::files::check_inline(state, &request.files)?;
    if let Some(credentials) = credentials {
        request.extensions.insert(credentials);
    }
    if let Some(key) = header_text(headers, "idempotency-key")? {
        let key: IdempotencyKey = key
            .parse()
            .map_err(|e| ApiError::invalid(format!("the `Idempotency-Key` header: {e}")))?;
        request.idempotency_key = Some(key);
    }
    // W3C Trace Context: a `traceparent` that does not parse is ignored (the execution
    // starts a trace of its own), not refused.
    let traceparent = headers.get("traceparent").and_then(|v| v.to_str().ok());
    if let Some(trace) = traceparent.and_then(|t| t.parse::<TraceContext>().ok()) {
        request.trace_context = Some(trace);
    }
    request.extensions.insert(caller);
    if wait.is_some() {
        // The caller waits for the outcome: a provider with a non-streaming call may make it.
        request.delivery = harness_core::service::Delivery::Outcome;
    }
    let handle = instance.admission.clone().oneshot(request).await?;
    if !handle.state().is_terminal() {
        state.hold(&handle);
    }
    let record = instance
        .control
        .record(handle.id())
        .await?
        .ok_or_else(|| ApiError::not_found(handle.id().as_str()))?;
    let status = if handle.is_replay() {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    let location = format!("/v1/executions/{}", handle.id());
    if let Some(wait) = wait {
        let waited = crate::wait::wait(state, handle.id(), wait).await?;
        return Ok((status, [(header::LOCATION, location)], Json(waited)).into_response());
    }
    let view = ExecutionView::of_handle(&record, &handle);
    Ok((status, [(header::LOCATION, location)], Json(view)).into_response())
}

/// The most credentials one request carries, and the longest one, in bytes.
const MAX_CREDENTIALS: usize = 16;
const MAX_CREDENTIAL_LEN: usize = 8 * 1024;

/// A start request's `callerCredentials` (`tool.caller_credentials`): tool provider name →
/// the caller's own credential for it, for this execution only. Taken out of the body before
/// anything else reads it: it goes into the request's extensions, never into the request
/// that is stored, hashed for idempotency or echoed; the redaction layer redacts each from
/// everything the execution yields. No error names a credential's value.
fn caller_credentials(
    instance: &crate::Instance,
    value: Value,
) -> Result<harness_core::tool::CallerCredentials, ApiError> {
    use harness_core::tool::{CallerCredentials, Credential};
    let refuse = |message: String| {
        ApiError::new(
            HarnessError::new(ErrorCategory::Configuration, message)
                .with_code(ErrorCode::CALLER_CREDENTIAL_INVALID),
        )
    };
    let providers = || {
        if instance.providers.is_empty() {
            "this instance has no tool provider".to_owned()
        } else {
            format!("its tool providers are {}", instance.providers.join(", "))
        }
    };
    let Value::Object(entries) = value else {
        return Err(refuse(
            "`callerCredentials` must be an object: tool provider name → the credential \
             (a string)"
                .to_owned(),
        ));
    };
    if entries.len() > MAX_CREDENTIALS {
        return Err(refuse(format!(
            "`callerCredentials` names {} providers; at most {MAX_CREDENTIALS}",
            entries.len()
        )));
    }
    let mut credentials = CallerCredentials::new();
    for (name, secret) in entries {
        let shown: String = name.chars().take(64).collect();
        if !instance.providers.contains(&name) {
            return Err(refuse(format!(
                "`callerCredentials` names tool provider `{shown}`, which instance `{}` does \
                 not have: {}",
                instance.id(),
                providers()
            )));
        }
        let Value::String(secret) = secret else {
            return Err(refuse(format!(
                "`callerCredentials.{shown}` must be a string (the credential itself)"
            )));
        };
        let len = secret.len();
        if !(harness_layers::redaction::MIN_SECRET_LEN..=MAX_CREDENTIAL_LEN).contains(&len) {
            return Err(refuse(format!(
                "`callerCredentials.{shown}` has {len} bytes; a credential has {} to \
                 {MAX_CREDENTIAL_LEN} (a shorter one could not be redacted exactly)",
                harness_layers::redaction::MIN_SECRET_LEN
            )));
        }
        credentials = credentials.with(name, Credential::new(secret));
    }
    Ok(credentials)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    limit: Option<usize>,
    before: Option<String>,
}

/// The most a page of `GET /v1/executions` holds.
const MAX_LIST: usize = 200;

async fn list(
    Extract(state): Extract<Shared>,
    Caller(caller): Caller,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let result: Result<_, ApiError> = async {
        let Query(query) = query.map_err(|e| ApiError::invalid(format!("the query: {e}")))?;
        let limit = page_size(query.limit, 50, MAX_LIST)?;
        let before = query
            .before
            .map(|b| {
                b.parse::<u64>().map_err(|_| {
                    ApiError::invalid("`before` is not a cursor: pass a page's `next` as it is")
                })
            })
            .transpose()?;
        let Some(instance) = state.any() else {
            return Ok(Json(ExecutionPage {
                executions: Vec::new(),
                next: None,
            }));
        };
        let page = instance
            .control
            .list(caller.as_str(), before, limit)
            .await?;
        let next = (page.len() == limit)
            .then(|| page.last().map(|l| l.position.to_string()))
            .flatten();
        let executions: Vec<ExecutionSummary> = page
            .iter()
            .map(|l| ExecutionSummary::from(&l.record))
            .collect();
        Ok(Json(ExecutionPage { executions, next }))
    }
    .await;
    result.map_or_else(|e| fail(&state, e), IntoResponse::into_response)
}

async fn read(
    Extract(state): Extract<Shared>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> Response {
    let result = async {
        let record = owned(&state, &caller, &id).await?;
        Ok::<_, ApiError>(Json(view_of(&state, &record).await?))
    }
    .await;
    result.map_or_else(|e| fail(&state, e), IntoResponse::into_response)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    after: Option<u64>,
    limit: Option<usize>,
}

/// The most a JSON page of events holds.
const MAX_EVENTS_PAGE: usize = events::PAGE;

async fn events(
    Extract(state): Extract<Shared>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let result: Result<_, ApiError> = async {
        let Query(query) = query.map_err(|e| {
            ApiError::invalid(format!("the query: {e} (`after` and `limit` are numbers)"))
        })?;
        let record = owned(&state, &caller, &id).await?;
        let last_event_id = header_text(&headers, "last-event-id")?
            .map(|v| {
                v.trim().parse::<u64>().map_err(|_| {
                    ApiError::invalid(
                        "the `Last-Event-ID` header is not an event id (a sequence number)",
                    )
                })
            })
            .transpose()?;
        let after = last_event_id.or(query.after).unwrap_or(0);
        let instance = state.any().ok_or_else(|| ApiError::not_found(&id))?;
        let streaming = header_text(&headers, "accept")?
            .is_some_and(|accept| accept.contains("text/event-stream"));
        if streaming {
            let frames = event_source(&state, &record.id, after)?.map(events::EventFrame);
            return Ok(events::response(frames, state.keep_alive));
        }
        let limit = page_size(query.limit, 1000, MAX_EVENTS_PAGE)?;
        let page = instance
            .control
            .read_events(&record.id, Cursor::after_seq(after), limit)
            .await?;
        let ended = page.last().is_some_and(|e| e.payload().is_terminal())
            || (page.is_empty() && record.state.is_terminal());
        let next = page.last().map_or(after, |e| e.seq().get());
        Ok(Json(EventPage {
            events: page,
            next,
            ended,
        })
        .into_response())
    }
    .await;
    result.unwrap_or_else(|e| fail(&state, e))
}

async fn answer(
    Extract(state): Extract<Shared>,
    Caller(caller): Caller,
    Path((id, action)): Path<(String, String)>,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let bytes = match body(&state, bytes) {
        Ok(bytes) => bytes,
        Err(e) => return fail(&state, e),
    };
    let result = async {
        let record = owned(&state, &caller, &id).await?;
        let action: ActionId = action.parse().map_err(|_| {
            ApiError::new(
                HarnessError::new(
                    ErrorCategory::Configuration,
                    "no pending action has that id",
                )
                .with_code(ErrorCode::ACTION_NOT_FOUND),
            )
        })?;
        let mut body = json_object(&bytes, "the answer")?;
        match body.get("actionId") {
            None => {
                body.insert("actionId".into(), Value::String(action.to_string()));
            }
            Some(Value::String(named)) if *named == action.as_str() => {}
            Some(_) => {
                return Err(ApiError::invalid(
                    "the answer's `actionId` is not the action of the path: leave it out",
                ));
            }
        }
        let response: ActionResponse = parse("the answer", Value::Object(body))?;
        respond(&state, &record, response).await?;
        Ok::<_, ApiError>(Json(Answered {
            execution_id: record.id,
            action_id: action,
            accepted: true,
        }))
    }
    .await;
    result.map_or_else(|e| fail(&state, e), IntoResponse::into_response)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CancelBody {
    reason: Option<String>,
}

/// The longest cancel reason kept.
const MAX_REASON: usize = 512;

async fn cancel(
    Extract(state): Extract<Shared>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let bytes = match body(&state, bytes) {
        Ok(bytes) => bytes,
        Err(e) => return fail(&state, e),
    };
    let result = async {
        let record = owned(&state, &caller, &id).await?;
        let body: CancelBody = parse(
            "the cancel request",
            Value::Object(json_object(&bytes, "the cancel request")?),
        )?;
        let reason = body
            .reason
            .unwrap_or_else(|| "cancelled by the caller".into());
        if reason.chars().count() > MAX_REASON {
            return Err(ApiError::invalid(format!(
                "`reason` is longer than {MAX_REASON} characters"
            )));
        }
        // The reason is the caller's text, and it will be in the log: redacted like the rest.
        let reason = state.redactor.redact_str(&reason).into_owned();
        let status = cancel_once(&state, &record, reason).await?;
        Ok::<_, ApiError>((
            StatusCode::ACCEPTED,
            Json(CancelAnswer {
                execution_id: record.id,
                status,
            }),
        ))
    }
    .await;
    result.map_or_else(|e| fail(&state, e), IntoResponse::into_response)
}

/// Requests the cancellation of `record`, answering what the request did.
///
/// The store's record is the one place where every caller, on every replica, claims the
/// cancel: its first request is the one told `requested`. Deciding on the process's handle
/// instead let two callers be first (one through the handle, one through the store once the
/// run had ended here and the handle was let go: the handle never wrote the store).
async fn cancel_once(
    state: &State,
    record: &ExecutionRecord,
    reason: String,
) -> Result<CancelOutcome, ApiError> {
    let local = state.local(&record.id);
    let ended = |local: Option<&harness_core::service::ExecutionHandle>| {
        local.map_or(record.state, |h| h.state()).is_terminal()
    };
    if ended(local.as_ref()) {
        return Ok(CancelOutcome::AlreadyEnded);
    }
    let instance = state
        .any()
        .ok_or_else(|| ApiError::not_found(record.id.as_str()))?;
    if !instance.control.request_cancel(&record.id, &reason).await? {
        // Not first: ended since (by the first request, or on its own) is said as such.
        let ended = match state.local(&record.id) {
            Some(handle) => handle.state().is_terminal(),
            None => instance
                .control
                .record(&record.id)
                .await?
                .is_none_or(|r| r.state.is_terminal()),
        };
        return Ok(if ended {
            CancelOutcome::AlreadyEnded
        } else {
            CancelOutcome::AlreadyRequested
        });
    }
    // First: the owner applies it from the store (its watch on the record); a run held here
    // is tripped at once rather than on that wake-up. What the handle says is not the answer:
    // the watch may have applied this very request already.
    if let Some(handle) = local {
        let _ = handle.cancel(CancelReason::new(reason));
    }
    Ok(CancelOutcome::Requested)
}

async fn agui_run(
    Extract(state): Extract<Shared>,
    Caller(caller): Caller,
    Path(adapter): Path<String>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let bytes = match body(&state, bytes) {
        Ok(bytes) => bytes,
        Err(e) => return fail(&state, e),
    };
    match agui_stream(&state, caller, &adapter, &headers, &bytes).await {
        Ok(response) => response,
        Err(e) => fail(&state, e),
    }
}

/// See [`crate::agui`].
async fn agui_stream(
    state: &Shared,
    caller: CallerId,
    adapter: &str,
    headers: &HeaderMap,
    bytes: &[u8],
) -> Result<Response, ApiError> {
    let input = json_object(bytes, "the RunAgentInput")?;
    let text = |key: &str| {
        input
            .get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| {
                ApiError::invalid(format!(
                    "the RunAgentInput's `{key}` is missing: an AG-UI run names its thread \
                     (`threadId`) and itself (`runId`)"
                ))
            })
    };
    let (thread, run) = (text("threadId")?, text("runId")?);
    let key: IdempotencyKey = run.parse().map_err(|e| {
        ApiError::invalid(format!("the `runId` is used as an idempotency key: {e}"))
    })?;
    if let Some(messages) = input.get("messages") {
        let well_formed = messages
            .as_array()
            .is_some_and(|all| all.iter().all(|m| m["role"].is_string()));
        if !well_formed {
            return Err(ApiError::invalid(
                "the RunAgentInput's `messages` must be an array of messages, each with a `role`",
            ));
        }
    }
    let entries = match input.get("resume") {
        None => None,
        Some(Value::Array(entries)) => Some(entries).filter(|entries| !entries.is_empty()),
        Some(_) => {
            return Err(ApiError::invalid(
                "the RunAgentInput's `resume` must be an array of `{interruptId, payload}`",
            ));
        }
    };
    let resume = header_text(headers, "last-event-id")?
        .map(|v| {
            crate::agui::Resume::parse(v).ok_or_else(|| {
                ApiError::invalid("the `Last-Event-ID` header is not an AG-UI frame id (<seq>:<n>)")
            })
        })
        .transpose()?;
    let instance = instance_named(state, adapter)?;
    let (id, from) = match entries {
        Some(entries) => {
            // Every entry is checked before any is answered: one execution, the caller's,
            // each entry naming an action it requested and an answer that parses.
            let mut named = Vec::new();
            for entry in entries {
                let id = entry["interruptId"]
                    .as_str()
                    .ok_or_else(|| ApiError::invalid("a resume entry needs `interruptId`"))?;
                let (execution, action) =
                    crate::agui::interrupt(id).ok_or_else(|| ApiError::not_found(id))?;
                if named
                    .first()
                    .is_some_and(|(first, _, _)| *first != execution)
                {
                    return Err(ApiError::invalid(
                        "the resume entries name interrupts of several executions: one run \
                         resumes one",
                    ));
                }
                named.push((execution, action, entry));
            }
            let record = owned(state, &caller, named[0].0.as_str()).await?;
            let view = view_of(state, &record).await?;
            let mut from = 0;
            let mut answers = Vec::new();
            for (_, action, entry) in &named {
                let at = requested_at(state, &record.id, action)
                    .await?
                    .ok_or_else(|| {
                        ApiError::new(
                            HarnessError::new(
                                ErrorCategory::Configuration,
                                "no action has that id",
                            )
                            .with_code(ErrorCode::ACTION_NOT_FOUND),
                        )
                    })?;
                from = from.max(at);
                // Not pending any more: a retried resume, which only streams again.
                if let Some(request) = view.pending_actions.iter().find(|r| r.id == *action) {
                    answers.push(crate::agui::answer(entry, request).map_err(ApiError::invalid)?);
                }
            }
            for response in answers {
                match respond(state, &record, response).await {
                    Err(e) if e.public().code == ErrorCode::ACTION_ALREADY_RESOLVED => {}
                    other => other?,
                }
            }
            (record.id, from)
        }
        None => {
            let message = crate::agui::last_user_message(&input).ok_or_else(|| {
                ApiError::invalid(
                    "the RunAgentInput's `messages` hold no user message with text to run",
                )
            })?;
            let mut request = ExecutionRequest::new(message);
            request.idempotency_key = Some(key);
            request.conversation_id = thread.parse().ok();
            request.extensions.insert(caller);
            let handle = instance.admission.clone().oneshot(request).await?;
            if !handle.state().is_terminal() {
                state.hold(&handle);
            }
            (handle.id().clone(), 0)
        }
    };
    let converter = crate::agui::Converter::new(thread, run, id.clone());
    let frames = crate::agui::frames(converter, event_source(state, &id, from)?, from, resume).map(
        |(id, event)| events::TextFrame {
            id,
            data: event.to_string(),
        },
    );
    Ok(events::response(frames, state.keep_alive))
}

async fn adapters(Extract(state): Extract<Shared>, Caller(_): Caller) -> Json<Value> {
    let adapters: Vec<&Value> = state.instances.values().map(|i| i.manifest()).collect();
    let checks = state.instances.values().map(|i| async move {
        let health = crate::view::InstanceHealth::from(i.health().await);
        (i.id().to_string(), health)
    });
    let health: std::collections::BTreeMap<String, crate::view::InstanceHealth> =
        futures_util::future::join_all(checks)
            .await
            .into_iter()
            .collect();
    Json(json!({ "adapters": adapters, "health": health }))
}

async fn adapter(
    Extract(state): Extract<Shared>,
    Caller(_): Caller,
    Path(id): Path<String>,
) -> Response {
    match id.parse().ok().and_then(|id| state.instances.get(&id)) {
        Some(instance) => Json(instance.manifest().clone()).into_response(),
        None => fail(
            &state,
            HarnessError::new(
                ErrorCategory::Configuration,
                "no adapter instance of that id",
            )
            .with_code(ErrorCode::ADAPTER_NOT_FOUND),
        ),
    }
}

async fn ready(Extract(state): Extract<Shared>) -> Response {
    // Every dependency at once: the slowest bounds the answer (see `crate::health`).
    let instances = futures_util::future::join_all(
        state
            .instances
            .values()
            .map(|i| async move { (i.id(), i.health().await) }),
    );
    let store = store_health(&state);
    let application = async {
        match &state.health {
            Some(health) => Some(health.check().await),
            None => None,
        }
    };
    let (instances, store, application) = tokio::join!(instances, store, application);
    let mut reasons = Vec::new();
    for (id, health) in instances.into_iter().filter(|(_, h)| !h.ready) {
        let why = health.reason.as_deref().unwrap_or("not ready");
        reasons.push(format!("instance `{id}`: {why}"));
    }
    if let Some(why) = store.reason.as_deref().filter(|_| !store.ready) {
        reasons.push(format!("store: {why}"));
    }
    let mut ready = reasons.is_empty();
    if let Some(readiness) = application {
        ready &= readiness.ready;
        reasons.extend(readiness.reasons());
    }
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let reasons: Vec<String> = reasons
        .iter()
        .map(|r| state.redactor.redact_str(r).into_owned())
        .collect();
    (status, Json(Readiness { ready, reasons })).into_response()
}

/// Whether the store takes a write ([`crate::health::probe_store`]), cached and bounded as
/// an instance's check is.
async fn store_health(state: &State) -> harness_core::adapter::HarnessHealth {
    use harness_core::adapter::HarnessHealth;
    let Some(instance) = state.any() else {
        return HarnessHealth::ready();
    };
    let store = Arc::clone(&instance.state_store);
    state
        .store_health
        .get("store", move || crate::health::probe_store(store))
        .await
}

/// The OpenAPI document, built once.
async fn openapi() -> Response {
    static DOCUMENT: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    let document = DOCUMENT.get_or_init(|| {
        Bytes::from(serde_json::to_vec(&crate::openapi::document()).unwrap_or_default())
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        document.clone(),
    )
        .into_response()
}

async fn metrics(Extract(state): Extract<Shared>) -> Response {
    match &state.metrics {
        Some(endpoint) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            endpoint.render(),
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no metrics are exported here\n").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integral_floats_become_integers_outside_what_the_server_passes_on() {
        let mut value = json!({
            "revision": 2.0,
            "list": [3.0, 2.5, -4.0, 1e300],
            "options": {"temperature": 1.0},
            "clientContext": {"n": 1.0},
            "answer": {"values": {"n": 1.0}},
        });
        integral(&mut value);
        assert!(value["revision"].is_i64(), "{value}");
        assert_eq!(value["list"], json!([3, 2.5, -4, 1e300]));
        assert!(value["options"]["temperature"].is_f64());
        assert!(value["clientContext"]["n"].is_f64());
        assert!(value["answer"]["values"]["n"].is_f64());
    }
}
