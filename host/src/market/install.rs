//! The install pipeline: everything between a name (or a URL) and an
//! installed, locked component, with nothing written before the last step.
//! Fetch and verify the index (pinned key, rollback, expiry), pick the
//! version, fetch the artifact, check size and SHA-256, verify the
//! publisher's signature and its signed comment (name, version, digest),
//! read the manifest and world, audit the imports, refuse name and tool
//! collisions, compile and link it into the cache, show the review, get the
//! user's approval ([`Approve`]), then write `plugins/<name>/<sha256>.wasm`
//! and `chitin.lock`. The binary only glues: it builds the [`Installer`]
//! from the config and implements [`Approve`] with its prompt.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use reqwest::Url;

use super::index::{self, Index, IndexPlugin, IndexSource, IndexVersion, PublisherConfig};
use super::lock::{Lock, Locked};
use super::snapshot::Snapshot;
use super::{MarketError, audit, fetch, sha256_hex, sign, store};
use crate::plugins::catalog::check_install;
use crate::plugins::world::World;
use crate::plugins::{GrantConfig, Limits, LoadedPlugin, Manifest, PluginRuntime, PluginSource};

/// The largest `index.json` read.
pub const MAX_INDEX_BYTES: u64 = 16 << 20;
/// The largest signature read.
pub const MAX_SIGNATURE_BYTES: u64 = 4 << 10;

/// Everything a marketplace command works with: the parts of the config it
/// reads, where the files go, and the runtime that compiles candidates.
pub struct Installer {
    /// The data directory's root (the index state lives under it).
    pub data_root: PathBuf,
    /// `<data dir>/plugins`.
    pub plugins_dir: PathBuf,
    /// The config file (named in errors; publishers are pinned in it).
    pub config_file: PathBuf,
    /// `chitin.lock` beside the config file.
    pub lock_path: PathBuf,
    /// `[limits]`.
    pub limits: Limits,
    /// `[[plugin_index]]`.
    pub plugin_index: Vec<IndexSource>,
    /// `[publishers]`: the pinned keys.
    pub publishers: BTreeMap<String, PublisherConfig>,
    /// `[plugins.<name>]`: the grants.
    pub grants: BTreeMap<String, GrantConfig>,
    /// Compiles and links candidates (into the cache).
    pub runtime: PluginRuntime,
}

impl Installer {
    /// `[limits] max_component_mb` in bytes.
    pub fn max_component(&self) -> u64 {
        self.limits.max_component_mb.saturating_mul(1 << 20)
    }

    /// The configured indexes, or the one `--index` names.
    pub fn sources(&self, only: Option<&str>) -> Result<Vec<IndexSource>, MarketError> {
        if self.plugin_index.is_empty() {
            return Err(MarketError::NoIndex { config: self.config_file.clone() });
        }
        match only {
            None => Ok(self.plugin_index.clone()),
            Some(name) => match self.plugin_index.iter().find(|s| s.name == name) {
                Some(source) => Ok(vec![source.clone()]),
                None => Err(MarketError::UnknownIndex { name: name.into(), known: self.plugin_index.iter().map(|s| s.name.clone()).collect::<Vec<_>>().join(", ") }),
            },
        }
    }

    /// Fetches and accepts (signature, rollback, expiry) one index.
    pub async fn index(&self, source: &IndexSource) -> Result<(Index, Url), MarketError> {
        let url = fetch::parse(&source.url)?;
        let timeout = Duration::from_secs(source.timeout_secs.max(1));
        let bytes = fetch::get(&url, MAX_INDEX_BYTES, timeout).await?;
        let sig_url = fetch::parse(&format!("{}.minisig", url.as_str()))?;
        let sig = fetch::get(&sig_url, MAX_SIGNATURE_BYTES, timeout).await?;
        let sig = String::from_utf8(sig).map_err(|_| MarketError::IndexSignature { index: source.name.clone(), keys: String::new(), message: "the signature file is not text".into() })?;
        let index = index::accept(source, &index::state_dir(&self.data_root), &bytes, &sig, Utc::now())?;
        Ok((index, url))
    }
}

