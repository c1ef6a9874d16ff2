//! Readiness means ready: `/readyz` is `503`, naming the instance, while an ACP agent's
//! command does not exist or a model endpoint does not answer; `200` when they are fine;
//! `GET /v1/adapters` shows each instance's health. Nothing is started: the ACP agents here
//! are checked, never run.

use std::sync::Arc;

use harness_acp::{AcpAdapter, AcpAgent};
use harness_core::adapter::HarnessAdapter;
use harness_core::store::{MemoryStore, ReplicaId};
use harness_layers::stack::HarnessStack;
use harness_openai::{Endpoint, OpenAiAdapter};
use harness_server::auth::BearerTokens;
use harness_server::{Instance, Server};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "alice-token-0123456789";

fn instance<A: HarnessAdapter>(adapter: A, store: &Arc<MemoryStore>) -> Instance {
    let stack = HarnessStack::defaults_for(&adapter).unwrap();
    Instance::new(&stack, adapter, Arc::clone(store), ReplicaId::new("r1"))
}

fn acp(program: &str) -> AcpAdapter {
    AcpAdapter::new(AcpAgent::new([program], std::env::temp_dir())).unwrap()
}

fn openai(base_url: &str) -> OpenAiAdapter {
    OpenAiAdapter::new(Endpoint::new(base_url, "test-model")).unwrap()
}

/// A port on 127.0.0.1 with nothing listening on it.
fn dead_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A tiny HTTP server on 127.0.0.1 answering every request `404`; returns its base URL.
async fn model_endpoint() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = [0; 4096];
                let _ = socket.read(&mut buffer).await;
                let _ = socket
                    .write_all(
                        b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    )
                    .await;
            });
        }
    });
    url
}

/// A server of `instances` on a free loopback port: its base URL.
async fn serve(instances: Vec<Instance>) -> String {
    let mut builder =
        Server::builder().authenticate(BearerTokens::new().with_token("alice", TOKEN).unwrap());
    for instance in instances {
        builder = builder.instance(instance);
    }
    let server = builder.build().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, server.router()).await });
    url
}

async fn get(url: &str, path: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .get(format!("{url}{path}"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test]
async fn ready_when_the_agent_command_exists_and_the_model_endpoint_answers() {
    let store = Arc::new(MemoryStore::new());
    let endpoint = model_endpoint().await;
    let url = serve(vec![
        instance(acp("/bin/sh"), &store),
        instance(openai(&endpoint), &store),
    ])
    .await;
    let (status, body) = get(&url, "/readyz").await;
    assert_eq!(
        (status, &body["ready"]),
        (200, &Value::Bool(true)),
        "{body}"
    );
    let (status, body) = get(&url, "/v1/adapters").await;
    assert_eq!(status, 200);
    assert_eq!(body["health"]["acp"]["ready"], true, "{body}");
    assert_eq!(body["health"]["openai"]["ready"], true, "{body}");
    // An agent found on the PATH is as good as one named by its path.
    let url = serve(vec![instance(acp("sh"), &store)]).await;
    assert_eq!(get(&url, "/readyz").await.0, 200);
}

#[tokio::test]
async fn not_ready_naming_the_instance_whose_agent_command_does_not_exist() {
    let store = Arc::new(MemoryStore::new());
    let endpoint = model_endpoint().await;
    let url = serve(vec![
        instance(acp("/opt/nowhere/no-such-acp-agent"), &store),
        instance(openai(&endpoint), &store),
    ])
    .await;
    let (status, body) = get(&url, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["ready"], false);
    let reasons = body["reasons"].as_array().unwrap();
    assert_eq!(reasons.len(), 1, "{body}");
    let reason = reasons[0].as_str().unwrap();
    assert!(reason.starts_with("instance `acp`"), "{reason}");
    assert!(reason.contains("not found"), "{reason}");
    // The caller sees no path.
    assert!(!body.to_string().contains("/opt/nowhere"), "{body}");
    let (_, adapters) = get(&url, "/v1/adapters").await;
    assert_eq!(adapters["health"]["acp"]["ready"], false, "{adapters}");
    assert_eq!(adapters["health"]["openai"]["ready"], true, "{adapters}");
    assert!(!adapters.to_string().contains("/opt/nowhere"));
}

#[tokio::test]
async fn not_ready_naming_the_instance_whose_model_endpoint_is_dead() {
    let store = Arc::new(MemoryStore::new());
    let dead = format!("http://127.0.0.1:{}/v1", dead_port());
    let url = serve(vec![
        instance(acp("/bin/sh"), &store),
        instance(openai(&dead), &store),
    ])
    .await;
    let (status, body) = get(&url, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    let reasons = body["reasons"].as_array().unwrap();
    assert_eq!(reasons.len(), 1, "{body}");
    let reason = reasons[0].as_str().unwrap();
    assert!(reason.starts_with("instance `openai`"), "{reason}");
    assert!(!reason.contains("127.0.0.1"), "no address: {reason}");
    let (_, adapters) = get(&url, "/v1/adapters").await;
    assert_eq!(adapters["health"]["openai"]["ready"], false, "{adapters}");
    assert_eq!(adapters["health"]["acp"]["ready"], true, "{adapters}");
}

/// Readiness cannot be used to hammer a dependency: of many probes at once, and again
/// within a few seconds, the model endpoint sees one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_probes_at_once_check_each_dependency_once() {
    let store = Arc::new(MemoryStore::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}/v1", listener.local_addr().unwrap());
    let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buffer = [0; 4096];
                let _ = socket.read(&mut buffer).await;
                let _ = socket
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    let url = serve(vec![instance(openai(&endpoint), &store)]).await;
    let probes: Vec<_> = (0..50)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { get(&url, "/readyz").await.0 })
        })
        .collect();
    for probe in probes {
        assert_eq!(probe.await.unwrap(), 200);
    }
    assert_eq!(get(&url, "/readyz").await.0, 200);
    assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 1);
}
