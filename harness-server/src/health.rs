//! Readiness: what `GET /readyz` and `GET /v1/adapters` say of each adapter instance and of
//! the store.
//!
//! What happens when...
//!
//! - **an instance's dependency fails** (an ACP agent's command not found, a model endpoint
//!   not answering): `/readyz` is `503`, its `reasons` naming the instance and a short
//!   category (`` instance `acp`: agent `default`: its command is not found ``); the
//!   operator's log has the details (the adapter logs the program or URL and the error).
//! - **an MCP server of an instance cannot be started or reached** (a stdio server's program
//!   not found or not executable on the `PATH` it would start with; an HTTP server refusing
//!   the connection or not answering): `503`, naming the instance and the server
//!   (`` instance `openai`: MCP server `files`: its command is not found ``). Nothing is
//!   started to find out, and no credential is sent (see `McpProvider`'s health). `GET
//!   /v1/adapters` shows the instance not ready with the same reason.
//! - **the store does not take a write** (a full disk, SQLite's size cap, a read-only
//!   database, a store that does not answer): `503`, ``store: not accepting writes``; the
//!   log has the store's error. The probe puts a thread-state value of [`PROBE_BYTES`] under
//!   a fresh key of the reserved binding [`PROBE_BINDING`] and deletes it: two committed
//!   writes on the memory, SQLite and PostgreSQL stores alike (their traits offer no write
//!   rolled back), leaving nothing but that binding's one record.
//! - **`/readyz` is called in a loop**: each dependency is checked at most once in
//!   [`FRESH`], and one check at a time: callers meanwhile wait for it and share its result.
//!   Each check is bounded by [`BOUND`]; one that does not answer in time is a failure.
//!
//! Decisions where the spec is silent: every instance is required (a server that offers an
//! instance it cannot run is not ready); an MCP server that cannot be started or reached
//! *fails* readiness rather than only degrading it: an execution would still run, its tools
//! from that server reported `tool.unavailable`, but the agent the operator configured is
//! not the one callers would get, and a stdio server's missing program is a fault of this
//! replica that a balancer should route around (the price: a shared HTTP server that is down
//! takes every replica out; an operator who prefers executions without its tools removes it
//! from the configuration). The [`Health`](harness_observe::health::Health) an application
//! adds with [`ServerBuilder::health`](crate::ServerBuilder::health) is checked alongside,
//! each of its optional checks only degrading. The store is probed by a write, not a read:
//! an answering store that cannot write would acknowledge nothing.

use std::future::Future;
use std::time::{Duration, Instant};

use std::sync::Arc;

use harness_core::adapter::HarnessHealth;
use harness_core::id::{ConversationId, ExecutionId};
use harness_core::session::{BindingId, StateKey, ThreadStateStore};

/// How long a check's result is kept.
pub const FRESH: Duration = Duration::from_secs(5);

/// The longest one check may take.
pub const BOUND: Duration = Duration::from_secs(3);

/// A dependency's last health, and the lock that lets one check run at a time.
#[derive(Debug, Default)]
pub(crate) struct Cached {
    last: tokio::sync::Mutex<Option<(Instant, HarnessHealth)>>,
}

impl Cached {
    /// The last result if fresh, else the result of `check` run now (on its own task,
    /// bounded by [`BOUND`]). `name` is for the operator's log.
    pub(crate) async fn get<F, Fut>(&self, name: &str, check: F) -> HarnessHealth
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = HarnessHealth> + Send + 'static,
    {
        // Held across the check: a caller meanwhile waits for it, then reads its result.
        let mut last = self.last.lock().await;
        if let Some((at, health)) = &*last
            && at.elapsed() < FRESH
        {
            return health.clone();
        }
        let task = tokio::spawn(check());
        let abort = task.abort_handle();
        let health = match tokio::time::timeout(BOUND, task).await {
            Ok(Ok(health)) => health,
            Ok(Err(_)) => HarnessHealth::not_ready("its health check failed"),
            Err(_) => {
                abort.abort();
                HarnessHealth::not_ready(format!("no answer within {}s", BOUND.as_secs()))
            }
        };
        if !health.ready {
            tracing::warn!(
                dependency = name,
                reason = health.reason.as_deref().unwrap_or("not ready"),
                "a dependency of the server is not ready"
            );
        }
        *last = Some((Instant::now(), health.clone()));
        health
    }
}

/// The binding the store probe writes under: no conversation's (every conversation's binding
/// holds a `:`, see [`BindingId::for_conversation`]), and one for all probes, so probes add
/// no binding after the first.
pub const PROBE_BINDING: &str = "harness.readiness";

/// The bytes the store probe writes: more than a page of SQLite's (4 KiB), so the write
/// needs room the store has to find, not only a slot in a page it has.
pub const PROBE_BYTES: usize = 16 * 1024;

/// Whether `store` takes a write now: a thread-state value of [`PROBE_BYTES`] put under a
/// fresh key of the reserved binding [`PROBE_BINDING`], then deleted. Each is a committed
/// transaction of the memory, SQLite and PostgreSQL stores alike (the traits offer no
/// rolled-back write), so the store keeps nothing of it but the binding's one record; a
/// probe cut off between the two (the [`BOUND`], a crash) leaves one key under that binding,
/// which no conversation reads. Any error is `not accepting writes`; the store's own error
/// goes to the log.
pub(crate) async fn probe_store(store: Arc<dyn ThreadStateStore>) -> HarnessHealth {
    let written = async {
        let (Ok(id), Ok(conversation)) = (
            PROBE_BINDING.parse::<BindingId>(),
            PROBE_BINDING.parse::<ConversationId>(),
        ) else {
            return Err("the probe binding is not a valid id".to_owned());
        };
        // A fresh key each time: probes of replicas sharing the store never conflict.
        let fresh = ExecutionId::generate();
        let key: StateKey = format!("probe/{}", fresh.as_str().replace('_', "-"))
            .parse()
            .map_err(|e| format!("{e}"))?;
        let binding = store
            .current(&id, &conversation)
            .await
            .map_err(|e| e.to_string())?;
        let version = store
            .put(&binding, &key, vec![0; PROBE_BYTES], None)
            .await
            .map_err(|e| e.to_string())?;
        store
            .delete(&binding, &key, version)
            .await
            .map_err(|e| e.to_string())
    };
    match written.await {
        Ok(()) => HarnessHealth::ready(),
        Err(error) => {
            tracing::warn!(error, "the store does not take a write");
            HarnessHealth::not_ready("not accepting writes")
        }
    }
}
