//! `remember` and `recall` through the conversation's thread state, and a paused script
//! taken over by another replica.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use harness_core::action::{ActionRequest, FieldKind, FormField, FormResponse, FormValues};
use harness_core::error::ErrorCategory;
use harness_core::event::EventPayload;
use harness_core::id::{ConversationId, Cursor, ExecutionId};
use harness_core::service::{AdapterService, ExecutionHandle, ExecutionRequest, Outcome, Recovery};
use harness_core::store::{MemoryStore, ReplicaId};
use harness_scripted::{ApprovalCall, MAX_MEMORY, Script, ScriptedAdapter, ScriptedOptions};

fn request(script: Script) -> ExecutionRequest {
    ExecutionRequest::new("go").with_options(ScriptedOptions::with_script(script).to_value())
}

/// A durable scripted service: replica `name` over `store`.
fn replica(
    store: &Arc<MemoryStore>,
    name: &str,
    lease: Duration,
) -> AdapterService<ScriptedAdapter> {
    AdapterService::builder(ScriptedAdapter::quickstart())
        .durable(Arc::clone(store), ReplicaId::new(name))
        .lease_ttl(lease)
        .build()
}

async fn outcome(handle: &ExecutionHandle) -> Outcome {
    tokio::time::timeout(Duration::from_secs(10), handle.outcome())
        .await
        .expect("an outcome within 10 s")
}

fn text(handle: &ExecutionHandle) -> String {
    handle
        .log()
        .snapshot(Cursor::START)
        .iter()
        .filter_map(|e| match e.payload() {
            EventPayload::MessageDelta(d) => Some(d.text.clone()),
            _ => None,
        })
        .collect()
}

async fn action(handle: &ExecutionHandle) -> ActionRequest {
    let mut events = handle.events(Cursor::START);
    tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(e) = events.next().await {
            if let EventPayload::ActionRequested(a) = e.payload() {
                return (**a).clone();
            }
        }
        panic!("ended without an action")
    })
    .await
    .expect("an action within 10 s")
}

#[tokio::test]
async fn a_conversation_recalls_what_it_remembered_and_only_it() {
    let service = AdapterService::new(ScriptedAdapter::quickstart());
    let (a, b) = (ConversationId::generate(), ConversationId::generate());
    let remember = |t: &str| request(Script::builder().remember(t).complete("kept").build());
    let recall = || request(Script::builder().recall().complete("told").build());
    for t in ["one", "two"] {
        let h = service
            .start(remember(t).with_conversation(a.clone()))
            .await
            .unwrap();
        assert!(matches!(outcome(&h).await, Outcome::Succeeded(_)));
    }
    let h = service
        .start(recall().with_conversation(a.clone()))
        .await
        .unwrap();
    assert!(matches!(outcome(&h).await, Outcome::Succeeded(_)));
    assert_eq!(text(&h), "one\ntwo");
    let h = service.start(recall().with_conversation(b)).await.unwrap();
    assert!(matches!(outcome(&h).await, Outcome::Succeeded(_)));
    assert_eq!(text(&h), "", "another conversation recalls nothing");

    // Without a conversation there is nothing to keep: refused, naming what is missing.
    let h = service.start(remember("lost")).await.unwrap();
    let Outcome::Failed(e) = outcome(&h).await else {
        panic!("remember without a conversation must fail")
    };
    assert_eq!(e.category(), ErrorCategory::Configuration);
    assert!(e.message().contains("conversation"), "{}", e.message());

    // A conversation keeps at most MAX_MEMORY bytes: filling it exactly is fine, one byte
    // more fails the turn.
    let fill = "x".repeat(MAX_MEMORY - "onetwo".len());
    let h = service
        .start(remember(&fill).with_conversation(a.clone()))
        .await
        .unwrap();
    assert!(matches!(outcome(&h).await, Outcome::Succeeded(_)));
    let h = service
        .start(remember("y").with_conversation(a.clone()))
        .await
        .unwrap();
    let Outcome::Failed(e) = outcome(&h).await else {
        panic!("over the memory bound must fail")
    };
    assert_eq!(e.category(), ErrorCategory::Configuration);
    assert!(e.message().contains("at most"), "{}", e.message());
}

