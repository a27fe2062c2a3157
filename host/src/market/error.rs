//! Every way the marketplace refuses, each with its own message.

use std::path::PathBuf;

use crate::plugins::PluginError;

/// A marketplace refusal. Each variant is one refusal of MARKETPLACE.md, so
/// the user reads what went wrong and what to do, never a generic failure.
#[derive(Debug, thiserror::Error)]
// Each variant's fields are named and explained by its #[error] message.
#[allow(missing_docs)]
pub enum MarketError {
    /// The index or artifact could not be fetched.
    #[error("cannot fetch {url}: {message}")]
    Fetch { url: String, message: String },
    /// A URL the marketplace does not accept.
    #[error("{url}: {message}")]
    Url { url: String, message: String },
    /// No pinned key of the index verifies its signature.
    #[error("the index `{index}` is not signed by any of its pinned keys ({keys}): {message}; nothing was installed (is `keys` in [[plugin_index]] right, or was the index tampered with?)")]
    IndexSignature { index: String, keys: String, message: String },
    /// An older index than one already seen: a rollback.
    #[error("the index `{index}` has version {got}, older than version {seen} already seen: refusing a rollback (someone may be serving an old index to hide updates)")]
    Rollback { index: String, seen: u64, got: u64 },
    /// The same version number with different content.
    #[error("the index `{index}` has version {version}, the version already seen, but different content: refusing it (an index must raise its version on every change)")]
    Replay { index: String, version: u64 },
    /// The index's `expires` is past: a freeze.
    #[error("the index `{index}` expired at {expires}: refusing it (its operator must re-sign it; an index that never changes could be hiding updates)")]
    Expired { index: String, expires: String },
    /// The index is signed but not a valid index document.
    #[error("the index `{index}` is not a valid index: {message}")]
    IndexFormat { index: String, message: String },
    /// No configured index.
    #[error("no plugin index is configured: add a [[plugin_index]] table (name, url, keys) to {config}")]
    NoIndex { config: PathBuf },
    /// `--index N` names no configured index.
    #[error("no plugin index named `{name}` (configured: {known})")]
    UnknownIndex { name: String, known: String },
    /// The plugin is in no index.
    #[error("no plugin named `{name}` in {searched}")]
    NotFound { name: String, searched: String },
    /// The version requirement matches no version.
    #[error("plugin `{name}` has no version matching `{req}` (available: {available})")]
    NoMatchingVersion { name: String, req: String, available: String },
    /// A malformed `NAME@REQ`.
    #[error("`{given}` is not NAME or NAME@VERSION-REQUIREMENT: {message}")]
    BadRequirement { given: String, message: String },
    /// Only yanked versions match.
    #[error("{name} {version} was yanked by its publisher and is not installed (pick another version, e.g. `{name}@<{version}`)")]
    Yanked { name: String, version: String },
    /// The publisher is not in `[publishers]`.
    #[error("plugin `{name}` is published by `{publisher}`, who is not in [publishers] of {config}: rerun with --trust-publisher to pin its key {key} (from the signed index), or add [publishers.{publisher}] keys = [\"{key}\"]")]
    UnknownPublisher { name: String, publisher: String, key: String, config: PathBuf },
    /// The artifact's signature is by a key the publisher has not pinned.
    #[error("{name} {version} is signed by key {key_id}, which is not a pinned key of publisher `{publisher}` (pinned: {pinned})")]
    PublisherKey { name: String, version: String, publisher: String, key_id: String, pinned: String },
    /// The artifact's signature does not verify.
    #[error("the signature of {name} {version} does not verify with publisher `{publisher}`'s key {key_id}: {message}")]
    ArtifactSignature { name: String, version: String, publisher: String, key_id: String, message: String },
    /// The signed comment names another plugin, version or digest.
    #[error("the signature of {name} {version} was made for another artifact: it signs `{signed}`, expected `{expected}` (a validly signed build relabelled as another plugin or version)")]
    CommentMismatch { name: String, version: String, signed: String, expected: String },
    /// The artifact's bytes are not the ones the index names.
    #[error("{what}: SHA-256 is {got}, expected {expected}: the file was changed in transit or on the server; nothing was installed")]
    Digest { what: String, expected: String, got: String },
    /// The artifact's size is not the one the index names.
    #[error("{what}: {got} bytes, the index says {expected}")]
    Size { what: String, expected: u64, got: u64 },
    /// The manifest inside says another name or version than the index.
    #[error("{what}: its manifest says {got}, the index says {expected}")]
    ManifestMismatch { what: String, expected: String, got: String },
    /// The component implements a world this host does not link.
    #[error("{what}: unsupported world: {message}")]
    UnsupportedWorld { what: String, message: String },
    /// The import audit refused the component.
    #[error("{what}: import audit failed: {message}")]
    Audit { what: String, message: String },
    /// The user has not approved (yet).
    #[error("{what} needs your approval: rerun with --yes, or run it on a terminal to answer the question")]
    NeedsApproval { what: String },
    /// An update asks for more than was approved.
    #[error("the update of {name} to {version} asks for more than you approved ({changes}); it is staged: approve it with `chitin plugin approve {name}`")]
    AwaitingApproval { name: String, version: String, changes: String },
    /// `--frozen` and the lock would change.
    #[error("--frozen: the lock would change: {change}")]
    Frozen { change: String },
    /// The lock file cannot be read or written.
    #[error("{}: {message}", path.display())]
    Lock { path: PathBuf, message: String },
    /// A key file is unusable.
    #[error("{}: {message}", path.display())]
    Key { path: PathBuf, message: String },
    /// An I/O failure on a named file.
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// Something the plugin layer refused (manifest, collision, link).
    #[error(transparent)]
    Plugin(#[from] PluginError),
}

impl MarketError {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> MarketError {
        let path = path.into();
        move |source| MarketError::Io { path, source }
    }
}
