//! The scripted adapter, certified by the shared conformance suite.
//!
//! Run with `--nocapture` to see the report; its JSON is written to the target dir.

use harness_conformance::{FixtureOutcome, certify};

mod knobs;
use knobs::ScriptedKnobs;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripted_adapter_passes_the_conformance_suite() {
    let report = certify(&ScriptedKnobs).await;
    println!("{report}");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("conformance-scripted.json");
    std::fs::write(&path, report.to_json()).expect("write the report");
    println!("report written to {}", path.display());
    report.assert_passed();
    report
        .check_published(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../harness-conformance/reports/scripted.txt"
        )))
        .unwrap_or_else(|drift| panic!("{drift}"));
    // Every fixture ran or was refused as declared: nothing was left unexercised.
    let not_exercised: Vec<&str> = report
        .results
        .iter()
        .filter(|r| r.outcome.status() == "not exercised")
        .map(|r| r.id.as_str())
        .collect();
    assert!(not_exercised.is_empty(), "not exercised: {not_exercised:?}");
    // Conversations live in the service's thread state, and paused runs move between
    // replicas: the session fixtures run and pass rather than being refused.
    for id in [
        "session.multi_turn",
        "session.cross_replica_resume",
        "session.clear",
        "session.expired_state",
        "runtime.lease_fencing",
        "runtime.eviction_recovery",
        "runtime.bounded_cleanup",
        "runtime.single_mutation",
        "thread.durable_commit",
        "session.restart",
    ] {
        assert!(
            matches!(
                report.result(id).map(|r| &r.outcome),
                Some(FixtureOutcome::Passed { .. })
            ),
            "{id}: {:?}",
            report.result(id)
        );
    }
    // Same content, same evidence id.
    assert_eq!(
        certify(&ScriptedKnobs).await.evidence_id,
        report.evidence_id
    );
}
