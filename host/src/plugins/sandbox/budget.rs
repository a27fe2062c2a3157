//! What a call may make the host hold in text: the log and progress
//! budgets, and the bounded capture of the guest's stderr.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

/// Stderr kept per call: enough for a panic message and a backtrace line.
pub(super) const STDERR_CAPTURE: usize = 16 * 1024;

/// Log lines a call may emit, and their bytes together.
pub(super) const LOG_LINES_PER_CALL: u32 = 200;
pub(super) const LOG_BYTES_PER_CALL: usize = 64 * 1024;

/// Progress texts a call may send, and their bytes together.
pub(super) const PROGRESS_PER_CALL: u32 = 200;
pub(super) const PROGRESS_BYTES_PER_CALL: usize = 64 * 1024;

/// Bytes of one log line or progress text; the rest is cut with a marker.
pub(super) const LINE_BYTES: usize = 1024;

/// At most one progress text per this interval is passed on; the ones in
/// between are dropped, so a plugin cannot flood a terminal or a chat.
pub(super) const PROGRESS_INTERVAL: Duration = Duration::from_millis(50);

/// What is left of one kind of text a call may send to the host.
pub(super) struct Budget {
    lines: u32,
    bytes: usize,
    pub(super) dropped: u32,
}

impl Budget {
    pub(super) fn new(lines: u32, bytes: usize) -> Self {
        Budget { lines, bytes, dropped: 0 }
    }

    /// `text` clipped to a line and made safe to show, if the budget still
    /// has room for it; `None` (counted as dropped) otherwise.
    pub(super) fn take(&mut self, text: &str) -> Option<String> {
        if self.lines == 0 || self.bytes == 0 {
            self.dropped += 1;
            return None;
        }
        let line = crate::text::clip_for_terminal(text, LINE_BYTES.min(self.bytes), "line");
        self.lines -= 1;
        self.bytes = self.bytes.saturating_sub(line.len());
        Some(line)
    }
}

/// A bounded, shared capture of a guest output stream: the last `capacity`
/// bytes; older ones are dropped (the guest is not told), so a chatty
/// plugin cannot grow host memory.
#[derive(Clone)]
pub struct CapturedOutput {
    buffer: Arc<Mutex<Vec<u8>>>,
    capacity: usize,
}

impl CapturedOutput {
    pub(super) fn new(capacity: usize) -> Self {
        CapturedOutput { buffer: Arc::new(Mutex::new(Vec::new())), capacity }
    }

    /// What was captured, lossily decoded.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buffer.lock().expect("capture lock")).into_owned()
    }
}

impl IsTerminal for CapturedOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CapturedOutput {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl tokio::io::AsyncWrite for CapturedOutput {
    fn poll_write(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        // The last bytes are kept: a runtime prints the cause of an abort
        // (a panic, a traceback) at the end, after whatever came before.
        let mut buffer = self.buffer.lock().expect("capture lock");
        let tail = &buf[buf.len().saturating_sub(self.capacity)..];
        let excess = (buffer.len() + tail.len()).saturating_sub(self.capacity);
        buffer.drain(..excess);
        buffer.extend_from_slice(tail);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
