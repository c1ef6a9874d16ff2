use super::portable::fnv1a_32;
use super::*;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use crate::action::ActionRequest;
use crate::error::ErrorCode;
use crate::id::{ExecutionId, ToolCallId};
use proptest::prelude::*;
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

fn ctx() -> ToolCallContext {
    ToolCallContext::new(ToolCallId::generate(), ExecutionId::generate())
}

fn id(s: &str) -> ToolId {
    s.parse().unwrap()
}

fn strict_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "title": { "type": "string" },
            "count": { "type": "integer", "minimum": 1 },
            "tags": { "type": "array", "items": { "type": "string" } }
        },
        "required": ["title"],
        "additionalProperties": false
    })
}

/// Counts calls; panics, fails or succeeds on demand; holds a secret it never shows.
struct Probe {
    descriptor: ToolDescriptor,
    calls: Arc<AtomicUsize>,
    api_key: String,
    behaviour: Behaviour,
}

#[derive(Clone, Copy)]
enum Behaviour {
    Echo,
    PanicInFuture,
    PanicBeforeFuture,
    LongFailure,
}

impl Probe {
    fn handle(behaviour: Behaviour) -> (ToolHandle, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let tool = Self {
            descriptor: ToolDescriptor::new(id("demo.probe"), "Probe.", strict_schema()).unwrap(),
            calls: calls.clone(),
            api_key: "sk-live-SECRET".to_owned(),
            behaviour,
        };
        (ToolHandle::new(Arc::new(tool)), calls)
    }
}

impl PortableTool for Probe {
    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    fn invoke(&self, arguments: Value, _ctx: ToolCallContext) -> BoxFuture<'_, ToolOutcome> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if let Behaviour::PanicBeforeFuture = self.behaviour {
            panic!("sync panic with {}", self.api_key);
        }
        Box::pin(async move {
            match self.behaviour {
                Behaviour::Echo => ToolOutcome::Success(arguments),
                Behaviour::PanicInFuture => panic!("async panic with {}", self.api_key),
                Behaviour::LongFailure => ToolOutcome::failure("x".repeat(100_000)),
                Behaviour::PanicBeforeFuture => unreachable!(),
            }
        })
    }
}

