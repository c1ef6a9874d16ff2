//! Redaction rules: pattern rules, their bounds (max length, trigger prefixes, token
//! characters), the built-in rules and the default sensitive field names.

use std::fmt;

use regex::{Regex, RegexBuilder};
use regex_syntax::hir::{Class, Hir, HirKind};

/// The marker rule name of exact (registered) secrets: `[REDACTED:secret]`.
pub const SECRET_RULE: &str = "secret";

/// The marker rule name of sensitive JSON fields: `[REDACTED:field]`.
pub const FIELD_RULE: &str = "field";

/// The longest match of a pattern rule that declares no
/// [`max_len`](PatternRule::max_len): 256 bytes.
pub const DEFAULT_MAX_LEN: usize = 256;

/// The largest `max_len` a rule may declare (64 KiB): it bounds the text a stream holds back.
pub const MAX_RULE_LEN: usize = 64 * 1024;

/// The shortest exact secret accepted (4 bytes): a shorter one would redact ordinary text.
pub const MIN_SECRET_LEN: usize = 4;

/// The default sensitive JSON field names. Names are compared case-insensitively and
/// ignoring every character that is not a letter or a digit, so `api_key`, `apiKey`,
/// `API-KEY` and `x-api-key`'s `xapikey` are distinct entries but `api_key` == `ApiKey`.
pub const DEFAULT_FIELDS: &[&str] = &[
    "password",
    "passwd",
    "secret",
    "token",
    "api_key",
    "x_api_key",
    "authorization",
    "proxy_authorization",
    "access_token",
    "refresh_token",
    "id_token",
    "session_token",
    "auth_token",
    "private_key",
    "client_secret",
    "secret_key",
    "secret_access_key",
    "cookie",
    "set_cookie",
    "credentials",
];

/// Why a redactor could not be built. Messages name the rule; they never echo a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RedactionError {
    /// A rule name is not 1 to 64 characters of `[A-Za-z0-9_.-]`.
    InvalidName {
        /// The refused name (truncated).
        name: String,
    },
    /// Two rules share a name.
    DuplicateRule {
        /// The name.
        rule: String,
    },
    /// A rule's regular expression does not compile.
    InvalidPattern {
        /// The rule.
        rule: String,
        /// What the regex compiler said.
        message: String,
    },
    /// A rule's regular expression matches the empty string, so it would redact nothing
    /// while matching everywhere.
    MatchesEmpty {
        /// The rule.
        rule: String,
    },
    /// A rule's token characters could not be parsed.
    InvalidTokenChars {
        /// The rule.
        rule: String,
        /// What is wrong.
        message: String,
    },
    /// A rule declares an empty trigger prefix.
    EmptyPrefix {
        /// The rule.
        rule: String,
    },
    /// An exact secret is shorter than [`MIN_SECRET_LEN`] bytes.
    SecretTooShort {
        /// The position of the secret among those registered (from 0).
        index: usize,
    },
    /// The automata could not be built (a size limit).
    Build {
        /// What failed.
        message: String,
    },
}

impl fmt::Display for RedactionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidName { name } => write!(
                f,
                "invalid redaction rule name `{name}`: expected 1 to 64 characters of [A-Za-z0-9_.-]"
            ),
            Self::DuplicateRule { rule } => {
                write!(f, "redaction rule `{rule}` is declared more than once")
            }
            Self::InvalidPattern { rule, message } => {
                write!(f, "redaction rule `{rule}`: invalid pattern: {message}")
            }
            Self::MatchesEmpty { rule } => write!(
                f,
                "redaction rule `{rule}`: the pattern matches the empty string; it must match at least one character"
            ),
            Self::InvalidTokenChars { rule, message } => {
                write!(
                    f,
                    "redaction rule `{rule}`: invalid token characters: {message}"
                )
            }
            Self::EmptyPrefix { rule } => {
                write!(
                    f,
                    "redaction rule `{rule}`: a trigger prefix may not be empty"
                )
            }
            Self::SecretTooShort { index } => write!(
                f,
                "secret #{index} is shorter than {MIN_SECRET_LEN} bytes; it would redact ordinary text"
            ),
            Self::Build { message } => write!(f, "could not build the redactor: {message}"),
        }
    }
}

