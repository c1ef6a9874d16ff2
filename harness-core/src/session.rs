//! Session state: the binding view an adapter receives, and the thread state store it keeps
//! opaque native state in.
//!
//! How an adapter keeps a conversation is declared by its capabilities: `session.multi_turn`
//! (later turns of a conversation see the earlier ones; without it the adapter is ephemeral,
//! and the preflight layer of `harness-layers` refuses a request that continues a
//! conversation, `CAPABILITY_UNSUPPORTED`), `session.clear`, `thread.durable_commit`,
//! `thread.eviction_restore`, and `session.cross_replica_resume` (which
//! [`AdapterService::recover`](crate::service::AdapterService::recover) reads). The contract's
//! strategy names (`adapter_store`, `remote_managed`, ...) were once a type here that nothing
//! declared or read: it was removed rather than kept as a promise without code behind it.
//!
//! An adapter never sees a store: it receives a [`ScopedThreadState`], bound to one
//! [`SessionBinding`]. Every write is a compare-and-set on a [`Version`], so a stale writer
//! (another replica, a runtime from before a restart) is fenced instead of overwriting newer
//! state; clearing a session moves its binding to a new epoch, which fences every handle of the
//! old epoch.
//!
//! Values are bytes (`Vec<u8>`): provider-native state is opaque, and JSON-safe records go
//! through [`ScopedThreadState::put_json`] / [`ScopedThreadState::get_json`].
//!
//! ```
//! use harness_core::id::ConversationId;
//! use harness_core::session::{
//!     BindingId, InMemoryThreadStateStore, SessionBinding, StateError, ThreadStateStore,
//! };
//!
//! let rt = tokio::runtime::Builder::new_current_thread().build()?;
//! rt.block_on(async {
//!     let store = InMemoryThreadStateStore::new();
//!     let binding = SessionBinding::new(BindingId::generate(), ConversationId::generate());
//!     let state = store.scoped(binding.clone());
//!     let key = "native/head".parse()?;
//!
//!     // Create (expecting no value), then update with the version just written.
//!     let v1 = state.put(&key, b"checkpoint-1".to_vec(), None).await?;
//!     let v2 = state.put(&key, b"checkpoint-2".to_vec(), Some(v1)).await?;
//!     assert_eq!(state.get(&key).await?.unwrap().value, b"checkpoint-2");
//!
//!     // A writer that read v1 is fenced.
//!     let stale = state.put(&key, b"lost update".to_vec(), Some(v1)).await.unwrap_err();
//!     assert!(matches!(stale, StateError::VersionConflict { .. }));
//!
//!     // session.clear: a new epoch; handles of the old one are fenced.
//!     let next = store.clear(&binding).await?;
//!     assert_eq!(next.epoch(), binding.epoch() + 1);
//!     assert!(matches!(state.get(&key).await, Err(StateError::StaleEpoch { .. })));
//!     assert_eq!(store.scoped(next).get(&key).await?, None);
//!     # let _ = v2;
//!     Ok::<(), Box<dyn std::error::Error>>(())
//! })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::boxed::BoxFuture;
use crate::error::{ErrorCategory, ErrorCode, HarnessError};
use crate::id::{CallerId, ConversationId, InvalidId};

// ---------------------------------------------------------------------------------------------
// Identifiers
// ---------------------------------------------------------------------------------------------

const KEY_PATTERN: &str = "^[A-Za-z0-9._:/-]{1,256}$";
const KEY_EXPECTED: &str = "1 to 256 characters from [A-Za-z0-9._:/-]";

fn is_key(s: &str) -> bool {
    (1..=256).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'/' | b'-'))
}

macro_rules! string_newtype {
    ($name:ident, $inner:ty, $check:ident, $kind:literal, $description:literal, $pattern:expr, $expected:expr) => {
        impl $name {
            /// The value as a string slice.
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl FromStr for $name {
            type Err = InvalidId;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                if $check(s) {
                    Ok(Self(s.into()))
                } else {
                    Err(InvalidId::new($kind, s, $expected))
                }
            }
        }

        impl TryFrom<String> for $name {
            type Error = InvalidId;
            fn try_from(s: String) -> Result<Self, Self::Error> {
                if $check(&s) {
                    Ok(Self(<$inner>::from(s)))
                } else {
                    Err(InvalidId::new($kind, &s, $expected))
                }
            }
        }

        crate::id::string_id_common!($name, $pattern, $description);
    };
}

crate::id::opaque_id!(
    /// Identifies one durable session binding (the control plane's record tying a
    /// conversation to an adapter's native session): 1 to 128 characters from
    /// `[A-Za-z0-9._:-]`.
    ///
    /// ```
    /// use harness_core::session::BindingId;
    /// let b = BindingId::generate();
    /// assert_eq!(b.as_str().parse::<BindingId>().unwrap(), b);
    /// assert!("a/b".parse::<BindingId>().is_err());
    /// ```
    BindingId, "binding id", "A binding id.", "bind"
);

/// A conversation in its caller's scope: the caller-facing multi-turn identity that thread
/// state, session bindings and anything an adapter keeps between turns belong to.
///
/// The same [`ConversationId`] under two callers is two unrelated conversations: two
/// `Conversation`s are equal only when both their caller and their id are. A service builds
/// it from a request's [`CallerId`] extension and `conversation_id`; in-process use without a
/// caller is in the [`CallerId::ANONYMOUS`] scope ([`anonymous`](Self::anonymous)). An
/// adapter that keeps anything per conversation outside its
/// [`ScopedThreadState`] keys it by this type, never by the bare id, so a lookup cannot reach
/// another caller's conversation. It displays as its id alone, the only part a caller may be
/// shown.
///
/// ```
/// use harness_core::id::{CallerId, ConversationId};
/// use harness_core::session::Conversation;
///
/// let id: ConversationId = "support-42".parse().unwrap();
/// let alice = Conversation::new("alice".parse().unwrap(), id.clone());
/// let bob = Conversation::new("bob".parse().unwrap(), id.clone());
/// assert_ne!(alice, bob);
/// assert_eq!(alice.id(), bob.id());
/// assert_eq!(Conversation::anonymous(id.clone()).caller(), &CallerId::ANONYMOUS);
/// assert_eq!(alice.to_string(), "support-42");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Conversation {
    caller: CallerId,
    id: ConversationId,
}

