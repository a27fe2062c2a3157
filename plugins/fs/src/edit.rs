//! `edit_file`: exact text replacement, with errors that help the model retry.

use std::fs;
use std::path::Path;

use crate::paths::{FsError, FsResult, WsPath, write_error};
use crate::text::{count, load_text, number_width, numbered};

/// How many match lines an "ambiguous" error lists.
const SHOWN_MATCHES: usize = 20;

/// How many lines of the nearest match a "not found" error shows.
const SHOWN_NEAREST: usize = 40;

/// Below this similarity the nearest window is noise, not a hint.
const MIN_SIMILARITY: f64 = 0.4;

/// Replaces `old_text` by `new_text` in the file `path`: the one occurrence,
/// or every occurrence with `replace_all`.
pub fn edit_file(
    root: &Path,
    path: &str,
    old_text: &str,
    new_text: &str,
    replace_all: bool,
) -> FsResult<String> {
    if old_text.is_empty() {
        return Err(FsError::InvalidArgs(
            "old_text is empty; give the exact text to replace (to write a whole file, use write_file)".into(),
        ));
    }
    if old_text == new_text {
        return Err(FsError::InvalidArgs(
            "old_text and new_text are identical; nothing would change".into(),
        ));
    }
    let path = WsPath::parse(path)?;
    let rel = path.display();
    let text = load_text(root, &path)?;

    let (old, new) = match_line_endings(&text, old_text, new_text);
    let starts: Vec<usize> = text.match_indices(old.as_str()).map(|(i, _)| i).collect();
    match starts.len() {
        0 => return Err(FsError::Failed(not_found(&text, old_text, rel))),
        1 => {}
        n if !replace_all => {
            let lines = line_numbers(&text, &starts);
            let mut shown: Vec<String> = lines
                .iter()
                .take(SHOWN_MATCHES)
                .map(|l| l.to_string())
                .collect();
            if n > SHOWN_MATCHES {
                shown.push("...".into());
            }
            return Err(FsError::Failed(format!(
                "old_text matches {n} times in {rel} (at lines {}); include more surrounding lines to make it unique, \
                 or set replace_all=true to replace every occurrence",
                shown.join(", ")
            )));
        }
        _ => {}
    }
    let updated = if replace_all {
        text.replace(&old, &new)
    } else {
        text.replacen(&old, &new, 1)
    };
    fs::write(path.on_disk(root), updated).map_err(|e| write_error(e, rel))?;
    let k = if replace_all { starts.len() } else { 1 };
    Ok(format!(
        "replaced {} in {rel}",
        count(k, "occurrence", "occurrences")
    ))
}

/// Models write '\n'; when the file uses "\r\n" and only the CRLF form of
/// `old` occurs, edit in the file's own line endings.
pub(crate) fn match_line_endings(text: &str, old: &str, new: &str) -> (String, String) {
    if !text.contains(old) && text.contains("\r\n") && old.contains('\n') && !old.contains('\r') {
        let crlf = |s: &str| s.replace("\r\n", "\n").replace('\n', "\r\n");
        let old_crlf = crlf(old);
        if text.contains(&old_crlf) {
            return (old_crlf, crlf(new));
        }
    }
    (old.to_string(), new.to_string())
}

/// The 1-based line of each byte offset in `starts` (ascending).
fn line_numbers(text: &str, starts: &[usize]) -> Vec<usize> {
    let mut line = 1;
    let mut pos = 0;
    starts
        .iter()
        .map(|&s| {
            line += text.as_bytes()[pos..s]
                .iter()
                .filter(|&&b| b == b'\n')
                .count();
            pos = s;
            line
        })
        .collect()
}

/// The "not found" message: the file's most similar lines, and why exact
/// matching may have failed.
pub(crate) fn not_found(text: &str, old: &str, rel: &str) -> String {
    let mut msg = format!("old_text not found in {rel}.");
    if looks_numbered(old) {
        msg.push_str(" It seems to include line-number prefixes (\"   12| \") from read_file; leave them out.");
    }
    let file_lines: Vec<&str> = text.lines().collect();
    let old_lines: Vec<&str> = old.lines().collect();
    match nearest_window(&file_lines, &old_lines) {
        Some((start, score)) if score >= MIN_SIMILARITY => {
            let n = old_lines.len().clamp(1, file_lines.len());
            let window = &file_lines[start..start + n];
            let same_but_spacing =
                window.len() == old_lines.len() && window.iter().zip(&old_lines).all(|(a, b)| a.trim() == b.trim());
            if same_but_spacing {
                msg.push_str(&format!(
                    " Lines {}-{} match it except for whitespace or indentation:\n",
                    start + 1,
                    start + n
                ));
            } else {
                msg.push_str(&format!(
                    " The most similar text is at lines {}-{} ({:.0}% similar):\n",
                    start + 1,
                    start + n,
                    score * 100.0
                ));
            }
            let width = number_width(start + n);
            for (i, line) in window.iter().take(SHOWN_NEAREST).enumerate() {
                msg.push_str(&numbered(start + 1 + i, width, line));
                msg.push('\n');
            }
            if n > SHOWN_NEAREST {
                msg.push_str(&format!("... ({} more lines)\n", n - SHOWN_NEAREST));
            }
            msg.push_str(
                "old_text must match the file exactly, including whitespace and indentation. \
                 Copy it from read_file output (without the line-number prefix).",
            );
        }
        _ => msg.push_str(
            " Nothing in the file resembles it; re-read the file with read_file, it may have changed.",
        ),
    }
    msg
}

