//! [`AutoCompact`]: idle compaction (RUNTIME.md §7, first row), and the
//! [`Clock`] it measures idleness with.
//!
//! A session nobody has written to for `idle_after` gets its whole unarchived
//! tail summarised into the archive; the summary is also kept on the session
//! (`metadata["last_summary"]`), where COMPACT picks it up and BUILD puts it
//! at the end of the system prompt, and the cursor moves to the end. The next
//! turn then starts from a short prompt instead of replaying a conversation
//! that went cold, while `Session::get_history` still replays the last
//! [`MIN_RECENT_MESSAGES`](crate::session::MIN_RECENT_MESSAGES) messages, so
//! the model sees where it left off.
//!
//! The loop scans for idle sessions when its inbound queue is quiet, at most
//! once a minute ([`AutoCompact::should_scan`]). Time comes from a [`Clock`]
//! so tests move it by hand ([`ManualClock`]) instead of sleeping.
//!
//! Like the consolidator, this locks nothing: the loop compacts a session
//! under that session's lock, re-checking [`AutoCompact::is_expired`] once
//! it holds the lock (a message may have arrived since the scan).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use serde_json::json;

use super::archive::HistoryArchive;
use super::summarise::{ChunkOutcome, Summariser, SummaryLimits};
use super::{CompactError, LAST_SUMMARY};
use crate::provider::Provider;
use crate::session::Session;

/// The idle scan runs at most this often.
pub const SCAN_INTERVAL: Duration = Duration::from_secs(60);

/// Where "now" comes from.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that moves only when told to (tests).
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<DateTime<Utc>>,
}

impl ManualClock {
    /// A clock showing `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        ManualClock { now: Mutex::new(start) }
    }

    /// Sets the time.
    pub fn set(&self, now: DateTime<Utc>) {
        *self.now.lock().unwrap_or_else(|p| p.into_inner()) = now;
    }

    /// Moves the time forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        *now += TimeDelta::from_std(by).unwrap_or(TimeDelta::MAX);
    }
}

impl Default for ManualClock {
    /// A clock showing the current system time.
    fn default() -> Self {
        ManualClock::new(Utc::now())
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Idle compaction for every session of an agent (shared by reference).
pub struct AutoCompact {
    summariser: Summariser,
    idle_after: Duration,
    clock: Arc<dyn Clock>,
    /// When [`AutoCompact::should_scan`] last said yes.
    last_scan: Mutex<Option<DateTime<Utc>>>,
}

impl std::fmt::Debug for AutoCompact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AutoCompact")
            .field("summariser", &self.summariser)
            .field("idle_after", &self.idle_after)
            .field("now", &self.clock.now())
            .finish()
    }
}

impl AutoCompact {
    /// Compacts sessions idle for `idle_after` (zero turns it off) with
    /// `model` on `provider` into `archive`, with the default request sizes
    /// ([`SummaryLimits::default`]; see [`AutoCompact::with_limits`]).
    pub fn new(
        provider: Arc<dyn Provider>,
        model: String,
        archive: HistoryArchive,
        idle_after: Duration,
        clock: Arc<dyn Clock>,
    ) -> Self {
        AutoCompact {
            summariser: Summariser::new(provider, model, archive, SummaryLimits::default()),
            idle_after,
            clock,
            last_scan: Mutex::new(None),
        }
    }

    /// Sizes summary requests for the model in use (its context window).
    pub fn with_limits(mut self, limits: SummaryLimits) -> Self {
        self.summariser = self.summariser.with_limits(limits);
        self
    }

    /// Whether idle compaction is on (`idle_after` > 0).
    pub fn enabled(&self) -> bool {
        !self.idle_after.is_zero()
    }

