//! Redaction: rules, streaming across split deltas, and a canary run through the full service
//! in which nothing that reaches the caller may contain a secret.

use std::sync::Arc;

use futures_util::StreamExt;
use harness_core::action::{ApprovalResponse, ToolDecision};
use harness_core::adapter::AdapterEvent;
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::event::{
    Content, EventPayload, NativeEvent, RunSucceeded, TextDelta, ToolCall, ToolCallCompleted,
    ToolCallOutcome,
};
use harness_core::id::Cursor;
use harness_core::service::{
    AdapterService, BoxSegmentStream, ExecutionHandle, ExecutionRequest, Outcome, Segment,
};
use harness_layers::redaction::{
    PatternRule, Redaction, RedactionError, RedactionLayer, Redactor, ResponseFuture,
    StreamRedactor, builtin_rule_names,
};
use harness_scripted::{ApprovalCall, Script, ScriptedAdapter, Step};
use proptest::prelude::*;
use rstest::rstest;
use serde_json::{Value, json};
use tower::{ServiceBuilder, ServiceExt};

// ---------------------------------------------------------------------------------------
// Canaries: every secret carries `CANARY`, which no other text in these tests contains.

/// A registered credential.
const CRED: &str = "crd_CANARY1_q7Z9xW2vLm";
/// A bearer token (only the token is secret).
const TOKEN: &str = "CANARY2tokenAbCdEf0123456789xyz";
/// A JWT.
const JWT: &str = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJDQU5BUlkzIn0.CANARY3sigXyZ_0123-abc";
/// A private key block.
const PRIVATE_KEY: &str = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowCANARY4AAKCAQEA7v1bQ+/=\nZm9vYmFyYmF6CANARY4bQ==\n-----END RSA PRIVATE KEY-----";
/// An OpenAI-shaped key.
const SK: &str = "sk-proj-CANARY5abcdefghijklmnopqrst";
/// A value only a sensitive field name reveals.
const FIELD_VALUE: &str = "plainCANARY6value";

const CANARIES: &[&str] = &[CRED, TOKEN, JWT, PRIVATE_KEY, SK, FIELD_VALUE];

