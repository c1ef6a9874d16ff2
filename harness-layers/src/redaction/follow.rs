//! A lazy DFA of the rules without trigger prefixes whose state a stream keeps between
//! deltas, so each byte is fed once: it says where a match of any of them may end, and only
//! then does the stream run their regex (on the text it holds) for the exact spans.

use regex_automata::hybrid::LazyStateID;
use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::nfa::thompson;
use regex_automata::util::{start, syntax};
use regex_automata::{Anchored, Input, MatchKind};

/// The unanchored DFA of several patterns that reports every position where a match of
/// any of them ends (all matches, overlapping, not only leftmost-first ones).
pub(crate) struct Ends {
    dfa: DFA,
}

impl Ends {
    /// `None` if the patterns do not fit a lazy DFA (the caller then searches with the
    /// regex every time).
    pub(crate) fn new(patterns: &[String]) -> Option<Self> {
        Self::build(patterns, DFA::config())
    }

    /// [`Ends::new`] with the smallest cache the DFA can work with, which it clears
    /// whenever it needs a new state (and never gives up for that).
    #[cfg(test)]
    pub(crate) fn with_tiny_cache(patterns: &[String]) -> Option<Self> {
        let tiny = DFA::config()
            .cache_capacity(0)
            .skip_cache_capacity_check(true)
            .minimum_cache_clear_count(None);
        Self::build(patterns, tiny)
    }

    /// [`Ends::new`] with `extra` on top of its configuration.
    fn build(patterns: &[String], extra: regex_automata::hybrid::dfa::Config) -> Option<Self> {
        let dfa = DFA::builder()
            .configure(
                DFA::config()
                    .match_kind(MatchKind::All)
                    // A Unicode `\b` is decided on ASCII text; the DFA quits at the first
                    // other byte (see `Follow::feed`).
                    .unicode_word_boundary(true),
            )
            .configure(extra)
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
            clears: 0,
            at_end: None,
            last_end: None,
            failed: false,
        }
    }
}

