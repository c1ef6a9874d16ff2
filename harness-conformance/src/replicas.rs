//! Group 5 fixtures over the service's stores: clearing a session, state that outlived its
//! runtime (a replica gone, another one over the same store), a paused run resumed on
//! another replica, and a replica fenced off by its lease.
//!
//! Each replica is an [`AdapterService`] of its own over a fresh adapter from the knobs; the
//! replicas of one fixture share a [`MemoryStore`] (executions and thread state), as
//! replicas share a database. A replica that *dies* runs on a Tokio runtime of its own,
//! shut down with its work mid-flight: nothing of it is left to release a lease or end a
//! log, as after a `SIGKILL`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use harness_core::action::{ActionKind, ActionRequest, Decision};
use harness_core::adapter::{BoxFuture, HarnessAdapter};
use harness_core::error::{ErrorCategory, ErrorCode};
use harness_core::event::{Event, EventKind, EventPayload};
use harness_core::id::{ActionId, ConversationId, Cursor, ExecutionId};
use harness_core::service::{AdapterService, ExecutionRequest, Outcome, Recovery};
use harness_core::store::{
    Created, ExecutionRecord, ExecutionStore, Lease, MemoryStore, ReplicaId, Resolution,
    StoreError, Tail,
};

use crate::probe::{self, Observed};
use crate::sessions::message_text;
use crate::{Bounds, Knobs};

type Verdict = Result<String, String>;

/// The lease term of the fixtures' replicas: short, so a lost replica's executions are free
/// soon.
const LEASE: Duration = Duration::from_millis(300);

/// A replica of the fixture: its own service over a fresh adapter, on `store`.
fn replica<Kn: Knobs>(
    knobs: &Kn,
    store: &Arc<MemoryStore>,
    name: &str,
) -> AdapterService<Kn::Adapter> {
    probe::builder(knobs.adapter(), knobs.bounds())
        .durable(Arc::clone(store), ReplicaId::new(name))
        .lease_ttl(LEASE)
        .build()
}

/// Runs `request` on `conversation` to its end, keeping the log rules.
async fn turn<A: HarnessAdapter>(
    service: &AdapterService<A>,
    request: ExecutionRequest,
    conversation: &ConversationId,
    which: &str,
    bounds: Bounds,
) -> Result<Observed, String> {
    let obs = probe::run_to_end(
        service,
        request.with_conversation(conversation.clone()),
        bounds,
    )
    .await
    .map_err(|e| format!("{which}: {e}"))?;
    obs.check_log().map_err(|e| format!("{which}: {e}"))?;
    Ok(obs)
}

fn succeeded(obs: &Observed, which: &str) -> Result<(), String> {
    match &obs.outcome {
        Outcome::Succeeded(_) => Ok(()),
        _ => Err(format!("{which} ended {}, not succeeded", obs.ended())),
    }
}

/// `session.clear`: a conversation remembers (its later turn recalls the marker), is
/// cleared through the service, and its next turn recalls nothing of it.
pub(crate) async fn clear<Kn: Knobs>(
    knobs: &Kn,
    marker: &str,
    remember: ExecutionRequest,
    recall: ExecutionRequest,
) -> Verdict {
    let b = knobs.bounds();
    let service = probe::service(knobs.adapter(), b);
    let conversation = ConversationId::generate();
    let kept = turn(&service, remember, &conversation, "the remembering turn", b).await?;
    succeeded(&kept, "the remembering turn")?;
    let before = turn(
        &service,
        recall.clone(),
        &conversation,
        "the recalling turn before the clear",
        b,
    )
    .await?;
    succeeded(&before, "the recalling turn before the clear")?;
    if !message_text(&before).contains(marker) {
        return Err(
            "the conversation forgot the marker before any clear: a clear cannot be told \
             from forgetting (see session.multi_turn)"
                .to_owned(),
        );
    }
    let cleared = service
        .clear_session(&harness_core::session::Conversation::anonymous(
            conversation.clone(),
        ))
        .await
        .map_err(|e| format!("clear_session failed: {e}"))?;
    let after = turn(
        &service,
        recall,
        &conversation,
        "the recalling turn after the clear",
        b,
    )
    .await?;
    succeeded(&after, "the recalling turn after the clear")?;
    if let Some(at) = after.leaks(marker) {
        return Err(format!(
            "the cleared session still remembered: the turn after the clear saw the marker, \
             at {at}"
        ));
    }
    Ok(format!(
        "remembered, recalled, cleared (binding epoch now {}), then recalled nothing",
        cleared.epoch()
    ))
}

