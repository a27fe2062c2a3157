//! `read_file`: a text file as numbered lines, one page at a time; a PDF or
//! DOCX as the lines of its extracted text (see [`crate::extract`]).

use std::path::Path;

use crate::paths::{FsError, FsResult, WsPath};
use crate::extract::load_readable;
use crate::text::{count, number_width, numbered};

pub const DEFAULT_LIMIT: usize = 2000;

/// A page stops early past this many bytes, so a page of very long lines
/// cannot flood the model's context.
const MAX_OUTPUT_BYTES: usize = 256 * 1024;

/// Lines `offset..offset+limit` (1-based) of the file `path`, numbered, with a
/// hint for the next page when lines remain.
pub fn read_file(
    root: &Path,
    path: &str,
    offset: Option<usize>,
    limit: Option<usize>,
) -> FsResult<String> {
    let offset = offset.unwrap_or(1);
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    if offset == 0 {
        return Err(FsError::InvalidArgs(
            "offset is 1-based: the first line is offset=1".into(),
        ));
    }
    if limit == 0 {
        return Err(FsError::InvalidArgs("limit must be at least 1".into()));
    }
    let path = WsPath::parse(path)?;
    let readable = load_readable(root, &path)?;
    let text = readable.text;
    let mut out = match readable.note {
        // Said on every page: the lines are not the file's own bytes.
        Some(note) => format!("({note})\n"),
        None => String::new(),
    };
    if text.is_empty() {
        out.push_str("(empty file)");
        return Ok(out);
    }
    let lines: Vec<&str> = text.lines().collect();
    let total = lines.len();
    if offset > total {
        return Err(FsError::Failed(format!(
            "offset {offset} is past the end of {} ({})",
            path.display(),
            count(total, "line", "lines")
        )));
    }
    let last = total.min(offset - 1 + limit);
    let width = number_width(last);
    let header = out.len();
    let mut shown = offset - 1;
    for (i, line) in lines[offset - 1..last].iter().enumerate() {
        let row = numbered(offset + i, width, line);
        if out.len() > header && out.len() + row.len() > MAX_OUTPUT_BYTES {
            break;
        }
        out.push_str(&row);
        out.push('\n');
        shown = offset + i;
    }
    if shown < total {
        out.push_str(&format!(
            "(showing lines {offset}-{shown} of {total}; continue with offset={})",
            shown + 1
        ));
    } else {
        out.pop();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn ws(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, body) in files {
            fs::write(dir.path().join(name), body).unwrap();
        }
        dir
    }

    #[test]
    fn numbers_lines() {
        let dir = ws(&[("a.txt", "one\ntwo\r\nthree\n")]);
        let out = read_file(dir.path(), "a.txt", None, None).unwrap();
        assert_eq!(out, "    1| one\n    2| two\n    3| three");
    }

    #[test]
    fn pages_with_hint() {
        let body: String = (1..=10).map(|i| format!("line {i}\n")).collect();
        let dir = ws(&[("a.txt", &body)]);
        let out = read_file(dir.path(), "a.txt", Some(3), Some(4)).unwrap();
        assert_eq!(
            out,
            "    3| line 3\n    4| line 4\n    5| line 5\n    6| line 6\n\
             (showing lines 3-6 of 10; continue with offset=7)"
        );
        let out = read_file(dir.path(), "./a.txt", Some(9), None).unwrap();
        assert_eq!(out, "    9| line 9\n   10| line 10");
    }

    #[test]
    fn default_limit_is_2000() {
        let body: String = (1..=2500).map(|i| format!("{i}\n")).collect();
        let dir = ws(&[("big.txt", &body)]);
        let out = read_file(dir.path(), "big.txt", None, None).unwrap();
        assert!(
            out.ends_with("(showing lines 1-2000 of 2500; continue with offset=2001)"),
            "{out}"
        );
        assert!(out.contains(" 2000| 2000\n"));
    }

    #[test]
    fn long_lines_are_truncated_and_output_is_bounded() {
        let long = "x".repeat(5000);
        let body: String = (0..300).map(|_| format!("{long}\n")).collect();
        let dir = ws(&[("wide.txt", &body)]);
        let out = read_file(dir.path(), "wide.txt", None, None).unwrap();
        assert!(out.contains("… [line truncated, 5000 chars]"));
        assert!(out.len() <= MAX_OUTPUT_BYTES + 200);
        assert!(
            out.contains("continue with offset="),
            "a bounded page must say how to go on"
        );
    }

    #[test]
    fn empty_missing_binary() {
        let dir = ws(&[("e.txt", ""), ("b.bin", "ab\0cd")]);
        assert_eq!(
            read_file(dir.path(), "e.txt", None, None).unwrap(),
            "(empty file)"
        );
        assert_eq!(
            read_file(dir.path(), "src/x.rs", None, None).unwrap_err(),
            FsError::Failed("file not found: src/x.rs".into())
        );
        assert_eq!(
            read_file(dir.path(), "b.bin", None, None).unwrap_err(),
            FsError::Failed("binary file, 5 bytes: b.bin".into())
        );
    }

    #[test]
    fn bad_args() {
        let dir = ws(&[("a.txt", "one\n")]);
        assert!(matches!(
            read_file(dir.path(), "a.txt", Some(0), None),
            Err(FsError::InvalidArgs(_))
        ));
        assert!(matches!(
            read_file(dir.path(), "a.txt", None, Some(0)),
            Err(FsError::InvalidArgs(_))
        ));
        assert_eq!(
            read_file(dir.path(), "a.txt", Some(5), None).unwrap_err(),
            FsError::Failed("offset 5 is past the end of a.txt (1 line)".into())
        );
        assert_eq!(
            read_file(dir.path(), "/etc/passwd", None, None).unwrap_err(),
            FsError::Denied("path must be relative to the workspace: /etc/passwd".into())
        );
    }

    fn ws_bytes(files: &[(&str, &[u8])]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, body) in files {
            fs::write(dir.path().join(name), body).unwrap();
        }
        dir
    }

    #[test]
    fn pdf_and_docx_come_as_text_and_page_like_text() {
        let pdf = crate::pdf::make_pdf(&["Alpha line\nBeta line", "Gamma"]);
        let docx = crate::docx::make_docx(&["First paragraph", "Second paragraph"], &[]);
        // One of each misnamed: the bytes decide.
        let dir = ws_bytes(&[("r.pdf", &pdf), ("scan.bin", &pdf), ("n.docx", &docx), ("n.zip", &docx)]);
        let out = read_file(dir.path(), "r.pdf", None, None).unwrap();
        assert!(out.starts_with("(text extracted from a PDF of 2 pages)\n    1| --- page 1 of 2 ---\n"), "{out}");
        assert!(out.contains("| Alpha line"), "{out}");
        assert!(out.contains("| Gamma"), "{out}");
        assert_eq!(read_file(dir.path(), "scan.bin", None, None).unwrap(), out);
        let page = read_file(dir.path(), "r.pdf", Some(2), Some(1)).unwrap();
        assert!(page.starts_with("(text extracted from a PDF of 2 pages)\n    2| "), "{page}");
        assert!(page.contains("continue with offset=3"), "{page}");
        let out = read_file(dir.path(), "n.docx", None, None).unwrap();
        assert_eq!(
            out,
            "(text extracted from a Word document of 2 paragraphs)\n    1| First paragraph\n    2| Second paragraph"
        );
        assert_eq!(read_file(dir.path(), "n.zip", None, None).unwrap(), out);
    }

    #[test]
    fn broken_documents_are_clear_errors() {
        let dir = ws_bytes(&[
            ("fake.pdf", b"\x00\x01 not a pdf"),
            ("text.pdf", b"just text in a .pdf"),
            ("bad.pdf", b"%PDF-1.4 truncated"),
            ("fake.docx", b"\x00PK garbage"),
        ]);
        let err = read_file(dir.path(), "fake.pdf", None, None).unwrap_err().to_string();
        assert!(err.starts_with("fake.pdf is not a readable PDF"), "{err}");
        assert_eq!(read_file(dir.path(), "text.pdf", None, None).unwrap(), "    1| just text in a .pdf");
        let err = read_file(dir.path(), "bad.pdf", None, None).unwrap_err().to_string();
        assert!(err.starts_with("cannot extract the text of bad.pdf (PDF): not a readable PDF"), "{err}");
        let err = read_file(dir.path(), "fake.docx", None, None).unwrap_err().to_string();
        assert!(err.contains("not a readable DOCX"), "{err}");
    }

    /// Rewrites the fixtures the host's tests read through the component
    /// (`tests/fixtures/`): `cargo test -p chitin-plugin-fs -- --ignored write_fixtures`.
    #[test]
    #[ignore]
    fn write_fixtures() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        fs::create_dir_all(&dir).unwrap();
        let pdf = crate::pdf::make_pdf(&[
            "Chitin fixture report\nThe launch code word is PELICAN-42.",
            "Second page: budget approved.",
        ]);
        fs::write(dir.join("report.pdf"), pdf).unwrap();
        let docx = crate::docx::make_docx(
            &["Chitin fixture notes", "The meeting moved to Thursday & the room is 4B."],
            &["Owner", "Ada"],
        );
        fs::write(dir.join("notes.docx"), docx).unwrap();
    }
}
