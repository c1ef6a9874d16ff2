//! W3C trace context carried on requests and handed to adapters.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A validated W3C `traceparent` (`00-<trace id>-<parent id>-<flags>`), with the optional
/// `tracestate` kept opaque.
///
/// ```
/// use harness_core::trace::TraceContext;
/// let tc: TraceContext = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".parse().unwrap();
/// assert_eq!(tc.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
/// assert!(tc.sampled());
/// assert!("00-00000000000000000000000000000000-00f067aa0ba902b7-01".parse::<TraceContext>().is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TraceContext {
    traceparent: Box<str>,
    tracestate: Option<Box<str>>,
}

/// A `traceparent` was malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid traceparent `{0}`: expected `00-<32 lowercase hex, not all zero>-<16 lowercase hex, not all zero>-<2 hex>`"
)]
pub struct InvalidTraceContext(String);

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl TraceContext {
    /// Adds a `tracestate` (kept opaque, at most 512 characters; longer is dropped).
    #[must_use]
    pub fn with_tracestate(mut self, state: &str) -> Self {
        self.tracestate =
            (state.len() <= 512 && !state.chars().any(char::is_control)).then(|| state.into());
        self
    }

    /// The full `traceparent` header value.
    #[must_use]
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate` header value, if any.
    #[must_use]
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The 32-hex-digit trace id.
    #[must_use]
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// The 16-hex-digit parent span id.
    #[must_use]
    pub fn parent_id(&self) -> &str {
        &self.traceparent[36..52]
    }

    /// Whether the sampled flag is set.
    #[must_use]
    pub fn sampled(&self) -> bool {
        u8::from_str_radix(&self.traceparent[53..55], 16).is_ok_and(|f| f & 1 == 1)
    }

    /// The context of a child span `span_id` (16 lowercase hex digits) in the same trace.
    ///
    /// # Errors
    /// When `span_id` is not 16 lowercase hex digits or is all zero.
    pub fn child(&self, span_id: &str) -> Result<Self, InvalidTraceContext> {
        format!(
            "00-{}-{}-{}",
            self.trace_id(),
            span_id,
            &self.traceparent[53..55]
        )
        .parse()
        .map(|c: Self| Self {
            tracestate: self.tracestate.clone(),
            ..c
        })
    }
}

impl FromStr for TraceContext {
    type Err = InvalidTraceContext;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split('-').collect();
        let ok = parts.len() == 4
            && parts[0] == "00"
            && is_hex(parts[1], 32)
            && parts[1].bytes().any(|b| b != b'0')
            && is_hex(parts[2], 16)
            && parts[2].bytes().any(|b| b != b'0')
            && is_hex(parts[3], 2);
        if ok {
            Ok(Self {
                traceparent: s.into(),
                tracestate: None,
            })
        } else {
            Err(InvalidTraceContext(s.chars().take(80).collect()))
        }
    }
}

impl fmt::Debug for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceContext")
            .field("traceparent", &self.traceparent)
            .field("tracestate", &self.tracestate)
            .finish()
    }
}

impl fmt::Display for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.traceparent)
    }
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Wire<'a> {
    traceparent: Cow<'a, str>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tracestate: Option<Cow<'a, str>>,
}

impl Serialize for TraceContext {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Wire {
            traceparent: Cow::Borrowed(&self.traceparent),
            tracestate: self.tracestate.as_deref().map(Cow::Borrowed),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for TraceContext {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = Wire::deserialize(d)?;
        let tc: Self = w.traceparent.parse().map_err(serde::de::Error::custom)?;
        Ok(match w.tracestate {
            Some(state) => tc.with_tracestate(&state),
            None => tc,
        })
    }
}

// The schema of a `traceparent` this crate accepts: version `00`, lowercase hex, trace and
// parent ids not all zero (said with `not` rather than a lookahead, which not every pattern
// engine or test generator supports).
fn traceparent_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "string",
        "pattern": "^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$",
        "not": {"anyOf": [{"pattern": "^00-0{32}-"}, {"pattern": "^00-[0-9a-f]{32}-0{16}-"}]}
    })
}

impl JsonSchema for TraceContext {
    fn schema_name() -> Cow<'static, str> {
        "TraceContext".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "object",
            "properties": {
                "traceparent": traceparent_schema(),
                "tracestate": {
                    "type": "string",
                    "description": "Kept when at most 512 characters without control characters; otherwise dropped, not refused (W3C: an invalid tracestate is discarded)."
                }
            },
            "required": ["traceparent"],
            "additionalProperties": false
        })
    }
}
