use std::borrow::Cow;
use std::fmt;
use std::num::NonZeroU32;
use std::str::FromStr;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize};

use crate::id::InvalidId;

// ---------------------------------------------------------------------------------------------
// Revision
// ---------------------------------------------------------------------------------------------

/// The version of a pending action request, from 1.
///
/// An adapter that changes a pending request (new fields, another set of tool calls) publishes
/// it again with the next revision; an answer naming any other revision is refused as stale.
///
/// ```
/// use harness_core::action::Revision;
/// assert_eq!(Revision::FIRST.get(), 1);
/// assert_eq!(Revision::FIRST.next().get(), 2);
/// assert_eq!(Revision::new(0), None);
/// let err = serde_json::from_str::<Revision>("0").unwrap_err();
/// assert!(err.to_string().contains("revisions start at 1"), "{err}");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Revision(NonZeroU32);

impl Revision {
    /// The first revision of every action request.
    pub const FIRST: Self = Self(NonZeroU32::MIN);

    /// A revision number; `None` for zero.
    #[must_use]
    pub const fn new(n: u32) -> Option<Self> {
        match NonZeroU32::new(n) {
            Some(n) => Some(Self(n)),
            None => None,
        }
    }

    /// The number.
    #[must_use]
    pub const fn get(self) -> u32 {
        self.0.get()
    }

    /// The following revision (saturating at `u32::MAX`).
    #[must_use]
    pub const fn next(self) -> Self {
        Self(self.0.saturating_add(1))
    }
}

impl Default for Revision {
    fn default() -> Self {
        Self::FIRST
    }
}

impl fmt::Debug for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Revision({})", self.0)
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl<'de> Deserialize<'de> for Revision {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = u32::deserialize(d)?;
        Self::new(n)
            .ok_or_else(|| serde::de::Error::custom("invalid revision 0: revisions start at 1"))
    }
}

impl JsonSchema for Revision {
    fn schema_name() -> Cow<'static, str> {
        "Revision".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "integer",
            "minimum": 1,
            "maximum": u32::MAX,
            "description": "The version of a pending action request, from 1."
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Field names
// ---------------------------------------------------------------------------------------------

/// The pattern every [`FieldName`] matches.
pub const FIELD_NAME_PATTERN: &str = "^[a-zA-Z][a-zA-Z0-9_]{0,63}$";

const FIELD_NAME_EXPECTED: &str =
    "a letter then up to 63 letters, digits or underscores (^[a-zA-Z][a-zA-Z0-9_]{0,63}$)";

/// The name of a form field, matching `^[a-zA-Z][a-zA-Z0-9_]{0,63}$`: the key under which its
/// value is submitted.
///
/// ```
/// use harness_core::action::FieldName;
/// assert!("email".parse::<FieldName>().is_ok());
/// assert!("first_name2".parse::<FieldName>().is_ok());
/// let err = "2fa".parse::<FieldName>().unwrap_err();
/// assert!(err.to_string().contains("invalid form field name `2fa`"), "{err}");
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldName(Box<str>);

impl FieldName {
    /// Checks `s` against [`FIELD_NAME_PATTERN`]; usable in `const` context.
    #[must_use]
    pub const fn is_valid(s: &str) -> bool {
        let b = s.as_bytes();
        if b.is_empty() || b.len() > 64 || !b[0].is_ascii_alphabetic() {
            return false;
        }
        let mut i = 1;
        while i < b.len() {
            let c = b[i];
            if !(c.is_ascii_alphanumeric() || c == b'_') {
                return false;
            }
            i += 1;
        }
        true
    }

    /// The name as a string slice.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn invalid_field_name(s: &str) -> InvalidId {
    let value = if s.chars().count() > 80 {
        let mut v: String = s.chars().take(77).collect();
        v.push_str("...");
        v
    } else {
        s.to_owned()
    };
    InvalidId {
        kind: "form field name",
        value,
        expected: FIELD_NAME_EXPECTED,
    }
}

impl FromStr for FieldName {
    type Err = InvalidId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if Self::is_valid(s) {
            Ok(Self(s.into()))
        } else {
            Err(invalid_field_name(s))
        }
    }
}

impl TryFrom<String> for FieldName {
    type Error = InvalidId;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        if Self::is_valid(&s) {
            Ok(Self(s.into_boxed_str()))
        } else {
            Err(invalid_field_name(&s))
        }
    }
}

crate::id::string_id_common!(FieldName, FIELD_NAME_PATTERN, "A form field name.");

/// Which kind of action a request or response is. Wire: `form_input` / `tool_approval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ActionType {
    /// A form to fill in.
    FormInput,
    /// Tool calls to decide on.
    ToolApproval,
}

impl ActionType {
    /// The wire name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::FormInput => "form_input",
            Self::ToolApproval => "tool_approval",
        }
    }
}

impl fmt::Display for ActionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
