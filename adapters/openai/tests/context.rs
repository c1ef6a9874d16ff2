//! The instance context reaches the model server: the model a request chooses among the
//! instance's (or the instance's default) is the model of the request the mock model server
//! (`@copilotkit/aimock`) receives, and the instance prompt rendered with the request's
//! parameters is its system message (the Responses API's `instructions`), after the
//! endpoint's own instructions; over both APIs.

mod common;

use common::{Mock, payloads, text};
use harness_core::context::{ModelPolicy, PromptConfig, PromptTemplate};
use harness_core::error::ErrorCategory;
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
use harness_openai::{Api, Endpoint, OpenAiAdapter, OpenAiOptions};
use serde_json::{Value, json};

fn service(mock: &Mock, api: Api) -> AdapterService<OpenAiAdapter> {
    let endpoint = Endpoint::new(mock.base(), "gpt-4.1")
        .with_api(api)
        .with_api_key("sk-test-operator-key")
        .with_instructions("You are the test model.");
    let prompt: PromptConfig = serde_json::from_value(json!({
        "template": "You help the {{team}} team.",
        "parameters": {"team": {"required": true}}
    }))
    .unwrap();
    AdapterService::builder(OpenAiAdapter::new(endpoint).unwrap())
        .models(
            ModelPolicy::new(["gpt-4.1-mini", "o4-mini"])
                .unwrap()
                .with_default("gpt-4.1-mini")
                .unwrap(),
        )
        .prompt(PromptTemplate::compile(&prompt).unwrap())
        .build()
}

/// The system text of a request the model server received, on either API.
fn system(body: &Value) -> String {
    match body.get("instructions") {
        Some(instructions) => instructions.as_str().unwrap_or_default().to_owned(),
        None => body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "system")
            .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chosen_model_and_the_rendered_prompt_reach_the_model_server() {
    let mock = Mock::start(&json!([
        {"match": {"userMessage": "hello"}, "response": {"content": "Hi."}},
    ]));
    for api in [Api::ChatCompletions, Api::Responses] {
        let service = service(&mock, api);
        for (model, team, expected) in [
            (Some("o4-mini"), "payments", "o4-mini"),
            (None, "search", "gpt-4.1-mini"),
        ] {
            let mut request = ExecutionRequest::new("hello").with_prompt_parameter("team", team);
            if let Some(model) = model {
                request = request.with_model(model);
            }
            let execution = service.start(request).await.unwrap();
            assert!(
                matches!(execution.outcome().await, Outcome::Succeeded(_)),
                "{api:?}"
            );
            assert_eq!(text(&payloads(&execution).await), "Hi.");
            let journal = mock.journal().await;
            let body = &journal.last().unwrap()["body"];
            assert_eq!(body["model"], expected, "{api:?}: {body}");
            let system = system(body);
            assert!(
                system.starts_with("You are the test model.")
                    && system.contains(&format!("You help the {team} team.")),
                "{api:?}: {system}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_the_instance_does_not_offer_never_reaches_the_model_server() {
    let mock = Mock::start(&json!([
        {"match": {"userMessage": "hello"}, "response": {"content": "Hi."}},
    ]));
    let service = service(&mock, Api::ChatCompletions);
    let err = service
        .start(
            ExecutionRequest::new("hello")
                .with_model("gpt-4.1")
                .with_prompt_parameter("team", "x"),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code().as_str(), "MODEL_NOT_ALLOWED");
    assert!(
        err.message().contains("gpt-4.1-mini, o4-mini"),
        "{}",
        err.message()
    );
    let err = service
        .start(ExecutionRequest::new("hello").with_prompt_parameter("tema", "x"))
        .await
        .unwrap_err();
    assert_eq!(err.code().as_str(), "PROMPT_PARAMETER_INVALID");
    // The options may not choose another model than the engine's: refused at start (the
    // service evaluates every request).
    let err = service
        .start(
            ExecutionRequest::new("hello")
                .with_model("o4-mini")
                .with_prompt_parameter("team", "x")
                .with_options(OpenAiOptions::default().with_model("gpt-4.1").to_value()),
        )
        .await
        .expect_err("two models for one request are refused");
    assert_eq!(err.category(), ErrorCategory::Configuration);
    assert!(
        err.message().contains("choose the model once"),
        "{}",
        err.message()
    );
    assert!(
        mock.journal().await.is_empty(),
        "nothing reached the model server"
    );
}
