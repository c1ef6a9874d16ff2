//! Skills found by a real harness: Codex (`@zed-industries/codex-acp` 0.16.0), pointed at the
//! mock model server, is granted a skill written where it reads repository skills in its
//! workspace (`.agents/skills`), and lists it to its model: the model's request holds the
//! skill's description. After the run the folder is gone.
//!
//! Claude Code (`@agentclientprotocol/claude-agent-acp` 0.101.0) is not a case: given the same
//! skill in `<cwd>/.claude/skills` (with `settingSources` `project`, as the bridge sets), its
//! first model request in this setup carries no skill listing, so nothing here shows it reads
//! them; the adapter's ACP test agent and Codex do.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::real::{HELLO, Harness, Mock, assert_tree_gone, fixtures};
use common::{marker, read_until, text, workspace};
use harness_acp::{AcpAdapter, CODEX_SKILLS_DIR};
use harness_core::id::Cursor;
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
use harness_core::skill::{Skill, SkillCatalog, SkillLimits};

const DESCRIPTION: &str =
    "Converts invoices to the ledger format. Use when an invoice-ledger-7c41 is mentioned.";

fn catalog() -> Arc<SkillCatalog> {
    let md = format!(
        "---\nname: invoice-ledger\ndescription: {DESCRIPTION}\n---\n# Invoice ledger\nRun convert.py.\n"
    );
    let skill = Skill::parse(
        md.as_bytes(),
        [("convert.py", b"print('ok')\n".to_vec())],
        &SkillLimits::default(),
    )
    .unwrap();
    Arc::new(SkillCatalog::new().offer(skill))
}

async fn lists_the_skill(harness: Harness, dir: &str) {
    let mark = marker("real-skills");
    let workspace = workspace(&mark);
    let scratch = workspace.with_extension("home");
    std::fs::create_dir_all(&scratch).unwrap();
    let mock = Mock::start(&fixtures(harness), &scratch);
    let agent = harness
        .agent(&mark, &mock, &scratch, workspace.clone())
        .with_skills_dir(dir);
    let service = AdapterService::builder(AcpAdapter::new(agent).unwrap())
        .skills(catalog())
        .build();
    let mut request = ExecutionRequest::new("say hello");
    request.skills = vec!["invoice-ledger".to_owned()];
    let execution = service.start(request).await.unwrap();
    let events = read_until(&execution, Cursor::START, |e| e.kind().is_terminal()).await;
    let outcome = tokio::time::timeout(common::WAIT, execution.outcome())
        .await
        .expect("the outcome");
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert_eq!(text(&events).trim(), HELLO);
    let journal = mock.journal();
    assert!(
        journal.contains(DESCRIPTION),
        "{}: the model's requests do not list the granted skill",
        harness.name()
    );
    drop(execution);
    let folder = workspace.join(dir).join("invoice-ledger");
    for _ in 0..100 {
        if !folder.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!folder.exists(), "cleanup leaves {}", folder.display());
    assert_tree_gone(&mark).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_lists_a_granted_skill_to_its_model() {
    lists_the_skill(Harness::CodexZed, CODEX_SKILLS_DIR).await;
}