    /// The idle time after which a session is compacted.
    pub fn idle_after(&self) -> Duration {
        self.idle_after
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The summariser.
    pub fn summariser(&self) -> &Summariser {
        &self.summariser
    }

    /// True at most once per [`SCAN_INTERVAL`] (by the clock), and never
    /// when compaction is off: the loop calls it on every quiet second and
    /// scans the sessions only when it says yes.
    pub fn should_scan(&self) -> bool {
        if !self.enabled() {
            return false;
        }
        let now = self.clock.now();
        let mut last = self.last_scan.lock().unwrap_or_else(|p| p.into_inner());
        let due = last.is_none_or(|at| now.signed_duration_since(at) >= delta(SCAN_INTERVAL) || now < at);
        if due {
            *last = Some(now);
        }
        due
    }

    /// True when compaction is on, `session` has not changed for at least
    /// `idle_after` (since `updated_at`), and it has unarchived messages
    /// (other than slash commands) that its last summary does not cover.
    pub fn is_expired(&self, session: &Session) -> bool {
        if !self.enabled() {
            return false;
        }
        let covered = session
            .metadata
            .get(LAST_SUMMARY)
            .and_then(|s| s.get("cursor"))
            .and_then(serde_json::Value::as_u64)
            .map_or(0, |c| c as usize)
            .max(session.last_consolidated);
        let has_tail = session.messages.get(covered..).is_some_and(|tail| tail.iter().any(|m| !m.is_command()));
        has_tail && self.clock.now().signed_duration_since(session.updated_at) >= delta(self.idle_after)
    }

    /// Summarises the whole unarchived tail of `session` into the archive
    /// and moves `last_consolidated` to the end. With a summary, also stores
    /// it as `metadata["last_summary"] = {"text", "cursor", "at"}` and
    /// returns it. The model answering `NOTHING` writes nothing; a failed
    /// request archives the tail raw; in both cases the cursor still moves
    /// and the previous summary is kept. `system_prompt` is the session's
    /// normal system prompt (the request's cacheable prefix). Does not check
    /// [`AutoCompact::is_expired`]; the caller does, under the session lock,
    /// and saves the session afterwards.
    pub async fn compact(&self, session: &mut Session, system_prompt: &str) -> Result<Option<String>, CompactError> {
        let end = session.messages.len();
        let start = session.last_consolidated.min(end);
        if start == end {
            return Ok(None);
        }
        let at = self.clock.now();
        let outcome = self.summariser.archive_chunk(&session.key, &session.messages[start..end], end, system_prompt, at).await?;
        session.last_consolidated = end;
        match outcome {
            ChunkOutcome::Summary(text) => {
                let record = json!({"text": text, "cursor": end, "at": at.to_rfc3339_opts(SecondsFormat::Secs, true)});
                session.set_meta(LAST_SUMMARY, Some(record));
                Ok(Some(text))
            }
            ChunkOutcome::Nothing | ChunkOutcome::Raw(_) | ChunkOutcome::Empty => Ok(None),
        }
    }
}

fn delta(duration: Duration) -> TimeDelta {
    TimeDelta::from_std(duration).unwrap_or(TimeDelta::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{ChatRequest, ChatResponse, StreamSink};
    use crate::session::{COMMAND_MARKER, Message};

    /// Answers every request with a fixed text.
    struct Fixed(&'static str);

    #[async_trait::async_trait]
    impl Provider for Fixed {
        async fn chat(&self, _request: &ChatRequest, _stream: Option<StreamSink>) -> ChatResponse {
            ChatResponse { content: Some(self.0.into()), ..Default::default() }
        }
        fn name(&self) -> &str {
            "fixed"
        }
    }

    fn auto(idle_minutes: u64, clock: Arc<ManualClock>, dir: &std::path::Path) -> AutoCompact {
        AutoCompact::new(
            Arc::new(Fixed("notes")),
            "m".into(),
            HistoryArchive::new(&crate::workspace::Workspace::open(dir).unwrap()),
            Duration::from_secs(idle_minutes * 60),
            clock,
        )
    }

    #[test]
    fn scans_at_most_once_a_minute() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::default());
        let auto = auto(5, clock.clone(), dir.path());
        assert!(auto.should_scan());
        assert!(!auto.should_scan());
        clock.advance(Duration::from_secs(59));
        assert!(!auto.should_scan());
        clock.advance(Duration::from_secs(1));
        assert!(auto.should_scan());
        assert!(!auto.should_scan());
        // Off: never.
        let off = self::auto(0, clock, dir.path());
        assert!(!off.should_scan());
    }

    #[test]
    fn expiry_needs_idleness_and_an_uncovered_tail() {
        let dir = tempfile::tempdir().unwrap();
        let mut session = Session::new("t:1");
        let clock = Arc::new(ManualClock::new(session.updated_at));
        let auto = auto(10, clock.clone(), dir.path());
        clock.advance(Duration::from_secs(3600));
        assert!(!auto.is_expired(&session), "empty session");
        session.push(Message::user("/help").with_meta(COMMAND_MARKER, true));
        session.updated_at = clock.now() - TimeDelta::minutes(10);
        assert!(!auto.is_expired(&session), "commands only");
        session.push(Message::user("hi"));
        session.updated_at = clock.now() - TimeDelta::minutes(10) + TimeDelta::seconds(1);
        assert!(!auto.is_expired(&session), "one second short");
        session.updated_at = clock.now() - TimeDelta::minutes(10);
        assert!(auto.is_expired(&session), "exactly the TTL");
        session.last_consolidated = session.messages.len();
        assert!(!auto.is_expired(&session), "all archived");
    }

    #[tokio::test]
    async fn compact_stores_the_summary_and_moves_the_cursor() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::default());
        let auto = auto(1, clock, dir.path());
        let mut session = Session::new("t:1");
        session.push(Message::user("hi"));
        session.push(Message::assistant("hello"));
        assert_eq!(auto.compact(&mut session, "sys").await.unwrap().as_deref(), Some("notes"));
        assert_eq!(session.last_consolidated, 2);
        assert_eq!(session.metadata[LAST_SUMMARY]["text"], "notes");
        assert_eq!(session.metadata[LAST_SUMMARY]["cursor"], 2);
        assert_eq!(auto.compact(&mut session, "sys").await.unwrap(), None, "nothing left");
        assert_eq!(HistoryArchive::new(&crate::workspace::Workspace::open(dir.path()).unwrap()).entries().unwrap().len(), 1);
    }
}
