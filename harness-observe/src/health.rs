//! Health: bounded, side-effect-free checks aggregated into readiness.
//!
//! ```
//! use std::time::Duration;
//! use harness_observe::health::{check_fn, Findings, Health};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let health = Health::builder()
//!     .deadline(Duration::from_millis(200))
//!     .required(check_fn("config", || async {
//!         Findings::ok().require_config("HARNESS_MODEL", true)
//!     }))
//!     .optional(check_fn("acp-agent", || async {
//!         Findings::failed("the `acp-agent` binary is not installed")
//!     }))
//!     .build();
//! let readiness = health.check().await;
//! assert!(readiness.ready); // an optional check failing does not fail readiness...
//! assert_eq!(readiness.degraded().count(), 1); // ...but it says why
//! assert_eq!(
//!     readiness.reasons(),
//!     ["optional check `acp-agent` failed: the `acp-agent` binary is not installed"],
//! );
//! # });
//! ```
//!
//! # Checks
//!
//! A [`HealthCheck`] has a name (the `check` metric label: a short fixed word) and an async
//! `check` that answers [`Findings`]: whether a dependency is present and its version
//! compatible, whether required configuration is present (names only, never values),
//! capacity (active, limit, pending), or a plain failure reason. A check must be
//! side-effect free (read, never create or repair) and cheap: it may run on every probe.
//! [`check_fn`] makes one from a closure; [`AdapterCheck`] asks a
//! [`HarnessAdapter::health`].
//!
//! # Bounds
//!
//! [`Health::check`] runs every check concurrently, each on its own Tokio task under its
//! deadline ([`HealthBuilder::deadline`], default [`DEFAULT_DEADLINE`]): a check that hangs
//! (even one that blocks its thread, on a multi-threaded runtime) is reported
//! [`CheckStatus::TimedOut`] when its deadline passes and its task is aborted; a check that
//! panics is reported failed. So `check` always answers within about the longest deadline.
//!
//! # Reasons are sanitized
//!
//! Every reason and detail string goes through the [`Redactor`] (the built-in rules, or the
//! application's with [`HealthBuilder::redactor`]), loses its control characters and is cut to
//! [`MAX_REASON_LEN`] bytes: a dependency that answers with its connection string does not
//! publish it on the readiness endpoint.
//!
//! # Readiness
//!
//! [`Readiness::ready`] is true when every *required* check passed. An *optional* check (an
//! optional adapter, say) that fails leaves readiness as it is, and
//! [`Readiness::reasons`] says why it is degraded. [`Readiness::record_metrics`] exports
//! the result as the gauges of [`crate::names`].

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use harness_core::adapter::HarnessAdapter;
use harness_core::time::Timestamp;
use harness_core::tool::BoxFuture;
use harness_layers::redaction::Redactor;

use crate::names;

/// The default deadline of each check: 2 seconds.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(2);
/// The longest reason or detail string a report carries, in bytes.
pub const MAX_REASON_LEN: usize = 256;

/// One bounded, side-effect-free health check; see the [module docs](self).
pub trait HealthCheck: Send + Sync + 'static {
    /// The check's name: a short fixed word, used as the `check` metric label.
    fn name(&self) -> &str;

    /// Runs the check. Must not change anything; [`Health`] bounds it with a deadline.
    fn check(&self) -> BoxFuture<'_, Findings>;
}

/// What a check found. A check *passes* when it reports no failure reason, no missing or
/// incompatible dependency and no missing configuration; capacity alone never fails it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Findings {
    /// A dependency the check looked for.
    pub dependency: Option<Dependency>,
    /// Names of required configuration entries that are missing (names, never values).
    pub missing_configuration: Vec<String>,
    /// Capacity, when the check knows it.
    pub capacity: Option<CapacityReport>,
    /// Why the check failed, when it says so directly.
    pub failure: Option<String>,
}

impl Findings {
    /// Nothing wrong.
    #[must_use]
    pub fn ok() -> Self {
        Self::default()
    }

    /// A failure with a reason (sanitized before it is reported).
    #[must_use]
    pub fn failed(reason: impl Into<String>) -> Self {
        Self {
            failure: Some(reason.into()),
            ..Self::default()
        }
    }

    /// Adds what the check found of a dependency.
    #[must_use]
    pub fn with_dependency(mut self, dependency: Dependency) -> Self {
        self.dependency = Some(dependency);
        self
    }

    /// Notes a required configuration entry `name`, missing unless `present`.
    #[must_use]
    pub fn require_config(mut self, name: impl Into<String>, present: bool) -> Self {
        if !present {
            self.missing_configuration.push(name.into());
        }
        self
    }

