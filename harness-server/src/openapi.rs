//! The API's OpenAPI 3.1 document, generated from the types the handlers read and write.
//!
//! The component schemas are the wire types' own [`JsonSchema`] derivations (the same ones
//! committed under `schemas/`), so the document cannot describe a body other than the one
//! the code parses or returns; the operations are listed here, beside the router. The
//! committed copy is `harness-server/openapi.json` (`UPDATE_OPENAPI=1 cargo test -p
//! harness-server --test openapi` rewrites it), and the server serves this document at
//! `GET /v1/openapi.json` without authentication: it says nothing of any caller's data.
//!
//! Why not utoipa: its `ToSchema` is a second derivation of every wire type, which could
//! disagree with the schemars one that `schemas/` and the adapters' option schemas use.
//!
//! ```
//! let document = harness_server::openapi::document();
//! assert_eq!(document["openapi"], "3.1.0");
//! assert!(document["paths"]["/v1/executions/{id}/events"]["get"].is_object());
//! ```

use harness_core::action::ActionResponse;
use harness_core::event::Event;
use harness_core::id::{ActionId, AdapterId, ExecutionId, IdempotencyKey};
use harness_core::manifest::HarnessDescriptor;
use harness_core::service::ExecutionRequest;
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Map, Value, json};

use crate::view::{
    Answered, CancelAnswer, ErrorBody, EventPage, ExecutionPage, ExecutionView, Readiness,
};

/// `GET /v1/adapters`: the instances' manifests.
#[derive(JsonSchema)]
#[allow(dead_code)] // only its schema is used: the handler writes the stored manifests
struct AdapterList {
    adapters: Vec<HarnessDescriptor>,
    /// Each instance's health, by instance id.
    health: std::collections::BTreeMap<String, crate::view::InstanceHealth>,
}

/// `POST /v1/executions/{id}/cancel`'s optional body.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // the handler's own `CancelBody` parses it
struct CancelRequest {
    /// Why (at most 512 characters; redacted before it is stored).
    #[schemars(length(max = 512))]
    reason: Option<String>,
}

