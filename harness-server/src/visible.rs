//! Text an operator decides on, made visible: bidirectional controls, zero-width and other
//! invisible characters escaped and marked, so that what is approved is what is read.
//!
//! Agent output is hostile. A tool argument holding a right-to-left override
//! (`"reports/\u{202e}fdp.exe"`) displays as `reports/exe.pdf`; a zero-width space splits
//! a word that looks whole. [`escape`] replaces each such character with a marker,
//! `[\u{202e}]`, that a terminal or a page shows as it is.
//!
//! What happens when...
//! - the text holds none: it is returned borrowed, unchanged.
//! - the text holds a control character (C0 or C1, other than line feed and tab): it is
//!   marked too; a terminal would otherwise act on it (an escape sequence can rewrite what
//!   was printed before it).
//!
//! Decisions where the spec is silent: the marker is ASCII (`[\u{XXXX}]`, the Rust and
//! JSON spelling of the code point) so that it survives any terminal or font; ordinary
//! non-ASCII text (accents, CJK, emoji) is left alone, since escaping it would make
//! legitimate arguments unreadable.

use std::borrow::Cow;
use std::fmt::Write as _;

/// What the marker looks like, for the note beside a decision prompt.
pub const NOTE: &str = "invisible and direction-changing characters are shown as [\\u{...}]";

/// Whether `c` is invisible or changes how the text around it is displayed: bidirectional
/// controls, zero-width characters, other default-ignorable code points, and control
/// characters other than line feed and tab.
///
/// ```
/// use harness_server::visible::is_hidden;
/// assert!(is_hidden('\u{202e}') && is_hidden('\u{200b}') && is_hidden('\u{1b}'));
/// assert!(!is_hidden('a') && !is_hidden('é') && !is_hidden('\n'));
/// ```
#[must_use]
pub fn is_hidden(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}'
        | '\u{ad}'              // soft hyphen
        | '\u{34f}'             // combining grapheme joiner
        | '\u{61c}'             // Arabic letter mark
        | '\u{115f}' | '\u{1160}' | '\u{3164}' | '\u{ffa0}' // Hangul fillers
        | '\u{17b4}' | '\u{17b5}'
        | '\u{180b}'..='\u{180f}' // Mongolian selectors and vowel separator
        | '\u{200b}'..='\u{200f}' // zero-width space, joiners, LRM, RLM
        | '\u{2028}' | '\u{2029}' // line and paragraph separators
        | '\u{202a}'..='\u{202e}' // embeddings and overrides
        | '\u{2060}'..='\u{206f}' // word joiner, invisible operators, isolates, deprecated
        | '\u{fe00}'..='\u{fe0f}' // variation selectors
        | '\u{feff}'            // zero-width no-break space
        | '\u{fff9}'..='\u{fffb}' // interlinear annotation
        | '\u{1bca0}'..='\u{1bca3}'
        | '\u{1d173}'..='\u{1d17a}'
        | '\u{e0000}'..='\u{e0fff}' // tags and variation selectors supplement
    )
}

/// `text` with every [hidden](is_hidden) character replaced by a visible marker
/// (`[\u{202e}]`); borrowed when there is none.
///
/// ```
/// use harness_server::visible::escape;
/// assert_eq!(escape("reports/\u{202e}fdp.exe"), "reports/[\\u{202e}]fdp.exe");
/// assert_eq!(escape("safe\u{200b}.txt"), "safe[\\u{200b}].txt");
/// assert!(matches!(escape("plain, é"), std::borrow::Cow::Borrowed(_)));
/// ```
#[must_use]
pub fn escape(text: &str) -> Cow<'_, str> {
    let Some(first) = text.find(is_hidden) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 16);
    out.push_str(&text[..first]);
    for c in text[first..].chars() {
        if is_hidden(c) {
            let _ = write!(out, "[\\u{{{:x}}}]", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn every_bidi_control_is_marked() {
        for c in [
            '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}', '\u{202e}', '\u{2066}', '\u{2067}',
            '\u{2068}', '\u{2069}', '\u{200e}', '\u{200f}', '\u{61c}',
        ] {
            let text = format!("a{c}b");
            assert_eq!(escape(&text), format!("a[\\u{{{:x}}}]b", u32::from(c)));
        }
        assert_eq!(escape("\u{1b}[2J"), "[\\u{1b}][2J");
    }
}
