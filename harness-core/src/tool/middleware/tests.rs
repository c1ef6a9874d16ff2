use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use serde_json::{Value, json};

use super::glob::Glob;
use super::*;
use crate::id::{ExecutionId, ToolCallId};
use crate::tool::{
    BoxFuture, PortableTool, ToolCallContext, ToolDescriptor, ToolHandle, ToolPolicy,
};

fn config(value: Value) -> MiddlewareConfig {
    serde_json::from_value(value).unwrap()
}

fn compile(value: Value) -> Result<PortableMiddlewarePolicy, InvalidMiddleware> {
    PortableMiddlewarePolicy::compile(&config(value))
}

/// The reference matcher: plain recursion over characters.
fn reference(p: &[char], t: &[char]) -> bool {
    match (p.first(), t.first()) {
        (None, None) => true,
        (None, Some(_)) => false,
        (Some('*'), _) => reference(&p[1..], t) || (!t.is_empty() && reference(p, &t[1..])),
        (Some(_), None) => false,
        (Some('?'), Some(_)) => reference(&p[1..], &t[1..]),
        (Some(a), Some(b)) => a == b && reference(&p[1..], &t[1..]),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// The glob matcher agrees with the reference on small alphabets, where wildcards and
    /// repeated characters make backtracking matter.
    #[test]
    fn glob_matches_like_the_reference(
        pattern in "[ab.*?é]{1,10}",
        id in "[ab.é]{0,12}",
    ) {
        let glob = Glob::new(&pattern).unwrap();
        let p: Vec<char> = pattern.chars().collect();
        let t: Vec<char> = id.chars().collect();
        prop_assert_eq!(glob.matches(&id), reference(&p, &t), "{} vs {}", pattern, id);
    }

    /// The first rule that matches decides, as a linear scan would, whatever mix of exact
    /// and wildcard rules.
    #[test]
    fn the_first_matching_rule_decides(
        patterns in proptest::collection::btree_set("[ab.*]{1,4}", 1..8),
        id in "[ab.]{1,5}",
    ) {
        let patterns: Vec<String> = patterns.into_iter().collect();
        let actions = ["allow", "deny", "require_approval"];
        let tools: Vec<Value> = patterns
            .iter()
            .enumerate()
            .map(|(i, p)| json!({"tool": p, "action": actions[i % 3]}))
            .collect();
        let policy = compile(json!({"tools": tools, "defaultAction": "deny"})).unwrap();
        let expected = patterns
            .iter()
            .position(|p| {
                reference(&p.chars().collect::<Vec<_>>(), &id.chars().collect::<Vec<_>>())
            })
            .map_or(ToolAction::Deny, |i| ToolAction::parse(actions[i % 3]).unwrap());
        prop_assert_eq!(policy.decide(&id).action(), expected);
    }
}

#[test]
fn glob_worst_case_stays_cheap() {
    // Many stars against a long near-miss: the matcher backtracks only to the last star.
    let glob = Glob::new(&"*a".repeat(120)).unwrap();
    let id = "a".repeat(4096) + "b";
    let started = std::time::Instant::now();
    assert!(!glob.matches(&id));
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
}

#[test]
fn decisions_follow_the_documented_precedence() {
    let policy = compile(json!({
        "tools": [
            {"tool": "fs.read", "action": "allow"},
            {"tool": "fs.*", "action": "deny"},
            {"tool": "*delete*", "action": "require_approval"},
            {"tool": "db.delete_all", "action": "deny"},
        ]
    }))
    .unwrap();
    assert_eq!(policy.decide("fs.read").action(), ToolAction::Allow);
    let write = policy.decide("fs.write");
    assert_eq!(write.action(), ToolAction::Deny);
    assert_eq!(write.rule(), Some("fs.*"));
    // fs.delete: `fs.*` comes first.
    assert_eq!(policy.decide("fs.delete").action(), ToolAction::Deny);
    // An exact rule after a glob that matches: the glob decides.
    assert_eq!(
        policy.decide("db.delete_all").action(),
        ToolAction::RequireApproval
    );
    assert_eq!(policy.decide("weather.now").action(), ToolAction::Allow);
    assert_eq!(policy.decide("weather.now").rule(), None);
    assert!(PortableMiddlewarePolicy::default().decide("x").is_noop());
    assert!(compile(json!({})).unwrap().is_allow_all());
}

#[test]
fn bad_configurations_name_the_rule_and_the_fix() {
    let cases = [
        (
            json!({"tools": [{"tool": "a", "action": "allow"}, {"tool": "fs.*", "action": "block"}]}),
            "tools[1]",
            "unknown action `block`",
        ),
        (
            json!({"tools": [{"tool": "fs.*", "action": "deny"}, {"tool": "fs.*", "action": "allow"}]}),
            "tools[1]",
            "already the pattern of tools[0]",
        ),
        (
            json!({"tools": [{"tool": "", "action": "deny"}]}),
            "tools[0]",
            "empty",
        ),
        (
            json!({"tools": [{"tool": "fs .*", "action": "deny"}]}),
            "tools[0]",
            "no tool id holds",
        ),
        (
            json!({"tools": [{"tool": "x".repeat(300), "action": "deny"}]}),
            "tools[0]",
            "at most 256",
        ),
        (json!({"defaultAction": "nope"}), "defaultAction", "nope"),
        (
            json!({"arguments": {"maxBytes": 0}}),
            "arguments.maxBytes",
            "at least 1",
        ),
        (
            json!({"results": {"maxBytes": 10}}),
            "results.maxBytes",
            "at least 64",
        ),
        (
            json!({"arguments": {"rewrite": [{"tool": "a"}]}}),
            "arguments.rewrite[0]",
            "neither sets nor removes",
        ),
        (
            json!({"arguments": {"rewrite": [{"tool": "a", "set": {"x": 1}, "remove": ["x"]}]}}),
            "arguments.rewrite[0]",
            "both set and removed",
        ),
        (
            json!({"limits": {"maxToolCalls": 0}}),
            "limits.maxToolCalls",
            "maxToolCalls",
        ),
        (
            json!({"results": {"redact": {"secrets": ["hunter2"]}}}),
            "results.redact",
            "harness_layers::middleware::compile",
        ),
    ];
    for (value, rule, says) in cases {
        let err = compile(value.clone()).unwrap_err();
        assert_eq!(err.rule, rule, "{value}: {err}");
        assert!(err.to_string().contains(says), "{value}: {err}");
    }
    // Unknown fields are refused by the configuration's own parsing, naming them.
    let err = serde_json::from_value::<MiddlewareConfig>(json!({"tool": []})).unwrap_err();
    assert!(err.to_string().contains("unknown field `tool`"), "{err}");
}

#[derive(Debug)]
struct Upper;

impl ResultRedactor for Upper {
    fn redact_value(&self, value: &mut Value) -> bool {
        let text = value.to_string();
        if !text.contains("sk-secret") {
            return false;
        }
        *value = serde_json::from_str(&text.replace("sk-secret", "[REDACTED]")).unwrap();
        true
    }

    fn redact_text(&self, text: &str) -> Option<String> {
        text.contains("sk-secret")
            .then(|| text.replace("sk-secret", "[REDACTED]"))
    }
}

/// Echoes its arguments (or fails with them), counting calls.
struct Echo {
    descriptor: ToolDescriptor,
    calls: Arc<AtomicUsize>,
}

impl PortableTool for Echo {
    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    fn invoke(&self, arguments: Value, _ctx: ToolCallContext) -> BoxFuture<'_, ToolOutcome> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            if arguments.get("fail").is_some() {
                return ToolOutcome::failure(format!("failed with {arguments}"));
            }
            ToolOutcome::Success(arguments)
        })
    }
}

