//! Group 9, skills: a granted skill reaches the adapter and its harness sees it (its body's
//! marker comes back as message text); a skill the caller cannot see and a blocked one are
//! refused before anything runs, each with its code, the hidden one exactly as a missing one.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use harness_core::adapter::{
    AgentConfig, BoxFuture, DeploymentContext, HarnessAdapter, HarnessHealth, HarnessRuntime,
    RuntimeContext,
};
use harness_core::capability::CapabilityReport;
use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::event::EventPayload;
use harness_core::id::CallerId;
use harness_core::manifest::{Describe, HarnessDescriptor};
use harness_core::service::{ExecutionRequest, Outcome};
use harness_core::skill::{Skill, SkillCatalog, SkillLimits};

use crate::{Knobs, probe};

/// The name of the skill the suite grants ([`crate::Behaviour::UseSkill`]).
pub const SKILL: &str = "conformance-skill";
/// The marker in the body of [`SKILL`], which the harness must show it saw.
pub const MARKER: &str = "conformance-skill-marker-8d2f";
/// The description of [`SKILL`].
pub const DESCRIPTION: &str =
    "Answers the conformance suite's skill probe. Use when asked for the conformance skill.";
const HIDDEN: &str = "conformance-hidden";
const BLOCKED: &str = "conformance-blocked";
const MISSING: &str = "conformance-missing";

fn skill(name: &str, body: &str) -> Skill {
    let md = format!("---\nname: {name}\ndescription: {DESCRIPTION}\n---\n{body}\n");
    Skill::parse(
        md.as_bytes(),
        [("notes.txt", b"conformance notes\n".to_vec())],
        &SkillLimits::default(),
    )
    .expect("the suite's skill is valid")
}

/// The catalog the fixture's service offers: the skill, one offered to another principal
/// only, and a blocked name.
fn catalog() -> Arc<SkillCatalog> {
    let other: CallerId = "conformance-someone-else".parse().expect("a caller id");
    Arc::new(
        SkillCatalog::new()
            .offer(skill(
                SKILL,
                &format!("# Conformance skill\n\nAnswer with the marker {MARKER}."),
            ))
            .offer_to(skill(HIDDEN, "hidden"), [other])
            .offer(skill(BLOCKED, "blocked"))
            .block(BLOCKED),
    )
}

/// An adapter that counts the runtimes it creates.
struct Counting<A> {
    inner: A,
    created: Arc<AtomicUsize>,
}

impl<A: HarnessAdapter> Describe for Counting<A> {
    fn descriptor(&self) -> &HarnessDescriptor {
        self.inner.descriptor()
    }
}

impl<A: HarnessAdapter> HarnessAdapter for Counting<A> {
    fn health(&self) -> BoxFuture<'_, HarnessHealth> {
        self.inner.health()
    }
    fn evaluate<'a>(
        &'a self,
        config: &'a AgentConfig,
        deployment: &'a DeploymentContext,
    ) -> BoxFuture<'a, Result<CapabilityReport, HarnessError>> {
        self.inner.evaluate(config, deployment)
    }
    fn create_runtime(
        &self,
        context: RuntimeContext,
    ) -> BoxFuture<'_, Result<Box<dyn HarnessRuntime>, HarnessError>> {
        self.created.fetch_add(1, SeqCst);
        self.inner.create_runtime(context)
    }
}

/// The fixture: `request` is the knobs' for [`crate::Behaviour::UseSkill`].
pub(crate) async fn used_missing_blocked<Kn: Knobs>(
    knobs: &Kn,
    mut request: ExecutionRequest,
) -> Result<String, String> {
    let b = knobs.bounds();
    let service = probe::builder(knobs.adapter(), b).skills(catalog()).build();
    request.skills = vec![SKILL.to_owned()];
    let obs = probe::run_to_end(&service, request.clone(), b).await?;
    obs.check_log()?;
    if !matches!(obs.outcome, Outcome::Succeeded(_)) {
        return Err(format!(
            "a run granted skill `{SKILL}` did not succeed: {}",
            obs.ended()
        ));
    }
    let text: String = obs
        .events
        .iter()
        .filter_map(|e| match e.payload() {
            EventPayload::MessageDelta(d) => Some(d.text.as_str()),
            _ => None,
        })
        .collect();
    if !text.contains(MARKER) {
        return Err(format!(
            "skill `{SKILL}` was granted but the harness did not show its body (the marker \
             never came back as message text): a skill dropped silently"
        ));
    }

    let created = Arc::new(AtomicUsize::new(0));
    let counting = Counting {
        inner: knobs.adapter(),
        created: Arc::clone(&created),
    };
    let service = probe::builder(counting, b).skills(catalog()).build();
    let mut refused = Vec::new();
    let mut messages = Vec::new();
    for (name, code) in [
        (MISSING, "SKILL_NOT_FOUND"),
        (HIDDEN, "SKILL_NOT_FOUND"),
        (BLOCKED, "SKILL_BLOCKED"),
    ] {
        let mut asking = request.clone();
        asking.skills = vec![SKILL.to_owned(), name.to_owned()];
        match service.start(asking).await {
            Ok(execution) => {
                execution.cancel(harness_core::event::CancelReason::new(
                    "conformance: should have been refused",
                ));
                return Err(format!(
                    "a request for skill `{name}` started: {code} was due"
                ));
            }
            Err(e)
                if e.code().as_str() == code
                    && e.category() == ErrorCategory::Configuration
                    && e.message().contains(name) =>
            {
                refused.push(format!("{name} {code}"));
                messages.push(e.message().replace(name, "<name>"));
            }
            Err(e) => {
                return Err(format!(
                    "expected a configuration refusal {code} naming `{name}`, got {} {}: {}",
                    e.category(),
                    e.code(),
                    e.message()
                ));
            }
        }
    }
    if messages[0] != messages[1] {
        return Err(format!(
            "a skill offered to another principal is refused differently from a missing one: \
             {:?} vs {:?}",
            messages[1], messages[0]
        ));
    }
    if created.load(SeqCst) != 0 {
        return Err(
            "a refused request created a runtime: refusals come before anything runs".into(),
        );
    }
    Ok(format!(
        "skill `{SKILL}` granted and its body seen by the harness, run.succeeded; refused \
         before any runtime: {} (the hidden one exactly as the missing one)",
        refused.join(", ")
    ))
}