/// Every fragment of a canary long enough to matter (8 bytes), and the marker word.
fn leaks(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    if text.contains("CANARY") {
        found.push("CANARY".to_owned());
    }
    for canary in CANARIES {
        let bytes = canary.as_bytes();
        for w in bytes.windows(8) {
            let w = std::str::from_utf8(w).unwrap();
            if text.contains(w) {
                found.push(w.to_owned());
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[track_caller]
fn assert_clean(what: &str, text: &str) {
    let found = leaks(text);
    assert!(found.is_empty(), "{what} leaks {found:?}:\n{text}");
}

fn redactor() -> Arc<Redactor> {
    Arc::new(Redactor::builder().secret(CRED).build().unwrap())
}

fn service(
    script: Script,
) -> impl tower::Service<
    ExecutionRequest,
    Response = ExecutionHandle,
    Error = HarnessError,
    Future = impl Send,
> + Clone {
    AdapterService::builder(ScriptedAdapter::new(script))
        .layer(RedactionLayer::new(redactor()))
        .build()
}

fn text_of(events: &[Arc<harness_core::event::Event>], reasoning: bool) -> String {
    events
        .iter()
        .filter_map(|e| match e.payload() {
            EventPayload::MessageDelta(d) if !reasoning => Some(d.text.as_str()),
            EventPayload::ReasoningDelta(d) if reasoning => Some(d.text.as_str()),
            _ => None,
        })
        .collect()
}

fn step_error(message: String, provider_code: &str, diagnostic: String) -> Step {
    Step::Error {
        category: ErrorCategory::Unavailable,
        message,
        code: None,
        provider_code: Some(provider_code.to_owned()),
        retryable: None,
        retry_after_ms: Some(1500),
        side_effects: false,
        diagnostic: Some(diagnostic),
    }
}

#[tokio::test]
async fn canaries_never_reach_the_caller() {
    let mut b = Script::builder();
    let mut expected_message = String::new();
    // The credential split at every offset.
    for k in 1..CRED.len() {
        b = b
            .text(format!("[{k}] key {}", &CRED[..k]))
            .text(format!("{} ok. ", &CRED[k..]));
        expected_message.push_str(&format!("[{k}] key [REDACTED:secret] ok. "));
    }
    // Every other kind, split in the middle.
    let whole = format!("auth Bearer {TOKEN} and jwt {JWT}, key {PRIVATE_KEY} and {SK}.");
    let quarters = [whole.len() / 5, whole.len() / 2, whole.len() * 3 / 4];
    let mut last = 0;
    for cut in quarters.into_iter().chain([whole.len()]) {
        let mut cut = cut;
        while !whole.is_char_boundary(cut) {
            cut += 1;
        }
        b = b.text(&whole[last..cut]);
        last = cut;
    }
    expected_message.push_str(
        "auth Bearer [REDACTED:bearer] and jwt [REDACTED:jwt], key [REDACTED:private_key] and [REDACTED:openai_key].",
    );
    let jwt_mid = JWT.len() / 2;
    b = b
        .reasoning(format!("thinking about {}", &JWT[..jwt_mid]))
        .reasoning(format!("{} now", &JWT[jwt_mid..]))
        .usage(10, 20)
        .tool_call(
            "call_1".parse().unwrap(),
            "http",
            json!({
                "url": "https://api.example.com/v1",
                "headers": {"Authorization": format!("Bearer {TOKEN}")},
                "apiKey": CRED,
                "body": format!("token={SK}&x=1"),
                "nested": [{"password": FIELD_VALUE}],
            }),
            json!({"status": 200, "echo": PRIVATE_KEY, "items": [JWT]}),
        )
        .failing_tool_call(
            "call_2".parse().unwrap(),
            "shell",
            json!({"cmd": "ls"}),
            format!("could not authenticate with {CRED}"),
        )
        .native(
            "debug.dump",
            json!({
                "password": FIELD_VALUE,
                "nested": {"client_secret": FIELD_VALUE, "log": format!("sent Bearer {TOKEN}")},
                CRED: "a key that is a secret",
            }),
        )
        .step(Step::Artifact {
            id: None,
            media_type: "text/plain".to_owned(),
            name: Some(format!("dump-{CRED}.txt")),
            uri: Some(format!("https://files.example.com/dump?sig={CRED}")),
            size_bytes: Some(12),
            metadata: Some(json!({"token": SK, "note": JWT, "plain": "fine"})),
        })
        .approval([ApprovalCall::new(
            "call_3".parse().unwrap(),
            "shell",
            json!({
                "cmd": format!("curl -H 'Authorization: Bearer {TOKEN}' https://x"),
                "env": {"API_KEY": SK, "HOME": "/home/me", "DB": CRED},
            }),
        )
        .with_output(json!({"stdout": PRIVATE_KEY}))])
        .text("after approval ")
        .step(step_error(
            format!("upstream refused Bearer {TOKEN}"),
            SK,
            format!("raw response: {PRIVATE_KEY} cred={CRED} jwt={JWT}"),
        ));
    let script = b.try_build().unwrap();

    let execution = service(script)
        .oneshot(ExecutionRequest::new("go"))
        .await
        .unwrap();
    let mut events = execution.events(Cursor::START);
    let action = loop {
        let event = events.next().await.expect("the run ended without asking");
        if let EventPayload::ActionRequested(action) = event.payload() {
            break action.clone();
        }
    };
    // What the caller sees while the run waits.
    let pending = execution.pending_actions();
    assert_eq!(pending.len(), 1);
    assert_clean(
        "the pending action",
        &serde_json::to_string(&pending).unwrap(),
    );
    assert_clean(
        "the action request",
        &serde_json::to_string(&action).unwrap(),
    );
    execution
        .respond(
            ApprovalResponse::decide(
                action.id,
                action.revision,
                [ToolDecision::approve("call_3".parse().unwrap())],
            )
            .into(),
        )
        .await
        .unwrap();

    let outcome = execution.outcome().await;
    let all: Vec<_> = execution.events(Cursor::START).collect().await;
    for event in &all {
        assert_clean(
            event.kind().as_str(),
            &serde_json::to_string(event).unwrap(),
        );
    }
    assert_clean(
        "artifacts",
        &serde_json::to_string(&execution.artifacts()).unwrap(),
    );

    // Text is neither lost nor reordered.
    let message = text_of(&all, false);
    assert_eq!(message, format!("{expected_message}after approval "));
    assert_eq!(text_of(&all, true), "thinking about [REDACTED:jwt] now");
    // Redacted structures keep their shape.
    let kinds: Vec<_> = all.iter().map(|e| e.kind().as_str()).collect();
    for kind in [
        "tool.call.started",
        "tool.call.completed",
        "native",
        "artifact.created",
        "action.requested",
        "usage",
    ] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    let native = all
        .iter()
        .find_map(|e| match e.payload() {
            EventPayload::Native(n) => Some(n.payload().clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(native["password"], "[REDACTED:field]");
    assert_eq!(native["nested"]["log"], "sent Bearer [REDACTED:bearer]");
    assert_eq!(native["[REDACTED:secret]"], "a key that is a secret");

    let Outcome::Failed(err) = outcome else {
        panic!("expected a failure, got {outcome:?}")
    };
    assert_clean("the error's message", err.message());
    assert_clean(
        "the public error",
        &serde_json::to_string(&err.public()).unwrap(),
    );
    assert_clean("the diagnostic", err.diagnostic().unwrap_or_default());
    assert_clean("the error's Debug", &format!("{err:?}"));
    // Category, code and retry advice survive redaction.
    assert_eq!(err.category(), ErrorCategory::Unavailable);
    assert_eq!(err.code().as_str(), "UNAVAILABLE");
    assert_eq!(
        err.retry_after(),
        Some(std::time::Duration::from_millis(1500))
    );
    assert_eq!(err.provider_code(), None);
    assert_eq!(err.message(), "upstream refused Bearer [REDACTED:bearer]");
    assert!(
        err.diagnostic()
            .unwrap()
            .contains("cred=[REDACTED:secret] jwt=[REDACTED:jwt]")
    );
}

#[tokio::test]
async fn a_completion_summary_is_redacted() {
    let script = Script::builder()
        .text(format!("the key is {SK}"))
        .complete(format!("done with {CRED}"))
        .build();
    let execution = service(script)
        .oneshot(ExecutionRequest::new("go"))
        .await
        .unwrap();
    let Outcome::Succeeded(done) = execution.outcome().await else {
        panic!("expected success")
    };
    assert_eq!(done.summary.as_deref(), Some("done with [REDACTED:secret]"));
    let all: Vec<_> = execution.events(Cursor::START).collect().await;
    for event in &all {
        assert_clean(
            event.kind().as_str(),
            &serde_json::to_string(event).unwrap(),
        );
    }
    assert_eq!(text_of(&all, false), "the key is [REDACTED:openai_key]");
}

/// A panic's text reaches neither the events nor the public error.
#[tokio::test]
async fn a_panic_message_does_not_reach_the_events_or_the_public_error() {
    let script = Script::builder()
        .text("working ")
        .panic(format!("boom with {CRED} and Bearer {TOKEN}"))
        .build();
    let execution = service(script)
        .oneshot(ExecutionRequest::new("go"))
        .await
        .unwrap();
    let outcome = execution.outcome().await;
    let all: Vec<_> = execution.events(Cursor::START).collect().await;
    for event in &all {
        assert_clean(
            event.kind().as_str(),
            &serde_json::to_string(event).unwrap(),
        );
    }
    let Outcome::Failed(err) = outcome else {
        panic!("expected a failure")
    };
    assert_eq!(err.code(), &ErrorCode::ADAPTER_PANICKED);
    assert_clean(
        "the public error",
        &serde_json::to_string(&err.public()).unwrap(),
    );
}

/// The panic's diagnostic, too: the adapter service turns an adapter panic into an
/// `ADAPTER_PANICKED` error item inside the runtime stack, which the layer redacts.
#[tokio::test]
async fn a_panic_message_does_not_reach_the_diagnostic() {
    let script = Script::builder()
        .panic(format!("boom with {CRED} and Bearer {TOKEN}"))
        .build();
    let execution = service(script)
        .oneshot(ExecutionRequest::new("go"))
        .await
        .unwrap();
    let Outcome::Failed(err) = execution.outcome().await else {
        panic!("expected a failure")
    };
    assert_clean("the diagnostic", err.diagnostic().unwrap_or_default());
}

#[tokio::test]
async fn the_inner_calls_error_is_redacted() {
    // A service inside the layer that refuses the call (as a runtime failing to start does).
    let failing = tower::layer::layer_fn(|_adapter_service| {
        tower::service_fn(|_: Segment| async {
            Err::<BoxSegmentStream, _>(
                HarnessError::new(
                    ErrorCategory::Configuration,
                    format!("option `key` = {SK} is invalid"),
                )
                .with_code(ErrorCode::OPTIONS_INVALID)
                .with_diagnostic(format!("raw options: {{\"key\": \"{CRED}\"}}")),
            )
        })
    });
    let execution = AdapterService::builder(ScriptedAdapter::quickstart())
        .layer(RedactionLayer::new(redactor()))
        .layer(failing)
        .build()
        .oneshot(ExecutionRequest::new("go"))
        .await
        .unwrap();
    let Outcome::Failed(err) = execution.outcome().await else {
        panic!("expected a failure")
    };
    assert_eq!(err.code(), &ErrorCode::OPTIONS_INVALID);
    assert_eq!(err.category(), ErrorCategory::Configuration);
    assert_eq!(
        err.message(),
        "option `key` = [REDACTED:openai_key] is invalid"
    );
    assert_eq!(
        err.diagnostic(),
        Some("raw options: {\"key\": \"[REDACTED:secret]\"}")
    );
}

/// The reproduction of the old design's leak: a layer of the admission stack that rebuilds
/// the request (here a serde round trip, which drops `extensions`) used to switch redaction
/// off silently. Redaction is now a layer of the runtime stack, configured on the service:
/// nothing in the request carries it.
#[tokio::test]
async fn a_layer_that_rebuilds_the_request_cannot_switch_redaction_off() {
    let script = Script::builder()
        .text(format!("the key is {CRED}"))
        .complete("done")
        .build();
    let adapter = ScriptedAdapter::new(script);
    let stack = harness_layers::stack::HarnessStack::defaults_for(&adapter)
        .unwrap()
        .redaction(RedactionLayer::new(redactor()));
    let adapter_service = AdapterService::builder(adapter)
        .layer(stack.runtime().clone())
        .build();
    let rebuild = tower::util::MapRequestLayer::new(|request: ExecutionRequest| {
        let wire = serde_json::to_value(&request).unwrap();
        serde_json::from_value::<ExecutionRequest>(wire).unwrap()
    });
    let service = tower::Layer::layer(
        stack.admission(),
        ServiceBuilder::new()
            .layer(rebuild)
            .service(adapter_service),
    );
    let execution = service.oneshot(ExecutionRequest::new("go")).await.unwrap();
    assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
    let log = serde_json::to_string(&execution.log().snapshot(Cursor::START)).unwrap();
    assert_clean("the stored log", &log);
    assert!(log.contains("the key is [REDACTED:secret]"), "{log}");
}

/// Held text is not lost when the driver stops reading: cancelled while a possible secret's
/// beginning is held back, the layer's stream gives it back (redacted) before
/// `run.cancelled`.
#[tokio::test]
async fn held_text_is_given_back_when_the_run_is_cancelled() {
    let script = Script::builder()
        .text(format!("visible, then {}", &CRED[..6]))
        .hang()
        .build();
    let execution = service(script)
        .oneshot(ExecutionRequest::new("go"))
        .await
        .unwrap();
    // The first part is emitted; the possible beginning of the credential is held.
    loop {
        let text = text_of(&execution.log().snapshot(Cursor::START), false);
        if !text.is_empty() {
            assert_eq!(text, "visible, then ");
            break;
        }
        tokio::task::yield_now().await;
    }
    execution.cancel(harness_core::event::CancelReason::new("stop"));
    assert!(matches!(execution.outcome().await, Outcome::Cancelled(_)));
    let events = execution.log().snapshot(Cursor::START);
    assert_eq!(
        text_of(&events, false),
        format!("visible, then {}", &CRED[..6])
    );
    let kinds: Vec<&str> = events.iter().map(|e| e.kind().as_str()).collect();
    assert_eq!(
        &kinds[kinds.len() - 2..],
        ["run.cancelling", "run.cancelled"]
    );
}

#[test]
fn services_and_futures_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Redactor>();
    send_sync::<StreamRedactor>();
    send_sync::<RedactionLayer>();
    send_sync::<Redaction<harness_core::service::RuntimeStack>>();
    fn send<T: Send>() {}
    send::<ResponseFuture<std::future::Ready<Result<BoxSegmentStream, HarnessError>>>>();
    send::<harness_layers::redaction::RedactedStream<BoxSegmentStream>>();
    let layer = RedactionLayer::new(redactor());
    let service = tower::Layer::layer(&layer, ());
    let mut copy = service.clone();
    let _: &mut () = copy.get_mut();
    let _: &() = service.get_ref();
    service.into_inner();
    assert!(format!("{layer:?}").contains("Redactor"));
    assert!(!format!("{layer:?}").contains(CRED));
}

// ---------------------------------------------------------------------------------------
// Rules.

const PEM: &str = "-----BEGIN PRIVATE KEY-----\nMIIBVQIBADANBgkqhkiG9w0BAQEFAASCAT8wggE7\nAgEAAkEAq7BFUpkGp3+XQ==\n-----END PRIVATE KEY-----";
const OPENSSH: &str = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU=\n-----END OPENSSH PRIVATE KEY-----";
const A_JWT: &str = "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";

#[rstest]
#[case::secret("use crd_CANARY1_q7Z9xW2vLm now", "use [REDACTED:secret] now")]
#[case::secret_twice_adjacent(
    "crd_CANARY1_q7Z9xW2vLmcrd_CANARY1_q7Z9xW2vLm",
    "[REDACTED:secret][REDACTED:secret]"
)]
#[case::bearer(
    "Authorization: Bearer abc123def456ghi789",
    "Authorization: Bearer [REDACTED:bearer]"
)]
#[case::bearer_any_case(
    "authorization: BEARER abc123def456ghi789jkl==",
    "authorization: BEARER [REDACTED:bearer]"
)]
#[case::bearer_in_prose_untouched(
    "send a bearer token in the header",
    "send a bearer token in the header"
)]
#[case::openai(
    "key sk-proj-abcdefghijklmnopqrstuvwx1234 end",
    "key [REDACTED:openai_key] end"
)]
#[case::openai_inside_a_word_untouched(
    "task-abcdefghijklmnopqrstuvwxyz",
    "task-abcdefghijklmnopqrstuvwxyz"
)]
#[case::anthropic(
    "sk-ant-api03-abcdefghijklmnopqrstuvwxyz_0123",
    "[REDACTED:anthropic_key]"
)]
#[case::github_classic(
    "token ghp_abcdefghijklmnopqrstuvwxyz0123456789!",
    "token [REDACTED:github_token]!"
)]
#[case::github_fine_grained(
    "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    "[REDACTED:github_token]"
)]
#[case::slack(
    "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "[REDACTED:slack_token]"
)]
#[case::aws("id=AKIAIOSFODNN7EXAMPLE;", "id=[REDACTED:aws_access_key];")]
#[case::aws_too_long_untouched("AKIAIOSFODNN7EXAMPLEXX", "AKIAIOSFODNN7EXAMPLEXX")]
#[case::google(
    "AIzaSyA-abcdefghijklmnopqrstuvwxyz01234 ok",
    "[REDACTED:google_api_key] ok"
)]
#[case::private_key(PEM, "[REDACTED:private_key]")]
#[case::openssh_key(&format!("key:\n{OPENSSH}\nthanks."), "key:\n[REDACTED:private_key]\nthanks.")]
#[case::unterminated_private_key(
    "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIIrYSSNQFaA2Hwf1duRSxKtLYX5CB04fSeQ6tF1aY/PuoAoGCCqGSM49",
    "[REDACTED:private_key]"
)]
#[case::public_key_untouched(
    "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----",
    "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----"
)]
#[case::jwt(&format!("id_token: {A_JWT}."), "id_token: [REDACTED:jwt].")]
#[case::bearer_jwt(&format!("Bearer {A_JWT}"), "Bearer [REDACTED:jwt]")]
#[case::multibyte_neighbours(
    "ключ crd_CANARY1_q7Z9xW2vLm 日本 🦀sk-abcdefghijklmnopqrstuvwxyz",
    "ключ [REDACTED:secret] 日本 🦀[REDACTED:openai_key]"
)]
#[case::nothing(
    "just text, no secrets: sk- AKIA eyJ bearer",
    "just text, no secrets: sk- AKIA eyJ bearer"
)]
fn built_in_rules(#[case] input: &str, #[case] expected: &str) {
    let redactor = redactor();
    assert_eq!(redactor.redact_str(input), expected);
    // Streaming agrees at every split point.
    for (cut, _) in input.char_indices().skip(1) {
        let (out, _) = stream_message(&redactor, &[&input[..cut], &input[cut..]]);
        assert_eq!(out, expected, "split at {cut}");
    }
}

