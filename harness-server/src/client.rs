//! A client of the Runtime API over HTTP: what the `harness` command's client verbs use,
//! usable by any Rust program.
//!
//! Its event stream resumes by itself: when the connection drops it reconnects with
//! `Last-Event-ID` (the sequence number of the last event it yielded), so the caller sees
//! each event once and in order, whatever the network does, until the terminal event.

use std::collections::VecDeque;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use harness_core::action::ActionResponse;
use harness_core::error::{ErrorCategory, HarnessError, PublicError};
use harness_core::event::Event;
use serde_json::{Value, json};

use crate::view::{CancelAnswer, CancelOutcome, EventPage, ExecutionPage, ExecutionView};

/// A client of one server, authenticated by a bearer token.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    token: String,
    http: reqwest::Client,
}

/// What a call to the server can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The server answered with an error.
    #[error("the server answered {status}: {error}")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The error it sent.
        error: PublicError,
    },
    /// The server could not be reached, or its answer could not be read.
    #[error("{0}")]
    Transport(String),
}

impl ClientError {
    /// The API error's code, if the server sent one.
    #[must_use]
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Api { error, .. } => Some(error.code.as_str()),
            Self::Transport(_) => None,
        }
    }
}

fn transport(e: impl std::fmt::Display) -> ClientError {
    ClientError::Transport(e.to_string())
}

