//! A bounded fuzzing pass with schemathesis over the served OpenAPI document: `harness
//! serve` (the embedded default: the scripted adapter on SQLite) is started as a user starts
//! it, and schemathesis runs every check it has (server errors, status codes, content types,
//! response schemas, SSE events, schema-valid requests accepted and schema-violating ones
//! refused, authentication) for a bounded time against it.
//!
//! `.ci/install-schemathesis.sh` installs schemathesis into
//! `harness-server/tests/schemathesis/.venv`. `HARNESS_SCHEMATHESIS_SECONDS` sets the budget
//! (60 s by default) and `HARNESS_SCHEMATHESIS_SEED` the seed (fixed by default, so that a
//! run is repeatable on one machine; another seed explores elsewhere).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_harness");

#[test]
fn schemathesis_finds_nothing_in_a_bounded_run() {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/schemathesis");
    let st = here.join(".venv/bin/st");
    assert!(
        st.exists(),
        "{} is missing: run `bash .ci/install-schemathesis.sh` (the README's test command does)",
        st.display()
    );
    let dir = std::env::temp_dir().join(format!("harness-schemathesis-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // No configuration: the embedded default with a development token in the banner.
    let mut server = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let mut token = None;
    let url = loop {
        let line = lines.next().expect("serve printed its address").unwrap();
        if let Some(found) = line.split("HARNESS_TOKEN=").nth(1) {
            token = Some(found.trim().to_owned());
        }
        if let Some(url) = line.strip_prefix("harness serving on ") {
            break url.to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let token = token.expect("serve printed a development token");

    let seconds = std::env::var("HARNESS_SCHEMATHESIS_SECONDS").unwrap_or_else(|_| "60".into());
    let seed = std::env::var("HARNESS_SCHEMATHESIS_SEED").unwrap_or_else(|_| "20261204".into());
    let output = Command::new(&st)
        .arg("--config-file")
        .arg(here.join("schemathesis.toml"))
        .arg("run")
        .arg(format!("{url}/v1/openapi.json"))
        .args(["--header", &format!("Authorization: Bearer {token}")])
        .args(["--checks", "all", "--max-time", &seconds, "--seed", &seed])
        .args(["--request-timeout", "10", "--workers", "1", "--no-color"])
        .arg("--report-dir")
        .arg(here.join("report"))
        .current_dir(&dir)
        .output()
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&output.stdout);
    println!("{text}");
    assert!(
        output.status.success(),
        "schemathesis found failures (seed {seed}):\n{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // It tested every operation it selected, and selected them all (a run that tested
    // nothing would also "pass"). schemathesis does not count the document's own path.
    let number = |label: &str| -> Option<(usize, usize)> {
        let rest = text.split(label).nth(1)?.lines().next()?.trim();
        let (a, b) = rest.split_once('/').unwrap_or((rest, rest));
        Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
    };
    let (selected, total) = number("Selected:").expect("a summary of selected operations");
    let (tested, _) = number("Tested:").expect("a summary of tested operations");
    assert!(
        selected == total && tested == total && total >= 12,
        "selected {selected} of {total}, tested {tested}:\n{text}"
    );
}