    /// Adds capacity figures.
    #[must_use]
    pub const fn with_capacity(mut self, capacity: CapacityReport) -> Self {
        self.capacity = Some(capacity);
        self
    }

    /// Whether the check passed, and if not, why (not yet sanitized).
    fn problem(&self) -> Option<String> {
        if let Some(failure) = &self.failure {
            return Some(failure.clone());
        }
        if let Some(dependency) = &self.dependency {
            match (&dependency.version, dependency.compatible) {
                (None, _) => return Some(format!("dependency `{}` not found", dependency.name)),
                (Some(version), false) => {
                    let wants = dependency
                        .requirement
                        .as_deref()
                        .map(|r| format!(" (requires {r})"))
                        .unwrap_or_default();
                    return Some(format!(
                        "dependency `{}` version {version} is not compatible{wants}",
                        dependency.name
                    ));
                }
                (Some(_), true) => {}
            }
        }
        if !self.missing_configuration.is_empty() {
            return Some(format!(
                "required configuration missing: {}",
                self.missing_configuration.join(", ")
            ));
        }
        None
    }

    fn sanitize(&mut self, sanitizer: &Sanitizer) {
        if let Some(failure) = &mut self.failure {
            *failure = sanitizer.clean(failure);
        }
        if let Some(dependency) = &mut self.dependency {
            dependency.name = sanitizer.clean(&dependency.name);
            if let Some(version) = &mut dependency.version {
                *version = sanitizer.clean(version);
            }
            if let Some(requirement) = &mut dependency.requirement {
                *requirement = sanitizer.clean(requirement);
            }
        }
        for name in &mut self.missing_configuration {
            *name = sanitizer.clean(name);
        }
    }
}

/// A dependency a check looked for: found (with its version) or not, and compatible or not.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Dependency {
    /// What it is (`node`, `acp-agent`, ...).
    pub name: String,
    /// Its version, `None` when it was not found.
    pub version: Option<String>,
    /// What the adapter requires (`>= 1.2`), for the reason.
    pub requirement: Option<String>,
    /// Whether the version found is compatible.
    pub compatible: bool,
}

impl Dependency {
    /// Found, at `version`, compatible.
    #[must_use]
    pub fn found(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: Some(version.into()),
            requirement: None,
            compatible: true,
        }
    }

    /// Not found.
    #[must_use]
    pub fn missing(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: None,
            requirement: None,
            compatible: false,
        }
    }

    /// Says what is required and whether the version found satisfies it.
    #[must_use]
    pub fn requires(mut self, requirement: impl Into<String>, compatible: bool) -> Self {
        self.requirement = Some(requirement.into());
        self.compatible = compatible && self.version.is_some();
        self
    }
}

/// Capacity figures: executions running, their bound, and calls waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CapacityReport {
    /// Executions running.
    pub active: u64,
    /// The bound on concurrent executions.
    pub limit: u64,
    /// Calls waiting for a permit.
    pub pending: u64,
}

impl CapacityReport {
    /// Capacity figures.
    #[must_use]
    pub const fn new(active: u64, limit: u64, pending: u64) -> Self {
        Self {
            active,
            limit,
            pending,
        }
    }
}

/// A [`HealthCheck`] made from a name and a closure returning a future; see [`check_fn`].
pub struct FnCheck<F> {
    name: String,
    f: F,
}

impl<F> fmt::Debug for FnCheck<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnCheck")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A check named `name` that runs `f`.
pub fn check_fn<F, Fut>(name: impl Into<String>, f: F) -> FnCheck<F>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Findings> + Send + 'static,
{
    FnCheck {
        name: name.into(),
        f,
    }
}

impl<F, Fut> HealthCheck for FnCheck<F>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Findings> + Send + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn check(&self) -> BoxFuture<'_, Findings> {
        Box::pin((self.f)())
    }
}

/// Asks an adapter's [`HarnessAdapter::health`]; named after the adapter id.
#[derive(Debug)]
pub struct AdapterCheck<A> {
    name: String,
    adapter: A,
}

impl<A: HarnessAdapter> AdapterCheck<A> {
    /// A check of `adapter`, named after its id.
    #[must_use]
    pub fn new(adapter: A) -> Self {
        Self {
            name: adapter.descriptor().id().as_str().to_owned(),
            adapter,
        }
    }
}

impl<A: HarnessAdapter + Send + Sync + 'static> HealthCheck for AdapterCheck<A> {
    fn name(&self) -> &str {
        &self.name
    }

    fn check(&self) -> BoxFuture<'_, Findings> {
        Box::pin(async move {
            let health = self.adapter.health().await;
            if health.ready {
                Findings::ok()
            } else {
                Findings::failed(
                    health
                        .reason
                        .unwrap_or_else(|| "the adapter is not ready".to_owned()),
                )
            }
        })
    }
}

