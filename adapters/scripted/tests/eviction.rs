//! The service's pool of paused runtimes over the scripted adapter: a paused runtime pushed
//! out of the pool (or idle too long) is cleaned up, and the answer restores the pause on a
//! fresh runtime, once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use harness_core::action::{ActionRequest, FieldKind, FormField, FormResponse, FormValues};
use harness_core::adapter::{
    AgentConfig, BoxFuture, BoxStream, CancelResult, DeploymentContext, EventResult,
    HarnessAdapter, HarnessRuntime, Restored, ResumeDecision, RuntimeContext, RuntimeIdentity,
    RuntimeInit, TurnInput,
};
use harness_core::capability::CapabilityReport;
use harness_core::error::{ErrorCode, HarnessError};
use harness_core::event::{CancelReason, EventPayload};
use harness_core::id::{ConversationId, Cursor};
use harness_core::manifest::{Describe, HarnessDescriptor};
use harness_core::service::{
    AdapterService, ExecutionHandle, ExecutionRequest, Outcome, RuntimePoolConfig, ServiceConfig,
};
use harness_core::session::Conversation;
use harness_core::store::{MemoryStore, ReplicaId};
use harness_scripted::{ApprovalCall, Script, ScriptedAdapter, ScriptedOptions};

fn request(script: Script) -> ExecutionRequest {
    ExecutionRequest::new("go").with_options(ScriptedOptions::with_script(script).to_value())
}

fn pool(max_idle: usize, idle_timeout: Duration) -> ServiceConfig {
    ServiceConfig {
        runtime_pool: RuntimePoolConfig::new(max_idle, idle_timeout),
        ..ServiceConfig::default()
    }
}

const LONG: Duration = Duration::from_secs(3600);

fn call(id: &str) -> ApprovalCall {
    ApprovalCall::new(
        id.parse().unwrap(),
        "shell",
        serde_json::json!({"cmd": "ls"}),
    )
    .with_output(serde_json::json!("listed"))
}

/// Remembers `marker`, pauses on an approval, then says "after" and recalls.
fn paused_turn(marker: &str) -> Script {
    Script::builder()
        .remember(marker)
        .approval([call("call_1")])
        .text("after|")
        .recall()
        .complete("done")
        .build()
}

fn recall() -> Script {
    Script::builder().recall().complete("told").build()
}

async fn outcome(handle: &ExecutionHandle) -> Outcome {
    tokio::time::timeout(Duration::from_secs(20), handle.outcome())
        .await
        .expect("an outcome within 20 s")
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

fn count(handle: &ExecutionHandle, kind: &str) -> usize {
    handle
        .log()
        .snapshot(Cursor::START)
        .iter()
        .filter(|e| e.kind().as_str() == kind)
        .count()
}

/// The `n`-th action the execution asks for (from 1).
async fn nth_action(handle: &ExecutionHandle, n: usize) -> ActionRequest {
    let mut events = handle.events(Cursor::START);
    let mut seen = 0;
    tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(e) = events.next().await {
            if let EventPayload::ActionRequested(a) = e.payload() {
                seen += 1;
                if seen == n {
                    return (**a).clone();
                }
            }
        }
        panic!("ended without action {n}")
    })
    .await
    .expect("an action within 20 s")
}

async fn action(handle: &ExecutionHandle) -> ActionRequest {
    nth_action(handle, 1).await
}

/// Waits until `check` holds (the driver cleans an evicted runtime up on its own task).
async fn until(what: &str, check: impl Fn() -> bool) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !check() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what} within 10 s"));
}

