//! Adapter options from arbitrary JSON against the options schema each adapter publishes:
//! what an adapter accepts, its schema accepts (and for the ACP adapter, whose options are
//! all in its schema, the other way round too). `null` is "no options" and not checked
//! against the schema, as the service does.
#![no_main]

use std::sync::OnceLock;

use harness_acp::AcpOptions;
use harness_core::manifest::Describe;
use harness_scripted::{ScriptedAdapter, ScriptedOptions};
use jsonschema::Validator;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn schemas() -> &'static (Validator, Validator) {
    static SCHEMAS: OnceLock<(Validator, Validator)> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        let compile = |schema: &Value| jsonschema::validator_for(schema).expect("schema");
        let acp = compile(harness_acp::descriptor().options_schema());
        let scripted = compile(ScriptedAdapter::default().descriptor().options_schema());
        (acp, scripted)
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    if value.is_null() {
        return;
    }
    let (acp, scripted) = schemas();
    assert_eq!(
        AcpOptions::from_value(&value).is_ok(),
        acp.is_valid(&value),
        "acp options {value}"
    );
    if ScriptedOptions::from_value(&value).is_ok() {
        assert!(scripted.is_valid(&value), "scripted options {value}");
    }
});
