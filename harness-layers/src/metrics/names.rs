//! The metric catalog: every metric name the harness emits, its unit, labels and meaning.
//!
//! Every name is a public constant here, and [`CATALOG`] lists each once with its type, unit,
//! labels, help text and (for histograms) recommended buckets. [`describe()`] registers every
//! entry with the installed recorder, once, with its unit and help text; call it after
//! installing a recorder (an exporter), since descriptions sent before go nowhere.
//!
//! | name | type | unit | labels | meaning |
//! |---|---|---|---|---|
//! | `harness_executions_started_total` | counter | count | adapter | executions started (the service returned a new execution) |
//! | `harness_executions_finished_total` | counter | count | adapter, outcome, category (failed only) | executions ended, by outcome (`succeeded`, `failed`, `cancelled`) |
//! | `harness_execution_duration_seconds` | histogram | seconds | adapter, outcome | from the call to the terminal event |
//! | `harness_execution_time_to_first_event_seconds` | histogram | seconds | adapter | from the call to the first event that is not a `run.*` lifecycle event |
//! | `harness_executions_in_flight` | gauge | count | adapter | calls being answered plus executions not yet ended |
//! | `harness_events_total` | counter | count | adapter, kind | events in execution logs, by kind (`message.delta`, ...) |
//! | `harness_errors_total` | counter | count | adapter, category, stage | errors by category: calls refused (`stage="call"`) and executions failed (`stage="execution"`) |
//! | `harness_preflight_rejections_total` | counter | count | adapter, capability | requests refused by preflight, by the capability unmet (`options` for an options-schema violation) |
//! | `harness_idempotent_replays_total` | counter | count | adapter | calls answered with an existing execution of the same idempotency key |
//! | `harness_idempotency_conflicts_total` | counter | count | adapter | calls refused with `IDEMPOTENCY_CONFLICT` |
//! | `harness_retries_total` | counter | count | adapter, category | retries, by the category of the error retried |
//! | `harness_cancellations_total` | counter | count | adapter, source | cancellation requests accepted, by source (`caller`, `deadline`, `shutdown`, `abandoned`) |
//! | `harness_redactions_total` | counter | count | adapter, rule | values redacted, by the kind of rule (`secret`, `pattern`, `field`) |
//!
//! Labels have few distinct values: adapter ids, the eleven error categories, the eighteen
//! event kinds, outcomes, capability names and the small enums below. No label ever carries an
//! execution id, a conversation id, a message or an error text.
//!
//! The layers of this crate emit the first seven through [`MetricsLayer`](super::MetricsLayer);
//! the others are recorded through the `record_*` functions below by the layer that sees the
//! event (preflight, idempotency, retry, cancellation, redaction), so every call site shares
//! one name and one label set.
//!
//! `metrics` has no notion of buckets: an exporter decides. [`EXECUTION_DURATION_BUCKETS`] and
//! [`TIME_TO_FIRST_EVENT_BUCKETS`] are the recommended ones (also in [`MetricDef::buckets`]),
//! for instance with `metrics-exporter-prometheus`:
//!
//! ```text
//! let mut builder = PrometheusBuilder::new();
//! for def in names::CATALOG {
//!     if let Some(buckets) = def.buckets {
//!         builder = builder.set_buckets_for_metric(Matcher::Full(def.name.into()), buckets)?;
//!     }
//! }
//! ```

use ::metrics::{SharedString, Unit};
use harness_core::error::ErrorCategory;

