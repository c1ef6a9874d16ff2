//! Which wire types admit fields they do not know, and which refuse them.
//!
//! The adapter contract says "additive optional fields do not require a major contract
//! change". A reader one minor release behind must therefore read what a writer one release
//! ahead wrote: during a rolling upgrade an older replica reads events, descriptors and
//! answers that a newer one stored. But what a *caller or operator* writes is an instruction,
//! and a misspelt field there must be an error, not silently dropped. Each wire type sits on
//! one side of that line:
//!
//! | type | written by | unknown fields |
//! |---|---|---|
//! | [`Event`](crate::event::Event) envelope, and the top level of its `data` | the engine, an adapter | tolerated and **preserved** |
//! | every event payload's nested parts ([`PublicError`](crate::error::PublicError), [`ToolCallOutcome`](crate::event::ToolCallOutcome), [`ActionRequest`](crate::action::ActionRequest)'s form and tool calls (not a form's fields: below), [`ArtifactDescriptor`](crate::artifact::ArtifactDescriptor), ...) | the engine, an adapter | tolerated |
//! | [`HarnessDescriptor`](crate::manifest::HarnessDescriptor), [`Dependency`](crate::manifest::Dependency), [`Capability`](crate::capability::Capability) | an adapter | tolerated and **preserved** |
//! | [`ActionResolution`](crate::action::ActionResolution), [`UnmetRequirement`](crate::capability::UnmetRequirement), the violation details of a refused answer | the engine | tolerated |
//! | [`ExecutionMode`](crate::manifest::ExecutionMode) | an adapter | **refused**: it says what the adapter can reach (below) |
//! | [`FormField`](crate::action::FormField), [`FieldKind`](crate::action::FieldKind) | an adapter, and an operator (a scripted adapter's script) | **refused** (below) |
//! | capability *keys* of a [`CapabilityReport`](crate::capability::CapabilityReport) | an adapter | **refused**: a key is a contract term, not an optional field |
//! | [`ActionResponse`](crate::action::ActionResponse) and its parts (a caller's answer) | a caller | **refused**, naming the field |
//! | [`ExecutionRequest`](crate::service::ExecutionRequest), [`Requirement`](crate::capability::Requirement), [`RunLimits`](crate::limits::RunLimits), adapter options, configuration files, tool arguments under a closed schema | a caller, an operator | **refused**, naming the field |
//!
//! "Tolerated" means the reader ignores the field; "preserved" means it also keeps it and
//! writes it back when it serializes the value again (an older replica serving a stored
//! event to a client, a registry passing a descriptor on), so that a reader in the middle
//! does not strip what the newer writer said.
//!
//! Kept values are served as they were stored. An event is redacted before it is appended,
//! by the replica that writes it, so a kept field has passed its writer's redactor; this
//! version cannot redact a field it does not understand any better, and its `Debug` output
//! of kept fields ([`UnknownFields`]) shows their names only.
//!
//! ## Decisions
//!
//! - **Events preserve two levels, not every level.** The envelope and the top level of
//!   `data` are where the contract adds optional fields (a new field of `usage`, of
//!   `tool.call.started`, a new envelope field such as a trace id). Both are kept without a
//!   cost that matters on the hot path: the envelope's own one-pass deserializer already
//!   sees every key, and the `data` object is read through thin forwarding wrappers that
//!   note each key on its way and keep only a value the payload struct skips; nothing is
//!   buffered, and an event with no unknown field holds no extra allocation (a `None`
//!   pointer). Measured with `harness-core`'s `events` bench: +3.1% instructions to read an
//!   event, +0.7% to write one; an event that does carry kept fields is written through a
//!   `Value` (about five times slower, paid only during an upgrade). Deeper levels (inside
//!   an error, a tool outcome, an action request's form) are tolerated but dropped when
//!   the event is written again: keeping them would mean a path-tracking deserializer on
//!   every event, and serde's internally tagged enums buffer their content where no wrapper
//!   can reach. `harness-core`'s `newer_writer` test pins which levels survive.
//! - **Descriptors and capabilities preserve their own level** (a `#[serde(flatten)]` bag):
//!   they are read rarely, so the map the flatten builds costs nothing that matters.
//! - **An execution mode is refused when it has a field the reader does not know.** It
//!   states what an adapter's runtime can reach (`sandbox_pod` may name only an operator's
//!   profile): a field the reader cannot interpret there could broaden that authority, and
//!   the contract ties broadened authority to a new contract version.
//! - **A form's fields stay closed.** They are an adapter's (inside an action request) but
//!   also an operator's: a scripted adapter's script declares its forms with them, and an
//!   adapter's options schema must be closed. One type cannot be both, so they stay closed,
//!   and an older reader refuses an `action.requested` event whose form field has a field it
//!   does not know. (A closed mirror of them in the scripted adapter would lift this.)
//! - **Capability keys stay closed.** A new capability is a new contract term that comes
//!   with a contract version (and a conformance fixture); an unknown key is more often a typo
//!   (`stream.txt`), which the reader names with a suggestion.
//! - **A caller's answer is refused with an unknown field, even when read back from the
//!   store.** An answer is an instruction (approve, edit, dismiss); a reader that acts on
//!   part of an instruction it cannot fully read could do more than the caller allowed. An
//!   older replica that finds a newer replica's answer it cannot read leaves the execution
//!   paused (and logs it) rather than guess.
//! - **Unknown enum values are not additive fields.** A new event kind or a new variant is
//!   refused by an older reader, naming the value; adding one is still compatible for the
//!   schema check of [`crate::schema::compat`] (it removes nothing), so it needs no version
//!   bump, but it is announced in the changelog.
//!
//! Whether a change of a wire type's shape is compatible is checked against the committed
//! schemas of the current [`ContractVersion`](crate::manifest::ContractVersion) by
//! [`crate::schema::compat::incompatibilities`].
//!
//! ```
//! use harness_core::event::Event;
//! let newer = r#"{"executionId":"exec_1","seq":1,"time":"2026-11-30T12:00:00Z",
//!                 "traceId":"4bf9","kind":"message.delta","data":{"text":"Hi","lang":"en"}}"#;
//! let event: Event = serde_json::from_str(newer).unwrap();
//! let again = serde_json::to_value(&event).unwrap();
//! assert_eq!(again["traceId"], "4bf9");
//! assert_eq!(again["data"]["lang"], "en");
//! ```

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// Fields a reader did not know, kept to be written back: empty (and unallocated) unless the
/// writer was newer.
///
/// Used as a `#[serde(flatten)]` field of a tolerant type: it collects every key the type's
/// other fields do not claim, and serializes them back after the known ones.
///
/// ```
/// use harness_core::wire::UnknownFields;
/// let none = UnknownFields::default();
/// assert!(none.is_empty());
/// assert_eq!(std::mem::size_of::<UnknownFields>(), std::mem::size_of::<usize>());
/// ```
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct UnknownFields(Option<Box<Map<String, Value>>>);

