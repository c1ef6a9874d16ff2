//! The caller's interrupt policy on the scripted adapter: a pause it forbids fails the run
//! (`INTERRUPT_FORBIDDEN`) with the events before it kept and no action opened, and an answer deadline survives
//! a takeover: a replica that takes a paused execution over expires its action when the
//! deadline counted from `action.requested` passes, not a fresh window later.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use harness_core::action::{ActionType, FieldKind, FormField};
use harness_core::context::InterruptPolicy;
use harness_core::error::ErrorCode;
use harness_core::event::EventPayload;
use harness_core::id::Cursor;
use harness_core::service::{AdapterService, ExecutionRequest, Outcome, Recovery};
use harness_core::store::{MemoryStore, ReplicaId};
use harness_scripted::{ApprovalCall, Script, ScriptedAdapter, ScriptedOptions};

fn request(script: Script, policy: InterruptPolicy) -> ExecutionRequest {
    ExecutionRequest::new("go")
        .with_options(ScriptedOptions::with_script(script).to_value())
        .with_interrupt_policy(policy)
}

fn form_script() -> Script {
    Script::builder()
        .text("before")
        .form([FormField::new(
            "name".parse().unwrap(),
            "Name",
            FieldKind::text(),
        )])
        .complete("done")
        .build()
}

#[tokio::test]
async fn a_forbidden_approval_fails_the_run_after_the_text_before_it() {
    let script = Script::builder()
        .text("before")
        .approval([ApprovalCall::new(
            "call_1".parse().unwrap(),
            "shell",
            serde_json::json!({"cmd": "ls"}),
        )])
        .complete("done")
        .build();
    let service = AdapterService::new(ScriptedAdapter::quickstart());
    let handle = service
        .start(request(
            script,
            InterruptPolicy::allowing([ActionType::FormInput]),
        ))
        .await
        .unwrap();
    let Outcome::Failed(err) = handle.outcome().await else {
        panic!("the approval must fail the run");
    };
    assert_eq!(err.code(), &ErrorCode::INTERRUPT_FORBIDDEN);
    assert!(err.message().contains("tool_approval"), "{}", err.message());
    let kinds: Vec<_> = handle
        .log()
        .snapshot(Cursor::START)
        .iter()
        .map(|e| e.kind().as_str())
        .collect();
    // The script announces the call it asks about, then asks: the ask is refused, never
    // opened, and the call never runs.
    assert_eq!(
        kinds,
        [
            "run.queued",
            "run.starting",
            "run.running",
            "message.delta",
            "tool.call.started",
            "run.failed"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_over_pause_keeps_its_answer_deadline() {
    let within = Duration::from_millis(2500);
    let store = Arc::new(MemoryStore::new());
    let replica = |store: &Arc<MemoryStore>| {
        AdapterService::builder(ScriptedAdapter::quickstart())
            .durable(Arc::clone(store), ReplicaId::new("a"))
            .lease_ttl(Duration::from_secs(60))
            .build()
    };
    // Replica `a` pauses on the form and dies.
    let dying_store = Arc::clone(&store);
    let id = tokio::task::spawn_blocking(move || {
        let dying = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let a = replica(&dying_store);
        let id = dying.block_on(async {
            let handle = a
                .start(request(
                    form_script(),
                    InterruptPolicy::permit_all().with_answer_within(within),
                ))
                .await
                .unwrap();
            let mut events = handle.events(Cursor::START);
            while let Some(e) = events.next().await {
                if matches!(e.payload(), EventPayload::RunAwaitingInput(_)) {
                    break;
                }
            }
            handle.id().clone()
        });
        dying.shutdown_background();
        id
    })
    .await
    .unwrap();
    let paused_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Restarted under its name, it takes the execution over at once.
    let restarted = replica(&store);
    assert_eq!(
        restarted.recover().await.unwrap(),
        [Recovery::Restored(id.clone())]
    );
    let recovered_at = Instant::now();
    let attached = restarted.attach(&id).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(10), attached.outcome())
        .await
        .expect("the execution ends");
    let Outcome::Failed(err) = outcome else {
        panic!("the action must expire: {outcome:?}");
    };
    assert_eq!(err.code(), &ErrorCode::ACTION_EXPIRED);
    let after_recovery = recovered_at.elapsed();
    assert!(
        after_recovery < within - Duration::from_millis(700),
        "the deadline restarted on takeover: expired {after_recovery:?} after it"
    );
    assert!(paused_at.elapsed() >= within - Duration::from_millis(100));
}
