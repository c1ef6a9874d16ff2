//! The `harness` command as a user runs it: `serve` from a configuration file and with
//! none, and the client verbs against it (`run` answering on stdin, `list`, `events`,
//! `show`, `cancel`, Ctrl-C cancelling a run).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_harness");
const TOKEN: &str = "alice-command-token-0123456789";

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("harness-command-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A running `harness serve`, killed when dropped.
struct Serving {
    child: Child,
    url: String,
    /// Everything it printed up to its address (the last line of its banner).
    banner: Vec<String>,
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(dir: &Path, args: &[&str]) -> Serving {
    let mut child = Command::new(BIN)
        .arg("serve")
        .args(args)
        .args(["--listen", "127.0.0.1:0"])
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut banner = Vec::new();
    let url = loop {
        let line = lines.next().expect("serve printed its address").unwrap();
        banner.push(line.clone());
        if let Some(url) = line.strip_prefix("harness serving on ") {
            break url.to_owned();
        }
    };
    // Keep draining stdout so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Serving { child, url, banner }
}

fn client(serving: &Serving, token: &str) -> Command {
    let mut command = Command::new(BIN);
    command
        .env("HARNESS_URL", &serving.url)
        .env("HARNESS_TOKEN", token)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn config(dir: &Path) -> PathBuf {
    let script = dir.join("approve.json");
    std::fs::write(
        &script,
        r#"{"steps": [
            {"type": "text", "text": "Hello from the script. "},
            {"type": "approval", "calls": [{"callId": "call_1", "tool": "write_file",
              "arguments": {"path": "out.txt"}}]},
            {"type": "text", "text": "Wrote it."},
            {"type": "complete", "summary": "done"}
        ]}"#,
    )
    .unwrap();
    let path = dir.join("harness.toml");
    std::fs::write(
        &path,
        format!(
            "[store]\nkind = \"memory\"\n\n[[tokens]]\nprincipal = \"alice\"\nsha256 = \"{}\"\n\n\
             [scripted]\nscript = \"approve.json\"\n",
            harness_server::auth::digest(TOKEN)
        ),
    )
    .unwrap();
    path
}

fn run_with_stdin(mut command: Command, stdin: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = command.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    wait(child, Duration::from_secs(60))
}

/// Waits for `child`, killing it (and failing) past `limit`.
fn wait(mut child: Child, limit: Duration) -> std::process::Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("the command did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// The id `harness run` printed (`execution <id>` on stderr).
fn execution_id(stderr: &str) -> String {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("execution "))
        .expect("run printed its execution id")
        .to_owned()
}

/// What a client verb with `args` printed on stdout.
fn stdout_of(serving: &Serving, args: &[&str]) -> String {
    let mut command = client(serving, TOKEN);
    command.args(args);
    text(&wait(command.spawn().unwrap(), Duration::from_secs(30)).stdout)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn run_streams_the_text_and_asks_on_stdin_then_the_other_verbs_see_the_execution() {
    let dir = scratch("run");
    let serving = serve(&dir, &["--config", config(&dir).to_str().unwrap()]);
    assert!(
        serving
            .banner
            .iter()
            .any(|l| l == "store: memory (lost on exit)"),
        "{:?}",
        serving.banner
    );
    // The configuration names tokens: no development token is made up.
    assert!(
        !serving
            .banner
            .iter()
            .any(|l| l.contains("development token")),
        "{:?}",
        serving.banner
    );

    let mut run = client(&serving, TOKEN);
    run.args(["run", "scripted", "write it"]);
    let out = run_with_stdin(run, "y\n");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // The text as it streamed, a line break where the prompt came between.
    assert_eq!(
        stdout.trim_end(),
        "Hello from the script. \nWrote it.",
        "{stdout}"
    );
    assert!(
        stderr.contains("? approve write_file {\"path\":\"out.txt\"}"),
        "{stderr}"
    );
    assert!(
        stderr.contains("approve? [y]es / [n]o [reason] / [e]dit / [d]ismiss"),
        "{stderr}"
    );
    assert!(stderr.contains("succeeded: done"), "{stderr}");
    let id = execution_id(&stderr);

    let listed = stdout_of(&serving, &["list"]);
    assert!(
        listed.contains(&id) && listed.contains("succeeded"),
        "{listed}"
    );

    let lines = stdout_of(&serving, &["events", &id]);
    let kinds: Vec<String> = lines
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(kinds.first().map(String::as_str), Some("run.queued"));
    assert_eq!(kinds.last().map(String::as_str), Some("run.succeeded"));
    assert!(kinds.iter().any(|k| k == "action.resolved"), "{kinds:?}");

    // From a cursor, following: the suffix only.
    let suffix = stdout_of(
        &serving,
        &[
            "events",
            &id,
            "--follow",
            "--after",
            &(kinds.len() - 1).to_string(),
        ],
    );
    assert_eq!(suffix.lines().count(), 1, "{suffix}");
    assert!(suffix.contains("run.succeeded"));

    let shown: Value = serde_json::from_str(&stdout_of(&serving, &["show", &id])).unwrap();
    assert_eq!(shown["state"], "succeeded");

    // A wrong token is refused with the server's message.
    let mut refused = client(&serving, "wrong-token-0000000000");
    refused.arg("list");
    let out = wait(refused.spawn().unwrap(), Duration::from_secs(30));
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("CREDENTIAL_INVALID"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn ctrl_c_cancels_a_run_and_cancel_answers_for_an_ended_one() {
    let dir = scratch("cancel");
    let serving = serve(&dir, &["--config", config(&dir).to_str().unwrap()]);
    let mut run = client(&serving, TOKEN);
    run.args([
        "run",
        "scripted",
        "wait",
        "--options",
        r#"{"script": {"steps": [{"type": "text", "text": "waiting"}, {"type": "hang"}]}}"#,
    ]);
    let child = run.spawn().unwrap();
    // Wait until it is running (the text arrived), then interrupt it as Ctrl-C would.
    std::thread::sleep(Duration::from_millis(800));
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let out = wait(child, Duration::from_secs(30));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("waiting"), "{stdout}");
    assert!(
        stderr.contains("cancelled: interrupted from the terminal"),
        "{stderr}"
    );
    let id = execution_id(&stderr);
    let again = stdout_of(&serving, &["cancel", &id]);
    assert_eq!(again.trim(), "already_ended");
}

#[test]
fn serve_without_configuration_offers_the_embedded_default_with_a_development_token() {
    let dir = scratch("default");
    let serving = serve(&dir, &[]);
    assert!(
        serving.url.starts_with("http://127.0.0.1:"),
        "{}",
        serving.url
    );
    let token = serving
        .banner
        .iter()
        .find_map(|l| l.strip_prefix("development token (principal `dev`): "))
        .expect("a development token")
        .to_owned();
    assert!(
        serving.banner.iter().any(|l| l == "adapters: scripted"),
        "{:?}",
        serving.banner
    );
    // The console's address signs in with a one-time code, never the token itself (the
    // browser keeps the URL in its history).
    let prefix = format!("console: {}/console#code=", serving.url);
    let code = serving
        .banner
        .iter()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no {prefix}... in {:?}", serving.banner));
    assert!(
        code.len() == 32 && code.bytes().all(|b| b.is_ascii_hexdigit()),
        "{code}"
    );
    assert!(
        !serving
            .banner
            .iter()
            .any(|l| l.contains("/console") && l.contains(&token)),
        "a console link holds the token: {:?}",
        serving.banner
    );
    assert!(
        serving
            .banner
            .iter()
            .any(|l| l == "store: sqlite harness.db"),
        "{:?}",
        serving.banner
    );
    assert!(
        dir.join("harness.db").exists(),
        "the embedded store is a file in the working directory"
    );
    let mut run = client(&serving, &token);
    run.args(["run", "scripted", "Summarize my notes", "--yes"]);
    let out = wait(run.spawn().unwrap(), Duration::from_secs(60));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("summary"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn bad_arguments_and_configuration_are_refused_with_a_reason() {
    let out = Command::new(BIN)
        .args(["run", "scripted"])
        .env_remove("HARNESS_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("<MESSAGE>"),
        "{}",
        text(&out.stderr)
    );
    let out = Command::new(BIN).args(["frobnicate"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("unrecognized subcommand 'frobnicate'"));
    let dir = scratch("badconfig");
    let path = dir.join("harness.toml");
    std::fs::write(&path, "lisen = \"127.0.0.1:1\"\n").unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("unknown field `lisen`"),
        "{}",
        text(&out.stderr)
    );
    std::fs::write(&path, "[connections]\nheader_timeout_secs = -1\n").unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("`connections.header_timeout_secs` is -1"),
        "{}",
        text(&out.stderr)
    );
    let out = Command::new(BIN).args(["token", "carol"]).output().unwrap();
    let printed = text(&out.stdout);
    let token = printed
        .lines()
        .next()
        .unwrap()
        .strip_prefix("token: ")
        .unwrap();
    assert!(
        printed.contains(&format!(
            "sha256 = \"{}\"",
            harness_server::auth::digest(token)
        )),
        "{printed}"
    );
    assert!(printed.contains("principal = \"carol\""));
}

/// A script whose one approval allows editing the call's arguments.
const EDITABLE: &str = r#"{"script": {"steps": [
    {"type": "approval", "calls": [{"callId": "call_1", "tool": "write_file",
      "arguments": {"path": "a.txt"}, "allowed": ["approve", "reject", "edit"]}]},
    {"type": "complete", "summary": "done"}
]}}"#;

/// The `action.resolved` event of execution `id`, as `harness events` prints it.
fn resolution(serving: &Serving, id: &str) -> Value {
    stdout_of(serving, &["events", id])
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["kind"] == "action.resolved")
        .expect("the action was resolved")
}