/// A verified, audited, compiled component not yet installed.
pub struct Candidate {
    /// The plugin's name.
    pub name: String,
    /// Its manifest version.
    pub version: String,
    /// The component's bytes, as verified.
    pub bytes: Arc<[u8]>,
    /// Hex SHA-256 of the component.
    pub sha256: String,
    /// The artifact URL it was fetched from.
    pub url: String,
    /// `index:<name>` or the URL it came from.
    pub source: String,
    /// The publisher (a key of `[publishers]`).
    pub publisher: String,
    /// The id of the key that signed it.
    pub key_id: String,
    /// The publisher key to pin when it came from the index
    /// (`--trust-publisher`).
    pub trust: Option<String>,
    /// What it may touch, for the user to approve.
    pub snapshot: Snapshot,
    /// Remarks of the import audit, shown with the approval question.
    pub notes: Vec<String>,
    /// The compiled and linked plugin.
    pub plugin: LoadedPlugin,
}

impl Candidate {
    /// Its lock-file entry.
    pub fn locked(&self) -> Locked {
        Locked {
            version: self.version.clone(),
            source: self.source.clone(),
            url: self.url.clone(),
            sha256: self.sha256.clone(),
            size: self.bytes.len() as u64,
            world: self.snapshot.world.clone(),
            publisher: self.publisher.clone(),
            key_id: self.key_id.clone(),
            approved_at: Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            approved: self.snapshot.clone(),
            escalations: Vec::new(),
        }
    }
}

/// What the binary supplies to an install: the review shown, the user's
/// yes, and the pinning of a new publisher's key in the config.
pub trait Approve {
    /// The caller's error: a [`MarketError`] converts into it.
    type Error: From<MarketError>;
    /// Shows the review of `candidate`, against `before` (what is installed).
    fn review(&mut self, candidate: &Candidate, before: Option<&Locked>) -> Result<(), Self::Error>;
    /// The user's yes to `what` (e.g. `install NAME VERSION`).
    fn approve(&mut self, what: &str) -> Result<(), Self::Error>;
    /// Pins `key` as the key of `publisher` (`--trust-publisher`), before
    /// anything is installed.
    fn pin_publisher(&mut self, publisher: &str, key: &str) -> Result<(), Self::Error>;
}

/// What an install did.
pub enum Installed {
    /// The locked version was already installed and intact.
    Already {
        /// The plugin's name.
        name: String,
        /// The installed version.
        version: String,
    },
    /// `name` `version` was written to `path`.
    New {
        /// The plugin's name.
        name: String,
        /// The version written.
        version: String,
        /// Where the component was written.
        path: PathBuf,
    },
}

/// The publisher keys `publisher` is pinned with, or (with
/// `--trust-publisher`) the ones the signed index offers.
pub fn publisher_keys(ctx: &Installer, index: &Index, name: &str, publisher: &str, trust: bool) -> Result<(Vec<String>, bool), MarketError> {
    if let Some(pinned) = ctx.publishers.get(publisher) {
        return Ok((pinned.keys.clone(), false));
    }
    let offered = index.publishers.get(publisher).map(|p| p.keys.clone()).unwrap_or_default();
    if trust && !offered.is_empty() {
        return Ok((offered, true));
    }
    Err(MarketError::UnknownPublisher {
        name: name.into(),
        publisher: publisher.into(),
        key: offered.first().cloned().unwrap_or_else(|| "(the index offers none)".into()),
        config: ctx.config_file.clone(),
    })
}