impl std::error::Error for RedactionError {}

/// A set of characters: the ASCII characters a rule's match may contain.
///
/// Non-ASCII characters are never members.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Charset {
    ascii: [bool; 128],
}

impl Charset {
    /// Parses `A-Za-z0-9_.-`-style specifications: single characters, ranges `a-z`, `\s` for
    /// ASCII whitespace, `\-` and `\\` for a literal dash and backslash; a dash first or last
    /// is literal.
    pub(crate) fn parse(spec: &str) -> Result<Self, String> {
        let mut ascii = [false; 128];
        let chars: Vec<char> = spec.chars().collect();
        if chars.is_empty() {
            return Err("the set is empty".to_owned());
        }
        let mut i = 0;
        let mut prev: Option<char> = None;
        while i < chars.len() {
            let c = chars[i];
            if !c.is_ascii() {
                return Err(format!(
                    "`{c}` is not ASCII; only ASCII characters may be listed"
                ));
            }
            if c == '\\' {
                let Some(&next) = chars.get(i + 1) else {
                    return Err("a trailing `\\` escapes nothing".to_owned());
                };
                match next {
                    's' => {
                        for b in [b' ', b'\t', b'\n', b'\r', 0x0b, 0x0c] {
                            ascii[usize::from(b)] = true;
                        }
                        prev = None;
                    }
                    '-' | '\\' => {
                        ascii[next as usize] = true;
                        prev = Some(next);
                    }
                    other => return Err(format!("unknown escape `\\{other}`")),
                }
                i += 2;
                continue;
            }
            if c == '-'
                && let (Some(lo), Some(&hi)) = (prev, chars.get(i + 1))
            {
                if !hi.is_ascii() || hi == '\\' {
                    return Err(format!("invalid range end `{hi}`"));
                }
                if hi < lo {
                    return Err(format!("range `{lo}-{hi}` is reversed"));
                }
                for b in (lo as u8)..=(hi as u8) {
                    ascii[usize::from(b)] = true;
                }
                prev = None;
                i += 2;
                continue;
            }
            ascii[c as usize] = true;
            prev = Some(c);
            i += 1;
        }
        Ok(Self { ascii })
    }

    /// Whether the byte is an ASCII member (non-ASCII bytes never are).
    #[inline]
    pub(crate) fn contains(&self, b: u8) -> bool {
        self.ascii.get(usize::from(b)).copied().unwrap_or(false)
    }
}

impl fmt::Debug for Charset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let members: String = (0u8..128)
            .filter(|&b| self.ascii[usize::from(b)])
            .map(char::from)
            .collect();
        f.debug_tuple("Charset").field(&members).finish()
    }
}

