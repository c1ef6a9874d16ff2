//! Skills over ACP: an execution's granted skills are written where its agent reads skill
//! folders, inside its workspace (the test agent lists them back), and removed at cleanup;
//! an agent without a skills folder refuses a request for skills at preflight; the
//! operator's own folder of the same name is never overwritten.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{adapter_for, finish, marker, test_agent, text};
use harness_acp::{AcpAgent, CLAUDE_SKILLS_DIR};
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
use harness_core::skill::{Skill, SkillCatalog, SkillLimits};

const BODY_MARKER: &str = "acp-skill-body-51e0";

fn catalog() -> Arc<SkillCatalog> {
    let md = format!(
        "---\nname: pdf-forms\ndescription: Fill PDF forms.\n---\nRun scripts/fill.py ({BODY_MARKER}).\n"
    );
    let skill = Skill::parse(
        md.as_bytes(),
        [("scripts/fill.py", b"print('filled')\n".to_vec())],
        &SkillLimits::default(),
    )
    .unwrap();
    Arc::new(SkillCatalog::new().offer(skill))
}

fn asking(dir: &str) -> ExecutionRequest {
    let mut request = ExecutionRequest::new(dir);
    request.skills = vec!["pdf-forms".to_owned()];
    request
}

fn service(agent: AcpAgent) -> AdapterService<harness_acp::AcpAdapter> {
    AdapterService::builder(adapter_for(agent))
        .skills(catalog())
        .build()
}

/// Waits (bounded) until `path` is gone.
async fn gone(path: &std::path::Path) -> bool {
    for _ in 0..100 {
        if !path.exists() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_finds_its_granted_skills_in_its_workspace_until_cleanup() {
    let mark = marker("skills-found");
    let agent = test_agent("skills", &mark).with_skills_dir(CLAUDE_SKILLS_DIR);
    let folder = agent.cwd.join(".claude/skills/pdf-forms");
    let service = service(agent);
    let execution = service.start(asking(CLAUDE_SKILLS_DIR)).await.unwrap();
    let (events, outcome) = finish(&execution).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    let said = text(&events);
    assert!(
        said.starts_with("skill pdf-forms\n---\nname: pdf-forms\n"),
        "{said}"
    );
    assert!(
        said.contains(BODY_MARKER) && said.contains("file scripts/fill.py\n"),
        "{said}"
    );
    assert!(gone(&folder).await, "cleanup leaves {}", folder.display());

    // Without skills asked for, nothing is written.
    let execution = service
        .start(ExecutionRequest::new(CLAUDE_SKILLS_DIR))
        .await
        .unwrap();
    let (events, _) = finish(&execution).await;
    assert_eq!(text(&events), "no skills");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_a_skills_folder_refuses_skills_at_preflight() {
    let mark = marker("skills-none");
    let service = service(test_agent("skills", &mark));
    let err = service.start(asking(CLAUDE_SKILLS_DIR)).await.unwrap_err();
    assert_eq!(
        err.code().as_str(),
        "CAPABILITY_UNSUPPORTED",
        "{}",
        err.message()
    );
    assert!(err.message().contains("skills"), "{}", err.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_own_folder_is_never_overwritten() {
    let mark = marker("skills-own");
    let agent = test_agent("skills", &mark).with_skills_dir(CLAUDE_SKILLS_DIR);
    let own = agent.cwd.join(".claude/skills/pdf-forms");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(own.join("SKILL.md"), "the operator's").unwrap();
    let service = service(agent);
    let execution = service.start(asking(CLAUDE_SKILLS_DIR)).await.unwrap();
    let (_, outcome) = finish(&execution).await;
    let Outcome::Failed(error) = outcome else {
        panic!("expected a failure, got {outcome:?}");
    };
    assert!(error.message().contains("pdf-forms"), "{error:?}");
    assert_eq!(
        std::fs::read_to_string(own.join("SKILL.md")).unwrap(),
        "the operator's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_executions_share_a_folder_until_the_last_ends() {
    let mark = marker("skills-shared");
    let agent = test_agent("skills", &mark).with_skills_dir(CLAUDE_SKILLS_DIR);
    let folder = agent.cwd.join(".claude/skills/pdf-forms");
    let service = service(agent);
    let runs: Vec<_> = (0..8)
        .map(|_| {
            let service = service.clone();
            tokio::spawn(async move {
                let execution = service.start(asking(CLAUDE_SKILLS_DIR)).await.unwrap();
                let (events, outcome) = finish(&execution).await;
                (text(&events), outcome)
            })
        })
        .collect();
    for run in runs {
        let (said, outcome) = run.await.unwrap();
        assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
        assert!(said.contains(BODY_MARKER), "{said}");
    }
    assert!(
        gone(&folder).await,
        "the last cleanup leaves {}",
        folder.display()
    );
}

/// A hostile agent leaves links in its workspace for the next execution: a `.claude` that
/// points at a host folder, or a skill folder that points at one (with the adapter's marker
/// planted there). The install refuses both, naming them, and writes nothing outside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_in_the_workspace_never_lead_the_install_outside() {
    let mark = marker("skills-links");
    let agent = test_agent("skills", &mark).with_skills_dir(CLAUDE_SKILLS_DIR);
    let outside = agent.cwd.with_extension("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, agent.cwd.join(".claude")).unwrap();
    let service = service(agent.clone());
    let execution = service.start(asking(CLAUDE_SKILLS_DIR)).await.unwrap();
    let (_, outcome) = finish(&execution).await;
    let Outcome::Failed(error) = outcome else {
        panic!("expected a failure, got {outcome:?}");
    };
    assert!(
        error.message().contains(".claude/skills") && error.message().contains("link"),
        "{error:?}"
    );
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing written outside the workspace"
    );

    // The link one level down, at the skill's own folder, with the adapter's marker in the
    // folder it points at: not the adapter's, so neither replaced nor removed.
    std::fs::remove_file(agent.cwd.join(".claude")).unwrap();
    std::fs::create_dir_all(agent.cwd.join(".claude/skills")).unwrap();
    std::fs::write(outside.join(".harness-installed"), b"").unwrap();
    std::fs::write(outside.join("keep.txt"), b"the host's").unwrap();
    std::os::unix::fs::symlink(&outside, agent.cwd.join(".claude/skills/pdf-forms")).unwrap();
    let execution = service.start(asking(CLAUDE_SKILLS_DIR)).await.unwrap();
    let (_, outcome) = finish(&execution).await;
    assert!(matches!(outcome, Outcome::Failed(_)), "{outcome:?}");
    assert_eq!(
        std::fs::read_to_string(outside.join("keep.txt")).unwrap(),
        "the host's"
    );
    assert!(!outside.join("SKILL.md").exists());
    std::fs::remove_dir_all(&outside).unwrap();
}