#[rstest]
#[case::derived_prefix(
    "acme_key",
    r"acme_[A-Za-z0-9]{24}",
    "x acme_0123456789abcdefghijklmn y",
    "x [REDACTED:acme_key] y"
)]
#[case::no_prefix(
    "ssn",
    r"\b[0-9]{3}-[0-9]{2}-[0-9]{4}\b",
    "ssn 123-45-6789.",
    "ssn [REDACTED:ssn]."
)]
#[case::secret_group(
    "pw_assign",
    r"pw=(?P<secret>[^&\s]+)",
    "a=1&pw=hunter22&b=2",
    "a=1&pw=[REDACTED:pw_assign]&b=2"
)]
fn added_rules(
    #[case] name: &str,
    #[case] pattern: &str,
    #[case] input: &str,
    #[case] expected: &str,
) {
    let redactor = Arc::new(
        Redactor::builder()
            .without_builtin_patterns()
            .pattern(name, pattern)
            .unwrap()
            .build()
            .unwrap(),
    );
    assert_eq!(redactor.redact_str(input), expected);
    for (cut, _) in input.char_indices().skip(1) {
        let (out, _) = stream_message(&redactor, &[&input[..cut], &input[cut..]]);
        assert_eq!(out, expected, "split at {cut}");
    }
}

