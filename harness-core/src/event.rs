//! Portable events: the numbered, replayable record of one execution.
//!
//! Every event travels in an [`Event`] envelope (execution id, sequence, time) with a dotted
//! `kind` and its `data`:
//!
//! ```json
//! {"executionId":"exec_1","seq":3,"time":"2026-11-30T12:00:00Z","kind":"message.delta","data":{"text":"Hel"}}
//! ```
//!
//! | kind | data | meaning |
//! |---|---|---|
//! | `run.queued`, `run.starting`, `run.running` | none | lifecycle |
//! | `run.awaiting_input`, `run.awaiting_approval` | `{actionId}` | paused on an action |
//! | `run.cancelling` | `{reason?}` | a cancellation request was accepted |
//! | `run.succeeded` / `run.failed` / `run.cancelled` | summary / public error / reason | the one terminal event |
//! | `message.delta`, `reasoning.delta` | `{text}` | streamed text |
//! | `usage` | token counts | an increment of usage (sum them for the total) |
//! | `tool.call.started`, `tool.call.completed` | call, outcome | tool activity |
//! | `action.requested`, `action.resolved` | request, resolution | action correlation |
//! | `artifact.created` | descriptor | exactly one per artifact |
//! | `native` | `{namespace, name, payload}` | provider-native payload |
//!
//! Provider-native payloads live only in the `native` kind, under a namespace that may not be a
//! portable one (`run`, `message`, ...): a native event can never end, pause or resume a run,
//! or masquerade as a portable kind.
//!
//! Consumers should ignore envelope fields they do not know: additive optional fields do not
//! change the contract version. This crate's reader does, and keeps them: an event written by
//! a newer version (an extra envelope field, an extra field of its `data`) is read, and
//! written back with those fields, so that an older replica serving it from the store does not
//! strip them. Fields deeper inside `data` are read and dropped. See [`crate::wire`] for the
//! rule and why.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::action::{ActionRequest, ActionResolution};
use crate::artifact::ArtifactDescriptor;
use crate::error::PublicError;
use crate::id::{ActionId, ExecutionId, Sequence, ToolCallId};
use crate::time::Timestamp;
use crate::wire::UnknownFields;

/// One event of one execution: `(execution_id, seq)` identifies it.
///
/// Two events are equal when every field is, fields kept from a newer writer included.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    execution_id: ExecutionId,
    seq: Sequence,
    time: Timestamp,
    #[serde(flatten)]
    payload: EventPayload,
    /// What a newer writer added that this version does not know: `None` (one pointer, no
    /// allocation) for every event this version wrote.
    #[schemars(skip)]
    unknown: Option<Box<Kept>>,
}

/// The fields of an event that a newer writer added: in the envelope, and at the top level
/// of `data`.
#[derive(Debug, Clone, Default, PartialEq)]
struct Kept {
    envelope: UnknownFields,
    data: UnknownFields,
}

/// The envelope as this version writes it: the payload flattened.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EnvelopeOut<'a> {
    execution_id: &'a ExecutionId,
    seq: Sequence,
    time: Timestamp,
    #[serde(flatten)]
    payload: &'a EventPayload,
}

/// The envelope of an event a newer version wrote: the payload (its kept `data` fields added
/// back), then the kept envelope fields.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct KeptOut<'a> {
    execution_id: &'a ExecutionId,
    seq: Sequence,
    time: Timestamp,
    #[serde(flatten)]
    payload: Value,
    #[serde(flatten)]
    unknown: &'a UnknownFields,
}

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // The hot path is the derive it always was: one pointer compared on top.
        let Some(kept) = &self.unknown else {
            return EnvelopeOut {
                execution_id: &self.execution_id,
                seq: self.seq,
                time: self.time,
                payload: &self.payload,
            }
            .serialize(s);
        };
        // The rare path (an event a newer version wrote): the payload as a value, with the
        // kept `data` fields added back.
        let mut payload = serde_json::to_value(&self.payload).map_err(serde::ser::Error::custom)?;
        if let Some(data) = payload.get_mut("data") {
            crate::wire::merge_into(data, &kept.data);
        }
        KeptOut {
            execution_id: &self.execution_id,
            seq: self.seq,
            time: self.time,
            payload,
            unknown: &kept.envelope,
        }
        .serialize(s)
    }
}

impl Event {
    /// Assembles an envelope. Only the event log numbers events; this exists for stores and
    /// tests that rebuild events they read back.
    #[must_use]
    pub fn new(
        execution_id: ExecutionId,
        seq: Sequence,
        time: Timestamp,
        payload: EventPayload,
    ) -> Self {
        Self {
            execution_id,
            seq,
            time,
            payload,
            unknown: None,
        }
    }

    /// The owning execution.
    #[must_use]
    pub fn execution_id(&self) -> &ExecutionId {
        &self.execution_id
    }
    /// The sequence number (from 1).
    #[must_use]
    pub fn seq(&self) -> Sequence {
        self.seq
    }
    /// When the event was appended.
    #[must_use]
    pub fn time(&self) -> Timestamp {
        self.time
    }
    /// The kind and data.
    #[must_use]
    pub fn payload(&self) -> &EventPayload {
        &self.payload
    }
    /// The kind.
    #[must_use]
    pub fn kind(&self) -> EventKind {
        self.payload.kind()
    }

