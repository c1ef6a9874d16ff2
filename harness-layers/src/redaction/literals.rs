//! Exact secrets and trigger prefixes: one Aho-Corasick automaton, walked byte by byte.
//!
//! One pass finds both kinds of literals (the automaton folds ASCII case, as trigger
//! prefixes are compared; a secret's hit is then compared exactly). The walk is written
//! here rather than through `AhoCorasick`'s iterators so that it is monomorphized (no
//! dynamic call per byte) and, above all, so that a stream can keep the automaton's state
//! between deltas: each byte is fed once, and the state says how much of the text's end
//! could still begin an occurrence (see [`Literals::hold`]), with no search of the tail.

use aho_corasick::automaton::{Automaton, StateID};
use aho_corasick::{Anchored, MatchKind, dfa, nfa};

use super::rules::RedactionError;

/// Up to this many bytes of literals, the automaton is a DFA (about 4 MiB for 8 KiB of
/// random literals); beyond, a contiguous NFA (a few times slower, far smaller).
const DFA_LITERAL_BYTES: usize = 8 * 1024;

/// The automaton, of the kind chosen by size.
enum Kind {
    Dfa(dfa::DFA),
    Nfa(nfa::contiguous::NFA),
}

/// What a literal hit is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hit {
    /// An exact secret occurs (compared exactly, case included).
    Secret,
    /// The trigger prefix of this index occurs (ASCII case folded).
    Trigger(usize),
}

/// Exact secrets and trigger prefixes, found in one pass.
pub(crate) struct Literals {
    kind: Kind,
    start: StateID,
    /// Pattern `i < secrets.len()` is secret `i`; pattern `secrets.len() + j` is trigger `j`.
    secrets: Vec<Box<[u8]>>,
    /// By state (its id shifted right by `shift`): the length of the longest end of the text
    /// walked so far that is a proper prefix of some literal (ASCII case folded), i.e. where
    /// an occurrence that is not complete yet may start.
    hold: Vec<u32>,
    shift: u32,
    max_len: usize,
    /// By state, like `hold`: the length of the text the state stands for (its trie
    /// node's depth), at most 255.
    depth: Vec<u8>,
    /// The walk skips over text whose every `gram` bytes begin no literal: 3, or 2 if a
    /// literal is that short; 0 (no skipping) if a literal is one byte long.
    gram: usize,
    /// By hash of `gram` bytes ([`fold`]ed): 1 if the first `gram` bytes of a literal have
    /// it, else 0.
    grams: Box<[u8; GRAM_SIZE]>,
}

/// The longest stretch a walk goes without trying to skip, after attempts in a row that
/// skipped little (it doubles from one byte).
const MAX_BACKOFF: usize = 128;

/// When a walk next tries to skip (see [`Literals::walk`]), kept between the walks of a
/// stream's deltas: text where every few bytes may begin a literal (`aaaa...`, a prefix
/// repeated) would otherwise pay for failed attempts again in every delta.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Skips {
    /// The position from which the next attempt may be made ...
    retry: usize,
    /// ... and how far the one after a failed attempt goes.
    backoff: usize,
}

impl Default for Skips {
    fn default() -> Self {
        Self {
            retry: 0,
            backoff: 1,
        }
    }
}

impl Skips {
    /// The text before `by` was dropped.
    pub(crate) fn advance(&mut self, by: usize) {
        self.retry = self.retry.saturating_sub(by);
    }
}

/// The gram filter's hashes have this many bits ...
const GRAM_BITS: u32 = 16;
/// ... and it has a byte for each (64 KiB, shared by every stream of a redactor): a test is
/// one load, where a bit set of 8 KiB took three more instructions per byte of text, which
/// cost more than its fewer cache misses saved. A fixed size: the lookups need no bounds
/// check.
const GRAM_SIZE: usize = 1 << GRAM_BITS;

