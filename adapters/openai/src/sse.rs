//! A server-sent events decoder for model streams: hostile input in, bounded memory and
//! linear time out.
//!
//! Lines end with `\n`, `\r\n` or `\r` (a `\r\n` split across two chunks is one ending);
//! `data:` lines accumulate, `event:` names the event, comments and other fields are skipped,
//! and a blank line dispatches. A line or an event's data longer than [`MAX_EVENT_BYTES`]
//! fails the stream instead of growing a buffer. Every byte is looked at a bounded number of
//! times, however the input is chunked.

/// The largest line, and the largest data of one event, in bytes.
pub(crate) const MAX_EVENT_BYTES: usize = 4 << 20;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` name, if any.
    pub(crate) event: Option<String>,
    /// The data lines, joined with `\n`.
    pub(crate) data: String,
}

/// Why a stream cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SseError {
    /// A line or an event's data is larger than [`MAX_EVENT_BYTES`].
    TooLarge,
    /// An event's data is not UTF-8.
    NotUtf8,
}

impl std::fmt::Display for SseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooLarge => write!(
                f,
                "an event of the model's stream is larger than {MAX_EVENT_BYTES} bytes"
            ),
            Self::NotUtf8 => f.write_str("an event of the model's stream is not UTF-8"),
        }
    }
}

/// The decoder's state between chunks.
#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    line: Vec<u8>,
    event: Option<String>,
    data: Vec<u8>,
    has_data: bool,
    /// The last chunk ended with `\r`: a `\n` starting the next one belongs to it.
    skip_lf: bool,
}

impl SseDecoder {
    /// Decodes `chunk`, appending the events it completes to `out`.
    pub(crate) fn push(
        &mut self,
        mut chunk: &[u8],
        out: &mut Vec<SseEvent>,
    ) -> Result<(), SseError> {
        while !chunk.is_empty() {
            if self.skip_lf {
                self.skip_lf = false;
                if chunk[0] == b'\n' {
                    chunk = &chunk[1..];
                    continue;
                }
            }
            match memchr::memchr2(b'\n', b'\r', chunk) {
                Some(at) => {
                    self.extend(&chunk[..at])?;
                    self.skip_lf = chunk[at] == b'\r';
                    chunk = &chunk[at + 1..];
                    self.line_done(out)?;
                }
                None => {
                    self.extend(chunk)?;
                    break;
                }
            }
        }
        Ok(())
    }

    /// The stream ended: a last line without its ending still counts; an event not
    /// dispatched by a blank line is dropped, as the SSE specification says.
    pub(crate) fn finish(&mut self, out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if !self.line.is_empty() {
            self.line_done(out)?;
        }
        Ok(())
    }

    fn extend(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.line.len() + bytes.len() > MAX_EVENT_BYTES {
            return Err(SseError::TooLarge);
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn line_done(&mut self, out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            return self.dispatch(out);
        }
        if line[0] == b':' {
            self.line = reuse(line);
            return Ok(());
        }
        let (field, value) = match memchr::memchr(b':', &line) {
            Some(at) => {
                let value = &line[at + 1..];
                (&line[..at], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (&line[..], &[][..]),
        };
        match field {
            b"data" => {
                if self.data.len() + value.len() + 1 > MAX_EVENT_BYTES {
                    return Err(SseError::TooLarge);
                }
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"event" => {
                self.event = Some(String::from_utf8_lossy(value).into_owned());
            }
            _ => {}
        }
        self.line = reuse(line);
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        let event = self.event.take();
        if !std::mem::take(&mut self.has_data) {
            return Ok(());
        }
        let data =
            String::from_utf8(std::mem::take(&mut self.data)).map_err(|_| SseError::NotUtf8)?;
        out.push(SseEvent { event, data });
        Ok(())
    }
}

/// The line buffer, emptied, to hold the next line (its allocation kept unless large).
fn reuse(mut line: Vec<u8>) -> Vec<u8> {
    line.clear();
    if line.capacity() > 64 * 1024 {
        line.shrink_to(1024);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(chunks: &[&[u8]]) -> Result<Vec<SseEvent>, SseError> {
        let mut decoder = SseDecoder::default();
        let mut out = Vec::new();
        for chunk in chunks {
            decoder.push(chunk, &mut out)?;
        }
        decoder.finish(&mut out)?;
        Ok(out)
    }

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(str::to_owned),
            data: data.to_owned(),
        }
    }

    #[test]
    fn events_fields_and_comments() {
        let stream = b": keep-alive\nevent: response.created\ndata: {\"a\":1}\n\ndata: x\ndata: y\nid: 7\nretry: 5\n\n";
        assert_eq!(
            decode(&[stream]).unwrap(),
            [ev(Some("response.created"), "{\"a\":1}"), ev(None, "x\ny")]
        );
    }

    #[test]
    fn every_chunking_and_line_ending_gives_the_same_events() {
        let stream = b"event: a\r\ndata: one\r\n\r\ndata:two\r\rdata: three\n\ndata: [DONE]\n\n";
        let whole = decode(&[stream]).unwrap();
        assert_eq!(
            whole,
            [
                ev(Some("a"), "one"),
                ev(None, "two"),
                ev(None, "three"),
                ev(None, "[DONE]")
            ]
        );
        for split in 0..stream.len() {
            let (a, b) = stream.split_at(split);
            assert_eq!(decode(&[a, b]).unwrap(), whole, "split at {split}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(decode(&bytes).unwrap(), whole);
    }

    #[test]
    fn an_event_without_its_blank_line_is_dropped_at_the_end() {
        assert_eq!(
            decode(&[b"data: done\n\ndata: cut"]).unwrap(),
            [ev(None, "done")]
        );
    }

    #[test]
    fn oversized_lines_and_events_fail_instead_of_growing() {
        let big = vec![b'x'; MAX_EVENT_BYTES + 1];
        assert_eq!(decode(&[b"data: ", &big]), Err(SseError::TooLarge));
        let line = vec![b'x'; MAX_EVENT_BYTES / 2];
        let mut stream = Vec::new();
        for _ in 0..3 {
            stream.extend_from_slice(b"data: ");
            stream.extend_from_slice(&line[..line.len() - 10]);
            stream.push(b'\n');
        }
        assert_eq!(decode(&[&stream]), Err(SseError::TooLarge));
        assert_eq!(decode(&[b"data: \xff\xfe\n\n"]), Err(SseError::NotUtf8));
    }
}
