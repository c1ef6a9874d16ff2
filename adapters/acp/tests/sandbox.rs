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
    escape(false).await;
}

/// The escapes, tried from inside by the agent; `hosted`: with its ACP client in the
/// sandbox too, over the worker protocol.
async fn escape(hosted: bool) {
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
    let mut agent = sandboxed(profile, &mark).set_env("LANG", "C.UTF-8");
    if hosted {
        agent = agent.hosted_by_worker(WORKER);
    }
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
    // bwrap's init and the agent (and its worker): none of the host's processes.
    let procs: usize = saw(&report, "procs").parse().unwrap();
    assert!(
        procs <= 3 + usize::from(hosted),
        "{procs} processes visible:\n{report}"
    );
    // What the operator gave it, and the working directory bwrap sets (which a hosted
    // agent's worker, clearing the environment for it, does not pass on).
    let mut env: Vec<&str> = saw(&report, "env").split(',').collect();
    env.sort_unstable();
    env.retain(|name| !(hosted && *name == "PWD"));
    let expected: &[&str] = if hosted { &["LANG"] } else { &["LANG", "PWD"] };
    assert_eq!(env, expected, "{report}");
}

/// The worker program that hosts an agent's runtime in its sandbox.
const WORKER: &str = env!("CARGO_BIN_EXE_acp-sandbox-worker");

/// An agent hosted by a worker: its ACP client runs in the sandbox with it, and reaches the
/// control plane only over the Sandbox Worker Protocol v1.
mod hosted {
    use super::*;

    fn hosted(profile: SandboxProfile, mark: &str) -> AcpAgent {
        sandboxed(profile, mark).hosted_by_worker(WORKER)
    }

    /// Every process of the sandbox (bwrap's command line names the workspace, whose
    /// name carries the mark; the agent's carries it too).
    fn everything(mark: &str) -> &str {
        mark.trim_start_matches('-')
    }

    #[tokio::test]
    async fn a_hostile_agent_hosted_by_a_worker_sees_and_reaches_only_what_its_profile_allows() {
        escape(true).await;
    }

    #[tokio::test]
    async fn the_capability_report_says_the_worker_hosts_the_client() {
        let mark = marker("hreport");
        let report = |agent: AcpAgent| async move {
            adapter_for(agent)
                .evaluate(&AgentConfig::default(), &DeploymentContext::default())
                .await
                .unwrap()
                .get(CapabilityKey::RuntimeSandboxIsolation)
                .clone()
        };
        let plain = report(sandboxed(SandboxProfile::default(), &mark)).await;
        assert_eq!(plain.constraints()["hosted"], "agent");
        let worker = report(hosted(SandboxProfile::default(), &mark)).await;
        assert_eq!(worker.level(), SupportLevel::Native);
        assert_eq!(worker.constraints()["hosted"], "worker");
    }

    #[tokio::test]
    async fn a_hosted_run_streams_and_its_sandbox_is_gone_after_cleanup() {
        let mark = marker("hosted");
        let (report, outcome) = run(hosted(SandboxProfile::default(), &mark), "procs").await;
        assert!(
            matches!(outcome, Outcome::Succeeded(_)),
            "{outcome:?}\n{report}"
        );
        assert!(saw(&report, "procs").parse::<usize>().is_ok(), "{report}");
        assert_no_process_left(everything(&mark)).await;
    }

    #[tokio::test]
    async fn a_fork_bomb_in_a_hosted_sandbox_ends_the_run_with_sandbox_limit() {
        let mark = marker("hbomb");
        let agent = hosted(SandboxProfile::default().limits(limits()), &mark);
        failed_with(agent, "bomb", "SANDBOX_LIMIT", everything(&mark)).await;
    }

    #[tokio::test]
    async fn a_hosted_agent_that_never_ends_is_stopped_at_the_sandbox_wall_time() {
        let mark = marker("hforever");
        let mut limits = limits();
        limits.wall_time_ms = 1_500;
        let agent = hosted(SandboxProfile::default().limits(limits), &mark);
        failed_with(agent, "forever", "SANDBOX_WALL_TIME", everything(&mark)).await;
    }

    #[tokio::test]
    async fn a_hosted_worker_past_its_output_limit_is_torn_down() {
        // Each one-character delta crosses as a frame: 200,000 of them are some 15 MB.
        let mark = marker("hflood");
        let mut limits = limits();
        limits.output_bytes = 1 << 20;
        let agent = test_agent("burst", &mark)
            .in_sandbox(Sandbox::new(SandboxProfile::default().limits(limits)).unwrap())
            .hosted_by_worker(WORKER);
        failed_with(agent, "200000", "SANDBOX_LIMIT", everything(&mark)).await;
    }

    #[tokio::test]
    async fn cancelling_a_hosted_run_ends_it_once_and_leaves_nothing() {
        let mark = marker("hcancel");
        let execution = forever(adapter_for(hosted(SandboxProfile::default(), &mark))).await;
        assert!(!processes_with(&mark).is_empty());
        execution.cancel(CancelReason::new("test"));
        let (events, outcome) = finish(&execution).await;
        assert!(matches!(outcome, Outcome::Cancelled(_)), "{outcome:?}");
        assert_one_terminal(&events);
        assert_no_process_left(everything(&mark)).await;
    }

