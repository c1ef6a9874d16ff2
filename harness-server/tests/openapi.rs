//! The OpenAPI document: the committed copy is the generated one, every reference in it
//! resolves, the server serves it, and real answers of a live server, success and error,
//! fit the statuses and schemas it documents.
//!
//! `UPDATE_OPENAPI=1 cargo test -p harness-server --test openapi` rewrites the committed copy
//! after an intended change.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

mod support;

use harness_core::action::ActionRequest;
use harness_core::store::MemoryStore;
use harness_scripted::{ApprovalCall, Script, ScriptedOptions};
use serde_json::{Value, json};

const TOKEN: &str = "alice-token-0123456789";

/// `value` with every object's keys sorted: the committed file must not depend on whether
/// some crate in the build turns on serde_json's `preserve_order`.
fn canonical(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, canonical(v)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(canonical).collect()),
        other => other,
    }
}

fn rendered() -> String {
    serde_json::to_string_pretty(&canonical(harness_server::openapi::document())).unwrap() + "\n"
}

/// Every integer a request body may hold, where the document bounds it by a format
/// (`uint32`, `uint64`, ...), also states the largest value the server accepts: without
/// `maximum`, a client (schemathesis found one) sends a schema-valid number the server
/// refuses as out of range.
#[test]
fn every_sized_integer_a_request_sends_states_its_maximum() {
    fn walk(
        doc: &Value,
        value: &Value,
        path: &str,
        seen: &mut Vec<String>,
        missing: &mut Vec<String>,
    ) {
        match value {
            Value::Object(map) => {
                if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
                    if !seen.iter().any(|r| r == reference) {
                        seen.push(reference.to_owned());
                        let target = doc.pointer(reference.trim_start_matches('#')).unwrap();
                        walk(doc, target, reference, seen, missing);
                    }
                    return;
                }
                let limit = match map.get("format").and_then(Value::as_str) {
                    Some("uint8") => Some(u64::from(u8::MAX)),
                    Some("uint16") => Some(u64::from(u16::MAX)),
                    Some("uint32") => Some(u64::from(u32::MAX)),
                    Some("uint64" | "uint") => Some(u64::MAX),
                    _ => None,
                };
                if let Some(limit) = limit {
                    match map.get("maximum").and_then(Value::as_u64) {
                        Some(max) if max <= limit => {}
                        other => {
                            missing.push(format!("{path}: maximum {other:?}, at most {limit}"));
                        }
                    }
                }
                for (key, child) in map {
                    walk(doc, child, &format!("{path}/{key}"), seen, missing);
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    walk(doc, child, &format!("{path}/{i}"), seen, missing);
                }
            }
            _ => {}
        }
    }
    let doc = harness_server::openapi::document();
    let (mut seen, mut missing) = (Vec::new(), Vec::new());
    let mut bodies = 0;
    for (route, operations) in doc["paths"].as_object().unwrap() {
        for (method, operation) in operations.as_object().unwrap() {
            if let Some(content) = operation["requestBody"]["content"].as_object() {
                for (media, body) in content {
                    bodies += 1;
                    let path = format!("{method} {route} {media}");
                    walk(&doc, &body["schema"], &path, &mut seen, &mut missing);
                }
            }
        }
    }
    assert!(bodies >= 3, "the document's request bodies were found");
    assert!(
        seen.iter().any(|r| r.ends_with("/RunLimits")),
        "the start request's limits are among them: {seen:?}"
    );
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn the_committed_document_is_the_generated_one() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
    let fresh = rendered();
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &fresh).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "{} has drifted from the code: run `UPDATE_OPENAPI=1 cargo test -p harness-server \
         --test openapi` and commit the result",
        path.display()
    );
}

/// Every `$ref` under `value`.
fn references<'a>(value: &'a Value, found: &mut Vec<&'a str>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(target)) = map.get("$ref") {
                found.push(target);
            }
            map.values().for_each(|v| references(v, found));
        }
        Value::Array(items) => items.iter().for_each(|v| references(v, found)),
        _ => {}
    }
}

