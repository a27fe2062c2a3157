//! Dream's edit history (nanobot keeps Dream's edits in git, with
//! `/dream-log` and `/dream-restore`; chitin keeps them without git).
//!
//! Before Dream writes its edits back, the versions they replace are stored
//! in the data dir, never in the workspace that plugins write:
//! `<data>/dream/history/<n>/run.json` (when, what, +/- lines per file) and
//! `<data>/dream/history/<n>/files/<path>` (each file's previous content; a
//! file Dream created has none). A run is written into `<n>.tmp` and renamed
//! into place, so a crash leaves a whole run or none. Only the last
//! [`KEEP_RUNS`] runs are kept.
//!
//! A restore is itself recorded as a run (the versions it replaces), so a
//! restore can be undone with another. Paths read back from a run are
//! checked again ([`super::allowed`]): a run directory is the host's,
//! but a restore must never write outside the memory files and `skills/`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Runs kept (older ones are deleted when a new one is recorded).
pub const KEEP_RUNS: usize = 20;

/// Bytes of one previous version kept at most; a larger file is not
/// overwritten by Dream (there would be no way back).
pub const MAX_PREVIOUS_BYTES: usize = 1 << 20;

/// Why the history could not be written or read.
#[derive(Debug, thiserror::Error)]
// Each variant's fields are named and explained by its #[error] message.
#[allow(missing_docs)]
pub enum HistoryError {
    /// A file of the history could not be read or written.
    #[error("{op} {path}: {source}")]
    Io { op: &'static str, path: PathBuf, source: std::io::Error },
    /// No run has this number.
    #[error("no Dream run {0} in the history (see /dream-log)")]
    NoSuchRun(u64),
    /// The run's record cannot be parsed.
    #[error("Dream run {number} is unreadable: {reason}")]
    Corrupt { number: u64, reason: String },
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> HistoryError + 'a {
    move |source| HistoryError::Io { op, path: path.to_path_buf(), source }
}

/// What made a recorded run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunKind {
    /// A Dream run's edits.
    Dream,
    /// `/dream-restore`: the files it put back.
    Restore,
}

/// One file of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    /// Relative to the workspace, `/`-separated.
    pub path: String,
    /// There was a file before (its content is stored).
    pub existed: bool,
    /// The run removed the file (a restore of a file Dream had created).
    #[serde(default)]
    pub removed_file: bool,
    /// Lines the run added.
    pub added: usize,
    /// Lines the run removed.
    pub removed: usize,
}

/// `run.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run's number (its directory's name, not stored in the file).
    #[serde(skip)]
    pub number: u64,
    /// When it ran.
    pub at: DateTime<Utc>,
    /// A Dream run or a restore.
    pub kind: RunKind,
    /// For a restore: the run it restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored: Option<u64>,
    /// The files it changed.
    pub files: Vec<FileChange>,
}

/// One file a run is about to change: its path, the content it replaces
/// (`None`: no file), and the new content (`None`: the file goes).
pub struct Edit<'a> {
    /// Relative to the workspace, `/`-separated.
    pub path: &'a str,
    /// The content it replaces (`None`: no file).
    pub previous: Option<&'a [u8]>,
    /// The new content (`None`: the file goes).
    pub next: Option<&'a [u8]>,
}

/// Lines of `new` not in `old` and lines of `old` not in `new`, counted as
/// multisets: what a diff's `+`/`-` shows for edits, without aligning moves.
pub fn line_delta(old: &[u8], new: &[u8]) -> (usize, usize) {
    let mut counts: HashMap<&[u8], isize> = HashMap::new();
    for line in old.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        *counts.entry(line).or_default() -= 1;
    }
    for line in new.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        *counts.entry(line).or_default() += 1;
    }
    let added = counts.values().filter(|c| **c > 0).map(|c| *c as usize).sum();
    let removed = counts.values().filter(|c| **c < 0).map(|c| c.unsigned_abs()).sum();
    (added, removed)
}

/// The history under `<data>/dream/history`.
pub struct DreamHistory {
    dir: PathBuf,
}

impl DreamHistory {
    /// The history of data dir `data_root`.
    pub fn new(data_root: &Path) -> Self {
        DreamHistory { dir: data_root.join("dream").join("history") }
    }

