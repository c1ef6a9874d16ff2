//! Random text streamed in random deltas: what a `StreamRedactor` emits is, after every
//! delta, a prefix of `Redactor::redact_str` of the whole text, and all of it at the end; no
//! registered secret survives. (Built for fuzzing, streams drop emitted text once they keep
//! 64 bytes of it, not 4 KiB: short inputs go through that too.)
#![no_main]

use std::sync::Arc;

use harness_core::adapter::AdapterEvent;
use harness_core::event::{Content, TextDelta};
use harness_fuzz::{SECRETS, redactor};
use harness_layers::redaction::StreamRedactor;
use libfuzzer_sys::fuzz_target;

fn take(out: &mut Vec<AdapterEvent>, emitted: &mut String) {
    for event in out.drain(..) {
        match event {
            AdapterEvent::Content(Content::MessageDelta(d)) => emitted.push_str(&d.text),
            other => panic!("unexpected {other:?}"),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&seed, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let redactor = redactor();
    let whole = redactor.redact_str(&text);
    for secret in SECRETS {
        assert!(!whole.contains(secret), "{secret} survived in {whole:?}");
    }
    let mut stream = StreamRedactor::new(Arc::clone(redactor));
    let (mut out, mut emitted) = (Vec::new(), String::new());
    let (mut pos, mut x) = (0, u64::from(seed) | 1);
    while pos < text.len() {
        // xorshift: delta sizes of 1 to 64 bytes, chosen by the first byte.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut end = (pos + 1 + (x % 64) as usize).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        let delta = TextDelta::new(&text[pos..end]);
        stream.on_event(
            AdapterEvent::Content(Content::MessageDelta(delta)),
            &mut out,
        );
        take(&mut out, &mut emitted);
        assert!(
            whole.starts_with(&emitted),
            "{emitted:?} is not a prefix of {whole:?}"
        );
        pos = end;
    }
    stream.on_segment_end(&mut out);
    take(&mut out, &mut emitted);
    assert_eq!(emitted, whole);
});