    /// Envelope fields a newer writer added that this version does not know (kept, and
    /// written back when the event is serialized again).
    ///
    /// ```
    /// use harness_core::event::Event;
    /// let e: Event = serde_json::from_str(
    ///     r#"{"executionId":"exec_1","seq":1,"time":"2026-11-30T12:00:00Z","kind":"run.queued","traceId":"ab"}"#,
    /// ).unwrap();
    /// assert_eq!(e.unknown_envelope_fields().get("traceId"), Some(&serde_json::json!("ab")));
    /// assert!(e.unknown_data_fields().is_empty());
    /// ```
    #[must_use]
    pub fn unknown_envelope_fields(&self) -> &UnknownFields {
        self.unknown
            .as_ref()
            .map_or(UnknownFields::none(), |k| &k.envelope)
    }

    /// Fields at the top level of `data` that a newer writer added and this version does not
    /// know (kept, and written back when the event is serialized again).
    #[must_use]
    pub fn unknown_data_fields(&self) -> &UnknownFields {
        self.unknown
            .as_ref()
            .map_or(UnknownFields::none(), |k| &k.data)
    }
}

/// One pass over the envelope: when `kind` comes before `data` (as this crate writes them)
/// the data is decoded straight from the input, without the buffering a flattened,
/// adjacently tagged derive does; `data` before `kind` is buffered and still read. Unknown
/// envelope fields, and unknown fields at the top level of `data`, are kept (see the
/// [module docs](self)).
///
/// ```
/// use harness_core::event::{Event, EventKind};
/// let e: Event = serde_json::from_str(
///     r#"{"data":{"text":"Hel"},"executionId":"exec_1","seq":3,"time":"2026-11-30T12:00:00Z","kind":"message.delta","later":1}"#,
/// ).unwrap();
/// assert_eq!(e.kind(), EventKind::MessageDelta);
/// assert_eq!(e.unknown_envelope_fields().get("later"), Some(&serde_json::json!(1)));
/// ```
impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(envelope::EventVisitor)
    }
}

/// [`Event`]'s one-pass deserialization.
mod envelope {
    use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
    use serde::{Deserialize, Deserializer};
    use serde_json::Value;

    use super::{Event, EventKind, EventPayload, Kept};
    use crate::wire::{Capture, UnknownFields};

    enum Field {
        ExecutionId,
        Seq,
        Time,
        Kind,
        Data,
        /// A field this version does not know; its name is in the seed's slot.
        Other,
    }

