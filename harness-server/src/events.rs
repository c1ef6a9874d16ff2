//! An execution's events as the server sends them: from the process's own log while this
//! replica runs the execution, else paged from the store and woken by its tail.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::Response;
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

/// One server-sent event, written into a chunk of the stream.
pub(crate) trait Frame: Send + 'static {
    /// Appends `id: ...`, optionally `event: ...`, one `data: ...` line and the blank line.
    fn write(&self, out: &mut Vec<u8>);

    /// About how many bytes [`write`](Self::write) appends (for the chunk's capacity).
    fn size_hint(&self) -> usize;
}

/// An execution's event: `id: <seq>`, `event: <kind>`, `data: <event JSON>`, the JSON
/// written straight into the chunk (no string per frame).
pub(crate) struct EventFrame(pub(crate) Arc<Event>);

impl Frame for EventFrame {
    fn write(&self, out: &mut Vec<u8>) {
        use std::io::Write as _;
        let event = &*self.0;
        let _ = write!(
            out,
            "id: {}\nevent: {}\ndata: ",
            event.seq().get(),
            event.kind().as_str()
        );
        // Compact JSON holds no line break: one `data` line. An event always serializes;
        // were it not to, the frame would still end and the stream stay well-formed.
        let _ = serde_json::to_writer(&mut *out, event);
        out.extend_from_slice(b"\n\n");
    }

    fn size_hint(&self) -> usize {
        // Typical deltas are well under this; a larger event grows the chunk once.
        192
    }
}

/// A frame of prepared text: its id and its one-line data (the AG-UI face's).
pub(crate) struct TextFrame {
    pub(crate) id: String,
    pub(crate) data: String,
}

impl Frame for TextFrame {
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"id: ");
        out.extend_from_slice(self.id.as_bytes());
        out.extend_from_slice(b"\ndata: ");
        out.extend_from_slice(self.data.as_bytes());
        out.extend_from_slice(b"\n\n");
    }

    fn size_hint(&self) -> usize {
        self.id.len() + self.data.len() + 16
    }
}

/// The most frames written as one chunk.
const BATCH: usize = 512;

/// The `text/event-stream` response of `frames`. The frames ready at once are written as
/// one chunk (a reader far behind, or a burst, costs one write per batch, not per event);
/// a keep-alive comment goes out after `keep_alive` without a frame. The body ends when
/// `frames` does.
pub(crate) fn response<F: Frame>(
    frames: impl Stream<Item = F> + Send + 'static,
    keep_alive: Duration,
) -> Response {
    let batches = Box::pin(frames.ready_chunks(BATCH));
    let body = futures_util::stream::unfold(batches, move |mut batches| async move {
        match tokio::time::timeout(keep_alive, batches.next()).await {
            Ok(Some(batch)) => {
                let mut out = Vec::with_capacity(batch.iter().map(Frame::size_hint).sum());
                for frame in &batch {
                    frame.write(&mut out);
                }
                Some((Ok::<_, Infallible>(Bytes::from(out)), batches))
            }
            Ok(None) => None,
            Err(_) => Some((Ok(Bytes::from_static(b": keep-alive\n\n")), batches)),
        }
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}
