//! The host's door into the agent's workspace.
//!
//! Plugins write the workspace, so everything in it is hostile input: a
//! plugin can plant a relative symlink whose target lies outside (WASI lets
//! it create one, it just cannot follow it), and special files (a FIFO, a
//! device) can sit there too. Host code that followed such a link with
//! plain `std::fs` would read or write outside the sandbox on the plugin's
//! behalf; a FIFO would block the reading thread forever.
//!
//! So every host access to a path inside the workspace goes through
//! [`Workspace`], a capability handle (cap-std [`Dir`]) on its root:
//! - paths are relative and resolved beneath the root; a symlink (or `..`)
//!   that leads outside is an error, never followed;
//! - files are opened non-blocking and checked after opening (`fstat` on the
//!   open handle, so there is no window between check and use): anything but
//!   a regular file is refused;
//! - reads are capped: no file, however large, is read past its budget.
//!
//! Bootstrap files, memory, skills, the history archive and the tool-result
//! spill all use it; nothing in the host opens a workspace path otherwise.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::{Dir, File, Metadata, OpenOptions, OpenOptionsExt};

/// Why a workspace access failed.
#[derive(Debug, thiserror::Error)]
// Each variant's fields are named and explained by its #[error] message.
#[allow(missing_docs)]
pub enum WorkspaceError {
    /// The path is absolute or climbs out with `..`.
    #[error("`{path}` is not a path inside the workspace")]
    NotInside { path: PathBuf },
    /// The path names something other than a regular file (a FIFO, socket,
    /// device or directory); the host never opens those.
    #[error("`{path}` in the workspace is {kind}, not a regular file; left alone")]
    NotRegular { path: PathBuf, kind: &'static str },
    /// An I/O error, including a symlink that leads out of the workspace.
    #[error("cannot {op} `{path}` in the workspace: {source}")]
    Io { op: &'static str, path: PathBuf, source: std::io::Error },
}

impl WorkspaceError {
    /// True when the path simply does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, WorkspaceError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// A capability handle on the workspace root. Cheap to clone.
#[derive(Clone)]
pub struct Workspace {
    root: PathBuf,
    dir: Arc<Dir>,
}

impl std::fmt::Debug for Workspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Workspace").field(&self.root).finish()
    }
}

impl PartialEq for Workspace {
    fn eq(&self, other: &Self) -> bool {
        self.root == other.root
    }
}

impl Eq for Workspace {}

/// What a directory entry is, seen without following symlinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (not followed).
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// The result of a capped read.
#[derive(Debug)]
pub struct Capped {
    /// At most the cap's worth of bytes from the start of the file.
    pub bytes: Vec<u8>,
    /// The file's full length.
    pub len: u64,
    /// True when the file was longer than the cap.
    pub truncated: bool,
}

impl Workspace {
    /// Opens the workspace at `root` (which must exist).
    pub fn open(root: impl Into<PathBuf>) -> Result<Workspace, WorkspaceError> {
        let root = root.into();
        let dir = Dir::open_ambient_dir(&root, ambient_authority())
            .map_err(|source| WorkspaceError::Io { op: "open", path: root.clone(), source })?;
        Ok(Workspace { root, dir: Arc::new(dir) })
    }

    /// The root, for messages and for the sandbox's preopen.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Metadata of the regular file at `rel` (symlinks inside the workspace
    /// are followed; ones leading out are an error). `Ok(None)` when nothing
    /// is there.
    pub fn file_metadata(&self, rel: &Path) -> Result<Option<Metadata>, WorkspaceError> {
        let rel = inside(rel)?;
        match self.dir.metadata(rel) {
            Ok(meta) if meta.is_file() => Ok(Some(meta)),
            Ok(meta) => Err(WorkspaceError::NotRegular { path: rel.to_path_buf(), kind: kind_of(&meta) }),
            Err(e) if absent(&e) => Ok(None),
            Err(source) => Err(WorkspaceError::Io { op: "stat", path: rel.to_path_buf(), source }),
        }
    }

    /// True when `rel` is a directory inside the workspace.
    pub fn is_dir(&self, rel: &Path) -> bool {
        inside(rel).is_ok_and(|rel| self.dir.metadata(rel).is_ok_and(|m| m.is_dir()))
    }

    /// The regular file at `rel`, open for reading, and its length, for a
    /// caller that streams it (a file sent to a chat). `Ok(None)` when it
    /// does not exist. The check is on the open handle: what is read is
    /// what was checked.
    pub fn open_read(&self, rel: &Path) -> Result<Option<(std::fs::File, u64)>, WorkspaceError> {
        Ok(self.open_regular(rel, OpenOptions::new().read(true), "read")?.map(|(file, meta)| (file.into_std(), meta.len())))
    }

