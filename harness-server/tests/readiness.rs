//! Readiness means ready: `/readyz` is `503`, naming the instance, while an ACP agent's
//! command does not exist, a model endpoint does not answer, or an MCP server of the
//! model-loop instance cannot be started or reached; naming the store while it takes no
//! write; `200` when they are fine; `GET /v1/adapters` shows each instance's health.
//! Nothing is started: the ACP agents and MCP servers here are checked, never run.

use std::sync::Arc;

use harness_acp::{AcpAdapter, AcpAgent};
use harness_core::adapter::HarnessAdapter;
use harness_core::session::ThreadStateStore;
use harness_core::store::{ExecutionStore, MemoryStore, ReplicaId};
use harness_core::tool::ToolSet;
use harness_layers::stack::HarnessStack;
use harness_mcp::{McpProvider, McpServer};
use harness_openai::{Endpoint, OpenAiAdapter};
use harness_server::auth::BearerTokens;
use harness_server::{Instance, Server};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "alice-token-0123456789";

fn instance<A, S>(adapter: A, store: &Arc<S>) -> Instance
where
    A: HarnessAdapter,
    S: ExecutionStore + ThreadStateStore + 'static,
{
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

/// The model-loop instance with `servers` as its MCP tool providers, as `[[mcp.servers]]`
/// in harness.toml makes it.
fn with_mcp(endpoint: &str, servers: Vec<McpServer>, store: &Arc<MemoryStore>) -> Instance {
    let adapter = openai(endpoint);
    let mut tools = ToolSet::new();
    for server in servers {
        tools = tools.provider(McpProvider::new(server).unwrap()).unwrap();
    }
    let stack = HarnessStack::defaults_for(&adapter).unwrap().tools(tools);
    Instance::new(&stack, adapter, Arc::clone(store), ReplicaId::new("r1"))
}

/// An HTTP server `remote` at `url` to which the operator sends a secret header.
fn with_secret_header(url: &str) -> McpServer {
    McpServer::from_value(&serde_json::json!({
        "name": "remote",
        "transport": {"http": {"url": url, "headers": {"authorization": "Bearer secret-token-0123"}}}
    }))
    .unwrap()
}

fn one_reason(body: &Value) -> &str {
    let reasons = body["reasons"].as_array().unwrap();
    assert_eq!(reasons.len(), 1, "{body}");
    reasons[0].as_str().unwrap()
}

#[tokio::test]
async fn not_ready_naming_the_mcp_server_whose_command_does_not_exist() {
    let store = Arc::new(MemoryStore::new());
    let endpoint = model_endpoint().await;
    let servers = vec![
        McpServer::stdio("fine", ["/bin/sh", "-c", "exit 1"]),
        McpServer::stdio("everything", ["/opt/nowhere/no-such-mcp-server", "stdio"]),
    ];
    let url = serve(vec![with_mcp(&endpoint, servers, &store)]).await;
    let (status, body) = get(&url, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        one_reason(&body),
        "instance `openai`: MCP server `everything`: its command is not found"
    );
    assert!(!body.to_string().contains("/opt/nowhere"), "{body}");
    let (_, adapters) = get(&url, "/v1/adapters").await;
    assert_eq!(adapters["health"]["openai"]["ready"], false, "{adapters}");
    assert!(!adapters.to_string().contains("/opt/nowhere"), "{adapters}");
}

#[tokio::test]
async fn ready_when_the_mcp_servers_command_exists_and_it_is_not_started() {
    let store = Arc::new(MemoryStore::new());
    let endpoint = model_endpoint().await;
    // Were it started, it would leave this file behind.
    let marker = std::env::temp_dir().join(format!("harness-readiness-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let script = format!("touch {}", marker.display());
    let servers = vec![
        McpServer::stdio("shell", ["/bin/sh", "-c", script.as_str()]),
        // A bare name is found on the PATH the server would be started with.
        McpServer::stdio("named", ["sh", "-c", script.as_str()]).allow_env("PATH"),
    ];
    let url = serve(vec![with_mcp(&endpoint, servers, &store)]).await;
    let (status, body) = get(&url, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    let (_, adapters) = get(&url, "/v1/adapters").await;
    assert_eq!(adapters["health"]["openai"]["ready"], true, "{adapters}");
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(!marker.exists(), "the MCP server was started");
    // The same name on a PATH the server would not have is not found.
    let hidden = McpServer::stdio("named", ["sh"]).set_env("PATH", "/no/such/dir");
    let url = serve(vec![with_mcp(&endpoint, vec![hidden], &store)]).await;
    let (status, body) = get(&url, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        one_reason(&body),
        "instance `openai`: MCP server `named`: its command is not found"
    );
}

#[tokio::test]
async fn not_ready_naming_the_mcp_server_that_cannot_be_reached() {
    let store = Arc::new(MemoryStore::new());
    let endpoint = model_endpoint().await;
    let dead = with_secret_header(&format!("http://127.0.0.1:{}/mcp", dead_port()));
    let url = serve(vec![with_mcp(&endpoint, vec![dead], &store)]).await;
    let (status, body) = get(&url, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        one_reason(&body),
        "instance `openai`: MCP server `remote` is not reachable"
    );
    // Any HTTP answer is reachable (the model endpoint's stub answers 404 to anything).
    let answering = McpServer::http("remote", format!("{endpoint}/mcp"));
    let url = serve(vec![with_mcp(&endpoint, vec![answering], &store)]).await;
    let (status, body) = get(&url, "/readyz").await;
    assert_eq!(status, 200, "{body}");
}

/// The probe sends no header of the operator's: an HTTP server that records what it is sent
/// sees no credential.
#[tokio::test]
async fn the_mcp_probe_sends_no_credential() {
    let store = Arc::new(MemoryStore::new());
    let endpoint = model_endpoint().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mcp = format!("http://{}/mcp", listener.local_addr().unwrap());
    let (sent, mut seen) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let sent = sent.clone();
            tokio::spawn(async move {
                let mut buffer = vec![0; 8192];
                let n = socket.read(&mut buffer).await.unwrap_or(0);
                let _ = sent.send(String::from_utf8_lossy(&buffer[..n]).into_owned());
                let _ = socket
                    .write_all(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    let server = with_secret_header(&mcp);
    let url = serve(vec![with_mcp(&endpoint, vec![server], &store)]).await;
    let (status, body) = get(&url, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    let request = tokio::time::timeout(std::time::Duration::from_secs(5), seen.recv())
        .await
        .expect("the MCP server was probed")
        .unwrap();
    assert!(request.starts_with("GET /mcp "), "{request}");
    assert!(
        !request.to_lowercase().contains("authorization"),
        "{request}"
    );
    assert!(!request.contains("secret-token"), "{request}");
}

/// A store that answers reads but takes no write is not ready; when it takes writes again,
/// readiness returns once the cached result expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_while_the_store_takes_no_write_and_ready_again_after() {
    let dir = std::env::temp_dir().join(format!(
        "harness-readiness-store-{}-{}",
        std::process::id(),
        harness_core::id::ExecutionId::generate()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let store = Arc::new(harness_store::SqliteStore::open(dir.join("harness.db")).unwrap());
    // No room to grow: the write probe needs some.
    store.limit_size(Some(0)).await.unwrap();
    let url = serve(vec![instance(acp("/bin/sh"), &store)]).await;
    let (status, body) = get(&url, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(one_reason(&body), "store: not accepting writes");
    // Reads still work: the old read probe would have said ready.
    assert!(store.unfinished().await.unwrap().is_empty());
    store.limit_size(None).await.unwrap();
    // Cached until FRESH passes.
    assert_eq!(get(&url, "/readyz").await.0, 503);
    tokio::time::sleep(harness_server::health::FRESH + std::time::Duration::from_millis(200)).await;
    let (status, body) = get(&url, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    // The probes leave no value behind.
    let binding = harness_core::session::SessionBinding::new(
        harness_server::health::PROBE_BINDING.parse().unwrap(),
        harness_server::health::PROBE_BINDING.parse().unwrap(),
    );
    assert_eq!(store.list_keys(&binding).await.unwrap(), Vec::new());
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Replicas sharing one store probe it at once without getting in each other's way (each
/// probe writes its own key), and leave nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_sharing_a_store_probe_it_at_once() {
    let dir = std::env::temp_dir().join(format!(
        "harness-readiness-replicas-{}-{}",
        std::process::id(),
        harness_core::id::ExecutionId::generate()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let store = Arc::new(harness_store::SqliteStore::open(dir.join("harness.db")).unwrap());
    let mut urls = Vec::new();
    for _ in 0..20 {
        urls.push(serve(vec![instance(acp("/bin/sh"), &store)]).await);
    }
    let probes: Vec<_> = urls
        .into_iter()
        .flat_map(|url| (0..5).map(move |_| url.clone()))
        .map(|url| tokio::spawn(async move { get(&url, "/readyz").await }))
        .collect();
    for probe in probes {
        let (status, body) = probe.await.unwrap();
        assert_eq!(status, 200, "{body}");
    }
    let binding = harness_core::session::SessionBinding::new(
        harness_server::health::PROBE_BINDING.parse().unwrap(),
        harness_server::health::PROBE_BINDING.parse().unwrap(),
    );
    assert_eq!(store.list_keys(&binding).await.unwrap(), Vec::new());
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
