//! The stacked service is `Clone + Send + Sync + 'static`: an axum router takes it as its
//! state, and a handler can start executions with it.

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use harness::layers::stack::StackService;
use harness::scripted::ScriptedAdapter;
use harness::{ExecutionRequest, HarnessStack};
use tower::ServiceExt;

async fn start(State(service): State<StackService>) -> String {
    match service.oneshot(ExecutionRequest::new("hi")).await {
        Ok(execution) => execution.id().to_string(),
        Err(err) => err.public().message,
    }
}

#[tokio::test]
async fn the_stacked_service_is_axum_state() {
    let adapter = ScriptedAdapter::quickstart();
    let service = HarnessStack::defaults_for(&adapter)
        .unwrap()
        .service(adapter);
    let app: Router = Router::new()
        .route("/executions", post(start))
        .with_state(service);
    let response = app
        .oneshot(
            axum::http::Request::post("/executions")
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(response.status().is_success());
    let body = axum::body::to_bytes(response.into_body(), 1024)
        .await
        .unwrap();
    assert!(body.starts_with(b"exec_"), "{body:?}");
}
