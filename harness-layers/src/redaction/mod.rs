//! Redaction: only the safe projection of events and errors crosses outward.
//!
//! ```
//! use std::sync::Arc;
//! use futures_util::StreamExt;
//! use harness_core::event::EventPayload;
//! use harness_core::id::Cursor;
//! use harness_core::service::{AdapterService, ExecutionRequest};
//! use harness_layers::redaction::{RedactionLayer, Redactor};
//! use harness_scripted::{Script, ScriptedAdapter};
//! use tower::ServiceExt;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let redactor = Arc::new(Redactor::builder().secret("hunter2-db-password").build().unwrap());
//! // The secret is split across two deltas.
//! let script = Script::builder()
//!     .text("connecting with hunter2-d")
//!     .text("b-password and sk-proj-0123456789abcdefghij")
//!     .complete("done")
//!     .build();
//! // A layer of the runtime stack: it wraps what the adapter yields, before the driver
//! // numbers and stores it.
//! let service = AdapterService::builder(ScriptedAdapter::new(script))
//!     .layer(RedactionLayer::new(redactor))
//!     .build();
//! let execution = service.oneshot(ExecutionRequest::new("go")).await.unwrap();
//! let text: String = execution
//!     .events(Cursor::START)
//!     .filter_map(|e| async move {
//!         match e.payload() {
//!             EventPayload::MessageDelta(d) => Some(d.text.clone()),
//!             _ => None,
//!         }
//!     })
//!     .collect::<Vec<_>>()
//!     .await
//!     .concat();
//! assert_eq!(text, "connecting with [REDACTED:secret] and [REDACTED:openai_key]");
//! # });
//! ```
//!
//! # Rules
//!
//! A [`Redactor`] is built once ([`Redactor::builder`]) and shared (`Arc`) by every
//! execution. It knows three kinds of rules:
//!
//! - **exact secrets** (registered credentials, [`RedactorBuilder::secret`]): every
//!   occurrence, overlapping ones included, compared exactly (case included);
//! - **pattern rules** ([`PatternRule`]): the built-in ones (bearer tokens, `sk-`,
//!   `sk-ant-`, GitHub, Slack, AWS and Google API keys, private key blocks, JWTs; see
//!   [`builtin_rule_names`]) and any added with [`RedactorBuilder::pattern`];
//! - **sensitive JSON field names** ([`DEFAULT_FIELDS`] plus [`RedactorBuilder::field`]),
//!   compared case-insensitively ignoring `_` and `-`, whose values are replaced wholesale.
//!
//! **Caller credentials.** A request may carry the caller's credentials for tool providers
//! ([`CallerCredentials`] in its extensions; `callerCredentials` over HTTP). The tool
//! handles already scrub each from what its provider's tools give back; the layer also
//! redacts them, as exact secrets, from everything the execution yields (a provider's
//! error, an echo split across deltas or escaped in JSON): each execution with credentials
//! gets the shared redactor plus its own ([`Redactor::with_secrets`]). A credential shorter
//! than [`MIN_SECRET_LEN`] cannot be redacted exactly, so its segment is refused
//! (`CALLER_CREDENTIAL_INVALID`) before the adapter runs.
//!
//! Every match becomes a marker `[REDACTED:<rule>]` (`secret` for exact secrets, `field`
//! for sensitive fields, the rule's name for patterns); overlapping matches become one
//! marker. A marker never contains any part of what it replaces (not its length either).
//!
//! # How patterns are matched, and why they declare bounds
//!
//! A pattern rule is evaluated at *candidate starts*: where one of its literal
//! [prefixes](PatternRule::prefixes) occurs (one case-insensitive Aho-Corasick automaton
//! holds the prefixes of all rules and the exact secrets, so one pass finds them all; a
//! secret's hit is then compared exactly), or, for rules without prefixes, where one combined
//! alternation of those rules matches. At a candidate start `t` the rule's own regex runs on
//! a *window*: the text up to `t + max_len`, or up to and including the first character
//! that is not one of the rule's [token characters](PatternRule::token_chars), whichever
//! comes first. The leftmost-first match starting at `t` in that window, if it is at least
//! the rule's [`min_len`](PatternRule::min_len) long, is a candidate redaction. So
//!
//! - `redact_str` costs one linear automaton pass (the secrets and the prefixes), plus, from
//!   each prefix hit, the rule's anchored DFA run over the window. Those runs go in
//!   lockstep: a rule's runs that reach the same DFA state share the rest of the way (each
//!   keeping its own window and result), so a rule costs at most one DFA transition per
//!   byte and live state, however densely its prefixes occur (text made of one prefix
//!   repeated, `eyJ-eyJ-...`, `Bearer Bearer ...`, is adversarial model output, not a
//!   curiosity): O(n × live states + hits × log n), where a regex search at each hit would
//!   cost O(hits × window). A rule whose DFA would exceed 1 MiB (or that a DFA cannot
//!   express: a Unicode `\b`) is searched by its regex at each hit instead. Rules of the
//!   most common shape, a literal start then one character class repeated (`sk-` then
//!   `[A-Za-z0-9_-]{20,}`: the `sk-`, `sk-ant-`, GitHub, Slack and Google rules), need no
//!   automaton: the run of the class after a hit ends where the run after the previous hit
//!   ends, so one forward scan per rule serves every hit (O(n + hits)). Overlapping
//!   candidates are folded as they are found (the later one only extends the interval the
//!   earlier one starts), so a text that is one long run of matches makes one candidate. The pass skips,
//!   three bytes at a time through a hash filter, text where no three bytes begin any
//!   secret or prefix (most prose). With 100 rules that
//!   all have prefixes, no regex scans text that no rule could match. Rules without
//!   prefixes add one pass of their combined regex, plus a window-bounded search at each
//!   position where it matches (O(n × window) in the worst case: a long run of text that
//!   matches everywhere). One regex alternating 100 rules, by comparison, is several times
//!   slower (see `benches/redaction.rs`).
//! - the result at `t` depends only on a bounded window of text, so a stream knows when it
//!   is settled. That is what makes streaming exact.
//!
//! Write `(?-u:\b)` rather than `\b` in rules: a Unicode word boundary makes the `regex`
//! crate leave its fast engines on any non-ASCII text (the built-in rules use ASCII
//! boundaries).
//!
//! | rule | prefixes | window (max length) |
//! |---|---|---|
//! | exact secret | the secret | its length |
//! | `private_key` | `-----BEGIN` | 8 KiB; a header `-----BEGIN <up to 4 words> PRIVATE KEY-----` starts it; an unterminated or longer block is redacted from its header to the window's end |
//! | `jwt` | `eyJ` | 8 KiB |
//! | `bearer` | `bearer` | 8 KiB (only the token is replaced: `Bearer [REDACTED:bearer]`) |
//! | `anthropic_key`, `openai_key`, `github_token`, `slack_token` | their literal prefixes | 256 B |
//! | `aws_access_key` | `AKIA`, `ASIA` | 32 B |
//! | `google_api_key` | `AIza` | 64 B |
//! | added rules | declared, or derived from the pattern's literal starts (`(?:mongodb\|postgres)://` has two) | [`DEFAULT_MAX_LEN`] unless declared |
//!
//! A match longer than its rule's window is cut at the window: its beginning is redacted,
//! the rest is not recognised (in both `redact_str` and streams, which therefore agree).
//!
//! # Streaming
//!
//! Text arrives in deltas, and a secret may be split across two or more of them. Each run
//! segment gets a [`StreamRedactor`] (run by the layer's stream, [`RedactedStream`], between
//! the adapter and the driver, so *before* anything is numbered or stored), which keeps one
//! buffer per text stream (message, reasoning). On each delta it scans the new text only:
//! the literal automaton resumes in the state where the last delta left it, so each byte is
//! fed once, and that state tells how much of the end could still begin a secret or a
//! prefix; occurrences and candidates already settled are kept, and the rules' DFA runs
//! that are still open keep their states, so they too read each byte once. Rules without
//! prefixes keep the end of the text open (their last `max_len` bytes, or the trailing run
//! of their token characters, which hostile text makes as long), so searching it again on
//! every delta would read each byte up to `max_len` times: once more than 32 bytes would
//! be read again, a lazy DFA of all of them, whose state the stream keeps, is fed each byte
//! once and says where a match may end; only then does their regex run on the held text
//! for the exact spans. The usual open tail, the end of the last word, is cheaper to search
//! again, with that DFA's own search (it reads a byte for about half of what the walk
//! costs), which stops at the first match. Where their runs start is kept up to date from
//! the new bytes alone. (A delta longer than their `max_len` is searched likewise, and the
//! walk starts again later; a DFA that gives up, on a Unicode `\b` before non-ASCII text,
//! leaves their regex to search every delta.) Before any of that, when there are at most 8
//! such rules and each declares token characters, a delta of up to 64 bytes is first counted:
//! a match lies in a run of its rule's token characters (with the character that ends it),
//! so if no run reaches the rule's shortest match (its `min_len`, or its pattern's shortest
//! match if longer), nothing new can match and the delta is settled without a search, one
//! byte lane per rule, eight rules to a word. The held text is the same either way.
//! The emitted text reuses the delta's own buffer (when held text released with it makes it
//! longer: a buffer kept from an earlier delta, at most 4 KiB, or a new one). It emits
//! everything before the *horizon*, holding back only:
//!
//! - a tail that is a proper prefix of an exact secret or of a rule prefix, ignoring ASCII
//!   case for both (at most the longest secret or prefix, minus one byte; a word ending in
//!   `e` waits for the next byte, which could make it `eyJ`);
//! - from a prefix hit whose window is not complete yet: until a non-token character
//!   follows, or the rule's `max_len` bytes have arrived (so at most 8 KiB, after
//!   `-----BEGIN`, `eyJ` or `bearer`; 256 bytes after `sk-`, ...);
//! - for rules without prefixes, their `max_len` (or the trailing run of token characters);
//! - and never a cut inside a redaction.
//!
//! The tail is given back at the end of the run segment and before its terminal item (the
//! text then ends: what follows starts a new text, without the old one as context). Usage,
//! tool activity, native events and artifacts between deltas do not end the text (agents
//! interleave them with message chunks, so a secret split around one is still caught); they
//! are emitted at once and may precede the held tail. So nothing is lost or reordered within
//! a stream, and the concatenation of what a stream
//! emits is exactly [`Redactor::redact_str`] of the concatenation of its deltas (a property
//! the tests check on random texts and split points, after every delta: what has been
//! emitted is always a prefix of it, so no part of a secret is emitted even when the next
//! delta would complete it). [`Redactor::max_hold_back`] reports the bound: the longest
//! possible match (secret, prefix or `max_len`); a stream holds back at most that. A
//! redaction that straddles the horizon is not held either, nor a run of overlapping
//! matches (which may be as long as the text): its marker is emitted once its start is
//! settled, and the text up to its end, however far later matches extend it, is dropped as
//! it arrives, so the stream emits one marker for it, as `redact_str` does. Nothing is held
//! back for throughput's sake: a delta whose text is settled is emitted at once, whatever
//! its size.
//!
//! Every other item is redacted whole ([`Redactor::redact_event`]): its data with the
//! sensitive-field rule (tool arguments and results, native payloads, approval arguments,
//! artifact metadata), then every string of its wire form whatever the field (a tool's name,
//! a form's title, labels and choices, an id): by construction, a field added to a type
//! later is covered too. Errors ([`Redactor::redact_error`]) lose secrets from their
//! message, diagnostic, provider code and code.
//!
//! # The layer and its neighbours
//!
//! [`Redaction`] is a layer of the *runtime stack* ([`AdapterService::builder`]): for each run
//! segment it wraps the stream of the service inside it in a [`RedactedStream`], the way
//! tower-http wraps a response body, and redacts the error of the call itself (a runtime that
//! failed to start). Nothing about it travels in the request, so no layer of the admission
//! stack can switch it off by rebuilding the request. Where it sits in the runtime stack says
//! what it covers:
//!
//! - Everything *inside* it is redacted: the adapter's items and errors, a panic's text (the
//!   innermost service turns an adapter panic into an error item, whose diagnostic it
//!   redacts), and what layers inside it yield.
//! - Layers *outside* it see only redacted items: a retry outside it decides on redacted
//!   errors (the same decision: redaction keeps categories and flags). Errors that layers
//!   outside it make (a turn deadline, a retry giving up) are theirs and carry no provider
//!   text. So the default stack puts it innermost.
//! - When the driver stops reading early (a cancellation, the request's deadline), the
//!   stream's [`drain`](harness_core::service::SegmentStream::drain) gives back the held
//!   tail, redacted, so it is stored before `run.cancelled`.
//!
//! Layers of the admission stack that read the handle's events (metrics, tracing,
//! idempotency replays) only ever see redacted ones, because only redacted items are stored.
//! What it cannot reach: the process's panic hook, which prints a panic message to stderr
//! before anything catches it (install a redacting hook if that matters), a panic *in a
//! layer* (the driver records it as `LAYER_PANICKED` without its text), and logs written by
//! other subscribers. The tracing layer's span fields are ids, categories and codes only;
//! `harness-observe`'s JSON log writer runs every line through
//! [`Redactor::redact_span_field`].
//!
//! [`AdapterService::builder`]: harness_core::service::AdapterService::builder