/// Fetches and checks `entry` of plugin `name` from `index` (at `base`),
/// then audits, collision-checks and compiles it.
pub async fn obtain(ctx: &Installer, source: &IndexSource, index: &Index, base: &Url, name: &str, plugin: &IndexPlugin, entry: &IndexVersion, trust: bool) -> Result<Candidate, MarketError> {
    let version = entry.version.clone();
    let what = format!("{name} {version}");
    let (keys, from_index) = publisher_keys(ctx, index, name, &plugin.publisher, trust)?;
    let url = fetch::join(base, &entry.artifact.url)?;
    let cap = entry.artifact.size.min(ctx.max_component());
    if entry.artifact.size > ctx.max_component() {
        return Err(MarketError::Size { what: format!("{what} is larger than [limits] max_component_mb"), expected: ctx.max_component(), got: entry.artifact.size });
    }
    // One byte past the size the index names is enough to know it lies.
    let bytes = fetch::get(&url, cap + 1, Duration::from_secs(source.timeout_secs.max(1))).await?;
    if bytes.len() as u64 != entry.artifact.size {
        return Err(MarketError::Size { what: format!("{what} ({url})"), expected: entry.artifact.size, got: bytes.len() as u64 });
    }
    let sha256 = sha256_hex(&bytes);
    if sha256 != entry.artifact.sha256.to_ascii_lowercase() {
        return Err(MarketError::Digest { what: format!("{what} ({url})"), expected: entry.artifact.sha256.clone(), got: sha256 });
    }
    let verified = check_artifact(name, &version, &plugin.publisher, &keys, &bytes, &sha256, &entry.signature)?;
    let (plugin_loaded, snapshot, notes) = review_component(ctx, &what, name, &version, bytes.clone().into())?;
    // What `search` showed must be what is reviewed: an index that
    // describes a component as asking less than it does is refused.
    if entry.capabilities != plugin_loaded.manifest.capabilities {
        return Err(MarketError::ManifestMismatch {
            what: format!("{what}: capabilities"),
            expected: serde_json::to_string(&entry.capabilities).unwrap_or_default(),
            got: shown(&serde_json::to_string(&plugin_loaded.manifest.capabilities).unwrap_or_default(), 1024, "capabilities"),
        });
    }
    if snapshot.world != entry.world {
        return Err(MarketError::UnsupportedWorld { what, message: format!("it exports {}, the index says {}", snapshot.world, entry.world) });
    }
    Ok(Candidate {
        name: name.into(),
        version,
        bytes: bytes.into(),
        sha256,
        url: url.to_string(),
        source: format!("index:{}", source.name),
        publisher: plugin.publisher.clone(),
        key_id: verified.key_id,
        trust: from_index.then(|| verified.key),
        snapshot,
        notes,
        plugin: plugin_loaded,
    })
}

/// The publisher's signature over `bytes` and its signed comment.
pub fn check_artifact(name: &str, version: &str, publisher: &str, keys: &[String], bytes: &[u8], sha256: &str, signature: &str) -> Result<sign::Verified, MarketError> {
    let verified = sign::verify(keys, bytes, signature).map_err(|e| match e {
        sign::VerifyError::NoSuchKey { signed_by } => MarketError::PublisherKey {
            name: name.into(),
            version: version.into(),
            publisher: publisher.into(),
            key_id: signed_by,
            pinned: keys.iter().map(|k| sign::key_id(k).unwrap_or_else(|| "(not a key)".into())).collect::<Vec<_>>().join(", "),
        },
        sign::VerifyError::Invalid { key_id, message } => MarketError::ArtifactSignature { name: name.into(), version: version.into(), publisher: publisher.into(), key_id, message },
    })?;
    let expected = sign::artifact_comment(name, version, sha256);
    if verified.trusted_comment != expected {
        return Err(MarketError::CommentMismatch { name: name.into(), version: version.into(), signed: crate::text::clip_for_terminal(&verified.trusted_comment, 512, "comment"), expected });
    }
    Ok(verified)
}

/// Reads the manifest and world, audits the imports, refuses collisions and
/// compiles and links the component (nothing of it runs).
pub fn review_component(ctx: &Installer, what: &str, name: &str, version: &str, bytes: Arc<[u8]>) -> Result<(LoadedPlugin, Snapshot, Vec<String>), MarketError> {
    let world = World::detect(&bytes).map_err(|e| MarketError::UnsupportedWorld { what: what.into(), message: e.message.clone() })?;
    let manifest = Manifest::from_component(&bytes).map_err(|source| crate::plugins::PluginError::Manifest { plugin: what.into(), source })?;
    if manifest.name != name || manifest.version != version {
        return Err(MarketError::ManifestMismatch { what: what.into(), expected: format!("{name} {version}"), got: format!("{} {}", shown(&manifest.name, 64, "name"), shown(&manifest.version, 64, "version")) });
    }
    let found = audit::audit(&bytes, &manifest).map_err(|message| MarketError::Audit { what: what.into(), message })?;
    let snapshot = Snapshot::of(&manifest, &format!("chitin:plugin/{world}"), &found);
    let dir = ctx.plugins_dir.clone();
    let dest = store::file(&dir, name, &sha256_hex(&bytes));
    check_install(&manifest, &dir, &dest)?;
    let grant = ctx.grants.get(name).cloned().unwrap_or_else(|| snapshot.grant());
    let plugin = ctx.runtime.load(PluginSource::File(dest), bytes, &grant)?;
    Ok((plugin, snapshot, found.notes))
}

