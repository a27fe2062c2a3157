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
//!
//! A chat has two lanes: the reply, and the turn's progress (tool hints,
//! see [`super::progress`]), a message of its own edited the same way. The
//! interval is per chat over both lanes: showing either postpones the
//! other, and one [`Streams::due`] gives at most one call per chat (the
//! reply first), so tool hints never add edits beyond the platform's pace.
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

/// Which message of a chat a stream edits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lane {
    /// The reply being written.
    Reply,
    /// The turn's progress: tool hints and plugin progress.
    Progress,
}

/// How a streamed reply ends.
#[derive(Debug, PartialEq, Eq)]
pub enum Finish {
    /// Call `stream-update(done = true)` with `handle`, not before `at`.
    Update {
        /// The stream's handle, as the plugin returned it.
        handle: Option<String>,
        /// No call before this instant.
        at: Option<Instant>,
    },
    /// No stream was shown (or it failed): deliver the reply plainly.
    Deliver,
}

/// The streams of one channel.
#[derive(Debug)]
pub struct Streams {
    interval: Duration,
    chats: HashMap<(Key, Lane), Stream>,
}

impl Streams {
    /// At most one call per `interval` per chat.
    pub fn new(interval: Duration) -> Streams {
        Streams { interval, chats: HashMap::new() }
    }

    /// The stream of `lane` in `chat`, made when new: its first call waits
    /// `first_wait()` (the rate limit) and no less than the chat's other
    /// lane must still wait.
    fn lane(&mut self, chat: &Key, lane: Lane, now: Instant, first_wait: impl FnOnce() -> Duration) -> &mut Stream {
        let other = self.chats.get(&(chat.clone(), other(lane))).and_then(|s| s.not_before);
        self.chats.entry((chat.clone(), lane)).or_insert_with(|| {
            let wait = first_wait();
            let own = (!wait.is_zero()).then(|| now + wait);
            Stream { not_before: own.max(other), ..Stream::default() }
        })
    }

    /// Appends a delta to `chat`'s reply; `first_wait` is how long the first
    /// call must wait (the rate limit), asked only for a new stream.
    pub fn delta(&mut self, chat: &Key, delta: &str, now: Instant, first_wait: impl FnOnce() -> Duration) {
        self.lane(chat, Lane::Reply, now, first_wait).text.push_str(delta);
    }

    /// Whether `chat` has a reply stream under way.
    pub fn has_reply(&self, chat: &Key) -> bool {
        self.chats.contains_key(&(chat.clone(), Lane::Reply))
    }

    /// `chat`'s reply stream edits `handle`, a message an earlier process
    /// created for the same reply, instead of sending a new one.
    pub fn adopt(&mut self, chat: &Key, handle: &str) {
        if let Some(stream) = self.chats.get_mut(&(chat.clone(), Lane::Reply)) {
            stream.handle.get_or_insert_with(|| handle.to_string());
        }
    }

    /// Sets what `chat`'s progress message should show (the whole text).
    pub fn progress(&mut self, chat: &Key, text: String, now: Instant, first_wait: impl FnOnce() -> Duration) {
        self.lane(chat, Lane::Progress, now, first_wait).text = text;
    }

    /// Whether `stream` has something new to show.
    fn pending(stream: &Stream) -> bool {
        !stream.failed && stream.text != stream.shown && !stream.text.trim().is_empty()
    }

    /// The streams to show now, with their handle and text: at most one per
    /// chat, the reply before the progress.
    pub fn due(&self, now: Instant) -> Vec<(Key, Lane, Option<String>, String)> {
        let mut due: Vec<_> = self
            .chats
            .iter()
            .filter(|(_, s)| Self::pending(s) && s.not_before.is_none_or(|t| now >= t))
            .map(|((chat, lane), s)| (chat.clone(), *lane, s.handle.clone(), s.text.clone()))
            .collect();
        due.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        due.dedup_by(|later, first| later.0 == first.0);
        due
    }

    /// When the next stream becomes due, if any is waiting.
    pub fn next_due(&self) -> Option<Instant> {
        self.chats.values().filter(|s| Self::pending(s)).filter_map(|s| s.not_before).min()
    }

    /// Records a call for `chat`'s `lane` that showed `text` and ended at
    /// `now`; neither lane of the chat is called again before the interval.
    pub fn shown(&mut self, chat: &Key, lane: Lane, text: String, result: Result<String, ()>, now: Instant) {
        let next = now + self.interval;
        if let Some(stream) = self.chats.get_mut(&(chat.clone(), other(lane))) {
            stream.not_before = Some(stream.not_before.map_or(next, |t| t.max(next)));
        }
        if let Some(stream) = self.chats.get_mut(&(chat.clone(), lane)) {
            stream.not_before = Some(next);
            match result {
                Ok(handle) => {
                    stream.handle = Some(handle);
                    stream.shown = text;
                }
                Err(()) => stream.failed = true,
            }
        }
    }