impl Literals {
    /// The automaton of `secrets` (exact) and `triggers` (ASCII case folded); `None` when
    /// both are empty.
    pub(crate) fn new(
        secrets: Vec<Vec<u8>>,
        triggers: &[Vec<u8>],
    ) -> Result<Option<Self>, RedactionError> {
        if secrets.is_empty() && triggers.is_empty() {
            return Ok(None);
        }
        let build_error = |e: aho_corasick::BuildError| RedactionError::Build {
            message: e.to_string(),
        };
        let patterns: Vec<&[u8]> = secrets
            .iter()
            .map(Vec::as_slice)
            .chain(triggers.iter().map(Vec::as_slice))
            .collect();
        let total: usize = patterns.iter().map(|p| p.len()).sum();
        let kind = if total <= DFA_LITERAL_BYTES {
            Kind::Dfa(
                dfa::Builder::new()
                    .match_kind(MatchKind::Standard)
                    .ascii_case_insensitive(true)
                    .prefilter(false)
                    .build(&patterns)
                    .map_err(build_error)?,
            )
        } else {
            Kind::Nfa(
                nfa::contiguous::Builder::new()
                    .match_kind(MatchKind::Standard)
                    .ascii_case_insensitive(true)
                    .prefilter(false)
                    .build(&patterns)
                    .map_err(build_error)?,
            )
        };
        let start = match &kind {
            Kind::Dfa(a) => a.start_state(Anchored::No),
            Kind::Nfa(a) => a.start_state(Anchored::No),
        }
        .map_err(|e| RedactionError::Build {
            message: e.to_string(),
        })?;
        let max_len = patterns.iter().map(|p| p.len()).max().unwrap_or(0);
        let folded: Vec<Vec<u8>> = patterns.iter().map(|p| p.to_ascii_lowercase()).collect();
        drop(patterns);
        let mut lits = Self {
            kind,
            start,
            secrets: secrets.into_iter().map(Vec::into_boxed_slice).collect(),
            hold: Vec::new(),
            shift: 0,
            max_len,
            depth: Vec::new(),
            gram: 0,
            // Not `Box::new([0; GRAM_SIZE])`: that may build it on the stack first.
            grams: match vec![0; GRAM_SIZE].into_boxed_slice().try_into() {
                Ok(grams) => grams,
                Err(_) => unreachable!("the vector has GRAM_SIZE bytes"),
            },
        };
        lits.hold_table(&folded);
        lits.gram_table(&folded);
        Ok(Some(lits))
    }

    /// Fills `hold`. Every state of the automaton is the trie node of a prefix of some
    /// literal, reached by feeding that prefix from the start; the node of a proper prefix
    /// holds its length. A node that is a whole literal and no proper prefix (a leaf) holds
    /// what the node of the literal without its first byte holds: the longest end of the
    /// text that is a proper prefix is then shorter than the literal.
    fn hold_table(&mut self, folded: &[Vec<u8>]) {
        let mut proper: Vec<(StateID, u32)> = vec![(self.start, 0)];
        let mut leaves: Vec<(StateID, &[u8])> = Vec::new();
        for lit in folded {
            let mut sid = self.start;
            for (i, &b) in lit.iter().enumerate() {
                sid = self.next(sid, b);
                if i + 1 < lit.len() {
                    proper.push((sid, u32::try_from(i + 1).unwrap_or(u32::MAX)));
                } else {
                    leaves.push((sid, lit));
                }
            }
        }
        let ids = proper
            .iter()
            .map(|&(s, _)| s)
            .chain(leaves.iter().map(|&(s, _)| s));
        let shift = ids
            .clone()
            .map(|s| s.as_u32())
            .filter(|&s| s != 0)
            .map(u32::trailing_zeros)
            .min()
            .unwrap_or(0);
        let len = ids.map(|s| s.as_usize() >> shift).max().unwrap_or(0) + 1;
        // Fails closed: a state not found below holds everything it could, and is never
        // shallow.
        let unknown = u32::try_from(self.max_len).unwrap_or(u32::MAX);
        self.shift = shift;
        self.hold = vec![unknown; len];
        self.depth = vec![u8::MAX; len];
        let mut known = vec![false; len];
        for &(sid, depth) in &proper {
            let at = sid.as_usize() >> shift;
            self.hold[at] = depth;
            self.depth[at] = u8::try_from(depth).unwrap_or(u8::MAX);
            known[at] = true;
        }
        for &(sid, lit) in &leaves {
            let at = sid.as_usize() >> shift;
            if !known[at] {
                self.depth[at] = u8::try_from(lit.len()).unwrap_or(u8::MAX);
            }
        }
        // Shorter leaves first: a leaf's value is that of a shorter node's.
        leaves.sort_by_key(|(_, lit)| lit.len());
        for (sid, lit) in leaves {
            let at = sid.as_usize() >> shift;
            if known[at] {
                continue;
            }
            let mut s = self.start;
            for &b in &lit[1..] {
                s = self.next(s, b);
            }
            let value = self.hold(s);
            self.hold[at] = value.min(u32::try_from(lit.len() - 1).unwrap_or(u32::MAX));
            known[at] = true;
        }
    }

