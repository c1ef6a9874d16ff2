//! The console: one page over the Runtime API to list executions (filtered by state, adapter,
//! time and text; new ones appear as they start, badged while they await an answer), watch
//! one live (text as it streams, tool calls, artifacts, a timeline with times and durations,
//! a step view of model turns, tool calls and actions), answer an approval (approve, reject,
//! or edit the arguments, checked against the tool's schema; `a` and `r` on a focused
//! approval) or a form, start one, continue its conversation, cancel one, view its artifacts,
//! and see each adapter's capabilities and health.
//!
//! Plain HTML, CSS and JavaScript compiled into the binary (no build step, nothing fetched
//! from elsewhere), served at `/console` without a token: the page asks for one and sends it
//! as a bearer token on every API call (kept in the tab's session storage, never in a URL).
//! Everything an execution says reaches the page as text, never as markup, and a strict
//! Content-Security-Policy allows only this server's own script, styles and API.
//!
//! What happens when...
//! - the page is opened with `#code=<one-time code>` (the link `harness serve` prints, made
//!   by [`Server::console_code`](crate::Server::console_code)): it removes the code from the
//!   address bar and the tab's history at once (`history.replaceState`), then posts it to
//!   `POST /console/session`, which answers `{"token": ...}` once per code. A code is good
//!   for [`CODE_LIFETIME`] and for one exchange; a used, expired or unknown one is `401`,
//!   and the page then asks for the token. No URL ever holds a credential: a code left in
//!   the browser's global history is worth nothing.
//! - an old `#token=...` link is opened: the page drops it from the address bar unread, and
//!   asks for the token.
//! - a tool call's name or arguments hold bidirectional controls, zero-width or other
//!   invisible characters: the page shows each as a marked `[U+202E]` badge (the rule list
//!   of [`visible::is_hidden`](crate::visible::is_hidden), ported to the page's script and
//!   kept in step by a test), and says so beside the decision buttons.
//! - the address is `#/executions/<id>` or `#/executions/<id>/events/<seq>`: the page shows
//!   that execution (and scrolls to and focuses that event's row) once signed in; a tab
//!   without a token asks for one first and keeps the link. `#/adapters` shows the adapters.
//! - an execution is started from the page on an adapter that declares
//!   `session.multi_turn`: it gets a conversation id of the page's making (`console-` and 32
//!   hex digits), so that the page can offer a follow-up turn once it has ended (a new
//!   execution, same adapter, same `conversationId`).
//! - an artifact's URI is on this server's origin: the viewer reads it with the token (at
//!   most 1 MiB, refused past that without reading on; 15 s at most) and shows text,
//!   indented JSON, an image (through a `blob:` URL) or a diff. Any other address, and any
//!   under `/v1/` or `/console` (an agent chooses its artifacts' addresses, and the token
//!   goes with the request), is shown, not fetched. A descriptor never holds the bytes, and
//!   this server serves none itself.
//!
//! Decisions where the spec is silent: the list is read again every two seconds while the
//! tab is visible (the API has no stream of the list), and its filters apply in the page to
//! the executions loaded so far (`GET /v1/executions` filters nothing); the code is
//! exchanged for the bearer token itself (the page keeps it in session storage, as it keeps
//! a typed one), not for a second kind of credential the server would have to keep; at most [`CODES`] codes are outstanding
//! (minting one more forgets the oldest), so minting is bounded in memory.
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

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::body::Bytes;
use axum::extract::State as Extract;
use axum::extract::rejection::BytesRejection;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use serde_json::json;

use crate::State;
use crate::error::ApiError;

/// How long a one-time sign-in code can be exchanged after it was made.
pub const CODE_LIFETIME: Duration = Duration::from_secs(10 * 60);

/// How many codes are outstanding at most.
pub const CODES: usize = 32;

/// The outstanding one-time codes: each with its token and when it expires.
#[derive(Default)]
pub(crate) struct Codes(Mutex<VecDeque<(String, String, Instant)>>);

impl Codes {
    pub(crate) fn mint(&self, token: &str) -> Result<String, HarnessError> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|e| {
            HarnessError::new(ErrorCategory::Internal, "no randomness for a sign-in code")
                .with_diagnostic(e.to_string())
        })?;
        let code: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut codes = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        codes.retain(|(_, _, expires)| *expires > now);
        while codes.len() >= CODES {
            codes.pop_front();
        }
        codes.push_back((code.clone(), token.to_owned(), now + CODE_LIFETIME));
        Ok(code)
    }

    /// The token of `code` if it is good at `now`, once: the code is gone after this call.
    fn redeem(&self, code: &str, now: Instant) -> Option<String> {
        let mut codes = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let at = codes.iter().position(|(c, _, _)| c == code)?;
        let (_, token, expires) = codes.remove(at)?;
        (expires > now).then_some(token)
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionRequest {
    code: String,
}

/// `POST /console/session`: a one-time code for its token.
pub(crate) async fn session(
    Extract(state): Extract<Arc<State>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let refused = |message: &str, category, code| {
        ApiError::new(HarnessError::new(category, message.to_owned()).with_code(code))
            .into_response()
    };
    let Some(request) = body
        .ok()
        .and_then(|b| serde_json::from_slice::<SessionRequest>(&b).ok())
    else {
        return refused(
            "the body must be {\"code\": \"<the one-time code of the console link>\"}",
            ErrorCategory::Configuration,
            ErrorCode::REQUEST_INVALID,
        );
    };
    match state.console_codes.redeem(&request.code, Instant::now()) {
        Some(token) => (
            [(header::CACHE_CONTROL, "no-store")],
            Json(json!({ "token": token })),
        )
            .into_response(),
        None => refused(
            "this sign-in code is unknown, used or expired: each works once, for ten minutes; \
             sign in with the token instead",
            ErrorCategory::Authentication,
            ErrorCode::CREDENTIAL_INVALID,
        ),
    }
}

const PAGE: &str = include_str!("../console/index.html");
const SCRIPT: &str = include_str!("../console/app.js");
const STYLE: &str = include_str!("../console/style.css");

/// No inline script or style, no other origin, no framing (`data:` images: the empty icon;
/// `blob:` images: an image artifact the viewer read from this server with the token).
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self' data: blob:; base-uri 'none'; form-action 'none'; \
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{CODE_LIFETIME, CODES, Codes};

    #[test]
    fn a_code_works_once_and_not_after_its_lifetime() {
        let codes = Codes::default();
        let now = Instant::now();
        let code = codes.mint("t1").unwrap();
        assert_eq!(code.len(), 32);
        assert_eq!(codes.redeem(&code, now).as_deref(), Some("t1"));
        assert_eq!(codes.redeem(&code, now), None, "a second use");
        let late = codes.mint("t2").unwrap();
        let after = now + CODE_LIFETIME + Duration::from_secs(1);
        assert_eq!(codes.redeem(&late, after), None, "an expired code");
        assert_eq!(codes.redeem(&late, now), None, "gone once tried");
        assert_eq!(codes.redeem("", now), None);
    }

    #[test]
    fn at_most_codes_are_kept_the_oldest_forgotten() {
        let codes = Codes::default();
        let first = codes.mint("t").unwrap();
        let rest: Vec<String> = (0..CODES).map(|_| codes.mint("t").unwrap()).collect();
        assert_eq!(codes.0.lock().unwrap().len(), CODES);
        assert_eq!(codes.redeem(&first, Instant::now()), None);
        assert!(
            rest.iter()
                .all(|c| codes.redeem(c, Instant::now()).is_some())
        );
    }
}
