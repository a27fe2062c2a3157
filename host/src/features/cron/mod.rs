//! Scheduled jobs (the `cron` tool, nanobot's CronService): a message that
//! arrives in a session on a schedule, as if the user had sent it, so the
//! agent does the task and its answer goes to that chat.
//!
//! - Jobs live in one JSON file in the data dir (`cron/jobs.json`, written
//!   atomically), never in the workspace a plugin can write. A file that
//!   does not parse is left untouched and cron stays off with the reason
//!   ([`CronError::Corrupt`]); nothing is overwritten.
//! - [`CronService::run`] (in `chitin gateway`) wakes every tick, reads the
//!   [`Clock`] (a manual one in tests) and fires what is due: the job's
//!   next run is computed and saved **before** the message is published, so
//!   a crash never fires it twice; one-shot jobs are removed when fired.
//! - A job whose session has a turn running is **deferred** to the next
//!   tick, not injected into that turn: a scheduled task is its own turn.
//! - After a restart, a job whose time passed while the gateway was down
//!   fires once on start; a repeating one then keeps its rhythm without
//!   catching up the runs it missed ([`Schedule::next_from`]).
//! - Jobs belong to the session that made them: the tool lists and removes
//!   only its own session's jobs, and the model cannot aim one elsewhere.

pub mod schedule;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

pub use schedule::{Schedule, ScheduleError};

use crate::bus::{InboundMessage, MessageBus};
use crate::compact::Clock;

/// Jobs one session may have.
pub const MAX_JOBS_PER_SESSION: usize = 20;

/// Jobs in all.
pub const MAX_JOBS: usize = 500;

/// Longest job message, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 4000;

/// Longest job name, in characters.
pub const MAX_NAME_CHARS: usize = 64;

/// The sender name of the messages jobs publish ([`crate::bus::Origin::Cron`]).
pub const CRON_SENDER: &str = "cron";

/// Why a cron operation failed; the text is for the model or the user.
#[derive(Debug, thiserror::Error)]
// Each variant's fields are named and explained by its #[error] message.
#[allow(missing_docs)]
pub enum CronError {
    /// A bad schedule or job field.
    #[error("{0}")]
    Invalid(String),
    /// Too many jobs.
    #[error("{0}")]
    Full(String),
    /// No such job in this session.
    #[error("no job `{0}` in this conversation (list shows the ids)")]
    NotFound(String),
    /// Reading or writing the jobs file failed.
    #[error("{what} ({path}): {source}")]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    /// The jobs file does not parse; it is left as it is.
    #[error("the cron jobs file {path} is corrupt: {message} (move it away to start with no jobs; nothing was changed)")]
    Corrupt { path: PathBuf, message: String },
}

impl From<ScheduleError> for CronError {
    fn from(e: ScheduleError) -> Self {
        CronError::Invalid(e.0)
    }
}

/// A scheduled job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// The job's id.
    pub id: String,
    /// The name it was added with.
    pub name: String,
    /// What the agent is told when it fires.
    pub message: String,
    /// When it fires.
    pub schedule: Schedule,
    /// The session the message goes to, and its channel and chat.
    pub session_key: String,
    /// The channel of the chat.
    pub channel: String,
    /// The chat's id on that channel.
    pub chat_id: String,
    /// When it was added.
    pub created_at: DateTime<Utc>,
    /// `None`: it will not fire again.
    pub next_run: Option<DateTime<Utc>>,
    /// When it last fired.
    #[serde(default)]
    pub last_run: Option<DateTime<Utc>>,
    /// How many times it fired.
    #[serde(default)]
    pub runs: u64,
}

/// What the `cron` tool asks to add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSpec {
    /// The job's name.
    pub name: String,
    /// What the agent is told when it fires.
    pub message: String,
    /// When it fires.
    pub schedule: Schedule,
}

/// Where a job's messages go: the conversation that added it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The conversation's session key.
    pub session_key: String,
    /// The channel of its chat.
    pub channel: String,
    /// The chat's id on that channel.
    pub chat_id: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct JobsFile {
    version: u32,
    jobs: Vec<Job>,
}

/// The jobs and the loop that fires them.
pub struct CronService {
    path: PathBuf,
    jobs: Mutex<Vec<Job>>,
    clock: Arc<dyn Clock>,
}

