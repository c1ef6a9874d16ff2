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
