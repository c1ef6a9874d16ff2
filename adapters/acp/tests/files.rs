//! Input files over ACP: the test agent's prompt holds them as `image` and embedded
//! `resource` blocks when its `promptCapabilities` take them; an agent that does not take
//! them fails the turn naming the file, before the prompt is sent.

mod common;

use common::{adapter_for, finish, marker, test_agent, text};
use harness_core::file::InputFile;
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01";
const PDF: &[u8] = b"%PDF-1.4\n%%EOF\n";

fn request(files: Vec<InputFile>) -> ExecutionRequest {
    let mut request = ExecutionRequest::new("look");
    request.files = files;
    request
}

fn png() -> InputFile {
    InputFile::inline("dot.png", "image/png".parse().unwrap(), PNG.to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_prompt_holds_image_and_resource_blocks() {
    let mark = marker("files-echo");
    let service = AdapterService::new(adapter_for(test_agent("echo", &mark)));
    let files = vec![
        png(),
        InputFile::inline(
            "my notes.md",
            "text/markdown".parse().unwrap(),
            b"# hi".to_vec(),
        ),
        InputFile::inline(
            "paper.pdf",
            "application/pdf".parse().unwrap(),
            PDF.to_vec(),
        ),
    ];
    let execution = service.start(request(files)).await.unwrap();
    let (events, outcome) = finish(&execution).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert_eq!(
        text(&events),
        "turn 1: look\n[image image/png iVBORw0KGgoA]\n\
         [resource harness-input:my_notes.md text/markdown \"# hi\"]\n\
         [resource harness-input:paper.pdf application/pdf JVBERi0xLjQK]"
    );
    common::assert_no_process_left(&mark).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_the_modality_refuses_the_file_by_name() {
    let mark = marker("files-no-load");
    let service = AdapterService::new(adapter_for(test_agent("no-load", &mark)));
    let execution = service.start(request(vec![png()])).await.unwrap();
    let (events, outcome) = finish(&execution).await;
    let Outcome::Failed(error) = outcome else {
        panic!("expected a failure, got {outcome:?}");
    };
    assert_eq!(error.code().as_str(), "FILE_MODALITY_UNSUPPORTED");
    assert!(
        error.message().contains("`dot.png`")
            && error.message().contains("promptCapabilities.image"),
        "{}",
        error.message()
    );
    // Nothing was prompted: no turn text.
    assert_eq!(text(&events), "");
    common::assert_no_process_left(&mark).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evaluate_reports_what_the_agent_negotiated() {
    use harness_core::adapter::{AgentConfig, DeploymentContext, HarnessAdapter};
    use harness_core::capability::{CapabilityKey, SupportLevel};
    for (mode, level) in [
        ("echo", SupportLevel::Native),
        ("no-load", SupportLevel::Unsupported),
    ] {
        let mark = marker(&format!("files-eval-{mode}"));
        let adapter = adapter_for(test_agent(mode, &mark));
        let report = adapter
            .evaluate(&AgentConfig::default(), &DeploymentContext::default())
            .await
            .unwrap();
        assert_eq!(report.level(CapabilityKey::InputImages), level, "{mode}");
        assert_eq!(report.level(CapabilityKey::InputDocuments), level, "{mode}");
        common::assert_no_process_left(&mark).await;
    }
}

/// With the agent's ACP client hosted by a worker in its sandbox, the files cross the
/// Sandbox Worker Protocol: the worker reads each through the control plane, a file over
/// the protocol's chunk size in several reads, and the prompt holds the same blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_hosted_agent_gets_the_same_blocks_its_files_read_through_the_control_plane() {
    use harness_sandbox::{Sandbox, SandboxProfile, worker::FILE_CHUNK_BYTES};
    let mark = marker("files-hosted");
    let agent = test_agent("echo", &mark)
        .in_sandbox(Sandbox::new(SandboxProfile::default()).expect("bwrap is installed"))
        .hosted_by_worker(env!("CARGO_BIN_EXE_acp-sandbox-worker"));
    let service = AdapterService::new(adapter_for(agent));
    // A PDF of a chunk and a half: its bytes take two reads.
    let mut big = PDF.to_vec();
    big.resize(usize::try_from(FILE_CHUNK_BYTES * 3 / 2).unwrap(), b' ');
    let files = vec![
        png(),
        InputFile::inline("big.pdf", "application/pdf".parse().unwrap(), big),
    ];
    let execution = service.start(request(files)).await.unwrap();
    let (events, outcome) = finish(&execution).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert_eq!(
        text(&events),
        "turn 1: look\n[image image/png iVBORw0KGgoA]\n\
         [resource harness-input:big.pdf application/pdf JVBERi0xLjQK]"
    );
    common::assert_no_process_left(mark.trim_start_matches('-')).await;
}
