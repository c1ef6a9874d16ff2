//! Adapter instances: what the operator configured, by id, each a durable service behind
//! its layer stack.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use harness_core::action::ActionResponse;
use harness_core::adapter::{HarnessAdapter, HarnessHealth};
use harness_core::error::HarnessError;
use harness_core::event::Event;
use harness_core::id::{AdapterId, Cursor, ExecutionId};
use harness_core::service::{AdapterService, Recovery};
use harness_core::session::ThreadStateStore;
use harness_core::store::{ExecutionRecord, ExecutionStore, Listed, ReplicaId, Tail};
use harness_layers::stack::{HarnessStack, StackService};
use serde_json::Value;

/// One adapter instance the server offers: new executions go through its layer stack;
/// executions already started (on this replica or another one sharing the store) are
/// reached through its adapter service.
///
/// ```
/// use std::sync::Arc;
/// use harness_core::store::{MemoryStore, ReplicaId};
/// use harness_layers::stack::HarnessStack;
/// use harness_scripted::ScriptedAdapter;
/// use harness_server::Instance;
///
/// let adapter = ScriptedAdapter::quickstart();
/// let stack = HarnessStack::defaults_for(&adapter).unwrap();
/// let instance = Instance::new(&stack, adapter, Arc::new(MemoryStore::new()), ReplicaId::new("r1"));
/// assert_eq!(instance.id().as_str(), "scripted");
/// assert_eq!(instance.manifest()["id"], "scripted");
/// ```
#[derive(Clone)]
pub struct Instance {
    id: AdapterId,
    manifest: Arc<Value>,
    pub(crate) admission: StackService,
    pub(crate) control: Arc<dyn Control>,
    /// The adapter's last health, shared by every probe (see [`crate::health`]).
    pub(crate) health: Arc<crate::health::Cached>,
    /// The store's thread state, for the write probe of [`crate::health`].
    pub(crate) state_store: Arc<dyn ThreadStateStore>,
    /// The names of the instance's tool providers: those a caller may give a credential
    /// for (`callerCredentials`).
    pub(crate) providers: Arc<[String]>,
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance").field("id", &self.id).finish()
    }
}

impl Instance {
    /// `adapter` behind `stack`, its executions kept in `store` as replica `replica`.
    pub fn new<A, S>(stack: &HarnessStack, adapter: A, store: Arc<S>, replica: ReplicaId) -> Self
    where
        A: HarnessAdapter,
        S: ExecutionStore + ThreadStateStore + 'static,
    {
        let id = adapter.descriptor().id().clone();
        let manifest = serde_json::to_value(adapter.descriptor()).unwrap_or(Value::Null);
        let state_store: Arc<dyn ThreadStateStore> = store.clone();
        let providers = stack
            .tool_set()
            .map(|set| {
                set.provider_names()
                    .into_iter()
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let (admission, service) = stack.durable_parts(adapter, store, replica);
        Self {
            id,
            manifest: Arc::new(manifest),
            admission,
            control: Arc::new(service),
            health: Arc::default(),
            state_store,
            providers,
        }
    }

    /// The instance id (its adapter's id).
    #[must_use]
    pub fn id(&self) -> &AdapterId {
        &self.id
    }

    /// The adapter's manifest (its descriptor as JSON, options schema included).
    #[must_use]
    pub fn manifest(&self) -> &Value {
        &self.manifest
    }

    /// Recovery of this instance's unfinished executions (see
    /// [`AdapterService::recover`]): call it once when the server starts.
    ///
    /// # Errors
    /// `persistence` when the store fails.
    pub async fn recover(&self) -> Result<Vec<Recovery>, HarnessError> {
        self.control.recover().await
    }

    /// The instance's health: its adapter's ([`HarnessAdapter::health`]) and its tool
    /// providers' ([`ToolSet::health`](harness_core::tool::ToolSet::health): each MCP server
    /// startable or answering), checked together at most once in
    /// [`health::FRESH`](crate::health::FRESH), one check at a time, bounded; a check that
    /// does not answer in time, or panics, is a failure. Not ready when either is, with the
    /// reasons of both.
    pub async fn health(&self) -> HarnessHealth {
        let control = Arc::clone(&self.control);
        self.health
            .get(
                self.id.as_str(),
                move || async move { control.health().await },
            )
            .await
    }
}

/// What the server asks of an adapter service, whatever its adapter type.
pub(crate) trait Control: Send + Sync + 'static {
    fn record<'a>(
        &'a self,
        id: &'a ExecutionId,
    ) -> BoxFuture<'a, Result<Option<ExecutionRecord>, HarnessError>>;
    fn list<'a>(
        &'a self,
        principal: &'a str,
        before: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Listed>, HarnessError>>;
    fn read_events<'a>(
        &'a self,
        id: &'a ExecutionId,
        after: Cursor,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Event>, HarnessError>>;
    fn tail<'a>(&'a self, id: &'a ExecutionId) -> BoxFuture<'a, Result<Tail, HarnessError>>;
    fn respond_to<'a>(
        &'a self,
        id: &'a ExecutionId,
        response: ActionResponse,
    ) -> BoxFuture<'a, Result<(), HarnessError>>;
    fn request_cancel<'a>(
        &'a self,
        id: &'a ExecutionId,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<bool, HarnessError>>;
    fn recover(&self) -> BoxFuture<'_, Result<Vec<Recovery>, HarnessError>>;
    fn health(&self) -> BoxFuture<'_, HarnessHealth>;
}

impl<A: HarnessAdapter> Control for AdapterService<A> {
    fn record<'a>(
        &'a self,
        id: &'a ExecutionId,
    ) -> BoxFuture<'a, Result<Option<ExecutionRecord>, HarnessError>> {
        Box::pin(AdapterService::record(self, id))
    }
    fn list<'a>(
        &'a self,
        principal: &'a str,
        before: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Listed>, HarnessError>> {
        Box::pin(AdapterService::list(self, principal, before, limit))
    }
    fn read_events<'a>(
        &'a self,
        id: &'a ExecutionId,
        after: Cursor,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Event>, HarnessError>> {
        Box::pin(AdapterService::read_events(self, id, after, limit))
    }
    fn tail<'a>(&'a self, id: &'a ExecutionId) -> BoxFuture<'a, Result<Tail, HarnessError>> {
        Box::pin(AdapterService::tail(self, id))
    }
    fn respond_to<'a>(
        &'a self,
        id: &'a ExecutionId,
        response: ActionResponse,
    ) -> BoxFuture<'a, Result<(), HarnessError>> {
        Box::pin(AdapterService::respond_to(self, id, response))
    }
    fn request_cancel<'a>(
        &'a self,
        id: &'a ExecutionId,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<bool, HarnessError>> {
        Box::pin(AdapterService::request_cancel(self, id, reason))
    }
    fn recover(&self) -> BoxFuture<'_, Result<Vec<Recovery>, HarnessError>> {
        Box::pin(AdapterService::recover(self))
    }
    fn health(&self) -> BoxFuture<'_, HarnessHealth> {
        Box::pin(async move {
            let tools = async {
                match self.tools() {
                    Some(tools) => tools.health().await,
                    None => HarnessHealth::ready(),
                }
            };
            let (adapter, tools) = tokio::join!(self.adapter().health(), tools);
            let reasons: Vec<String> = [adapter, tools]
                .into_iter()
                .filter(|h| !h.ready)
                .map(|h| h.reason.unwrap_or_else(|| "not ready".to_owned()))
                .collect();
            if reasons.is_empty() {
                HarnessHealth::ready()
            } else {
                HarnessHealth::not_ready(reasons.join("; "))
            }
        })
    }
}
