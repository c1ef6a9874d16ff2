//! What the durable backends share: error constructors, the state's stored name, the
//! record's columns.

use std::sync::{Mutex, MutexGuard};

use harness_core::lifecycle::ExecutionState;
use harness_core::store::StoreError;
use harness_core::time::Timestamp;

/// A value the store holds that does not read back.
pub(crate) fn corrupt(what: &str, e: &dyn std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

/// Locks `m`; a poisoned lock still guards consistent data (every holder leaves it so).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The stored name of `state` (its wire name).
pub(crate) fn state_name(state: ExecutionState) -> String {
    serde_json::to_value(state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The state stored as `name`.
pub(crate) fn parse_state(name: &str) -> Result<ExecutionState, StoreError> {
    serde_json::from_value(serde_json::Value::String(name.to_owned()))
        .map_err(|e| corrupt("an execution's state", &e))
}

/// The timestamp stored as milliseconds `ms`.
pub(crate) fn from_millis(ms: i64) -> Result<Timestamp, StoreError> {
    Timestamp::from_millis(ms).ok_or_else(|| StoreError::Corrupt(format!("a timestamp {ms}")))
}

/// The columns a record is read from, in `to_record`'s order.
pub(crate) const RECORD_COLUMNS: &str = "id, principal, adapter, fingerprint, request, \
                                         idempotency_key, created_at, state, cancel_requested";

/// Who started each conversation, for the migration that scopes bindings by principal: the
/// principal of the first execution (in creation order) of each (adapter, conversation id),
/// fed one execution at a time, oldest first.
#[derive(Debug, Default)]
pub(crate) struct FirstCallers(std::collections::HashMap<(String, String), String>);

impl FirstCallers {
    /// Notes an execution of `adapter` on `conversation` by `principal` (empty: in-process);
    /// only the first of each conversation counts.
    pub(crate) fn note(&mut self, adapter: String, conversation: String, principal: String) {
        self.0.entry((adapter, conversation)).or_insert(principal);
    }

    /// Where `binding` (serving conversation `owner`) moves: a binding in the form every
    /// conversation had before bindings were scoped (`adapter:conversation`) whose
    /// conversation a named principal started becomes that principal's binding; `None`
    /// leaves it where it is (already scoped, started in-process, or its executions purged:
    /// then no principal reaches it, and the conversation starts afresh).
    pub(crate) fn moved(&self, binding: &str, owner: &str) -> Option<String> {
        use harness_core::id::{AdapterId, CallerId};
        use harness_core::session::{BindingId, Conversation};
        let adapter: AdapterId = binding.split_once(':')?.0.parse().ok()?;
        let id = owner.parse().ok()?;
        let unscoped = BindingId::for_conversation(&adapter, &Conversation::anonymous(id));
        if unscoped.as_str() != binding {
            return None;
        }
        let principal = self.0.get(&(adapter.to_string(), owner.to_owned()))?;
        let caller: CallerId = principal.parse().ok()?;
        if caller == CallerId::ANONYMOUS {
            return None;
        }
        let conversation = Conversation::new(caller, owner.parse().ok()?);
        Some(BindingId::for_conversation(&adapter, &conversation).to_string())
    }
}
