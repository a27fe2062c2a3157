//! `apply_patch`: several file changes in one call, all or nothing.
//!
//! Every operation is first applied to an in-memory view of the files it
//! touches (so a later operation sees an earlier one's result); only when all
//! of them fit is anything written. Writes go to temporary files next to
//! their targets first and are renamed into place after every one of them
//! was written, so a full disk or a read-only workspace changes nothing.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::edit::{match_line_endings, nearest_window, not_found};
use crate::patch::{FileOp, Hunk, HunkLine};
use crate::paths::{FsError, FsResult, WsPath, io_error, write_error};
use crate::text::{MAX_FILE_BYTES, count, load_text, number_width, numbered};

/// Most operations in one patch: a change that big is better reviewed in parts.
pub const MAX_OPS: usize = 100;

/// Most entries of the structured `edits` form (as nanobot's tool allows).
pub const MAX_EDITS: usize = 20;

/// Lines of diff a dry run shows; the counts cover everything.
const MAX_DIFF_LINES: usize = 200;

/// How many lines of a new file a dry run shows.
const SHOWN_NEW_LINES: usize = 20;

/// How many lines of the nearest match a "does not match" error shows.
const SHOWN_NEAREST: usize = 12;

/// Below this similarity the nearest window is noise, not a hint.
const MIN_SIMILARITY: f64 = 0.4;

/// What one entry of the structured `edits` form does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EditAction {
    /// Replace `old_text` (exactly one occurrence) by `new_text`.
    Replace,
    /// Create a new file holding `new_text`.
    Add,
}

/// One entry of the structured `edits` form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    pub path: String,
    pub action: EditAction,
    pub old_text: Option<String>,
    pub new_text: Option<String>,
}

/// The operations of the structured `edits` form, checked.
pub fn edits_to_ops(edits: Vec<Edit>) -> FsResult<Vec<FileOp>> {
    if edits.is_empty() {
        return Err(FsError::InvalidArgs("edits is empty; give at least one edit".into()));
    }
    if edits.len() > MAX_EDITS {
        return Err(FsError::InvalidArgs(format!(
            "{} edits in one call, at most {MAX_EDITS}; split them over several calls",
            edits.len()
        )));
    }
    edits
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let at = |m: &str| FsError::InvalidArgs(format!("edits[{i}] ({}): {m}", e.path));
            match e.action {
                EditAction::Add => {
                    if e.old_text.as_deref().is_some_and(|t| !t.is_empty()) {
                        return Err(at("action \"add\" creates a new file and takes no old_text; use \"replace\" to change a file"));
                    }
                    Ok(FileOp::Add {
                        path: e.path.clone(),
                        content: e.new_text.clone().unwrap_or_default(),
                    })
                }
                EditAction::Replace => {
                    let old = e.old_text.clone().unwrap_or_default();
                    let new = e.new_text.clone().unwrap_or_default();
                    if old.is_empty() {
                        return Err(at("action \"replace\" needs old_text, the exact text to replace"));
                    }
                    if old == new {
                        return Err(at("old_text and new_text are identical; nothing would change"));
                    }
                    Ok(FileOp::Replace { path: e.path.clone(), old, new })
                }
            }
        })
        .collect()
}

/// Applies `ops` under `root`, or with `dry_run` only says what they would
/// change. Either every operation applies or nothing is written.
pub fn apply_patch(root: &Path, ops: Vec<FileOp>, dry_run: bool) -> FsResult<String> {
    if ops.len() > MAX_OPS {
        return Err(FsError::InvalidArgs(format!(
            "the patch has {} file operations, at most {MAX_OPS}; split it",
            ops.len()
        )));
    }
    let mut plan = Plan { root, files: BTreeMap::new(), changes: Vec::new() };
    for op in &ops {
        plan.apply(op)?;
    }
    let summary: Vec<String> = plan.changes.iter().map(Change::summary).collect();
    let files = count(plan.touched(), "file", "files");
    if dry_run {
        let mut out = format!("dry run, nothing was written: the patch applies and would change {files}\n");
        out.push_str(&summary.join("\n"));
        let diff = plan.diff();
        if !diff.is_empty() {
            out.push_str("\n\n");
            out.push_str(&diff);
        }
        return Ok(out);
    }
    plan.commit()?;
    Ok(format!("applied the patch: {files} changed\n{}", summary.join("\n")))
}