impl CronService {
    /// The jobs file of data dir `root`.
    pub fn jobs_file(root: &Path) -> PathBuf {
        root.join("cron").join("jobs.json")
    }

    /// Loads `path` (no file: no jobs).
    pub fn open(path: PathBuf, clock: Arc<dyn Clock>) -> Result<CronService, CronError> {
        let jobs = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<JobsFile>(&bytes).map_err(|e| CronError::Corrupt { path: path.clone(), message: e.to_string() })?.jobs,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => return Err(CronError::Io { what: "reading the cron jobs", path, source }),
        };
        Ok(CronService { path, jobs: Mutex::new(jobs), clock })
    }

    /// The service's clock's now.
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// Adds a job for `origin`.
    pub fn add(&self, spec: JobSpec, origin: &Origin) -> Result<Job, CronError> {
        let name = spec.name.trim();
        if name.chars().count() > MAX_NAME_CHARS {
            return Err(CronError::Invalid(format!("the name is over {MAX_NAME_CHARS} characters")));
        }
        let message = spec.message.trim();
        if message.is_empty() {
            return Err(CronError::Invalid("the message is empty: say what to do when the job fires".into()));
        }
        if message.len() > MAX_MESSAGE_BYTES {
            return Err(CronError::Invalid(format!("the message is {} bytes; the limit is {MAX_MESSAGE_BYTES}", message.len())));
        }
        let now = self.clock.now();
        let next_run = spec.schedule.next_after(now).ok_or_else(|| CronError::Invalid("this schedule never fires".into()))?;
        let mut jobs = self.jobs.lock().expect("cron lock");
        if jobs.len() >= MAX_JOBS {
            return Err(CronError::Full(format!("there are {MAX_JOBS} jobs already; remove some first")));
        }
        if jobs.iter().filter(|j| j.session_key == origin.session_key).count() >= MAX_JOBS_PER_SESSION {
            return Err(CronError::Full(format!("this conversation has {MAX_JOBS_PER_SESSION} jobs already; remove one first")));
        }
        let job = Job {
            id: new_id(&jobs),
            name: if name.is_empty() { clip_chars(message, 30) } else { name.to_string() },
            message: message.to_string(),
            schedule: spec.schedule,
            session_key: origin.session_key.clone(),
            channel: origin.channel.clone(),
            chat_id: origin.chat_id.clone(),
            created_at: now,
            next_run: Some(next_run),
            last_run: None,
            runs: 0,
        };
        jobs.push(job.clone());
        if let Err(e) = save(&self.path, &jobs) {
            jobs.pop();
            return Err(e);
        }
        tracing::info!(session = %job.session_key, job = %job.id, schedule = %job.schedule.describe(), "cron job added");
        Ok(job)
    }

    /// The jobs of `session_key`, soonest first.
    pub fn list(&self, session_key: &str) -> Vec<Job> {
        let mut jobs: Vec<Job> = self.jobs.lock().expect("cron lock").iter().filter(|j| j.session_key == session_key).cloned().collect();
        jobs.sort_by_key(|j| j.next_run);
        jobs
    }

    /// Every job (for `chitin status`).
    pub fn all(&self) -> Vec<Job> {
        self.jobs.lock().expect("cron lock").clone()
    }

    /// Removes job `id` of `session_key`.
    pub fn remove(&self, session_key: &str, id: &str) -> Result<Job, CronError> {
        let mut jobs = self.jobs.lock().expect("cron lock");
        let index = jobs.iter().position(|j| j.id == id && j.session_key == session_key).ok_or_else(|| CronError::NotFound(clip_chars(id, 40)))?;
        let job = jobs.remove(index);
        if let Err(e) = save(&self.path, &jobs) {
            jobs.insert(index, job);
            return Err(e);
        }
        tracing::info!(session = %session_key, job = %id, "cron job removed");
        Ok(job)
    }

    /// Fires every job due at the clock's now whose session is idle, and
    /// returns the messages published. A due job of a busy session waits.
    pub fn fire_due(&self, bus: &MessageBus, busy: impl Fn(&str) -> bool) -> Result<Vec<InboundMessage>, CronError> {
        let now = self.clock.now();
        let mut jobs = self.jobs.lock().expect("cron lock");
        let before = jobs.clone();
        let mut fired = Vec::new();
        for job in jobs.iter_mut() {
            let Some(due) = job.next_run.filter(|t| *t <= now) else { continue };
            if busy(&job.session_key) {
                tracing::debug!(job = %job.id, session = %job.session_key, "cron job deferred: the session's turn is running");
                continue;
            }
            job.runs += 1;
            job.last_run = Some(now);
            job.next_run = job.schedule.next_from(due, now);
            fired.push(message_of(job));
        }
        if fired.is_empty() {
            return Ok(fired);
        }
        jobs.retain(|j| j.next_run.is_some());
        // Saved before publishing: a crash now loses at most this firing,
        // it never fires twice.
        if let Err(e) = save(&self.path, &jobs) {
            *jobs = before;
            return Err(e);
        }
        drop(jobs);
        for message in &fired {
            tracing::info!(session = %message.session_key(), origin = ?message.origin, "cron job fired");
            bus.publish_inbound(message.clone());
        }
        Ok(fired)
    }

    /// Fires due jobs every `tick` until `shutdown`. `is_busy(session_key)`
    /// says whether a turn of that session is running (the agent's active
    /// turns): cron takes a question, not the agent, so it does not depend
    /// on the agent.
    pub async fn run(self: Arc<Self>, bus: Arc<MessageBus>, is_busy: impl Fn(&str) -> bool + Send + 'static, tick: Duration, shutdown: CancellationToken) {
        loop {
            if let Err(e) = self.fire_due(&bus, &is_busy) {
                tracing::error!("cron: {e}");
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(tick) => {}
            }
        }
    }
}

