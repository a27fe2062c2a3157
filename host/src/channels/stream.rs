//! Stream coalescing: the registry of replies being streamed to a channel,
//! one per chat, and when each may next be shown.
//!
//! The agent publishes a `StreamDelta` per token batch; a chat platform
//! allows an edit about once a second (Telegram's `editMessageText`, Slack's
//! `chat.update`), so the deliver loop must not pass deltas on one by one.
//! It appends them here and calls the component's `stream-update(chat,
//! handle, text-so-far, done)` only for a chat that is [`Streams::due`]:
//! at most once per `limits.edit_interval_ms`, counted from the **end** of
//! the previous call (so two requests of the component never reach the
//! platform closer together than the interval, whatever a call costs), and
//! only when the text changed. The final `Message{streamed: true}` ends the
//! stream with one `done = true` call carrying the whole reply, after the
//! same interval; if any call failed the stream is marked failed and the
//! reply goes out by a plain `deliver` instead, so a reply is never lost.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// One chat's streamed reply.
#[derive(Debug, Default)]
struct Stream {
    /// What the component returned last (the message being edited).
    handle: Option<String>,
    /// The reply so far.
    text: String,
    /// The text of the last successful call.
    shown: String,
    /// No call before this (the interval after the last call ended, or the
    /// rate limit's wait before the first).
    not_before: Option<Instant>,
    /// A call failed: no more calls; the final text is delivered plainly.
    failed: bool,
}

/// A stream's chat and thread (two topics of one chat stream apart).
pub type Key = (String, Option<String>);

/// How a streamed reply ends.
#[derive(Debug, PartialEq, Eq)]
pub enum Finish {
    /// Call `stream-update(done = true)` with `handle`, not before `at`.
    Update { handle: Option<String>, at: Option<Instant> },
    /// No stream was shown (or it failed): deliver the reply plainly.
    Deliver,
}

/// The streams of one channel.
#[derive(Debug)]
pub struct Streams {
    interval: Duration,
    chats: HashMap<Key, Stream>,
}

impl Streams {
    /// At most one call per `interval` per chat.
    pub fn new(interval: Duration) -> Streams {
        Streams { interval, chats: HashMap::new() }
    }

    /// Appends a delta to `chat`'s reply; `first_wait` is how long the first
    /// call must wait (the rate limit), asked only for a new stream.
    pub fn delta(&mut self, chat: &Key, delta: &str, now: Instant, first_wait: impl FnOnce() -> Duration) {
        let stream = self.chats.entry(chat.clone()).or_insert_with(|| {
            let wait = first_wait();
            Stream { not_before: (!wait.is_zero()).then(|| now + wait), ..Stream::default() }
        });
        stream.text.push_str(delta);
    }

    /// The chats whose text should be shown now, with their handle and text.
    pub fn due(&self, now: Instant) -> Vec<(Key, Option<String>, String)> {
        self.chats
            .iter()
            .filter(|(_, s)| !s.failed && s.text != s.shown && !s.text.trim().is_empty() && s.not_before.is_none_or(|t| now >= t))
            .map(|(chat, s)| (chat.clone(), s.handle.clone(), s.text.clone()))
            .collect()
    }

    /// When the next chat becomes due, if any is waiting.
    pub fn next_due(&self) -> Option<Instant> {
        self.chats
            .values()
            .filter(|s| !s.failed && s.text != s.shown && !s.text.trim().is_empty())
            .filter_map(|s| s.not_before)
            .min()
    }

    /// Records a call for `chat` that showed `text` and ended at `now`.
    pub fn shown(&mut self, chat: &Key, text: String, result: Result<String, ()>, now: Instant) {
        if let Some(stream) = self.chats.get_mut(chat) {
            stream.not_before = Some(now + self.interval);
            match result {
                Ok(handle) => {
                    stream.handle = Some(handle);
                    stream.shown = text;
                }
                Err(()) => stream.failed = true,
            }
        }
    }

    /// How `chat`'s stream ends; the stream is forgotten.
    pub fn finish(&mut self, chat: &Key) -> Finish {
        match self.chats.remove(chat) {
            Some(s) if !s.failed && s.handle.is_some() => Finish::Update { handle: s.handle, at: s.not_before },
            _ => Finish::Deliver,
        }
    }

    /// Forgets `chat`'s stream (the turn ended without a final message).
    pub fn forget(&mut self, chat: &Key) {
        self.chats.remove(chat);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c() -> Key {
        ("c".into(), None)
    }

    #[test]
    fn deltas_coalesce_and_calls_keep_the_interval() {
        let second = Duration::from_secs(1);
        let mut streams = Streams::new(second);
        let t0 = Instant::now();
        streams.delta(&c(), "Hel", t0, || Duration::ZERO);
        assert_eq!(streams.due(t0), vec![(c(), None, "Hel".into())], "the first call goes at once");
        let end = t0 + Duration::from_millis(30);
        streams.shown(&c(), "Hel".into(), Ok("m1".into()), end);
        streams.delta(&c(), "lo", end, || unreachable!("not a new stream"));
        streams.delta(&c(), " there", end, || unreachable!());
        assert!(streams.due(end + Duration::from_millis(999)).is_empty(), "within the interval after the call ended");
        assert_eq!(streams.next_due(), Some(end + second));
        assert_eq!(streams.due(end + second), vec![(c(), Some("m1".into()), "Hello there".into())], "coalesced");
        streams.shown(&c(), "Hello there".into(), Ok("m1".into()), end + second);
        assert!(streams.due(end + 5 * second).is_empty(), "nothing new: no call");
        assert_eq!(streams.next_due(), None);
        assert_eq!(streams.finish(&c()), Finish::Update { handle: Some("m1".into()), at: Some(end + second + second) });
        assert_eq!(streams.finish(&c()), Finish::Deliver, "forgotten");
    }

    #[test]
    fn a_failed_call_ends_in_a_plain_delivery_and_blank_text_waits() {
        let mut streams = Streams::new(Duration::from_millis(100));
        let t0 = Instant::now();
        streams.delta(&c(), "  \n", t0, || Duration::ZERO);
        assert!(streams.due(t0).is_empty(), "nothing to show yet");
        assert_eq!(streams.finish(&c()), Finish::Deliver, "never shown");
        streams.delta(&c(), "x", t0, || Duration::from_secs(3));
        assert!(streams.due(t0).is_empty(), "the rate limit's wait");
        assert_eq!(streams.next_due(), Some(t0 + Duration::from_secs(3)));
        streams.shown(&c(), "x".into(), Err(()), t0 + Duration::from_secs(3));
        streams.delta(&c(), "y", t0, || Duration::ZERO);
        assert!(streams.due(t0 + Duration::from_secs(60)).is_empty(), "no calls after a failure");
        assert_eq!(streams.finish(&c()), Finish::Deliver);
    }
}
