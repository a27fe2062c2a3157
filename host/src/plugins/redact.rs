//! Redaction: every secret value written back as its placeholder, in
//! everything that comes back to a plugin that holds secrets.
//!
//! - [`Redactor`]: one Aho-Corasick automaton over every form a value can
//!   take in a response (as is, percent-encoded for a path or a query,
//!   form-encoded, JSON-escaped), leftmost-longest, so a value that contains
//!   another is redacted whole.
//! - [`StreamRedactor`]: the same over a body that arrives in chunks. It
//!   holds back a tail of (longest value - 1) bytes, the most of a value that
//!   can straddle two chunks, and releases the rest at once: nothing waits
//!   for the whole body, and memory stays one chunk plus the tail.
//! - [`RedactingBody`]: an `http_body::Body` around a response body that
//!   redacts as it streams. The connection that feeds it keeps being driven
//!   by its own task while the guest reads (a response whose head and body
//!   come in separate writes, as HTTP/2 frames and streamed bodies do, used
//!   to stall here when the body was collected before the connection ran).

use std::borrow::Cow;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use bytes::{Buf, Bytes, BytesMut};
use hyper::body::{Body, Frame, SizeHint};

/// Every form of every value of one plugin's secrets, and what to write
/// instead.
pub struct Redactor {
    /// Leftmost-longest over the needles.
    automaton: AhoCorasick,
    /// The same, ASCII case-insensitive: header names come lowercased.
    names: AhoCorasick,
    /// The placeholder of each needle, by pattern index.
    replacements: Vec<String>,
    /// The longest needle in bytes.
    longest: usize,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the values.
        f.debug_struct("Redactor").field("needles", &self.replacements.len()).finish()
    }
}

impl Redactor {
    /// A redactor for `needles`: (bytes to find, placeholder to write).
    /// `None` when there is nothing to find.
    pub fn new(needles: Vec<(Vec<u8>, String)>) -> Option<Redactor> {
        let mut needles: Vec<(Vec<u8>, String)> = needles.into_iter().filter(|(n, _)| !n.is_empty()).collect();
        needles.sort();
        needles.dedup_by(|a, b| a.0 == b.0);
        if needles.is_empty() {
            return None;
        }
        let patterns: Vec<&[u8]> = needles.iter().map(|(n, _)| n.as_slice()).collect();
        let build = |case_insensitive: bool| {
            AhoCorasickBuilder::new().match_kind(MatchKind::LeftmostLongest).ascii_case_insensitive(case_insensitive).build(&patterns)
        };
        // Building fails only past the automaton's size limits, far beyond
        // a handful of secrets; no redactor would mean no redaction, so a
        // failure here is a bug worth stopping for.
        let automaton = build(false).expect("an automaton over a few secret values");
        let names = build(true).expect("an automaton over a few secret values");
        let longest = patterns.iter().map(|p| p.len()).max().unwrap_or(1);
        Some(Redactor { automaton, names, replacements: needles.into_iter().map(|(_, r)| r).collect(), longest })
    }

    /// `bytes` with every value written as its placeholder.
    pub fn redact_bytes<'a>(&self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        if !self.automaton.is_match(bytes) {
            return Cow::Borrowed(bytes);
        }
        Cow::Owned(self.automaton.replace_all_bytes(bytes, &self.replacements))
    }

    /// [`Redactor::redact_bytes`] for text.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if !self.automaton.is_match(text) {
            return Cow::Borrowed(text);
        }
        Cow::Owned(self.automaton.replace_all(text, &self.replacements))
    }

    /// True when `name` (a header name) holds a value in any case.
    pub fn in_name(&self, name: &str) -> bool {
        self.names.is_match(name)
    }

    /// Redacts a header map in place: values as bytes (a value with bytes
    /// outside visible ASCII is redacted like any other), and a header whose
    /// name carries a value is dropped (a name cannot hold a placeholder).
    pub fn redact_headers(&self, headers: &mut http::HeaderMap) {
        let leaking: Vec<http::HeaderName> = headers.keys().filter(|n| self.in_name(n.as_str())).cloned().collect();
        for name in leaking {
            headers.remove(name);
        }
        for value in headers.values_mut() {
            if let Cow::Owned(redacted) = self.redact_bytes(value.as_bytes()) {
                // The placeholder is visible ASCII, so what was a valid
                // value stays one; should it not, nothing of it is kept.
                *value = http::HeaderValue::from_bytes(&redacted).unwrap_or_else(|_| http::HeaderValue::from_static("{{secret}}"));
            }
        }
    }

    /// A redactor for one body that arrives in chunks.
    pub fn stream(self: &Arc<Self>) -> StreamRedactor {
        StreamRedactor { redactor: self.clone(), pending: BytesMut::new() }
    }
}

/// Redacts a body chunk by chunk; see the module docs.
pub struct StreamRedactor {
    redactor: Arc<Redactor>,
    /// Bytes received but not yet released: at most (longest value - 1)
    /// between calls.
    pending: BytesMut,
}

impl StreamRedactor {
    /// Takes the next `chunk`; returns what can be released now, redacted
    /// (possibly empty).
    pub fn push(&mut self, chunk: &[u8]) -> Bytes {
        self.pending.extend_from_slice(chunk);
        // A value starting before `limit` ends inside `pending`, so whether
        // it is there (and which is longest) is known; one starting at or
        // after it may still be cut off.
        let limit = self.pending.len().saturating_sub(self.redactor.longest - 1);
        if limit == 0 {
            return Bytes::new();
        }
        let mut out: Option<Vec<u8>> = None;
        let mut copied = 0;
        let mut released = limit;
        for found in self.redactor.automaton.find_iter(&self.pending[..]) {
            if found.start() >= limit {
                break;
            }
            let out = out.get_or_insert_with(|| Vec::with_capacity(limit + 64));
            out.extend_from_slice(&self.pending[copied..found.start()]);
            out.extend_from_slice(self.redactor.replacements[found.pattern().as_usize()].as_bytes());
            copied = found.end();
            released = released.max(found.end());
        }
        match out {
            None => self.pending.split_to(limit).freeze(),
            Some(mut out) => {
                out.extend_from_slice(&self.pending[copied..released]);
                self.pending.advance(released);
                Bytes::from(out)
            }
        }
    }