/// `session.expired_state`: a conversation remembers on replica `a`; `a` and its adapter
/// are gone (every runtime, process and in-memory map with them); its next turn, on replica
/// `b` over the same store, either restores what was kept (the marker) or refuses with a
/// `persistence` error. Succeeding without the marker (silently starting afresh) fails.
pub(crate) async fn expired_state<Kn: Knobs>(
    knobs: &Kn,
    marker: &str,
    remember: ExecutionRequest,
    recall: ExecutionRequest,
) -> Verdict {
    let b = knobs.bounds();
    let store = Arc::new(MemoryStore::new());
    let conversation = ConversationId::generate();
    {
        let a = replica(knobs, &store, "conformance-a");
        let kept = turn(&a, remember, &conversation, "the remembering turn on a", b).await?;
        succeeded(&kept, "the remembering turn on a")?;
    }
    let b_replica = replica(knobs, &store, "conformance-b");
    let later = turn(
        &b_replica,
        recall,
        &conversation,
        "the recalling turn on b",
        b,
    )
    .await?;
    match &later.outcome {
        Outcome::Succeeded(_) if message_text(&later).contains(marker) => Ok(
            "restored: replica a gone, the conversation's turn on replica b recalled what a kept"
                .to_owned(),
        ),
        Outcome::Succeeded(_) => Err(
            "state silently lost: replica a gone, the conversation's turn on replica b \
             succeeded without what a kept (restore it, or refuse with a persistence error)"
                .to_owned(),
        ),
        Outcome::Failed(e) if e.category() == ErrorCategory::Persistence => Ok(format!(
            "refused: replica a gone, the conversation's turn on replica b failed \
             persistence/{}",
            e.code()
        )),
        _ => Err(format!(
            "the conversation's turn on replica b ended {}: neither restored nor refused as \
             persistence",
            later.ended()
        )),
    }
}

/// What a later turn of a conversation whose state was lost made of it: restored (the
/// marker recalled) or refused `persistence`; succeeding without the marker fails.
fn restored_or_refused(later: &Observed, marker: &str, what: &str) -> Verdict {
    match &later.outcome {
        Outcome::Succeeded(_) if message_text(later).contains(marker) => {
            Ok(format!("{what}: restored (the marker recalled)"))
        }
        Outcome::Succeeded(_) => Err(format!(
            "state silently lost: {what}, the conversation's next turn succeeded without what \
             was kept (restore it, or refuse with a persistence error)"
        )),
        Outcome::Failed(e) if e.category() == ErrorCategory::Persistence => {
            Ok(format!("{what}: refused persistence/{}", e.code()))
        }
        _ => Err(format!(
            "{what}, the conversation's next turn ended {}: neither restored nor refused as \
             persistence",
            later.ended()
        )),
    }
}

/// `session.expired_state`, second part: the provider's own (native) state of a
/// conversation expires ([`Knobs::expire_native_state`]); the next turn, on a fresh replica
/// over the same store, restores it or refuses `persistence`. `None` when the provider
/// keeps no native state of its own.
pub(crate) async fn expired_native_state<Kn: Knobs>(
    knobs: &Kn,
    marker: &str,
    remember: ExecutionRequest,
    recall: ExecutionRequest,
) -> Result<Option<String>, String> {
    let b = knobs.bounds();
    let store = Arc::new(MemoryStore::new());
    let conversation = ConversationId::generate();
    {
        let a = replica(knobs, &store, "conformance-native-a");
        let kept = turn(&a, remember, &conversation, "the remembering turn", b).await?;
        succeeded(&kept, "the remembering turn")?;
    }
    if !knobs.expire_native_state() {
        return Ok(None);
    }
    let later_replica = replica(knobs, &store, "conformance-native-b");
    let later = turn(
        &later_replica,
        recall,
        &conversation,
        "the turn after the native state expired",
        b,
    )
    .await?;
    restored_or_refused(&later, marker, "the provider's native state expired").map(Some)
}