    /// How `chat`'s streamed reply ends; the reply stream is forgotten (its
    /// pacing passes to the progress lane, if that is still there).
    pub fn finish(&mut self, chat: &Key) -> Finish {
        match self.chats.remove(&(chat.clone(), Lane::Reply)) {
            Some(s) if !s.failed && s.handle.is_some() => Finish::Update { handle: s.handle, at: s.not_before },
            _ => Finish::Deliver,
        }
    }

    /// Forgets `chat`'s progress message: later hints start a new one
    /// (below the reply that came meanwhile).
    pub fn end_progress(&mut self, chat: &Key) {
        self.chats.remove(&(chat.clone(), Lane::Progress));
    }

    /// Forgets both of `chat`'s streams (the turn ended).
    pub fn forget(&mut self, chat: &Key) {
        self.chats.remove(&(chat.clone(), Lane::Reply));
        self.chats.remove(&(chat.clone(), Lane::Progress));
    }
}

fn other(lane: Lane) -> Lane {
    match lane {
        Lane::Reply => Lane::Progress,
        Lane::Progress => Lane::Reply,
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
        assert_eq!(streams.due(t0), vec![(c(), Lane::Reply, None, "Hel".into())], "the first call goes at once");
        let end = t0 + Duration::from_millis(30);
        streams.shown(&c(), Lane::Reply, "Hel".into(), Ok("m1".into()), end);
        streams.delta(&c(), "lo", end, || unreachable!("not a new stream"));
        streams.delta(&c(), " there", end, || unreachable!());
        assert!(streams.due(end + Duration::from_millis(999)).is_empty(), "within the interval after the call ended");
        assert_eq!(streams.next_due(), Some(end + second));
        assert_eq!(streams.due(end + second), vec![(c(), Lane::Reply, Some("m1".into()), "Hello there".into())], "coalesced");
        streams.shown(&c(), Lane::Reply, "Hello there".into(), Ok("m1".into()), end + second);
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
        streams.shown(&c(), Lane::Reply, "x".into(), Err(()), t0 + Duration::from_secs(3));
        streams.delta(&c(), "y", t0, || Duration::ZERO);
        assert!(streams.due(t0 + Duration::from_secs(60)).is_empty(), "no calls after a failure");
        assert_eq!(streams.finish(&c()), Finish::Deliver);
    }

    #[test]
    fn progress_and_reply_share_the_chats_interval() {
        let second = Duration::from_secs(1);
        let mut streams = Streams::new(second);
        let t0 = Instant::now();
        streams.progress(&c(), "↳ read_file(a)".into(), t0, || Duration::ZERO);
        assert_eq!(streams.due(t0), vec![(c(), Lane::Progress, None, "↳ read_file(a)".into())]);
        streams.shown(&c(), Lane::Progress, "↳ read_file(a)".into(), Ok("p1".into()), t0);
        // The reply starts right after: it waits for the chat's interval.
        streams.delta(&c(), "Here", t0, || Duration::ZERO);
        streams.progress(&c(), "↳ read_file(a) ✓".into(), t0, || unreachable!("not a new stream"));
        assert!(streams.due(t0 + Duration::from_millis(500)).is_empty(), "one call per interval per chat");
        assert_eq!(streams.next_due(), Some(t0 + second));
        // Both are due: the reply goes first, alone.
        assert_eq!(streams.due(t0 + second), vec![(c(), Lane::Reply, None, "Here".into())]);
        streams.shown(&c(), Lane::Reply, "Here".into(), Ok("m1".into()), t0 + second);
        assert!(streams.due(t0 + second + Duration::from_millis(999)).is_empty(), "the progress waits for the reply's interval");
        assert_eq!(streams.due(t0 + 2 * second), vec![(c(), Lane::Progress, Some("p1".into()), "↳ read_file(a) ✓".into())]);
        let other: Key = ("d".into(), None);
        streams.progress(&other, "↳ x()".into(), t0, || Duration::ZERO);
        assert_eq!(streams.due(t0 + 2 * second).len(), 2, "chats are paced apart");
        streams.forget(&c());
        assert_eq!(streams.due(t0 + 3 * second).len(), 1);
        assert_eq!(streams.finish(&c()), Finish::Deliver);
    }
}