/// The OpenAPI 3.1 document of every endpoint (see the [module docs](self)).
#[must_use]
pub fn document() -> Value {
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = "/components/schemas".into();
    settings.meta_schema = None;
    let mut g = settings.into_generator();
    let error = sub::<ErrorBody>(&mut g);
    let view = sub::<ExecutionView>(&mut g);
    let request = sub::<ExecutionRequest>(&mut g);
    let answer = sub::<ActionResponse>(&mut g);
    let list = sub::<ExecutionPage>(&mut g);
    let page = sub::<EventPage>(&mut g);
    let answered = sub::<Answered>(&mut g);
    let cancel_request = sub::<CancelRequest>(&mut g);
    let cancelled = sub::<CancelAnswer>(&mut g);
    let adapters = sub::<AdapterList>(&mut g);
    let manifest = sub::<HarnessDescriptor>(&mut g);
    let readiness = sub::<Readiness>(&mut g);
    let execution_id = sub::<ExecutionId>(&mut g);
    let action_id = sub::<ActionId>(&mut g);
    let adapter_id = sub::<AdapterId>(&mut g);
    let key = sub::<IdempotencyKey>(&mut g);
    let event = sub::<Event>(&mut g);
    let waited = sub::<crate::wait::Waited>(&mut g);
    let file = sub::<crate::files::FileView>(&mut g);
    let file_id = sub::<harness_core::file::FileId>(&mut g);
    let mut schemas = g.take_definitions(true);
    let (Some(request_name), Some(answer_name)) = (name(&request), name(&answer)) else {
        unreachable!("named types are referenced, not inlined")
    };
    let start = start_schema(&schemas[request_name]);
    let body = answer_schema(&schemas[answer_name]);
    schemas.insert("StartExecution".into(), start);
    schemas.insert("InputFile".into(), input_file());
    schemas.insert("AnswerBody".into(), body);
    let start = json!({"$ref": "#/components/schemas/StartExecution"});
    let answer = json!({"$ref": "#/components/schemas/AnswerBody"});

    let failure = |status: &str, why: &str| {
        (
            status.to_owned(),
            json!({"description": why, "content": {"application/json": {"schema": error}}}),
        )
    };
    let errors = |statuses: &[(&str, &str)]| -> Map<String, Value> {
        let mut map: Map<String, Value> = statuses
            .iter()
            .map(|(status, why)| failure(status, why))
            .collect();
        let (status, value) = failure(
            "401",
            "no principal: a missing, malformed or unknown bearer token",
        );
        map.insert(status, value);
        let (status, value) = failure(
            "default",
            "any other error, its status chosen by code, else by category",
        );
        map.insert(status, value);
        map
    };
    let ok = |description: &str, schema: &Value| json!({"description": description, "content": {"application/json": {"schema": schema}}});
    let id = json!({
        "name": "id", "in": "path", "required": true,
        "description": "The execution id.", "schema": execution_id
    });
    let json_body = |schema: &Value, required: bool| json!({"required": required, "content": {"application/json": {"schema": schema}}});
    // A server-sent event as a client's parser yields it (what schemathesis checks each
    // event against): `data` is the JSON text of `data_schema`.
    let frame = |id: &str, kind: bool, data_schema: &Value| {
        let mut properties = json!({
            "id": {"type": "string", "pattern": id},
            "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": data_schema},
        });
        if kind {
            properties["event"] = json!({"type": "string"});
        }
        json!({"type": "object", "required": ["id", "data"], "properties": properties})
    };
    let execution_frame = frame("^[0-9]+$", true, &event);
    let agui_frame = frame(
        "^[0-9]+:[0-9]+$",
        false,
        &json!({"type": "object", "required": ["type"]}),
    );
    let not_found = ("404", "no such execution (or another principal's)");
    let invalid = (
        "400",
        "the request is malformed; the message names what is wrong",
    );
    let too_large = ("413", "the body is larger than the server accepts");

    let mut start_responses = errors(&[
        invalid,
        (
            "403",
            "a skill asked for is blocked by the operator (SKILL_BLOCKED)",
        ),
        (
            "404",
            "no adapter instance of that id, no uploaded file of a `fileId` for this \
             principal, or no skill of that name offered to this principal (SKILL_NOT_FOUND)",
        ),
        (
            "409",
            "the idempotency key was used for a different request",
        ),
        too_large,
        (
            "415",
            "a file's content is not its declared type, or of no type taken",
        ),
        (
            "422",
            "the options, required capabilities (skills included) or files' modalities are \
             not supported, the model is not offered (MODEL_NOT_ALLOWED), or the prompt \
             parameters do not fit the instance's prompt (PROMPT_PARAMETER_INVALID)",
        ),
        (
            "503",
            "no capacity for another execution now (see Retry-After)",
        ),
    ]);
    // Links: where a started execution's id goes next (clients and schemathesis's stateful
    // phase follow them).
    let by_id = |operation: &str| json!({"operationId": operation, "parameters": {"id": "$response.body#/id"}});
    let started_links = json!({
        "readExecution": by_id("readExecution"),
        "waitExecution": by_id("waitExecution"),
        "executionEvents": by_id("executionEvents"),
        "cancelExecution": by_id("cancelExecution"),
    });
    // With `?wait=`, what the wait found instead of the view.
    let view_or_waited = json!({"anyOf": [view, waited]});
    let mut started = ok(
        "the execution, started (with `wait`, what the wait found)",
        &view_or_waited,
    );
    started["links"] = started_links.clone();
    let mut replayed = ok(
        "the execution the idempotency key started earlier (with `wait`, what the wait found)",
        &view_or_waited,
    );
    replayed["links"] = started_links;
    start_responses.insert("201".into(), started);
    start_responses.insert("200".into(), replayed);

    let mut list_responses = errors(&[invalid]);
    list_responses.insert(
        "200".into(),
        ok("a page of the caller's executions, newest first", &list),
    );

    let mut read_responses = errors(&[not_found]);
    let mut read_ok = ok("the execution", &view);
    read_ok["links"] = json!({"answerAction": {
        "operationId": "answerAction",
        "parameters": {"id": "$response.body#/id", "actionId": "$response.body#/pendingActions/0/id"},
    }});
    read_responses.insert("200".into(), read_ok);

    let mut events_responses = errors(&[invalid, not_found]);
    let mut events_ok = ok("a page of stored events after the cursor", &page);
    events_ok["content"]["text/event-stream"] = json!({"schema": execution_frame});
    events_ok["description"] = json!(
        "with `Accept: text/event-stream`, server-sent events (`id: <seq>`, `event: <kind>`, \
         `data: <event JSON>`) ending after the terminal event; otherwise a JSON page"
    );
    events_responses.insert("200".into(), events_ok);

    let mut wait_responses = errors(&[invalid, not_found]);
    wait_responses.insert(
        "200".into(),
        ok(
            "what the wait found: the execution ended, waits for an answer, or still runs",
            &waited,
        ),
    );
    // A wait the document allows is within the default maximum (60 s); a server whose
    // operator set a smaller one refuses more, naming it.
    let duration = json!({
        "type": "string",
        "pattern": "^(([0-9]|[1-5][0-9]|60)s?|[0-9]{1,4}ms)$",
        "examples": ["30s", "500ms"],
    });

    let mut answer_responses = errors(&[
        invalid,
        ("404", "no such execution, or it requested no such action"),
        (
            "409",
            "the action is resolved already, the answer is stale, or the run has ended",
        ),
        too_large,
        ("422", "the answer does not fit the action"),
    ]);
    answer_responses.insert("200".into(), ok("the answer was applied", &answered));

    let mut cancel_responses = errors(&[invalid, not_found, too_large]);
    cancel_responses.insert(
        "202".into(),
        ok(
            "cancellation requested (or it was already, or the run has ended)",
            &cancelled,
        ),
    );

    let mut agui_responses = errors(&[
        invalid,
        (
            "404",
            "no adapter instance of that id, or no such interrupt",
        ),
        too_large,
        ("422", "a resume entry does not fit its interrupt"),
        (
            "503",
            "no capacity for another execution now (see Retry-After)",
        ),
    ]);
    agui_responses.insert(
        "200".into(),
        json!({
            "description": "AG-UI events; each frame's id (`<seq>:<n>`) resumes as Last-Event-ID",
            "content": {"text/event-stream": {"schema": agui_frame}},
        }),
    );

    let file_not_found = (
        "404",
        "no such uploaded file (or another principal's, or expired)",
    );
    let mut upload_responses = errors(&[
        invalid,
        (
            "404",
            "this server keeps no uploaded files (give them inline)",
        ),
        (
            "413",
            "the file is larger than the operator's limit (`[files] max_file_bytes`)",
        ),
        (
            "415",
            "no `Content-Type`, or the content is not the declared type or of no type taken",
        ),
        (
            "503",
            "too many uploads are being read now (see Retry-After)",
        ),
    ]);
    let mut uploaded = ok("the file, kept as the caller's until `expiresAt`", &file);
    uploaded["links"] = json!({"readFile": {"operationId": "readFile", "parameters": {"id": "$response.body#/id"}}});
    upload_responses.insert("201".into(), uploaded);
    let mut file_responses = errors(&[file_not_found]);
    file_responses.insert(
        "200".into(),
        ok("the file's metadata (never its bytes)", &file),
    );
    let mut delete_file_responses = errors(&[file_not_found]);
    delete_file_responses.insert("204".into(), json!({"description": "deleted"}));
    let file_param = json!({
        "name": "id", "in": "path", "required": true,
        "description": "The uploaded file's id.", "schema": file_id
    });

    let mut adapters_responses = errors(&[]);
    adapters_responses.insert(
        "200".into(),
        ok("every adapter instance's manifest", &adapters),
    );
    let mut adapter_responses = errors(&[("404", "no adapter instance of that id")]);
    adapter_responses.insert("200".into(), ok("the instance's manifest", &manifest));

    let limit = |default: u64, max: u64| json!({"type": "integer", "minimum": 1, "maximum": max, "default": default});
    let header = |name: &str, description: &str, schema: Value| json!({"name": name, "in": "header", "required": false, "description": description, "schema": schema});

    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "harness Runtime API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Executions on adapter instances: start, read, stream (resumable \
                server-sent events), answer actions, cancel. Every `/v1` path needs a bearer \
                token; another principal's execution is `404` like a missing one.",
        },
        "security": [{"bearer": []}],
        "paths": {
            "/v1/executions": {
                "post": {
                    "operationId": "startExecution",
                    "summary": "Start an execution",
                    "parameters": [
                        {"name": "wait", "in": "query", "description": "Start the execution for its outcome and wait this long for it to end or pause on an action (at most the server's maximum, 60 s by default): the answer is then what the wait found.", "schema": duration},
                        header("Idempotency-Key", "An equivalent request with this key returns the original execution (`200`); a different one is `409`.", json!(key)),
                        header("traceparent", "The caller's W3C trace context; one that does not parse is ignored, as W3C Trace Context says.", json!({"type": "string"})),
                    ],
                    "requestBody": json_body(&start, true),
                    "responses": start_responses,
                },
                "get": {
                    "operationId": "listExecutions",
                    "summary": "The caller's executions, newest first",
                    "parameters": [
                        {"name": "limit", "in": "query", "schema": limit(50, 200)},
                        {"name": "before", "in": "query", "description": "The `next` of the previous page.", "schema": {"type": "string", "pattern": "^[0-9]{1,19}$"}},
                    ],
                    "responses": list_responses,
                },
            },
            "/v1/executions/{id}": {
                "get": {
                    "operationId": "readExecution",
                    "summary": "State, pending actions, artifacts, outcome",
                    "parameters": [id],
                    "responses": read_responses,
                },
            },
            "/v1/executions/{id}/wait": {
                "get": {
                    "operationId": "waitExecution",
                    "summary": "Wait for the execution to end or pause on an action; its outcome so far",
                    "parameters": [
                        id,
                        {"name": "timeout", "in": "query", "description": "How long to wait (30 s by default, at most the server's maximum, 60 s by default).", "schema": duration},
                    ],
                    "responses": wait_responses,
                },
            },
            "/v1/executions/{id}/events": {
                "get": {
                    "operationId": "executionEvents",
                    "summary": "The execution's events: server-sent events or a JSON page",
                    "parameters": [
                        id,
                        {"name": "after", "in": "query", "description": "Events after this sequence number.", "schema": {"type": "integer", "minimum": 0, "maximum": u64::MAX, "default": 0}},
                        {"name": "limit", "in": "query", "description": "The page size (JSON pages only).", "schema": limit(1000, crate::events::PAGE as u64)},
                        header("Last-Event-ID", "Resume after this sequence number (wins over `after`).", json!({"type": "string", "pattern": "^ *[0-9]{1,19} *$"})),
                    ],
                    "responses": events_responses,
                },
            },
            "/v1/executions/{id}/actions/{actionId}": {
                "post": {
                    "operationId": "answerAction",
                    "summary": "Answer an action (at most once)",
                    "parameters": [
                        id,
                        {"name": "actionId", "in": "path", "required": true, "description": "The action id.", "schema": action_id},
                    ],
                    "requestBody": json_body(&answer, true),
                    "responses": answer_responses,
                },
            },
            "/v1/executions/{id}/cancel": {
                "post": {
                    "operationId": "cancelExecution",
                    "summary": "Request cancellation, confirmed by `run.cancelled` on the stream",
                    "parameters": [id],
                    "requestBody": json_body(&cancel_request, false),
                    "responses": cancel_responses,
                },
            },
            "/v1/files": {
                "post": {
                    "operationId": "uploadFile",
                    "summary": "Upload a file a start request then names by id",
                    "parameters": [
                        {"name": "name", "in": "query", "description": "The file's display name (`upload` if left out): no control characters.", "schema": {"type": "string", "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]{1,255}$"}},
                    ],
                    "requestBody": {"required": true, "description": "The file's bytes, as they are (any body: the content decides its type, `Content-Type` declares it); or a `multipart/form-data` form of one part named `file` (its `filename` the display name unless `?name=` is given, its `Content-Type` the declared type).", "content": {
                        "multipart/form-data": {"schema": {"type": "object", "required": ["file"], "additionalProperties": false, "properties": {"file": {"type": "string", "contentMediaType": "application/octet-stream"}}}},
                        "*/*": {"schema": {}},
                    }},
                    "responses": upload_responses,
                },
            },
            "/v1/files/{id}": {
                "get": {
                    "operationId": "readFile",
                    "summary": "An uploaded file's metadata",
                    "parameters": [file_param],
                    "responses": file_responses,
                },
                "delete": {
                    "operationId": "deleteFile",
                    "summary": "Delete an uploaded file",
                    "parameters": [file_param],
                    "responses": delete_file_responses,
                },
            },
            "/v1/agui/{adapter}": {
                "post": {
                    "operationId": "aguiRun",
                    "summary": "An AG-UI run: RunAgentInput in, AG-UI events out",
                    "parameters": [
                        {"name": "adapter", "in": "path", "required": true, "description": "The adapter instance id.", "schema": adapter_id, "example": "scripted"},
                        header("Last-Event-ID", "Resume after this AG-UI frame id (`<seq>:<n>`).", json!({"type": "string", "pattern": "^ *[0-9]{1,19}(:[0-9]{1,9})? *$"})),
                    ],
                    "requestBody": json_body(&run_agent_input(&key), true),
                    "responses": agui_responses,
                },
            },
            "/v1/adapters": {
                "get": {
                    "operationId": "listAdapters",
                    "summary": "The adapter instances' manifests, options schemas included",
                    "responses": adapters_responses,
                },
            },
            "/v1/adapters/{id}": {
                "get": {
                    "operationId": "readAdapter",
                    "summary": "One adapter instance's manifest",
                    "parameters": [{"name": "id", "in": "path", "required": true, "description": "The adapter instance id.", "schema": adapter_id, "example": "scripted"}],
                    "responses": adapter_responses,
                },
            },
            "/v1/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "This document",
                    "security": [],
                    "responses": {"200": {"description": "the OpenAPI document", "content": {"application/json": {"schema": {"type": "object"}}}}},
                },
            },
            "/healthz": {
                "get": {
                    "operationId": "health",
                    "summary": "`200` while the process serves",
                    "security": [],
                    "responses": {"200": {"description": "serving", "content": {"text/plain": {"schema": {"type": "string"}}}}},
                },
            },
            "/readyz": {
                "get": {
                    "operationId": "ready",
                    "summary": "Whether every required health check passes",
                    "security": [],
                    "responses": {
                        "200": ok("ready", &readiness),
                        "503": ok("not ready, with the sanitized reasons", &readiness),
                    },
                },
            },
            "/metrics": {
                "get": {
                    "operationId": "metrics",
                    "summary": "The Prometheus exposition, when the server exports one",
                    "security": [],
                    "responses": {
                        "200": {"description": "the exposition", "content": {"text/plain": {"schema": {"type": "string"}}}},
                        "404": {"description": "this server exports no metrics", "content": {"text/plain": {"schema": {"type": "string"}}}},
                    },
                },
            },
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": schemas,
        },
    })
}

