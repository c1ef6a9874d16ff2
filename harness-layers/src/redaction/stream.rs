//! The per-segment streaming redactor and the redaction of whole adapter items.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use harness_core::action::ActionKind;
use harness_core::action::{ApprovalRequest, ToolCallApproval};
use harness_core::adapter::AdapterEvent;
use harness_core::artifact::ArtifactDescriptor;
use harness_core::error::HarnessError;
use harness_core::event::{Content, EventPayload, TextDelta, ToolCallOutcome};

use super::engine::{Interval, Redactor, Scan, Tally, plan, take_tally};
use serde_json::Value;

use crate::metrics::names;

/// Emitted text kept as context is dropped once it reaches this many bytes (64 under
/// `cargo fuzz`, whose inputs are short: what holds for any bound is fuzzed with drops).
const DRAIN_AT: usize = if cfg!(fuzzing) { 64 } else { 4096 };

/// The largest buffer a stream keeps to write released text into (see [`Pending::spare`]).
const SPARE_MAX: usize = 4096;

/// The text of one stream (message or reasoning) not yet emitted.
#[derive(Default)]
struct Pending {
    /// `buf[..ctx]` was emitted already and is kept as context (at least one character,
    /// for `\b`; less than [`DRAIN_AT`] bytes more); `buf[ctx..]` is held back.
    buf: String,
    ctx: usize,
    /// The offset of `buf[0]` in the whole stream.
    base: usize,
    /// Where each delta still (partly) held starts in the stream, and when it arrived: to
    /// flush the two streams in the order their held text arrived.
    arrivals: VecDeque<(usize, u64)>,
    /// What the scan of `buf` has settled so far.
    scan: Scan,
    /// The buffer of an earlier delta (empty, at most [`SPARE_MAX`] bytes): text released
    /// with a delta longer than the delta's own buffer is written here instead of into a
    /// new one, and the delta's buffer is kept in its place. Token-sized deltas release
    /// the end of the last word often: this saves an allocation and a free each time.
    spare: String,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.buf.len() == self.ctx
    }

    /// When the oldest held text arrived.
    fn since(&self) -> u64 {
        self.arrivals.front().map_or(u64::MAX, |a| a.1)
    }

    /// Appends `text` (arrived at `clock`); returns what is settled, redacted, in `text`'s
    /// allocation.
    fn push(
        &mut self,
        redactor: &Redactor,
        mut text: String,
        clock: u64,
        scratch: &mut Scratch,
    ) -> Option<String> {
        let was_empty = self.is_empty();
        self.arrivals.push_back((self.base + self.buf.len(), clock));
        self.buf.push_str(&text);
        let horizon = redactor.scan(&self.buf, self.ctx, false, &mut self.scan);
        let cut = plan(&mut self.scan, horizon, &mut scratch.intervals);
        if cut <= self.ctx {
            self.keep_spare(text);
            return None;
        }
        // Unless it is exactly the delta (nothing was held before it, nothing is held after
        // it, and it needs no redaction), the output reuses the delta's buffer.
        if !(was_empty && cut == self.buf.len() && scratch.intervals.is_empty()) {
            text.clear();
            // Text held before is released with this delta (often: the end of a word that
            // could have begun a literal): another buffer costs less than growing this one,
            // whose contents `realloc` would copy for nothing.
            let out = cut - self.ctx;
            if scratch.intervals.is_empty() && out > text.capacity() {
                if self.spare.capacity() >= out {
                    std::mem::swap(&mut text, &mut self.spare);
                } else {
                    let own = std::mem::replace(&mut text, String::with_capacity(out));
                    self.keep_spare(own);
                }
            }
            redactor.render(&self.buf, self.ctx, cut, &scratch.intervals, &mut text);
        }
        // All of it may be the rest of a redaction whose marker went out before.
        let text = if text.is_empty() {
            self.keep_spare(text);
            None
        } else {
            Some(text)
        };
        // Keep at least the last emitted character as context; drop what precedes it
        // once it is long, not on every delta (the held text then moves less often).
        let mut keep = cut - 1;
        while !self.buf.is_char_boundary(keep) {
            keep -= 1;
        }
        if keep < DRAIN_AT {
            keep = 0;
        }
        if keep > 0 {
            self.buf.drain(..keep);
        }
        self.scan.advance(cut, keep);
        self.ctx = cut - keep;
        self.base += keep;
        let emitted = self.base + self.ctx;
        while self.arrivals.get(1).is_some_and(|next| next.0 <= emitted) {
            self.arrivals.pop_front();
        }
        if self.is_empty() {
            self.arrivals.clear();
        }
        text
    }

    /// Keeps `buf` as the spare buffer if it is larger than the one kept.
    fn keep_spare(&mut self, mut buf: String) {
        if buf.capacity() > self.spare.capacity() && buf.capacity() <= SPARE_MAX {
            buf.clear();
            self.spare = buf;
        }
    }

    /// Redacts and returns everything held back; the stream starts afresh.
    fn flush(&mut self, redactor: &Redactor, scratch: &mut Scratch) -> String {
        let mut out = String::new();
        if !self.is_empty() {
            let end = redactor.scan(&self.buf, self.ctx, true, &mut self.scan);
            let cut = plan(&mut self.scan, end, &mut scratch.intervals);
            redactor.render(&self.buf, self.ctx, cut, &scratch.intervals, &mut out);
        }
        self.scan.clear();
        self.buf.clear();
        self.ctx = 0;
        self.base = 0;
        self.arrivals.clear();
        out
    }
}

#[derive(Default)]
struct Scratch {
    intervals: Vec<Interval>,
}

#[derive(Clone, Copy)]
enum Stream {
    Message,
    Reasoning,
}

