//! The shared conformance suite on the ACP adapter, driven by our own scriptable agent (the
//! `acp-test-agent` binary of this package), which produces each behaviour on demand.

mod common;

use common::knobs::AcpKnobs;
use harness_conformance::certify;

/// Every fixture passes, is refused at preflight as declared, or is not exercised (an outside
/// agent cannot make the adapter panic: only that one; its malformed output is the
/// `malformed` mode's line that is not JSON-RPC). ACP permission requests never
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
        (45, 12, 0, 0),
        "passed, refused, not exercised, failed: {report}"
    );
    let mut not_exercised: Vec<&str> = report
        .results
        .iter()
        .filter(|r| r.outcome.status() == "not exercised")
        .map(|r| r.id.as_str())
        .collect();
    not_exercised.sort_unstable();
    assert!(not_exercised.is_empty(), "{report}");
    for exercised in [
        "faults.malformed_events",
        "faults.panic_sanitized",
        "runtime.bounded_cleanup",
        "runtime.single_mutation",
        "tool.builtin",
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
        "skills.missing_blocked",
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
