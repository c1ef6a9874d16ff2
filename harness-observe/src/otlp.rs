//! Trace export: OpenTelemetry over OTLP/HTTP (protobuf), one trace per execution.
//!
//! ```no_run
//! use std::sync::Arc;
//! use harness_layers::redaction::Redactor;
//! use harness_observe::otlp::{OtlpConfig, OtlpExporter};
//! use tracing_subscriber::layer::SubscriberExt;
//!
//! let redactor = Arc::new(Redactor::builder().build().unwrap());
//! let exporter = OtlpExporter::new(&OtlpConfig::new("http://127.0.0.1:4318"), redactor).unwrap();
//! let subscriber = tracing_subscriber::registry().with(exporter.layer());
//! tracing::subscriber::set_global_default(subscriber).unwrap();
//! // ... serve; then flush what is left:
//! exporter.shutdown();
//! ```
//!
//! [`OtlpExporter::layer`] is `tracing-opentelemetry`'s layer over an OpenTelemetry SDK tracer
//! whose spans go, in batches from the SDK's own thread, to `<endpoint>/v1/traces`. It
//! exports spans at INFO and above: the execution's span (`harness.execution`), the spans
//! under it (admission, each segment, each tool call, an adapter's own spans made through its
//! [`TelemetrySink`](harness_core::telemetry::TelemetrySink)), and the events logged inside
//! them as span events.
//!
//! # One trace per execution, continuing the caller's
//!
//! Making the exporter installs a [parent hook](harness_layers::trace::set_parent_hook): an
//! execution whose request carries a `traceparent` gets the caller's span as its OpenTelemetry
//! parent, so the exported trace id is the caller's and the execution's span is a child of the
//! caller's span (its `sampled` flag is honoured: the SDK's default sampler follows the
//! parent). Without a `traceparent` the execution's span is a root and the exporter picks the
//! trace id. Every span made inside the execution (entered, or a child by `parent:`) is in
//! its trace.
//!
//! # Redaction
//!
//! Every string that leaves passes the [`Redactor`]: span names, attribute values (a field
//! whose name is sensitive loses its value wholesale, as in the JSON logs), span event names
//! and attributes, and status descriptions, redacted in the exporter just before they are
//! encoded.
//!
//! # Transport
//!
//! HTTP/protobuf only (`http://host:4318`, the OTLP/HTTP port); no gRPC. A collector that is
//! down loses the batch (the SDK logs it and goes on): export never blocks or fails an
//! execution.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use harness_core::trace::TraceContext;
use harness_layers::redaction::Redactor;
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry::{KeyValue, Value};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing::Subscriber;
use tracing::level_filters::LevelFilter;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

/// Where and as what to export traces (`[telemetry.otlp]` in `harness.toml`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OtlpConfig {
    /// The collector's OTLP/HTTP base URL (`http://127.0.0.1:4318`); spans go to
    /// `<endpoint>/v1/traces`.
    pub endpoint: String,
    /// The `service.name` resource attribute (`harness` by default).
    pub service_name: String,
    /// How long one export request may take (10 s by default).
    pub timeout: Duration,
}

impl OtlpConfig {
    /// Export to the collector at `endpoint`, as service `harness`, within 10 s a request.
    pub fn new(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            service_name: "harness".to_owned(),
            timeout: Duration::from_secs(10),
        }
    }

    /// The `service.name` of the exported spans.
    #[must_use]
    pub fn with_service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = name.into();
        self
    }

    /// How long one export request may take.
    #[must_use]
    pub const fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The URL spans are posted to: the endpoint with `/v1/traces` (once).
    #[must_use]
    pub fn traces_url(&self) -> String {
        let base = self.endpoint.trim_end_matches('/');
        if base.ends_with("/v1/traces") {
            base.to_owned()
        } else {
            format!("{base}/v1/traces")
        }
    }
}

/// The exporter could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    /// The endpoint is not an `http://` or `https://` URL with a host.
    #[error(
        "invalid OTLP endpoint `{0}`: expected the collector's OTLP/HTTP base URL, like `http://127.0.0.1:4318`"
    )]
    Endpoint(String),
    /// The service name is empty or longer than 255 characters.
    #[error("invalid OTLP service name `{0}`: expected 1 to 255 printable characters")]
    ServiceName(String),
    /// The OTLP exporter refused its configuration.
    #[error("the OTLP exporter cannot be built: {0}")]
    Build(String),
}

/// Trace export over OTLP/HTTP: a tracer provider and the layer that feeds it. See the
/// [module docs](self).
pub struct OtlpExporter {
    provider: SdkTracerProvider,
}

impl fmt::Debug for OtlpExporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OtlpExporter").finish_non_exhaustive()
    }
}

impl OtlpExporter {
    /// An exporter to `config`'s collector whose strings pass `redactor`; installs the
    /// [parent hook](harness_layers::trace::set_parent_hook) (once per process).
    ///
    /// # Errors
    /// When the endpoint is not an `http(s)://` URL with a host, the service name is empty,
    /// or the OTLP exporter refuses its configuration.
    pub fn new(config: &OtlpConfig, redactor: Arc<Redactor>) -> Result<Self, OtlpError> {
        let endpoint = config.endpoint.trim();
        let rest = endpoint
            .strip_prefix("http://")
            .or_else(|| endpoint.strip_prefix("https://"));
        if !rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/')) {
            return Err(OtlpError::Endpoint(endpoint.chars().take(200).collect()));
        }
        let name = &config.service_name;
        if name.is_empty() || name.len() > 255 || name.chars().any(char::is_control) {
            return Err(OtlpError::ServiceName(name.chars().take(255).collect()));
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(config.traces_url())
            .with_timeout(config.timeout)
            .build()
            .map_err(|e| OtlpError::Build(e.to_string()))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(Redacting {
                inner: exporter,
                redactor,
            })
            .with_resource(
                opentelemetry_sdk::Resource::builder()
                    .with_service_name(name.clone())
                    .build(),
            )
            .build();
        harness_layers::trace::set_parent_hook(continue_caller);
        Ok(Self { provider })
    }