/// Redacts one run segment's items as the adapter yields them: what the stream of
/// [`Redaction`](super::Redaction) runs.
///
/// Message and reasoning text are redacted as two streams: each holds back the shortest
/// tail that could still be the start of a secret or match (see the
/// [module docs](super)), emits the rest at once, and gives the tail back at
/// [`on_segment_end`](Self::on_segment_end) and before the segment's terminal item (an
/// action or the completion). So the concatenation of what a stream emits equals
/// [`Redactor::redact_str`] of the concatenation of its deltas, whatever the split points
/// and whatever comes between them; within a stream nothing is lost or reordered.
///
/// Other items (usage, tool activity, native events, artifacts) do not end a text: agents
/// interleave them with message chunks, and a secret split around one is still one secret.
/// They are emitted at once, so one may precede the held tail of text that arrived before
/// it (at most [`Redactor::max_hold_back`] bytes, usually none). (Between the two text
/// streams, text held back by one may likewise follow deltas of the other.)
///
/// Every other item is redacted whole with [`Redactor::redact_event`], and errors with
/// [`Redactor::redact_error`].
///
/// ```
/// use std::sync::Arc;
/// use harness_core::adapter::AdapterEvent;
/// use harness_core::event::{Content, RunSucceeded, TextDelta};
/// use harness_layers::redaction::{Redactor, StreamRedactor};
///
/// let redactor = Arc::new(Redactor::builder().secret("hunter2-db-password").build()?);
/// let mut stream = StreamRedactor::new(redactor);
/// let mut out = Vec::new();
/// for piece in ["the password is hunter2", "-db-pass", "word, done"] {
///     let delta = Content::MessageDelta(TextDelta::new(piece));
///     stream.on_event(AdapterEvent::Content(delta), &mut out);
/// }
/// stream.on_segment_end(&mut out);
/// stream.on_event(AdapterEvent::Completed(RunSucceeded::default()), &mut out);
/// let text: String = out.iter().filter_map(|e| match e {
///     AdapterEvent::Content(Content::MessageDelta(d)) => Some(d.text.as_str()),
///     _ => None,
/// }).collect();
/// assert_eq!(text, "the password is [REDACTED:secret], done");
/// # Ok::<(), harness_layers::redaction::RedactionError>(())
/// ```
pub struct StreamRedactor {
    redactor: Arc<Redactor>,
    /// The adapter label of the redaction metrics.
    adapter: Arc<str>,
    message: Pending,
    reasoning: Pending,
    clock: u64,
    scratch: Scratch,
}

impl fmt::Debug for StreamRedactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The held text may be a secret's beginning: show sizes only.
        f.debug_struct("StreamRedactor")
            .field("redactor", &self.redactor)
            .field("held_message", &(self.message.buf.len() - self.message.ctx))
            .field(
                "held_reasoning",
                &(self.reasoning.buf.len() - self.reasoning.ctx),
            )
            .finish()
    }
}

impl StreamRedactor {
    /// A streaming redactor for one execution.
    #[must_use]
    pub fn new(redactor: Arc<Redactor>) -> Self {
        Self::for_adapter(redactor, Arc::from(names::UNKNOWN_ADAPTER))
    }

    /// A streaming redactor for one execution of `adapter` (the label of its
    /// `harness_redactions_total` counts).
    #[must_use]
    pub fn for_adapter(redactor: Arc<Redactor>, adapter: Arc<str>) -> Self {
        Self {
            redactor,
            adapter,
            message: Pending::default(),
            reasoning: Pending::default(),
            clock: 0,
            scratch: Scratch::default(),
        }
    }

    /// The bytes held back, and those kept (emitted text kept as context included).
    #[cfg(test)]
    fn held(&self) -> (usize, usize) {
        let held = |p: &Pending| p.buf.len() - p.ctx;
        (
            held(&self.message) + held(&self.reasoning),
            self.message.buf.len() + self.reasoning.buf.len(),
        )
    }

    /// The redactor.
    #[must_use]
    pub fn redactor(&self) -> &Arc<Redactor> {
        &self.redactor
    }

    // Inline: text deltas are most items (see `on_event`).
    #[inline(always)]
    fn text(&mut self, stream: Stream, delta: TextDelta, out: &mut Vec<AdapterEvent>) {
        if !self.redactor.has_text_rules() {
            out.push(wrap(stream, delta.text));
            return;
        }
        self.clock += 1;
        let Self {
            redactor,
            adapter: _,
            message,
            reasoning,
            clock,
            scratch,
        } = self;
        let pending = match stream {
            Stream::Message => message,
            Stream::Reasoning => reasoning,
        };
        if let Some(text) = pending.push(redactor, delta.text, *clock, scratch) {
            out.push(wrap(stream, text));
        }
    }

    /// Flushes both streams, the one held longer first.
    fn flush(&mut self, out: &mut Vec<AdapterEvent>) {
        let order = if self.reasoning.since() < self.message.since() {
            [Stream::Reasoning, Stream::Message]
        } else {
            [Stream::Message, Stream::Reasoning]
        };
        for stream in order {
            let Self {
                redactor,
                message,
                reasoning,
                scratch,
                ..
            } = self;
            let pending = match stream {
                Stream::Message => message,
                Stream::Reasoning => reasoning,
            };
            // Even when nothing is held: the text ends, its context is forgotten.
            let text = pending.flush(redactor, scratch);
            if !text.is_empty() {
                out.push(wrap(stream, text));
            }
        }
    }
}

fn wrap(stream: Stream, text: String) -> AdapterEvent {
    let delta = TextDelta { text };
    AdapterEvent::Content(match stream {
        Stream::Message => Content::MessageDelta(delta),
        Stream::Reasoning => Content::ReasoningDelta(delta),
    })
}

impl StreamRedactor {
    /// Counts what the last item's redaction did (see [`take_tally`]).
    fn record(&self) {
        let counts = take_tally();
        for (kind, rule) in [
            (Tally::SECRET, names::RedactionRule::Secret),
            (Tally::PATTERN, names::RedactionRule::Pattern),
            (Tally::FIELD, names::RedactionRule::Field),
        ] {
            if counts[kind] > 0 {
                names::record_redactions(&self.adapter, rule, counts[kind]);
            }
        }
    }
}

impl StreamRedactor {
    /// Redacts one item; pushes what is settled to `out`, in order (text may be held back).
    pub fn on_event(&mut self, event: AdapterEvent, out: &mut Vec<AdapterEvent>) {
        // Counts left by redaction outside a stream on this thread are not ours.
        take_tally();
        // One match here: moving the whole item into another call (even an inlined one)
        // copies it (152 bytes, a call to `memcpy`), and text deltas are most items; they
        // take one path (one call site: the stream's `push` is inlined once).
        let (stream, delta) = match event {
            AdapterEvent::Content(Content::MessageDelta(delta)) => (Stream::Message, delta),
            AdapterEvent::Content(Content::ReasoningDelta(delta)) => (Stream::Reasoning, delta),
            // The text goes on across these: a secret split around a usage update or a tool
            // call is still caught (the item may overtake the held tail).
            other @ (AdapterEvent::Content(_) | AdapterEvent::Artifact(_)) => {
                if let Some(event) = self.redactor.redact_event(other) {
                    out.push(event);
                }
                return self.record();
            }
            // The segment ends: the held text first, in place.
            other @ (AdapterEvent::Action(_) | AdapterEvent::Completed(_)) => {
                self.flush(out);
                if let Some(event) = self.redactor.redact_event(other) {
                    out.push(event);
                }
                return self.record();
            }
        };
        self.text(stream, delta, out);
        self.record();
    }

    /// The segment ends (or is cut short): pushes everything held back, redacted.
    pub fn on_segment_end(&mut self, out: &mut Vec<AdapterEvent>) {
        take_tally();
        self.flush(out);
        self.record();
    }

    /// Redacts an error the adapter yielded (after [`on_segment_end`](Self::on_segment_end)
    /// gave back the text before it).
    #[must_use]
    pub fn on_error(&mut self, error: HarnessError) -> HarnessError {
        take_tally();
        let error = self.redactor.redact_error(error);
        self.record();
        error
    }
}

