//! Waiting for an execution's outcome over HTTP (`invoke.non_streaming`): `POST
//! /v1/executions?wait=30s` and `GET /v1/executions/{id}/wait?timeout=30s`.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use harness_core::store::{MemoryStore, ReplicaId};
//! use harness_layers::stack::HarnessStack;
//! use harness_scripted::{Script, ScriptedAdapter};
//! use harness_server::{auth::BearerTokens, Instance, Server, WaitStatus, Waited};
//! use tower::ServiceExt;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let adapter = ScriptedAdapter::new(Script::builder().text("Hello!").complete("done").build());
//! let stack = HarnessStack::defaults_for(&adapter).unwrap();
//! let server = Server::builder()
//!     .instance(Instance::new(&stack, adapter, Arc::new(MemoryStore::new()), ReplicaId::new("r1")))
//!     .authenticate(BearerTokens::new().with_token("alice", "alice-token-0123456789").unwrap())
//!     .max_wait(Duration::from_secs(30))
//!     .build()
//!     .unwrap();
//! let response = server.router().oneshot(
//!     axum::http::Request::post("/v1/executions?wait=10s")
//!         .header("authorization", "Bearer alice-token-0123456789")
//!         .header("content-type", "application/json")
//!         .body(axum::body::Body::from(r#"{"adapter":"scripted","message":"hi"}"#))
//!         .unwrap(),
//! ).await.unwrap();
//! assert_eq!(response.status(), 201);
//! let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
//! let waited: Waited = serde_json::from_slice(&body).unwrap();
//! assert_eq!(waited.status, WaitStatus::Ended);
//! assert_eq!(waited.outcome.text, "Hello!");
//! assert_eq!(waited.next, None);
//! # });
//! ```
//!
//! A wait answers a [`Waited`]: the execution's
//! [`InvokeOutcome`] (its text, reasoning, tool calls
//! with their results, artifacts, usage summed, state, and the public error of a failure),
//! gathered from its stored log, and why the wait ended ([`WaitStatus`]):
//!
//! - `ended`: the execution has ended; the outcome is final;
//! - `awaiting_action`: it waits for an answer (its `pendingAction`): answer it
//!   (`POST /v1/executions/{id}/actions/{actionId}`), then wait again at `next`. A wait
//!   called while the execution is paused answers at once: only an answer moves it;
//! - `timed_out`: it was still running when the wait ran out: wait again at `next`
//!   (`GET /v1/executions/{id}/wait`), or follow its events.
//!
//! What happens when...
//!
//! - **the log is long**: what is stored is read to its end first, page by page, whatever
//!   the wait (it is there: reading it is not waiting; memory is the outcome's bound); the
//!   wait bounds how long the server then waits for what comes. So `0` answers the state
//!   as stored, at once.
//! - **the wait is longer than the operator allows** ([`ServerBuilder::max_wait`](crate::ServerBuilder::max_wait),
//!   [`DEFAULT_MAX_WAIT`] by default; `max_wait_secs` in `harness.toml`): `400
//!   REQUEST_INVALID` naming the maximum, and (for `POST`) nothing is started. A wait is
//!   `<n>ms`, `<n>s` or `<n>` seconds.
//! - **`GET .../wait` has no `timeout`**: it waits [`DEFAULT_WAIT`], or the maximum if that
//!   is less.
//! - **the execution is another principal's**: `404 EXECUTION_NOT_FOUND`, as for every
//!   execution route.
//! - **the client goes away while waiting**: only the wait ends; the execution runs on
//!   (executions outlive connections), and a later wait finds it.
//! - **the execution runs on another replica**: the wait reads the shared store, and wakes
//!   on its tail, as an event stream does.
//! - **the output is huge**: the outcome keeps at most
//!   [`DEFAULT_MAX_COLLECTED`](harness_core::service::invoke::DEFAULT_MAX_COLLECTED) bytes
//!   of it and says `truncated`; the events are all in the log.
//!
//! Decisions where the spec is silent:
//!
//! - `POST /v1/executions?wait=` starts the execution for its outcome
//!   ([`Delivery::Outcome`](harness_core::adapter::Delivery::Outcome)): an adapter whose
//!   provider has a non-streaming call makes it. Its status stays `201` (`200` for an
//!   idempotent replay, whose outcome is the original execution's); the body is a
//!   [`Waited`] instead of the execution's view.
//! - A wait holds its connection, within the socket layer's caps, for at most the maximum
//!   wait: the operator's maximum bounds what one client can hold.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State as Extract};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use harness_core::id::ExecutionId;
use harness_core::service::invoke::Collector;
use harness_core::service::invoke::InvokeOutcome;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::State;
use crate::error::ApiError;
use crate::routes::{Caller, Shared, event_source, fail, owned};

/// The longest wait the server allows by default: 60 s.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(60);

/// How long `GET /v1/executions/{id}/wait` waits without `timeout` (or the maximum, if
/// less): 30 s.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// What a wait answers: see the [module docs](self).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct Waited {
    /// Why the wait ended.
    pub status: WaitStatus,
    /// What the execution's log says so far.
    pub outcome: InvokeOutcome,
    /// Where to wait again (`/v1/executions/{id}/wait`), unless it has ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// Why a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum WaitStatus {
    /// The execution has ended.
    Ended,
    /// The execution waits for an answer to its pending action.
    AwaitingAction,
    /// The execution was still running when the wait ran out.
    TimedOut,
}

