//! Documents attached to an inbound message (PDF, DOCX, text), turned into
//! text for the model at RESTORE.
//!
//! The host never parses an attachment itself: a file from a chat is as
//! untrusted as a plugin. Each one is copied alone into a fresh directory,
//! and the built-in `fs` component's `read_file` runs on it with only that
//! directory preopened (read-only), under the usual sandbox limits. Its text
//! is then appended to the message, cut to `[agent] max_attachment_kb`; a
//! failure becomes a note in the message, never a failed turn. Images keep
//! their own path (`pending::user_message`).

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::bus::InboundMessage;
use crate::plugins::{CallContext, PluginError, PluginSource};
use crate::tools::{ToolError, ToolRegistry};

/// Larger attachments are not staged: the `fs` component refuses files over
/// 10 MiB anyway, and copying more would only waste the disk.
pub const MAX_ATTACHMENT_BYTES: u64 = 10 * 1024 * 1024;

/// The plugin and tool that extract text.
const FS_PLUGIN: &str = "fs";
const READ_TOOL: &str = "read_file";

/// Lines asked of `read_file`: enough for any attachment under the byte cap;
/// the component's own page cap (256 KiB) bounds the output.
const READ_LIMIT: usize = 1_000_000;

/// Appends the text of each non-image attachment of `inbound` to its
/// content and takes it out of `media` (its path is named in the text).
/// `max_bytes` caps the text of one attachment.
pub async fn inline_documents(tools: &ToolRegistry, inbound: &mut InboundMessage, session_key: &str, max_bytes: usize) {
    let (documents, images): (Vec<PathBuf>, Vec<PathBuf>) = std::mem::take(&mut inbound.media).into_iter().partition(|p| !crate::agent::pending::is_image(p));
    inbound.media = images;
    for (i, path) in documents.iter().enumerate() {
        let shown = path.display().to_string();
        let block = match extract(tools, path, session_key, &inbound.channel, &inbound.chat_id, i).await {
            Ok(extracted) => render(&shown, &extracted, max_bytes),
            Err(reason) => {
                tracing::info!(session = %session_key, attachment = %shown, "attachment text not extracted: {reason}");
                format!("\n[attachment: {shown} — its text could not be extracted: {reason}]")
            }
        };
        inbound.content.push_str(&block);
    }
}

/// What `read_file` returned, split into its note and its lines.
#[derive(Debug, PartialEq, Eq)]
struct Extracted {
    /// "text extracted from a PDF of 2 pages", for documents.
    note: Option<String>,
    text: String,
    /// The component stopped before the end (its page cap).
    partial: bool,
}

async fn extract(tools: &ToolRegistry, path: &Path, session_key: &str, channel: &str, chat_id: &str, index: usize) -> Result<Extracted, String> {
    let plugin = tools.plugin_of(READ_TOOL).ok_or("no tool can read files (the fs plugin is not loaded)")?;
    if plugin.source != PluginSource::Builtin || plugin.name() != FS_PLUGIN {
        // Another plugin never gets to see the user's files this way.
        return Err(format!("`{READ_TOOL}` is not the built-in fs plugin's"));
    }
    if plugin.grant.workspace == crate::plugins::WorkspaceAccess::None {
        return Err("the fs plugin has no file access ([plugins.fs] workspace = \"none\")".into());
    }
    let source = path.to_path_buf();
    let staged = tokio::task::spawn_blocking(move || stage(&source)).await.map_err(|e| format!("staging failed: {e}"))??;
    let ctx = CallContext {
        session_key: session_key.to_string(),
        channel: channel.to_string(),
        chat_id: chat_id.to_string(),
        call_id: format!("attachment-{index}"),
    };
    let args = json!({ "path": staged.name, "limit": READ_LIMIT });
    let output = tools.call_in_workspace(READ_TOOL, &args, &ctx, staged.dir.path()).await.map_err(|e| match e {
        // The component's own words, without the "error:" of its kind.
        ToolError::Plugin(PluginError::Tool { message, .. }) => message,
        other => other.to_string(),
    })?;
    Ok(parse_read_output(&output))
}

/// An attachment copied alone into a fresh directory.
struct Staged {
    dir: tempfile::TempDir,
    name: String,
}

/// Copies the regular file `path` (at most [`MAX_ATTACHMENT_BYTES`]) into a
/// new temporary directory under a safe name that keeps its extension.
fn stage(path: &Path) -> Result<Staged, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot open it: {e}"))?;
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    if meta.len() > MAX_ATTACHMENT_BYTES {
        return Err(format!("it is {} bytes, over the limit of {MAX_ATTACHMENT_BYTES}", meta.len()));
    }
    let dir = tempfile::Builder::new().prefix("chitin-attachment-").tempdir().map_err(|e| format!("cannot create a staging directory: {e}"))?;
    let name = safe_name(path);
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_ATTACHMENT_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| format!("cannot read it: {e}"))?;
    if bytes.len() as u64 > MAX_ATTACHMENT_BYTES {
        return Err(format!("it grew past the limit of {MAX_ATTACHMENT_BYTES} bytes while being read"));
    }
    std::fs::write(dir.path().join(&name), &bytes).map_err(|e| format!("cannot stage it: {e}"))?;
    Ok(Staged { dir, name })
}