impl Redactor {
    /// Redacts one whole adapter item (text deltas as complete texts), in two passes:
    ///
    /// 1. The data an agent fills in, with the sensitive-field rule where fields are data:
    ///    a tool call's arguments, a tool result's output (JSON), its failure message or
    ///    rejection reason, a native event's payload, an artifact's name, URI and metadata,
    ///    each approval call's proposed arguments, a completion's summary.
    /// 2. **Every** string of the item's wire form, object keys included, whatever field it
    ///    is in (a tool's name, a form's title, labels, descriptions and choices, an id, a
    ///    media type...): the item is serialized, each string passes
    ///    [`redact_str`](Self::redact_str), and only if one changed is the item rebuilt from
    ///    its redacted form (and validated again, as any item from the wire). This pass is
    ///    by construction: a field added to a type later is covered without being named here.
    ///
    /// `None` if the redacted item does not rebuild (a secret in a field whose format the
    /// marker breaks, such as an id): the item is dropped rather than leaked, with a warning.
    /// Dropping an action or a completion leaves the segment without its terminal item, so
    /// the run fails with `protocol`: it fails closed.
    #[must_use]
    pub fn redact_event(&self, event: AdapterEvent) -> Option<AdapterEvent> {
        let event = match event {
            AdapterEvent::Content(content) => AdapterEvent::Content(self.redact_content(content)),
            AdapterEvent::Artifact(artifact) => {
                AdapterEvent::Artifact(self.redact_artifact(artifact)?)
            }
            AdapterEvent::Action(mut request) => {
                if let ActionKind::ToolApproval(approval) = request.kind {
                    request.kind = ActionKind::ToolApproval(self.redact_approval(approval)?);
                }
                AdapterEvent::Action(request)
            }
            AdapterEvent::Completed(mut done) => {
                if let Some(summary) = &mut done.summary {
                    self.redact_string(summary);
                }
                AdapterEvent::Completed(done)
            }
        };
        self.redact_every_string(event)
    }

    /// Pass 2 of [`redact_event`](Self::redact_event): every string of the item's wire form.
    fn redact_every_string(&self, event: AdapterEvent) -> Option<AdapterEvent> {
        fn rebuild<T: serde::Serialize + serde::de::DeserializeOwned>(
            redactor: &Redactor,
            item: T,
        ) -> Result<T, String> {
            let mut wire = serde_json::to_value(&item).map_err(|e| e.to_string())?;
            if !redactor.redact_strings(&mut wire) {
                return Ok(item);
            }
            serde_json::from_value(wire).map_err(|e| e.to_string())
        }
        let rebuilt = match event {
            // The hot path's own items: text is redacted as a stream, usage has no string.
            AdapterEvent::Content(
                Content::MessageDelta(_) | Content::ReasoningDelta(_) | Content::Usage(_),
            ) => return Some(event),
            AdapterEvent::Content(content) => rebuild(self, EventPayload::from(content))
                .and_then(|p| Content::try_from(p).map_err(|_| "not content".to_owned()))
                .map(AdapterEvent::Content),
            AdapterEvent::Artifact(artifact) => rebuild(self, artifact).map(AdapterEvent::Artifact),
            AdapterEvent::Action(request) => rebuild(self, request).map(AdapterEvent::Action),
            AdapterEvent::Completed(done) => rebuild(self, done).map(AdapterEvent::Completed),
        };
        rebuilt
            .map_err(|error| {
                tracing::warn!(%error, "an item redacted whole could not be rebuilt; dropping it");
            })
            .ok()
    }

