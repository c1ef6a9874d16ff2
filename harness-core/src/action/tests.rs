use std::collections::BTreeSet;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{ErrorCategory, ErrorCode, HarnessError};
use crate::id::{ActionId, IdempotencyKey, ToolCallId};
use crate::time::Timestamp;
use proptest::prelude::*;
use rstest::rstest;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::*;

fn name(s: &str) -> FieldName {
    s.parse().expect("valid field name")
}

fn call(s: &str) -> ToolCallId {
    s.parse().expect("valid call id")
}

fn act(s: &str) -> ActionId {
    s.parse().expect("valid action id")
}

fn at() -> Timestamp {
    "2026-11-30T12:00:00Z".parse().expect("valid timestamp")
}

fn sample_form() -> FormRequest {
    FormRequest::new([
        FormField::new(
            name("nick"),
            "Nickname",
            FieldKind::Text {
                min_length: Some(2),
                max_length: Some(8),
                pattern: Some("^[a-z]+$".into()),
            },
        )
        .required(),
        FormField::new(
            name("age"),
            "Age",
            FieldKind::Number {
                minimum: Some(0.0),
                maximum: Some(150.0),
                integer: true,
            },
        )
        .required(),
        FormField::new(name("agree"), "Agree", FieldKind::boolean()),
        FormField::new(name("color"), "Color", FieldKind::choice(["red", "blue"])),
        FormField::new(
            name("tags"),
            "Tags",
            FieldKind::multi_choice(["a", "b", "c"]),
        ),
        FormField::new(name("password"), "Password", FieldKind::text()),
    ])
    .expect("valid form")
    .with_title("Profile")
}

fn form_request() -> ActionRequest {
    ActionRequest::form(sample_form())
        .with_id(act("act_form"))
        .with_created_at(at())
}

fn path_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1},
            "lines": {"type": "integer", "minimum": 1}
        },
        "required": ["path"],
        "additionalProperties": false
    })
}

fn sample_approval() -> ApprovalRequest {
    ApprovalRequest::new([
        ToolCallApproval::new(
            call("c1"),
            "read_file",
            json!({"path": "/etc/hosts"}),
            path_schema(),
        )
        .expect("valid call")
        .allow_edit(),
        ToolCallApproval::new(
            call("c2"),
            "shell",
            json!({"cmd": "ls"}),
            json!({"type": "object"}),
        )
        .expect("valid call"),
    ])
    .expect("valid approval")
}

fn approval_request() -> ActionRequest {
    ActionRequest::approval(sample_approval())
        .with_id(act("act_appr"))
        .with_created_at(at())
}

fn good_values() -> FormValues {
    FormValues::new()
        .with("nick", "ada")
        .with("age", 36)
        .with("agree", true)
        .with("color", "red")
        .with("tags", json!(["a", "c"]))
}

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + fmt::Debug>(value: &T) {
    let json = serde_json::to_string(value).expect("serializes");
    let back: T = serde_json::from_str(&json).expect("deserializes");
    assert_eq!(&back, value, "{json}");
    assert_eq!(serde_json::to_string(&back).expect("serializes"), json);
}

// ----- identifiers and revisions -------------------------------------------------------

#[rstest]
#[case("a", true)]
#[case("Email", true)]
#[case("first_name2", true)]
#[case("", false)]
#[case("2fa", false)]
#[case("_x", false)]
#[case("a-b", false)]
#[case("a b", false)]
#[case("é", false)]
fn field_name_rule(#[case] input: &str, #[case] valid: bool) {
    assert_eq!(input.parse::<FieldName>().is_ok(), valid, "{input:?}");
    assert_eq!(
        serde_json::from_value::<FieldName>(json!(input)).is_ok(),
        valid
    );
}

#[test]
fn field_name_length_boundary_and_message() {
    let max = format!("a{}", "b".repeat(63));
    assert!(max.parse::<FieldName>().is_ok());
    let err = format!("{max}b").parse::<FieldName>().unwrap_err();
    assert_eq!(err.kind, "form field name");
    assert!(
        err.to_string().contains("^[a-zA-Z][a-zA-Z0-9_]{0,63}$"),
        "{err}"
    );
}

#[test]
fn revision_rejects_zero_and_counts_up() {
    assert_eq!(Revision::new(3).map(Revision::get), Some(3));
    assert_eq!(
        Revision::new(u32::MAX).map(|r| r.next().get()),
        Some(u32::MAX)
    );
    let err = serde_json::from_value::<Revision>(json!(0)).unwrap_err();
    assert!(err.to_string().contains("revisions start at 1"), "{err}");
    assert!(serde_json::from_value::<Revision>(json!(-1)).is_err());
    round_trip(&Revision::FIRST.next());
}

// ----- form definitions ----------------------------------------------------------------

