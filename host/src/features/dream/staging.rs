//! Dream's staging copy and its write-back, and the rule both enforce: only
//! the memory files and `skills/` may be written ([`allowed`]), checked at
//! each tool call ([`write_guard`]) and again at write-back.

use std::collections::BTreeMap;
use std::path::{Component, Path};

use serde_json::Value;

use super::{DreamError, MAX_MEMORY_FILE_BYTES, MEMORY_FILES};
use crate::agent::skills::{MAX_SKILL_BYTES, SKILLS_DIR};
use crate::workspace::{EntryKind, Workspace};

/// Files of `skills/` staged at most, and how deep.
pub(super) const MAX_SKILL_FILES: usize = 200;
pub(super) const MAX_SKILL_DEPTH: usize = 4;

/// True for the paths Dream may write: the memory files and `skills/…`.
pub fn allowed(rel: &str) -> bool {
    MEMORY_FILES.contains(&rel) || rel.strip_prefix(SKILLS_DIR).and_then(|r| r.strip_prefix('/')).is_some_and(|r| !r.is_empty())
}

/// A path as the model wrote it, made relative and plain (`./a`, `/a`
/// and `a` are the same file to the fs plugin); `None` when it climbs out.
pub(super) fn normalise(raw: &str) -> Option<String> {
    let trimmed = raw.trim().trim_start_matches('/');
    let mut parts = Vec::new();
    for component in Path::new(trimmed).components() {
        match component {
            Component::Normal(part) => parts.push(part.to_str()?.to_string()),
            Component::CurDir => {}
            _ => return None,
        }
    }
    Some(parts.join("/"))
}

/// The call guard of a Dream run: a write (`write_file`, `edit_file`,
/// `apply_patch`) must target only allowed files and delete nothing. The
/// write-back checks again; this gives the model the refusal at once.
pub(super) fn write_guard(tool: &str, args: &Value) -> Result<(), String> {
    let mut targets: Vec<String> = Vec::new();
    match tool {
        "write_file" | "edit_file" => targets.extend(args.get("path").and_then(Value::as_str).map(str::to_string)),
        "apply_patch" => {
            if let Some(edits) = args.get("edits").and_then(Value::as_array) {
                targets.extend(edits.iter().filter_map(|e| e.get("path").and_then(Value::as_str)).map(str::to_string));
            }
            if let Some(patch) = args.get("patch").and_then(Value::as_str) {
                for line in patch.lines() {
                    let line = line.strip_suffix('\r').unwrap_or(line);
                    if line.starts_with("*** Delete File: ") {
                        return Err("Dream does not delete files; edit them instead".into());
                    }
                    for header in ["*** Add File: ", "*** Update File: ", "*** Move to: "] {
                        if let Some(path) = line.strip_prefix(header) {
                            targets.push(path.to_string());
                        }
                    }
                }
            }
        }
        _ => return Ok(()),
    }
    for target in targets {
        let ok = normalise(&target).is_some_and(|rel| allowed(&rel));
        if !ok {
            let shown = crate::text::clip_for_terminal(&target, 120, "path");
            return Err(format!("Dream may only write {} and files under skills/, not `{shown}`", MEMORY_FILES.join(", ")));
        }
    }
    Ok(())
}

/// The staging copy a Dream run works on.
pub(super) struct Staging {
    pub(super) dir: tempfile::TempDir,
    /// What was copied in, by relative path.
    pub(super) originals: BTreeMap<String, Vec<u8>>,
}

impl Staging {
    /// Copies the memory files and `skills/` (regular files only, capped;
    /// links are skipped, never followed) into a fresh directory.
    pub(super) fn new(workspace: &Workspace) -> Result<Staging, DreamError> {
        let dir = tempfile::Builder::new().prefix("chitin-dream-").tempdir().map_err(|e| DreamError::Staging(format!("creating a directory: {e}")))?;
        let mut staging = Staging { dir, originals: BTreeMap::new() };
        for name in MEMORY_FILES {
            staging.copy_in(workspace, name, MAX_MEMORY_FILE_BYTES)?;
        }
        std::fs::create_dir_all(staging.dir.path().join(SKILLS_DIR)).map_err(|e| DreamError::Staging(format!("creating skills/: {e}")))?;
        let mut pending = vec![(SKILLS_DIR.to_string(), 0usize)];
        let mut files = 0usize;
        while let Some((rel, depth)) = pending.pop() {
            if workspace.kind_no_follow(Path::new(&rel)).ok().flatten() != Some(EntryKind::Dir) {
                continue;
            }
            for name in workspace.list_dir(Path::new(&rel)).unwrap_or_default() {
                let child = format!("{rel}/{name}");
                match workspace.kind_no_follow(Path::new(&child)) {
                    Ok(Some(EntryKind::Dir)) if depth < MAX_SKILL_DEPTH => pending.push((child, depth + 1)),
                    Ok(Some(EntryKind::File)) if files < MAX_SKILL_FILES => {
                        files += 1;
                        staging.copy_in(workspace, &child, MAX_SKILL_BYTES)?;
                    }
                    _ => tracing::debug!(path = %child, "dream: not staged (a link, a special file, or past the limits)"),
                }
            }
        }
        Ok(staging)
    }

