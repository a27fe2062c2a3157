//! `grep`: lines matching a regular expression, in a file or a tree.

use std::fs;
use std::path::Path;

use globset::GlobMatcher;
use regex::{Regex, RegexBuilder};

use crate::find::compile_glob;
use crate::paths::{Flow, FsError, FsResult, WsPath, io_error, skipped_note, walk};
use crate::text::{MAX_FILE_BYTES, clip_to, count, decode};

pub const DEFAULT_MAX_RESULTS: usize = 100;

/// Matching lines are shown up to this many characters: enough for code,
/// not a whole minified file.
const LINE_CHARS: usize = 300;

/// Context kept before the match when a long line is cut.
const LEAD_CHARS: usize = 80;

pub struct GrepArgs<'a> {
    pub pattern: &'a str,
    pub path: &'a str,
    /// Filters file names ("*.rs"), or paths below `path` when it has a '/'.
    pub glob: Option<&'a str>,
    pub case_insensitive: bool,
    pub max_results: Option<usize>,
}

/// What a search met besides matches, for the closing notes.
#[derive(Default)]
struct Search {
    lines: Vec<String>,
    files: usize,
    unreadable: usize,
}

pub fn grep(root: &Path, args: &GrepArgs) -> FsResult<String> {
    let max = args.max_results.unwrap_or(DEFAULT_MAX_RESULTS);
    if max == 0 {
        return Err(FsError::InvalidArgs(
            "max_results must be at least 1".into(),
        ));
    }
    if args.pattern.is_empty() {
        return Err(FsError::InvalidArgs("the pattern is empty".into()));
    }
    let re = RegexBuilder::new(args.pattern)
        .case_insensitive(args.case_insensitive)
        .build()
        .map_err(|e| FsError::InvalidArgs(format!("invalid regex {:?}: {e}", args.pattern)))?;
    let filter = args.glob.map(compile_glob).transpose()?;
    let base = WsPath::parse(args.path)?;
    let meta = fs::metadata(base.on_disk(root)).map_err(|e| io_error(e, "path", base.display()))?;

    // One match past `max` tells whether the cap cut anything.
    let mut search = Search::default();
    let mut skipped = Vec::new();
    if meta.is_dir() {
        skipped = walk(root, &base, true, &mut |entry| {
            if entry.is_dir || !passes(filter.as_ref(), entry.path.strip_base(&base)) {
                return Flow::Continue;
            }
            search_file(root, &entry.path, &re, max + 1, &mut search);
            if search.lines.len() > max {
                Flow::Stop
            } else {
                Flow::Continue
            }
        })?;
    } else {
        // A file named explicitly is searched whatever the glob says.
        search_file(root, &base, &re, max + 1, &mut search);
        if search.unreadable == 1 {
            return Err(FsError::Failed(format!(
                "{} is binary, too large or unreadable; not searched",
                base.display()
            )));
        }
    }

    let mut out = search.lines;
    if out.len() > max {
        out.truncate(max);
        out.push(format!(
            "(stopped at {}; narrow the pattern, path or glob, or raise max_results)",
            count(max, "match", "matches")
        ));
    } else if out.is_empty() {
        let searched = count(search.files, "file", "files");
        let mut msg = format!(
            "no matches for {:?} in {} ({searched} searched",
            args.pattern,
            base.display()
        );
        if search.unreadable > 0 {
            msg.push_str(&format!(
                ", {} binary, oversized or unreadable skipped",
                search.unreadable
            ));
        }
        msg.push(')');
        out.push(msg);
    }
    out.extend(skipped_note(&skipped));
    Ok(out.join("\n"))
}

/// Whether a file passes the glob filter: on its name for a plain pattern
/// like `*.rs`, on its path below the search base when the pattern has a '/'.
fn passes(filter: Option<&GlobMatcher>, below_base: &str) -> bool {
    let Some(glob) = filter else { return true };
    if glob.glob().glob().contains('/') {
        glob.is_match(below_base)
    } else {
        glob.is_match(below_base.rsplit('/').next().unwrap_or(below_base))
    }
}

/// Appends the matching lines of one file until `search.lines` holds `cap`.
/// Binary, oversized and unreadable files are counted, not reported: one of
/// them should not end a search over a tree.
fn search_file(root: &Path, path: &WsPath, re: &Regex, cap: usize, search: &mut Search) {
    let disk = path.on_disk(root);
    let text = match fs::metadata(&disk) {
        Ok(m) if m.len() <= MAX_FILE_BYTES => fs::read(&disk).ok().and_then(decode),
        _ => None,
    };
    let Some(text) = text else {
        search.unreadable += 1;
        return;
    };
    search.files += 1;
    for (i, line) in text.lines().enumerate() {
        if search.lines.len() >= cap {
            return;
        }
        if let Some(m) = re.find(line) {
            search.lines.push(format!(
                "{}:{}: {}",
                path.display(),
                i + 1,
                excerpt(line, m.start())
            ));
        }
    }
}