    /// Reads a field name; an unknown one is written to `other` (the field enum stays one
    /// byte on the hot path, where every name is known).
    struct FieldSeed<'a>(&'a mut Option<String>);

    impl<'de> DeserializeSeed<'de> for FieldSeed<'_> {
        type Value = Field;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Field, D::Error> {
            d.deserialize_identifier(self)
        }
    }

    impl Visitor<'_> for FieldSeed<'_> {
        type Value = Field;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an event field")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Field, E> {
            Ok(match v {
                "executionId" => Field::ExecutionId,
                "seq" => Field::Seq,
                "time" => Field::Time,
                "kind" => Field::Kind,
                "data" => Field::Data,
                other => {
                    *self.0 = Some(other.to_owned());
                    Field::Other
                }
            })
        }
        fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Field, E> {
            self.visit_str(&String::from_utf8_lossy(v))
        }
    }

    impl<'de> Deserialize<'de> for EventKind {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct KindVisitor;
            impl Visitor<'_> for KindVisitor {
                type Value = EventKind;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("an event kind such as `message.delta`")
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<EventKind, E> {
                    EventKind::ALL
                        .iter()
                        .copied()
                        .find(|k| k.as_str() == v)
                        .ok_or_else(|| {
                            let known: Vec<&str> =
                                EventKind::ALL.iter().map(|k| k.as_str()).collect();
                            E::custom(format!(
                                "unknown event kind `{}`: expected one of {}",
                                v.chars().take(64).collect::<String>(),
                                known.join(", ")
                            ))
                        })
                }
            }
            d.deserialize_str(KindVisitor)
        }
    }

    pub(super) struct EventVisitor;

    impl<'de> Visitor<'de> for EventVisitor {
        type Value = Event;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an event: {executionId, seq, time, kind, data?}")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Event, A::Error> {
            let mut execution_id = None;
            let mut seq = None;
            let mut time = None;
            let mut kind: Option<EventKind> = None;
            let mut payload: Option<EventPayload> = None;
            let mut early: Option<Value> = None;
            let mut seen_data = false;
            let mut envelope = UnknownFields::default();
            let mut data = UnknownFields::default();
            let mut other = None;
            while let Some(field) = map.next_key_seed(FieldSeed(&mut other))? {
                match field {
                    Field::ExecutionId if execution_id.is_none() => {
                        execution_id = Some(map.next_value()?);
                    }
                    Field::Seq if seq.is_none() => seq = Some(map.next_value()?),
                    Field::Time if time.is_none() => time = Some(map.next_value()?),
                    Field::Kind if kind.is_none() => kind = Some(map.next_value()?),
                    Field::Data if !seen_data => {
                        seen_data = true;
                        match kind {
                            // The common order: decode the data in place.
                            Some(k) => {
                                payload = Some(EventPayload::deserialize(Adjacent {
                                    kind: k.as_str(),
                                    data: Data::Next(&mut map),
                                    unknown: &mut data,
                                })?);
                            }
                            None => early = Some(map.next_value()?),
                        }
                    }
                    Field::Other => keep(&mut map, other.take(), &mut envelope)?,
                    Field::ExecutionId => return Err(de::Error::duplicate_field("executionId")),
                    Field::Seq => return Err(de::Error::duplicate_field("seq")),
                    Field::Time => return Err(de::Error::duplicate_field("time")),
                    Field::Kind => return Err(de::Error::duplicate_field("kind")),
                    Field::Data => return Err(de::Error::duplicate_field("data")),
                }
            }
            let payload = match payload {
                Some(payload) => payload,
                None => {
                    let kind = kind.ok_or_else(|| de::Error::missing_field("kind"))?;
                    EventPayload::deserialize(Adjacent::<A> {
                        kind: kind.as_str(),
                        data: early.map_or(Data::Absent, Data::Buffered),
                        unknown: &mut data,
                    })?
                }
            };
            let unknown = (!envelope.is_empty() || !data.is_empty())
                .then(|| Box::new(Kept { envelope, data }));
            Ok(Event {
                execution_id: execution_id
                    .ok_or_else(|| de::Error::missing_field("executionId"))?,
                seq: seq.ok_or_else(|| de::Error::missing_field("seq"))?,
                time: time.ok_or_else(|| de::Error::missing_field("time"))?,
                payload,
                unknown,
            })
        }
    }

    /// Keeps an envelope field this version does not know (the rare path): the first of a
    /// repeated one wins, as for known ones.
    #[cold]
    fn keep<'de, A: MapAccess<'de>>(
        map: &mut A,
        name: Option<String>,
        envelope: &mut UnknownFields,
    ) -> Result<(), A::Error> {
        let value = map.next_value::<Value>()?;
        if let Some(name) = name
            && envelope.get(&name).is_none()
        {
            envelope.insert(name, value);
        }
        Ok(())
    }

    /// Where the payload's `data` is: the outer map's next value, buffered, or absent.
    enum Data<'a, A> {
        Next(&'a mut A),
        Buffered(Value),
        Absent,
    }

    /// `{"kind": kind, "data": data}` as a map, for the derived adjacently tagged
    /// deserialization of [`EventPayload`], with `data` read from wherever it is, its unknown
    /// top-level fields kept in `unknown`.
    struct Adjacent<'a, A> {
        kind: &'static str,
        data: Data<'a, A>,
        unknown: &'a mut UnknownFields,
    }

    impl<'de, A: MapAccess<'de>> Deserializer<'de> for Adjacent<'_, A> {
        type Error = A::Error;

        fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, A::Error> {
            visitor.visit_map(AdjacentMap {
                kind: Some(self.kind),
                data: self.data,
                next_is_data: false,
                unknown: self.unknown,
            })
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map
            struct enum identifier ignored_any
        }
    }

    struct AdjacentMap<'a, A> {
        kind: Option<&'static str>,
        data: Data<'a, A>,
        next_is_data: bool,
        unknown: &'a mut UnknownFields,
    }

    impl<'de, A: MapAccess<'de>> MapAccess<'de> for AdjacentMap<'_, A> {
        type Error = A::Error;

        fn next_key_seed<K: DeserializeSeed<'de>>(
            &mut self,
            seed: K,
        ) -> Result<Option<K::Value>, A::Error> {
            use serde::de::value::BorrowedStrDeserializer;
            if self.kind.is_some() {
                self.next_is_data = false;
                return seed
                    .deserialize(BorrowedStrDeserializer::new("kind"))
                    .map(Some);
            }
            if matches!(self.data, Data::Absent) {
                return Ok(None);
            }
            self.next_is_data = true;
            seed.deserialize(BorrowedStrDeserializer::new("data"))
                .map(Some)
        }

        fn next_value_seed<V: DeserializeSeed<'de>>(
            &mut self,
            seed: V,
        ) -> Result<V::Value, A::Error> {
            use serde::de::value::BorrowedStrDeserializer;
            if !self.next_is_data {
                let kind = self.kind.take().unwrap_or_default();
                return seed.deserialize(BorrowedStrDeserializer::new(kind));
            }
            let seed = Capture {
                seed,
                out: &mut *self.unknown,
            };
            match std::mem::replace(&mut self.data, Data::Absent) {
                Data::Next(map) => map.next_value_seed(seed),
                Data::Buffered(value) => seed.deserialize(value).map_err(de::Error::custom),
                Data::Absent => Err(de::Error::custom("no event data to read")),
            }
        }
    }
}

