//! Skills over the model loop, against the mock model server: the model's first request
//! lists the granted skill's name and description and offers `skills.load` and
//! `skills.read`; a call of `skills.load` returns the skill's body to the model on its next
//! request, and `skills.read` one of its files.

mod common;

use std::sync::Arc;

use common::{Mock, name, payloads, text};
use harness_core::event::EventPayload;
use harness_core::service::{AdapterService, ExecutionRequest};
use harness_core::skill::{Skill, SkillCatalog, SkillLimits};
use harness_openai::{Api, Endpoint, OpenAiAdapter};
use serde_json::{Value, json};

const DESCRIPTION: &str = "Fill PDF forms field by field. Use when a form must be filled.";
const BODY_MARKER: &str = "skill-body-4b1d";
const FILE_MARKER: &str = "field-list-93ac";

fn catalog() -> Arc<SkillCatalog> {
    let md = format!(
        "---\nname: pdf-forms\ndescription: {DESCRIPTION}\nlicense: MIT\n---\n# PDF forms\nFirst read fields.txt ({BODY_MARKER}).\n"
    );
    let skill = Skill::parse(
        md.as_bytes(),
        [(
            "fields.txt",
            format!("name, date ({FILE_MARKER})").into_bytes(),
        )],
        &SkillLimits::default(),
    )
    .unwrap();
    Arc::new(SkillCatalog::new().offer(skill))
}

fn fixtures() -> Value {
    let call = |id: &str, tool: &str, arguments: Value| json!({"id": id, "name": name(tool), "arguments": arguments.to_string()});
    json!([
        // The file's text came back: done.
        {"match": {"userMessage": "fill the form", "toolResultContains": FILE_MARKER},
         "response": {"content": "filled with the skill"}},
        // The body came back: read the file it names.
        {"match": {"userMessage": "fill the form", "toolResultContains": BODY_MARKER},
         "response": {"toolCalls": [call("call_read", "skills.read", json!({"name": "pdf-forms", "path": "fields.txt"}))]}},
        // The instructions list the skill: load it.
        {"match": {"userMessage": "fill the form", "systemMessage": DESCRIPTION},
         "response": {"toolCalls": [call("call_load", "skills.load", json!({"name": "pdf-forms"}))]}},
        {"match": {"userMessage": "fill the form"}, "response": {"content": "no skill seen"}},
    ])
}

fn asking() -> ExecutionRequest {
    let mut request = ExecutionRequest::new("fill the form");
    request.skills = vec!["pdf-forms".to_owned()];
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_sees_the_skill_and_loads_it_on_demand() {
    let mock = Mock::start(&fixtures());
    for api in [Api::ChatCompletions, Api::Responses] {
        let endpoint = Endpoint::new(mock.base(), "gpt-4.1").with_api(api);
        let service = AdapterService::builder(OpenAiAdapter::new(endpoint).unwrap())
            .skills(catalog())
            .build();
        let before = mock.journal().await.len();
        let execution = service.start(asking()).await.unwrap();
        let log = payloads(&execution).await;
        assert_eq!(text(&log), "filled with the skill", "{api:?}: {log:?}");
        let journal = mock.journal().await;
        let bodies: Vec<&Value> = journal[before..].iter().map(|e| &e["body"]).collect();
        assert_eq!(bodies.len(), 3, "{api:?}: three model requests");
        // First request: the skill's name and description in the instructions, both tools.
        let first = bodies[0].to_string();
        assert!(
            first.contains("pdf-forms") && first.contains(DESCRIPTION),
            "{api:?}: {first}"
        );
        assert!(
            !first.contains(BODY_MARKER),
            "{api:?}: the body is loaded on demand only"
        );
        let tools: Vec<&str> = bodies[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["function"]["name"].as_str().or(t["name"].as_str()))
            .collect();
        assert_eq!(tools, [name("skills.load"), name("skills.read")], "{api:?}");
        // Second: the body came back as the load's result; third: the file's text.
        assert!(bodies[1].to_string().contains(BODY_MARKER), "{api:?}");
        assert!(bodies[2].to_string().contains(FILE_MARKER), "{api:?}");
        // The adapter ran both calls itself, as tool calls of the log.
        let started: Vec<&str> = log
            .iter()
            .filter_map(|p| match p {
                EventPayload::ToolCallStarted(c) => Some(c.tool.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(started, ["skills.load", "skills.read"], "{api:?}");
        let succeeded = log
            .iter()
            .filter(|p| matches!(p, EventPayload::ToolCallCompleted(c) if matches!(c.outcome, harness_core::event::ToolCallOutcome::Success { .. })))
            .count();
        assert_eq!(succeeded, 2, "{api:?}: {log:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_skills_the_model_gets_neither_listing_nor_tools() {
    let mock = Mock::start(&fixtures());
    let endpoint = Endpoint::new(mock.base(), "gpt-4.1");
    let service = AdapterService::builder(OpenAiAdapter::new(endpoint).unwrap())
        .skills(catalog())
        .build();
    let execution = service
        .start(ExecutionRequest::new("fill the form"))
        .await
        .unwrap();
    assert_eq!(text(&payloads(&execution).await), "no skill seen");
    let body = &mock.journal().await[0]["body"];
    assert!(!body.to_string().contains("pdf-forms"), "{body}");
    assert!(
        body.get("tools")
            .is_none_or(|t| t.as_array().is_some_and(Vec::is_empty)),
        "{body}"
    );
}
