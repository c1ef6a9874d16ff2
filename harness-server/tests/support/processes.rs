//! Child processes the process-level server tests share: the mock model server, and a
//! child killed on drop whose stdout announces where it listens.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// A child process, killed and reaped on drop.
pub(crate) struct Killed(pub(crate) Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The workspace's root.
pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Reads `child`'s stdout until a line contains `marker`; returns what follows it.
pub(crate) fn wait_for_line(child: &mut Child, marker: &str) -> String {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let marker = marker.to_owned();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(at) = line.find(&marker) {
                let _ = tx.send(line[at + marker.len()..].trim().to_owned());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the process said it is ready")
}

/// The mock model server (`@copilotkit/aimock`) answering with `fixtures` (an array, first
/// match wins), its file kept in `dir`, on a free loopback port: the process and its URL.
pub(crate) fn aimock(dir: &Path, fixtures: &Value) -> (Killed, String) {
    let cli =
        root().join("adapters/openai/tests/aimock/node_modules/@copilotkit/aimock/dist/cli.js");
    assert!(cli.exists(), "run .ci/install-aimock.sh");
    let file = dir.join("fixtures.json");
    std::fs::write(&file, json!({ "fixtures": fixtures }).to_string()).unwrap();
    let mut child = Command::new("node")
        .arg(&cli)
        .args(["-p", "0", "-h", "127.0.0.1", "-f"])
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = wait_for_line(&mut child, "listening on ");
    (Killed(child), url)
}
