//! Health: bounded checks, optional failures that leave readiness green and say why,
//! sanitized reasons, and the gauges.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use harness_core::adapter::{HarnessAdapter, HarnessHealth, HarnessRuntime, RuntimeContext};
use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::manifest::{ContractVersion, Describe, ExecutionMode, HarnessDescriptor};
use harness_core::tool::BoxFuture;
use harness_layers::redaction::Redactor;
use harness_observe::health::{
    AdapterCheck, CapacityReport, CheckStatus, Dependency, Findings, Health, check_fn,
};
use harness_observe::names;
use harness_observe::prometheus::PrometheusExporter;
use harness_scripted::{Script, ScriptedAdapter};

const LEAKED: &str = "sk-live-0123456789abcdefghij";

/// An adapter whose dependency is missing: its health says so, with a credential in the text.
#[derive(Debug)]
struct Unwell {
    descriptor: HarnessDescriptor,
}

impl Unwell {
    fn new() -> Self {
        let descriptor = HarnessDescriptor::builder("acp".parse().unwrap(), "0.1.0")
            .contract_version(ContractVersion::V1)
            .execution_mode(ExecutionMode::in_process())
            .build()
            .unwrap();
        Self { descriptor }
    }
}

impl Describe for Unwell {
    fn descriptor(&self) -> &HarnessDescriptor {
        &self.descriptor
    }
}

impl HarnessAdapter for Unwell {
    fn health(&self) -> BoxFuture<'_, HarnessHealth> {
        Box::pin(async {
            HarnessHealth::not_ready(format!(
                "`acp-agent` not found on PATH\n(tried with key {LEAKED})"
            ))
        })
    }

    fn create_runtime(
        &self,
        _: RuntimeContext,
    ) -> BoxFuture<'_, Result<Box<dyn HarnessRuntime>, HarnessError>> {
        Box::pin(async {
            Err(HarnessError::new(
                ErrorCategory::Unavailable,
                "`acp-agent` is not installed",
            ))
        })
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

fn block_on<F: Future>(future: F) -> F::Output {
    runtime().block_on(future)
}

fn assert_send_sync<T: Send + Sync>(_: &T) {}
fn assert_send<T: Send>(_: &T) {}

#[test]
fn health_and_its_future_can_be_shared_and_sent() {
    let health = Health::builder()
        .required(check_fn("fine", || async { Findings::ok() }))
        .build();
    assert_send_sync(&health);
    assert_send(&health.check());
    let _object_safe: Arc<dyn harness_observe::health::HealthCheck> =
        Arc::new(check_fn("fine", || async { Findings::ok() }));
}

#[test]
fn a_hung_check_answers_timed_out_within_its_bound() {
    block_on(async {
        let deadline = Duration::from_millis(200);
        let health = Health::builder()
            .deadline(deadline)
            .required(check_fn("hangs", std::future::pending::<Findings>))
            .required(check_fn("fine", || async { Findings::ok() }))
            .build();
        let started = Instant::now();
        let readiness = health.check().await;
        let took = started.elapsed();
        assert!(took >= deadline, "{took:?}");
        assert!(took < deadline * 5, "answered after {took:?}");
        assert!(!readiness.ready);
        let hung = &readiness.checks[0];
        assert_eq!(hung.status, CheckStatus::TimedOut);
        assert_eq!(hung.elapsed, deadline);
        assert_eq!(hung.last_success, None);
        assert!(readiness.checks[1].passed());
        assert_eq!(
            readiness.reasons(),
            ["required check `hangs` timed out after 200ms"]
        );
    });
}

#[test]
fn a_check_that_blocks_its_thread_is_bounded_too() {
    let released = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&released);
    block_on(async move {
        let health = Health::builder()
            .deadline(Duration::from_millis(100))
            .required(check_fn("blocks", move || {
                let flag = Arc::clone(&flag);
                async move {
                    // A badly written check: a blocking sleep on a runtime thread.
                    while !flag.load(Ordering::Acquire) {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Findings::ok()
                }
            }))
            .build();
        let started = Instant::now();
        let readiness = health.check().await;
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(readiness.checks[0].status, CheckStatus::TimedOut);
        released.store(true, Ordering::Release);
    });
}

