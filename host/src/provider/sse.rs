//! Server-sent events (`text/event-stream`), the framing every streaming
//! model API uses: OpenAI's chat completions send `data:` lines ending in
//! `[DONE]`, Anthropic's Messages API names each event (`event:
//! content_block_delta`). One parser for both; what an event means is the
//! provider's business (`openai/answer.rs`, `anthropic/answer.rs`).
//!
//! A small parser rather than a crate: it needs one leniency the WHATWG
//! rules do not have (a `data:` line after a complete JSON value starts a new
//! event, for servers that forget the blank line), and it works on the
//! bytes reqwest hands over without an async adapter.

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; empty for the default `message`.
    pub event: String,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

/// Splits a byte stream into events (the WHATWG `text/event-stream` rules),
/// with one leniency: a `data:` line after a complete JSON value starts a new
/// event even without the blank line, as some servers forget it.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes not yet ending in a line break.
    buffer: Vec<u8>,
    event: String,
    data: String,
    has_data: bool,
    /// A byte-order mark is allowed before the first line only.
    started: bool,
}

impl SseParser {
    /// Feeds a chunk; returns the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.buffer.extend_from_slice(chunk);
        self.drain(false)
    }

    /// Ends the stream: the last line and event, even without a line break.
    pub fn finish(&mut self) -> Vec<SseEvent> {
        self.drain(true)
    }

    fn drain(&mut self, end: bool) -> Vec<SseEvent> {
        let mut events = Vec::new();
        let mut start = 0;
        while let Some(offset) = self.buffer[start..].iter().position(|&b| b == b'\n' || b == b'\r') {
            let at = start + offset;
            let next = if self.buffer[at] == b'\r' {
                match self.buffer.get(at + 1) {
                    Some(b'\n') => at + 2,
                    Some(_) => at + 1,
                    // A CR at the end of a read may be half of a CRLF.
                    None if !end => break,
                    None => at + 1,
                }
            } else {
                at + 1
            };
            let line = String::from_utf8_lossy(&self.buffer[start..at]).into_owned();
            start = next;
            self.line(&line, &mut events);
        }
        self.buffer.drain(..start);
        if end {
            if !self.buffer.is_empty() {
                let line = String::from_utf8_lossy(&std::mem::take(&mut self.buffer)).into_owned();
                self.line(&line, &mut events);
            }
            self.dispatch(&mut events);
        }
        events
    }

    fn line(&mut self, line: &str, events: &mut Vec<SseEvent>) {
        let line = if self.started { line } else { line.strip_prefix('\u{feff}').unwrap_or(line) };
        self.started = true;
        if line.is_empty() {
            self.dispatch(events);
            return;
        }
        if line.starts_with(':') {
            return; // a comment, often a keep-alive
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.has_data && is_complete(&self.data) {
                    self.dispatch(events);
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = value.to_string(),
            _ => {} // id, retry, unknown fields
        }
    }

    fn dispatch(&mut self, events: &mut Vec<SseEvent>) {
        if self.has_data {
            events.push(SseEvent { event: std::mem::take(&mut self.event), data: std::mem::take(&mut self.data) });
            self.has_data = false;
        }
        self.event.clear();
    }
}

/// Whether pending event data is already a whole payload.
fn is_complete(data: &str) -> bool {
    data.trim() == "[DONE]" || serde_json::from_str::<serde::de::IgnoredAny>(data).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::default();
        let mut out: Vec<SseEvent> = chunks.iter().flat_map(|c| parser.push(c)).collect();
        out.extend(parser.finish());
        out
    }

    fn data(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    #[test]
    fn sse_basic_events_comments_and_done() {
        let got = events(&[b": keep-alive\n\ndata: {\"a\":1}\n\ndata:{\"b\":2}\n\n\n\ndata: [DONE]\n\n"]);
        assert_eq!(data(&got), ["{\"a\":1}", "{\"b\":2}", "[DONE]"]);
    }

    #[test]
    fn sse_crlf_and_lone_cr() {
        let got = events(&[b"data: 1\r\n\r\ndata: 2\r\rdata: 3\n\n"]);
        assert_eq!(data(&got), ["1", "2", "3"]);
    }

    #[test]
    fn sse_split_anywhere_gives_the_same_events() {
        let stream: &[u8] =
            b"event: message\r\ndata: {\"x\":\"h\xc3\xa9llo\"}\r\n\r\n: ping\r\n\r\ndata: {\"y\":2}\r\n\r\ndata: [DONE]\r\n\r\n";
        let whole = events(&[stream]);
        assert_eq!(data(&whole), ["{\"x\":\"héllo\"}", "{\"y\":2}", "[DONE]"]);
        assert_eq!(whole[0].event, "message");
        assert_eq!(whole[1].event, "", "the event type resets after each event");
        for cut in 1..stream.len() {
            assert_eq!(events(&[&stream[..cut], &stream[cut..]]), whole, "split at {cut}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(events(&bytes), whole, "one byte per read");
    }

    #[test]
    fn sse_multiline_data_missing_blank_lines_and_unterminated_end() {
        // Spec-style multi-line data is joined.
        assert_eq!(data(&events(&[b"data: {\"a\":\ndata: 1}\n\n"])), ["{\"a\":\n1}"]);
        // No blank line between events (some servers).
        assert_eq!(data(&events(&[b"data: {\"a\":1}\ndata: {\"b\":2}\ndata: [DONE]\n"])), ["{\"a\":1}", "{\"b\":2}", "[DONE]"]);
        // The last event without any line break.
        assert_eq!(data(&events(&[b"data: {\"a\":1}\n\ndata: [DONE]"])), ["{\"a\":1}", "[DONE]"]);
        // A byte-order mark, an id field, a field without a colon.
        assert_eq!(data(&events(&[b"\xef\xbb\xbfid: 7\ndata\n\ndata: x\n\n"])), ["", "x"]);
    }
}