/// The message a firing job publishes into its session.
fn message_of(job: &Job) -> InboundMessage {
    let text = format!("[Scheduled task \"{}\" ({})] {}", job.name, job.schedule.describe(), job.message);
    let mut message = InboundMessage::from_origin(&job.channel, &job.chat_id, crate::bus::Origin::Cron { job: job.id.clone() }, text);
    message.session_key_override = Some(job.session_key.clone());
    message
}

/// A short id not used by `jobs`.
fn new_id(jobs: &[Job]) -> String {
    loop {
        let mut bytes = [0u8; 4];
        unique_bytes(&mut bytes);
        let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        if !jobs.iter().any(|j| j.id == id) {
            return id;
        }
    }
}

/// Bytes that differ on every call: a job id needs uniqueness, not
/// secrecy (ids are checked against the existing ones anyway).
fn unique_bytes(bytes: &mut [u8]) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let seed = Utc::now().timestamp_nanos_opt().unwrap_or_default() as u64 ^ COUNTER.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
    let hash = blake3::hash(&seed.to_le_bytes());
    bytes.copy_from_slice(&hash.as_bytes()[..bytes.len()]);
}

fn clip_chars(text: &str, max: usize) -> String {
    let mut out: String = text.chars().take(max).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

/// Writes the jobs atomically ([`crate::fsutil::write_atomic`]).
fn save(path: &Path, jobs: &[Job]) -> Result<(), CronError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|source| CronError::Io { what: "creating the cron directory", path: dir.to_path_buf(), source })?;
    let bytes = serde_json::to_vec_pretty(&JobsFile { version: 1, jobs: jobs.to_vec() }).expect("jobs serialise");
    crate::fsutil::write_atomic(path, &bytes).map_err(|(what, source)| CronError::Io { what, path: path.to_path_buf(), source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration as Span;

    use crate::compact::ManualClock as Manual;

    fn origin(key: &str) -> Origin {
        let (channel, chat) = key.split_once(':').unwrap();
        Origin { session_key: key.into(), channel: channel.into(), chat_id: chat.into() }
    }

    fn start() -> (tempfile::TempDir, Arc<Manual>, CronService) {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(Manual::new("2026-03-01T10:00:00Z".parse().unwrap()));
        let service = CronService::open(CronService::jobs_file(dir.path()), clock.clone()).unwrap();
        (dir, clock, service)
    }

    #[test]
    fn jobs_fire_on_time_are_deferred_while_busy_and_one_shots_end() {
        let (_dir, clock, cron) = start();
        let bus = MessageBus::new();
        let every = cron.add(JobSpec { name: "water".into(), message: "remind me to drink".into(), schedule: Schedule::every(60).unwrap() }, &origin("telegram:1")).unwrap();
        let at = clock.now() + Span::seconds(90);
        cron.add(JobSpec { name: String::new(), message: "call mum".into(), schedule: Schedule::At { time: at } }, &origin("telegram:1")).unwrap();
        assert!(cron.fire_due(&bus, |_| false).unwrap().is_empty(), "nothing due yet");
        clock.advance(Duration::from_secs(60));
        let fired = cron.fire_due(&bus, |_| true).unwrap();
        assert!(fired.is_empty(), "busy: deferred");
        let fired = cron.fire_due(&bus, |_| false).unwrap();
        assert_eq!(fired.len(), 1);
        assert_eq!(fired[0].session_key(), "telegram:1");
        assert_eq!((fired[0].channel.as_str(), fired[0].chat_id.as_str(), fired[0].sender_id()), ("telegram", "1", CRON_SENDER));
        assert!(fired[0].content.contains("remind me to drink") && fired[0].content.contains("Scheduled task \"water\""), "{}", fired[0].content);
        assert_eq!(fired[0].origin, crate::bus::Origin::Cron { job: every.id.clone() });
        assert!(bus.try_consume_outbound().is_none());
        clock.advance(Duration::from_secs(30));
        let fired = cron.fire_due(&bus, |_| false).unwrap();
        assert_eq!(fired.len(), 1, "the one-shot");
        assert!(fired[0].content.contains("call mum"));
        assert_eq!(cron.list("telegram:1").len(), 1, "the one-shot is gone, the repeating job stays");
        assert_eq!(cron.list("telegram:1")[0].runs, 1);
    }

    #[test]
    fn jobs_survive_a_restart_and_a_missed_one_fires_once() {
        let (dir, clock, cron) = start();
        let at = clock.now() + Span::seconds(30);
        cron.add(JobSpec { name: "once".into(), message: "ping".into(), schedule: Schedule::At { time: at } }, &origin("web:a")).unwrap();
        drop(cron);
        // Down past the time; a new process on the same file.
        clock.advance(Duration::from_secs(7200));
        let cron = CronService::open(CronService::jobs_file(dir.path()), clock.clone()).unwrap();
        let bus = MessageBus::new();
        assert_eq!(cron.fire_due(&bus, |_| false).unwrap().len(), 1);
        assert!(cron.fire_due(&bus, |_| false).unwrap().is_empty(), "once");
        // Ticks later (the gateway's test used to wait 2.5 s of real time
        // for a second firing that must not come): still nothing.
        clock.advance(Duration::from_millis(2500));
        assert!(cron.fire_due(&bus, |_| false).unwrap().is_empty(), "once, ticks later");
        let again = CronService::open(CronService::jobs_file(dir.path()), clock.clone()).unwrap();
        assert!(again.all().is_empty(), "the firing was saved");
    }

    #[test]
    fn sessions_see_and_remove_only_their_own_jobs_within_limits() {
        let (_dir, _clock, cron) = start();
        let spec = || JobSpec { name: "n".into(), message: "m".into(), schedule: Schedule::every(3600).unwrap() };
        let mine = cron.add(spec(), &origin("telegram:1")).unwrap();
        cron.add(spec(), &origin("telegram:2")).unwrap();
        assert_eq!(cron.list("telegram:1").len(), 1);
        assert!(matches!(cron.remove("telegram:2", &mine.id), Err(CronError::NotFound(_))), "another session's job is not found");
        cron.remove("telegram:1", &mine.id).unwrap();
        for _ in 0..MAX_JOBS_PER_SESSION {
            cron.add(spec(), &origin("telegram:3")).unwrap();
        }
        assert!(matches!(cron.add(spec(), &origin("telegram:3")), Err(CronError::Full(_))));
        let empty = JobSpec { message: "  ".into(), ..spec() };
        assert!(cron.add(empty, &origin("telegram:1")).unwrap_err().to_string().contains("empty"));
    }

    #[test]
    fn a_corrupt_file_is_refused_and_left_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = CronService::jobs_file(dir.path());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "{not json").unwrap();
        let clock = Arc::new(Manual::new(Utc::now()));
        let e = CronService::open(path.clone(), clock).err().expect("refused");
        assert!(e.to_string().contains("corrupt") && e.to_string().contains("move it away"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{not json");
    }
}
