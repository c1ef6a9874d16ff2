//! The README's `curl` examples, run as written against `harness serve` (the embedded
//! default, its development token): each must succeed and do what the README says.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_harness");

/// The commands of the `sh` block after `<!-- readme-curl -->`, continuation lines joined.
fn commands() -> Vec<String> {
    let readme = include_str!("../../README.md");
    let (_, after) = readme
        .split_once("<!-- readme-curl -->")
        .expect("the README marks its curl examples");
    let block = after
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .map(|(block, _)| block)
        .expect("a sh block follows the marker");
    block
        .replace("\\\n", " ")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

fn sh(command: &str, env: &[(&str, &str)]) -> String {
    let out = Command::new("bash")
        .args(["-c", command])
        .envs(env.iter().copied())
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "`{command}` failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_readme_curl_examples_work_as_written() {
    let commands = commands();
    assert_eq!(commands.len(), 5, "{commands:#?}");
    let dir = std::env::temp_dir().join(format!("harness-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut server = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut token = String::new();
    let mut url = String::new();
    for line in BufReader::new(server.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(t) = line.strip_prefix("development token (principal `dev`): ") {
            token = t.to_owned();
        }
        if let Some(u) = line.strip_prefix("harness serving on ") {
            url = u.to_owned();
            break;
        }
    }
    let result = std::panic::catch_unwind(|| {
        let env = [
            ("HARNESS_URL", url.as_str()),
            ("HARNESS_TOKEN", token.as_str()),
        ];
        let started: Value = serde_json::from_str(&sh(&commands[0], &env)).unwrap();
        let id = started["id"].as_str().unwrap().to_owned();
        let env = [env[0], env[1], ("ID", id.as_str())];
        // The events so far, until the approval is among them.
        let deadline = Instant::now() + Duration::from_secs(30);
        let action = loop {
            let page: Value = serde_json::from_str(&sh(&commands[1], &env)).unwrap();
            let requested = page["events"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["kind"] == "action.requested")
                .map(|e| e["data"]["id"].as_str().unwrap().to_owned());
            if let Some(action) = requested {
                break action;
            }
            assert!(
                Instant::now() < deadline,
                "no approval was asked for: {page}"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let env = [env[0], env[1], env[2], ("ACTION", action.as_str())];
        let answered: Value = serde_json::from_str(&sh(&commands[2], &env)).unwrap();
        assert_eq!(answered["accepted"], true, "{answered}");
        let stream = sh(&commands[3], &env);
        assert!(
            stream.starts_with("id: 4\n"),
            "resumed after event 3: {stream}"
        );
        assert!(
            stream
                .trim_end()
                .lines()
                .any(|l| l == "event: run.succeeded"),
            "{stream}"
        );
        let cancelled: Value = serde_json::from_str(&sh(&commands[4], &env)).unwrap();
        assert_eq!(cancelled["status"], "already_ended", "{cancelled}");
    });
    let _ = server.kill();
    let _ = server.wait();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
