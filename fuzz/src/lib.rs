//! What the fuzz targets and the seed writer (`src/seeds.rs`) share.

use std::sync::{Arc, OnceLock};

use harness_core::action::{ActionRequest, ApprovalRequest, FieldKind, FormField, FormRequest};
use harness_layers::redaction::{PatternRule, Redactor};
use serde_json::json;

/// The registered secrets of the `redaction` target's redactor.
pub const SECRETS: [&str; 2] = ["hunter2-db-password", "cred00-Q7zX-secret"];

/// The built-in rules, [`SECRETS`], a small-window rule whose caps are reached, and rules
/// without prefixes (found by the search of a stream's open tail and its lazy DFA, after
/// streams count their runs): one whose match takes the character that ends its run, and
/// one whose shortest match exceeds its window (it never matches, but its runs are counted
/// across the text a stream drops); and one that declares neither prefixes nor token
/// characters, so both are derived from its pattern (two schemes, its characters).
pub fn redactor() -> &'static Arc<Redactor> {
    static REDACTOR: OnceLock<Arc<Redactor>> = OnceLock::new();
    REDACTOR.get_or_init(|| {
        let kv = PatternRule::new("kv", r"k:(?P<secret>[a-z0-9]{4,}k:)")
            .and_then(|r| r.max_len(24).prefixes(["k:", "kk:"]).token_chars("a-z0-9:"))
            .expect("rule");
        let ssn = PatternRule::new("ssn", r"(?-u:\b)[0-9]{3}-[0-9]{2}-[0-9]{4}(?-u:\b)")
            .and_then(|r| r.max_len(16).token_chars("0-9-"))
            .expect("rule");
        let pin = PatternRule::new("pin", r"[0-9]{4}x")
            .and_then(|r| r.max_len(16).token_chars("0-9"))
            .expect("rule");
        let long = PatternRule::new("long", r"[a-f0-9]+")
            .and_then(|r| r.max_len(24).min_len(40).token_chars("a-f0-9"))
            .expect("rule");
        let url = PatternRule::new("url", r"(?:db|pg)://[a-z0-9]+:[a-z0-9]{4,}@")
            .map(|r| r.max_len(32))
            .expect("rule");
        Arc::new(
            Redactor::builder()
                .secrets(SECRETS)
                .rule(kv)
                .rule(ssn)
                .rule(pin)
                .rule(long)
                .rule(url)
                .build()
                .expect("redactor"),
        )
    })
}

/// An approval of one editable call with an input schema, and a form of two fields.
pub fn action_requests() -> &'static [ActionRequest; 2] {
    static REQUESTS: OnceLock<[ActionRequest; 2]> = OnceLock::new();
    REQUESTS.get_or_init(|| {
        let schema = json!({
            "type": "object",
            "properties": {"cmd": {"type": "string", "maxLength": 64}},
            "required": ["cmd"],
            "additionalProperties": false
        });
        let call = "c1".parse().expect("call id");
        let approval = ApprovalRequest::single(call, "shell", json!({"cmd": "ls"}), schema)
            .expect("approval")
            .allow_edit();
        let form = FormRequest::new([
            FormField::new("name".parse().expect("name"), "Name", FieldKind::text()).required(),
            FormField::new("age".parse().expect("name"), "Age", FieldKind::integer()),
        ])
        .expect("form");
        [
            ActionRequest::approval(approval).with_id("act_1".parse().expect("id")),
            ActionRequest::form(form).with_id("act_2".parse().expect("id")),
        ]
    })
}