impl Client {
    /// A client of the server at `base` (`http://127.0.0.1:8700`) sending `token`.
    #[must_use]
    pub fn new(base: impl Into<String>, token: impl Into<String>) -> Self {
        Self {
            base: base.into().trim_end_matches('/').to_owned(),
            token: token.into(),
            http: reqwest::Client::new(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Value, ClientError> {
        let response = request
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(transport)?;
        let status = response.status();
        let body: Value = response.json().await.map_err(transport)?;
        if status.is_success() {
            return Ok(body);
        }
        let error =
            serde_json::from_value::<PublicError>(body["error"].clone()).unwrap_or_else(|_| {
                HarnessError::new(ErrorCategory::Internal, format!("{body}")).public()
            });
        Err(ClientError::Api {
            status: status.as_u16(),
            error,
        })
    }

    /// Starts an execution on `adapter` with `request` (the fields of an execution request),
    /// under `idempotency_key` if given.
    ///
    /// # Errors
    /// What the server answers, or a transport failure.
    pub async fn start(
        &self,
        adapter: &str,
        mut request: Value,
        idempotency_key: Option<&str>,
    ) -> Result<ExecutionView, ClientError> {
        if let Some(map) = request.as_object_mut() {
            map.insert("adapter".into(), json!(adapter));
        }
        let mut call = self.http.post(self.url("/v1/executions")).json(&request);
        if let Some(key) = idempotency_key {
            call = call.header("idempotency-key", key);
        }
        serde_json::from_value(self.send(call).await?).map_err(transport)
    }

    /// The execution `id`.
    ///
    /// # Errors
    /// What the server answers, or a transport failure.
    pub async fn execution(&self, id: &str) -> Result<ExecutionView, ClientError> {
        let call = self.http.get(self.url(&format!("/v1/executions/{id}")));
        serde_json::from_value(self.send(call).await?).map_err(transport)
    }

    /// A page of the caller's executions, newest first.
    ///
    /// # Errors
    /// What the server answers, or a transport failure.
    pub async fn list(
        &self,
        before: Option<&str>,
        limit: usize,
    ) -> Result<ExecutionPage, ClientError> {
        let mut call = self
            .http
            .get(self.url("/v1/executions"))
            .query(&[("limit", limit.to_string())]);
        if let Some(before) = before {
            call = call.query(&[("before", before)]);
        }
        serde_json::from_value(self.send(call).await?).map_err(transport)
    }

    /// A JSON page of `id`'s stored events after `after`.
    ///
    /// # Errors
    /// What the server answers, or a transport failure.
    pub async fn events_page(
        &self,
        id: &str,
        after: u64,
        limit: usize,
    ) -> Result<EventPage, ClientError> {
        let call = self
            .http
            .get(self.url(&format!("/v1/executions/{id}/events")))
            .query(&[("after", after.to_string()), ("limit", limit.to_string())]);
        serde_json::from_value(self.send(call).await?).map_err(transport)
    }

    /// Answers an action.
    ///
    /// # Errors
    /// What the server answers (`ACTION_ALREADY_RESOLVED`, ...), or a transport failure.
    pub async fn answer(&self, id: &str, response: &ActionResponse) -> Result<(), ClientError> {
        let action = response.action_id();
        let call = self
            .http
            .post(self.url(&format!("/v1/executions/{id}/actions/{action}")))
            .json(response);
        self.send(call).await.map(drop)
    }

    /// Answers the action `action` with `body`, exactly the JSON the HTTP API takes (an
    /// `ActionResponse`: `{"type": "tool_approval", "revision": 1, "answer": {...}}`).
    ///
    /// # Errors
    /// What the server answers (`ACTION_ALREADY_RESOLVED`, ...), or a transport failure.
    pub async fn answer_json(
        &self,
        id: &str,
        action: &str,
        body: &Value,
    ) -> Result<(), ClientError> {
        let call = self
            .http
            .post(self.url(&format!("/v1/executions/{id}/actions/{action}")))
            .json(body);
        self.send(call).await.map(drop)
    }

    /// Requests cancellation; returns what the request did.
    ///
    /// # Errors
    /// What the server answers, or a transport failure.
    pub async fn cancel(
        &self,
        id: &str,
        reason: Option<&str>,
    ) -> Result<CancelOutcome, ClientError> {
        let body = reason.map_or_else(|| json!({}), |r| json!({ "reason": r }));
        let call = self
            .http
            .post(self.url(&format!("/v1/executions/{id}/cancel")))
            .json(&body);
        let answer: CancelAnswer =
            serde_json::from_value(self.send(call).await?).map_err(transport)?;
        Ok(answer.status)
    }

    /// The events of `id` after sequence `after`, live, ending after the terminal event;
    /// reconnecting (from the last event yielded) whenever the connection drops. An error
    /// item is the server refusing the stream (after which it ends) or, when `give_up`
    /// reconnections in a row fail, the last transport error.
    pub fn events(
        &self,
        id: &str,
        after: u64,
    ) -> impl Stream<Item = Result<Event, ClientError>> + Send + 'static {
        struct Follow {
            client: Client,
            id: String,
            after: u64,
            body: Option<
                futures_util::stream::BoxStream<'static, reqwest::Result<axum::body::Bytes>>,
            >,
            parser: SseParser,
            ready: VecDeque<Event>,
            failures: u32,
            done: bool,
        }
        const GIVE_UP: u32 = 10;
        let follow = Follow {
            client: self.clone(),
            id: id.to_owned(),
            after,
            body: None,
            parser: SseParser::default(),
            ready: VecDeque::new(),
            failures: 0,
            done: false,
        };
        futures_util::stream::unfold(follow, |mut f| async move {
            loop {
                if let Some(event) = f.ready.pop_front() {
                    f.after = event.seq().get();
                    f.done = event.payload().is_terminal();
                    return Some((Ok(event), f));
                }
                if f.done {
                    return None;
                }
                let Some(body) = f.body.as_mut() else {
                    let url = f.client.url(&format!("/v1/executions/{}/events", f.id));
                    let sent = f
                        .client
                        .http
                        .get(url)
                        .bearer_auth(&f.client.token)
                        .header("accept", "text/event-stream")
                        .header("last-event-id", f.after.to_string())
                        .send()
                        .await;
                    match sent {
                        Ok(response) if response.status().is_success() => {
                            f.parser = SseParser::default();
                            f.body = Some(response.bytes_stream().boxed());
                        }
                        Ok(response) => {
                            let status = response.status().as_u16();
                            let body: Value = response.json().await.unwrap_or_default();
                            let error = serde_json::from_value(body["error"].clone())
                                .unwrap_or_else(|_| {
                                    HarnessError::new(ErrorCategory::Internal, body.to_string())
                                        .public()
                                });
                            f.done = true;
                            return Some((Err(ClientError::Api { status, error }), f));
                        }
                        Err(e) => {
                            f.failures += 1;
                            if f.failures >= GIVE_UP {
                                f.done = true;
                                return Some((Err(transport(e)), f));
                            }
                            tokio::time::sleep(Duration::from_millis(100 * u64::from(f.failures)))
                                .await;
                        }
                    }
                    continue;
                };
                match body.next().await {
                    Some(Ok(chunk)) => {
                        f.failures = 0;
                        for data in f.parser.push(&chunk) {
                            match serde_json::from_str::<Event>(&data) {
                                // Only what continues the stream (a resumed stream starts
                                // after the cursor; this guards against a server that
                                // repeats it).
                                Ok(event) if event.seq().get() > f.after => {
                                    f.ready.push_back(event);
                                }
                                Ok(_) => {}
                                Err(e) => {
                                    tracing::warn!(error = %e, "an event frame did not parse");
                                }
                            }
                        }
                    }
                    // Dropped or ended before the terminal event: reconnect from the cursor.
                    Some(Err(_)) | None => {
                        f.body = None;
                        let resume = f.ready.back().map_or(f.after, |e| e.seq().get());
                        f.after = f.after.max(resume);
                        if f.ready.is_empty() {
                            f.failures += 1;
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                }
            }
        })
    }
}

/// Splits a `text/event-stream` body into the `data` of its events, however the body is
/// cut into chunks.
///
/// ```
/// let mut parser = harness_server::client::SseParser::default();
/// assert!(parser.push(b"id: 1\nevent: run.queued\nda").is_empty());
/// assert_eq!(parser.push(b"ta: {}\n\n: keep-alive\n\n"), vec!["{}".to_owned()]);
/// ```
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    data: Option<String>,
}

impl SseParser {
    /// Takes `chunk`; returns the data of every event it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = chunk;
        while let Some(end) = memchr::memchr(b'\n', rest) {
            let piece = &rest[..end];
            rest = &rest[end + 1..];
            if self.line.is_empty() {
                self.take_line(piece, &mut out);
            } else {
                self.line.extend_from_slice(piece);
                let line = std::mem::take(&mut self.line);
                self.take_line(&line, &mut out);
            }
        }
        self.line.extend_from_slice(rest);
        out
    }

    fn take_line(&mut self, line: &[u8], out: &mut Vec<String>) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            if let Some(data) = self.data.take() {
                out.push(data);
            }
            return;
        }
        if let Some(value) = line.strip_prefix(b"data:") {
            let value = value.strip_prefix(b" ").unwrap_or(value);
            // Valid UTF-8 (the usual case) is checked once and copied once.
            let value = match std::str::from_utf8(value) {
                Ok(text) => std::borrow::Cow::Borrowed(text),
                Err(_) => String::from_utf8_lossy(value),
            };
            match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(&value);
                }
                None => self.data = Some(value.into_owned()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SseParser;

    #[test]
    fn frames_split_anywhere_parse_the_same() {
        let text = b": keep-alive\n\nid: 1\nevent: run.queued\ndata: {\"a\":1}\n\nid: 2\r\ndata: x\r\ndata: y\r\n\r\n";
        for split in 0..text.len() {
            let mut parser = SseParser::default();
            let mut out = parser.push(&text[..split]);
            out.extend(parser.push(&text[split..]));
            assert_eq!(
                out,
                vec!["{\"a\":1}".to_owned(), "x\ny".to_owned()],
                "{split}"
            );
        }
    }
}
