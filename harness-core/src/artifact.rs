//! Artifact descriptors: validated, portable references to what an execution produced.
//!
//! A descriptor identifies the owning execution, media type, creation time, an optional URI
//! and metadata; it never carries the bytes. That is enforced, not just documented: a `data:`
//! URI (bytes inline) is refused, and metadata is bounded.
//!
//! ```
//! use harness_core::artifact::ArtifactDescriptor;
//! use harness_core::id::{ArtifactId, ExecutionId};
//!
//! let exec = ExecutionId::generate();
//! let report = ArtifactDescriptor::builder(ArtifactId::generate(), exec.clone(), "text/markdown")
//!     .name("report.md")
//!     .uri("file:///workspace/report.md")
//!     .metadata("lines", 42)
//!     .build()
//!     .unwrap();
//! assert_eq!(report.execution_id(), &exec);
//! assert_eq!(report.media_type().as_str(), "text/markdown");
//!
//! let err = ArtifactDescriptor::builder(ArtifactId::generate(), exec, "text/plain")
//!     .uri("data:text/plain;base64,aGk=")
//!     .build()
//!     .unwrap_err();
//! assert!(err.to_string().contains("data:"));
//! ```

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::id::{ArtifactId, ExecutionId};
use crate::time::Timestamp;

/// Largest serialized size of an artifact's metadata object.
pub const MAX_METADATA_BYTES: usize = 16 * 1024;
/// Longest accepted artifact URI.
pub const MAX_URI_LEN: usize = 2048;

/// An artifact descriptor was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ArtifactError {
    /// The media type is not `type/subtype`.
    #[error(
        "invalid media type `{0}`: expected `type/subtype` such as `text/plain` or `application/json`"
    )]
    MediaType(String),
    /// The URI is malformed or carries bytes.
    #[error("invalid artifact uri `{value}`: {reason}")]
    Uri {
        /// The rejected URI (truncated).
        value: String,
        /// What is wrong and what would be right.
        reason: &'static str,
    },
    /// The metadata is too large.
    #[error(
        "artifact metadata is {size} bytes serialized: at most {MAX_METADATA_BYTES} allowed; store large data in the artifact itself"
    )]
    MetadataTooLarge {
        /// The serialized size.
        size: usize,
    },
    /// The name is empty or too long.
    #[error("invalid artifact name: expected 1 to 255 characters without control characters")]
    Name,
}

/// A media type, `type/subtype` with optional parameters (`text/plain; charset=utf-8`).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct MediaType(Box<str>);

fn is_token(s: &str) -> bool {
    // RFC 6838 restricted-name: alphanumerics and !#$&-^_.+
    (1..=127).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
}

impl MediaType {
    /// The media type as written.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The essence (`type/subtype`, lower case) without parameters.
    #[must_use]
    pub fn essence(&self) -> String {
        self.0
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase()
    }
}

impl FromStr for MediaType {
    type Err = ArtifactError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // Spaces only around the essence (what the schema's pattern says, too).
        let essence = s.split(';').next().unwrap_or_default().trim_matches(' ');
        let ok = s.len() <= 255
            && !s.chars().any(char::is_control)
            && essence
                .split_once('/')
                .is_some_and(|(t, st)| is_token(t) && is_token(st));
        if ok {
            Ok(Self(s.trim_matches(' ').into()))
        } else {
            Err(ArtifactError::MediaType(s.chars().take(80).collect()))
        }
    }
}

impl fmt::Debug for MediaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for MediaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for MediaType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for MediaType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for MediaType {
    fn schema_name() -> Cow<'static, str> {
        "MediaType".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": "^ *[A-Za-z0-9!#$&^_.+-]{1,127}/[A-Za-z0-9!#$&^_.+-]{1,127} *(;[^\\u0000-\\u001f\\u007f-\\u009f]*)?$",
            "maxLength": 255
        })
    }
}

/// Where an artifact's bytes live: an absolute URI with a scheme, never `data:`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ArtifactUri(Box<str>);

impl ArtifactUri {
    /// The URI as written.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The scheme, lower case.
    #[must_use]
    pub fn scheme(&self) -> String {
        self.0
            .split_once(':')
            .map(|(s, _)| s.to_ascii_lowercase())
            .unwrap_or_default()
    }
}