static NONE: UnknownFields = UnknownFields(None);

impl UnknownFields {
    /// No field: what every value this version wrote has.
    pub(crate) fn none() -> &'static Self {
        &NONE
    }

    /// Whether the writer wrote no field the reader did not know.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|m| m.is_empty())
    }

    /// The value of the unknown field `key`.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.as_ref().and_then(|m| m.get(key))
    }

    /// The unknown fields' names, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().flat_map(|m| m.keys().map(String::as_str))
    }

    /// How many unknown fields there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |m| m.len())
    }

    #[cold]
    pub(crate) fn insert(&mut self, key: String, value: Value) {
        self.0.get_or_insert_with(Box::default).insert(key, value);
    }

    pub(crate) fn as_map(&self) -> Option<&Map<String, Value>> {
        self.0.as_deref()
    }
}

impl fmt::Debug for UnknownFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Names only: the values were written by someone else and are not redacted here.
        f.debug_set().entries(self.keys()).finish()
    }
}

impl Serialize for UnknownFields {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.len()))?;
        for (k, v) in self.0.iter().flat_map(|m| m.iter()) {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for UnknownFields {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = UnknownFields;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of fields")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<UnknownFields, A::Error> {
                let mut out = UnknownFields::default();
                while let Some((k, v)) = map.next_entry::<String, Value>()? {
                    out.insert(k, v);
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

/// Adds `extra`'s fields to the object `value`, never replacing a field it already has (a
/// known field written by this version wins over a kept one of the same name).
pub(crate) fn merge_into(value: &mut Value, extra: &UnknownFields) {
    if let (Value::Object(object), Some(extra)) = (value, extra.as_map()) {
        for (k, v) in extra {
            object.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
}

/// A seed that reads a struct through [`capture`]: the keys the struct does not declare go
/// into `out` instead of being ignored.
pub(crate) struct Capture<'o, S> {
    pub(crate) seed: S,
    pub(crate) out: &'o mut UnknownFields,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Capture<'_, S> {
    type Value = S::Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.seed.deserialize(capture(d, self.out))
    }
}

/// Wraps `inner` so that a struct deserialized from it hands the fields it does not declare
/// to `out` (with their values) instead of skipping them.
///
/// Only a struct read with `deserialize_struct` (every derived struct, and derived
/// `from`/`try_from` wire forms) is watched, and only at its own level: its fields' values
/// are read from `inner` unchanged. Anything else passes through untouched. A field is kept
/// when the struct skips its value (`deserialize_ignored_any`, what a derived struct without
/// `deny_unknown_fields` does with a field it does not declare): the keys are only noted on
/// their way, never compared or buffered, so a struct with no unknown field costs a few
/// inlined calls more.
pub(crate) fn capture<D>(inner: D, out: &mut UnknownFields) -> CaptureDe<'_, D> {
    CaptureDe { inner, out }
}

pub(crate) struct CaptureDe<'o, D> {
    inner: D,
    out: &'o mut UnknownFields,
}

macro_rules! forward {
    ($($method:ident),* $(,)?) => {
        $(
            #[inline]
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
                self.inner.$method(visitor)
            }
        )*
    };
}

/// The deserializer methods that take a name or a length, forwarded to `self.inner`.
macro_rules! forward_named {
    () => {
        fn deserialize_unit_struct<V: Visitor<'de>>(
            self,
            name: &'static str,
            visitor: V,
        ) -> Result<V::Value, D::Error> {
            self.inner.deserialize_unit_struct(name, visitor)
        }

        fn deserialize_newtype_struct<V: Visitor<'de>>(
            self,
            name: &'static str,
            visitor: V,
        ) -> Result<V::Value, D::Error> {
            self.inner.deserialize_newtype_struct(name, visitor)
        }

        fn deserialize_tuple<V: Visitor<'de>>(
            self,
            len: usize,
            visitor: V,
        ) -> Result<V::Value, D::Error> {
            self.inner.deserialize_tuple(len, visitor)
        }

        fn deserialize_tuple_struct<V: Visitor<'de>>(
            self,
            name: &'static str,
            len: usize,
            visitor: V,
        ) -> Result<V::Value, D::Error> {
            self.inner.deserialize_tuple_struct(name, len, visitor)
        }

        fn deserialize_enum<V: Visitor<'de>>(
            self,
            name: &'static str,
            variants: &'static [&'static str],
            visitor: V,
        ) -> Result<V::Value, D::Error> {
            self.inner.deserialize_enum(name, variants, visitor)
        }
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for CaptureDe<'_, D> {
    type Error = D::Error;

    forward! {
        deserialize_any, deserialize_bool, deserialize_i8, deserialize_i16, deserialize_i32,
        deserialize_i64, deserialize_i128, deserialize_u8, deserialize_u16, deserialize_u32,
        deserialize_u64, deserialize_u128, deserialize_f32, deserialize_f64, deserialize_char,
        deserialize_str, deserialize_string, deserialize_bytes, deserialize_byte_buf,
        deserialize_option, deserialize_unit, deserialize_seq, deserialize_map,
        deserialize_identifier, deserialize_ignored_any,
    }

    forward_named!();

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_struct(
            name,
            fields,
            CaptureVisitor {
                inner: visitor,
                out: self.out,
            },
        )
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

