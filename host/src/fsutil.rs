//! Small filesystem helpers for the host's own state files in the data dir
//! (channel records, cron jobs), never for the workspace (see
//! [`crate::workspace`]).

use std::fs::File;
use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` so that a crash leaves the old or the new file,
/// never half of one: a temp file beside it, `fsync`, rename, `fsync` of the
/// directory. The error names the step that failed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), (&'static str, std::io::Error)> {
    write_atomic_mode(path, bytes, 0o666)
}

/// [`write_atomic`] with the file created with `mode` (less the umask)
/// from the start: a config holding secrets is never readable by others,
/// not even as the temp file.
pub fn write_atomic_mode(path: &Path, bytes: &[u8], mode: u32) -> Result<(), (&'static str, std::io::Error)> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp).map_err(|e| ("creating the temp file", e))?;
    file.write_all(bytes).map_err(|e| ("writing the temp file", e))?;
    file.sync_all().map_err(|e| ("syncing the temp file", e))?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(|e| ("renaming the temp file into place", e))?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| ("syncing the directory", e))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_file_is_replaced_whole_and_no_temp_file_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        super::write_atomic(&path, b"one").unwrap();
        super::write_atomic(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        let e = super::write_atomic(&dir.path().join("missing/state.json"), b"x").unwrap_err();
        assert_eq!(e.0, "creating the temp file");
    }
}
