//! Redaction throughput, single thread: `cargo bench -p harness-layers --bench redaction`.
//!
//! ~10 MiB of prose, code and log fragments (one word in 100 a near miss such as
//! `task-based`, `Bearer token` or `eyJ`) with a secret every ~2 KiB on average; 100 pattern
//! rules (the 9 built-in ones, 86 generated rules with literal prefixes in the shapes of
//! real API keys, 5 generated rules whose pattern starts with no single literal) and 50
//! exact secrets. Of those 5, `dsn` (`(?:mongodb|postgres)://…`) gets its two schemes as
//! derived prefixes; the other 4 (a class first) are found through their combined regex.
//!
//! Two configurations of the same 91 generated rules: with declared bounds (`max_len`,
//! token characters), and with the defaults of `RedactorBuilder::pattern` (prefixes and
//! token characters derived from the pattern, 256-byte window). For each, the throughput
//! of `Redactor::redact_str` on the whole text and of a `StreamRedactor` fed deltas of 1 to
//! 64 bytes (token-sized) and of 256 bytes to 4 KiB, checking that the stream's output
//! equals `redact_str`'s. For comparison, one regex alternating all 100 patterns and the
//! 50 secrets. The aim is 200 MB/s (10^6 bytes) or more on one core; each line says PASS
//! or BELOW.
//!
//! Then adversarial input: one trigger repeated (a rule's prefix, an open-ended rule, a
//! secret's start, token characters), 1 MiB each, whole and streamed; the aim there is
//! 50 MB/s.
//!
//! `REDACTION_BENCH_ONLY=whole|stream|alternation|adversarial`, `REDACTION_BENCH_CONFIG=declared|rule`,
//! `REDACTION_BENCH_DELTAS=1|256` (the deltas' smallest size) and
//! `REDACTION_BENCH_TRIGGER=<an adversarial row's label>` run one part, for profiling
//! (`valgrind --tool=callgrind` counts instructions, which a shared machine does not make
//! noisy).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness_core::adapter::AdapterEvent;
use harness_core::event::{Content, TextDelta};
use harness_layers::redaction::{PatternRule, Redactor, StreamRedactor};

const TARGET_MB_S: f64 = 200.0;
const TEXT_BYTES: usize = 10 * 1024 * 1024;

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
    fn chars(&mut self, alphabet: &[u8], len: usize) -> String {
        (0..len).map(|_| char::from(*self.pick(alphabet))).collect()
    }
}

const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const HEX: &[u8] = b"0123456789abcdef";
const UPPER_DIGITS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
const LOWER: &[u8] = b"abcdefghijklmnopqrstuvwxyz";

/// Words of the filler text: prose, code and log fragments.
const WORDS: &[&str] = &[
    "the",
    "agent",
    "runs",
    "a",
    "tool",
    "and",
    "reads",
    "the",
    "file",
    "output",
    "with",
    "an",
    "error",
    "of",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "on",
    "are",
    "be",
    "this",
    "request",
    "response",
    "cache",
    "user",
    "config",
    "deploy",
    "build",
    "test",
    "passes",
    "fails",
    "retry",
    "value",
    "json",
    "header",
    "session",
    "message",
    "function",
    "returns",
    "let",
    "fn",
    "=",
    "{",
    "}",
    "();",
    "if",
    "else",
    "match",
    "Some(x)",
    "None",
    "Ok(())",
    "self.inner",
    "&mut",
    "vec![1, 2, 3]",
    "\"name\":",
    "\"id\": 42,",
    "https://example.com/docs",
    "/usr/local/bin",
    "2024-05-01T12:00:00Z",
    "INFO",
    "WARN",
    "GET /api/v1/items 200",
    "12",
    "2024",
    "0x1f",
    "über",
    "naïve",
    "日本語",
    "🦀",
    "(see",
    "below)",
    "e.g.",
    "i.e.",
];