struct CaptureVisitor<'o, V> {
    inner: V,
    out: &'o mut UnknownFields,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for CaptureVisitor<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    #[inline]
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(CaptureMap {
            inner: map,
            last: None,
            out: self.out,
        })
    }

    #[inline]
    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.inner.visit_seq(seq)
    }
}

/// The struct's map, read as it is: each key is noted on its way to the struct's own field
/// visitor (borrowed when the input allows), and only a value the struct skips
/// (`deserialize_ignored_any`, what a derived struct does with a field it does not declare)
/// is read as a [`Value`] and kept under that key. Known fields pass through forwarding
/// wrappers the compiler inlines: no second comparison of names, no buffering.
struct CaptureMap<'de, 'o, A> {
    inner: A,
    /// The key just read.
    last: Option<Key<'de>>,
    out: &'o mut UnknownFields,
}

/// A map key, borrowed from the input when the input allows it.
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    fn into_owned(self) -> String {
        match self {
            Key::Borrowed(s) => s.to_owned(),
            Key::Owned(s) => s,
        }
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for CaptureMap<'de, '_, A> {
    type Error = A::Error;

    #[inline]
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.last = None;
        self.inner.next_key_seed(Spy {
            inner: seed,
            last: &mut self.last,
        })
    }

    #[inline]
    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.inner.next_value_seed(Skipped {
            inner: seed,
            last: &mut self.last,
            out: self.out,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// Notes the key on its way to the struct's field visitor (a seed, then a deserializer,
/// then a visitor).
struct Spy<'a, 'de, T> {
    inner: T,
    last: &'a mut Option<Key<'de>>,
}

impl<'de, K: DeserializeSeed<'de>> DeserializeSeed<'de> for Spy<'_, 'de, K> {
    type Value = K::Value;
    #[inline]
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<K::Value, D::Error> {
        self.inner.deserialize(Spy {
            inner: d,
            last: self.last,
        })
    }
}

macro_rules! forward_spy {
    ($($method:ident),* $(,)?) => {
        $(
            #[inline]
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
                self.inner.$method(Spy { inner: visitor, last: self.last })
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Spy<'_, 'de, D> {
    type Error = D::Error;

    // A key is read as an identifier or a string; anything else is not a field name.
    forward_spy! {
        deserialize_any, deserialize_str, deserialize_string, deserialize_identifier,
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map struct enum ignored_any
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Spy<'_, 'de, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }
    #[inline]
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<V::Value, E> {
        *self.last = Some(Key::Borrowed(v));
        self.inner.visit_borrowed_str(v)
    }
    #[inline]
    fn visit_str<E: de::Error>(self, v: &str) -> Result<V::Value, E> {
        // A key with escapes, or from a reader: copied (rare).
        *self.last = Some(Key::Owned(v.to_owned()));
        self.inner.visit_str(v)
    }
    #[inline]
    fn visit_string<E: de::Error>(self, v: String) -> Result<V::Value, E> {
        let value = self.inner.visit_str(&v);
        *self.last = Some(Key::Owned(v));
        value
    }
    #[inline]
    fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<V::Value, E> {
        *self.last = Some(Key::Owned(String::from_utf8_lossy(v).into_owned()));
        self.inner.visit_borrowed_bytes(v)
    }
    #[inline]
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<V::Value, E> {
        *self.last = Some(Key::Owned(String::from_utf8_lossy(v).into_owned()));
        self.inner.visit_bytes(v)
    }
    #[inline]
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<V::Value, E> {
        self.inner.visit_u64(v)
    }
}

/// A field's value: passed through, unless the struct skips it, when it is kept.
struct Skipped<'a, 'o, 'de, T> {
    inner: T,
    last: &'a mut Option<Key<'de>>,
    out: &'o mut UnknownFields,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Skipped<'_, '_, 'de, S> {
    type Value = S::Value;
    #[inline]
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.inner.deserialize(Skipped {
            inner: d,
            last: self.last,
            out: self.out,
        })
    }
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Skipped<'_, '_, 'de, D> {
    type Error = D::Error;

    forward! {
        deserialize_any, deserialize_bool, deserialize_i8, deserialize_i16, deserialize_i32,
        deserialize_i64, deserialize_i128, deserialize_u8, deserialize_u16, deserialize_u32,
        deserialize_u64, deserialize_u128, deserialize_f32, deserialize_f64, deserialize_char,
        deserialize_str, deserialize_string, deserialize_bytes, deserialize_byte_buf,
        deserialize_option, deserialize_unit, deserialize_seq, deserialize_map,
        deserialize_identifier,
    }

    /// The struct does not know this field: keep it (the rare path).
    #[cold]
    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        let value = Value::deserialize(self.inner)?;
        if let Some(key) = self.last.take() {
            let key = key.into_owned();
            // The first of a repeated field wins.
            if self.out.get(&key).is_none() {
                self.out.insert(key, value);
            }
        }
        visitor.visit_unit()
    }

    forward_named!();

    #[inline]
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_struct(name, fields, visitor)
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase")]
    struct Two {
        first_name: String,
        #[serde(default)]
        age: u32,
    }

    fn read(text: &str) -> (Result<Two, serde_json::Error>, UnknownFields) {
        let mut out = UnknownFields::default();
        let mut de = serde_json::Deserializer::from_str(text);
        let two = Capture {
            seed: std::marker::PhantomData::<Two>,
            out: &mut out,
        }
        .deserialize(&mut de);
        (two, out)
    }

    #[test]
    fn capture_keeps_unknown_keys_and_reads_the_known_ones() {
        let (two, out) =
            read(r#"{"later":{"deep":[1]},"firstName":"Ada","age":3,"escaped\u0041":true}"#);
        assert_eq!(
            two.unwrap(),
            Two {
                first_name: "Ada".into(),
                age: 3
            }
        );
        assert_eq!(out.get("later"), Some(&json!({"deep": [1]})));
        assert_eq!(out.get("escapedA"), Some(&json!(true)));
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn capture_allocates_nothing_without_unknown_keys_and_keeps_errors() {
        let (two, out) = read(r#"{"firstName":"Ada"}"#);
        assert!(two.is_ok());
        assert!(out.is_empty() && out.0.is_none());
        let (two, _) = read(r#"{"age":3}"#);
        assert_eq!(
            two.unwrap_err().to_string(),
            "missing field `firstName` at line 1 column 9"
        );
        let (two, _) = read(r#""text""#);
        assert!(two.unwrap_err().to_string().contains("expected struct Two"),);
    }

    #[test]
    fn capture_works_through_a_value_too() {
        let mut out = UnknownFields::default();
        let two = Capture {
            seed: std::marker::PhantomData::<Two>,
            out: &mut out,
        }
        .deserialize(json!({"firstName": "Ada", "new": 1}))
        .unwrap();
        assert_eq!(two.first_name, "Ada");
        assert_eq!(out.get("new"), Some(&json!(1)));
    }

    #[test]
    fn merge_never_replaces_a_known_field() {
        let mut out = UnknownFields::default();
        out.insert("text".into(), json!("old"));
        out.insert("lang".into(), json!("en"));
        let mut value = json!({"text": "new"});
        merge_into(&mut value, &out);
        assert_eq!(value, json!({"text": "new", "lang": "en"}));
        let names = format!("{out:?}");
        assert!(
            names.contains(r#""lang""#) && !names.contains("en"),
            "{names}"
        );
    }
}
