//! The socket layer bounds its clients, over real TCP on loopback: slow heads, trickling
//! bodies and idle connections are closed after their timeouts, the connection caps refuse
//! with a `503` and make room again, and a healthy SSE stream outlasts every timeout.
//! Timeouts are short here (1 s) to keep the tests fast; bounds on time are generous.

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use harness_core::event::{Event, EventPayload};
use harness_core::store::{MemoryStore, ReplicaId};
use harness_layers::stack::HarnessStack;
use harness_scripted::{Script, ScriptedAdapter, ScriptedOptions};
use harness_server::auth::BearerTokens;
use harness_server::client::SseParser;
use harness_server::socket::names;
use harness_server::{ConnectionLimits, Instance, Server};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const TOKEN: &str = "socket-token-0123456789";
const SECOND: Duration = Duration::from_secs(1);

#[path = "support/bounded.rs"]
mod bounded;

/// A server with the scripted adapter within `limits`.
async fn start(limits: ConnectionLimits) -> SocketAddr {
    bounded::start(TOKEN, limits).await
}

/// Short timeouts, caps out of the way.
fn short() -> ConnectionLimits {
    ConnectionLimits::new()
        .header_timeout(SECOND)
        .body_timeout(SECOND)
        .idle_timeout(SECOND)
        .max_connections(10_000)
        .max_connections_per_peer(10_000)
}

/// Reads until the server closes (EOF or reset); what came, and when it closed. Panics
/// after `within`.
async fn read_until_closed(stream: &mut TcpStream, within: Duration) -> (Vec<u8>, Instant) {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return (seen, Instant::now()),
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the server kept the connection past {within:?}"))
}

/// Reads one whole response with a `content-length` (the head and that many bytes).
async fn read_response(stream: &mut TcpStream) -> String {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(5 * SECOND, async {
        loop {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(
                n > 0,
                "closed mid-response: {}",
                String::from_utf8_lossy(&seen)
            );
            seen.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&seen);
            if let Some(end) = text.find("\r\n\r\n") {
                let length: usize = text[..end]
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length: ")
                            .map(|v| v.trim().parse().unwrap())
                    })
                    .unwrap_or(0);
                if seen.len() >= end + 4 + length {
                    return text.into_owned();
                }
            }
        }
    })
    .await
    .expect("a whole response within 5 s")
}

/// Two sockets per connection and some to spare.
fn enough_descriptors(connections: usize) {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let needed = (2 * connections + 256) as u64;
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current.is_some_and(|c| c < needed) {
        limit.current = Some(limit.maximum.map_or(needed, |max| max.min(needed)));
        setrlimit(Resource::Nofile, limit).expect("raise the open-file limit");
    }
}

/// Runs `test` on one thread with a recorder of its own; returns what it recorded.
fn recorded<F: Future<Output = ()>>(test: impl FnOnce() -> F) -> Snapshotter {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(test());
    });
    snapshotter
}

fn counter(snapshotter: &Snapshotter, name: &str, label: (&str, &str)) -> u64 {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| {
            key.key().name() == name
                && key
                    .key()
                    .labels()
                    .any(|l| l.key() == label.0 && l.value() == label.1)
        })
        .map(|(.., value)| match value {
            DebugValue::Counter(n) => n,
            other => panic!("{name} is not a counter: {other:?}"),
        })
        .sum()
}

const SLOW: usize = 300;