/// How a check's last run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CheckStatus {
    /// It passed.
    Pass,
    /// It answered with a problem, or panicked.
    Fail,
    /// It did not answer within its deadline.
    TimedOut,
}

impl CheckStatus {
    /// `pass`, `fail` or `timed_out`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pass => "pass",
            Self::Fail => "fail",
            Self::TimedOut => "timed_out",
        }
    }
}

/// The report of one check's run: everything sanitized.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckReport {
    /// The check's name.
    pub name: String,
    /// Whether it is optional (its failure does not fail readiness).
    pub optional: bool,
    /// How it ended.
    pub status: CheckStatus,
    /// Why it did not pass (sanitized).
    pub reason: Option<String>,
    /// What it found (sanitized; empty when it timed out or panicked).
    pub findings: Findings,
    /// When this run started.
    pub checked_at: Timestamp,
    /// How long it took (the deadline, when it timed out).
    pub elapsed: Duration,
    /// The last run that passed, this one included.
    pub last_success: Option<Timestamp>,
}

impl CheckReport {
    /// Whether it passed.
    #[must_use]
    pub fn passed(&self) -> bool {
        self.status == CheckStatus::Pass
    }
}

/// The aggregate of one [`Health::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Readiness {
    /// Whether every required check passed.
    pub ready: bool,
    /// Every check's report, in registration order.
    pub checks: Vec<CheckReport>,
}

impl Readiness {
    /// The optional checks that did not pass: readiness holds, degraded.
    pub fn degraded(&self) -> impl Iterator<Item = &CheckReport> {
        self.checks.iter().filter(|c| c.optional && !c.passed())
    }

    /// The required checks that did not pass: why it is not ready.
    pub fn failing(&self) -> impl Iterator<Item = &CheckReport> {
        self.checks.iter().filter(|c| !c.optional && !c.passed())
    }

    /// One sanitized line per check that did not pass, required ones first:
    /// ``required check `db` timed out after 2s``,
    /// ``optional check `acp` failed: <reason>``.
    #[must_use]
    pub fn reasons(&self) -> Vec<String> {
        self.failing()
            .chain(self.degraded())
            .map(|c| {
                let kind = if c.optional { "optional" } else { "required" };
                match (c.status, &c.reason) {
                    (CheckStatus::TimedOut, _) => {
                        format!("{kind} check `{}` timed out after {:?}", c.name, c.elapsed)
                    }
                    (_, Some(reason)) => format!("{kind} check `{}` failed: {reason}", c.name),
                    (_, None) => format!("{kind} check `{}` failed", c.name),
                }
            })
            .collect()
    }

    /// Exports this result as the gauges of [`crate::names`] through the installed `metrics`
    /// recorder.
    pub fn record_metrics(&self) {
        metrics::gauge!(names::READY).set(if self.ready { 1.0 } else { 0.0 });
        for check in &self.checks {
            let name = check.name.clone();
            metrics::gauge!(
                names::CHECK_UP,
                names::LABEL_CHECK => name.clone(),
                names::LABEL_OPTIONAL => if check.optional { "true" } else { "false" },
            )
            .set(if check.passed() { 1.0 } else { 0.0 });
            metrics::gauge!(names::CHECK_DURATION, names::LABEL_CHECK => name.clone())
                .set(check.elapsed.as_secs_f64());
            if let Some(last) = check.last_success {
                // Milliseconds since the epoch fit an f64 exactly for the next 285 000 years.
                #[allow(clippy::cast_precision_loss)]
                let seconds = last.as_millis() as f64 / 1000.0;
                metrics::gauge!(names::CHECK_LAST_SUCCESS, names::LABEL_CHECK => name.clone())
                    .set(seconds);
            }
            if let Some(capacity) = check.findings.capacity {
                #[allow(clippy::cast_precision_loss)]
                let (active, limit, pending) = (
                    capacity.active as f64,
                    capacity.limit as f64,
                    capacity.pending as f64,
                );
                metrics::gauge!(names::CAPACITY_ACTIVE, names::LABEL_CHECK => name.clone())
                    .set(active);
                metrics::gauge!(names::CAPACITY_LIMIT, names::LABEL_CHECK => name.clone())
                    .set(limit);
                metrics::gauge!(names::CAPACITY_PENDING, names::LABEL_CHECK => name).set(pending);
            }
        }
    }
}

struct Registered {
    check: Arc<dyn HealthCheck>,
    optional: bool,
}

/// Builds a [`Health`].
#[must_use]
pub struct HealthBuilder {
    checks: Vec<Registered>,
    deadline: Duration,
    redactor: Option<Arc<Redactor>>,
}