fn failure(outcome: ToolOutcome) -> BoundedFailure {
    match outcome {
        ToolOutcome::Failure(f) => f,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn tool_id_rules() {
    for ok in ["a", "github.create_issue", "a1.b_2.c", &"a".repeat(128)] {
        assert!(ToolId::is_valid(ok), "{ok}");
    }
    for bad in [
        "",
        "A",
        "a.",
        ".a",
        "a..b",
        "a.1b",
        "a-b",
        "a b",
        "é",
        &"a".repeat(129),
    ] {
        assert!(!ToolId::is_valid(bad), "{bad}");
        assert!(bad.parse::<ToolId>().is_err());
    }
    let err = serde_json::from_str::<ToolId>("\"Bad.Id\"").unwrap_err();
    assert!(
        err.to_string().contains("invalid tool id `Bad.Id`"),
        "{err}"
    );
}

#[test]
fn invalid_schema_is_rejected_at_construction_and_deserialization() {
    let err = ToolDescriptor::new(id("a.b"), "d", json!({ "type": 12 })).unwrap_err();
    assert_eq!(err.tool, id("a.b"));
    let err = ToolDescriptor::new(
        id("a.b"),
        "d",
        json!({ "$ref": "https://example.com/remote.json" }),
    )
    .unwrap_err();
    assert!(err.to_string().contains("a.b"), "{err}");
    let wire = json!({ "id": "a.b", "description": "d", "inputSchema": { "minimum": "x" } });
    assert!(serde_json::from_value::<ToolDescriptor>(wire).is_err());
    let wire = json!({ "id": "a.b", "description": "d", "inputSchema": {}, "extra": 1 });
    let err = serde_json::from_value::<ToolDescriptor>(wire).unwrap_err();
    assert!(err.to_string().contains("unknown field `extra`"), "{err}");
}

#[test]
fn valid_arguments_reach_the_tool() {
    let (handle, calls) = Probe::handle(Behaviour::Echo);
    let args = json!({ "title": "t", "count": 2 });
    let outcome = rt().block_on(handle.invoke(args.clone(), ctx()));
    assert_eq!(outcome, ToolOutcome::Success(args));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn wrong_types_and_unknown_fields_are_listed_and_the_tool_is_not_called() {
    let (handle, calls) = Probe::handle(Behaviour::Echo);
    let args = json!({
        "title": 5,
        "count": 0,
        "tags": ["ok", 3],
        "extra": true,
        "more": "sk-should-not-echo"
    });
    let f = failure(rt().block_on(handle.invoke(args.clone(), ctx())));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(f.code(), &ErrorCode::TOOL_ARGUMENTS_INVALID);
    assert!(!f.retryable());
    for pointer in ["/title", "/count", "/tags/1", "/extra", "/more"] {
        assert!(
            f.message().contains(&format!("at {pointer}:")),
            "{pointer}: {}",
            f.message()
        );
    }
    assert!(
        !f.message().contains("sk-should-not-echo"),
        "{}",
        f.message()
    );

    let err = handle.descriptor().validate_arguments(&args).unwrap_err();
    let mut pointers: Vec<_> = err
        .violations()
        .iter()
        .map(|v| v.pointer.as_str())
        .collect();
    pointers.sort_unstable();
    assert_eq!(pointers, ["/count", "/extra", "/more", "/tags/1", "/title"]);
}

#[test]
fn missing_required_and_non_object_arguments_are_rejected() {
    let (handle, calls) = Probe::handle(Behaviour::Echo);
    let f = failure(rt().block_on(handle.invoke(json!({}), ctx())));
    assert!(f.message().contains("at (root):"), "{}", f.message());
    assert!(f.message().contains("title"), "{}", f.message());
    let f = failure(rt().block_on(handle.invoke(json!([1, 2]), ctx())));
    assert_eq!(f.code(), &ErrorCode::TOOL_ARGUMENTS_INVALID);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[test]
fn the_handle_keeps_the_schema_it_was_built_with() {
    // A tool whose descriptor changes after the handle was built cannot widen its
    // arguments through the handle.
    struct Shifty {
        strict: ToolDescriptor,
        open: ToolDescriptor,
        handed_out: AtomicUsize,
    }
    impl PortableTool for Shifty {
        fn descriptor(&self) -> &ToolDescriptor {
            if self.handed_out.fetch_add(1, Ordering::SeqCst) == 0 {
                &self.strict
            } else {
                &self.open
            }
        }
        fn invoke(&self, a: Value, _: ToolCallContext) -> BoxFuture<'_, ToolOutcome> {
            Box::pin(async move { ToolOutcome::Success(a) })
        }
    }
    let handle = ToolHandle::new(Arc::new(Shifty {
        strict: ToolDescriptor::new(id("s.t"), "d", strict_schema()).unwrap(),
        open: ToolDescriptor::new(id("s.t"), "d", json!(true)).unwrap(),
        handed_out: AtomicUsize::new(0),
    }));
    let outcome = rt().block_on(handle.invoke(json!({ "anything": 1 }), ctx()));
    assert_eq!(failure(outcome).code(), &ErrorCode::TOOL_ARGUMENTS_INVALID);
    assert_eq!(handle.descriptor().input_schema(), &strict_schema());
}

#[test]
fn panics_become_generic_failures() {
    for behaviour in [Behaviour::PanicInFuture, Behaviour::PanicBeforeFuture] {
        let (handle, calls) = Probe::handle(behaviour);
        let f = failure(rt().block_on(handle.invoke(json!({ "title": "t" }), ctx())));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(f.code(), &ErrorCode::TOOL_PANICKED);
        assert!(!f.message().contains("panic"), "{}", f.message());
        assert!(!f.message().contains("SECRET"), "{}", f.message());
    }
}

#[test]
fn an_expired_deadline_does_not_call_the_tool() {
    let (handle, calls) = Probe::handle(Behaviour::Echo);
    let past = Instant::now();
    let f =
        failure(rt().block_on(handle.invoke(json!({ "title": "t" }), ctx().with_deadline(past))));
    assert_eq!(f.code(), &ErrorCode::TOOL_DEADLINE_EXCEEDED);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[test]
fn invoke_is_lazy() {
    let (handle, calls) = Probe::handle(Behaviour::Echo);
    let invocation = handle.invoke(json!({ "title": "t" }), ctx());
    assert!(format!("{invocation:?}").contains("start"));
    drop(invocation);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[test]
fn failure_messages_are_bounded_at_a_char_boundary() {
    let (handle, _) = Probe::handle(Behaviour::LongFailure);
    let f = failure(rt().block_on(handle.invoke(json!({ "title": "t" }), ctx())));
    assert_eq!(f.message().len(), BoundedFailure::MAX_MESSAGE_BYTES);
    assert!(f.message().ends_with(BoundedFailure::TRUNCATION_MARKER));

    for len in 4080..4100 {
        let m = BoundedFailure::new("€".repeat(len / 3) + &"a".repeat(len % 3));
        assert!(m.message().len() <= BoundedFailure::MAX_MESSAGE_BYTES);
    }
    let short = BoundedFailure::new("short");
    assert_eq!(short.message(), "short");

    // Deserialization bounds too.
    let wire = json!({ "message": "y".repeat(10_000), "retryable": true });
    let f: BoundedFailure = serde_json::from_value(wire).unwrap();
    assert!(f.message().len() <= BoundedFailure::MAX_MESSAGE_BYTES);
    assert!(f.retryable());
    assert_eq!(f.code(), &ErrorCode::TOOL_FAILED);
}

fn pending_form() -> ActionRequest {
    let field = crate::action::FormField::new(
        "name".parse().unwrap(),
        "Name",
        crate::action::FieldKind::text(),
    );
    ActionRequest::form(crate::action::FormRequest::new([field]).unwrap())
        .with_created_at("2026-12-01T00:00:00Z".parse().unwrap())
}

#[test]
fn outcome_wire_format_round_trips() {
    let outcomes = [
        ToolOutcome::Success(json!([1, "two"])),
        ToolOutcome::Success(Value::Null),
        ToolOutcome::Failure(BoundedFailure::new("nope").with_retryable(true)),
        ToolOutcome::Action(Box::new(pending_form())),
    ];
    for o in outcomes {
        let wire = serde_json::to_value(&o).unwrap();
        let back: ToolOutcome = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(back, o, "{wire}");
    }
    let wire = serde_json::to_value(ToolOutcome::Action(Box::new(pending_form()))).unwrap();
    assert_eq!(wire["status"], "action");
    assert_eq!(wire["request"]["kind"]["type"], "form_input");
    let err = serde_json::from_value::<ToolOutcome>(
        json!({ "status": "failure", "message": "m", "x": 1 }),
    )
    .unwrap_err();
    assert!(err.to_string().contains("unknown field `x`"), "{err}");
}

#[test]
fn the_handle_never_shows_the_credential() {
    let (handle, _) = Probe::handle(Behaviour::Echo);
    let shown = format!("{handle:?} {handle:#?} {:?}", handle.descriptor());
    assert!(!shown.contains("SECRET"), "{shown}");
    assert_eq!(format!("{handle:?}"), r#"ToolHandle { id: "demo.probe" }"#);
}

#[test]
fn handles_and_invocations_are_send_and_sync() {
    fn assert_send<T: Send>() {}
    fn assert_sync<T: Sync>() {}
    assert_send::<ToolHandle>();
    assert_sync::<ToolHandle>();
    assert_send::<ToolInvocation<'static>>();
    assert_send::<ToolDescriptor>();
    assert_sync::<ToolDescriptor>();
    let _: Option<Arc<dyn PortableTool>> = None;
}

#[test]
fn a_cloned_handle_can_be_spawned() {
    let (handle, calls) = Probe::handle(Behaviour::Echo);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let h = handle.clone();
            rt.spawn(async move { h.invoke(json!({ "title": format!("{i}") }), ctx()).await })
        })
        .collect();
    for t in tasks {
        assert!(rt.block_on(t).unwrap().is_success());
    }
    assert_eq!(calls.load(Ordering::SeqCst), 8);
}

#[test]
fn fnv1a_matches_the_reference_and_names_are_stable() {
    // FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c; folded: hi ^ lo.
    assert_eq!(fnv1a_32("a", 0), 0xaf63_dc4c ^ 0x8601_ec8c);
    let names = ProviderToolNames::new([&id("github.create_issue")], ProviderNameRule::COMMON);
    // Pinned literally: provider names persist in conversation histories, so changing
    // the hash or the layout breaks resumed conversations.
    assert_eq!(
        names.to_provider(&id("github.create_issue")),
        Some("github_create_issue-7d7ec09a")
    );
    let names = ProviderToolNames::new([&id("a.b_c"), &id("a_b.c")], ProviderNameRule::COMMON);
    assert_eq!(names.to_provider(&id("a.b_c")), Some("a_b_c-1387a44b"));
    assert_eq!(names.to_provider(&id("a_b.c")), Some("a_b_c-01e9e2fa"));
}

#[test]
fn generated_schemas_accept_what_serde_writes() {
    fn check<T: JsonSchema + Serialize>(values: &[T]) {
        let schema = schemars::generate::SchemaSettings::draft2020_12()
            .into_generator()
            .into_root_schema_for::<T>();
        let validator = jsonschema::validator_for(schema.as_value()).unwrap();
        for v in values {
            let wire = serde_json::to_value(v).unwrap();
            let errors: Vec<_> = validator
                .iter_errors(&wire)
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "{wire}: {errors:?}");
        }
    }
    check(&[
        ToolOutcome::Success(json!({ "a": 1 })),
        ToolOutcome::Failure(BoundedFailure::new("m")),
        ToolOutcome::Action(Box::new(pending_form())),
    ]);
    check(&[ToolDescriptor::new(id("a.b"), "d", strict_schema()).unwrap()]);
    // The schema rejects what deserialization rejects.
    let schema = schemars::generate::SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<ToolOutcome>();
    let validator = jsonschema::validator_for(schema.as_value()).unwrap();
    assert!(!validator.is_valid(&json!({ "status": "failure", "message": "m", "x": 1 })));
    assert!(!validator.is_valid(&json!({ "status": "exploded" })));
}

#[test]
fn names_of_plain_ids_are_unchanged_and_collisions_are_disambiguated() {
    let ids = [id("a.b_c"), id("a_b.c"), id("a_b_c"), id("search")];
    let names = ProviderToolNames::new(&ids, ProviderNameRule::COMMON);
    assert_eq!(names.to_provider(&id("a_b_c")), Some("a_b_c"));
    assert_eq!(names.to_provider(&id("search")), Some("search"));
    let n1 = names.to_provider(&id("a.b_c")).unwrap();
    let n2 = names.to_provider(&id("a_b.c")).unwrap();
    assert_ne!(n1, n2);
    assert!(n1.starts_with("a_b_c-") && n2.starts_with("a_b_c-"));
    for i in &ids {
        let n = names.to_provider(i).unwrap();
        assert_eq!(names.from_provider(n), Some(i));
    }
    assert_eq!(names.from_provider("unknown"), None);
    assert_eq!(names.to_provider(&id("not.there")), None);

    let dotted = ProviderToolNames::new(&ids, ProviderNameRule::COMMON.allowing_dots());
    assert_eq!(dotted.to_provider(&id("a.b_c")), Some("a.b_c"));
}

#[test]
fn long_ids_are_cut_and_stay_distinct() {
    let base = "a".repeat(100);
    let ids = [
        id(&format!("{base}.x")),
        id(&format!("{base}.y")),
        id(&base),
    ];
    let rule = ProviderNameRule::new(16).unwrap();
    let names = ProviderToolNames::new(&ids, rule);
    let set: BTreeSet<_> = ids.iter().map(|i| names.to_provider(i).unwrap()).collect();
    assert_eq!(set.len(), 3);
    assert!(
        set.iter().all(|n| rule.is_valid(n) && n.len() <= 16),
        "{set:?}"
    );
}

#[test]
fn hash_collisions_are_resolved_deterministically() {
    fn constant(_: &str, salt: u64) -> u32 {
        u32::try_from(salt).unwrap()
    }
    let ids = [
        id("x.a"),
        id("x_a.b"),
        id("x.a_b"),
        id("x.a.b"),
        id("x_a_b"),
    ];
    let names = ProviderToolNames::build(&ids, ProviderNameRule::COMMON, constant);
    let again = ProviderToolNames::build(ids.iter().rev(), ProviderNameRule::COMMON, constant);
    let distinct: BTreeSet<_> = names.iter().map(|(_, n)| n.to_owned()).collect();
    assert_eq!(distinct.len(), ids.len());
    for i in &ids {
        let n = names.to_provider(i).unwrap();
        assert_eq!(names.from_provider(n), Some(i));
        assert_eq!(again.to_provider(i), Some(n));
    }
}

fn tool_id_strategy() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_]{0,14}(\\.[a-z][a-z0-9_]{0,14}){0,9}"
        .prop_filter("valid tool id", |s| ToolId::is_valid(s))
}

proptest! {
    #[test]
    fn provider_names_are_a_valid_bijection(
        raw in prop::collection::vec(tool_id_strategy(), 0..40),
        max_len in ProviderNameRule::MIN_MAX_LEN..=80,
        allow_dots in any::<bool>(),
    ) {
        // Add look-alikes: every dot swapped for an underscore and back.
        let mut all: BTreeSet<ToolId> = BTreeSet::new();
        for s in &raw {
            for variant in [s.clone(), s.replace('.', "_"), s.replace('_', ".")] {
                if let Ok(i) = variant.parse() {
                    all.insert(i);
                }
            }
        }
        let mut rule = ProviderNameRule::new(max_len).unwrap();
        if allow_dots {
            rule = rule.allowing_dots();
        }
        let names = ProviderToolNames::new(&all, rule);
        prop_assert_eq!(names.len(), all.len());
        let mut seen = BTreeSet::new();
        for i in &all {
            let n = names.to_provider(i).unwrap();
            prop_assert!(rule.is_valid(n), "{} -> {} breaks the rule", i, n);
            prop_assert!(n.as_bytes()[0].is_ascii_lowercase());
            prop_assert!(seen.insert(n.to_owned()), "{} is not unique", n);
            prop_assert_eq!(names.from_provider(n), Some(i));
        }
        // A name depends on the id alone: a one-element mapping agrees.
        if let Some(first) = all.iter().next() {
            let alone = ProviderToolNames::new([first], rule);
            prop_assert_eq!(alone.to_provider(first), names.to_provider(first));
        }
    }
}