    /// The `tracing` layer that exports spans at INFO and above (the execution's span is at
    /// INFO).
    pub fn layer<S>(&self) -> impl Layer<S> + Send + Sync + 'static
    where
        S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("harness"))
            .with_filter(LevelFilter::INFO)
    }

    /// Exports what is left and stops: call it before the process exits. Blocks until the
    /// batch is sent or the export timeout passes.
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "the OTLP exporter did not shut down cleanly");
        }
    }
}

/// The parent hook: the caller's span as the execution span's OpenTelemetry parent.
fn continue_caller(span: &tracing::Span, caller: &TraceContext) {
    let (Ok(trace_id), Ok(span_id)) = (
        TraceId::from_hex(caller.trace_id()),
        SpanId::from_hex(caller.parent_id()),
    ) else {
        return;
    };
    let flags = if caller.sampled() {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    let state = caller
        .tracestate()
        .and_then(|s| TraceState::from_str(s).ok())
        .unwrap_or_default();
    let parent = opentelemetry::Context::new()
        .with_remote_span_context(SpanContext::new(trace_id, span_id, flags, true, state));
    // Refused only without the OpenTelemetry layer, or for a span already started: then
    // there is nothing to continue.
    let _ = span.set_parent(parent);
}

/// An exporter that redacts every string of a batch before `inner` encodes it.
#[derive(Debug)]
struct Redacting<E> {
    inner: E,
    redactor: Arc<Redactor>,
}

impl<E: SpanExporter> SpanExporter for Redacting<E> {
    async fn export(&self, mut batch: Vec<SpanData>) -> OTelSdkResult {
        for span in &mut batch {
            redact_span(&self.redactor, span);
        }
        self.inner.export(batch).await
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

fn redact_cow(redactor: &Redactor, text: &mut Cow<'static, str>) {
    if let Cow::Owned(redacted) = redactor.redact_str(text) {
        *text = Cow::Owned(redacted);
    }
}

/// A string attribute goes through the redactor as a one-field JSON object, so that the
/// sensitive-field rule sees its key.
fn redact_attributes(redactor: &Redactor, attributes: &mut [KeyValue]) {
    for kv in attributes {
        if let Value::String(value) = &kv.value {
            let mut json = serde_json::json!({ kv.key.as_str(): value.as_str() });
            if redactor.redact_json(&mut json)
                && let Some(redacted) = json.get(kv.key.as_str()).and_then(|v| v.as_str())
            {
                kv.value = Value::String(redacted.to_owned().into());
            }
        }
    }
}

fn redact_span(redactor: &Redactor, span: &mut SpanData) {
    redact_cow(redactor, &mut span.name);
    redact_attributes(redactor, &mut span.attributes);
    for event in &mut span.events.events {
        redact_cow(redactor, &mut event.name);
        redact_attributes(redactor, &mut event.attributes);
    }
    if let opentelemetry::trace::Status::Error { description } = &mut span.status {
        redact_cow(redactor, description);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_url_is_the_endpoint_with_its_path_once() {
        assert_eq!(
            OtlpConfig::new("http://127.0.0.1:4318").traces_url(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            OtlpConfig::new("http://c:4318/v1/traces/").traces_url(),
            "http://c:4318/v1/traces"
        );
    }

    #[test]
    fn bad_configuration_is_refused_by_name() {
        let redactor = Arc::new(Redactor::builder().build().unwrap());
        for bad in ["127.0.0.1:4318", "ftp://x", "http://", "http:///x"] {
            let err = OtlpExporter::new(&OtlpConfig::new(bad), Arc::clone(&redactor)).unwrap_err();
            assert!(err.to_string().contains("OTLP endpoint"), "{bad}: {err}");
        }
        let err = OtlpExporter::new(
            &OtlpConfig::new("http://127.0.0.1:4318").with_service_name(""),
            redactor,
        )
        .unwrap_err();
        assert!(err.to_string().contains("service name"), "{err}");
    }

    #[test]
    fn spans_are_redacted_before_export() {
        let redactor = Redactor::builder()
            .secret("hunter2-db-password")
            .build()
            .unwrap();
        let mut span = SpanData {
            span_context: SpanContext::empty_context(),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: opentelemetry::trace::SpanKind::Internal,
            name: "connect hunter2-db-password".into(),
            start_time: std::time::SystemTime::now(),
            end_time: std::time::SystemTime::now(),
            attributes: vec![
                KeyValue::new("message", "using hunter2-db-password"),
                KeyValue::new("password", "plain"),
                KeyValue::new("adapter", "openai"),
            ],
            dropped_attributes_count: 0,
            events: opentelemetry_sdk::trace::SpanEvents::default(),
            links: opentelemetry_sdk::trace::SpanLinks::default(),
            status: opentelemetry::trace::Status::error("failed: hunter2-db-password"),
            instrumentation_scope: opentelemetry::InstrumentationScope::builder("t").build(),
        };
        redact_span(&redactor, &mut span);
        let text = format!("{span:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(!text.contains("plain"), "{text}");
        assert_eq!(span.attributes[2].value.as_str(), "openai");
    }
}
