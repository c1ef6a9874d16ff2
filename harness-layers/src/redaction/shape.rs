//! Rules of one common shape, settled per trigger in constant time.
//!
//! Most secret formats are a literal start and a run of one character class: `sk-` then
//! `[A-Za-z0-9_-]{20,}`, `xox[abprs]-` then `[A-Za-z0-9-]{10,}`, `AIza` then 35 of
//! `[0-9A-Za-z_-]`. For such a rule the leftmost-first match at a trigger `t` is decided by
//! three facts: whether the start matches at `t` (and the ASCII word boundary before it, if
//! the pattern opens with one), where the run of the class that follows ends, and the window
//! (see the [module docs](super)). The run's end is shared by every trigger inside the run,
//! so one forward scan of it, remembered per branch, serves them all: each byte is read once
//! per branch however densely triggers occur (`sk-sk-sk-...`, where every trigger's window
//! stays open for 256 bytes and followed DFA threads cost O(window) per trigger). A trigger
//! before the remembered run (triggers of different lengths are reported by their end) scans
//! again from its own run, at most its window.
//!
//! A pattern has the shape when its syntax tree is, after an optional leading `(?-u:\b)`,
//! one or more *branches* (an alternation, in priority order), each a sequence of single
//! characters or ASCII classes (the *start*) followed by one greedy repetition of an ASCII
//! class, and nothing after it: no trailing look-around, no capture named `secret`. With
//! declared token characters, every character of the start and of the class must be one
//! (a window then never ends inside the start or the run). Other rules keep the lockstep
//! DFAs of [`lockstep`](super::lockstep).
//!
//! Why the result is exact: nothing follows the repetition, so a branch matches at `t` iff
//! its start matches and the run after it (cut at the window's end) is at least the
//! repetition's minimum, and then greedily takes `min(run, max)` characters; leftmost-first
//! tries the branches in order. The window ends at `t + max_len` or after the first
//! character that is not a token character, which is after the run (the run and the start
//! are token characters), so the run is cut only by `t + max_len` (an ASCII run ends on a
//! character boundary). A stream knows the result once the run ended before the text's end,
//! reached `max` or the cap, or the text ended.
//!
//! A stream holds a trigger whose result it does not know yet in its branch's queue, in
//! order, and looks only at the earliest one of each queue per delta. A later trigger of the
//! same rule that arrives while one is held is put off without being evaluated (the held
//! one keeps the horizon before it): evaluated once the held ones settled, it usually
//! settles at once, where evaluating it on arrival, holding it and evaluating it again cost
//! dense triggers twice.

use std::collections::VecDeque;

use regex_syntax::hir::{Class, Hir, HirKind, Look};

use super::engine::{Candidate, Compiled, add};

/// At most this many branches after distributing a sequence over its alternations.
const MAX_BRANCHES: usize = 16;

/// A set of bytes, as a table: one load per membership test (the run of a dense trigger's
/// class is tested byte by byte).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Bytes([bool; 256]);

impl Bytes {
    const EMPTY: Self = Self([false; 256]);

    fn one(b: u8) -> Self {
        let mut set = Self::EMPTY;
        set.insert(b);
        set
    }

    fn insert(&mut self, b: u8) {
        self.0[usize::from(b)] = true;
    }

    #[inline(always)]
    fn contains(&self, b: u8) -> bool {
        self.0[usize::from(b)]
    }

    fn is_ascii(&self) -> bool {
        self.0[128..].iter().all(|&m| !m)
    }

    /// An ASCII class of the syntax tree; `None` if it has a non-ASCII member.
    fn of_class(class: &Class) -> Option<Self> {
        let mut set = Self::EMPTY;
        let mut add = |lo: u32, hi: u32| -> Option<()> {
            if hi > 0x7f {
                return None;
            }
            for b in lo..=hi {
                set.insert(u8::try_from(b).ok()?);
            }
            Some(())
        };
        match class {
            Class::Unicode(c) => {
                for r in c.ranges() {
                    add(u32::from(r.start()), u32::from(r.end()))?;
                }
            }
            Class::Bytes(c) => {
                for r in c.ranges() {
                    add(u32::from(r.start()), u32::from(r.end()))?;
                }
            }
        }
        Some(set)
    }
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let members: String = (0u8..128)
            .filter(|&b| self.contains(b))
            .map(char::from)
            .collect();
        f.debug_tuple("Bytes").field(&members).finish()
    }
}

