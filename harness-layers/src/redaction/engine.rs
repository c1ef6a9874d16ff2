//! The redactor: rules compiled once into automata, shared by every execution.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::HashSet;
use std::fmt;

use aho_corasick::{AhoCorasick, AhoCorasickKind, Input, MatchKind};
use harness_core::error::HarnessError;
use regex::Regex;
use serde_json::{Map, Value};

use super::rules::{
    BUILTINS, Charset, DEFAULT_FIELDS, FIELD_RULE, MIN_SECRET_LEN, PatternRule, RedactionError,
    SECRET_RULE, normalize_field,
};

/// Up to this many bytes of literals, the Aho-Corasick automaton is a DFA (about 4 MiB for
/// 8 KiB of random literals); beyond, a contiguous NFA (a few times slower, far smaller).
const DFA_LITERAL_BYTES: usize = 8 * 1024;

/// Rule id of exact secrets in candidates; pattern rule `i` is `i + 1`.
const SECRET_ID: u32 = 0;

/// One redaction candidate: the rule `rule` evaluated at `at` redacts `start..end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub(crate) at: usize,
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) rule: u32,
}

/// What a scan of a growing text has found so far (see [`Redactor::scan`]).
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// Settled candidates not emitted yet.
    pub(crate) candidates: Vec<Candidate>,
    /// Rule evaluations `(position, rule)` whose window is not complete yet.
    open: Vec<(usize, u32)>,
    /// Literal occurrences ending at or before this were handled.
    scanned: usize,
    /// Where the text scanned so far ended inside a secret or a trigger prefix (see
    /// [`Literals::cut_off`]): a new occurrence cannot start before.
    secret_tail: usize,
    trigger_tail: usize,
    /// Candidate starts of rules without prefixes before this were handled.
    anywhere: usize,
}

impl Scan {
    /// Forgets what was emitted before `cut` (every candidate evaluated before the cut ends
    /// by it, see [`plan`]), then moves every position `by` bytes to the left (the text
    /// before them was dropped).
    pub(crate) fn advance(&mut self, cut: usize, by: usize) {
        self.candidates.retain(|c| c.at >= cut);
        for c in &mut self.candidates {
            c.at -= by;
            c.start -= by;
            c.end -= by;
        }
        for (t, _) in &mut self.open {
            *t -= by;
        }
        self.scanned -= by;
        self.secret_tail = self.secret_tail.saturating_sub(by);
        self.trigger_tail = self.trigger_tail.saturating_sub(by);
        self.anywhere = self.anywhere.saturating_sub(by);
    }

    /// Starts over, for a new text.
    pub(crate) fn clear(&mut self) {
        self.candidates.clear();
        self.open.clear();
        self.scanned = 0;
        self.secret_tail = 0;
        self.trigger_tail = 0;
        self.anywhere = 0;
    }
}

/// A maximal run of overlapping candidates, replaced by one marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Interval {
    start: usize,
    end: usize,
    rule: u32,
}

/// Literals searched with Aho-Corasick, plus an index by first byte to find a literal that
/// is cut by the end of the text (what a stream must hold back).
struct Literals {
    ac: AhoCorasick,
    max_len: usize,
    by_first: Vec<Vec<Box<[u8]>>>,
    /// The (folded) first two bytes of the literals, as a 64 Ki-bit set: a quick "no".
    starts: Vec<u64>,
    /// Whether some literal longer than one byte starts with this (folded) byte.
    longer: Vec<bool>,
    fold: bool,
}

impl Literals {
    fn new(literals: &[Vec<u8>], fold: bool) -> Result<Self, RedactionError> {
        // A DFA is the fastest automaton; its memory grows with the literals' total length,
        // so only below a bound (the default choice stops at 100 literals).
        let total: usize = literals.iter().map(Vec::len).sum();
        let kind = (total <= DFA_LITERAL_BYTES).then_some(AhoCorasickKind::DFA);
        let ac = AhoCorasick::builder()
            .match_kind(MatchKind::Standard)
            .ascii_case_insensitive(fold)
            .kind(kind)
            .build(literals)
            .map_err(|e| RedactionError::Build {
                message: e.to_string(),
            })?;
        let mut by_first: Vec<Vec<Box<[u8]>>> = vec![Vec::new(); 256];
        for lit in literals {
            let lit: Box<[u8]> = if fold {
                lit.to_ascii_lowercase().into()
            } else {
                lit.clone().into()
            };
            if let Some(&first) = lit.first() {
                by_first[usize::from(first)].push(lit);
            }
        }
        let mut starts = vec![0u64; 1024];
        let mut longer = vec![false; 256];
        for group in &mut by_first {
            group.sort_unstable();
            group.dedup();
            for lit in group.iter() {
                if let [a, b, ..] = **lit {
                    let bit = usize::from(a) << 8 | usize::from(b);
                    starts[bit / 64] |= 1 << (bit % 64);
                    longer[usize::from(a)] = true;
                }
            }
        }
        Ok(Self {
            ac,
            max_len: literals.iter().map(Vec::len).max().unwrap_or(0),
            by_first,
            starts,
            longer,
            fold,
        })
    }