    /// The directory (for tests).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Numbers of the recorded runs, ascending (a name that is not a number,
    /// such as a torn `<n>.tmp`, is no run).
    fn numbers(&self) -> Vec<u64> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        let mut numbers: Vec<u64> = entries.filter_map(Result::ok).filter_map(|e| e.file_name().to_str()?.parse().ok()).collect();
        numbers.sort_unstable();
        numbers
    }

    /// Stores the previous versions of `edits` as a new run; returns its
    /// number. Called before anything is written to the workspace: when it
    /// fails, the caller writes nothing.
    pub fn record(&self, kind: RunKind, restored: Option<u64>, edits: &[Edit<'_>]) -> Result<u64, HistoryError> {
        let number = self.numbers().last().map_or(1, |n| n + 1);
        let tmp = self.dir.join(format!("{number}.tmp"));
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(io("removing", &tmp))?;
        }
        let files_dir = tmp.join("files");
        std::fs::create_dir_all(&files_dir).map_err(io("creating", &files_dir))?;
        let mut files = Vec::new();
        for edit in edits {
            let (added, removed) = line_delta(edit.previous.unwrap_or_default(), edit.next.unwrap_or_default());
            if let Some(previous) = edit.previous {
                let path = files_dir.join(edit.path);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
                }
                std::fs::write(&path, previous).map_err(io("writing", &path))?;
            }
            files.push(FileChange { path: edit.path.to_string(), existed: edit.previous.is_some(), removed_file: edit.next.is_none(), added, removed });
        }
        let record = RunRecord { number, at: Utc::now(), kind, restored, files };
        let json = serde_json::to_vec_pretty(&record).expect("a run record serialises");
        let run_file = tmp.join("run.json");
        crate::fsutil::write_atomic(&run_file, &json).map_err(|(_, e)| HistoryError::Io { op: "writing", path: run_file.clone(), source: e })?;
        let done = self.dir.join(number.to_string());
        std::fs::rename(&tmp, &done).map_err(io("renaming into place", &tmp))?;
        self.prune();
        Ok(number)
    }

    /// Deletes all but the last [`KEEP_RUNS`] runs (a failure is logged:
    /// the next record tries again).
    fn prune(&self) {
        let numbers = self.numbers();
        for old in &numbers[..numbers.len().saturating_sub(KEEP_RUNS)] {
            let path = self.dir.join(old.to_string());
            if let Err(e) = std::fs::remove_dir_all(&path) {
                tracing::warn!(path = %path.display(), "dream history: old run not deleted: {e}");
            }
        }
    }

    /// Reads run `number`'s record.
    pub fn run(&self, number: u64) -> Result<RunRecord, HistoryError> {
        let file = self.dir.join(number.to_string()).join("run.json");
        let bytes = match std::fs::read(&file) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(HistoryError::NoSuchRun(number)),
            Err(e) => return Err(HistoryError::Io { op: "reading", path: file, source: e }),
        };
        let mut record: RunRecord = serde_json::from_slice(&bytes).map_err(|e| HistoryError::Corrupt { number, reason: e.to_string() })?;
        record.number = number;
        Ok(record)
    }

    /// The recorded runs, newest first; unreadable ones are logged and left out.
    pub fn list(&self) -> Vec<RunRecord> {
        self.numbers()
            .into_iter()
            .rev()
            .filter_map(|n| self.run(n).inspect_err(|e| tracing::warn!("dream history: {e}")).ok())
            .collect()
    }

    /// The previous versions of run `number`: per file, its path and the
    /// content to put back (`None`: there was no file). Every path is
    /// checked to be one Dream may write.
    pub fn previous(&self, number: u64) -> Result<(RunRecord, Vec<(String, Option<Vec<u8>>)>), HistoryError> {
        let record = self.run(number)?;
        let files_dir = self.dir.join(number.to_string()).join("files");
        let mut out = Vec::new();
        for change in &record.files {
            if !super::allowed(&change.path) || change.path.split('/').any(|p| p.is_empty() || p == "." || p == "..") {
                return Err(HistoryError::Corrupt { number, reason: format!("it names a path Dream may not write: {}", crate::text::clip_for_terminal(&change.path, 120, "path")) });
            }
            let content = if change.existed {
                let path = files_dir.join(&change.path);
                let bytes = std::fs::read(&path).map_err(io("reading", &path))?;
                if bytes.len() > MAX_PREVIOUS_BYTES {
                    return Err(HistoryError::Corrupt { number, reason: format!("{} is over {MAX_PREVIOUS_BYTES} bytes", change.path) });
                }
                Some(bytes)
            } else {
                None
            };
            out.push((change.path.clone(), content));
        }
        Ok((record, out))
    }
}

