//! `SKILL.md`'s front matter: a strict subset of YAML (see the [module docs](super)).

/// The most characters of a skill's `name` (Agent Skills).
pub const MAX_NAME_CHARS: usize = 64;
/// The most characters of a skill's `description` (Agent Skills).
pub const MAX_DESCRIPTION_CHARS: usize = 1024;

/// Whether `name` is a valid skill name: 1 to [`MAX_NAME_CHARS`] lowercase ASCII letters,
/// digits and hyphens, not starting or ending with a hyphen, no two hyphens in a row.
///
/// ```
/// use harness_core::skill::is_valid_name;
/// assert!(is_valid_name("pdf-forms"));
/// assert!(!is_valid_name("PDF"));
/// assert!(!is_valid_name("-x"));
/// assert!(!is_valid_name("a--b"));
/// assert!(!is_valid_name("../etc"));
/// ```
#[must_use]
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_CHARS
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

/// How errors show a name given by someone else: bounded, escaped.
pub(crate) fn shown(name: &str) -> String {
    let mut s: String = name.chars().take(MAX_NAME_CHARS + 1).collect();
    if s.len() < name.len() {
        s.push('…');
    }
    format!("{s:?}")
}

/// The front matter's fields a skill uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontMatter {
    /// `name`.
    pub name: String,
    /// `description`.
    pub description: String,
}

fn is_delimiter(line: &str) -> bool {
    line.trim_end() == "---"
}

/// Splits `text` into its front matter and its body, or says what is wrong.
pub(super) fn parse(text: &str) -> Result<(FrontMatter, &str), String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    match lines.next() {
        Some(first) if is_delimiter(first) => {}
        _ => {
            return Err(
                "must open with a front matter block: a `---` line, `name: ...` and \
                 `description: ...` lines, then a `---` line"
                    .to_owned(),
            );
        }
    }
    let mut offset = text.find('\n').map_or(text.len(), |i| i + 1);
    let mut block: Vec<(usize, &str)> = Vec::new();
    let mut closed = false;
    for (n, line) in lines.enumerate() {
        offset += line.len();
        if is_delimiter(line) {
            closed = true;
            break;
        }
        block.push((n + 2, line.trim_end_matches(['\n', '\r'])));
    }
    if !closed {
        return Err("its front matter has no closing `---` line".to_owned());
    }
    let body = &text[offset..];

    let mut name: Option<String> = None;
    let mut description: Option<String> = None;
    let mut seen: Vec<&str> = Vec::new();
    let mut i = 0;
    while i < block.len() {
        let (number, line) = block[i];
        i += 1;
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if trimmed.len() != line.len() {
            return Err(format!(
                "front matter line {number} is indented where a `key: value` line is due"
            ));
        }
        let Some((key, raw)) = line.split_once(':') else {
            return Err(format!(
                "front matter line {number} is not a `key: value` line"
            ));
        };
        let key = key.trim_end();
        if key.is_empty()
            || !key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!(
                "front matter line {number} has a key that is not a plain word"
            ));
        }
        if seen.contains(&key) {
            return Err(format!("front matter key `{key}` is given twice"));
        }
        seen.push(key);
        // The indented lines that follow belong to this key.
        let start = i;
        while i < block.len() {
            let next = block[i].1;
            if next.trim().is_empty() || next.starts_with([' ', '\t']) {
                i += 1;
            } else {
                break;
            }
        }
        let nested: Vec<&str> = block[start..i].iter().map(|(_, l)| *l).collect();
        let wanted = match key {
            "name" => &mut name,
            "description" => &mut description,
            // Other keys (license, compatibility, metadata, allowed-tools, ...) are skipped.
            _ => continue,
        };
        let value = scalar(raw.trim(), &nested)
            .map_err(|why| format!("front matter `{key}` (line {number}): {why}"))?;
        *wanted = Some(value);
    }
    let name = name.ok_or("its front matter has no `name`")?;
    if !is_valid_name(&name) {
        return Err(format!(
            "`name` {} is not a skill name: 1 to {MAX_NAME_CHARS} lowercase letters, digits \
             and single hyphens, not starting or ending with one",
            shown(&name)
        ));
    }
    let description = description.ok_or("its front matter has no `description`")?;
    let description = description.trim().to_owned();
    if description.is_empty() {
        return Err("`description` is empty: say what the skill does and when to use it".into());
    }
    let chars = description.chars().count();
    if chars > MAX_DESCRIPTION_CHARS {
        return Err(format!(
            "`description` has {chars} characters; at most {MAX_DESCRIPTION_CHARS}"
        ));
    }
    Ok((FrontMatter { name, description }, body))
}

/// One scalar value: `raw` after the colon, and the indented lines after it.
fn scalar(raw: &str, nested: &[&str]) -> Result<String, String> {
    let has_nested = nested.iter().any(|l| !l.trim().is_empty());
    let block = |sep: &str| {
        let lines: Vec<&str> = nested.iter().map(|l| l.trim()).collect();
        let mut s = lines.join(sep);
        s.truncate(s.trim_end().len());
        s
    };
    match raw {
        "|" | "|-" | "|+" => return Ok(block("\n")),
        ">" | ">-" | ">+" => return Ok(block(" ")),
        _ => {}
    }
    if let Some(rest) = raw.strip_prefix('"') {
        if has_nested {
            return Err("a quoted value must end on its line".into());
        }
        let Some(inner) = rest.strip_suffix('"') else {
            return Err("a value opened with `\"` must close with `\"`".into());
        };
        let mut out = String::with_capacity(inner.len());
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('"') => out.push('"'),
                    Some('\\') => out.push('\\'),
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    _ => return Err("only \\\", \\\\, \\n and \\t escapes are taken".into()),
                },
                '"' => return Err("an unescaped `\"` inside a quoted value".into()),
                c => out.push(c),
            }
        }
        return Ok(out);
    }
    if let Some(rest) = raw.strip_prefix('\'') {
        if has_nested {
            return Err("a quoted value must end on its line".into());
        }
        let Some(inner) = rest.strip_suffix('\'') else {
            return Err("a value opened with `'` must close with `'`".into());
        };
        if inner.replace("''", "").contains('\'') {
            return Err("a `'` inside a single-quoted value is written `''`".into());
        }
        return Ok(inner.replace("''", "'"));
    }
    if raw.is_empty() && has_nested {
        return Err("a nested value where text is due".into());
    }
    // A plain scalar may continue on indented lines, folded with spaces; ` #` starts a
    // comment.
    let uncomment = |s: &str| s.find(" #").map_or(s, |at| &s[..at]).trim_end().to_owned();
    let mut value = uncomment(raw);
    for line in nested {
        let line = uncomment(line.trim());
        if !line.is_empty() {
            value.push(' ');
            value.push_str(&line);
        }
    }
    if value.contains(": ") || value.starts_with(['[', '{', '&', '*', '!', '%', '@', '`']) {
        return Err(
            "quote it: a plain value may not hold `: ` or start with a YAML indicator".into(),
        );
    }
    Ok(value)
}