/// A form then an approval: replica `a` takes the form's answer, pauses on the approval and
/// dies (its runtime shut down where it stands). Returns the execution.
async fn paused_on_a_dying_replica(store: &Arc<MemoryStore>, lease: Duration) -> ExecutionId {
    let script = Script::builder()
        .form([FormField::new(
            "name".parse().unwrap(),
            "Name",
            FieldKind::text(),
        )])
        .text("hello {{name}}")
        .approval([ApprovalCall::new(
            "call_1".parse().unwrap(),
            "shell",
            serde_json::json!({"cmd": "ls"}),
        )])
        .text(" bye {{name}}")
        .complete("done")
        .build();
    let store = Arc::clone(store);
    let request = request(script);
    tokio::task::spawn_blocking(move || {
        let dying = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let a = replica(&store, "a", lease);
        let (handle, id) = dying.block_on(async {
            let handle = a.start(request).await.unwrap();
            let form = action(&handle).await;
            handle
                .respond(
                    FormResponse::submit(
                        form.id.clone(),
                        form.revision,
                        FormValues::new().with("name", "Ada"),
                    )
                    .into(),
                )
                .await
                .unwrap();
            // Until the approval is stored (readers see only stored events).
            let mut events = handle.events(Cursor::START);
            let mut asked = 0;
            while let Some(e) = events.next().await {
                if matches!(e.payload(), EventPayload::RunAwaitingApproval(_)) {
                    break;
                }
                if matches!(e.payload(), EventPayload::ActionRequested(_)) {
                    asked += 1;
                }
            }
            assert_eq!(asked, 2);
            let id = handle.id().clone();
            (handle, id)
        });
        dying.shutdown_background();
        drop((handle, a));
        id
    })
    .await
    .unwrap()
}

/// Replica `b` restores the execution; the answer sent to `b` resumes the script after the
/// approval, with the form's value (from the store) filling a later placeholder.
async fn resumed_on(b: &AdapterService<ScriptedAdapter>, id: &ExecutionId) {
    assert_eq!(b.recover().await.unwrap(), [Recovery::Restored(id.clone())]);
    let attached = b.attach(id).await.unwrap();
    let mut events = attached.events(Cursor::START);
    let mut approval = None;
    while let Some(e) = events.next().await {
        if let EventPayload::ActionRequested(a) = e.payload()
            && matches!(a.kind, harness_core::action::ActionKind::ToolApproval(_))
        {
            approval = Some((**a).clone());
            break;
        }
    }
    let approval = approval.expect("the approval");
    b.respond_to(id, approval.approve_all()).await.unwrap();
    assert!(matches!(outcome(&attached).await, Outcome::Succeeded(_)));
    assert_eq!(text(&attached), "hello Ada bye Ada");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_script_resumes_on_another_replica_with_its_earlier_form_values() {
    let store = Arc::new(MemoryStore::new());
    let lease = Duration::from_millis(200);
    let id = paused_on_a_dying_replica(&store, lease).await;
    let b = replica(&store, "b", lease);
    // Another replica waits for the dead one's lease to lapse.
    assert_eq!(b.recover().await.unwrap(), []);
    tokio::time::sleep(lease * 2).await;
    resumed_on(&b, &id).await;
}

/// A process restarted under the dead one's replica name takes its executions over at once:
/// their leases are its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_restarted_under_its_name_takes_its_paused_executions_over_at_once() {
    let store = Arc::new(MemoryStore::new());
    let lease = Duration::from_secs(60);
    let id = paused_on_a_dying_replica(&store, lease).await;
    let restarted = replica(&store, "a", lease);
    resumed_on(&restarted, &id).await;
}

/// Two recoveries at once on one service (one replica, one lease owner): one takes the
/// paused execution over, the other leaves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_recoveries_at_once_on_one_service_take_a_paused_execution_over_once() {
    let store = Arc::new(MemoryStore::new());
    let lease = Duration::from_secs(60);
    let id = paused_on_a_dying_replica(&store, lease).await;
    let restarted = replica(&store, "a", lease);
    let (one, two) = tokio::join!(restarted.recover(), restarted.recover());
    let mut all = one.unwrap();
    all.extend(two.unwrap());
    assert_eq!(all, [Recovery::Restored(id.clone())]);
    // And later ones leave it alone: it is live here.
    assert_eq!(restarted.recover().await.unwrap(), []);
}
