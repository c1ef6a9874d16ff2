//! A real Prometheus server on loopback scrapes the workload's `/metrics`; its HTTP API then
//! reports the counts by outcome the workload ran.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use harness_layers::metrics::names;
use harness_observe::prometheus::PrometheusExporter;
use serde_json::Value;
use support::workload::{self, Tally};

/// Kills Prometheus and removes its directory when the test ends, panicking or not.
struct Server {
    child: Child,
    dir: PathBuf,
}

impl Server {
    fn log(&self) -> String {
        fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn start_prometheus(target: std::net::SocketAddr) -> (Server, std::net::SocketAddr) {
    support::require_tool("prometheus");
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir =
        std::env::temp_dir().join(format!("harness-prometheus-{}-{nanos}", std::process::id()));
    fs::create_dir_all(dir.join("data")).expect("a directory for Prometheus");
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
         scrape_configs:\n  - job_name: harness\n    static_configs:\n      - targets: ['{target}']\n"
    );
    fs::write(dir.join("prometheus.yml"), config).expect("write prometheus.yml");
    let log = fs::File::create(dir.join("prometheus.log")).expect("a log file");
    let listen = support::free_address();
    let child = Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={listen}"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("start prometheus ({e}): {}", support::INSTALL_HINT));
    (Server { child, dir }, listen)
}

/// `sum by (<by>) (<selector>)` through the HTTP API, as label value to sample.
fn query_by(
    prometheus: std::net::SocketAddr,
    by: &str,
    selector: &str,
) -> Result<BTreeMap<String, f64>, String> {
    let query = format!("sum by ({by}) ({selector})");
    let path = format!("/api/v1/query?query={}", support::encode(&query));
    let (status, body) = support::http_get(prometheus, &path).map_err(|e| e.to_string())?;
    if status != 200 {
        return Err(format!("{status}: {body}"));
    }
    let json: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    let results = json["data"]["result"]
        .as_array()
        .ok_or_else(|| format!("no result in {body}"))?;
    results
        .iter()
        .map(|r| {
            let label = r["metric"][by].as_str().unwrap_or_default().to_owned();
            let value = r["value"][1]
                .as_str()
                .and_then(|v| v.parse::<f64>().ok())
                .ok_or_else(|| format!("no value in {r}"))?;
            Ok((label, value))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_counts_by_outcome_the_workload_ran() {
    support::require_tool("prometheus");
    let metrics_address = support::free_address();
    let endpoint = PrometheusExporter::new()
        .listen_on(metrics_address)
        .install()
        .expect("install the exporter");
    assert_eq!(endpoint.address(), Some(metrics_address));

    let service = workload::service().expect("the stack");
    let mut tally = Tally::default();
    for round in 0..3 {
        workload::round(&service, round, &mut tally)
            .await
            .expect("a round of the workload");
    }
    assert_eq!(tally.started, 21);
    support::poll(
        "every execution counted as finished",
        Duration::from_secs(10),
        Duration::from_millis(20),
        || {
            let finished = support::sample_sum(&endpoint.render(), names::EXECUTIONS_FINISHED, &[]);
            if finished == tally.finished() as f64 {
                Ok(())
            } else {
                Err(finished)
            }
        },
    )
    .await;

    // Our endpoint serves the exposition over HTTP.
    let (status, body) = support::http_get(metrics_address, "/metrics").expect("GET /metrics");
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("# TYPE harness_executions_finished_total counter"),
        "{body}"
    );

    let (mut server, prometheus) = start_prometheus(metrics_address);
    let expected_outcomes = BTreeMap::from([
        ("cancelled".to_owned(), tally.cancelled as f64),
        ("failed".to_owned(), tally.failed_total() as f64),
        ("succeeded".to_owned(), tally.succeeded as f64),
    ]);
    // The first scrape lands a few seconds after start: poll the API, bounded.
    let outcomes = support::poll(
        "Prometheus reports the workload's counts by outcome",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("prometheus exited ({status}):\n{}", server.log());
            }
            let outcomes = query_by(prometheus, "outcome", names::EXECUTIONS_FINISHED)?;
            if outcomes == expected_outcomes {
                Ok(outcomes)
            } else {
                Err(format!("{outcomes:?}"))
            }
        },
    )
    .await;
    assert_eq!(outcomes.values().sum::<f64>(), tally.started as f64);

    // The histograms are scraped too: one duration observation per finished execution.
    assert_eq!(
        query_by(
            prometheus,
            "outcome",
            "harness_execution_duration_seconds_count"
        ),
        Ok(expected_outcomes.clone())
    );

    let expected_failures: BTreeMap<String, f64> = tally
        .failed
        .iter()
        .map(|(k, v)| (k.clone(), *v as f64))
        .collect();
    assert_eq!(
        expected_failures.keys().collect::<Vec<_>>(),
        ["authentication", "protocol", "unavailable"]
    );
    let selector = format!("{}{{outcome=\"failed\"}}", names::EXECUTIONS_FINISHED);
    assert_eq!(
        query_by(prometheus, "category", &selector),
        Ok(expected_failures)
    );
    assert_eq!(
        query_by(prometheus, "adapter", names::EXECUTIONS_STARTED),
        Ok(BTreeMap::from([(
            "scripted".to_owned(),
            tally.started as f64
        )]))
    );
    assert_eq!(
        query_by(prometheus, "adapter", names::IDEMPOTENT_REPLAYS),
        Ok(BTreeMap::from([(
            "scripted".to_owned(),
            tally.replays as f64
        )]))
    );
    let scrape_health = query_by(prometheus, "job", "up").expect("up");
    assert_eq!(scrape_health.get("harness"), Some(&1.0), "{}", server.log());
    drop(server);
}