    /// Every string of `value`, object keys included, through
    /// [`redact_str`](Self::redact_str) (no sensitive-field rule: this walks the structure
    /// of an item, not only its data). Returns whether anything changed.
    fn redact_strings(&self, value: &mut Value) -> bool {
        match value {
            Value::String(s) => match self.redact_str(s) {
                Cow::Borrowed(_) => false,
                Cow::Owned(r) => {
                    *s = r;
                    true
                }
            },
            Value::Array(items) => items
                .iter_mut()
                .fold(false, |changed, item| self.redact_strings(item) | changed),
            Value::Object(map) => {
                let mut changed = false;
                let mut renamed = Vec::new();
                for (key, item) in map.iter_mut() {
                    changed |= self.redact_strings(item);
                    if let Cow::Owned(redacted) = self.redact_str(key) {
                        renamed.push((key.clone(), redacted));
                    }
                }
                for (old, new) in renamed {
                    if let Some(item) = map.remove(&old) {
                        map.insert(new, item);
                        changed = true;
                    }
                }
                changed
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => false,
        }
    }

    fn redact_string(&self, s: &mut String) {
        if let std::borrow::Cow::Owned(r) = self.redact_str(s) {
            *s = r;
        }
    }

    fn redact_content(&self, content: Content) -> Content {
        match content {
            Content::MessageDelta(mut d) => {
                self.redact_string(&mut d.text);
                Content::MessageDelta(d)
            }
            Content::ReasoningDelta(mut d) => {
                self.redact_string(&mut d.text);
                Content::ReasoningDelta(d)
            }
            Content::Usage(u) => Content::Usage(u),
            Content::ToolCallStarted(mut call) => {
                self.redact_json(&mut call.arguments);
                Content::ToolCallStarted(call)
            }
            Content::ToolCallUpdated(mut call) => {
                self.redact_json(&mut call.arguments);
                Content::ToolCallUpdated(call)
            }
            Content::ToolCallCompleted(mut done) => {
                match &mut done.outcome {
                    ToolCallOutcome::Success { output } => {
                        self.redact_json(output);
                    }
                    ToolCallOutcome::Failure { message } => self.redact_string(message),
                    ToolCallOutcome::Rejected { reason } => {
                        if let Some(reason) = reason {
                            self.redact_string(reason);
                        }
                    }
                }
                Content::ToolCallCompleted(done)
            }
            Content::Native(mut native) => {
                self.redact_json(native.payload_mut());
                Content::Native(native)
            }
            // Its strings (the provider's error message among them) go through pass 2.
            unavailable @ Content::ToolUnavailable(_) => unavailable,
        }
    }

    fn redact_approval(&self, approval: ApprovalRequest) -> Option<ApprovalRequest> {
        let mut redacted = Vec::with_capacity(approval.calls().len());
        let mut changed = false;
        for call in approval.calls() {
            let mut arguments = call.arguments().clone();
            if self.redact_json(&mut arguments) {
                changed = true;
            }
            redacted.push(arguments);
        }
        if !changed {
            return Some(approval);
        }
        let mut calls = Vec::with_capacity(redacted.len());
        for (call, arguments) in approval.calls().iter().zip(redacted) {
            let rebuilt = ToolCallApproval::new(
                call.call_id().clone(),
                call.tool(),
                arguments,
                call.input_schema().clone(),
            )
            .and_then(|c| c.with_allowed(call.allowed().iter().copied()));
            match rebuilt {
                Ok(c) => calls.push(c),
                Err(e) => {
                    tracing::warn!(error = %e, "a redacted tool approval could not be rebuilt; dropping it");
                    return None;
                }
            }
        }
        match ApprovalRequest::new(calls) {
            Ok(a) => Some(a),
            Err(e) => {
                tracing::warn!(error = %e, "a redacted tool approval could not be rebuilt; dropping it");
                None
            }
        }
    }

    fn redact_artifact(&self, artifact: ArtifactDescriptor) -> Option<ArtifactDescriptor> {
        let name = artifact.name().map(|n| self.redact_str(n));
        let uri = artifact.uri().map(|u| self.redact_str(u.as_str()));
        let mut meta = serde_json::Value::Object(artifact.metadata().clone());
        let changed = self.redact_json(&mut meta)
            || matches!(name, Some(std::borrow::Cow::Owned(_)))
            || matches!(uri, Some(std::borrow::Cow::Owned(_)));
        if !changed {
            return Some(artifact);
        }
        let serde_json::Value::Object(metadata) = meta else {
            return None;
        };
        let rebuild = |with_name: bool, with_uri: bool, with_meta: bool| {
            let mut b = ArtifactDescriptor::builder(
                artifact.id().clone(),
                artifact.execution_id().clone(),
                artifact.media_type().as_str(),
            )
            .created_at(artifact.created_at());
            if let (true, Some(name)) = (with_name, &name) {
                b = b.name(name.as_ref());
            }
            if let (true, Some(uri)) = (with_uri, &uri) {
                b = b.uri(uri.as_ref());
            }
            if let Some(size) = artifact.size_bytes() {
                b = b.size_bytes(size);
            }
            if with_meta {
                for (k, v) in &metadata {
                    b = b.metadata(k.clone(), v.clone());
                }
            }
            b.build()
        };
        // A marker can make a field invalid (a longer name, metadata over its bound): then
        // drop that field rather than keep the secret.
        rebuild(true, true, true)
            .or_else(|_| rebuild(false, false, true))
            .or_else(|_| rebuild(false, false, false))
            .map_err(|e| {
                tracing::warn!(error = %e, "a redacted artifact could not be rebuilt; dropping it");
            })
            .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redaction::PatternRule;
    use crate::redaction::lockstep::{SOLO, SOLO_BUDGET};
    use proptest::prelude::*;

    const SECRETS: &[&str] = &[
        "cred00-Q7zX9wV2LmPa",
        "cred01-Q7zX9wV2LmPb",
        "CRED02-lower-and-UPPER",
        "hunter2-db-password",
        "zq9x-zq9x-zq9x",
    ];

    /// Exact secrets (two sharing a long prefix, one repeating itself), the built-in
    /// rules, rules with prefixes, and with `anywhere`, rules without prefixes (one without
    /// token characters, which holds back its `max_len` whatever the text, so streams
    /// follow them with a DFA; with `unicode` too, one with a Unicode `\b`, on which that
    /// DFA gives up at the first non-ASCII byte). With `derive`, those two get the token
    /// characters of their patterns, as outside tests, and streams count their runs.
    fn redactor(anywhere: bool) -> Arc<Redactor> {
        redactor_with(anywhere, false, false)
    }

    fn redactor_with(anywhere: bool, unicode: bool, derive: bool) -> Arc<Redactor> {
        let rule = |name: &str, pattern: &str, max_len: usize, tokens: Option<&str>| {
            let rule = PatternRule::new(name, pattern).unwrap().max_len(max_len);
            match tokens {
                Some(t) => rule.token_chars(t).unwrap(),
                None => rule,
            }
        };
        let mut builder = Redactor::builder()
            .secrets(SECRETS.iter().copied())
            .rule(rule(
                "acme",
                r"acme_live_[A-Za-z0-9]{8,16}",
                32,
                Some("a-z0-9_A-Z"),
            ))
            .rule(rule(
                "tok",
                r"tok:[A-Z0-9]{6}(?-u:\b)",
                16,
                Some("a-zA-Z0-9:"),
            ));
        if anywhere {
            builder = builder
                .rule(rule(
                    "ssn",
                    r"(?-u:\b)[0-9]{3}-[0-9]{2}-[0-9]{4}(?-u:\b)",
                    16,
                    Some("0-9-"),
                ))
                .rule(rule("hex", r"(?-u:\b)[0-9a-f]{16}(?-u:\b)", 24, None));
            if unicode {
                builder = builder.rule(rule("pin", r"\bpin [0-9]{4}\b", 16, None));
            }
        }
        if !derive {
            builder = builder.without_derived_token_chars();
        }
        Arc::new(builder.build().unwrap())
    }

    fn piece() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => "[a-zA-Z0-9 .,:_-]{0,10}",
            1 => "[ -~]{0,6}",
            1 => Just("日本 🦀 ".to_owned()),
            2 => prop::sample::select(SECRETS).prop_map(str::to_owned),
            2 => prop::sample::select(&[
                "cred0", "cred00-Q7zX", "CRED", "hunter2", "zq9x-", "acme_live_", "acme_live_Ab12Cd34",
                "tok:", "tok:AB12CD", "123-45-", "123-45-6789", "0123456789abcdef", "Bearer ", "pin 1234",
                "Bearer abcdefghijklmnop0123", "sk-", "sk-proj-abcdefghijklmnopqrstu", "eyJ", "e",
            ][..]).prop_map(str::to_owned),
        ]
    }

    /// Streams `deltas`; the text emitted after each, then after the segment's end.
    fn stream(redactor: &Arc<Redactor>, deltas: &[&str]) -> Vec<String> {
        let mut stream = StreamRedactor::new(Arc::clone(redactor));
        let mut out = Vec::new();
        let mut emitted = Vec::new();
        let mut take = |out: &mut Vec<AdapterEvent>| {
            let mut text = String::new();
            for e in out.drain(..) {
                match e {
                    AdapterEvent::Content(Content::MessageDelta(d)) => text.push_str(&d.text),
                    other => panic!("unexpected {other:?}"),
                }
            }
            emitted.push(text);
        };
        for delta in deltas {
            let event = AdapterEvent::Content(Content::MessageDelta(TextDelta::new(*delta)));
            stream.on_event(event, &mut out);
            take(&mut out);
        }
        stream.on_segment_end(&mut out);
        take(&mut out);
        emitted
    }

