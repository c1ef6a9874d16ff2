//! Rules with trigger prefixes, followed in lockstep: each byte is fed once per rule, however
//! densely its prefixes occur.
//!
//! Evaluating a rule at a trigger `t` runs its regex, anchored at `t`, over the window (see
//! the [module docs](super)). Run one by one, those evaluations cost O(window) each, so text
//! made of one prefix repeated (`eyJ-eyJ-...`, `Bearer Bearer ...`) costs O(n × window):
//! quadratic, and a megabyte of it took minutes. Here every trigger starts a *thread* of the
//! rule's anchored DFA, and all threads of a rule advance together, one byte at a time.
//! Threads in the same DFA state have the same future, so they become one thread with
//! several *members* (their triggers): a rule then costs, per byte, one transition per
//! distinct live state, whatever the number of triggers, and each trigger O(log n) more.
//!
//! Merging changes no result. A member keeps its own window (its cap is its trigger plus
//! `max_len`; a non-token character ends every window at once) and its own last match: the
//! thread's last match if it was found after the member joined, else the one the member
//! brought along (frozen when it joined). So a member's candidate is exactly what the
//! anchored regex finds in its window, and a stream, which feeds the same bytes but may merge
//! at other positions, gets the same candidates as one pass over the whole text. The same
//! holds within a text: over a stretch of bytes that ends no window (ASCII token characters
//! before the earliest cap), each thread is fed the whole stretch alone, a table lookup and
//! a comparison per byte, and threads merge at its end.
//!
//! A rule whose DFA would exceed [`DFA_SIZE_LIMIT`] (or that a DFA cannot express: a Unicode
//! `\b`) is evaluated by regex search at each trigger instead, as before.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::OnceLock;

use regex_automata::dfa::{Automaton, StartKind, dense};
use regex_automata::nfa::thompson;
use regex_automata::util::primitives::StateID;
use regex_automata::util::{start, syntax};
use regex_automata::{Anchored, MatchKind};

use super::engine::{Candidate, Compiled, add, utf8_len};

/// A rule's DFA is not built beyond this size (the largest built-in one, `private_key`'s,
/// is about 50 KiB); the rule is then evaluated by regex search at each trigger.
pub(crate) const DFA_SIZE_LIMIT: usize = 1 << 20;

/// The rule's anchored DFA, built on first use (most rules never fire in most processes).
pub(crate) type Dfa = dense::DFA<Vec<u32>>;

/// A rule's DFA, built at most once, when a trigger first needs it.
#[derive(Default)]
pub(crate) struct LazyDfa(OnceLock<Option<Dfa>>);

impl LazyDfa {
    /// No DFA: the rule's triggers are evaluated by regex search.
    #[cfg(test)]
    pub(crate) fn none() -> Self {
        Self(OnceLock::from(None))
    }

    /// The DFA of `pattern`, leftmost-first and anchored; `None` if it cannot be built within
    /// [`DFA_SIZE_LIMIT`].
    pub(crate) fn get(&self, pattern: &str) -> Option<&Dfa> {
        self.0
            .get_or_init(|| {
                dense::Builder::new()
                    .configure(
                        dense::DFA::config()
                            .match_kind(MatchKind::LeftmostFirst)
                            .start_kind(StartKind::Anchored)
                            // Stepped byte by byte here: accelerated states would only
                            // count as special, off the fast paths.
                            .accelerate(false)
                            .dfa_size_limit(Some(DFA_SIZE_LIMIT))
                            .determinize_size_limit(Some(4 * DFA_SIZE_LIMIT)),
                    )
                    .syntax(syntax::Config::new())
                    .thompson(thompson::Config::new().which_captures(thompson::WhichCaptures::None))
                    .build(pattern)
                    .ok()
            })
            .as_ref()
    }
}

/// The threads of every rule that fired in one text, in absolute positions (bytes since
/// the text's start), so a stream that drops what it emitted moves one number.
#[derive(Debug, Default)]
pub(crate) struct Runs {
    /// The absolute position of the scanned text's byte 0.
    base: usize,
    /// The runs with threads (a stream scans after every delta: it must not walk the runs
    /// of every rule that ever fired) ...
    runs: Vec<Run>,
    /// ... and emptied ones, to reuse.
    spare: Vec<Run>,
    /// By rule id: when a trigger may next be followed alone first (see [`Runs::add`]).
    solo: Vec<Backoff>,
    /// Triggers followed alone to the end of the text so far, open: `(rule, origin, start
    /// state)`, followed alone again from their start once more text arrives.
    waiting: Vec<(u32, usize, StateID)>,
    /// The run a thread that starts behind its rule's threads catches up in, kept with its
    /// buffers: that happens on most deltas of a trigger repeated (its prefix spans the
    /// delta before), and a new run each time cost two allocations.
    late: Option<Run>,
}

