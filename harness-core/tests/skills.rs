//! Skills through the service: granted before anything runs and handed to the runtime in its
//! context; missing, hidden and blocked skills refused before any event, with their codes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use futures_util::StreamExt;
use harness_core::adapter::{
    AdapterEvent, BoxStream, EventResult, RunContext, Simple, SimpleAdapter,
};
use harness_core::capability::{Capability, CapabilityKey};
use harness_core::event::{Content, RunSucceeded, TextDelta};
use harness_core::id::{CallerId, Cursor};
use harness_core::manifest::{ContractVersion, Describe, ExecutionMode, HarnessDescriptor};
use harness_core::service::{AdapterService, ExecutionRequest};
use harness_core::skill::{Skill, SkillCatalog, SkillLimits};

/// Says, for each skill its runtime was granted, its name and body.
struct Lister(HarnessDescriptor, Arc<AtomicUsize>);
impl Describe for Lister {
    fn descriptor(&self) -> &HarnessDescriptor {
        &self.0
    }
}
impl SimpleAdapter for Lister {
    fn stream(&self, run: RunContext) -> BoxStream<'static, EventResult> {
        self.1.fetch_add(1, SeqCst);
        let text: String = run
            .context
            .skills
            .iter()
            .map(|s| format!("{}={};", s.name(), s.body().trim()))
            .collect();
        Box::pin(futures_util::stream::iter([
            Ok(AdapterEvent::Content(Content::MessageDelta(
                TextDelta::new(text),
            ))),
            Ok(AdapterEvent::Completed(RunSucceeded::default())),
        ]))
    }
}

fn skill(name: &str) -> Skill {
    let md = format!("---\nname: {name}\ndescription: The {name} skill.\n---\nbody of {name}\n");
    Skill::parse(
        md.as_bytes(),
        Vec::<(String, Vec<u8>)>::new(),
        &SkillLimits::default(),
    )
    .unwrap()
}

fn service(skills: bool) -> AdapterService<Simple<Lister>> {
    service_counting(skills, Arc::default())
}

fn service_counting(skills: bool, runs: Arc<AtomicUsize>) -> AdapterService<Simple<Lister>> {
    let mut builder = HarnessDescriptor::builder("lister".parse().unwrap(), "0.1.0")
        .contract_version(ContractVersion::V1)
        .execution_mode(ExecutionMode::in_process())
        .capability(CapabilityKey::StreamText, Capability::native());
    if skills {
        builder = builder.capability(CapabilityKey::Skills, Capability::emulated());
    }
    let catalog = SkillCatalog::new()
        .offer(skill("open"))
        .offer(skill("second"))
        .offer_to(skill("private"), ["alice".parse::<CallerId>().unwrap()])
        .block("shell");
    AdapterService::builder(Simple::new(Lister(builder.build().unwrap(), runs)))
        .skills(Arc::new(catalog))
        .build()
}

fn asking(caller: &str, names: &[&str]) -> ExecutionRequest {
    let mut request = ExecutionRequest::new("go");
    request.skills = names.iter().map(|s| (*s).to_owned()).collect();
    request
        .extensions
        .insert(caller.parse::<CallerId>().unwrap());
    request
}

async fn text_of(service: &AdapterService<Simple<Lister>>, request: ExecutionRequest) -> String {
    let execution = service.start(request).await.unwrap();
    let mut text = String::new();
    let mut events = execution.events(Cursor::START);
    while let Some(e) = events.next().await {
        if let harness_core::event::EventPayload::MessageDelta(d) = e.payload() {
            text.push_str(&d.text);
        }
    }
    text
}

#[tokio::test]
async fn granted_skills_reach_the_runtime_in_the_order_asked() {
    let service = service(true);
    assert_eq!(
        text_of(&service, asking("alice", &["second", "private", "open"])).await,
        "second=body of second;private=body of private;open=body of open;"
    );
    // None asked, none granted.
    assert_eq!(text_of(&service, asking("alice", &[])).await, "");
}

#[tokio::test]
async fn refusals_come_before_anything_runs_with_their_codes() {
    let runs = Arc::new(AtomicUsize::new(0));
    let service = service_counting(true, Arc::clone(&runs));
    for (caller, names, code) in [
        ("bob", &["nope"][..], "SKILL_NOT_FOUND"),
        ("bob", &["private"][..], "SKILL_NOT_FOUND"),
        ("alice", &["open", "shell"][..], "SKILL_BLOCKED"),
        ("alice", &["../open"][..], "SKILL_NOT_FOUND"),
    ] {
        let err = service.start(asking(caller, names)).await.unwrap_err();
        assert_eq!(err.code().as_str(), code, "{names:?}: {}", err.message());
        assert_eq!(err.category().to_string(), "configuration");
    }
    // Nothing ran.
    assert_eq!(runs.load(SeqCst), 0);
    text_of(&service, asking("alice", &["open"])).await;
    assert_eq!(runs.load(SeqCst), 1);
}

#[tokio::test]
async fn an_adapter_without_skills_refuses_before_looking_at_names() {
    let service = service(false);
    let err = service.start(asking("alice", &["open"])).await.unwrap_err();
    assert_eq!(
        err.code().as_str(),
        "CAPABILITY_UNSUPPORTED",
        "{}",
        err.message()
    );
    assert!(err.message().contains("skills"), "{}", err.message());
    // Even for a blocked name: the capability is checked first.
    let err = service
        .start(asking("alice", &["shell"]))
        .await
        .unwrap_err();
    assert_eq!(err.code().as_str(), "CAPABILITY_UNSUPPORTED");
}
