//! The shared conformance suite on the ACP adapter, driven by our own scriptable agent (the
//! `acp-test-agent` binary of this package), which produces each behaviour on demand.

mod common;

use std::time::Duration;

use harness_acp::{AcpAdapter, AcpAgent, AcpOptions};
use harness_conformance::{Behaviour, Bounds, Knobs, certify};
use harness_core::error::ErrorCategory;
use harness_core::service::ExecutionRequest;

/// The knobs. The operator's side of the adapter registers one agent per behaviour (the test
/// agent in that mode); a request picks it by name, as any caller would. Every turn of the
/// suite's conversations runs the `conversations` agent (`echo`) in one workspace (it keeps
/// each session's history there, and `session/load` reads it back), so that a recall depends
/// only on the conversation the suite sets. `crash`, `auth` and `emit` repeat the prompt
/// text: a request for a diagnostic or a secret carries it as its message.
struct AcpKnobs {
    conversations: std::path::PathBuf,
    workspace: std::path::PathBuf,
}

/// The test agent's modes the knobs offer, by agent name (the same).
const MODES: [&str; 14] = [
    "text",
    "reasoning",
    "tool",
    "tool-error",
    "approval",
    "elicit",
    "hang",
    "crash",
    "auth",
    "slow-init",
    "approval-hang",
    "sequential",
    "trace",
    "emit",
];

impl AcpKnobs {
    fn new() -> Self {
        Self {
            conversations: common::workspace(&common::marker("conformance-conversations")),
            workspace: common::workspace(&common::marker("conformance")),
        }
    }
}

/// The test agent asks for forms and echoes the trace context it is sent: the operator
/// vouches for both.
fn agent(mode: &str, workspace: &std::path::Path) -> AcpAgent {
    AcpAgent::new([env!("CARGO_BIN_EXE_acp-test-agent"), mode], workspace)
        .with_cancel_grace(Duration::from_millis(500))
        .with_elicitation()
        .with_trace_context()
}

fn request(agent: &str, message: &str) -> ExecutionRequest {
    ExecutionRequest::new(message).with_options(AcpOptions::named(agent).to_value())
}

impl Knobs for AcpKnobs {
    type Adapter = AcpAdapter;

    /// The default agent is `echo`, which advertises `loadSession`: the configuration the
    /// capability gate evaluates (the plain request's) then offers `session.multi_turn`.
    fn adapter(&self) -> AcpAdapter {
        let adapter = AcpAdapter::new(agent("echo", &self.workspace))
            .and_then(|adapter| {
                adapter.with_agent("conversations", agent("echo", &self.conversations))
            })
            .expect("valid agents");
        MODES
            .iter()
            .try_fold(adapter, |adapter, mode| {
                adapter.with_agent(*mode, agent(mode, &self.workspace))
            })
            .expect("valid agents")
    }

    fn request_for(&self, behaviour: &Behaviour) -> Option<ExecutionRequest> {
        Some(match behaviour {
            // `echo` answers `turn <n>: <prompt>`, and a prompt starting with `recall` with the
            // session's earlier prompts; the conversation's later turns reopen its session.
            Behaviour::Remember { marker } => {
                request("conversations", &format!("remember {marker}"))
            }
            Behaviour::Recall => request("conversations", "recall"),
            Behaviour::Fail {
                category: ErrorCategory::Unavailable,
                diagnostic,
            } => request("crash", diagnostic),
            Behaviour::Fail {
                category: ErrorCategory::Authentication,
                diagnostic,
            } => request("auth", diagnostic),
            Behaviour::EmitSecret { secret } => request("emit", secret),
            other => request(Self::mode_for(other)?, "conformance"),
        })
    }

    /// This test binary holds one test, so child processes and descriptors are the suite's.
    fn process_isolated(&self) -> bool {
        true
    }

    fn bounds(&self) -> Bounds {
        Bounds {
            run: Duration::from_secs(30),
            grace: Duration::from_secs(5),
        }
    }
}

impl AcpKnobs {
    /// The test agent's mode for a behaviour of one turn.
    fn mode_for(behaviour: &Behaviour) -> Option<&'static str> {
        Some(match behaviour {
            Behaviour::StreamText => "text",
            Behaviour::StreamReasoning => "reasoning",
            Behaviour::ToolSuccess => "tool",
            Behaviour::ToolError => "tool-error",
            Behaviour::ToolApproval {
                calls: 1,
                editable: false,
            } => "approval",
            Behaviour::FormInput => "elicit",
            Behaviour::Hang => "hang",
            Behaviour::SlowInitialize => "slow-init",
            Behaviour::ApprovalThenHang => "approval-hang",
            Behaviour::SequentialApprovals => "sequential",
            Behaviour::EchoTraceContext => "trace",
            _ => return None,
        })
    }
}

/// Every fixture passes, is refused at preflight as declared, or is not exercised (an outside
/// agent cannot be made to panic or emit items out of order: only those two). ACP permission requests never
/// offer `edit` (they select among options, never carry edited arguments); the suite's
/// `tool.approval.edit` then checks that an edit answer is refused, which it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_acp_adapter_passes_the_conformance_suite() {
    let report = certify(&AcpKnobs::new()).await;
    println!("{report}");
    report
        .check_published(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../harness-conformance/reports/acp-test-agent.txt"
        )))
        .unwrap_or_else(|drift| panic!("{drift}"));
    let failed: Vec<&str> = report.failures().map(|f| f.id.as_str()).collect();
    assert!(failed.is_empty(), "{report}");
    let count = |status: &str| {
        report
            .results
            .iter()
            .filter(|r| r.outcome.status() == status)
            .count()
    };
    assert_eq!(
        (
            count("passed"),
            count("refused at preflight (declared)"),
            count("not exercised"),
            count("FAILED"),
        ),
        (38, 10, 2, 0),
        "passed, refused, not exercised, failed: {report}"
    );
    let mut not_exercised: Vec<&str> = report
        .results
        .iter()
        .filter(|r| r.outcome.status() == "not exercised")
        .map(|r| r.id.as_str())
        .collect();
    not_exercised.sort_unstable();
    assert_eq!(
        not_exercised,
        ["faults.malformed_events", "faults.panic_sanitized"],
        "{report}"
    );
    for exercised in [
        "cancel.during_initialize",
        "cancel.during_resume",
        "action.sequential_interrupts",
        "session.multi_turn",
        "session.clear",
        "session.expired_state",
        "runtime.lease_fencing",
        "observability.metrics",
        "observability.tracing",
        "observability.trace_propagation",
        "observability.redaction",
    ] {
        let result = report.result(exercised).expect("the fixture ran");
        assert_eq!(result.outcome.status(), "passed", "{exercised}: {report}");
    }
    let edit = report
        .result("tool.approval.edit")
        .expect("the fixture ran");
    assert!(
        format!("{:?}", edit.outcome).contains("edit is not offered"),
        "{report}"
    );
}