#[rstest]
#[case::duplicate_name(
    vec![
        FormField::new(name("x"), "X", FieldKind::text()),
        FormField::new(name("x"), "X2", FieldKind::boolean()),
    ],
    "field `x` is defined more than once; field names must be unique"
)]
#[case::blank_label(
    vec![FormField::new(name("x"), "  ", FieldKind::text())],
    "field `x` has a blank label; give it a human-readable label"
)]
#[case::length_range(
    vec![FormField::new(name("x"), "X", FieldKind::Text {
        min_length: Some(5), max_length: Some(2), pattern: None })],
    "field `x`: minLength 5 is greater than maxLength 2"
)]
#[case::invalid_pattern(
    vec![FormField::new(name("x"), "X", FieldKind::Text {
        min_length: None, max_length: None, pattern: Some("([a-z".into()) })],
    "field `x`: pattern `([a-z` is not a valid regular expression"
)]
#[case::number_range(
    vec![FormField::new(name("x"), "X", FieldKind::Number {
        minimum: Some(3.5), maximum: Some(1.0), integer: false })],
    "field `x`: minimum 3.5 is greater than maximum 1"
)]
#[case::non_finite(
    vec![FormField::new(name("x"), "X", FieldKind::Number {
        minimum: Some(f64::NAN), maximum: None, integer: false })],
    "field `x`: minimum must be a finite number"
)]
#[case::no_options(
    vec![FormField::new(name("x"), "X", FieldKind::choice(Vec::<String>::new()))],
    "field `x`: a choice needs at least one option"
)]
#[case::duplicate_option(
    vec![FormField::new(name("x"), "X", FieldKind::multi_choice(["a", "b", "a", "a"]))],
    "field `x`: option `a` is listed more than once; options must be unique"
)]
fn malformed_forms_are_refused(#[case] fields: Vec<FormField>, #[case] expected: &str) {
    let err = FormRequest::new(fields).unwrap_err();
    assert_eq!(err.problems().len(), 1, "{err}");
    assert!(
        err.to_string().starts_with("invalid form definition: "),
        "{err}"
    );
    assert!(err.to_string().contains(expected), "{err}");
}

#[test]
fn every_definition_problem_is_listed() {
    let err = FormRequest::new([
        FormField::new(name("a"), "", FieldKind::choice(Vec::<String>::new())),
        FormField::new(
            name("a"),
            "A",
            FieldKind::Number {
                minimum: Some(2.0),
                maximum: Some(1.0),
                integer: true,
            },
        ),
    ])
    .unwrap_err();
    let kinds: Vec<_> = err.problems().iter().map(ToString::to_string).collect();
    assert_eq!(
        kinds,
        [
            "field `a` has a blank label; give it a human-readable label",
            "field `a`: a choice needs at least one option",
            "field `a` is defined more than once; field names must be unique",
            "field `a`: minimum 2 is greater than maximum 1",
        ]
    );
}

#[test]
fn deserializing_a_form_runs_the_same_checks() {
    let wire = json!({"fields": [
        {"name": "x", "label": "X", "kind": {"type": "boolean"}},
        {"name": "x", "label": "X", "kind": {"type": "boolean"}}
    ]});
    let err = serde_json::from_value::<FormRequest>(wire).unwrap_err();
    assert!(err.to_string().contains("defined more than once"), "{err}");

    let wire = json!({"fields": [
        {"name": "bad name", "label": "X", "kind": {"type": "boolean"}}
    ]});
    let err = serde_json::from_value::<FormRequest>(wire).unwrap_err();
    assert!(
        err.to_string()
            .contains("invalid form field name `bad name`"),
        "{err}"
    );

    let wire = json!({"fields": [{"name": "p", "label": "P",
                                  "kind": {"type": "text", "pattern": "("}}]});
    let err = serde_json::from_value::<FormRequest>(wire).unwrap_err();
    assert!(
        err.to_string().contains("not a valid regular expression"),
        "{err}"
    );
}

#[test]
fn an_empty_form_is_a_confirmation() {
    let form = FormRequest::new([]).expect("empty form is fine");
    assert!(form.validate(&FormValues::new()).is_ok());
    let v = form.validate(&FormValues::new().with("x", 1)).unwrap_err();
    assert_eq!(v[0].problem, FieldProblem::Unknown);
}

// ----- form values ---------------------------------------------------------------------

#[test]
fn valid_values_pass_and_optional_fields_may_be_absent_or_null() {
    let form = sample_form();
    assert_eq!(form.validate(&good_values()), Ok(()));
    let minimal = FormValues::new()
        .with("nick", "bo")
        .with("age", 0)
        .with("color", Value::Null);
    assert_eq!(form.validate(&minimal), Ok(()));
    assert_eq!(form.validate(&good_values().with("age", 36.0)), Ok(()));
}

#[test]
fn every_violation_is_reported_with_field_and_expectation() {
    let values = FormValues::new()
        .with("nick", "A")
        .with("agree", "yes")
        .with("color", "green")
        .with("tags", json!(["a", "z", "a", 3]))
        .with("zzz", 1)
        .with("extra", true);
    let violations = sample_form().validate(&values).unwrap_err();
    let messages: Vec<_> = violations.iter().map(ToString::to_string).collect();
    assert_eq!(
        messages,
        [
            "field `nick`: expected at least 2 characters, got 1",
            "field `nick`: expected text matching the pattern `^[a-z]+$`",
            "field `age`: is required but missing",
            "field `agree`: expected a boolean, got a string",
            "field `color`: expected one of `red`, `blue`",
            "field `tags`: expected one of `a`, `b`, `c`",
            "field `tags`: option `a` is selected more than once",
            "field `tags`: expected one of `a`, `b`, `c`",
            "field `extra`: is not a field of this form; remove it",
            "field `zzz`: is not a field of this form; remove it",
        ]
    );
}

#[rstest]
#[case::text_wrong_type("nick", json!(12), "expected a string, got a number")]
#[case::text_too_long("nick", json!("abcdefghi"), "expected at most 8 characters, got 9")]
#[case::number_wrong_type("age", json!("36"), "expected a number, got a string")]
#[case::not_integer("age", json!(36.5), "expected a whole number")]
#[case::below("age", json!(-1), "expected a number >= 0")]
#[case::above("age", json!(151), "expected a number <= 150")]
#[case::required_null("age", Value::Null, "is required but missing")]
#[case::choice_wrong_type("color", json!(["red"]), "expected one of `red`, `blue`")]
#[case::multi_not_array("tags", json!("a"), "expected an array, got a string")]
#[case::boolean_object("agree", json!({}), "expected a boolean, got an object")]
fn single_value_violations(#[case] field: &str, #[case] value: Value, #[case] expected: &str) {
    let violations = sample_form()
        .validate(&good_values().with(field, value))
        .unwrap_err();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert_eq!(violations[0].field, field);
    assert_eq!(violations[0].problem.to_string(), expected);
}

