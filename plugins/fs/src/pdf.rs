//! PDF text extraction with `lopdf`, page by page, under caps.

use lopdf::{Document, LoadOptions};

use crate::extract::{Extracted, push_capped};

/// Most bytes one stream (object, xref or page content) may inflate to: a
/// few kilobytes of deflate can claim gigabytes.
const MAX_STREAM_BYTES: usize = 16 * 1024 * 1024;

/// Most pages read; a longer document is cut with a note.
const MAX_PAGES: usize = 2000;

/// The text of the PDF `bytes`: each page's text after a `--- page N ---`
/// line, and a note (pages, pages without text, failures, a cut).
pub fn extract(bytes: &[u8]) -> Result<Extracted, String> {
    let options = LoadOptions { max_decompressed_size: Some(MAX_STREAM_BYTES), ..LoadOptions::default() };
    let doc = Document::load_mem_with_options(bytes, options).map_err(|e| format!("not a readable PDF: {e}"))?;
    if doc.is_encrypted() {
        return Err("the PDF is encrypted (password-protected); its text cannot be read".into());
    }
    let pages = doc.get_pages();
    let total = pages.len();
    let mut text = String::new();
    let mut failed = Vec::new();
    let mut empty = 0;
    let mut cut = None;
    for (&number, _) in pages.iter().take(MAX_PAGES) {
        let chunks = doc.extract_text_chunks_with_limit(&[number], MAX_STREAM_BYTES);
        let mut page = String::new();
        let mut errors = 0;
        for chunk in chunks {
            match chunk {
                Ok(t) => page.push_str(&t),
                Err(_) => errors += 1,
            }
        }
        let page = tidy(&page);
        if errors > 0 && page.is_empty() {
            failed.push(number);
        } else if page.is_empty() {
            empty += 1;
        }
        let header = format!("--- page {number} of {total} ---\n");
        if !push_capped(&mut text, &header) || !push_capped(&mut text, &page) || !push_capped(&mut text, "\n") {
            cut = Some(number);
            break;
        }
    }
    let mut note = format!("text extracted from a PDF of {}", crate::text::count(total, "page", "pages"));
    if !failed.is_empty() {
        note.push_str(&format!("; the text of {} could not be decoded", list_pages(&failed)));
    }
    if empty > 0 && empty + failed.len() == total.min(MAX_PAGES) {
        note.push_str("; no page has extractable text (it may be scanned images)");
    } else if empty > 0 {
        note.push_str(&format!("; {} without text", crate::text::count(empty, "page", "pages")));
    }
    if let Some(page) = cut {
        note.push_str(&format!("; cut at page {page}: the text passed {} MiB", crate::extract::MAX_TEXT_BYTES >> 20));
    } else if total > MAX_PAGES {
        note.push_str(&format!("; only the first {MAX_PAGES} pages were read"));
    }
    Ok(Extracted { text, note })
}

/// Page text with line endings normalised, control characters (other than
/// tab and newline) dropped and trailing blank lines removed.
fn tidy(page: &str) -> String {
    let clean: String = page
        .replace("\r\n", "\n")
        .replace('\r', "\n")
        .chars()
        .filter(|&c| c == '\n' || c == '\t' || !c.is_control())
        .collect();
    let lines: Vec<&str> = clean.lines().map(str::trim_end).collect();
    let end = lines.iter().rposition(|l| !l.is_empty()).map_or(0, |i| i + 1);
    let start = lines.iter().position(|l| !l.is_empty()).unwrap_or(end);
    lines[start..end].join("\n")
}

fn list_pages(pages: &[u32]) -> String {
    let shown: Vec<String> = pages.iter().take(10).map(u32::to_string).collect();
    let more = if pages.len() > 10 { format!(" and {} more", pages.len() - 10) } else { String::new() };
    format!("page{} {}{more}", if pages.len() == 1 { "" } else { "s" }, shown.join(", "))
}

