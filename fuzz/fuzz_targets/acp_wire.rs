//! Raw lines from an ACP agent through the client's wire guard (after our `initialize`,
//! `session/new` and `session/prompt` went out): it takes every line, as a message, as handled
//! or as a fault, and never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let output = String::from_utf8_lossy(data);
    let taken = harness_acp::fuzz_wire(&output);
    assert_eq!(taken.len(), output.lines().count());
});
