//! The relay over real HTTP: the bridge's framing, sessions and bounds against a stdio
//! program of the tests' own (perl, as the sandbox's tests use it), and the proxy's header
//! handling against a raw upstream.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;
use crate::options::{AcpAgent, AcpMcpServer};

/// A line-delimited JSON-RPC server: answers each request with its method, its pid and
/// `$SECRET`; `notify` also sends a notification first; `crash` exits; `big` answers with a
/// line over the message limit; `slow` answers after 500 ms.
const SERVER: &str = r#"
$| = 1;
while (my $line = <STDIN>) {
    my ($id) = $line =~ /"id":(\d+|"[^"]*")/;
    my ($method) = $line =~ /"method":"([^"]*)"/;
    next unless defined $method;
    exit 3 if $method eq "crash";
    print qq({"jsonrpc":"2.0","method":"notifications/message","params":{"n":1}}\n) if $method eq "notify";
    next unless defined $id;
    if ($method eq "big") { print qq({"jsonrpc":"2.0","id":$id,"result":{"x":") . ("a" x 4200000) . qq("}}\n); next }
    select(undef, undef, undef, 0.5) if $method eq "slow";
    print qq({"jsonrpc":"2.0","id":$id,"result":{"method":"$method","pid":$$,"secret":"$ENV{SECRET}"}}\n);
}
"#;

fn agent_with(server: AcpMcpServer) -> AcpAgent {
    AcpAgent::new(["unused"], std::env::temp_dir()).with_mcp_server(server)
}

fn bridged() -> AcpMcpServer {
    let mut server = AcpMcpServer::stdio("perl", ["perl", "-e", SERVER]);
    if let AcpMcpTransport::Stdio { env, .. } = &mut server.transport {
        env.insert("SECRET".to_owned(), "s3cr3t".to_owned());
    }
    server
}

async fn relay_for(server: AcpMcpServer) -> (McpRelay, String) {
    let agent = agent_with(server);
    let relay = McpRelay::start(&agent).await.unwrap().expect("a relay");
    let url = relay.url(&agent.mcp_servers[0].name).unwrap().to_owned();
    (relay, url)
}

fn request(id: &Value, method: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {}})
}

async fn post(url: &str, session: Option<&str>, body: &Value) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    request.send().await.unwrap()
}

/// Opens a session; its id.
async fn initialize(url: &str) -> String {
    let response = post(url, None, &request(&json!(0), "initialize")).await;
    assert_eq!(response.status(), 200);
    let id = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(id.len(), 32, "128 bits in hex: {id}");
    id
}

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