/// The kind and data of an event.
///
/// Large, rare payloads are boxed so that the common ones (text deltas) keep stored events
/// small: a long execution holds one event per delta.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", content = "data")]
#[non_exhaustive]
pub enum EventPayload {
    /// The execution was accepted.
    #[serde(rename = "run.queued")]
    RunQueued,
    /// The provider runtime is being prepared.
    #[serde(rename = "run.starting")]
    RunStarting,
    /// The provider is working (first start, or resumed after an action).
    #[serde(rename = "run.running")]
    RunRunning,
    /// Paused until the caller submits form input.
    #[serde(rename = "run.awaiting_input")]
    RunAwaitingInput(AwaitingAction),
    /// Paused until the caller decides on tool calls.
    #[serde(rename = "run.awaiting_approval")]
    RunAwaitingApproval(AwaitingAction),
    /// Cancellation was requested; `run.cancelled` confirms it.
    #[serde(rename = "run.cancelling")]
    RunCancelling(CancelReason),
    /// Terminal: the execution succeeded.
    #[serde(rename = "run.succeeded")]
    RunSucceeded(RunSucceeded),
    /// Terminal: the execution failed.
    #[serde(rename = "run.failed")]
    RunFailed(Box<RunFailed>),
    /// Terminal: the execution was cancelled.
    #[serde(rename = "run.cancelled")]
    RunCancelled(CancelReason),
    /// Assistant message text.
    #[serde(rename = "message.delta")]
    MessageDelta(TextDelta),
    /// Reasoning text.
    #[serde(rename = "reasoning.delta")]
    ReasoningDelta(TextDelta),
    /// An increment of token usage.
    #[serde(rename = "usage")]
    Usage(Usage),
    /// A tool call began.
    #[serde(rename = "tool.call.started")]
    ToolCallStarted(Box<ToolCall>),
    /// A started tool call's tool or arguments changed (an agent that announces a call before
    /// it knows its input, then sends it): the latest values replace those of
    /// `tool.call.started`. Additive; consumers that ignore it keep the first values.
    #[serde(rename = "tool.call.updated")]
    ToolCallUpdated(Box<ToolCall>),
    /// A tool call ended.
    #[serde(rename = "tool.call.completed")]
    ToolCallCompleted(Box<ToolCallCompleted>),
    /// Tools the execution was to have are not available to it (a tool server down); it
    /// runs with the others. Additive; consumers that ignore it lose nothing else.
    #[serde(rename = "tool.unavailable")]
    ToolUnavailable(Box<ToolUnavailable>),
    /// An action request was opened.
    #[serde(rename = "action.requested")]
    ActionRequested(Box<ActionRequest>),
    /// An action request was answered.
    #[serde(rename = "action.resolved")]
    ActionResolved(Box<ActionResolution>),
    /// An artifact was created.
    #[serde(rename = "artifact.created")]
    ArtifactCreated(Box<ArtifactDescriptor>),
    /// A provider-native payload under a namespace.
    #[serde(rename = "native")]
    Native(Box<NativeEvent>),
}

impl EventPayload {
    /// The execution state a lifecycle event (`run.*`) moves the execution to; `None` for
    /// every other event.
    #[must_use]
    pub fn implied_state(&self) -> Option<crate::state::ExecutionState> {
        use crate::state::ExecutionState as S;
        Some(match self {
            Self::RunQueued => S::Queued,
            Self::RunStarting => S::Starting,
            Self::RunRunning => S::Running,
            Self::RunAwaitingInput(_) => S::AwaitingInput,
            Self::RunAwaitingApproval(_) => S::AwaitingApproval,
            Self::RunCancelling(_) => S::Cancelling,
            Self::RunSucceeded(_) => S::Succeeded,
            Self::RunFailed(_) => S::Failed,
            Self::RunCancelled(_) => S::Cancelled,
            _ => return None,
        })
    }

    /// The kind of this payload.
    #[must_use]
    pub fn kind(&self) -> EventKind {
        match self {
            Self::RunQueued => EventKind::RunQueued,
            Self::RunStarting => EventKind::RunStarting,
            Self::RunRunning => EventKind::RunRunning,
            Self::RunAwaitingInput(_) => EventKind::RunAwaitingInput,
            Self::RunAwaitingApproval(_) => EventKind::RunAwaitingApproval,
            Self::RunCancelling(_) => EventKind::RunCancelling,
            Self::RunSucceeded(_) => EventKind::RunSucceeded,
            Self::RunFailed(_) => EventKind::RunFailed,
            Self::RunCancelled(_) => EventKind::RunCancelled,
            Self::MessageDelta(_) => EventKind::MessageDelta,
            Self::ReasoningDelta(_) => EventKind::ReasoningDelta,
            Self::Usage(_) => EventKind::Usage,
            Self::ToolCallStarted(_) => EventKind::ToolCallStarted,
            Self::ToolCallUpdated(_) => EventKind::ToolCallUpdated,
            Self::ToolCallCompleted(_) => EventKind::ToolCallCompleted,
            Self::ToolUnavailable(_) => EventKind::ToolUnavailable,
            Self::ActionRequested(_) => EventKind::ActionRequested,
            Self::ActionResolved(_) => EventKind::ActionResolved,
            Self::ArtifactCreated(_) => EventKind::ArtifactCreated,
            Self::Native(_) => EventKind::Native,
        }
    }