impl Conversation {
    /// `id` in `caller`'s scope.
    #[must_use]
    pub const fn new(caller: CallerId, id: ConversationId) -> Self {
        Self { caller, id }
    }

    /// `id` in the anonymous scope of in-process use (requests that carry no [`CallerId`]).
    #[must_use]
    pub const fn anonymous(id: ConversationId) -> Self {
        Self::new(CallerId::ANONYMOUS, id)
    }

    /// Whose conversation it is.
    #[must_use]
    pub const fn caller(&self) -> &CallerId {
        &self.caller
    }

    /// The id the caller gave it (unique only within the caller's scope).
    #[must_use]
    pub const fn id(&self) -> &ConversationId {
        &self.id
    }
}

impl fmt::Display for Conversation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.id, f)
    }
}

impl BindingId {
    /// The binding the service gives `conversation` on adapter `adapter`: the same for every
    /// replica and every restart (so a conversation's state is found wherever its next turn
    /// runs), and distinct for distinct (caller, adapter, conversation id) triples.
    ///
    /// An anonymous conversation reads `adapter:conversation` (the form bindings had before
    /// they were scoped, so in-process data keeps working); a caller's reads
    /// `adapter.<length of the caller>.<caller>:conversation`. Adapter ids hold neither `.`
    /// nor `:`, and the length delimits the caller, so no two triples share a short form. A
    /// form too long for an id keeps a prefix and a 128-bit digest of the whole; two callers'
    /// bindings of the same conversation id still differ there (each byte of FNV-1a is a
    /// bijection of its state, so forms that differ before an equal tail keep different
    /// digests), and a store refuses a binding that names another conversation than its first.
    ///
    /// ```
    /// use harness_core::id::{AdapterId, ConversationId};
    /// use harness_core::session::{BindingId, Conversation};
    /// let adapter: AdapterId = "acp".parse().unwrap();
    /// let id: ConversationId = "conv-1".parse().unwrap();
    /// let anonymous = Conversation::anonymous(id.clone());
    /// let b = BindingId::for_conversation(&adapter, &anonymous);
    /// assert_eq!(b.as_str(), "acp:conv-1");
    /// assert_eq!(b, BindingId::for_conversation(&adapter, &anonymous));
    /// let alice = Conversation::new("alice".parse().unwrap(), id);
    /// assert_eq!(BindingId::for_conversation(&adapter, &alice).as_str(), "acp.5.alice:conv-1");
    /// let long = Conversation::anonymous("c".repeat(128).parse().unwrap());
    /// let b = BindingId::for_conversation(&adapter, &long);
    /// assert!(b.as_str().len() <= 128 && b.as_str().starts_with("acp:"));
    /// ```
    #[must_use]
    pub fn for_conversation(adapter: &crate::id::AdapterId, conversation: &Conversation) -> Self {
        let (caller, id) = (conversation.caller(), conversation.id());
        let plain = if *caller == CallerId::ANONYMOUS {
            format!("{adapter}:{id}")
        } else {
            format!("{adapter}.{}.{caller}:{id}", caller.as_str().len())
        };
        if plain.len() <= 128 {
            return Self(Arc::from(plain));
        }
        // Two FNV-1a passes with different offsets: stable across Rust versions (unlike
        // `DefaultHasher`).
        let digest = |offset: u64| {
            plain.bytes().fold(offset, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
            })
        };
        let tail = format!(
            ":{:016x}{:016x}",
            digest(0xcbf2_9ce4_8422_2325),
            digest(0x6c62_272e_07bb_0142)
        );
        let keep = 128 - tail.len();
        Self(Arc::from(format!("{}{tail}", &plain[..keep])))
    }
}

/// A thread state key chosen by the adapter: 1 to 256 characters from `[A-Za-z0-9._:/-]`.
///
/// Keys are scoped: the same key under two bindings names two different values.
///
/// ```
/// use harness_core::session::StateKey;
/// assert!("native/checkpoint:head".parse::<StateKey>().is_ok());
/// let err = "has space".parse::<StateKey>().unwrap_err();
/// assert!(err.to_string().contains("[A-Za-z0-9._:/-]"), "{err}");
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StateKey(Box<str>);

string_newtype!(
    StateKey,
    Box<str>,
    is_key,
    "state key",
    "A thread state key.",
    KEY_PATTERN,
    KEY_EXPECTED
);

// ---------------------------------------------------------------------------------------------
// Binding view
// ---------------------------------------------------------------------------------------------

/// The view of a session binding an adapter receives: which binding, for which conversation,
/// at which epoch.
///
/// The epoch starts at 0 and grows each time the session is cleared; state written under an
/// older epoch is gone and its writers are fenced.
///
/// ```
/// use harness_core::id::ConversationId;
/// use harness_core::session::{BindingId, SessionBinding};
/// let b = SessionBinding::new(BindingId::generate(), ConversationId::generate());
/// assert_eq!(b.epoch(), 0);
/// let wire = serde_json::to_value(&b).unwrap();
/// assert!(wire.get("bindingId").is_some() && wire.get("conversationId").is_some());
/// assert_eq!(serde_json::from_value::<SessionBinding>(wire).unwrap(), b);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionBinding {
    binding_id: BindingId,
    conversation_id: ConversationId,
    #[serde(default)]
    epoch: u64,
}

impl SessionBinding {
    /// A binding at epoch 0.
    #[must_use]
    pub fn new(binding_id: BindingId, conversation_id: ConversationId) -> Self {
        Self {
            binding_id,
            conversation_id,
            epoch: 0,
        }
    }

