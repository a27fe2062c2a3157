//! `list_dir`: the entries of a directory, optionally recursive.

use std::fs;
use std::path::Path;

use crate::paths::{Flow, FsError, FsResult, WsPath, io_error, skipped_note, walk};

pub const DEFAULT_MAX_ENTRIES: usize = 500;

/// One workspace-relative path per line, directories with a trailing '/',
/// sorted, depth-first when `recursive`.
pub fn list_dir(
    root: &Path,
    path: &str,
    recursive: bool,
    max_entries: Option<usize>,
) -> FsResult<String> {
    let max = max_entries.unwrap_or(DEFAULT_MAX_ENTRIES);
    if max == 0 {
        return Err(FsError::InvalidArgs(
            "max_entries must be at least 1".into(),
        ));
    }
    let dir = WsPath::parse(path)?;
    require_dir(root, &dir)?;
    let mut lines = Vec::new();
    let mut total = 0usize;
    let skipped = walk(root, &dir, recursive, &mut |entry| {
        total += 1;
        if lines.len() < max {
            let slash = if entry.is_dir { "/" } else { "" };
            lines.push(format!("{}{slash}", entry.path.display()));
        }
        Flow::Continue
    })?;
    if lines.is_empty() {
        lines.push(format!("(empty directory: {})", dir.display()));
    }
    if total > max {
        lines.push(format!("... and {} more (truncated at {max})", total - max));
    }
    lines.extend(skipped_note(&skipped));
    Ok(lines.join("\n"))
}

/// Fails with a helpful message unless `dir` is an existing directory.
pub fn require_dir(root: &Path, dir: &WsPath) -> FsResult<()> {
    let meta =
        fs::metadata(dir.on_disk(root)).map_err(|e| io_error(e, "directory", dir.display()))?;
    if !meta.is_dir() {
        return Err(FsError::Failed(format!(
            "{} is a file, not a directory; use read_file to read it",
            dir.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        for d in ["src/bin", ".git", "empty"] {
            fs::create_dir_all(r.join(d)).unwrap();
        }
        for f in [
            "Cargo.toml",
            "src/lib.rs",
            "src/bin/main.rs",
            ".git/HEAD",
            ".env",
        ] {
            fs::write(r.join(f), "x").unwrap();
        }
        dir
    }

    #[test]
    fn flat_listing() {
        let dir = ws();
        let out = list_dir(dir.path(), ".", false, None).unwrap();
        assert_eq!(
            out.lines().take(4).collect::<Vec<_>>(),
            [".env", "Cargo.toml", "empty/", "src/"]
        );
        assert!(
            out.lines()
                .nth(4)
                .unwrap()
                .starts_with("(not entered: .git/;"),
            "{out}"
        );
        assert_eq!(
            list_dir(dir.path(), "src", false, None).unwrap(),
            "src/bin/\nsrc/lib.rs"
        );
    }

    #[test]
    fn recursive_listing() {
        let dir = ws();
        let out = list_dir(dir.path(), "src/", true, None).unwrap();
        assert_eq!(out, "src/bin/\nsrc/bin/main.rs\nsrc/lib.rs");
    }

    #[test]
    fn truncates() {
        let dir = ws();
        let out = list_dir(dir.path(), ".", true, Some(2)).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            &lines[..3],
            [".env", "Cargo.toml", "... and 5 more (truncated at 2)"]
        );
    }

    #[test]
    fn errors_and_empty() {
        let dir = ws();
        assert_eq!(
            list_dir(dir.path(), "empty", false, None).unwrap(),
            "(empty directory: empty)"
        );
        assert_eq!(
            list_dir(dir.path(), "nope", false, None).unwrap_err(),
            FsError::Failed("directory not found: nope".into())
        );
        assert!(
            list_dir(dir.path(), "Cargo.toml", false, None)
                .unwrap_err()
                .to_string()
                .contains("is a file")
        );
        assert!(matches!(
            list_dir(dir.path(), ".", false, Some(0)),
            Err(FsError::InvalidArgs(_))
        ));
        assert!(matches!(
            list_dir(dir.path(), "/", false, None),
            Err(FsError::Denied(_))
        ));
    }
}