/// One element of a branch while the tree is flattened.
#[derive(Debug, Clone)]
enum Elem {
    /// One byte of the set.
    Byte(Bytes),
    /// A greedy repetition of a byte of the set, `min..=max` times.
    Run(Bytes, usize, usize),
}

/// One alternative: its start, then a run.
#[derive(Debug)]
struct Branch {
    start: Vec<Bytes>,
    class: Bytes,
    min: usize,
    max: usize,
    /// Its index among every shaped branch of the redactor: what a scan remembers of its
    /// runs and holds of its open triggers.
    slot: usize,
}

/// A rule of the shape, compiled.
#[derive(Debug)]
pub(crate) struct Shape {
    /// The pattern opens with an ASCII word boundary.
    boundary: bool,
    branches: Vec<Branch>,
}

/// What [`Shape::eval`] knows of a trigger.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Quick {
    /// Settled: the candidate, if the match is one.
    Settled(Option<Candidate>),
    /// Open until more text arrives: the run of branch slot `.0` goes on to the text's end.
    Open(usize),
    /// Open until more text arrives, before any run (the start is not complete yet).
    Unknown,
}

impl Shape {
    /// The shape of `rule`, if it has it; its branches take the slots from `*slots` on.
    pub(crate) fn of(rule: &Compiled, slots: &mut usize) -> Option<Self> {
        if rule.secret_group.is_some() {
            return None;
        }
        let hir = regex_syntax::parse(rule.regex.as_str()).ok()?;
        let (boundary, rest): (bool, &[Hir]) = match hir.kind() {
            HirKind::Concat(items) => match items.first().map(Hir::kind) {
                Some(HirKind::Look(Look::WordAscii)) => (true, &items[1..]),
                _ => (false, items),
            },
            _ => (false, std::slice::from_ref(&hir)),
        };
        let mut alternatives = vec![Vec::new()];
        for item in rest {
            alternatives = product(&alternatives, &expand(item)?)?;
        }
        let token = rule.token_chars.as_ref();
        let within = |set: &Bytes| {
            token.is_none_or(|t| (0..=255u8).all(|b| !set.contains(b) || t.contains(b)))
        };
        let mut branches = Vec::with_capacity(alternatives.len());
        for mut seq in alternatives {
            let Some(Elem::Run(class, min, max)) = seq.pop() else {
                return None;
            };
            let start = seq
                .into_iter()
                .map(|e| match e {
                    Elem::Byte(set) => Some(set),
                    Elem::Run(..) => None,
                })
                .collect::<Option<Vec<_>>>()?;
            if start.is_empty() || !class.is_ascii() || !within(&class) || !start.iter().all(within)
            {
                return None;
            }
            branches.push(Branch {
                start,
                class,
                min,
                max,
                slot: 0,
            });
        }
        for branch in &mut branches {
            branch.slot = *slots;
            *slots += 1;
        }
        Some(Self { boundary, branches })
    }

    /// Rule `rule`'s candidate at `t` in `hay` (with `last`, `hay` is the whole text), as
    /// [`Redactor::eval`](super::engine::Redactor) finds it with the rule's regex.
    pub(crate) fn eval(
        &self,
        rule: &Compiled,
        hay: &[u8],
        t: usize,
        last: bool,
        tails: &mut Tails,
    ) -> Quick {
        let n = hay.len();
        if t >= n {
            return if last {
                Quick::Settled(None)
            } else {
                Quick::Unknown
            };
        }
        if self.boundary && t.checked_sub(1).is_some_and(|p| is_word(hay[p])) == is_word(hay[t]) {
            return Quick::Settled(None);
        }
        self.branches_from(0, rule, hay, t, last, tails)
    }

    /// [`Shape::eval`] of a trigger held open in branch `slot`: its word boundary and that
    /// branch's start matched when it was held, and still do; only the run is new.
    fn resume(
        &self,
        slot: usize,
        rule: &Compiled,
        hay: &[u8],
        t: usize,
        last: bool,
        tails: &mut Tails,
    ) -> Quick {
        let b = slot - self.branches[0].slot;
        let branch = &self.branches[b];
        match self.run_of(branch, rule, hay, t, last, tails) {
            Some(quick) => quick,
            None => self.branches_from(b + 1, rule, hay, t, last, tails),
        }
    }