#[test]
fn a_match_longer_than_its_window_is_cut_the_same_way_in_streams() {
    let rule = PatternRule::new("long", r"long_[a-z]+")
        .unwrap()
        .max_len(16);
    let redactor = Arc::new(
        Redactor::builder()
            .without_builtin_patterns()
            .rule(rule)
            .build()
            .unwrap(),
    );
    let input = "x long_abcdefghijklmnopqrstuvwxyz y";
    let whole = redactor.redact_str(input);
    assert_eq!(whole, "x [REDACTED:long]lmnopqrstuvwxyz y");
    for (cut, _) in input.char_indices().skip(1) {
        assert_eq!(
            stream_message(&redactor, &[&input[..cut], &input[cut..]]).0,
            whole
        );
    }
}

#[rstest]
#[case::invalid_pattern("broken", "acme_[", "redaction rule `broken`: invalid pattern")]
#[case::empty_match(
    "empty",
    "a*",
    "redaction rule `empty`: the pattern matches the empty string"
)]
#[case::bad_name("has space", "abc", "invalid redaction rule name `has space`")]
fn bad_rules_are_refused_with_their_name(
    #[case] name: &str,
    #[case] pattern: &str,
    #[case] message: &str,
) {
    let err = Redactor::builder().pattern(name, pattern).unwrap_err();
    assert!(err.to_string().starts_with(message), "{err}");
}

#[test]
fn builder_refusals() {
    let err = Redactor::builder()
        .pattern("openai_key", "x_[0-9]{4}")
        .unwrap()
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        RedactionError::DuplicateRule {
            rule: "openai_key".to_owned()
        }
    );
    let err = Redactor::builder()
        .secret("long enough")
        .secret("abc")
        .build()
        .unwrap_err();
    assert_eq!(err, RedactionError::SecretTooShort { index: 1 });
    assert!(!err.to_string().contains("abc"));
    let err = PatternRule::new("x", "x_[0-9]+")
        .unwrap()
        .token_chars("z-a")
        .unwrap_err();
    assert!(err.to_string().contains("rule `x`"), "{err}");
    let err = Redactor::builder()
        .rule(PatternRule::new("x", "x_[0-9]+").unwrap().prefixes([""]))
        .build()
        .unwrap_err();
    assert_eq!(err, RedactionError::EmptyPrefix { rule: "x".into() });
    // Debug output never shows a secret.
    let builder = Redactor::builder().secret(CRED);
    assert!(!format!("{builder:?}").contains(CRED));
    assert!(!format!("{:?}", builder.build().unwrap()).contains(CRED));
    assert_eq!(builtin_rule_names().len(), redactor().rule_names().len());
}

#[test]
fn sensitive_fields_are_replaced_wholesale() {
    let redactor = Redactor::builder().field("db_dsn").build().unwrap();
    let mut value = json!({
        "Password": "x",
        "apiKey": {"nested": "object"},
        "API-KEY": ["a"],
        "refresh_token": 12,
        "access_token": null,
        "dbDsn": "postgres://u:p@h/db",
        "max_tokens": 100,
        "input_tokens": 5,
        "list": [{"Authorization": "Basic dXNlcjpwYXNz"}, "free sk-abcdefghijklmnopqrstuvwxyz"],
        "plain": "ok",
    });
    assert!(redactor.redact_json(&mut value));
    assert_eq!(
        value,
        json!({
            "Password": "[REDACTED:field]",
            "apiKey": "[REDACTED:field]",
            "API-KEY": "[REDACTED:field]",
            "refresh_token": "[REDACTED:field]",
            "access_token": null,
            "dbDsn": "[REDACTED:field]",
            "max_tokens": 100,
            "input_tokens": 5,
            "list": [{"Authorization": "[REDACTED:field]"}, "free [REDACTED:openai_key]"],
            "plain": "ok",
        })
    );
    assert!(!redactor.redact_json(&mut value), "idempotent");
    let mut untouched = json!({"a": [1, true, "text"]});
    assert!(!redactor.redact_json(&mut untouched));
    let none = Redactor::builder()
        .without_default_fields()
        .build()
        .unwrap();
    assert!(!none.is_sensitive_field("password"));
}