    /// Up to `cap` bytes from the start of the regular file at `rel`.
    /// `Ok(None)` when it does not exist.
    pub fn read_capped(&self, rel: &Path, cap: usize) -> Result<Option<Capped>, WorkspaceError> {
        let Some((mut file, meta)) = self.open_regular(rel, OpenOptions::new().read(true), "read")? else {
            return Ok(None);
        };
        let mut bytes = Vec::with_capacity((meta.len() as usize).min(cap) + 1);
        (&mut file).take(cap as u64 + 1).read_to_end(&mut bytes).map_err(io("read", rel))?;
        let truncated = bytes.len() > cap;
        bytes.truncate(cap);
        Ok(Some(Capped { bytes, len: meta.len(), truncated }))
    }

    /// The last `max` bytes of the regular file at `rel` (all of it when
    /// shorter), and whether the read started past the beginning. Empty when
    /// it does not exist.
    pub fn read_tail(&self, rel: &Path, max: u64) -> Result<(Vec<u8>, bool), WorkspaceError> {
        let Some((mut file, meta)) = self.open_regular(rel, OpenOptions::new().read(true), "read")? else {
            return Ok((Vec::new(), false));
        };
        let start = meta.len().saturating_sub(max);
        file.seek(SeekFrom::Start(start)).map_err(io("read", rel))?;
        let mut bytes = Vec::with_capacity((meta.len() - start) as usize);
        file.take(max).read_to_end(&mut bytes).map_err(io("read", rel))?;
        Ok((bytes, start > 0))
    }

    /// Up to `cap` bytes of the regular file at `rel` from byte `offset`,
    /// and the file's length (`offset` past the end reads nothing). `Ok(None)`
    /// when it does not exist.
    pub fn read_from(&self, rel: &Path, offset: u64, cap: usize) -> Result<Option<(Vec<u8>, u64)>, WorkspaceError> {
        let Some((mut file, meta)) = self.open_regular(rel, OpenOptions::new().read(true), "read")? else {
            return Ok(None);
        };
        if offset >= meta.len() {
            return Ok(Some((Vec::new(), meta.len())));
        }
        file.seek(SeekFrom::Start(offset)).map_err(io("read", rel))?;
        let mut bytes = Vec::with_capacity(((meta.len() - offset) as usize).min(cap));
        file.take(cap as u64).read_to_end(&mut bytes).map_err(io("read", rel))?;
        Ok(Some((bytes, meta.len())))
    }

    /// What is at `rel`, without following a symlink there: `None` when
    /// nothing is.
    pub fn kind_no_follow(&self, rel: &Path) -> Result<Option<EntryKind>, WorkspaceError> {
        let rel = inside(rel)?;
        match self.dir.symlink_metadata(rel) {
            Ok(meta) if meta.file_type().is_symlink() => Ok(Some(EntryKind::Symlink)),
            Ok(meta) if meta.is_dir() => Ok(Some(EntryKind::Dir)),
            Ok(meta) if meta.is_file() => Ok(Some(EntryKind::File)),
            Ok(_) => Ok(Some(EntryKind::Other)),
            Err(e) if absent(&e) => Ok(None),
            Err(source) => Err(WorkspaceError::Io { op: "stat", path: rel.to_path_buf(), source }),
        }
    }

    /// Writes `rel` like [`Workspace::write`], but refuses when `rel` or any
    /// directory on the way is a symlink (even one that stays inside), so a
    /// write meant for `skills/x.md` can never land in another file a
    /// plugin linked there. A plugin racing this check can at worst redirect
    /// the write within the workspace (cap-std still keeps it inside).
    pub fn write_no_follow(&self, rel: &Path, bytes: &[u8]) -> Result<(), WorkspaceError> {
        let rel = inside(rel)?;
        let mut prefix = PathBuf::new();
        for component in rel.components() {
            prefix.push(component);
            match self.kind_no_follow(&prefix)? {
                Some(EntryKind::Symlink) => {
                    return Err(WorkspaceError::NotRegular { path: prefix, kind: "a symlink" });
                }
                Some(EntryKind::Other) => return Err(WorkspaceError::NotRegular { path: prefix, kind: "a special file" }),
                _ => {}
            }
        }
        self.write(rel, bytes)
    }