/// A wait as a query gives it: `<n>ms`, `<n>s` or `<n>` seconds, at most `max`.
pub(crate) fn parse_wait(name: &str, text: &str, max: Duration) -> Result<Duration, ApiError> {
    let text = text.trim();
    let (digits, unit) = if let Some(ms) = text.strip_suffix("ms") {
        (ms, Duration::from_millis(1))
    } else if let Some(s) = text.strip_suffix('s') {
        (s, Duration::from_secs(1))
    } else {
        (text, Duration::from_secs(1))
    };
    let wait = (!digits.is_empty()
        && digits.len() <= 9
        && digits.bytes().all(|b| b.is_ascii_digit()))
    .then(|| digits.parse::<u32>().ok())
    .flatten()
    .map(|n| unit * n)
    .ok_or_else(|| {
        ApiError::invalid(format!(
            "`{name}` is not a duration: give `<n>ms`, `<n>s` or `<n>` seconds, as `{name}=30s`"
        ))
    })?;
    if wait > max {
        return Err(ApiError::invalid(format!(
            "`{name}` is {}: this server waits at most {} at a time; wait again at \
             `GET /v1/executions/{{id}}/wait` for longer",
            shown(wait),
            shown(max)
        )));
    }
    Ok(wait)
}

fn shown(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// Waits at most `timeout` for execution `id` to end or pause, gathering its outcome from
/// the start of its log.
pub(crate) async fn wait(
    state: &State,
    id: &ExecutionId,
    timeout: Duration,
) -> Result<Waited, ApiError> {
    let instance = state
        .any()
        .ok_or_else(|| ApiError::not_found(id.as_str()))?;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut collector = Collector::new(id.clone());
    // What is stored so far, read to its end whatever the timeout (it is there: reading it
    // is not waiting): its last pause, if it is paused now, is the current one.
    loop {
        let page = instance
            .control
            .read_events(id, collector.cursor(), crate::events::PAGE)
            .await?;
        if page.is_empty() {
            break;
        }
        page.iter().for_each(|event| collector.push(event));
    }
    let settled = collector.outcome().is_ended() || collector.outcome().is_paused();
    if !settled {
        // Then what comes, until the deadline: up to the end, or the next pause.
        let mut events = event_source(state, id, collector.cursor().after())?;
        while let Ok(Some(event)) = tokio::time::timeout_at(deadline, events.next()).await {
            collector.push(&event);
            let entered = event.payload().implied_state().is_some();
            let outcome = collector.outcome();
            if outcome.is_ended() || (outcome.is_paused() && entered) {
                break;
            }
        }
    }
    let outcome = collector.into_outcome();
    let status = if outcome.is_ended() {
        WaitStatus::Ended
    } else if outcome.is_paused() {
        WaitStatus::AwaitingAction
    } else {
        WaitStatus::TimedOut
    };
    let next = (status != WaitStatus::Ended).then(|| format!("/v1/executions/{id}/wait"));
    Ok(Waited {
        status,
        outcome,
        next,
    })
}

/// `?timeout=` of `GET /v1/executions/{id}/wait`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WaitQuery {
    timeout: Option<String>,
}

/// `GET /v1/executions/{id}/wait`.
pub(crate) async fn route(
    Extract(state): Extract<Shared>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    query: Result<Query<WaitQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let result = async {
        let Query(query) = query.map_err(|e| {
            ApiError::invalid(format!(
                "the query: {e} (`timeout` is a duration, as `30s`)"
            ))
        })?;
        let record = owned(&state, &caller, &id).await?;
        let timeout = match query.timeout {
            Some(text) => parse_wait("timeout", &text, state.max_wait)?,
            None => DEFAULT_WAIT.min(state.max_wait),
        };
        Ok::<_, ApiError>(Json(wait(&state, &record.id, timeout).await?))
    }
    .await;
    result.map_or_else(|e| fail(&state, e), IntoResponse::into_response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_parse_within_the_maximum() {
        let max = Duration::from_secs(60);
        assert_eq!(
            parse_wait("wait", "30s", max).unwrap(),
            Duration::from_secs(30)
        );
        assert_eq!(
            parse_wait("wait", "250ms", max).unwrap(),
            Duration::from_millis(250)
        );
        assert_eq!(
            parse_wait("wait", "7", max).unwrap(),
            Duration::from_secs(7)
        );
        assert_eq!(parse_wait("wait", "0", max).unwrap(), Duration::ZERO);
        for bad in ["", "s", "-1s", "1.5s", "10m", "abc", "99999999999"] {
            let err = parse_wait("wait", bad, max).unwrap_err();
            assert!(
                err.public().message.contains("`wait=30s`"),
                "{bad}: {err:?}"
            );
        }
        let err = parse_wait("wait", "61s", max).unwrap_err();
        assert!(
            err.public().message.contains("at most 60s"),
            "{}",
            err.public().message
        );
    }
}