#[test]
fn errors_keep_their_category_code_and_advice() {
    let redactor = redactor();
    let err = HarnessError::new(ErrorCategory::Throttled, format!("slow down {CRED}"))
        .with_code("RATE_LIMITED".parse().unwrap())
        .with_retry_after(std::time::Duration::from_secs(3))
        .with_provider_code("rate_limit")
        .with_diagnostic(format!("429 with key {SK}"));
    let out = redactor.redact_error(err.clone());
    assert_eq!(out.category(), ErrorCategory::Throttled);
    assert_eq!(out.code().as_str(), "RATE_LIMITED");
    assert!(out.retryable());
    assert_eq!(out.retry_after(), err.retry_after());
    assert_eq!(out.provider_code(), Some("rate_limit"));
    assert_eq!(out.message(), "slow down [REDACTED:secret]");
    assert_eq!(out.diagnostic(), Some("429 with key [REDACTED:openai_key]"));
    // Side effects keep the error non-retryable.
    let err = HarnessError::new(ErrorCategory::Unavailable, CRED).with_side_effects(true);
    let out = redactor.redact_error(err);
    assert!(!out.retryable() && out.side_effects_may_have_occurred());
    // Nothing to redact: the same error.
    let clean = HarnessError::new(ErrorCategory::Internal, "fine").with_diagnostic("fine too");
    assert_eq!(redactor.redact_error(clean.clone()), clean);
}

// ---------------------------------------------------------------------------------------
// Streaming.

fn message(text: &str) -> AdapterEvent {
    AdapterEvent::Content(Content::MessageDelta(TextDelta::new(text)))
}

fn reasoning(text: &str) -> AdapterEvent {
    AdapterEvent::Content(Content::ReasoningDelta(TextDelta::new(text)))
}

/// Streams `pieces` as message deltas, then ends the segment: the concatenated output and
/// each emitted delta.
fn stream_message(redactor: &Arc<Redactor>, pieces: &[&str]) -> (String, Vec<String>) {
    let mut stream = StreamRedactor::new(Arc::clone(redactor));
    let mut out = Vec::new();
    for piece in pieces {
        stream.on_event(message(piece), &mut out);
    }
    stream.on_segment_end(&mut out);
    let deltas: Vec<String> = out
        .into_iter()
        .map(|e| match e {
            AdapterEvent::Content(Content::MessageDelta(d)) => d.text,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    (deltas.concat(), deltas)
}

#[test]
fn plain_text_is_not_held_back() {
    let redactor = redactor();
    let mut stream = StreamRedactor::new(Arc::clone(&redactor));
    let mut out = Vec::new();
    stream.on_event(message("hello world, nothing to see. "), &mut out);
    assert_eq!(out, [message("hello world, nothing to see. ")]);
    out.clear();
    // A possible start is held back, and only that.
    stream.on_event(message("the key is sk-"), &mut out);
    assert_eq!(out, [message("the key is ")]);
    out.clear();
    stream.on_event(message("proj-abcdefghijklmnopqrstuvwx and more"), &mut out);
    // "e" could begin `eyJ`.
    assert_eq!(out, [message("[REDACTED:openai_key] and mor")]);
    // "crd_CAN" could begin the credential.
    out.clear();
    stream.on_event(message(" then crd_CAN"), &mut out);
    assert_eq!(out, [message("e then ")]);
    out.clear();
    stream.on_event(message("dle!"), &mut out);
    assert_eq!(out, [message("crd_CANdle!")]);
    assert!(redactor.max_hold_back() >= 8 * 1024);
}

#[test]
fn held_text_stays_held_across_other_items_until_the_segment_ends() {
    let mut stream = StreamRedactor::new(redactor());
    let mut out = Vec::new();
    stream.on_event(message("key crd_CANARY1"), &mut out);
    stream.on_event(reasoning("thinking about sk-"), &mut out);
    stream.on_event(message("_q7Z9xW2vLm done"), &mut out);
    let call = ToolCall {
        call_id: "call_1".parse().unwrap(),
        tool: "t".to_owned(),
        arguments: json!({"k": CRED}),
    };
    stream.on_event(
        AdapterEvent::Content(Content::ToolCallStarted(call)),
        &mut out,
    );
    stream.on_event(
        AdapterEvent::Content(Content::ToolCallCompleted(ToolCallCompleted {
            call_id: "call_1".parse().unwrap(),
            outcome: ToolCallOutcome::Failure {
                message: format!("bad {CRED}"),
            },
        })),
        &mut out,
    );
    stream.on_event(
        AdapterEvent::Content(Content::Native(
            NativeEvent::new("acp", "x", json!({"token": "t", "v": [CRED]})).unwrap(),
        )),
        &mut out,
    );
    stream.on_segment_end(&mut out);
    stream.on_event(AdapterEvent::Completed(RunSucceeded::default()), &mut out);
    let expected = vec![
        message("key "),
        reasoning("thinking about "),
        // "e" could begin `eyJ`.
        message("[REDACTED:secret] don"),
        // The held tails stay held across tool activity and native events ...
        AdapterEvent::Content(Content::ToolCallStarted(ToolCall {
            call_id: "call_1".parse().unwrap(),
            tool: "t".to_owned(),
            arguments: json!({"k": "[REDACTED:secret]"}),
        })),
        AdapterEvent::Content(Content::ToolCallCompleted(ToolCallCompleted {
            call_id: "call_1".parse().unwrap(),
            outcome: ToolCallOutcome::Failure {
                message: "bad [REDACTED:secret]".to_owned(),
            },
        })),
        AdapterEvent::Content(Content::Native(
            NativeEvent::new(
                "acp",
                "x",
                json!({"token": "[REDACTED:field]", "v": ["[REDACTED:secret]"]}),
            )
            .unwrap(),
        )),
        // ... and come back at the end of the segment, the one held longer first.
        reasoning("sk-"),
        message("e"),
        AdapterEvent::Completed(RunSucceeded::default()),
    ];
    assert_eq!(out, expected);
    let err = stream.on_error(HarnessError::new(ErrorCategory::Internal, CRED));
    assert_eq!(err.message(), "[REDACTED:secret]");
}

#[test]
fn a_private_key_block_streamed_line_by_line() {
    let redactor = redactor();
    let text = format!("here:\n{PRIVATE_KEY}\nend.");
    let pieces: Vec<&str> = text.split_inclusive('\n').collect();
    let (out, deltas) = stream_message(&redactor, &pieces);
    assert_eq!(out, "here:\n[REDACTED:private_key]\nend.");
    for d in deltas {
        assert_clean("a delta", &d);
    }
}

#[test]
fn a_private_key_block_longer_than_its_window() {
    let redactor = redactor();
    let body: String = (0..200)
        .map(|i| format!("{:064}\n", i).replace('0', "A"))
        .collect();
    let text = format!("-----BEGIN RSA PRIVATE KEY-----\n{body}-----END RSA PRIVATE KEY-----\nbye");
    assert!(text.len() > 12 * 1024);
    let whole = redactor.redact_str(&text).into_owned();
    // The first 8 KiB are one marker; the rest of the body is not recognised.
    assert!(
        whole.starts_with("[REDACTED:private_key]"),
        "{}",
        &whole[..40]
    );
    assert_eq!(
        whole.len(),
        text.len() - 8 * 1024 + "[REDACTED:private_key]".len()
    );
    for size in [1, 7, 64, 1000] {
        let pieces: Vec<&str> = text
            .as_bytes()
            .chunks(size)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect();
        assert_eq!(
            stream_message(&redactor, &pieces).0,
            whole,
            "chunks of {size}"
        );
    }
}

#[test]
fn an_artifact_whose_redacted_name_is_too_long_loses_its_name() {
    use harness_core::artifact::ArtifactDescriptor;
    let redactor = Redactor::builder().secret("zq9x").build().unwrap();
    let artifact = ArtifactDescriptor::builder(
        harness_core::id::ArtifactId::generate(),
        harness_core::id::ExecutionId::generate(),
        "text/plain",
    )
    .name("zq9x-".repeat(50))
    .uri("https://example.com/zq9x")
    .metadata("note", "zq9x and more")
    .build()
    .unwrap();
    let Some(AdapterEvent::Artifact(out)) = redactor.redact_event(AdapterEvent::Artifact(artifact))
    else {
        panic!("the artifact was dropped")
    };
    assert_eq!(out.name(), None);
    assert_eq!(out.uri(), None);
    assert_eq!(out.metadata()["note"], "[REDACTED:secret] and more");
}

// ---------------------------------------------------------------------------------------
// Properties.

/// Secret-bearing pieces: registered secrets and an example of every built-in rule.
const SECRETS: &[&str] = &[
    CRED,
    "another-registered-Secret-42",
    "Bearer abc123def456ghi789jklmnop",
    A_JWT,
    PEM,
    "sk-proj-abcdefghijklmnopqrstuvwx1234",
    "sk-ant-api03-abcdefghijklmnopqrstuvwxyz_0123",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "xoxb-123456789012-1234567890123-AbCdEfGhIjKl",
    "AKIAIOSFODNN7EXAMPLE",
    "AIzaSyA-abcdefghijklmnopqrstuvwxyz01234",
    "123-45-6789",
];

/// Near misses and fragments: prefixes without a body, parts of secrets.
const NEAR: &[&str] = &[
    "sk-",
    "Bearer ",
    "bearer",
    "eyJ",
    "eyJhbGciOiJIUzI1NiJ9.",
    "-----BEGIN RSA PRIVATE KEY-----\n",
    "-----END RSA PRIVATE KEY-----",
    "crd_CANARY1",
    "another-registered",
    "AKIA",
    "xoxb-",
    "ghp_",
    "123-45-",
    "ünïcødé 日本 🦀",
];

fn property_redactor() -> Arc<Redactor> {
    Arc::new(
        Redactor::builder()
            .secret(CRED)
            .secret("another-registered-Secret-42")
            .rule(
                PatternRule::new("ssn", r"\b[0-9]{3}-[0-9]{2}-[0-9]{4}\b")
                    .unwrap()
                    .max_len(16),
            )
            .build()
            .unwrap(),
    )
}

fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-zA-Z0-9 .,:;_=/+\n-]{0,24}",
        1 => "[ -~]{0,8}",
        2 => prop::sample::select(SECRETS).prop_map(str::to_owned),
        2 => prop::sample::select(NEAR).prop_map(str::to_owned),
    ]
}

