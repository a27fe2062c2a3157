//! Workspace paths: checking what the model asks for, and walking directories.
//!
//! The sandbox already refuses escapes (absolute paths, `..` above the
//! preopened directory, symlinks out); these checks exist to give the model a
//! friendly message instead of an opaque WASI error.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

/// Directories that walks never descend into: version control, build output
/// and dependencies are huge and rarely what the model is looking for.
pub const SKIP_DIRS: &[&str] = &[".git", "target", "node_modules"];

/// Why a file operation failed; `lib.rs` maps each case to a `ToolError`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FsError {
    /// The operation ran and failed (not found, not a directory, ...).
    Failed(String),
    /// Refused: a path outside the workspace or a permission error.
    Denied(String),
    /// The arguments make no sense (bad regex, offset 0, ...).
    InvalidArgs(String),
}

impl fmt::Display for FsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FsError::Failed(m) | FsError::Denied(m) | FsError::InvalidArgs(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for FsError {}

pub type FsResult<T> = Result<T, FsError>;

/// Turns an I/O error on `rel` into an `FsError` the model can act on.
/// `what` names the thing that was expected ("file", "directory").
pub fn io_error(err: io::Error, what: &str, rel: &str) -> FsError {
    match err.kind() {
        io::ErrorKind::NotFound => FsError::Failed(format!("{what} not found: {rel}")),
        // The sandbox also refuses symlinks that lead out of the workspace.
        io::ErrorKind::PermissionDenied => FsError::Denied(format!(
            "permission denied: {rel} (paths may not leave the workspace, not even through symlinks)"
        )),
        _ => FsError::Failed(format!("{rel}: {}", os_message(&err))),
    }
}

/// Like [`io_error`], for a write: a refusal there most often means the
/// user granted this plugin the workspace read-only, so say so.
pub fn write_error(err: io::Error, rel: &str) -> FsError {
    match err.kind() {
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => {
            FsError::Denied(format!(
                "cannot write {rel}: permission denied (the workspace may be granted read-only)"
            ))
        }
        _ => io_error(err, "file", rel),
    }
}

/// The OS message of `err` without its " (os error N)" suffix, which means
/// nothing to the model.
fn os_message(err: &io::Error) -> String {
    let text = err.to_string();
    match text.rfind(" (os error ") {
        Some(at) if err.raw_os_error().is_some() => text[..at].to_string(),
        _ => text,
    }
}

/// A path the model gave, checked and normalised to lie inside the workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WsPath {
    /// Relative to the workspace root, '/'-separated, without `.` or `..`;
    /// empty for the root itself.
    rel: String,
}

impl WsPath {
    /// Checks `input` (relative to the workspace; "" or "." is the root).
    /// `..` is resolved lexically and may not climb above the root.
    pub fn parse(input: &str) -> FsResult<WsPath> {
        let outside =
            || FsError::Denied(format!("path must be relative to the workspace: {input}"));
        // A leading '/' or '\' is absolute on some platform the model may think of.
        if input.starts_with('/') || input.starts_with('\\') {
            return Err(outside());
        }
        let mut parts: Vec<String> = Vec::new();
        for comp in Path::new(input).components() {
            match comp {
                Component::CurDir => {}
                Component::ParentDir => {
                    parts.pop().ok_or_else(outside)?;
                }
                Component::Normal(s) => {
                    let s = s.to_str().ok_or_else(|| {
                        FsError::InvalidArgs(format!("path is not UTF-8: {input}"))
                    })?;
                    parts.push(s.to_string());
                }
                Component::RootDir | Component::Prefix(_) => return Err(outside()),
            }
        }
        Ok(WsPath {
            rel: parts.join("/"),
        })
    }

    /// The path for the model: relative, '/'-separated, "." for the root.
    pub fn display(&self) -> &str {
        if self.rel.is_empty() { "." } else { &self.rel }
    }

    /// The last component ("" for the root).
    pub fn name(&self) -> &str {
        self.rel.rsplit('/').next().unwrap_or("")
    }

    pub fn is_root(&self) -> bool {
        self.rel.is_empty()
    }

    /// The path on disk, under the workspace directory `root`.
    pub fn on_disk(&self, root: &Path) -> PathBuf {
        if self.rel.is_empty() {
            root.to_path_buf()
        } else {
            root.join(&self.rel)
        }
    }