impl fmt::Debug for HealthBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HealthBuilder")
            .field("checks", &self.checks.len())
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl HealthBuilder {
    /// Adds a required check: readiness fails when it fails.
    pub fn required(mut self, check: impl HealthCheck) -> Self {
        self.checks.push(Registered {
            check: Arc::new(check),
            optional: false,
        });
        self
    }

    /// Adds an optional check: its failure is reported and does not fail readiness.
    pub fn optional(mut self, check: impl HealthCheck) -> Self {
        self.checks.push(Registered {
            check: Arc::new(check),
            optional: true,
        });
        self
    }

    /// The deadline of each check (default [`DEFAULT_DEADLINE`]).
    pub const fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// Sanitizes reasons with `redactor` instead of the built-in rules (to add the
    /// deployment's own secrets).
    pub fn redactor(mut self, redactor: Arc<Redactor>) -> Self {
        self.redactor = Some(redactor);
        self
    }

    /// The health checker.
    pub fn build(self) -> Health {
        // The built-in rules always build; were they ever not to, reasons are still cut and
        // stripped of control characters.
        let redactor = self
            .redactor
            .or_else(|| Redactor::builder().build().ok().map(Arc::new));
        Health {
            checks: self.checks.into(),
            deadline: self.deadline,
            sanitizer: Sanitizer { redactor },
            last_success: Arc::default(),
        }
    }
}

struct Sanitizer {
    redactor: Option<Arc<Redactor>>,
}

impl Sanitizer {
    fn clean(&self, text: &str) -> String {
        let redacted = match &self.redactor {
            Some(redactor) => redactor.redact_str(text),
            None => Cow::Borrowed(text),
        };
        let mut out = String::with_capacity(redacted.len().min(MAX_REASON_LEN));
        for c in redacted.chars() {
            let c = if c.is_control() { ' ' } else { c };
            if out.len() + c.len_utf8() > MAX_REASON_LEN {
                break;
            }
            out.push(c);
        }
        out
    }
}

/// Runs the registered checks, each bounded, and aggregates them into [`Readiness`]; see the
/// [module docs](self). Cheap to share (`Arc`) between a readiness endpoint and a metrics
/// refresher.
pub struct Health {
    checks: Arc<[Registered]>,
    deadline: Duration,
    sanitizer: Sanitizer,
    last_success: Arc<Mutex<HashMap<String, Timestamp>>>,
}

impl fmt::Debug for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.checks.iter().map(|c| c.check.name()).collect();
        f.debug_struct("Health")
            .field("checks", &names)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl Health {
    /// A builder with no check and the [`DEFAULT_DEADLINE`].
    pub fn builder() -> HealthBuilder {
        HealthBuilder {
            checks: Vec::new(),
            deadline: DEFAULT_DEADLINE,
            redactor: None,
        }
    }

    /// Runs every check concurrently, each on its own task under the deadline, and
    /// aggregates the reports. Needs a Tokio runtime (with the time driver).
    pub async fn check(&self) -> Readiness {
        let runs = self.checks.iter().map(|registered| self.run(registered));
        let checks = futures_util::future::join_all(runs).await;
        let ready = checks.iter().all(|c| c.optional || c.passed());
        Readiness { ready, checks }
    }

    async fn run(&self, registered: &Registered) -> CheckReport {
        let check = Arc::clone(&registered.check);
        let name = self.sanitizer.clean(check.name());
        let checked_at = Timestamp::now();
        let started = Instant::now();
        let task = tokio::spawn(async move { check.check().await });
        let abort = task.abort_handle();
        let (status, reason, mut findings, elapsed) =
            match tokio::time::timeout(self.deadline, task).await {
                Ok(Ok(findings)) => {
                    let problem = findings.problem();
                    let status = if problem.is_none() {
                        CheckStatus::Pass
                    } else {
                        CheckStatus::Fail
                    };
                    (status, problem, findings, started.elapsed())
                }
                Ok(Err(_panicked)) => (
                    CheckStatus::Fail,
                    Some("the check panicked".to_owned()),
                    Findings::default(),
                    started.elapsed(),
                ),
                Err(_elapsed) => {
                    abort.abort();
                    (
                        CheckStatus::TimedOut,
                        Some(format!("no answer within {:?}", self.deadline)),
                        Findings::default(),
                        self.deadline,
                    )
                }
            };
        findings.sanitize(&self.sanitizer);
        let reason = reason.map(|r| self.sanitizer.clean(&r));
        let last_success = {
            let mut last = self
                .last_success
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if status == CheckStatus::Pass {
                last.insert(name.clone(), checked_at);
            }
            last.get(&name).copied()
        };
        CheckReport {
            name,
            optional: registered.optional,
            status,
            reason,
            findings,
            checked_at,
            elapsed,
            last_success,
        }
    }
}
