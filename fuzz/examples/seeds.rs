//! Writes the seed corpus, `corpus/<target>/seed-<n>`: `cargo run --example seeds` in `fuzz/`.
//! The files are committed; run it again after a wire format changes.

use std::path::Path;

use harness_acp::AcpOptions;
use harness_core::action::FormValues;
use harness_fuzz::action_requests;
use harness_scripted::{QUICKSTART, Script, ScriptedOptions};
use serde_json::json;

fn write(target: &str, seeds: &[Vec<u8>]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    std::fs::create_dir_all(&dir).expect("corpus dir");
    for (n, seed) in seeds.iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{n}")), seed).expect("seed");
    }
}

fn main() {
    let texts = [
        "the password is hunter2-db-password, ok",
        "Authorization: Bearer abcdefghijklmnop0123 and cred00-Q7zX-secret",
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig done",
        "k:abcdk: kk:zzzzzk: -----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
        "sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-sk-",
        "eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ-eyJ- AKIAIOSFODNN7EXAMPLE é 日本",
        "ssn 123-45-6789, not 123-45-67890 or a123-45-6789; 111-22-3333-444-55-6666 end",
    ];
    let mut redaction: Vec<Vec<u8>> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| [&[i as u8 * 37][..], t.as_bytes()].concat())
        .collect();
    // Runs counted across the text a stream drops, a match that takes the character ending
    // its run.
    redaction.push(
        [
            &[0x81][..],
            "a b 1234x 0123456789abcdef0123456789abcdef0123456789a "
                .repeat(3)
                .as_bytes(),
        ]
        .concat(),
    );
    write("redaction", &redaction);

    let quickstart = Script::quickstart().to_json_pretty();
    write(
        "scripted_script",
        &[
            quickstart.clone().into_bytes(),
            QUICKSTART.as_bytes().to_vec(),
        ],
    );

    let options = [
        ScriptedOptions::with_script(Script::quickstart()).to_value(),
        AcpOptions::named("default").to_value(),
        json!({}),
        json!({"agent": null}),
        json!({"command": ["/bin/sh", "-c", "id"], "cwd": "/", "env": ["HOME"]}),
        // Found by this target: a struct from a JSON array was accepted.
        json!([]),
        json!(["default"]),
    ];
    write(
        "options",
        &options
            .iter()
            .map(|v| v.to_string().into_bytes())
            .collect::<Vec<_>>(),
    );

    let [approval, form] = action_requests();
    let call = "c1".parse().expect("call id");
    let responses = [
        approval.approve_all(),
        approval.reject(&call, "no"),
        approval.edit(&call, json!({"cmd": "pwd"})),
        approval.dismiss(),
        form.submit(FormValues::new().with("name", "Ada").with("age", 36)),
        form.dismiss(),
    ];
    write(
        "action_response",
        &responses
            .iter()
            .map(|r| serde_json::to_vec(r).expect("response"))
            .collect::<Vec<_>>(),
    );

    let lines = [
        r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}"#,
        r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"session/request_permission","params":{"sessionId":"s1","toolCall":{"toolCallId":"t1","title":"write"},"options":[{"optionId":"yes","name":"Allow","kind":"allow_once"}]}}"#,
        r#"{"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}"#,
        "this is not json",
    ];
    write(
        "acp_wire",
        &[
            lines.join("\n").into_bytes(),
            lines[2..4].join("\n").into_bytes(),
        ],
    );
}
