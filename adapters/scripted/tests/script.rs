//! The script format: JSON round trips, errors that name the step, the builder, and the raw
//! stream.

use futures_util::StreamExt;
use harness_core::action::ActionKind;
use harness_core::adapter::AdapterEvent;
use harness_core::event::Content;
use harness_core::id::ExecutionId;
use harness_scripted::{ApprovalCall, QUICKSTART, Script, ScriptError, ScriptedAdapter, Step};
use rstest::rstest;
use serde_json::json;

/// One step of every type, with every optional field used somewhere.
const EVERY_STEP: &str = r#"{"steps": [
    {"type": "text", "text": "Hel"},
    {"type": "text", "text": "lo", "repeat": 3},
    {"type": "reasoning", "text": "hmm", "repeat": 2},
    {"type": "usage", "inputTokens": 1, "outputTokens": 2, "reasoningTokens": 3, "cachedInputTokens": 4},
    {"type": "toolCall", "callId": "c1", "tool": "ls", "arguments": {"dir": "."}, "output": ["a"]},
    {"type": "toolCall", "callId": "c2", "tool": "cat", "arguments": {}, "failure": "missing"},
    {"type": "approval", "id": "act_1", "calls": [
        {"callId": "c3", "tool": "rm", "arguments": {"path": "x"},
         "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
         "allowed": ["approve", "edit", "reject"], "output": {"ok": true}},
        {"callId": "c4", "tool": "mv", "arguments": {}, "inputSchema": {"type": "object"},
         "allowed": ["approve"]}
    ]},
    {"type": "form", "id": "act_2", "title": "Who?", "fields": [
        {"name": "name", "label": "Name", "required": true, "kind": {"type": "text", "maxLength": 20}},
        {"name": "color", "label": "Color", "kind": {"type": "choice", "options": ["red", "blue"]}}
    ]},
    {"type": "artifact", "id": "art_1", "mediaType": "text/plain", "name": "a.txt",
     "uri": "file:///a.txt", "sizeBytes": 12, "metadata": {"lines": 1}},
    {"type": "native", "namespace": "acme", "name": "plan.update", "payload": {"n": 1}},
    {"type": "error", "category": "throttled", "message": "slow", "code": "SLOW_DOWN",
     "providerCode": "rate.limit", "retryable": true, "retryAfterMs": 10, "sideEffects": true,
     "diagnostic": "internal"},
    {"type": "delay", "ms": 5},
    {"type": "hang"},
    {"type": "panic", "message": "boom"},
    {"type": "complete", "summary": "done {{name}}"},
    {"type": "complete"},
    {"type": "eventAfterComplete"},
    {"type": "endWithoutTerminal"}
]}"#;

#[test]
fn every_step_round_trips_through_json() {
    let script = Script::from_json_str(EVERY_STEP).unwrap();
    assert_eq!(script.steps().len(), 18);
    let json = serde_json::to_string(&script).unwrap();
    let back = Script::from_json_str(&json).unwrap();
    assert_eq!(back, script);
    assert_eq!(serde_json::to_string(&back).unwrap(), json);
    // Serde directly, and the pretty printer.
    let value: serde_json::Value = serde_json::from_str(EVERY_STEP).unwrap();
    assert_eq!(serde_json::from_value::<Script>(value).unwrap(), script);
    assert_eq!(
        Script::from_json_str(&script.to_json_pretty()).unwrap(),
        script
    );
    // Defaults are not written back.
    let written: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(written["steps"][0], json!({"type": "text", "text": "Hel"}));
    assert_eq!(written["steps"][12], json!({"type": "hang"}));
}

#[test]
fn the_quickstart_round_trips() {
    let script = Script::quickstart();
    let back = Script::from_json_str(&serde_json::to_string(&script).unwrap()).unwrap();
    assert_eq!(back, script);
    let original: serde_json::Value = serde_json::from_str(QUICKSTART).unwrap();
    let written = serde_json::to_value(&script).unwrap();
    assert_eq!(
        written["steps"].as_array().unwrap().len(),
        original["steps"].as_array().unwrap().len()
    );
}