/// An input file as the server parses it: exactly one of the two forms (the derived schema
/// of its wire struct has every field optional, which schemathesis rightly read as allowing
/// none).
fn input_file() -> Value {
    json!({
        "description": "A file in a request: an uploaded file by id (`POST /v1/files`), or \
            (small) bytes inline. Its content decides its type.",
        "oneOf": [
            {
                "title": "Uploaded",
                "type": "object",
                "required": ["fileId"],
                "additionalProperties": false,
                "properties": {
                    "fileId": {"$ref": "#/components/schemas/FileId", "description": "An uploaded file's id."},
                },
            },
            {
                "title": "Inline",
                "type": "object",
                "required": ["name", "mediaType", "data"],
                "additionalProperties": false,
                "properties": {
                    "name": {"type": "string", "description": "The file's display name."},
                    "mediaType": {"$ref": "#/components/schemas/MediaType", "description": "The declared media type; the content decides."},
                    "data": {
                        "type": "string",
                        "contentEncoding": "base64",
                        // Canonical: the bits a padded group leaves over are zero.
                        "pattern": "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$",
                        "description": "The bytes, base64 (standard alphabet, padded).",
                    },
                },
            },
        ],
    })
}

/// `T`'s schema: a `$ref` to its component for a named type.
fn sub<T: JsonSchema>(g: &mut SchemaGenerator) -> Value {
    g.subschema_for::<T>().to_value()
}