    /// The first of the branches from `first` on that matches at `t`, past the boundary.
    fn branches_from(
        &self,
        first: usize,
        rule: &Compiled,
        hay: &[u8],
        t: usize,
        last: bool,
        tails: &mut Tails,
    ) -> Quick {
        let n = hay.len();
        let cap = t.saturating_add(rule.max_len);
        let limit = cap.min(n);
        'branches: for branch in &self.branches[first..] {
            for (k, set) in branch.start.iter().enumerate() {
                let q = t + k;
                if q >= limit {
                    if q < cap && !last {
                        return Quick::Unknown;
                    }
                    continue 'branches;
                }
                if !set.contains(hay[q]) {
                    continue 'branches;
                }
            }
            if let Some(quick) = self.run_of(branch, rule, hay, t, last, tails) {
                return quick;
            }
        }
        Quick::Settled(None)
    }

    /// What `branch`, whose start matched at `t`, finds: `None` if its run is too short
    /// (the next branch decides).
    #[inline]
    fn run_of(
        &self,
        branch: &Branch,
        rule: &Compiled,
        hay: &[u8],
        t: usize,
        last: bool,
        tails: &mut Tails,
    ) -> Option<Quick> {
        let cap = t.saturating_add(rule.max_len);
        let limit = cap.min(hay.len());
        let from = t + branch.start.len();
        let (end, closed) = tails.run(branch, hay, from, limit);
        let run = end - from;
        if !(closed || limit == cap || last || run >= branch.max) {
            return Some(Quick::Open(branch.slot));
        }
        (run >= branch.min).then(|| {
            let end = from + run.min(branch.max);
            Quick::Settled((end - t >= rule.min_len).then_some(Candidate::new(t, end, rule.id)))
        })
    }
}

/// `(?-u:\b)`'s word bytes.
fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The alternatives of `hir` as flat sequences, in priority order; `None` if it is not
/// made of literals, ASCII classes, greedy repetitions of one of them, groups and
/// alternations.
fn expand(hir: &Hir) -> Option<Vec<Vec<Elem>>> {
    Some(match hir.kind() {
        HirKind::Empty => vec![Vec::new()],
        HirKind::Literal(lit) => vec![lit.0.iter().map(|&b| Elem::Byte(Bytes::one(b))).collect()],
        HirKind::Class(class) => vec![vec![Elem::Byte(Bytes::of_class(class)?)]],
        HirKind::Repetition(rep) => {
            let set = match rep.sub.kind() {
                HirKind::Class(class) => Bytes::of_class(class)?,
                HirKind::Literal(lit) if lit.0.len() == 1 => Bytes::one(lit.0[0]),
                _ => return None,
            };
            if !rep.greedy {
                return None;
            }
            let min = usize::try_from(rep.min).ok()?;
            let max = rep
                .max
                .map_or(Some(usize::MAX), |m| usize::try_from(m).ok())?;
            vec![vec![Elem::Run(set, min, max)]]
        }
        HirKind::Capture(cap) => expand(&cap.sub)?,
        HirKind::Concat(items) => {
            let mut out = vec![Vec::new()];
            for item in items {
                out = product(&out, &expand(item)?)?;
            }
            out
        }
        HirKind::Alternation(items) => {
            let mut out = Vec::new();
            for item in items {
                out.extend(expand(item)?);
                if out.len() > MAX_BRANCHES {
                    return None;
                }
            }
            out
        }
        HirKind::Look(_) => return None,
    })
}

/// Every sequence of `heads` followed by every one of `tails`, in priority order.
fn product(heads: &[Vec<Elem>], tails: &[Vec<Elem>]) -> Option<Vec<Vec<Elem>>> {
    if heads.len() * tails.len() > MAX_BRANCHES {
        return None;
    }
    let mut out = Vec::with_capacity(heads.len() * tails.len());
    for head in heads {
        for tail in tails {
            let mut seq = head.clone();
            seq.extend(tail.iter().cloned());
            out.push(seq);
        }
    }
    Some(out)
}

/// What one text's scan knows of the shaped branches: the class run each looked at last,
/// and the triggers whose run was still open at the text's end. Positions are absolute
/// (bytes since the text's start), so a stream that drops what it emitted moves one number.
#[derive(Debug, Default)]
pub(crate) struct Tails {
    /// The absolute position of the scanned text's byte 0.
    base: usize,
    /// By slot.
    runs: Vec<Memo>,
    /// By slot: open triggers (absolute), in increasing order.
    open: Vec<VecDeque<usize>>,
    /// The slots with open triggers.
    active: Vec<usize>,
    /// By rule (its first slot): triggers not evaluated yet (absolute, in increasing
    /// order), each after an open trigger of the rule (see [`Tails::defer`]) ...
    deferred: Vec<VecDeque<usize>>,
    /// ... and the rules (first slots) that have some.
    deferring: Vec<usize>,
}

