//! One task per execution: the driver. The layers that need the end of an execution (trace,
//! metrics, capacity) use a terminal hook on its log, not a task of their own.

use harness_core::event::CancelReason;
use harness_core::lifecycle::ExecutionState;
use harness_core::service::{ExecutionHandle, ExecutionRequest};
use harness_layers::stack::HarnessStack;
use harness_scripted::{ApprovalCall, Script, ScriptedAdapter};
use serde_json::json;
use tower::{Service, ServiceExt};

const EXECUTIONS: usize = 50;

fn alive() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

async fn settle(handles: &[ExecutionHandle], state: ExecutionState) {
    for handle in handles {
        while handle.state() != state {
            tokio::task::yield_now().await;
        }
    }
}

#[test]
fn the_default_stack_runs_one_task_per_execution_and_none_after_the_end() {
    // A subscriber that records spans, so the trace layer does follow each execution.
    let subscriber = tracing_subscriber::registry();
    tracing::subscriber::with_default(subscriber, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let script = Script::builder()
                    .approval([ApprovalCall::new(
                        "call_1".parse().unwrap(),
                        "shell",
                        json!({"cmd": "ls"}),
                    )])
                    .complete("done")
                    .build();
                let adapter = ScriptedAdapter::new(script);
                let mut service = HarnessStack::defaults_for(&adapter)
                    .unwrap()
                    .service(adapter);
                let before = alive();
                let mut handles = Vec::new();
                for i in 0..EXECUTIONS {
                    let request = ExecutionRequest::new(format!("go {i}"));
                    handles.push(service.ready().await.unwrap().call(request).await.unwrap());
                }
                settle(&handles, ExecutionState::AwaitingApproval).await;
                assert_eq!(alive() - before, EXECUTIONS, "tasks per running execution");
                for handle in &handles {
                    handle.cancel(CancelReason::new("done"));
                }
                for handle in &handles {
                    handle.outcome().await;
                }
                // The drivers return right after the terminal event.
                for _ in 0..10 {
                    tokio::task::yield_now().await;
                }
                assert_eq!(alive(), before, "tasks left after every execution ended");
            });
    });
}