/// How often a rule's triggers are first followed alone: after one that outlived the
/// [`SOLO`] budget, the next ones join the threads at once, for twice as long each time.
#[derive(Debug, Default, Clone, Copy)]
struct Backoff {
    /// Absolute position before which triggers join at once.
    next: usize,
    /// Bytes to wait after the next one that outlives the budget.
    wait: usize,
}

/// A trigger is first followed alone for up to this many bytes: most triggers of hostile
/// text (`Bearer Bearer ...`, `eyJa.eyJa....`) are settled within a few, for a few
/// transitions each, where a thread costs the run's bookkeeping on every byte.
pub(crate) const SOLO: usize = 48;

/// The longest wait between two attempts to follow a rule's triggers alone.
const MAX_WAIT: usize = 4096;

#[cfg(test)]
thread_local! {
    /// Tests follow triggers alone for fewer bytes (none: threads only), so that both ways
    /// are compared with the regex.
    pub(crate) static SOLO_BUDGET: std::cell::Cell<usize> = const { std::cell::Cell::new(SOLO) };
}

/// [`SOLO`], or what a test set.
fn solo_budget() -> usize {
    #[cfg(test)]
    let budget = SOLO_BUDGET.with(std::cell::Cell::get);
    #[cfg(not(test))]
    let budget = SOLO;
    budget
}

/// One rule's threads.
#[derive(Debug)]
struct Run {
    rule: u32,
    /// Bytes before this were fed to every thread (meaningless without threads).
    pos: usize,
    threads: Vec<Thread>,
    /// Emptied member heaps, to reuse.
    spare: Vec<BinaryHeap<Member>>,
}

#[derive(Debug)]
struct Thread {
    state: StateID,
    /// Earliest trigger first: the first window to reach its cap.
    members: BinaryHeap<Member>,
    /// Where the last match seen by this thread ends.
    last: Option<usize>,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Member {
    origin: Reverse<usize>,
    /// Matches the thread finds at `joined` or later are this member's too ...
    joined: usize,
    /// ... and this was its last match before.
    own: Option<usize>,
}

impl Member {
    fn last(&self, thread_last: Option<usize>) -> Option<usize> {
        match thread_last {
            Some(at) if at >= self.joined => Some(at),
            _ => self.own,
        }
    }
}

/// What a run needs to know of the text and where its candidates go.
struct Text<'a> {
    hay: &'a str,
    base: usize,
    out: &'a mut Vec<Candidate>,
}

impl Runs {
    /// The text before `by` was dropped.
    pub(crate) fn advance(&mut self, by: usize) {
        self.base += by;
    }

    /// Starts over, for a new text.
    pub(crate) fn clear(&mut self) {
        self.base = 0;
        self.solo.clear();
        self.waiting.clear();
        self.retire(|_| true);
    }

    /// Moves the runs `done` says to the spares.
    fn retire(&mut self, done: impl Fn(&Run) -> bool) {
        let mut k = 0;
        while k < self.runs.len() {
            if done(&self.runs[k]) {
                let mut run = self.runs.swap_remove(k);
                run.spare.extend(run.threads.drain(..).map(|t| {
                    let mut members = t.members;
                    members.clear();
                    members
                }));
                self.spare.push(run);
            } else {
                k += 1;
            }
        }
    }

    /// The earliest trigger (in `hay`) whose window is still open.
    #[inline]
    pub(crate) fn horizon(&self) -> Option<usize> {
        if self.runs.is_empty() && self.waiting.is_empty() {
            return None;
        }
        self.runs
            .iter()
            .flat_map(|r| &r.threads)
            .filter_map(|t| t.members.peek())
            .map(|m| m.origin.0)
            .chain(self.waiting.iter().map(|&(_, origin, _)| origin))
            .min()
            .map(|origin| origin - self.base)
    }