#[test]
fn run_edits_the_arguments_and_answer_approves_from_another_terminal() {
    let dir = scratch("edit");
    let serving = serve(&dir, &["--config", config(&dir).to_str().unwrap()]);

    // `e`, then the new arguments: the call is decided as an edit.
    let mut run = client(&serving, TOKEN);
    run.args(["run", "scripted", "edit it", "--options", EDITABLE]);
    let out = run_with_stdin(run, "e\n{\"path\": \"b.txt\"}\n");
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("new arguments for write_file (JSON)"),
        "{stderr}"
    );
    let id = execution_id(&stderr);
    let resolved = resolution(&serving, &id);
    assert_eq!(
        resolved["data"]["outcome"]["calls"][0]["decision"], "edit",
        "{resolved}"
    );

    // A run left waiting (its stdin closes unanswered), answered by `harness answer`.
    let mut run = client(&serving, TOKEN);
    run.args(["run", "scripted", "wait for me", "--options", EDITABLE]);
    let out = run_with_stdin(run, "");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("stdin closed while an answer was awaited"),
        "{stderr}"
    );
    let id = execution_id(&stderr);
    let shown: Value = serde_json::from_str(&stdout_of(&serving, &["show", &id])).unwrap();
    let action = shown["pendingActions"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut answer = client(&serving, TOKEN);
    answer.args(["answer", &id, "approve"]);
    let out = wait(answer.spawn().unwrap(), Duration::from_secs(30));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), format!("answered {action}"));
    // Answered once: a second answer is refused with the server's code.
    let mut again = client(&serving, TOKEN);
    again.args(["answer", &id, "--action", &action, "approve"]);
    let out = wait(again.spawn().unwrap(), Duration::from_secs(30));
    assert!(!out.status.success());
    let resolved = resolution(&serving, &id);
    assert_eq!(
        resolved["data"]["outcome"]["calls"][0]["decision"], "approve",
        "{resolved}"
    );
}

