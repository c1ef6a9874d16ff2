//! The shared conformance suite on the ACP adapter driving a real harness:
//! `@zed-industries/codex-acp` 0.16.0 (Codex through its ACP bridge, installed by
//! `.ci/install-harnesses.sh`), pointed at the mock model server `@copilotkit/aimock`. Each
//! behaviour the suite asks for is a message that a mock-model fixture answers the way a
//! model would: text, reasoning, a shell command to approve (one, two in sequence, or one
//! that then runs for ever), a slow stream, a provider error, a credential echoed back, and a
//! recall that the mock model answers with the remembered marker only when the request
//! carries the conversation's earlier turn (`turnIndex`: Codex must have loaded the session's
//! history). What a model cannot produce on demand (a form, a slow agent start, a tool that
//! runs without asking under the `ask` policy, the trace context echoed back) is not
//! exercised. `cargo test -p harness-acp --test conformance_real -- --nocapture` prints the
//! report.

mod common;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::real::{Harness, Mock, fixtures};
use harness_acp::{AcpAdapter, AcpOptions, ApprovalPolicy};
use harness_conformance::{Behaviour, Bounds, Knobs, certify};
use harness_core::error::ErrorCategory;
use harness_core::service::ExecutionRequest;
use serde_json::json;

const HARNESS: Harness = Harness::CodexZed;

struct RealKnobs {
    mock: Mock,
    home: PathBuf,
    mark: String,
    n: AtomicU64,
}

impl RealKnobs {
    fn new() -> Self {
        let mark = common::marker("conformance-real");
        let home = common::workspace(&mark).with_extension("home");
        std::fs::create_dir_all(&home).unwrap();
        let mut all = fixtures(HARNESS);
        let list = all["fixtures"].as_array_mut().unwrap();
        let touch = |id: &str, file: &str| {
            let mut call = HARNESS.touch(file);
            call["id"] = json!(id);
            call
        };
        let sleep = {
            let mut call = HARNESS.touch("started.txt");
            let mut args: serde_json::Value =
                serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
            args["cmd"] = json!("touch started.txt && sleep 600");
            call["arguments"] = json!(args.to_string());
            call
        };
        // Under the `agent` policy (`full-access`: no sandbox, approval policy "never"),
        // Codex refuses a call asking for escalation; a plain one runs.
        let unasked = |cmd: &str| json!({"name": "exec_command", "arguments": json!({"cmd": cmd}).to_string()});
        let more = [
            json!({"match": {"userMessage": "think it over"},
                   "response": {"content": "Thought it over.",
                                "reasoning": "Reasoning from the mock model."}}),
            // Two approvals in sequence: the second call follows the first one's result.
            json!({"match": {"toolCallId": "call_two"},
                   "response": {"content": "Both files are there."}}),
            json!({"match": {"toolCallId": "call_one"},
                   "response": {"toolCalls": [touch("call_two", "two.txt")]}}),
            json!({"match": {"userMessage": "create two files", "hasToolResult": false},
                   "response": {"toolCalls": [touch("call_one", "one.txt")]}}),
            json!({"match": {"userMessage": "run the tool", "hasToolResult": true},
                   "response": {"content": "The tool ran."}}),
            json!({"match": {"userMessage": "run the tool"},
                   "response": {"toolCalls": [unasked("touch success.txt")]}}),
            json!({"match": {"userMessage": "run a failing tool", "hasToolResult": true},
                   "response": {"content": "The tool failed."}}),
            json!({"match": {"userMessage": "run a failing tool"},
                   "response": {"toolCalls": [unasked("ls /nonexistent-harness-directory")]}}),
            json!({"match": {"userMessage": "start the long job"},
                   "response": {"toolCalls": [sleep]}}),
            json!({"match": {"userMessage": "work for ever"},
                   "response": {"content": "x".repeat(1000)}, "latency": 5000, "chunkSize": 1}),
            json!({"match": {"userMessage": "recall"},
                   "response": {"content": "There is nothing to recall."}}),
            // The skill: the model reads its SKILL.md where Codex reads repository skills,
            // and says the marker only if the file's text came back.
            json!({"match": {"userMessage": "use the conformance skill", "toolResultContains": harness_conformance::skills::MARKER},
                   "response": {"content": format!("The skill says {}.", harness_conformance::skills::MARKER)}}),
            json!({"match": {"userMessage": "use the conformance skill"},
                   "response": {"toolCalls": [unasked(&format!("cat {}/{}/SKILL.md", harness_acp::CODEX_SKILLS_DIR, harness_conformance::skills::SKILL))]}}),
        ];
        for (i, fixture) in more.into_iter().enumerate() {
            list.insert(i, fixture);
        }
        let mock = Mock::start(&all, &home);
        Self {
            mock,
            home,
            mark,
            n: AtomicU64::new(0),
        }
    }

    /// A message no other fixture answers, and the fixture answering it with `response`.
    fn dynamic(&self, what: &str, response: &serde_json::Value) -> ExecutionRequest {
        let message = format!("{what} {}", self.n.fetch_add(1, Ordering::Relaxed));
        self.mock
            .prepend(json!({"match": {"userMessage": message}, "response": response}));
        ExecutionRequest::new(message)
    }
}

impl Knobs for RealKnobs {
    type Adapter = AcpAdapter;