#[test]
fn text_lengths_count_characters_not_bytes() {
    let kind = FieldKind::Text {
        min_length: None,
        max_length: Some(2),
        pattern: None,
    };
    let form = FormRequest::new([FormField::new(name("t"), "T", kind)]).unwrap();
    assert!(form.validate(&FormValues::new().with("t", "éé")).is_ok());
    let v = form
        .validate(&FormValues::new().with("t", "ééé"))
        .unwrap_err();
    assert_eq!(
        v[0].to_string(),
        "field `t`: expected at most 2 characters, got 3"
    );
}

#[test]
fn violations_do_not_echo_submitted_values() {
    let violations = sample_form()
        .validate(
            &good_values()
                .with("password", 123_456_789)
                .with("nick", "s3cr3t!"),
        )
        .unwrap_err();
    let text = format!(
        "{violations:?} {}",
        serde_json::to_string(&violations).unwrap()
    );
    assert!(
        !text.contains("123456789") && !text.contains("s3cr3t"),
        "{text}"
    );
}

// ----- approval definitions ------------------------------------------------------------

#[rstest]
#[case::wrong_keyword_type(json!({"type": 12}))]
#[case::bad_pattern(json!({"type": "string", "pattern": "(("}))]
#[case::external_ref(json!({"$ref": "https://example.com/schema.json"}))]
fn invalid_input_schemas_are_refused(#[case] schema: Value) {
    let err = ToolCallApproval::new(call("c1"), "tool", json!({}), schema).unwrap_err();
    assert!(matches!(
        err,
        ApprovalDefinitionError::InvalidInputSchema { .. }
    ));
    assert!(
        err.to_string()
            .starts_with("tool call `c1` (`tool`): the input schema is not a valid JSON Schema: "),
        "{err}"
    );
}

#[test]
fn approval_definition_errors() {
    let ok = || ToolCallApproval::new(call("c1"), "t", json!({}), json!({})).unwrap();
    assert_eq!(
        ApprovalRequest::new([]).unwrap_err().to_string(),
        "a tool approval needs at least one tool call"
    );
    assert_eq!(
        ApprovalRequest::new([ok(), ok()]).unwrap_err(),
        ApprovalDefinitionError::DuplicateCall {
            call_id: call("c1")
        }
    );
    assert_eq!(
        ToolCallApproval::new(call("c1"), " ", json!({}), json!({}))
            .unwrap_err()
            .to_string(),
        "tool call `c1` has a blank tool name; name the tool being called"
    );
    assert_eq!(
        ok().with_allowed([]).unwrap_err().to_string(),
        "tool call `c1` allows no decision; allow at least one of approve, reject, edit"
    );
    let only_reject = ok().with_allowed([DecisionKind::Reject]).unwrap();
    assert_eq!(
        only_reject.allowed().iter().copied().collect::<Vec<_>>(),
        [DecisionKind::Reject]
    );
}

#[test]
fn deserializing_an_approval_runs_the_same_checks() {
    let call_json = |id: &str, schema: Value, allowed: Value| {
        json!({"callId": id, "tool": "t", "arguments": {}, "inputSchema": schema,
               "allowed": allowed})
    };
    let ok = serde_json::from_value::<ApprovalRequest>(json!({"calls": [
        call_json("c1", json!({}), json!(["approve", "edit"]))
    ]}))
    .unwrap();
    assert!(ok.calls()[0].allows(DecisionKind::Edit));
    assert!(!ok.calls()[0].allows(DecisionKind::Reject));

    for (wire, expected) in [
        (json!({"calls": []}), "at least one tool call"),
        (
            json!({"calls": [call_json("c1", json!({}), json!(["approve"])),
                             call_json("c1", json!({}), json!(["approve"]))]}),
            "appears more than once",
        ),
        (
            json!({"calls": [call_json("c1", json!({"type": "nope"}), json!(["approve"]))]}),
            "not a valid JSON Schema",
        ),
        (
            json!({"calls": [call_json("c1", json!({}), json!([]))]}),
            "allows no decision",
        ),
        (
            json!({"calls": [call_json("c1", json!({}), json!(["maybe"]))]}),
            "unknown variant `maybe`",
        ),
    ] {
        let err = serde_json::from_value::<ApprovalRequest>(wire).unwrap_err();
        assert!(err.to_string().contains(expected), "{err}");
    }
}

// ----- wire format ---------------------------------------------------------------------

#[test]
fn action_request_wire_shape() {
    let request = ActionRequest::form(
        FormRequest::new([FormField::new(name("ok"), "OK?", FieldKind::boolean()).required()])
            .unwrap(),
    )
    .with_id(act("act_1"))
    .with_created_at(at());
    assert_eq!(
        serde_json::to_value(&request).unwrap(),
        json!({
            "id": "act_1",
            "revision": 1,
            "createdAt": "2026-11-30T12:00:00Z",
            "dismissible": true,
            "kind": {
                "type": "form_input",
                "fields": [{"name": "ok", "label": "OK?", "required": true,
                            "kind": {"type": "boolean"}}]
            }
        })
    );
    let approval = serde_json::to_value(approval_request()).unwrap();
    assert_eq!(approval["kind"]["type"], "tool_approval");
    assert_eq!(approval["kind"]["calls"][0]["inputSchema"], path_schema());
    assert_eq!(
        approval["kind"]["calls"][0]["allowed"],
        json!(["approve", "reject", "edit"])
    );
}