    /// The child `name` of this path, as the model would write it.
    pub fn child(&self, name: &str) -> WsPath {
        if self.rel.is_empty() {
            WsPath {
                rel: name.to_string(),
            }
        } else {
            WsPath {
                rel: format!("{}/{}", self.rel, name),
            }
        }
    }

    /// The part of this path below `base` ('/'-separated), for glob matching
    /// relative to the directory the model asked to search.
    pub fn strip_base(&self, base: &WsPath) -> &str {
        if base.rel.is_empty() {
            &self.rel
        } else {
            self.rel
                .strip_prefix(&base.rel)
                .map(|r| r.trim_start_matches('/'))
                .unwrap_or(&self.rel)
        }
    }
}

/// One entry met by [`walk`].
pub struct Entry {
    pub path: WsPath,
    pub is_dir: bool,
}

/// What the visitor of [`walk`] wants next.
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Stop,
}

/// Walks the directory `base` depth-first, entries sorted by name, calling
/// `visit` for each entry below it (not for `base` itself). Directories named
/// in [`SKIP_DIRS`] are neither visited nor entered; their paths are returned
/// so the caller can tell the model. Symlinks are visited as files and never
/// followed, so a link cycle cannot trap the walk. Unreadable subdirectories
/// are skipped: one bad directory should not spoil a whole search.
pub fn walk(
    root: &Path,
    base: &WsPath,
    recursive: bool,
    visit: &mut dyn FnMut(&Entry) -> Flow,
) -> FsResult<Vec<String>> {
    let mut skipped = Vec::new();
    let entries =
        read_dir_sorted(root, base).map_err(|e| io_error(e, "directory", base.display()))?;
    let mut stack = vec![entries.into_iter()];
    while let Some(iter) = stack.last_mut() {
        let Some(entry) = iter.next() else {
            stack.pop();
            continue;
        };
        if entry.is_dir && SKIP_DIRS.contains(&entry.path.name()) {
            skipped.push(format!("{}/", entry.path.display()));
            continue;
        }
        if visit(&entry) == Flow::Stop {
            break;
        }
        if entry.is_dir
            && recursive
            && let Ok(children) = read_dir_sorted(root, &entry.path)
        {
            stack.push(children.into_iter());
        }
    }
    Ok(skipped)
}

fn read_dir_sorted(root: &Path, dir: &WsPath) -> io::Result<Vec<Entry>> {
    let mut out = Vec::new();
    for item in fs::read_dir(dir.on_disk(root))? {
        let item = item?;
        // Names that are not UTF-8 cannot be passed back to any tool; skip them.
        let Ok(name) = item.file_name().into_string() else {
            continue;
        };
        // `file_type` does not follow symlinks, so a link to a directory is not entered.
        let is_dir = item.file_type()?.is_dir();
        out.push(Entry {
            path: dir.child(&name),
            is_dir,
        });
    }
    out.sort_by(|a, b| a.path.rel.cmp(&b.path.rel));
    Ok(out)
}

