//! The harness stack inside an axum handler: a route that runs an execution and answers its
//! text, errors answered with their public projection.
//!
//! ```sh
//! cargo run --example axum_handler
//! ```
//!
//! The stacked service (`StackService`) is `Clone + Send + Sync + 'static`, so it is the
//! router's state as it is; a handler clones it per request. `invoke` waits for the outcome
//! (the text, tool results, usage, or the action a paused run waits for). A refusal or a
//! failure crosses outward only as its public projection (`HarnessError::public`): category,
//! code and a sanitized message, never the diagnostic. (`harness-server` is the whole Runtime
//! API built this way; this is the smallest handler.)

use axum::Router;
use axum::extract::State;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use harness::layers::stack::StackService;
use harness::prelude::*;
use harness::scripted::{Script, ScriptedAdapter};

/// `POST /ask` with the message as the body: the run's text, or the error's public message.
async fn ask(State(service): State<StackService>, message: String) -> (StatusCode, String) {
    match service.invoke(ExecutionRequest::new(message)).await {
        Ok(invocation) => {
            let outcome = invocation.outcome();
            match &outcome.error {
                None => (StatusCode::OK, outcome.text.clone()),
                Some(error) => (StatusCode::BAD_GATEWAY, error.message.clone()),
            }
        }
        Err(refused) => (StatusCode::BAD_REQUEST, refused.public().message),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let adapter = ScriptedAdapter::new(
        Script::builder()
            .text("hello from the stack")
            .complete("done")
            .build(),
    );
    let service = HarnessStack::defaults_for(&adapter)
        .expect("the default stack builds")
        .service(adapter);
    let app = Router::new().route("/ask", post(ask)).with_state(service);

    // A request through the router as a server would pass it (no socket needed here; serve it
    // with `axum::serve` and a listener in an application).
    let response = app
        .oneshot(
            Request::post("/ask")
                .body(axum::body::Body::from("hello"))
                .expect("a request"),
        )
        .await
        .expect("the router answers");
    assert_eq!(response.status(), StatusCode::OK);
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("the body");
    let text = String::from_utf8_lossy(&body);
    assert_eq!(text, "hello from the stack");
    println!("POST /ask -> 200 {text}");
}
