//! Tool-id patterns: `*` (any run of characters, `.` included, possibly empty), `?` (exactly
//! one character), every other character literal; the whole id must match.

use std::fmt;

/// The longest pattern, in bytes.
pub const MAX_PATTERN_BYTES: usize = 256;

/// A compiled tool-id pattern.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Glob {
    source: Box<str>,
    /// `true` for a pattern without wildcards: compared with `==`.
    exact: bool,
    chars: Box<[char]>,
}

impl fmt::Debug for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.source, f)
    }
}

impl Glob {
    /// Compiles `pattern`.
    ///
    /// # Errors
    /// A message saying what is wrong: empty, too long, or holding whitespace or a control
    /// character (a tool id never does, so such a pattern could never match).
    pub(crate) fn new(pattern: &str) -> Result<Self, String> {
        if pattern.is_empty() {
            return Err("the pattern is empty: give a tool id, or a pattern such as `fs.*`".into());
        }
        if pattern.len() > MAX_PATTERN_BYTES {
            return Err(format!(
                "the pattern is {} bytes long: give at most {MAX_PATTERN_BYTES}",
                pattern.len()
            ));
        }
        if let Some(c) = pattern
            .chars()
            .find(|c| c.is_whitespace() || c.is_control())
        {
            return Err(format!(
                "the pattern holds {c:?}, which no tool id holds: use `*` or `?` for any \
                 character, the id's own characters otherwise"
            ));
        }
        Ok(Self {
            source: pattern.into(),
            exact: !pattern.contains(['*', '?']),
            chars: pattern.chars().collect(),
        })
    }

    /// The pattern as written.
    pub(crate) fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the pattern has no wildcard.
    pub(crate) fn is_exact(&self) -> bool {
        self.exact
    }

    /// Whether `id` matches the whole pattern. Linear in practice: the classic wildcard
    /// matcher that backtracks only to the last `*` (O(pattern × id) at worst, both bounded).
    pub(crate) fn matches(&self, id: &str) -> bool {
        if self.exact {
            return *self.source == *id;
        }
        let p = &self.chars;
        let mut text = id.chars();
        let mut pi = 0;
        // After the last `*` seen: the pattern index past it, and where its run ends.
        let mut star: Option<(usize, std::str::Chars<'_>)> = None;
        loop {
            let mut next = text.clone();
            match next.next() {
                None => break,
                Some(_) if p.get(pi) == Some(&'*') => {
                    // Try the empty run first; remember where to widen it.
                    pi += 1;
                    star = Some((pi, text.clone()));
                }
                Some(c) if p.get(pi).is_some_and(|&pc| pc == '?' || pc == c) => {
                    pi += 1;
                    text = next;
                }
                Some(_) => match &mut star {
                    Some((after, run_end)) => {
                        run_end.next();
                        text = run_end.clone();
                        pi = *after;
                    }
                    None => return false,
                },
            }
        }
        p[pi..].iter().all(|&c| c == '*')
    }
}