    /// Rule `id` (`rule`, with `dfa`) fires at `t` in `hay` (with `last`, the whole text):
    /// settles it alone if its window ends (or its DFA dies) within [`SOLO`] bytes;
    /// otherwise feeds the rule's threads up to `t`, then starts one there. `false` if the
    /// DFA cannot start there (the caller evaluates the trigger by regex instead).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add(
        &mut self,
        id: u32,
        rule: &Compiled,
        dfa: &Dfa,
        hay: &str,
        t: usize,
        last: bool,
        out: &mut Vec<Candidate>,
    ) -> bool {
        let bytes = hay.as_bytes();
        let Some(state) = start_at(dfa, bytes, t) else {
            return false;
        };
        if dfa.is_dead_state(state) {
            return true;
        }
        // Most triggers of hostile text die on their first byte (`eyJeyJ...`: no word
        // boundary before each `eyJ`): say so without starting a thread. A match is never
        // empty, so a DFA dead after one byte has none.
        if let Some(&first) = bytes.get(t)
            && dfa.is_dead_state(dfa.next_state(state, first))
        {
            return true;
        }
        let mut text = Text {
            hay,
            base: self.base,
            out,
        };
        let origin = self.base + t;
        let slot = id as usize;
        if self.solo.len() <= slot {
            self.solo.resize(slot + 1, Backoff::default());
        }
        let backoff = &mut self.solo[slot];
        if origin >= backoff.next {
            match solo(rule, dfa, state, bytes, t, last) {
                Alone::Settled(end) => {
                    emit(rule, origin, end.map(|e| self.base + e), &mut text);
                    backoff.wait = 1;
                    return true;
                }
                // The text so far ends first: followed alone again once more arrives (the
                // bytes read again are fewer than the budget).
                Alone::Waits => {
                    self.waiting.push((id, origin, state));
                    return true;
                }
                Alone::Outlived => {
                    let wait = backoff.wait.max(1);
                    backoff.next = origin + wait;
                    backoff.wait = (wait * 2).min(MAX_WAIT);
                }
            }
        }
        self.thread(id, rule, dfa, state, origin, &mut text);
        true
    }

    /// Starts a thread of rule `id` in `state` at `origin`.
    fn thread(
        &mut self,
        id: u32,
        rule: &Compiled,
        dfa: &Dfa,
        state: StateID,
        origin: usize,
        text: &mut Text<'_>,
    ) {
        let run = match self.runs.iter().position(|r| r.rule == id) {
            Some(k) => &mut self.runs[k],
            None => {
                let mut run = self.spare.pop().unwrap_or_else(|| Run {
                    rule: id,
                    pos: origin,
                    threads: Vec::new(),
                    spare: Vec::new(),
                });
                run.rule = id;
                self.runs.push(run);
                self.runs.last_mut().unwrap_or_else(|| unreachable!())
            }
        };
        if run.threads.is_empty() {
            run.pos = origin;
        }
        let member = Member {
            origin: Reverse(origin),
            joined: origin,
            own: None,
        };
        if origin >= run.pos {
            run.feed(rule, dfa, text, origin);
            run.pos = origin;
            run.start(state, member);
        } else {
            // The rule's threads were fed past `origin` already: by the last delta (the
            // prefix spans it), or for a shorter prefix of the same rule reported first
            // (Aho-Corasick reports by end). This thread catches up alone, then joins them.
            let mut late = self.late.take().unwrap_or_else(|| Run {
                rule: id,
                pos: origin,
                threads: Vec::new(),
                spare: Vec::new(),
            });
            late.rule = id;
            late.pos = origin;
            if late.spare.is_empty()
                && let Some(members) = run.spare.pop()
            {
                late.spare.push(members);
            }
            late.start(state, member);
            late.feed(rule, dfa, text, run.pos);
            run.threads.append(&mut late.threads);
            run.merge(run.pos);
            self.late = Some(late);
        }
    }

    /// Feeds every thread to the end of `hay`; with `last`, `hay` is the whole text and every
    /// window ends there.
    #[inline]
    pub(crate) fn finish(
        &mut self,
        rules: &[Compiled],
        hay: &str,
        last: bool,
        out: &mut Vec<Candidate>,
    ) {
        // A stream finishes after every delta: usually nothing is followed (checked
        // inline, without a call).
        if !(self.runs.is_empty() && self.waiting.is_empty()) {
            self.finish_followed(rules, hay, last, out);
        }
    }

    fn finish_followed(
        &mut self,
        rules: &[Compiled],
        hay: &str,
        last: bool,
        out: &mut Vec<Candidate>,
    ) {
        let mut text = Text {
            hay,
            base: self.base,
            out,
        };
        // Triggers that waited for more text: alone again, or threads now.
        let mut k = 0;
        while k < self.waiting.len() {
            let (id, origin, state) = self.waiting[k];
            let t = origin - self.base;
            let rule = &rules[id as usize - 1];
            // Built when the trigger came (a DFA, once built, stays).
            let Some(dfa) = rule.dfa() else {
                unreachable!("a waiting trigger's rule has a DFA")
            };
            match solo(rule, dfa, state, hay.as_bytes(), t, last) {
                Alone::Waits => {
                    k += 1;
                    continue;
                }
                Alone::Settled(end) => emit(rule, origin, end.map(|e| self.base + e), &mut text),
                Alone::Outlived => self.thread(id, rule, dfa, state, origin, &mut text),
            }
            self.waiting.swap_remove(k);
        }
        let n = self.base + hay.len();
        for run in &mut self.runs {
            if run.threads.is_empty() {
                continue;
            }
            let rule = &rules[run.rule as usize - 1];
            let Some(dfa) = rule.dfa() else {
                continue;
            };
            run.feed(rule, dfa, &mut text, n);
            if last {
                for thread in std::mem::take(&mut run.threads) {
                    let eoi = dfa.is_match_state(dfa.next_eoi_state(thread.state));
                    run.end_all(rule, thread, Some((n, eoi)), &mut text);
                }
            } else {
                // A window whose cap is the text's end is complete whatever follows.
                run.expire(rule, dfa, &mut text, n, n + 1);
            }
        }
        self.retire(|run| run.threads.is_empty());
    }
}