mod engine;
mod follow;
mod future;
mod lanes;
mod layer;
mod literals;
mod lockstep;
mod rules;
mod shape;
mod stream;

mod body;

use std::sync::Arc;
use std::task::{Context, Poll};

use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::service::{Segment, SegmentStream};
use harness_core::tool::CallerCredentials;
use tower::Service;

pub use body::RedactedStream;
pub use engine::{Redactor, RedactorBuilder};
pub use future::ResponseFuture;
pub use layer::RedactionLayer;
pub use rules::{
    DEFAULT_FIELDS, DEFAULT_MAX_LEN, FIELD_RULE, MAX_RULE_LEN, MIN_SECRET_LEN, PatternRule,
    RedactionError, SECRET_RULE, builtin_rule_names,
};
pub use stream::StreamRedactor;

/// Redacts what each run segment yields before the driver stores it, and the errors of the
/// inner call: see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Redaction<S> {
    inner: S,
    redactor: Arc<Redactor>,
    adapter: Arc<str>,
}

impl<S> Redaction<S> {
    /// Wraps `inner`, redacting with `redactor`.
    #[must_use]
    pub fn new(inner: S, redactor: Arc<Redactor>) -> Self {
        Self::for_adapter(
            inner,
            redactor,
            Arc::from(crate::metrics::names::UNKNOWN_ADAPTER),
        )
    }

