//! An execution's typestate, as an adapter author or a test of one uses it: each lifecycle
//! step is a method of the state it leaves, so a run that skips or repeats a step does not
//! compile.
//!
//! ```sh
//! cargo run --example typestate
//! ```
//!
//! `Execution<Queued>` can only `start`; `Execution<Starting>` can only `run`;
//! `Execution<Running>` can `emit` content, `create_artifact`, ask for an action
//! (`request_approval`, `request_input`: the awaiting state can only `resolve` with a valid
//! answer or `withdraw`), `succeed` or `fail`; every state that is not terminal can
//! `begin_cancel`, and `Cancelling` can only `confirm_cancelled`. A terminal state has no
//! transition at all. Every transition appends its event to the execution's log, so the log
//! is always a valid canonical lifecycle. What does not compile (each a test in
//! `tests/ui/lifecycle`):
//!
//! ```compile_fail
//! # use harness::{id::ExecutionId, lifecycle::Execution, event::RunSucceeded};
//! // Succeeding a run that never started.
//! let done = Execution::queue(ExecutionId::generate()).succeed(RunSucceeded::default());
//! ```
//!
//! ```compile_fail
//! # use harness::{id::ExecutionId, lifecycle::Execution, event::{RunSucceeded, CancelReason}};
//! // Cancelling after success: a terminal execution has no transitions.
//! let running = Execution::queue(ExecutionId::generate()).start().run();
//! running.succeed(RunSucceeded::default()).begin_cancel(CancelReason::default());
//! ```

use harness::event::{Content, RunSucceeded, TextDelta};
use harness::id::ExecutionId;
use harness::lifecycle::Execution;

fn main() {
    let queued = Execution::queue(ExecutionId::generate());
    let starting = queued.start();
    let mut running = starting.run();
    for word in ["typed", " lifecycles"] {
        running
            .emit(Content::MessageDelta(TextDelta::new(word)))
            .expect("the log is open");
    }
    let done = running.succeed(RunSucceeded::default());
    let kinds: Vec<&str> = done
        .events()
        .snapshot(Default::default())
        .iter()
        .map(|e| e.kind().as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "run.queued",
            "run.starting",
            "run.running",
            "message.delta",
            "message.delta",
            "run.succeeded"
        ]
    );
    println!("{}", kinds.join(" -> "));
}
