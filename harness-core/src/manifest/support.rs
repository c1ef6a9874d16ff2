//! Helpers the parts of this module share.

/// Cuts an echoed input to 80 characters.
pub(super) fn truncate_for_echo(s: &str) -> String {
    if s.chars().count() > 80 {
        let mut v: String = s.chars().take(77).collect();
        v.push_str("...");
        v
    } else {
        s.to_owned()
    }
}
