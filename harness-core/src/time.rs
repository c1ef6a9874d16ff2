//! Wall-clock timestamps on the wire (RFC 3339, UTC).

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// An instant in UTC, serialized as an RFC 3339 string (`2026-11-30T12:00:00.123Z`).
///
/// ```
/// use harness_core::time::Timestamp;
/// let t: Timestamp = "2026-11-30T12:00:00Z".parse().unwrap();
/// assert_eq!(serde_json::to_string(&t).unwrap(), "\"2026-11-30T12:00:00Z\"");
/// assert!("yesterday".parse::<Timestamp>().is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(jiff::Timestamp);

impl Timestamp {
    /// The current time.
    #[must_use]
    pub fn now() -> Self {
        Self(jiff::Timestamp::now())
    }

    /// Milliseconds since the Unix epoch.
    #[must_use]
    pub fn as_millis(self) -> i64 {
        self.0.as_millisecond()
    }

    /// Microseconds since the Unix epoch (what latencies are measured in).
    ///
    /// ```
    /// let t: harness_core::time::Timestamp = "1970-01-01T00:00:01.000002Z".parse().unwrap();
    /// assert_eq!(t.as_micros(), 1_000_002);
    /// ```
    #[must_use]
    pub fn as_micros(self) -> i64 {
        self.0.as_microsecond()
    }

    /// The timestamp `millis` milliseconds after the Unix epoch, if representable.
    #[must_use]
    pub fn from_millis(millis: i64) -> Option<Self> {
        jiff::Timestamp::from_millisecond(millis).ok().map(Self)
    }
}

/// A timestamp string was not RFC 3339.
#[derive(Debug, Clone, thiserror::Error)]
#[error("invalid timestamp `{value}`: expected RFC 3339, e.g. 2026-11-30T12:00:00Z")]
pub struct InvalidTimestamp {
    value: String,
}

impl FromStr for Timestamp {
    type Err = InvalidTimestamp;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(Self).map_err(|_| InvalidTimestamp {
            value: s.chars().take(80).collect(),
        })
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl JsonSchema for Timestamp {
    fn schema_name() -> Cow<'static, str> {
        "Timestamp".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string", "format": "date-time" })
    }
}
