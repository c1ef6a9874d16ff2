//! The console: one page over the Runtime API to list executions, watch one live (text as it
//! streams, tool calls, artifacts), answer an approval (approve, reject, or edit the
//! arguments, checked against the tool's schema) or a form, start one and cancel one.
//!
//! Plain HTML, CSS and JavaScript compiled into the binary (no build step, nothing fetched
//! from elsewhere), served at `/console` without a token: the page asks for one and sends it
//! as a bearer token on every API call (kept in the tab's session storage; a `#token=...`
//! fragment signs in without the token ever reaching a server log). Everything an execution
//! says reaches the page as text, never as markup, and a strict Content-Security-Policy
//! allows only this server's own script, styles and API.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use tower::ServiceExt;
//! let adapter = harness_scripted::ScriptedAdapter::quickstart();
//! let stack = harness_layers::stack::HarnessStack::defaults_for(&adapter).unwrap();
//! let store = std::sync::Arc::new(harness_core::store::MemoryStore::new());
//! let server = harness_server::Server::builder()
//!     .instance(harness_server::Instance::new(&stack, adapter, store, harness_core::store::ReplicaId::new("r1")))
//!     .authenticate(harness_server::auth::BearerTokens::new())
//!     .build()
//!     .unwrap();
//! let page = server.router()
//!     .oneshot(axum::http::Request::get("/console").body(axum::body::Body::empty()).unwrap())
//!     .await
//!     .unwrap();
//! assert_eq!(page.status(), 200);
//! assert!(page.headers()["content-security-policy"].to_str().unwrap().contains("script-src 'self'"));
//! # });
//! ```

use axum::http::header;
use axum::response::{IntoResponse, Response};

const PAGE: &str = include_str!("../console/index.html");
const SCRIPT: &str = include_str!("../console/app.js");
const STYLE: &str = include_str!("../console/style.css");

/// No inline script or style, no other origin, no framing (`data:` images: the empty icon).
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

pub(crate) async fn page() -> Response {
    asset("text/html; charset=utf-8", PAGE)
}

pub(crate) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

pub(crate) async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}
