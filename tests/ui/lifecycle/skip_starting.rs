//! `queued -> running` skips `starting`: there is no such edge.
use harness::id::ExecutionId;
use harness::lifecycle::Execution;

fn main() {
    let _running = Execution::queue(ExecutionId::generate()).run();
}