/// `[from, end)` are bytes of a branch's class; with `closed`, the byte at `end` is not.
#[derive(Debug, Default, Clone, Copy)]
struct Memo {
    from: usize,
    end: usize,
    closed: bool,
}

impl Tails {
    /// The text before `by` was dropped.
    pub(crate) fn advance(&mut self, by: usize) {
        self.base += by;
    }

    /// Starts over, for a new text.
    pub(crate) fn clear(&mut self) {
        self.base = 0;
        self.runs.clear();
        for slot in self.active.drain(..) {
            self.open[slot].clear();
        }
        for first in self.deferring.drain(..) {
            self.deferred[first].clear();
        }
    }

    /// In a stream, puts off evaluating `shape`'s trigger at `t` while an earlier trigger
    /// of the rule is open: that one holds the horizon before `t` already, and when it
    /// settles, most triggers after it are evaluated once and settle (dense triggers,
    /// `sk-sk-sk-...` in token-sized deltas, were each evaluated when they arrived, held,
    /// and evaluated again when they settled). `false` if there is none (or `t` would not
    /// keep the order): the caller evaluates `t` now.
    #[inline]
    pub(crate) fn defer(&mut self, shape: &Shape, t: usize) -> bool {
        // Usually nothing is open.
        if self.active.is_empty() {
            return false;
        }
        let t = self.base + t;
        let first = shape.branches[0].slot;
        let slots = first..first + shape.branches.len();
        let held = slots
            .filter_map(|slot| self.open.get(slot).and_then(VecDeque::front))
            .any(|&h| h < t);
        if !held {
            return false;
        }
        enqueue(&mut self.deferred, &mut self.deferring, first, t)
    }

    /// Where the run of `branch`'s class from `from` ends, looking no further than
    /// `limit`, and whether a byte not in the class ends it there (`false`: it reaches
    /// `limit`).
    fn run(&mut self, branch: &Branch, hay: &[u8], from: usize, limit: usize) -> (usize, bool) {
        if from >= limit {
            return (limit, false);
        }
        let base = self.base;
        if self.runs.len() <= branch.slot {
            self.runs.resize(branch.slot + 1, Memo::default());
        }
        let memo = &mut self.runs[branch.slot];
        let (a, a_limit) = (base + from, base + limit);
        let mut end = if memo.from <= a && a <= memo.end && memo.end > memo.from {
            if memo.end >= a_limit {
                return (limit, false);
            }
            if memo.closed {
                return (memo.end - base, true);
            }
            memo.end - base
        } else {
            memo.from = a;
            from
        };
        while end < limit && branch.class.contains(hay[end]) {
            end += 1;
        }
        memo.end = base + end;
        memo.closed = end < limit;
        (end, memo.closed)
    }

    /// Holds `t`, whose run in `slot` is open; `false` if it cannot keep the slot's order
    /// (the caller holds it otherwise).
    pub(crate) fn hold(&mut self, slot: usize, t: usize) -> bool {
        enqueue(&mut self.open, &mut self.active, slot, self.base + t)
    }

    /// Whether it holds open triggers. (A put-off trigger always follows a held one of its
    /// rule, so this covers them.)
    #[inline]
    pub(crate) fn is_holding(&self) -> bool {
        !self.active.is_empty()
    }

    /// The earliest open trigger (put-off ones follow a held one: not earlier).
    #[inline]
    pub(crate) fn horizon(&self) -> Option<usize> {
        if self.active.is_empty() {
            return None;
        }
        self.active
            .iter()
            .filter_map(|&slot| self.open[slot].front())
            .min()
            .map(|&t| t - self.base)
    }