    /// Fills `gram` and `grams`.
    fn gram_table(&mut self, folded: &[Vec<u8>]) {
        let shortest = folded.iter().map(Vec::len).min().unwrap_or(0);
        self.gram = match shortest {
            0 | 1 => 0,
            2 => 2,
            _ => 3,
        };
        if self.gram == 0 {
            return;
        }
        for lit in folded {
            // The first byte lowest, as the walk loads them.
            let x = lit[..self.gram]
                .iter()
                .rev()
                .fold(0u32, |x, &b| x << 8 | fold(b));
            self.grams[gram_hash(x)] = 1;
        }
    }

    fn next(&self, sid: StateID, byte: u8) -> StateID {
        match &self.kind {
            Kind::Dfa(a) => a.next_state(Anchored::No, sid, byte),
            Kind::Nfa(a) => a.next_state(Anchored::No, sid, byte),
        }
    }

    /// The state of a walk that has seen nothing.
    pub(crate) fn start(&self) -> StateID {
        self.start
    }

    /// How many bytes at the end of a text whose walk ended in `sid` may begin an
    /// occurrence that is not complete yet (a proper prefix of a literal, ASCII case
    /// folded): less than the longest literal.
    pub(crate) fn hold(&self, sid: StateID) -> u32 {
        let at = sid.as_usize() >> self.shift;
        self.hold
            .get(at)
            .copied()
            .unwrap_or(u32::try_from(self.max_len).unwrap_or(u32::MAX))
    }

    /// The number of exact secrets.
    pub(crate) fn secrets_len(&self) -> usize {
        self.secrets.len()
    }

    /// Feeds `bytes[from..]` from state `sid`; calls `hit(start, end, what)` for every
    /// occurrence ending in `from + 1..=bytes.len()` (overlapping ones included), and
    /// returns the state at the end.
    #[inline]
    pub(crate) fn walk(
        &self,
        bytes: &[u8],
        from: usize,
        sid: StateID,
        skips: &mut Skips,
        hit: impl FnMut(usize, usize, Hit),
    ) -> StateID {
        match &self.kind {
            Kind::Dfa(a) => self.walk_with(a, bytes, from, sid, skips, hit),
            Kind::Nfa(a) => self.walk_with(a, bytes, from, sid, skips, hit),
        }
    }

    #[inline(always)]
    fn walk_with<A: Automaton>(
        &self,
        aut: &A,
        bytes: &[u8],
        from: usize,
        mut sid: StateID,
        skips: &mut Skips,
        mut hit: impl FnMut(usize, usize, Hit),
    ) -> StateID {
        let secrets = self.secrets.len();
        let n = bytes.len();
        let gram = self.gram;
        let mut i = from;
        // Where the next attempt to skip may be made, and how far the one after a failed
        // attempt goes: text where every few bytes may begin a literal (`aaaa...`, a
        // prefix repeated) would otherwise pay for a failed attempt at each byte. (One
        // that reaches the text's end did not fail: a stream's next delta goes on.)
        let Skips {
            mut retry,
            mut backoff,
        } = *skips;
        while i < n {
            // Shallow: no end of the text longer than `gram - 1` bytes begins a literal.
            // Then, as long as the next `gram` bytes begin no literal, no literal ends
            // (none is shorter than `gram`) and that stays so: the walk skips the bytes,
            // and at the end takes the state of the last `gram - 1` bytes.
            if gram > 0 && i >= retry && i + 1 >= gram && usize::from(self.depth(sid)) < gram {
                let j = self.skip(bytes, i);
                if j - i < 2 * gram && j < n {
                    retry = j + backoff;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                } else {
                    backoff = 1;
                }
                if j > i {
                    sid = self.start;
                    for &b in &bytes[j + 1 - gram..j] {
                        sid = aut.next_state(Anchored::No, sid, b);
                    }
                    i = j;
                    if i == n {
                        break;
                    }
                }
            }
            sid = aut.next_state(Anchored::No, sid, bytes[i]);
            i += 1;
            if aut.is_match(sid) {
                self.report(aut, bytes, sid, i, secrets, &mut hit);
            }
        }
        *skips = Skips { retry, backoff };
        sid
    }