impl FromStr for ArtifactUri {
    type Err = ArtifactError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| ArtifactError::Uri {
            value: s.chars().take(80).collect(),
            reason,
        };
        if s.len() > MAX_URI_LEN {
            return Err(err("longer than 2048 characters"));
        }
        if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(err("contains whitespace or control characters"));
        }
        let Some((scheme, rest)) = s.split_once(':') else {
            return Err(err(
                "expected an absolute URI with a scheme, such as `file:///...` or `https://...`",
            ));
        };
        let scheme_ok = scheme
            .as_bytes()
            .first()
            .is_some_and(u8::is_ascii_alphabetic)
            && scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
        if !scheme_ok || rest.is_empty() {
            return Err(err(
                "expected an absolute URI with a scheme, such as `file:///...` or `https://...`",
            ));
        }
        if scheme.eq_ignore_ascii_case("data") {
            return Err(err(
                "`data:` URIs carry bytes inline; descriptors reference bytes, they never carry them",
            ));
        }
        Ok(Self(s.into()))
    }
}

impl fmt::Debug for ArtifactUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for ArtifactUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for ArtifactUri {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ArtifactUri {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for ArtifactUri {
    fn schema_name() -> Cow<'static, str> {
        "ArtifactUri".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "format": "uri",
            "maxLength": MAX_URI_LEN,
            "not": { "pattern": "^[Dd][Aa][Tt][Aa]:" }
        })
    }
}

/// A validated, portable description of one artifact. It carries no bytes.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactDescriptor {
    id: ArtifactId,
    execution_id: ExecutionId,
    media_type: MediaType,
    created_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    uri: Option<ArtifactUri>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    size_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    metadata: Map<String, Value>,
}

/// The unchecked wire form, validated into an [`ArtifactDescriptor`].
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawArtifact {
    id: ArtifactId,
    execution_id: ExecutionId,
    media_type: MediaType,
    created_at: Timestamp,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    uri: Option<ArtifactUri>,
    #[serde(default)]
    size_bytes: Option<u64>,
    #[serde(default)]
    metadata: Map<String, Value>,
}

impl<'de> Deserialize<'de> for ArtifactDescriptor {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawArtifact::deserialize(d)?;
        let a = Self {
            id: raw.id,
            execution_id: raw.execution_id,
            media_type: raw.media_type,
            created_at: raw.created_at,
            name: raw.name,
            uri: raw.uri,
            size_bytes: raw.size_bytes,
            metadata: raw.metadata,
        };
        a.check().map_err(serde::de::Error::custom)?;
        Ok(a)
    }
}

impl ArtifactDescriptor {
    /// Starts a descriptor; the media type is parsed when [`ArtifactBuilder::build`] runs.
    pub fn builder(
        id: ArtifactId,
        execution_id: ExecutionId,
        media_type: impl Into<String>,
    ) -> ArtifactBuilder {
        ArtifactBuilder {
            id,
            execution_id,
            media_type: media_type.into(),
            created_at: None,
            name: None,
            uri: None,
            size_bytes: None,
            metadata: Map::new(),
        }
    }

    fn check(&self) -> Result<(), ArtifactError> {
        if let Some(name) = &self.name
            && (name.is_empty() || name.chars().count() > 255 || name.chars().any(char::is_control))
        {
            return Err(ArtifactError::Name);
        }
        if !self.metadata.is_empty() {
            let size = serde_json::to_vec(&self.metadata).map_or(usize::MAX, |v| v.len());
            if size > MAX_METADATA_BYTES {
                return Err(ArtifactError::MetadataTooLarge { size });
            }
        }
        Ok(())
    }

    /// The artifact id, unique within its execution.
    #[must_use]
    pub fn id(&self) -> &ArtifactId {
        &self.id
    }
    /// The owning execution.
    #[must_use]
    pub fn execution_id(&self) -> &ExecutionId {
        &self.execution_id
    }
    /// The media type.
    #[must_use]
    pub fn media_type(&self) -> &MediaType {
        &self.media_type
    }
    /// When the artifact was created.
    #[must_use]
    pub fn created_at(&self) -> Timestamp {
        self.created_at
    }
    /// A display name.
    #[must_use]
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
    /// Where the bytes live.
    #[must_use]
    pub fn uri(&self) -> Option<&ArtifactUri> {
        self.uri.as_ref()
    }
    /// The size of the bytes, when known.
    #[must_use]
    pub fn size_bytes(&self) -> Option<u64> {
        self.size_bytes
    }
    /// Free-form metadata (bounded by [`MAX_METADATA_BYTES`]).
    #[must_use]
    pub fn metadata(&self) -> &Map<String, Value> {
        &self.metadata
    }
}