#[test]
fn an_optional_adapter_failing_leaves_readiness_green_and_says_why() {
    block_on(async {
        let health = Health::builder()
            .required(AdapterCheck::new(
                ScriptedAdapter::new(Script::quickstart()),
            ))
            .optional(AdapterCheck::new(Unwell::new()))
            .build();
        let readiness = health.check().await;
        assert!(readiness.ready, "{readiness:#?}");
        assert_eq!(readiness.failing().count(), 0);
        let degraded: Vec<_> = readiness.degraded().collect();
        assert_eq!(degraded.len(), 1);
        assert_eq!(degraded[0].name, "acp");
        assert_eq!(degraded[0].status, CheckStatus::Fail);
        // Sanitized: the credential is redacted and the newline is gone.
        assert_eq!(
            readiness.reasons(),
            [
                "optional check `acp` failed: `acp-agent` not found on PATH (tried with key [REDACTED:openai_key])"
            ]
        );
        let debug = format!("{readiness:?}");
        assert!(!debug.contains(LEAKED), "{debug}");
        assert!(readiness.checks[0].passed() && readiness.checks[0].last_success.is_some());

        // The same failure, required, fails readiness.
        let health = Health::builder()
            .required(AdapterCheck::new(Unwell::new()))
            .build();
        let readiness = health.check().await;
        assert!(!readiness.ready);
        assert_eq!(readiness.failing().count(), 1);
    });
}

#[test]
fn findings_name_what_is_missing_and_a_panic_is_a_failure() {
    block_on(async {
        let redactor = Arc::new(
            Redactor::builder()
                .secret("mongodb-pass-42")
                .build()
                .unwrap(),
        );
        let health = Health::builder()
            .redactor(redactor)
            .required(check_fn("node", || async {
                Findings::ok()
                    .with_dependency(Dependency::found("node", "16.2.0").requires(">= 18", false))
            }))
            .required(check_fn("acp-binary", || async {
                Findings::ok().with_dependency(Dependency::missing("acp-agent"))
            }))
            .required(check_fn("config", || async {
                Findings::ok()
                    .require_config("HARNESS_MODEL", true)
                    .require_config("MONGO_URL", false)
            }))
            .required(check_fn("store", || async {
                Findings::failed(format!(
                    "connect failed: mongodb://admin:mongodb-pass-42@db/{}",
                    "x".repeat(400)
                ))
            }))
            .required(check_fn("panics", || async { panic!("boom") }))
            .build();
        let readiness = health.check().await;
        let reasons = readiness.reasons();
        assert_eq!(reasons.len(), 5, "{reasons:#?}");
        assert_eq!(
            reasons[0],
            "required check `node` failed: dependency `node` version 16.2.0 is not compatible (requires >= 18)"
        );
        assert_eq!(
            reasons[1],
            "required check `acp-binary` failed: dependency `acp-agent` not found"
        );
        assert_eq!(
            reasons[2],
            "required check `config` failed: required configuration missing: MONGO_URL"
        );
        assert!(reasons[3].starts_with("required check `store` failed: connect failed: mongodb://admin:[REDACTED:secret]@db/xxx"), "{}", reasons[3]);
        let store = &readiness.checks[3];
        assert!(store.reason.as_ref().unwrap().len() <= harness_observe::health::MAX_REASON_LEN);
        assert_eq!(
            reasons[4],
            "required check `panics` failed: the check panicked"
        );
    });
}

#[test]
fn health_is_exported_as_gauges() {
    block_on(async {
        let endpoint = PrometheusExporter::new()
            .without_listener()
            .install()
            .expect("install the exporter");
        let healthy = Arc::new(AtomicBool::new(true));
        let flag = Arc::clone(&healthy);
        let health = Health::builder()
            .required(check_fn("capacity", move || {
                let ok = flag.load(Ordering::Acquire);
                async move {
                    let findings = Findings::ok().with_capacity(CapacityReport::new(3, 8, 1));
                    if ok {
                        findings
                    } else {
                        Findings::failed("saturated")
                    }
                }
            }))
            .optional(AdapterCheck::new(Unwell::new()))
            .build();
        let first = health.check().await;
        first.record_metrics();
        let text = endpoint.render();
        assert!(text.contains(&format!("{} 1\n", names::READY)), "{text}");
        assert!(
            text.contains("harness_health_check_up{check=\"capacity\",optional=\"false\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("harness_health_check_up{check=\"acp\",optional=\"true\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("harness_health_capacity_active{check=\"capacity\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("harness_health_capacity_limit{check=\"capacity\"} 8"),
            "{text}"
        );
        assert!(
            text.contains("harness_health_capacity_pending{check=\"capacity\"} 1"),
            "{text}"
        );
        assert!(
            text.contains(
                "harness_health_check_last_success_timestamp_seconds{check=\"capacity\"}"
            ),
            "{text}"
        );
        assert!(
            !text.contains("harness_health_check_last_success_timestamp_seconds{check=\"acp\"}"),
            "{text}"
        );
        assert!(text.contains("# TYPE harness_ready gauge"), "{text}");

        // It fails: readiness drops, and the last success is still the first run's.
        healthy.store(false, Ordering::Release);
        let second = health.check().await;
        second.record_metrics();
        assert!(!second.ready);
        assert_eq!(second.checks[0].last_success, first.checks[0].last_success);
        let text = endpoint.render();
        assert!(text.contains(&format!("{} 0\n", names::READY)), "{text}");
        assert!(
            text.contains("harness_health_check_up{check=\"capacity\",optional=\"false\"} 0"),
            "{text}"
        );
    });
}