    /// Calls `hit(start, end, pattern)` for every occurrence starting at or after `from`.
    /// Fails closed: should the search ever refuse, `from..` is one hit of pattern `None`.
    fn each(&self, hay: &str, from: usize, mut hit: impl FnMut(usize, usize, Option<usize>)) {
        let input = Input::new(hay).span(from..hay.len());
        match self.ac.try_find_overlapping_iter(input) {
            Ok(iter) => {
                for m in iter {
                    hit(m.start(), m.end(), Some(m.pattern().as_usize()));
                }
            }
            Err(_) => hit(from, hay.len(), None),
        }
    }

    /// The first position at or after `from` where the text ends inside a literal (a
    /// proper prefix of one starts there), or the text's length.
    ///
    /// A position that was not such a start for a shorter text is not one for a longer
    /// text either, so a caller that already checked the text up to some length passes the
    /// result of that check as `from`.
    fn cut_off(&self, bytes: &[u8], from: usize) -> usize {
        let n = bytes.len();
        let lo = from.max((n + 1).saturating_sub(self.max_len));
        let fold = |b: u8| if self.fold { b.to_ascii_lowercase() } else { b };
        for t in lo..n {
            let key = fold(bytes[t]);
            let tail = &bytes[t..];
            if !self.longer[usize::from(key)] {
                continue;
            }
            if tail.len() == 1 {
                return t;
            }
            let bit = usize::from(key) << 8 | usize::from(fold(tail[1]));
            if self.starts[bit / 64] & (1 << (bit % 64)) == 0 {
                continue;
            }
            let group = &self.by_first[usize::from(key)];
            // The literals starting with `tail` follow the first one not below it.
            let at = group.partition_point(|lit| self.compare(lit, tail).is_lt());
            for lit in group.iter().skip(at).take(2) {
                if lit.len() > tail.len() && self.compare(&lit[..tail.len()], tail).is_eq() {
                    return t;
                }
            }
        }
        n
    }

    /// Orders a (folded) literal against text, folding the text's ASCII case if `fold`.
    fn compare(&self, lit: &[u8], text: &[u8]) -> std::cmp::Ordering {
        if self.fold {
            lit.iter()
                .copied()
                .cmp(text.iter().map(u8::to_ascii_lowercase))
        } else {
            lit.cmp(text)
        }
    }
}

/// A compiled pattern rule.
struct Compiled {
    regex: Regex,
    min_len: usize,
    max_len: usize,
    token_chars: Option<Charset>,
    secret_group: Option<usize>,
}

/// Rules without trigger prefixes, found through one alternation of them all.
struct Anywhere {
    regex: Regex,
    rules: Vec<u32>,
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
    secrets: Option<Literals>,
    triggers: Option<Literals>,
    /// For each trigger literal, the rules it starts.
    rules_of: Vec<Vec<u32>>,
    rules: Vec<Compiled>,
    names: Vec<String>,
    anywhere: Option<Anywhere>,
    fields: HashSet<String>,
    /// `[REDACTED:<rule>]` by rule id (0: secrets).
    markers: Vec<Box<str>>,
    field_marker: Box<str>,
    /// The longest text a stream may hold back.
    hold_back: usize,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field(
                "secrets",
                &self.secrets.as_ref().map_or(0, |s| s.ac.patterns_len()),
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
        }
    }
}

impl RedactorBuilder {
    /// Registers an exact secret value (a credential): every occurrence is redacted as
    /// `[REDACTED:secret]`.
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

    /// Compiles the rules.
    ///
    /// # Errors
    /// A secret shorter than [`MIN_SECRET_LEN`](super::MIN_SECRET_LEN), two rules with one
    /// name, an empty trigger prefix, or automata over their size limits.
    pub fn build(self) -> Result<Redactor, RedactionError> {
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
            if unique.insert(secret.clone()) {
                secrets.push(secret.into_bytes());
            }
        }
        let secrets = if secrets.is_empty() {
            None
        } else {
            Some(Literals::new(&secrets, false)?)
        };