/// Near misses: words that start like a secret (one word in 100).
const NEAR_MISSES: &[&str] = &[
    "task-based",
    "risk-free",
    "desk-top",
    "bearer",
    "Bearer token",
    "eyJ",
    "AKIA",
    "ghost",
    "xoxo",
    "AIza",
    "-----BEGIN CERTIFICATE-----",
    "sk-",
    "github_pages",
];

/// One generated rule: its name, pattern and a generator of matching secrets.
struct Generated {
    name: String,
    pattern: String,
    /// The declared bounds: longest match and token characters.
    max_len: usize,
    token_chars: &'static str,
    example: Box<dyn Fn(&mut Rng) -> String>,
}

fn generated_rules(rng: &mut Rng) -> Vec<Generated> {
    let mut rules = Vec::new();
    let mut used = std::collections::HashSet::new();
    while rules.len() < 86 {
        let len = 3 + rng.below(4);
        let p = rng.chars(LOWER, len);
        if !used.insert(p.clone()) {
            continue;
        }
        let i = rules.len();
        type Example = Box<dyn Fn(&mut Rng) -> String>;
        let (pattern, max_len, token_chars, example): (String, usize, &str, Example) = match i % 4 {
            0 => {
                let p2 = p.clone();
                (
                    format!(r"{p}_live_[A-Za-z0-9]{{24,48}}"),
                    64,
                    "A-Za-z0-9_",
                    Box::new(move |r: &mut Rng| format!("{p2}_live_{}", r.chars(ALNUM, 32))),
                )
            }
            1 => {
                let p2 = p.clone();
                (
                    format!(r"{p}-[0-9a-f]{{32}}"),
                    48,
                    "a-z0-9-",
                    Box::new(move |r: &mut Rng| format!("{p2}-{}", r.chars(HEX, 32))),
                )
            }
            2 => {
                let p2 = p.clone();
                (
                    format!(r"{p}\.[A-Za-z0-9_-]{{20,40}}"),
                    64,
                    "A-Za-z0-9_.-",
                    Box::new(move |r: &mut Rng| format!("{p2}.{}", r.chars(ALNUM, 28))),
                )
            }
            _ => {
                let p2 = p.clone();
                (
                    format!(r"{p}:[A-Z0-9]{{16}}(?-u:\b)"),
                    32,
                    "a-zA-Z0-9:",
                    Box::new(move |r: &mut Rng| format!("{p2}:{}", r.chars(UPPER_DIGITS, 16))),
                )
            }
        };
        rules.push(Generated {
            name: format!("gen{i:02}_{p}"),
            pattern,
            max_len,
            token_chars,
            example,
        });
    }
    // Five rules with no literal prefix: evaluated through their combined alternation.
    type Anywhere = (
        &'static str,
        &'static str,
        usize,
        &'static str,
        fn(&mut Rng) -> String,
    );
    let anywhere: [Anywhere; 5] = [
        (
            "ssn",
            r"(?-u:\b)[0-9]{3}-[0-9]{2}-[0-9]{4}(?-u:\b)",
            16,
            "0-9-",
            |r| {
                format!(
                    "{}-{}-{}",
                    r.chars(b"0123456789", 3),
                    r.chars(b"0123456789", 2),
                    r.chars(b"0123456789", 4)
                )
            },
        ),
        (
            "card",
            r"(?-u:\b)4[0-9]{3}(?: ?[0-9]{4}){3}(?-u:\b)",
            24,
            "0-9 ",
            |r| {
                format!(
                    "4{} {} {} {}",
                    r.chars(b"0123456789", 3),
                    r.chars(b"0123456789", 4),
                    r.chars(b"0123456789", 4),
                    r.chars(b"0123456789", 4)
                )
            },
        ),
        (
            "hex40",
            r"(?-u:\b)[0-9a-f]{40}(?-u:\b)",
            48,
            "0-9a-f",
            |r| r.chars(HEX, 40),
        ),
        (
            "iban",
            r"(?-u:\b)[A-Z]{2}[0-9]{2}[A-Z0-9]{12,30}(?-u:\b)",
            40,
            "A-Z0-9",
            |r| {
                format!(
                    "DE{}{}",
                    r.chars(b"0123456789", 2),
                    r.chars(UPPER_DIGITS, 18)
                )
            },
        ),
        (
            "dsn",
            r"(?:mongodb|postgres)://[A-Za-z0-9._~%+-]+:[A-Za-z0-9._~%!$&'*+,;=-]+@",
            128,
            "A-Za-z0-9._~%+:/@!$&'*,;=-",
            |r| format!("postgres://app:{}@", r.chars(ALNUM, 12)),
        ),
    ];
    for (name, pattern, max_len, token_chars, example) in anywhere {
        rules.push(Generated {
            name: name.to_owned(),
            pattern: pattern.to_owned(),
            max_len,
            token_chars,
            example: Box::new(example),
        });
    }
    rules
}