    /// One Codex per execution, each with its own workspace; CODEX_HOME (the sessions'
    /// rollouts, which `session/load` reads) is shared, as an operator's would be.
    ///
    /// `auto` is the same Codex in its `full-access` mode, under the `agent` approval policy:
    /// it runs tools without asking, for the tool fixtures that need no approval.
    fn adapter(&self) -> AcpAdapter {
        let mark = common::marker("conformance-real-run");
        let workspace = common::workspace(&mark);
        let agent = HARNESS
            .agent(&self.mark, &self.mock, &self.home, workspace.clone())
            .with_skills_dir(harness_acp::CODEX_SKILLS_DIR);
        let auto = HARNESS
            .agent(&self.mark, &self.mock, &self.home, workspace)
            .with_approval(ApprovalPolicy::Agent)
            .with_mode("full-access")
            .with_skills_dir(harness_acp::CODEX_SKILLS_DIR);
        AcpAdapter::new(agent)
            .and_then(|adapter| adapter.with_agent("auto", auto))
            .expect("a valid agent configuration")
    }

    fn request_for(&self, behaviour: &Behaviour) -> Option<ExecutionRequest> {
        // aimock refuses an error fixture without a message.
        let reason = |diagnostic: &str| {
            if diagnostic.is_empty() {
                "the mock model failed".to_owned()
            } else {
                diagnostic.to_owned()
            }
        };
        let auto = |message: &str| {
            ExecutionRequest::new(message).with_options(AcpOptions::named("auto").to_value())
        };
        Some(match behaviour {
            Behaviour::StreamText => ExecutionRequest::new("say hello"),
            Behaviour::StreamReasoning => ExecutionRequest::new("think it over"),
            Behaviour::ToolSuccess => auto("run the tool"),
            Behaviour::ToolError => auto("run a failing tool"),
            Behaviour::ToolApproval {
                calls: 1,
                editable: false,
            } => ExecutionRequest::new("create the file approved.txt"),
            Behaviour::SequentialApprovals => ExecutionRequest::new("create two files"),
            Behaviour::ApprovalThenHang => ExecutionRequest::new("start the long job"),
            Behaviour::Hang => ExecutionRequest::new("work for ever"),
            Behaviour::Fail {
                category: ErrorCategory::Unavailable,
                diagnostic,
            } => self.dynamic(
                "fail",
                &json!({"error": {"message": reason(diagnostic), "type": "server_error"}, "status": 503}),
            ),
            Behaviour::Fail {
                category: ErrorCategory::Authentication,
                diagnostic,
            } => self.dynamic(
                "fail",
                &json!({"error": {"message": reason(diagnostic), "type": "invalid_api_key"}, "status": 401}),
            ),
            Behaviour::EmitSecret { secret } => self.dynamic("repeat", &json!({"content": secret})),
            Behaviour::Remember { marker } => {
                self.mock.prepend(json!({
                    "match": {"userMessage": "recall", "turnIndex": 1},
                    "response": {"content": marker},
                }));
                ExecutionRequest::new(format!("remember {marker}"))
            }
            Behaviour::Recall => ExecutionRequest::new("recall"),
            Behaviour::UseSkill { .. } => auto("use the conformance skill"),
            _ => return None,
        })
    }

    fn plain_request(&self) -> ExecutionRequest {
        ExecutionRequest::new("say hello")
    }

    /// Codex keeps each session's rollout under `CODEX_HOME/sessions` (`CODEX_HOME` is
    /// `<home>/.codex`), which `session/load` reads: deleting them is its retention
    /// expiring them.
    fn expire_native_state(&self) -> bool {
        let sessions = self.home.join(".codex/sessions");
        assert!(
            sessions.is_dir(),
            "no Codex sessions under {}: where does this version keep them?",
            sessions.display()
        );
        std::fs::remove_dir_all(&sessions).expect("delete Codex's sessions");
        true
    }

    /// This test binary holds one test, so child processes and descriptors are the suite's.
    fn process_isolated(&self) -> bool {
        true
    }

    fn bounds(&self) -> Bounds {
        Bounds {
            run: Duration::from_secs(30),
            grace: Duration::from_secs(5),
        }
    }
}

/// Every fixture passes, is refused at preflight as declared, or is not exercised: none
/// fails. The operator does not vouch that Codex asks for forms or continues a trace context
/// (it sends no form for a model's answer and echoes no trace context back), so the adapter
/// reports form input and trace propagation unsupported for it and the suite sees them
/// refused at preflight, not claimed without evidence. `tests/conformance.rs` certifies both
/// with our test agent, for which the operator vouches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_harness_passes_the_conformance_suite() {
    let knobs = RealKnobs::new();
    let report = certify(&knobs).await;
    println!("{report}");
    let failed: Vec<&str> = report.failures().map(|f| f.id.as_str()).collect();
    if !failed.is_empty() {
        std::fs::write(knobs.home.join("journal.json"), knobs.mock.journal()).unwrap();
        panic!(
            "{report}\n(the mock model's journal: {})",
            knobs.home.join("journal.json").display()
        );
    }
    for id in [
        "action.form_input",
        "action.form_submit",
        "observability.trace_propagation",
    ] {
        let status = report.result(id).unwrap().outcome.status();
        assert!(status.contains("refused"), "{id}: {status}");
    }
    // Codex lists the granted skill to its model: the description is in the request.
    let journal = knobs.mock.journal();
    assert!(
        journal.contains(harness_conformance::skills::DESCRIPTION),
        "the model's requests never listed the granted skill"
    );
    report
        .check_published(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../harness-conformance/reports/acp-codex-zed-0.16.0.txt"
        )))
        .unwrap_or_else(|drift| panic!("{drift}"));
    common::real::assert_tree_gone(&knobs.mark).await;
}