impl Run {
    /// Adds a member in `state` (at `self.pos`).
    fn start(&mut self, state: StateID, member: Member) {
        if let Some(thread) = self.threads.iter_mut().find(|th| th.state == state) {
            thread.members.push(member);
            return;
        }
        let mut members = self.spare.pop().unwrap_or_default();
        members.push(member);
        self.threads.push(Thread {
            state,
            members,
            last: None,
        });
    }

    /// Feeds the bytes from `self.pos` to `to` (absolute) to every thread, ending the
    /// windows that end on the way.
    fn feed(&mut self, rule: &Compiled, dfa: &Dfa, text: &mut Text<'_>, to: usize) {
        let bytes = text.hay.as_bytes();
        let mut p = self.pos;
        // The earliest cap of a window: none ends before it (members only leave meanwhile,
        // which makes it earlier than need be, never later).
        let mut due = self.due(rule);
        let token = rule.token_chars.as_ref();
        while p < to && !self.threads.is_empty() {
            // A stretch of bytes that ends no window (ASCII token characters before the
            // earliest cap): each thread is fed the whole stretch alone, a transition and a
            // comparison per byte (dead and match states are special), and threads that met
            // on the way merge at its end. Merging later than byte by byte changes no result
            // (see the module docs); a thread that dies ends where it dies, as below.
            let stop = to.min(due);
            let mut q = p;
            while q < stop && rule.plain[usize::from(bytes[q - text.base])] {
                q += 1;
            }
            if q > p {
                let stretch = &bytes[p - text.base..q - text.base];
                let mut k = 0;
                while k < self.threads.len() {
                    let thread = &mut self.threads[k];
                    let mut died = false;
                    for (at, &b) in (p..).zip(stretch) {
                        thread.state = dfa.next_state(thread.state, b);
                        if dfa.is_special_state(thread.state) {
                            if dfa.is_dead_state(thread.state) {
                                died = true;
                                break;
                            }
                            if dfa.is_match_state(thread.state) {
                                // Matches are reported one byte late: this one ends before `b`.
                                thread.last = Some(at);
                            }
                        }
                    }
                    if died {
                        let thread = self.threads.swap_remove(k);
                        self.end_all(rule, thread, None, text);
                        continue;
                    }
                    k += 1;
                }
                p = q;
                self.merge(p);
                continue;
            }
            let b = bytes[p - text.base];
            if b & 0xC0 != 0x80 {
                let len = utf8_len(b);
                // Windows whose cap falls inside this character end before it.
                if due < p + len {
                    self.expire(rule, dfa, text, p, p + len);
                    due = self.due(rule);
                    if self.threads.is_empty() {
                        break;
                    }
                }
                if token.is_some_and(|set| !set.contains(b)) {
                    // Every window ends after this character.
                    let end = p + len;
                    for mut thread in std::mem::take(&mut self.threads) {
                        let mut alive = true;
                        for q in p..end {
                            thread.state = dfa.next_state(thread.state, bytes[q - text.base]);
                            if dfa.is_dead_state(thread.state) {
                                alive = false;
                                break;
                            }
                            if dfa.is_match_state(thread.state) {
                                thread.last = Some(q);
                            }
                        }
                        let at_end = alive
                            .then(|| (end, dfa.is_match_state(dfa.next_eoi_state(thread.state))));
                        self.end_all(rule, thread, at_end, text);
                    }
                    p = end;
                    break;
                }
            }
            let mut k = 0;
            while k < self.threads.len() {
                let thread = &mut self.threads[k];
                thread.state = dfa.next_state(thread.state, b);
                // Dead and match states are special: one comparison for the others.
                if dfa.is_special_state(thread.state) {
                    if dfa.is_dead_state(thread.state) {
                        let thread = self.threads.swap_remove(k);
                        self.end_all(rule, thread, None, text);
                        continue;
                    }
                    if dfa.is_match_state(thread.state) {
                        // Matches are reported one byte late: this one ends before `b`.
                        thread.last = Some(p);
                    }
                }
                k += 1;
            }
            p += 1;
            self.merge(p);
        }
        self.pos = p.max(to);
    }

