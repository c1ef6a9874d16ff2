//! ACP agents in the operator's sandbox (bubblewrap, installed by
//! `.ci/install-bubblewrap.sh`): a hostile agent (`acp-test-agent escape`) tries each escape
//! from inside and reports what it saw; the limits end runs with classified errors; cancel and
//! a killed sandbox leave one terminal event and no process.

mod common;

use std::net::TcpListener;

use common::*;
use harness_acp::{AcpAdapter, AcpAgent};
use harness_core::adapter::{AgentConfig, DeploymentContext, HarnessAdapter};
use harness_core::capability::{CapabilityKey, SupportLevel};
use harness_core::event::{CancelReason, EventPayload};
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
use harness_sandbox::{Sandbox, SandboxLimits, SandboxProfile};
use tower::ServiceExt as _;

fn sandboxed(profile: SandboxProfile, mark: &str) -> AcpAgent {
    test_agent("escape", mark).in_sandbox(Sandbox::new(profile).expect("bwrap is installed"))
}

async fn run(agent: AcpAgent, prompt: &str) -> (String, Outcome) {
    let adapter = adapter_for(agent);
    let execution = AdapterService::new(adapter)
        .oneshot(ExecutionRequest::new(prompt))
        .await
        .expect("the execution starts");
    let (events, outcome) = finish(&execution).await;
    (text(&events), outcome)
}

/// What the agent reported for `probe`.
fn saw<'a>(report: &'a str, probe: &str) -> &'a str {
    report
        .lines()
        .find_map(|line| line.strip_prefix(probe)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no report of {probe} in:\n{report}"))
}

#[tokio::test]
async fn a_hostile_agent_sees_and_reaches_only_what_its_profile_allows() {
    let mark = marker("escape");
    let other = workspace(&marker("other"));
    std::fs::write(other.join("secret.txt"), "another caller's work").unwrap();
    let database = workspace(&marker("db")).join("harness.db");
    std::fs::write(&database, "the server's database").unwrap();
    let allowed = TcpListener::bind("127.0.0.1:0").unwrap();
    let refused = TcpListener::bind("127.0.0.1:0").unwrap();
    let (allowed_port, refused_port) = (
        allowed.local_addr().unwrap().port(),
        refused.local_addr().unwrap().port(),
    );
    let profile =
        SandboxProfile::default().allow(format!("127.0.0.1:{allowed_port}").parse().unwrap());
    let agent = sandboxed(profile, &mark).set_env("LANG", "C.UTF-8");
    let ws = agent.cwd.clone();
    let prompt = format!(
        "read:/root read:/etc/shadow read:/home read:{secret} read:{db} \
         write:/usr/evil write:/etc/evil write:{other_evil} write:{mine} \
         connect:{allowed_port} connect:{refused_port} procs env",
        secret = other.join("secret.txt").display(),
        db = database.display(),
        other_evil = other.join("evil").display(),
        mine = ws.join("mine.txt").display(),
    );
    let (report, outcome) = run(agent, &prompt).await;
    assert!(
        matches!(outcome, Outcome::Succeeded(_)),
        "{outcome:?}\n{report}"
    );
    for probe in [
        "read:/root".to_owned(),
        "read:/etc/shadow".to_owned(),
        "read:/home".to_owned(),
        format!("read:{}", other.join("secret.txt").display()),
        format!("read:{}", database.display()),
        "write:/usr/evil".to_owned(),
        "write:/etc/evil".to_owned(),
        format!("write:{}", other.join("evil").display()),
    ] {
        assert!(
            saw(&report, &probe).starts_with("denied"),
            "{probe}:\n{report}"
        );
    }
    assert_eq!(
        saw(&report, &format!("write:{}", ws.join("mine.txt").display())),
        "ok"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("mine.txt")).unwrap(),
        "escaped"
    );
    assert!(!other.join("evil").exists());
    assert_eq!(
        saw(&report, &format!("connect:{allowed_port}")),
        "ok",
        "{report}"
    );
    assert!(
        saw(&report, &format!("connect:{refused_port}")).starts_with("denied"),
        "{report}"
    );
    // bwrap's init and the agent: none of the host's processes.
    let procs: usize = saw(&report, "procs").parse().unwrap();
    assert!(procs <= 3, "{procs} processes visible:\n{report}");
    // What the operator gave it, and the working directory bwrap sets.
    let mut env: Vec<&str> = saw(&report, "env").split(',').collect();
    env.sort_unstable();
    assert_eq!(env, ["LANG", "PWD"], "{report}");
}

