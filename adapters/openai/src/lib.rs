#![warn(missing_docs)]
#![doc = include_str!("../README.md")]

mod config;
mod error;
mod health;
mod runtime;
mod sse;
mod wire;

pub use config::{
    Api, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_IDLE_TIMEOUT_MS, DEFAULT_MAX_HISTORY_BYTES,
    DEFAULT_MAX_TOOL_ROUNDS, Endpoint, MAX_TOOL_ROUNDS, OpenAiOptions,
};
pub use runtime::{
    ADAPTER_ID, DEFAULT_ENDPOINT, HISTORY_KEY, OpenAiAdapter, PAUSED_KEY, descriptor,
};
pub use wire::{MAX_ARGUMENT_BYTES, MAX_CALLS, MAX_TEXT_BYTES};

/// Decodes `stream` (the body of a model's response) as the runtime does, fed in chunks of
/// `chunk` bytes, and describes what it made: each event's pieces, then the round's text
/// and calls, or the first error. For the `openai_stream` target of the repository's
/// `fuzz/` crate: whatever the bytes, no panic, bounded memory, and the same description
/// however the stream is chunked.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
#[must_use]
pub fn fuzz_stream(responses: bool, stream: &[u8], chunk: usize) -> String {
    use std::fmt::Write as _;
    let api = if responses {
        Api::Responses
    } else {
        Api::ChatCompletions
    };
    let mut decoder = sse::SseDecoder::default();
    let mut round = wire::Round::new(api);
    let mut events = Vec::new();
    let mut pieces = Vec::new();
    let mut out = String::new();
    let mut apply = |events: &mut Vec<sse::SseEvent>, out: &mut String| -> Result<(), String> {
        for event in events.drain(..) {
            round
                .apply(event.event.as_deref(), &event.data, &mut pieces)
                .map_err(|e| format!("{:?}: {}", e.category(), e.message()))?;
            for piece in pieces.drain(..) {
                let _ = write!(out, "{piece:?};");
            }
        }
        Ok(())
    };
    // As the runtime does: the events decoded before a decoding error are applied first.
    let mut result = Ok(());
    for part in stream.chunks(chunk.max(1)) {
        let decoded = decoder.push(part, &mut events).map_err(|e| e.to_string());
        result = apply(&mut events, &mut out).and(decoded);
        if result.is_err() {
            break;
        }
    }
    if result.is_ok() {
        let decoded = decoder.finish(&mut events).map_err(|e| e.to_string());
        result = apply(&mut events, &mut out).and(decoded);
    }
    match result {
        Ok(()) => {
            let done = round.is_done();
            match round.into_parts() {
                Ok((text, calls)) => {
                    let _ = write!(out, "done={done} text={text:?} calls={calls:?}");
                }
                Err(e) => {
                    let _ = write!(out, "error {:?}: {}", e.category(), e.message());
                }
            }
        }
        Err(e) => {
            let _ = write!(out, "error {e}");
        }
    }
    out
}
