//! `store-writer DB EXECUTION REPLICA MODE`: a replica process for the store's crash tests
//! (not an application). It takes the lease of EXECUTION (creating the record when absent;
//! waiting up to 10 s for a held lease to lapse) in the SQLite store at DB, then appends one delta at a time after the stored log, printing
//! `acked <seq>` once each append is acknowledged, until it is killed.
//!
//! MODE `write` renews its 1 s lease after every append; `stall` takes a 300 ms lease, stops
//! renewing after 20 appends, waits 1 s (the lease lapses), then tries one more append and
//! prints `fenced` (exit 3) when the store refuses it, `appended` (exit 0) otherwise.

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use harness_core::event::{Event, EventPayload, TextDelta};
use harness_core::id::{Cursor, ExecutionId, Sequence};
use harness_core::store::{ExecutionRecord, ExecutionStore, ReplicaId, StoreError};
use harness_core::time::Timestamp;
use harness_store::SqliteStore;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [db, id, replica, mode] = args.as_slice() else {
        eprintln!("usage: store-writer DB EXECUTION REPLICA write|stall");
        return ExitCode::from(2);
    };
    let Ok(runtime) = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    else {
        return ExitCode::FAILURE;
    };
    runtime.block_on(run(db, id, replica, mode == "stall"))
}

async fn run(db: &str, id: &str, replica: &str, stall: bool) -> ExitCode {
    let fail = |what: &str, e: &StoreError| {
        eprintln!("store-writer: {what}: {e}");
        ExitCode::FAILURE
    };
    let store = match SqliteStore::open(db) {
        Ok(store) => store,
        Err(e) => return fail("open", &e),
    };
    let Ok(id) = id.parse::<ExecutionId>() else {
        eprintln!("store-writer: bad execution id");
        return ExitCode::from(2);
    };
    let record = ExecutionRecord::new(id.clone(), "scripted", "fp", serde_json::json!({}));
    match store.create(record).await {
        Ok(_) | Err(StoreError::Exists(_)) => {}
        Err(e) => return fail("create", &e),
    }
    let owner = ReplicaId::new(replica);
    let ttl = Duration::from_millis(if stall { 300 } else { 1000 });
    // A takeover: the lease of a replica that died is free once it lapses.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut lease = loop {
        match store.acquire(&id, &owner, ttl).await {
            Ok(lease) => break lease,
            Err(StoreError::Leased { .. }) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return fail("acquire", &e),
        }
    };
    let mut last = match store.read(&id, Cursor::START, usize::MAX).await {
        Ok(events) => events.last().map_or(0, |e| e.seq().get()),
        Err(e) => return fail("read", &e),
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "leased {}", lease.token.get());
    let mut appended = 0;
    loop {
        if stall && appended == 20 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let seq = last + 1;
            let event = delta(&id, seq, replica);
            return match store.append(&lease, &[event]).await {
                Err(StoreError::Fenced { .. }) => {
                    let _ = writeln!(out, "fenced");
                    ExitCode::from(3)
                }
                Ok(()) => {
                    let _ = writeln!(out, "appended");
                    ExitCode::SUCCESS
                }
                Err(e) => fail("the stale append", &e),
            };
        }
        let seq = last + 1;
        if let Err(e) = store.append(&lease, &[delta(&id, seq, replica)]).await {
            return fail("append", &e);
        }
        let _ = writeln!(out, "acked {seq}");
        let _ = out.flush();
        last = seq;
        appended += 1;
        if !stall || appended < 20 {
            lease = match store.acquire(&id, &owner, ttl).await {
                Ok(lease) => lease,
                Err(e) => return fail("renew", &e),
            };
        }
    }
}

fn delta(id: &ExecutionId, seq: u64, replica: &str) -> Event {
    Event::new(
        id.clone(),
        Sequence::new(seq).unwrap_or(Sequence::FIRST),
        Timestamp::now(),
        EventPayload::MessageDelta(TextDelta::new(format!("{replica} {seq}"))),
    )
}