fn builtin_examples(rng: &mut Rng) -> String {
    match rng.below(9) {
        0 => format!("Bearer {}", rng.chars(ALNUM, 40)),
        1 => format!("sk-proj-{}", rng.chars(ALNUM, 48)),
        2 => format!("sk-ant-api03-{}", rng.chars(ALNUM, 90)),
        3 => format!("ghp_{}", rng.chars(ALNUM, 36)),
        4 => format!(
            "xoxb-{}-{}",
            rng.chars(b"0123456789", 12),
            rng.chars(ALNUM, 24)
        ),
        5 => format!("AKIA{}", rng.chars(UPPER_DIGITS, 16)),
        6 => format!("AIza{}", rng.chars(ALNUM, 35)),
        7 => format!(
            "eyJ{}.eyJ{}.{}",
            rng.chars(ALNUM, 30),
            rng.chars(ALNUM, 60),
            rng.chars(ALNUM, 43)
        ),
        _ => {
            let mut pem = String::from("-----BEGIN RSA PRIVATE KEY-----\n");
            for _ in 0..8 {
                pem.push_str(&rng.chars(ALNUM, 64));
                pem.push('\n');
            }
            pem.push_str("-----END RSA PRIVATE KEY-----");
            pem
        }
    }
}

fn mb_s(bytes: usize, elapsed: Duration) -> f64 {
    bytes as f64 / elapsed.as_secs_f64() / 1e6
}

fn verdict(mb_s: f64) -> &'static str {
    if mb_s >= TARGET_MB_S { "PASS" } else { "BELOW" }
}

/// The best of `runs` timings of `f`.
fn best<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best: Option<(Duration, T)> = None;
    for _ in 0..runs {
        let start = Instant::now();
        let out = f();
        let took = start.elapsed();
        if best.as_ref().is_none_or(|(b, _)| took < *b) {
            best = Some((took, out));
        }
    }
    best.expect("at least one run")
}

fn build(secrets: &[String], generated: &[Generated], declared: bool) -> Arc<Redactor> {
    let mut builder = Redactor::builder().secrets(secrets.iter().cloned());
    for g in generated {
        builder = if declared {
            let rule = PatternRule::new(&g.name, &g.pattern)
                .and_then(|r| r.max_len(g.max_len).token_chars(g.token_chars))
                .expect("valid rule");
            builder.rule(rule)
        } else {
            builder.pattern(&g.name, &g.pattern).expect("valid rule")
        };
    }
    Arc::new(builder.build().expect("redactor"))
}

/// Cuts `text` into deltas of `min..=max` bytes (moved to char boundaries).
fn deltas<'a>(text: &'a str, rng: &mut Rng, min: usize, max: usize) -> Vec<&'a str> {
    let mut deltas = Vec::new();
    let mut pos = 0;
    while pos < text.len() {
        let mut end = (pos + min + rng.below(max - min + 1)).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        deltas.push(&text[pos..end]);
        pos = end;
    }
    deltas
}