async fn gone(pid: u64) -> bool {
    for _ in 0..200 {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bridged_session_answers_requests_by_id_and_takes_notifications() {
    let (_relay, url) = relay_for(bridged()).await;
    let session = initialize(&url).await;
    let response = post(&url, Some(&session), &request(&json!("a-7"), "tools/list")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "application/json",
        "one JSON answer"
    );
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["id"], "a-7");
    assert_eq!(answer["result"]["method"], "tools/list");
    // The program got its variable from the control plane.
    assert_eq!(answer["result"]["secret"], "s3cr3t");
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(post(&url, Some(&session), &note).await.status(), 202);
    let reply = json!({"jsonrpc": "2.0", "id": 5, "result": {}});
    assert_eq!(post(&url, Some(&session), &reply).await.status(), 202);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_bridge_refuses() {
    let (_relay, url) = relay_for(bridged()).await;
    // No session: only `initialize` opens one.
    let response = post(&url, None, &request(&json!(1), "tools/list")).await;
    assert_eq!(response.status(), 400);
    // An unknown session is 404, as MCP says.
    let response = post(&url, Some("0123"), &request(&json!(1), "tools/list")).await;
    assert_eq!(response.status(), 404);
    let session = initialize(&url).await;
    // Batches.
    let batch = json!([request(&json!(1), "a"), request(&json!(2), "b")]);
    let response = post(&url, Some(&session), &batch).await;
    assert_eq!(response.status(), 400);
    assert!(response.text().await.unwrap().contains("batches"));
    // Not JSON-RPC.
    assert_eq!(
        post(&url, Some(&session), &json!({"x": 1})).await.status(),
        400
    );
    // Too large a body.
    let big = json!({"jsonrpc": "2.0", "method": "n", "params": {"x": "a".repeat(BODY_LIMIT)}});
    assert_eq!(post(&url, Some(&session), &big).await.status(), 413);
    // Another method, another path, another token, a query.
    let client = reqwest::Client::new();
    assert_eq!(client.put(&url).send().await.unwrap().status(), 405);
    let base = url.rsplit_once('/').unwrap().0;
    for other in [
        format!("{base}/{}", "0".repeat(32)),
        format!("{base}/"),
        format!("{url}/x"),
        format!("{url}?a=1"),
    ] {
        let status = client.post(&other).send().await.unwrap().status();
        assert_eq!(status, 404, "{other}");
    }
    // A duplicate id while the first is in flight.
    let slow = tokio::spawn({
        let (url, session) = (url.clone(), session.clone());
        async move { post(&url, Some(&session), &request(&json!(9), "slow")).await }
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let dup = post(&url, Some(&session), &request(&json!(9), "x")).await;
    assert_eq!(dup.status(), 400);
    let first: Value = slow.await.unwrap().json().await.unwrap();
    assert_eq!(first["result"]["method"], "slow");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_program_ends_its_session() {
    let (_relay, url) = relay_for(bridged()).await;
    let session = initialize(&url).await;
    let answer: Value = post(&url, Some(&session), &request(&json!(1), "crash"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(answer["id"], 1);
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("exited"),
        "{answer}"
    );
    let after = post(&url, Some(&session), &request(&json!(2), "tools/list")).await;
    assert_eq!(after.status(), 404);
    // A new session starts a new process.
    let again = initialize(&url).await;
    assert_ne!(again, session);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_limit_ends_the_session() {
    let (_relay, url) = relay_for(bridged()).await;
    let session = initialize(&url).await;
    let answer: Value = post(&url, Some(&session), &request(&json!(1), "big"))
        .await
        .json()
        .await
        .unwrap();
    assert!(
        answer["error"].is_object(),
        "{}",
        &answer.to_string()[..200]
    );
    let after = post(&url, Some(&session), &request(&json!(2), "x")).await;
    assert_eq!(after.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unprompted_messages_wait_for_the_stream_one_stream_at_a_time() {
    let (_relay, url) = relay_for(bridged()).await;
    let session = initialize(&url).await;
    // Sent before any stream is open: buffered.
    let answer = post(&url, Some(&session), &request(&json!(1), "notify")).await;
    assert_eq!(answer.status(), 200);
    let client = reqwest::Client::new();
    let mut stream = client
        .get(&url)
        .header("mcp-session-id", &session)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    let second = client
        .get(&url)
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(second.status(), 409);
    let chunk = tokio::time::timeout(Duration::from_secs(10), stream.chunk())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&chunk);
    assert!(text.starts_with("event: message\ndata: {"), "{text}");
    assert!(text.contains("notifications/message"), "{text}");
    // The stream's end gives it back: another GET may open it.
    drop(stream);
    let mut reopened = None;
    for _ in 0..100 {
        let again = client
            .get(&url)
            .header("mcp-session-id", &session)
            .send()
            .await
            .unwrap();
        if again.status() == 200 {
            reopened = Some(again);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(reopened.is_some(), "the stream was given back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_and_the_relays_end_kill_the_program() {
    let (relay, url) = relay_for(bridged()).await;
    let session = initialize(&url).await;
    let pid = |answer: &Value| answer["result"]["pid"].as_u64().unwrap();
    let first: Value = post(&url, Some(&session), &request(&json!(1), "x"))
        .await
        .json()
        .await
        .unwrap();
    let first = pid(&first);
    assert!(alive(first));
    let client = reqwest::Client::new();
    let deleted = client
        .delete(&url)
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    assert!(gone(first).await, "DELETE killed {first}");
    let after = post(&url, Some(&session), &request(&json!(2), "x")).await;
    assert_eq!(after.status(), 404);
    let other = initialize(&url).await;
    let second: Value = post(&url, Some(&other), &request(&json!(1), "x"))
        .await
        .json()
        .await
        .unwrap();
    let second = pid(&second);
    drop(relay);
    assert!(gone(second).await, "the relay's end killed {second}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_bounded() {
    let (_relay, url) = relay_for(bridged()).await;
    for _ in 0..SESSIONS {
        initialize(&url).await;
    }
    let refused = post(&url, None, &request(&json!(0), "initialize")).await;
    assert_eq!(refused.status(), 503);
}

/// A raw HTTP upstream: records the first request's head and body, answers an SSE body in two
/// chunks with MCP's headers and one it should not pass.
async fn upstream() -> (String, tokio::task::JoinHandle<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0_u8; 4096];
        while !String::from_utf8_lossy(&got).contains("\"ping\"") {
            let n = socket.read(&mut buf).await.unwrap();
            assert!(n > 0, "the request ended early");
            got.extend_from_slice(&buf[..n]);
        }
        socket
            .write_all(
                b"HTTP/1.1 202 Accepted\r\ncontent-type: text/event-stream\r\n\
                  mcp-session-id: up-1\r\nx-upstream-secret: no\r\n\
                  transfer-encoding: chunked\r\n\r\n\
                  9\r\ndata: 1\n\n\r\n",
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        socket
            .write_all(b"9\r\ndata: 2\n\n\r\n0\r\n\r\n")
            .await
            .unwrap();
        String::from_utf8_lossy(&got).to_lowercase()
    });
    (url, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_adds_the_operators_headers_and_passes_only_mcps() {
    let (upstream_url, recorded) = upstream().await;
    let mut headers = BTreeMap::new();
    headers.insert("Authorization".to_owned(), "Bearer op-secret".to_owned());
    let mut server = AcpMcpServer::http("remote", upstream_url);
    server.transport = AcpMcpTransport::Http {
        url: match &server.transport {
            AcpMcpTransport::Http { url, .. } => url.clone(),
            AcpMcpTransport::Stdio { .. } => unreachable!(),
        },
        headers,
    };
    let (_relay, url) = relay_for(server).await;
    let response = reqwest::Client::new()
        .post(&url)
        .header("authorization", "Bearer the-agents-own")
        .header("cookie", "c=1")
        .header("mcp-session-id", "up-1")
        .header("mcp-protocol-version", "2025-06-18")
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","method":"ping"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    assert_eq!(response.headers()["mcp-session-id"], "up-1");
    assert!(response.headers().get("x-upstream-secret").is_none());
    assert_eq!(response.text().await.unwrap(), "data: 1\n\ndata: 2\n\n");
    let head = recorded.await.unwrap();
    assert!(head.contains("authorization: bearer op-secret"), "{head}");
    assert!(!head.contains("the-agents-own"), "{head}");
    assert!(!head.contains("cookie"), "{head}");
    assert!(head.contains("mcp-session-id: up-1"), "{head}");
    assert!(head.contains("mcp-protocol-version: 2025-06-18"), "{head}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_upstream_is_a_bad_gateway_that_names_the_server() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut headers = BTreeMap::new();
    headers.insert("X-Key".to_owned(), "k".to_owned());
    let server = AcpMcpServer {
        name: "down".to_owned(),
        transport: AcpMcpTransport::Http {
            url: format!("http://127.0.0.1:{port}/mcp"),
            headers,
        },
    };
    let (_relay, url) = relay_for(server).await;
    let response = reqwest::Client::new()
        .post(&url)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 502);
    assert!(response.text().await.unwrap().contains("`down`"));
}

#[test]
fn what_a_proxied_server_may_be() {
    let headers = |k: &str, v: &str| BTreeMap::from([(k.to_owned(), v.to_owned())]);
    assert!(check_proxied("a", "http://h/mcp", &headers("Authorization", "Bearer x")).is_ok());
    let err = check_proxied("a", "http://h/mcp", &headers("bad name", "x")).unwrap_err();
    assert!(err.contains("`a`") && err.contains("bad name"), "{err}");
    let err = check_proxied("a", "http://h/mcp", &headers("X", "new\nline")).unwrap_err();
    assert!(err.contains("`X`") && !err.contains("new"), "{err}");
    let https = check_proxied("a", "https://h/mcp", &headers("X", "y"));
    if cfg!(feature = "tls") {
        assert!(https.is_ok());
    } else {
        let err = https.unwrap_err();
        assert!(err.contains("`tls` feature"), "{err}");
    }
}

#[test]
fn servers_reach_the_agent_by_their_way() {
    let plain = AcpMcpServer::stdio("plain", ["srv"]);
    assert_eq!(Way::of(&plain), Way::Forwarded);
    assert_eq!(Way::of(&bridged()), Way::Bridged);
    assert_eq!(
        Way::of(&AcpMcpServer::http("h", "http://x")),
        Way::Forwarded
    );
    let agent = agent_with(bridged());
    // No relay is needed for forwarded servers; an agent without HTTP is refused a bridged one.
    let err = servers_for_agent(&agent, false, None).unwrap_err();
    assert!(
        err.message().contains("`perl`") && err.message().contains("mcpCapabilities.http"),
        "{}",
        err.message()
    );
    let forwarded = agent_with(plain);
    assert_eq!(servers_for_agent(&forwarded, false, None).unwrap().len(), 1);
}

/// At most [`CONNECTIONS`] connections are served at once, and one that sends no request
/// head (idle between requests too) is closed after [`HEAD_TIMEOUT`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_bounded_and_idle_ones_closed() {
    let (_relay, url) = relay_for(bridged()).await;
    let authority = url
        .strip_prefix("http://")
        .and_then(|rest| rest.split_once('/'))
        .unwrap()
        .0
        .to_owned();
    let mut idle = Vec::new();
    for _ in 0..CONNECTIONS {
        idle.push(tokio::net::TcpStream::connect(&authority).await.unwrap());
    }
    // Every slot is held: a request waits.
    let client = reqwest::Client::new();
    let waiting = client
        .post(&url)
        .timeout(Duration::from_millis(500))
        .body("{}")
        .send()
        .await;
    assert!(
        waiting.is_err_and(|e| e.is_timeout()),
        "served beyond the bound"
    );
    // A slot freed: served (`400`: not JSON-RPC).
    drop(idle.pop());
    let served = client.post(&url).body("{}").send().await.unwrap();
    assert_eq!(served.status(), 400);
    // The idle ones are closed by the relay within the head timeout.
    let mut first = idle.swap_remove(0);
    let mut buf = [0_u8; 16];
    let read = tokio::time::timeout(HEAD_TIMEOUT * 2, first.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0) | Err(_))), "{read:?}");
}