/// One pattern rule: a regular expression whose matches are replaced by
/// `[REDACTED:<name>]`.
///
/// Four declarations bound what the rule costs and how long a stream must hold text back
/// (see the [module docs](super) for why they are needed):
///
/// - [`max_len`](Self::max_len): the longest match, in bytes (default [`DEFAULT_MAX_LEN`]).
///   The rule is evaluated on a window of that many bytes from each candidate start, so a
///   longer match is cut there: its first `max_len` bytes are redacted, the rest is not
///   recognised. Streams hold back up to this much text after a possible start.
/// - [`prefixes`](Self::prefixes): literal prefixes every match starts with (compared
///   ASCII-case-insensitively). The rule is then evaluated only where one occurs, which is
///   what makes 100 rules cheap. When none is declared, they are derived from the pattern's
///   syntax tree: the literals every match starts with (`acme_[a-z]+`: `acme_`;
///   `(?:mongodb|postgres)://…`: both schemes; a leading `\b` or `^` is passed over), if
///   each is at least 3 bytes long and there are at most 8 once ASCII case is folded.
///   Otherwise (a class or an optional part first, say) the rule is evaluated wherever a
///   combined regex of such rules matches.
/// - [`token_chars`](Self::token_chars): the only characters a match may contain. A stream
///   then knows a candidate is settled as soon as another character follows, instead of
///   waiting for `max_len` bytes. When none are declared and every character the pattern
///   can match is ASCII, they are those characters (read from its syntax tree: `[0-9]{4}`
///   gives `0-9`): what is redacted is the same (no match goes past a character it cannot
///   contain), only settled sooner. A pattern that can match a non-ASCII character (`.`,
///   `\d`, `[^ ]`) gets none.
/// - [`min_len`](Self::min_len): the shortest match; a shorter match is not a redaction, and
///   a shorter window (a prefix hit in an ordinary word, with token characters) is dismissed
///   at once.
///
/// If the pattern has a capture group named `secret`, only that group is replaced (the
/// `bearer` rule keeps `Bearer ` visible).
///
/// A rule without prefixes is found through a combined regex run over the whole text, then
/// evaluated on its window; a match that reaches exactly `max_len` bytes *and* ends with an
/// end-of-text or word-boundary assertion may be missed (or, by a stream whose text ends
/// there for now, found where [`Redactor::redact_str`](super::Redactor::redact_str) finds
/// none), so declare a `max_len` above the longest match of such a rule.
///
/// ```
/// use harness_layers::redaction::PatternRule;
/// let rule = PatternRule::new("acme_key", r"acme_[A-Za-z0-9]{32}")?
///     .max_len(64)
///     .token_chars("A-Za-z0-9_")?;
/// assert_eq!(rule.name(), "acme_key");
/// let err = PatternRule::new("broken", "acme_[").unwrap_err();
/// assert!(err.to_string().starts_with("redaction rule `broken`: invalid pattern"), "{err}");
/// # Ok::<(), harness_layers::redaction::RedactionError>(())
/// ```
#[derive(Clone)]
pub struct PatternRule {
    pub(crate) name: String,
    pub(crate) regex: Regex,
    pub(crate) min_len: usize,
    pub(crate) max_len: usize,
    pub(crate) prefixes: Option<Vec<String>>,
    pub(crate) token_chars: Option<Charset>,
}

impl fmt::Debug for PatternRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PatternRule")
            .field("name", &self.name)
            .field("pattern", &self.regex.as_str())
            .field("min_len", &self.min_len)
            .field("max_len", &self.max_len)
            .field("prefixes", &self.prefixes)
            .field("token_chars", &self.token_chars)
            .finish()
    }
}

impl PatternRule {
    /// A rule `name` for `pattern`, in the `regex` crate's syntax. This crate asks `regex`
    /// for Unicode classes only (`unicode-perl`), not Unicode case folding: write
    /// `(?i-u)` for ASCII case-insensitive parts, as the built-in rules do.
    ///
    /// # Errors
    /// An invalid name, a pattern that does not compile or that matches the empty string;
    /// the error names the rule.
    pub fn new(name: impl Into<String>, pattern: &str) -> Result<Self, RedactionError> {
        let name = name.into();
        check_name(&name)?;
        let regex =
            RegexBuilder::new(pattern)
                .build()
                .map_err(|e| RedactionError::InvalidPattern {
                    rule: name.clone(),
                    message: e.to_string(),
                })?;
        if regex.is_match("") {
            return Err(RedactionError::MatchesEmpty { rule: name });
        }
        Ok(Self {
            name,
            regex,
            min_len: 1,
            max_len: DEFAULT_MAX_LEN,
            prefixes: None,
            token_chars: None,
        })
    }

    /// The rule's name, as it appears in markers.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Declares the shortest match, in bytes: a shorter match is not a redaction, and a
    /// window shorter than that is not searched (a cheap way to dismiss the many prefix
    /// hits that are ordinary words).
    #[must_use]
    pub fn min_len(mut self, bytes: usize) -> Self {
        self.min_len = bytes.max(1);
        self
    }