    /// The depth of state `sid` (255 if unknown or deeper).
    #[inline(always)]
    fn depth(&self, sid: StateID) -> u8 {
        self.depth
            .get(sid.as_usize() >> self.shift)
            .copied()
            .unwrap_or(u8::MAX)
    }

    /// The first `j >= i` where the `gram` bytes ending at `bytes[j]` may begin a literal
    /// (a hash filter: "may" may be wrong, "may not" never is), or the text's length.
    #[inline(always)]
    fn skip(&self, bytes: &[u8], i: usize) -> usize {
        if self.gram == 3 {
            self.skip_with::<3>(bytes, i)
        } else {
            self.skip_with::<2>(bytes, i)
        }
    }

    /// [`skip`](Self::skip) for grams of `G` bytes (a gram's value: its [`fold`]ed bytes,
    /// the first in the lowest byte).
    #[inline(always)]
    fn skip_with<const G: usize>(&self, bytes: &[u8], i: usize) -> usize {
        let n = bytes.len();
        let mask = (1u32 << (8 * G)) - 1;
        let mut j = i;
        // One load of eight bytes tests the `9 - G` grams that end in it, with one branch
        // (`| 0x20` in every byte: `fold` eight at once).
        while let Some(chunk) = bytes.get(j + 1 - G..j + 9 - G) {
            let mut w = [0; 8];
            w.copy_from_slice(chunk);
            let w = u64::from_le_bytes(w) | 0x2020_2020_2020_2020;
            let mut any = 0;
            for k in 0..9 - G {
                any |= self.gram_bit((w >> (8 * k)) as u32 & mask);
            }
            if any != 0 {
                break;
            }
            j += 9 - G;
        }
        let mut x = 0u32;
        for &b in &bytes[j + 1 - G..j] {
            x = x >> 8 | fold(b) << (8 * (G - 1));
        }
        while j < n {
            x = x >> 8 | fold(bytes[j]) << (8 * (G - 1));
            if self.gram_bit(x) != 0 {
                break;
            }
            j += 1;
        }
        j
    }

    /// 1 if the gram filter has `x`, else 0.
    #[inline(always)]
    fn gram_bit(&self, x: u32) -> u64 {
        u64::from(self.grams[gram_hash(x)])
    }

    #[inline(never)]
    fn report<A: Automaton>(
        &self,
        aut: &A,
        bytes: &[u8],
        sid: StateID,
        end: usize,
        secrets: usize,
        hit: &mut impl FnMut(usize, usize, Hit),
    ) {
        for k in 0..aut.match_len(sid) {
            let pattern = aut.match_pattern(sid, k).as_usize();
            let start = end - aut.pattern_len(aut.match_pattern(sid, k));
            if pattern < secrets {
                if bytes[start..end] == *self.secrets[pattern] {
                    hit(start, end, Hit::Secret);
                }
            } else {
                hit(start, end, Hit::Trigger(pattern - secrets));
            }
        }
    }
}

/// A byte as the gram filter sees it: ASCII letters of either case alike (so it holds one
/// entry per literal, not one per case), and some other pairs of bytes too (a filter may
/// say "may" wrongly).
#[inline(always)]
fn fold(b: u8) -> u32 {
    u32::from(b | 0x20)
}