#[test]
fn every_verb_prints_its_help_and_a_near_miss_is_named() {
    for verb in [
        None,
        Some("serve"),
        Some("init"),
        Some("token"),
        Some("run"),
        Some("events"),
        Some("list"),
        Some("show"),
        Some("answer"),
        Some("cancel"),
    ] {
        let out = Command::new(BIN).args(verb).arg("--help").output().unwrap();
        let help = text(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{verb:?}: {}",
            text(&out.stderr)
        );
        assert!(help.contains("Usage: harness"), "{verb:?}: {help}");
        assert!(help.contains("Example"), "{verb:?}: {help}");
        if verb.is_none() {
            assert!(help.contains("Exit codes:"), "{help}");
        }
    }
    let out = Command::new(BIN).args(["serv"]).output().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("unrecognized subcommand 'serv'") && stderr.contains("'serve'"),
        "{stderr}"
    );
    let out = Command::new(BIN)
        .args(["run", "scripted", "hi", "--yess"])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("'--yes'"), "{stderr}");
}

/// A script whose one approval checks edited arguments against a schema.
const SCHEMA_EDIT: &str = r#"{"script": {"steps": [
    {"type": "approval", "calls": [{"callId": "call_1", "tool": "write_file",
      "arguments": {"path": "a.txt"}, "allowed": ["approve", "reject", "edit"],
      "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}},
        "required": ["path"], "additionalProperties": false}}]},
    {"type": "complete", "summary": "done"}
]}}"#;

