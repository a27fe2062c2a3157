//! Image attachments of an inbound message, shown to the model as image
//! parts of the user message.
//!
//! The session keeps only the file's path (`meta.media`, written by
//! `pending::user_message`); BUILD reads the file again and attaches its
//! bytes to the prompt's copy of the message ([`attach`]), so the JSONL never
//! holds base64 and a deleted file costs one note, not a failed turn. Only
//! the current message carries images: history shows them as
//! `[attachment: path]` breadcrumbs (`session::with_breadcrumbs`), as
//! nanobot does, so an old photo is not paid for on every turn.
//!
//! A path is read only when it names a file directly inside
//! `<data>/media/<channel>/`, where the host stores what it downloads: a
//! path from anywhere else (an API client's history, a planted metadata
//! key) is refused. The file is opened without following symlinks and must
//! be a regular file; its kind comes from its magic bytes, never from its
//! name; it is capped at `[agent] max_image_kb`.

use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use serde_json::Value;

use crate::session::{ImagePart, Message};

/// Why an image attachment is not shown.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
// Each variant's fields are named and explained by its #[error] message.
#[allow(missing_docs)]
pub enum ImageError {
    /// Not a file the host downloaded.
    #[error("it is not in the media directory")]
    OutsideMedia,
    /// Deleted since it arrived.
    #[error("the file is no longer there")]
    Missing,
    /// A directory, symlink, FIFO, ...
    #[error("it is not a regular file")]
    NotRegular,
    /// Over `max_image_kb`.
    #[error("it is {size} bytes, over the limit of {cap} bytes ([agent] max_image_kb)")]
    TooLarge { size: u64, cap: u64 },
    /// The bytes are not JPEG, PNG, GIF or WebP.
    #[error("it is not a JPEG, PNG, GIF or WebP image")]
    NotAnImage,
    /// Any other read failure.
    #[error("it could not be read: {0}")]
    Io(String),
}