#[tokio::test]
async fn an_answer_after_eviction_resumes_the_run_on_a_fresh_runtime_exactly_once() {
    let adapter = ScriptedAdapter::quickstart();
    let stats = adapter.stats();
    let service = AdapterService::with_config(adapter, pool(2, LONG));
    let a = ConversationId::generate();
    let first = service
        .start(request(paused_turn("kept-by-a")).with_conversation(a.clone()))
        .await
        .unwrap();
    let asked = action(&first).await;
    assert_eq!(service.runtime_pool().unwrap().idle, 1);

    // Two more conversations pause: the pool of 2 pushes out the one paused longest, a's.
    let mut others = Vec::new();
    for _ in 0..2 {
        let h = service
            .start(request(paused_turn("other")).with_conversation(ConversationId::generate()))
            .await
            .unwrap();
        action(&h).await;
        others.push(h);
    }
    until("a's runtime cleaned up", || {
        stats.snapshot().live_runtimes() == 2
    })
    .await;
    let pooled = service.runtime_pool().unwrap();
    assert_eq!((pooled.idle, pooled.evictions), (2, 1));
    // Nothing of the eviction reaches the log: a still awaits its answer.
    assert_eq!(
        first.state(),
        harness_core::lifecycle::ExecutionState::AwaitingApproval
    );
    assert_eq!(stats.snapshot().runtimes_created, 3);

    // The answer restores the pause on a fresh runtime and the run goes on from it, once.
    first.respond(asked.approve_all()).await.unwrap();
    assert!(matches!(outcome(&first).await, Outcome::Succeeded(_)));
    assert_eq!(text(&first), "after|kept-by-a");
    assert_eq!(count(&first, "tool.call.completed"), 1);
    assert_eq!(count(&first, "action.resolved"), 1);
    assert_eq!(stats.snapshot().runtimes_created, 4);
    let again = first.respond(asked.approve_all()).await.unwrap_err();
    assert_eq!(*again.code(), ErrorCode::ACTION_ALREADY_RESOLVED);

    // The conversation's next turn sees what it kept before the eviction.
    let next = service
        .start(request(recall()).with_conversation(a))
        .await
        .unwrap();
    assert!(matches!(outcome(&next).await, Outcome::Succeeded(_)));
    assert_eq!(text(&next), "kept-by-a");

    // The two others, still pooled, resume on the runtimes they paused on.
    for h in &others {
        h.respond(action(h).await.approve_all()).await.unwrap();
        assert!(matches!(outcome(h).await, Outcome::Succeeded(_)));
    }
    assert_eq!(stats.snapshot().runtimes_created, 5);
    assert_eq!(stats.snapshot().live_runtimes(), 0);
    assert_eq!(service.runtime_pool().unwrap().idle, 0);
}

#[tokio::test]
async fn a_runtime_idle_past_the_timeout_is_evicted_and_restored_with_earlier_form_values() {
    let adapter = ScriptedAdapter::quickstart();
    let stats = adapter.stats();
    let service = AdapterService::with_config(adapter, pool(16, Duration::from_millis(50)));
    let script = Script::builder()
        .form([FormField::new(
            "name".parse().unwrap(),
            "Name",
            FieldKind::text(),
        )])
        .approval([call("call_1")])
        .text("hello {{name}}")
        .complete("done")
        .build();
    let h = service.start(request(script)).await.unwrap();
    let form = action(&h).await;
    // The form's pause is evicted too, before the answer.
    until("the form's runtime evicted", || {
        stats.snapshot().live_runtimes() == 0
    })
    .await;
    h.respond(
        FormResponse::submit(
            form.id.clone(),
            form.revision,
            FormValues::new().with("name", "Ada"),
        )
        .into(),
    )
    .await
    .unwrap();
    let approval = nth_action(&h, 2).await;
    until("the approval's runtime evicted", || {
        stats.snapshot().live_runtimes() == 0 && service.runtime_pool().unwrap().evictions == 2
    })
    .await;
    h.respond(approval.approve_all()).await.unwrap();
    assert!(matches!(outcome(&h).await, Outcome::Succeeded(_)));
    // The value of the form, answered to another runtime, fills the placeholder.
    assert_eq!(text(&h), "hello Ada");
    assert_eq!(stats.snapshot().runtimes_created, 3);
    assert_eq!(stats.snapshot().live_runtimes(), 0);
}