#[test]
fn every_reference_resolves_and_every_schema_is_valid_2020_12() {
    let document = harness_server::openapi::document();
    let mut found = Vec::new();
    references(&document, &mut found);
    assert!(found.len() > 20, "{found:?}");
    for target in found {
        let pointer = target
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("{target} is not local"));
        assert!(
            document.pointer(pointer).is_some(),
            "{target} resolves to nothing"
        );
    }
    let schemas = document["components"]["schemas"].as_object().unwrap();
    for name in [
        "StartExecution",
        "ExecutionView",
        "EventPage",
        "AnswerBody",
        "ErrorBody",
    ] {
        assert!(schemas.contains_key(name), "no component {name}");
    }
    for (name, schema) in schemas {
        if let Err(e) = jsonschema::meta::validate(schema) {
            panic!("component {name} is not a valid schema: {e}");
        }
    }
    let mut ids = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let id = operation["operationId"].as_str();
            assert!(id.is_some(), "{method} {path} has no operationId");
            ids.push(id.unwrap().to_owned());
            assert!(
                operation["responses"]
                    .as_object()
                    .is_some_and(|r| !r.is_empty()),
                "{method} {path} documents no response"
            );
        }
    }
    let count = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), count, "operation ids repeat");
}

/// Checks `body` (answered with `status` by `method path`) against the document: the
/// status is documented (or the operation has a `default`), and a JSON body fits its
/// schema.
struct Checker {
    document: Value,
    checked: Vec<String>,
}

impl Checker {
    fn operation(&self, method: &str, path: &str) -> (&str, &Value) {
        let path = path.split('?').next().unwrap_or_default();
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let paths = self.document["paths"].as_object().unwrap();
        for (template, item) in paths {
            let parts: Vec<&str> = template.trim_start_matches('/').split('/').collect();
            let fits = parts.len() == segments.len()
                && parts
                    .iter()
                    .zip(&segments)
                    .all(|(t, s)| t.starts_with('{') || t == s);
            if fits && let Some(operation) = item.get(method) {
                return (template, operation);
            }
        }
        panic!("{method} {path} is not in the document");
    }

    fn check(&mut self, method: &str, path: &str, status: u16, body: &Value) {
        let (template, operation) = self.operation(method, path);
        let responses = &operation["responses"];
        let response = responses
            .get(status.to_string())
            .or_else(|| responses.get("default"))
            .unwrap_or_else(|| panic!("{method} {template} does not document {status}"));
        let checked = format!("{method} {template} {status}");
        let Some(schema) = response
            .pointer("/content/application~1json/schema")
            .cloned()
        else {
            self.checked.push(checked);
            return;
        };
        self.checked.push(checked);
        let mut root = schema;
        root["components"] = self.document["components"].clone();
        let validator = jsonschema::draft202012::new(&root).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(body)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{method} {path} answered {status} with a body the document does not describe: \
             {errors:?}\n{body}"
        );
    }
}