/// The file name with anything but letters, digits, `.`, `-` and `_`
/// replaced, so the component is given a plain relative path.
fn safe_name(path: &Path) -> String {
    let raw = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut name: String = raw.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') { c } else { '_' }).collect();
    if name.len() > 100 {
        name = name[name.len() - 100..].to_string();
    }
    if name.trim_matches('.').is_empty() { "attachment".into() } else { name.trim_start_matches('.').to_string() }
}

/// Splits `read_file`'s output: an optional `(note)` first line, numbered
/// lines `   12| text`, and a `(showing lines …)` hint when it stopped early.
fn parse_read_output(output: &str) -> Extracted {
    let mut lines: Vec<&str> = output.lines().collect();
    let mut note = None;
    if let Some(first) = lines.first()
        && first.starts_with("(text extracted from ")
        && first.ends_with(')')
    {
        note = Some(first[1..first.len() - 1].to_string());
        lines.remove(0);
    }
    let mut partial = false;
    if let Some(last) = lines.last()
        && last.starts_with("(showing lines ")
    {
        partial = true;
        lines.pop();
    }
    if lines == ["(empty file)"] {
        return Extracted { note, text: String::new(), partial };
    }
    let text: Vec<&str> = lines
        .iter()
        .map(|l| match l.split_once("| ") {
            Some((n, rest)) if !n.trim().is_empty() && n.trim().bytes().all(|b| b.is_ascii_digit()) => rest,
            _ => l.strip_suffix('|').filter(|n| n.trim().bytes().all(|b| b.is_ascii_digit())).map_or(*l, |_| ""),
        })
        .collect();
    Extracted { note, text: text.join("\n"), partial }
}

/// The block appended to the message for one extracted attachment.
fn render(shown: &str, extracted: &Extracted, max_bytes: usize) -> String {
    let what = extracted.note.clone().unwrap_or_else(|| "text file".into());
    if extracted.text.trim().is_empty() {
        return format!("\n[attachment: {shown} ({what}); it has no text]");
    }
    let (text, cut) = truncate(&extracted.text, max_bytes);
    let mut block = format!("\n[attachment: {shown} ({what}), its text:]\n{text}");
    if cut || extracted.partial {
        block.push_str(&format!("\n[… cut: the attachment's text is longer than the {} bytes shown]", text.len()));
    }
    block.push_str(&format!("\n[end of attachment: {shown}]"));
    block
}

/// `text` cut to at most `max_bytes` at a character boundary, and whether it was cut.
fn truncate(text: &str, max_bytes: usize) -> (&str, bool) {
    if text.len() <= max_bytes {
        return (text, false);
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_read_file_output() {
        let out = parse_read_output("(text extracted from a PDF of 2 pages)\n    1| --- page 1 of 2 ---\n    2| Hello | world\n    3| ");
        assert_eq!(out.note.as_deref(), Some("text extracted from a PDF of 2 pages"));
        assert_eq!(out.text, "--- page 1 of 2 ---\nHello | world\n");
        assert!(!out.partial);
        let out = parse_read_output("    1| a\n    2| b\n(showing lines 1-2 of 9; continue with offset=3)");
        assert_eq!((out.note, out.text.as_str(), out.partial), (None, "a\nb", true));
        let out = parse_read_output("(text extracted from a Word document of 0 paragraphs)\n(empty file)");
        assert_eq!(out.text, "");
    }

    #[test]
    fn renders_with_a_cap() {
        let ex = Extracted { note: Some("text extracted from a PDF of 1 page".into()), text: "é".repeat(10), partial: false };
        let block = render("/in/r.pdf", &ex, 5);
        assert_eq!(
            block,
            "\n[attachment: /in/r.pdf (text extracted from a PDF of 1 page), its text:]\néé\n[… cut: the attachment's text is longer than the 4 bytes shown]\n[end of attachment: /in/r.pdf]"
        );
        let empty = Extracted { note: None, text: " \n".into(), partial: false };
        assert_eq!(render("a.txt", &empty, 100), "\n[attachment: a.txt (text file); it has no text]");
    }

    #[test]
    fn safe_names() {
        assert_eq!(safe_name(Path::new("/x/Report Q1 (final).pdf")), "Report_Q1__final_.pdf");
        assert_eq!(safe_name(Path::new("/x/..")), "attachment");
        assert_eq!(safe_name(Path::new("/x/.hidden.txt")), "hidden.txt");
        assert_eq!(safe_name(Path::new("/x/ünï.docx")), "_n_.docx");
    }

    #[test]
    fn stage_refuses_what_it_cannot_copy() {
        let dir = tempfile::tempdir().unwrap();
        assert!(stage(dir.path()).err().unwrap().contains("not a regular file"));
        assert!(stage(&dir.path().join("missing")).err().unwrap().starts_with("cannot open it"));
        let big = dir.path().join("big.pdf");
        std::fs::File::create(&big).unwrap().set_len(MAX_ATTACHMENT_BYTES + 1).unwrap();
        assert!(stage(&big).err().unwrap().contains("over the limit"));
        let ok = dir.path().join("a b.txt");
        std::fs::write(&ok, "hi").unwrap();
        let staged = stage(&ok).unwrap();
        assert_eq!(staged.name, "a_b.txt");
        assert_eq!(std::fs::read_dir(staged.dir.path()).unwrap().count(), 1, "the copy is alone in its directory");
    }
}
