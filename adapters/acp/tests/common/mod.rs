//! Helpers shared by the ACP adapter's tests.
#![allow(dead_code, unreachable_pub)]

pub mod knobs;
pub mod real;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use harness_acp::{AcpAdapter, AcpAgent};
use harness_core::action::{ActionRequest, ApprovalRequest, ApprovalResponse, ToolDecision};
use harness_core::adapter::{
    AgentConfig, EventResult, HarnessAdapter, HarnessRuntime, RunLimits, RuntimeContext, TurnInput,
};
use harness_core::event::{Event, EventKind, EventPayload};
use harness_core::id::{Cursor, ExecutionId};
use harness_core::manifest::{ContractVersion, Describe};
use harness_core::service::{AdapterService, ExecutionHandle, ExecutionRequest, Outcome};
use tower::ServiceExt;

/// How long any single wait in a test may take.
pub const WAIT: Duration = Duration::from_secs(60);

/// The directory `.ci/install-acp.sh` installs the npm packages into.
pub fn agent_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/agent")
}

/// A unique marker, passed as an extra argument so that the agent's processes (and any
/// children they spawn with the same argv) can be found in `/proc`.
pub fn marker(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "--harness-acp-test={name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A fresh, empty workspace directory, under a directory of this test process.
pub fn workspace(marker: &str) -> PathBuf {
    let dir = process_scratch("harness-acp-tests").join(marker.trim_start_matches('-'));
    std::fs::create_dir_all(&dir).expect("create workspace");
    dir
}

/// `<temp>/<root>/<this pid>`. Test binaries have no teardown hook, so the first call
/// removes the directories of test processes that are no longer running: what a run leaves
/// behind lasts until the next run, never accumulates.
pub fn process_scratch(root: &str) -> PathBuf {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    let root = std::env::temp_dir().join(root);
    SWEPT.call_once(|| {
        let Ok(entries) = std::fs::read_dir(&root) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let stale = name
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists());
            if stale {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    });
    root.join(std::process::id().to_string())
}

/// The npm package's example agent, run with `tsx`.
pub fn example_agent(marker: &str) -> AcpAgent {
    let dir = agent_dir();
    let tsx = dir.join("node_modules/.bin/tsx");
    let agent =
        dir.join("node_modules/@zed-industries/agent-client-protocol/typescript/examples/agent.ts");
    assert!(
        tsx.exists() && agent.exists(),
        "the example ACP agent is not installed: run .ci/install-acp.sh (it runs `npm ci` in {})",
        dir.display()
    );
    AcpAgent::new(
        [
            tsx.display().to_string(),
            agent.display().to_string(),
            marker.to_owned(),
        ],
        workspace(marker),
    )
    .allow_env("PATH")
}

/// Our own scriptable agent (`acp-test-agent MODE MARK`), with a cancel grace of 500 ms.
pub fn test_agent(mode: &str, mark: &str) -> AcpAgent {
    AcpAgent::new(
        [env!("CARGO_BIN_EXE_acp-test-agent"), mode, mark],
        workspace(mark),
    )
    .with_cancel_grace(Duration::from_millis(500))
}

/// The adapter running `agent`.
pub fn adapter_for(agent: AcpAgent) -> AcpAdapter {
    AcpAdapter::new(agent).expect("a valid agent configuration")
}

/// Starts an execution of `adapter` on the message `go`.
pub async fn start(adapter: &AcpAdapter) -> ExecutionHandle {
    AdapterService::new(adapter.clone())
        .oneshot(ExecutionRequest::new("go"))
        .await
        .expect("execution starts")
}

/// The outcome of `execution`; bounded by [`WAIT`].
pub async fn outcome(execution: &ExecutionHandle) -> Outcome {
    tokio::time::timeout(WAIT, execution.outcome())
        .await
        .expect("outcome within the bounded wait")
}

/// Reads `execution` to its end; returns its events and outcome.
pub async fn finish(execution: &ExecutionHandle) -> (Vec<Arc<Event>>, Outcome) {
    let events = read_until(execution, Cursor::START, |e| e.kind().is_terminal()).await;
    (events, outcome(execution).await)
}

/// Reads `execution` until an action is requested; returns the action. Panics when the run
/// ends first.
pub async fn until_action(execution: &ExecutionHandle) -> ActionRequest {
    let events = read_until(execution, Cursor::START, |e| {
        is(e, EventKind::ActionRequested) || e.kind().is_terminal()
    })
    .await;
    let Some(EventPayload::ActionRequested(action)) = events.last().map(|e| e.payload()) else {
        panic!("expected an action request, got {:?}", kinds(&events));
    };
    (**action).clone()
}

/// The answer approving every call of `approval`, the kind of `action`.
pub fn approve_all(action: &ActionRequest, approval: &ApprovalRequest) -> ApprovalResponse {
    ApprovalResponse::decide(
        action.id.clone(),
        action.revision,
        approval
            .calls()
            .iter()
            .map(|c| ToolDecision::approve(c.call_id().clone())),
    )
}

/// A runtime of `adapter`, created directly (not through the service).
pub async fn runtime(adapter: &AcpAdapter) -> Box<dyn HarnessRuntime> {
    let execution_id = ExecutionId::generate();
    let context = RuntimeContext {
        telemetry: harness_core::telemetry::TelemetrySink::detached(
            adapter.descriptor().id().clone(),
            execution_id.clone(),
        ),
        middleware: harness_core::middleware::PortableMiddlewarePolicy::allow_all(),
        contract_version: ContractVersion::V1,
        adapter: adapter.descriptor().id().clone(),
        execution_id,
        config: AgentConfig::default(),
        binding: None,
        prompt: None,
        interrupt_policy: Default::default(),
        tools: Vec::new(),
        limits: RunLimits::default(),
        thread_state: None,
        cancellation: tokio_util::sync::CancellationToken::new(),
        delivery: harness_core::adapter::Delivery::default(),
        skills: harness_core::skill::SkillManifest::default(),
    };
    adapter
        .create_runtime(context)
        .await
        .expect("the runtime is created")
}

/// Initializes `runtime` and runs its first segment (a [`turn`]) to its end; bounded by
/// [`WAIT`].
pub async fn first_segment(runtime: &dyn HarnessRuntime) -> Vec<EventResult> {
    runtime.initialize().await.expect("initialized");
    tokio::time::timeout(WAIT, runtime.stream(turn(runtime)).collect())
        .await
        .expect("the segment ends")
}

/// A turn of `runtime` on the message `go`.
pub fn turn(runtime: &dyn HarnessRuntime) -> TurnInput {
    TurnInput {
        execution_id: runtime.identity().execution_id,
        conversation_id: None,
        message: "go".to_owned(),
        files: Vec::new(),
        user: None,
        client_context: serde_json::Map::new(),
        trace_context: None,
        deadline: None,
        idempotency_key: None,
    }
}

/// Pids of live (non-zombie) processes whose `/proc/<pid>` directory `matches`.
pub fn processes(matches: impl Fn(&std::path::Path) -> bool) -> Vec<u32> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let zombie = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('Z')))
            .unwrap_or(true);
        if !zombie && matches(&entry.path()) {
            found.push(pid);
        }
    }
    found
}