/// `thread.durable_commit`: a turn's state is committed when its terminal event is: the
/// replica that ran it is dropped at once (service, adapter, runtimes), and a fresh replica
/// over the same store recalls the marker. Then two turns of one conversation at once: each
/// succeeds, or fails `persistence` (a compare-and-set conflict), never anything else (a
/// lost update or a torn write would show as another failure or a protocol error).
pub(crate) async fn durable_commit<Kn: Knobs>(
    knobs: &Kn,
    marker: &str,
    remember: ExecutionRequest,
    recall: ExecutionRequest,
) -> Verdict {
    let b = knobs.bounds();
    let store = Arc::new(MemoryStore::new());
    let conversation = ConversationId::generate();
    {
        let a = replica(knobs, &store, "conformance-commit-a");
        let kept = turn(&a, remember, &conversation, "the committing turn", b).await?;
        succeeded(&kept, "the committing turn")?;
    }
    let later_replica = replica(knobs, &store, "conformance-commit-b");
    let later = turn(
        &later_replica,
        recall,
        &conversation,
        "the turn on a fresh replica",
        b,
    )
    .await?;
    succeeded(&later, "the turn on a fresh replica")?;
    if !message_text(&later).contains(marker) {
        return Err(
            "the turn's state was not committed by its terminal event: a fresh replica over \
             the same store, right after, did not recall it"
                .to_owned(),
        );
    }
    // Asked for only now: a knob may script the recall after the latest Remember it made.
    let concurrent = || {
        knobs
            .request_for(&crate::Behaviour::Remember {
                marker: crate::sessions::marker(),
            })
            .ok_or_else(|| "the knobs stopped producing Remember".to_owned())
    };
    let (x, y) = (concurrent()?, concurrent()?);
    let other = ConversationId::generate();
    let (x, y) = futures_util::future::join(
        probe::run_to_end(&later_replica, x.with_conversation(other.clone()), b),
        probe::run_to_end(&later_replica, y.with_conversation(other), b),
    )
    .await;
    let mut succeeded_turns = 0;
    for obs in [x?, y?] {
        obs.check_log()?;
        match &obs.outcome {
            Outcome::Succeeded(_) => succeeded_turns += 1,
            Outcome::Failed(e) if e.category() == ErrorCategory::Persistence => {}
            _ => {
                return Err(format!(
                    "of two turns of one conversation at once, one ended {}: a commit that \
                     conflicts must fail persistence",
                    obs.ended()
                ));
            }
        }
    }
    if succeeded_turns == 0 {
        return Err(
            "of two turns of one conversation at once, neither succeeded: one commit must win"
                .to_owned(),
        );
    }
    // Which one wins varies from run to run: the evidence does not say.
    Ok(
        "committed by the terminal event (a fresh replica recalled it at once); two turns at \
         once: each succeeded or failed persistence, at least one succeeded"
            .to_owned(),
    )
}

/// A store whose every call fails `Unavailable` while cut: a replica partitioned from its
/// database.
#[derive(Clone)]
struct Partition {
    store: Arc<MemoryStore>,
    cut: Arc<AtomicBool>,
}

impl Partition {
    fn check(&self) -> Result<(), StoreError> {
        if self.cut.load(Ordering::SeqCst) {
            Err(StoreError::Unavailable(
                "conformance: this replica is cut off from the store".to_owned(),
            ))
        } else {
            Ok(())
        }
    }
}

macro_rules! through {
    ($self:ident, $call:expr) => {{
        let checked = $self.check();
        Box::pin(async move {
            checked?;
            $call.await
        })
    }};
}