#[rstest]
#[case::unknown_type(
    r#"[{"type": "text", "text": "a"}, {"type": "txt", "text": "b"}]"#,
    1,
    "steps[1] (txt): unknown variant `txt`"
)]
#[case::missing_type(r#"[{"text": "a"}]"#, 0, "steps[0] (?): missing field `type`")]
#[case::unknown_field(
    r#"[{"type": "text", "txt": "a"}]"#,
    0,
    "steps[0] (text): unknown field `txt`"
)]
#[case::missing_field(
    r#"[{"type": "hang"}, {"type": "hang"}, {"type": "toolCall", "callId": "c"}]"#,
    2,
    "steps[2] (toolCall): missing field `tool`"
)]
#[case::repeat_zero(
    r#"[{"type": "text", "text": "a", "repeat": 0}]"#,
    0,
    "`repeat` must be at least 1"
)]
#[case::bad_call_id(
    r#"[{"type": "toolCall", "callId": "a b", "tool": "t"}]"#,
    0,
    "invalid tool call id `a b`"
)]
#[case::blank_tool(
    r#"[{"type": "toolCall", "callId": "c", "tool": " "}]"#,
    0,
    "blank tool name"
)]
#[case::output_and_failure(
    r#"[{"type": "toolCall", "callId": "c", "tool": "t", "output": 1, "failure": "x"}]"#,
    0,
    "both `output` and `failure`"
)]
#[case::no_calls(r#"[{"type": "approval", "calls": []}]"#, 0, "at least one tool call")]
#[case::duplicate_calls(r#"[{"type": "approval", "calls": [{"callId": "c", "tool": "t"}, {"callId": "c", "tool": "t"}]}]"#, 0, "appears more than once")]
#[case::arguments_against_schema(r#"[{"type": "approval", "calls": [{"callId": "c", "tool": "t", "arguments": {"n": "x"}, "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}}]}]"#, 0, "do not satisfy its `inputSchema`")]
#[case::bad_schema(r#"[{"type": "approval", "calls": [{"callId": "c", "tool": "t", "inputSchema": {"type": 12}}]}]"#, 0, "not a valid JSON Schema")]
#[case::no_decision(
    r#"[{"type": "approval", "calls": [{"callId": "c", "tool": "t", "allowed": []}]}]"#,
    0,
    "allows no decision"
)]
#[case::duplicate_field(r#"[{"type": "form", "fields": [{"name": "a", "label": "A", "kind": {"type": "boolean"}}, {"name": "a", "label": "B", "kind": {"type": "boolean"}}]}]"#, 0, "steps[0] (form): invalid form")]
#[case::bad_media_type(
    r#"[{"type": "artifact", "mediaType": "text"}]"#,
    0,
    "invalid media type `text`"
)]
#[case::data_uri(
    r#"[{"type": "artifact", "mediaType": "text/plain", "uri": "data:text/plain;base64,aGk="}]"#,
    0,
    "data:"
)]
#[case::metadata_not_object(
    r#"[{"type": "artifact", "mediaType": "text/plain", "metadata": [1]}]"#,
    0,
    "`metadata` must be a JSON object"
)]
#[case::duplicate_artifact(r#"[{"type": "artifact", "id": "a1", "mediaType": "text/plain"}, {"type": "artifact", "id": "a1", "mediaType": "text/plain"}]"#, 1, "artifact id `a1` is already used by steps[0]")]
#[case::duplicate_action(
    r#"[{"type": "form", "id": "x"}, {"type": "form", "id": "x"}]"#,
    1,
    "action id `x` is already used by steps[0]"
)]
#[case::reserved_namespace(
    r#"[{"type": "native", "namespace": "run", "name": "succeeded"}]"#,
    0,
    "reserved"
)]
#[case::bad_native_name(
    r#"[{"type": "native", "name": "Bad Name"}]"#,
    0,
    "invalid native event name"
)]
#[case::bad_category(
    r#"[{"type": "error", "category": "exploded", "message": "m"}]"#,
    0,
    "unknown variant `exploded`"
)]
#[case::bad_code(
    r#"[{"type": "error", "category": "internal", "message": "m", "code": "lower"}]"#,
    0,
    "invalid error code `lower`"
)]
#[case::sensitive_provider_code(
    r#"[{"type": "error", "category": "internal", "message": "m", "providerCode": "Bearer abc"}]"#,
    0,
    "possibly sensitive"
)]
#[case::negative_delay(
    r#"[{"type": "delay", "ms": -1}]"#,
    0,
    "steps[0] (delay): invalid value"
)]
#[case::fields_on_unit_steps(
    r#"[{"type": "hang", "forever": true}]"#,
    0,
    "steps[0] (hang): unknown field `forever`"
)]
fn errors_name_the_step(#[case] steps: &str, #[case] index: usize, #[case] fragment: &str) {
    let json = format!(r#"{{"steps": {steps}}}"#);
    let err = Script::from_json_str(&json).unwrap_err();
    assert!(matches!(err, ScriptError::Step { .. }), "{err:?}");
    assert_eq!(err.step_index(), Some(index), "{err}");
    assert!(
        err.to_string().starts_with(&format!("steps[{index}]")),
        "{err}"
    );
    assert!(
        err.to_string().contains(fragment),
        "{err}\nexpected: {fragment}"
    );
}

#[rstest]
#[case::not_json("{", "invalid script: EOF")]
#[case::not_an_object("[]", "invalid script: invalid type")]
#[case::unknown_top_level(r#"{"steps": [], "name": "x"}"#, "unknown field `name`")]
#[case::steps_not_array(r#"{"steps": {}}"#, "invalid type: map")]
fn document_errors_say_what_is_wrong(#[case] json: &str, #[case] fragment: &str) {
    let err = Script::from_json_str(json).unwrap_err();
    assert!(matches!(err, ScriptError::Document { .. }), "{err:?}");
    assert_eq!(err.step_index(), None);
    assert!(err.to_string().contains(fragment), "{err}");
}

#[test]
fn from_path_reads_files_and_names_missing_ones() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = Script::from_path(dir.join("scripts/quickstart.json")).unwrap();
    assert_eq!(script, Script::quickstart());
    let err = Script::from_path(dir.join("scripts/nope.json")).unwrap_err();
    assert!(matches!(err, ScriptError::Read { .. }));
    assert!(err.to_string().contains("scripts/nope.json"), "{err}");
}