/// Compiles and links into the cache, so the first call does not compile,
/// and instantiates it once (no export is called).
pub async fn compile(ctx: &Installer, candidate: &Candidate) -> Result<(), MarketError> {
    ctx.runtime.check_instantiate(&candidate.plugin).await?;
    Ok(())
}

/// Writes the candidate's file and lock entry, and drops its other files.
pub fn commit<A: Approve>(ctx: &Installer, lock: &mut Lock, candidate: &Candidate, approver: &mut A) -> Result<PathBuf, A::Error> {
    // The publisher first: if its key cannot be pinned, nothing is installed.
    if let Some(key) = &candidate.trust {
        approver.pin_publisher(&candidate.publisher, key)?;
    }
    let dir = ctx.plugins_dir.clone();
    let path = store::write(&dir, &candidate.name, &candidate.sha256, &candidate.bytes)?;
    lock.staged.remove(&candidate.name);
    lock.plugins.insert(candidate.name.clone(), candidate.locked());
    lock.save(&ctx.lock_path)?;
    store::prune(&dir, &candidate.name, &[&candidate.sha256])?;
    Ok(path)
}

/// `NAME[@REQ]`.
pub fn parse_target(target: &str) -> Result<(String, semver::VersionReq), MarketError> {
    let (name, req) = target.split_once('@').unwrap_or((target, "*"));
    let req = semver::VersionReq::parse(req).map_err(|e| MarketError::BadRequirement { given: target.into(), message: e.to_string() })?;
    check_name(name).map_err(|message| MarketError::BadRequirement { given: target.into(), message })?;
    Ok((name.to_string(), req))
}

/// A plugin name as manifests spell them; it becomes a directory name
/// under plugins/, so nothing else (no `/`, no `..`) is accepted.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = name.chars().next().is_some_and(|c| c.is_ascii_lowercase()) && name.len() <= 64 && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if ok { Ok(()) } else { Err(format!("`{}` is not a plugin name (a lowercase letter, then letters, digits, `-` or `_`)", shown(name, 64, "name"))) }
}

/// `chitin plugin install NAME[@REQ] | URL`: from the indexes (or the one
/// named), with `trust` pinning a publisher the signed index offers, and
/// `frozen` reproducing exactly what `lock` says.
pub async fn install<A: Approve>(ctx: &Installer, lock: &mut Lock, target: &str, index_name: Option<&str>, trust: bool, frozen: bool, approver: &mut A) -> Result<Installed, A::Error> {
    if target.contains("://") {
        return install_url(ctx, lock, target, frozen, approver).await;
    }
    let (name, mut req) = parse_target(target)?;
    let locked = lock.plugins.get(&name).cloned();
    if frozen {
        // Reproduce exactly what the lock says, or fail.
        let Some(locked) = &locked else { return Err(MarketError::Frozen { change: format!("{name} is not in {}", ctx.lock_path.display()) }.into()) };
        req = semver::VersionReq::parse(&format!("={}", locked.version)).map_err(|e| MarketError::BadRequirement { given: locked.version.clone(), message: e.to_string() })?;
    }
    let mut found = None;
    let mut searched = Vec::new();
    for source in ctx.sources(index_name)? {
        let (index, base) = ctx.index(&source).await?;
        searched.push(format!("`{}`", source.name));
        if index.plugins.contains_key(&name) {
            found = Some((source, index, base));
            break;
        }
    }
    let Some((source, index, base)) = found else { return Err(MarketError::NotFound { name, searched: format!("the indexes {}", searched.join(", ")) }.into()) };
    let (plugin, entry) = index.pick(&name, &req)?;
    if let Some(old) = &locked
        && old.sha256 == entry.artifact.sha256
        && old.source == format!("index:{}", source.name)
    {
        let path = store::file(&ctx.plugins_dir, &name, &old.sha256);
        if store::read_checked(&path, &name, old).is_ok() {
            return Ok(Installed::Already { name, version: old.version.clone() });
        }
    }
    let candidate = obtain(ctx, &source, &index, &base, &name, plugin, entry, trust).await?;
    if frozen && locked.as_ref().is_some_and(|l| l.sha256 != candidate.sha256) {
        return Err(MarketError::Frozen { change: format!("{name} {} in the index has SHA-256 {}, the lock {}", candidate.version, candidate.sha256, locked.as_ref().map(|l| l.sha256.as_str()).unwrap_or("")) }.into());
    }
    compile(ctx, &candidate).await?;
    approver.review(&candidate, locked.as_ref())?;
    // Reinstalling what is locked (a new machine, `--frozen`) needs no new
    // approval: the lock is the approval.
    let already_approved = locked.as_ref().is_some_and(|l| l.sha256 == candidate.sha256 && l.approved == candidate.snapshot);
    if !already_approved {
        approver.approve(&format!("install {name} {}", candidate.version))?;
    }
    let path = commit(ctx, lock, &candidate, approver)?;
    Ok(Installed::New { name, version: candidate.version, path })
}