/// AG-UI's `RunAgentInput` as this server reads it: `threadId` is the conversation, `runId`
/// the idempotency key; either `resume` answers interrupts, or the last user message (text,
/// or text parts) is the new execution's message.
fn run_agent_input(key: &Value) -> Value {
    let text_part = json!({
        "type": "object",
        "required": ["type", "text"],
        "properties": {"type": {"const": "text"}, "text": {"type": "string", "minLength": 1}},
    });
    let user_message = json!({
        "type": "object",
        "required": ["role", "content"],
        "properties": {
            "role": {"const": "user"},
            "content": {"anyOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "items": text_part, "minItems": 1},
            ]},
        },
    });
    json!({
        "type": "object",
        "description": "AG-UI's RunAgentInput: `threadId` is the conversation, `runId` the \
            idempotency key; a non-empty `resume` answers interrupts, else the last user \
            message is the execution's message.",
        "required": ["threadId", "runId"],
        "properties": {
            "threadId": {"type": "string"},
            "runId": key,
            "messages": {"type": "array", "items": {"type": "object", "required": ["role"], "properties": {"role": {"type": "string"}}}},
            "resume": {"type": "array", "items": {"type": "object", "required": ["interruptId"], "properties": {"interruptId": {"type": "string"}}}},
        },
        "anyOf": [
            {"required": ["resume"], "properties": {"resume": {"minItems": 1}}},
            {
                "required": ["messages"],
                "properties": {"messages": {"items": {"if": {"properties": {"role": {"const": "user"}}}, "then": user_message}, "contains": user_message}},
            },
        ],
    })
}

