//! A stream's cheap test that no rule without prefixes can match in a delta: each rule's
//! match lies in a run of its token characters (its window ends with the first other
//! character), so text where no such run is long enough for the rule's shortest match is
//! settled without searching it. One byte lane per rule counts the run, eight rules to a
//! word: a byte costs two table loads and four operations however many rules there are.
//!
//! On prose this replaces, on most deltas, the search of the open tail by the DFA of the
//! rules without prefixes (a few hundred instructions of setup per delta, and the tail
//! read again) and the walk back over the trailing runs that bounds what is settled.

use super::engine::{Compiled, utf8_len};
use super::rules::derived_token_chars;

/// The most rules without prefixes one word counts: one byte lane each.
pub(crate) const MAX_LANES: usize = 8;

/// A lane's shortest match is capped here: its counter stays below it (a byte lane holds
/// the counter plus what one byte adds), and a lower threshold only tests more often.
const MAX_THRESHOLD: usize = 128;

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The run counters of up to [`MAX_LANES`] rules without prefixes, all with token
/// characters.
pub(crate) struct Lanes {
    /// By byte: `[test, member]`. `member` has lane `k` all ones if the byte is one of
    /// rule `k`'s token characters (so `(c + 1) & member` counts the run or ends it).
    /// `test` adds, to a counter below its threshold `L`, `128 - L` plus the length of the
    /// window the byte would end (1, or a character's length when it is not ASCII): lane
    /// `k`'s top bit is then set exactly when the window reaches `L`. When the token
    /// characters hold every character the rule's pattern can match, a match ends before
    /// the character that ends its run: only a token character adds (1), and the top bit
    /// is set when the run itself reaches `L` (an ISO date, 10 characters then a space,
    /// is then too short for a rule of 11, where its window was not).
    table: Box<[[u64; 2]; 256]>,
    /// By lane: the rule's `max_len`.
    max_len: Vec<usize>,
    /// By lane: the threshold, the shortest match the rule can have (capped at
    /// [`MAX_THRESHOLD`]).
    threshold: Vec<usize>,
}

impl Lanes {
    /// `None` unless there are at most [`MAX_LANES`] rules, each with token characters.
    pub(crate) fn new(rules: &[&Compiled]) -> Option<Self> {
        if rules.is_empty() || rules.len() > MAX_LANES {
            return None;
        }
        let mut table = Box::new([[0u64; 2]; 256]);
        let mut threshold = Vec::with_capacity(rules.len());
        for (k, rule) in rules.iter().enumerate() {
            let set = rule.token_chars.as_ref()?;
            let shortest = shortest_match(rule).clamp(1, MAX_THRESHOLD);
            threshold.push(shortest);
            let within = derived_token_chars(rule.regex.as_str())
                .is_some_and(|chars| (0..128u8).all(|b| !chars.contains(b) || set.contains(b)));
            for (b, [test, member]) in (0..=255u8).zip(table.iter_mut()) {
                let window = if within {
                    usize::from(set.contains(b))
                } else if b.is_ascii() {
                    1
                } else {
                    utf8_len(b)
                };
                // At most 128 - 1 + 4: below the lane's carry.
                *test |= ((MAX_THRESHOLD - shortest + window) as u64) << (8 * k);
                if set.contains(b) {
                    *member |= 0xFF << (8 * k);
                }
            }
        }
        Some(Self {
            table,
            max_len: rules.iter().map(|r| r.max_len).collect(),
            threshold,
        })
    }

    /// Counts `bytes` on from `counters`. `Err(back)` if a window (a run of a rule's token
    /// characters, with the character that ends it) reaches the rule's threshold in them:
    /// no such window starts more than `back` bytes before the end of `bytes` (the
    /// counters are then meaningless).
    #[inline]
    pub(crate) fn feed(&self, counters: &mut u64, bytes: &[u8]) -> Result<(), usize> {
        let mut c = *counters;
        let step = |c: &mut u64, reached: &mut u64, b: u8| {
            let [test, member] = self.table[usize::from(b)];
            *reached |= c.wrapping_add(test);
            *c = c.wrapping_add(ONES) & member;
        };
        // A branch per eight bytes, not per byte (exact chunks, which the compiler unrolls;
        // 55.7 -> 54.2 instructions per byte of 1-64 B prose): a counter past its threshold
        // may carry into the next lane, which only sets more top bits in a chunk that
        // reached one already.
        let n = bytes.len();
        // A run that reaches its threshold in a chunk started in it or was counted
        // before it.
        let back =
            |at: usize, c: u64| n - at + c.to_le_bytes().into_iter().max().map_or(0, usize::from);
        let chunks = bytes.chunks_exact(8);
        let rest = chunks.remainder();
        for (k, chunk) in chunks.enumerate() {
            let before = c;
            let mut reached = 0;
            for &b in chunk {
                step(&mut c, &mut reached, b);
            }
            if reached & HIGH != 0 {
                return Err(back(8 * k, before));
            }
        }
        let before = c;
        let mut reached = 0;
        for &b in rest {
            step(&mut c, &mut reached, b);
        }
        if reached & HIGH != 0 {
            return Err(back(n - rest.len(), before));
        }
        *counters = c;
        Ok(())
    }