#[test]
fn dismissible_defaults_to_true_on_the_wire() {
    let mut wire = serde_json::to_value(form_request().with_dismissible(false)).unwrap();
    assert_eq!(wire["dismissible"], false);
    wire.as_object_mut().unwrap().remove("dismissible");
    let back: ActionRequest = serde_json::from_value(wire).unwrap();
    assert!(back.dismissible);
}

#[test]
fn serde_round_trips() {
    round_trip(&form_request());
    round_trip(&approval_request().with_revision(Revision::new(7).unwrap()));
    round_trip(&ActionResponse::from(
        FormResponse::submit(act("a"), Revision::FIRST, good_values())
            .with_idempotency_key("k1".parse().unwrap()),
    ));
    round_trip(&ActionResponse::from(FormResponse::dismiss(
        act("a"),
        Revision::FIRST,
    )));
    round_trip(&ActionResponse::from(ApprovalResponse::decide(
        act("a"),
        Revision::FIRST,
        [
            ToolDecision::approve(call("c1")),
            ToolDecision::reject(call("c2")),
            ToolDecision::reject_because(call("c3"), "no"),
            ToolDecision::edit(call("c4"), json!({"x": [1, 2]})),
        ],
    )));
    round_trip(&ActionResponse::from(ApprovalResponse::dismiss(
        act("a"),
        Revision::FIRST,
    )));
    let values = good_values().with("password", "pw");
    let validated = form_request()
        .validate_form(FormResponse::submit(
            act("act_form"),
            Revision::FIRST,
            values,
        ))
        .unwrap();
    round_trip(&validated.resolution());
    round_trip(
        &sample_form()
            .validate(&FormValues::new().with("q", 1))
            .unwrap_err(),
    );
}

/// Events carry requests and resolutions inside a flattened, adjacently tagged payload
/// (serde buffers them as `Content`): validation must still work, and a newer writer's field
/// is still read past.
#[test]
fn requests_and_resolutions_survive_a_flattened_event_envelope() {
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(tag = "kind", content = "data")]
    enum Payload {
        #[serde(rename = "action.requested")]
        Requested(ActionRequest),
        #[serde(rename = "action.resolved")]
        Resolved(ActionResolution),
    }
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Envelope {
        seq: u64,
        #[serde(flatten)]
        payload: Payload,
    }
    let resolution = approval_request()
        .validate(decide(vec![
            ToolDecision::approve(call("c1")),
            ToolDecision::reject(call("c2")),
        ]))
        .unwrap()
        .resolution();
    for payload in [
        Payload::Requested(form_request()),
        Payload::Requested(approval_request()),
        Payload::Resolved(resolution),
    ] {
        round_trip(&Envelope { seq: 3, payload });
    }
    let mut wire = serde_json::to_value(Envelope {
        seq: 1,
        payload: Payload::Requested(form_request()),
    })
    .unwrap();
    wire["data"]["kind"]["fields"][0]["kind"]["minLength"] = json!(9);
    let err = serde_json::from_value::<Envelope>(wire.clone()).unwrap_err();
    assert!(
        err.to_string()
            .contains("minLength 9 is greater than maxLength 8"),
        "{err}"
    );
    // A newer writer's field deep inside is read past (the request is the same).
    wire["data"]["kind"]["fields"][0]["kind"]["minLength"] = json!(2);
    wire["data"]["kind"]["layout"] = json!("grid");
    let read = serde_json::from_value::<Envelope>(wire).unwrap();
    assert_eq!(read.payload, Payload::Requested(form_request()));
}

/// A caller's answer is an instruction: a field the reader does not know is refused, by name
/// (see [`crate::wire`]).
#[rstest]
#[case::form_response(
    "ActionResponse",
    json!({"type": "form_input", "actionId": "a", "revision": 1,
           "answer": {"type": "dismiss"}, "note": "x"}),
    "unknown field `note`"
)]
#[case::form_answer(
    "ActionResponse",
    json!({"type": "form_input", "actionId": "a", "revision": 1,
           "answer": {"type": "submit", "values": {}, "draft": true}}),
    "invalid value: string \"draft\", expected \"type\" or \"values\""
)]
#[case::dismiss_with_values(
    "ActionResponse",
    json!({"type": "tool_approval", "actionId": "a", "revision": 1,
           "answer": {"type": "dismiss", "decisions": []}}),
    "invalid type: sequence, expected unit"
)]
#[case::decision(
    "ActionResponse",
    json!({"type": "tool_approval", "actionId": "a", "revision": 1,
           "answer": {"type": "decide", "decisions": [
             {"callId": "c", "decision": {"type": "approve", "always": true}}]}}),
    "unknown field `always`"
)]
#[case::tool_decision(
    "ActionResponse",
    json!({"type": "tool_approval", "actionId": "a", "revision": 1,
           "answer": {"type": "decide", "decisions": [
             {"callId": "c", "decision": {"type": "approve"}, "by": "me"}]}}),
    "unknown field `by`"
)]
fn caller_answers_refuse_unknown_fields(
    #[case] ty: &str,
    #[case] wire: Value,
    #[case] expected: &str,
) {
    assert_eq!(ty, "ActionResponse");
    let err = serde_json::from_value::<ActionResponse>(wire).unwrap_err();
    assert!(err.to_string().contains(expected), "{err}");
}

