//! [`TelemetrySink`]: the narrowed handle through which a runtime emits its own spans and
//! metrics, attributed to the execution it serves.
//!
//! A runtime gets one in [`RuntimeContext::telemetry`](crate::adapter::RuntimeContext::telemetry),
//! built by the service per execution. It is not the global recorder: what goes through it
//! carries the execution's attribution whatever the adapter writes, and cannot leave the
//! adapter's namespace.
//!
//! # Spans
//!
//! [`TelemetrySink::span`] makes a `tracing` span (named `harness.adapter`, level INFO, target
//! `harness_adapter`) whose parent is the execution's span (the `harness.execution` span of
//! `harness_layers::trace`, when that layer is in the stack), with the fields
//!
//! | field | value |
//! |---|---|
//! | `otel.name` | the name the adapter gave (an OpenTelemetry exporter uses it as the span's name) |
//! | `adapter` | the adapter id |
//! | `execution_id` | the execution id |
//!
//! Spans made inside it (entered, or with it as `parent:`) are its children, so an adapter's
//! finer spans and events land in the execution's trace too. Because the parent is explicit, a
//! span made on another task or thread than the execution's is still in the right trace.
//!
//! # The execution's trace
//!
//! Besides the adapter's spans, the service makes, under the execution's span, a
//! `harness.segment` span per segment (field `kind`: `turn` or `resume`; the stack's call and
//! the runtime's stream, to the segment's end) and a `harness.tool_call` span per portable
//! tool call that runs (fields `tool`, `call_id`, `execution_id`; never the arguments or the
//! outcome). `harness_layers::trace` adds `harness.admission`. An exporter
//! (`harness_observe::otlp`) sends them all as one trace.
//!
//! # Metrics
//!
//! [`TelemetrySink::counter`] and [`TelemetrySink::histogram`] hand out `metrics` handles
//! (through whatever recorder is installed: the Prometheus one in `harness serve`) named
//! `harness_adapter_<adapter id>_<name>`: an adapter cannot name, and so cannot overwrite, the
//! library's own metrics or another adapter's. Each carries the label `adapter` (the adapter
//! id), like the library's execution metrics.
//!
//! The execution id is deliberately **not** a label: it is unbounded (one new time series per
//! execution would grow the recorder's memory and the Prometheus scrape without limit). To
//! attribute a measurement to one execution, put it on a span, which carries the id.
//!
//! ```
//! use harness_core::telemetry::TelemetrySink;
//! let sink = TelemetrySink::new("openai".parse().unwrap(), "run_1".parse().unwrap(), tracing::Span::none());
//! let histogram = sink.histogram("model_request_seconds").unwrap();
//! histogram.record(0.25);
//! assert_eq!(sink.metric_name("model_request_seconds").unwrap(), "harness_adapter_openai_model_request_seconds");
//! // Names are checked: lowercase snake case only, so no adapter can leave its prefix.
//! let err = sink.counter("../harness_executions_total").unwrap_err();
//! assert!(err.to_string().contains("[a-z][a-z0-9_]"));
//! let _span = sink.span("model.request").unwrap();
//! ```

use std::fmt;

use crate::id::{AdapterId, ExecutionId};

/// The target of every span a [`TelemetrySink`] makes.
pub const SPAN_TARGET: &str = "harness_adapter";

/// The name of every span a [`TelemetrySink`] makes (the adapter's name goes in `otel.name`).
pub const SPAN_NAME: &str = "harness.adapter";

/// The prefix of every metric a [`TelemetrySink`] hands out, before the adapter id.
pub const METRIC_PREFIX: &str = "harness_adapter_";

/// The label key of the adapter id on an adapter's metrics.
pub const LABEL_ADAPTER: &str = "adapter";

/// The longest name a runtime may give a span or a metric.
pub const MAX_NAME_LEN: usize = 64;

/// A span or metric name a runtime gave was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} name `{name}`: expected {rule}, at most {MAX_NAME_LEN} characters")]
pub struct InvalidTelemetryName {
    kind: &'static str,
    name: String,
    rule: &'static str,
}

/// The narrowed telemetry handle of one execution: spans under the execution's span, metrics
/// under the adapter's prefix and labels. See the [module docs](self). Cheap to clone.
#[derive(Clone)]
pub struct TelemetrySink {
    adapter: AdapterId,
    execution_id: ExecutionId,
    parent: tracing::Span,
}

impl fmt::Debug for TelemetrySink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelemetrySink")
            .field("adapter", &self.adapter)
            .field("execution_id", &self.execution_id)
            .field("parent", &self.parent.id())
            .finish()
    }
}

fn check(
    kind: &'static str,
    name: &str,
    rule: &'static str,
    ok: fn(u8) -> bool,
) -> Result<(), InvalidTelemetryName> {
    let valid = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.as_bytes()[0].is_ascii_lowercase()
        && name.bytes().all(ok);
    if valid {
        Ok(())
    } else {
        Err(InvalidTelemetryName {
            kind,
            // Adapter code chose it, but keep an error bounded.
            name: name.chars().take(MAX_NAME_LEN + 16).collect(),
            rule,
        })
    }
}