/// Builds an [`ArtifactDescriptor`]; see [`ArtifactDescriptor::builder`].
#[derive(Debug, Clone)]
#[must_use]
pub struct ArtifactBuilder {
    id: ArtifactId,
    execution_id: ExecutionId,
    media_type: String,
    created_at: Option<Timestamp>,
    name: Option<String>,
    uri: Option<String>,
    size_bytes: Option<u64>,
    metadata: Map<String, Value>,
}

impl ArtifactBuilder {
    /// Sets the display name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
    /// Sets the URI where the bytes live.
    pub fn uri(mut self, uri: impl Into<String>) -> Self {
        self.uri = Some(uri.into());
        self
    }
    /// Sets the size of the bytes.
    pub fn size_bytes(mut self, size: u64) -> Self {
        self.size_bytes = Some(size);
        self
    }
    /// Sets the creation time (default: now).
    pub fn created_at(mut self, at: Timestamp) -> Self {
        self.created_at = Some(at);
        self
    }
    /// Adds one metadata entry.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Validates and builds the descriptor.
    ///
    /// # Errors
    /// When the media type, URI, name or metadata is invalid; the error says which and why.
    pub fn build(self) -> Result<ArtifactDescriptor, ArtifactError> {
        let a = ArtifactDescriptor {
            id: self.id,
            execution_id: self.execution_id,
            media_type: self.media_type.parse()?,
            created_at: self.created_at.unwrap_or_else(Timestamp::now),
            name: self.name,
            uri: self.uri.map(|u| u.parse()).transpose()?,
            size_bytes: self.size_bytes,
            metadata: self.metadata,
        };
        a.check()?;
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("text/plain", true)]
    #[case("application/vnd.api+json", true)]
    #[case("text/plain; charset=utf-8", true)]
    #[case("text", false)]
    #[case("text/", false)]
    #[case("/plain", false)]
    #[case("te xt/plain", false)]
    fn media_types(#[case] input: &str, #[case] ok: bool) {
        assert_eq!(input.parse::<MediaType>().is_ok(), ok, "{input}");
    }

    #[rstest]
    #[case("file:///tmp/a.txt", true)]
    #[case("https://example.com/a", true)]
    #[case("s3://bucket/key", true)]
    #[case("DATA:text/plain,hi", false)]
    #[case("relative/path", false)]
    #[case("https://a b", false)]
    #[case("1http://x", false)]
    fn uris(#[case] input: &str, #[case] ok: bool) {
        assert_eq!(input.parse::<ArtifactUri>().is_ok(), ok, "{input}");
    }

    #[test]
    fn round_trip_and_unknown_fields() {
        let a = ArtifactDescriptor::builder(
            ArtifactId::generate(),
            ExecutionId::generate(),
            "image/png",
        )
        .uri("file:///w/a.png")
        .size_bytes(10)
        .metadata("width", 3)
        .build()
        .unwrap();
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(
            serde_json::from_value::<ArtifactDescriptor>(json.clone()).unwrap(),
            a
        );
        // A newer writer's field is read past, and not carried: a descriptor still holds no
        // bytes (see `crate::wire`).
        let mut newer = json.clone();
        newer["bytes"] = Value::from("AAAA");
        let read = serde_json::from_value::<ArtifactDescriptor>(newer).unwrap();
        assert_eq!(read, a);
        assert_eq!(serde_json::to_value(&read).unwrap(), json);
    }

    #[test]
    fn metadata_is_bounded() {
        let err = ArtifactDescriptor::builder(
            ArtifactId::generate(),
            ExecutionId::generate(),
            "text/plain",
        )
        .metadata("blob", "x".repeat(MAX_METADATA_BYTES))
        .build()
        .unwrap_err();
        assert!(
            matches!(err, ArtifactError::MetadataTooLarge { .. }),
            "{err}"
        );
    }
}