#[test]
fn slow_heads_are_closed_within_the_header_timeout_while_a_request_is_answered() {
    enough_descriptors(SLOW + 8);
    let seen = recorded(|| async {
        let address = start(short()).await;
        let mut slow = Vec::new();
        for n in 0..SLOW {
            let mut stream = TcpStream::connect(address).await.unwrap();
            let opened = Instant::now();
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nHo")
                .await
                .unwrap();
            slow.push(tokio::spawn(async move {
                // Half send a byte every 300 ms (never finishing the head), half never again.
                let trickle = n % 2 == 0;
                let (mut read, mut write) = stream.into_split();
                let writer = tokio::spawn(async move {
                    if trickle {
                        loop {
                            tokio::time::sleep(Duration::from_millis(300)).await;
                            if write.write_all(b"x").await.is_err() {
                                break;
                            }
                        }
                    }
                    write
                });
                let mut buf = [0u8; 1024];
                let closed = tokio::time::timeout(10 * SECOND, read.read(&mut buf))
                    .await
                    .expect("a slow head was held past 10 s");
                assert!(
                    closed.as_ref().is_err() || closed.as_ref().is_ok_and(|n| *n == 0),
                    "a slow head was answered"
                );
                let closed = Instant::now();
                writer.abort();
                closed - opened
            }));
        }
        // A normal request on a fresh connection, while all 300 are held.
        let asked = Instant::now();
        let response = reqwest::get(format!("http://{address}/healthz"))
            .await
            .unwrap();
        let answered = asked.elapsed();
        assert_eq!(response.status(), 200);
        println!("a normal request among {SLOW} slow heads was answered in {answered:?}");
        assert!(answered < 2 * SECOND, "{answered:?}");

        let mut longest = Duration::ZERO;
        for held in slow {
            let held = held.await.unwrap();
            assert!(
                held >= Duration::from_millis(900),
                "closed before the header timeout: {held:?}"
            );
            longest = longest.max(held);
        }
        println!("the {SLOW} slow heads were held at most {longest:?} (timeout 1 s)");
        assert!(longest < 3 * SECOND, "{longest:?}");
    });
    assert_eq!(
        counter(
            &seen,
            names::CONNECTION_TIMEOUTS,
            (names::LABEL_PHASE, names::PHASE_HEADER)
        ),
        SLOW as u64
    );
}