    /// What streaming `deltas` emits is, after every delta, a prefix of `redact_str` of the
    /// whole text, and all of it at the end: so no part of a secret is ever emitted, even
    /// one that the following deltas would complete.
    fn check(redactor: &Arc<Redactor>, text: &str, deltas: &[&str]) -> Result<(), TestCaseError> {
        let whole = redactor.redact_str(text).into_owned();
        let mut so_far = String::new();
        for (i, piece) in stream(redactor, deltas).iter().enumerate() {
            so_far.push_str(piece);
            prop_assert!(
                whole.starts_with(&so_far),
                "after delta {i} of {deltas:?}: emitted {so_far:?}, not a prefix of {whole:?}"
            );
        }
        prop_assert_eq!(so_far, whole);
        Ok(())
    }

    /// `redactor` (built from rules of `pattern`) redacts `text` as `reference` does, in
    /// `redact_str` and streamed in deltas of 1 to 8 bytes cut as `sizes` say.
    fn same_as(
        redactor: &Arc<Redactor>,
        reference: &Arc<Redactor>,
        pattern: &str,
        text: &str,
        sizes: &[usize],
    ) -> Result<(), TestCaseError> {
        let expected = reference.redact_str(text);
        prop_assert_eq!(
            redactor.redact_str(text),
            expected.clone(),
            "{} on {:?}",
            pattern,
            text
        );
        let deltas = split(text, sizes, 8);
        prop_assert_eq!(
            stream(redactor, &deltas).concat(),
            expected,
            "{} streamed",
            pattern
        );
        Ok(())
    }