impl ExecutionStore for Partition {
    fn create(&self, record: ExecutionRecord) -> BoxFuture<'_, Result<Created, StoreError>> {
        through!(self, self.store.create(record))
    }
    fn record<'a>(
        &'a self,
        id: &'a ExecutionId,
    ) -> BoxFuture<'a, Result<ExecutionRecord, StoreError>> {
        through!(self, self.store.record(id))
    }
    fn unfinished(&self) -> BoxFuture<'_, Result<Vec<ExecutionRecord>, StoreError>> {
        through!(self, self.store.unfinished())
    }
    fn list<'a>(
        &'a self,
        principal: &'a str,
        before: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<harness_core::store::Listed>, StoreError>> {
        through!(self, self.store.list(principal, before, limit))
    }
    fn acquire<'a>(
        &'a self,
        id: &'a ExecutionId,
        owner: &'a ReplicaId,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Lease, StoreError>> {
        through!(self, self.store.acquire(id, owner, ttl))
    }
    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        through!(self, self.store.release(lease))
    }
    fn append<'a>(
        &'a self,
        lease: &'a Lease,
        events: &'a [Event],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        through!(self, self.store.append(lease, events))
    }
    fn read<'a>(
        &'a self,
        id: &'a ExecutionId,
        after: Cursor,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Event>, StoreError>> {
        through!(self, self.store.read(id, after, limit))
    }
    fn tail<'a>(&'a self, id: &'a ExecutionId) -> BoxFuture<'a, Result<Tail, StoreError>> {
        through!(self, self.store.tail(id))
    }
    fn resolve<'a>(
        &'a self,
        id: &'a ExecutionId,
        resolution: Resolution,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        through!(self, self.store.resolve(id, resolution))
    }
    fn resolution<'a>(
        &'a self,
        id: &'a ExecutionId,
        action: &'a ActionId,
    ) -> BoxFuture<'a, Result<Option<Resolution>, StoreError>> {
        through!(self, self.store.resolution(id, action))
    }
    fn request_cancel<'a>(
        &'a self,
        id: &'a ExecutionId,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        through!(self, self.store.request_cancel(id, reason))
    }
    fn purge(
        &self,
        created_before: harness_core::time::Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        through!(self, self.store.purge(created_before, limit))
    }
}

