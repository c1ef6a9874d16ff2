//! The relay's reverse proxy for an HTTP MCP server with headers: MCP's streamable HTTP
//! (`POST`, `GET`, `DELETE` on one endpoint) forwarded to the server's URL with the
//! operator's headers added.
//!
//! From the agent's request, only what the transport needs goes on: `Content-Type`, `Accept`,
//! `Mcp-Session-Id`, `Mcp-Protocol-Version` and `Last-Event-Id` (an `Authorization` or cookie
//! of the agent's own is dropped; the operator's headers win). From the server's answer, the
//! status, `Content-Type`, `Mcp-Session-Id` and `Mcp-Protocol-Version` come back, and the body
//! is streamed as it arrives (an SSE stream stays open as long as both sides keep it).
//! Redirects are not followed (the credential goes to the configured URL only), and no proxy
//! of the environment is used. Connecting is bounded by [`CONNECT_TIMEOUT`]; an answer is not,
//! since a tool call or an SSE stream may legitimately last.

use std::collections::BTreeMap;

use futures_util::TryStreamExt as _;
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use http_body_util::BodyExt as _;
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use super::{Body, CONNECT_TIMEOUT, plain, read_body};

/// The headers of the agent's request that go on.
const REQUEST_HEADERS: [&str; 5] = [
    "content-type",
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

/// The headers of the server's answer that come back.
const RESPONSE_HEADERS: [&str; 3] = ["content-type", "mcp-session-id", "mcp-protocol-version"];

/// A proxied server: its URL and the headers the proxy adds. `Debug` shows the header names.
pub(crate) struct Upstream {
    url: reqwest::Url,
    headers: HeaderMap,
    client: reqwest::Client,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("url", &self.url.as_str())
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Checks a proxied server's URL and headers: what [`Upstream::new`] would refuse, with an
/// error naming the server and the header (never a value).
pub(crate) fn check(
    name: &str,
    url: &str,
    headers: &BTreeMap<String, String>,
) -> Result<(reqwest::Url, HeaderMap), String> {
    let parsed =
        reqwest::Url::parse(url).map_err(|e| format!("MCP server `{name}`: {url:?}: {e}"))?;
    if parsed.scheme() == "https" && !cfg!(feature = "tls") {
        return Err(format!(
            "MCP server `{name}` is at an https:// URL and has headers, which the control plane \
             adds as it proxies the server (they are credentials, kept from the agent): this \
             build of harness-acp has no TLS; build it with the `tls` feature"
        ));
    }
    let mut map = HeaderMap::new();
    for (key, value) in headers {
        let header = HeaderName::from_bytes(key.as_bytes())
            .map_err(|_| format!("MCP server `{name}`: {key:?} is not a valid HTTP header name"))?;
        let mut value = HeaderValue::from_str(value).map_err(|_| {
            format!(
                "MCP server `{name}`: the value of header `{key}` is not a valid HTTP header \
                 value (visible ASCII)"
            )
        })?;
        value.set_sensitive(true);
        map.insert(header, value);
    }
    Ok((parsed, map))
}

impl Upstream {
    /// The server `name` at `url`, with `headers` added to each request.
    ///
    /// # Errors
    /// `configuration` for what [`check`] refuses.
    pub(crate) fn new(
        name: &str,
        url: &str,
        headers: &BTreeMap<String, String>,
    ) -> Result<Self, HarnessError> {
        let (url, headers) = check(name, url, headers).map_err(|why| {
            HarnessError::new(ErrorCategory::Configuration, why)
                .with_code(ErrorCode::OPTIONS_INVALID)
        })?;
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()
            .map_err(|e| {
                HarnessError::new(
                    ErrorCategory::Internal,
                    "the MCP relay's HTTP client could not be built",
                )
                .with_diagnostic(e.to_string())
            })?;
        Ok(Self {
            url,
            headers,
            client,
        })
    }

    /// Forwards the agent's `request` for the server `name`.
    pub(crate) async fn forward(&self, name: &str, request: Request<Incoming>) -> Response<Body> {
        let method = request.method().clone();
        if ![Method::POST, Method::GET, Method::DELETE].contains(&method) {
            return plain(
                StatusCode::METHOD_NOT_ALLOWED,
                "MCP's streamable HTTP takes POST, GET and DELETE",
            );
        }
        let (parts, body) = request.into_parts();
        let body = match read_body(body).await {
            Ok(body) => body,
            Err(refused) => return refused,
        };
        let mut headers = HeaderMap::new();
        for name in REQUEST_HEADERS {
            for value in parts.headers.get_all(name) {
                headers.append(HeaderName::from_static(name), value.clone());
            }
        }
        for (name, value) in &self.headers {
            headers.insert(name.clone(), value.clone());
        }
        let sent = self
            .client
            .request(method, self.url.clone())
            .headers(headers)
            .body(body)
            .send()
            .await;
        let upstream = match sent {
            Ok(upstream) => upstream,
            Err(e) => {
                tracing::debug!(server = name, error = %e.without_url(), "a proxied MCP server could not be reached");
                return plain(
                    StatusCode::BAD_GATEWAY,
                    &format!("MCP server `{name}` could not be reached"),
                );
            }
        };
        let status = upstream.status();
        let mut headers = HeaderMap::new();
        for name in RESPONSE_HEADERS {
            if let Some(value) = upstream.headers().get(name) {
                headers.insert(HeaderName::from_static(name), value.clone());
            }
        }
        let body = upstream
            .bytes_stream()
            .map_ok(Frame::data)
            .map_err(|e| Box::new(e.without_url()) as _);
        let mut response = Response::new(http_body_util::StreamBody::new(body).boxed_unsync());
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        response
    }
}
