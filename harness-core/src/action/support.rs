//! Helpers the parts of this module share.

use std::fmt;

use serde::{Deserialize, Deserializer};

// ---------------------------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------------------------

/// Deserializes the body of a field-less variant of an internally tagged enum, refusing any
/// key besides the tag: serde's `deny_unknown_fields` does not reach unit variants.
pub(super) fn no_fields<'de, D: Deserializer<'de>>(d: D) -> Result<(), D::Error> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct NoFields {}
    NoFields::deserialize(d).map(|NoFields {}| ())
}

/// `a`, `b`, `c` (backticked, comma separated).
pub(super) fn ticked<T: fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Items joined with `; `.
pub(super) fn listed<T: fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
