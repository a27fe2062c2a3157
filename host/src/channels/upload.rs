//! Outbound files: the workspace files of a reply (the `message` tool's
//! `media`), sent to the chat by the host.
//!
//! The bytes never pass through the sandbox. The component's
//! `upload-request(chat, thread, file)` only says where a file goes (for
//! Telegram: `sendPhoto` or `sendDocument`, the chat and topic as form
//! fields); the host opens the file, builds the `multipart/form-data` body
//! and streams the file into it ([`Transport::upload`]: network grant,
//! secrets, redaction), so a 50 MB document costs the guest nothing and the
//! host a chunk at a time.
//!
//! The file is opened again at delivery, through the [`Workspace`] handle,
//! although the `message` tool checked it when it was called: plugins write
//! the workspace, and between the check and the send a file could have been
//! replaced by a symlink that leads out, a FIFO, or something bigger. So it
//! must still be inside the workspace, a regular file on the open handle,
//! and within the channel's `max_upload_mb`; what is sent is what was
//! checked (the same open file, at most the size checked). A file that
//! fails any of this, or that the platform refuses, is named in a note to
//! the chat (`[not sent: report.pdf (…)]`) and in the log: never dropped
//! silently.

use std::path::Path;
use std::time::Duration;

use crate::plugins::channel::OutgoingFile;
use crate::plugins::runtime::{LoadedPlugin, PluginRuntime};
use crate::plugins::{ChannelFailure, PluginError};
use crate::workspace::Workspace;

use super::transport::{self, Transport};

/// `max_upload_mb` when the config does not say: the Bot API's own limit
/// for documents, and the `message` tool's per-file cap.
pub const DEFAULT_MAX_UPLOAD_MB: u64 = 50;

/// Largest `max_upload_mb` accepted.
pub const MAX_UPLOAD_MB: u64 = 2048;

/// Waits before the second, third and fourth attempt of an upload that
/// failed in a way worth retrying (a transport error, a 5xx, a 429 without
/// `retry_after`).
const RETRIES: [Duration; 3] = [Duration::from_secs(1), Duration::from_secs(2), Duration::from_secs(4)];

/// Longest file name shown in a note or sent to the platform.
const MAX_NAME_CHARS: usize = 120;

/// A file of a reply, opened and checked, ready to stream.
#[derive(Debug)]
pub struct OpenFile {
    file: std::fs::File,
    /// What the component is told (name, type, size).
    pub meta: OutgoingFile,
}

/// The name a file is shown and sent under: its last path component,
/// without control characters, at most [`MAX_NAME_CHARS`].
pub fn shown_name(path: &Path) -> String {
    let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    let clean: String = name.chars().filter(|c| !c.is_control()).take(MAX_NAME_CHARS).collect();
    if clean.is_empty() { "file".into() } else { clean }
}

/// The note for a file that was not sent.
pub fn note(name: &str, reason: &str) -> String {
    format!("[not sent: {name} ({reason})]")
}

/// Opens `path` (absolute, as the `message` tool resolved it) for sending:
/// it must lie inside `workspace`, be a regular file (a symlink is followed
/// only while it stays inside), and be at most `cap` bytes. The error is
/// the reason for the note.
pub fn open(workspace: Option<&Workspace>, path: &Path, cap: u64) -> Result<OpenFile, String> {
    let workspace = workspace.ok_or("the workspace cannot be opened")?;
    let rel = path.strip_prefix(workspace.root()).map_err(|_| "not a file of the workspace".to_string())?;
    let (file, size) = match workspace.open_read(rel) {
        Ok(Some(found)) => found,
        Ok(None) => return Err("it no longer exists".into()),
        Err(crate::workspace::WorkspaceError::NotRegular { kind, .. }) => return Err(format!("it is {kind}, not a regular file")),
        Err(crate::workspace::WorkspaceError::NotInside { .. }) => return Err("not a path inside the workspace".into()),
        // A link that leads out fails beneath the workspace root; the
        // error's text would name the target, so it is not repeated.
        Err(crate::workspace::WorkspaceError::Io { source, .. }) => return Err(format!("cannot open it inside the workspace: {}", source.kind())),
    };
    if size > cap {
        return Err(format!("{} MB, over the channel's upload limit of {} MB (config [channels.<name>] max_upload_mb)", size.div_ceil(1 << 20), cap >> 20));
    }
    let name = shown_name(path);
    let mime = mime_guess::from_path(&name).first_or_octet_stream().essence_str().to_string();
    Ok(OpenFile { file, meta: OutgoingFile { file_name: name, mime, size } })
}

/// Sends `file` to `chat` (and `thread`): the component's upload request,
/// then the host's streamed multipart body, retried after 1, 2 and 4 s when
/// the failure may pass. The error is the reason for the note.
pub async fn send(channel: &str, plugin: &LoadedPlugin, runtime: &PluginRuntime, transport: &Transport, chat: &str, thread: Option<&str>, file: &OpenFile) -> Result<(), String> {
    let name = &file.meta.file_name;
    let mut attempt = 0;
    loop {
        let wait = match attempt_once(plugin, runtime, transport, chat, thread, file).await {
            Ok(()) => {
                tracing::info!(channel, chat, file = %name, size = file.meta.size, "file delivered");
                return Ok(());
            }
            Err(Attempt::Refused(reason)) => return Err(reason),
            Err(Attempt::Retry { reason, after }) if attempt < RETRIES.len() => {
                let wait = after.unwrap_or(RETRIES[attempt]);
                tracing::warn!(channel, chat, file = %name, "upload failed, retrying in {wait:?}: {reason}");
                wait
            }
            Err(Attempt::Retry { reason, .. }) => return Err(format!("failed {} times: {reason}", attempt + 1)),
        };
        tokio::time::sleep(wait).await;
        attempt += 1;
    }
}

