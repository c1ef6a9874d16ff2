//! The disk fills up under the SQLite store while an execution streams over HTTP: the
//! execution pauses (its reader sees nothing past the last stored event), a new execution is
//! refused with a classified error (`persistence`, `STORE_FULL`, retryable, naming the
//! disk); once space returns the paused execution goes on to its one terminal event and new
//! executions run, without a restart; the database, reopened, holds every event a reader
//! was shown.
//!
//! The full disk is a real one where the test can make it: a tmpfs of 4 MiB (it needs root
//! and `mount`), filled by a ballast file that is deleted to give the space back. Where it
//! cannot (or with `HARNESS_TEST_INJECT_DISK_FULL=1`), the store's own fault injection caps
//! the database's size ([`SqliteStore::limit_size`]: SQLite's `SQLITE_FULL`, the same error a
//! full disk gives). The test prints which path it took.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use harness_core::event::Event;
use harness_core::id::{Cursor, ExecutionId};
use harness_core::store::{ExecutionStore, ReplicaId};
use harness_layers::stack::HarnessStack;
use harness_scripted::{Script, ScriptedAdapter, ScriptedOptions};
use harness_server::auth::BearerTokens;
use harness_server::client::SseParser;
use harness_server::{Instance, Server};
use harness_store::SqliteStore;
use serde_json::{Value, json};

const TOKEN: &str = "disk-full-token-0123456789";
/// What is left free when the disk is filled: the execution stores some events, then fills
/// it.
const ROOM: u64 = 512 * 1024;
const BURSTS: usize = 40;
const BURST: u32 = 100;
const DELTA: usize = 256;

/// A tmpfs mounted for the test, unmounted (and its directory removed) on drop, whatever
/// way the test ends.
struct Mounted(PathBuf);

impl Mounted {
    fn new(dir: &Path) -> Result<Self, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if out.status.success() {
            Ok(Self(dir.to_owned()))
        } else {
            let _ = std::fs::remove_dir(dir);
            Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // Lazy: the store's files may still be open in a thread being torn down.
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How the disk is made full, and given its space back.
enum Disk {
    /// A real small filesystem, filled by `ballast`.
    Tmpfs { _mounted: Mounted, ballast: PathBuf },
    /// The store's size cap.
    Injected { _dir: TempDir },
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Disk {
    fn new() -> (Self, PathBuf, String) {
        let dir = std::env::temp_dir().join(format!("harness-disk-full-{}", std::process::id()));
        let inject = std::env::var_os("HARNESS_TEST_INJECT_DISK_FULL").is_some();
        let mounted = if inject {
            Err("HARNESS_TEST_INJECT_DISK_FULL is set".to_owned())
        } else {
            Mounted::new(&dir)
        };
        match mounted {
            Ok(mounted) => (
                Self::Tmpfs {
                    _mounted: mounted,
                    ballast: dir.join("ballast"),
                },
                dir.join("harness.db"),
                "a real full disk: a tmpfs of 4 MiB filled by a ballast file".to_owned(),
            ),
            Err(why) => {
                std::fs::create_dir_all(&dir).unwrap();
                (
                    Self::Injected {
                        _dir: TempDir(dir.clone()),
                    },
                    dir.join("harness.db"),
                    format!(
                        "the store's fault injection (SqliteStore::limit_size: SQLITE_FULL), \
                         as no tmpfs could be mounted: {why}"
                    ),
                )
            }
        }
    }

    /// Leaves [`ROOM`] bytes for the database to grow.
    async fn fill(&self, store: &SqliteStore) {
        match self {
            Self::Tmpfs { ballast, .. } => {
                use std::io::Write;
                let mut file = std::fs::File::create(ballast).unwrap();
                let chunk = vec![0u8; 64 * 1024];
                let mut written = 0u64;
                loop {
                    match file.write(&chunk) {
                        Ok(n) => written += n as u64,
                        Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
                        Err(e) => panic!("filling the tmpfs: {e}"),
                    }
                }
                file.set_len(written.saturating_sub(ROOM)).unwrap();
            }
            Self::Injected { .. } => {
                let now = store.limit_size(Some(0)).await.unwrap();
                store.limit_size(Some(now + ROOM)).await.unwrap();
            }
        }
    }

    async fn free(&self, store: &SqliteStore) {
        match self {
            Self::Tmpfs { ballast, .. } => std::fs::remove_file(ballast).unwrap(),
            Self::Injected { .. } => {
                store.limit_size(None).await.unwrap();
            }
        }
    }
}

async fn start(store: Arc<SqliteStore>) -> String {
    let adapter = ScriptedAdapter::quickstart();
    let stack = HarnessStack::defaults_for(&adapter).unwrap();
    let server = Server::builder()
        .instance(Instance::new(&stack, adapter, store, ReplicaId::new("r")))
        .authenticate(BearerTokens::new().with_token("alice", TOKEN).unwrap())
        .build()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, server.router()).await });
    url
}