#[test]
fn a_refused_edit_is_shown_and_asked_again() {
    let dir = scratch("refused-edit");
    let serving = serve(&dir, &["--config", config(&dir).to_str().unwrap()]);
    let mut run = client(&serving, TOKEN);
    run.args(["run", "scripted", "edit it", "--options", SCHEMA_EDIT]);
    let out = run_with_stdin(run, "e\n{\"nope\": 1}\ne\n{\"path\": \"b.txt\"}\n");
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("answer refused") && stderr.contains("try again"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("approve? [y]es").count(),
        2,
        "asked twice: {stderr}"
    );
    let resolved = resolution(&serving, &execution_id(&stderr));
    assert_eq!(
        resolved["data"]["outcome"]["calls"][0]["decision"], "edit",
        "{resolved}"
    );
}

#[test]
fn a_rejection_shows_as_rejected_with_its_reason() {
    let dir = scratch("reject");
    let serving = serve(&dir, &["--config", config(&dir).to_str().unwrap()]);
    let mut run = client(&serving, TOKEN);
    run.args(["run", "scripted", "write it"]);
    let out = run_with_stdin(run, "n not that file\n");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("<- tool call_1: rejected: not that file"),
        "{stderr}"
    );
    assert!(!stderr.contains("call_1: succeeded"), "{stderr}");
    // Approved, the same call says so.
    let mut run = client(&serving, TOKEN);
    run.args(["run", "scripted", "write it"]);
    let out = run_with_stdin(run, "y\n");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("<- tool call_1: succeeded"), "{stderr}");
}

#[test]
fn an_approval_shows_invisible_characters_marked() {
    let dir = scratch("bidi");
    let serving = serve(&dir, &["--config", config(&dir).to_str().unwrap()]);
    let options = r#"{"script": {"steps": [
        {"type": "approval", "calls": [{"callId": "call_1", "tool": "write\u200bfile",
          "arguments": {"path": "reports/\u202efdp.exe"}}]},
        {"type": "complete", "summary": "done"}
    ]}}"#;
    let mut run = client(&serving, TOKEN);
    run.args(["run", "scripted", "write it", "--options", options]);
    let out = run_with_stdin(run, "n\n");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(r#"? approve write[\u{200b}]file {"path":"reports/[\u{202e}]fdp.exe"}"#),
        "{stderr}"
    );
    assert!(
        !stderr.contains('\u{202e}') && !stderr.contains('\u{200b}'),
        "{stderr}"
    );
    assert!(
        stderr.contains("invisible and direction-changing characters are shown as [\\u{...}]"),
        "{stderr}"
    );
}

/// The development token `serve` printed.
fn dev_token(serving: &Serving) -> String {
    serving
        .banner
        .iter()
        .find_map(|l| l.strip_prefix("development token (principal `dev`): "))
        .expect("a development token")
        .to_owned()
}