/// A file as the patch sees it: on disk before, and after the operations so far.
struct FileState {
    path: WsPath,
    /// `None`: it did not exist.
    original: Option<String>,
    /// `None`: it does not exist (any more).
    current: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Added,
    Modified,
    Deleted,
    Moved,
}

/// What one operation did, for the report.
struct Change {
    kind: Kind,
    path: String,
    to: Option<String>,
    added: usize,
    removed: usize,
    diff: Vec<String>,
}

impl Change {
    fn summary(&self) -> String {
        let counts = match self.kind {
            Kind::Added => format!("(+{})", self.added),
            Kind::Deleted => format!("(-{})", self.removed),
            Kind::Modified | Kind::Moved => format!("(+{} -{})", self.added, self.removed),
        };
        match (self.kind, &self.to) {
            (Kind::Added, _) => format!("A {} {counts}", self.path),
            (Kind::Deleted, _) => format!("D {} {counts}", self.path),
            (Kind::Moved, Some(to)) => format!("R {} -> {to} {counts}", self.path),
            _ => format!("M {} {counts}", self.path),
        }
    }
}

struct Plan<'a> {
    root: &'a Path,
    files: BTreeMap<String, FileState>,
    changes: Vec<Change>,
}

impl Plan<'_> {
    /// The state of the file `raw`, read from disk the first time.
    fn file(&mut self, raw: &str) -> FsResult<&mut FileState> {
        let path = WsPath::parse(raw)?;
        if path.is_root() {
            return Err(FsError::InvalidArgs(format!("`{raw}` is the workspace root; name a file")));
        }
        let key = path.display().to_string();
        if !self.files.contains_key(&key) {
            let disk = path.on_disk(self.root);
            let original = match fs::symlink_metadata(&disk) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                Err(e) => return Err(io_error(e, "file", &key)),
                Ok(meta) if meta.is_dir() => {
                    return Err(FsError::Failed(format!("{key} is a directory; the patch can only change files")));
                }
                Ok(_) => Some(load_text(self.root, &path)?),
            };
            self.files.insert(key.clone(), FileState { path, current: original.clone(), original });
        }
        Ok(self.files.get_mut(&key).expect("inserted above"))
    }

    fn apply(&mut self, op: &FileOp) -> FsResult<()> {
        match op {
            FileOp::Add { path, content } => {
                check_size(path, content)?;
                let file = self.file(path)?;
                let rel = file.path.display().to_string();
                if file.current.is_some() {
                    return Err(FsError::Failed(format!(
                        "cannot add {rel}: it already exists; change it with `*** Update File: {rel}` (or action \"replace\"), \
                         or delete it first. Nothing was changed."
                    )));
                }
                file.current = Some(content.clone());
                let lines: Vec<&str> = content.lines().collect();
                let mut diff: Vec<String> = lines.iter().take(SHOWN_NEW_LINES).map(|l| format!("+{l}")).collect();
                if lines.len() > SHOWN_NEW_LINES {
                    diff.push(format!("… ({} more lines)", lines.len() - SHOWN_NEW_LINES));
                }
                self.changes.push(Change { kind: Kind::Added, path: rel, to: None, added: lines.len(), removed: 0, diff });
            }
            FileOp::Delete { path } => {
                let file = self.file(path)?;
                let rel = file.path.display().to_string();
                let Some(text) = file.current.take() else {
                    return Err(FsError::Failed(format!("cannot delete {rel}: file not found. Nothing was changed.")));
                };
                let removed = text.lines().count();
                self.changes.push(Change { kind: Kind::Deleted, path: rel, to: None, added: 0, removed, diff: Vec::new() });
            }
            FileOp::Update { path, move_to, hunks } => {
                let file = self.file(path)?;
                let rel = file.path.display().to_string();
                let Some(text) = file.current.clone() else {
                    return Err(FsError::Failed(format!(
                        "cannot update {rel}: file not found (create it with `*** Add File: {rel}`). Nothing was changed."
                    )));
                };
                let updated = apply_hunks(&text, hunks, &rel)?;
                check_size(&rel, &updated.text)?;
                let mut change = Change {
                    kind: Kind::Modified,
                    path: rel.clone(),
                    to: None,
                    added: updated.added,
                    removed: updated.removed,
                    diff: updated.diff,
                };
                match move_to {
                    Some(dest) if WsPath::parse(dest)?.display() != rel => {
                        self.file(path)?.current = None;
                        let target = self.file(dest)?;
                        let to = target.path.display().to_string();
                        if target.current.is_some() {
                            return Err(FsError::Failed(format!(
                                "cannot move {rel} to {to}: {to} already exists. Nothing was changed."
                            )));
                        }
                        target.current = Some(updated.text);
                        change.kind = Kind::Moved;
                        change.to = Some(to);
                    }
                    _ => self.file(path)?.current = Some(updated.text),
                }
                self.changes.push(change);
            }
            FileOp::Replace { path, old, new } => {
                let file = self.file(path)?;
                let rel = file.path.display().to_string();
                let Some(text) = file.current.clone() else {
                    return Err(FsError::Failed(format!(
                        "cannot edit {rel}: file not found (use action \"add\" to create it). Nothing was changed."
                    )));
                };
                let (old_in_file, new_in_file) = match_line_endings(&text, old, new);
                let starts: Vec<usize> = text.match_indices(old_in_file.as_str()).map(|(i, _)| i).collect();
                match starts.len() {
                    0 => return Err(FsError::Failed(format!("{} Nothing was changed.", not_found(&text, old, &rel)))),
                    1 => {}
                    n => {
                        return Err(FsError::Failed(format!(
                            "old_text matches {n} times in {rel}; include more surrounding lines to make it unique. Nothing was changed."
                        )));
                    }
                }
                let updated = text.replacen(&old_in_file, &new_in_file, 1);
                check_size(&rel, &updated)?;
                let line = text[..starts[0]].matches('\n').count() + 1;
                let mut diff = vec![format!("@@ line {line}")];
                diff.extend(old.lines().map(|l| format!("-{l}")));
                diff.extend(new.lines().map(|l| format!("+{l}")));
                let change = Change {
                    kind: Kind::Modified,
                    path: rel,
                    to: None,
                    added: new.lines().count(),
                    removed: old.lines().count(),
                    diff,
                };
                self.file(path)?.current = Some(updated);
                self.changes.push(change);
            }
        }
        Ok(())
    }

    /// Files whose content or existence changes.
    fn touched(&self) -> usize {
        self.files.values().filter(|f| f.current != f.original).count()
    }

    /// The dry run's diff, at most [`MAX_DIFF_LINES`] lines.
    fn diff(&self) -> String {
        let mut out: Vec<String> = Vec::new();
        let mut left = 0usize;
        for change in &self.changes {
            if change.diff.is_empty() {
                continue;
            }
            let header = match &change.to {
                Some(to) => format!("--- {}\n+++ {to}", change.path),
                None => format!("--- {}\n+++ {}", change.path, change.path),
            };
            for line in std::iter::once(header).chain(change.diff.iter().cloned()) {
                if out.len() >= MAX_DIFF_LINES {
                    left += 1;
                } else {
                    out.push(line);
                }
            }
        }
        if left > 0 {
            out.push(format!("… ({} more diff lines not shown)", left));
        }
        out.join("\n")
    }

    /// Writes the planned files: every new content to a temporary file, then
    /// all renamed into place, then the deletions.
    fn commit(&self) -> FsResult<()> {
        let mut staged: Vec<(PathBuf, PathBuf, &str)> = Vec::new();
        let unstage = |staged: &[(PathBuf, PathBuf, &str)]| {
            for (tmp, _, _) in staged {
                let _ = fs::remove_file(tmp);
            }
        };
        for file in self.files.values() {
            let (Some(content), true) = (&file.current, file.current != file.original) else {
                continue;
            };
            let rel = file.path.display();
            let disk = file.path.on_disk(self.root);
            let staged_one: FsResult<PathBuf> = (|| {
                if let Some(parent) = disk.parent() {
                    fs::create_dir_all(parent).map_err(|e| match e.kind() {
                        io::ErrorKind::AlreadyExists | io::ErrorKind::NotADirectory => FsError::Failed(format!(
                            "cannot create the parent directories of {rel}: a file is in the way"
                        )),
                        _ => write_error(e, rel),
                    })?;
                }
                let tmp = disk.with_file_name(format!(".{}.apply_patch.tmp", file.path.name()));
                fs::write(&tmp, content).map_err(|e| {
                    let _ = fs::remove_file(&tmp);
                    write_error(e, rel)
                })?;
                Ok(tmp)
            })();
            match staged_one {
                Ok(tmp) => staged.push((tmp, disk, rel)),
                Err(e) => {
                    unstage(&staged);
                    return Err(FsError::Failed(format!("{e}. Nothing was changed.")));
                }
            }
        }
        for (i, (tmp, disk, rel)) in staged.iter().enumerate() {
            if let Err(e) = fs::rename(tmp, disk) {
                unstage(&staged[i..]);
                let done: Vec<&str> = staged[..i].iter().map(|s| s.2).collect();
                return Err(FsError::Failed(format!(
                    "{}; already written: {}; nothing else was changed",
                    write_error(e, rel),
                    if done.is_empty() { "none".to_string() } else { done.join(", ") }
                )));
            }
        }
        for file in self.files.values() {
            if file.current.is_none() && file.original.is_some() {
                let rel = file.path.display();
                fs::remove_file(file.path.on_disk(self.root)).map_err(|e| {
                    FsError::Failed(format!("{}; every other change of the patch was written", write_error(e, rel)))
                })?;
            }
        }
        Ok(())
    }
}