    /// Removes the regular file at `rel`, refusing like
    /// [`Workspace::write_no_follow`] when `rel` or a directory on the way
    /// is a symlink or `rel` is not a regular file; nothing there is fine.
    pub fn remove_file_no_follow(&self, rel: &Path) -> Result<(), WorkspaceError> {
        let rel = inside(rel)?;
        let mut prefix = PathBuf::new();
        for component in rel.components() {
            prefix.push(component);
            match self.kind_no_follow(&prefix)? {
                None => return Ok(()),
                Some(EntryKind::Symlink) => return Err(WorkspaceError::NotRegular { path: prefix, kind: "a symlink" }),
                Some(EntryKind::Other) => return Err(WorkspaceError::NotRegular { path: prefix, kind: "a special file" }),
                Some(EntryKind::Dir) if prefix.as_path() == rel => return Err(WorkspaceError::NotRegular { path: prefix, kind: "a directory" }),
                _ => {}
            }
        }
        match self.dir.remove_file(rel) {
            Err(e) if !absent(&e) => Err(WorkspaceError::Io { op: "remove", path: rel.to_path_buf(), source: e }),
            _ => Ok(()),
        }
    }

    /// Appends `bytes` in one `write` (O_APPEND), creating the file and its
    /// directories.
    pub fn append(&self, rel: &Path, bytes: &[u8]) -> Result<(), WorkspaceError> {
        self.create_parent(rel)?;
        let (mut file, _) = self
            .open_regular(rel, OpenOptions::new().append(true).create(true), "append to")?
            .expect("create(true) opens or fails");
        file.write_all(bytes).map_err(io("append to", rel))
    }

    /// Writes `bytes` as the whole content of the regular file at `rel`,
    /// creating it and its directories.
    pub fn write(&self, rel: &Path, bytes: &[u8]) -> Result<(), WorkspaceError> {
        self.create_parent(rel)?;
        // Not `truncate(true)` at open: the check below must come first, so
        // a special file planted there is refused before anything happens.
        let (mut file, _) = self
            .open_regular(rel, OpenOptions::new().write(true).create(true), "write")?
            .expect("create(true) opens or fails");
        file.set_len(0).map_err(io("write", rel))?;
        file.write_all(bytes).map_err(io("write", rel))
    }

    /// Names of the entries of directory `rel`, sorted; empty when it does
    /// not exist.
    pub fn list_dir(&self, rel: &Path) -> Result<Vec<String>, WorkspaceError> {
        let rel = inside(rel)?;
        let entries = match self.dir.read_dir(rel) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(WorkspaceError::Io { op: "list", path: rel.to_path_buf(), source }),
        };
        let mut names: Vec<String> = entries.filter_map(Result::ok).filter_map(|e| e.file_name().into_string().ok()).collect();
        names.sort();
        Ok(names)
    }

    /// Creates directory `rel` and its parents.
    pub fn create_dir_all(&self, rel: &Path) -> Result<(), WorkspaceError> {
        let rel = inside(rel)?;
        if rel.as_os_str().is_empty() {
            return Ok(());
        }
        self.dir.create_dir_all(rel).map_err(io("create directory", rel))
    }

    fn create_parent(&self, rel: &Path) -> Result<(), WorkspaceError> {
        match inside(rel)?.parent() {
            Some(parent) => self.create_dir_all(parent),
            None => Ok(()),
        }
    }

    /// Opens `rel` non-blocking (so a FIFO cannot hang the open) and refuses
    /// it unless the open handle is a regular file. `Ok(None)` when it does
    /// not exist and `options` does not create.
    fn open_regular(&self, rel: &Path, options: &mut OpenOptions, op: &'static str) -> Result<Option<(File, Metadata)>, WorkspaceError> {
        let rel = inside(rel)?;
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
        let file = match self.dir.open_with(rel, options) {
            Ok(file) => file,
            Err(e) if absent(&e) => return Ok(None),
            Err(source) => return Err(WorkspaceError::Io { op, path: rel.to_path_buf(), source }),
        };
        let meta = file.metadata().map_err(io(op, rel))?;
        if !meta.is_file() {
            return Err(WorkspaceError::NotRegular { path: rel.to_path_buf(), kind: kind_of(&meta) });
        }
        Ok(Some((file, meta)))
    }
}

/// `rel` if it is a plain relative path (no root, no `..`).
fn inside(rel: &Path) -> Result<&Path, WorkspaceError> {
    if rel.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir)) {
        Ok(rel)
    } else {
        Err(WorkspaceError::NotInside { path: rel.to_path_buf() })
    }
}

/// Nothing there: not found, or a path through a plain file (`a.txt/b`).
fn absent(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory)
}