#[test]
fn the_development_token_survives_restarts_until_rotated() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = scratch("token");
    let first = dev_token(&serve(&dir, &[]));
    let serving = serve(&dir, &[]);
    assert_eq!(dev_token(&serving), first);
    let file = dir.join("harness.token");
    assert!(
        serving
            .banner
            .iter()
            .any(|l| l.contains("kept in harness.token")),
        "{:?}",
        serving.banner
    );
    drop(serving);
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), first);

    let out = Command::new(BIN)
        .args(["token", "--rotate"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rotated = text(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("development token (principal `dev`): "))
        .unwrap()
        .to_owned();
    assert_ne!(rotated, first);
    assert_eq!(dev_token(&serve(&dir, &[])), rotated);

    // Readable by others: refused, saying how to fix it.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("chmod 600"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn init_writes_a_sample_that_serve_finds_and_accepts() {
    let dir = scratch("init");
    let out = Command::new(BIN)
        .arg("init")
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(dir.join("harness.toml")).unwrap(),
        harness_server::config::SAMPLE
    );
    // Not over an existing file unless asked.
    let out = Command::new(BIN)
        .arg("init")
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--force"),
        "{}",
        text(&out.stderr)
    );

    // No --config: ./harness.toml is read, and named.
    let serving = serve(&dir, &[]);
    assert!(
        serving.banner.iter().any(|l| l == "config: harness.toml"),
        "{:?}",
        serving.banner
    );
    assert!(
        serving.banner.iter().any(|l| l == "adapters: scripted"),
        "{:?}",
        serving.banner
    );
    let mut run = client(&serving, &dev_token(&serving));
    run.args(["run", "scripted", "Summarize my notes", "--yes"]);
    let out = wait(run.spawn().unwrap(), Duration::from_secs(60));
    assert!(out.status.success(), "{}", text(&out.stderr));

    // The README shows the sample as it is.
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    assert!(
        readme.contains(harness_server::config::SAMPLE),
        "the README's harness.toml sample differs from config::SAMPLE"
    );
}

#[test]
fn an_acp_agent_that_cannot_start_is_named_and_serve_exits_2() {
    let dir = scratch("acp-missing");
    let path = dir.join("harness.toml");
    std::fs::write(
        &path,
        "[store]\nkind = \"memory\"\n[acp.agents.default]\ncommand = [\"no-such-acp-agent\"]\ncwd = \"/tmp\"\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--config",
            path.to_str().unwrap(),
        ])
        .env("PATH", "/nonexistent-a:/nonexistent-b")
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("acp agent `default` cannot be started")
            && stderr.contains("program `no-such-acp-agent`")
            && stderr.contains("/nonexistent-a:/nonexistent-b")
            && stderr.contains("os error 2"),
        "{stderr}"
    );
}

/// An agent that passes the start-up check (an executable file on the PATH) but that the OS
/// will not run (its interpreter is missing): the run is refused (exit 1) with the caller's
/// safe message (at start: the capability probe the service's `evaluate` runs for every
/// request cannot spawn it), and the operator's log on serve's stderr names the program, the
/// PATH searched and the OS error.
#[test]
fn an_acp_agent_that_fails_to_spawn_at_run_time_is_named_in_the_operators_log() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = scratch("acp-spawn");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let agent = bin.join("broken-acp-agent");
    std::fs::write(&agent, "#!/nonexistent/interpreter\n").unwrap();
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.join("harness.toml");
    std::fs::write(
        &path,
        format!(
            "[store]\nkind = \"memory\"\n\n[[tokens]]\nprincipal = \"alice\"\nsha256 = \"{}\"\n\n\
             [acp.agents.default]\ncommand = [\"broken-acp-agent\"]\ncwd = \"{}\"\n",
            harness_server::auth::digest(TOKEN),
            dir.display()
        ),
    )
    .unwrap();
    let search = format!("{}:/usr/bin:/bin", bin.display());
    let log = dir.join("serve.log");
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&path)
        .env("PATH", &search)
        .env_remove("HARNESS_LOG")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = loop {
        let line = lines.next().expect("serve printed its address").unwrap();
        if let Some(url) = line.strip_prefix("harness serving on ") {
            break url.to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let serving = Serving {
        child,
        url,
        banner: Vec::new(),
    };
    let mut run = client(&serving, TOKEN);
    run.args(["run", "acp", "hello"]);
    let out = wait(run.spawn().unwrap(), Duration::from_secs(60));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("could not be started"), "{stderr}");
    // The caller's projection names neither the program nor the host's paths.
    assert!(
        !stderr.contains("broken-acp-agent") && !stderr.contains(&search),
        "{stderr}"
    );
    // The log is written as the run fails; give the server a moment to flush it.
    let start = Instant::now();
    let logged = loop {
        let logged = std::fs::read_to_string(&log).unwrap();
        if logged.contains("execution failed")
            || logged.contains("execution refused")
            || start.elapsed() > Duration::from_secs(10)
        {
            break logged;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        logged.contains("WARN")
            && logged.contains("spawning program `broken-acp-agent`")
            && logged.contains(&format!("PATH searched: {search}"))
            && logged.contains(&agent.display().to_string())
            && logged.contains("os error 2"),
        "{logged}"
    );
}

#[test]
fn ctrl_c_at_the_prompt_cancels_the_run() {
    let dir = scratch("cancel-prompt");
    let serving = serve(&dir, &["--config", config(&dir).to_str().unwrap()]);
    let mut run = client(&serving, TOKEN);
    run.args(["run", "scripted", "write it"]);
    // Its stdin stays open and unanswered: the prompt waits.
    let child = run.spawn().unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let out = wait(child, Duration::from_secs(30));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("approve? [y]es"), "{stderr}");
    assert!(
        stderr.contains("cancelled: interrupted from the terminal"),
        "{stderr}"
    );
}

