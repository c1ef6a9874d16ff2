//! Serves the Prometheus exposition of a steady mix of executions, with JSON logs.
//!
//! ```sh
//! cargo run --example prometheus                 # until Ctrl-C
//! cargo run --example prometheus -- --for 30     # 30 seconds (or HARNESS_EXAMPLE_FOR=30)
//! cargo run --example prometheus -- --listen 127.0.0.1:9500
//! curl -s http://127.0.0.1:9464/metrics
//! ```
//!
//! Every half second it runs one round of executions on the scripted adapter through the
//! default `HarnessStack` (the workload of `harness-observe/tests/support/workload.rs`, the
//! one the tests scrape with a real Prometheus): a success, failures of three categories
//! (`authentication`, `unavailable`, `protocol`), a cancellation, an approval answered, and an
//! idempotent replay. It then refreshes the health gauges: the scripted adapter (required)
//! and an optional ACP agent that needs `HARNESS_ACP_COMMAND` (missing: readiness stays
//! green and the log says why).
//!
//! The first line printed is the address; then one JSON object per line (redacted): the first
//! execution continues a caller's W3C trace context, so its `harness.execution` span (the
//! `close` line) carries the caller's `trace_id` and `parent_span_id`.

#[path = "../harness-observe/tests/support/workload.rs"]
mod workload;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use harness::layers::redaction::Redactor;
use harness::scripted::{Script, ScriptedAdapter};
use harness::trace::TraceContext;
use harness::{ExecutionRequest, Outcome};
use harness_observe::health::{AdapterCheck, Findings, Health, check_fn};
use harness_observe::logging::json_subscriber;
use harness_observe::prometheus::{DEFAULT_ADDRESS, PrometheusExporter};
use serde_json::json;
use tower::ServiceExt;
use tracing::level_filters::LevelFilter;

const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

struct Args {
    listen: SocketAddr,
    run_for: Option<Duration>,
}

fn args() -> Result<Args, String> {
    let mut args = Args {
        listen: DEFAULT_ADDRESS,
        run_for: std::env::var("HARNESS_EXAMPLE_FOR")
            .ok()
            .map(|s| s.parse().map(Duration::from_secs_f64))
            .transpose()
            .map_err(|e| format!("HARNESS_EXAMPLE_FOR: {e}"))?,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--for" => {
                let seconds: f64 = value()?.parse().map_err(|e| format!("--for: {e}"))?;
                args.run_for = Some(Duration::from_secs_f64(seconds));
            }
            "--listen" => args.listen = value()?.parse().map_err(|e| format!("--listen: {e}"))?,
            other => {
                return Err(format!(
                    "unknown argument {other}; use --for <seconds> or --listen <addr>"
                ));
            }
        }
    }
    Ok(args)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args = args()?;
    let endpoint = PrometheusExporter::new().listen_on(args.listen).install()?;
    println!(
        "serving Prometheus metrics on http://{}/metrics",
        args.listen
    );

    let redactor = Arc::new(Redactor::builder().build()?);
    tracing::subscriber::set_global_default(json_subscriber(
        std::io::stdout,
        redactor,
        LevelFilter::INFO,
    ))?;

    let health = Health::builder()
        .required(AdapterCheck::new(
            ScriptedAdapter::new(Script::quickstart()),
        ))
        .optional(check_fn("acp", || async {
            Findings::ok().require_config(
                "HARNESS_ACP_COMMAND",
                std::env::var_os("HARNESS_ACP_COMMAND").is_some(),
            )
        }))
        .build();

    let service = workload::service()?;

    // One execution that continues a caller's trace: its span's `close` line shows it.
    let caller: TraceContext = CALLER.parse()?;
    let execution = service
        .clone()
        .oneshot(
            ExecutionRequest::new("traced")
                .with_options(json!({"script": {"steps": [{"type": "text", "text": "traced"}]}}))
                .with_trace_context(caller),
        )
        .await?;
    let outcome = execution.outcome().await;
    tracing::info!(
        traceparent = CALLER,
        execution_id = %execution.id(),
        succeeded = matches!(outcome, Outcome::Succeeded(_)),
        "an execution continued the caller's trace"
    );

    let stop = async {
        match args.run_for {
            Some(bound) => tokio::time::sleep(bound).await,
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    };
    tokio::pin!(stop);
    let mut tally = workload::Tally::default();
    let mut round = 0;
    loop {
        tokio::select! {
            () = &mut stop => break,
            result = workload::round(&service, round, &mut tally) => result?,
        }
        round += 1;
        let readiness = health.check().await;
        readiness.record_metrics();
        tracing::info!(
            round,
            ready = readiness.ready,
            degraded = ?readiness.reasons(),
            started = tally.started,
            succeeded = tally.succeeded,
            failed = tally.failed_total(),
            cancelled = tally.cancelled,
            replays = tally.replays,
            "round done"
        );
        tokio::select! {
            () = &mut stop => break,
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
    tracing::info!(
        rounds = round,
        exposition_bytes = endpoint.render().len(),
        "stopped"
    );
    Ok(())
}