/// Counter: executions started (the inner service returned a new execution). Labels: adapter.
pub const EXECUTIONS_STARTED: &str = "harness_executions_started_total";
/// Counter: executions ended. Labels: adapter, outcome, and category when the outcome is
/// `failed`.
pub const EXECUTIONS_FINISHED: &str = "harness_executions_finished_total";
/// Histogram (seconds): from the call to the terminal event. Labels: adapter, outcome.
pub const EXECUTION_DURATION: &str = "harness_execution_duration_seconds";
/// Histogram (seconds): from the call to the first event that is not a `run.*` lifecycle
/// event. Labels: adapter.
pub const TIME_TO_FIRST_EVENT: &str = "harness_execution_time_to_first_event_seconds";
/// Gauge: calls being answered plus executions not yet ended. Labels: adapter.
pub const EXECUTIONS_IN_FLIGHT: &str = "harness_executions_in_flight";
/// Counter: events in execution logs. Labels: adapter, kind.
pub const EVENTS: &str = "harness_events_total";
/// Counter: errors. Labels: adapter, category, stage (`call` or `execution`).
pub const ERRORS: &str = "harness_errors_total";
/// Counter: requests refused by preflight. Labels: adapter, capability.
pub const PREFLIGHT_REJECTIONS: &str = "harness_preflight_rejections_total";
/// Counter: calls answered with an existing execution. Labels: adapter.
pub const IDEMPOTENT_REPLAYS: &str = "harness_idempotent_replays_total";
/// Counter: calls refused with `IDEMPOTENCY_CONFLICT`. Labels: adapter.
pub const IDEMPOTENCY_CONFLICTS: &str = "harness_idempotency_conflicts_total";
/// Counter: retries. Labels: adapter, category.
pub const RETRIES: &str = "harness_retries_total";
/// Counter: cancellation requests accepted. Labels: adapter, source.
pub const CANCELLATIONS: &str = "harness_cancellations_total";
/// Counter: values redacted. Labels: adapter, rule.
pub const REDACTIONS: &str = "harness_redactions_total";

/// Label key: the adapter id.
pub const LABEL_ADAPTER: &str = "adapter";
/// Label key: how an execution ended ([`OUTCOME_SUCCEEDED`], [`OUTCOME_FAILED`],
/// [`OUTCOME_CANCELLED`]).
pub const LABEL_OUTCOME: &str = "outcome";
/// Label key: an error category (`throttled`, ...).
pub const LABEL_CATEGORY: &str = "category";
/// Label key: an event kind (`message.delta`, ...).
pub const LABEL_KIND: &str = "kind";
/// Label key: where an error happened ([`STAGE_CALL`], [`STAGE_EXECUTION`]).
pub const LABEL_STAGE: &str = "stage";
/// Label key: a capability name, or [`CAPABILITY_OPTIONS`].
pub const LABEL_CAPABILITY: &str = "capability";
/// Label key: who asked for a cancellation ([`CancelSource`]).
pub const LABEL_SOURCE: &str = "source";
/// Label key: the kind of redaction rule ([`RedactionRule`]).
pub const LABEL_RULE: &str = "rule";

/// Outcome label value: `run.succeeded`.
pub const OUTCOME_SUCCEEDED: &str = "succeeded";
/// Outcome label value: `run.failed`.
pub const OUTCOME_FAILED: &str = "failed";
/// Outcome label value: `run.cancelled`.
pub const OUTCOME_CANCELLED: &str = "cancelled";
/// Stage label value: the call was refused; no execution exists.
pub const STAGE_CALL: &str = "call";
/// Stage label value: the execution ran and failed.
pub const STAGE_EXECUTION: &str = "execution";
/// Capability label value of a preflight rejection for adapter options that violate the
/// options schema.
pub const CAPABILITY_OPTIONS: &str = "options";
/// Adapter label value when the recording code does not know the adapter.
pub const UNKNOWN_ADAPTER: &str = "unknown";

/// Recommended histogram buckets (seconds) for [`EXECUTION_DURATION`]: agent executions take
/// from milliseconds (a refused or scripted run) to an hour (a long tool-using session).
pub const EXECUTION_DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
    1200.0, 1800.0, 3600.0,
];

/// Recommended histogram buckets (seconds) for [`TIME_TO_FIRST_EVENT`]: from a millisecond (an
/// in-process adapter) to a few minutes (a cold sandbox or a queued provider).
pub const TIME_TO_FIRST_EVENT_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
];

