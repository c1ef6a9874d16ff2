//! No transition leaves a terminal state, and a terminal execution cannot be cancelled.
use harness::error::{ErrorCategory, HarnessError};
use harness::event::{CancelReason, RunSucceeded};
use harness::id::{ActionId, ExecutionId};
use harness::lifecycle::{Execution, state::Failed};

fn done() -> Execution<Failed> {
    Execution::queue(ExecutionId::generate()).start().run().fail(HarnessError::new(ErrorCategory::Internal, "x"))
}

fn main() {
    let _ = done().start();
    let _ = done().run();
    let _ = done().succeed(RunSucceeded::default());
    let _ = done().fail(HarnessError::new(ErrorCategory::Internal, "again"));
    let _ = done().request_input(ActionId::generate(), todo!());
    let _ = done().request_approval(ActionId::generate(), todo!());
    let _ = done().resolve(todo!());
    let _ = done().begin_cancel(CancelReason::default());
    let _ = done().confirm_cancelled();
}
