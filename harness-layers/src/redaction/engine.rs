//! The redactor: rules compiled once into automata, shared by every execution.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use aho_corasick::automaton::StateID;
use harness_core::error::HarnessError;
use regex::Regex;
use serde_json::{Map, Value};

use super::follow::{Ends, Follow};
use super::lanes::Lanes;
use super::literals::{Hit, Literals, Skips};
use super::lockstep::{Dfa, LazyDfa, Runs};
use super::rules::{
    BUILTINS, Charset, DEFAULT_FIELDS, FIELD_RULE, MIN_SECRET_LEN, PatternRule, RedactionError,
    SECRET_RULE, derived_token_chars, normalize_field,
};
use super::shape::{Quick, Shape, Tails};

/// Rule id of exact secrets in candidates; pattern rule `i` is `i + 1`.
const SECRET_ID: u32 = 0;

/// Up to this many bytes read again, a stream's open tail of the rules without prefixes is
/// searched again by their regex on each delta rather than fed to their DFA.
const SHORT_TAIL: usize = 32;

/// Up to this many new bytes, a stream counts the runs of the rules without prefixes before
/// it searches them (see [`Lanes`]).
const LANES_DELTA: usize = 64;

/// One redaction candidate: the rule `rule` redacts `start..end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) rule: u32,
    /// How far the interval [`plan`] puts it in reaches at least: its end, or the end of
    /// candidates folded into it (see [`add`]).
    reach: usize,
}

impl Candidate {
    pub(crate) fn new(start: usize, end: usize, rule: u32) -> Self {
        Self {
            start,
            end,
            rule,
            reach: end,
        }
    }

    /// The order [`plan`] merges candidates in: by start, the longest first, then by rule.
    /// The first of an interval names it.
    fn key(&self) -> (usize, Reverse<usize>, u32) {
        (self.start, Reverse(self.end), self.rule)
    }
}

/// Adds `c` to `out`, folding it into the last candidate added when they overlap: of two
/// overlapping candidates, the one [`plan`] merges second lands in the first one's interval
/// and never names it, so all it does is extend the interval, which the first one's
/// `reach` does as well. Dense triggers (`sk-sk-sk-...`, a match at each, all overlapping)
/// then make one candidate, not one each to sort and merge.
pub(crate) fn add(out: &mut Vec<Candidate>, c: Candidate) {
    if let Some(last) = out.last_mut() {
        if last.key() <= c.key() {
            if c.start < last.reach {
                last.reach = last.reach.max(c.reach);
                return;
            }
        } else if last.start < c.reach {
            let reach = c.reach.max(last.reach);
            *last = Candidate { reach, ..c };
            return;
        }
    }
    out.push(c);
}

/// What a scan of a growing text has found so far (see [`Redactor::scan`]).
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// Settled candidates not emitted yet.
    pub(crate) candidates: Vec<Candidate>,
    /// Rule evaluations `(position, rule)` whose window is not complete yet, of rules
    /// without a DFA ...
    open: Vec<(usize, u32)>,
    /// ... and the threads of those with one ...
    runs: Runs,
    /// ... and the class runs and open triggers of those of one shape.
    tails: Tails,
    /// The end of a redaction whose marker was emitted already: the text before it is
    /// dropped, and a candidate that starts before it extends it (see [`plan`]).
    swallow: Option<usize>,
    /// The text before this was fed to the literal automaton ...
    scanned: usize,
    /// ... which ended in this state (`None`: its start), and would next try to skip
    /// there.
    state: Option<StateID>,
    skips: Skips,
    /// Candidate starts of rules without prefixes before this were handled.
    anywhere: usize,
    /// Where their trailing runs of token characters start (see [`OpenFrom::min_from`]).
    trail: Trail,
    /// Their runs counted since `anywhere`, while none is long enough for a match (see
    /// [`Lanes`]); `None`: the next delta is searched.
    lanes: Option<u64>,
    /// How a stream follows the rules without prefixes between deltas.
    walk: Walk,
}

/// How a scan follows the rules without prefixes.
#[derive(Debug, Default)]
enum Walk {
    /// One whole text, which their regex searches once; or a stream without a DFA (see
    /// [`Anywhere::ends`]), whose open tail their regex searches again on each delta.
    #[default]
    Whole,
    /// A stream: their DFA's state.
    Dfa(Box<Follow>),
}

impl Scan {
    /// Forgets what was emitted before `cut` (a candidate that started before it is part
    /// of a redaction emitted already, whose end [`plan`] keeps), then moves every position
    /// `by` bytes to the left (the text before them was dropped).
    pub(crate) fn advance(&mut self, cut: usize, by: usize) {
        if !self.candidates.is_empty() {
            self.candidates.retain(|c| c.start >= cut);
        }
        // A stream drops what it emitted only now and then (see `DRAIN_AT`).
        if by == 0 {
            return;
        }
        for c in &mut self.candidates {
            c.start -= by;
            c.end -= by;
            c.reach -= by;
        }
        if let Some(end) = &mut self.swallow {
            *end -= by;
        }
        for (t, _) in &mut self.open {
            *t -= by;
        }
        self.scanned -= by;
        self.skips.advance(by);
        self.runs.advance(by);
        self.tails.advance(by);
        self.anywhere = self.anywhere.saturating_sub(by);
        self.trail.advance(by);
        match &mut self.walk {
            Walk::Whole => {}
            Walk::Dfa(follow) => follow.advance(by),
        }
    }

    /// Starts over, for a new text.
    pub(crate) fn clear(&mut self) {
        self.candidates.clear();
        self.open.clear();
        self.runs.clear();
        self.tails.clear();
        self.swallow = None;
        self.scanned = 0;
        self.state = None;
        self.skips = Skips::default();
        self.anywhere = 0;
        self.trail = Trail::default();
        self.lanes = None;
        match &mut self.walk {
            Walk::Whole => {}
            Walk::Dfa(follow) => follow.clear(),
        }
    }
}

/// A maximal run of overlapping candidates, replaced by one marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Interval {
    start: usize,
    end: usize,
    rule: u32,
}

/// A compiled pattern rule.
pub(crate) struct Compiled {
    /// Its id in candidates.
    pub(crate) id: u32,
    pub(crate) regex: Regex,
    pub(crate) min_len: usize,
    pub(crate) max_len: usize,
    pub(crate) token_chars: Option<Charset>,
    /// By byte: whether it is an ASCII token character (any ASCII byte without token
    /// characters), which ends no window before the cap: the fast paths of
    /// [`lockstep`](super::lockstep) test it with one load.
    pub(crate) plain: [bool; 256],
    pub(crate) secret_group: Option<usize>,
    /// Its anchored DFA, to follow its triggers in lockstep (see [`lockstep`](super::lockstep)).
    dfa: LazyDfa,
    /// Its shape, if it has the common one: evaluated without the DFA (see
    /// [`shape`](super::shape)).
    pub(crate) shape: Option<Shape>,
}

