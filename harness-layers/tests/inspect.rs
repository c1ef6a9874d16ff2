//! `InspectLayer`: every item shown, one end per segment (finished, drained, dropped),
//! around the default runtime layers, under many concurrent executions.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use harness_core::adapter::AdapterEvent;
use harness_core::error::{ErrorCode, HarnessError};
use harness_core::event::{CancelReason, Content, EventPayload};
use harness_core::id::ExecutionId;
use harness_core::service::{AdapterService, ExecutionRequest, Outcome, Segment, SegmentKind};
use harness_layers::inspect::{Ended, InspectLayer, Seen, SegmentEnd};
use harness_layers::stack::HarnessStack;
use harness_scripted::{ApprovalCall, Script, ScriptedAdapter};
use serde_json::json;

/// What the observers saw: per segment, its execution, kind, item kinds and end.
#[derive(Debug, Clone)]
struct Record {
    execution: ExecutionId,
    kind: SegmentKind,
    items: Vec<String>,
    /// The text of its message deltas, joined.
    text: String,
    end: Option<SegmentEnd>,
    ends: usize,
}

type Records = Arc<Mutex<Vec<Arc<Mutex<Record>>>>>;
type Observer = Box<dyn FnMut(Seen<'_>) + Send>;

fn recording(
    records: &Records,
) -> InspectLayer<impl Fn(&Segment) -> Observer + Send + Sync + 'static> {
    let records = Arc::clone(records);
    InspectLayer::new(move |segment: &Segment| {
        let record = Arc::new(Mutex::new(Record {
            execution: segment.execution_id().clone(),
            kind: segment.kind(),
            items: Vec::new(),
            text: String::new(),
            end: None,
            ends: 0,
        }));
        records.lock().unwrap().push(Arc::clone(&record));
        Box::new(move |seen: Seen<'_>| {
            let mut record = record.lock().unwrap();
            match seen {
                Seen::Item(Ok(event)) => {
                    if let AdapterEvent::Content(Content::MessageDelta(d)) = event {
                        record.text.push_str(&d.text);
                    }
                    record.items.push(format!("{event:?}"));
                }
                Seen::Item(Err(e)) => record.items.push(format!("error {}", e.code())),
                Seen::End(end) => {
                    record.end = Some(end);
                    record.ends += 1;
                }
            }
        }) as Observer
    })
}

fn service_with(adapter: ScriptedAdapter, records: &Records) -> AdapterService<ScriptedAdapter> {
    let stack = HarnessStack::defaults_for(&adapter).unwrap();
    AdapterService::builder(adapter)
        .layer(recording(records))
        .layer(stack.runtime().clone())
        .build()
}

fn snapshot(records: &Records) -> Vec<Record> {
    records
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.lock().unwrap().clone())
        .collect()
}

#[tokio::test]
async fn each_segment_shows_its_items_then_ends_once() {
    let records = Records::default();
    let script = Script::builder()
        .text("one")
        .approval([ApprovalCall::new("c1".parse().unwrap(), "t", json!({}))])
        .text("two")
        .text("three")
        .complete("ok")
        .build();
    let service = service_with(ScriptedAdapter::new(script), &records);
    let execution = service.start(ExecutionRequest::new("go")).await.unwrap();
    let pending = loop {
        if let Some(action) = execution.pending_actions().into_iter().next() {
            break action;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    execution.respond(pending.approve_all()).await.unwrap();
    assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));

    let seen = snapshot(&records);
    assert_eq!(seen.len(), 2, "a turn and a resume: {seen:#?}");
    assert_eq!(
        seen.iter().map(|r| r.kind).collect::<Vec<_>>(),
        [SegmentKind::Turn, SegmentKind::Resume]
    );
    for record in &seen {
        assert_eq!(&record.execution, execution.id());
        assert_eq!(record.ends, 1, "{record:#?}");
        let end = record.end.unwrap();
        assert_eq!(end.how, Ended::Finished);
        assert_eq!(end.items, record.items.len() as u64);
    }
    // The turn: its text, then the pause; the resume: its text, then the completion.
    assert_eq!(
        (seen[0].text.as_str(), seen[1].text.as_str()),
        ("one", "twothree")
    );
    assert!(
        seen[0].items.last().unwrap().starts_with("Action("),
        "{:#?}",
        seen[0]
    );
    assert!(
        seen[1].items.last().unwrap().starts_with("Completed("),
        "{:#?}",
        seen[1]
    );
    // What the observers saw of the text is what the log holds.
    let logged: String = execution
        .events(Default::default())
        .filter_map(|e| async move {
            match e.payload() {
                EventPayload::MessageDelta(d) => Some(d.text.clone()),
                _ => None,
            }
        })
        .collect::<Vec<_>>()
        .await
        .concat();
    assert_eq!(logged, "onetwothree");
}