/// The entry of the gram filter for the bytes `x`.
#[inline(always)]
fn gram_hash(x: u32) -> usize {
    (x.wrapping_mul(0x9E37_79B1) >> (32 - GRAM_BITS)) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk_all(lits: &Literals, text: &[u8]) -> (Vec<(usize, usize, Hit)>, u32) {
        let mut hits = Vec::new();
        let sid = lits.walk(text, 0, lits.start(), &mut Skips::default(), |s, e, h| {
            hits.push((s, e, h));
        });
        (hits, lits.hold(sid))
    }

    #[test]
    fn hold_is_the_longest_end_that_is_a_proper_prefix() {
        let lits = Literals::new(vec![b"secret-value".to_vec()], &[b"bearer".to_vec()])
            .unwrap()
            .unwrap();
        assert_eq!(walk_all(&lits, b"my secret-va").1, 9);
        assert_eq!(walk_all(&lits, b"my secret-value").1, 0);
        // Folded: a possible trigger, and (conservatively) a possible secret.
        assert_eq!(walk_all(&lits, b"x BEAR").1, 4);
        assert_eq!(walk_all(&lits, b"x SECR").1, 4);
        assert_eq!(walk_all(&lits, b"x bearer").1, 0);
        assert_eq!(walk_all(&lits, b"plain").1, 0);
        // A whole literal that is also the start of another: `bearerb` may begin `bearer`
        // again only from its last `b`.
        assert_eq!(walk_all(&lits, b"bearerb").1, 1);
    }

    #[test]
    fn a_leaf_holds_its_longest_proper_suffix_prefix() {
        // `abcab` is whole; its end `ab` begins `abcab` again.
        let lits = Literals::new(vec![], &[b"abcab".to_vec(), b"zz".to_vec()])
            .unwrap()
            .unwrap();
        assert_eq!(walk_all(&lits, b"xabcab").1, 2);
        assert_eq!(walk_all(&lits, b"xzz").1, 1);
    }

    #[test]
    fn secrets_are_exact_and_triggers_folded() {
        let lits = Literals::new(vec![b"Secret-Value".to_vec()], &[b"sk-".to_vec()])
            .unwrap()
            .unwrap();
        let (hits, _) = walk_all(&lits, b"SECRET-VALUE Secret-Value SK-x");
        assert_eq!(
            hits,
            [(13, 25, Hit::Secret), (26, 29, Hit::Trigger(0))],
            "{hits:?}"
        );
    }

    #[test]
    fn a_walk_resumes_across_pieces() {
        let lits = Literals::new(vec![b"hunter2-db".to_vec()], &[b"eyj".to_vec()])
            .unwrap()
            .unwrap();
        let text = b"a hunter2-db and eyJ";
        let (whole, _) = walk_all(&lits, text);
        for cut in 0..=text.len() {
            let mut hits = Vec::new();
            let mut skips = Skips::default();
            let sid = lits.walk(&text[..cut], 0, lits.start(), &mut skips, |s, e, h| {
                hits.push((s, e, h));
            });
            lits.walk(text, cut, sid, &mut skips, |s, e, h| hits.push((s, e, h)));
            assert_eq!(hits, whole, "cut at {cut}");
        }
    }

    /// The literals of the tests; with `short`, one of two bytes too (grams of two bytes).
    fn fixture(gram: bool, short: bool) -> Literals {
        let mut triggers = vec![
            b"sk-".to_vec(),
            b"eyj".to_vec(),
            b"bearer".to_vec(),
            b"-----begin".to_vec(),
            b"abcab".to_vec(),
        ];
        if short {
            triggers.push(b"q_".to_vec());
        }
        let mut lits = Literals::new(
            vec![b"cred01-AbCdEf".to_vec(), b"hunter2-db".to_vec()],
            &triggers,
        )
        .unwrap()
        .unwrap();
        if !gram {
            lits.gram = 0;
        }
        lits
    }

    use proptest::prelude::*;

    proptest! {
        /// Skipping changes nothing: the hits and the final state (so what is held back)
        /// are those of a walk that feeds every byte, wherever the text is split.
        #[test]
        fn skipping_finds_what_feeding_every_byte_finds(
            pieces in prop::collection::vec(prop_oneof![
                "[a-zA-Z0-9 _-]{0,12}",
                prop::sample::select(vec![
                    "cred01-AbCdEf", "CRED01-ABCDEF", "cred01-Ab", "hunter2-db", "hunter2",
                    "sk-", "SK-", "eyJ", "ey", "Bearer", "bear", "-----BEGIN", "-----",
                    "abcabcab", "ab", "ca", "日本", "q_", "Q_q", "[_",
                ]).prop_map(str::to_owned),
            ], 0..16),
            cut in 0usize..200,
            short in any::<bool>(),
        ) {
            let text = pieces.concat().into_bytes();
            let cut = cut.min(text.len());
            let plain = fixture(false, short);
            let skipping = fixture(true, short);
            prop_assert_eq!(skipping.gram, if short { 2 } else { 3 });
            let (expected, held) = walk_all(&plain, &text);
            let mut hits = Vec::new();
            let mut skips = Skips::default();
            let sid = skipping.walk(&text[..cut], 0, skipping.start(), &mut skips, |s, e, h| {
                hits.push((s, e, h));
            });
            let sid = skipping.walk(&text, cut, sid, &mut skips, |s, e, h| {
                hits.push((s, e, h));
            });
            prop_assert_eq!(hits, expected);
            prop_assert_eq!(skipping.hold(sid), held);
        }
    }
}
