//! Input files over the model loop, against the mock model server: the request the model
//! receives holds the image and the documents as each API expects them.

mod common;

use common::{Mock, payloads, text};
use harness_core::file::InputFile;
use harness_core::service::{AdapterService, ExecutionRequest};
use harness_openai::{Api, Endpoint, OpenAiAdapter};
use serde_json::json;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01";
const PDF: &[u8] = b"%PDF-1.4\n1 0 obj <<>> endobj\n%%EOF\n";

fn request() -> ExecutionRequest {
    let mut request = ExecutionRequest::new("describe these");
    request.files = vec![
        InputFile::inline("dot.png", "image/png".parse().unwrap(), PNG.to_vec()),
        InputFile::inline(
            "paper.pdf",
            "application/pdf".parse().unwrap(),
            PDF.to_vec(),
        ),
        InputFile::inline(
            "notes.md",
            "text/markdown".parse().unwrap(),
            b"# Notes\nbe kind".to_vec(),
        ),
    ];
    request
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_receives_the_image_and_the_documents_as_its_api_expects() {
    let mock = Mock::start(&json!([
        {"match": {"userMessage": "describe these"}, "response": {"content": "a dot and a paper"}},
    ]));
    let mut bodies = Vec::new();
    for api in [Api::ChatCompletions, Api::Responses] {
        let endpoint = Endpoint::new(mock.base(), "gpt-4.1").with_api(api);
        let service = AdapterService::new(OpenAiAdapter::new(endpoint).unwrap());
        let execution = service.start(request()).await.unwrap();
        assert_eq!(
            text(&payloads(&execution).await),
            "a dot and a paper",
            "{api:?}"
        );
        bodies.push(mock.journal().await.last().unwrap()["body"].clone());
    }
    let notes = "<file name=\"notes.md\">\n# Notes\nbe kind\n</file>";
    let chat = &bodies[0]["messages"];
    let user = chat
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user")
        .unwrap();
    assert_eq!(
        user["content"],
        json!([
            {"type": "text", "text": "describe these"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{}", b64(PNG))}},
            {"type": "file", "file": {"filename": "paper.pdf", "file_data": format!("data:application/pdf;base64,{}", b64(PDF))}},
            {"type": "text", "text": notes},
        ])
    );
    // aimock journals a Responses request in chat form, keeping only its input_text parts
    // (the unit tests of the wire module check the Responses parts themselves): the message
    // and the text document reached the model.
    assert_eq!(
        bodies[1]["messages"][0]["content"],
        format!("describe these{notes}")
    );
}