impl Compiled {
    /// Rule `rule` as candidates name it `id`, with `token_chars` (its declared ones, or
    /// derived), without a shape.
    pub(crate) fn new(
        id: u32,
        rule: &PatternRule,
        token_chars: Option<Charset>,
        dfa: LazyDfa,
    ) -> Self {
        Self {
            id,
            regex: rule.regex.clone(),
            min_len: rule.min_len,
            max_len: rule.max_len,
            token_chars,
            plain: std::array::from_fn(|b| {
                let b = u8::try_from(b).unwrap_or(u8::MAX);
                b.is_ascii() && token_chars.as_ref().is_none_or(|set| set.contains(b))
            }),
            secret_group: rule
                .regex
                .capture_names()
                .position(|name| name == Some("secret")),
            dfa,
            shape: None,
        }
    }

    /// The rule's DFA, built on first use; `None` if it has none (too large, or a Unicode
    /// `\b`): its triggers are then evaluated one by one with the regex.
    pub(crate) fn dfa(&self) -> Option<&Dfa> {
        self.dfa.get(self.regex.as_str())
    }
}

/// Rules without trigger prefixes, found through one alternation of them all.
struct Anywhere {
    regex: Regex,
    rules: Vec<u32>,
    /// For up to 64 such rules, the minimum of what [`Redactor::open_from`] computes for
    /// each, kept up to date by streams (`None` beyond 64 rules).
    open: Option<OpenFrom>,
    /// Where their matches end, fed byte by byte by streams (`None` if too large for a lazy
    /// DFA: streams then search with their regex on every delta, from the start of the
    /// open tail).
    ends: Option<Ends>,
    /// Their largest `max_len`: about what their regex reads again on each delta.
    reread: usize,
    /// For up to 8 such rules, all with token characters: the test that lets a stream
    /// settle a delta without searching it (`None` otherwise).
    lanes: Option<Lanes>,
}

/// What a stream knows of the trailing runs of the rules without prefixes (see
/// [`OpenFrom::min_from`]).
#[derive(Debug, Default)]
struct Trail {
    /// The bytes before this were seen.
    fed: usize,
    /// By rule: where its trailing run of token characters starts in what was seen (empty:
    /// nothing was seen).
    start: Vec<usize>,
}

impl Trail {
    fn advance(&mut self, by: usize) {
        self.fed = self.fed.saturating_sub(by);
        // A run that started in the dropped text now starts at 0: what `max_len` bounds
        // it by is past the drop (the drop is before the horizon), so nothing changes.
        for start in &mut self.start {
            *start = start.saturating_sub(by);
        }
    }
}

/// Where the rules without prefixes may still match differently once more text arrives:
/// the earliest start of their trailing runs of token characters, each run at most the
/// rule's `max_len` minus one bytes (a rule without token characters: exactly that), for
/// up to 64 rules.
struct OpenFrom {
    /// By byte: the rules (bit `k` for `rules[k]`) of which it is a token character.
    member: Box<[u64; 256]>,
    /// The rules with token characters.
    tokens: u64,
    /// By rule: its `max_len`.
    max_len: Vec<usize>,
}

impl OpenFrom {
    fn new(rules: &[&Compiled]) -> Option<Self> {
        if rules.len() > 64 {
            return None;
        }
        let mut member = Box::new([0u64; 256]);
        let mut tokens = 0u64;
        for (k, rule) in rules.iter().enumerate() {
            if let Some(set) = &rule.token_chars {
                tokens |= 1 << k;
                for (b, m) in (0..=255u8).zip(member.iter_mut()) {
                    if set.contains(b) {
                        *m |= 1 << k;
                    }
                }
            }
        }
        Some(Self {
            member,
            tokens,
            max_len: rules.iter().map(|r| r.max_len).collect(),
        })
    }

    /// The minimum over the rules of [`Redactor::open_from`] on `bytes`, reading only what
    /// `trail` has not seen: the bytes since the last call, back to where every rule's run of
    /// token characters is broken. A stream calls it on every delta: reading the whole open
    /// tail each time would read hostile text (a long run of token characters) up to the
    /// largest `max_len` times.
    fn min_from(&self, bytes: &[u8], trail: &mut Trail) -> usize {
        let n = bytes.len();
        if trail.start.len() != self.max_len.len() {
            trail.start = vec![0; self.max_len.len()];
            trail.fed = 0;
        }
        let mut alive = self.tokens;
        let mut p = n;
        while alive != 0 && p > trail.fed {
            let mut broken = alive & !self.member[usize::from(bytes[p - 1])];
            alive &= !broken;
            while broken != 0 {
                trail.start[broken.trailing_zeros() as usize] = p;
                broken &= broken - 1;
            }
            p -= 1;
        }
        trail.fed = n;
        let mut from = n;
        for (k, (&start, &len)) in trail.start.iter().zip(&self.max_len).enumerate() {
            let open = (n + 1).saturating_sub(len);
            from = from.min(if self.tokens >> k & 1 == 1 {
                start.max(open)
            } else {
                open
            });
        }
        from
    }
}

/// Redacts secrets from text, JSON values, errors and adapter events.
///
/// Immutable once built and meant to be shared (`Arc<Redactor>`): every execution's
/// [`StreamRedactor`](super::StreamRedactor) and the [`Redaction`](super::Redaction)
/// service use the same one. See the [module docs](super) for the rules, the marker
/// format and the cost of each rule kind.
///
/// ```
/// use harness_layers::redaction::Redactor;
/// use serde_json::json;
///
/// let redactor = Redactor::builder()
///     .secret("hunter2-db-password")
///     .pattern("acme_key", r"acme_[A-Za-z0-9]{24}")?
///     .field("db_dsn")
///     .build()?;
/// assert_eq!(
///     redactor.redact_str("pw hunter2-db-password, key acme_0123456789abcdefghijklmn."),
///     "pw [REDACTED:secret], key [REDACTED:acme_key]."
/// );
/// let mut value = json!({"dbDsn": "postgres://u:p@h/db", "note": "Bearer abcdefghijklmnop0123"});
/// redactor.redact_json(&mut value);
/// assert_eq!(value, json!({"dbDsn": "[REDACTED:field]", "note": "Bearer [REDACTED:bearer]"}));
/// # Ok::<(), harness_layers::redaction::RedactionError>(())
/// ```
pub struct Redactor {
    /// Exact secrets and trigger prefixes, found in one pass.
    literals: Option<Literals>,
    /// For each trigger literal, the rules it starts.
    rules_of: Vec<Vec<u32>>,
    rules: Vec<Compiled>,
    /// The rule of each branch slot of the shaped rules.
    rule_of_slot: Vec<u32>,
    names: Vec<String>,
    anywhere: Option<Anywhere>,
    fields: HashSet<String>,
    /// `[REDACTED:<rule>]` by rule id (0: secrets).
    markers: Vec<Box<str>>,
    field_marker: Box<str>,
    /// The longest text a stream may hold back.
    hold_back: usize,
    /// What it was built from, for [`with_secrets`](Redactor::with_secrets).
    recipe: Arc<Recipe>,
}