    /// The same binding at `epoch`.
    #[must_use]
    pub fn with_epoch(mut self, epoch: u64) -> Self {
        self.epoch = epoch;
        self
    }

    /// The binding id.
    #[must_use]
    pub fn binding_id(&self) -> &BindingId {
        &self.binding_id
    }

    /// The conversation that owns the binding.
    #[must_use]
    pub fn conversation_id(&self) -> &ConversationId {
        &self.conversation_id
    }

    /// The epoch.
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
}

// ---------------------------------------------------------------------------------------------
// Versions, entries, errors
// ---------------------------------------------------------------------------------------------

/// The version of a stored value. A store never hands out the same version twice for a
/// binding's key, even after a delete, so a compare-and-set cannot be fooled by a value that
/// was deleted and recreated.
///
/// ```
/// use harness_core::session::Version;
/// assert_eq!(Version::new(3).unwrap().get(), 3);
/// assert!(Version::new(0).is_none());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Version(NonZeroU64);

impl Version {
    /// A version from its number; `None` for zero. For store implementations.
    #[must_use]
    pub const fn new(n: u64) -> Option<Self> {
        match NonZeroU64::new(n) {
            Some(n) => Some(Self(n)),
            None => None,
        }
    }

    /// The number.
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0.get()
    }
}

impl fmt::Debug for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

impl JsonSchema for Version {
    fn schema_name() -> Cow<'static, str> {
        "StateVersion".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "integer",
            "minimum": 1,
            "description": "The version of a stored thread state value."
        })
    }
}

/// A stored value and its version.
///
/// `Debug` shows the length of the value, never its bytes: native state may hold conversation
/// content.
#[derive(Clone, PartialEq, Eq)]
pub struct StateEntry {
    /// The opaque value.
    pub value: Vec<u8>,
    /// Its version: pass it as `expected` to overwrite or delete it.
    pub version: Version,
}

impl fmt::Debug for StateEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateEntry")
            .field("version", &self.version)
            .field("len", &self.value.len())
            .finish()
    }
}

fn show(v: Option<&Version>) -> Cow<'static, str> {
    match v {
        Some(v) => Cow::Owned(v.to_string()),
        None => Cow::Borrowed("no value"),
    }
}

/// A thread state operation failed. Converts into a [`HarnessError`] of category
/// `persistence`.
///
/// ```
/// use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
/// use harness_core::session::{StateError, Version};
/// let err = StateError::VersionConflict {
///     key: "head".parse().unwrap(),
///     expected: Version::new(1),
///     actual: Version::new(2),
/// };
/// assert!(err.to_string().contains("expected v1"), "{err}");
/// let err = HarnessError::from(err);
/// assert_eq!(err.category(), ErrorCategory::Persistence);
/// assert_eq!(err.code(), &ErrorCode::STATE_VERSION_CONFLICT);
/// assert!(!err.public().message.contains("head"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The stored version is not the expected one: another writer got there first.
    #[error(
        "stale write to state key `{key}`: expected {}, found {}; re-read the key and retry \
         with its current version",
        show(.expected.as_ref()),
        show(.actual.as_ref())
    )]
    VersionConflict {
        /// The key written.
        key: StateKey,
        /// The version the writer expected (`None`: no value).
        expected: Option<Version>,
        /// The version stored (`None`: no value).
        actual: Option<Version>,
    },
    /// The handle's epoch is older than the binding's: the session was cleared.
    #[error(
        "stale epoch {epoch} for binding `{binding}`: the current epoch is {current}; the \
         session was cleared, use a handle for the current epoch"
    )]
    StaleEpoch {
        /// The binding.
        binding: BindingId,
        /// The handle's epoch.
        epoch: u64,
        /// The binding's current epoch.
        current: u64,
    },
    /// The binding is owned by another conversation.
    #[error(
        "binding `{binding}` belongs to conversation `{owner}`, not `{claimed}`; a binding \
         serves exactly one conversation"
    )]
    BindingMismatch {
        /// The binding.
        binding: BindingId,
        /// The conversation that owns it.
        owner: ConversationId,
        /// The conversation the request claimed.
        claimed: ConversationId,
    },
    /// A JSON value could not be encoded or decoded.
    #[error("state key `{key}` does not hold the expected JSON: {reason}")]
    Codec {
        /// The key.
        key: StateKey,
        /// What went wrong.
        reason: String,
    },
    /// The store could not save or load (a durability failure).
    #[error("the thread state store is unavailable: {reason}")]
    Unavailable {
        /// What went wrong, for operators.
        reason: String,
    },
}

impl StateError {
    /// The stable code.
    #[must_use]
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::VersionConflict { .. } => ErrorCode::STATE_VERSION_CONFLICT,
            Self::StaleEpoch { .. } => ErrorCode::STATE_EPOCH_STALE,
            Self::BindingMismatch { .. } => ErrorCode::STATE_BINDING_MISMATCH,
            Self::Codec { .. } => ErrorCode::STATE_CODEC,
            Self::Unavailable { .. } => ErrorCode::STATE_UNAVAILABLE,
        }
    }
}

impl From<StateError> for HarnessError {
    /// Category `persistence`, the error's code, a safe message without keys or ids, and the
    /// full `Display` as the internal diagnostic.
    fn from(e: StateError) -> Self {
        let message = match e {
            StateError::VersionConflict { .. } => "session state was changed by another writer",
            StateError::StaleEpoch { .. } => "the session was cleared; its old state is gone",
            StateError::BindingMismatch { .. } => {
                "the session binding belongs to another conversation"
            }
            StateError::Codec { .. } => "session state could not be encoded or decoded",
            StateError::Unavailable { .. } => "session state could not be saved or loaded",
        };
        Self::new(ErrorCategory::Persistence, message)
            .with_code(e.code())
            .with_diagnostic(e.to_string())
    }
}

// ---------------------------------------------------------------------------------------------
// The store trait and the scoped handle
// ---------------------------------------------------------------------------------------------