fn check_size(rel: &str, content: &str) -> FsResult<()> {
    if content.len() as u64 > MAX_FILE_BYTES {
        return Err(FsError::Failed(format!(
            "{rel} would be {} bytes, over the limit of {MAX_FILE_BYTES}. Nothing was changed.",
            content.len()
        )));
    }
    Ok(())
}

/// A file's text after its hunks, with the counts and diff of the change.
struct Updated {
    text: String,
    added: usize,
    removed: usize,
    diff: Vec<String>,
}

/// How strictly lines are compared, strictest first: models often get
/// trailing whitespace or indentation slightly wrong.
const EQUALITIES: [fn(&str, &str) -> bool; 3] = [
    |a, b| a == b,
    |a, b| a.trim_end() == b.trim_end(),
    |a, b| a.trim() == b.trim(),
];

/// Applies `hunks` to `text` in order: each is found after the previous one
/// (and after its `@@` anchor line), then its old lines are replaced by its
/// new ones. Line endings (LF or CRLF) and a missing final newline are kept.
fn apply_hunks(text: &str, hunks: &[Hunk], rel: &str) -> FsResult<Updated> {
    let eol = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let lines: Vec<&str> = text.lines().collect();
    let mut cursor = 0;
    let mut replacements: Vec<(usize, usize, Vec<&str>)> = Vec::new();
    let (mut added, mut removed) = (0, 0);
    let mut diff = Vec::new();
    for (k, hunk) in hunks.iter().enumerate() {
        let name = format!("{rel}: hunk {} (patch line {})", k + 1, hunk.patch_line);
        for anchor in &hunk.anchors {
            let found = EQUALITIES
                .iter()
                .find_map(|eq| (cursor..lines.len()).find(|&i| eq(lines[i], anchor)));
            match found {
                Some(i) => cursor = i + 1,
                None => {
                    return Err(FsError::Failed(format!(
                        "{name}: its `@@ {anchor}` line is not in the file{}. {}Nothing was changed.",
                        if cursor > 0 { format!(" after line {cursor}") } else { String::new() },
                        nearest_hint(&lines, &[anchor.as_str()])
                    )));
                }
            }
        }
        let old = hunk.old_lines();
        let new = hunk.new_lines();
        let start = if old.is_empty() {
            // Only additions: after the anchor, or at the end of the file.
            if !hunk.anchors.is_empty() && !hunk.at_end { cursor } else { lines.len() }
        } else {
            match seek(&lines, &old, cursor, hunk.at_end) {
                Some(i) => i,
                None => return Err(FsError::Failed(mismatch(&name, &lines, &old, cursor))),
            }
        };
        diff.push(format!("@@ line {}", start + 1));
        for line in &hunk.lines {
            diff.push(match line {
                HunkLine::Keep(t) => format!(" {t}"),
                HunkLine::Remove(t) => {
                    removed += 1;
                    format!("-{t}")
                }
                HunkLine::Add(t) => {
                    added += 1;
                    format!("+{t}")
                }
            });
        }
        replacements.push((start, old.len(), new));
        cursor = start + old.len();
    }
    // Additions at the end may come before later hunks in the patch.
    replacements.sort_by_key(|r| r.0);
    let mut out: Vec<&str> = Vec::with_capacity(lines.len());
    let mut at = 0;
    for (start, len, new) in &replacements {
        if *start < at {
            return Err(FsError::Failed(format!(
                "{rel}: two hunks change the same lines (around line {}). Nothing was changed.",
                start + 1
            )));
        }
        out.extend_from_slice(&lines[at..*start]);
        out.extend(new.iter().copied());
        at = start + len;
    }
    out.extend_from_slice(&lines[at..]);
    let mut text_out = out.join(eol);
    if !out.is_empty() && (text.ends_with('\n') || text.is_empty()) {
        text_out.push_str(eol);
    }
    Ok(Updated { text: text_out, added, removed, diff })
}