    /// Whether this payload ends the execution.
    #[must_use]
    pub fn is_terminal(&self) -> bool {
        self.kind().is_terminal()
    }
}

/// The content an execution may append while running or cancelling: everything but
/// lifecycle, action and artifact events, which have their own typed transitions.
///
/// Each variant is the [`EventPayload`] variant of the same name (`From` one way, `TryFrom`
/// the other): a separate type so that an adapter can yield content but never a lifecycle
/// or action event, which only the typestate appends.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// `message.delta`
    MessageDelta(TextDelta),
    /// `reasoning.delta`
    ReasoningDelta(TextDelta),
    /// `usage`
    Usage(Usage),
    /// `tool.call.started`
    ToolCallStarted(ToolCall),
    /// `tool.call.updated`
    ToolCallUpdated(ToolCall),
    /// `tool.call.completed`
    ToolCallCompleted(ToolCallCompleted),
    /// `tool.unavailable`
    ToolUnavailable(ToolUnavailable),
    /// `native`
    Native(NativeEvent),
}

impl TryFrom<EventPayload> for Content {
    type Error = EventPayload;

    /// The content a payload carries; the payload back if it is a lifecycle, action or
    /// artifact event.
    fn try_from(payload: EventPayload) -> Result<Self, EventPayload> {
        Ok(match payload {
            EventPayload::MessageDelta(d) => Self::MessageDelta(d),
            EventPayload::ReasoningDelta(d) => Self::ReasoningDelta(d),
            EventPayload::Usage(u) => Self::Usage(u),
            EventPayload::ToolCallStarted(t) => Self::ToolCallStarted(*t),
            EventPayload::ToolCallUpdated(t) => Self::ToolCallUpdated(*t),
            EventPayload::ToolCallCompleted(t) => Self::ToolCallCompleted(*t),
            EventPayload::ToolUnavailable(t) => Self::ToolUnavailable(*t),
            EventPayload::Native(n) => Self::Native(*n),
            other => return Err(other),
        })
    }
}

impl From<Content> for EventPayload {
    fn from(c: Content) -> Self {
        match c {
            Content::MessageDelta(d) => Self::MessageDelta(d),
            Content::ReasoningDelta(d) => Self::ReasoningDelta(d),
            Content::Usage(u) => Self::Usage(u),
            Content::ToolCallStarted(t) => Self::ToolCallStarted(Box::new(t)),
            Content::ToolCallUpdated(t) => Self::ToolCallUpdated(Box::new(t)),
            Content::ToolCallCompleted(t) => Self::ToolCallCompleted(Box::new(t)),
            Content::ToolUnavailable(t) => Self::ToolUnavailable(Box::new(t)),
            Content::Native(n) => Self::Native(Box::new(n)),
        }
    }
}

macro_rules! event_kinds {
    ($($variant:ident => $wire:literal),* $(,)?) => {
        /// The kind of an event, without its data: a label of few values, fit for metrics.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[non_exhaustive]
        pub enum EventKind {
            $(
                #[doc = concat!("`", $wire, "`")]
                $variant,
            )*
        }

        impl EventKind {
            /// Every kind.
            pub const ALL: &'static [Self] = &[$(Self::$variant),*];

            /// The dotted wire name.
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $wire,)*
                }
            }
        }
    };
}

event_kinds! {
    RunQueued => "run.queued",
    RunStarting => "run.starting",
    RunRunning => "run.running",
    RunAwaitingInput => "run.awaiting_input",
    RunAwaitingApproval => "run.awaiting_approval",
    RunCancelling => "run.cancelling",
    RunSucceeded => "run.succeeded",
    RunFailed => "run.failed",
    RunCancelled => "run.cancelled",
    MessageDelta => "message.delta",
    ReasoningDelta => "reasoning.delta",
    Usage => "usage",
    ToolCallStarted => "tool.call.started",
    ToolCallUpdated => "tool.call.updated",
    ToolCallCompleted => "tool.call.completed",
    ToolUnavailable => "tool.unavailable",
    ActionRequested => "action.requested",
    ActionResolved => "action.resolved",
    ArtifactCreated => "artifact.created",
    Native => "native",
}

impl EventKind {
    /// Whether events of this kind end an execution.
    #[must_use]
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::RunSucceeded | Self::RunFailed | Self::RunCancelled
        )
    }

    /// Whether this is a lifecycle kind (`run.*`).
    #[must_use]
    pub const fn is_lifecycle(self) -> bool {
        matches!(
            self,
            Self::RunQueued
                | Self::RunStarting
                | Self::RunRunning
                | Self::RunAwaitingInput
                | Self::RunAwaitingApproval
                | Self::RunCancelling
                | Self::RunSucceeded
                | Self::RunFailed
                | Self::RunCancelled
        )
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The action an execution is paused on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AwaitingAction {
    /// The pending action.
    pub action_id: ActionId,
}

/// Who asked for a cancellation: recorded on `run.cancelling` and `run.cancelled`, so that
/// metrics and traces read a field, never the free text of [`CancelReason::reason`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CancelSource {
    /// A caller, through the execution's handle.
    #[default]
    Caller,
    /// The request's deadline passed while the execution awaited an action (a running
    /// execution past its deadline fails with `timeout` instead).
    Deadline,
    /// The application is shutting down (a shutdown layer's token).
    Shutdown,
    /// Every handle was dropped while the execution awaited an action: nobody can answer.
    Abandoned,
}