#[tokio::test]
async fn a_cancel_after_eviction_ends_the_run_without_touching_the_released_runtime() {
    let adapter = ScriptedAdapter::quickstart();
    let stats = adapter.stats();
    let service = AdapterService::with_config(adapter, pool(0, LONG));
    let h = service
        .start(request(paused_turn("x")).with_conversation(ConversationId::generate()))
        .await
        .unwrap();
    action(&h).await;
    until("evicted at once", || stats.snapshot().live_runtimes() == 0).await;
    h.cancel(CancelReason::new("no longer needed"));
    assert!(matches!(outcome(&h).await, Outcome::Cancelled(_)));
    let s = stats.snapshot();
    assert_eq!((s.runtimes_created, s.cleanups, s.cancel_calls), (1, 1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_execution_evicted_on_one_replica_is_answered_through_another() {
    let store = Arc::new(MemoryStore::new());
    let adapter = ScriptedAdapter::quickstart();
    let stats = adapter.stats();
    let a = AdapterService::builder(adapter)
        .config(pool(1, LONG))
        .durable(Arc::clone(&store), ReplicaId::new("a"))
        .build();
    let b = AdapterService::builder(ScriptedAdapter::quickstart())
        .durable(Arc::clone(&store), ReplicaId::new("b"))
        .build();
    let conversation = ConversationId::generate();
    let first = a
        .start(request(paused_turn("durable")).with_conversation(conversation.clone()))
        .await
        .unwrap();
    let asked = action(&first).await;
    let second = a
        .start(request(paused_turn("other")).with_conversation(ConversationId::generate()))
        .await
        .unwrap();
    action(&second).await;
    until("the first runtime evicted", || {
        stats.snapshot().live_runtimes() == 1
    })
    .await;

    // The answer, sent to replica b, is recorded in the store; a applies it on a fresh
    // runtime that restores the pause from the stored log.
    b.respond_to(first.id(), asked.approve_all()).await.unwrap();
    assert!(matches!(outcome(&first).await, Outcome::Succeeded(_)));
    assert_eq!(text(&first), "after|durable");
    let again = b
        .respond_to(first.id(), asked.approve_all())
        .await
        .unwrap_err();
    assert_eq!(*again.code(), ErrorCode::ACTION_ALREADY_RESOLVED);
    let stored = b
        .read_events(first.id(), Cursor::START, 10_000)
        .await
        .unwrap();
    let terminal = stored.iter().filter(|e| e.kind().is_terminal()).count();
    assert_eq!(terminal, 1);
    assert!(
        stored
            .windows(2)
            .all(|w| w[1].seq().get() == w[0].seq().get() + 1)
    );

    // The conversation's next turn, on replica b, sees what it kept.
    let next = b
        .start(request(recall()).with_conversation(conversation))
        .await
        .unwrap();
    assert!(matches!(outcome(&next).await, Outcome::Succeeded(_)));
    assert_eq!(text(&next), "durable");
    second
        .respond(action(&second).await.approve_all())
        .await
        .unwrap();
    assert!(matches!(outcome(&second).await, Outcome::Succeeded(_)));
}

/// The scripted adapter, counting the live runtimes of each conversation: one created and
/// not yet cleaned up is live. `max` is the most any conversation had at once.
#[derive(Clone)]
struct Counting {
    inner: ScriptedAdapter,
    live: Arc<Mutex<HashMap<Conversation, i64>>>,
    max: Arc<AtomicI64>,
}

impl Describe for Counting {
    fn descriptor(&self) -> &HarnessDescriptor {
        self.inner.descriptor()
    }
}

impl HarnessAdapter for Counting {
    fn evaluate<'a>(
        &'a self,
        config: &'a AgentConfig,
        deployment: &'a DeploymentContext,
    ) -> BoxFuture<'a, Result<CapabilityReport, HarnessError>> {
        self.inner.evaluate(config, deployment)
    }

    fn create_runtime(
        &self,
        context: RuntimeContext,
    ) -> BoxFuture<'_, Result<Box<dyn HarnessRuntime>, HarnessError>> {
        Box::pin(async move {
            let conversation = context.config.conversation.clone();
            let inner = self.inner.create_runtime(context).await?;
            if let Some(c) = &conversation {
                let mut live = self.live.lock().unwrap();
                let n = live.entry(c.clone()).or_default();
                *n += 1;
                self.max.fetch_max(*n, Ordering::SeqCst);
            }
            Ok(Box::new(Counted {
                inner,
                conversation,
                live: Arc::clone(&self.live),
                cleaned: std::sync::atomic::AtomicBool::new(false),
            }) as Box<dyn HarnessRuntime>)
        })
    }
}

struct Counted {
    inner: Box<dyn HarnessRuntime>,
    conversation: Option<Conversation>,
    live: Arc<Mutex<HashMap<Conversation, i64>>>,
    cleaned: std::sync::atomic::AtomicBool,
}