/// `line`, or for a long line the part around the match at byte `at`, so the
/// match stays visible even far into a minified file.
fn excerpt(line: &str, at: usize) -> String {
    if line.chars().count() <= LINE_CHARS {
        return line.to_string();
    }
    let lead = line[..at].chars().count().saturating_sub(LEAD_CHARS);
    let start = line.char_indices().nth(lead).map_or(0, |(i, _)| i);
    let clipped = clip_to(&line[start..], LINE_CHARS);
    if start > 0 {
        format!("…{clipped}")
    } else {
        clipped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        for d in ["src", "node_modules/x", "docs"] {
            fs::create_dir_all(r.join(d)).unwrap();
        }
        let files: &[(&str, &[u8])] = &[
            (
                "src/lib.rs",
                b"pub fn alpha() {}\nfn beta() {}\n// TODO: Alpha docs\n",
            ),
            ("src/main.rs", b"fn main() { alpha(); }\n"),
            ("docs/notes.md", b"alpha in docs\n"),
            ("node_modules/x/i.js", b"alpha\n"),
            ("src/blob.bin", b"alpha\0\x01"),
        ];
        for (name, body) in files {
            fs::write(r.join(name), body).unwrap();
        }
        dir
    }

    fn args<'a>(pattern: &'a str, path: &'a str) -> GrepArgs<'a> {
        GrepArgs {
            pattern,
            path,
            glob: None,
            case_insensitive: false,
            max_results: None,
        }
    }

    #[test]
    fn searches_tree() {
        let dir = ws();
        let out = grep(dir.path(), &args(r"alpha\(", ".")).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            &lines[..2],
            [
                "src/lib.rs:1: pub fn alpha() {}",
                "src/main.rs:1: fn main() { alpha(); }"
            ]
        );
        assert!(
            lines[2].starts_with("(not entered: node_modules/;"),
            "{out}"
        );
        assert_eq!(lines.len(), 3, "binary file skipped: {out}");
    }

    #[test]
    fn case_and_glob_filters() {
        let dir = ws();
        let mut a = args("alpha", ".");
        a.case_insensitive = true;
        a.glob = Some("*.rs");
        let out = grep(dir.path(), &a).unwrap();
        assert_eq!(
            out.lines().filter(|l| l.starts_with("src/")).count(),
            3,
            "{out}"
        );
        a.glob = Some("docs/*");
        assert!(
            grep(dir.path(), &a)
                .unwrap()
                .starts_with("docs/notes.md:1: alpha in docs")
        );
    }

    #[test]
    fn single_file_and_cap() {
        let dir = ws();
        let mut a = args("fn", "src/lib.rs");
        assert_eq!(
            grep(dir.path(), &a).unwrap(),
            "src/lib.rs:1: pub fn alpha() {}\nsrc/lib.rs:2: fn beta() {}"
        );
        a.max_results = Some(1);
        let out = grep(dir.path(), &a).unwrap();
        assert!(
            out.starts_with("src/lib.rs:1: pub fn alpha() {}\n(stopped at 1 match;"),
            "{out}"
        );
        let err = grep(dir.path(), &args("alpha", "src/blob.bin"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("binary"), "{err}");
    }

    #[test]
    fn no_matches() {
        let dir = ws();
        let out = grep(dir.path(), &args("zeta", "src")).unwrap();
        assert_eq!(
            out,
            "no matches for \"zeta\" in src (2 files searched, 1 binary, oversized or unreadable skipped)"
        );
    }

    #[test]
    fn bad_args() {
        let dir = ws();
        assert!(matches!(
            grep(dir.path(), &args("(", ".")),
            Err(FsError::InvalidArgs(_))
        ));
        assert!(matches!(
            grep(dir.path(), &args("", ".")),
            Err(FsError::InvalidArgs(_))
        ));
        let mut a = args("x", ".");
        a.glob = Some("[");
        assert!(matches!(grep(dir.path(), &a), Err(FsError::InvalidArgs(_))));
        a.glob = None;
        a.max_results = Some(0);
        assert!(matches!(grep(dir.path(), &a), Err(FsError::InvalidArgs(_))));
        assert_eq!(
            grep(dir.path(), &args("x", "nope")).unwrap_err(),
            FsError::Failed("path not found: nope".into())
        );
        assert!(matches!(
            grep(dir.path(), &args("x", "/etc")),
            Err(FsError::Denied(_))
        ));
    }

    #[test]
    fn long_lines_keep_the_match() {
        let line = format!("{}NEEDLE{}", "a".repeat(1000), "b".repeat(1000));
        assert_eq!(excerpt("short", 0), "short");
        let ex = excerpt(&line, 1000);
        assert!(
            ex.starts_with('…') && ex.contains("NEEDLE") && ex.contains("line truncated"),
            "{ex}"
        );
    }
}