/// A [`RedactorBuilder`]'s inputs, kept by the [`Redactor`] it built.
struct Recipe {
    secrets: Vec<String>,
    rules: Vec<PatternRule>,
    fields: Vec<String>,
    builtins: bool,
    default_fields: bool,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field(
                "secrets",
                &self.literals.as_ref().map_or(0, Literals::secrets_len),
            )
            .field("rules", &self.names)
            .field("fields", &self.fields.len())
            .field("hold_back", &self.hold_back)
            .finish()
    }
}

/// Builds a [`Redactor`]; see [`Redactor::builder`].
#[must_use]
pub struct RedactorBuilder {
    secrets: Vec<String>,
    rules: Vec<PatternRule>,
    fields: Vec<String>,
    builtins: bool,
    default_fields: bool,
    /// Tests compare the lockstep DFAs with the regex evaluation they replace.
    #[cfg(test)]
    dfas: bool,
    /// Tests compare rules with derived token characters with the same rules without.
    #[cfg(test)]
    derive_tokens: bool,
}

impl fmt::Debug for RedactorBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the secrets themselves.
        f.debug_struct("RedactorBuilder")
            .field("secrets", &self.secrets.len())
            .field("rules", &self.rules)
            .field("fields", &self.fields)
            .field("builtins", &self.builtins)
            .field("default_fields", &self.default_fields)
            .finish()
    }
}

impl Default for RedactorBuilder {
    fn default() -> Self {
        Self {
            secrets: Vec::new(),
            rules: Vec::new(),
            fields: Vec::new(),
            builtins: true,
            default_fields: true,
            #[cfg(test)]
            dfas: true,
            #[cfg(test)]
            derive_tokens: true,
        }
    }
}

impl RedactorBuilder {
    /// Registers an exact secret value (a credential): every occurrence is redacted as
    /// `[REDACTED:secret]`, and so is every occurrence of its JSON-escaped forms (escaped
    /// once, as inside a JSON string, and twice, as inside JSON that is itself in a JSON
    /// string): a secret with a `"` or `\` in it stays caught when a tool argument carries
    /// it as encoded JSON.
    pub fn secret(mut self, value: impl Into<String>) -> Self {
        self.secrets.push(value.into());
        self
    }

    /// Registers several exact secret values.
    pub fn secrets<I, S>(mut self, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.secrets.extend(values.into_iter().map(Into::into));
        self
    }

    /// Adds a pattern rule `name` with the defaults of [`PatternRule::new`].
    ///
    /// # Errors
    /// As [`PatternRule::new`]: the error names the rule.
    pub fn pattern(self, name: impl Into<String>, pattern: &str) -> Result<Self, RedactionError> {
        Ok(self.rule(PatternRule::new(name, pattern)?))
    }

    /// Adds a configured pattern rule.
    pub fn rule(mut self, rule: PatternRule) -> Self {
        self.rules.push(rule);
        self
    }

    /// Adds a sensitive JSON field name (compared case-insensitively, ignoring characters
    /// other than letters and digits): its values are replaced wholesale.
    pub fn field(mut self, name: impl Into<String>) -> Self {
        self.fields.push(name.into());
        self
    }

    /// Leaves out the built-in pattern rules.
    pub fn without_builtin_patterns(mut self) -> Self {
        self.builtins = false;
        self
    }

    /// Leaves out the default sensitive field names ([`DEFAULT_FIELDS`](super::DEFAULT_FIELDS)).
    pub fn without_default_fields(mut self) -> Self {
        self.default_fields = false;
        self
    }

    /// Evaluates every trigger by regex search, as before the lockstep DFAs and the shapes:
    /// the reference the tests compare them with.
    #[cfg(test)]
    pub(crate) fn without_dfas(mut self) -> Self {
        self.dfas = false;
        self
    }

    /// Gives rules without declared token characters none (as before they were derived):
    /// the reference the tests compare derived ones with.
    #[cfg(test)]
    pub(crate) fn without_derived_token_chars(mut self) -> Self {
        self.derive_tokens = false;
        self
    }

    /// What makes a rule's DFA slot: empty, to build on first use (tests may rule DFAs
    /// out).
    fn lazy_dfa(&self) -> fn() -> LazyDfa {
        #[cfg(test)]
        if !self.dfas {
            return LazyDfa::none;
        }
        LazyDfa::default
    }

