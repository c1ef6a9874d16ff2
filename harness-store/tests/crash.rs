//! Crash claims proven with real processes: a replica (`store-writer`) appending to the
//! SQLite store is killed with SIGKILL; nothing it had acknowledged is lost, the log stays
//! contiguous, another replica takes the lease over once it lapses and goes on; a stale
//! replica whose lease lapsed can append nothing, refused by the store.

mod common;
use common::scratch;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use harness_core::event::{CancelReason, EventPayload};
use harness_core::id::{Cursor, ExecutionId};
use harness_core::store::{ExecutionStore, ReplicaId, StoreError};
use harness_store::{SqliteStore, suite};

fn writer(db: &std::path::Path, id: &ExecutionId, replica: &str, mode: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_store-writer"))
        .arg(db)
        .arg(id.as_str())
        .args([replica, mode])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the writer starts")
}

type Lines = std::iter::MapWhile<
    std::io::Lines<BufReader<std::process::ChildStdout>>,
    fn(std::io::Result<String>) -> Option<String>,
>;

fn lines_of(child: &mut Child) -> Lines {
    BufReader::new(child.stdout.take().expect("stdout"))
        .lines()
        .map_while(Result::ok as fn(_) -> _)
}

/// Reads the writer's lines until `stop` says so; returns the last acknowledged sequence
/// number and the lines read.
fn follow(out: &mut Lines, mut stop: impl FnMut(&str, u64) -> bool) -> (u64, Vec<String>) {
    let mut acked = 0;
    let mut lines = Vec::new();
    for line in out.by_ref() {
        if let Some(n) = line.strip_prefix("acked ") {
            acked = n.parse().expect("a number");
        }
        let done = stop(&line, acked);
        lines.push(line);
        if done {
            break;
        }
    }
    (acked, lines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_mid_stream_loses_nothing_it_acknowledged_and_another_takes_over() {
    let dir = scratch("kill");
    let db = dir.join("harness.db");
    let id = ExecutionId::generate();
    for round in 0..3u64 {
        // Round 0 creates the execution; later rounds continue its log after a takeover.
        let mut child = writer(&db, &id, &format!("replica-{round}"), "write");
        let target = 150 + round * 37;
        let mut out = lines_of(&mut child);
        let (_, lines) = follow(&mut out, |_, _| true);
        let token: u64 = lines[0]
            .strip_prefix("leased ")
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("round {round}: {lines:?}"));
        assert_eq!(
            token,
            round + 1,
            "each takeover gets the next fencing token"
        );
        let (acked, _) = follow(&mut out, |_, acked| acked >= target);
        assert!(
            acked >= target,
            "round {round}: the writer stopped at {acked}"
        );
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");

        let store = SqliteStore::open(&db).expect("open after the crash");
        let stored = store
            .read(&id, Cursor::START, usize::MAX)
            .await
            .expect("read");
        assert!(
            stored.len() as u64 >= acked,
            "round {round}: {} stored, {acked} acknowledged",
            stored.len()
        );
        assert!(
            stored
                .iter()
                .enumerate()
                .all(|(i, e)| e.seq().get() == i as u64 + 1),
            "contiguous after the crash"
        );
    }

    // The last writer's lease lapses (1 s); a surviving replica takes it over and ends the
    // execution with exactly one terminal event.
    let store = SqliteStore::open(&db).expect("open");
    let survivor = ReplicaId::new("survivor");
    let begun = Instant::now();
    let lease = loop {
        match store.acquire(&id, &survivor, Duration::from_secs(30)).await {
            Ok(lease) => break lease,
            Err(StoreError::Leased { .. }) if begun.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the lease is never taken over: {e}"),
        }
    };
    assert_eq!(lease.token.get(), 4, "three writers held it before");
    let last = store
        .read(&id, Cursor::START, usize::MAX)
        .await
        .expect("read")
        .len() as u64;
    store
        .append(
            &lease,
            &[suite::event_with(
                &id,
                last + 1,
                EventPayload::RunCancelled(CancelReason::new("owner lost")),
            )],
        )
        .await
        .expect("the new owner appends");
    let all = store
        .read(&id, Cursor::START, usize::MAX)
        .await
        .expect("read");
    assert_eq!(all.iter().filter(|e| e.kind().is_terminal()).count(), 1);
    assert!(all.last().is_some_and(|e| e.kind().is_terminal()));
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_replica_whose_lease_lapsed_can_append_nothing() {
    let dir = scratch("stale");
    let db = dir.join("harness.db");
    let id = ExecutionId::generate();
    let mut stale = writer(&db, &id, "stale", "stall");
    let mut out = lines_of(&mut stale);
    let (acked, _) = follow(&mut out, |_, acked| acked >= 20);
    assert_eq!(acked, 20);

    // While it stalls, its 300 ms lease lapses and this replica takes over.
    let store = SqliteStore::open(&db).expect("open");
    let begun = Instant::now();
    let lease = loop {
        match store
            .acquire(&id, &ReplicaId::new("new"), Duration::from_secs(30))
            .await
        {
            Ok(lease) => break lease,
            Err(StoreError::Leased { .. }) if begun.elapsed() < Duration::from_secs(5) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("no takeover: {e}"),
        }
    };
    store
        .append(&lease, &suite::events(&id, 21, 21))
        .await
        .expect("the new owner appends");

    // The stale one wakes up and tries: the store refuses it.
    let (_, lines) = follow(&mut out, |line, _| line == "fenced" || line == "appended");
    let status = stale.wait().expect("reaped");
    assert_eq!(
        lines.last().map(String::as_str),
        Some("fenced"),
        "{lines:?}"
    );
    assert_eq!(status.code(), Some(3));
    let all = store
        .read(&id, Cursor::START, usize::MAX)
        .await
        .expect("read");
    assert_eq!(
        all.len(),
        21,
        "only the new owner's event after the stale one's"
    );
    assert!(matches!(all[20].payload(), EventPayload::MessageDelta(d) if d.text == "delta 21"));
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}