/// One text's walk through [`Ends`]: the state after the bytes fed so far.
///
/// A lazy state ID is only valid until the cache is cleared, and computing any transition
/// (a byte's or the text's end) may clear it when it is full. So the walk holds its state
/// with the cache's clear count at the time: once the count moved on, the state is lost
/// and the walk starts again at the next [`Follow::feed`] (see [`Follow::held`]).
#[derive(Debug, Clone)]
pub(crate) struct Follow {
    cache: Cache,
    /// `None`: at the start of the text. Valid only while `cache` was cleared `clears`
    /// times.
    state: Option<LazyStateID>,
    /// `cache.clear_count()` when `state` was computed.
    clears: usize,
    /// Whether a match ends at the end of what was fed, if decided since (it outlives
    /// the state, which deciding it may cost).
    at_end: Option<bool>,
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
    ///
    /// If the walk lost its state (the cache was cleared since, see [`Follow::held`]), it
    /// starts again at `restart`, as at the start: `bytes[restart..from]` is fed again.
    pub(crate) fn feed(&mut self, ends: &Ends, bytes: &[u8], from: usize, restart: usize) {
        self.at_end = None;
        let held = self.held();
        let from = if held.is_some() { from } else { restart };
        if self.failed || from >= bytes.len() {
            return;
        }
        let dfa = &ends.dfa;
        let cache = &mut self.cache;
        // Each transition may clear the cache, but it returns a state valid in the cache
        // as it is after: only the state it leaves from goes stale, and it is not used
        // again.
        let mut sid = match held {
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
            // Most transitions are computed already and lead to an untagged state: one
            // table lookup, without the checks `next_state` makes for the others.
            if !sid.is_tagged() {
                let next = dfa.next_state_untagged(cache, sid, b);
                if !next.is_tagged() {
                    sid = next;
                    continue;
                }
            }
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
        self.clears = cache.clear_count();
        self.last_end = last_end;
    }

    /// The state after the bytes fed so far, unless the walk is at the start or lost it:
    /// the cache was cleared since it was computed, so its ID may now name another state
    /// or none (a transition from it could panic, or go on from the wrong state and miss a
    /// match).
    fn held(&self) -> Option<LazyStateID> {
        self.state
            .filter(|_| self.cache.clear_count() == self.clears)
    }

    /// Whether a match may end at `pos` or later, up to the end of what was fed (a match
    /// that ends there is decided as if the text ended there).
    ///
    /// Deciding the text's end may clear the cache: the answer holds (and is kept until
    /// the next [`Follow::feed`]), but the walk loses its state and starts again then.
    pub(crate) fn ends_from(&mut self, ends: &Ends, pos: usize) -> bool {
        if self.failed || self.last_end.is_some_and(|e| e >= pos) {
            return true;
        }
        if let Some(at_end) = self.at_end {
            return at_end;
        }
        match self.held() {
            // Nothing was fed (an empty match is the only one that could end here), or
            // the state was lost: a match may end anywhere.
            None => true,
            Some(sid) => match ends.dfa.next_eoi_state(&mut self.cache, sid) {
                // `sid` was valid when the transition was computed, so `eoi` is right
                // even if the cache was cleared meanwhile (then `held` forgets `sid`).
                Ok(eoi) => *self.at_end.insert(eoi.is_match()),
                // The DFA gave up on its cache: from now on the regex decides.
                Err(_) => {
                    self.failed = true;
                    true
                }
            },
        }
    }

    /// Whether a match starts at `pos` or later in `bytes` (`bytes[..pos]` is context),
    /// searched with the DFA's own search and this walk's cache; `None` if the DFA gives
    /// up. The walk must be [cleared](Follow::clear): the search may clear the cache.
    pub(crate) fn search_from(&mut self, ends: &Ends, bytes: &[u8], pos: usize) -> Option<bool> {
        debug_assert!(self.state.is_none());
        let input = Input::new(bytes).range(pos..).earliest(true);
        ends.dfa
            .try_search_fwd(&mut self.cache, &input)
            .ok()
            .map(|m| m.is_some())
    }

    /// Moves every position `by` bytes to the left (the text before them was dropped).
    pub(crate) fn advance(&mut self, by: usize) {
        self.last_end = self.last_end.and_then(|e| e.checked_sub(by));
    }

    /// Starts over, for a new text (keeping the cache).
    pub(crate) fn clear(&mut self) {
        self.state = None;
        self.at_end = None;
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

    fn all() -> meta::Regex {
        meta::Regex::builder()
            .configure(meta::Regex::config().match_kind(MatchKind::All))
            .build_many(PATTERNS)
            .unwrap()
    }

    /// Feeds `text` cut at `cuts` (sorted, at most its length) and checks, after each
    /// piece, what the walk says against a search of the text so far: where the last match
    /// before the piece's end ends, and whether one ends at or after any position (one at
    /// the very end decided as the text's end).
    fn check_walk(ends: &Ends, text: &str, cuts: &[usize]) -> Result<(), TestCaseError> {
        let all = all();
        // Whether a match ends at `e < to` in `text[..to]` depends on `text[..=e]` only,
        // so it is the same in the whole text.
        let ends_in_text: Vec<bool> = (0..text.len()).map(|e| ends_at(&all, text, e)).collect();
        let mut follow = ends.follow();
        let mut from = 0;
        for &to in cuts {
            follow.feed(ends, &text.as_bytes()[..to], from, 0);
            from = to;
            prop_assert!(!follow.failed);
            let so_far = &text[..to];
            let last = (0..to).rev().find(|&e| ends_in_text[e]);
            prop_assert_eq!(follow.last_end, last, "after {:?}", so_far);
            let at_end = ends_at(&all, so_far, to);
            for pos in [0, to / 2, last.map_or(0, |e| e + 1), to] {
                let expected = at_end || (pos..to).any(|e| ends_in_text[e]);
                // Before anything is fed, a match may end anywhere.
                if to > 0 {
                    prop_assert_eq!(
                        follow.ends_from(ends, pos),
                        expected,
                        "{:?} from {}",
                        so_far,
                        pos
                    );
                }
            }
        }
        Ok(())
    }

    proptest! {
        /// Fed in pieces, the DFA's state after each piece says what a search of the text
        /// so far says.
        #[test]
        fn a_walk_split_anywhere_equals_a_search_of_the_text_so_far(
            text in text(),
            cuts in prop::collection::vec(0usize..64, 0..8),
            tiny in any::<bool>(),
        ) {
            let ends = if tiny {
                Ends::with_tiny_cache(&patterns()).unwrap()
            } else {
                Ends::new(&patterns()).unwrap()
            };
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(text.len())).collect();
            cuts.push(text.len());
            cuts.sort_unstable();
            check_walk(&ends, &text, &cuts)?;
        }
    }

    /// A lazy state ID is only valid until the cache is cleared: with the smallest cache,
    /// deciding the text's end (a new state) clears it between deltas, and the walk must
    /// not go on from the state it held before.
    #[test]
    fn a_walk_survives_its_cache_being_cleared_between_deltas() {
        let ends = Ends::with_tiny_cache(&patterns()).unwrap();
        let pieces = [
            "123-45-6789",
            "0123abcd",
            "postgres://db.x:pw@",
            "mongodb://a.b:c@",
            "DE12AB34",
            "GB99XYZ0QQ",
            " ",
            "-",
            "9",
            "f00",
            "ZZ",
            "12-3",
        ];
        // A fixed pseudo-random text and cuts (a linear congruential generator).
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: usize| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            usize::try_from(seed >> 33).unwrap() % n
        };
        let mut text = String::new();
        while text.len() < 600 {
            text.push_str(pieces[next(pieces.len())]);
        }
        let mut cuts = Vec::new();
        let mut to = 0;
        while to < text.len() {
            to = (to + 1 + next(9)).min(text.len());
            cuts.push(to);
        }
        check_walk(&ends, &text, &cuts).unwrap();

        // And the case is really exercised: `ends_from` clears the cache while the walk
        // holds a state.
        let mut follow = ends.follow();
        let mut from = 0;
        let mut cleared_while_held = 0;
        for &to in &cuts {
            follow.feed(&ends, &text.as_bytes()[..to], from, 0);
            from = to;
            let held = follow.held().is_some();
            let before = follow.cache.clear_count();
            follow.ends_from(&ends, to);
            if held && follow.cache.clear_count() != before {
                cleared_while_held += 1;
            }
        }
        assert!(cleared_while_held > 0);
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