    /// Compiles the rules.
    ///
    /// # Errors
    /// A secret shorter than [`MIN_SECRET_LEN`](super::MIN_SECRET_LEN), two rules with one
    /// name, an empty trigger prefix, or automata over their size limits.
    pub fn build(self) -> Result<Redactor, RedactionError> {
        let recipe = Arc::new(Recipe {
            secrets: self.secrets.clone(),
            rules: self.rules.clone(),
            fields: self.fields.clone(),
            builtins: self.builtins,
            default_fields: self.default_fields,
        });
        let lazy_dfa = self.lazy_dfa();
        #[cfg(test)]
        let (shapes, derive_tokens) = (self.dfas, self.derive_tokens);
        #[cfg(not(test))]
        let (shapes, derive_tokens) = (true, true);
        let mut rule_of_slot = Vec::new();
        let mut rules = Vec::new();
        if self.builtins {
            for builtin in BUILTINS {
                rules.push(builtin.rule()?);
            }
        }
        rules.extend(self.rules);

        let mut seen = HashSet::new();
        for rule in &rules {
            if !seen.insert(rule.name.as_str()) {
                return Err(RedactionError::DuplicateRule {
                    rule: rule.name.clone(),
                });
            }
        }

        let mut secrets: Vec<Vec<u8>> = Vec::new();
        let mut unique = HashSet::new();
        for (index, secret) in self.secrets.into_iter().enumerate() {
            if secret.len() < MIN_SECRET_LEN {
                return Err(RedactionError::SecretTooShort { index });
            }
            // A secret inside a JSON-encoded string (a tool argument holding JSON, JSON in
            // JSON) appears escaped once or twice: those forms are secrets too.
            let once = json_escaped(&secret);
            let twice = json_escaped(&once);
            for form in [secret, once, twice] {
                if unique.insert(form.clone()) {
                    secrets.push(form.into_bytes());
                }
            }
        }

        let mut compiled = Vec::with_capacity(rules.len());
        let mut names = Vec::with_capacity(rules.len());
        let mut trigger_lits: Vec<Vec<u8>> = Vec::new();
        let mut rules_of: Vec<Vec<u32>> = Vec::new();
        let mut anywhere_rules = Vec::new();
        let mut anywhere_src = Vec::new();
        let mut hold_back = secrets.iter().map(Vec::len).max().unwrap_or(0);
        for (i, rule) in rules.iter().enumerate() {
            let id = u32::try_from(i + 1).map_err(|_| RedactionError::Build {
                message: "too many rules".to_owned(),
            })?;
            let triggers = rule.triggers()?;
            if triggers.is_empty() {
                anywhere_rules.push(id);
                anywhere_src.push(format!("(?:{})", rule.regex.as_str()));
            }
            for trigger in triggers {
                let folded = trigger.to_ascii_lowercase().into_bytes();
                hold_back = hold_back.max(folded.len());
                match trigger_lits.iter().position(|t| *t == folded) {
                    Some(at) => rules_of[at].push(id),
                    None => {
                        trigger_lits.push(folded);
                        rules_of.push(vec![id]);
                    }
                }
            }
            hold_back = hold_back.max(rule.max_len);
            // Not declared: the characters the pattern can match, if all are ASCII. A
            // window then ends where no match can go on, as with declared ones, so what is
            // found is the same; streams settle it sooner (see `PatternRule::token_chars`).
            let token_chars = rule
                .token_chars
                .or_else(|| derive_tokens.then(|| derived_token_chars(rule.regex.as_str()))?);
            let mut rule_compiled = Compiled::new(id, rule, token_chars, lazy_dfa());
            if shapes {
                let first = rule_of_slot.len();
                let mut slots = first;
                rule_compiled.shape = Shape::of(&rule_compiled, &mut slots);
                rule_of_slot.resize(slots, id);
            }
            compiled.push(rule_compiled);
            names.push(rule.name.clone());
        }
        let literals = Literals::new(secrets, &trigger_lits)?;
        let anywhere = if anywhere_rules.is_empty() {
            None
        } else {
            let regex = Regex::new(&anywhere_src.join("|")).map_err(|e| RedactionError::Build {
                message: format!("the combined regex of rules without prefixes: {e}"),
            })?;
            let of_rules = anywhere_rules
                .iter()
                .map(|&id| &compiled[id as usize - 1])
                .collect::<Vec<_>>();
            let open = OpenFrom::new(&of_rules);
            let lanes = Lanes::new(&of_rules);
            // The open tail (a rule's last `max_len` bytes, or its trailing run of token
            // characters, which hostile text makes as long) would be read again by the
            // regex on every delta: a DFA reads each byte once.
            let reread = anywhere_rules
                .iter()
                .map(|&id| compiled[id as usize - 1].max_len)
                .max()
                .unwrap_or(0);
            let ends = Ends::new(&anywhere_src);
            Some(Anywhere {
                regex,
                rules: anywhere_rules,
                open,
                ends,
                reread,
                lanes,
            })
        };

        let mut fields: HashSet<String> = HashSet::new();
        if self.default_fields {
            fields.extend(DEFAULT_FIELDS.iter().map(|f| normalize_field(f)));
        }
        fields.extend(self.fields.iter().map(|f| normalize_field(f)));
        fields.remove("");

        let mut markers = vec![marker(SECRET_RULE)];
        markers.extend(names.iter().map(|n| marker(n)));
        Ok(Redactor {
            literals,
            rules_of,
            rules: compiled,
            rule_of_slot,
            names,
            anywhere,
            fields,
            markers,
            field_marker: marker(FIELD_RULE),
            hold_back,
            recipe,
        })
    }
}

/// `s` as it appears between the quotes of a JSON string.
fn json_escaped(s: &str) -> String {
    let quoted = serde_json::to_string(s).unwrap_or_default();
    quoted
        .strip_prefix('"')
        .and_then(|q| q.strip_suffix('"'))
        .unwrap_or(s)
        .to_owned()
}

fn marker(rule: &str) -> Box<str> {
    format!("[REDACTED:{rule}]").into_boxed_str()
}