    /// Cuts `text` at char boundaries into deltas of 1 to `max` bytes, as `sizes` say.
    fn split<'a>(text: &'a str, sizes: &[usize], max: usize) -> Vec<&'a str> {
        let mut deltas = Vec::new();
        let mut pos = 0;
        let mut k = 0;
        while pos < text.len() {
            let mut end = (pos + 1 + sizes.get(k).copied().unwrap_or(max) % max).min(text.len());
            while !text.is_char_boundary(end) {
                end += 1;
            }
            deltas.push(&text[pos..end]);
            pos = end;
            k += 1;
        }
        deltas
    }

    #[test]
    fn a_secret_split_at_every_offset_is_never_emitted() {
        let redactor = redactor(false);
        for secret in SECRETS {
            for (before, after) in [("", ""), ("see ", " ok"), ("x", "y"), ("cred0", ".")] {
                let text = format!("{before}{secret}{after}");
                for a in 0..=text.len() {
                    for b in a..=text.len() {
                        let deltas = [&text[..a], &text[a..b], &text[b..]];
                        check(&redactor, &text, &deltas).unwrap();
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
        ))]

        /// Random rules of the shape [`shape`](super::super::shape) evaluates (a boundary or
        /// not, one or two branches of literal and class starts, a class repeated between
        /// random bounds; token characters or not; random windows) on random text over a
        /// small alphabet: what the regex evaluation at each trigger finds, in `redact_str`
        /// and streamed.
        #[test]
        fn random_shaped_rules_agree_with_the_regex(
            boundary in any::<bool>(),
            starts in prop::collection::vec(
                prop::sample::select(&["x", "xa", "x-", "x[ab]", "xb", "x[a-]"][..]),
                1..3,
            ),
            class in prop::sample::select(&["[ab]", "[a-]", "[ab-]", "[abx]", "a"][..]),
            bounds in (0u32..4, 0u32..4),
            unbounded in any::<bool>(),
            tokens in any::<bool>(),
            min_len in 1usize..5,
            max_len in 1usize..10,
            text in "[xab -]{0,40}",
            sizes in prop::collection::vec(0usize..8, 0..40),
        ) {
            // A repetition of at most one is no repetition in the syntax tree.
            let (lo, extra) = (bounds.0, bounds.1.max(2u32.saturating_sub(bounds.0)));
            let repeat = if unbounded {
                format!("{{{lo},}}")
            } else {
                format!("{{{lo},{}}}", lo + extra)
            };
            let pattern = format!(
                "{}(?:{}){class}{repeat}",
                if boundary { r"(?-u:\b)" } else { "" },
                starts.join("|"),
            );
            let build = |shaped: bool| {
                let mut rule = PatternRule::new("r", &pattern)
                    .unwrap()
                    .min_len(min_len)
                    .max_len(max_len)
                    .prefixes(["x"]);
                if tokens {
                    rule = rule.token_chars("xab-").unwrap();
                }
                let mut builder = Redactor::builder().without_builtin_patterns().rule(rule);
                if !shaped {
                    builder = builder.without_dfas();
                }
                Arc::new(builder.build().unwrap())
            };
            let (shaped, regex) = (build(true), build(false));
            prop_assert_eq!(shaped.shaped_rules(), 1, "{} has the shape", pattern);
            same_as(&shaped, &regex, &pattern, &text, &sizes)?;
        }

        /// Rules whose prefixes are derived from their pattern (alternatives of literals,
        /// case variants, optional parts, look-arounds before them, random ends) redact
        /// what they redact without prefixes, found through their combined regex: every
        /// match starts with a derived prefix. In `redact_str` and streamed.
        #[test]
        fn derived_prefixes_find_what_the_combined_regex_finds(
            head in prop::sample::select(&["", r"(?-u:\b)", "^", "(?m:^)"][..]),
            alternatives in prop::collection::vec(
                prop::sample::select(
                    &["abx", "ab", "xa-", "bxa", "(?i-u:abx)", "a(?:b|x)a", "ab?x", "a-x", "x-?ab", "x[ab]b", "[xa-]ab"][..],
                ),
                1..4,
            ),
            tail in prop::sample::select(&["", "[ab]+", "x*", "-[abx]{1,3}", r"(?-u:\b)", "b"][..]),
            text in "[abxAB -]{0,40}",
            sizes in prop::collection::vec(0usize..8, 0..40),
        ) {
            let pattern = format!("{head}(?:{}){tail}", alternatives.join("|"));
            let build = |derive: bool| {
                let mut rule = PatternRule::new("r", &pattern).unwrap();
                if !derive {
                    rule = rule.prefixes(Vec::<String>::new());
                }
                Arc::new(Redactor::builder().without_builtin_patterns().rule(rule).build().unwrap())
            };
            let (derived, anywhere) = (build(true), build(false));
            prop_assert_eq!(anywhere.rules_without_prefixes(), 1);
            same_as(&derived, &anywhere, &pattern, &text, &sizes)?;
        }

        /// Rules without declared token characters (with derived prefixes or none; a
        /// class, an alternative, an optional part, a look-around; windows that cut
        /// matches) find the same with the token characters derived from their patterns
        /// as without any, in `redact_str` and streamed: a match contains only those
        /// characters, so a window that ends after the first other one loses nothing.
        #[test]
        fn derived_token_chars_find_what_windows_without_them_find(
            head in prop::sample::select(&["", r"(?-u:\b)", r"\b", "x", "ab", "(?:ab|xa)"][..]),
            body in prop::collection::vec(
                prop::sample::select(
                    &["[ab]+", "[0-9]{2,4}", "(?:a|bx)", "-?", "[a-c]{1,3}", "x*", "é?", r"\.", " [0-9]"][..],
                ),
                1..3,
            ),
            end in prop::sample::select(&["", "b", "[0-9]", r"(?-u:\b)", r"\b", "$", "(?m:$)"][..]),
            min_len in 1usize..4,
            max_len in 1usize..12,
            text in "[abx0-9 .é\n-]{0,40}",
            sizes in prop::collection::vec(0usize..8, 0..40),
        ) {
            let pattern = format!("{head}{}{end}", body.concat());
            // A match that reaches its window's cap and ends with an assertion may be
            // found differently by the combined regex (see `PatternRule`): windows longer
            // than the text here.
            let assertion = end.contains('$') || (end.contains('b') && end != "b");
            let max_len = if assertion { 64 } else { max_len };
            let Ok(rule) = PatternRule::new("r", &pattern) else {
                return Ok(());
            };
            let rule = rule.min_len(min_len).max_len(max_len);
            let build = |derive: bool| {
                let builder = Redactor::builder().without_builtin_patterns().rule(rule.clone());
                let builder = if derive { builder } else { builder.without_derived_token_chars() };
                Arc::new(builder.build().unwrap())
            };
            let (derived, without) = (build(true), build(false));
            same_as(&derived, &without, &pattern, &text, &sizes)?;
        }

        /// Token-sized deltas (1 to 8 or 1 to 64 bytes) at random points.
        #[test]
        fn token_sized_deltas_emit_a_growing_prefix_of_redact_str(
            pieces in prop::collection::vec(piece(), 0..24),
            sizes in prop::collection::vec(0usize..64, 0..96),
            small in any::<bool>(),
            anywhere in any::<bool>(),
            unicode in any::<bool>(),
            derive in any::<bool>(),
        ) {
            let redactor = redactor_with(anywhere, unicode, derive);
            let text = pieces.concat();
            let deltas = split(&text, &sizes, if small { 8 } else { 64 });
            check(&redactor, &text, &deltas)?;
        }

        /// Prefixes packed densely (the input that made evaluation quadratic): the lockstep
        /// DFAs find what the regex evaluation at each trigger finds, in `redact_str` and in
        /// streams, with windows that end at their cap, at a non-token character, at a
        /// multi-byte one and at the text's end.
        #[test]
        fn dense_triggers_redact_as_the_regex_evaluation_does(
            pieces in prop::collection::vec(dense_piece(), 0..40),
            sizes in prop::collection::vec(0usize..64, 0..96),
            builtins in any::<bool>(),
        ) {
            let text = pieces.concat();
            let lockstep = dense_redactor(builtins, true);
            let regex = dense_redactor(builtins, false);
            // Triggers followed alone first (as built), in threads only, and both.
            for budget in [SOLO, 0, 3] {
                SOLO_BUDGET.with(|b| b.set(budget));
                let expected = regex.redact_str(&text);
                prop_assert_eq!(lockstep.redact_str(&text), expected, "{:?} at {}", text, budget);
                check(&lockstep, &text, &split(&text, &sizes, 8))?;
                check(&lockstep, &text, &split(&text, &sizes, 64))?;
            }
            SOLO_BUDGET.with(|b| b.set(SOLO));
        }

        /// Rules without prefixes, with token characters, so streams settle most deltas by
        /// counting runs (see `lanes`): a run long enough for one rule inside another's
        /// open run, a match that takes the character ending its run (ASCII or not: the
        /// declaration is not checked), thresholds from `min_len` and from the pattern, and
        /// open runs long enough that the DFA of those rules is fed between counted deltas.
        /// Sometimes one rule declares none: then no run is counted.
        #[test]
        fn counted_runs_settle_what_the_search_would(
            picks in prop::collection::vec((0usize..5, 1usize..7, 0..8), 1..5),
            max_len in 4usize..80,
            pieces in prop::collection::vec(prop_oneof![
                3 => "[0-9abx é-]{0,12}",
                1 => "[0-9a]{20,50}",
                1 => "[ab]{20,50}",
            ], 0..8),
            sizes in prop::collection::vec(0usize..8, 0..200),
        ) {
            let mut builder = Redactor::builder().without_builtin_patterns();
            for (i, &(kind, k, declared)) in picks.iter().enumerate() {
                let (pattern, tokens, min_len) = match kind {
                    0 => (format!("[0-9]{{{k}}}x"), "0-9", 1),
                    1 => (format!("[0-9]{{{k}}}é"), "0-9", 1),
                    2 => (format!(r"(?-u:\b)[ab]{{{}}}(?-u:\b)", k + 1), "ab", 1),
                    3 => (format!("[ab0-9]{{{k},}}-[0-9]{{2}}"), "ab0-9-", 1),
                    _ => ("[0-9a]+".to_owned(), "0-9a", k * 10),
                };
                // Above the longest match of the rule with `\b` (see `PatternRule`).
                let rule = PatternRule::new(format!("r{i}"), &pattern)
                    .unwrap()
                    .max_len(if kind == 2 { max_len.max(k + 3) } else { max_len })
                    .min_len(min_len);
                builder = builder.rule(if declared > 0 {
                    rule.token_chars(tokens).unwrap()
                } else {
                    rule
                });
            }
            let redactor = Arc::new(builder.build().unwrap());
            let text = pieces.concat();
            check(&redactor, &text, &split(&text, &sizes, 8))?;
        }
    }

    /// A counted run may begin in text the stream dropped (emitted long ago: a rule whose
    /// shortest match exceeds its `max_len` settles its runs early): where a long run
    /// starts is then no earlier than the text held.
    #[test]
    fn a_counted_run_may_begin_in_dropped_text() {
        let rule = PatternRule::new("long", "[0-9a]+")
            .unwrap()
            .max_len(16)
            .min_len(100)
            .token_chars("0-9a")
            .unwrap();
        let redactor = Arc::new(
            Redactor::builder()
                .without_builtin_patterns()
                .rule(rule)
                .build()
                .unwrap(),
        );
        let mut text = "a ".repeat(2025);
        text.push_str(&"a".repeat(120));
        text.push_str(" end");
        let deltas: Vec<&str> = (0..text.len()).map(|i| &text[i..=i]).collect();
        check(&redactor, &text, &deltas).unwrap();
    }

    /// Released text is written into the buffer of an earlier delta, kept for that: one of
    /// at most `SPARE_MAX` bytes, whatever the deltas held whole.
    #[test]
    fn the_spare_buffer_is_reused_and_bounded() {
        let redactor = Arc::new(Redactor::builder().build().unwrap());
        let mut stream = StreamRedactor::new(Arc::clone(&redactor));
        // The texts emitted, with their buffers.
        let send = |stream: &mut StreamRedactor, text: String| {
            let mut out = Vec::new();
            let event = AdapterEvent::Content(Content::MessageDelta(TextDelta { text }));
            stream.on_event(event, &mut out);
            out.into_iter()
                .map(|e| match e {
                    AdapterEvent::Content(Content::MessageDelta(d)) => d.text,
                    other => panic!("unexpected {other:?}"),
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(send(&mut stream, "see ".to_owned()), ["see "]);
        // `eyJ` may begin a JWT: the delta is held whole and its buffer kept.
        let mut held = String::with_capacity(16);
        held.push_str("eyJ");
        let spare = held.as_ptr();
        assert!(send(&mut stream, held).is_empty());
        assert_eq!(stream.message.spare.capacity(), 16);
        // Released with a shorter delta: written into the spare buffer, whose place the
        // delta's buffer takes.
        let mut short = String::with_capacity(1);
        short.push('!');
        let released = send(&mut stream, short);
        assert_eq!(released, ["eyJ!"]);
        assert_eq!(released[0].as_ptr(), spare);
        assert_eq!(stream.message.spare.capacity(), 1);
        // A large delta held whole (a private key's body) is not kept.
        send(&mut stream, "-----BEGIN RSA PRIVATE KEY-----\n".to_owned());
        assert!(send(&mut stream, "A".repeat(SPARE_MAX + 100)).is_empty());
        assert!(stream.message.spare.capacity() <= SPARE_MAX);
    }

    /// A stream's DFA of the rules without prefixes is fed only on deltas that are
    /// searched: after deltas settled by counting runs it starts again from what is not
    /// settled, or it would miss a match that began in the bytes it did not see.
    #[test]
    fn the_dfa_walk_starts_again_after_counted_deltas() {
        let rule = |name: &str, pattern: &str, min_len: usize, tokens: &str| {
            PatternRule::new(name, pattern)
                .unwrap()
                .max_len(80)
                .min_len(min_len)
                .token_chars(tokens)
                .unwrap()
        };
        // `long` keeps a long open tail (its run is below its threshold of 60), so the
        // searched deltas feed the DFA; `five` is hit by five digits and what follows.
        let redactor = Arc::new(
            Redactor::builder()
                .without_builtin_patterns()
                .rule(rule("long", "[0-9a]{60,}", 1, "0-9a"))
                .rule(rule("five", "[0-9]{5}x", 1, "0-9"))
                .build()
                .unwrap(),
        );
        let a40 = "a".repeat(40);
        let a = "a".repeat(11);
        let deltas = [&a40, "12345a", " ", &a, &a, &a, "1234", "5x", " end"];
        let text = deltas.concat();
        assert_eq!(
            redactor.redact_str(&text),
            format!("{a40}12345a {}[REDACTED:five] end", a.repeat(3))
        );
        check(&redactor, &text, &deltas).unwrap();
    }

    /// `sk-` repeated is one run of overlapping `openai_key` matches as long as the text:
    /// its marker goes out as soon as its start is settled and the rest is dropped as it
    /// arrives, so the stream holds back at most `max_hold_back` bytes, not the whole run.
    #[test]
    fn a_run_of_overlapping_matches_is_not_held_back() {
        let redactor = Arc::new(Redactor::builder().build().unwrap());
        let text = "sk-".repeat(40_000);
        let deltas = split(&text, &[59], 60);
        let emitted = stream(&redactor, &deltas);
        assert_eq!(emitted.concat(), "[REDACTED:openai_key]");
        assert_eq!(redactor.redact_str(&text), "[REDACTED:openai_key]");
        let first = emitted.iter().position(|e| !e.is_empty()).unwrap();
        assert!(
            first * 60 <= 2 * redactor.max_hold_back(),
            "the marker came after {first} deltas"
        );
        // And the stream holds at most the bound meanwhile.
        let mut stream = StreamRedactor::new(Arc::clone(&redactor));
        let mut out = Vec::new();
        for delta in &deltas {
            let event = AdapterEvent::Content(Content::MessageDelta(TextDelta::new(*delta)));
            stream.on_event(event, &mut out);
            out.clear();
            let (held, kept) = stream.held();
            assert!(held <= redactor.max_hold_back(), "{held} bytes held");
            assert!(kept <= held + DRAIN_AT + 60, "{kept} bytes kept");
        }
    }

    /// Every text of up to 8 characters over `xaby`, with rules whose anchored DFAs branch
    /// and reconverge (so runs from different triggers meet in one state), against the
    /// regex evaluation at each trigger.
    #[test]
    fn lockstep_runs_agree_with_the_regex_on_every_short_text() {
        let patterns = [
            r"x(?:a|ab|abb)y?",
            r"x[ab]*y",
            r"x(?:ab)*a?y?",
            r"xa(?:bb|b)?y",
            r"x(?:a|b)(?:a|bb)?y?",
        ];
        for pattern in patterns {
            let build = |dfas: bool| {
                let rule = PatternRule::new("r", pattern)
                    .unwrap()
                    .max_len(6)
                    .prefixes(["x"]);
                let mut builder = Redactor::builder().without_builtin_patterns().rule(rule);
                if !dfas {
                    builder = builder.without_dfas();
                }
                builder.build().unwrap()
            };
            let (lockstep, regex) = (build(true), build(false));
            let alphabet = ['x', 'a', 'b', 'y'];
            for budget in [SOLO, 0, 2] {
                SOLO_BUDGET.with(|b| b.set(budget));
                for len in 1..=8u32 {
                    for code in 0..4usize.pow(len) {
                        let mut c = code;
                        let text: String = (0..len)
                            .map(|_| {
                                let ch = alphabet[c % 4];
                                c /= 4;
                                ch
                            })
                            .collect();
                        assert_eq!(
                            lockstep.redact_str(&text),
                            regex.redact_str(&text),
                            "{pattern} on {text:?}, alone for {budget} bytes"
                        );
                    }
                }
            }
            SOLO_BUDGET.with(|b| b.set(SOLO));
        }
    }

    /// A window that ends after a character that is not a token character, with a match
    /// decided only by the window's end (`\B` after `!`): alone, in threads and by regex.
    #[test]
    fn a_match_at_a_windows_end_is_decided_at_its_end() {
        let build = |dfas: bool| {
            let rule = PatternRule::new("bang", r"xa+!(?-u:\B)")
                .unwrap()
                .prefixes(["x"])
                .token_chars("xab")
                .unwrap();
            let mut builder = Redactor::builder().without_builtin_patterns().rule(rule);
            if !dfas {
                builder = builder.without_dfas();
            }
            Arc::new(builder.build().unwrap())
        };
        let (lockstep, regex) = (build(true), build(false));
        for budget in [SOLO, 0] {
            SOLO_BUDGET.with(|b| b.set(budget));
            for text in ["xa!", "xaa!b", "xa!!", "xab!", "x xa!"] {
                let expected = regex.redact_str(text);
                assert_eq!(lockstep.redact_str(text), expected, "{text:?} at {budget}");
                let ones: Vec<&str> = (0..text.len()).map(|i| &text[i..=i]).collect();
                assert_eq!(
                    stream(&lockstep, &ones).concat(),
                    expected,
                    "{text:?} streamed"
                );
            }
            assert_eq!(lockstep.redact_str("xa!b"), "[REDACTED:bang]b");
        }
        SOLO_BUDGET.with(|b| b.set(SOLO));
    }

    /// Every text of up to 8 characters over `xab-`, with rules of the shape of
    /// [`shape`](super::super::shape) (a start, then one class repeated) whose windows end
    /// at their cap, at a non-token character and at the text's end, against the regex
    /// evaluation at each trigger: in `redact_str`, and streamed one character at a time
    /// (every trigger's run stays open across deltas).
    #[test]
    fn shaped_rules_agree_with_the_regex_on_every_short_text() {
        // Pattern, prefixes, token characters, `min_len`, `max_len`.
        type Rule = (
            &'static str,
            &'static [&'static str],
            Option<&'static str>,
            usize,
            usize,
        );
        let rules: [Rule; 6] = [
            (r"(?-u:\b)x-[ab]{1,3}", &["x-"], Some("xab-"), 1, 6),
            // A held trigger whose first branch's run ends too short: the second decides.
            (r"(?:xa|x)[ab]{3,}", &["x"], None, 1, 6),
            (r"x[ab]+", &["x"], None, 3, 4),
            (r"(?:xa|x)-[ab]{2,}", &["x"], Some("xab-"), 1, 5),
            (
                r"(?-u:\b)(?:x[ab]|a-)[ab-]*",
                &["xa", "xb", "a-"],
                Some("xab-"),
                4,
                6,
            ),
            (r"xa[b-]{0,2}", &["xa"], None, 1, 3),
        ];
        for (pattern, prefixes, token, min_len, max_len) in rules {
            let build = |shaped: bool| {
                let mut rule = PatternRule::new("r", pattern)
                    .unwrap()
                    .min_len(min_len)
                    .max_len(max_len)
                    .prefixes(prefixes.iter().copied());
                if let Some(token) = token {
                    rule = rule.token_chars(token).unwrap();
                }
                let mut builder = Redactor::builder().without_builtin_patterns().rule(rule);
                if !shaped {
                    builder = builder.without_dfas();
                }
                Arc::new(builder.build().unwrap())
            };
            let (shaped, regex) = (build(true), build(false));
            assert_eq!(shaped.shaped_rules(), 1, "{pattern} has the shape");
            let alphabet = ['x', 'a', 'b', '-'];
            for len in 1..=8u32 {
                for code in 0..4usize.pow(len) {
                    let mut c = code;
                    let text: String = (0..len)
                        .map(|_| {
                            let ch = alphabet[c % 4];
                            c /= 4;
                            ch
                        })
                        .collect();
                    let expected = regex.redact_str(&text);
                    assert_eq!(shaped.redact_str(&text), expected, "{pattern} on {text:?}");
                    let ones: Vec<&str> = (0..text.len()).map(|i| &text[i..=i]).collect();
                    assert_eq!(
                        stream(&shaped, &ones).concat(),
                        expected,
                        "{pattern} streamed"
                    );
                    // Starts complete in the first delta, runs open until the second.
                    let halves = [&text[..text.len().min(3)], &text[text.len().min(3)..]];
                    assert_eq!(
                        stream(&shaped, &halves).concat(),
                        expected,
                        "{pattern} in halves"
                    );
                    // Triggers held and put off behind them one character at a time, then
                    // settled together by the last three.
                    let tail = text.len().saturating_sub(3);
                    let mut mixed: Vec<&str> = (0..tail).map(|i| &text[i..=i]).collect();
                    mixed.push(&text[tail..]);
                    assert_eq!(
                        stream(&shaped, &mixed).concat(),
                        expected,
                        "{pattern} one by one, then the last three"
                    );
                }
            }
        }
    }

    fn dense_piece() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => prop::sample::select(&[
                "eyJ", "eyJa", "-", ".", "a", "ab", "abc", "k:", "kk:", "k:ab", "k:abcdk:", "-ab.",
                "-abc.cd", "eyJab", "eyJab.eyJx", "Z9", "0123456789",
            ][..]).prop_map(str::to_owned),
            1 => prop::sample::select(&[
                " ", "\t", "é", "Bearer ", "bearer\t", "sk-", "sk-ant-", "-----BEGIN ", "RSA ",
                "PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----", "AKIA", "ghp_", "xoxb-", "=",
                "!", "tk-", "tok-", "tk", "z9", "Z9AB", "z9Q", "AIza", "sk-ant-api03-",

            ][..]).prop_map(str::to_owned),
        ]
    }

    /// Small windows, so that caps are reached; one rule with a capture group, one without
    /// token characters, one whose prefixes nest (`k:` in `kk:`), and one that can match
    /// at overlapping triggers; and rules of the shape [`shape`](super::super::shape)
    /// evaluates: with two branches and a trigger shorter than their start (`tk`), without
    /// token characters, and with a `min_len` above the repetition's minimum.
    fn dense_redactor(builtins: bool, dfas: bool) -> Arc<Redactor> {
        let mut builder = Redactor::builder()
            .rule(
                PatternRule::new("kv", r"k:(?P<secret>[a-zA-Z0-9]{4,}k:)")
                    .unwrap()
                    .max_len(24)
                    .prefixes(["k:", "kk:"])
                    .token_chars("a-zA-Z0-9:")
                    .unwrap(),
            )
            .rule(
                PatternRule::new("dash", r"-[a-zA-Z]+[.][a-z]*")
                    .unwrap()
                    .min_len(3)
                    .max_len(12)
                    .prefixes(["-"]),
            )
            .rule(
                PatternRule::new("eyes", r"(?-u:\b)eyJ[a-zA-Z0-9-]{2,}(?:[.]eyJ[a-z]*)?")
                    .unwrap()
                    .max_len(20)
                    .token_chars("a-zA-Z0-9.-")
                    .unwrap(),
            )
            .rule(
                PatternRule::new("tok", r"(?-u:\b)(?:tk|tok)-[a-z0-9-]{3,6}")
                    .unwrap()
                    .max_len(10)
                    .prefixes(["tk", "tok"])
                    .token_chars("a-z0-9-")
                    .unwrap(),
            )
            .rule(
                PatternRule::new("z9", r"z9[A-Z0-9]{2,}")
                    .unwrap()
                    .max_len(6)
                    .prefixes(["z9"]),
            )
            .rule(
                PatternRule::new("abc", r"ab[a-c]*")
                    .unwrap()
                    .min_len(4)
                    .max_len(8)
                    .token_chars("a-c")
                    .unwrap(),
            );
        if !builtins {
            builder = builder.without_builtin_patterns();
        }
        if !dfas {
            builder = builder.without_dfas();
        }
        Arc::new(builder.build().unwrap())
    }
}