#[tokio::test]
async fn the_capability_report_says_what_the_profile_enforces() {
    let mark = marker("report");
    let profile = SandboxProfile::default()
        .allow("127.0.0.1:4010".parse().unwrap())
        .proxy("api.example.com:443".parse().unwrap());
    let adapter = adapter_for(sandboxed(profile, &mark));
    let report = adapter
        .evaluate(&AgentConfig::default(), &DeploymentContext::default())
        .await
        .unwrap();
    let isolation = report.get(CapabilityKey::RuntimeSandboxIsolation);
    assert_eq!(isolation.level(), SupportLevel::Native, "{isolation:?}");
    let constraints = isolation.constraints();
    assert_eq!(constraints["backend"], "bubblewrap");
    assert_eq!(constraints["network"], "allowlist");
    assert_eq!(
        constraints["networkAllow"],
        serde_json::json!(["127.0.0.1:4010"])
    );
    assert_eq!(
        constraints["networkProxy"],
        serde_json::json!(["api.example.com:443"])
    );
    assert_eq!(constraints["processes"], 256);

    let plain = adapter_for(test_agent("escape", &marker("plain")));
    let report = plain
        .evaluate(&AgentConfig::default(), &DeploymentContext::default())
        .await
        .unwrap();
    let isolation = report.get(CapabilityKey::RuntimeSandboxIsolation);
    assert_eq!(
        isolation.level(),
        SupportLevel::Unsupported,
        "{isolation:?}"
    );
}

fn limited(limits: SandboxLimits, mark: &str) -> AcpAgent {
    sandboxed(SandboxProfile::default().limits(limits), mark)
}

fn limits() -> SandboxLimits {
    let mut limits = SandboxLimits::default();
    limits.processes = 32;
    limits.memory_bytes = 256 << 20;
    limits
}

/// The run failed with `code`, and nothing of the sandbox is left.
async fn failed_with(agent: AcpAgent, prompt: &str, code: &str, mark: &str) {
    let (report, outcome) = run(agent, prompt).await;
    let Outcome::Failed(err) = outcome else {
        panic!("expected a failure, got {outcome:?}\n{report}");
    };
    assert_eq!(err.code().as_str(), code, "{err:?}");
    assert!(!err.retryable(), "{err:?}");
    assert_no_process_left(mark).await;
}

#[tokio::test]
async fn a_fork_bomb_ends_the_run_with_sandbox_limit() {
    let mark = marker("bomb");
    failed_with(limited(limits(), &mark), "bomb", "SANDBOX_LIMIT", &mark).await;
}

#[tokio::test]
async fn a_memory_hog_ends_the_run_with_sandbox_limit() {
    let mark = marker("hog");
    failed_with(limited(limits(), &mark), "hog", "SANDBOX_LIMIT", &mark).await;
}

#[tokio::test]
async fn an_agent_that_never_ends_is_stopped_at_the_sandbox_wall_time() {
    let mark = marker("forever");
    let mut limits = limits();
    limits.wall_time_ms = 1_500;
    failed_with(
        limited(limits, &mark),
        "forever",
        "SANDBOX_WALL_TIME",
        &mark,
    )
    .await;
}

/// Starts a turn that never ends by itself, once it is under way.
async fn forever(adapter: AcpAdapter) -> harness_core::service::ExecutionHandle {
    let execution = AdapterService::new(adapter)
        .oneshot(ExecutionRequest::new("forever"))
        .await
        .unwrap();
    read_until(&execution, harness_core::id::Cursor::START, |e| {
        matches!(e.payload(), EventPayload::MessageDelta(d) if d.text.contains("forever waiting"))
    })
    .await;
    execution
}

fn assert_one_terminal(events: &[std::sync::Arc<harness_core::event::Event>]) {
    let terminal = events.iter().filter(|e| e.kind().is_terminal()).count();
    assert_eq!(terminal, 1, "{:?}", kinds(events));
}

#[tokio::test]
async fn cancelling_a_sandboxed_run_ends_it_once_and_leaves_nothing() {
    let mark = marker("cancel");
    let adapter: AcpAdapter = adapter_for(sandboxed(SandboxProfile::default(), &mark));
    let execution = forever(adapter).await;
    assert!(!processes_with(&mark).is_empty());
    execution.cancel(CancelReason::new("test"));
    let (events, outcome) = finish(&execution).await;
    assert!(matches!(outcome, Outcome::Cancelled(_)), "{outcome:?}");
    assert_one_terminal(&events);
    assert_no_process_left(&mark).await;
}

#[tokio::test]
async fn a_sandbox_killed_mid_run_gives_one_terminal_event_and_no_orphan() {
    let mark = marker("killed");
    let adapter = adapter_for(sandboxed(SandboxProfile::default(), &mark));
    let execution = forever(adapter).await;
    // SIGKILL to bwrap itself: the process this control plane started (its child).
    let me = std::process::id().to_string();
    let bwrap: Vec<u32> = processes(|dir| {
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        let parent = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split(' ').nth(1));
        parent == Some(me.as_str())
            && std::fs::read(dir.join("cmdline")).is_ok_and(|c| {
                let c = String::from_utf8_lossy(&c);
                c.contains("bwrap") && c.contains(&mark)
            })
    });
    assert_eq!(bwrap.len(), 1, "one bwrap runs");
    let outer = bwrap[0];
    std::process::Command::new("kill")
        .args(["-KILL", &outer.to_string()])
        .status()
        .unwrap();
    let (events, outcome) = finish(&execution).await;
    assert!(matches!(outcome, Outcome::Failed(_)), "{outcome:?}");
    assert_one_terminal(&events);
    assert_no_process_left(&mark).await;
}