#[test]
fn the_builder_matches_the_json_form() {
    let built = Script::builder()
        .text("Hel")
        .text_repeated("lo", 3)
        .reasoning("hmm")
        .usage(10, 5)
        .tool_call("c1".parse().unwrap(), "ls", json!({}), json!(["a"]))
        .failing_tool_call("c2".parse().unwrap(), "cat", json!({}), "missing")
        .approval([
            ApprovalCall::new("c3".parse().unwrap(), "rm", json!({"path": "x"})).allow_edit(),
        ])
        .artifact("text/markdown", "s.md", "file:///s.md")
        .native("tick", json!(1))
        .delay(std::time::Duration::from_millis(250))
        .complete("done")
        .try_build()
        .unwrap();
    let parsed = Script::from_json_str(
        r#"{"steps": [
            {"type": "text", "text": "Hel"},
            {"type": "text", "text": "lo", "repeat": 3},
            {"type": "reasoning", "text": "hmm"},
            {"type": "usage", "inputTokens": 10, "outputTokens": 5},
            {"type": "toolCall", "callId": "c1", "tool": "ls", "output": ["a"]},
            {"type": "toolCall", "callId": "c2", "tool": "cat", "failure": "missing"},
            {"type": "approval", "calls": [{"callId": "c3", "tool": "rm", "arguments": {"path": "x"},
                                            "allowed": ["approve", "reject", "edit"]}]},
            {"type": "artifact", "mediaType": "text/markdown", "name": "s.md", "uri": "file:///s.md"},
            {"type": "native", "name": "tick", "payload": 1},
            {"type": "delay", "ms": 250},
            {"type": "complete", "summary": "done"}
        ]}"#,
    )
    .unwrap();
    assert_eq!(built, parsed);
    assert!(
        Script::builder()
            .artifact("nope", "x", "file:///x")
            .try_build()
            .is_err()
    );
    assert!(matches!(Script::from_steps([Step::Hang {}]), Ok(s) if s.steps().len() == 1));
}

#[tokio::test]
async fn the_raw_stream_yields_the_adapter_events() {
    let execution_id = ExecutionId::generate();
    let script = Script::builder()
        .text_repeated("tick", 4)
        .artifact("text/plain", "out.txt", "file:///out.txt")
        .complete("done")
        .build();
    let items: Vec<_> = ScriptedAdapter::raw_stream(script, execution_id.clone())
        .map(Result::unwrap)
        .collect()
        .await;
    assert_eq!(items.len(), 6);
    for item in &items[..4] {
        assert!(
            matches!(item, AdapterEvent::Content(Content::MessageDelta(d)) if d.text == "tick")
        );
    }
    let AdapterEvent::Artifact(artifact) = &items[4] else {
        panic!("{items:?}")
    };
    assert_eq!(artifact.execution_id(), &execution_id);
    assert!(
        matches!(&items[5], AdapterEvent::Completed(s) if s.summary.as_deref() == Some("done"))
    );

    // The quickstart's first segment ends at its approval.
    let items: Vec<_> = ScriptedAdapter::raw_stream(Script::quickstart(), execution_id)
        .map(Result::unwrap)
        .collect()
        .await;
    assert!(matches!(
        &items[items.len() - 2],
        AdapterEvent::Content(Content::ToolCallStarted(c)) if c.tool == "write_file"
    ));
    let Some(AdapterEvent::Action(interrupt)) = items.last() else {
        panic!("{items:?}")
    };
    assert!(matches!(interrupt.kind, ActionKind::ToolApproval(_)));
}

#[tokio::test]
async fn a_large_repeat_streams_every_delta() {
    let script = Script::builder().text_repeated("x", 100_000).build();
    let count = ScriptedAdapter::raw_stream(script, ExecutionId::generate())
        .filter(|item| {
            std::future::ready(matches!(
                item,
                Ok(AdapterEvent::Content(Content::MessageDelta(_)))
            ))
        })
        .count()
        .await;
    assert_eq!(count, 100_000);
}

#[test]
fn the_script_schema_is_named_and_closed() {
    let schema = schemars::schema_for!(Script);
    let value = schema.to_value();
    assert_eq!(value["title"], "Script");
    assert_eq!(value["additionalProperties"], false);
    assert!(value["$defs"]["Step"]["oneOf"].as_array().unwrap().len() >= 15);
}
