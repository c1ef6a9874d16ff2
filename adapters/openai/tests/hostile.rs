//! Model output is hostile input: a server that sends what no mock will (invalid JSON in an
//! event, an endless line, nothing at all) ends the run with a classified error, within its
//! bounds, never a hang or a panic.

use std::time::Duration;

use harness_core::error::ErrorCategory;
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
use harness_openai::{Api, Endpoint, OpenAiAdapter};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A server that answers every request with `head`, then `body` in pieces, then (with
/// `hold`) keeps the connection open without a byte more.
async fn stub(head: &'static str, body: Vec<u8>, hold: bool) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let body = body.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let _ = socket.read(&mut buf).await;
                let _ = socket.write_all(head.as_bytes()).await;
                for piece in body.chunks(8192) {
                    if socket.write_all(piece).await.is_err() {
                        return;
                    }
                }
                if hold {
                    tokio::time::sleep(Duration::from_secs(600)).await;
                }
            });
        }
    });
    url
}

const SSE: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";

async fn fails(url: String, api: Api, idle: Duration) -> harness_core::error::PublicError {
    let endpoint = Endpoint::new(url, "m")
        .with_api(api)
        .with_idle_timeout(idle);
    let service = AdapterService::new(OpenAiAdapter::new(endpoint).unwrap());
    let execution = service.start(ExecutionRequest::new("hi")).await.unwrap();
    match tokio::time::timeout(Duration::from_secs(60), execution.outcome()).await {
        Ok(Outcome::Failed(e)) => e.public(),
        other => panic!("expected a failure within a minute, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_json_in_an_event_is_a_protocol_error() {
    for api in [Api::ChatCompletions, Api::Responses] {
        let url = stub(SSE, b"data: {\"choices\": [oops\n\n".to_vec(), false).await;
        let e = fails(url, api, Duration::from_secs(30)).await;
        assert_eq!(e.category, ErrorCategory::Protocol, "{api:?}: {e:?}");
        assert!(e.message.contains("not JSON"), "{e:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_line_fails_at_its_bound_instead_of_growing() {
    // 6 MiB without a line ending, then the connection held open.
    let mut body = b"data: ".to_vec();
    body.extend(std::iter::repeat_n(b'x', 6 << 20));
    let url = stub(SSE, body, true).await;
    let e = fails(url, Api::ChatCompletions, Duration::from_secs(30)).await;
    assert_eq!(e.category, ErrorCategory::Protocol, "{e:?}");
    assert!(e.message.contains("larger than"), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_goes_quiet_times_out() {
    // Headers, one comment, then silence.
    let url = stub(SSE, b": hello\n\n".to_vec(), true).await;
    let e = fails(url, Api::Responses, Duration::from_millis(300)).await;
    assert_eq!(
        (e.category, e.retryable),
        (ErrorCategory::Timeout, true),
        "{e:?}"
    );
    // Not even headers.
    let url = stub("", Vec::new(), true).await;
    let e = fails(url, Api::ChatCompletions, Duration::from_millis(300)).await;
    assert_eq!(e.category, ErrorCategory::Timeout, "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_is_not_a_stream_is_refused() {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n";
    let url = stub(head, b"{\"choices\": []}".to_vec(), false).await;
    let e = fails(url, Api::ChatCompletions, Duration::from_secs(30)).await;
    assert_eq!(e.category, ErrorCategory::Protocol, "{e:?}");
    assert!(e.message.contains("application/json"), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_was_said_before_a_broken_event_is_kept() {
    // Found by the `openai_stream` fuzz target: text, then an event that is not UTF-8, in
    // one read. The text reaches the log before the run fails, however the bytes arrive.
    let mut body =
        b"data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"Hi\"}}]}\n\n".to_vec();
    body.extend_from_slice(b"data: {\"choices\": \xff\xff}\n\n");
    let url = stub(SSE, body, false).await;
    let endpoint = Endpoint::new(url, "m");
    let service = AdapterService::new(OpenAiAdapter::new(endpoint).unwrap());
    let execution = service.start(ExecutionRequest::new("hi")).await.unwrap();
    let Outcome::Failed(e) = execution.outcome().await else {
        panic!("expected a failure")
    };
    assert_eq!(e.category(), ErrorCategory::Protocol);
    let text: String = execution
        .log()
        .snapshot(harness_core::id::Cursor::START)
        .iter()
        .filter_map(|e| match e.payload() {
            harness_core::event::EventPayload::MessageDelta(d) => Some(d.text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "Hi");
}
