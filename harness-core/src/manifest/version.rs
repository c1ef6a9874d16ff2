use std::borrow::Cow;
use std::fmt;
use std::num::NonZeroU32;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

// ---------------------------------------------------------------------------------------------
// Contract version
// ---------------------------------------------------------------------------------------------

/// A version of the adapter contract: an integer, at least 1. On the wire a plain integer.
///
/// ```
/// use harness_core::manifest::ContractVersion;
/// assert_eq!(ContractVersion::V1.get(), 1);
/// assert_eq!(serde_json::to_string(&ContractVersion::V1).unwrap(), "1");
/// assert_eq!(serde_json::from_str::<ContractVersion>("2").unwrap().get(), 2);
/// assert!(serde_json::from_str::<ContractVersion>("0").is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ContractVersion(NonZeroU32);

impl ContractVersion {
    /// Contract version 1, the one this engine implements.
    pub const V1: Self = Self(NonZeroU32::MIN);

    /// The version this engine implements, and whose wire the committed schemas pin: a
    /// change of a wire type that [`crate::schema::compat::incompatibilities`] finds
    /// incompatible with the baseline committed for this version (`schemas/baseline/v1/`)
    /// fails the workspace's tests until this constant names a new version.
    pub const CURRENT: Self = Self::V1;

    /// The version `n`; `None` for zero.
    #[must_use]
    pub const fn new(n: u32) -> Option<Self> {
        match NonZeroU32::new(n) {
            Some(n) => Some(Self(n)),
            None => None,
        }
    }

    /// The version number.
    #[must_use]
    pub const fn get(self) -> u32 {
        self.0.get()
    }

    /// The highest version present in both lists, if any.
    ///
    /// ```
    /// use harness_core::manifest::ContractVersion;
    /// let v = |n| ContractVersion::new(n).unwrap();
    /// assert_eq!(ContractVersion::highest_common(&[v(1), v(2), v(3)], &[v(2), v(1)]), Some(v(2)));
    /// assert_eq!(ContractVersion::highest_common(&[v(2)], &[v(1)]), None);
    /// ```
    #[must_use]
    pub fn highest_common(a: &[Self], b: &[Self]) -> Option<Self> {
        a.iter().filter(|v| b.contains(v)).max().copied()
    }
}

impl fmt::Display for ContractVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl Serialize for ContractVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(self.get())
    }
}

struct ContractVersionVisitor;

impl Visitor<'_> for ContractVersionVisitor {
    type Value = ContractVersion;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a contract version: an integer >= 1")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        u32::try_from(v)
            .ok()
            .and_then(ContractVersion::new)
            .ok_or_else(|| {
                E::custom(format_args!(
                    "invalid contract version {v}: expected an integer >= 1 (such as 1)"
                ))
            })
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        match u64::try_from(v) {
            Ok(v) => self.visit_u64(v),
            Err(_) => Err(E::custom(format_args!(
                "invalid contract version {v}: expected an integer >= 1 (such as 1)"
            ))),
        }
    }
}

impl<'de> Deserialize<'de> for ContractVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_u64(ContractVersionVisitor)
    }
}

impl JsonSchema for ContractVersion {
    fn schema_name() -> Cow<'static, str> {
        "ContractVersion".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "integer",
            "minimum": 1,
            "maximum": u32::MAX,
            "description": "An adapter contract version."
        })
    }
}