fn echo(id: &str) -> (ToolHandle, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let descriptor =
        ToolDescriptor::new(id.parse().unwrap(), "Echo.", json!({"type": "object"})).unwrap();
    (
        ToolHandle::new(Arc::new(Echo {
            descriptor,
            calls: Arc::clone(&calls),
        })),
        calls,
    )
}

fn call(handle: &ToolHandle, arguments: Value) -> ToolOutcome {
    let ctx = ToolCallContext::new(ToolCallId::generate(), ExecutionId::generate());
    futures_util::FutureExt::now_or_never(handle.invoke(arguments, ctx)).unwrap()
}

fn policy() -> PortableMiddlewarePolicy {
    compile(json!({
        "tools": [
            {"tool": "fs.*", "action": "deny"},
            {"tool": "*delete*", "action": "require_approval"},
        ],
        "arguments": {
            "maxBytes": 200,
            "rewrite": [
                {"tool": "http.*", "set": {"timeoutMs": 5000}, "remove": ["proxy"]},
                {"tool": "http.get", "set": {"retries": 0}},
            ]
        },
        "results": {"maxBytes": 120},
    }))
    .unwrap()
    .with_result_redactor(Arc::new(Upper))
}

#[test]
fn a_denied_tool_never_runs_and_the_model_is_told_why() {
    let (handle, calls) = echo("fs.write");
    // The tool's own policy asks for approval: the denial still wins, and no approval opens.
    let handle = handle
        .with_policy(ToolPolicy::new().needs_approval())
        .unwrap()
        .with_middleware(&policy());
    let ToolOutcome::Failure(failure) = call(&handle, json!({"path": "a"})) else {
        panic!("expected a failure")
    };
    assert_eq!(failure.code(), &ErrorCode::TOOL_DENIED_BY_POLICY);
    assert!(
        failure.message().contains("fs.write"),
        "{}",
        failure.message()
    );
    assert!(
        failure.message().contains("tools[0]"),
        "{}",
        failure.message()
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[test]
fn require_approval_opens_an_action_even_when_the_tool_does_not_ask() {
    let (handle, calls) = echo("db.delete_row");
    assert!(!handle.requires_approval());
    let handle = handle.with_middleware(&policy());
    assert!(handle.requires_approval());
    assert!(matches!(
        call(&handle, json!({"row": 1})),
        ToolOutcome::Action(_)
    ));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[test]
fn arguments_are_capped_then_rewritten() {
    let (handle, calls) = echo("http.get");
    let handle = handle.with_middleware(&policy());
    let ToolOutcome::Success(seen) = call(
        &handle,
        json!({"url": "https://x", "proxy": "p", "timeoutMs": 1}),
    ) else {
        panic!("expected a success")
    };
    assert_eq!(
        seen,
        json!({"url": "https://x", "timeoutMs": 5000, "retries": 0})
    );
    let ToolOutcome::Failure(failure) = call(&handle, json!({"url": "x".repeat(300)})) else {
        panic!("expected a failure")
    };
    assert_eq!(failure.code(), &ErrorCode::TOOL_ARGUMENTS_TOO_LARGE);
    assert!(
        failure.message().contains("200 bytes"),
        "{}",
        failure.message()
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn results_are_redacted_then_truncated_and_failures_redacted() {
    let (handle, _) = echo("weather.now");
    let handle = handle.with_middleware(&policy());
    assert_eq!(
        call(&handle, json!({"key": "sk-secret"})),
        ToolOutcome::Success(json!({"key": "[REDACTED]"}))
    );
    let ToolOutcome::Success(Value::String(cut)) = call(&handle, json!({"text": "y".repeat(150)}))
    else {
        panic!("expected a truncated string")
    };
    assert!(cut.len() <= 120, "{} bytes: {cut}", cut.len());
    assert!(cut.starts_with(r#"{"text":"yyy"#), "{cut}");
    assert!(cut.contains(TRUNCATION_MARKER), "{cut}");
    assert!(cut.ends_with("(161 bytes)"), "{cut}");
    let ToolOutcome::Failure(failure) = call(&handle, json!({"fail": "sk-secret"})) else {
        panic!("expected a failure")
    };
    assert!(
        !failure.message().contains("sk-secret"),
        "{}",
        failure.message()
    );
    assert!(
        failure.message().contains("[REDACTED]"),
        "{}",
        failure.message()
    );
    // Without the middleware the same calls pass unchanged.
    let (plain, _) = echo("weather.now");
    assert_eq!(
        call(&plain, json!({"key": "sk-secret"})),
        ToolOutcome::Success(json!({"key": "sk-secret"}))
    );
}

#[test]
fn truncation_cuts_on_a_character_boundary() {
    let value = json!("é".repeat(100));
    for limit in 64..90 {
        let Value::String(cut) = truncated(value.clone(), limit) else {
            panic!("expected a string")
        };
        assert!(cut.len() <= limit, "{limit}: {cut}");
        assert!(cut.contains(TRUNCATION_MARKER));
    }
}

#[test]
fn caps_narrow_the_run_limits() {
    let policy = compile(json!({"limits": {"maxToolCalls": 3, "maxModelTurns": 5}})).unwrap();
    assert_eq!(policy.limits().max_tool_calls(), Some(3));
    assert_eq!(policy.limits().max_model_turns(), Some(5));
    let operator = RunLimits::none().with_max_tool_calls(2).unwrap();
    assert_eq!(
        operator.narrowed_by(&policy.limits()).max_tool_calls(),
        Some(2)
    );
}

/// Many callers share one compiled policy and one governed handle: each call gets its own
/// decision applied, whatever the interleaving.
#[test]
fn concurrent_callers_share_one_policy() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    let policy = policy();
    let (notes, calls) = echo("notes.read");
    let notes = notes.with_middleware(&policy);
    let (files, file_calls) = echo("fs.read");
    let files = files.with_middleware(&policy);
    rt.block_on(async {
        let tasks: Vec<_> = (0..64)
            .map(|t| {
                let (notes, files) = (notes.clone(), files.clone());
                tokio::spawn(async move {
                    for i in 0..100 {
                        let ctx =
                            ToolCallContext::new(ToolCallId::generate(), ExecutionId::generate());
                        let key = format!("sk-secret-{t}-{i}");
                        let out = notes.invoke(json!({ "key": key }), ctx.clone()).await;
                        assert_eq!(
                            out,
                            ToolOutcome::Success(json!({ "key": format!("[REDACTED]-{t}-{i}") }))
                        );
                        let ToolOutcome::Failure(f) = files.invoke(json!({}), ctx).await else {
                            panic!("fs.read ran")
                        };
                        assert_eq!(f.code(), &ErrorCode::TOOL_DENIED_BY_POLICY);
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
    assert_eq!(calls.load(Ordering::SeqCst), 6400);
    assert_eq!(file_calls.load(Ordering::SeqCst), 0);
}