/// The largest char boundary at or before `i`.
fn floor(hay: &str, i: usize) -> usize {
    let mut i = i.min(hay.len());
    while !hay.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The length of the UTF-8 sequence a lead byte starts.
pub(crate) fn utf8_len(lead: u8) -> usize {
    match lead {
        0x00..=0x7f => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        _ => 4,
    }
}

impl Redactor {
    /// A builder with the built-in pattern rules and the default field names; add secrets,
    /// rules and fields, then [`build`](RedactorBuilder::build).
    pub fn builder() -> RedactorBuilder {
        RedactorBuilder::default()
    }

    /// This redactor's rules, fields and secrets, and `extra` secrets besides: what the
    /// redaction layer redacts an execution with when its caller supplied credentials
    /// ([`CallerCredentials`](harness_core::tool::CallerCredentials)), which must not leave in
    /// any form the redactor catches (escaped in JSON, split across deltas) whatever a tool
    /// echoes.
    ///
    /// ```
    /// use harness_layers::redaction::Redactor;
    ///
    /// let base = Redactor::builder().secret("hunter2-db-password").build()?;
    /// let both = base.with_secrets(["ghp_callers_own_token"])?;
    /// assert_eq!(
    ///     both.redact_str("hunter2-db-password ghp_callers_own_token"),
    ///     "[REDACTED:secret] [REDACTED:secret]"
    /// );
    /// // The base redactor is unchanged.
    /// assert_eq!(base.redact_str("ghp_callers_own_token"), "ghp_callers_own_token");
    /// # Ok::<(), harness_layers::redaction::RedactionError>(())
    /// ```
    ///
    /// # Errors
    /// As [`RedactorBuilder::build`]: an extra secret shorter than
    /// [`MIN_SECRET_LEN`](super::MIN_SECRET_LEN) (the error gives its index among all the
    /// secrets, never its value).
    pub fn with_secrets<I, S>(&self, extra: I) -> Result<Redactor, RedactionError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let recipe = &*self.recipe;
        // Field by field: test builds have fields of their own, left at their defaults.
        let mut builder = RedactorBuilder::default();
        builder.secrets.clone_from(&recipe.secrets);
        builder.secrets.extend(extra.into_iter().map(Into::into));
        builder.rules.clone_from(&recipe.rules);
        builder.fields.clone_from(&recipe.fields);
        builder.builtins = recipe.builtins;
        builder.default_fields = recipe.default_fields;
        builder.build()
    }

    /// The names of the pattern rules, in priority order.
    #[must_use]
    pub fn rule_names(&self) -> &[String] {
        &self.names
    }

    /// The longest secret, trigger prefix or rule `max_len`, in bytes: a
    /// [`StreamRedactor`](super::StreamRedactor) holds back at most this per stream (a
    /// redaction that straddles the horizon, even a run of overlapping matches as long as
    /// the text, has its marker emitted and the rest of it dropped as it arrives).
    #[must_use]
    pub fn max_hold_back(&self) -> usize {
        self.hold_back
    }

    /// Whether `name` is a sensitive JSON field name.
    #[must_use]
    pub fn is_sensitive_field(&self, name: &str) -> bool {
        !self.fields.is_empty() && self.fields.contains(&normalize_field(name))
    }

    /// Redacts `text`: every exact secret and every pattern match is replaced by
    /// `[REDACTED:<rule>]`; overlapping matches become one marker (named after the one that
    /// starts first, then the longest, then the earlier rule). Borrowed when nothing
    /// matched.
    ///
    /// Cost: one Aho-Corasick pass for the secrets and the rules' trigger prefixes
    /// (linear in the text), plus the triggered rules' anchored DFAs, run in lockstep (one
    /// transition per byte and live state, however dense the triggers; see the
    /// [module docs](super)); rules without prefixes add one pass of their combined regex
    /// and a bounded search where it matches.
    #[must_use]
    pub fn redact_str<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut scan = Scan::default();
        let end = self.scan(text, 0, true, &mut scan);
        if scan.candidates.is_empty() {
            return Cow::Borrowed(text);
        }
        let mut intervals = Vec::new();
        let cut = plan(&mut scan, end, &mut intervals);
        let mut out = String::with_capacity(text.len());
        self.render(text, 0, cut, &intervals, &mut out);
        Cow::Owned(out)
    }

    /// Redacts a span field or log value for the tracing layer: the same as
    /// [`redact_str`](Self::redact_str).
    #[must_use]
    pub fn redact_span_field<'a>(&self, value: &'a str) -> Cow<'a, str> {
        self.redact_str(value)
    }

    /// Redacts a JSON value in place: the values of sensitive fields are replaced wholesale
    /// by `"[REDACTED:field]"` (unless `null`), and every other string (object keys
    /// included) goes through [`redact_str`](Self::redact_str). Returns whether anything
    /// changed.
    pub fn redact_json(&self, value: &mut Value) -> bool {
        match value {
            Value::String(s) => match self.redact_str(s) {
                Cow::Borrowed(_) => false,
                Cow::Owned(r) => {
                    *s = r;
                    true
                }
            },
            Value::Array(items) => {
                let mut changed = false;
                for item in items {
                    changed |= self.redact_json(item);
                }
                changed
            }
            Value::Object(map) => self.redact_object(map),
            Value::Null | Value::Bool(_) | Value::Number(_) => false,
        }
    }

    fn redact_object(&self, map: &mut Map<String, Value>) -> bool {
        let mut changed = false;
        let mut renamed = Vec::new();
        for (key, item) in map.iter_mut() {
            if self.is_sensitive_field(key) {
                if !item.is_null() && item.as_str() != Some(&*self.field_marker) {
                    *item = Value::String(self.field_marker.to_string());
                    tally(Tally::FIELD);
                    changed = true;
                }
            } else {
                changed |= self.redact_json(item);
            }
            if let Cow::Owned(k) = self.redact_str(key) {
                renamed.push((key.clone(), k));
            }
        }
        for (old, mut new) in renamed {
            if let Some(item) = map.remove(&old) {
                let base = new.clone();
                let mut n = 2;
                while map.contains_key(&new) {
                    new = format!("{base}#{n}");
                    n += 1;
                }
                map.insert(new, item);
                changed = true;
            }
        }
        changed
    }

    /// Redacts every string of an error: its message and diagnostic (secrets replaced by
    /// markers), its provider code (dropped if it holds one) and its code (the category's
    /// generic code instead, if it holds one), keeping the category, retry advice and
    /// side-effect mark. Returns the error unchanged when nothing matched.
    #[must_use]
    pub fn redact_error(&self, error: HarnessError) -> HarnessError {
        let message = self.redact_str(error.message());
        let diagnostic = error.diagnostic().map(|d| self.redact_str(d));
        let provider_leaks = error
            .provider_code()
            .is_some_and(|p| matches!(self.redact_str(p), Cow::Owned(_)));
        // A code is SCREAMING_SNAKE, which an AWS key id (`AKIA...`) is too: a code that
        // holds a secret becomes the category's generic code (a marker is no code).
        let code_leaks = matches!(self.redact_str(error.code().as_str()), Cow::Owned(_));
        let changed = matches!(message, Cow::Owned(_))
            || matches!(diagnostic, Some(Cow::Owned(_)))
            || provider_leaks
            || code_leaks;
        if !changed {
            return error;
        }
        let code = if code_leaks {
            error.category().default_code()
        } else {
            error.code().clone()
        };
        let mut out = HarnessError::new(error.category(), message.into_owned())
            .with_code(code)
            .with_retryable(error.retryable())
            .with_side_effects(error.side_effects_may_have_occurred());
        if let Some(after) = error.retry_after() {
            out = out.with_retry_after(after);
        }
        if let (Some(code), false) = (error.provider_code(), provider_leaks) {
            out = out.with_provider_code(code);
        }
        if let Some(diagnostic) = diagnostic {
            out = out.with_diagnostic(diagnostic.into_owned());
        }
        out
    }

    /// Continues `scan` over `hay`, whose `hay[..from]` is context (what precedes, for
    /// `\b`): adds the candidates evaluated at `from..` that `scan` does not hold yet, and
    /// returns the horizon: every candidate at a position before it is settled, i.e. the
    /// same whatever text may follow `hay`. With `last`, `hay` is the whole rest of the
    /// text and the horizon is its length.
    ///
    /// A stream calls it again after appending text: occurrences and candidate starts seen
    /// before are not evaluated again, only windows that were still open.
    pub(crate) fn scan(&self, hay: &str, from: usize, last: bool, scan: &mut Scan) -> usize {
        let n = hay.len();
        let bytes = hay.as_bytes();
        let mut horizon = n;
        if from >= n {
            scan.scanned = n;
            scan.lanes = None;
            return n;
        }
        // Windows that were still open: shaped rules' first, handing back those open
        // otherwise, which the next pass evaluates.
        let mut open = std::mem::take(&mut scan.open);
        if scan.tails.is_holding() {
            scan.tails.settle(
                &self.rules,
                &self.rule_of_slot,
                bytes,
                last,
                &mut scan.candidates,
                &mut open,
            );
        }
        if !open.is_empty() {
            open.retain(|&(t, rule)| {
                let settled = self.eval(rule, hay, t, last, &mut scan.candidates);
                if !settled {
                    horizon = horizon.min(t);
                }
                !settled
            });
        }
        if let Some(literals) = &self.literals {
            // Each byte is fed once: the walk resumes where the last one ended.
            let out = &mut scan.candidates;
            let runs = &mut scan.runs;
            let tails = &mut scan.tails;
            let sid = scan.state.unwrap_or_else(|| literals.start());
            let sid = literals.walk(
                bytes,
                scan.scanned.max(from),
                sid,
                &mut scan.skips,
                |start, end, hit| match hit {
                    Hit::Secret => out.push(Candidate::new(start, end, SECRET_ID)),
                    Hit::Trigger(trigger) => {
                        for &rule in &self.rules_of[trigger] {
                            let compiled = &self.rules[rule as usize - 1];
                            if let Some(shape) = &compiled.shape {
                                if !last && tails.defer(shape, start) {
                                    continue;
                                }
                                match shape.eval(compiled, bytes, start, last, tails) {
                                    Quick::Settled(c) => c.into_iter().for_each(|c| add(out, c)),
                                    Quick::Open(slot) if tails.hold(slot, start) => {}
                                    Quick::Open(_) | Quick::Unknown => {
                                        horizon = horizon.min(start);
                                        open.push((start, rule));
                                    }
                                }
                                continue;
                            }
                            let followed = compiled.dfa().is_some_and(|dfa| {
                                runs.add(rule, compiled, dfa, hay, start, last, out)
                            });
                            if !followed && !self.eval(rule, hay, start, last, out) {
                                horizon = horizon.min(start);
                                open.push((start, rule));
                            }
                        }
                    }
                },
            );
            scan.state = Some(sid);
            scan.runs
                .finish(&self.rules, hay, last, &mut scan.candidates);
            if let Some(open) = scan.runs.horizon() {
                horizon = horizon.min(open);
            }
            if let Some(open) = scan.tails.horizon() {
                horizon = horizon.min(open);
            }
            if !last {
                // An occurrence not complete yet starts in the last `hold` bytes.
                let hold = usize::try_from(literals.hold(sid)).unwrap_or(usize::MAX);
                horizon = horizon.min(n.saturating_sub(hold));
            }
        }
        scan.open = open;
        if let Some(anywhere) = &self.anywhere {
            let fed = scan.scanned.max(from);
            // Usually no run in a short delta is long enough for a match: then what their
            // DFA would search is settled (see `Lanes`). A longer delta usually has one.
            // Otherwise no match starts before `run`, where the run that is starts.
            let mut run = 0;
            // Where they may still match differently, if counted.
            let counted = match (&anywhere.lanes, &mut scan.lanes) {
                (Some(lanes), Some(counters)) if !last && n - fed <= LANES_DELTA => {
                    match lanes.feed(counters, &bytes[fed..]) {
                        Ok(()) => Some(lanes.open_from(*counters, n)),
                        Err(back) => {
                            run = n.saturating_sub(back);
                            None
                        }
                    }
                }
                _ => None,
            };
            if let Some(settled_before) = counted {
                let settled_before = settled_before.max(from);
                // The DFA's walk skipped these bytes: it starts again when next fed.
                if let Walk::Dfa(follow) = &mut scan.walk {
                    follow.clear();
                }
                scan.anywhere = scan.anywhere.max(settled_before);
                horizon = horizon.min(settled_before);
            } else {
                if !last
                    && matches!(scan.walk, Walk::Whole)
                    && let Some(ends) = &anywhere.ends
                {
                    scan.walk = Walk::Dfa(Box::new(ends.follow()));
                }
                let settled_before = if last {
                    n
                } else if let Some(open) = &anywhere.open {
                    open.min_from(bytes, &mut scan.trail)
                } else {
                    anywhere
                        .rules
                        .iter()
                        .map(|&r| self.open_from(r, bytes))
                        .min()
                        .unwrap_or(n)
                }
                .max(from);
                let mut pos = scan.anywhere.max(from);
                pos = pos.max(run);
                // A stream feeds each new byte once to the DFA it keeps between deltas, unless
                // the delta is longer than what a search would read again, or what it would
                // read again is short (usually the end of the last word: a search reads a byte
                // for half of what the DFA's walk costs). Then a search reads it, and the walk
                // starts again from `pos` when that grows long: it must see every match that
                // starts there or later, not the earlier ones.
                // The stream's DFA, and whether it was fed (or is left to search).
                let dfa = match (&mut scan.walk, &anywhere.ends) {
                    (Walk::Dfa(follow), Some(ends)) => {
                        let feeds =
                            n - fed <= anywhere.reread && fed.saturating_sub(pos) > SHORT_TAIL;
                        if feeds {
                            follow.feed(ends, bytes, fed, pos);
                        } else {
                            follow.clear();
                        }
                        Some((follow, ends, feeds))
                    }
                    _ => None,
                };
                // Usually nothing matches. The walk says so unless a match ends at `pos` or
                // later (so may start there); otherwise a search that stops at the first
                // match's end (and does not look for its start) says so for less: the DFA's
                // own search when a stream has it (its cache is the stream's, no pool to take
                // one from), else the regex's.
                if pos < settled_before {
                    let may_match = match dfa {
                        Some((follow, ends, true)) => follow.ends_from(ends, pos),
                        Some((follow, ends, false)) => follow
                            .search_from(ends, bytes, pos)
                            .unwrap_or_else(|| anywhere.regex.is_match_at(hay, pos)),
                        None => anywhere.regex.is_match_at(hay, pos),
                    };
                    if !may_match {
                        pos = settled_before;
                    }
                }
                while pos < settled_before {
                    let Some(m) = anywhere.regex.find_at(hay, pos) else {
                        break;
                    };
                    let t = m.start();
                    if t >= settled_before {
                        break;
                    }
                    for &rule in &anywhere.rules {
                        // Settled: `t` is before every such rule's open tail.
                        self.eval(rule, hay, t, last, &mut scan.candidates);
                    }
                    pos = t + utf8_len(bytes[t]);
                }
                scan.anywhere = pos.max(settled_before);
                horizon = horizon.min(settled_before);
                if !last && let Some(lanes) = &anywhere.lanes {
                    scan.lanes = lanes.recount(bytes, scan.anywhere, &scan.trail.start);
                }
            }
        }
        scan.scanned = n;
        floor(hay, horizon.max(from))
    }

    /// The first position from which rule `id` (a rule without prefixes) may still match
    /// differently once more text arrives.
    fn open_from(&self, id: u32, bytes: &[u8]) -> usize {
        let rule = &self.rules[id as usize - 1];
        let n = bytes.len();
        let base = (n + 1).saturating_sub(rule.max_len);
        match &rule.token_chars {
            None => base,
            Some(set) => {
                let mut p = n;
                while p > base && set.contains(bytes[p - 1]) {
                    p -= 1;
                }
                p
            }
        }
    }

    /// The end of rule `id`'s window at `t`: `max_len` bytes, or up to and including the
    /// first character that is not a token character. `None` while more text could change
    /// it.
    fn window(&self, id: u32, hay: &str, t: usize, last: bool) -> Option<usize> {
        let rule = &self.rules[id as usize - 1];
        let n = hay.len();
        let cap = t.saturating_add(rule.max_len);
        let limit = cap.min(n);
        if let Some(set) = &rule.token_chars {
            let bytes = hay.as_bytes();
            if let Some(i) = bytes[t..limit].iter().position(|&b| !set.contains(b)) {
                let stop = t + i;
                return Some((stop + utf8_len(bytes[stop])).min(floor(hay, limit)));
            }
        }
        if cap <= n {
            Some(floor(hay, cap))
        } else if last {
            Some(n)
        } else {
            None
        }
    }

    /// Evaluates rule `id` at `t` on its window; `false` when the window is not settled.
    fn eval(&self, id: u32, hay: &str, t: usize, last: bool, out: &mut Vec<Candidate>) -> bool {
        let Some(end) = self.window(id, hay, t, last) else {
            return false;
        };
        let rule = &self.rules[id as usize - 1];
        if end - t < rule.min_len {
            return true;
        }
        let window = &hay[..end];
        match rule.secret_group {
            None => {
                if let Some(m) = rule.regex.find_at(window, t)
                    && m.start() == t
                    && m.end() - t >= rule.min_len
                {
                    add(out, Candidate::new(t, m.end(), id));
                }
            }
            Some(group) => {
                let mut locs = rule.regex.capture_locations();
                if let Some(m) = rule.regex.captures_read_at(&mut locs, window, t)
                    && m.start() == t
                    && m.end() - t >= rule.min_len
                {
                    let (start, end) = locs.get(group).unwrap_or((m.start(), m.end()));
                    if end > start {
                        add(out, Candidate::new(start, end, id));
                    }
                }
            }
        }
        true
    }

    /// Writes `hay[from..cut]` to `out` with `intervals` replaced by their markers.
    pub(crate) fn render(
        &self,
        hay: &str,
        from: usize,
        cut: usize,
        intervals: &[Interval],
        out: &mut String,
    ) {
        let mut pos = from;
        for iv in intervals {
            if iv.start > pos {
                out.push_str(&hay[pos..iv.start]);
            }
            if iv.rule != SWALLOWED {
                // Marker 0 is the exact-secret rule's; the others are patterns.
                tally(if iv.rule == 0 {
                    Tally::SECRET
                } else {
                    Tally::PATTERN
                });
                out.push_str(&self.markers[iv.rule as usize]);
            }
            pos = pos.max(iv.end);
        }
        if pos < cut {
            out.push_str(&hay[pos..cut]);
        }
    }

    /// How many rules have the shape [`shape`](super::shape) evaluates.
    #[cfg(test)]
    pub(crate) fn shaped_rules(&self) -> usize {
        self.rules.iter().filter(|r| r.shape.is_some()).count()
    }

    /// How many rules have no trigger prefix (found through their combined regex).
    #[cfg(test)]
    pub(crate) fn rules_without_prefixes(&self) -> usize {
        self.anywhere.as_ref().map_or(0, |a| a.rules.len())
    }

    /// Whether the redactor has any text rule (secrets or patterns).
    pub(crate) fn has_text_rules(&self) -> bool {
        self.literals.as_ref().is_some_and(|l| l.secrets_len() > 0) || !self.rules.is_empty()
    }
}