fn io<'a>(op: &'static str, rel: &'a Path) -> impl FnOnce(std::io::Error) -> WorkspaceError + 'a {
    move |source| WorkspaceError::Io { op, path: rel.to_path_buf(), source }
}

fn kind_of(meta: &Metadata) -> &'static str {
    use cap_std::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_symlink() {
        "a symlink"
    } else {
        "a special file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, Workspace, PathBuf) {
        let root = tempfile::tempdir().unwrap();
        let ws_path = root.path().join("ws");
        std::fs::create_dir_all(&ws_path).unwrap();
        std::fs::write(root.path().join("secret.txt"), "outside secret").unwrap();
        let ws = Workspace::open(&ws_path).unwrap();
        (root, ws, ws_path)
    }

    #[test]
    fn a_symlink_out_is_never_followed() {
        let (root, ws, ws_path) = setup();
        symlink("../secret.txt", ws_path.join("AGENTS.md")).unwrap();
        symlink(root.path(), ws_path.join("out")).unwrap();
        assert!(ws.read_capped(Path::new("AGENTS.md"), 1024).is_err());
        assert!(ws.file_metadata(Path::new("AGENTS.md")).is_err());
        assert!(ws.write(Path::new("out/planted.txt"), b"x").is_err());
        assert!(ws.append(Path::new("out/secret.txt"), b"x").is_err());
        assert!(ws.write(Path::new("AGENTS.md"), b"x").is_err());
        assert_eq!(std::fs::read_to_string(root.path().join("secret.txt")).unwrap(), "outside secret");
        assert!(!root.path().join("planted.txt").exists());
    }

    #[test]
    fn a_dangling_symlink_out_is_not_written_through() {
        let (root, ws, ws_path) = setup();
        symlink("../new.txt", ws_path.join("AGENTS.md")).unwrap();
        let meta = ws.file_metadata(Path::new("AGENTS.md"));
        assert!(ws.write(Path::new("AGENTS.md"), b"x").is_err(), "{meta:?}");
        assert!(ws.append(Path::new("AGENTS.md"), b"x").is_err());
        assert!(!root.path().join("new.txt").exists());
    }

    #[test]
    fn a_symlink_inside_is_followed() {
        let (_root, ws, ws_path) = setup();
        std::fs::write(ws_path.join("real.md"), "inside").unwrap();
        symlink("real.md", ws_path.join("link.md")).unwrap();
        assert_eq!(ws.read_capped(Path::new("link.md"), 1024).unwrap().unwrap().bytes, b"inside");
    }

    #[test]
    fn paths_must_stay_inside() {
        let (_root, ws, _) = setup();
        assert!(matches!(ws.read_capped(Path::new("../secret.txt"), 10), Err(WorkspaceError::NotInside { .. })));
        assert!(matches!(ws.read_capped(Path::new("/etc/passwd"), 10), Err(WorkspaceError::NotInside { .. })));
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let (_root, ws, ws_path) = setup();
        let fifo = ws_path.join("memory.fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let err = ws.read_capped(Path::new("memory.fifo"), 10).unwrap_err();
        assert!(matches!(err, WorkspaceError::NotRegular { kind: "a FIFO", .. }), "{err}");
        assert!(ws.append(Path::new("memory.fifo"), b"x").is_err());
        assert!(ws.write(Path::new("memory.fifo"), b"x").is_err());
        assert!(ws.file_metadata(Path::new("memory.fifo")).is_err());
    }

    #[test]
    fn reads_are_capped_and_tails_bounded() {
        let (_root, ws, _) = setup();
        ws.write(Path::new("a/b/big.txt"), &vec![b'x'; 10_000]).unwrap();
        let capped = ws.read_capped(Path::new("a/b/big.txt"), 100).unwrap().unwrap();
        assert_eq!((capped.bytes.len(), capped.truncated, capped.len), (100, true, 10_000));
        let (tail, cut) = ws.read_tail(Path::new("a/b/big.txt"), 10).unwrap();
        assert_eq!((tail.len(), cut), (10, true));
        assert!(ws.read_capped(Path::new("missing"), 10).unwrap().is_none());
        ws.append(Path::new("log.jsonl"), b"1\n").unwrap();
        ws.append(Path::new("log.jsonl"), b"2\n").unwrap();
        assert_eq!(ws.read_tail(Path::new("log.jsonl"), 100).unwrap().0, b"1\n2\n");
        ws.write(Path::new("log.jsonl"), b"new").unwrap();
        assert_eq!(ws.read_capped(Path::new("log.jsonl"), 100).unwrap().unwrap().bytes, b"new");
    }
}