impl CancelSource {
    /// The wire name (`caller`, `deadline`, `shutdown`, `abandoned`), also the metrics label.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Caller => "caller",
            Self::Deadline => "deadline",
            Self::Shutdown => "shutdown",
            Self::Abandoned => "abandoned",
        }
    }
}

impl fmt::Display for CancelSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an execution is being cancelled: who asked ([`CancelSource`]) and, optionally, a short
/// text.
///
/// ```
/// use harness_core::event::{CancelReason, CancelSource};
/// let caller = CancelReason::new("the user pressed stop");
/// assert_eq!(caller.source, CancelSource::Caller);
/// // The text never decides the source: a caller's "shutdown" is still the caller's.
/// assert_eq!(CancelReason::new("shutdown").source, CancelSource::Caller);
/// assert_eq!(CancelReason::from_source(CancelSource::Shutdown).reason, None);
/// let wire = serde_json::to_value(CancelReason::from_source(CancelSource::Deadline)).unwrap();
/// assert_eq!(wire, serde_json::json!({"source": "deadline"}));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CancelReason {
    /// Who asked. Absent on the wire means `caller`.
    #[serde(default)]
    pub source: CancelSource,
    /// A short reason from whoever asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl CancelReason {
    /// A caller's reason with text.
    #[must_use]
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            source: CancelSource::Caller,
            reason: Some(reason.into()),
        }
    }

    /// A reason with a source and no text.
    #[must_use]
    pub const fn from_source(source: CancelSource) -> Self {
        Self {
            source,
            reason: None,
        }
    }

    /// The same reason with another source.
    #[must_use]
    pub fn with_source(mut self, source: CancelSource) -> Self {
        self.source = source;
        self
    }
}

/// Data of `run.succeeded`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunSucceeded {
    /// An optional short summary of the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

/// Data of `run.failed`: only the safe projection of the error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunFailed {
    /// The public error.
    pub error: PublicError,
}

/// Streamed text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TextDelta {
    /// The text fragment.
    pub text: String,
}

impl TextDelta {
    /// A delta of `text`.
    #[must_use]
    pub fn new(text: impl Into<String>) -> Self {
        Self { text: text.into() }
    }
}

/// An increment of token usage; the execution's total is the sum of its `usage` events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Input (prompt) tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Output (completion) tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Reasoning tokens, when reported separately.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
    /// Input tokens served from a cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_input_tokens: u64,
    /// Model requests (turns) this increment covers, when the adapter counts them: an
    /// adapter that calls a model reports 1 per request, so that the execution's total is
    /// its number of model turns (what `RunLimits::max_model_turns` bounds).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub model_turns: u64,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, o: Self) {
        self.input_tokens = self.input_tokens.saturating_add(o.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(o.output_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(o.reasoning_tokens);
        self.cached_input_tokens = self
            .cached_input_tokens
            .saturating_add(o.cached_input_tokens);
        self.model_turns = self.model_turns.saturating_add(o.model_turns);
    }
}

/// A tool call as the provider made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    /// The call's id, unique within the execution.
    pub call_id: ToolCallId,
    /// The stable tool name.
    pub tool: String,
    /// The arguments.
    #[serde(default)]
    pub arguments: Value,
}

/// The end of a tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallCompleted {
    /// The call that ended.
    pub call_id: ToolCallId,
    /// How it ended.
    pub outcome: ToolCallOutcome,
}

/// Tools an execution was to have that are not available to it (`tool.unavailable`): a
/// tool provider (an MCP server) that could not be reached or listed, or tools it does not
/// offer. The execution runs with the tools that are available
/// (`tool.partial_availability`); the adapter never sees the missing ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolUnavailable {
    /// The provider (an MCP server's name) or, for one tool, its id.
    pub source: String,
    /// The ids of the tools missing, when they are known (the tools a request selected by
    /// id); empty when every tool of `source` is missing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// Why, as the public projection of the error (never its diagnostic).
    pub error: PublicError,
}

