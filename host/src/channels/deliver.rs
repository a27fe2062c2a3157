//! The outbound side of a running channel: the outbox and its
//! `deliver_loop`.
//!
//! The channel's route in the router is read by one task: final `Message`s
//! are passed to `deliver` one at a time, at most
//! `limits.rate_per_chat_per_min` per chat per minute, a `transient` error
//! or trap retried after 1, 2 and 4 s. `deliver` runs the component's own
//! `wasi:http` requests under its grant. A reply's files follow its text,
//! each uploaded by the host with its bytes streamed in ([`super::upload`]).
//! Streamed replies are edited in place ([`super::stream`]), and the turn's tool
//! hints and plugin progress ([`super::progress`]) are one more message edited
//! the same way, paced with the reply.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::bus::{OutboundKind, OutboundMessage, Reply};
use crate::plugins::channel::{ChatStatus, Outgoing};
use crate::plugins::manifest::channel::PlatformLimits;
use crate::plugins::ChannelFailure;
use crate::plugins::runtime::{LoadedPlugin, PluginRuntime};
use crate::plugins::PluginError;

use super::transport::Transport;
use super::{progress, stream, upload};

/// Per-chat sliding-window rate limit: at most `per_min` sends in any 60 s.
/// Chats whose sends all left the window are forgotten, so the map holds
/// only the chats of the last minute, however many chats a channel makes up.
#[derive(Debug, Default)]
pub struct RateLimit {
    per_min: usize,
    sent: HashMap<String, VecDeque<Instant>>,
    /// The map's size that triggers the next sweep of idle chats.
    sweep_at: usize,
}

/// The fewest chats [`RateLimit`] holds before it sweeps idle ones.
const RATE_SWEEP_MIN: usize = 64;

impl RateLimit {
    /// A limit of `per_min` messages a minute per chat (at least 1).
    pub fn new(per_min: u32) -> Self {
        RateLimit { per_min: per_min.max(1) as usize, sent: HashMap::new(), sweep_at: RATE_SWEEP_MIN }
    }

    /// Chats held (for tests and the bound).
    pub fn chats(&self) -> usize {
        self.sent.len()
    }

    /// How long to wait before sending to `chat` at `now` (zero: go), and
    /// records the send when zero.
    pub fn check(&mut self, chat: &str, now: Instant) -> Duration {
        let window = Duration::from_secs(60);
        if self.sent.len() >= self.sweep_at {
            // Amortised: the next sweep waits until the map doubles again.
            self.sent.retain(|_, sent| sent.back().is_some_and(|t| now.duration_since(*t) < window));
            self.sweep_at = (self.sent.len() * 2).max(RATE_SWEEP_MIN);
        }
        let sent = self.sent.entry(chat.to_string()).or_default();
        while sent.front().is_some_and(|t| now.duration_since(*t) >= window) {
            sent.pop_front();
        }
        if sent.len() >= self.per_min {
            return window - now.duration_since(sent[0]);
        }
        sent.push_back(now);
        Duration::ZERO
    }
}

/// Delivery retry waits: 1, 2, 4 s.
const DELIVER_RETRIES: [Duration; 3] = [Duration::from_secs(1), Duration::from_secs(2), Duration::from_secs(4)];

/// How long "typing" is kept up for a message whose reply never comes.
const TYPING_AT_MOST: Duration = Duration::from_secs(120);

/// How long one typing indicator may take before it is given up.
pub const TYPING_DEADLINE: Duration = Duration::from_secs(5);

/// Typing indicators of one channel in flight at once.
const TYPING_IN_FLIGHT: usize = 4;

/// Most chats "typing" is kept up in at once.
const TYPING_CHATS_MAX: usize = 1024;

