//! DOCX text extraction: `word/document.xml` out of the ZIP, paragraphs as
//! lines, table cells separated by tabs.

use std::io::{Cursor, Read};

use quick_xml::Reader;
use quick_xml::events::Event;

use crate::extract::{Extracted, push_capped};

/// Most bytes `word/document.xml` may inflate to, whatever its header
/// claims: a ZIP bomb stops here.
pub const MAX_XML_BYTES: u64 = 32 * 1024 * 1024;

/// The text of the DOCX `bytes`.
pub fn extract(bytes: &[u8]) -> Result<Extracted, String> {
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| format!("not a readable ZIP archive: {e}"))?;
    let mut entry = zip
        .by_name("word/document.xml")
        .map_err(|e| format!("no word/document.xml in the archive ({e}); it is not a Word document"))?;
    if entry.size() > MAX_XML_BYTES {
        return Err(format!("word/document.xml would inflate to {} bytes, over the limit of {MAX_XML_BYTES}", entry.size()));
    }
    // The header's size is the archive's claim; the reader enforces the cap.
    let mut xml = Vec::new();
    (&mut entry)
        .take(MAX_XML_BYTES + 1)
        .read_to_end(&mut xml)
        .map_err(|e| format!("word/document.xml cannot be decompressed: {e}"))?;
    if xml.len() as u64 > MAX_XML_BYTES {
        return Err(format!("word/document.xml inflates past the limit of {MAX_XML_BYTES} bytes (a ZIP bomb?)"));
    }
    let (text, paragraphs, cut) = document_text(&xml)?;
    let mut note = format!("text extracted from a Word document of {}", crate::text::count(paragraphs, "paragraph", "paragraphs"));
    if text.trim().is_empty() {
        note.push_str("; it has no text");
    }
    if cut {
        note.push_str(&format!("; cut: the text passed {} MiB", crate::extract::MAX_TEXT_BYTES >> 20));
    }
    Ok(Extracted { text, note })
}

/// Paragraph text of a WordprocessingML body: `w:t` runs, `w:tab` as a tab,
/// `w:br`/`w:cr` as line breaks, one line per `w:p`, cells of a table row
/// joined by tabs. Returns the text, the paragraph count and whether it was cut.
fn document_text(xml: &[u8]) -> Result<(String, usize, bool), String> {
    let mut reader = Reader::from_reader(xml);
    let mut out = String::new();
    let mut line = String::new();
    let mut in_text = false;
    let mut paragraphs = 0;
    let mut buf = Vec::new();
    loop {
        let event = reader.read_event_into(&mut buf).map_err(|e| format!("broken XML in word/document.xml at byte {}: {e}", reader.buffer_position()))?;
        match event {
            Event::Start(e) => match e.local_name().into_inner() {
                "t" => in_text = true,
                "tab" => line.push('\t'),
                _ => {}
            },
            Event::Empty(e) => match e.local_name().into_inner() {
                "tab" => line.push('\t'),
                "br" | "cr" => line.push('\n'),
                "p" => {
                    paragraphs += 1;
                    if !push_capped(&mut out, "\n") {
                        return Ok((out, paragraphs, true));
                    }
                }
                _ => {}
            },
            Event::End(e) => match e.local_name().into_inner() {
                "t" => in_text = false,
                "p" => {
                    paragraphs += 1;
                    line.push('\n');
                    let piece = std::mem::take(&mut line);
                    if !push_capped(&mut out, &piece) {
                        return Ok((out, paragraphs, true));
                    }
                }
                // A cell's paragraphs end in newlines; cells of one row are
                // joined by tabs instead.
                "tc" => {
                    if out.ends_with('\n') {
                        out.pop();
                    }
                    out.push('\t');
                }
                "tr" => {
                    if out.ends_with('\t') {
                        out.pop();
                    }
                    out.push('\n');
                }
                _ => {}
            },
            Event::Text(t) if in_text => line.push_str(&t.xml10_content()),
            Event::CData(t) if in_text => line.push_str(&t.xml10_content()),
            Event::GeneralRef(r) if in_text => {
                if let Ok(Some(c)) = r.resolve_char_ref() {
                    line.push(c);
                } else {
                    // Only XML's predefined entities: a DOCX has no DTD, and
                    // no entity is ever expanded from one.
                    line.push_str(match &*r {
                        "amp" => "&",
                        "lt" => "<",
                        "gt" => ">",
                        "quot" => "\"",
                        "apos" => "'",
                        _ => "",
                    });
                }
            }
            Event::Eof => break,
            _ => {}
        }
        if line.len() > crate::extract::MAX_TEXT_BYTES {
            push_capped(&mut out, &line);
            return Ok((out, paragraphs, true));
        }
        buf.clear();
    }
    push_capped(&mut out, &line);
    let text: String = out.chars().filter(|&c| c == '\n' || c == '\t' || !c.is_control()).collect();
    Ok((text.trim_end().to_string(), paragraphs, false))
}