/// A form's fields are also an operator's (a scripted adapter's script): closed, by name
/// (see [`crate::wire`]).
#[rstest]
#[case::form_field(
    json!({"fields": [{"name": "a", "label": "A", "kind": {"type": "boolean"},
                       "placeholder": "x"}]}),
    "unknown field `placeholder`"
)]
#[case::field_kind(
    json!({"fields": [{"name": "a", "label": "A",
                       "kind": {"type": "text", "maxLen": 3}}]}),
    "unknown field `maxLen`"
)]
#[case::unit_variant(
    json!({"fields": [{"name": "a", "label": "A",
                       "kind": {"type": "boolean", "default": true}}]}),
    "unknown field `default`"
)]
fn form_fields_refuse_unknown_fields(#[case] wire: Value, #[case] expected: &str) {
    let err = serde_json::from_value::<FormRequest>(wire).unwrap_err();
    assert!(err.to_string().contains(expected), "{err}");
}

/// Requests (an adapter's) and resolutions (the engine's) cross a version boundary in events
/// and in the store: a newer writer's optional field, at any level, is read past.
#[rstest]
#[case::request_envelope(
    "ActionRequest",
    json!({"id": "a", "revision": 1, "createdAt": "2026-11-30T12:00:00Z",
           "kind": {"type": "form_input", "fields": []}, "priority": 1})
)]
#[case::form_request_body(
    "ActionRequest",
    json!({"id": "a", "revision": 1, "createdAt": "2026-11-30T12:00:00Z",
           "kind": {"type": "form_input", "fields": [], "layout": "grid"}})
)]
#[case::approval_call(
    "ActionRequest",
    json!({"id": "a", "revision": 1, "createdAt": "2026-11-30T12:00:00Z",
           "kind": {"type": "tool_approval", "calls": [{"callId": "c", "tool": "t",
             "arguments": {}, "inputSchema": {}, "allowed": ["approve"], "risk": "high"}]}})
)]
#[case::unit_outcome(
    "ActionResolution",
    json!({"actionId": "a", "revision": 1, "actionType": "form_input",
           "outcome": {"type": "dismissed", "by": "x"}})
)]
#[case::resolution(
    "ActionResolution",
    json!({"actionId": "a", "revision": 1, "actionType": "form_input",
           "outcome": {"type": "dismissed"}, "values": {}})
)]
#[case::resolution_call(
    "ActionResolution",
    json!({"actionId": "a", "revision": 1, "actionType": "tool_approval",
           "outcome": {"type": "decided", "calls": [
             {"callId": "c", "decision": "edit", "arguments": {}}]}})
)]
fn requests_and_resolutions_admit_a_newer_writers_fields(#[case] ty: &str, #[case] wire: Value) {
    let text = wire.to_string();
    match ty {
        "ActionRequest" => drop(serde_json::from_value::<ActionRequest>(wire).expect(&text)),
        "FormRequest" => drop(serde_json::from_value::<FormRequest>(wire).expect(&text)),
        "ActionResolution" => drop(serde_json::from_value::<ActionResolution>(wire).expect(&text)),
        other => panic!("no such case type {other}"),
    }
}

#[test]
/// The schemas say what the types do: a caller's answer is closed, what crosses a version
/// boundary (requests, resolutions) is open.
fn generated_schemas_accept_the_wire_and_close_only_answers() {
    fn check<T: JsonSchema + Serialize>(closed: bool, samples: &[T]) {
        let schema = serde_json::to_value(schemars::schema_for!(T)).unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        for sample in samples {
            let wire = serde_json::to_value(sample).unwrap();
            let errors: Vec<_> = validator
                .iter_errors(&wire)
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "{wire}: {errors:?}");
            let mut extra = wire.clone();
            extra
                .as_object_mut()
                .unwrap()
                .insert("surprise".into(), json!(1));
            assert_eq!(validator.is_valid(&extra), !closed, "{extra}");
        }
    }
    check(false, &[form_request(), approval_request()]);
    check(
        true,
        &[
            ActionResponse::from(FormResponse::submit(
                act("a"),
                Revision::FIRST,
                good_values(),
            )),
            ActionResponse::from(ApprovalResponse::decide(
                act("a"),
                Revision::FIRST,
                [
                    ToolDecision::edit(call("c1"), json!({"path": "x"})),
                    ToolDecision::reject_because(call("c2"), "no"),
                ],
            )),
        ],
    );
    let resolution = approval_request()
        .validate_approval(ApprovalResponse::decide(
            act("act_appr"),
            Revision::FIRST,
            [
                ToolDecision::approve(call("c1")),
                ToolDecision::reject_because(call("c2"), "no"),
            ],
        ))
        .unwrap()
        .resolution();
    check(false, &[resolution]);

    // Unknown keys in nested unit variants: refused in an answer and in a form's fields.
    let schema = serde_json::to_value(schemars::schema_for!(ActionResponse)).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let decision = |d: Value| {
        json!({"type": "tool_approval", "actionId": "a", "revision": 1,
               "answer": {"type": "decide", "decisions": [{"callId": "c", "decision": d}]}})
    };
    assert!(validator.is_valid(&decision(json!({"type": "approve"}))));
    assert!(!validator.is_valid(&decision(json!({"type": "approve", "always": true}))));
    let schema = serde_json::to_value(schemars::schema_for!(FormRequest)).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let form = |k: Value| json!({"fields": [{"name": "a", "label": "A", "kind": k}]});
    assert!(validator.is_valid(&form(json!({"type": "boolean"}))));
    assert!(!validator.is_valid(&form(json!({"type": "boolean", "default": true}))));
}

// ----- validating answers --------------------------------------------------------------