    /// Wraps `inner`, redacting with `redactor` and counting redactions under `adapter`.
    #[must_use]
    pub fn for_adapter(inner: S, redactor: Arc<Redactor>, adapter: Arc<str>) -> Self {
        Self {
            inner,
            redactor,
            adapter,
        }
    }

    /// The redactor.
    #[must_use]
    pub fn redactor(&self) -> &Arc<Redactor> {
        &self.redactor
    }

    /// The inner service.
    #[must_use]
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, by value.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S> Service<Segment> for Redaction<S>
where
    S: Service<Segment, Error = HarnessError>,
    S::Response: SegmentStream,
{
    type Response = RedactedStream<S::Response>;
    type Error = HarnessError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner
            .poll_ready(cx)
            .map_err(|e| self.redactor.redact_error(e))
    }

    fn call(&mut self, segment: Segment) -> Self::Future {
        let redactor = match for_execution(&self.redactor, &segment) {
            Ok(redactor) => redactor,
            Err(error) => return ResponseFuture::refused(error),
        };
        let redactor = StreamRedactor::for_adapter(redactor, Arc::clone(&self.adapter));
        ResponseFuture::new(self.inner.call(segment), redactor)
    }
}

/// The redactor for `segment`'s execution: `base`, plus the caller's credentials when the
/// request carries some ([`CallerCredentials`]), so that none leaves in anything the
/// execution yields, whatever a tool or a provider echoes.
///
/// # Errors
/// `CALLER_CREDENTIAL_INVALID` for a credential too short to be redacted exactly
/// ([`MIN_SECRET_LEN`]), naming its provider: it is refused before the segment runs rather
/// than let through unredacted.
fn for_execution(base: &Arc<Redactor>, segment: &Segment) -> Result<Arc<Redactor>, HarnessError> {
    let Some(credentials) = segment
        .extensions()
        .get::<CallerCredentials>()
        .filter(|c| !c.is_empty())
    else {
        return Ok(Arc::clone(base));
    };
    if let Some((provider, _)) = credentials
        .iter()
        .find(|(_, credential)| credential.expose().len() < MIN_SECRET_LEN)
    {
        return Err(HarnessError::new(
            ErrorCategory::Configuration,
            format!(
                "the caller's credential for tool provider `{provider}` is shorter than \
                 {MIN_SECRET_LEN} bytes: too short to be redacted from what the execution \
                 yields; supply the provider's own token"
            ),
        )
        .with_code(ErrorCode::CALLER_CREDENTIAL_INVALID));
    }
    base.with_secrets(credentials.iter().map(|(_, c)| c.expose().to_owned()))
        .map(Arc::new)
        .map_err(|e| {
            HarnessError::new(
                ErrorCategory::Internal,
                "the redactor could not take the caller's credentials",
            )
            .with_diagnostic(e.to_string())
        })
}