/// How a tool call ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ToolCallOutcome {
    /// The tool returned a result.
    Success {
        /// The result.
        #[serde(default)]
        output: Value,
    },
    /// The tool failed with a bounded, safe message.
    Failure {
        /// What went wrong.
        message: String,
    },
    /// The caller rejected the call.
    Rejected {
        /// The caller's reason.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

/// Namespaces that belong to portable kinds and may not carry native payloads.
pub const RESERVED_NAMESPACES: &[&str] = &[
    "run",
    "message",
    "reasoning",
    "usage",
    "tool",
    "action",
    "artifact",
    "native",
    "harness",
];

/// A provider-native namespace: an adapter-id-like name that is not a portable one.
///
/// ```
/// use harness_core::event::Namespace;
/// assert!("acp".parse::<Namespace>().is_ok());
/// let err = "run".parse::<Namespace>().unwrap_err();
/// assert!(err.to_string().contains("reserved"));
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Namespace(Box<str>);

/// A native namespace or name was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NativeError {
    /// The namespace is not `^[a-z][a-z0-9_]{1,63}$`.
    #[error(
        "invalid native namespace `{0}`: expected ^[a-z][a-z0-9_]{{1,63}}$, usually the adapter id"
    )]
    Namespace(String),
    /// The namespace is a portable one.
    #[error("native namespace `{0}` is reserved for portable events; use the adapter id instead")]
    Reserved(String),
    /// The name is not a dotted lowercase identifier.
    #[error(
        "invalid native event name `{0}`: expected 1 to 128 characters of [a-z0-9_.], starting with a letter"
    )]
    Name(String),
}

impl Namespace {
    /// The namespace as a string slice.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for Namespace {
    type Err = NativeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if !crate::id::AdapterId::is_valid(s) {
            return Err(NativeError::Namespace(s.chars().take(80).collect()));
        }
        if RESERVED_NAMESPACES.contains(&s) {
            return Err(NativeError::Reserved(s.to_owned()));
        }
        Ok(Self(s.into()))
    }
}

impl fmt::Debug for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for Namespace {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Namespace {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Namespace {
    fn schema_name() -> Cow<'static, str> {
        "Namespace".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": crate::id::ADAPTER_ID_PATTERN,
            "not": { "enum": RESERVED_NAMESPACES }
        })
    }
}

fn is_native_name(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s.as_bytes()[0].is_ascii_lowercase()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.')
}

/// A provider-native payload. It never changes portable state.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NativeEvent {
    namespace: Namespace,
    #[schemars(regex(pattern = r"^[a-z][a-z0-9_.]{0,127}$"))]
    name: String,
    #[serde(default)]
    payload: Value,
}

impl NativeEvent {
    /// A native event `name` under `namespace`.
    ///
    /// # Errors
    /// When the namespace is invalid or reserved, or the name is not `[a-z][a-z0-9_.]*`.
    pub fn new(namespace: &str, name: &str, payload: Value) -> Result<Self, NativeError> {
        if !is_native_name(name) {
            return Err(NativeError::Name(name.chars().take(80).collect()));
        }
        Ok(Self {
            namespace: namespace.parse()?,
            name: name.to_owned(),
            payload,
        })
    }

    /// The namespace.
    #[must_use]
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }
    /// The native event name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The payload.
    #[must_use]
    pub fn payload(&self) -> &Value {
        &self.payload
    }
    /// Mutable access to the payload (for redaction).
    pub fn payload_mut(&mut self) -> &mut Value {
        &mut self.payload
    }
}