    /// The end of the body: the held-back tail, redacted.
    pub fn finish(&mut self) -> Bytes {
        let tail = self.pending.split().freeze();
        match self.redactor.redact_bytes(&tail) {
            Cow::Borrowed(_) => tail,
            Cow::Owned(redacted) => Bytes::from(redacted),
        }
    }
}

/// A response body redacted as it streams; see the module docs. Trailers
/// are redacted like headers; errors pass through `redact_error`.
pub struct RedactingBody<B: Body> {
    inner: B,
    stream: StreamRedactor,
    /// Trailers that came after the data, sent once the tail is out.
    trailers: Option<http::HeaderMap>,
    done: bool,
    redact_error: fn(&Redactor, B::Error) -> B::Error,
}

impl<B: Body> RedactingBody<B> {
    /// `inner`, redacted by `redactor`.
    pub fn new(inner: B, redactor: &Arc<Redactor>, redact_error: fn(&Redactor, B::Error) -> B::Error) -> Self {
        RedactingBody { inner, stream: redactor.stream(), trailers: None, done: false, redact_error }
    }
}

impl<B> Body for RedactingBody<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))));
            }
            match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        let out = this.stream.push(&data);
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(out))));
                        }
                    }
                    Err(frame) => {
                        if let Ok(mut trailers) = frame.into_trailers() {
                            this.stream.redactor.redact_headers(&mut trailers);
                            this.trailers = Some(trailers);
                        }
                        this.done = true;
                        let tail = this.stream.finish();
                        if !tail.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(tail))));
                        }
                    }
                },
                Some(Err(e)) => {
                    this.done = true;
                    return Poll::Ready(Some(Err((this.redact_error)(&this.stream.redactor, e))));
                }
                None => {
                    this.done = true;
                    let tail = this.stream.finish();
                    if !tail.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(tail))));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.trailers.is_none()
    }

    /// Unknown: redaction changes the length.
    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redactor(values: &[&str]) -> Arc<Redactor> {
        Arc::new(Redactor::new(values.iter().map(|v| (v.as_bytes().to_vec(), format!("<{v}>").replace(v, "R"))).collect()).unwrap())
    }

    /// Every split of the input into two and three chunks gives what
    /// redacting it whole gives.
    #[test]
    fn a_value_split_across_chunks_is_redacted_whole() {
        let r = redactor(&["SECRET-123", "SECRET"]);
        let input = b"aaSECRET-123bbSECRETccSECRET-12SECRET-123";
        let whole = r.redact_bytes(input).into_owned();
        assert_eq!(whole, b"aa<R>bb<R>cc<R>-12<R>".to_vec());
        for i in 0..=input.len() {
            for j in i..=input.len() {
                let mut s = r.stream();
                let mut out = Vec::new();
                for part in [&input[..i], &input[i..j], &input[j..]] {
                    out.extend_from_slice(&s.push(part));
                }
                out.extend_from_slice(&s.finish());
                assert_eq!(out, whole, "split at {i}, {j}");
            }
        }
    }

    #[test]
    fn bytes_are_released_as_soon_as_they_cannot_start_a_value() {
        let r = redactor(&["0123456789"]);
        let mut s = r.stream();
        assert_eq!(&s.push(b"hello world")[..], b"he", "all but a value's length minus one");
        assert_eq!(&s.push(b"!")[..], b"l");
        assert_eq!(&s.finish()[..], b"lo world!");
    }

    #[test]
    fn header_values_are_redacted_as_bytes_and_leaking_names_dropped() {
        let r = redactor(&["tok3n"]);
        let mut headers = http::HeaderMap::new();
        headers.insert("x-echo", http::HeaderValue::from_bytes(b"\xfftok3n\x80").unwrap());
        headers.insert("x-tok3n", http::HeaderValue::from_static("v"));
        headers.insert("x-other", http::HeaderValue::from_static("TOK3N is not it"));
        r.redact_headers(&mut headers);
        assert_eq!(headers["x-echo"].as_bytes(), b"\xff<R>\x80");
        assert!(!headers.contains_key("x-tok3n"));
        assert_eq!(headers["x-other"], "TOK3N is not it");
    }

    #[tokio::test]
    async fn a_body_streams_through_redacted_with_its_trailers() {
        use http_body_util::BodyExt;
        let r = redactor(&["tok3n"]);
        let frames: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = vec![
            Ok(Frame::data(Bytes::from_static(b"a tok"))),
            Ok(Frame::data(Bytes::from_static(b"3n b"))),
            Ok(Frame::trailers(http::HeaderMap::from_iter([(http::HeaderName::from_static("x-t"), http::HeaderValue::from_static("tok3n"))]))),
        ];
        let body = http_body_util::StreamBody::new(futures::stream::iter(frames));
        let collected = RedactingBody::new(body, &r, |_, e| e).collect().await.unwrap();
        let trailers = collected.trailers().cloned().unwrap();
        assert_eq!(&collected.to_bytes()[..], b"a <R> b");
        assert_eq!(trailers["x-t"], "<R>");
    }
}
