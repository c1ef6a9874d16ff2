//! JSON logs in which every line is redacted: an execution's whole story, one object a line.
//!
//! ```
//! use std::sync::Arc;
//! use harness_layers::redaction::Redactor;
//! use harness_observe::logging::json_subscriber;
//! use tracing::level_filters::LevelFilter;
//!
//! let redactor = Arc::new(Redactor::builder().secret("hunter2-db-password").build().unwrap());
//! let subscriber = json_subscriber(std::io::stdout, redactor, LevelFilter::INFO);
//! tracing::subscriber::with_default(subscriber, || {
//!     // {"timestamp":"...","level":"INFO","fields":{"message":"connecting with [REDACTED:secret]"},...}
//!     tracing::info!("connecting with hunter2-db-password");
//! });
//! ```
//!
//! [`json_subscriber`] is `tracing-subscriber`'s JSON formatter with:
//!
//! - the current span and the list of spans around each event (so a log line written by the
//!   adapter or the driver carries the `harness.execution` span with its `trace_id`,
//!   `span_id`, `execution_id` and `adapter`);
//! - one line when each span closes, with its final fields (the execution's `outcome`,
//!   `error.category` and `error.code`) and its busy and idle times;
//! - every line passed through the [`Redactor`] ([`RedactingMakeWriter`]) before it is
//!   written: messages, event fields and span fields alike, parsed as the JSON it is, so the
//!   sensitive-field rule applies to field names too (`tracing::info!(password = "...")`
//!   logs `"password":"[REDACTED:field]"`). The layers record only
//!   identifiers, categories and codes on spans (see `harness_layers::trace`), so this is
//!   defence in depth for what other code logs (a panic payload, a store error, an
//!   application's own fields).
//!
//! A registered secret that contains `"`, `\` or control characters is caught in the
//! line's strings (decoded) and in its escaped forms (the redactor registers those too).

use std::io::{self, Write};
use std::sync::Arc;

use harness_layers::redaction::Redactor;
use tracing::Subscriber;
use tracing::level_filters::LevelFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::layer::{Layer, SubscriberExt};
use tracing_subscriber::registry::{LookupSpan, Registry};

/// A JSON log subscriber writing redacted lines to `writer`, at `level` and above; see the
/// [module docs](self). Install it with `tracing::subscriber::set_global_default`.
pub fn json_subscriber<M>(
    writer: M,
    redactor: Arc<Redactor>,
    level: LevelFilter,
) -> impl Subscriber + Send + Sync + 'static
where
    M: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    Registry::default().with(json_layer(writer, redactor).with_filter(level))
}

/// The layer of [`json_subscriber`], to compose with other layers (a filter, an OpenTelemetry
/// exporter) over a `tracing_subscriber::Registry`.
pub fn json_layer<S, M>(writer: M, redactor: Arc<Redactor>) -> impl Layer<S> + Send + Sync + 'static
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    M: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt::layer()
        .json()
        .with_current_span(true)
        .with_span_list(true)
        .with_span_events(FmtSpan::CLOSE)
        .with_writer(RedactingMakeWriter::new(writer, redactor))
}

/// A [`MakeWriter`] whose writers redact each write with a [`Redactor`] before passing it
/// on. `tracing-subscriber`'s formatters write each formatted line in one `write_all`, so a
/// line is redacted as a whole.
#[derive(Debug, Clone)]
pub struct RedactingMakeWriter<M> {
    inner: M,
    redactor: Arc<Redactor>,
}

impl<M> RedactingMakeWriter<M> {
    /// Wraps `inner`.
    pub const fn new(inner: M, redactor: Arc<Redactor>) -> Self {
        Self { inner, redactor }
    }
}

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for RedactingMakeWriter<M> {
    type Writer = RedactingWriter<'a, M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        RedactingWriter {
            inner: self.inner.make_writer(),
            redactor: &self.redactor,
        }
    }
}

/// The writer of a [`RedactingMakeWriter`].
#[derive(Debug)]
pub struct RedactingWriter<'a, W> {
    inner: W,
    redactor: &'a Redactor,
}

impl<W: Write> Write for RedactingWriter<'_, W> {
    /// A JSON line (what the formatter writes) is redacted as JSON, so the sensitive-field
    /// rule applies to its fields too (`tracing::info!(password = "...")` logs
    /// `"password":"[REDACTED:field]"`); anything else as text.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let line = text.trim_end_matches('\n');
        if let Ok(mut json) = serde_json::from_str::<serde_json::Value>(line)
            && json.is_object()
        {
            if self.redactor.redact_json(&mut json) {
                let mut out = serde_json::to_vec(&json).map_err(io::Error::other)?;
                out.extend_from_slice(&buf[line.len()..]);
                self.inner.write_all(&out)?;
            } else {
                self.inner.write_all(buf)?;
            }
            return Ok(buf.len());
        }
        let redacted = self.redactor.redact_span_field(&text);
        self.inner.write_all(redacted.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
