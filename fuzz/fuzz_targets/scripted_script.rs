//! Scripts and scripted options from arbitrary JSON: parsing never panics, and a script
//! that parses prints as JSON that parses to the same steps.
#![no_main]

use harness_scripted::{Script, ScriptedOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(json) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(script) = Script::from_json_str(json) {
        let again =
            Script::from_json_str(&script.to_json_pretty()).expect("a script's own JSON parses");
        assert_eq!(again.steps(), script.steps());
    }
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(json) {
        let _ = ScriptedOptions::from_value(&value);
    }
});