/// Where thread state lives: opaque values under keys scoped to a binding, written by
/// compare-and-set.
///
/// Object-safe; the runtime holds an `Arc<dyn ThreadStateStore>` and hands adapters a
/// [`ScopedThreadState`] only. Every implementation must:
///
/// - keep the keys of different bindings apart (the same key under two bindings is two
///   values), and never list one binding's keys for another;
/// - reject a binding that names another conversation than the one that first used it
///   ([`StateError::BindingMismatch`]);
/// - fence epochs: an operation at an epoch older than the binding's current one fails with
///   [`StateError::StaleEpoch`]; one at a newer epoch moves the binding there and drops the
///   older state;
/// - apply `put` and `delete` only when the stored version is the expected one
///   ([`StateError::VersionConflict`] otherwise), atomically, and never reuse a version for a
///   key;
/// - report storage failures as [`StateError::Unavailable`], not as missing values.
pub trait ThreadStateStore: Send + Sync {
    /// The value under `key`, if any.
    fn get<'a>(
        &'a self,
        binding: &'a SessionBinding,
        key: &'a StateKey,
    ) -> BoxFuture<'a, Result<Option<StateEntry>, StateError>>;

    /// Stores `value` under `key` if the stored version is `expected` (`None`: no value yet),
    /// returning the new version.
    fn put<'a>(
        &'a self,
        binding: &'a SessionBinding,
        key: &'a StateKey,
        value: Vec<u8>,
        expected: Option<Version>,
    ) -> BoxFuture<'a, Result<Version, StateError>>;

    /// Removes the value under `key` if its stored version is `expected`.
    fn delete<'a>(
        &'a self,
        binding: &'a SessionBinding,
        key: &'a StateKey,
        expected: Version,
    ) -> BoxFuture<'a, Result<(), StateError>>;

    /// The binding's keys, sorted.
    fn list_keys<'a>(
        &'a self,
        binding: &'a SessionBinding,
    ) -> BoxFuture<'a, Result<Vec<StateKey>, StateError>>;

    /// `session.clear`: drops the binding's state and moves it to the next epoch, returned.
    /// Handles of the old epoch are fenced from then on; of two concurrent clears of the same
    /// epoch, one wins and the other gets [`StateError::StaleEpoch`].
    fn clear<'a>(
        &'a self,
        binding: &'a SessionBinding,
    ) -> BoxFuture<'a, Result<SessionBinding, StateError>>;

    /// The binding `id` of `conversation` at its current epoch: epoch 0 for a binding never
    /// used (it is recorded as `conversation`'s), the epoch its last clear moved it to
    /// otherwise. For the service, which hands runtimes a handle at the current epoch; an
    /// adapter never calls it (it sees only its [`ScopedThreadState`]).
    ///
    /// The default asks for a value at epoch 0 and reads the current epoch from the
    /// [`StateError::StaleEpoch`] every conforming store answers with; a store may answer in
    /// one step instead.
    ///
    /// # Errors
    /// [`StateError::BindingMismatch`] when the binding serves another conversation;
    /// [`StateError::Unavailable`] when the store fails.
    fn current<'a>(
        &'a self,
        id: &'a BindingId,
        conversation: &'a ConversationId,
    ) -> BoxFuture<'a, Result<SessionBinding, StateError>> {
        Box::pin(async move {
            let first = SessionBinding::new(id.clone(), conversation.clone());
            let key = StateKey(Box::from(CURRENT_PROBE));
            match self.get(&first, &key).await {
                Ok(_) => Ok(first),
                Err(StateError::StaleEpoch { current, .. }) => Ok(first.with_epoch(current)),
                Err(e) => Err(e),
            }
        })
    }
}

/// The key [`ThreadStateStore::current`]'s default reads (its value, if any, is not used).
const CURRENT_PROBE: &str = "harness.current";

/// The thread state an adapter receives: bound to one [`SessionBinding`].
///
/// It has no way to name another binding: every operation takes only a key, and the binding
/// is fixed at construction. It does not expose the store behind it. Clones share the store
/// and keep the same binding.
///
/// ```
/// use harness_core::id::ConversationId;
/// use harness_core::session::{BindingId, InMemoryThreadStateStore, SessionBinding};
///
/// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// rt.block_on(async {
///     let store = InMemoryThreadStateStore::new();
///     let conv = ConversationId::generate();
///     let mine = store.scoped(SessionBinding::new(BindingId::generate(), conv.clone()));
///     let theirs = store.scoped(SessionBinding::new(BindingId::generate(), conv));
///     let key = "head".parse().unwrap();
///     theirs.put_json(&key, &serde_json::json!({ "turn": 3 }), None).await.unwrap();
///     assert_eq!(mine.get(&key).await.unwrap(), None);
///     assert!(mine.list_keys().await.unwrap().is_empty());
///     let (value, _version) = theirs.get_json::<serde_json::Value>(&key).await.unwrap().unwrap();
///     assert_eq!(value["turn"], 3);
/// });
/// ```
#[derive(Clone)]
pub struct ScopedThreadState {
    store: Arc<dyn ThreadStateStore>,
    binding: SessionBinding,
}

impl ScopedThreadState {
    /// Binds `store` to `binding`. The runtime calls this; adapters only receive the result.
    #[must_use]
    pub fn new(store: Arc<dyn ThreadStateStore>, binding: SessionBinding) -> Self {
        Self { store, binding }
    }

    /// The binding this handle is scoped to.
    #[must_use]
    pub fn binding(&self) -> &SessionBinding {
        &self.binding
    }

    /// The value under `key`, if any.
    ///
    /// # Errors
    ///
    /// [`StateError::StaleEpoch`] after the session was cleared, [`StateError::Unavailable`]
    /// when the store fails.
    pub async fn get(&self, key: &StateKey) -> Result<Option<StateEntry>, StateError> {
        self.store.get(&self.binding, key).await
    }