/// The type of a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetricType {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// A distribution of observations.
    Histogram,
}

impl MetricType {
    /// `counter`, `gauge` or `histogram`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
            Self::Histogram => "histogram",
        }
    }
}

/// One entry of the [`CATALOG`].
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct MetricDef {
    /// The metric name.
    pub name: &'static str,
    /// Its type.
    pub metric_type: MetricType,
    /// Its unit.
    pub unit: Unit,
    /// Its label keys.
    pub labels: &'static [&'static str],
    /// What it means (the help text).
    pub help: &'static str,
    /// Recommended buckets, for histograms.
    pub buckets: Option<&'static [f64]>,
}

impl MetricDef {
    const fn counter(
        name: &'static str,
        labels: &'static [&'static str],
        help: &'static str,
    ) -> Self {
        Self {
            name,
            metric_type: MetricType::Counter,
            unit: Unit::Count,
            labels,
            help,
            buckets: None,
        }
    }
}

/// Every metric the harness emits, each once.
pub const CATALOG: &[MetricDef] = &[
    MetricDef::counter(
        EXECUTIONS_STARTED,
        &[LABEL_ADAPTER],
        "Executions started (the service returned a new execution).",
    ),
    MetricDef::counter(
        EXECUTIONS_FINISHED,
        &[LABEL_ADAPTER, LABEL_OUTCOME, LABEL_CATEGORY],
        "Executions ended, by outcome (succeeded, failed, cancelled); category for failed ones.",
    ),
    MetricDef {
        name: EXECUTION_DURATION,
        metric_type: MetricType::Histogram,
        unit: Unit::Seconds,
        labels: &[LABEL_ADAPTER, LABEL_OUTCOME],
        help: "Execution duration, from the call to the terminal event.",
        buckets: Some(EXECUTION_DURATION_BUCKETS),
    },
    MetricDef {
        name: TIME_TO_FIRST_EVENT,
        metric_type: MetricType::Histogram,
        unit: Unit::Seconds,
        labels: &[LABEL_ADAPTER],
        help: "Time from the call to the first event that is not a run lifecycle event.",
        buckets: Some(TIME_TO_FIRST_EVENT_BUCKETS),
    },
    MetricDef {
        name: EXECUTIONS_IN_FLIGHT,
        metric_type: MetricType::Gauge,
        unit: Unit::Count,
        labels: &[LABEL_ADAPTER],
        help: "Calls being answered plus executions not yet ended.",
        buckets: None,
    },
    MetricDef::counter(
        EVENTS,
        &[LABEL_ADAPTER, LABEL_KIND],
        "Events in execution logs, by kind.",
    ),
    MetricDef::counter(
        ERRORS,
        &[LABEL_ADAPTER, LABEL_CATEGORY, LABEL_STAGE],
        "Errors by category: calls refused (stage call) and executions failed (stage execution).",
    ),
    MetricDef::counter(
        PREFLIGHT_REJECTIONS,
        &[LABEL_ADAPTER, LABEL_CAPABILITY],
        "Requests refused by preflight, by the capability unmet (options: options schema).",
    ),
    MetricDef::counter(
        IDEMPOTENT_REPLAYS,
        &[LABEL_ADAPTER],
        "Calls answered with the existing execution of their idempotency key.",
    ),
    MetricDef::counter(
        IDEMPOTENCY_CONFLICTS,
        &[LABEL_ADAPTER],
        "Calls refused because their idempotency key belongs to a different request.",
    ),
    MetricDef::counter(
        RETRIES,
        &[LABEL_ADAPTER, LABEL_CATEGORY],
        "Retries, by the category of the error retried.",
    ),
    MetricDef::counter(
        CANCELLATIONS,
        &[LABEL_ADAPTER, LABEL_SOURCE],
        "Cancellation requests accepted, by source (caller, deadline, shutdown, abandoned).",
    ),
    MetricDef::counter(
        REDACTIONS,
        &[LABEL_ADAPTER, LABEL_RULE],
        "Values redacted, by the kind of rule (secret, pattern, field).",
    ),
];

