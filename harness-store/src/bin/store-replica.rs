//! `store-replica DB REPLICA MODE`: a replica process for the durable-service crash tests
//! (not an application): an `AdapterService` over the `Ticker` adapter of
//! `harness_store::suite`, durable as replica REPLICA (lease 1 s) in DB: a PostgreSQL
//! connection string (`host=...`) or the path of an SQLite file.
//!
//! MODE `run` starts one execution that ticks every 5 ms for ever; MODE `ask` one that first
//! asks to approve a tool call (then ticks three times). Both print `execution <id>`, then
//! `seen <seq> <kind>` for every event its handle shows (only what the store acknowledged),
//! until killed. MODE `recover` (its adapter declares `session.cross_replica_resume`) calls
//! `AdapterService::recover` until no execution of the adapter is unfinished (at most 10 s),
//! printing `recovered <id> <how>` for each it handled; each it restored it then answers
//! (approving the call) and follows to its end, printing `resumed <id> <terminal kind>`;
//! then `done`.

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use harness_core::id::Cursor;
use harness_core::service::{AdapterService, ExecutionRequest, Recovery};
use harness_core::store::{ExecutionStore, ReplicaId};
use harness_store::suite::Ticker;
use harness_store::{PostgresStore, SqliteStore};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [db, replica, mode] = args.as_slice() else {
        eprintln!("usage: store-replica DB REPLICA run|recover");
        return ExitCode::from(2);
    };
    let Ok(runtime) = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    else {
        return ExitCode::FAILURE;
    };
    runtime.block_on(async {
        let opened: Result<Arc<dyn ExecutionStore>, _> = if db.starts_with("host=") {
            PostgresStore::connect(db)
                .await
                .map(|s| Arc::new(s) as Arc<dyn ExecutionStore>)
        } else {
            SqliteStore::open(db).map(|s| Arc::new(s) as Arc<dyn ExecutionStore>)
        };
        let store = match opened {
            Ok(store) => store,
            Err(e) => {
                eprintln!("store-replica: {e}");
                return ExitCode::FAILURE;
            }
        };
        let adapter = match mode.as_str() {
            "run" => Ticker::new(None, Duration::from_millis(5)),
            "ask" => Ticker::asking(Some(3), Duration::from_millis(5)),
            _ => Ticker::resumable(Some(3), Duration::from_millis(5)),
        };
        let service = AdapterService::builder(adapter)
            .store(Arc::clone(&store), ReplicaId::new(replica.as_str()))
            .lease_ttl(Duration::from_secs(1))
            .build();
        match mode.as_str() {
            "run" | "ask" => run(&service).await,
            "recover" => recover(&service, &*store).await,
            _ => ExitCode::from(2),
        }
    })
}

async fn run(service: &AdapterService<harness_core::adapter::Simple<Ticker>>) -> ExitCode {
    let execution = match service.start(ExecutionRequest::new("tick")).await {
        Ok(execution) => execution,
        Err(e) => {
            eprintln!("store-replica: start: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "execution {}", execution.id());
    let mut events = execution.events(Cursor::START);
    while let Some(event) = events.next().await {
        let _ = writeln!(out, "seen {} {}", event.seq().get(), event.kind().as_str());
        let _ = out.flush();
    }
    ExitCode::SUCCESS
}

async fn recover(
    service: &AdapterService<harness_core::adapter::Simple<Ticker>>,
    store: &dyn ExecutionStore,
) -> ExitCode {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = std::io::stdout().lock();
    loop {
        match service.recover().await {
            Ok(done) => {
                for recovery in done {
                    let _ = match &recovery {
                        Recovery::Failed(id) => writeln!(out, "recovered {id} failed"),
                        Recovery::Cancelled(id) => writeln!(out, "recovered {id} cancelled"),
                        Recovery::Restored(id) => writeln!(out, "recovered {id} restored"),
                    };
                    if let Recovery::Restored(id) = recovery {
                        match resume(service, &id).await {
                            Ok(kind) => {
                                let _ = writeln!(out, "resumed {id} {kind}");
                            }
                            Err(e) => {
                                eprintln!("store-replica: resume {id}: {e}");
                                return ExitCode::FAILURE;
                            }
                        }
                    }
                }
            }
            Err(e) => {
                eprintln!("store-replica: recover: {e}");
                return ExitCode::FAILURE;
            }
        }
        let left = store
            .unfinished()
            .await
            .map(|records| records.iter().any(|r| r.adapter == "ticker"));
        match left {
            Ok(false) => break,
            Ok(true) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(true) => {
                eprintln!("store-replica: executions still unfinished after 10 s");
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("store-replica: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let _ = writeln!(out, "done");
    ExitCode::SUCCESS
}

/// Answers the restored execution `id` (approving every call) and follows it to its end.
async fn resume(
    service: &AdapterService<harness_core::adapter::Simple<Ticker>>,
    id: &harness_core::id::ExecutionId,
) -> Result<&'static str, String> {
    let execution = service.attach(id).await.map_err(|e| e.to_string())?;
    let mut events = execution.events(Cursor::START);
    let request = loop {
        match events.next().await {
            Some(event) => {
                if let harness_core::event::EventPayload::ActionRequested(request) = event.payload()
                {
                    break (**request).clone();
                }
            }
            None => return Err("the restored execution ended without its action".to_owned()),
        }
    };
    service
        .respond_to(id, request.approve_all())
        .await
        .map_err(|e| e.to_string())?;
    let ended = tokio::time::timeout(Duration::from_secs(10), execution.outcome())
        .await
        .map_err(|_| "no end within 10 s".to_owned())?;
    Ok(match ended.state() {
        harness_core::lifecycle::ExecutionState::Succeeded => "run.succeeded",
        harness_core::lifecycle::ExecutionState::Cancelled => "run.cancelled",
        _ => "run.failed",
    })
}