/// The component name a `$ref` schema points at.
fn name(reference: &Value) -> Option<&str> {
    reference
        .get("$ref")?
        .as_str()?
        .strip_prefix("#/components/schemas/")
}

/// `ExecutionRequest` with the adapter instance id beside its fields, less the idempotency
/// key (a header over HTTP).
fn start_schema(request: &Value) -> Value {
    let mut start = request.clone();
    start["description"] = json!(
        "An execution request and the adapter instance to run it; its idempotency key goes in \
         the `Idempotency-Key` header."
    );
    if let Some(properties) = start.get_mut("properties").and_then(Value::as_object_mut) {
        properties.remove("idempotencyKey");
    }
    start["properties"]["adapter"] = json!({
        "type": "string",
        "description": "The adapter instance id (`GET /v1/adapters`).",
        "examples": ["scripted"],
    });
    start["properties"]["callerCredentials"] = json!({
        "type": "object",
        "description": "The caller's own credentials for the instance's tool providers, by \
            provider name (`tool.caller_credentials`), for this execution only: never stored, \
            never in an event, redacted from everything the execution yields. Each 4 to \
            8192 bytes; at most 16. A provider the instance does not have, or a value that \
            is not a string, is refused (`CALLER_CREDENTIAL_INVALID`); an adapter without \
            `tool.caller_credentials` refuses the request (`CAPABILITY_UNSUPPORTED`).",
        "additionalProperties": {"type": "string", "minLength": 4, "maxLength": 8192},
        "maxProperties": 16,
        "writeOnly": true,
    });
    start["examples"] = json!([{"adapter": "scripted", "message": "Hello"}]);
    match start.get_mut("required").and_then(Value::as_array_mut) {
        Some(required) => required.push(json!("adapter")),
        None => start["required"] = json!(["adapter"]),
    }
    start
}

/// `ActionResponse` without its `actionId`: the path names the action. (The handler also
/// takes a body whose `actionId` is the path's, as the `ActionResponse` a client holds
/// serializes; the document describes the one form that always works.)
fn answer_schema(response: &Value) -> Value {
    let mut body = response.clone();
    body["description"] = json!(
        "An answer to the path's action: an ActionResponse without `actionId` (or with the \
         path's)."
    );
    let optional = |variant: &mut Value| {
        // `get_mut`: indexing would insert a `null` where there is none.
        if let Some(required) = variant.get_mut("required").and_then(Value::as_array_mut) {
            required.retain(|field| field != "actionId");
        }
        if let Some(properties) = variant.get_mut("properties").and_then(Value::as_object_mut) {
            properties.remove("actionId");
        }
    };
    if let Some(variants) = body.get_mut("oneOf").and_then(Value::as_array_mut) {
        variants.iter_mut().for_each(optional);
    }
    optional(&mut body);
    body
}