    /// Stores `value` under `key` if the stored version is `expected` (`None`: create),
    /// returning the new version.
    ///
    /// # Errors
    ///
    /// [`StateError::VersionConflict`] for a stale `expected`, plus those of
    /// [`get`](Self::get).
    pub async fn put(
        &self,
        key: &StateKey,
        value: Vec<u8>,
        expected: Option<Version>,
    ) -> Result<Version, StateError> {
        self.store.put(&self.binding, key, value, expected).await
    }

    /// Removes the value under `key` if its version is `expected`.
    ///
    /// # Errors
    ///
    /// [`StateError::VersionConflict`] when the value changed or is gone, plus those of
    /// [`get`](Self::get).
    pub async fn delete(&self, key: &StateKey, expected: Version) -> Result<(), StateError> {
        self.store.delete(&self.binding, key, expected).await
    }

    /// This binding's keys, sorted.
    ///
    /// # Errors
    ///
    /// As [`get`](Self::get).
    pub async fn list_keys(&self) -> Result<Vec<StateKey>, StateError> {
        self.store.list_keys(&self.binding).await
    }

    /// The JSON value under `key`, decoded, with its version.
    ///
    /// # Errors
    ///
    /// [`StateError::Codec`] when the stored bytes are not a `T` in JSON, plus those of
    /// [`get`](Self::get).
    pub async fn get_json<T: DeserializeOwned>(
        &self,
        key: &StateKey,
    ) -> Result<Option<(T, Version)>, StateError> {
        let Some(entry) = self.get(key).await? else {
            return Ok(None);
        };
        let value = serde_json::from_slice(&entry.value).map_err(|e| StateError::Codec {
            key: key.clone(),
            reason: e.to_string(),
        })?;
        Ok(Some((value, entry.version)))
    }

    /// Encodes `value` as JSON and [`put`](Self::put)s it.
    ///
    /// # Errors
    ///
    /// [`StateError::Codec`] when `value` cannot be encoded, plus those of [`put`](Self::put).
    pub async fn put_json<T: Serialize + ?Sized>(
        &self,
        key: &StateKey,
        value: &T,
        expected: Option<Version>,
    ) -> Result<Version, StateError> {
        let bytes = serde_json::to_vec(value).map_err(|e| StateError::Codec {
            key: key.clone(),
            reason: e.to_string(),
        })?;
        self.put(key, bytes, expected).await
    }
}

impl fmt::Debug for ScopedThreadState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScopedThreadState")
            .field("binding", &self.binding)
            .finish_non_exhaustive()
    }
}

// ---------------------------------------------------------------------------------------------
// In-memory store
// ---------------------------------------------------------------------------------------------

/// The in-memory [`ThreadStateStore`]: correct under concurrency, lost on restart.
///
/// One mutex guards the map; it is never held across an `await` (every operation completes
/// under the lock, then returns a ready future). Clones share the same state.
///
/// ```
/// use harness_core::id::ConversationId;
/// use harness_core::session::{BindingId, InMemoryThreadStateStore, SessionBinding};
/// let store = InMemoryThreadStateStore::new();
/// let state = store.scoped(SessionBinding::new(BindingId::generate(), ConversationId::generate()));
/// assert_eq!(state.binding().epoch(), 0);
/// ```
#[derive(Clone, Default)]
pub struct InMemoryThreadStateStore {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    /// The last version handed out, store-wide: versions are never reused.
    last_version: u64,
    bindings: HashMap<BindingId, Slot>,
}

struct Slot {
    owner: ConversationId,
    epoch: u64,
    entries: BTreeMap<StateKey, StateEntry>,
}

impl InMemoryThreadStateStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A handle scoped to `binding`, for an adapter.
    #[must_use]
    pub fn scoped(&self, binding: SessionBinding) -> ScopedThreadState {
        ScopedThreadState::new(Arc::new(self.clone()), binding)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every critical section leaves the map consistent before anything can panic, so a
        // poisoned lock still guards valid data.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get_now(
        &self,
        b: &SessionBinding,
        key: &StateKey,
    ) -> Result<Option<StateEntry>, StateError> {
        let mut inner = self.lock();
        let slot = inner.admit(b)?;
        Ok(slot.entries.get(key).cloned())
    }

    fn put_now(
        &self,
        b: &SessionBinding,
        key: &StateKey,
        value: Vec<u8>,
        expected: Option<Version>,
    ) -> Result<Version, StateError> {
        let mut inner = self.lock();
        let actual = inner.admit(b)?.entries.get(key).map(|e| e.version);
        if actual != expected {
            return Err(StateError::VersionConflict {
                key: key.clone(),
                expected,
                actual,
            });
        }
        let version = inner.next_version()?;
        inner
            .admit(b)?
            .entries
            .insert(key.clone(), StateEntry { value, version });
        Ok(version)
    }

    fn delete_now(
        &self,
        b: &SessionBinding,
        key: &StateKey,
        expected: Version,
    ) -> Result<(), StateError> {
        let mut inner = self.lock();
        let slot = inner.admit(b)?;
        let actual = slot.entries.get(key).map(|e| e.version);
        if actual != Some(expected) {
            return Err(StateError::VersionConflict {
                key: key.clone(),
                expected: Some(expected),
                actual,
            });
        }
        slot.entries.remove(key);
        Ok(())
    }

    fn list_now(&self, b: &SessionBinding) -> Result<Vec<StateKey>, StateError> {
        let mut inner = self.lock();
        Ok(inner.admit(b)?.entries.keys().cloned().collect())
    }

    fn clear_now(&self, b: &SessionBinding) -> Result<SessionBinding, StateError> {
        let mut inner = self.lock();
        let slot = inner.admit(b)?;
        let next = slot
            .epoch
            .checked_add(1)
            .ok_or_else(|| StateError::Unavailable {
                reason: format!("binding `{}` has no epoch left", b.binding_id),
            })?;
        slot.entries.clear();
        slot.epoch = next;
        Ok(b.clone().with_epoch(next))
    }
}