    /// Declares the longest match, in bytes (clamped to 1..=[`MAX_RULE_LEN`]).
    #[must_use]
    pub fn max_len(mut self, bytes: usize) -> Self {
        self.max_len = bytes.clamp(1, MAX_RULE_LEN);
        self
    }

    /// Declares the literal prefixes every match starts with (compared
    /// ASCII-case-insensitively). An empty list declares that matches may start anywhere.
    #[must_use]
    pub fn prefixes<I, P>(mut self, prefixes: I) -> Self
    where
        I: IntoIterator<Item = P>,
        P: Into<String>,
    {
        self.prefixes = Some(prefixes.into_iter().map(Into::into).collect());
        self
    }

    /// Declares the only (ASCII) characters a match may contain, as `A-Za-z0-9_.-`-style
    /// ranges (`\s` for ASCII whitespace, a dash first or last is literal). Without this,
    /// they are derived from the pattern when it can match ASCII characters only. A
    /// declared set narrower than the pattern cuts matches at the first other character.
    ///
    /// # Errors
    /// A specification that does not parse.
    pub fn token_chars(mut self, spec: &str) -> Result<Self, RedactionError> {
        let set = Charset::parse(spec).map_err(|message| RedactionError::InvalidTokenChars {
            rule: self.name.clone(),
            message,
        })?;
        self.token_chars = Some(set);
        Ok(self)
    }

    /// The trigger prefixes: declared, or derived from the pattern; empty for a rule that
    /// may start anywhere.
    pub(crate) fn triggers(&self) -> Result<Vec<String>, RedactionError> {
        match &self.prefixes {
            Some(list) => {
                if list.iter().any(String::is_empty) {
                    return Err(RedactionError::EmptyPrefix {
                        rule: self.name.clone(),
                    });
                }
                Ok(list.clone())
            }
            None => Ok(derived_prefixes(self.regex.as_str())),
        }
    }
}

fn check_name(name: &str) -> Result<(), RedactionError> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(RedactionError::InvalidName {
            name: name.chars().take(80).collect(),
        })
    }
}

/// A derived prefix is at least this long: a shorter one fires on ordinary words.
const MIN_DERIVED_LEN: usize = 3;

/// At most this many prefixes are derived (after folding ASCII case and dropping those
/// that extend another): more alternatives are left to the combined regex.
pub(crate) const MAX_DERIVED: usize = 8;

/// The literal prefixes every match of `pattern` starts with, read from its syntax tree
/// (look-arounds match the empty string there, so `\bword` starts with `word`): each at
/// least [`MIN_DERIVED_LEN`] bytes, ASCII case folded (triggers are compared so), none an
/// extension of another, at most [`MAX_DERIVED`]; empty if the pattern's matches may
/// start otherwise (a class of more than a few characters, a repetition that may be
/// absent, an alternative too short), or if it does not parse here.
pub(crate) fn derived_prefixes(pattern: &str) -> Vec<String> {
    use regex_syntax::hir::literal::{ExtractKind, Extractor};

    let Ok(hir) = regex_syntax::parse(pattern) else {
        return Vec::new();
    };
    let seq = Extractor::new()
        .kind(ExtractKind::Prefix)
        // A class of up to that many characters is one literal each (`xox[abprs]-`).
        .limit_class(MAX_DERIVED)
        .limit_total(4 * MAX_DERIVED)
        .extract(&hir);
    // Infinite: some match starts with no literal in particular.
    let Some(literals) = seq.literals() else {
        return Vec::new();
    };
    let mut folded = Vec::with_capacity(literals.len());
    for literal in literals {
        match std::str::from_utf8(literal.as_bytes()) {
            Ok(text) if text.len() >= MIN_DERIVED_LEN => folded.push(text.to_ascii_lowercase()),
            // One alternative too short (or cut inside a character) leaves every start
            // possible.
            _ => return Vec::new(),
        }
    }
    // Sorted, an extension follows what it extends (and whatever lies between extends
    // it too): a hit of the shorter one covers it.
    folded.sort_unstable();
    folded.dedup();
    let mut prefixes: Vec<String> = Vec::with_capacity(folded.len());
    for text in folded {
        if !prefixes
            .last()
            .is_some_and(|p| text.starts_with(p.as_str()))
        {
            prefixes.push(text);
        }
    }
    if prefixes.len() > MAX_DERIVED {
        return Vec::new();
    }
    prefixes
}