/// What the deliver loop sends with.
pub(super) struct Outbox {
    pub(super) name: String,
    pub(super) plugin: Arc<LoadedPlugin>,
    pub(super) runtime: Arc<PluginRuntime>,
    /// For uploads: the same grant, secrets and `api_base` as the polls.
    pub(super) transport: Arc<Transport>,
    /// Where a reply's files are read; `None` when it cannot be opened
    /// (each file is then named in a note).
    pub(super) workspace: Option<crate::workspace::Workspace>,
    /// `max_upload_mb` in bytes.
    pub(super) max_upload: u64,
    /// Which hints of a running turn the chat sees.
    pub(super) show: progress::Show,
    /// Chats whose typing indicator is in flight.
    pub(super) typing_busy: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

pub(super) async fn deliver_loop(
    outbox: Outbox,
    mut outbound: tokio::sync::mpsc::UnboundedReceiver<OutboundMessage>,
    mut typing_requests: tokio::sync::mpsc::UnboundedReceiver<String>,
    limits: PlatformLimits,
) {
    let name = outbox.name.as_str();
    let mut rate = RateLimit::new(limits.rate_per_chat_per_min);
    let refresh = Duration::from_millis(u64::from(limits.typing_refresh_ms));
    let mut streams = stream::Streams::new(Duration::from_millis(u64::from(limits.edit_interval_ms)));
    let mut hints = progress::Hints::default();
    // The inbox links of the reply streams under way (see `StreamLink`),
    // and the earlier processes' messages already taken over (each once).
    let mut links: HashMap<stream::Key, crate::bus::StreamLink> = HashMap::new();
    let mut adopted: HashSet<String> = HashSet::new();
    // Chat → (next refresh, give up at). Empty when the platform has no
    // typing indicator (`typing_refresh_ms = 0`).
    let mut typing: HashMap<String, (Instant, Instant)> = HashMap::new();
    loop {
        let next_refresh = typing.values().map(|(next, _)| *next).min();
        let tick = async {
            match next_refresh {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        let next_edit = streams.next_due();
        let edit_tick = async {
            match next_edit {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        let message = tokio::select! {
            message = outbound.recv() => match message {
                Some(message) => message,
                None => break,
            },
            Some(chat) = typing_requests.recv() => {
                if !refresh.is_zero() {
                    let now = Instant::now();
                    outbox.show_typing(&chat);
                    // Bounded: one entry per chat of the last two minutes,
                    // and the chats a channel hands in are rate-limited.
                    if typing.len() < TYPING_CHATS_MAX || typing.contains_key(&chat) {
                        typing.insert(chat, (now + refresh, now + TYPING_AT_MOST));
                    }
                }
                continue;
            }
            () = tick => {
                let now = Instant::now();
                typing.retain(|_, (_, until)| *until > now);
                let due: Vec<String> = typing.iter().filter(|(_, (next, _))| *next <= now).map(|(chat, _)| chat.clone()).collect();
                for chat in due {
                    outbox.show_typing(&chat);
                    if let Some((next, _)) = typing.get_mut(&chat) {
                        *next = Instant::now() + refresh;
                    }
                }
                continue;
            }
            () = edit_tick => {
                outbox.show_streams(&mut streams, &links).await;
                continue;
            }
        };
        if matches!(message.kind, OutboundKind::Message(_) | OutboundKind::TurnEnd) {
            typing.remove(&message.chat_id);
        }
        let key: stream::Key = (message.chat_id.clone(), thread_of(&message));
        match message.kind {
            OutboundKind::StreamDelta => {
                let now = Instant::now();
                let new = !streams.has_reply(&key);
                streams.delta(&key, &message.content, now, || rate.check(&message.chat_id, now));
                if new {
                    // A resumed turn's reply goes on in the message its first
                    // attempt streamed into.
                    if let Some(handle) = message.stream.existing().filter(|h| !adopted.contains(*h)) {
                        streams.adopt(&key, handle);
                        adopted.insert(handle.to_string());
                    }
                    links.insert(key.clone(), message.stream.clone());
                }
                outbox.show_streams(&mut streams, &links).await;
                continue;
            }
            OutboundKind::Progress => continue,
            OutboundKind::Tool(ref progress) => {
                if let Some(text) = hints.event(&key, progress, &message.content, outbox.show) {
                    let now = Instant::now();
                    streams.progress(&key, text, now, || rate.check(&message.chat_id, now));
                    outbox.show_streams(&mut streams, &links).await;
                }
                continue;
            }
            OutboundKind::TurnEnd => {
                streams.forget(&key);
                hints.forget(&key);
                links.remove(&key);
                continue;
            }
            OutboundKind::Message(Reply { streamed, .. }) => {
                // Hints after this reply start a new progress message below it.
                streams.end_progress(&key);
                hints.forget(&key);
                links.remove(&key);
                let mut finish = if streamed { streams.finish(&key) } else { stream::Finish::Deliver };
                // A reply re-sent after a restart whose stream an earlier
                // process created: the final edit goes to that message.
                if streamed
                    && finish == stream::Finish::Deliver
                    && let Some(handle) = message.stream.existing().filter(|h| !adopted.contains(*h))
                {
                    adopted.insert(handle.to_string());
                    finish = stream::Finish::Update { handle: Some(handle.to_string()), at: None };
                }
                if let stream::Finish::Update { handle, at } = finish {
                    if let Some(at) = at {
                        tokio::time::sleep_until(at.into()).await;
                    }
                    match outbox.runtime.channel_stream_update(&outbox.plugin, &message.chat_id, key.1.as_deref(), handle.as_deref(), &message.content, true).await {
                        Ok(handle) => {
                            tracing::info!(channel = %name, chat = %message.chat_id, handle = %handle, "reply delivered (streamed)");
                            outbox.send_files(&mut rate, &message).await;
                            message.ack.delivered();
                            continue;
                        }
                        // The reply must not be lost: send it whole.
                        Err(e) => tracing::warn!(channel = %name, chat = %message.chat_id, "final stream-update failed, delivering the reply instead: {e}"),
                    }
                }
            }
            OutboundKind::StreamEnd => continue,
        }
        if message.content.is_empty() && message.media.is_empty() {
            continue;
        }
        // A reply the platform took (or refused for good) is marked
        // delivered; one given up on after the retries stays in the outbox,
        // and the next start sends it again.
        if outbox.deliver_reply(&mut rate, &message).await == Delivery::Settled {
            message.ack.delivered();
        } else if message.ack.is_set() {
            tracing::warn!(channel = %name, chat = %message.chat_id, "reply kept in the outbox: the next start sends it again");
        }
    }
}

/// How a delivery ended, for the outbox's delivered mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Delivery {
    /// The platform took it, or refused it for good (a fatal error: sending
    /// it again would be refused again).
    Settled,
    /// Every retry failed (the platform was unreachable or kept failing).
    GaveUp,
}

/// The thread or topic an outbound event belongs to.
fn thread_of(message: &OutboundMessage) -> Option<String> {
    message.metadata.get(crate::bus::THREAD).and_then(Value::as_str).map(str::to_string)
}

/// Waits until `chat` may be sent to again.
async fn wait_for_rate(name: &str, rate: &mut RateLimit, chat: &str) {
    loop {
        let wait = rate.check(chat, Instant::now());
        if wait.is_zero() {
            return;
        }
        tracing::debug!(channel = %name, chat, "rate limit: waiting {wait:?}");
        tokio::time::sleep(wait).await;
    }
}

impl Outbox {
    /// Shows every stream that is due (coalesced text, one call per chat).
    async fn show_streams(&self, streams: &mut stream::Streams, links: &HashMap<stream::Key, crate::bus::StreamLink>) {
        for (key, lane, handle, text) in streams.due(Instant::now()) {
            let result = self.runtime.channel_stream_update(&self.plugin, &key.0, key.1.as_deref(), handle.as_deref(), &text, false).await;
            if lane == stream::Lane::Reply
                && let Ok(new) = &result
                && handle.as_deref() != Some(new.as_str())
                && let Some(link) = links.get(&key)
            {
                // Recorded before anything else happens to the stream: a
                // crash from here on edits this message, never a second.
                link.started(new);
                crate::crash_point!("streaming", &text);
            }
            if let Err(e) = &result {
                match lane {
                    stream::Lane::Reply => tracing::warn!(channel = %self.name, chat = %key.0, "stream-update failed; the reply will be delivered whole: {e}"),
                    stream::Lane::Progress => tracing::warn!(channel = %self.name, chat = %key.0, "progress message failed; no more hints this turn: {e}"),
                }
            }
            streams.shown(&key, lane, text, result.map_err(|_| ()), Instant::now());
        }
    }

    /// Delivers one reply: the text through `deliver` with retries, then
    /// each file through `upload-request`, opened only right before its
    /// upload (so what is checked is what is sent, however long the text
    /// took); the files that could not be sent are named in one note after.
    async fn deliver_reply(&self, rate: &mut RateLimit, message: &OutboundMessage) -> Delivery {
        let mut outcome = Delivery::Settled;
        if !message.content.trim().is_empty() {
            outcome = self.deliver_text(rate, message, message.content.clone(), message.reply_to.clone()).await;
        }
        // Files go only with their text: a text kept for the next start
        // takes its files along then.
        if outcome == Delivery::Settled {
            self.send_files(rate, message).await;
        }
        outcome
    }

    /// Uploads the message's files one by one; those that fail are named in
    /// one note.
    async fn send_files(&self, rate: &mut RateLimit, message: &OutboundMessage) {
        let thread = thread_of(message);
        let mut notes = Vec::new();
        for path in &message.media {
            let name = upload::shown_name(path);
            let sent = match upload::open(self.workspace.as_ref(), path, self.max_upload) {
                Ok(file) => {
                    wait_for_rate(&self.name, rate, &message.chat_id).await;
                    upload::send(&self.name, &self.plugin, &self.runtime, &self.transport, &message.chat_id, thread.as_deref(), &file).await
                }
                Err(reason) => Err(reason),
            };
            if let Err(reason) = sent {
                tracing::warn!(channel = %self.name, chat = %message.chat_id, file = %name, "file not sent: {reason}");
                notes.push(upload::note(&name, &reason));
            }
        }
        if !notes.is_empty() {
            self.deliver_text(rate, message, notes.join("\n"), None).await;
        }
    }

    /// Sends `text` to the message's chat: the rate limit, then `deliver`
    /// with retries.
    async fn deliver_text(&self, rate: &mut RateLimit, message: &OutboundMessage, text: String, reply_to: Option<String>) -> Delivery {
        let name = self.name.as_str();
        wait_for_rate(name, rate, &message.chat_id).await;
        let outgoing = Outgoing { chat_id: message.chat_id.clone(), thread: thread_of(message), text, reply_to, media: Vec::new() };
        let mut attempt = 0;
        loop {
            match self.runtime.channel_deliver(&self.plugin, &outgoing).await {
                Ok(ids) => {
                    tracing::info!(channel = %name, chat = %outgoing.chat_id, ids = ?ids, "reply delivered");
                    return Delivery::Settled;
                }
                Err(PluginError::Channel { kind: ChannelFailure::Fatal, message, .. }) => {
                    tracing::error!(channel = %name, chat = %outgoing.chat_id, "delivery refused (fatal), reply dropped: {message}");
                    return Delivery::Settled;
                }
                Err(e) if attempt < DELIVER_RETRIES.len() => {
                    tracing::warn!(channel = %name, chat = %outgoing.chat_id, "delivery failed, retrying in {:?}: {e}", DELIVER_RETRIES[attempt]);
                    tokio::time::sleep(DELIVER_RETRIES[attempt]).await;
                    attempt += 1;
                }
                Err(e) => {
                    tracing::error!(channel = %name, chat = %outgoing.chat_id, "delivery failed {} times: {e}", attempt + 1);
                    return Delivery::GaveUp;
                }
            }
        }
    }

    /// One "typing" indicator, off the reply's path: spawned, under its own
    /// [`TYPING_DEADLINE`], at most one per chat and [`TYPING_IN_FLIGHT`]
    /// per channel at once; a failure or a platform that never answers only
    /// costs the indicator, never the reply.
    fn show_typing(&self, chat: &str) {
        {
            let mut busy = self.typing_busy.lock().unwrap_or_else(|p| p.into_inner());
            if busy.len() >= TYPING_IN_FLIGHT || !busy.insert(chat.to_string()) {
                return;
            }
        }
        let (runtime, plugin, name, busy, chat) = (self.runtime.clone(), self.plugin.clone(), self.name.clone(), self.typing_busy.clone(), chat.to_string());
        tokio::spawn(async move {
            match tokio::time::timeout(TYPING_DEADLINE, runtime.channel_set_status(&plugin, &chat, ChatStatus::Typing)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(channel = %name, chat = %chat, "typing indicator failed: {e}"),
                Err(_) => tracing::debug!(channel = %name, chat = %chat, "typing indicator not answered within {TYPING_DEADLINE:?}; given up"),
            }
            busy.lock().unwrap_or_else(|p| p.into_inner()).remove(&chat);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_limit_is_per_chat_over_a_sliding_minute() {
        let mut rate = RateLimit::new(2);
        let t0 = Instant::now();
        assert!(rate.check("a", t0).is_zero());
        assert!(rate.check("a", t0 + Duration::from_secs(1)).is_zero());
        assert_eq!(rate.check("a", t0 + Duration::from_secs(2)), Duration::from_secs(58));
        assert!(rate.check("b", t0 + Duration::from_secs(2)).is_zero(), "another chat has its own bucket");
        assert!(rate.check("a", t0 + Duration::from_secs(60)).is_zero(), "the first send left the window");
    }

    #[test]
    fn made_up_chats_are_forgotten_once_idle() {
        // 1 000 new chats a minute for 100 minutes: unbounded, 100 000 held.
        let mut rate = RateLimit::new(20);
        let t0 = Instant::now();
        let mut most = 0;
        for minute in 0..100u64 {
            for i in 0..1000u64 {
                rate.check(&format!("made-up-{minute}-{i}"), t0 + Duration::from_secs(minute * 60) + Duration::from_millis(i * 50));
                most = most.max(rate.chats());
            }
        }
        assert!(most <= 4 * 1000 + RATE_SWEEP_MIN, "{most} chats held at most");
    }
}