/// The `/dream-log` text.
pub fn log_text(runs: &[RunRecord]) -> String {
    if runs.is_empty() {
        return "No Dream edits recorded yet.".to_string();
    }
    let mut text = String::from("Dream edits, newest first (/dream-restore <n> puts back the versions a run replaced):\n");
    for run in runs {
        let what = match (run.kind, run.restored) {
            (RunKind::Restore, Some(n)) => format!("restore of #{n}"),
            (RunKind::Restore, None) => "restore".to_string(),
            (RunKind::Dream, _) => "dream".to_string(),
        };
        let files: Vec<String> = run
            .files
            .iter()
            .map(|f| {
                let note = if !f.existed { ", new" } else if f.removed_file { ", removed" } else { "" };
                format!("{} (+{} -{}{note})", f.path, f.added, f.removed)
            })
            .collect();
        text.push_str(&format!("#{} {} {what}: {}\n", run.number, run.at.format("%Y-%m-%d %H:%M UTC"), files.join(", ")));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_deltas_count_changed_lines() {
        assert_eq!(line_delta(b"a\nb\nc\n", b"a\nB\nc\nd\n"), (2, 1));
        assert_eq!(line_delta(b"", b"x\ny\n"), (2, 0));
        assert_eq!(line_delta(b"same\n", b"same\n"), (0, 0));
    }

    #[test]
    fn runs_are_numbered_listed_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let history = DreamHistory::new(dir.path());
        let first = history.record(RunKind::Dream, None, &[Edit { path: "USER.md", previous: Some(b"old\n"), next: Some(b"new\nmore\n") }, Edit { path: "skills/a/SKILL.md", previous: None, next: Some(b"x\n") }]).unwrap();
        assert_eq!(first, 1);
        let (record, files) = history.previous(1).unwrap();
        assert_eq!(record.files[0], FileChange { path: "USER.md".into(), existed: true, removed_file: false, added: 2, removed: 1 });
        assert_eq!(files, [("USER.md".to_string(), Some(b"old\n".to_vec())), ("skills/a/SKILL.md".to_string(), None)]);
        for _ in 0..KEEP_RUNS + 3 {
            history.record(RunKind::Dream, None, &[Edit { path: "SOUL.md", previous: Some(b"s"), next: Some(b"t") }]).unwrap();
        }
        let runs = history.list();
        assert_eq!(runs.len(), KEEP_RUNS);
        assert_eq!(runs[0].number, KEEP_RUNS as u64 + 4, "newest first");
        assert!(matches!(history.previous(1), Err(HistoryError::NoSuchRun(1))), "pruned");
        let log = log_text(&runs);
        assert!(log.contains("#24 ") && log.contains("SOUL.md (+1 -1)"), "{log}");
    }

    #[test]
    fn a_run_naming_a_foreign_path_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let history = DreamHistory::new(dir.path());
        history.record(RunKind::Dream, None, &[Edit { path: "USER.md", previous: Some(b"a"), next: Some(b"b") }]).unwrap();
        let run_file = history.dir().join("1/run.json");
        let forged = std::fs::read_to_string(&run_file).unwrap().replace("USER.md", "../AGENTS.md");
        std::fs::write(&run_file, forged).unwrap();
        let e = history.previous(1).unwrap_err().to_string();
        assert!(e.contains("may not write"), "{e}");
        std::fs::write(&run_file, "{oops").unwrap();
        assert!(matches!(history.previous(1), Err(HistoryError::Corrupt { .. })));
        assert!(history.list().is_empty(), "an unreadable run is left out of the log");
    }
}