/// The characters a match of `pattern` can contain, read from its syntax tree, as token
/// characters; `None` if one may be non-ASCII (a [`Charset`] holds ASCII only), or if the
/// pattern does not parse here. Look-arounds match no character: `(?-u:\b)[0-9]{3}` gives
/// `0-9`.
pub(crate) fn derived_token_chars(pattern: &str) -> Option<Charset> {
    fn add(hir: &Hir, ascii: &mut [bool; 128]) -> Option<()> {
        let mut range = |lo: u32, hi: u32| -> Option<()> {
            if hi > 0x7f {
                return None;
            }
            for c in lo..=hi {
                ascii[usize::try_from(c).ok()?] = true;
            }
            Some(())
        };
        match hir.kind() {
            HirKind::Empty | HirKind::Look(_) => {}
            HirKind::Literal(lit) => {
                for &b in lit.0.iter() {
                    range(u32::from(b), u32::from(b))?;
                }
            }
            HirKind::Class(Class::Unicode(class)) => {
                for r in class.ranges() {
                    range(u32::from(r.start()), u32::from(r.end()))?;
                }
            }
            HirKind::Class(Class::Bytes(class)) => {
                for r in class.ranges() {
                    range(u32::from(r.start()), u32::from(r.end()))?;
                }
            }
            HirKind::Repetition(rep) => add(&rep.sub, ascii)?,
            HirKind::Capture(cap) => add(&cap.sub, ascii)?,
            HirKind::Concat(items) | HirKind::Alternation(items) => {
                for item in items {
                    add(item, ascii)?;
                }
            }
        }
        Some(())
    }

    let hir = regex_syntax::parse(pattern).ok()?;
    let mut ascii = [false; 128];
    add(&hir, &mut ascii)?;
    Some(Charset { ascii })
}

/// One built-in rule's definition.
pub(crate) struct Builtin {
    pub(crate) name: &'static str,
    pub(crate) pattern: &'static str,
    pub(crate) prefixes: &'static [&'static str],
    pub(crate) token_chars: &'static str,
    pub(crate) min_len: usize,
    pub(crate) max_len: usize,
}