/// True when every non-blank line of `s` starts like a read_file line: "  12| ".
fn looks_numbered(s: &str) -> bool {
    let numbered_line = |l: &str| {
        let t = l.trim_start();
        let digits = t.bytes().take_while(u8::is_ascii_digit).count();
        digits > 0 && t[digits..].starts_with('|')
    };
    s.lines().any(|l| !l.trim().is_empty())
        && s.lines()
            .filter(|l| !l.trim().is_empty())
            .all(numbered_line)
}

/// The start of the window of `old.len()` lines of `file` most similar to
/// `old`, with its similarity in 0..=1. Lines are compared trimmed, so a
/// window that differs only in indentation still ranks first.
///
/// Scoring every window on every line costs `file × old` comparisons; for
/// long `old` texts all windows are first ranked on a few anchor lines, and
/// only the best few are scored in full, which keeps 10k-line files fast.
pub(crate) fn nearest_window(file: &[&str], old: &[&str]) -> Option<(usize, f64)> {
    const ANCHORS: usize = 8;
    const FINALISTS: usize = 10;
    if file.is_empty() || old.is_empty() {
        return None;
    }
    let n = old.len().min(file.len());
    let file_grams: Vec<Vec<u64>> = file.iter().map(|l| bigrams(l)).collect();
    let old_grams: Vec<Vec<u64>> = old[..n].iter().map(|l| bigrams(l)).collect();
    let score = |start: usize, rows: &[usize]| -> f64 {
        let sum: f64 = rows
            .iter()
            .map(|&i| dice(&old_grams[i], &file_grams[start + i]))
            .sum();
        sum / rows.len() as f64
    };
    let all: Vec<usize> = (0..n).collect();
    let anchors: Vec<usize> = if n <= ANCHORS {
        all.clone()
    } else {
        (0..ANCHORS).map(|k| k * (n - 1) / (ANCHORS - 1)).collect()
    };
    let mut ranked: Vec<(usize, f64)> = (0..=file.len() - n)
        .map(|s| (s, score(s, &anchors)))
        .collect();
    // Stable sort: among equal scores the earliest window wins.
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    ranked.truncate(if n <= ANCHORS { 1 } else { FINALISTS });
    ranked
        .into_iter()
        .map(|(s, quick)| {
            if n <= ANCHORS {
                (s, quick)
            } else {
                (s, score(s, &all))
            }
        })
        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
}

/// The character bigrams of `line` trimmed, padded so that one-character
/// lines have some, sorted for a merge-style intersection.
fn bigrams(line: &str) -> Vec<u64> {
    let t = line.trim();
    if t.is_empty() {
        return Vec::new();
    }
    let chars: Vec<u32> = std::iter::once(0)
        .chain(t.chars().map(|c| c as u32))
        .chain(std::iter::once(0))
        .collect();
    let mut grams: Vec<u64> = chars
        .windows(2)
        .map(|w| (u64::from(w[0]) << 32) | u64::from(w[1]))
        .collect();
    grams.sort_unstable();
    grams
}

