//! An execution's events as the server sends them: from the process's own log while this
//! replica runs the execution, else paged from the store and woken by its tail.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::Event as Frame;
use futures_util::{Stream, StreamExt};
use harness_core::event::Event;
use harness_core::id::{Cursor, ExecutionId};

use crate::instance::Control;

/// How many events one store read takes: as many as a durable execution appends at most at
/// once, so a reader far behind decodes each stored batch about once.
pub(crate) const PAGE: usize = 8192;

/// The events of `id` after `after`, read from the store page by page, waiting on its tail
/// between pages, ending after the terminal event (at once when `after` is already past
/// it). A store error ends the stream (the client resumes from the last id it saw).
pub(crate) fn stored(
    control: Arc<dyn Control>,
    id: ExecutionId,
    after: u64,
) -> impl Stream<Item = Arc<Event>> + Send + 'static {
    struct Reader {
        control: Arc<dyn Control>,
        id: ExecutionId,
        after: u64,
        buffer: VecDeque<Event>,
        tail: Option<harness_core::store::Tail>,
        done: bool,
    }
    let reader = Reader {
        control,
        id,
        after,
        buffer: VecDeque::new(),
        tail: None,
        done: false,
    };
    futures_util::stream::unfold(reader, |mut r| async move {
        loop {
            if let Some(event) = r.buffer.pop_front() {
                r.after = event.seq().get();
                r.done = event.payload().is_terminal();
                return Some((Arc::new(event), r));
            }
            if r.done {
                return None;
            }
            // The tail before the read: a change between the two still wakes the wait.
            if r.tail.is_none() {
                match r.control.tail(&r.id).await {
                    Ok(tail) => r.tail = Some(tail),
                    Err(e) => {
                        tracing::warn!(error = %e, execution = %r.id, "could not follow a stored log");
                        return None;
                    }
                }
            }
            // The record before the read: once it says the execution ended, its terminal
            // event is stored (one transaction), so an empty read then means nothing is left.
            let ended = match r.control.record(&r.id).await {
                Ok(record) => record.is_some_and(|record| record.state.is_terminal()),
                Err(e) => {
                    tracing::warn!(error = %e, execution = %r.id, "could not read a stored record");
                    return None;
                }
            };
            match r
                .control
                .read_events(&r.id, Cursor::after_seq(r.after), PAGE)
                .await
            {
                Ok(page) if !page.is_empty() => r.buffer.extend(page),
                Ok(_) if ended => return None,
                Ok(_) => {
                    let cursor = Cursor::after_seq(r.after);
                    let woke = match r.tail.as_mut() {
                        Some(tail) => {
                            tokio::time::timeout(Duration::from_secs(1), tail.after(cursor))
                                .await
                                .unwrap_or(true)
                        }
                        None => true,
                    };
                    if !woke {
                        // The store dropped the tail (the execution was purged): poll slowly.
                        r.tail = None;
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, execution = %r.id, "could not read a stored log");
                    return None;
                }
            }
        }
    })
}

/// The SSE frame of `event`: `id: <seq>`, `event: <kind>`, `data: <event JSON>`.
pub(crate) fn frame(event: &Event) -> Result<Frame, Infallible> {
    let data = serde_json::to_string(event).unwrap_or_default();
    Ok(Frame::default()
        .id(event.seq().get().to_string())
        .event(event.kind().as_str())
        .data(data))
}

/// `events` as SSE frames.
pub(crate) fn frames(
    events: impl Stream<Item = Arc<Event>> + Send + 'static,
) -> impl Stream<Item = Result<Frame, Infallible>> + Send + 'static {
    events.map(|event| frame(&event))
}