/// The built-in pattern rules, in priority order (a tie between two rules at the same span
/// names the earlier one).
///
/// | rule | shape | max length |
/// |---|---|---|
/// | `private_key` | `-----BEGIN … PRIVATE KEY-----` … `-----END … PRIVATE KEY-----` | 8 KiB |
/// | `jwt` | `eyJ….eyJ….sig` | 8 KiB |
/// | `bearer` | `Bearer <token>` (the token only) | 8 KiB |
/// | `anthropic_key` | `sk-ant-…` | 256 |
/// | `openai_key` | `sk-…` (20+ characters) | 256 |
/// | `github_token` | `ghp_`/`gho_`/`ghu_`/`ghs_`/`ghr_…`, `github_pat_…` | 256 |
/// | `slack_token` | `xoxa-`/`xoxb-`/`xoxp-`/`xoxr-`/`xoxs-…` | 256 |
/// | `aws_access_key` | `AKIA`/`ASIA` + 16 | 32 |
/// | `google_api_key` | `AIza` + 35 | 64 |
pub(crate) const BUILTINS: &[Builtin] = &[
    Builtin {
        name: "private_key",
        // An unterminated block (or one longer than the window) is redacted from its header
        // to the end of the window.
        // The header's label is up to four words (`RSA`, `OPENSSH`, `ENCRYPTED`, `PGP`),
        // not `[A-Z0-9 ]{0,40}`: that overlaps `PRIVATE KEY` in so many ways that its DFA
        // is 20 times larger. The block ends at the first `-----END...-----` (its window
        // holds only token characters anyway).
        pattern: r"-----BEGIN (?:[A-Z0-9]{1,16} ){0,4}PRIVATE KEY(?: BLOCK)?-----(?:[A-Za-z0-9+/=\s:,-]*?-----END[A-Z0-9 ]*-----|[A-Za-z0-9+/=\s:,-]*)",
        prefixes: &["-----BEGIN"],
        token_chars: r"A-Za-z0-9+/=:,\s-",
        min_len: 26,
        max_len: 8 * 1024,
    },
    Builtin {
        name: "jwt",
        pattern: r"(?-u:\b)eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*",
        prefixes: &["eyJ"],
        token_chars: "A-Za-z0-9_.-",
        min_len: 16,
        max_len: 8 * 1024,
    },
    Builtin {
        name: "bearer",
        pattern: r"(?-u:\b)(?i-u:bearer)[ \t]{1,8}(?P<secret>[A-Za-z0-9._~+/-]{16,}=*)",
        prefixes: &["bearer"],
        token_chars: "A-Za-z0-9._~+/= \t-",
        min_len: 23,
        max_len: 8 * 1024,
    },
    Builtin {
        name: "anthropic_key",
        pattern: r"(?-u:\b)sk-ant-[A-Za-z0-9_-]{20,}",
        prefixes: &["sk-ant-"],
        token_chars: "A-Za-z0-9_-",
        min_len: 27,
        max_len: 256,
    },
    Builtin {
        name: "openai_key",
        pattern: r"(?-u:\b)sk-[A-Za-z0-9_-]{20,}",
        prefixes: &["sk-"],
        token_chars: "A-Za-z0-9_-",
        min_len: 23,
        max_len: 256,
    },
    Builtin {
        name: "github_token",
        pattern: r"(?-u:\b)(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{20,})",
        prefixes: &["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"],
        token_chars: "A-Za-z0-9_",
        min_len: 31,
        max_len: 256,
    },
    Builtin {
        name: "slack_token",
        pattern: r"(?-u:\b)xox[abprs]-[A-Za-z0-9-]{10,}",
        prefixes: &["xoxa-", "xoxb-", "xoxp-", "xoxr-", "xoxs-"],
        token_chars: "A-Za-z0-9-",
        min_len: 15,
        max_len: 256,
    },
    Builtin {
        name: "aws_access_key",
        pattern: r"(?-u:\b)(?:AKIA|ASIA)[0-9A-Z]{16}(?-u:\b)",
        prefixes: &["AKIA", "ASIA"],
        token_chars: "A-Z0-9",
        min_len: 20,
        max_len: 32,
    },
    Builtin {
        name: "google_api_key",
        pattern: r"(?-u:\b)AIza[0-9A-Za-z_-]{35}",
        prefixes: &["AIza"],
        token_chars: "A-Za-z0-9_-",
        min_len: 39,
        max_len: 64,
    },
];

impl Builtin {
    pub(crate) fn rule(&self) -> Result<PatternRule, RedactionError> {
        PatternRule::new(self.name, self.pattern)?
            .min_len(self.min_len)
            .max_len(self.max_len)
            .prefixes(self.prefixes.iter().copied())
            .token_chars(self.token_chars)
    }
}

/// The names of the built-in pattern rules, in priority order.
#[must_use]
pub fn builtin_rule_names() -> Vec<&'static str> {
    BUILTINS.iter().map(|b| b.name).collect()
}

