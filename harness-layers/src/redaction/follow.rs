//! A lazy DFA of the rules without trigger prefixes whose state a stream keeps between
//! deltas, so each byte is fed once: it says where a match of any of them may end, and only
//! then does the stream run their regex (on the text it holds) for the exact spans.

use regex_automata::hybrid::LazyStateID;
use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::nfa::thompson;
use regex_automata::util::{start, syntax};
use regex_automata::{Anchored, MatchKind};

/// The unanchored DFA of several patterns that reports every position where a match of
/// any of them ends (all matches, overlapping, not only leftmost-first ones).
pub(crate) struct Ends {
    dfa: DFA,
}

impl Ends {
    /// `None` if the patterns do not fit a lazy DFA (the caller then searches with the
    /// regex every time).
    pub(crate) fn new(patterns: &[String]) -> Option<Self> {
        let dfa = DFA::builder()
            .configure(
                DFA::config()
                    .match_kind(MatchKind::All)
                    // A Unicode `\b` is decided on ASCII text; the DFA quits at the first
                    // other byte (see `Follow::feed`).
                    .unicode_word_boundary(true),
            )
            .syntax(syntax::Config::new())
            .thompson(thompson::Config::new().which_captures(thompson::WhichCaptures::None))
            .build_many(patterns)
            .ok()?;
        Some(Self { dfa })
    }

    /// A walk from the start of a text.
    pub(crate) fn follow(&self) -> Follow {
        Follow {
            cache: self.dfa.create_cache(),
            state: None,
            last_end: None,
            failed: false,
        }
    }
}

/// One text's walk through [`Ends`]: the state after the bytes fed so far.
#[derive(Debug, Clone)]
pub(crate) struct Follow {
    cache: Cache,
    /// `None`: at the start of the text.
    state: Option<LazyStateID>,
    /// The last position fed where a match ends (text positions, see [`Follow::advance`]).
    last_end: Option<usize>,
    /// The DFA gave up (a byte it cannot decide on, or its cache thrashing): from now on
    /// a match may end anywhere.
    failed: bool,
}

impl Follow {
    /// Feeds `bytes[from..]`, where `bytes[..from]` is what was fed before; or, at the
    /// start, `bytes[restart..]` (`bytes[..restart]` is context: only its last byte is
    /// read). From there on, it sees every match that starts at `restart` or later.
    pub(crate) fn feed(&mut self, ends: &Ends, bytes: &[u8], from: usize, restart: usize) {
        let from = if self.state.is_some() { from } else { restart };
        if self.failed || from >= bytes.len() {
            return;
        }
        let dfa = &ends.dfa;
        let cache = &mut self.cache;
        let mut sid = match self.state {
            Some(sid) => sid,
            None => {
                let config = start::Config::new()
                    .anchored(Anchored::No)
                    .look_behind(from.checked_sub(1).map(|i| bytes[i]));
                match dfa.start_state(cache, &config) {
                    Ok(sid) => sid,
                    Err(_) => {
                        self.failed = true;
                        return;
                    }
                }
            }
        };
        let mut last_end = self.last_end;
        for (at, &b) in bytes.iter().enumerate().skip(from) {
            sid = match dfa.next_state(cache, sid, b) {
                Ok(next) => next,
                Err(_) => {
                    self.failed = true;
                    return;
                }
            };
            if sid.is_tagged() {
                // Matches are reported one byte late: this one ends before `b`.
                if sid.is_match() {
                    last_end = Some(at);
                } else if sid.is_quit() {
                    self.failed = true;
                    return;
                }
            }
        }
        self.state = Some(sid);
        self.last_end = last_end;
    }

    /// Whether a match may end at `pos` or later, up to the end of what was fed (a match
    /// that ends there is decided as if the text ended there).
    pub(crate) fn ends_from(&mut self, ends: &Ends, pos: usize) -> bool {
        if self.failed || self.last_end.is_some_and(|e| e >= pos) {
            return true;
        }
        match self.state {
            // Nothing was fed: an empty match is the only one that could end here.
            None => true,
            Some(sid) => match ends.dfa.next_eoi_state(&mut self.cache, sid) {
                Ok(eoi) => eoi.is_match(),
                Err(_) => true,
            },
        }
    }

    /// Moves every position `by` bytes to the left (the text before them was dropped).
    pub(crate) fn advance(&mut self, by: usize) {
        self.last_end = self.last_end.and_then(|e| e.checked_sub(by));
    }