    /// Evaluates the open triggers again on `hay`, grown since: pushes the settled ones'
    /// candidates to `out`, and hands back those open otherwise than in their slot
    /// (`(t, rule)`, for the caller to hold).
    pub(crate) fn settle(
        &mut self,
        rules: &[Compiled],
        rule_of_slot: &[u32],
        hay: &[u8],
        last: bool,
        out: &mut Vec<Candidate>,
        other: &mut Vec<(usize, u32)>,
    ) {
        let mut k = 0;
        while k < self.active.len() {
            let slot = self.active[k];
            let (id, rule, shape) = shaped(rules, rule_of_slot, slot);
            while let Some(&at) = self.open[slot].front() {
                let t = at - self.base;
                match shape.resume(slot, rule, hay, t, last, self) {
                    Quick::Open(s) if s == slot => break,
                    Quick::Settled(c) => c.into_iter().for_each(|c| add(out, c)),
                    Quick::Open(_) | Quick::Unknown => other.push((t, id)),
                }
                self.open[slot].pop_front();
            }
            if self.open[slot].is_empty() {
                self.active.swap_remove(k);
            } else {
                k += 1;
            }
        }
        // Triggers put off behind a trigger of their rule that settled: in order, until
        // one is held (the rest wait behind it again).
        let mut k = 0;
        while k < self.deferring.len() {
            let first = self.deferring[k];
            let (id, rule, shape) = shaped(rules, rule_of_slot, first);
            let mut slots = first..first + shape.branches.len();
            let held = slots.any(|slot| self.open.get(slot).is_some_and(|q| !q.is_empty()));
            if !held {
                while let Some(at) = self.deferred[first].pop_front() {
                    let t = at - self.base;
                    match shape.eval(rule, hay, t, last, self) {
                        Quick::Settled(c) => c.into_iter().for_each(|c| add(out, c)),
                        Quick::Open(slot) if self.hold(slot, t) => break,
                        Quick::Open(_) | Quick::Unknown => other.push((t, id)),
                    }
                }
            }
            if self.deferred[first].is_empty() {
                self.deferring.swap_remove(k);
            } else {
                k += 1;
            }
        }
        debug_assert!(
            self.deferring.is_empty() || !self.active.is_empty(),
            "put-off triggers follow a held one"
        );
    }
}

/// The rule that branch slot `slot` belongs to: its id, its compiled form and its shape.
fn shaped<'a>(
    rules: &'a [Compiled],
    rule_of_slot: &[u32],
    slot: usize,
) -> (u32, &'a Compiled, &'a Shape) {
    let id = rule_of_slot[slot];
    let rule = &rules[id as usize - 1];
    let Some(shape) = rule.shape.as_ref() else {
        unreachable!("a slot belongs to a shaped rule")
    };
    (id, rule, shape)
}

/// Appends `t` to `queues[at]` if that keeps it in increasing order, listing `at` in
/// `listed` when the queue was empty; `false` (nothing changed) otherwise.
#[inline]
fn enqueue(
    queues: &mut Vec<VecDeque<usize>>,
    listed: &mut Vec<usize>,
    at: usize,
    t: usize,
) -> bool {
    if queues.len() <= at {
        queues.resize_with(at + 1, VecDeque::new);
    }
    let queue = &mut queues[at];
    if queue.back().is_some_and(|&b| b > t) {
        return false;
    }
    if queue.is_empty() {
        listed.push(at);
    }
    queue.push_back(t);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redaction::rules::{BUILTINS, PatternRule};

    fn compiled(rule: &PatternRule) -> Compiled {
        Compiled::new(
            1,
            rule,
            rule.token_chars,
            crate::redaction::lockstep::LazyDfa::default(),
        )
    }

    #[test]
    fn the_builtin_key_rules_have_the_shape_and_the_others_not() {
        let shaped: Vec<&str> = BUILTINS
            .iter()
            .filter(|b| Shape::of(&compiled(&b.rule().unwrap()), &mut 0).is_some())
            .map(|b| b.name)
            .collect();
        assert_eq!(
            shaped,
            [
                "anthropic_key",
                "openai_key",
                "github_token",
                "slack_token",
                "google_api_key"
            ]
        );
    }

    #[test]
    fn shapes_are_recognised_conservatively() {
        let shaped = |p: &str| {
            Shape::of(&compiled(&PatternRule::new("r", p).unwrap()), &mut 0)
                .map(|s| s.branches.len())
        };
        assert_eq!(shaped(r"acme_[a-z0-9]{8,}"), Some(1));
        assert_eq!(shaped(r"(?:abc|xyz)-[0-9]+"), Some(2));
        assert_eq!(shaped(r"(?i-u:tok)_[a-z]{4}"), Some(1));
        assert_eq!(
            shaped(r"acme_[a-z]+(?-u:\b)"),
            None,
            "look-around after the run"
        );
        assert_eq!(shaped(r"acme_[a-z]+x"), None, "a literal after the run");
        assert_eq!(shaped(r"acme_[a-z]+?"), None, "lazy");
        assert_eq!(shaped(r"acme_[a-zé]+"), None, "not ASCII");
        assert_eq!(shaped(r"\bacme_[a-z]+"), None, "a Unicode boundary");
        assert_eq!(shaped(r"acme_[a-z]+_[0-9]+"), None, "two runs");
        assert_eq!(shaped(r"[a-z]+"), None, "no start");
    }
}