/// The media type of an image by its first bytes: JPEG, PNG, GIF or WebP
/// (what every vision API accepts).
pub fn sniff(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if head.len() >= 12 && &head[..4] == b"RIFF" && &head[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// Whether the file at `path` is an image by its magic bytes (false when it
/// cannot be read: it is then handled as a document, which says why).
pub fn is_image(path: &Path) -> bool {
    let Ok(mut file) = open_regular(path) else { return false };
    let mut head = [0u8; 12];
    let mut got = 0;
    while got < head.len() {
        match file.read(&mut head[got..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    sniff(&head[..got]).is_some()
}

/// Opens `path` for reading without following a symlink (nor blocking on a
/// FIFO), and checks it is a regular file.
fn open_regular(path: &Path) -> Result<std::fs::File, ImageError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ImageError::Missing,
        // ELOOP: the last component is a symlink.
        _ if e.raw_os_error() == Some(libc::ELOOP) => ImageError::NotRegular,
        _ => ImageError::Io(e.to_string()),
    })?;
    let meta = file.metadata().map_err(|e| ImageError::Io(e.to_string()))?;
    if !meta.is_file() {
        return Err(ImageError::NotRegular);
    }
    Ok(file)
}

/// Checks that `path` is `<media_root>/<channel>/<file>`, with the channel
/// directory really inside the media root (no symlink out of it).
fn check_in_media(media_root: &Path, path: &Path) -> Result<(), ImageError> {
    let rest = path.strip_prefix(media_root).map_err(|_| ImageError::OutsideMedia)?;
    let parts: Vec<Component> = rest.components().collect();
    if parts.len() != 2 || !parts.iter().all(|c| matches!(c, Component::Normal(_))) {
        return Err(ImageError::OutsideMedia);
    }
    let root = std::fs::canonicalize(media_root).map_err(|_| ImageError::Missing)?;
    let parent = path.parent().ok_or(ImageError::OutsideMedia)?;
    let parent = std::fs::canonicalize(parent).map_err(|_| ImageError::Missing)?;
    if parent.parent() != Some(root.as_path()) {
        return Err(ImageError::OutsideMedia);
    }
    Ok(())
}

/// Reads the image at `path` for the model: inside `media_root`, a regular
/// file of at most `max_bytes`, an image by its magic bytes.
pub fn load(media_root: &Path, path: &Path, max_bytes: u64) -> Result<ImagePart, ImageError> {
    check_in_media(media_root, path)?;
    let file = open_regular(path)?;
    let size = file.metadata().map_err(|e| ImageError::Io(e.to_string()))?.len();
    if size > max_bytes {
        return Err(ImageError::TooLarge { size, cap: max_bytes });
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(max_bytes + 1).read_to_end(&mut bytes).map_err(|e| ImageError::Io(e.to_string()))?;
    if bytes.len() as u64 > max_bytes {
        return Err(ImageError::TooLarge { size: bytes.len() as u64, cap: max_bytes });
    }
    let media_type = sniff(&bytes).ok_or(ImageError::NotAnImage)?;
    Ok(ImagePart { media_type, base64: Arc::from(base64::engine::general_purpose::STANDARD.encode(&bytes)) })
}

/// The media paths a message names (`meta.media`).
fn media_paths(message: &Message) -> Vec<PathBuf> {
    message.meta.get("media").and_then(Value::as_array).map(|m| m.iter().filter_map(Value::as_str).map(PathBuf::from).collect()).unwrap_or_default()
}

/// Attaches the images `message` names to it, for the prompt; each one
/// that cannot be shown becomes a note in its text instead.
pub fn attach(message: &mut Message, media_root: &Path, max_bytes: u64) {
    let mut notes = Vec::new();
    for path in media_paths(message) {
        match load(media_root, &path, max_bytes) {
            Ok(image) => message.images.push(image),
            Err(reason) => {
                tracing::info!(path = %path.display(), "image not shown to the model: {reason}");
                notes.push(format!("[image {} not shown: {reason}]", path.display()));
            }
        }
    }
    if !notes.is_empty() {
        let text = message.content.take().unwrap_or_default();
        let notes = notes.join("\n");
        message.content = Some(if text.is_empty() { notes } else { format!("{text}\n{notes}") });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";

    fn media() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("media");
        std::fs::create_dir_all(root.join("telegram")).unwrap();
        (dir, root)
    }

    #[test]
    fn sniffs_by_magic_bytes() {
        assert_eq!(sniff(PNG), Some("image/png"));
        assert_eq!(sniff(&[0xFF, 0xD8, 0xFF, 0xE0]), Some("image/jpeg"));
        assert_eq!(sniff(b"GIF89a..."), Some("image/gif"));
        assert_eq!(sniff(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(sniff(b"RIFF\0\0\0\0WAVE"), None);
        assert_eq!(sniff(b"hello"), None);
        assert_eq!(sniff(b""), None);
    }

    #[test]
    fn loads_an_image_in_the_media_dir() {
        let (_dir, root) = media();
        let path = root.join("telegram/abc.jpg");
        std::fs::write(&path, PNG).unwrap();
        let image = load(&root, &path, 1024).unwrap();
        // The kind comes from the bytes, not from the `.jpg` name.
        assert_eq!(image.media_type, "image/png");
        assert_eq!(&*image.base64, base64::engine::general_purpose::STANDARD.encode(PNG));
        assert!(is_image(&path));
    }

    #[test]
    fn refuses_what_is_not_a_capped_image_in_the_media_dir() {
        let (dir, root) = media();
        let fake = root.join("telegram/fake.png");
        std::fs::write(&fake, "not an image").unwrap();
        assert_eq!(load(&root, &fake, 1024), Err(ImageError::NotAnImage));
        assert!(!is_image(&fake));
        let big = root.join("telegram/big.png");
        std::fs::write(&big, [PNG, &[0u8; 100]].concat()).unwrap();
        assert_eq!(load(&root, &big, 50), Err(ImageError::TooLarge { size: PNG.len() as u64 + 100, cap: 50 }));
        assert_eq!(load(&root, &root.join("telegram/gone.png"), 50), Err(ImageError::Missing));
        let outside = dir.path().join("secret.png");
        std::fs::write(&outside, PNG).unwrap();
        assert_eq!(load(&root, &outside, 1024), Err(ImageError::OutsideMedia));
        assert_eq!(load(&root, &root.join("telegram/../../secret.png"), 1024), Err(ImageError::OutsideMedia));
        assert_eq!(load(&root, &root.join("x.png"), 1024), Err(ImageError::OutsideMedia));
        // A symlink planted in the media dir is not followed.
        let link = root.join("telegram/link.png");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        assert_eq!(load(&root, &link, 1024), Err(ImageError::NotRegular));
        // Nor a channel directory that is a symlink out of it.
        std::os::unix::fs::symlink(dir.path(), root.join("evil")).unwrap();
        assert_eq!(load(&root, &root.join("evil/secret.png"), 1024), Err(ImageError::OutsideMedia));
        std::fs::create_dir(root.join("telegram/dir.png")).unwrap();
        assert_eq!(load(&root, &root.join("telegram/dir.png"), 1024), Err(ImageError::NotRegular));
    }

    #[test]
    fn attach_adds_images_and_notes() {
        let (_dir, root) = media();
        let ok = root.join("telegram/a.png");
        std::fs::write(&ok, PNG).unwrap();
        let gone = root.join("telegram/gone.png");
        let mut message = Message::user("look").with_meta("media", serde_json::json!([ok.display().to_string(), gone.display().to_string()]));
        attach(&mut message, &root, 1024);
        assert_eq!(message.images.len(), 1);
        assert_eq!(message.text(), format!("look\n[image {} not shown: the file is no longer there]", gone.display()));
        // Never persisted.
        assert!(!serde_json::to_string(&message).unwrap().contains(&*message.images[0].base64));
    }
}