/// The note for the model about directories a walk did not enter.
pub fn skipped_note(skipped: &[String]) -> Option<String> {
    const SHOWN: usize = 10;
    if skipped.is_empty() {
        return None;
    }
    let mut names = skipped
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if skipped.len() > SHOWN {
        names.push_str(&format!(" and {} more", skipped.len() - SHOWN));
    }
    Some(format!(
        "(not entered: {names}; pass one as path to look inside)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_normalises() {
        assert_eq!(WsPath::parse("").unwrap().display(), ".");
        assert_eq!(WsPath::parse(".").unwrap().display(), ".");
        assert_eq!(
            WsPath::parse("./src//main.rs").unwrap().display(),
            "src/main.rs"
        );
        assert_eq!(
            WsPath::parse("src/../lib/x.rs").unwrap().display(),
            "lib/x.rs"
        );
        assert_eq!(WsPath::parse("src/..").unwrap().display(), ".");
        assert!(WsPath::parse("src/..").unwrap().is_root());
        assert_eq!(WsPath::parse("dir/").unwrap().display(), "dir");
    }

    #[test]
    fn parse_rejects_escapes() {
        for bad in ["/etc/passwd", "..", "../x", "a/../../x", "\\windows"] {
            let err = WsPath::parse(bad).unwrap_err();
            assert_eq!(
                err,
                FsError::Denied(format!("path must be relative to the workspace: {bad}")),
                "{bad}"
            );
        }
    }

    #[test]
    fn child_and_strip_base() {
        let root = WsPath::parse(".").unwrap();
        let src = root.child("src");
        let file = src.child("a.rs");
        assert_eq!(file.display(), "src/a.rs");
        assert_eq!(file.strip_base(&src), "a.rs");
        assert_eq!(file.strip_base(&root), "src/a.rs");
        assert_eq!(file.on_disk(Path::new(".")), Path::new("./src/a.rs"));
        assert_eq!(root.on_disk(Path::new("/w")), Path::new("/w"));
    }

    #[test]
    fn io_error_kinds() {
        let e = io_error(io::Error::from(io::ErrorKind::NotFound), "file", "src/x.rs");
        assert_eq!(e, FsError::Failed("file not found: src/x.rs".into()));
        let e = io_error(
            io::Error::from(io::ErrorKind::PermissionDenied),
            "file",
            "x",
        );
        assert!(
            matches!(&e, FsError::Denied(m) if m.starts_with("permission denied: x (")),
            "{e}"
        );
        let e = write_error(io::Error::from(io::ErrorKind::PermissionDenied), "x");
        assert!(e.to_string().contains("read-only"), "{e}");
        let e = io_error(io::Error::from_raw_os_error(21), "file", "d");
        assert!(
            matches!(&e, FsError::Failed(m) if m.starts_with("d: ") && !m.contains("os error")),
            "{e}"
        );
    }

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        for d in [
            "b/c",
            ".git/objects",
            "target/debug",
            "a",
            "sub/node_modules/pkg",
        ] {
            fs::create_dir_all(r.join(d)).unwrap();
        }
        for f in [
            "b/c/deep.txt",
            "b/z.txt",
            "a.txt",
            ".git/HEAD",
            "target/debug/out",
            "sub/node_modules/pkg/i.js",
            "sub/s.rs",
        ] {
            fs::write(r.join(f), "x").unwrap();
        }
        dir
    }

    fn collect(root: &Path, base: &str, recursive: bool) -> (Vec<String>, Vec<String>) {
        let mut seen = Vec::new();
        let skipped = walk(root, &WsPath::parse(base).unwrap(), recursive, &mut |e| {
            seen.push(format!(
                "{}{}",
                e.path.display(),
                if e.is_dir { "/" } else { "" }
            ));
            Flow::Continue
        })
        .unwrap();
        (seen, skipped)
    }

    #[test]
    fn walk_sorted_depth_first_with_skips() {
        let dir = tree();
        let (seen, skipped) = collect(dir.path(), ".", true);
        assert_eq!(
            seen,
            [
                "a/",
                "a.txt",
                "b/",
                "b/c/",
                "b/c/deep.txt",
                "b/z.txt",
                "sub/",
                "sub/s.rs"
            ]
        );
        assert_eq!(skipped, [".git/", "sub/node_modules/", "target/"]);
        let note = skipped_note(&skipped).unwrap();
        assert_eq!(
            note,
            "(not entered: .git/, sub/node_modules/, target/; pass one as path to look inside)"
        );
    }

    #[test]
    fn walk_flat_and_explicit_skip_dir() {
        let dir = tree();
        let (seen, _) = collect(dir.path(), "b", false);
        assert_eq!(seen, ["b/c/", "b/z.txt"]);
        // Asking for a skipped directory by name looks inside it.
        let (seen, skipped) = collect(dir.path(), "target", true);
        assert_eq!(seen, ["target/debug/", "target/debug/out"]);
        assert!(skipped.is_empty());
    }

    #[test]
    fn walk_stops_and_reports_missing() {
        let dir = tree();
        let mut n = 0;
        walk(dir.path(), &WsPath::parse(".").unwrap(), true, &mut |_| {
            n += 1;
            if n == 2 { Flow::Stop } else { Flow::Continue }
        })
        .unwrap();
        assert_eq!(n, 2);
        let err = walk(
            dir.path(),
            &WsPath::parse("nope").unwrap(),
            true,
            &mut |_| Flow::Continue,
        )
        .unwrap_err();
        assert_eq!(err, FsError::Failed("directory not found: nope".into()));
    }

    #[cfg(unix)]
    #[test]
    fn walk_does_not_follow_symlinks() {
        let dir = tree();
        std::os::unix::fs::symlink(dir.path().join("b"), dir.path().join("b/c/loop")).unwrap();
        let (seen, _) = collect(dir.path(), "b", true);
        assert_eq!(seen, ["b/c/", "b/c/deep.txt", "b/c/loop", "b/z.txt"]);
    }
}
