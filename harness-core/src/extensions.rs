//! A typed map carried by an [`ExecutionRequest`](crate::service::ExecutionRequest), the way
//! `http::Extensions` rides on an HTTP request.
//!
//! Layers put policies here that only the service's driver can apply, because only the driver
//! sees adapter events before they are numbered and stored: event interceptors (redaction), a
//! parent cancellation token (shutdown), an initialization timeout, a retry policy. Extensions
//! never go on the wire and are not part of a request's identity (the idempotency fingerprint
//! ignores them).
//!
//! ```
//! use harness_core::extensions::Extensions;
//! #[derive(Debug, PartialEq)]
//! struct Caller(&'static str);
//!
//! let mut ext = Extensions::new();
//! ext.insert(Caller("billing"));
//! assert_eq!(ext.get::<Caller>(), Some(&Caller("billing")));
//! let copy = ext.clone(); // cheap: values are shared
//! assert_eq!(copy.get::<Caller>(), Some(&Caller("billing")));
//! ```

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// A map from type to one value of that type. Cloning shares the values.
#[derive(Clone, Default)]
pub struct Extensions {
    map: Option<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl Extensions {
    /// An empty map (allocates nothing until the first insert).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Inserts `value`, replacing (and returning) any value of the same type.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) -> Option<Arc<T>> {
        self.map
            .get_or_insert_with(HashMap::new)
            .insert(TypeId::of::<T>(), Arc::new(value))
            .and_then(|old| old.downcast().ok())
    }

    /// The value of type `T`, if any.
    #[must_use]
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.map
            .as_ref()?
            .get(&TypeId::of::<T>())
            .and_then(|v| v.downcast_ref())
    }

    /// Removes the value of type `T`.
    pub fn remove<T: Send + Sync + 'static>(&mut self) -> Option<Arc<T>> {
        self.map
            .as_mut()?
            .remove(&TypeId::of::<T>())
            .and_then(|v| v.downcast().ok())
    }

    /// Whether the map is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.map.as_ref().is_none_or(HashMap::is_empty)
    }
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Extensions")
            .field("len", &self.map.as_ref().map_or(0, HashMap::len))
            .finish()
    }
}