/// Cuts `text` at `cuts` (fractions of its length, moved to char boundaries).
fn split<'a>(text: &'a str, cuts: &[prop::sample::Index]) -> Vec<&'a str> {
    let mut points: Vec<usize> = cuts
        .iter()
        .map(|i| {
            let mut p = i.index(text.len() + 1);
            while !text.is_char_boundary(p) {
                p -= 1;
            }
            p
        })
        .collect();
    points.push(0);
    points.push(text.len());
    points.sort_unstable();
    points.dedup();
    points.windows(2).map(|w| &text[w[0]..w[1]]).collect()
}

proptest! {
    // 384 cases unless `PROPTEST_CASES` says otherwise.
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(384)
    ))]

    /// For any text and any split points, what a stream emits concatenates to `redact_str`
    /// of the whole text.
    #[test]
    fn streaming_equals_redacting_the_whole(
        pieces in prop::collection::vec(piece(), 0..14),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let redactor = property_redactor();
        let text = pieces.concat();
        let deltas = split(&text, &cuts);
        let (out, _) = stream_message(&redactor, &deltas);
        prop_assert_eq!(out, redactor.redact_str(&text).into_owned());
    }

    /// With secrets set apart by separators, no secret survives, in the whole output nor in
    /// any emitted delta, and the text around them is intact.
    #[test]
    fn no_secret_survives_streaming(
        pieces in prop::collection::vec(
            (piece(), prop::sample::select(&[" ", "\n", ": ", ". "][..])), 0..12),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..16),
    ) {
        let redactor = property_redactor();
        let text: String = pieces.iter().flat_map(|(p, sep)| [p.as_str(), sep]).collect();
        let deltas = split(&text, &cuts);
        let (out, emitted) = stream_message(&redactor, &deltas);
        for secret in SECRETS {
            prop_assert!(!out.contains(secret), "{} survives in {:?}", secret, out);
            for d in &emitted {
                prop_assert!(!d.contains(secret));
            }
        }
        prop_assert_eq!(out, redactor.redact_str(&text).into_owned());
    }

    /// One character per delta: the stream's incremental state (open windows, partial
    /// literals) is exercised at every position.
    #[test]
    fn streaming_one_character_at_a_time(
        pieces in prop::collection::vec(piece(), 0..10),
    ) {
        let redactor = property_redactor();
        let text = pieces.concat();
        let deltas: Vec<&str> = text
            .char_indices()
            .map(|(i, c)| &text[i..i + c.len_utf8()])
            .collect();
        let (out, _) = stream_message(&redactor, &deltas);
        prop_assert_eq!(out, redactor.redact_str(&text).into_owned());
    }

    /// Registered secrets are redacted wherever they are, even glued to other text.
    #[test]
    fn registered_secrets_never_survive(
        before in "[ -~]{0,12}",
        after in "[ -~]{0,12}",
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let redactor = property_redactor();
        let text = format!("{before}{CRED}{after}");
        let (out, _) = stream_message(&redactor, &split(&text, &cuts));
        prop_assert!(!out.contains(CRED));
        prop_assert!(out.contains("[REDACTED:secret]"));
    }

    /// JSON: no string anywhere keeps a registered secret.
    #[test]
    fn json_strings_are_redacted_everywhere(
        depth in 0usize..4,
        key in "[a-z]{1,8}",
    ) {
        let redactor = property_redactor();
        let mut value = json!(format!("x {CRED} y"));
        for i in 0..depth {
            value = if i % 2 == 0 { json!({ key.clone(): value, CRED: 1 }) } else { json!([value, CRED]) };
        }
        redactor.redact_json(&mut value);
        let text = serde_json::to_string(&value).unwrap();
        prop_assert!(!text.contains(CRED), "{}", text);
    }
}