    /// The earliest cap of its members' windows.
    fn due(&self, rule: &Compiled) -> usize {
        self.threads
            .iter()
            .filter_map(|t| t.members.peek())
            .map(|m| m.origin.0.saturating_add(rule.max_len))
            .min()
            .unwrap_or(usize::MAX)
    }

    /// Ends the windows whose cap is before `limit`, at `at`.
    fn expire(&mut self, rule: &Compiled, dfa: &Dfa, text: &mut Text<'_>, at: usize, limit: usize) {
        let mut k = 0;
        while k < self.threads.len() {
            let thread = &mut self.threads[k];
            let mut eoi = None;
            while let Some(m) = thread.members.peek()
                && m.origin.0 + rule.max_len < limit
            {
                let Some(m) = thread.members.pop() else { break };
                let matched = *eoi
                    .get_or_insert_with(|| dfa.is_match_state(dfa.next_eoi_state(thread.state)));
                let last = if matched {
                    Some(at)
                } else {
                    m.last(thread.last)
                };
                emit(rule, m.origin.0, last, text);
            }
            if thread.members.is_empty() {
                let thread = self.threads.swap_remove(k);
                self.spare.push(thread.members);
            } else {
                k += 1;
            }
        }
    }

    /// Ends every member of `thread`: its window ends at `at.0` where the DFA matched or
    /// not (`at.1`), or the DFA died (`None`).
    fn end_all(
        &mut self,
        rule: &Compiled,
        thread: Thread,
        at: Option<(usize, bool)>,
        text: &mut Text<'_>,
    ) {
        let mut members = thread.members;
        for m in members.drain() {
            let last = match at {
                Some((end, true)) => Some(end),
                _ => m.last(thread.last),
            };
            emit(rule, m.origin.0, last, text);
        }
        self.spare.push(members);
    }

    /// Makes one thread of the threads in the same state, after the byte before `at`.
    fn merge(&mut self, at: usize) {
        let n = self.threads.len();
        // Usually a few threads, all in different states: compare them pairwise first.
        if n < 2
            || (n <= 8
                && !(1..n).any(|i| {
                    let state = self.threads[i].state;
                    self.threads[..i].iter().any(|t| t.state == state)
                }))
        {
            return;
        }
        self.threads.sort_unstable_by_key(|t| t.state);
        let spare = &mut self.spare;
        self.threads.dedup_by(|later, kept| {
            if later.state != kept.state {
                return false;
            }
            if later.members.len() > kept.members.len() {
                std::mem::swap(later, kept);
            }
            // The smaller one's members freeze what they found, and share from now on.
            let mut moved = std::mem::take(&mut later.members);
            for m in moved.drain() {
                let own = m.last(later.last);
                kept.members.push(Member {
                    origin: m.origin,
                    joined: at,
                    own,
                });
            }
            spare.push(moved);
            true
        });
    }
}