/// How many values were redacted on this thread since the last [`take_tally`], by rule kind
/// (indexes [`Tally::SECRET`], [`Tally::PATTERN`], [`Tally::FIELD`]).
///
/// Redaction runs synchronously, so a per-execution interceptor that takes the tally before
/// and after handling an item gets exactly that item's counts, without the engine's
/// signatures carrying a counter.
pub(crate) struct Tally;

impl Tally {
    pub(crate) const SECRET: usize = 0;
    pub(crate) const PATTERN: usize = 1;
    pub(crate) const FIELD: usize = 2;
}

thread_local! {
    static TALLY: std::cell::Cell<[u64; 3]> = const { std::cell::Cell::new([0; 3]) };
}

fn tally(kind: usize) {
    TALLY.with(|t| {
        let mut counts = t.get();
        counts[kind] = counts[kind].saturating_add(1);
        t.set(counts);
    });
}

/// Takes (and resets) this thread's tally.
pub(crate) fn take_tally() -> [u64; 3] {
    TALLY.with(|t| t.replace([0; 3]))
}

/// The rule of the interval that continues a redaction emitted before (no marker).
const SWALLOWED: u32 = u32::MAX;

/// Merges the scan's candidates into marker intervals and cuts at `horizon`: fills
/// `intervals` with those that start before it, and returns it.
///
/// Every candidate that starts before the horizon is known (a candidate starts where its
/// rule was evaluated or later), so the start and the rule of an interval that starts before
/// it are settled and its marker is emitted now, even if the interval goes on past the cut:
/// the scan then swallows the text up to its end, which a later candidate starting before
/// that end extends, as it would have extended the interval. So a stream emits one marker
/// for a run of overlapping matches, as [`Redactor::redact_str`] does, without holding the
/// run back (it may be as long as the text).
#[inline]
pub(crate) fn plan(scan: &mut Scan, horizon: usize, intervals: &mut Vec<Interval>) -> usize {
    intervals.clear();
    // Usually nothing was found: checked inline, without a call.
    if scan.candidates.is_empty() && scan.swallow.is_none() {
        return horizon;
    }
    plan_candidates(scan, horizon, intervals)
}