/// Builds a small DOCX for tests: one paragraph per entry, and a table row
/// of `cells` when given.
#[cfg(test)]
pub fn make_docx(paragraphs: &[&str], cells: &[&str]) -> Vec<u8> {
    use std::io::Write;
    let esc = |s: &str| s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    let mut body = String::new();
    for p in paragraphs {
        body.push_str(&format!("<w:p><w:r><w:t xml:space=\"preserve\">{}</w:t></w:r></w:p>", esc(p)));
    }
    if !cells.is_empty() {
        body.push_str("<w:tbl><w:tr>");
        for c in cells {
            body.push_str(&format!("<w:tc><w:p><w:r><w:t>{}</w:t></w:r></w:p></w:tc>", esc(c)));
        }
        body.push_str("</w:tr></w:tbl>");
    }
    let document = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\
         <w:document xmlns:w=\"http://schemas.openxmlformats.org/wordprocessingml/2006/main\"><w:body>{body}</w:body></w:document>"
    );
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("[Content_Types].xml", opts).unwrap();
    zip.write_all(b"<?xml version=\"1.0\"?><Types xmlns=\"http://schemas.openxmlformats.org/package/2006/content-types\"/>").unwrap();
    zip.start_file("word/document.xml", opts).unwrap();
    zip.write_all(document.as_bytes()).unwrap();
    zip.finish().unwrap().into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paragraphs_entities_and_tables() {
        let docx = make_docx(&["Meeting notes", "Budget: 5 < 7 & rising"], &["Name", "Amount"]);
        let out = extract(&docx).unwrap();
        assert_eq!(out.text, "Meeting notes\nBudget: 5 < 7 & rising\nName\tAmount");
        assert_eq!(out.note, "text extracted from a Word document of 4 paragraphs");
    }

    #[test]
    fn tabs_breaks_and_split_runs() {
        let xml = br#"<w:document xmlns:w="x"><w:body><w:p><w:r><w:t>Hel</w:t></w:r><w:r><w:t>lo</w:t><w:tab/><w:t>world</w:t><w:br/><w:t>&#233;t&#xE9;</w:t></w:r></w:p><w:p/><w:p><w:r><w:t>end</w:t></w:r></w:p></w:body></w:document>"#;
        let (text, n, cut) = document_text(xml).unwrap();
        assert_eq!(text, "Hello\tworld\nété\n\nend");
        assert_eq!((n, cut), (3, false));
    }

    #[test]
    fn broken_inputs_are_clear_errors() {
        let err = extract(b"PK\x03\x04 not really a zip").unwrap_err();
        assert!(err.starts_with("not a readable ZIP archive"), "{err}");
        let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
        zip.start_file("other.xml", zip::write::SimpleFileOptions::default()).unwrap();
        let bytes = zip.finish().unwrap().into_inner();
        assert!(extract(&bytes).unwrap_err().contains("no word/document.xml"));
        let err = document_text(b"<w:p><w:t>a</w:x></w:p>").unwrap_err();
        assert!(err.starts_with("broken XML in word/document.xml"), "{err}");
    }

    #[test]
    fn a_zip_bomb_is_refused() {
        use std::io::Write;
        // 40 MiB of one byte deflates to about 40 KiB.
        let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
        zip.start_file("word/document.xml", opts).unwrap();
        let chunk = vec![b'a'; 1 << 20];
        for _ in 0..40 {
            zip.write_all(&chunk).unwrap();
        }
        let mut bytes = zip.finish().unwrap().into_inner();
        assert!(bytes.len() < 200_000, "{}", bytes.len());
        let err = extract(&bytes).unwrap_err();
        assert!(err.contains("over the limit"), "{err}");
        // The same archive lying about its size in both headers: the reader's
        // cap still holds.
        patch_sizes(&mut bytes, 1000);
        match extract(&bytes) {
            Err(err) => assert!(err.contains("limit") || err.contains("decompress") || err.contains("ZIP"), "{err}"),
            Ok(out) => assert!(out.text.len() as u64 <= MAX_XML_BYTES),
        }
    }

    /// Overwrites the uncompressed size in the local and central headers.
    fn patch_sizes(bytes: &mut [u8], size: u32) {
        let le = size.to_le_bytes();
        for sig in [&b"PK\x03\x04"[..], b"PK\x01\x02"] {
            let mut at = 0;
            while let Some(i) = bytes[at..].windows(4).position(|w| w == sig) {
                let off = at + i + if sig == b"PK\x03\x04" { 22 } else { 24 };
                bytes[off..off + 4].copy_from_slice(&le);
                at = at + i + 4;
            }
        }
    }
}
