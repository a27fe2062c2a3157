//! Inbound media: the files attached to a platform message, downloaded by
//! the host before the message reaches the agent.
//!
//! The bytes never pass through the sandbox: the component's
//! `media-request(media-ref)` only says where the file is (Telegram's
//! `getFile` runs inside it and is small JSON), and the host runs the
//! download ([`Transport::download`]: network grant, secrets substituted in
//! the URL, body streamed to disk, stopped at `max_media_mb`, no partial
//! file kept). Files land in `<data>/media/<channel>/<blake3>.<ext>`: never
//! in the workspace, and the platform's file name is never a path (the
//! extension comes from a fixed table). A file that cannot be had becomes a
//! short note in the message text instead (`[photo not downloaded: larger
//! than 20 MB]`); the message itself is never dropped.

use std::path::{Path, PathBuf};

use crate::plugins::channel::MediaRef;
use crate::plugins::runtime::{LoadedPlugin, PluginRuntime};

use super::transport::{DownloadError, Transport};

/// `max_media_mb` when the config does not say.
pub const DEFAULT_MAX_MEDIA_MB: u64 = 20;

/// Largest `max_media_mb` accepted.
pub const MAX_MEDIA_MB: u64 = 2048;

/// `<data>/media/<channel>`.
pub fn media_dir(data_root: &Path, channel: &str) -> PathBuf {
    data_root.join("media").join(channel)
}

/// The file extension for a download: from the MIME type when it is one we
/// know, else from the kind; `bin` otherwise. Never from the platform's
/// file name.
pub fn extension(kind: &str, mime: Option<&str>) -> &'static str {
    let by_mime = match mime.map(|m| m.split(';').next().unwrap_or_default().trim().to_ascii_lowercase()).as_deref() {
        Some("image/jpeg") => Some("jpg"),
        Some("image/png") => Some("png"),
        Some("image/gif") => Some("gif"),
        Some("image/webp") => Some("webp"),
        Some("application/pdf") => Some("pdf"),
        Some("text/plain") => Some("txt"),
        Some("audio/ogg") => Some("ogg"),
        Some("audio/mpeg") => Some("mp3"),
        Some("video/mp4") => Some("mp4"),
        _ => None,
    };
    by_mime.unwrap_or(match kind {
        // Telegram re-encodes every photo as JPEG.
        "photo" => "jpg",
        "voice" => "ogg",
        "video" => "mp4",
        _ => "bin",
    })
}

/// The kind as shown in a note: a short word, whatever the component sent.
fn shown_kind(kind: &str) -> String {
    let word: String = kind.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').take(24).collect();
    if word.is_empty() { "file".into() } else { word }
}

/// Downloads every reference of one message; the files got and the notes
/// for the ones that could not be had.
pub async fn fetch(
    channel: &str,
    runtime: &PluginRuntime,
    plugin: &LoadedPlugin,
    transport: &Transport,
    refs: &[MediaRef],
    cap_mb: u64,
    dir: &Path,
) -> (Vec<PathBuf>, Vec<String>) {
    let cap = cap_mb * 1024 * 1024;
    let mut files = Vec::new();
    let mut notes = Vec::new();
    for media in refs {
        let kind = shown_kind(&media.kind);
        let outcome: Result<PathBuf, String> = async {
            // The platform said how big it is: no request for what is over the cap.
            if media.size.is_some_and(|size| size > cap) {
                return Err(DownloadError::TooLarge { cap }.to_string());
            }
            let request = runtime.channel_media_request(plugin, media).await.map_err(|e| transport.secrets().redact(&e.to_string()).into_owned())?;
            let (path, size) = transport.download(&request, cap, dir, extension(&media.kind, media.mime.as_deref())).await.map_err(|e| e.to_string())?;
            tracing::info!(channel, kind = %kind, size, path = %path.display(), "media downloaded");
            Ok(path)
        }
        .await;
        match outcome {
            Ok(path) => files.push(path),
            Err(reason) => {
                tracing::warn!(channel, kind = %kind, "media not downloaded: {reason}");
                let reason = crate::text::clip_for_terminal(&reason, 160, "reason");
                notes.push(format!("[{kind} not downloaded: {reason}]"));
            }
        }
    }
    (files, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extensions_come_from_a_fixed_table() {
        assert_eq!(extension("photo", None), "jpg");
        assert_eq!(extension("document", Some("application/pdf")), "pdf");
        assert_eq!(extension("document", Some("Image/PNG; q=1")), "png");
        assert_eq!(extension("document", Some("application/x-evil/../../x")), "bin");
        assert_eq!(extension("../../etc", None), "bin");
        assert_eq!(shown_kind("photo"), "photo");
        assert_eq!(shown_kind("\u{1b}[31m"), "31m");
        assert_eq!(shown_kind(""), "file");
    }
}