/// `install https://…/x.wasm`: the signature beside it (`.minisig`), by a
/// pinned publisher key; the name and version come from the signed comment.
async fn install_url<A: Approve>(ctx: &Installer, lock: &mut Lock, target: &str, frozen: bool, approver: &mut A) -> Result<Installed, A::Error> {
    let url = fetch::parse(target)?;
    let timeout = Duration::from_secs(60);
    let bytes = fetch::get(&url, ctx.max_component(), timeout).await?;
    let sig = fetch::get(&fetch::parse(&format!("{}.minisig", url.as_str()))?, MAX_SIGNATURE_BYTES, timeout).await?;
    let sig = String::from_utf8_lossy(&sig).into_owned();
    let sha256 = sha256_hex(&bytes);
    let signed_by = sign::signature_key_id(&sig).unwrap_or_default();
    let Some((publisher, keys)) = ctx.publishers.iter().find(|(_, p)| p.keys.iter().any(|k| sign::key_id(k).as_deref() == Some(signed_by.as_str()))) else {
        return Err(MarketError::PublisherKey { name: target.into(), version: String::new(), publisher: "(any)".into(), key_id: signed_by, pinned: ctx.publishers.keys().cloned().collect::<Vec<_>>().join(", ") }.into());
    };
    let manifest = Manifest::from_component(&bytes).map_err(|source| MarketError::from(crate::plugins::PluginError::Manifest { plugin: target.into(), source }))?;
    let (name, version) = (manifest.name.clone(), manifest.version.clone());
    let what = format!("{name} {version}");
    let verified = check_artifact(&name, &version, publisher, &keys.keys, &bytes, &sha256, &sig)?;
    let locked = lock.plugins.get(&name).cloned();
    if frozen && locked.as_ref().is_none_or(|l| l.sha256 != sha256) {
        return Err(MarketError::Frozen { change: format!("{what} from {url}") }.into());
    }
    let (plugin, snapshot, notes) = review_component(ctx, &what, &name, &version, bytes.clone().into())?;
    let candidate = Candidate { name: name.clone(), version, bytes: bytes.into(), sha256, url: url.to_string(), source: url.to_string(), publisher: publisher.clone(), key_id: verified.key_id, trust: None, snapshot, notes, plugin };
    compile(ctx, &candidate).await?;
    approver.review(&candidate, locked.as_ref())?;
    approver.approve(&format!("install {what}"))?;
    let path = commit(ctx, lock, &candidate, approver)?;
    Ok(Installed::New { name, version: candidate.version, path })
}

/// One line of index- or plugin-controlled text for an error: at most
/// `max_bytes`, control characters and newlines shown as escapes.
fn shown(text: &str, max_bytes: usize, what: &str) -> String {
    crate::text::clip_for_terminal(text, max_bytes, what).replace('\n', "\\n")
}
