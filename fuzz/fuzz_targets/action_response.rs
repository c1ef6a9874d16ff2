//! Arbitrary action responses against an approval (one call, editable, with an input schema)
//! and a form: validation never panics, and what it accepts names the request it answers.
#![no_main]

use harness_core::action::ActionResponse;
use harness_fuzz::action_requests;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(response) = serde_json::from_slice::<ActionResponse>(data) else {
        return;
    };
    for request in action_requests() {
        if request.validate(response.clone()).is_ok() {
            assert_eq!(response.action_id(), &request.id);
        }
    }
});