    pub(super) fn copy_in(&mut self, workspace: &Workspace, rel: &str, cap: usize) -> Result<(), DreamError> {
        if workspace.kind_no_follow(Path::new(rel)).ok().flatten() != Some(EntryKind::File) {
            return Ok(());
        }
        let read = match workspace.read_capped(Path::new(rel), cap) {
            Ok(Some(read)) if !read.truncated => read,
            Ok(Some(_)) => {
                tracing::warn!(path = rel, "dream: over {cap} bytes, not staged");
                return Ok(());
            }
            Ok(None) => return Ok(()),
            Err(e) => {
                tracing::warn!(path = rel, "dream: not staged: {e}");
                return Ok(());
            }
        };
        let target = self.dir.path().join(rel);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| DreamError::Staging(format!("creating {}: {e}", parent.display())))?;
        }
        std::fs::write(&target, &read.bytes).map_err(|e| DreamError::Staging(format!("writing {rel}: {e}")))?;
        self.originals.insert(rel.to_string(), read.bytes);
        Ok(())
    }

    /// Writes the allowed files the run changed or created into
    /// `workspace`; returns them, and the files it left that it may not
    /// write (dropped). A link or special file in the staging copy (the
    /// plugin made it) is never followed.
    pub(super) fn apply(&self, workspace: &Workspace, history: &super::history::DreamHistory) -> Result<(Vec<String>, Vec<String>), DreamError> {
        use super::history::{Edit, MAX_PREVIOUS_BYTES, RunKind};
        let mut found = Vec::new();
        collect_files(self.dir.path(), self.dir.path(), 0, &mut found);
        let mut refused = Vec::new();
        // (path, new bytes, the version it replaces).
        let mut writes: Vec<(String, Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        for rel in found {
            let cap = if rel.starts_with("skills/") { MAX_SKILL_BYTES } else { MAX_MEMORY_FILE_BYTES };
            if !allowed(&rel) {
                refused.push(rel);
                continue;
            }
            let bytes = std::fs::read(self.dir.path().join(&rel)).map_err(|e| DreamError::Staging(format!("reading back {rel}: {e}")))?;
            if self.originals.get(&rel) == Some(&bytes) {
                continue;
            }
            if bytes.len() > cap {
                tracing::warn!(path = %rel, "dream: the new file is {} bytes, over {cap}; not written", bytes.len());
                refused.push(rel);
                continue;
            }
            // The version in the workspace now (it may have changed since
            // staging): what the history keeps and a restore puts back.
            match previous_version(workspace, &rel, MAX_PREVIOUS_BYTES) {
                Ok(previous) => writes.push((rel, bytes, previous)),
                Err(e) => {
                    tracing::warn!(path = %rel, "dream: not written: {e}");
                    refused.push(rel);
                }
            }
        }
        if writes.is_empty() {
            return Ok((Vec::new(), refused));
        }
        let edits: Vec<Edit<'_>> = writes.iter().map(|(rel, bytes, previous)| Edit { path: rel, previous: previous.as_deref(), next: Some(bytes) }).collect();
        history.record(RunKind::Dream, None, &edits).map_err(|e| DreamError::Apply(format!("the edit history could not be saved, nothing written: {e}")))?;
        let mut changed = Vec::new();
        for (rel, bytes, _) in writes {
            match workspace.write_no_follow(Path::new(&rel), &bytes) {
                Ok(()) => changed.push(rel),
                // A link or special file a plugin put there: never written
                // through, reported with the rest.
                Err(e @ (crate::workspace::WorkspaceError::NotRegular { .. } | crate::workspace::WorkspaceError::NotInside { .. })) => {
                    tracing::warn!(path = %rel, "dream: not written: {e}");
                    refused.push(rel);
                }
                Err(e) => return Err(DreamError::Apply(e.to_string())),
            }
        }
        refused.sort();
        Ok((changed, refused))
    }
}

/// The file at `rel` as it is now, for the history: `None` when there is
/// none; an error (the file is then not overwritten) when something other
/// than a regular file is there or it is over `cap` (no way back).
pub(super) fn previous_version(workspace: &Workspace, rel: &str, cap: usize) -> Result<Option<Vec<u8>>, DreamError> {
    match workspace.kind_no_follow(Path::new(rel)).map_err(|e| DreamError::Apply(e.to_string()))? {
        None => Ok(None),
        Some(EntryKind::File) => match workspace.read_capped(Path::new(rel), cap).map_err(|e| DreamError::Apply(e.to_string()))? {
            Some(read) if !read.truncated => Ok(Some(read.bytes)),
            Some(_) => Err(DreamError::Apply(format!("{rel} is over {cap} bytes; its previous version could not be kept"))),
            None => Ok(None),
        },
        Some(_) => Err(DreamError::Apply(format!("{rel} is not a regular file"))),
    }
}

/// Regular files under `dir` (relative to `root`, `/`-separated), links
/// and special files skipped, bounded in depth and count.
pub(super) fn collect_files(root: &Path, dir: &Path, depth: usize, out: &mut Vec<String>) {
    if depth > MAX_SKILL_DEPTH + 2 || out.len() > 4 * MAX_SKILL_FILES {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let Ok(kind) = entry.file_type() else { continue };
        let path = entry.path();
        if kind.is_dir() {
            collect_files(root, &path, depth + 1, out);
        } else if kind.is_file()
            && let Ok(rel) = path.strip_prefix(root)
            && let Some(rel) = rel.to_str()
        {
            out.push(rel.replace(std::path::MAIN_SEPARATOR, "/"));
        }
    }
}