    /// Counters for a text that ends at `n`, whose rules' trailing runs of token
    /// characters start at `starts` (as [`Trail`](super::engine) keeps them), counted from
    /// `from`; `None` if one reaches its threshold, or if feeding `bytes[from..]` (the text
    /// after what was settled, where a complete run may be long enough) reaches one.
    pub(crate) fn recount(&self, bytes: &[u8], from: usize, starts: &[usize]) -> Option<u64> {
        let n = bytes.len();
        // A long trailing run (hostile text: one token character repeated) is common
        // enough to say so without reading it.
        for (&start, &threshold) in starts.iter().zip(&self.threshold) {
            if n - start.max(from).min(n) >= threshold {
                return None;
            }
        }
        let mut counters = 0;
        self.feed(&mut counters, &bytes[from.min(n)..])
            .ok()
            .map(|()| counters)
    }

    /// The minimum over the rules of where a match may still start differently once more
    /// text arrives, in a text of `n` bytes whose counters are `counters` (as
    /// `OpenFrom::min_from` computes it from the trailing runs).
    #[inline]
    pub(crate) fn open_from(&self, counters: u64, n: usize) -> usize {
        let mut from = n;
        for (k, &len) in self.max_len.iter().enumerate() {
            let run = (counters >> (8 * k)) as u8;
            from = from.min(
                n.saturating_sub(usize::from(run))
                    .max((n + 1).saturating_sub(len)),
            );
        }
        from
    }
}

/// The shortest match rule `rule` can have: its declared `min_len`, or its pattern's
/// shortest match if longer.
fn shortest_match(rule: &Compiled) -> usize {
    let pattern = regex_syntax::parse(rule.regex.as_str())
        .ok()
        .and_then(|hir| hir.properties().minimum_len());
    rule.min_len.max(pattern.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redaction::PatternRule;
    use crate::redaction::lockstep::LazyDfa;

    fn compiled(pattern: &str, min_len: usize, tokens: &str) -> Compiled {
        let rule = PatternRule::new("r", pattern)
            .unwrap()
            .min_len(min_len)
            .max_len(200)
            .token_chars(tokens)
            .unwrap();
        let tokens = rule.token_chars;
        Compiled::new(1, &rule, tokens, LazyDfa::default())
    }

    #[test]
    fn the_threshold_is_the_shortest_match_and_a_window_may_take_its_last_character() {
        let ssn = compiled(r"(?-u:\b)[0-9]{3}-[0-9]{2}-[0-9]{4}(?-u:\b)", 1, "0-9-");
        let long = compiled("[a-z]+", 200, "a-z");
        let lanes = Lanes::new(&[&ssn, &long]).unwrap();
        assert_eq!(lanes.threshold, [11, MAX_THRESHOLD]);
        let fits = |text: &str| lanes.feed(&mut 0, text.as_bytes()).is_ok();
        // Its token characters hold every character of its pattern: a match lies in a run,
        // which must reach 11 (an ISO date and the space after it do not).
        assert!(fits("2026-12-05 "));
        assert!(fits("123-45-67é"));
        assert!(!fits("123-45-6789"));
        // Token characters narrower than the pattern: a match may take the character that
        // ends the run, so the window does (its length when it is not ASCII).
        let wider = compiled("[0-9]{10}[xé]", 1, "0-9");
        let lanes = Lanes::new(&[&wider]).unwrap();
        let fits = |text: &str| lanes.feed(&mut 0, text.as_bytes()).is_ok();
        assert_eq!(lanes.threshold, [11]);
        assert!(fits("1234567890"));
        assert!(!fits("1234567890 "));
        assert!(fits("123456789"));
        assert!(!fits("123456789é"));
        let lanes = Lanes::new(&[&ssn, &long]).unwrap();
        // Counted on across deltas, and from where the counters say.
        let mut counters = 0;
        assert!(lanes.feed(&mut counters, b"x 123-45").is_ok());
        assert_eq!(lanes.open_from(counters, 8), 2);
        // The run that reached it started 6 bytes before these 5.
        assert_eq!(lanes.feed(&mut counters, b"-6789"), Err(11));
        // A run begun in the chunk where it reaches the threshold: no earlier than it.
        let text = "a b c d 123-45-6789 x";
        assert_eq!(lanes.feed(&mut 0, text.as_bytes()), Err(text.len() - 8));
        // Without token characters, no lanes.
        let plain = Compiled::new(
            1,
            &PatternRule::new("p", "[0-9]{4}").unwrap(),
            None,
            LazyDfa::default(),
        );
        assert!(Lanes::new(&[&ssn, &plain]).is_none());
    }
}
