//! Readiness: what `GET /readyz` and `GET /v1/adapters` say of each adapter instance and of
//! the store.
//!
//! What happens when...
//!
//! - **an instance's dependency fails** (an ACP agent's command not found, a model endpoint
//!   not answering): `/readyz` is `503`, its `reasons` naming the instance and a short
//!   category (`` instance `acp`: agent `default`: its command is not found ``); the
//!   operator's log has the details (the adapter logs the program or URL and the error).
//! - **the store does not answer**: `503`, ``store: not answering``.
//! - **`/readyz` is called in a loop**: each dependency is checked at most once in
//!   [`FRESH`], and one check at a time: callers meanwhile wait for it and share its result.
//!   Each check is bounded by [`BOUND`]; one that does not answer in time is a failure.
//!
//! Decisions where the spec is silent: every instance is required (a server that offers an
//! instance it cannot run is not ready); the [`Health`](harness_observe::health::Health)
//! an application adds with [`ServerBuilder::health`](crate::ServerBuilder::health) is
//! checked alongside, each of its optional checks only degrading; the store is probed by
//! reading a record that does not exist (a read proves it answers, not that it has room).

use std::future::Future;
use std::time::{Duration, Instant};

use harness_core::adapter::HarnessHealth;

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