/// How one attempt failed.
enum Attempt {
    /// Not worth repeating: the component or the platform refused.
    Refused(String),
    /// May pass: retry, after `after` when the platform said.
    Retry { reason: String, after: Option<Duration> },
}

async fn attempt_once(plugin: &LoadedPlugin, runtime: &PluginRuntime, transport: &Transport, chat: &str, thread: Option<&str>, file: &OpenFile) -> Result<(), Attempt> {
    let upload = match runtime.channel_upload_request(plugin, chat, thread, &file.meta).await {
        Ok(upload) => upload,
        Err(PluginError::Channel { kind: ChannelFailure::Fatal, message, .. }) => return Err(Attempt::Refused(crate::text::clip_for_terminal(&message, 200, "reason"))),
        Err(e) => return Err(Attempt::Retry { reason: e.to_string(), after: None }),
    };
    // Each attempt reads the checked file from its start, through its own
    // handle on the same open file.
    let reader = file.file.try_clone().map_err(|e| Attempt::Retry { reason: format!("cannot read the file: {e}"), after: None })?;
    let mut reader = tokio::fs::File::from_std(reader);
    tokio::io::AsyncSeekExt::rewind(&mut reader).await.map_err(|e| Attempt::Retry { reason: format!("cannot read the file: {e}"), after: None })?;
    let response = transport
        .upload(&upload, reader, &file.meta.file_name, &file.meta.mime, file.meta.size)
        .await
        .map_err(|e| Attempt::Retry { reason: e.to_string(), after: None })?;
    match response.status {
        200..=299 => Ok(()),
        429 => Err(Attempt::Retry { reason: "the platform asked to slow down (429)".into(), after: transport::retry_after(&response.headers, &response.body) }),
        status @ 500..=599 => Err(Attempt::Retry { reason: format!("the platform answered {status}"), after: None }),
        status => {
            // The platform's reason, for the log only: it is an HTTP peer's text.
            let said = crate::text::clip_for_terminal(&String::from_utf8_lossy(&response.body), 300, "body");
            tracing::warn!(chat, file = %file.meta.file_name, status, "the platform refused the upload: {said}");
            Err(Attempt::Refused(format!("the platform refused it with HTTP {status}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("ws/out")).unwrap();
        std::fs::write(root.path().join("secret.txt"), "outside").unwrap();
        let ws = Workspace::open(root.path().join("ws")).unwrap();
        (root, ws)
    }

    #[test]
    fn only_regular_workspace_files_within_the_cap_are_opened() {
        let (root, ws) = workspace();
        let at = |rel: &str| ws.root().join(rel);
        std::fs::write(at("out/report.pdf"), b"%PDF-1.4 tiny").unwrap();
        let ok = open(Some(&ws), &at("out/report.pdf"), 1 << 20).unwrap();
        assert_eq!((ok.meta.file_name.as_str(), ok.meta.mime.as_str(), ok.meta.size), ("report.pdf", "application/pdf", 13));
        std::fs::write(at("notes.unknownext"), b"x").unwrap();
        assert_eq!(open(Some(&ws), &at("notes.unknownext"), 10).unwrap().meta.mime, "application/octet-stream");

        // A link that stays inside is followed; one that leads out is not.
        symlink("out/report.pdf", at("inside-link.pdf")).unwrap();
        assert_eq!(open(Some(&ws), &at("inside-link.pdf"), 1 << 20).unwrap().meta.size, 13);
        symlink(root.path().join("secret.txt"), at("leak.txt")).unwrap();
        let leak = open(Some(&ws), &at("leak.txt"), 1 << 20).unwrap_err();
        assert!(leak.starts_with("cannot open it inside the workspace"), "{leak}");
        assert!(!leak.contains("secret"), "{leak}");

        let fifo = std::ffi::CString::new(at("pipe").as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let started = std::time::Instant::now();
        assert_eq!(open(Some(&ws), &at("pipe"), 1 << 20).unwrap_err(), "it is a FIFO, not a regular file");
        assert!(started.elapsed() < Duration::from_secs(2), "a FIFO does not block the open");
        assert_eq!(open(Some(&ws), &at("out"), 1 << 20).unwrap_err(), "it is a directory, not a regular file");

        std::fs::write(at("big.bin"), vec![0u8; 3 << 20]).unwrap();
        let big = open(Some(&ws), &at("big.bin"), 1 << 20).unwrap_err();
        assert_eq!(big, "3 MB, over the channel's upload limit of 1 MB (config [channels.<name>] max_upload_mb)");
        assert_eq!(open(Some(&ws), &root.path().join("secret.txt"), 1 << 20).unwrap_err(), "not a file of the workspace");
        assert_eq!(open(Some(&ws), &at("gone.txt"), 1 << 20).unwrap_err(), "it no longer exists");
        assert_eq!(open(None, &at("out/report.pdf"), 1 << 20).unwrap_err(), "the workspace cannot be opened");
    }

    #[test]
    fn names_are_clean_and_notes_name_the_file() {
        assert_eq!(shown_name(Path::new("/ws/a\u{1b}[31m.txt")), "a[31m.txt");
        assert_eq!(shown_name(Path::new("/ws/")), "ws");
        assert_eq!(note("a.pdf", "why"), "[not sent: a.pdf (why)]");
    }
}
