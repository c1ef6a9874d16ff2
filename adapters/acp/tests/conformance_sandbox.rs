//! The shared conformance suite on the ACP adapter with every agent in the operator's
//! sandbox (bubblewrap, the strict profile with a process limit of 64): what it certifies
//! outside the sandbox holds inside, and the sandbox fixtures pass (a hostile agent's escapes
//! are denied, a fork bomb ends the run `capacity`). Then again with each agent's ACP client
//! hosted in the sandbox too, by a worker over the Sandbox Worker Protocol v1: the same
//! results. The two runs share this binary one after the other (the leak fixtures count the
//! process's children).

mod common;

use common::knobs::AcpKnobs;
use harness_conformance::certify;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_acp_adapter_in_a_sandbox_passes_the_conformance_suite() {
    for (knobs, published) in [
        (AcpKnobs::sandboxed(), "acp-test-agent-sandboxed.txt"),
        (AcpKnobs::hosted(), "acp-test-agent-hosted.txt"),
    ] {
        suite(&knobs, published).await;
    }
}

async fn suite(knobs: &AcpKnobs, published: &str) {
    let report = certify(knobs).await;
    println!("{report}");
    report
        .check_published(
            &std::path::Path::new(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../harness-conformance/reports"
            ))
            .join(published),
        )
        .unwrap_or_else(|drift| panic!("{drift}"));
    let failed: Vec<&str> = report.failures().map(|f| f.id.as_str()).collect();
    assert!(failed.is_empty(), "{report}");
    // The skill is written in the workspace the sandbox binds, before the agent starts.
    for sandboxed in ["sandbox.escape", "sandbox.limits", "skills.missing_blocked"] {
        let result = report.result(sandboxed).expect("the fixture ran");
        assert_eq!(result.outcome.status(), "passed", "{sandboxed}: {report}");
    }
    let passed = report
        .results
        .iter()
        .filter(|r| r.outcome.status() == "passed")
        .count();
    assert_eq!(passed, 47, "{report}");
}