#[tokio::test]
async fn real_answers_fit_the_document() {
    let url = support::serve(Arc::new(MemoryStore::new()), "r1", &[("alice", TOKEN)]).await;
    let http = reqwest::Client::new();
    let mut checker = Checker {
        document: harness_server::openapi::document(),
        checked: Vec::new(),
    };
    let mut call =
        async |method: &str, path: &str, token: bool, body: Option<Value>, key: Option<&str>| {
            let mut request = http.request(method.parse().unwrap(), format!("{url}{path}"));
            if let Some(key) = key {
                request = request.header("idempotency-key", key);
            }
            if token {
                request = request.bearer_auth(TOKEN);
            }
            if let Some(body) = body {
                request = request.json(&body);
            }
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let text = response.text().await.unwrap();
            let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
            checker.check(&method.to_lowercase(), path, status, &body);
            (status, body)
        };

    let served = call("GET", "/v1/openapi.json", false, None, None).await.1;
    assert_eq!(served, harness_server::openapi::document());

    let script = Script::builder()
        .text("before ")
        .approval([ApprovalCall::new(
            "call_1".parse().unwrap(),
            "write_file",
            json!({"path": "a.txt"}),
        )])
        .artifact("text/plain", "notes.txt", "file:///workspace/notes.txt")
        .complete("done")
        .build();
    let request = json!({
        "adapter": "scripted",
        "message": "go",
        "options": ScriptedOptions::with_script(script).to_value(),
    });
    let (status, view) = call(
        "POST",
        "/v1/executions",
        true,
        Some(request.clone()),
        Some("openapi-1"),
    )
    .await;
    assert_eq!(status, 201, "{view}");
    let id = view["id"].as_str().unwrap().to_owned();
    assert_eq!(
        call(
            "POST",
            "/v1/executions",
            true,
            Some(request),
            Some("openapi-1")
        )
        .await
        .0,
        200
    );
    let action = loop {
        let (_, view) = call("GET", &format!("/v1/executions/{id}"), true, None, None).await;
        if let Some(action) = view["pendingActions"].get(0) {
            break serde_json::from_value::<ActionRequest>(action.clone()).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // The path names the action: the body may leave `actionId` out.
    let mut approve = serde_json::to_value(action.approve_all()).unwrap();
    approve.as_object_mut().unwrap().remove("actionId");
    let answer_path = format!("/v1/executions/{id}/actions/{}", action.id);
    let (status, body) = call("POST", &answer_path, true, Some(approve.clone()), None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        call("POST", &answer_path, true, Some(approve), None)
            .await
            .0,
        409
    );
    let events = loop {
        let (_, page) = call(
            "GET",
            &format!("/v1/executions/{id}/events"),
            true,
            None,
            None,
        )
        .await;
        if page["ended"] == true {
            break page;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(events["events"].as_array().unwrap().len() > 4, "{events}");
    let (_, ended) = call("GET", &format!("/v1/executions/{id}"), true, None, None).await;
    assert_eq!(ended["artifacts"][0]["name"], "notes.txt", "{ended}");
    assert!(ended["outcome"].is_object(), "{ended}");
    assert_eq!(
        call(
            "POST",
            &format!("/v1/executions/{id}/cancel"),
            true,
            Some(json!({"reason": "late"})),
            None
        )
        .await
        .0,
        202
    );
    call("GET", "/v1/executions?limit=5", true, None, None).await;
    // Waits: the ended one, a paused one, one that runs out, and a refused one.
    let (status, waited) = call(
        "GET",
        &format!("/v1/executions/{id}/wait?timeout=2s"),
        true,
        None,
        None,
    )
    .await;
    assert_eq!(
        (status, &waited["status"]),
        (200, &json!("ended")),
        "{waited}"
    );
    let (status, paused) = call(
        "POST",
        "/v1/executions?wait=5s",
        true,
        Some(json!({"adapter": "scripted", "message": "summarize"})),
        None,
    )
    .await;
    assert_eq!(
        (status, &paused["status"]),
        (201, &json!("awaiting_action")),
        "{paused}"
    );
    let slow = Script::builder()
        .delay(Duration::from_secs(2))
        .complete("ok")
        .build();
    let slow = json!({"adapter": "scripted", "message": "go",
        "options": ScriptedOptions::with_script(slow).to_value()});
    let (status, running) = call("POST", "/v1/executions?wait=0", true, Some(slow), None).await;
    assert_eq!(
        (status, &running["status"]),
        (201, &json!("timed_out")),
        "{running}"
    );
    assert_eq!(
        call(
            "GET",
            &format!("/v1/executions/{id}/wait?timeout=1h"),
            true,
            None,
            None
        )
        .await
        .0,
        400
    );
    call("GET", "/v1/adapters", true, None, None).await;
    call("GET", "/v1/adapters/scripted", true, None, None).await;
    call("GET", "/readyz", false, None, None).await;
    call("GET", "/healthz", false, None, None).await;

    // Errors fit too.
    assert_eq!(
        call("GET", "/v1/executions", false, None, None).await.0,
        401
    );
    assert_eq!(
        call("GET", "/v1/executions/exec_missing000000", true, None, None)
            .await
            .0,
        404
    );
    assert_eq!(
        call("GET", "/v1/executions?limit=0", true, None, None)
            .await
            .0,
        400
    );
    assert_eq!(
        call(
            "POST",
            "/v1/executions",
            true,
            Some(json!({"adapter": "nope", "message": "x"})),
            None
        )
        .await
        .0,
        404
    );
    assert_eq!(
        call(
            "POST",
            "/v1/executions",
            true,
            Some(json!({"adapter": "scripted", "mesage": "x"})),
            None
        )
        .await
        .0,
        400
    );
    assert_eq!(
        call("GET", "/v1/adapters/nope", true, None, None).await.0,
        404
    );
    assert!(checker.checked.len() >= 20, "{:?}", checker.checked);
}
