//! The real exposition, after a workload and a health check, passes `promtool check metrics`
//! with no error and no lint problem.

mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use harness_layers::metrics::names;
use harness_observe::health::{CapacityReport, Findings, Health, check_fn};
use harness_observe::prometheus::{ExportError, PrometheusExporter};
use support::workload::{self, Tally};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exposition_passes_promtool_check_metrics() {
    support::require_tool("promtool");
    let endpoint = PrometheusExporter::new()
        .without_listener()
        .install()
        .expect("install the exporter");
    // The recorder is global: a second installation is refused, not a panic.
    let again = PrometheusExporter::new().without_listener().install();
    assert!(matches!(again, Err(ExportError::Build(_))), "{again:?}");

    let service = workload::service().expect("the stack");
    let mut tally = Tally::default();
    for round in 0..2 {
        workload::round(&service, round, &mut tally)
            .await
            .expect("a round of the workload");
    }
    let health = Health::builder()
        .required(check_fn("capacity", || async {
            Findings::ok().with_capacity(CapacityReport::new(1, 256, 0))
        }))
        .optional(check_fn("acp", || async {
            Findings::failed("not installed")
        }))
        .build();
    health.check().await.record_metrics();

    // The metrics layer records an execution's end from a task that follows its log: wait
    // for every end to be counted.
    let exposition = support::poll(
        "every execution counted as finished",
        Duration::from_secs(10),
        Duration::from_millis(20),
        || {
            let text = endpoint.render();
            let finished = support::sample_sum(&text, names::EXECUTIONS_FINISHED, &[]);
            if finished == tally.finished() as f64 {
                Ok(text)
            } else {
                Err(finished)
            }
        },
    )
    .await;
    for def in names::CATALOG
        .iter()
        .filter(|d| d.name != names::IDEMPOTENCY_CONFLICTS && d.name != names::PREFLIGHT_REJECTIONS)
        .filter(|d| d.name != names::RETRIES && d.name != names::REDACTIONS)
    {
        assert!(
            exposition.contains(&format!("# TYPE {} ", def.name)),
            "{} is missing from the exposition:\n{exposition}",
            def.name
        );
    }
    assert!(exposition.contains("harness_execution_duration_seconds_bucket{"));
    assert!(exposition.contains("le=\"3600\""), "{exposition}");

    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run promtool ({e}): {}", support::INSTALL_HINT));
    promtool
        .stdin
        .take()
        .expect("promtool's stdin")
        .write_all(exposition.as_bytes())
        .expect("feed promtool");
    let output = promtool.wait_with_output().expect("promtool's result");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success() && report.trim().is_empty(),
        "promtool check metrics found problems ({}):\n{report}\nexposition:\n{exposition}",
        output.status
    );
}

#[test]
fn a_listener_needs_a_runtime() {
    let outside = PrometheusExporter::new()
        .listen_on(support::free_address())
        .install();
    assert!(
        matches!(outside, Err(ExportError::NoRuntime)),
        "{outside:?}"
    );
}