#[test]
fn json_values_are_left_alone_when_clean() {
    let redactor = redactor();
    let mut value: Value = json!({"a": "b", "n": [1, 2, {"c": "d"}]});
    let before = value.clone();
    assert!(!redactor.redact_json(&mut value));
    assert_eq!(value, before);
}

/// A secret split around a non-text item (agents interleave usage updates and tool updates
/// with message chunks) is still one secret.
#[test]
fn a_secret_split_around_a_usage_update_or_a_tool_call_is_caught() {
    let redactor = Arc::new(
        Redactor::builder()
            .secret("hunter2-db-password")
            .build()
            .unwrap(),
    );
    let between = [
        AdapterEvent::Content(Content::Usage(harness_core::event::Usage {
            input_tokens: 3,
            ..Default::default()
        })),
        AdapterEvent::Content(Content::ToolCallStarted(ToolCall {
            call_id: "call_1".parse().unwrap(),
            tool: "t".to_owned(),
            arguments: json!({}),
        })),
    ];
    for item in between {
        let mut stream = StreamRedactor::new(Arc::clone(&redactor));
        let mut out = Vec::new();
        stream.on_event(message("pw: hunter2-d"), &mut out);
        stream.on_event(item, &mut out);
        stream.on_event(message("b-password ok"), &mut out);
        stream.on_segment_end(&mut out);
        let text: String = out
            .iter()
            .filter_map(|e| match e {
                AdapterEvent::Content(Content::MessageDelta(d)) => Some(d.text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "pw: [REDACTED:secret] ok");
    }
}

/// Every string of an item passes the redactor, whatever field holds it: a tool's name,
/// a form's title, labels, descriptions and choices, an error's code.
#[test]
fn strings_in_fields_no_rule_names_are_redacted_too() {
    use harness_core::action::{
        ActionKind, ActionRequest, ApprovalRequest, FieldKind, FormField, FormRequest,
        ToolCallApproval,
    };
    let redactor = redactor();
    let leaky_tool = format!("curl -H 'Authorization: Bearer {TOKEN}'");
    let started = Content::ToolCallStarted(ToolCall {
        call_id: "call_1".parse().unwrap(),
        tool: leaky_tool.clone(),
        arguments: json!({}),
    });
    let approval = ApprovalRequest::new([ToolCallApproval::new(
        "call_1".parse().unwrap(),
        leaky_tool,
        json!({}),
        json!({"type": "object"}),
    )
    .unwrap()])
    .unwrap();
    let form = FormRequest::new([FormField::new(
        "f".parse().unwrap(),
        format!("Paste {CRED} here"),
        FieldKind::choice([SK.to_owned(), "no".to_owned()]),
    )
    .with_description(format!("for {JWT}"))])
    .unwrap()
    .with_title(format!("About {CRED}"));
    for item in [
        AdapterEvent::Content(started),
        AdapterEvent::Action(ActionRequest::approval(approval)),
        AdapterEvent::Action(ActionRequest::form(form)),
    ] {
        let redacted = redactor.redact_event(item).expect("rebuilt");
        let wire = match &redacted {
            AdapterEvent::Content(c) => serde_json::to_string(&EventPayload::from(c.clone())),
            AdapterEvent::Action(a) => serde_json::to_string(a),
            other => panic!("{other:?}"),
        }
        .unwrap();
        assert_clean("the item", &wire);
        if let AdapterEvent::Action(a) = &redacted
            && let ActionKind::FormInput(form) = &a.kind
        {
            assert_eq!(form.title(), Some("About [REDACTED:secret]"));
        }
    }
    let err = redactor.redact_error(
        HarnessError::new(ErrorCategory::Unavailable, "down")
            .with_code("AKIAIOSFODNN7EXAMPLE".parse().unwrap()),
    );
    assert_eq!(err.code(), &ErrorCode::UNAVAILABLE);
}

/// The canary walk: for every kind of item an adapter may yield, every string of its wire
/// form (object keys included) in turn holds a secret; whatever the field, the redacted item
/// holds none. Strings whose format a secret cannot take (ids, media types, timestamps) are
/// skipped because the item does not even deserialize with one.
#[test]
fn a_secret_in_any_string_of_any_item_is_redacted() {
    use harness_core::action::{
        ActionRequest, ApprovalRequest, FieldKind, FormField, FormRequest, ToolCallApproval,
    };
    use harness_core::artifact::ArtifactDescriptor;

    fn strings(value: &Value, at: String, out: &mut Vec<(String, bool)>) {
        match value {
            Value::String(_) => out.push((at, false)),
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    strings(item, format!("{at}/{i}"), out);
                }
            }
            Value::Object(map) => {
                for (key, item) in map {
                    let here = format!("{at}/{}", key.replace('~', "~0").replace('/', "~1"));
                    out.push((here.clone(), true));
                    strings(item, here, out);
                }
            }
            _ => {}
        }
    }

    /// `wire` with the string (or key) at `pointer` holding `CRED`.
    fn plant(wire: &Value, pointer: &str, key: bool) -> Value {
        let mut wire = wire.clone();
        if key {
            let (parent, name) = pointer.rsplit_once('/').unwrap();
            let name = name.replace("~1", "/").replace("~0", "~");
            let map = wire.pointer_mut(parent).unwrap().as_object_mut().unwrap();
            let item = map.remove(&name).unwrap();
            map.insert(format!("{name}{CRED}"), item);
        } else {
            let s = wire.pointer_mut(pointer).unwrap();
            *s = Value::String(format!("x {CRED} y"));
        }
        wire
    }

    fn walk<T>(redactor: &Redactor, sample: &T, wrap: impl Fn(T) -> AdapterEvent) -> usize
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
    {
        let wire = serde_json::to_value(sample).unwrap();
        let mut at = Vec::new();
        strings(&wire, String::new(), &mut at);
        let mut covered = 0;
        for (pointer, key) in at {
            let Ok(item) = serde_json::from_value::<T>(plant(&wire, &pointer, key)) else {
                continue;
            };
            covered += 1;
            let out = match redactor.redact_event(wrap(item)) {
                Some(AdapterEvent::Content(c)) => serde_json::to_string(&EventPayload::from(c)),
                Some(AdapterEvent::Action(a)) => serde_json::to_string(&a),
                Some(AdapterEvent::Artifact(a)) => serde_json::to_string(&a),
                Some(AdapterEvent::Completed(c)) => serde_json::to_string(&c),
                None => continue, // dropped rather than leaked
            }
            .unwrap();
            assert_clean(&format!("the item with a secret at {pointer}"), &out);
        }
        covered
    }

    let redactor = redactor();
    let content = |p: EventPayload| AdapterEvent::Content(Content::try_from(p).unwrap());
    let call = ToolCall {
        call_id: "call_1".parse().unwrap(),
        tool: "shell".to_owned(),
        arguments: json!({"cmd": "ls", "env": {"A": "b"}, "list": ["x"]}),
    };
    let mut covered = 0;
    covered += walk(
        &redactor,
        &EventPayload::from(Content::ToolCallStarted(call.clone())),
        content,
    );
    covered += walk(
        &redactor,
        &EventPayload::from(Content::ToolCallUpdated(call)),
        content,
    );
    for outcome in [
        ToolCallOutcome::Success {
            output: json!({"out": "o", "n": ["m"]}),
        },
        ToolCallOutcome::Failure {
            message: "m".to_owned(),
        },
        ToolCallOutcome::Rejected {
            reason: Some("r".to_owned()),
        },
    ] {
        let done = Content::ToolCallCompleted(ToolCallCompleted {
            call_id: "call_1".parse().unwrap(),
            outcome,
        });
        covered += walk(&redactor, &EventPayload::from(done), content);
    }
    let unavailable = harness_core::event::ToolUnavailable {
        source: "srv".to_owned(),
        tools: vec!["srv.echo".to_owned()],
        error: harness_core::error::HarnessError::new(
            harness_core::error::ErrorCategory::Unavailable,
            "server down",
        )
        .public(),
    };
    covered += walk(
        &redactor,
        &EventPayload::from(Content::ToolUnavailable(unavailable)),
        content,
    );
    let native = NativeEvent::new("acp", "update", json!({"a": "b", "c": ["d"]})).unwrap();
    covered += walk(
        &redactor,
        &EventPayload::from(Content::Native(native)),
        content,
    );
    let artifact = ArtifactDescriptor::builder(
        "art_1".parse().unwrap(),
        harness_core::id::ExecutionId::generate(),
        "text/plain",
    )
    .name("notes.md")
    .uri("file:///w/notes.md")
    .metadata("tool", "write")
    .build()
    .unwrap();
    covered += walk(&redactor, &artifact, AdapterEvent::Artifact);
    let approval = ApprovalRequest::new([ToolCallApproval::new(
        "call_1".parse().unwrap(),
        "shell",
        json!({"cmd": "ls"}),
        json!({"type": "object", "description": "d", "properties": {"cmd": {"type": "string"}}}),
    )
    .unwrap()])
    .unwrap();
    covered += walk(
        &redactor,
        &ActionRequest::approval(approval),
        AdapterEvent::Action,
    );
    let form = FormRequest::new([
        FormField::new(
            "a".parse().unwrap(),
            "Label",
            FieldKind::choice(["one", "two"]),
        )
        .with_description("desc"),
        FormField::new("b".parse().unwrap(), "Other", FieldKind::text()),
    ])
    .unwrap()
    .with_title("Title");
    covered += walk(&redactor, &ActionRequest::form(form), AdapterEvent::Action);
    let done = RunSucceeded {
        summary: Some("s".to_owned()),
    };
    covered += walk(&redactor, &done, AdapterEvent::Completed);
    assert!(covered >= 35, "only {covered} string fields were tried");
}