/// Registers every metric of the [`CATALOG`] with the current recorder, once each, with its
/// unit and help text.
///
/// Call it after installing the recorder (descriptions given to no recorder are lost).
/// Calling it again is harmless: it describes the same metrics the same way.
pub fn describe() {
    for def in CATALOG {
        match def.metric_type {
            MetricType::Counter => ::metrics::describe_counter!(def.name, def.unit, def.help),
            MetricType::Gauge => ::metrics::describe_gauge!(def.name, def.unit, def.help),
            MetricType::Histogram => ::metrics::describe_histogram!(def.name, def.unit, def.help),
        }
    }
}

/// Who asked for a cancellation: the `source` label of [`CANCELLATIONS`] is
/// [`CancelSource::as_str`], read from the field that `run.cancelling` carries.
pub use harness_core::event::CancelSource;

/// The kind of rule that redacted a value: the `rule` label of [`REDACTIONS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RedactionRule {
    /// An exact registered secret value.
    Secret,
    /// A pattern (bearer token, API key shape, private key block, JWT, ...).
    Pattern,
    /// A sensitive JSON field name.
    Field,
}

impl RedactionRule {
    /// The label value.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Secret => "secret",
            Self::Pattern => "pattern",
            Self::Field => "field",
        }
    }
}

fn label(value: &str) -> SharedString {
    SharedString::from(value.to_owned())
}

/// Records a request refused by preflight because of `capability` (a capability name such
/// as `stream.text`, or [`CAPABILITY_OPTIONS`] for options that violate the options schema).
/// Call it once per unmet capability.
pub fn record_preflight_rejection(adapter: &str, capability: &str) {
    ::metrics::counter!(
        PREFLIGHT_REJECTIONS,
        LABEL_ADAPTER => label(adapter),
        LABEL_CAPABILITY => label(capability),
    )
    .increment(1);
}

/// Records a call answered with an existing execution (the same key with an equivalent
/// request, including a concurrent identical request that joined the first one). A
/// [`MetricsLayer`](super::MetricsLayer) above tells such a handle by
/// [`ExecutionHandle::is_replay`](harness_core::service::ExecutionHandle::is_replay) and
/// counts it neither as started nor its events twice.
pub fn record_idempotent_replay(adapter: &str) {
    ::metrics::counter!(IDEMPOTENT_REPLAYS, LABEL_ADAPTER => label(adapter)).increment(1);
}

/// Records a call refused with `IDEMPOTENCY_CONFLICT`.
pub fn record_idempotency_conflict(adapter: &str) {
    ::metrics::counter!(IDEMPOTENCY_CONFLICTS, LABEL_ADAPTER => label(adapter)).increment(1);
}

/// Records one retry of an error of `category`.
pub fn record_retry(adapter: &str, category: ErrorCategory) {
    ::metrics::counter!(
        RETRIES,
        LABEL_ADAPTER => label(adapter),
        LABEL_CATEGORY => category.as_str(),
    )
    .increment(1);
}

/// Records one accepted cancellation request (not the repeats of an already requested one).
pub fn record_cancellation(adapter: &str, source: CancelSource) {
    ::metrics::counter!(
        CANCELLATIONS,
        LABEL_ADAPTER => label(adapter),
        LABEL_SOURCE => source.as_str(),
    )
    .increment(1);
}

/// Records `count` values redacted by rules of kind `rule` (batch the count on hot paths).
pub fn record_redactions(adapter: &str, rule: RedactionRule, count: u64) {
    if count == 0 {
        return;
    }
    ::metrics::counter!(
        REDACTIONS,
        LABEL_ADAPTER => label(adapter),
        LABEL_RULE => rule.as_str(),
    )
    .increment(count);
}