impl HarnessRuntime for Counted {
    fn identity(&self) -> RuntimeIdentity {
        self.inner.identity()
    }
    fn initialize(&self) -> BoxFuture<'_, Result<RuntimeInit, HarnessError>> {
        self.inner.initialize()
    }
    fn stream(&self, turn: TurnInput) -> BoxStream<'_, EventResult> {
        self.inner.stream(turn)
    }
    fn resume(&self, decision: ResumeDecision) -> BoxStream<'_, EventResult> {
        self.inner.resume(decision)
    }
    fn pending_action(&self) -> BoxFuture<'_, Option<ActionRequest>> {
        self.inner.pending_action()
    }
    fn cancel(&self, reason: CancelReason) -> BoxFuture<'_, CancelResult> {
        self.inner.cancel(reason)
    }
    fn restart(&self) -> BoxFuture<'_, Result<(), HarnessError>> {
        self.inner.restart()
    }
    fn cleanup(&self) -> BoxFuture<'_, ()> {
        if !self.cleaned.swap(true, Ordering::SeqCst)
            && let Some(c) = &self.conversation
        {
            *self.live.lock().unwrap().entry(c.clone()).or_default() -= 1;
        }
        self.inner.cleanup()
    }
    fn restore(&self, restored: Restored) -> BoxFuture<'_, Result<(), HarnessError>> {
        self.inner.restore(restored)
    }
    fn restorable(&self) -> bool {
        self.inner.restorable()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_conversations_on_a_small_pool_lose_no_turn_and_never_hold_two_runtimes() {
    const CONVERSATIONS: usize = 200;
    const POOL: usize = 4;
    let inner = ScriptedAdapter::quickstart();
    let stats = inner.stats();
    let adapter = Counting {
        inner,
        live: Arc::default(),
        max: Arc::default(),
    };
    let max = Arc::clone(&adapter.max);
    let service = AdapterService::with_config(adapter, pool(POOL, LONG));
    let mut tasks = Vec::new();
    for i in 0..CONVERSATIONS {
        let service = service.clone();
        tasks.push(tokio::spawn(async move {
            let conversation = ConversationId::generate();
            let marker = format!("m{i}");
            let h = service
                .start(request(paused_turn(&marker)).with_conversation(conversation.clone()))
                .await
                .unwrap();
            let asked = action(&h).await;
            // Let the others pause meanwhile, pushing this runtime out (or not).
            for _ in 0..(i % 7) {
                tokio::task::yield_now().await;
            }
            // Two answers at once: exactly one is accepted.
            let (x, y) = tokio::join!(
                h.respond(asked.approve_all()),
                h.respond(asked.approve_all())
            );
            assert!(x.is_ok() != y.is_ok(), "one answer wins: {x:?} {y:?}");
            assert!(matches!(outcome(&h).await, Outcome::Succeeded(_)));
            assert_eq!(text(&h), format!("after|{marker}"));
            assert_eq!(count(&h, "tool.call.completed"), 1);
            // The next turn sees this conversation's state, and only it.
            let next = service
                .start(request(recall()).with_conversation(conversation))
                .await
                .unwrap();
            assert!(matches!(outcome(&next).await, Outcome::Succeeded(_)));
            assert_eq!(text(&next), marker);
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let pooled = service.runtime_pool().unwrap();
    assert_eq!(pooled.idle, 0);
    assert!(
        pooled.evictions > 0,
        "the pool of {POOL} evicted paused runtimes"
    );
    assert_eq!(
        max.load(Ordering::SeqCst),
        1,
        "one runtime per conversation"
    );
    assert_eq!(stats.snapshot().live_runtimes(), 0);
    let s = stats.snapshot();
    // A turn each, a recall each, and a restore per eviction.
    assert_eq!(
        s.runtimes_created,
        2 * CONVERSATIONS as u64 + pooled.evictions
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_log_past_its_memory_window_is_read_back_from_the_store_to_restore() {
    let store = Arc::new(MemoryStore::new());
    let adapter = ScriptedAdapter::quickstart();
    let stats = adapter.stats();
    let service = AdapterService::builder(adapter)
        .config(pool(0, LONG))
        .durable(Arc::clone(&store), ReplicaId::new("a"))
        .memory_window(1024)
        .build();
    // Two pauses, thousands of events before each: the first pauses are out of memory.
    let script = Script::builder()
        .text_repeated("x", 3000)
        .approval([call("call_1")])
        .text_repeated("y", 3000)
        .approval([call("call_2")])
        .text("|done")
        .complete("done")
        .build();
    let h = service.start(request(script)).await.unwrap();
    let first = action(&h).await;
    until("evicted at once", || stats.snapshot().live_runtimes() == 0).await;
    h.respond(first.approve_all()).await.unwrap();
    let second = nth_action(&h, 2).await;
    until("evicted again", || {
        stats.snapshot().live_runtimes() == 0 && service.runtime_pool().unwrap().evictions == 2
    })
    .await;
    assert!(
        h.log().first_held() > 1,
        "the log's start is in the store only"
    );
    h.respond(second.approve_all()).await.unwrap();
    assert!(matches!(outcome(&h).await, Outcome::Succeeded(_)));
    let stored = service
        .read_events(h.id(), Cursor::START, 100_000)
        .await
        .unwrap();
    let completed = stored
        .iter()
        .filter(|e| e.kind().as_str() == "tool.call.completed")
        .count();
    assert_eq!(completed, 2);
    assert_eq!(stored.last().unwrap().kind().as_str(), "run.succeeded");
    assert_eq!(stats.snapshot().runtimes_created, 3);
}