/// Pids of live (non-zombie) processes whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<u32> {
    processes(|dir| {
        std::fs::read(dir.join("cmdline"))
            .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(marker))
    })
}

/// Waits (bounded) until no process carries `marker`, then asserts it.
pub async fn assert_no_process_left(marker: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !processes_with(marker).is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        processes_with(marker),
        Vec::<u32>::new(),
        "processes left behind"
    );
}

/// Reads events until `stop` says so or the log ends; bounded by [`WAIT`].
pub async fn read_until(
    execution: &ExecutionHandle,
    from: Cursor,
    mut stop: impl FnMut(&Event) -> bool,
) -> Vec<Arc<Event>> {
    let mut out = Vec::new();
    let mut events = execution.events(from);
    let read = async {
        while let Some(event) = events.next().await {
            let done = stop(&event);
            out.push(event);
            if done {
                break;
            }
        }
    };
    tokio::time::timeout(WAIT, read)
        .await
        .expect("events within the bounded wait");
    out
}

/// The kinds of `events`, as wire names.
pub fn kinds(events: &[Arc<Event>]) -> Vec<&'static str> {
    events.iter().map(|e| e.kind().as_str()).collect()
}

/// The text of the message deltas among `events`.
pub fn text(events: &[Arc<Event>]) -> String {
    events
        .iter()
        .filter_map(|e| match e.payload() {
            EventPayload::MessageDelta(d) => Some(d.text.as_str()),
            _ => None,
        })
        .collect()
}

/// The text of the message deltas in the log of `execution`.
pub fn logged_text(execution: &ExecutionHandle) -> String {
    text(&execution.log().snapshot(Cursor::START))
}

/// Whether `event` is of `kind`.
pub fn is(event: &Event, kind: EventKind) -> bool {
    event.kind() == kind
}