    #[tokio::test]
    async fn a_hosted_sandbox_killed_mid_run_gives_one_terminal_event_and_no_orphan() {
        let mark = marker("hkilled");
        let execution = forever(adapter_for(hosted(SandboxProfile::default(), &mark))).await;
        kill_bwrap(everything(&mark));
        let (events, outcome) = finish(&execution).await;
        let Outcome::Failed(err) = &outcome else {
            panic!("{outcome:?}");
        };
        assert_eq!(err.code().as_str(), "WORKER_LOST", "{err:?}");
        assert_one_terminal(&events);
        assert_no_process_left(everything(&mark)).await;
    }
}

/// SIGKILL to the bwrap this process started whose command line carries `mark`.
fn kill_bwrap(mark: &str) {
    let me = std::process::id().to_string();
    let bwrap: Vec<u32> = processes(|dir| {
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        let parent = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split(' ').nth(1));
        parent == Some(me.as_str())
            && std::fs::read(dir.join("cmdline")).is_ok_and(|c| {
                let c = String::from_utf8_lossy(&c);
                c.contains("bwrap") && c.contains(mark)
            })
    });
    assert_eq!(bwrap.len(), 1, "one bwrap runs");
    std::process::Command::new("kill")
        .args(["-KILL", &bwrap[0].to_string()])
        .status()
        .unwrap();
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
    kill_bwrap(&mark);
    let (events, outcome) = finish(&execution).await;
    assert!(matches!(outcome, Outcome::Failed(_)), "{outcome:?}");
    assert_one_terminal(&events);
    assert_no_process_left(&mark).await;
}

/// A line-delimited JSON-RPC server answering every request with an empty result.
const BRIDGED: &str = r#"$| = 1; while (<STDIN>) { print qq({"jsonrpc":"2.0","id":$1,"result":{}}\n) if /"method"/ && /"id":(\d+)/ }"#;

/// An HTTP upstream on the host's loopback: answers each request `200`, and records whether
/// it carried the operator's header.
async fn upstream() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let authorized = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = std::sync::Arc::clone(&authorized);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut got = Vec::new();
            let mut buf = [0_u8; 4096];
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match socket.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            if String::from_utf8_lossy(&got)
                .to_lowercase()
                .contains("authorization: bearer op-token")
            {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            let _ = socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}")
                .await;
        }
    });
    (url, authorized)
}

/// A sandboxed agent (`hosted`: with its ACP client, hosted by a worker) reaches its
/// credentialed MCP servers through the relay of the control plane, relayed into its sandbox
/// for its launch only: the bridged one (run in a sandbox of its own, of the agent's profile,
/// which allows its variable) and the proxied one (which gets the operator's header). A server
/// forwarded as configured is reached only where the profile allows, here not at all.
async fn reach_mcp(hosted: bool) {
    use harness_acp::{AcpMcpServer, AcpMcpTransport};
    let (url, authorized) = upstream().await;
    let mark = marker("mcp-reach");
    let mut bridged = AcpMcpServer::stdio("bridged", ["perl", "-e", BRIDGED]);
    if let AcpMcpTransport::Stdio { env, .. } = &mut bridged.transport {
        env.insert("SECRET".to_owned(), "s".to_owned());
    }
    let mut proxied = AcpMcpServer::http("proxied", &url);
    if let AcpMcpTransport::Http { headers, .. } = &mut proxied.transport {
        headers.insert("Authorization".to_owned(), "Bearer op-token".to_owned());
    }
    let profile = SandboxProfile::default().allow_env("SECRET");
    let mut agent = test_agent("mcp-reach", &mark)
        .in_sandbox(Sandbox::new(profile).expect("bwrap is installed"))
        .with_mcp_server(bridged)
        .with_mcp_server(proxied)
        .with_mcp_server(AcpMcpServer::http("direct", &url));
    if hosted {
        agent = agent.hosted_by_worker(WORKER);
    }
    let (report, outcome) = run(agent, "go").await;
    assert!(
        matches!(outcome, Outcome::Succeeded(_)),
        "{outcome:?}\n{report}"
    );
    assert!(report.contains("bridged 200"), "{report}");
    assert!(report.contains("proxied 200"), "{report}");
    assert!(report.contains("direct unreachable"), "{report}");
    assert_eq!(authorized.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_no_process_left(&mark).await;
}

#[tokio::test]
async fn a_sandboxed_agent_reaches_its_credentialed_mcp_servers_through_its_own_relay() {
    reach_mcp(false).await;
}

#[tokio::test]
async fn a_worker_hosted_agent_reaches_its_credentialed_mcp_servers_through_its_own_relay() {
    reach_mcp(true).await;
}

/// A bridged server of a sandboxed agent runs in a sandbox of the agent's profile: its
/// variables must be allowed there.
#[test]
fn a_bridged_servers_variables_must_be_allowed_by_the_agents_profile() {
    use harness_acp::{AcpMcpServer, AcpMcpTransport};
    let mut bridged = AcpMcpServer::stdio("local", ["srv"]);
    if let AcpMcpTransport::Stdio { env, .. } = &mut bridged.transport {
        env.insert("API_TOKEN".to_owned(), "t".to_owned());
    }
    let agent = test_agent("text", &marker("mcp-profile"))
        .in_sandbox(Sandbox::with_bwrap(
            SandboxProfile::default(),
            "/usr/bin/bwrap",
        ))
        .with_mcp_server(bridged);
    let message = agent.check().unwrap_err().message().to_owned();
    assert!(
        message.contains("`local`") && message.contains("API_TOKEN"),
        "{message}"
    );
}