/// A registered secret inside JSON-encoded text (a tool argument holding JSON, or JSON in
/// JSON) is caught in its escaped forms too.
#[test]
fn a_secret_in_encoded_json_is_caught() {
    const PW: &str = "pa\"ss-word-123";
    let redactor = Redactor::builder().secret(PW).build().unwrap();
    let inner = serde_json::to_string(&json!({"pw": PW})).unwrap();
    let mut arguments = json!({"body": inner});
    assert!(redactor.redact_json(&mut arguments));
    let wire = serde_json::to_string(&arguments).unwrap();
    assert!(!wire.contains("ss-word-123"), "{wire}");
    // Twice escaped: the (unredacted) arguments as JSON text, a JSON string inside JSON.
    let text = serde_json::to_string(&json!({"body": inner})).unwrap();
    assert!(text.contains(r#"pa\\\"ss-word-123"#), "{text}");
    let redacted = redactor.redact_str(&text);
    assert!(!redacted.contains("ss-word-123"), "{redacted}");
    assert!(
        !redactor
            .redact_str(&format!("raw {PW}"))
            .contains("ss-word")
    );
}

/// A caller's credentials (`CallerCredentials` in the request's extensions) are redacted
/// for that execution only: split across deltas, in an error, in a summary; another
/// execution of the same service (no credentials) is untouched. One too short to redact
/// exactly refuses the segment before the adapter runs.
#[tokio::test]
async fn a_callers_credentials_are_redacted_from_its_execution_only() {
    use harness_core::tool::{CallerCredentials, Credential};
    const CALLERS: &str = "callers-own-token-6d5c4b3a";
    let script = Script::builder()
        .text("the server said callers-own-")
        .text("token-6d5c4b3a back")
        .complete(format!("done with {CALLERS}"))
        .build();
    let svc = service(script);
    let mut request = ExecutionRequest::new("go");
    request
        .extensions
        .insert(CallerCredentials::new().with("github", Credential::new(CALLERS)));
    let execution = svc.clone().oneshot(request).await.unwrap();
    let Outcome::Succeeded(done) = execution.outcome().await else {
        panic!("expected success")
    };
    assert_eq!(done.summary.as_deref(), Some("done with [REDACTED:secret]"));
    let all: Vec<_> = execution.events(Cursor::START).collect().await;
    assert_eq!(
        text_of(&all, false),
        "the server said [REDACTED:secret] back"
    );
    for event in &all {
        let json = serde_json::to_string(event).unwrap();
        assert!(!json.contains(CALLERS), "{json}");
        assert_clean(event.kind().as_str(), &json);
    }

    // Without credentials the same text is not a secret of this service's.
    let plain = svc
        .clone()
        .oneshot(ExecutionRequest::new("go"))
        .await
        .unwrap();
    let all: Vec<_> = plain.events(Cursor::START).collect().await;
    assert_eq!(
        text_of(&all, false),
        "the server said callers-own-token-6d5c4b3a back"
    );

    // Too short to redact exactly: refused, naming the provider and not the value.
    let mut request = ExecutionRequest::new("go");
    request
        .extensions
        .insert(CallerCredentials::new().with("github", Credential::new("x7q")));
    let refused = svc.oneshot(request).await.unwrap();
    let Outcome::Failed(err) = refused.outcome().await else {
        panic!("expected a failure")
    };
    assert_eq!(err.code(), &ErrorCode::CALLER_CREDENTIAL_INVALID);
    assert!(err.message().contains("`github`"), "{}", err.message());
    assert!(!err.message().contains("x7q"), "{}", err.message());
    let all: Vec<_> = refused.events(Cursor::START).collect().await;
    assert!(
        all.iter()
            .all(|e| !matches!(e.payload(), EventPayload::MessageDelta(_))),
        "the adapter ran"
    );
}