    /// Starts over, for a new text (keeping the cache).
    pub(crate) fn clear(&mut self) {
        self.state = None;
        self.last_end = None;
        self.failed = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use regex_automata::{Input, meta};

    /// Rules without prefixes of the benchmark's shapes, with and without `\b`.
    const PATTERNS: &[&str] = &[
        r"(?:(?-u:\b)[0-9]{3}-[0-9]{2}-[0-9]{4}(?-u:\b))",
        r"(?:(?-u:\b)[0-9a-f]{8}(?-u:\b))",
        r"(?:(?:mongodb|postgres)://[a-z0-9.]+:[a-z0-9]+@)",
        r"(?:[A-Z]{2}[0-9]{2}[A-Z0-9]{4,6})",
    ];

    fn patterns() -> Vec<String> {
        PATTERNS.iter().map(|p| (*p).to_owned()).collect()
    }

    /// Whether a match of any pattern ends at `e` in `hay` (its end is the text's end).
    fn ends_at(all: &meta::Regex, hay: &str, e: usize) -> bool {
        (0..=e).any(|t| {
            let input = Input::new(hay).range(t..e).anchored(Anchored::Yes);
            all.search(&input).is_some_and(|m| m.end() == e)
        })
    }

    fn text() -> impl Strategy<Value = String> {
        prop::collection::vec(
            prop_oneof![
                "[0-9a-f -]{0,6}",
                "[A-Z0-9]{0,10}",
                Just("123-45-6789".to_owned()),
                Just("0123abcd".to_owned()),
                Just("postgres://db.x:pw@".to_owned()),
                Just("DE12AB34".to_owned()),
                Just(" ".to_owned()),
            ],
            0..10,
        )
        .prop_map(|pieces| pieces.concat())
    }

    proptest! {
        /// Fed in pieces, the DFA's state after each piece says what a search of the text
        /// so far says: where the last match before the piece's end ends, and whether one
        /// ends at or after any position (one at the very end decided as the text's end).
        #[test]
        fn a_walk_split_anywhere_equals_a_search_of_the_text_so_far(
            text in text(),
            cuts in prop::collection::vec(0usize..64, 0..8),
        ) {
            let ends = Ends::new(&patterns()).unwrap();
            let all = meta::Regex::builder()
                .configure(meta::Regex::config().match_kind(MatchKind::All))
                .build_many(PATTERNS)
                .unwrap();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(text.len())).collect();
            cuts.push(text.len());
            cuts.sort_unstable();
            let mut follow = ends.follow();
            let mut from = 0;
            for &to in &cuts {
                follow.feed(&ends, &text.as_bytes()[..to], from, 0);
                from = to;
                prop_assert!(!follow.failed);
                let so_far = &text[..to];
                let last = (0..to).rev().find(|&e| ends_at(&all, so_far, e));
                prop_assert_eq!(follow.last_end, last, "after {:?}", so_far);
                for pos in [0, to / 2, to] {
                    let expected = (pos..=to).any(|e| ends_at(&all, so_far, e));
                    // Before anything is fed, a match may end anywhere.
                    if to > 0 {
                        prop_assert_eq!(follow.ends_from(&ends, pos), expected, "{:?} from {}", so_far, pos);
                    }
                }
            }
        }
    }

    #[test]
    fn a_unicode_word_boundary_gives_up_on_other_text() {
        let ends = Ends::new(&[r"\b[0-9]{4}\b".to_owned()]).unwrap();
        let mut follow = ends.follow();
        follow.feed(&ends, b"abc ", 0, 0);
        assert!(!follow.ends_from(&ends, 0));
        let text = "abc 日本 x".as_bytes();
        follow.feed(&ends, text, 4, 0);
        assert!(follow.failed);
        assert!(follow.ends_from(&ends, text.len()));
    }

    #[test]
    fn positions_move_with_the_text_and_clear_forgets() {
        let ends = Ends::new(&patterns()).unwrap();
        let mut follow = ends.follow();
        let text = b"id 123-45-6789 ok";
        follow.feed(&ends, text, 0, 0);
        assert_eq!(follow.last_end, Some(14));
        follow.advance(10);
        assert_eq!(follow.last_end, Some(4));
        assert!(follow.ends_from(&ends, 4));
        assert!(!follow.ends_from(&ends, 5));
        follow.advance(5);
        assert_eq!(follow.last_end, None);
        follow.clear();
        assert_eq!(follow.state, None);
        // Started again at 3 (after "id "), it sees the match that starts there.
        follow.feed(&ends, text, 10, 3);
        assert_eq!(follow.last_end, Some(14));
        // Started at 4, it does not.
        follow.clear();
        follow.feed(&ends, text, 10, 4);
        assert_eq!(follow.last_end, None);
    }
}
