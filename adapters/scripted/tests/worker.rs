//! The scripted adapter hosted by a worker, over the Sandbox Worker Protocol v1: the
//! conformance suite passes as it does in process, with the same results fixture by
//! fixture. What the protocol carries is the runtime's contract, unchanged.

use harness_conformance::{Behaviour, Knobs, certify};
use harness_core::service::ExecutionRequest;
use harness_sandbox::worker::InProcessWorker;
use harness_scripted::ScriptedAdapter;

mod knobs;
use knobs::ScriptedKnobs;

/// The scripted adapter's knobs; its runtimes behind the protocol.
#[derive(Debug)]
struct WorkerKnobs;

impl Knobs for WorkerKnobs {
    type Adapter = InProcessWorker<ScriptedAdapter>;

    fn adapter(&self) -> Self::Adapter {
        InProcessWorker::new(ScriptedKnobs.adapter())
    }

    fn plain_request(&self) -> ExecutionRequest {
        ScriptedKnobs.plain_request()
    }

    fn request_for(&self, behaviour: &Behaviour) -> Option<ExecutionRequest> {
        ScriptedKnobs.request_for(behaviour)
    }

    fn process_isolated(&self) -> bool {
        // This test binary runs one test: the suite is alone in its process.
        true
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripted_adapter_in_a_worker_passes_the_conformance_suite_as_in_process() {
    let report = certify(&WorkerKnobs).await;
    println!("{report}");
    report.assert_passed();
    // Fixture by fixture, the same outcome as the adapter in process: the published report
    // of the scripted adapter, word for word.
    report
        .check_published(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../harness-conformance/reports/scripted.txt"
        )))
        .unwrap_or_else(|drift| panic!("{drift}"));
}
