//! An approval cannot be answered with a form response.
use harness::action::{ApprovalRequest, FormResponse, FormValues, Revision};
use harness::id::{ActionId, ExecutionId, ToolCallId};
use harness::lifecycle::Execution;

fn main() {
    let approval = ApprovalRequest::single(
        ToolCallId::generate(),
        "shell",
        serde_json::json!({"cmd": "ls"}),
        serde_json::json!({"type": "object"}),
    )
    .unwrap();
    let id = ActionId::generate();
    let awaiting = Execution::queue(ExecutionId::generate())
        .start()
        .run()
        .request_approval(id.clone(), approval);
    let response = FormResponse::submit(id, Revision::FIRST, FormValues::new());
    let _ = awaiting.resolve(response);
}