#[tokio::test]
async fn a_cancelled_segment_is_drained_and_ends_once() {
    let records = Records::default();
    let script = Script::builder().text("before").hang().build();
    let service = service_with(ScriptedAdapter::new(script), &records);
    let execution = service.start(ExecutionRequest::new("go")).await.unwrap();
    let mut events = execution.events(Default::default());
    while let Some(event) = events.next().await {
        if matches!(event.payload(), EventPayload::MessageDelta(_)) {
            break;
        }
    }
    execution.cancel(CancelReason::default());
    assert!(matches!(execution.outcome().await, Outcome::Cancelled(_)));
    // The end is shown when the driver lets the stream go, just after the terminal event.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let record = loop {
        let seen = snapshot(&records);
        if seen.len() == 1 && seen[0].end.is_some() {
            break seen[0].clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "{seen:#?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(record.ends, 1, "{record:#?}");
    let end = record.end.unwrap();
    assert_eq!(end.items, record.items.len() as u64);
    // Redaction held back the delta's tail until it knew; the drain gave it back, and the
    // observer saw it as the log did.
    assert_eq!(record.text, "before", "{record:#?}");
    assert_eq!(end.how, Ended::Drained, "{record:#?}");
}

#[tokio::test]
async fn a_panicking_observer_is_a_layer_panic_with_one_terminal_event() {
    let adapter = ScriptedAdapter::new(Script::builder().text("x").complete("ok").build());
    let stack = HarnessStack::defaults_for(&adapter).unwrap();
    let service = AdapterService::builder(adapter)
        .layer(InspectLayer::new(|_: &Segment| {
            |seen: Seen<'_>| {
                if matches!(seen, Seen::Item(_)) {
                    panic!("an observer bug");
                }
            }
        }))
        .layer(stack.runtime().clone())
        .build();
    let execution = service.start(ExecutionRequest::new("go")).await.unwrap();
    let Outcome::Failed(err) = execution.outcome().await else {
        panic!("expected a failure");
    };
    let err: HarnessError = err;
    assert_eq!(err.code(), &ErrorCode::LAYER_PANICKED);
    let terminals = execution
        .events(Default::default())
        .filter(|e| std::future::ready(e.payload().is_terminal()))
        .count()
        .await;
    assert_eq!(terminals, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_concurrent_executions_each_end_exactly_once() {
    let records = Records::default();
    let script = Script::builder()
        .text("a")
        .delay(Duration::from_millis(1))
        .text("b")
        .complete("ok")
        .build();
    let service = service_with(ScriptedAdapter::new(script), &records);
    let mut tasks = Vec::new();
    for i in 0..64 {
        let service = service.clone();
        tasks.push(tokio::spawn(async move {
            let execution = service.start(ExecutionRequest::new("go")).await.unwrap();
            if i % 4 == 0 {
                // A quarter cancelled as they run.
                execution.cancel(CancelReason::default());
            }
            execution.outcome().await;
            execution.id().clone()
        }));
    }
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await.unwrap());
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let seen = snapshot(&records);
        if seen.iter().all(|r| r.end.is_some()) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "an end is missing");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let seen = snapshot(&records);
    for record in &seen {
        assert_eq!(record.ends, 1, "{record:#?}");
        assert_eq!(record.end.unwrap().items, record.items.len() as u64);
    }
    // Each execution that reached its runtime has exactly one segment.
    let mut executions: Vec<_> = seen.iter().map(|r| r.execution.clone()).collect();
    executions.sort();
    let before = executions.len();
    executions.dedup();
    assert_eq!(executions.len(), before, "one segment each");
    assert!(
        executions.len() >= 48,
        "{} of 64 reached the runtime",
        executions.len()
    );
    assert!(executions.iter().all(|id| ids.contains(id)));
}