/// Builds small PDFs for tests (here and in the host's tests, through the
/// committed fixture): one page per entry of `pages`, each line of it shown
/// with Helvetica.
#[cfg(test)]
pub fn make_pdf(pages: &[&str]) -> Vec<u8> {
    use lopdf::content::{Content, Operation};
    use lopdf::{Object, Stream, dictionary};
    let mut doc = Document::with_version("1.5");
    let pages_id = doc.new_object_id();
    let font_id = doc.add_object(dictionary! {
        "Type" => "Font", "Subtype" => "Type1", "BaseFont" => "Helvetica", "Encoding" => "WinAnsiEncoding",
    });
    let resources_id = doc.add_object(dictionary! { "Font" => dictionary! { "F1" => font_id } });
    let mut kids = Vec::new();
    for text in pages {
        let mut ops = vec![Operation::new("BT", vec![]), Operation::new("Tf", vec!["F1".into(), 12.into()]), Operation::new("Td", vec![72.into(), 720.into()]), Operation::new("TL", vec![14.into()])];
        for (i, line) in text.lines().enumerate() {
            if i > 0 {
                ops.push(Operation::new("T*", vec![]));
            }
            ops.push(Operation::new("Tj", vec![Object::string_literal(line)]));
        }
        ops.push(Operation::new("ET", vec![]));
        let content = Content { operations: ops };
        let content_id = doc.add_object(Stream::new(dictionary! {}, content.encode().unwrap()));
        let page_id = doc.add_object(dictionary! {
            "Type" => "Page", "Parent" => pages_id, "Contents" => content_id, "MediaBox" => vec![0.into(), 0.into(), 612.into(), 792.into()],
        });
        kids.push(page_id.into());
    }
    let count = kids.len() as i64;
    doc.objects.insert(pages_id, Object::Dictionary(dictionary! { "Type" => "Pages", "Kids" => kids, "Count" => count, "Resources" => resources_id }));
    let catalog_id = doc.add_object(dictionary! { "Type" => "Catalog", "Pages" => pages_id });
    doc.trailer.set("Root", catalog_id);
    doc.compress();
    let mut out = Vec::new();
    doc.save_to(&mut out).unwrap();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extracts_pages_in_order() {
        let pdf = make_pdf(&["Quarterly report\nRevenue grew 12%", "Page two text"]);
        let out = extract(&pdf).unwrap();
        assert_eq!(out.note, "text extracted from a PDF of 2 pages");
        assert!(out.text.starts_with("--- page 1 of 2 ---\n"), "{}", out.text);
        assert!(out.text.contains("Quarterly report"), "{}", out.text);
        assert!(out.text.contains("Revenue grew 12%"), "{}", out.text);
        let two = out.text.find("--- page 2 of 2 ---").unwrap();
        assert!(out.text[two..].contains("Page two text"));
    }

    #[test]
    fn empty_pages_are_noted() {
        let out = extract(&make_pdf(&[""])).unwrap();
        assert!(out.note.contains("no page has extractable text"), "{}", out.note);
    }

    #[test]
    fn malformed_pdfs_are_clear_errors() {
        for bad in [&b"%PDF-1.4\n"[..], b"%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF", b"%PDF-"] {
            // An error or an empty document, never a panic.
            if let Err(e) = extract(bad) {
                assert!(!e.is_empty());
            }
        }
        let err = extract(b"%PDF-1.4 garbage").unwrap_err();
        assert!(err.starts_with("not a readable PDF"), "{err}");
    }

    #[test]
    fn truncated_and_mutated_pdfs_never_panic() {
        let pdf = make_pdf(&["Some text here", "More text"]);
        for cut in (0..pdf.len()).step_by(7) {
            let _ = extract(&pdf[..cut]);
        }
        // Flip bytes through the file: the parser must fail softly.
        let mut seed: u32 = 12345;
        for _ in 0..300 {
            let mut copy = pdf.clone();
            for _ in 0..4 {
                seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                let at = (seed as usize >> 8) % copy.len();
                copy[at] = (seed >> 3) as u8;
            }
            let _ = extract(&copy);
        }
    }

    #[test]
    fn a_deflate_bomb_is_refused() {
        use lopdf::{Object, Stream, dictionary};
        // A page whose content inflates past the stream cap.
        let mut doc = Document::with_version("1.5");
        let pages_id = doc.new_object_id();
        let mut stream = Stream::new(dictionary! {}, vec![b' '; MAX_STREAM_BYTES + 1024]);
        stream.compress().unwrap();
        assert!(stream.content.len() < 100_000, "the bomb is small: {}", stream.content.len());
        let content_id = doc.add_object(stream);
        let page_id = doc.add_object(dictionary! { "Type" => "Page", "Parent" => pages_id, "Contents" => content_id });
        doc.objects.insert(pages_id, Object::Dictionary(dictionary! { "Type" => "Pages", "Kids" => vec![page_id.into()], "Count" => 1 }));
        let catalog_id = doc.add_object(dictionary! { "Type" => "Catalog", "Pages" => pages_id });
        doc.trailer.set("Root", catalog_id);
        let mut bytes = Vec::new();
        doc.save_to(&mut bytes).unwrap();
        let out = extract(&bytes).unwrap();
        assert!(out.note.contains("the text of page 1 could not be decoded"), "{}", out.note);
    }
}