/// The anchored start state of `dfa` at `t` in `bytes` (the byte before it is context).
fn start_at(dfa: &Dfa, bytes: &[u8], t: usize) -> Option<StateID> {
    let config = start::Config::new()
        .anchored(Anchored::Yes)
        .look_behind(t.checked_sub(1).map(|i| bytes[i]));
    dfa.start_state(&config).ok()
}

/// What following a trigger alone found.
enum Alone {
    /// Its window ended or its DFA died: where its last match ends, if any.
    Settled(Option<usize>),
    /// It is open at the end of the text so far.
    Waits,
    /// It is open after the budget.
    Outlived,
}

/// Follows rule `rule`'s DFA from `state` at `t` alone, for up to [`SOLO`] bytes, as a
/// thread of [`Run::feed`] would (with `last`, `bytes` is the whole text).
fn solo(
    rule: &Compiled,
    dfa: &Dfa,
    mut state: StateID,
    bytes: &[u8],
    t: usize,
    last: bool,
) -> Alone {
    let n = bytes.len();
    let cap = t.saturating_add(rule.max_len);
    let stop = t.saturating_add(solo_budget()).min(n);
    let mut matched = None;
    let mut p = t;
    let token = rule.token_chars.as_ref();
    while p < stop {
        // Most bytes are ASCII token characters inside the cap: a transition and one
        // comparison each (dead and match states are special).
        let fast = stop.min(cap);
        while p < fast && rule.plain[usize::from(bytes[p])] {
            state = dfa.next_state(state, bytes[p]);
            if dfa.is_special_state(state) {
                if dfa.is_dead_state(state) {
                    return Alone::Settled(matched);
                }
                if dfa.is_match_state(state) {
                    matched = Some(p);
                }
            }
            p += 1;
        }
        if p >= stop {
            break;
        }
        let b = bytes[p];
        if b & 0xC0 != 0x80 {
            let len = utf8_len(b);
            if cap < p + len {
                // The window ends before this character.
                let eoi = dfa.is_match_state(dfa.next_eoi_state(state));
                return Alone::Settled(if eoi { Some(p) } else { matched });
            }
            if token.is_some_and(|set| !set.contains(b)) {
                // The window ends after this character.
                let end = p + len;
                if end > n {
                    return Alone::Waits;
                }
                for (q, &c) in bytes.iter().enumerate().take(end).skip(p) {
                    state = dfa.next_state(state, c);
                    if dfa.is_dead_state(state) {
                        return Alone::Settled(matched);
                    }
                    if dfa.is_match_state(state) {
                        matched = Some(q);
                    }
                }
                let eoi = dfa.is_match_state(dfa.next_eoi_state(state));
                return Alone::Settled(if eoi { Some(end) } else { matched });
            }
        }
        state = dfa.next_state(state, b);
        if dfa.is_dead_state(state) {
            return Alone::Settled(matched);
        }
        if dfa.is_match_state(state) {
            // Matches are reported one byte late: this one ends before `b`.
            matched = Some(p);
        }
        p += 1;
    }
    if p < n {
        Alone::Outlived
    } else if last {
        let eoi = dfa.is_match_state(dfa.next_eoi_state(state));
        Alone::Settled(if eoi { Some(n) } else { matched })
    } else {
        Alone::Waits
    }
}

/// The candidate of rule `rule`'s evaluation at `origin`, whose match (if any) ends at
/// `last`.
fn emit(rule: &Compiled, origin: usize, last: Option<usize>, text: &mut Text<'_>) {
    let Some(end) = last else { return };
    if end <= origin || end - origin < rule.min_len {
        return;
    }
    let (t, e) = (origin - text.base, end - text.base);
    let (start, stop) = match rule.secret_group {
        None => (t, e),
        Some(group) => {
            let mut locs = rule.regex.capture_locations();
            match rule.regex.captures_read_at(&mut locs, &text.hay[..e], t) {
                Some(m) if m.start() == t => locs.get(group).unwrap_or((t, e)),
                _ => (t, e),
            }
        }
    };
    if stop > start {
        add(text.out, Candidate::new(start, stop, rule.id));
    }
}
