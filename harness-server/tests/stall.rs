//! An SSE reader that stops reading: over real TCP on loopback, a client opens an
//! execution's event stream on a socket with a tiny receive buffer and never reads it while
//! the execution streams megabytes. The execution and another reader go on to the end
//! meanwhile; the stalled connection is reset after the write timeout and counted (phase
//! `write`); the client resumes from the last event it read with `Last-Event-ID` and gets
//! every event after it. The write timeout is short here (2 s); bounds on time are generous.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use harness_core::event::{Event, EventPayload};
use harness_scripted::{Script, ScriptedOptions};
use harness_server::ConnectionLimits;
use harness_server::client::SseParser;
use harness_server::socket::names;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

const TOKEN: &str = "stall-token-0123456789";
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// Deltas of 2 KiB: some 12 MB of SSE, well past what the kernel (send and receive buffers)
/// and hyper buffer for one connection on loopback.
const DELTAS: usize = 6000;
const DELTA: usize = 2048;
/// Deltas streamed at once, between pauses of 100 ms.
const BURST: usize = 500;

#[path = "support/bounded.rs"]
mod bounded;

async fn start() -> SocketAddr {
    bounded::start(TOKEN, ConnectionLimits::new().write_timeout(WRITE_TIMEOUT)).await
}

/// Runs `test` on one thread with a recorder of its own, handing it what it records.
fn recorded<F: Future<Output = ()>>(test: impl FnOnce(Snapshotter) -> F) {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(test(snapshotter));
    });
}

/// The write timeouts counted since the last call (a snapshot takes the counts).
fn write_timeouts(snapshotter: &Snapshotter) -> u64 {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| {
            key.key().name() == names::CONNECTION_TIMEOUTS
                && key
                    .key()
                    .labels()
                    .any(|l| l.key() == names::LABEL_PHASE && l.value() == names::PHASE_WRITE)
        })
        .map(|(.., value)| match value {
            DebugValue::Counter(n) => n,
            other => panic!("not a counter: {other:?}"),
        })
        .sum()
}

/// Reads the SSE stream of `id` after `after` to its end; the events' sequence numbers, in
/// order, and the bytes of delta text.
async fn read_all(url: &str, id: &str, after: Option<u64>) -> (Vec<u64>, usize) {
    let mut request = reqwest::Client::new()
        .get(format!("{url}/v1/executions/{id}/events"))
        .bearer_auth(TOKEN)
        .header("accept", "text/event-stream");
    if let Some(after) = after {
        request = request.header("last-event-id", after.to_string());
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    let mut parser = SseParser::default();
    let (mut seqs, mut text) = (Vec::new(), 0);
    while let Some(chunk) = body.next().await {
        for data in parser.push(&chunk.expect("a stream that is read is never cut")) {
            let event: Event = serde_json::from_str(&data).unwrap();
            if let EventPayload::MessageDelta(delta) = event.payload() {
                text += delta.text.len();
            }
            seqs.push(event.seq().get());
        }
    }
    (seqs, text)
}

#[test]
fn a_stalled_sse_reader_is_dropped_after_the_write_timeout_and_resumes_from_its_cursor() {
    recorded(|seen| async move {
        let address = start().await;
        let url = format!("http://{address}");
        // Streams in bursts over about a second, so the stall begins while it runs.
        let mut script = Script::builder();
        for n in 0..DELTAS / BURST {
            script = script
                .text_repeated(format!("{n:>DELTA$}"), BURST as u32)
                .delay(Duration::from_millis(100));
        }
        let started: serde_json::Value = reqwest::Client::new()
            .post(format!("{url}/v1/executions"))
            .bearer_auth(TOKEN)
            .json(&json!({
                "adapter": "scripted",
                "message": "go",
                "options": ScriptedOptions::with_script(script.complete("ok").build()).to_value(),
            }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = started["id"].as_str().unwrap().to_owned();

        // The stalled client: a receive buffer of a few KiB, never read.
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stalled = socket.connect(address).await.unwrap();
        stalled
            .write_all(
                format!(
                    "GET /v1/executions/{id}/events HTTP/1.1\r\nhost: x\r\n\
                     authorization: Bearer {TOKEN}\r\naccept: text/event-stream\r\n\r\n"
                )
                .as_bytes(),
            )
            .await
            .unwrap();
        let stalled_at = Instant::now();

        // Another reader reads the whole stream meanwhile, to its end.
        let (seqs, text) = tokio::time::timeout(Duration::from_secs(60), read_all(&url, &id, None))
            .await
            .expect("the other reader ends within 60 s");
        let total = seqs.len() as u64;
        assert_eq!(
            seqs,
            (1..=total).collect::<Vec<_>>(),
            "every event, in order"
        );
        assert_eq!(text, DELTAS * DELTA, "every delta's text");
        let read_in = stalled_at.elapsed();
        assert_eq!(
            write_timeouts(&seen),
            0,
            "the stalled reader was dropped before the other one ended ({read_in:?}): the \
             execution is too short to show that the other went on meanwhile"
        );

        // The stalled connection is dropped once no write has made progress for the timeout.
        let mut counted = 0;
        let dropped = tokio::time::timeout(Duration::from_secs(30), async {
            while counted == 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
                counted += write_timeouts(&seen);
            }
            stalled_at.elapsed()
        })
        .await
        .expect("the stalled reader is dropped within 30 s");
        assert!(dropped >= WRITE_TIMEOUT, "dropped after {dropped:?}");

        // What the client had received before the reset, if the kernel kept it: its cursor
        // is the last whole event in it (none: from the start).
        let mut received = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match stalled.read(&mut buf).await {
                    Ok(0) => return "closed",
                    Err(_) => return "reset",
                    Ok(n) => received.extend_from_slice(&buf[..n]),
                }
            }
        })
        .await
        .expect("the stalled connection is closed");
        let text = String::from_utf8_lossy(&received);
        let body = text.split_once("\r\n\r\n").map_or("", |(_, body)| body);
        // Chunked encoding: the frames' `id:` lines are whole wherever a frame is whole.
        let cursor = body
            .split("\n\n")
            .filter(|frame| frame.contains("\ndata: {") && frame.ends_with('}'))
            .filter_map(|frame| {
                frame
                    .lines()
                    .find_map(|l| l.strip_prefix("id: ").and_then(|v| v.parse::<u64>().ok()))
            })
            .max();
        assert!(
            cursor.is_none_or(|c| c < total),
            "the stalled client received everything ({cursor:?} of {total}): it never stalled"
        );
        eprintln!(
            "stalled reader: {} bytes received, cursor {cursor:?} of {total} events, {closed} \
             after {dropped:?}; the other reader read all in {read_in:?}",
            received.len()
        );

        // It resumes from its cursor and gets every event after it.
        let (resumed, _) =
            tokio::time::timeout(Duration::from_secs(60), read_all(&url, &id, cursor))
                .await
                .expect("the resumed reader ends within 60 s");
        let from = cursor.unwrap_or(0) + 1;
        assert_eq!(resumed, (from..=total).collect::<Vec<_>>());
        counted += write_timeouts(&seen);
        assert_eq!(counted, 1, "one connection dropped, counted once");
    });
}
