//! `awaiting_approval -> succeeded` is not drawn: the run must resume first.
use harness::action::ApprovalRequest;
use harness::event::RunSucceeded;
use harness::id::{ActionId, ExecutionId, ToolCallId};
use harness::lifecycle::Execution;

fn main() {
    let approval = ApprovalRequest::single(
        ToolCallId::generate(),
        "shell",
        serde_json::json!({}),
        serde_json::json!({"type": "object"}),
    )
    .unwrap();
    let awaiting = Execution::queue(ExecutionId::generate())
        .start()
        .run()
        .request_approval(ActionId::generate(), approval);
    let _ = awaiting.succeed(RunSucceeded::default());
}
