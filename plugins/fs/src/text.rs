//! Loading text files and showing their lines, shared by the tools.

use std::fs;
use std::io::Read;
use std::path::Path;

use crate::paths::{FsError, FsResult, WsPath, io_error};

/// Larger files are refused: they would not fit a model's context anyway,
/// and reading them whole into a sandbox's memory is wasteful.
pub const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;

/// Lines longer than this are cut when shown (minified code, data blobs).
pub const MAX_LINE_CHARS: usize = 2000;

/// How much of a file's start is checked for NUL bytes, as git and grep do.
const BINARY_PROBE: usize = 8 * 1024;

/// Reads the text file `path`, refusing directories, huge files and binary
/// files with messages that tell the model what to do instead.
pub fn load_text(root: &Path, path: &WsPath) -> FsResult<String> {
    let rel = path.display();
    let bytes = read_capped(root, path)?;
    let len = bytes.len();
    decode(bytes).ok_or_else(|| FsError::Failed(format!("binary file, {len} bytes: {rel}")))
}

/// The bytes of the file `path`, refusing directories and files over
/// [`MAX_FILE_BYTES`] before reading.
pub fn read_capped(root: &Path, path: &WsPath) -> FsResult<Vec<u8>> {
    let disk = path.on_disk(root);
    let rel = path.display();
    let meta = fs::metadata(&disk).map_err(|e| io_error(e, "file", rel))?;
    if meta.is_dir() {
        return Err(FsError::Failed(format!(
            "{rel} is a directory; use list_dir to see its contents"
        )));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(FsError::Failed(format!(
            "file too large: {rel} is {} bytes (limit {MAX_FILE_BYTES}); use grep to search it",
            meta.len()
        )));
    }
    let mut bytes = Vec::new();
    // The file may grow after the check: never read past the cap.
    fs::File::open(&disk)
        .and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| io_error(e, "file", rel))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(FsError::Failed(format!(
            "file too large: {rel} grew past the limit of {MAX_FILE_BYTES} bytes while being read"
        )));
    }
    Ok(bytes)
}

/// The text of `bytes`, or `None` when they look binary: a NUL byte near the
/// start, or anything that is not UTF-8.
pub fn decode(bytes: Vec<u8>) -> Option<String> {
    if bytes[..bytes.len().min(BINARY_PROBE)].contains(&0) {
        return None;
    }
    String::from_utf8(bytes).ok()
}

/// `text` cut to [`MAX_LINE_CHARS`] characters, with a marker saying so.
pub fn clip(text: &str) -> String {
    clip_to(text, MAX_LINE_CHARS)
}

/// `text` cut to `max` characters, with a marker saying how long it was.
pub fn clip_to(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((cut, _)) => format!(
            "{}… [line truncated, {} chars]",
            &text[..cut],
            text.chars().count()
        ),
    }
}

/// The width that right-aligns line numbers up to `last`; at least 5 so short
/// files look like long ones.
pub fn number_width(last: usize) -> usize {
    last.to_string().len().max(5)
}

/// `n` with the singular or plural noun: "1 line", "3 lines".
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// One numbered line: `"   12| text"`.
pub fn numbered(n: usize, width: usize, line: &str) -> String {
    format!("{n:>width$}| {}", clip(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_detects_binary() {
        assert_eq!(decode(b"hello\n".to_vec()).as_deref(), Some("hello\n"));
        assert_eq!(decode(Vec::new()).as_deref(), Some(""));
        assert_eq!(decode(b"a\0b".to_vec()), None);
        assert_eq!(decode(vec![0xff, 0xfe, b'a']), None);
        // A NUL past the probe window still fails as text only if invalid UTF-8;
        // NUL is valid UTF-8, so such a file counts as text.
        let mut late = vec![b'a'; BINARY_PROBE + 10];
        late[BINARY_PROBE + 5] = 0;
        assert!(decode(late).is_some());
    }

    #[test]
    fn clip_marks_long_lines() {
        assert_eq!(clip_to("abc", 3), "abc");
        assert_eq!(clip_to("abcdé", 3), "abc… [line truncated, 5 chars]");
        assert_eq!(clip(&"x".repeat(MAX_LINE_CHARS)).len(), MAX_LINE_CHARS);
    }

    #[test]
    fn numbering() {
        assert_eq!(numbered(12, number_width(99), "text"), "   12| text");
        assert_eq!(numbered(7, number_width(123456), ""), "     7| ");
    }

    #[test]
    fn load_text_errors() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        std::fs::create_dir(r.join("d")).unwrap();
        std::fs::write(r.join("bin"), b"\x00\x01\x02").unwrap();
        std::fs::write(r.join("ok.txt"), "hi").unwrap();
        let p = |s| WsPath::parse(s).unwrap();
        assert_eq!(load_text(r, &p("ok.txt")).unwrap(), "hi");
        assert_eq!(
            load_text(r, &p("missing.rs")).unwrap_err(),
            FsError::Failed("file not found: missing.rs".into())
        );
        assert_eq!(
            load_text(r, &p("bin")).unwrap_err(),
            FsError::Failed("binary file, 3 bytes: bin".into())
        );
        let err = load_text(r, &p("d")).unwrap_err().to_string();
        assert!(err.contains("is a directory"), "{err}");
    }

    #[test]
    fn load_text_refuses_huge_files() {
        let dir = tempfile::tempdir().unwrap();
        let f = std::fs::File::create(dir.path().join("big")).unwrap();
        // A sparse file: the size check must come before reading.
        f.set_len(MAX_FILE_BYTES + 1).unwrap();
        let err = load_text(dir.path(), &WsPath::parse("big").unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("file too large: big is 10485761 bytes"),
            "{err}"
        );
    }
}
