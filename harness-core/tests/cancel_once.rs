//! Many concurrent cancels of one running execution, in process: exactly one is the first,
//! and exactly one `run.cancelled` follows. Through the handle (the in-memory claim) and
//! through a durable service's store (the claim every replica shares).

use std::sync::Arc;
use std::time::Duration;

use futures_util::{StreamExt, stream};
use harness_core::adapter::{
    AdapterEvent, BoxStream, EventResult, RunContext, Simple, SimpleAdapter,
};
use harness_core::event::{CancelReason, Content, EventPayload, TextDelta};
use harness_core::id::Cursor;
use harness_core::manifest::{ContractVersion, Describe, ExecutionMode, HarnessDescriptor};
use harness_core::service::{AdapterService, CancelStatus, ExecutionHandle, ExecutionRequest};
use harness_core::store::{MemoryStore, ReplicaId};

const CALLERS: usize = 200;

/// Streams one delta, then waits for ever.
struct Hangs(HarnessDescriptor);

impl Describe for Hangs {
    fn descriptor(&self) -> &HarnessDescriptor {
        &self.0
    }
}

impl SimpleAdapter for Hangs {
    fn stream(&self, _: RunContext) -> BoxStream<'static, EventResult> {
        let delta = Ok(AdapterEvent::Content(Content::MessageDelta(
            TextDelta::new("working"),
        )));
        Box::pin(stream::iter([delta]).chain(stream::pending()))
    }
}

fn service() -> AdapterService<Simple<Hangs>> {
    let adapter = Simple::new(Hangs(
        HarnessDescriptor::builder("hangs".parse().unwrap(), "0.1.0")
            .contract_version(ContractVersion::V1)
            .execution_mode(ExecutionMode::in_process())
            .build()
            .unwrap(),
    ));
    AdapterService::builder(adapter)
        .durable(Arc::new(MemoryStore::new()), ReplicaId::new("one"))
        .build()
}

/// A running execution: its first delta seen.
async fn running(service: &AdapterService<Simple<Hangs>>) -> ExecutionHandle {
    let handle = service.start(ExecutionRequest::new("go")).await.unwrap();
    let mut events = handle.events(Cursor::START);
    while let Some(event) = events.next().await {
        if matches!(event.payload(), EventPayload::MessageDelta(_)) {
            break;
        }
    }
    handle
}

/// How many `run.cancelled` the log holds, once it has ended.
async fn cancelled(handle: &ExecutionHandle) -> usize {
    tokio::time::timeout(Duration::from_secs(30), handle.outcome())
        .await
        .expect("the cancelled run ends");
    handle
        .events(Cursor::START)
        .filter(|e| std::future::ready(matches!(e.payload(), EventPayload::RunCancelled(_))))
        .count()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_many_concurrent_handle_cancels_exactly_one_is_accepted() {
    let service = service();
    for _ in 0..5 {
        let handle = running(&service).await;
        let start = Arc::new(tokio::sync::Barrier::new(CALLERS));
        let calls: Vec<_> = (0..CALLERS)
            .map(|i| {
                let (handle, start) = (handle.clone(), Arc::clone(&start));
                tokio::spawn(async move {
                    start.wait().await;
                    handle.cancel(CancelReason::new(format!("caller {i}")))
                })
            })
            .collect();
        let mut accepted = 0;
        for call in calls {
            match call.await.unwrap() {
                CancelStatus::Accepted => accepted += 1,
                CancelStatus::AlreadyRequested | CancelStatus::AlreadyEnded(_) => {}
            }
        }
        assert_eq!(accepted, 1);
        assert_eq!(cancelled(&handle).await, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_many_concurrent_store_cancels_exactly_one_is_first() {
    let service = Arc::new(service());
    for _ in 0..5 {
        let handle = running(&service).await;
        let start = Arc::new(tokio::sync::Barrier::new(CALLERS));
        let calls: Vec<_> = (0..CALLERS)
            .map(|i| {
                let (service, id, start) = (
                    Arc::clone(&service),
                    handle.id().clone(),
                    Arc::clone(&start),
                );
                tokio::spawn(async move {
                    start.wait().await;
                    service
                        .request_cancel(&id, &format!("caller {i}"))
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut first = 0;
        for call in calls {
            first += usize::from(call.await.unwrap());
        }
        assert_eq!(first, 1);
        // The owner applies the store's request: the one run.cancelled follows.
        assert_eq!(cancelled(&handle).await, 1);
    }
}