impl<'de> Deserialize<'de> for NativeEvent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Raw {
            namespace: Namespace,
            name: String,
            #[serde(default)]
            payload: Value,
        }
        let raw = Raw::deserialize(d)?;
        if !is_native_name(&raw.name) {
            return Err(serde::de::Error::custom(NativeError::Name(raw.name)));
        }
        Ok(Self {
            namespace: raw.namespace,
            name: raw.name,
            payload: raw.payload,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wire_shape() {
        let e = Event::new(
            "exec_1".parse().unwrap(),
            Sequence::FIRST,
            "2026-11-30T12:00:00Z".parse().unwrap(),
            EventPayload::MessageDelta(TextDelta::new("Hel")),
        );
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(
            v,
            json!({"executionId":"exec_1","seq":1,"time":"2026-11-30T12:00:00Z","kind":"message.delta","data":{"text":"Hel"}})
        );
        assert_eq!(serde_json::from_value::<Event>(v).unwrap(), e);
        let unit = Event::new(
            e.execution_id().clone(),
            Sequence::FIRST,
            e.time(),
            EventPayload::RunQueued,
        );
        let v = serde_json::to_value(&unit).unwrap();
        assert_eq!(v["kind"], "run.queued");
        assert_eq!(serde_json::from_value::<Event>(v).unwrap(), unit);
    }

    /// The derive the one-pass deserializer replaces: the reference it must agree with.
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Derived {
        execution_id: ExecutionId,
        seq: Sequence,
        time: Timestamp,
        #[serde(flatten)]
        payload: EventPayload,
    }

    fn permutations(fields: &[(&str, Value)]) -> Vec<String> {
        if fields.len() <= 1 {
            return vec![
                fields
                    .iter()
                    .map(|(k, v)| format!("{k:?}:{v}"))
                    .collect::<String>(),
            ];
        }
        let mut out = Vec::new();
        for i in 0..fields.len() {
            let mut rest = fields.to_vec();
            let first = rest.remove(i);
            for tail in permutations(&rest) {
                out.push(format!("{:?}:{},{tail}", first.0, first.1));
            }
        }
        out
    }

    #[test]
    fn the_one_pass_deserializer_agrees_with_the_derive_in_every_key_order() {
        let envelope = [
            ("executionId", json!("exec_1")),
            ("seq", json!(7)),
            ("time", json!("2026-11-30T12:00:00.5Z")),
        ];
        let payloads = [
            json!({"kind": "message.delta", "data": {"text": "Hel\"lo\n"}}),
            json!({"kind": "run.queued"}),
            json!({"kind": "run.queued", "data": null}),
            json!({"kind": "run.failed", "data": {"error": {"category": "timeout", "code": "TIMEOUT",
                "message": "slow", "retryable": true, "sideEffectsMayHaveOccurred": false}}}),
            json!({"kind": "usage", "data": {"inputTokens": 3, "outputTokens": 4}}),
            json!({"kind": "tool.call.started", "data": {"callId": "c1", "tool": "t", "arguments": {"a": [1, 2]}}}),
            json!({"kind": "run.cancelled", "data": {"reason": "stop"}}),
            // A newer writer's field inside data: read alike (ours keeps it, see below).
            json!({"kind": "message.delta", "data": {"text": "x", "extra": 1}}),
            // Refused alike: no data where data is needed, data of the wrong shape, an
            // unknown kind.
            json!({"kind": "message.delta"}),
            json!({"kind": "message.delta", "data": {"text": 5}}),
            json!({"kind": "run.exploded", "data": {}}),
        ];
        let mut compared = 0;
        for payload in payloads {
            let mut fields: Vec<(&str, Value)> = envelope.to_vec();
            for (k, v) in payload.as_object().unwrap() {
                fields.push((if k == "kind" { "kind" } else { "data" }, v.clone()));
            }
            fields.push(("later", json!({"ignored": true})));
            for text in permutations(&fields) {
                let text = format!("{{{text}}}");
                // The derive ignores unknown fields; ours keeps them, so compare without.
                let ours = serde_json::from_str::<Event>(&text)
                    .map(|e| Event::new(e.execution_id.clone(), e.seq, e.time, e.payload));
                let derived = serde_json::from_str::<Derived>(&text)
                    .map(|d| Event::new(d.execution_id, d.seq, d.time, d.payload));
                match (&ours, &derived) {
                    (Ok(a), Ok(b)) => assert_eq!(a, b, "{text}"),
                    (Err(_), Err(_)) => {}
                    _ => panic!("{text}: ours {ours:?}, derived {derived:?}"),
                }
                // The same through serde_json's Value (another deserializer).
                let value: Value = serde_json::from_str(&text).unwrap();
                assert_eq!(
                    serde_json::from_value::<Event>(value)
                        .ok()
                        .map(|e| Event::new(e.execution_id.clone(), e.seq, e.time, e.payload)),
                    ours.as_ref().ok().cloned(),
                    "{text}"
                );
                compared += 1;
            }
        }
        assert!(compared > 5_000, "{compared}");
    }

    #[test]
    fn a_repeated_envelope_field_or_a_missing_one_is_refused_by_name() {
        let twice = r#"{"executionId":"exec_1","seq":1,"seq":2,"time":"2026-11-30T12:00:00Z","kind":"run.queued"}"#;
        let err = serde_json::from_str::<Event>(twice).unwrap_err();
        assert!(err.to_string().contains("duplicate field `seq`"), "{err}");
        let missing = r#"{"executionId":"exec_1","seq":1,"kind":"run.queued"}"#;
        let err = serde_json::from_str::<Event>(missing).unwrap_err();
        assert!(err.to_string().contains("missing field `time`"), "{err}");
        let unknown = r#"{"executionId":"exec_1","seq":1,"time":"2026-11-30T12:00:00Z","kind":"run.exploded"}"#;
        let err = serde_json::from_str::<Event>(unknown).unwrap_err();
        assert!(
            err.to_string()
                .contains("unknown event kind `run.exploded`: expected one of run.queued"),
            "{err}"
        );
    }

    #[test]
    fn every_kind_has_a_unique_dotted_name() {
        let names: std::collections::HashSet<_> =
            EventKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), EventKind::ALL.len());
        assert_eq!(EventKind::ALL.iter().filter(|k| k.is_terminal()).count(), 3);
    }

    #[test]
    fn unknown_kind_is_named() {
        let err =
            serde_json::from_value::<EventPayload>(json!({"kind":"run.exploded"})).unwrap_err();
        assert!(
            err.to_string().contains("unknown variant `run.exploded`"),
            "{err}"
        );
    }

    #[test]
    fn native_events_cannot_take_portable_namespaces() {
        assert!(NativeEvent::new("acp", "plan.update", json!({})).is_ok());
        for ns in RESERVED_NAMESPACES {
            assert!(matches!(
                NativeEvent::new(ns, "x", json!({})),
                Err(NativeError::Reserved(_))
            ));
        }
        assert!(matches!(
            NativeEvent::new("acp", "Bad Name", json!({})),
            Err(NativeError::Name(_))
        ));
        let err = serde_json::from_value::<EventPayload>(
            json!({"kind":"native","data":{"namespace":"run","name":"succeeded"}}),
        )
        .unwrap_err();
        assert!(err.to_string().contains("reserved"), "{err}");
    }
}
