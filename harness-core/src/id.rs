//! Identifiers: executions, conversations, actions, artifacts, tool calls, adapters,
//! idempotency keys, and the event sequence.
//!
//! Every identifier is a validated newtype: it can only be built through [`FromStr`] /
//! `TryFrom<String>` (or a generator), and deserialization runs the same validation, so an
//! invalid identifier never exists in memory. Errors name the identifier kind, the rejected
//! value and the rule it broke.

use std::borrow::Cow;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::num::NonZeroU64;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// An identifier was rejected.
///
/// ```
/// use harness_core::id::AdapterId;
/// let err = "Bad-Id".parse::<AdapterId>().unwrap_err();
/// assert!(err.to_string().contains("^[a-z][a-z0-9_]{1,63}$"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} `{value}`: expected {expected}")]
pub struct InvalidId {
    /// Which identifier kind was being parsed (`adapter id`, `execution id`, ...).
    pub kind: &'static str,
    /// The rejected input, truncated to 80 characters.
    pub value: String,
    /// What a valid value looks like.
    pub expected: &'static str,
}

impl InvalidId {
    pub(crate) fn new(kind: &'static str, value: &str, expected: &'static str) -> Self {
        let value = if value.chars().count() > 80 {
            let mut v: String = value.chars().take(77).collect();
            v.push_str("...");
            v
        } else {
            value.to_owned()
        };
        Self {
            kind,
            value,
            expected,
        }
    }
}

/// Opaque identifiers: 1 to 128 characters from `[A-Za-z0-9._:-]`.
pub(crate) const OPAQUE_PATTERN: &str = "^[A-Za-z0-9._:-]{1,128}$";
pub(crate) const OPAQUE_EXPECTED: &str = "1 to 128 characters from [A-Za-z0-9._:-]";

pub(crate) fn is_opaque(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Process-unique, unpredictable-enough suffix for generated identifiers.
///
/// Uniqueness comes from a process-wide counter; the random part (std's randomly seeded
/// hasher) keeps identifiers from two processes apart. Not a security token.
pub(crate) fn fresh_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(n);
    format!("{:016x}{:08x}", h.finish(), n)
}

/// An opaque identifier type: `generate`, `as_str`, `FromStr` / `TryFrom<String>` checking
/// [`OPAQUE_PATTERN`], and the shared impls. Used across the crate.
macro_rules! opaque_id {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $description:literal, $prefix:literal) => {
        $(#[$doc])*
        ///
        /// Cloning is cheap (a reference count), so events and spans can carry it freely.
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(::std::sync::Arc<str>);

        impl $name {
            /// Generates a fresh identifier, unique within this process.
            #[must_use]
            pub fn generate() -> Self {
                Self(::std::sync::Arc::from(format!(
                    concat!($prefix, "_{}"),
                    $crate::id::fresh_suffix()
                )))
            }

            /// The identifier as a string slice.
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::id::InvalidId;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                if $crate::id::is_opaque(s) {
                    Ok(Self(s.into()))
                } else {
                    Err($crate::id::InvalidId::new($kind, s, $crate::id::OPAQUE_EXPECTED))
                }
            }
        }

        impl TryFrom<String> for $name {
            type Error = $crate::id::InvalidId;
            fn try_from(s: String) -> Result<Self, Self::Error> {
                if $crate::id::is_opaque(&s) {
                    Ok(Self(::std::sync::Arc::from(s)))
                } else {
                    Err($crate::id::InvalidId::new($kind, &s, $crate::id::OPAQUE_EXPECTED))
                }
            }
        }

        $crate::id::string_id_common!($name, $crate::id::OPAQUE_PATTERN, $description);
    };
}

pub(crate) use opaque_id;

/// The trait impls every validated string newtype shares: `Display`, `Debug`, `AsRef<str>`,
/// serde as a plain string (deserialization runs the type's `FromStr`, so an invalid value
/// never exists), and a JSON Schema with the type's pattern. Used across the crate.
macro_rules! string_id_common {
    ($name:ident, $pattern:expr, $description:literal) => {
        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl ::std::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                write!(f, concat!(stringify!($name), "({:?})"), &*self.0)
            }
        }

        impl ::std::convert::AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <::std::borrow::Cow<'de, str> as ::serde::Deserialize>::deserialize(d)?;
                s.parse().map_err(::serde::de::Error::custom)
            }
        }

        impl ::schemars::JsonSchema for $name {
            fn schema_name() -> ::std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }
            fn json_schema(_: &mut ::schemars::SchemaGenerator) -> ::schemars::Schema {
                ::schemars::json_schema!({
                    "type": "string",
                    "pattern": $pattern,
                    "description": $description
                })
            }
        }
    };
}

