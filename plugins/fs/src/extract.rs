//! Documents `read_file` turns into text: PDF and DOCX, recognised by their
//! bytes (and by their name when the bytes are not text).
//!
//! The parsing runs here, inside the sandbox, because the files are
//! untrusted: a crafted PDF or ZIP can only exhaust this call's memory and
//! time, never the host. On top of the sandbox's limits every stage has its
//! own cap (decompressed stream and XML sizes, pages, text), so a hostile
//! file ends in a clear error or a cut note rather than a trap.

use std::path::Path;

use crate::paths::{FsError, FsResult, WsPath};
use crate::text::{decode, read_capped};

/// Most text an extraction returns; a longer document is cut with a note.
pub const MAX_TEXT_BYTES: usize = 8 * 1024 * 1024;

/// A document format that is extracted instead of read as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pdf,
    Docx,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Pdf => "PDF",
            Kind::Docx => "DOCX",
        }
    }
}

/// The text of a document and how it was obtained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extracted {
    pub text: String,
    /// What the model should know before the lines: the format, the page
    /// count, pages that failed, a cut.
    pub note: String,
}

/// A file's contents as `read_file` shows them: text, or a document's text
/// with a note.
pub struct Readable {
    pub text: String,
    pub note: Option<String>,
}

/// The format `bytes` are in, from their magic bytes: `%PDF-` near the start
/// (the format allows some junk before it), or a ZIP that holds
/// `word/document.xml`.
pub fn sniff(bytes: &[u8]) -> Option<Kind> {
    let head = &bytes[..bytes.len().min(1024)];
    if find(head, b"%PDF-").is_some() {
        return Some(Kind::Pdf);
    }
    // The central directory at the end stores names uncompressed.
    if bytes.starts_with(b"PK\x03\x04") && find(bytes, b"word/document.xml").is_some() {
        return Some(Kind::Docx);
    }
    None
}

/// The format a file's name promises.
fn by_name(path: &WsPath) -> Option<Kind> {
    let name = path.name().to_ascii_lowercase();
    if name.ends_with(".pdf") {
        Some(Kind::Pdf)
    } else if name.ends_with(".docx") {
        Some(Kind::Docx)
    } else {
        None
    }
}

/// Reads `path` as `read_file` shows it: a document is extracted, anything
/// else must be text.
pub fn load_readable(root: &Path, path: &WsPath) -> FsResult<Readable> {
    let rel = path.display();
    let bytes = read_capped(root, path)?;
    let len = bytes.len();
    let kind = sniff(&bytes);
    let Some(kind) = kind else {
        if let Some(text) = decode(bytes) {
            return Ok(Readable { text, note: None });
        }
        return Err(match by_name(path) {
            Some(kind) => FsError::Failed(format!(
                "{rel} is not a readable {}: {}, nor text ({len} bytes); it may be damaged or misnamed",
                kind.name(),
                match kind {
                    Kind::Pdf => "it has no %PDF- header",
                    Kind::Docx => "it is not a ZIP holding word/document.xml",
                }
            )),
            None => FsError::Failed(format!("binary file, {len} bytes: {rel}")),
        });
    };
    let extracted = extract(kind, &bytes).map_err(|e| {
        FsError::Failed(format!("cannot extract the text of {rel} ({}): {e}", kind.name()))
    })?;
    Ok(Readable { text: extracted.text, note: Some(extracted.note) })
}

/// The text of a document of `kind`.
pub fn extract(kind: Kind, bytes: &[u8]) -> Result<Extracted, String> {
    match kind {
        Kind::Pdf => crate::pdf::extract(bytes),
        Kind::Docx => crate::docx::extract(bytes),
    }
}

/// Appends `piece` to `out` unless that passes [`MAX_TEXT_BYTES`]; returns
/// false (after appending what fits, cut at a character) when it would.
pub fn push_capped(out: &mut String, piece: &str) -> bool {
    if out.len() + piece.len() <= MAX_TEXT_BYTES {
        out.push_str(piece);
        return true;
    }
    let mut cut = MAX_TEXT_BYTES.saturating_sub(out.len());
    while cut > 0 && !piece.is_char_boundary(cut) {
        cut -= 1;
    }
    out.push_str(&piece[..cut]);
    false
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffs_magic_bytes() {
        assert_eq!(sniff(b"%PDF-1.7\n..."), Some(Kind::Pdf));
        assert_eq!(sniff(b"junk\r\n%PDF-1.4"), Some(Kind::Pdf));
        assert_eq!(sniff(b"PK\x03\x04....word/document.xml..."), Some(Kind::Docx));
        assert_eq!(sniff(b"PK\x03\x04....xl/workbook.xml"), None);
        assert_eq!(sniff(b"plain text mentioning %PDF- late".repeat(100).as_slice()).is_some(), true);
        assert_eq!(sniff(b"hello"), None);
        assert_eq!(sniff(b""), None);
    }

    #[test]
    fn push_capped_cuts_at_a_character() {
        let mut out = "x".repeat(MAX_TEXT_BYTES - 1);
        assert!(!push_capped(&mut out, "éé"));
        assert_eq!(out.len(), MAX_TEXT_BYTES - 1, "é is two bytes: it does not fit");
        let mut out = String::new();
        assert!(push_capped(&mut out, "abc"));
        assert_eq!(out, "abc");
    }
}