/// The first index at or after `from` where `pattern` occurs in `lines`,
/// trying the exact comparison first; with `at_end`, a match that ends at
/// the last line wins.
fn seek(lines: &[&str], pattern: &[&str], from: usize, at_end: bool) -> Option<usize> {
    if pattern.len() > lines.len() {
        return None;
    }
    let last_start = lines.len() - pattern.len();
    let matches_at = |i: usize, eq: &fn(&str, &str) -> bool| pattern.iter().enumerate().all(|(j, p)| eq(lines[i + j], p));
    for eq in &EQUALITIES {
        if at_end && last_start >= from && matches_at(last_start, eq) {
            return Some(last_start);
        }
        if let Some(i) = (from..=last_start).find(|&i| matches_at(i, eq)) {
            return Some(i);
        }
    }
    None
}

/// The error for a hunk whose old lines are not in the file.
fn mismatch(name: &str, lines: &[&str], old: &[&str], cursor: usize) -> String {
    let mut msg = format!(
        "{name} does not match the file{}: its context and `-` lines were not found",
        if cursor > 0 { format!(" after line {cursor}") } else { String::new() }
    );
    msg.push_str(". ");
    msg.push_str(&nearest_hint(lines, old));
    msg.push_str("Nothing was changed; re-read the file and copy the context and `-` lines exactly.");
    msg
}