/// Streams `deltas` through one `StreamRedactor`: the joined output.
fn stream(redactor: &Arc<Redactor>, deltas: &[&str], bytes: usize) -> String {
    let mut stream = StreamRedactor::new(Arc::clone(redactor));
    let mut out = Vec::new();
    let mut joined = String::with_capacity(bytes);
    let mut take = |out: &mut Vec<AdapterEvent>| {
        for e in out.drain(..) {
            if let AdapterEvent::Content(Content::MessageDelta(d)) = e {
                joined.push_str(&d.text);
            }
        }
    };
    for delta in deltas {
        let event = AdapterEvent::Content(Content::MessageDelta(TextDelta::new(*delta)));
        stream.on_event(black_box(event), &mut out);
        take(&mut out);
    }
    stream.on_segment_end(&mut out);
    take(&mut out);
    joined
}

fn main() {
    let mut rng = Rng(0x5EED_1234_ABCD_9876);
    let generated = generated_rules(&mut rng);
    let secrets: Vec<String> = (0..50)
        .map(|i| {
            let len = 20 + rng.below(20);
            format!("cred{i:02}-{}", rng.chars(ALNUM, len))
        })
        .collect();
    let declared = build(&secrets, &generated, true);
    let defaults = build(&secrets, &generated, false);
    let patterns = declared.rule_names().len();

    // The text: words, punctuation and newlines, and a secret every ~2 KiB.
    let mut text = String::with_capacity(TEXT_BYTES + 4096);
    let mut planted = 0usize;
    while text.len() < TEXT_BYTES {
        if rng.below(300) == 0 {
            let secret = match rng.below(3) {
                0 => rng.pick(&secrets).clone(),
                1 => builtin_examples(&mut rng),
                _ => {
                    let g = &generated[rng.below(generated.len())];
                    (g.example)(&mut rng)
                }
            };
            text.push_str(&secret);
            planted += 1;
        } else if rng.below(100) == 0 {
            text.push_str(rng.pick::<&str>(NEAR_MISSES));
        } else {
            text.push_str(rng.pick::<&str>(WORDS));
        }
        text.push_str(match rng.below(12) {
            0 => ". ",
            1 => ", ",
            2 => "\n",
            3 => ": ",
            _ => " ",
        });
    }
    let bytes = text.len();
    println!(
        "redaction bench: {:.1} MiB of text, {patterns} pattern rules ({} built-in, 86 generated with literal prefixes, 5 with none declared: 1 derives two, 4 have none), {} exact secrets, {planted} secrets planted; single thread, MB = 10^6 bytes",
        bytes as f64 / (1024.0 * 1024.0),
        patterns - generated.len(),
        secrets.len()
    );

    // `REDACTION_BENCH_ONLY=whole|stream|alternation` runs one part,
    // `REDACTION_BENCH_CONFIG=declared|rule` one configuration and
    // `REDACTION_BENCH_DELTAS=1|256` one delta size (for profiling).
    let only = std::env::var("REDACTION_BENCH_ONLY").unwrap_or_default();
    let run = |part: &str| only.is_empty() || only == part;
    let small = deltas(&text, &mut rng, 1, 64);
    let large = deltas(&text, &mut rng, 256, 4096);
    let mut verdicts = Vec::new();

    let config = std::env::var("REDACTION_BENCH_CONFIG").unwrap_or_default();
    let sizes = std::env::var("REDACTION_BENCH_DELTAS").unwrap_or_default();
    for (label, redactor) in [("declared bounds", &declared), ("rule defaults", &defaults)] {
        if (!config.is_empty() && !label.starts_with(config.as_str()))
            || !(run("whole") || run("stream"))
        {
            continue;
        }
        println!("rules with {label}:");
        // 1. The whole text at once.
        // Timed only when it is reported.
        let runs = if run("whole") { 5 } else { 1 };
        let (took, redacted) = best(runs, || redactor.redact_str(black_box(&text)).into_owned());
        let markers = redacted.matches("[REDACTED:").count();
        if run("whole") {
            let whole = mb_s(bytes, took);
            println!(
                "  redact_str                       {whole:>8.1} MB/s  ({:>6.1} ms, {markers} markers)  {}",
                took.as_secs_f64() * 1e3,
                verdict(whole)
            );
            verdicts.push((format!("redact_str, {label}"), whole));
        }
        // 2. Streaming through the interceptor.
        if run("stream") {
            for (what, deltas) in [("1-64 B", &small), ("256 B-4 KiB", &large)] {
                if !sizes.is_empty() && !what.starts_with(sizes.as_str()) {
                    continue;
                }
                let (took, streamed) = best(3, || stream(redactor, deltas, bytes));
                let streaming = mb_s(bytes, took);
                println!(
                    "  StreamRedactor, deltas {what:<11} {streaming:>8.1} MB/s  ({:>6.1} ms, {} deltas, {:.0} ns/delta, output {})  {}",
                    took.as_secs_f64() * 1e3,
                    deltas.len(),
                    took.as_secs_f64() * 1e9 / deltas.len() as f64,
                    if streamed == redacted {
                        "== redact_str"
                    } else {
                        "MISMATCH"
                    },
                    verdict(streaming)
                );
                verdicts.push((format!("streaming {what}, {label}"), streaming));
            }
        }
    }

    if run("alternation") {
        // 3. For comparison: one regex alternating every pattern and every secret.
        let builtin_sources = [
            r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?:[\s\S]*?-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=\s:,-]*)",
            r"(?-u:\b)eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*",
            r"(?-u:\b)(?i-u:bearer)[ \t]{1,8}[A-Za-z0-9._~+/-]{16,}=*",
            r"(?-u:\b)sk-ant-[A-Za-z0-9_-]{20,}",
            r"(?-u:\b)sk-[A-Za-z0-9_-]{20,}",
            r"(?-u:\b)(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{20,})",
            r"(?-u:\b)xox[abprs]-[A-Za-z0-9-]{10,}",
            r"(?-u:\b)(?:AKIA|ASIA)[0-9A-Z]{16}(?-u:\b)",
            r"(?-u:\b)AIza[0-9A-Za-z_-]{35}",
        ];
        let mut alternation: Vec<String> =
            builtin_sources.iter().map(|s| format!("(?:{s})")).collect();
        alternation.extend(generated.iter().map(|g| format!("(?:{})", g.pattern)));
        alternation.extend(secrets.iter().map(|s| regex::escape(s)));
        let combined = regex::Regex::new(&alternation.join("|")).expect("combined regex");
        let (took, _) = best(2, || {
            combined.replace_all(black_box(&text), "[REDACTED]").len()
        });
        println!(
            "for comparison, one regex alternating all 100 patterns and 50 secrets (replace_all): {:.1} MB/s ({:.1} ms)",
            mb_s(bytes, took),
            took.as_secs_f64() * 1e3
        );
    }
    let adversarial = if run("adversarial") {
        adversarial_rows(&declared, &mut rng)
    } else {
        Vec::new()
    };
    println!("target {TARGET_MB_S} MB/s on one core:");
    for (what, mb) in verdicts {
        println!("  {:<40} {}", what, verdict(mb));
    }
    if !adversarial.is_empty() {
        println!("target {ADVERSARIAL_MB_S} MB/s on adversarial input:");
        for (what, mb) in adversarial {
            let verdict = if mb >= ADVERSARIAL_MB_S {
                "PASS"
            } else {
                "BELOW"
            };
            println!("  {what:<40} {verdict}");
        }
    }
}

