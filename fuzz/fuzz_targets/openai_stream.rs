//! A model's response body, as the model-loop adapter decodes it (SSE, then Chat
//! Completions or Responses events): never a panic, and the same result however the bytes
//! are chunked (the first byte picks the API and the chunk size).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&first, stream)) = data.split_first() else {
        return;
    };
    let responses = first & 1 == 1;
    let chunk = usize::from(first >> 1) + 1;
    let whole = harness_openai::fuzz_stream(responses, stream, stream.len().max(1));
    let chunked = harness_openai::fuzz_stream(responses, stream, chunk);
    assert_eq!(whole, chunked, "chunks of {chunk} changed the result");
});
