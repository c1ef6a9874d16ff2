//! The health metrics this crate exports, next to the execution metrics of
//! [`harness_layers::metrics::names`].
//!
//! | name | type | unit | labels | meaning |
//! |---|---|---|---|---|
//! | `harness_ready` | gauge | count | none | global readiness: 1 when every required check passes |
//! | `harness_health_check_up` | gauge | count | check, optional | 1 when the check passed its last run, else 0 |
//! | `harness_health_check_duration_seconds` | gauge | seconds | check | how long the last run took (its deadline when it timed out) |
//! | `harness_health_check_last_success_timestamp_seconds` | gauge | seconds | check | Unix time of the last passing run (absent until one passes) |
//! | `harness_health_capacity_active` | gauge | count | check | executions running, as the check last reported |
//! | `harness_health_capacity_limit` | gauge | count | check | the bound on concurrent executions |
//! | `harness_health_capacity_pending` | gauge | count | check | calls waiting for a permit |
//!
//! The `check` label is a check's name, chosen by the application (a few fixed values, never
//! a reason or an error text); `optional` is `true` or `false`.

use metrics::Unit;

/// Gauge: 1 when every required check passed its last run, else 0. No labels.
pub const READY: &str = "harness_ready";
/// Gauge: 1 when the check passed its last run, else 0. Labels: check, optional.
pub const CHECK_UP: &str = "harness_health_check_up";
/// Gauge (seconds): how long the check's last run took. Labels: check.
pub const CHECK_DURATION: &str = "harness_health_check_duration_seconds";
/// Gauge (seconds since the Unix epoch): the last passing run. Labels: check.
pub const CHECK_LAST_SUCCESS: &str = "harness_health_check_last_success_timestamp_seconds";
/// Gauge: executions running, as the check last reported. Labels: check.
pub const CAPACITY_ACTIVE: &str = "harness_health_capacity_active";
/// Gauge: the bound on concurrent executions, as the check last reported. Labels: check.
pub const CAPACITY_LIMIT: &str = "harness_health_capacity_limit";
/// Gauge: calls waiting for a permit, as the check last reported. Labels: check.
pub const CAPACITY_PENDING: &str = "harness_health_capacity_pending";

/// Label key: the name of a health check.
pub const LABEL_CHECK: &str = "check";
/// Label key: whether a check is optional (`true`, `false`).
pub const LABEL_OPTIONAL: &str = "optional";

/// One health metric: name, unit, labels and help, as in the table above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HealthMetricDef {
    /// The metric name.
    pub name: &'static str,
    /// Its unit.
    pub unit: Unit,
    /// Its label keys.
    pub labels: &'static [&'static str],
    /// What it means (the help text).
    pub help: &'static str,
}

/// Every health metric (all gauges), each once.
pub const CATALOG: &[HealthMetricDef] = &[
    HealthMetricDef {
        name: READY,
        unit: Unit::Count,
        labels: &[],
        help: "Global readiness: 1 when every required health check passed its last run.",
    },
    HealthMetricDef {
        name: CHECK_UP,
        unit: Unit::Count,
        labels: &[LABEL_CHECK, LABEL_OPTIONAL],
        help: "1 when the health check passed its last run, else 0.",
    },
    HealthMetricDef {
        name: CHECK_DURATION,
        unit: Unit::Seconds,
        labels: &[LABEL_CHECK],
        help: "How long the health check's last run took (its deadline when it timed out).",
    },
    HealthMetricDef {
        name: CHECK_LAST_SUCCESS,
        unit: Unit::Seconds,
        labels: &[LABEL_CHECK],
        help: "Unix time of the health check's last passing run.",
    },
    HealthMetricDef {
        name: CAPACITY_ACTIVE,
        unit: Unit::Count,
        labels: &[LABEL_CHECK],
        help: "Executions running, as the health check last reported.",
    },
    HealthMetricDef {
        name: CAPACITY_LIMIT,
        unit: Unit::Count,
        labels: &[LABEL_CHECK],
        help: "The bound on concurrent executions, as the health check last reported.",
    },
    HealthMetricDef {
        name: CAPACITY_PENDING,
        unit: Unit::Count,
        labels: &[LABEL_CHECK],
        help: "Calls waiting for an execution permit, as the health check last reported.",
    },
];

/// Registers every health metric with the current recorder (after installing it), with its
/// unit and help text. [`PrometheusExporter::install`](crate::prometheus::PrometheusExporter::install)
/// calls it.
pub fn describe() {
    for def in CATALOG {
        metrics::describe_gauge!(def.name, def.unit, def.help);
    }
}
