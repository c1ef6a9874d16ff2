//! Input files over HTTP: inline files in the start request reach the engine's validation;
//! an adapter that takes no files refuses them by name, and a malformed one is refused
//! naming what is wrong.

use std::sync::Arc;

mod support;

use harness_core::store::MemoryStore;
use serde_json::{Value, json};

const ALICE: &str = "alice-token-0123456789";

async fn start(url: &str, files: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/executions"))
        .bearer_auth(ALICE)
        .json(&json!({"adapter": "scripted", "message": "go", "files": files}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_files_are_validated_and_refused_by_name_where_not_taken() {
    let url = support::serve(Arc::new(MemoryStore::new()), "r1", &[("alice", ALICE)]).await;

    // The scripted adapter declares neither input.images nor input.documents.
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAE=";
    let (status, body) = start(
        &url,
        json!([{"name": "dot.png", "mediaType": "image/png", "data": png}]),
    )
    .await;
    assert!((400..500).contains(&status), "{status} {body}");
    let text = body.to_string();
    assert!(
        text.contains("FILE_MODALITY_UNSUPPORTED") && text.contains("dot.png"),
        "{text}"
    );

    // The content decides: text declared as a PNG.
    let (status, body) = start(
        &url,
        json!([{"name": "fake.png", "mediaType": "image/png", "data": "aGVsbG8="}]),
    )
    .await;
    assert!((400..500).contains(&status), "{status} {body}");
    assert!(body.to_string().contains("FILE_TYPE_MISMATCH"), "{body}");

    // Malformed: not base64, and half of each form.
    for (files, says) in [
        (
            json!([{"name": "a.txt", "mediaType": "text/plain", "data": "!!"}]),
            "not base64",
        ),
        (
            json!([{"fileId": "file_1", "name": "a.txt"}]),
            "either `fileId` alone",
        ),
    ] {
        let (status, body) = start(&url, files).await;
        assert!((400..500).contains(&status), "{status} {body}");
        assert!(body.to_string().contains(says), "{body}");
    }

    // An uploaded file id this server has no workspace for is not found.
    let (status, body) = start(&url, json!([{"fileId": "file_nope"}])).await;
    assert!((400..500).contains(&status), "{status} {body}");
    assert!(body.to_string().contains("FILE_NOT_FOUND"), "{body}");
}