fn form_answer(values: FormValues) -> ActionResponse {
    FormResponse::submit(act("act_form"), Revision::FIRST, values).into()
}

fn decide(decisions: Vec<ToolDecision>) -> ActionResponse {
    ApprovalResponse::decide(act("act_appr"), Revision::FIRST, decisions).into()
}

#[rstest]
#[case::action_mismatch(
    form_request(),
    FormResponse::submit(act("act_other"), Revision::FIRST, good_values()).into(),
    ErrorCode::ACTION_NOT_FOUND,
    "the answer targets action `act_other` but the pending action is `act_form`"
)]
#[case::stale_revision(
    form_request().with_revision(Revision::new(2).unwrap()),
    form_answer(good_values()),
    ErrorCode::ACTION_REVISION_STALE,
    "the answer to action `act_form` names revision 1 but the pending revision is 2; \
     answer revision 2"
)]
#[case::kind_mismatch_form_answered_with_approval(
    form_request(),
    ApprovalResponse::dismiss(act("act_form"), Revision::FIRST).into(),
    ErrorCode::ACTION_RESPONSE_INVALID,
    "action `act_form` is a form_input request but was answered with a tool_approval response"
)]
#[case::kind_mismatch_approval_answered_with_form(
    approval_request(),
    FormResponse::dismiss(act("act_appr"), Revision::FIRST).into(),
    ErrorCode::ACTION_RESPONSE_INVALID,
    "action `act_appr` is a tool_approval request but was answered with a form_input response"
)]
#[case::invalid_form_values(
    form_request(),
    form_answer(good_values().with("age", 200).with("x", 1)),
    ErrorCode::ACTION_RESPONSE_INVALID,
    "invalid form values for action `act_form`: field `age`: expected a number <= 150; \
     field `x`: is not a field of this form; remove it"
)]
#[case::form_dismiss_not_allowed(
    form_request().with_dismissible(false),
    FormResponse::dismiss(act("act_form"), Revision::FIRST).into(),
    ErrorCode::ACTION_RESPONSE_INVALID,
    "action `act_form` may not be dismissed; answer it instead"
)]
#[case::approval_dismiss_not_allowed(
    approval_request().with_dismissible(false),
    ApprovalResponse::dismiss(act("act_appr"), Revision::FIRST).into(),
    ErrorCode::ACTION_RESPONSE_INVALID,
    "action `act_appr` may not be dismissed; answer it instead"
)]
#[case::missing_decision(
    approval_request(),
    decide(vec![]),
    ErrorCode::ACTION_RESPONSE_INVALID,
    "action `act_appr`: no decision for tool call(s) `c1`, `c2`; \
     every call needs exactly one decision"
)]
#[case::unknown_call(
    approval_request(),
    decide(vec![ToolDecision::approve(call("c9"))]),
    ErrorCode::ACTION_RESPONSE_INVALID,
    "action `act_appr`: decision for unknown tool call `c9`; the calls are `c1`, `c2`"
)]
#[case::duplicate_decision(
    approval_request(),
    decide(vec![ToolDecision::approve(call("c1")), ToolDecision::reject(call("c1"))]),
    ErrorCode::ACTION_RESPONSE_INVALID,
    "action `act_appr`: tool call `c1` has more than one decision; give exactly one"
)]
#[case::decision_not_allowed(
    approval_request(),
    decide(vec![ToolDecision::approve(call("c1")),
                ToolDecision::edit(call("c2"), json!({"cmd": "rm -rf /"}))]),
    ErrorCode::ACTION_RESPONSE_INVALID,
    "action `act_appr`: `edit` is not allowed for tool call `c2`; allowed: `approve`, `reject`"
)]
#[case::invalid_edited_arguments(
    approval_request(),
    decide(vec![ToolDecision::edit(call("c1"), json!({"path": "", "lines": 0, "mode": "w"})),
                ToolDecision::approve(call("c2"))]),
    ErrorCode::ACTION_RESPONSE_INVALID,
    "action `act_appr`: edited arguments for tool call `c1` (`read_file`) do not match the \
     tool's input schema: "
)]
fn refused_answers(
    #[case] request: ActionRequest,
    #[case] response: ActionResponse,
    #[case] code: ErrorCode,
    #[case] message: &str,
) {
    let err = request.validate(response).unwrap_err();
    assert_eq!(err.code(), code, "{err}");
    assert!(err.to_string().starts_with(message), "{err}");
    let harness = HarnessError::from(err.clone());
    assert_eq!(harness.category(), ErrorCategory::Configuration);
    assert_eq!(harness.code(), &code);
    assert_eq!(harness.message(), err.to_string());
    assert!(!harness.retryable());
}

#[test]
fn edited_arguments_are_revalidated_with_every_pointer() {
    let err = approval_request()
        .validate(decide(vec![
            ToolDecision::edit(call("c1"), json!({"path": "", "lines": 0, "mode": "w"})),
            ToolDecision::approve(call("c2")),
        ]))
        .unwrap_err();
    let ActionResponseError::InvalidEditedArguments {
        call_id,
        tool,
        violations,
        ..
    } = &err
    else {
        panic!("unexpected {err:?}");
    };
    assert_eq!((call_id.as_str(), tool.as_str()), ("c1", "read_file"));
    let mut pointers: Vec<_> = violations.iter().map(|v| v.pointer.as_str()).collect();
    pointers.sort_unstable();
    assert_eq!(pointers, ["", "/lines", "/path"], "{violations:?}");
    let keywords: BTreeSet<_> = violations
        .iter()
        .map(|v| v.keyword_location.as_str())
        .collect();
    assert!(
        keywords.contains("/properties/path/minLength"),
        "{keywords:?}"
    );
    assert!(keywords.contains("/additionalProperties"), "{keywords:?}");
    let text = err.to_string();
    assert!(
        text.contains("at `/path`") && text.contains("at `/lines`"),
        "{text}"
    );
    assert!(text.contains("at the root"), "{text}");
    assert!(
        !text.contains("\"w\""),
        "the submitted value is masked: {text}"
    );

    let missing = approval_request()
        .validate(decide(vec![
            ToolDecision::edit(call("c1"), json!({"lines": 3})),
            ToolDecision::approve(call("c2")),
        ]))
        .unwrap_err();
    assert!(
        missing
            .to_string()
            .contains("\"path\" is a required property"),
        "{missing}"
    );
}