impl TelemetrySink {
    /// The sink of execution `execution_id` of `adapter`, whose spans are children of
    /// `parent` (the execution's span; the service passes the span current when it builds the
    /// execution, which is the execution's span under `harness_layers::trace`).
    /// `tracing::Span::none()` makes the spans roots, for a runtime built outside a service.
    #[must_use]
    pub fn new(adapter: AdapterId, execution_id: ExecutionId, parent: tracing::Span) -> Self {
        Self {
            adapter,
            execution_id,
            parent,
        }
    }

    /// A sink whose spans are roots (no execution span): for a runtime built by hand, outside
    /// a service (tests, probes).
    #[must_use]
    pub fn detached(adapter: AdapterId, execution_id: ExecutionId) -> Self {
        Self::new(adapter, execution_id, tracing::Span::none())
    }

    /// The execution's span, the parent of every span this sink makes.
    #[must_use]
    pub fn execution_span(&self) -> &tracing::Span {
        &self.parent
    }

    /// A new span named `name` (lowercase letters, digits, `_` and `.`, starting with a
    /// letter), a child of the execution's span, carrying the adapter and execution ids. It is
    /// not entered: enter it, or instrument a future with it.
    ///
    /// # Errors
    /// When `name` is not of that form.
    pub fn span(&self, name: &'static str) -> Result<tracing::Span, InvalidTelemetryName> {
        check("span", name, "[a-z][a-z0-9_.]*", |b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.'
        })?;
        // Keep the name in sync with `SPAN_NAME` and the target with `SPAN_TARGET` (the macro
        // needs literals).
        Ok(tracing::info_span!(
            target: "harness_adapter",
            parent: &self.parent,
            "harness.adapter",
            otel.name = name,
            adapter = self.adapter.as_str(),
            execution_id = self.execution_id.as_str(),
        ))
    }

    /// The full metric name of the adapter's metric `name`:
    /// `harness_adapter_<adapter id>_<name>`.
    ///
    /// # Errors
    /// When `name` is not lowercase snake case (`[a-z][a-z0-9_]*`).
    pub fn metric_name(&self, name: &str) -> Result<String, InvalidTelemetryName> {
        check("metric", name, "[a-z][a-z0-9_]*", |b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'
        })?;
        Ok(format!("{METRIC_PREFIX}{}_{name}", self.adapter.as_str()))
    }

    /// A counter `harness_adapter_<adapter id>_<name>` labelled with the adapter, from the
    /// installed recorder (a no-op handle when none is).
    ///
    /// # Errors
    /// When `name` is not lowercase snake case (`[a-z][a-z0-9_]*`).
    pub fn counter(&self, name: &str) -> Result<metrics::Counter, InvalidTelemetryName> {
        let name = self.metric_name(name)?;
        Ok(metrics::counter!(name, LABEL_ADAPTER => self.adapter.as_str().to_owned()))
    }

    /// A histogram `harness_adapter_<adapter id>_<name>` labelled with the adapter, from the
    /// installed recorder (a no-op handle when none is). Give durations in seconds and end the
    /// name with `_seconds`.
    ///
    /// # Errors
    /// When `name` is not lowercase snake case (`[a-z][a-z0-9_]*`).
    pub fn histogram(&self, name: &str) -> Result<metrics::Histogram, InvalidTelemetryName> {
        let name = self.metric_name(name)?;
        Ok(metrics::histogram!(name, LABEL_ADAPTER => self.adapter.as_str().to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink() -> TelemetrySink {
        TelemetrySink::new(
            "model_loop".parse().unwrap(),
            "run_1".parse().unwrap(),
            tracing::Span::none(),
        )
    }

    #[test]
    fn metric_names_stay_under_the_adapter_prefix() {
        let sink = sink();
        assert_eq!(
            sink.metric_name("requests_total").unwrap(),
            "harness_adapter_model_loop_requests_total"
        );
        for bad in [
            "",
            "Requests",
            "a-b",
            "a b",
            "_x",
            "9x",
            "a.b",
            &"x".repeat(65),
        ] {
            let err = sink.counter(bad).unwrap_err();
            assert!(err.to_string().contains("invalid metric name"), "{err}");
        }
        assert!(sink.span("Model").is_err());
        assert!(sink.span("model.request_1").is_ok());
    }

    #[test]
    fn metrics_carry_the_adapter_label_and_not_the_execution() {
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            let sink = sink();
            sink.counter("requests_total").unwrap().increment(2);
            sink.histogram("request_seconds").unwrap().record(0.5);
        });
        let snapshot = snapshotter.snapshot().into_vec();
        assert_eq!(snapshot.len(), 2);
        for (key, ..) in &snapshot {
            let labels: Vec<_> = key
                .key()
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            assert_eq!(labels, [("adapter".to_owned(), "model_loop".to_owned())]);
            assert!(key.key().name().starts_with("harness_adapter_model_loop_"));
        }
    }
}