impl Inner {
    /// The binding's slot, after checking ownership and fencing the epoch.
    fn admit(&mut self, b: &SessionBinding) -> Result<&mut Slot, StateError> {
        let slot = self
            .bindings
            .entry(b.binding_id.clone())
            .or_insert_with(|| Slot {
                owner: b.conversation_id.clone(),
                epoch: b.epoch,
                entries: BTreeMap::new(),
            });
        if slot.owner != b.conversation_id {
            return Err(StateError::BindingMismatch {
                binding: b.binding_id.clone(),
                owner: slot.owner.clone(),
                claimed: b.conversation_id.clone(),
            });
        }
        if b.epoch < slot.epoch {
            return Err(StateError::StaleEpoch {
                binding: b.binding_id.clone(),
                epoch: b.epoch,
                current: slot.epoch,
            });
        }
        if b.epoch > slot.epoch {
            slot.epoch = b.epoch;
            slot.entries.clear();
        }
        Ok(slot)
    }

    fn next_version(&mut self) -> Result<Version, StateError> {
        let n = self.last_version.checked_add(1);
        match n.and_then(Version::new) {
            Some(v) => {
                self.last_version = v.get();
                Ok(v)
            }
            None => Err(StateError::Unavailable {
                reason: "the store has no versions left".to_owned(),
            }),
        }
    }
}

impl ThreadStateStore for InMemoryThreadStateStore {
    fn get<'a>(
        &'a self,
        binding: &'a SessionBinding,
        key: &'a StateKey,
    ) -> BoxFuture<'a, Result<Option<StateEntry>, StateError>> {
        Box::pin(std::future::ready(self.get_now(binding, key)))
    }

    fn put<'a>(
        &'a self,
        binding: &'a SessionBinding,
        key: &'a StateKey,
        value: Vec<u8>,
        expected: Option<Version>,
    ) -> BoxFuture<'a, Result<Version, StateError>> {
        Box::pin(std::future::ready(
            self.put_now(binding, key, value, expected),
        ))
    }

    fn delete<'a>(
        &'a self,
        binding: &'a SessionBinding,
        key: &'a StateKey,
        expected: Version,
    ) -> BoxFuture<'a, Result<(), StateError>> {
        Box::pin(std::future::ready(self.delete_now(binding, key, expected)))
    }

    fn list_keys<'a>(
        &'a self,
        binding: &'a SessionBinding,
    ) -> BoxFuture<'a, Result<Vec<StateKey>, StateError>> {
        Box::pin(std::future::ready(self.list_now(binding)))
    }

    fn clear<'a>(
        &'a self,
        binding: &'a SessionBinding,
    ) -> BoxFuture<'a, Result<SessionBinding, StateError>> {
        Box::pin(std::future::ready(self.clear_now(binding)))
    }
}

