//! The per-execution streaming redactor (an [`Interceptor`]) and the redaction of whole
//! adapter items.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use harness_core::action::{ApprovalRequest, ToolCallApproval};
use harness_core::adapter::{AdapterEvent, Interrupt, InterruptKind};
use harness_core::artifact::ArtifactDescriptor;
use harness_core::error::HarnessError;
use harness_core::event::{Content, TextDelta, ToolCallOutcome};
use harness_core::policy::{Interceptor, InterceptorFactory};

use super::engine::{Interval, Redactor, Scan, Tally, plan, take_tally};
use crate::metrics::names;

/// The text of one stream (message or reasoning) not yet emitted.
#[derive(Default)]
struct Pending {
    /// `buf[..ctx]` was emitted already and is kept as context (one character, for `\b`);
    /// `buf[ctx..]` is held back.
    buf: String,
    ctx: usize,
    /// The offset of `buf[0]` in the whole stream.
    base: usize,
    /// Where each delta still (partly) held starts in the stream, and when it arrived: to
    /// flush the two streams in the order their held text arrived.
    arrivals: VecDeque<(usize, u64)>,
    /// What the scan of `buf` has settled so far.
    scan: Scan,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.buf.len() == self.ctx
    }

    /// When the oldest held text arrived.
    fn since(&self) -> u64 {
        self.arrivals.front().map_or(u64::MAX, |a| a.1)
    }

    /// Appends `text` (arrived at `clock`); returns what is settled, redacted.
    fn push(
        &mut self,
        redactor: &Redactor,
        text: &str,
        clock: u64,
        scratch: &mut Scratch,
    ) -> Emitted {
        let was_empty = self.is_empty();
        self.arrivals.push_back((self.base + self.buf.len(), clock));
        self.buf.push_str(text);
        let horizon = redactor.scan(&self.buf, self.ctx, false, &mut self.scan);
        let cut = plan(&mut self.scan.candidates, horizon, &mut scratch.intervals);
        let mut out = Emitted::Nothing;
        if cut > self.ctx {
            out = if was_empty && cut == self.buf.len() && scratch.intervals.is_empty() {
                Emitted::Unchanged
            } else {
                let mut text = String::with_capacity(cut - self.ctx);
                redactor.render(&self.buf, self.ctx, cut, &scratch.intervals, &mut text);
                Emitted::Text(text)
            };
            // Keep the last emitted character as context.
            let mut keep = cut - 1;
            while !self.buf.is_char_boundary(keep) {
                keep -= 1;
            }
            self.buf.drain(..keep);
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
        }
        out
    }

    /// Redacts and returns everything held back; the stream starts afresh.
    fn flush(&mut self, redactor: &Redactor, scratch: &mut Scratch) -> String {
        let mut out = String::new();
        if !self.is_empty() {
            let end = redactor.scan(&self.buf, self.ctx, true, &mut self.scan);
            let cut = plan(&mut self.scan.candidates, end, &mut scratch.intervals);
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

/// What one delta lets a stream emit.
enum Emitted {
    /// Nothing (all held back).
    Nothing,
    /// Exactly the delta: nothing was held before it, nothing is held after it, and it
    /// needs no redaction.
    Unchanged,
    /// This text.
    Text(String),
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

/// Redacts one execution's items as the service's driver yields them: the
/// [`Interceptor`] that [`Redaction`](super::Redaction) installs.
///
/// Message and reasoning text are redacted as two streams: each holds back the shortest
/// tail that could still be the start of a secret or match (see the
/// [module docs](super)), emits the rest at once, and gives the tail back at
/// [`on_segment_end`](Interceptor::on_segment_end) and before any other item. So the
/// concatenation of what a stream emits equals [`Redactor::redact_str`] of the
/// concatenation of its deltas, whatever the split points; within a stream nothing is lost
/// or reordered, and no item overtakes text that arrived before it. (Between the two text
/// streams, text held back by one may follow deltas of the other that arrived later.)
///
/// Every other item is redacted whole with [`Redactor::redact_event`], and errors with
/// [`Redactor::redact_error`].
///
/// ```
/// use std::sync::Arc;
/// use harness_core::adapter::AdapterEvent;
/// use harness_core::event::{Content, RunSucceeded, TextDelta};
/// use harness_core::policy::Interceptor;
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

    /// The redactor.
    #[must_use]
    pub fn redactor(&self) -> &Arc<Redactor> {
        &self.redactor
    }

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
        let emitted = pending.push(redactor, &delta.text, *clock, scratch);
        match emitted {
            Emitted::Nothing => {}
            Emitted::Unchanged => out.push(wrap(stream, delta.text)),
            Emitted::Text(text) => out.push(wrap(stream, text)),
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

impl Interceptor for StreamRedactor {
    fn on_event(&mut self, event: AdapterEvent, out: &mut Vec<AdapterEvent>) {
        // Counts left by redaction outside an interceptor on this thread are not ours.
        take_tally();
        self.on_item(event, out);
        self.record();
    }

    fn on_segment_end(&mut self, out: &mut Vec<AdapterEvent>) {
        take_tally();
        self.flush(out);
        self.record();
    }

    fn on_error(&mut self, error: HarnessError) -> HarnessError {
        take_tally();
        let error = self.redactor.redact_error(error);
        self.record();
        error
    }
}

impl StreamRedactor {
    fn on_item(&mut self, event: AdapterEvent, out: &mut Vec<AdapterEvent>) {
        match event {
            AdapterEvent::Content(Content::MessageDelta(delta)) => {
                self.text(Stream::Message, delta, out);
            }
            AdapterEvent::Content(Content::ReasoningDelta(delta)) => {
                self.text(Stream::Reasoning, delta, out);
            }
            other => {
                self.flush(out);
                if let Some(event) = self.redactor.redact_event(other) {
                    out.push(event);
                }
            }
        }
    }
}

/// Makes one [`StreamRedactor`] per execution.
#[derive(Debug, Clone)]
pub(crate) struct StreamRedactorFactory(pub(crate) Arc<Redactor>, pub(crate) Arc<str>);

impl InterceptorFactory for StreamRedactorFactory {
    fn create(&self) -> Box<dyn Interceptor> {
        Box::new(StreamRedactor::for_adapter(
            Arc::clone(&self.0),
            Arc::clone(&self.1),
        ))
    }
}

impl Redactor {
    /// Redacts one whole adapter item (text deltas as complete texts):
    ///
    /// | item | redacted |
    /// |---|---|
    /// | message / reasoning delta | its text |
    /// | tool call started | its arguments (JSON) |
    /// | tool call completed | its output (JSON), failure message or rejection reason |
    /// | native event | its payload (JSON) |
    /// | artifact | its name, URI and metadata |
    /// | tool approval | each call's proposed arguments (JSON) |
    /// | completion | its summary |
    ///
    /// Usage and forms carry no free text from the provider and pass unchanged. `None`
    /// only if a redacted approval or artifact could not be rebuilt (which the core's
    /// checks make unreachable): the item is then dropped rather than leaked.
    #[must_use]
    pub fn redact_event(&self, event: AdapterEvent) -> Option<AdapterEvent> {
        Some(match event {
            AdapterEvent::Content(content) => AdapterEvent::Content(self.redact_content(content)),
            AdapterEvent::Artifact(artifact) => {
                AdapterEvent::Artifact(self.redact_artifact(artifact)?)
            }
            AdapterEvent::Interrupt(Interrupt {
                id,
                kind: InterruptKind::ToolApproval(approval),
            }) => AdapterEvent::Interrupt(Interrupt {
                id,
                kind: InterruptKind::ToolApproval(self.redact_approval(approval)?),
            }),
            AdapterEvent::Interrupt(form) => AdapterEvent::Interrupt(form),
            AdapterEvent::Completed(mut done) => {
                if let Some(summary) = &mut done.summary {
                    self.redact_string(summary);
                }
                AdapterEvent::Completed(done)
            }
        })
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