        let mut compiled = Vec::with_capacity(rules.len());
        let mut names = Vec::with_capacity(rules.len());
        let mut trigger_lits: Vec<Vec<u8>> = Vec::new();
        let mut rules_of: Vec<Vec<u32>> = Vec::new();
        let mut anywhere_rules = Vec::new();
        let mut anywhere_src = Vec::new();
        let mut hold_back = secrets.as_ref().map_or(0, |s| s.max_len);
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
            let secret_group = rule
                .regex
                .capture_names()
                .position(|name| name == Some("secret"));
            compiled.push(Compiled {
                regex: rule.regex.clone(),
                min_len: rule.min_len,
                max_len: rule.max_len,
                token_chars: rule.token_chars,
                secret_group,
            });
            names.push(rule.name.clone());
        }
        let triggers = if trigger_lits.is_empty() {
            None
        } else {
            Some(Literals::new(&trigger_lits, true)?)
        };
        let anywhere = if anywhere_rules.is_empty() {
            None
        } else {
            let regex = Regex::new(&anywhere_src.join("|")).map_err(|e| RedactionError::Build {
                message: format!("the combined regex of rules without prefixes: {e}"),
            })?;
            Some(Anywhere {
                regex,
                rules: anywhere_rules,
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
            secrets,
            triggers,
            rules_of,
            rules: compiled,
            names,
            anywhere,
            fields,
            markers,
            field_marker: marker(FIELD_RULE),
            hold_back,
        })
    }
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
fn utf8_len(lead: u8) -> usize {
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

    /// The names of the pattern rules, in priority order.
    #[must_use]
    pub fn rule_names(&self) -> &[String] {
        &self.names
    }

    /// The longest secret, trigger prefix or rule `max_len`, in bytes. A
    /// [`StreamRedactor`](super::StreamRedactor) holds back less than twice this per
    /// stream (a redaction that straddles the horizon is held from its start), except in a
    /// run of overlapping matches, which is held whole until it ends (it becomes one
    /// marker).
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
    /// Cost: one Aho-Corasick pass for the secrets and one for the rules' trigger prefixes
    /// (linear in the text), plus, at each trigger hit, one regex search bounded by the
    /// rule's window (`max_len`, or shorter with token characters); rules without prefixes
    /// add one pass of their combined regex and a bounded search where it matches.
    #[must_use]
    pub fn redact_str<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut scan = Scan::default();
        let end = self.scan(text, 0, true, &mut scan);
        if scan.candidates.is_empty() {
            return Cow::Borrowed(text);
        }
        let mut intervals = Vec::new();
        let cut = plan(&mut scan.candidates, end, &mut intervals);
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

    /// Redacts an error's message, diagnostic and provider code, keeping its category,
    /// code, retry advice and side-effect mark. Returns the error unchanged when nothing
    /// matched.
    #[must_use]
    pub fn redact_error(&self, error: HarnessError) -> HarnessError {
        let message = self.redact_str(error.message());
        let diagnostic = error.diagnostic().map(|d| self.redact_str(d));
        let provider_leaks = error
            .provider_code()
            .is_some_and(|p| matches!(self.redact_str(p), Cow::Owned(_)));
        let changed = matches!(message, Cow::Owned(_))
            || matches!(diagnostic, Some(Cow::Owned(_)))
            || provider_leaks;
        if !changed {
            return error;
        }
        let mut out = HarnessError::new(error.category(), message.into_owned())
            .with_code(error.code().clone())
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
        let seen = scan.scanned.max(from);
        let mut horizon = n;
        if from >= n {
            scan.scanned = n;
            return n;
        }
        if let Some(secrets) = &self.secrets {
            // An occurrence ending after `seen` that started before it began where the text
            // then ended inside a secret.
            let lo = from.max(scan.secret_tail.min(seen));
            let out = &mut scan.candidates;
            secrets.each(hay, lo, |start, end, _| {
                if end > seen {
                    out.push(Candidate {
                        at: start,
                        start,
                        end,
                        rule: SECRET_ID,
                    });
                }
            });
            scan.secret_tail = secrets.cut_off(bytes, from.max(scan.secret_tail.min(seen)));
            if !last {
                horizon = horizon.min(scan.secret_tail);
            }
        }
        // Windows that were still open.
        let mut open = std::mem::take(&mut scan.open);
        open.retain(|&(t, rule)| {
            let settled = self.eval(rule, hay, t, last, &mut scan.candidates);
            if !settled {
                horizon = horizon.min(t);
            }
            !settled
        });
        if let Some(triggers) = &self.triggers {
            let lo = from.max(scan.trigger_tail.min(seen));
            let out = &mut scan.candidates;
            triggers.each(hay, lo, |start, end, pattern| {
                if end <= seen {
                    return;
                }
                let Some(pattern) = pattern else {
                    out.push(Candidate {
                        at: start,
                        start,
                        end,
                        rule: SECRET_ID,
                    });
                    return;
                };
                for &rule in &self.rules_of[pattern] {
                    if !self.eval(rule, hay, start, last, out) {
                        horizon = horizon.min(start);
                        open.push((start, rule));
                    }
                }
            });
            scan.trigger_tail = triggers.cut_off(bytes, from.max(scan.trigger_tail.min(seen)));
            if !last {
                horizon = horizon.min(scan.trigger_tail);
            }
        }
        scan.open = open;
        if let Some(anywhere) = &self.anywhere {
            let settled_before = if last {
                n
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
                    && m.end() > t
                {
                    out.push(Candidate {
                        at: t,
                        start: t,
                        end: m.end(),
                        rule: id,
                    });
                }
            }
            Some(group) => {
                let mut locs = rule.regex.capture_locations();
                if let Some(m) = rule.regex.captures_read_at(&mut locs, window, t)
                    && m.start() == t
                {
                    let (start, end) = locs.get(group).unwrap_or((m.start(), m.end()));
                    if end > start {
                        out.push(Candidate {
                            at: t,
                            start,
                            end,
                            rule: id,
                        });
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
            // Marker 0 is the exact-secret rule's; the others are patterns.
            tally(if iv.rule == 0 {
                Tally::SECRET
            } else {
                Tally::PATTERN
            });
            out.push_str(&hay[pos..iv.start]);
            out.push_str(&self.markers[iv.rule as usize]);
            pos = iv.end;
        }
        out.push_str(&hay[pos..cut]);
    }

    /// Whether the redactor has any text rule (secrets or patterns).
    pub(crate) fn has_text_rules(&self) -> bool {
        self.secrets.is_some() || !self.rules.is_empty()
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

/// Merges `candidates` into marker intervals and chooses where to cut: at most `horizon`,
/// never inside an interval, and never between a candidate's evaluation position and its
/// end (so a candidate is emitted whole now, or evaluated again from the cut). Fills
/// `intervals` with those before the cut; returns the cut.
pub(crate) fn plan(
    candidates: &mut [Candidate],
    horizon: usize,
    intervals: &mut Vec<Interval>,
) -> usize {
    intervals.clear();
    candidates.sort_unstable_by_key(|c| (c.start, Reverse(c.end), c.rule));
    for c in candidates.iter() {
        match intervals.last_mut() {
            Some(last) if c.start < last.end => last.end = last.end.max(c.end),
            _ => intervals.push(Interval {
                start: c.start,
                end: c.end,
                rule: c.rule,
            }),
        }
    }
    let mut cut = horizon;
    loop {
        let before = cut;
        for iv in intervals.iter() {
            if iv.start < cut && cut < iv.end {
                cut = iv.start;
            }
        }
        for c in candidates.iter() {
            if c.at < cut && cut < c.end {
                cut = c.at;
            }
        }
        if cut == before {
            break;
        }
    }
    intervals.retain(|iv| iv.end <= cut);
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_merges_overlaps_and_keeps_adjacent_apart() {
        let mut c = vec![
            Candidate {
                at: 0,
                start: 0,
                end: 4,
                rule: 2,
            },
            Candidate {
                at: 2,
                start: 2,
                end: 6,
                rule: 1,
            },
            Candidate {
                at: 6,
                start: 6,
                end: 8,
                rule: 3,
            },
        ];
        let mut iv = Vec::new();
        assert_eq!(plan(&mut c, 10, &mut iv), 10);
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
        // A horizon inside an interval cuts before it.
        assert_eq!(plan(&mut c, 7, &mut iv), 6);
        assert_eq!(iv.len(), 1);
    }

    #[test]
    fn cut_off_finds_a_literal_cut_by_the_end() {
        let lits = Literals::new(&[b"secret-value".to_vec()], false).unwrap();
        assert_eq!(lits.cut_off(b"my secret-va", 0), 3);
        assert_eq!(lits.cut_off(b"my secret-value", 0), 15);
        let folded = Literals::new(&[b"bearer".to_vec()], true).unwrap();
        assert_eq!(folded.cut_off(b"x BEAR", 0), 2);
    }
}