/// "The most similar lines are …" with those lines, or nothing when nothing
/// in the file resembles `wanted`.
fn nearest_hint(lines: &[&str], wanted: &[&str]) -> String {
    match nearest_window(lines, wanted) {
        Some((start, score)) if score >= MIN_SIMILARITY => {
            let n = wanted.len().clamp(1, lines.len());
            let mut hint = format!(
                "The most similar lines in the file are {}-{} ({:.0}% similar):\n",
                start + 1,
                start + n,
                score * 100.0
            );
            let width = number_width(start + n);
            for (i, line) in lines[start..start + n].iter().take(SHOWN_NEAREST).enumerate() {
                hint.push_str(&numbered(start + 1 + i, width, line));
                hint.push('\n');
            }
            if n > SHOWN_NEAREST {
                hint.push_str(&format!("... ({} more lines)\n", n - SHOWN_NEAREST));
            }
            hint
        }
        _ if lines.is_empty() => "The file is empty. ".into(),
        _ => "Nothing in the file resembles them. ".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::parse;

    fn ws(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, body) in files {
            let p = dir.path().join(name);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, body).unwrap();
        }
        dir
    }

    fn read(dir: &tempfile::TempDir, name: &str) -> Option<String> {
        fs::read_to_string(dir.path().join(name)).ok()
    }

    fn run(dir: &tempfile::TempDir, patch: &str, dry_run: bool) -> FsResult<String> {
        apply_patch(dir.path(), parse(patch)?, dry_run)
    }

    /// Every file under `dir`, with its content: to assert nothing changed.
    fn snapshot(dir: &tempfile::TempDir) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut stack = vec![dir.path().to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    let rel = p.strip_prefix(dir.path()).unwrap().display().to_string();
                    out.push((rel, fs::read_to_string(&p).unwrap_or_default()));
                }
            }
        }
        out.sort();
        out
    }

    const APP: &str = "def greet():\n    print(\"hi\")\n    return 1\n\n\ndef main():\n    greet()\n    return 0\n";

    const MULTI: &str = "*** Begin Patch