#[test]
fn a_valid_edit_is_accepted_and_decisions_come_back_in_request_order() {
    let validated = approval_request()
        .validate_approval(
            ApprovalResponse::decide(
                act("act_appr"),
                Revision::FIRST,
                [
                    ToolDecision::reject_because(call("c2"), "not now"),
                    ToolDecision::edit(call("c1"), json!({"path": "/tmp/a", "lines": 5})),
                ],
            )
            .with_idempotency_key("k-1".parse().unwrap()),
        )
        .unwrap();
    let order: Vec<_> = validated
        .decisions()
        .unwrap()
        .iter()
        .map(|d| d.call_id.as_str())
        .collect();
    assert_eq!(order, ["c1", "c2"]);
    assert_eq!(
        validated.decision_for(&call("c1")),
        Some(&Decision::Edit {
            arguments: json!({"path": "/tmp/a", "lines": 5})
        })
    );
    assert!(!validated.is_dismissed());
    assert_eq!(
        serde_json::to_value(validated.resolution()).unwrap(),
        json!({
            "actionId": "act_appr",
            "revision": 1,
            "actionType": "tool_approval",
            "idempotencyKey": "k-1",
            "outcome": {"type": "decided", "calls": [
                {"callId": "c1", "decision": "edit"},
                {"callId": "c2", "decision": "reject", "reason": "not now"}
            ]}
        })
    );
}

#[test]
fn a_submitted_form_resolves_to_field_names_without_values() {
    let values = good_values()
        .with("password", "hunter2-secret")
        .with("color", Value::Null);
    let validated = form_request()
        .validate_form(FormResponse::submit(
            act("act_form"),
            Revision::FIRST,
            values.clone(),
        ))
        .unwrap();
    assert_eq!(validated.values(), Some(&values));
    let resolution = validated.resolution();
    assert_eq!(
        resolution.outcome,
        ResolutionOutcome::Submitted {
            fields: vec![
                name("nick"),
                name("age"),
                name("agree"),
                name("tags"),
                name("password")
            ],
        }
    );
    let wire = serde_json::to_string(&resolution).unwrap();
    assert!(!wire.contains("hunter2"), "{wire}");
    assert!(!wire.contains("ada"), "{wire}");
    assert_eq!(validated.into_answer(), FormAnswer::Submit(values));
}

#[test]
fn dismissing_resolves_as_dismissed() {
    let form = form_request()
        .validate(FormResponse::dismiss(act("act_form"), Revision::FIRST).into())
        .unwrap();
    assert!(form.resolution().is_dismissed());
    assert_eq!(form.resolution().action_type, ActionType::FormInput);
    let ValidatedResponse::Approval(approval) = approval_request()
        .validate(ApprovalResponse::dismiss(act("act_appr"), Revision::FIRST).into())
        .unwrap()
    else {
        panic!("an approval answer validates as an approval");
    };
    assert!(approval.is_dismissed() && approval.decisions().is_none());
    assert_eq!(
        serde_json::to_value(approval.resolution()).unwrap(),
        json!({"actionId": "act_appr", "revision": 1, "actionType": "tool_approval",
               "outcome": {"type": "dismissed"}})
    );
}

#[test]
fn untyped_response_accessors() {
    let r = ActionResponse::from(
        FormResponse::dismiss(act("a"), Revision::FIRST.next())
            .with_idempotency_key("k".parse().unwrap()),
    );
    assert_eq!(r.action_type(), ActionType::FormInput);
    assert_eq!(r.action_id().as_str(), "a");
    assert_eq!(r.revision().get(), 2);
    assert_eq!(r.idempotency_key().map(IdempotencyKey::as_str), Some("k"));
    assert!(r.is_dismiss() && r.as_form().is_some() && r.as_approval().is_none());
    let r = r.into_approval().unwrap_err();
    assert!(r.into_form().is_ok());
    let request = approval_request();
    assert!(request.as_approval().is_some() && request.as_form().is_none());
    assert_eq!(request.action_type(), ActionType::ToolApproval);
}

#[test]
fn public_types_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<ActionRequest>();
    assert_send_sync::<ActionResponse>();
    assert_send_sync::<ValidatedForm>();
    assert_send_sync::<ValidatedApproval>();
    assert_send_sync::<ActionResponseError>();
    assert_send_sync::<ToolCallApproval>();
}