/// Starts a run of `EDITABLE` left waiting for its answer (its stdin closes unanswered);
/// returns its execution id.
fn waiting_run(serving: &Serving) -> String {
    let mut run = client(serving, TOKEN);
    run.args(["run", "scripted", "wait for me", "--options", EDITABLE]);
    execution_id(&text(&run_with_stdin(run, "").stderr))
}

#[test]
fn answer_takes_the_api_body_or_a_short_form() {
    let dir = scratch("answer-forms");
    let serving = serve(&dir, &["--config", config(&dir).to_str().unwrap()]);

    // The body of POST .../actions/{actionId}, as the API takes it.
    let id = waiting_run(&serving);
    let body = r#"{"type": "tool_approval", "revision": 1, "answer": {"type": "decide",
        "decisions": [{"callId": "call_1", "decision": {"type": "reject", "reason": "from json"}}]}}"#;
    let out = wait(
        {
            let mut c = client(&serving, TOKEN);
            c.args(["answer", &id, "json", body]);
            c.spawn().unwrap()
        },
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let resolved = resolution(&serving, &id);
    assert_eq!(
        resolved["data"]["outcome"]["calls"][0]["decision"], "reject",
        "{resolved}"
    );

    // The short forms build the same body.
    let id = waiting_run(&serving);
    let out = wait(
        {
            let mut c = client(&serving, TOKEN);
            c.args(["answer", &id, "edit", "--args", r#"{"path": "c.txt"}"#]);
            c.spawn().unwrap()
        },
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        resolution(&serving, &id)["data"]["outcome"]["calls"][0]["decision"],
        "edit"
    );
    let id = waiting_run(&serving);
    let out = wait(
        {
            let mut c = client(&serving, TOKEN);
            c.args(["answer", &id, "reject", "--reason", "not that file"]);
            c.spawn().unwrap()
        },
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let events = stdout_of(&serving, &["events", &id]);
    assert!(events.contains("not that file"), "{events}");
    // A form's answer to a tool approval is refused before anything is sent.
    let id = waiting_run(&serving);
    let mut c = client(&serving, TOKEN);
    c.args(["answer", &id, "form", "name=Ada"]);
    let out = wait(c.spawn().unwrap(), Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("is a tool approval"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn serve_reads_the_file_harness_config_names() {
    let dir = scratch("env-config");
    let path = config(&dir);
    let elsewhere = scratch("env-config-cwd");
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("HARNESS_CONFIG", &path)
        .current_dir(&elsewhere)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let first = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .next()
        .unwrap()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(first, format!("config: {}", path.display()));
}