*** Add File: notes/new.md
+# New
+body
*** Update File: app.py
@@ def greet():
-    print(\"hi\")
+    print(\"hello\")
@@ def main():
     greet()
-    return 0
+    greet()
+    return 2
*** Delete File: old.txt
*** End Patch";

    #[test]
    fn applies_add_update_delete_in_one_call() {
        let dir = ws(&[("app.py", APP), ("old.txt", "a\nb\n")]);
        let out = run(&dir, MULTI, false).unwrap();
        assert_eq!(
            out,
            "applied the patch: 3 files changed\nA notes/new.md (+2)\nM app.py (+3 -2)\nD old.txt (-2)"
        );
        assert_eq!(read(&dir, "notes/new.md").unwrap(), "# New\nbody\n");
        assert_eq!(
            read(&dir, "app.py").unwrap(),
            "def greet():\n    print(\"hello\")\n    return 1\n\n\ndef main():\n    greet()\n    greet()\n    return 2\n"
        );
        assert_eq!(read(&dir, "old.txt"), None);
        // No temporary file is left behind.
        assert!(snapshot(&dir).iter().all(|(p, _)| !p.contains("apply_patch")));
    }

    #[test]
    fn dry_run_reports_and_writes_nothing() {
        let dir = ws(&[("app.py", APP), ("old.txt", "a\nb\n")]);
        let before = snapshot(&dir);
        let out = run(&dir, MULTI, true).unwrap();
        assert!(out.starts_with("dry run, nothing was written: the patch applies and would change 3 files\n"), "{out}");
        assert!(out.contains("A notes/new.md (+2)\nM app.py (+3 -2)\nD old.txt (-2)"), "{out}");
        assert!(out.contains("--- app.py\n+++ app.py\n@@ line 2\n-    print(\"hi\")\n+    print(\"hello\")"), "{out}");
        assert!(out.contains("@@ line 7\n     greet()\n-    return 0\n+    greet()\n+    return 2"), "{out}");
        assert!(out.contains("--- notes/new.md\n+++ notes/new.md\n+# New\n+body"), "{out}");
        assert_eq!(snapshot(&dir), before);
    }

    #[test]
    fn one_bad_hunk_changes_nothing_and_shows_the_nearest_lines() {
        let dir = ws(&[("app.py", APP), ("old.txt", "a\nb\n")]);
        let before = snapshot(&dir);
        let bad = MULTI.replace("-    return 0", "-    return 99");
        let err = run(&dir, &bad, false).unwrap_err().to_string();
        assert!(
            err.starts_with("app.py: hunk 2 (patch line 9) does not match the file after line 6"),
            "{err}"
        );
        assert!(err.contains("The most similar lines in the file are 7-8"), "{err}");
        assert!(err.contains("    8|     return 0"), "{err}");
        assert!(err.contains("Nothing was changed"), "{err}");
        assert_eq!(snapshot(&dir), before, "the add before the bad hunk was not written");
    }

    #[test]
    fn anchor_not_found() {
        let dir = ws(&[("app.py", APP)]);
        let p = "*** Begin Patch\n*** Update File: app.py\n@@ def greeting():\n-x\n+y\n*** End Patch";
        let err = run(&dir, p, false).unwrap_err().to_string();
        assert!(err.starts_with("app.py: hunk 1 (patch line 3): its `@@ def greeting():` line is not in the file."), "{err}");
        assert!(err.contains("1| def greet():"), "{err}");
    }

    #[test]
    fn tolerates_whitespace_drift_keeps_crlf_and_missing_final_newline() {
        let dir = ws(&[("w.txt", "a\r\n  b  \r\nc")]);
        let p = "*** Begin Patch\n*** Update File: w.txt\n a\n-b\n+B\n c\n*** End Patch";
        run(&dir, p, false).unwrap();
        assert_eq!(read(&dir, "w.txt").unwrap(), "a\r\nB\r\nc");
    }

    #[test]
    fn end_of_file_hunk_and_pure_additions() {
        let dir = ws(&[("e.txt", "x\ny\nx\n")]);
        // Without the marker the first `x` would match.
        let p = "*** Begin Patch\n*** Update File: e.txt\n@@\n-x\n+z\n*** End of File\n*** End Patch";
        run(&dir, p, false).unwrap();
        assert_eq!(read(&dir, "e.txt").unwrap(), "x\ny\nz\n");
        let p = "*** Begin Patch\n*** Update File: e.txt\n+tail\n*** End Patch";
        run(&dir, p, false).unwrap();
        assert_eq!(read(&dir, "e.txt").unwrap(), "x\ny\nz\ntail\n");
        let p = "*** Begin Patch\n*** Update File: e.txt\n@@ x\n+after x\n*** End Patch";
        run(&dir, p, false).unwrap();
        assert_eq!(read(&dir, "e.txt").unwrap(), "x\nafter x\ny\nz\ntail\n");
    }

    #[test]
    fn nested_anchors_pick_the_right_occurrence() {
        let body = "class A:\n    def run(self):\n        return 1\nclass B:\n    def run(self):\n        return 1\n";
        let dir = ws(&[("m.py", body)]);
        let p = "*** Begin Patch\n*** Update File: m.py\n@@ class B:\n@@     def run(self):\n-        return 1\n+        return 2\n*** End Patch";
        run(&dir, p, false).unwrap();
        assert_eq!(
            read(&dir, "m.py").unwrap(),
            "class A:\n    def run(self):\n        return 1\nclass B:\n    def run(self):\n        return 2\n"
        );
    }

    #[test]
    fn move_renames_with_changes() {
        let dir = ws(&[("a.txt", "one\ntwo\n")]);
        let p = "*** Begin Patch\n*** Update File: a.txt\n*** Move to: sub/b.txt\n one\n-two\n+2\n*** End Patch";
        let out = run(&dir, p, false).unwrap();
        assert_eq!(out, "applied the patch: 2 files changed\nR a.txt -> sub/b.txt (+1 -1)");
        assert_eq!(read(&dir, "a.txt"), None);
        assert_eq!(read(&dir, "sub/b.txt").unwrap(), "one\n2\n");
        // Onto an existing file: refused.
        fs::write(dir.path().join("c.txt"), "c\n").unwrap();
        let p = "*** Begin Patch\n*** Update File: sub/b.txt\n*** Move to: c.txt\n*** End Patch";
        let err = run(&dir, p, false).unwrap_err().to_string();
        assert!(err.contains("c.txt already exists"), "{err}");
        assert_eq!(read(&dir, "sub/b.txt").unwrap(), "one\n2\n");
    }

    #[test]
    fn later_operations_see_earlier_ones() {
        let dir = ws(&[]);
        let p = "*** Begin Patch\n*** Add File: n.txt\n+1\n*** Update File: n.txt\n-1\n+2\n*** End Patch";
        run(&dir, p, false).unwrap();
        assert_eq!(read(&dir, "n.txt").unwrap(), "2\n");
    }

    #[test]
    fn refusals() {
        let dir = ws(&[("a.txt", "a\n"), ("bin", "\0\x01")]);
        fs::create_dir(dir.path().join("d")).unwrap();
        let before = snapshot(&dir);
        let err = |p: &str| run(&dir, p, false).unwrap_err().to_string();
        let wrap = |body: &str| format!("*** Begin Patch\n{body}\n*** End Patch");
        assert!(err(&wrap("*** Add File: a.txt\n+x")).starts_with("cannot add a.txt: it already exists"));
        assert!(err(&wrap("*** Delete File: nope")).starts_with("cannot delete nope: file not found"));
        assert!(err(&wrap("*** Update File: nope\n-x")).starts_with("cannot update nope: file not found"));
        assert_eq!(
            err(&wrap("*** Add File: ../escape.txt\n+x")),
            "path must be relative to the workspace: ../escape.txt"
        );
        assert_eq!(
            err(&wrap("*** Delete File: /etc/passwd")),
            "path must be relative to the workspace: /etc/passwd"
        );
        assert!(err(&wrap("*** Delete File: d")).contains("d is a directory"));
        assert!(err(&wrap("*** Update File: bin\n-x")).starts_with("binary file"));
        assert!(err(&wrap("*** Delete File: .")).contains("workspace root"));
        // A later failure undoes nothing because nothing was written yet.
        assert!(err(&wrap("*** Add File: fresh.txt\n+x\n*** Delete File: nope")).contains("nope"));
        assert_eq!(snapshot(&dir), before);
    }

    #[test]
    fn size_caps() {
        let dir = ws(&[]);
        let big = "x".repeat(MAX_FILE_BYTES as usize + 1);
        let ops = vec![FileOp::Add { path: "big".into(), content: big }];
        let err = apply_patch(dir.path(), ops, false).unwrap_err().to_string();
        assert!(err.starts_with("big would be 10485761 bytes, over the limit"), "{err}");
        let ops: Vec<FileOp> = (0..=MAX_OPS).map(|i| FileOp::Delete { path: format!("f{i}") }).collect();
        assert!(apply_patch(dir.path(), ops, false).unwrap_err().to_string().contains("at most 100"));
    }

    #[test]
    fn a_failed_write_changes_nothing() {
        let dir = ws(&[("a.txt", "a\n"), ("z.txt", "z\n")]);
        // z.txt's temporary file cannot be written (a directory is in the
        // way) after a.txt's was: a.txt must stay as it was.
        fs::create_dir(dir.path().join(".z.txt.apply_patch.tmp")).unwrap();
        let p = "*** Begin Patch\n*** Update File: a.txt\n-a\n+A\n*** Update File: z.txt\n-z\n+Z\n*** End Patch";
        let err = run(&dir, p, false).unwrap_err().to_string();
        assert!(err.starts_with("z.txt: ") && err.ends_with("Nothing was changed."), "{err}");
        assert_eq!(read(&dir, "a.txt").unwrap(), "a\n");
        assert_eq!(read(&dir, "z.txt").unwrap(), "z\n");
        assert!(!dir.path().join(".a.txt.apply_patch.tmp").exists());
    }

    #[test]
    fn structured_edits() {
        let dir = ws(&[("a.txt", "one\ntwo\nthree\n")]);
        let edits = vec![
            Edit { path: "a.txt".into(), action: EditAction::Replace, old_text: Some("two".into()), new_text: Some("2".into()) },
            Edit { path: "a.txt".into(), action: EditAction::Replace, old_text: Some("three\n".into()), new_text: Some("3\n".into()) },
            Edit { path: "b/new.txt".into(), action: EditAction::Add, old_text: None, new_text: Some("hi\n".into()) },
        ];
        let out = apply_patch(dir.path(), edits_to_ops(edits).unwrap(), false).unwrap();
        assert_eq!(out, "applied the patch: 2 files changed\nM a.txt (+1 -1)\nM a.txt (+1 -1)\nA b/new.txt (+1)");
        assert_eq!(read(&dir, "a.txt").unwrap(), "one\n2\n3\n");
        assert_eq!(read(&dir, "b/new.txt").unwrap(), "hi\n");

        let bad = vec![
            Edit { path: "a.txt".into(), action: EditAction::Replace, old_text: Some("2".into()), new_text: Some("two".into()) },
            Edit { path: "a.txt".into(), action: EditAction::Replace, old_text: Some("missing".into()), new_text: Some("x".into()) },
        ];
        let err = apply_patch(dir.path(), edits_to_ops(bad).unwrap(), false).unwrap_err().to_string();
        assert!(err.starts_with("old_text not found in a.txt."), "{err}");
        assert_eq!(read(&dir, "a.txt").unwrap(), "one\n2\n3\n", "the first edit was not written either");

        let e = |action, old: Option<&str>| Edit { path: "a.txt".into(), action, old_text: old.map(Into::into), new_text: Some("x".into()) };
        assert!(edits_to_ops(vec![]).is_err());
        assert!(edits_to_ops(vec![e(EditAction::Replace, None)]).unwrap_err().to_string().contains("needs old_text"));
        assert!(edits_to_ops(vec![e(EditAction::Add, Some("y"))]).unwrap_err().to_string().contains("takes no old_text"));
        assert!(edits_to_ops((0..21).map(|_| e(EditAction::Add, None)).collect()).unwrap_err().to_string().contains("at most 20"));
        let dup = vec![e(EditAction::Replace, Some("o"))];
        fs::write(dir.path().join("a.txt"), "oo\n").unwrap();
        let err = apply_patch(dir.path(), edits_to_ops(dup).unwrap(), false).unwrap_err().to_string();
        assert!(err.contains("matches 2 times"), "{err}");
    }
}