pub(crate) use string_id_common;

opaque_id!(
    /// Identifies one execution (one bounded attempt).
    ///
    /// ```
    /// use harness_core::id::ExecutionId;
    /// let a = ExecutionId::generate();
    /// let b: ExecutionId = a.as_str().parse().unwrap();
    /// assert_eq!(a, b);
    /// assert!("has space".parse::<ExecutionId>().is_err());
    /// ```
    ExecutionId, "execution id", "An execution id.", "exec"
);
opaque_id!(
    /// Identifies a caller-facing multi-turn conversation.
    ConversationId, "conversation id", "A conversation id.", "conv"
);
opaque_id!(
    /// Identifies one action request (form input or tool approval).
    ActionId, "action id", "An action id.", "act"
);
opaque_id!(
    /// Identifies one artifact; unique within its execution.
    ArtifactId, "artifact id", "An artifact id.", "art"
);
opaque_id!(
    /// Identifies one tool call within an execution.
    ToolCallId, "tool call id", "A tool call id.", "call"
);

/// The stable identifier of an adapter, matching `^[a-z][a-z0-9_]{1,63}$`.
///
/// ```
/// use harness_core::id::AdapterId;
/// assert!("scripted".parse::<AdapterId>().is_ok());
/// assert!("claude_code".parse::<AdapterId>().is_ok());
/// assert!("x".parse::<AdapterId>().is_err()); // too short
/// assert!("9lives".parse::<AdapterId>().is_err()); // must start with a letter
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AdapterId(Box<str>);

/// The pattern every [`AdapterId`] matches.
pub const ADAPTER_ID_PATTERN: &str = "^[a-z][a-z0-9_]{1,63}$";

impl AdapterId {
    /// Checks `s` against [`ADAPTER_ID_PATTERN`]; usable in `const` context, so a macro can
    /// reject a bad literal at compile time.
    #[must_use]
    pub const fn is_valid(s: &str) -> bool {
        let b = s.as_bytes();
        if b.len() < 2 || b.len() > 64 || !b[0].is_ascii_lowercase() {
            return false;
        }
        let mut i = 1;
        while i < b.len() {
            let c = b[i];
            if !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_') {
                return false;
            }
            i += 1;
        }
        true
    }

    /// The identifier as a string slice.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for AdapterId {
    type Err = InvalidId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if Self::is_valid(s) {
            Ok(Self(s.into()))
        } else {
            Err(InvalidId::new(
                "adapter id",
                s,
                "a lowercase id matching ^[a-z][a-z0-9_]{1,63}$",
            ))
        }
    }
}

impl TryFrom<String> for AdapterId {
    type Error = InvalidId;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

string_id_common!(AdapterId, ADAPTER_ID_PATTERN, "An adapter id.");

/// A caller-chosen idempotency key: 1 to 255 printable ASCII characters.
///
/// ```
/// use harness_core::id::IdempotencyKey;
/// assert!("order-42/attempt".parse::<IdempotencyKey>().is_ok());
/// assert!("".parse::<IdempotencyKey>().is_err());
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IdempotencyKey(Box<str>);

const IDEMPOTENCY_PATTERN: &str = "^[\\x21-\\x7e]{1,255}$";

impl IdempotencyKey {
    /// The key as a string slice.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for IdempotencyKey {
    type Err = InvalidId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if (1..=255).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_graphic()) {
            Ok(Self(s.into()))
        } else {
            Err(InvalidId::new(
                "idempotency key",
                s,
                "1 to 255 printable ASCII characters without spaces",
            ))
        }
    }
}

impl TryFrom<String> for IdempotencyKey {
    type Error = InvalidId;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

string_id_common!(IdempotencyKey, IDEMPOTENCY_PATTERN, "An idempotency key.");

/// The number of an event within its execution: contiguous, strictly increasing, from 1.
///
/// ```
/// use harness_core::id::Sequence;
/// assert_eq!(Sequence::FIRST.get(), 1);
/// assert_eq!(Sequence::FIRST.next().get(), 2);
/// assert!(serde_json::from_str::<Sequence>("0").is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Sequence(NonZeroU64);

impl Sequence {
    /// The first event's sequence number.
    pub const FIRST: Self = Self(NonZeroU64::MIN);

    /// Builds a sequence number; `None` for zero.
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

    /// The following sequence number.
    #[must_use]
    pub const fn next(self) -> Self {
        Self(self.0.saturating_add(1))
    }
}

impl fmt::Debug for Sequence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

impl fmt::Display for Sequence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl JsonSchema for Sequence {
    fn schema_name() -> Cow<'static, str> {
        "Sequence".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "integer",
            "minimum": 1,
            "description": "Event sequence number within one execution, from 1."
        })
    }
}