fn plan_candidates(scan: &mut Scan, horizon: usize, intervals: &mut Vec<Interval>) -> usize {
    if let Some(end) = scan.swallow.take() {
        intervals.push(Interval {
            start: 0,
            end,
            rule: SWALLOWED,
        });
    }
    let candidates = &mut scan.candidates;
    candidates.sort_unstable_by_key(Candidate::key);
    for c in candidates.iter() {
        match intervals.last_mut() {
            Some(last) if c.start < last.end => last.end = last.end.max(c.reach),
            _ => intervals.push(Interval {
                start: c.start,
                end: c.reach,
                rule: c.rule,
            }),
        }
    }
    let cut = horizon;
    intervals.retain(|iv| iv.start < cut);
    if let Some(last) = intervals.last()
        && last.end > cut
    {
        scan.swallow = Some(last.end);
    }
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_merges_overlaps_and_keeps_adjacent_apart() {
        let candidates = vec![
            Candidate::new(0, 4, 2),
            Candidate::new(2, 6, 1),
            Candidate::new(6, 8, 3),
        ];
        let mut scan = Scan {
            candidates: candidates.clone(),
            ..Scan::default()
        };
        let mut iv = Vec::new();
        assert_eq!(plan(&mut scan, 10, &mut iv), 10);
        assert_eq!(
            iv,
            [
                Interval {
                    start: 0,
                    end: 6,
                    rule: 2
                },
                Interval {
                    start: 6,
                    end: 8,
                    rule: 3
                }
            ]
        );
        assert_eq!(scan.swallow, None);

        // A horizon inside an interval emits its marker and swallows the rest of it; a
        // candidate that starts before its end, found later, extends it.
        let mut scan = Scan {
            candidates,
            scanned: 10,
            ..Scan::default()
        };
        assert_eq!(plan(&mut scan, 7, &mut iv), 7);
        assert_eq!(iv.len(), 2);
        assert_eq!(scan.swallow, Some(8));
        scan.advance(7, 5);
        assert!(scan.candidates.is_empty());
        assert_eq!(scan.swallow, Some(3));
        scan.candidates.push(Candidate::new(2, 9, 1));
        assert_eq!(plan(&mut scan, 12, &mut iv), 12);
        assert_eq!(
            iv,
            [Interval {
                start: 0,
                end: 9,
                rule: SWALLOWED
            }]
        );
        let redactor = Redactor::builder().build().unwrap();
        let mut out = String::new();
        redactor.render("0123456789abcdef", 2, 12, &iv, &mut out);
        assert_eq!(out, "9ab");
    }

    proptest::proptest! {
        /// Folding overlapping candidates as they are added changes no interval, however
        /// they come: in any order, nested, sharing starts and ends, of any rules; and cut
        /// at any horizon, with what follows planned after the cut.
        #[test]
        fn folded_candidates_plan_as_the_unfolded_ones(
            spans in proptest::collection::vec((0usize..40, 1usize..12, 1u32..4), 0..24),
            cut in 0usize..60,
        ) {
            let all: Vec<Candidate> = spans
                .iter()
                .map(|&(start, len, rule)| Candidate::new(start, start + len, rule))
                .collect();
            let mut folded = Vec::new();
            for &c in &all {
                add(&mut folded, c);
            }
            let plan_of = |candidates: Vec<Candidate>| {
                let mut scan = Scan { candidates, scanned: 60, ..Scan::default() };
                let mut first = Vec::new();
                let cut = plan(&mut scan, cut, &mut first);
                scan.advance(cut, cut);
                let mut rest = Vec::new();
                plan(&mut scan, 60 - cut, &mut rest);
                (first, rest)
            };
            proptest::prop_assert_eq!(plan_of(folded), plan_of(all));
        }

        /// The bound of the rules without prefixes, kept up to date across pieces of text
        /// (and drops of what was emitted), is the minimum of each rule's on the text so far.
        #[test]
        fn open_from_kept_up_to_date_is_each_rules_minimum(
            text in "[a-f0-9A-Z .:/@-]{0,80}",
            untokened in proptest::bool::ANY,
            cuts in proptest::collection::vec(0usize..80, 0..6),
            drop in proptest::bool::ANY,
        ) {
            let mut builder = Redactor::builder()
                .without_builtin_patterns()
                .rule(
                    PatternRule::new("hex", r"(?-u:\b)[0-9a-f]{12}")
                        .unwrap()
                        .max_len(16)
                        .token_chars("0-9a-f")
                        .unwrap(),
                )
                .rule(
                    PatternRule::new("dsn", r"(?:mongodb|postgres)://[^ ]+@")
                        .unwrap()
                        .max_len(40)
                        .token_chars("A-Za-z0-9.:/@-")
                        .unwrap(),
                );
            if untokened {
                builder = builder.rule(
                    PatternRule::new("ssn", r"[0-9]{3}-[0-9]{2}-[0-9]{4}")
                        .unwrap()
                        .max_len(24),
                );
            }
            let redactor = builder.build().unwrap();
            let anywhere = redactor.anywhere.as_ref().unwrap();
            let bytes = text.as_bytes();
            let open = anywhere.open.as_ref().unwrap();
            let each = |bytes: &[u8]| {
                anywhere
                    .rules
                    .iter()
                    .map(|&r| redactor.open_from(r, bytes))
                    .min()
                    .unwrap()
            };
            proptest::prop_assert_eq!(open.min_from(bytes, &mut Trail::default()), each(bytes));

            // Fed piece by piece, as a stream does, dropping emitted text on the way (never
            // past what is settled): the same.
            let mut cuts = cuts;
            cuts.push(bytes.len());
            cuts.sort_unstable();
            let (mut trail, mut base) = (Trail::default(), 0);
            for (i, cut) in cuts.into_iter().enumerate() {
                let cut = cut.min(bytes.len()).max(base);
                let fed = open.min_from(&bytes[base..cut], &mut trail);
                proptest::prop_assert_eq!(fed, each(&bytes[base..cut]), "at {}", cut);
                if drop && i % 2 == 1 {
                    let by = fed / 2;
                    trail.advance(by);
                    base += by;
                }
            }
        }
    }
}
