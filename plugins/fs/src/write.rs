//! `write_file`: create or overwrite a file, creating its parent directories.

use std::fs;
use std::path::Path;

use crate::paths::{FsError, FsResult, WsPath, write_error};

pub fn write_file(root: &Path, path: &str, content: &str) -> FsResult<String> {
    let path = WsPath::parse(path)?;
    let rel = path.display();
    if path.is_root() {
        return Err(FsError::InvalidArgs(
            "path must name a file, not the workspace root".into(),
        ));
    }
    let disk = path.on_disk(root);
    if disk.is_dir() {
        return Err(FsError::Failed(format!(
            "{rel} is a directory; give the path of a file"
        )));
    }
    if let Some(parent) = disk.parent() {
        fs::create_dir_all(parent).map_err(|e| match e.kind() {
            // A file sits where a parent directory should be.
            std::io::ErrorKind::AlreadyExists | std::io::ErrorKind::NotADirectory => {
                FsError::Failed(format!(
                    "cannot create the parent directories of {rel}: a file is in the way"
                ))
            }
            _ => write_error(e, rel),
        })?;
    }
    fs::write(&disk, content).map_err(|e| write_error(e, rel))?;
    Ok(format!("wrote {} bytes to {rel}", content.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_parents_and_overwrites() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        assert_eq!(
            write_file(r, "a/b/c.txt", "hello").unwrap(),
            "wrote 5 bytes to a/b/c.txt"
        );
        assert_eq!(fs::read_to_string(r.join("a/b/c.txt")).unwrap(), "hello");
        assert_eq!(
            write_file(r, "./a/b/c.txt", "é").unwrap(),
            "wrote 2 bytes to a/b/c.txt"
        );
        assert_eq!(fs::read_to_string(r.join("a/b/c.txt")).unwrap(), "é");
        assert_eq!(
            write_file(r, "empty", "").unwrap(),
            "wrote 0 bytes to empty"
        );
    }

    #[test]
    fn refuses_bad_targets() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        fs::create_dir(r.join("d")).unwrap();
        fs::write(r.join("f"), "x").unwrap();
        assert!(matches!(
            write_file(r, ".", "x"),
            Err(FsError::InvalidArgs(_))
        ));
        assert!(
            write_file(r, "d", "x")
                .unwrap_err()
                .to_string()
                .contains("is a directory")
        );
        let err = write_file(r, "f/inner.txt", "x").unwrap_err().to_string();
        assert!(err.contains("f/inner.txt"), "{err}");
        assert_eq!(
            write_file(r, "../out.txt", "x").unwrap_err(),
            FsError::Denied("path must be relative to the workspace: ../out.txt".into())
        );
    }
}