async fn post(url: &str, options: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/executions"))
        .bearer_auth(TOKEN)
        .json(&json!({ "adapter": "scripted", "message": "go", "options": options }))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

/// Reads `id`'s SSE stream to its end into `seen`.
async fn read(url: String, id: String, seen: Arc<Mutex<Vec<Value>>>) {
    let response = reqwest::Client::new()
        .get(format!("{url}/v1/executions/{id}/events"))
        .bearer_auth(TOKEN)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    let mut parser = SseParser::default();
    while let Some(chunk) = body.next().await {
        for data in parser.push(&chunk.unwrap()) {
            seen.lock()
                .unwrap()
                .push(serde_json::from_str(&data).unwrap());
        }
    }
}

/// Each event's kind, and whether it is terminal.
fn kinds(events: &[Value]) -> Vec<(String, bool)> {
    events
        .iter()
        .map(|e| serde_json::from_value::<Event>(e.clone()).unwrap())
        .map(|e| (e.kind().as_str().to_owned(), e.kind().is_terminal()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_pauses_executions_refuses_new_ones_and_loses_nothing_acknowledged() {
    let (disk, path, how) = Disk::new();
    eprintln!("disk full made by {how}");
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let url = start(Arc::clone(&store)).await;
    disk.fill(&store).await;

    // An execution streaming some 2 MB, far past the room left.
    let mut script = Script::builder();
    for n in 0..BURSTS {
        script = script
            .text_repeated(format!("{n:>DELTA$}"), BURST)
            .delay(Duration::from_millis(10));
    }
    let script = ScriptedOptions::with_script(script.complete("ok").build()).to_value();
    let (status, started) = post(&url, script).await;
    assert!(status < 300, "{status} {started}");
    let id = started["id"].as_str().unwrap().to_owned();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let reader = tokio::spawn(read(url.clone(), id.clone(), Arc::clone(&seen)));

    // It pauses: nothing more is shown for a second, well before its end.
    let paused_at = tokio::time::timeout(Duration::from_secs(30), async {
        let (mut count, mut since) = (0, Instant::now());
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let now = seen.lock().unwrap().len();
            if now != count {
                (count, since) = (now, Instant::now());
            } else if since.elapsed() > Duration::from_secs(1) {
                return count;
            }
        }
    })
    .await
    .expect("the execution pauses within 30 s");
    let expected_deltas = BURSTS * BURST as usize;
    assert!(
        paused_at > 0 && paused_at < expected_deltas,
        "paused after {paused_at} events"
    );

    // A new execution is refused, classified, naming the disk.
    let big = ScriptedOptions::with_script(
        Script::builder()
            .text("x".repeat(300 * 1024))
            .complete("ok")
            .build(),
    )
    .to_value();
    let (status, refused) = post(&url, big.clone()).await;
    assert_eq!(status, 503, "{refused}");
    let error = &refused["error"];
    assert_eq!(error["category"], "persistence", "{refused}");
    assert_eq!(error["code"], "STORE_FULL", "{refused}");
    assert_eq!(error["retryable"], true, "{refused}");
    assert!(
        error["message"].as_str().unwrap().contains("disk is full"),
        "{refused}"
    );
    assert_eq!(seen.lock().unwrap().len(), paused_at, "still paused");

    // Space returns: the paused execution goes on to its end, without a restart.
    disk.free(&store).await;
    tokio::time::timeout(Duration::from_secs(60), reader)
        .await
        .expect("the paused execution ends within 60 s of space returning")
        .unwrap();
    let events = seen.lock().unwrap().clone();
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    let shown = kinds(&events);
    assert_eq!(
        shown.iter().filter(|(k, _)| k == "message.delta").count(),
        expected_deltas
    );
    let terminals: Vec<_> = shown
        .iter()
        .filter(|(_, terminal)| *terminal)
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(terminals, ["run.succeeded"], "exactly one terminal event");

    // New executions run again (the refused one too, sent again).
    let (status, again) = post(&url, big).await;
    assert!(status < 300, "{status} {again}");
    let after = Arc::new(Mutex::new(Vec::new()));
    let again_id = again["id"].as_str().unwrap().to_owned();
    tokio::time::timeout(
        Duration::from_secs(30),
        read(url.clone(), again_id, Arc::clone(&after)),
    )
    .await
    .expect("a new execution ends within 30 s");
    assert_eq!(
        kinds(&after.lock().unwrap())
            .last()
            .map(|(k, _)| k.as_str()),
        Some("run.succeeded")
    );

    // The database, opened again, holds every event the reader was shown, as shown.
    let reopened = SqliteStore::open(&path).unwrap();
    let id: ExecutionId = id.parse().unwrap();
    let mut stored = Vec::new();
    loop {
        let page = reopened
            .read(&id, Cursor::after_seq(stored.len() as u64), 1024)
            .await
            .unwrap();
        if page.is_empty() {
            break;
        }
        stored.extend(page.iter().map(|e| serde_json::to_value(e).unwrap()));
    }
    assert_eq!(stored.len(), events.len());
    assert!(
        stored == events,
        "the stored log differs from what was shown"
    );
    eprintln!(
        "paused after {paused_at} of {} events; refused: {}",
        events.len(),
        error["message"]
    );
}