/// Waits (bounded) until the stored log of `id` holds an event `pred` accepts.
async fn stored_until(
    store: &MemoryStore,
    id: &ExecutionId,
    bound: Duration,
    what: &str,
    pred: impl Fn(&Event) -> bool,
) -> Result<Vec<Event>, String> {
    let until = Instant::now() + bound;
    loop {
        let stored = read_all(store, id).await?;
        if stored.iter().any(&pred) {
            return Ok(stored);
        }
        if Instant::now() > until {
            return Err(format!("the store never held {what} within {bound:?}"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn read_all(store: &MemoryStore, id: &ExecutionId) -> Result<Vec<Event>, String> {
    let mut all: Vec<Event> = Vec::new();
    loop {
        let after = all
            .last()
            .map_or(Cursor::START, |e| Cursor::after_seq(e.seq().get()));
        let page = store
            .read(id, after, 1024)
            .await
            .map_err(|e| format!("the store could not be read: {e}"))?;
        if page.is_empty() {
            return Ok(all);
        }
        all.extend(page);
    }
}

/// The stored log's rules: contiguous from 1, exactly one terminal event, last.
fn check_stored(stored: &[Event]) -> Result<(), String> {
    for (n, e) in stored.iter().enumerate() {
        if e.seq().get() != n as u64 + 1 {
            return Err(format!(
                "the stored log has a gap at event {n} (seq {})",
                e.seq()
            ));
        }
    }
    let terminals = stored.iter().filter(|e| e.kind().is_terminal()).count();
    if terminals != 1 || !stored.last().is_some_and(|e| e.kind().is_terminal()) {
        return Err(format!(
            "the stored log holds {terminals} terminal event(s), not exactly one at its end"
        ));
    }
    Ok(())
}

/// `runtime.lease_fencing`: replica `a` runs an execution that hangs; `a` is cut off from
/// the store past its lease; replica `b` takes the execution over and ends it
/// (`run.failed`, `OWNER_LOST`); when `a` reaches the store again, it is fenced: its run
/// stops (the local execution ends, its runtime cleaned up) and the store keeps exactly one
/// terminal event, `b`'s.
pub(crate) async fn lease_fencing<Kn: Knobs>(knobs: &Kn, hang: ExecutionRequest) -> Verdict {
    let b = knobs.bounds();
    let store = Arc::new(MemoryStore::new());
    let partition = Partition {
        store: Arc::clone(&store),
        cut: Arc::new(AtomicBool::new(false)),
    };
    let a = probe::builder(knobs.adapter(), b)
        .store(Arc::new(partition.clone()), ReplicaId::new("conformance-a"))
        .lease_ttl(LEASE)
        .build();
    let b_replica = replica(knobs, &store, "conformance-b");
    let handle = probe::start(&a, hang)
        .await
        .map_err(|e| format!("replica a refused the request: {e}"))?;
    let id = handle.id().clone();
    stored_until(&store, &id, b.run, "run.running", |e| {
        e.kind() == EventKind::RunRunning
    })
    .await?;
    partition.cut.store(true, Ordering::SeqCst);
    // Past a's lease: nobody renews it.
    tokio::time::sleep(LEASE * 2).await;
    let recovered = b_replica
        .recover()
        .await
        .map_err(|e| format!("replica b could not recover: {e}"))?;
    if !recovered.contains(&Recovery::Failed(id.clone())) {
        return Err(format!(
            "replica b did not take over the execution whose owner was cut off past its \
             lease: recover() returned {recovered:?}"
        ));
    }
    partition.cut.store(false, Ordering::SeqCst);
    let local = tokio::time::timeout(b.run, handle.outcome())
        .await
        .map_err(|_| {
            format!(
                "replica a, back in touch with the store, kept running an execution replica b \
                 ended: not stopped within {:?}",
                b.run
            )
        })?;
    let stored = read_all(&store, &id).await?;
    check_stored(&stored)?;
    match stored.last().map(Event::payload) {
        Some(EventPayload::RunFailed(failed)) if failed.error.code == ErrorCode::OWNER_LOST => {}
        _ => {
            return Err(format!(
                "the store's terminal event is {}, not replica b's run.failed (OWNER_LOST)",
                stored.last().map_or("none", |e| e.kind().as_str())
            ));
        }
    }
    Ok(format!(
        "a cut off past its lease; b ended the execution (run.failed OWNER_LOST); a, fenced, \
         stopped its run locally ({}); the store kept one terminal event, b's",
        probe::outcome_name(&local)
    ))
}

/// `session.cross_replica_resume`: replica `a` pauses on a tool approval and dies (its
/// runtime shut down mid-flight: no lease released, no event written after); replica `b`
/// recovers the execution with its pending action; the answer sent to `b` resumes the run
/// there, which succeeds with the call completed; a second answer is refused; the stored log
/// is contiguous with one terminal event.
pub(crate) async fn cross_replica_resume<Kn: Knobs>(
    knobs: &Kn,
    approval: ExecutionRequest,
) -> Verdict {
    let b = knobs.bounds();
    let store = Arc::new(MemoryStore::new());
    let (id, action) = paused_then_lost(knobs.adapter(), &store, approval, b).await?;
    let ActionKind::ToolApproval(request) = &action.kind else {
        return Err("the approval behaviour opened a form, not a tool approval".to_owned());
    };
    let b_replica = replica(knobs, &store, "conformance-b");
    tokio::time::sleep(LEASE * 2).await;
    let recovered = b_replica
        .recover()
        .await
        .map_err(|e| format!("replica b could not recover: {e}"))?;
    if !recovered.contains(&Recovery::Restored(id.clone())) {
        return Err(format!(
            "replica b did not restore the paused execution of the lost replica a: recover() \
             returned {recovered:?}"
        ));
    }
    let attached = b_replica
        .attach(&id)
        .await
        .map_err(|e| format!("replica b cannot attach to the restored execution: {e}"))?;
    let awaited = probe::wait_action(&attached, b)
        .await
        .map_err(|e| format!("the restored execution, attached on b: {e}"))?;
    if awaited.id != action.id {
        return Err(
            "the restored execution awaits another action than the one a paused on".to_owned(),
        );
    }
    let answer = action.decide(|_| Decision::Approve);
    b_replica
        .respond_to(&id, answer.clone())
        .await
        .map_err(|e| format!("replica b refused the answer to the restored action: {e}"))?;
    let obs = probe::finish(&attached, b).await?;
    obs.check_log()?;
    if !matches!(obs.outcome, Outcome::Succeeded(_)) {
        return Err(format!(
            "the resumed run on replica b ended {}, not succeeded",
            obs.ended()
        ));
    }
    let completed = obs
        .events
        .iter()
        .filter(|e| e.kind() == EventKind::ToolCallCompleted)
        .count();
    if completed < request.calls().len() {
        return Err(format!(
            "the resumed run completed {completed} of the approval's {} call(s)",
            request.calls().len()
        ));
    }
    if b_replica.respond_to(&id, answer).await.is_ok() {
        return Err("a second answer to the restored action was accepted".to_owned());
    }
    let stored = read_all(&store, &id).await?;
    check_stored(&stored)?;
    Ok(format!(
        "a paused on {} call(s) and died; b restored the action, its answer resumed the run \
         on b to run.succeeded; a second answer refused; one terminal event stored",
        request.calls().len()
    ))
}

/// `runtime.eviction_recovery`: on a service whose pool of paused runtimes holds none (every
/// pause is evicted at once), a run on a fresh conversation pauses on a tool approval; its
/// runtime must be evicted (the adapter says it can be restored), the answer must resume the
/// run, on a fresh runtime that restores the pause, to `run.succeeded` with the calls
/// completed; a second answer is refused.
pub(crate) async fn eviction_recovery<Kn: Knobs>(
    knobs: &Kn,
    approval: ExecutionRequest,
) -> Verdict {
    let b = knobs.bounds();
    let (builder, _) = probe::tooled(knobs.adapter(), b);
    let service = builder
        .config(harness_core::service::ServiceConfig {
            runtime_pool: harness_core::service::RuntimePoolConfig::new(
                0,
                Duration::from_secs(3600),
            ),
            ..probe::config(b)
        })
        .build();
    let handle = service
        .start(approval.with_conversation(ConversationId::generate()))
        .await
        .map_err(|e| format!("the service refused the request: {e}"))?;
    let action = probe::wait_action(&handle, b).await?;
    let ActionKind::ToolApproval(request) = &action.kind else {
        return Err("the approval behaviour opened a form, not a tool approval".to_owned());
    };
    let evicted = async {
        while service.runtime_pool().is_none_or(|p| p.evictions == 0) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    if tokio::time::timeout(b.grace, evicted).await.is_err() {
        return Err(
            "the paused runtime was not evicted by a pool that holds none: it said its pause \
             could not be restored (HarnessRuntime::restorable)"
                .to_owned(),
        );
    }
    let answer = action.decide(|_| Decision::Approve);
    handle
        .respond(answer.clone())
        .await
        .map_err(|e| format!("the answer to the evicted pause was refused: {e}"))?;
    let obs = probe::finish(&handle, b).await?;
    obs.check_log()?;
    if !matches!(obs.outcome, Outcome::Succeeded(_)) {
        return Err(format!(
            "the run resumed after its runtime was evicted ended {}, not succeeded",
            obs.ended()
        ));
    }
    let completed = obs
        .events
        .iter()
        .filter(|e| e.kind() == EventKind::ToolCallCompleted)
        .count();
    if completed < request.calls().len() {
        return Err(format!(
            "the restored run completed {completed} of the approval's {} call(s)",
            request.calls().len()
        ));
    }
    let resolved = obs
        .events
        .iter()
        .filter(|e| e.kind() == EventKind::ActionResolved)
        .count();
    if resolved != 1 {
        return Err(format!("{resolved} action.resolved events, not one"));
    }
    if handle.respond(answer).await.is_ok() {
        return Err("a second answer to the evicted pause was accepted".to_owned());
    }
    Ok(format!(
        "paused on {} call(s), runtime evicted; the answer restored the pause on a fresh \
         runtime and the run succeeded; a second answer refused",
        request.calls().len()
    ))
}

/// Replica `a` on a thread and a Tokio runtime of its own: starts `approval`, waits until the
/// pause is stored, then dies (its runtime shut down with every task where it stands).
async fn paused_then_lost<A: HarnessAdapter>(
    adapter: A,
    store: &Arc<MemoryStore>,
    approval: ExecutionRequest,
    bounds: Bounds,
) -> Result<(ExecutionId, ActionRequest), String> {
    let store = Arc::clone(store);
    // On a thread of its own (a blocking one: the caller's runtime is not held up).
    tokio::task::spawn_blocking(move || {
        let dying = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("no runtime for replica a: {e}"))?;
        let a = probe::builder(adapter, bounds)
            .durable(store, ReplicaId::new("conformance-a"))
            .lease_ttl(LEASE)
            .build();
        let paused = dying.block_on(async {
            let handle = a
                .start(approval)
                .await
                .map_err(|e| format!("replica a refused the request: {e}"))?;
            // Readers of a durable execution see only stored events: seen is stored.
            let action = probe::wait_action(&handle, bounds)
                .await
                .map_err(|e| format!("replica a: {e}"))?;
            Ok::<_, String>((handle, action))
        });
        let (handle, action) = paused?;
        let id = handle.id().clone();
        dying.shutdown_background();
        // Dropped after its runtime: nothing of a runs any more.
        drop((handle, a));
        Ok((id, action))
    })
    .await
    .map_err(|_| "replica a's thread panicked".to_owned())?
}