// ----- properties ----------------------------------------------------------------------

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-z]{1,4}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn field_name_parse_matches_the_pattern(s in "\\PC{0,70}") {
        let expected = s.len() <= 64
            && s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        prop_assert_eq!(s.parse::<FieldName>().is_ok(), expected);
    }

    #[test]
    fn valid_field_names_round_trip(s in "[a-zA-Z][a-zA-Z0-9_]{0,63}") {
        let n: FieldName = s.parse().unwrap();
        let wire = serde_json::to_value(&n).unwrap();
        let back: FieldName = serde_json::from_value(wire).unwrap();
        prop_assert_eq!(back.as_str(), s.as_str());
    }

    #[test]
    fn text_length_bounds_hold(s in "\\PC{0,12}", min in 0u32..12, extra in 0u32..6) {
        let max = min + extra;
        let form = FormRequest::new([FormField::new(name("t"), "T", FieldKind::Text {
            min_length: Some(min), max_length: Some(max), pattern: None,
        })]).unwrap();
        let len = u32::try_from(s.chars().count()).unwrap();
        let ok = form.validate(&FormValues::new().with("t", s)).is_ok();
        prop_assert_eq!(ok, (min..=max).contains(&len));
    }

    #[test]
    fn number_bounds_hold(v in -1e9f64..1e9, a in -1e9f64..1e9, b in -1e9f64..1e9) {
        let (min, max) = if a <= b { (a, b) } else { (b, a) };
        let form = FormRequest::new([FormField::new(name("n"), "N", FieldKind::Number {
            minimum: Some(min), maximum: Some(max), integer: false,
        })]).unwrap();
        let ok = form.validate(&FormValues::new().with("n", v)).is_ok();
        prop_assert_eq!(ok, min <= v && v <= max);
    }

    #[test]
    fn form_validation_reports_each_unknown_name_once_and_never_panics(
        values in prop::collection::btree_map(
            prop_oneof![
                Just("nick".to_owned()), Just("age".to_owned()), Just("tags".to_owned()),
                "[a-z]{1,6}",
            ],
            arb_json(),
            0..8,
        )
    ) {
        let form = sample_form();
        let values = FormValues::from(values);
        let violations = form.validate(&values).err().unwrap_or_default();
        for n in values.names() {
            let unknown = violations
                .iter()
                .filter(|v| v.field == n && v.problem == FieldProblem::Unknown)
                .count();
            prop_assert_eq!(unknown, usize::from(form.field(n).is_none()));
        }
        for v in &violations {
            prop_assert!(form.field(&v.field).is_some() || values.get(&v.field).is_some());
        }
    }

    #[test]
    fn decisions_in_any_order_validate_iff_every_call_is_decided(
        n in 1usize..6,
        picks in prop::collection::vec((0usize..6, 0u8..3), 0..8),
    ) {
        let ids: Vec<ToolCallId> = (0..n).map(|i| call(&format!("c{i}"))).collect();
        let approval = ApprovalRequest::new(ids.iter().map(|id| {
            ToolCallApproval::new(id.clone(), "t", json!({}), json!({"type": "object"}))
                .unwrap()
                .allow_edit()
        }))
        .unwrap();
        let request = ActionRequest::approval(approval).with_id(act("a"));
        let mut seen = BTreeSet::new();
        let decisions: Vec<ToolDecision> = picks
            .iter()
            .filter(|(i, _)| *i < n && seen.insert(*i))
            .map(|&(i, k)| match k {
                0 => ToolDecision::approve(ids[i].clone()),
                1 => ToolDecision::reject(ids[i].clone()),
                _ => ToolDecision::edit(ids[i].clone(), json!({"k": i})),
            })
            .collect();
        let result = request.validate_approval(
            ApprovalResponse::decide(act("a"), Revision::FIRST, decisions));
        if seen.len() == n {
            let validated = result.unwrap();
            let order: Vec<_> =
                validated.decisions().unwrap().iter().map(|d| d.call_id.clone()).collect();
            prop_assert_eq!(order, ids);
        } else {
            let missing: Vec<_> =
                ids.iter()
                    .enumerate()
                    .filter(|(i, _)| !seen.contains(i))
                    .map(|(_, id)| id.clone())
                    .collect();
            prop_assert_eq!(result.unwrap_err(), ActionResponseError::MissingDecision {
                action: act("a"),
                calls: missing,
            });
        }
    }
}

#[test]
fn the_answer_helpers_validate_against_the_request_they_answer() {
    let approval = approval_request();
    let decided = |response: ActionResponse| -> Vec<(String, DecisionKind)> {
        let ValidatedResponse::Approval(v) = approval.validate(response).expect("valid") else {
            panic!("an approval");
        };
        let ApprovalAnswer::Decide(decisions) = v.into_answer() else {
            panic!("decided");
        };
        decisions
            .into_iter()
            .map(|d| (d.call_id.to_string(), d.decision.kind()))
            .collect()
    };
    use DecisionKind::{Approve, Edit, Reject};
    let all = |k| vec![("c1".to_owned(), k), ("c2".to_owned(), k)];
    assert_eq!(decided(approval.approve_all()), all(Approve));
    assert_eq!(decided(approval.reject_all("no")), all(Reject));
    assert_eq!(
        decided(approval.reject(&call("c2"), "not that one")),
        [("c1".to_owned(), Approve), ("c2".to_owned(), Reject)]
    );
    assert_eq!(
        decided(approval.edit(&call("c1"), json!({"path": "/etc/hostname"}))),
        [("c1".to_owned(), Edit), ("c2".to_owned(), Approve)]
    );
    // An edit is revalidated: arguments the schema refuses fail the answer.
    assert!(
        approval
            .validate(approval.edit(&call("c1"), json!({"path": 7})))
            .is_err()
    );
    assert!(approval.validate(approval.dismiss()).is_ok());

    let form = form_request();
    assert!(form.validate(form.submit(good_values())).is_ok());
    assert!(form.validate(form.submit(FormValues::new())).is_err());
    assert!(form.validate(form.dismiss()).is_ok());
    // A helper of the other kind is refused as the wrong kind, not accepted.
    assert!(matches!(
        form.validate(form.approve_all()),
        Err(ActionResponseError::KindMismatch { .. })
    ));
}