/// A replay cursor: read the events *after* this position.
///
/// [`Cursor::START`] reads from the first event; a cursor made from a [`Sequence`] reads the
/// events after that one, so a reconnecting consumer passes the last sequence it saw.
///
/// ```
/// use harness_core::id::{Cursor, Sequence};
/// assert_eq!(Cursor::START.after(), 0);
/// assert_eq!(Cursor::from(Sequence::FIRST).after(), 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Cursor(u64);

impl Cursor {
    /// Before the first event.
    pub const START: Self = Self(0);

    /// A cursor after `n` events (`0` is [`Cursor::START`]).
    #[must_use]
    pub const fn after_seq(n: u64) -> Self {
        Self(n)
    }

    /// How many events this cursor is after.
    #[must_use]
    pub const fn after(self) -> u64 {
        self.0
    }
}

impl From<Sequence> for Cursor {
    fn from(s: Sequence) -> Self {
        Self(s.get())
    }
}

impl From<Option<Sequence>> for Cursor {
    fn from(s: Option<Sequence>) -> Self {
        s.map_or(Self::START, Self::from)
    }
}

/// Who a request comes from: the scope of its idempotency key.
///
/// An opaque identifier of 1 to 128 characters from `[A-Za-z0-9._:-]`. Put it in the request's
/// [`extensions`](crate::service::ExecutionRequest::extensions); a request without one is in the
/// [`ANONYMOUS`](Self::ANONYMOUS) scope (which a caller explicitly named `anonymous` shares).
///
/// ```
/// use harness_core::service::ExecutionRequest;
/// use harness_core::id::CallerId;
///
/// let mut request = ExecutionRequest::new("hi");
/// assert_eq!(CallerId::of(&request), CallerId::ANONYMOUS);
/// request.extensions.insert("billing-service".parse::<CallerId>().unwrap());
/// assert_eq!(CallerId::of(&request).as_str(), "billing-service");
/// assert!("two words".parse::<CallerId>().is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallerId(Cow<'static, str>);

impl CallerId {
    /// The scope of requests that carry no [`CallerId`]: `anonymous`.
    pub const ANONYMOUS: Self = Self(Cow::Borrowed("anonymous"));

    /// The identifier as a string slice.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn validate(s: &str) -> Result<(), InvalidId> {
        let valid = (1..=128).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
        if valid {
            return Ok(());
        }
        let value = if s.chars().count() > 80 {
            let mut v: String = s.chars().take(77).collect();
            v.push_str("...");
            v
        } else {
            s.to_owned()
        };
        Err(InvalidId {
            kind: "caller id",
            value,
            expected: "1 to 128 characters from [A-Za-z0-9._:-]",
        })
    }
}

impl FromStr for CallerId {
    type Err = InvalidId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::validate(s)?;
        Ok(Self(Cow::Owned(s.to_owned())))
    }
}

impl TryFrom<String> for CallerId {
    type Error = InvalidId;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::validate(&s)?;
        Ok(Self(Cow::Owned(s)))
    }
}

impl fmt::Display for CallerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for CallerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CallerId({:?})", &*self.0)
    }
}

impl AsRef<str> for CallerId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adapter_id_boundaries() {
        assert!(AdapterId::is_valid("ab"));
        assert!(!AdapterId::is_valid("a"));
        assert!(AdapterId::is_valid(&format!("a{}", "b".repeat(63))));
        assert!(!AdapterId::is_valid(&format!("a{}", "b".repeat(64))));
        assert!(!AdapterId::is_valid("aB"));
        assert!(!AdapterId::is_valid("a-b"));
        assert!(!AdapterId::is_valid("_ab"));
    }

    #[test]
    fn deserialization_validates_and_names_the_rule() {
        let err = serde_json::from_str::<AdapterId>("\"Nope\"").unwrap_err();
        assert!(
            err.to_string().contains("invalid adapter id `Nope`"),
            "{err}"
        );
        let err = serde_json::from_str::<ExecutionId>("\"a b\"").unwrap_err();
        assert!(err.to_string().contains("[A-Za-z0-9._:-]"), "{err}");
    }

    #[test]
    fn generated_ids_are_distinct_and_valid() {
        let ids: std::collections::HashSet<_> =
            (0..1000).map(|_| ExecutionId::generate()).collect();
        assert_eq!(ids.len(), 1000);
        for id in ids {
            assert!(is_opaque(id.as_str()));
        }
    }
}