/// A field name as compared: lower case, letters and digits only.
pub(crate) fn normalize_field(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_derived_from_the_syntax_tree() {
        let derived = |p: &str| derived_prefixes(p);
        assert_eq!(derived(r"acme_[a-z]+"), ["acme_"]);
        assert_eq!(derived(r"tok\.x[0-9]{4}"), ["tok.x"]);
        assert_eq!(derived(r"abc+d"), ["abc"], "a repetition keeps its minimum");
        assert_eq!(derived(r"abcd?e"), ["abcde", "abce"]);
        assert_eq!(
            derived(r"(?:mongodb|Postgres)://[a-z]+"),
            ["mongodb://", "postgres://"],
            "alternatives, ASCII case folded"
        );
        assert_eq!(
            derived(r"(?i-u:tok)_[0-9]+"),
            ["tok_"],
            "case variants fold to one"
        );
        assert_eq!(
            derived(r"(?-u:\b)word"),
            ["word"],
            "a look-around matches the empty string"
        );
        assert_eq!(derived(r"^abc"), ["abc"]);
        assert_eq!(
            derived(r"(?:abcdef|abc)[0-9]+"),
            ["abc"],
            "an extension is covered"
        );
        assert!(derived(r"a|bcd").is_empty(), "an alternative too short");
        assert!(derived(r"x*abc").is_empty(), "an optional start");
        assert!(derived(r"[a-z]x").is_empty(), "a wide class");
        assert_eq!(
            derived(r"xox[abs]-[a-z]+"),
            ["xoxa-", "xoxb-", "xoxs-"],
            "a narrow class"
        );
        assert!(derived(r"(?-u:\b)[0-9]{3}-[0-9]{2}").is_empty());
        assert!(
            derived(r"(?:aaa|bbb|ccc|ddd|eee|fff|ggg|hhh|iii)z").is_empty(),
            "more than {MAX_DERIVED} alternatives"
        );
        assert_eq!(
            derived(r"(?:aaa|bbb|ccc|ddd|eee|fff|ggg|hhh)z").len(),
            MAX_DERIVED
        );
    }

    #[test]
    fn token_chars_are_derived_from_the_syntax_tree() {
        let derived = |p: &str| {
            derived_token_chars(p).map(|set| {
                (0u8..128)
                    .filter(|&b| set.contains(b))
                    .map(char::from)
                    .collect::<String>()
            })
        };
        assert_eq!(
            derived(r"(?-u:\b)[0-9]{3}-[0-9]{2}(?-u:\b)").as_deref(),
            Some("-0123456789"),
            "look-arounds match no character"
        );
        assert_eq!(
            derived(r"(?:mongodb|pg)://[a-c]+").as_deref(),
            Some("/:abcdgmnop")
        );
        assert_eq!(derived(r"(?i-u:ab)").as_deref(), Some("ABab"));
        assert_eq!(derived(r"x(?-u:\d)?").as_deref(), Some("0123456789x"));
        assert_eq!(derived(r"[a-z]+é"), None, "a non-ASCII character");
        assert_eq!(derived(r"a.b"), None, "any character");
        assert_eq!(derived(r"\d{4}"), None, "Unicode digits");
        assert_eq!(derived(r"[^ ]+@"), None);
    }

    #[test]
    fn charsets_parse() {
        let set = Charset::parse(r"A-Za-z0-9_.\s-").unwrap();
        for b in b"aZ09_.- \n" {
            assert!(set.contains(*b), "{}", char::from(*b));
        }
        for b in b"!:/" {
            assert!(!set.contains(*b));
        }
        assert!(!set.contains(0xC3));
        assert!(Charset::parse("z-a").is_err());
        assert!(Charset::parse("é").is_err());
        assert!(Charset::parse(r"\q").is_err());
    }

    #[test]
    fn builtins_compile() {
        for b in BUILTINS {
            b.rule().unwrap_or_else(|e| panic!("{e}"));
        }
    }

    #[test]
    fn field_names_normalize() {
        assert_eq!(normalize_field("api_key"), normalize_field("apiKey"));
        assert_eq!(normalize_field("X-API-Key"), "xapikey");
    }
}
