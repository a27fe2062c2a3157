//! `find_files`: files whose path matches a glob.

use std::path::Path;

use globset::{GlobBuilder, GlobMatcher};

use crate::list::require_dir;
use crate::paths::{Flow, FsError, FsResult, WsPath, skipped_note, walk};

pub const DEFAULT_MAX_RESULTS: usize = 200;

/// Compiles a glob with shell semantics: `*` stays within one directory and
/// `**` crosses directories, so `*.rs` and `**/*.rs` mean different things.
pub fn compile_glob(pattern: &str) -> FsResult<GlobMatcher> {
    let pattern = pattern.strip_prefix("./").unwrap_or(pattern);
    if pattern.is_empty() {
        return Err(FsError::InvalidArgs("the glob pattern is empty".into()));
    }
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| FsError::InvalidArgs(format!("invalid glob pattern {pattern:?}: {e}")))
}

/// The files below `path` whose path relative to `path` matches `pattern`,
/// as workspace-relative paths in sorted tree order.
pub fn find_files(
    root: &Path,
    pattern: &str,
    path: &str,
    max_results: Option<usize>,
) -> FsResult<String> {
    let max = max_results.unwrap_or(DEFAULT_MAX_RESULTS);
    if max == 0 {
        return Err(FsError::InvalidArgs(
            "max_results must be at least 1".into(),
        ));
    }
    let glob = compile_glob(pattern)?;
    let base = WsPath::parse(path)?;
    require_dir(root, &base)?;
    let mut lines = Vec::new();
    let mut total = 0usize;
    let skipped = walk(root, &base, true, &mut |entry| {
        if !entry.is_dir && glob.is_match(entry.path.strip_base(&base)) {
            total += 1;
            if lines.len() < max {
                lines.push(entry.path.display().to_string());
            }
        }
        Flow::Continue
    })?;
    if lines.is_empty() {
        let mut msg = format!("no files match {pattern} in {}", base.display());
        if !pattern.contains('/') {
            msg.push_str(&format!(
                " (a pattern without '/' matches only directly in that directory; use **/{pattern} to search subdirectories too)"
            ));
        }
        lines.push(msg);
    }
    if total > max {
        lines.push(format!("... and {} more (truncated at {max})", total - max));
    }
    lines.extend(skipped_note(&skipped));
    Ok(lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn ws() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        for d in ["src/a", "target/debug", "docs"] {
            fs::create_dir_all(r.join(d)).unwrap();
        }
        for f in [
            "build.rs",
            "src/lib.rs",
            "src/a/mod.rs",
            "src/a/x.txt",
            "target/debug/gen.rs",
            "docs/README.md",
        ] {
            fs::write(r.join(f), "x").unwrap();
        }
        dir
    }

    #[test]
    fn recursive_glob() {
        let dir = ws();
        let out = find_files(dir.path(), "**/*.rs", ".", None).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(&lines[..3], ["build.rs", "src/a/mod.rs", "src/lib.rs"]);
        assert!(lines[3].starts_with("(not entered: target/;"), "{out}");
    }

    #[test]
    fn star_stays_in_one_directory() {
        let dir = ws();
        assert_eq!(
            find_files(dir.path(), "*.rs", ".", None)
                .unwrap()
                .lines()
                .next(),
            Some("build.rs")
        );
        assert_eq!(
            find_files(dir.path(), "*.rs", "src", None).unwrap(),
            "src/lib.rs"
        );
        assert_eq!(
            find_files(dir.path(), "./a/*", "src", None).unwrap(),
            "src/a/mod.rs\nsrc/a/x.txt"
        );
        assert_eq!(
            find_files(dir.path(), "{*.md,**/mod.rs}", ".", None)
                .unwrap()
                .lines()
                .next(),
            Some("src/a/mod.rs")
        );
    }

    #[test]
    fn no_match_hint_and_cap() {
        let dir = ws();
        let out = find_files(dir.path(), "*.txt", ".", None).unwrap();
        assert!(out.starts_with("no files match *.txt in ."), "{out}");
        assert!(out.contains("use **/*.txt"), "{out}");
        let out = find_files(dir.path(), "**/*", "src", Some(1)).unwrap();
        assert_eq!(out, "src/a/mod.rs\n... and 2 more (truncated at 1)");
        assert_eq!(
            find_files(dir.path(), "**/*.rs", "target", None).unwrap(),
            "target/debug/gen.rs"
        );
    }

    #[test]
    fn bad_args() {
        let dir = ws();
        assert!(matches!(
            find_files(dir.path(), "a[", ".", None),
            Err(FsError::InvalidArgs(_))
        ));
        assert!(matches!(
            find_files(dir.path(), "", ".", None),
            Err(FsError::InvalidArgs(_))
        ));
        assert!(matches!(
            find_files(dir.path(), "*", ".", Some(0)),
            Err(FsError::InvalidArgs(_))
        ));
        assert_eq!(
            find_files(dir.path(), "*", "nope", None).unwrap_err(),
            FsError::Failed("directory not found: nope".into())
        );
        assert!(matches!(
            find_files(dir.path(), "*", "../..", None),
            Err(FsError::Denied(_))
        ));
    }
}