/// Sørensen–Dice similarity of two sorted bigram multisets; two blank lines
/// are identical.
fn dice(a: &[u64], b: &[u64]) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let (mut i, mut j, mut common) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                common += 1;
                i += 1;
                j += 1;
            }
        }
    }
    2.0 * common as f64 / (a.len() + b.len()) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws(body: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("f.rs"), body).unwrap();
        dir
    }

    fn read(dir: &tempfile::TempDir) -> String {
        fs::read_to_string(dir.path().join("f.rs")).unwrap()
    }

    const SRC: &str = "fn main() {\n    let x = 1;\n    println!(\"{x}\");\n}\n";

    #[test]
    fn replaces_once() {
        let dir = ws(SRC);
        let out = edit_file(dir.path(), "f.rs", "let x = 1;", "let x = 2;", false).unwrap();
        assert_eq!(out, "replaced 1 occurrence in f.rs");
        assert_eq!(read(&dir), SRC.replace("x = 1", "x = 2"));
    }

    #[test]
    fn ambiguous_without_replace_all() {
        let dir = ws("a\nfoo\nb\nfoo\nfoo bar\n");
        let err = edit_file(dir.path(), "f.rs", "foo", "baz", false)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("old_text matches 3 times in f.rs (at lines 2, 4, 5);"),
            "{err}"
        );
        assert!(err.contains("replace_all=true"));
        assert_eq!(
            read(&dir),
            "a\nfoo\nb\nfoo\nfoo bar\n",
            "nothing written on error"
        );
        let out = edit_file(dir.path(), "f.rs", "foo", "baz", true).unwrap();
        assert_eq!(out, "replaced 3 occurrences in f.rs");
        assert_eq!(read(&dir), "a\nbaz\nb\nbaz\nbaz bar\n");
    }

    #[test]
    fn bad_args() {
        let dir = ws(SRC);
        assert!(matches!(
            edit_file(dir.path(), "f.rs", "", "x", false),
            Err(FsError::InvalidArgs(_))
        ));
        assert!(matches!(
            edit_file(dir.path(), "f.rs", "x", "x", false),
            Err(FsError::InvalidArgs(_))
        ));
        assert_eq!(
            edit_file(dir.path(), "nope.rs", "a", "b", false).unwrap_err(),
            FsError::Failed("file not found: nope.rs".into())
        );
    }

    #[test]
    fn not_found_points_at_indentation() {
        let dir = ws(SRC);
        let err = edit_file(
            dir.path(),
            "f.rs",
            "let x = 1;\nprintln!(\"{x}\");",
            "",
            false,
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("old_text not found in f.rs."), "{err}");
        assert!(
            err.contains("Lines 2-3 match it except for whitespace or indentation:"),
            "{err}"
        );
        assert!(
            err.contains("    2|     let x = 1;\n    3|     println!(\"{x}\");\n"),
            "{err}"
        );
        assert!(err.contains("including whitespace and indentation"));
    }

    #[test]
    fn not_found_shows_most_similar() {
        let dir = ws(SRC);
        let err = edit_file(dir.path(), "f.rs", "    let y = 1;", "", false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("The most similar text is at lines 2-2 ("),
            "{err}"
        );
        assert!(err.contains("    2|     let x = 1;"), "{err}");
        let err = edit_file(dir.path(), "f.rs", "zzzzqqqq wwww", "", false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("Nothing in the file resembles it"), "{err}");
    }

    #[test]
    fn not_found_notices_line_numbers() {
        let dir = ws(SRC);
        let err = edit_file(dir.path(), "f.rs", "    2|     let x = 1;", "", false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("line-number prefixes"), "{err}");
    }

    #[test]
    fn crlf_files() {
        let dir = ws("a\r\nb\r\nc\r\n");
        edit_file(dir.path(), "f.rs", "a\nb\n", "x\ny\n", false).unwrap();
        assert_eq!(read(&dir), "x\r\ny\r\nc\r\n");
    }

    #[test]
    fn nearest_window_is_fast_on_large_files() {
        let mut body = String::new();
        for i in 0..10_000 {
            body.push_str(&format!(
                "    let value_{i} = compute({i}, \"some text here\");\n"
            ));
        }
        let old: String = (5000..5030)
            .map(|i| format!("let value_{i} = compute({i}, \"some text there\");\n"))
            .collect();
        let dir = ws(&body);
        let t = std::time::Instant::now();
        let err = edit_file(dir.path(), "f.rs", &old, "", false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("at lines 5001-5030"), "{}", &err[..300]);
        assert!(t.elapsed().as_secs_f64() < 5.0, "took {:?}", t.elapsed());
    }

    #[test]
    fn similarity_basics() {
        assert_eq!(dice(&bigrams("abc"), &bigrams("  abc")), 1.0);
        assert_eq!(dice(&bigrams(""), &bigrams("   ")), 1.0);
        assert_eq!(dice(&bigrams(""), &bigrams("x")), 0.0);
        assert!(dice(&bigrams("hello world"), &bigrams("hello word")) > 0.8);
        assert_eq!(line_numbers("a\nb\nc", &[0, 2, 4]), [1, 2, 3]);
        assert!(looks_numbered("  12| x\n  13| y"));
        assert!(!looks_numbered("x | y"));
    }
}