impl fmt::Debug for InMemoryThreadStateStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.lock();
        f.debug_struct("InMemoryThreadStateStore")
            .field("bindings", &inner.bindings.len())
            .field("last_version", &inner.last_version)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn key(s: &str) -> StateKey {
        s.parse().unwrap()
    }

    fn binding() -> SessionBinding {
        SessionBinding::new(BindingId::generate(), ConversationId::generate())
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn ids_and_keys_are_validated() {
        assert!("bind_1:x.y-z".parse::<BindingId>().is_ok());
        for bad in ["", "a b", "a/b", &"x".repeat(129)] {
            assert!(bad.parse::<BindingId>().is_err(), "{bad:?}");
        }
        assert!("a/b:c.d-e_f".parse::<StateKey>().is_ok());
        assert!(StateKey::try_from("k".repeat(256)).is_ok());
        for bad in ["", "a b", "ü", &"k".repeat(257)] {
            assert!(bad.parse::<StateKey>().is_err(), "{bad:?}");
        }
        let err = serde_json::from_str::<StateKey>("\"a b\"").unwrap_err();
        assert!(err.to_string().contains("invalid state key `a b`"), "{err}");
        // A binding crosses a version boundary (a worker, a store): a newer writer's field
        // is read past (see `crate::wire`).
        let read = serde_json::from_value::<SessionBinding>(serde_json::json!({
            "bindingId": "b", "conversationId": "c", "epoch": 0, "owner": "x"
        }))
        .unwrap();
        assert_eq!(read.epoch(), 0);
    }

    #[test]
    fn a_scoped_handle_cannot_reach_another_binding() {
        block_on(async {
            let store = InMemoryThreadStateStore::new();
            let conv = ConversationId::generate();
            let a = store.scoped(SessionBinding::new(BindingId::generate(), conv.clone()));
            let b = store.scoped(SessionBinding::new(BindingId::generate(), conv));
            let k = key("head");
            let va = a.put(&k, b"a".to_vec(), None).await.unwrap();
            // Same key, other binding: a separate value, created from scratch.
            let vb = b.put(&k, b"b".to_vec(), None).await.unwrap();
            b.put(&key("only-b"), vec![], None).await.unwrap();
            assert_eq!(a.get(&k).await.unwrap().unwrap().value, b"a");
            assert_eq!(b.get(&k).await.unwrap().unwrap().value, b"b");
            assert_eq!(a.list_keys().await.unwrap(), [key("head")]);
            assert_eq!(b.list_keys().await.unwrap(), [key("head"), key("only-b")]);
            assert_eq!(a.get(&key("only-b")).await.unwrap(), None);
            // Versions read from one binding do not act on the other.
            assert!(a.delete(&k, vb).await.is_err());
            a.delete(&k, va).await.unwrap();
            assert_eq!(b.get(&k).await.unwrap().unwrap().version, vb);
            // A clone keeps the scope.
            let a2 = a.clone();
            assert_eq!(a2.binding(), a.binding());
            assert_eq!(a2.list_keys().await.unwrap(), Vec::<StateKey>::new());
        });
    }

    #[test]
    fn writes_are_compare_and_set() {
        block_on(async {
            let store = InMemoryThreadStateStore::new();
            let s = store.scoped(binding());
            let k = key("k");
            let v1 = s.put(&k, b"1".to_vec(), None).await.unwrap();
            let err = s.put(&k, b"x".to_vec(), None).await.unwrap_err();
            assert_eq!(
                err,
                StateError::VersionConflict {
                    key: k.clone(),
                    expected: None,
                    actual: Some(v1)
                }
            );
            let v2 = s.put(&k, b"2".to_vec(), Some(v1)).await.unwrap();
            assert!(v2 > v1);
            assert!(matches!(
                s.put(&k, b"x".to_vec(), Some(v1)).await,
                Err(StateError::VersionConflict { actual: Some(a), .. }) if a == v2
            ));
            assert!(s.delete(&k, v1).await.is_err());
            s.delete(&k, v2).await.unwrap();
            assert!(s.delete(&k, v2).await.is_err());
            // Recreated: a fresh version, so a writer holding v2 or v1 stays fenced (no ABA).
            let v3 = s.put(&k, b"3".to_vec(), None).await.unwrap();
            assert!(v3 != v1 && v3 != v2);
            assert!(s.put(&k, b"x".to_vec(), Some(v2)).await.is_err());
            assert_eq!(s.get(&k).await.unwrap().unwrap().value, b"3");
        });
    }

    #[test]
    fn clear_moves_to_a_new_epoch_and_fences_the_old_one() {
        block_on(async {
            let store = InMemoryThreadStateStore::new();
            let b0 = binding();
            let old = store.scoped(b0.clone());
            let k = key("k");
            old.put(&k, b"old".to_vec(), None).await.unwrap();

            let b1 = store.clear(&b0).await.unwrap();
            assert_eq!(b1.epoch(), 1);
            assert_eq!(b1.binding_id(), b0.binding_id());
            for result in [
                old.get(&k).await.map(|_| ()),
                old.put(&k, vec![], None).await.map(|_| ()),
                old.list_keys().await.map(|_| ()),
            ] {
                assert_eq!(
                    result,
                    Err(StateError::StaleEpoch {
                        binding: b0.binding_id().clone(),
                        epoch: 0,
                        current: 1
                    })
                );
            }
            // A second clear of the same epoch loses.
            assert!(matches!(
                store.clear(&b0).await,
                Err(StateError::StaleEpoch { .. })
            ));
            let new = store.scoped(b1.clone());
            assert_eq!(new.get(&k).await.unwrap(), None);
            new.put(&k, b"new".to_vec(), None).await.unwrap();

            // A binding presented at a later epoch (cleared elsewhere) drops older state.
            let b5 = b1.with_epoch(5);
            let newer = store.scoped(b5);
            assert_eq!(newer.get(&k).await.unwrap(), None);
            assert!(matches!(
                new.get(&k).await,
                Err(StateError::StaleEpoch { current: 5, .. })
            ));
        });
    }

    #[test]
    fn a_binding_serves_one_conversation() {
        block_on(async {
            let store = InMemoryThreadStateStore::new();
            let b = binding();
            store.scoped(b.clone()).list_keys().await.unwrap();
            let forged = SessionBinding::new(b.binding_id().clone(), ConversationId::generate());
            let err = store.scoped(forged).get(&key("k")).await.unwrap_err();
            assert!(matches!(err, StateError::BindingMismatch { .. }), "{err}");
            assert_eq!(err.code(), ErrorCode::STATE_BINDING_MISMATCH);
        });
    }

    #[test]
    fn errors_map_to_persistence_without_leaking_keys() {
        let cases = [
            StateError::VersionConflict {
                key: key("secret-key"),
                expected: None,
                actual: Version::new(1),
            },
            StateError::StaleEpoch {
                binding: "secret-binding".parse().unwrap(),
                epoch: 0,
                current: 1,
            },
            StateError::Codec {
                key: key("secret-key"),
                reason: "bad".into(),
            },
            StateError::Unavailable {
                reason: "secret dsn".into(),
            },
        ];
        for e in cases {
            let code = e.code();
            let h = HarnessError::from(e.clone());
            assert_eq!(h.category(), ErrorCategory::Persistence);
            assert_eq!(h.code(), &code);
            assert!(
                !h.public().message.contains("secret"),
                "{}",
                h.public().message
            );
            assert_eq!(h.diagnostic(), Some(e.to_string().as_str()));
        }
        assert_eq!(
            StateError::VersionConflict {
                key: key("k"),
                expected: None,
                actual: None
            }
            .code()
            .as_str(),
            "STATE_VERSION_CONFLICT"
        );
    }

    #[test]
    fn json_helpers_round_trip_and_report_codec_errors() {
        block_on(async {
            let s = InMemoryThreadStateStore::new().scoped(binding());
            let k = key("rec");
            let v = s
                .put_json(&k, &serde_json::json!({ "turn": 1 }), None)
                .await
                .unwrap();
            let (value, version) = s.get_json::<serde_json::Value>(&k).await.unwrap().unwrap();
            assert_eq!(value["turn"], 1);
            assert_eq!(version, v);
            s.put(&k, b"\xff not json".to_vec(), Some(v)).await.unwrap();
            let err = s.get_json::<serde_json::Value>(&k).await.unwrap_err();
            assert_eq!(err.code(), ErrorCode::STATE_CODEC);
            assert_eq!(s.get_json::<u8>(&key("absent")).await.unwrap(), None);
        });
    }

    #[test]
    fn the_binding_schema_accepts_what_serde_writes() {
        let schema = schemars::generate::SchemaSettings::draft2020_12()
            .into_generator()
            .into_root_schema_for::<SessionBinding>();
        let validator = jsonschema::validator_for(schema.as_value()).unwrap();
        let wire = serde_json::to_value(binding().with_epoch(7)).unwrap();
        assert!(validator.is_valid(&wire), "{wire}");
        assert!(
            !validator.is_valid(&serde_json::json!({ "bindingId": "a b", "conversationId": "c" }))
        );
    }

    #[test]
    fn debug_never_shows_values() {
        let e = StateEntry {
            value: b"conversation secret".to_vec(),
            version: Version::new(1).unwrap(),
        };
        assert_eq!(format!("{e:?}"), "StateEntry { version: v1, len: 19 }");
        let store = InMemoryThreadStateStore::new();
        let s = store.scoped(binding());
        block_on(s.put(&key("k"), b"conversation secret".to_vec(), None)).unwrap();
        let shown = format!("{store:?} {s:?}");
        assert!(!shown.contains("secret"), "{shown}");
    }

    #[test]
    fn the_store_is_object_safe_and_handles_are_send() {
        fn assert_send_sync<T: Send + Sync>(_: &T) {}
        let store: Arc<dyn ThreadStateStore> = Arc::new(InMemoryThreadStateStore::new());
        let scoped = ScopedThreadState::new(store, binding());
        assert_send_sync(&scoped);
        let k = key("k");
        let fut = scoped.get(&k);
        fn assert_send<T: Send>(_: &T) {}
        assert_send(&fut);
        drop(fut);
    }

    #[test]
    fn concurrent_writers_see_exactly_one_winner_per_version() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .build()
            .unwrap();
        rt.block_on(async {
            let store = InMemoryThreadStateStore::new();
            let state = store.scoped(binding());
            let k = key("counter");
            let v0 = state
                .put(&k, 0_u64.to_le_bytes().to_vec(), None)
                .await
                .unwrap();

            // One round: 100 writers all expecting v0; exactly one wins.
            let tasks: Vec<_> = (0..100_u64)
                .map(|i| {
                    let (state, k) = (state.clone(), k.clone());
                    tokio::spawn(
                        async move { state.put(&k, i.to_le_bytes().to_vec(), Some(v0)).await },
                    )
                })
                .collect();
            let mut wins = 0;
            for t in tasks {
                match t.await.unwrap() {
                    Ok(_) => wins += 1,
                    Err(StateError::VersionConflict { expected, .. }) => {
                        assert_eq!(expected, Some(v0));
                    }
                    Err(other) => panic!("unexpected {other}"),
                }
            }
            assert_eq!(wins, 1);

            // Read-modify-write loops: 100 increments, each expected version won once.
            let tasks: Vec<_> = (0..100)
                .map(|_| {
                    let (state, k) = (state.clone(), k.clone());
                    tokio::spawn(async move {
                        loop {
                            let entry = state.get(&k).await.unwrap().unwrap();
                            let n = u64::from_le_bytes(entry.value[..8].try_into().unwrap());
                            match state
                                .put(&k, (n + 1).to_le_bytes().to_vec(), Some(entry.version))
                                .await
                            {
                                Ok(_) => return entry.version,
                                Err(StateError::VersionConflict { .. }) => {
                                    tokio::task::yield_now().await;
                                }
                                Err(other) => panic!("unexpected {other}"),
                            }
                        }
                    })
                })
                .collect();
            let mut won = BTreeSet::new();
            for t in tasks {
                assert!(won.insert(t.await.unwrap()), "a version was won twice");
            }
            let entry = state.get(&k).await.unwrap().unwrap();
            let before = u64::from_le_bytes(entry.value[..8].try_into().unwrap());
            // The first round stored some i; 100 increments followed.
            assert!((100..200).contains(&before), "{before}");
            assert_eq!(won.len(), 100);
        });
    }

    #[derive(Debug, Clone)]
    enum Op {
        Put { key: u8, expect_current: bool },
        Delete { key: u8, expect_current: bool },
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..4_u8, any::<bool>()).prop_map(|(key, expect_current)| Op::Put { key, expect_current }),
            2 => (0..4_u8, any::<bool>()).prop_map(|(key, expect_current)| Op::Delete { key, expect_current }),
            1 => Just(Op::Clear),
        ]
    }

    proptest! {
        /// Against a model: a write succeeds exactly when it names the current version, the
        /// other binding never changes, and clear empties only its own binding.
        #[test]
        fn the_store_matches_a_model(ops in prop::collection::vec(op(), 0..60)) {
            block_on(async {
                let store = InMemoryThreadStateStore::new();
                let mut mine = binding();
                let other = store.scoped(binding());
                other.put(&key("k0"), b"other".to_vec(), None).await.unwrap();
                let mut model: BTreeMap<StateKey, Version> = BTreeMap::new();
                for (i, op) in ops.into_iter().enumerate() {
                    let s = store.scoped(mine.clone());
                    match op {
                        Op::Put { key: k, expect_current } => {
                            let k = key(&format!("k{k}"));
                            let current = model.get(&k).copied();
                            let expected = if expect_current { current } else { Version::new(u64::MAX) };
                            let r = s.put(&k, vec![u8::try_from(i % 256).unwrap()], expected).await;
                            if expected == current {
                                let v = r.unwrap();
                                prop_assert!(current.is_none_or(|c| v > c));
                                model.insert(k, v);
                            } else {
                                let is_conflict = matches!(r, Err(StateError::VersionConflict { .. }));
                                prop_assert!(is_conflict);
                            }
                        }
                        Op::Delete { key: k, expect_current } => {
                            let k = key(&format!("k{k}"));
                            let current = model.get(&k).copied();
                            let expected = if expect_current { current } else { None };
                            match expected {
                                Some(v) => {
                                    s.delete(&k, v).await.unwrap();
                                    model.remove(&k);
                                }
                                None => {
                                    let stale = Version::new(u64::MAX).unwrap();
                                    prop_assert!(s.delete(&k, stale).await.is_err());
                                }
                            }
                        }
                        Op::Clear => {
                            mine = store.clear(&mine).await.unwrap();
                            model.clear();
                        }
                    }
                    let keys = store.scoped(mine.clone()).list_keys().await.unwrap();
                    prop_assert_eq!(keys, model.keys().cloned().collect::<Vec<_>>());
                    prop_assert_eq!(other.get(&key("k0")).await.unwrap().unwrap().value, b"other");
                }
                Ok(())
            })?;
        }
    }
}
