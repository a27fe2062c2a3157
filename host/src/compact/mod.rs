//! Compaction: moving old conversation out of the prompt and into the
//! archive `memory/history.jsonl` (RUNTIME.md §7, the two layers that touch
//! the session; the third, the runner's snip, lives in
//! `agent::runner::governance` and never edits anything).
//!
//! Who owns what:
//! - [`archive`]: [`HistoryArchive`], the append-only JSONL file and its
//!   bounded tail read for BUILD (`recent`);
//! - [`summarise`]: [`Summariser`], one model call that turns a run of
//!   messages into an archive entry (a summary, nothing, or the raw
//!   transcript when the model fails), and the transcript rendering;
//! - [`consolidator`]: [`Consolidator`], token consolidation: when the prompt
//!   estimate reaches the input budget, archive the oldest chunks until it is
//!   back under half the budget;
//! - [`auto`]: [`AutoCompact`], idle compaction: summarise the whole
//!   unarchived tail of a session nobody has touched for a while, and the
//!   clock it measures idleness with.
//!
//! Rules shared by both layers, and why:
//! - Messages are never deleted. Archiving only moves
//!   `Session::last_consolidated`, so `/status`, crash recovery and the
//!   session file keep everything; the prompt just stops replaying it
//!   (except the last few messages, which `Session::get_history` always keeps).
//! - The cursor advances even when the model fails: the chunk is then archived
//!   raw. Otherwise a provider outage would stop consolidation and the prompt
//!   would grow past the window on every later turn.
//! - Nothing here locks a session. Callers run compaction under the loop's
//!   per-session lock, like a turn, so two writers never race on one session.

pub mod archive;
pub mod auto;
pub mod consolidator;
pub mod summarise;


pub use archive::{HistoryArchive, HistoryEntry, TAIL_BYTES};
pub use auto::{AutoCompact, Clock, ManualClock, SCAN_INTERVAL, SystemClock};
pub use consolidator::{ConsolidationReport, ConsolidationSettings, Consolidator, estimate_unarchived, prompt_overhead, PromptOverhead};
pub use summarise::{ChunkOutcome, NOTHING, SummaryLimits, Summariser, render_transcript};

/// Session metadata key of the last idle-compaction summary:
/// `{"text": …, "cursor": n, "at": rfc3339}`. COMPACT reads `text`.
pub const LAST_SUMMARY: &str = "last_summary";

/// The text of the session's last idle-compaction summary, if any.
pub fn last_summary(session: &crate::session::Session) -> Option<String> {
    let record = session.metadata.get(LAST_SUMMARY)?;
    record.get("text").unwrap_or(record).as_str().map(str::to_string)
}

/// Why compaction could not finish. A model failure is not one of these: it
/// falls back to a raw archive entry (see the module docs).
#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    /// Reading or writing the archive (or creating its directory) failed,
    /// or the archive path holds something the host will not touch.
    #[error(transparent)]
    Workspace(#[from] crate::workspace::WorkspaceError),
    /// An archive entry could not be encoded as JSON.
    #[error("could not encode a history entry: {0}")]
    Encode(#[from] serde_json::Error),
}

