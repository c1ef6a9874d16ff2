//! Helpers shared by the integration tests: the workload, a tiny HTTP/1.0 client, the
//! exposition parser, free ports and bounded polling.

#![allow(dead_code, unreachable_pub)]

pub mod workload;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

/// What to tell whoever runs the tests without Debian's `prometheus` package.
pub const INSTALL_HINT: &str = "install Debian's `prometheus` package (it ships `prometheus` and `promtool`): run \
     `sudo .ci/install-prometheus.sh` from the workspace root (CI runs it before the tests)";

/// Fails the test, naming the install script, when `tool` is not on PATH.
pub fn require_tool(tool: &str) {
    let found = Command::new(tool).arg("--version").output().is_ok();
    assert!(found, "`{tool}` is not installed: {INSTALL_HINT}");
}

/// A loopback address with a port that was free a moment ago.
pub fn free_address() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral loopback port");
    listener.local_addr().expect("its address")
}

/// `GET path` over HTTP/1.0 (no chunked encoding, the server closes): status and body.
pub fn http_get(address: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: {address}\r\nAccept: */*\r\n\r\n"
    )?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of headers"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status in {head:?}")))?;
    Ok((status, body.to_owned()))
}

/// Percent-encodes a query parameter value.
pub fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The sum of the samples of `metric` whose labels contain every `label="value"` of `with`.
pub fn sample_sum(exposition: &str, metric: &str, with: &[(&str, &str)]) -> f64 {
    exposition
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels),
                None => (series, ""),
            };
            (name == metric
                && with
                    .iter()
                    .all(|(k, v)| labels.contains(&format!("{k}=\"{v}\""))))
            .then(|| value.parse::<f64>().ok())
            .flatten()
        })
        .sum()
}

/// Polls `probe` every `every` until it returns `Some`, for at most `bound`; panics with
/// `what` and the last state otherwise.
pub async fn poll<T, S: std::fmt::Debug>(
    what: &str,
    bound: Duration,
    every: Duration,
    mut probe: impl FnMut() -> Result<T, S>,
) -> T {
    let start = Instant::now();
    loop {
        match probe() {
            Ok(value) => return value,
            Err(state) if start.elapsed() >= bound => {
                panic!("{what}: not within {bound:?}; last state: {state:?}")
            }
            Err(_) => tokio::time::sleep(every).await,
        }
    }
}
