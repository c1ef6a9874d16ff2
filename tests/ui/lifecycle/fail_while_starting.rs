//! The diagram draws `failed` only from `running`: a failed start goes through `run()`.
use harness::error::{ErrorCategory, HarnessError};
use harness::id::ExecutionId;
use harness::lifecycle::Execution;

fn main() {
    let starting = Execution::queue(ExecutionId::generate()).start();
    let _failed = starting.fail(HarnessError::new(ErrorCategory::Unavailable, "no runtime"));
}
