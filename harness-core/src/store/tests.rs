use super::*;
use crate::error::ErrorCategory;
use crate::event::Event;
use crate::event::{CancelReason, EventPayload};
use crate::id::{ExecutionId, Sequence};
use crate::state::ExecutionState;
use crate::time::Timestamp;

fn event(id: &ExecutionId, seq: u64, payload: EventPayload) -> Event {
    Event::new(
        id.clone(),
        Sequence::new(seq).unwrap(),
        Timestamp::now(),
        payload,
    )
}

#[test]
fn a_batch_continues_the_log_and_reports_the_state_it_implies() {
    let id = ExecutionId::generate();
    let batch = [
        event(&id, 3, EventPayload::RunRunning),
        event(
            &id,
            4,
            EventPayload::RunCancelled(CancelReason::new("stop")),
        ),
    ];
    assert_eq!(
        check_batch(&id, 2, false, &batch),
        Ok((Some(ExecutionState::Cancelled), true))
    );
    assert_eq!(
        check_batch(&id, 1, false, &batch),
        Err(StoreError::Sequence {
            execution: id.clone(),
            expected: 2,
            got: 3
        })
    );
    assert_eq!(
        check_batch(&id, 2, true, &batch),
        Err(StoreError::Ended(id.clone()))
    );
    // Nothing after the terminal event, within the batch too.
    let after_end = [
        event(
            &id,
            1,
            EventPayload::RunCancelled(CancelReason::new("stop")),
        ),
        event(&id, 2, EventPayload::RunRunning),
    ];
    assert_eq!(
        check_batch(&id, 0, false, &after_end),
        Err(StoreError::Ended(id.clone()))
    );
    let other = ExecutionId::generate();
    assert!(matches!(
        check_batch(&id, 0, false, &[event(&other, 1, EventPayload::RunQueued)]),
        Err(StoreError::WrongExecution { .. })
    ));
    assert_eq!(check_batch::<Event>(&id, 5, false, &[]), Ok((None, false)));
}

#[test]
fn store_errors_are_persistence_errors_and_only_unavailability_or_a_full_disk_is_retryable() {
    let id = ExecutionId::generate();
    let unavailable = StoreError::Unavailable("disk full".into()).to_harness_error();
    assert_eq!(unavailable.category(), ErrorCategory::Persistence);
    assert!(unavailable.retryable());
    assert_eq!(
        unavailable.diagnostic(),
        Some("store unavailable: disk full")
    );
    let full = StoreError::Full("no space left".into()).to_harness_error();
    assert_eq!(full.category(), ErrorCategory::Persistence);
    assert_eq!(full.code(), &crate::error::ErrorCode::STORE_FULL);
    assert!(full.retryable());
    assert!(
        full.message().contains("disk is full"),
        "{}",
        full.message()
    );
    let fenced = StoreError::Fenced {
        execution: id,
        presented: FencingToken::new(1),
        current: FencingToken::new(2),
    }
    .to_harness_error();
    assert!(!fenced.retryable());
    assert_eq!(
        fenced.message(),
        "this replica no longer owns the execution"
    );
}