#[test]
fn a_trickling_body_is_answered_408_and_closed_after_the_body_timeout() {
    let seen = recorded(|| async {
        let address = start(short()).await;
        let mut stream = TcpStream::connect(address).await.unwrap();
        let body = json!({"adapter": "scripted", "message": "hi"}).to_string();
        let head = format!(
            "POST /v1/executions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let started = Instant::now();
        let (mut read, mut write) = stream.into_split();
        let bytes = body.into_bytes();
        // One byte every 200 ms: the whole body would take far longer than a second.
        let writer = tokio::spawn(async move {
            for byte in bytes {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if write.write_all(&[byte]).await.is_err() {
                    break;
                }
            }
            write
        });
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        tokio::time::timeout(5 * SECOND, async {
            loop {
                match read.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
        })
        .await
        .expect("the connection closed within 5 s");
        let closed = started.elapsed();
        writer.abort();
        let text = String::from_utf8_lossy(&seen);
        assert!(text.starts_with("HTTP/1.1 408 "), "{text}");
        assert!(
            text.to_ascii_lowercase().contains("connection: close"),
            "{text}"
        );
        assert!(text.contains(r#""category":"timeout""#), "{text}");
        assert!(
            (Duration::from_millis(900)..3 * SECOND).contains(&closed),
            "{closed:?}"
        );
    });
    assert_eq!(
        counter(
            &seen,
            names::CONNECTION_TIMEOUTS,
            (names::LABEL_PHASE, names::PHASE_BODY)
        ),
        1
    );
}

#[test]
fn an_idle_kept_alive_connection_is_closed_after_the_idle_timeout() {
    let seen = recorded(|| async {
        // The head timeout is long: only the idle timeout can close it.
        let address = start(short().header_timeout(30 * SECOND)).await;
        let mut stream = TcpStream::connect(address).await.unwrap();
        for _ in 0..2 {
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
                .await
                .unwrap();
            let response = read_response(&mut stream).await;
            assert!(response.starts_with("HTTP/1.1 200 "), "{response}");
            // Within the idle timeout, the connection is kept for the next request.
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let idle_since = Instant::now() - Duration::from_millis(500);
        let (rest, closed) = read_until_closed(&mut stream, 5 * SECOND).await;
        assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
        let idle = closed - idle_since;
        assert!(
            (Duration::from_millis(900)..3 * SECOND).contains(&idle),
            "{idle:?}"
        );
    });
    assert_eq!(
        counter(
            &seen,
            names::CONNECTION_TIMEOUTS,
            (names::LABEL_PHASE, names::PHASE_IDLE)
        ),
        1
    );
}

/// A connection from `from` (any loopback address) to `to`.
async fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    socket.connect(to).await.unwrap()
}

/// Asks `/healthz` on `stream`; the status line.
async fn health(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    read_response(stream).await
}

#[test]
fn the_per_peer_cap_refuses_past_it_and_admits_again_once_one_closes() {
    let seen = recorded(|| async {
        let limits = ConnectionLimits::new()
            .max_connections_per_peer(3)
            .max_connections(100);
        let address = start(limits).await;
        let mut held = Vec::new();
        for _ in 0..3 {
            let mut stream = connect_from([127, 0, 0, 1], address).await;
            assert!(health(&mut stream).await.starts_with("HTTP/1.1 200 "));
            held.push(stream);
        }
        // The fourth from the same address is refused, with an answer.
        let mut fourth = connect_from([127, 0, 0, 1], address).await;
        let _ = fourth
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await;
        let (refusal, _) = read_until_closed(&mut fourth, 5 * SECOND).await;
        let refusal = String::from_utf8_lossy(&refusal);
        assert!(refusal.starts_with("HTTP/1.1 503 "), "{refusal}");
        assert!(refusal.contains("retry-after: 1\r\n"), "{refusal}");
        assert!(refusal.contains(r#""category":"capacity""#), "{refusal}");
        assert!(
            refusal.contains("your address has 3 connections open"),
            "{refusal}"
        );
        // Another address is not bound by this one's cap.
        let mut other = connect_from([127, 0, 0, 2], address).await;
        assert!(health(&mut other).await.starts_with("HTTP/1.1 200 "));
        // One closes: the address is admitted again.
        drop(held.pop());
        let readmitted = async {
            loop {
                let mut stream = connect_from([127, 0, 0, 1], address).await;
                let _ = stream
                    .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                    .await;
                let (answer, _) = read_until_closed(&mut stream, 5 * SECOND).await;
                if answer.starts_with(b"HTTP/1.1 200 ") {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(5 * SECOND, readmitted)
            .await
            .expect("admitted again within 5 s of a close");
    });
    assert!(
        counter(
            &seen,
            names::CONNECTIONS_REFUSED,
            (names::LABEL_LIMIT, names::LIMIT_PEER)
        ) >= 1
    );
    assert_eq!(
        counter(
            &seen,
            names::CONNECTIONS_REFUSED,
            (names::LABEL_LIMIT, names::LIMIT_SERVER)
        ),
        0
    );
}

#[test]
fn the_server_cap_refuses_past_it_and_admits_again_once_one_closes() {
    let seen = recorded(|| async {
        let limits = ConnectionLimits::new()
            .max_connections(2)
            .max_connections_per_peer(100);
        let address = start(limits).await;
        let mut first = connect_from([127, 0, 0, 1], address).await;
        assert!(health(&mut first).await.starts_with("HTTP/1.1 200 "));
        let mut second = connect_from([127, 0, 0, 2], address).await;
        assert!(health(&mut second).await.starts_with("HTTP/1.1 200 "));
        // A third, from a third address: the server is full.
        let mut third = connect_from([127, 0, 0, 3], address).await;
        let (refusal, _) = read_until_closed(&mut third, 5 * SECOND).await;
        let refusal = String::from_utf8_lossy(&refusal);
        assert!(refusal.starts_with("HTTP/1.1 503 "), "{refusal}");
        assert!(
            refusal.contains("this server has 2 connections open"),
            "{refusal}"
        );
        // A clean close makes room.
        first.shutdown().await.unwrap();
        drop(first);
        let readmitted = async {
            loop {
                let mut stream = connect_from([127, 0, 0, 3], address).await;
                let _ = stream
                    .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                    .await;
                let (answer, _) = read_until_closed(&mut stream, 5 * SECOND).await;
                if answer.starts_with(b"HTTP/1.1 200 ") {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(5 * SECOND, readmitted)
            .await
            .expect("admitted again within 5 s of a close");
        drop(second);
    });
    assert!(
        counter(
            &seen,
            names::CONNECTIONS_REFUSED,
            (names::LABEL_LIMIT, names::LIMIT_SERVER)
        ) >= 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_sse_stream_outlasts_every_timeout() {
    let address = start(short()).await;
    let url = format!("http://{address}");
    // Two silences of 2.5 s (no frame, no keep-alive comment): each longer than every
    // timeout (1 s).
    let script = Script::builder()
        .text("before ")
        .delay(Duration::from_millis(2500))
        .text("between ")
        .delay(Duration::from_millis(2500))
        .text("after")
        .complete("ok")
        .build();
    let http = reqwest::Client::new();
    let started: serde_json::Value = http
        .post(format!("{url}/v1/executions"))
        .bearer_auth(TOKEN)
        .json(&json!({
            "adapter": "scripted",
            "message": "go",
            "options": ScriptedOptions::with_script(script).to_value(),
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = started["id"].as_str().unwrap();
    let opened = Instant::now();
    let response = http
        .get(format!("{url}/v1/executions/{id}/events"))
        .bearer_auth(TOKEN)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    let mut parser = SseParser::default();
    let mut text = String::new();
    let mut ended = false;
    tokio::time::timeout(20 * SECOND, async {
        while let Some(chunk) = body.next().await {
            for data in parser.push(&chunk.expect("the stream was not cut")) {
                let event: Event = serde_json::from_str(&data).unwrap();
                match event.payload() {
                    EventPayload::MessageDelta(delta) => text.push_str(&delta.text),
                    EventPayload::RunSucceeded(_) => ended = true,
                    _ => {}
                }
            }
        }
    })
    .await
    .expect("the execution ends within 20 s");
    let lasted = opened.elapsed();
    assert!(ended, "the stream ended before the execution did: {text:?}");
    assert_eq!(text, "before between after");
    assert!(lasted > 4 * SECOND, "{lasted:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_closes_idle_connections_and_lets_a_stream_end() {
    let adapter = ScriptedAdapter::quickstart();
    let stack = HarnessStack::defaults_for(&adapter).unwrap();
    let server = Server::builder()
        .instance(Instance::new(
            &stack,
            adapter,
            Arc::new(MemoryStore::new()),
            ReplicaId::new("r"),
        ))
        .authenticate(BearerTokens::new().with_token("alice", TOKEN).unwrap())
        .build()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(
        harness_server::serve(listener, server.router(), ConnectionLimits::new())
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .into_future(),
    );
    let url = format!("http://{address}");
    let script = Script::builder()
        .text("before ")
        .delay(Duration::from_millis(1500))
        .text("after")
        .complete("ok")
        .build();
    let http = reqwest::Client::new();
    let started: serde_json::Value = http
        .post(format!("{url}/v1/executions"))
        .bearer_auth(TOKEN)
        .json(&json!({
            "adapter": "scripted",
            "message": "go",
            "options": ScriptedOptions::with_script(script).to_value(),
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = started["id"].as_str().unwrap();
    let response = http
        .get(format!("{url}/v1/executions/{id}/events"))
        .bearer_auth(TOKEN)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    // An idle kept-alive connection, besides.
    let mut idle = TcpStream::connect(address).await.unwrap();
    assert!(health(&mut idle).await.starts_with("HTTP/1.1 200 "));

    stop.send(()).unwrap();
    let (rest, _) = read_until_closed(&mut idle, 5 * SECOND).await;
    assert!(rest.is_empty());
    assert!(
        TcpStream::connect(address).await.is_err(),
        "the listener closed on the signal"
    );
    assert!(!serving.is_finished(), "a stream is still being written");
    let body = tokio::time::timeout(10 * SECOND, response.text())
        .await
        .expect("the stream ends with its execution")
        .unwrap();
    assert!(body.contains("event: run.succeeded"), "{body}");
    tokio::time::timeout(5 * SECOND, serving)
        .await
        .expect("serve ends once the stream has")
        .unwrap();
}