/// The aim for input built to make a scanner backtrack or rescan.
const ADVERSARIAL_MB_S: f64 = 50.0;

/// Inputs made of one trigger repeated (model output is hostile input): each a prefix of a
/// built-in rule, an open-ended rule, a registered secret's start, or a run of token
/// characters; through `redact_str` and streamed in 60-byte and 1-64 B deltas, with the
/// 100 rules and 50 secrets above plus the built-ins. `REDACTION_BENCH_ADVERSARIAL_KIB` sets
/// each input's size (1024 by default).
fn adversarial_rows(redactor: &Arc<Redactor>, rng: &mut Rng) -> Vec<(String, f64)> {
    let kib: usize = std::env::var("REDACTION_BENCH_ADVERSARIAL_KIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let size = kib * 1024;
    let builtins = Arc::new(Redactor::builder().build().expect("redactor"));
    let triggers: &[(&str, &str)] = &[
        ("eyJ", "eyJ"),
        ("eyJa.eyJa.", "eyJa.eyJa."),
        ("Bearer ", "Bearer "),
        ("bearer\t", "bearer\t"),
        ("-----BEGIN", "-----BEGIN"),
        (
            "-----BEGIN RSA PRIVATE KEY-----",
            "-----BEGIN RSA PRIVATE KEY-----",
        ),
        ("sk-", "sk-"),
        ("sk-ant-", "sk-ant-"),
        ("ghp_", "ghp_"),
        ("xoxb-", "xoxb-"),
        ("AKIA", "AKIA"),
        ("AIza", "AIza"),
        ("a (token chars)", "a"),
        ("a1_- (token chars)", "a1_-"),
        ("\\\\\" (JSON escapes)", "\\\\\""),
    ];
    println!(
        "adversarial input, {kib} KiB each (one trigger repeated), rules with declared bounds + built-ins only:"
    );
    let mut rows = Vec::new();
    // `REDACTION_BENCH_TRIGGER=<label>` runs the rows of one input (for profiling).
    let only = std::env::var("REDACTION_BENCH_TRIGGER").unwrap_or_default();
    let run = |label: &str| only.is_empty() || only == label;
    for (label, trigger) in triggers {
        if !run(label) {
            continue;
        }
        let text = trigger.repeat(size / trigger.len());
        rows.extend(adversarial_row(label, &text, redactor, &builtins, rng));
    }
    if !run("a secret's start") {
        return rows;
    }
    // A registered secret's first half, repeated: every copy is a partial match.
    let text = {
        let secret = "cred00-";
        secret.repeat(size / secret.len())
    };
    rows.extend(adversarial_row(
        "a secret's start",
        &text,
        redactor,
        &builtins,
        rng,
    ));
    rows
}

fn adversarial_row(
    label: &str,
    text: &str,
    redactor: &Arc<Redactor>,
    builtins: &Arc<Redactor>,
    rng: &mut Rng,
) -> Vec<(String, f64)> {
    let mut rows = Vec::new();
    let sixty: Vec<&str> = deltas(text, rng, 60, 60);
    let small: Vec<&str> = deltas(text, rng, 1, 64);
    // `REDACTION_BENCH_RULES=100|built-ins` runs one rule set (for profiling).
    let only = std::env::var("REDACTION_BENCH_RULES").unwrap_or_default();
    for (config, r) in [("100 rules", redactor), ("built-ins", builtins)] {
        if !config.starts_with(only.as_str()) {
            continue;
        }
        let (took, whole) = best(1, || r.redact_str(black_box(text)).into_owned());
        let mut line = format!(
            "  {label:<34} {config:<10} redact_str {:>8.1} MB/s",
            mb_s(text.len(), took)
        );
        rows.push((
            format!("{label}, {config}, redact_str"),
            mb_s(text.len(), took),
        ));
        for (what, deltas) in [("60 B", &sixty), ("1-64 B", &small)] {
            let (took, streamed) = best(1, || stream(r, deltas, text.len()));
            let mb = mb_s(text.len(), took);
            line.push_str(&format!(
                ", {what} {mb:>8.1} MB/s{}",
                if streamed == whole { "" } else { " MISMATCH" }
            ));
            rows.push((format!("{label}, {config}, {what} deltas"), mb));
        }
        println!("{line}");
    }
    rows
}
