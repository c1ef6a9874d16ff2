//! The shared conformance suite on the ACP adapter, driven by our own scriptable agent (the
//! `acp-test-agent` binary of this package), which produces each behaviour on demand.

mod common;

use std::time::Duration;

use harness_acp::{AcpAdapter, AcpOptions};
use harness_conformance::{Behaviour, Bounds, Knobs, certify};
use harness_core::error::ErrorCategory;
use harness_core::service::ExecutionRequest;

/// The knobs. Every turn of the suite's conversations runs the same `echo` agent in one
/// workspace (it keeps each session's history there, and `session/load` reads it back), so
/// that a recall depends only on the conversation the suite sets.
struct AcpKnobs {
    echo: AcpOptions,
}

impl AcpKnobs {
    fn new() -> Self {
        let mark = common::marker("conformance-conversations");
        let echo = AcpOptions::new(
            [env!("CARGO_BIN_EXE_acp-test-agent"), "echo", &mark],
            common::workspace(&mark),
        )
        .with_cancel_grace(Duration::from_millis(500));
        Self { echo }
    }
}

fn agent(mode: &str, canary: &str) -> AcpOptions {
    let mark = common::marker(&format!("conformance-{mode}"));
    AcpOptions::new(
        [env!("CARGO_BIN_EXE_acp-test-agent"), mode, &mark, canary],
        common::workspace(&mark),
    )
    .with_cancel_grace(Duration::from_millis(500))
}

impl Knobs for AcpKnobs {
    type Adapter = AcpAdapter;

    fn adapter(&self) -> AcpAdapter {
        AcpAdapter::new()
    }

    fn request_for(&self, behaviour: &Behaviour) -> Option<ExecutionRequest> {
        let (message, options) = match behaviour {
            // `echo` answers `turn <n>: <prompt>`, and a prompt starting with `recall` with the
            // session's earlier prompts; the conversation's later turns reopen its session.
            Behaviour::Remember { marker } => (format!("remember {marker}"), self.echo.clone()),
            Behaviour::Recall => ("recall".to_owned(), self.echo.clone()),
            other => ("conformance".to_owned(), Self::agent_for(other)?),
        };
        Some(ExecutionRequest::new(message).with_options(options.to_value()))
    }

    /// `echo`, which advertises `loadSession`: the configuration the capability gate
    /// evaluates then offers `session.multi_turn`.
    fn plain_request(&self) -> ExecutionRequest {
        ExecutionRequest::new("conformance").with_options(agent("echo", "").to_value())
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
    fn agent_for(behaviour: &Behaviour) -> Option<AcpOptions> {
        Some(match behaviour {
            Behaviour::StreamText => agent("text", ""),
            Behaviour::StreamReasoning => agent("reasoning", ""),
            Behaviour::ToolSuccess => agent("tool", ""),
            Behaviour::ToolError => agent("tool-error", ""),
            Behaviour::ToolApproval {
                calls: 1,
                editable: false,
            } => agent("approval", ""),
            Behaviour::FormInput => agent("elicit", ""),
            Behaviour::Hang => agent("hang", ""),
            Behaviour::Fail {
                category: ErrorCategory::Unavailable,
                diagnostic,
            } => agent("crash", diagnostic),
            Behaviour::Fail {
                category: ErrorCategory::Authentication,
                diagnostic,
            } => agent("auth", diagnostic),
            Behaviour::SlowInitialize => agent("slow-init", ""),
            Behaviour::ApprovalThenHang => agent("approval-hang", ""),
            Behaviour::SequentialApprovals => agent("sequential", ""),
            Behaviour::EchoTraceContext => agent("trace", ""),
            Behaviour::EmitSecret { secret } => agent("emit", secret),
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
        (35, 11, 2, 0),
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
