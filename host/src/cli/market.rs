//! The marketplace commands: `chitin plugin search | install NAME[@REQ] |
//! update | approve | remove | verify | keygen | sign | index`.
//!
//! Every install goes the same way, and nothing is written before the last
//! step: fetch and verify the index (pinned key, rollback, expiry), pick the
//! version, fetch the artifact, check size and SHA-256, verify the
//! publisher's signature and its signed comment (name, version, digest),
//! read the manifest and world, audit the imports, refuse name and tool
//! collisions, compile and link it into the cache, show the review, get the
//! user's approval, then write `plugins/<name>/<sha256>.wasm` and
//! `chitin.lock`. The library side is `chitin::market`.

use std::collections::BTreeMap;
use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use chrono::Utc;
use clap::Subcommand;
use reqwest::Url;

use super::shown;
use chitin::app::AppOptions;
use chitin::config::{Config, DataDir};
use chitin::market::audit;
use chitin::market::index::{self, Index, IndexPlugin, IndexSource, IndexVersion, PublisherConfig};
use chitin::market::lock::{self, Lock, Locked};
use chitin::market::snapshot::Snapshot;
use chitin::market::{MarketError, fetch, sha256_hex, sign, store};
use chitin::plugins::catalog::check_install;
use chitin::plugins::world::World;
use chitin::plugins::{LoadedPlugin, Manifest, PluginRuntime, PluginSource, RuntimeConfig};

/// The largest `index.json` read.
const MAX_INDEX_BYTES: u64 = 16 << 20;
/// The largest signature read.
const MAX_SIGNATURE_BYTES: u64 = 4 << 10;

/// `chitin plugin index ...`: for index operators.
#[derive(Debug, Subcommand)]
pub enum IndexCommand {
    /// Add a signed component (see `chitin plugin sign`) to the index in
    /// DIR: copies it to DIR/artifacts/ and records its digest, size, world,
    /// capabilities and signature. Run `chitin plugin index sign` after.
    Add {
        /// The index directory (holds index.json; created if missing).
        dir: PathBuf,
        /// The packed, signed component (its signature at FILE.minisig).
        file: PathBuf,
        /// The publisher's name (users pin its key under [publishers.NAME]).
        #[arg(long)]
        publisher: String,
        /// The publisher's public key file (`keygen`'s .pub) or key line.
        #[arg(long, value_name = "FILE.pub|KEY")]
        publisher_key: String,
        /// A one-line description for `search`.
        #[arg(long, default_value = "")]
        description: String,
    },
    /// Mark NAME@VERSION as withdrawn: it is never installed.
    Yank {
        /// The index directory.
        dir: PathBuf,
        /// NAME@VERSION.
        target: String,
    },
    /// Raise the index version, set its expiry and sign index.json
    /// (writes index.json.minisig).
    Sign {
        /// The index directory.
        dir: PathBuf,
        /// The index signing key (`keygen`'s .key).
        #[arg(long)]
        key: PathBuf,
        /// The index's name (what users call it in [[plugin_index]]).
        #[arg(long)]
        name: String,
        /// Days until the index expires and must be signed again.
        #[arg(long, default_value_t = 30, allow_hyphen_values = true)]
        expires_days: i64,
    },
}

/// Everything a marketplace command works with.
struct Ctx {
    data: DataDir,
    config_file: PathBuf,
    config: Config,
    lock_path: PathBuf,
    runtime: PluginRuntime,
}

impl Ctx {
    fn open(data: &DataDir, options: &AppOptions) -> anyhow::Result<Ctx> {
        let config_file = options.config_file.clone().unwrap_or_else(|| data.config_file());
        let config = Config::load(&config_file)?;
        let runtime = PluginRuntime::with_isolation(
            RuntimeConfig { workspace: data.default_workspace(), cache_dir: Some(data.cache_dir()), limits: config.limits.clone() },
            options.compile_child.clone(),
        )?;
        let lock_path = lock::path_for(&config_file);
        Ok(Ctx { data: data.clone(), config_file, config, lock_path, runtime })
    }

    fn max_component(&self) -> u64 {
        self.config.limits.max_component_mb.saturating_mul(1 << 20)
    }

    /// The configured indexes, or the one `--index` names.
    fn sources(&self, only: Option<&str>) -> Result<Vec<IndexSource>, MarketError> {
        if self.config.plugin_index.is_empty() {
            return Err(MarketError::NoIndex { config: self.config_file.clone() });
        }
        match only {
            None => Ok(self.config.plugin_index.clone()),
            Some(name) => match self.config.plugin_index.iter().find(|s| s.name == name) {
                Some(source) => Ok(vec![source.clone()]),
                None => Err(MarketError::UnknownIndex { name: name.into(), known: self.config.plugin_index.iter().map(|s| s.name.clone()).collect::<Vec<_>>().join(", ") }),
            },
        }
    }

    /// Fetches and accepts (signature, rollback, expiry) one index.
    async fn index(&self, source: &IndexSource) -> Result<(Index, Url), MarketError> {
        let url = fetch::parse(&source.url)?;
        let timeout = Duration::from_secs(source.timeout_secs.max(1));
        let bytes = fetch::get(&url, MAX_INDEX_BYTES, timeout).await?;
        let sig_url = fetch::parse(&format!("{}.minisig", url.as_str()))?;
        let sig = fetch::get(&sig_url, MAX_SIGNATURE_BYTES, timeout).await?;
        let sig = String::from_utf8(sig).map_err(|_| MarketError::IndexSignature { index: source.name.clone(), keys: String::new(), message: "the signature file is not text".into() })?;
        let index = index::accept(source, &index::state_dir(self.data.root()), &bytes, &sig, Utc::now())?;
        Ok((index, url))
    }
}

/// A verified, audited, compiled component not yet installed.
struct Candidate {
    name: String,
    version: String,
    bytes: Arc<[u8]>,
    sha256: String,
    url: String,
    source: String,
    publisher: String,
    key_id: String,
    /// The publisher key to pin when it came from the index
    /// (`--trust-publisher`).
    trust: Option<String>,
    snapshot: Snapshot,
    notes: Vec<String>,
    plugin: LoadedPlugin,
}

impl Candidate {
    fn locked(&self) -> Locked {
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

/// The publisher keys `publisher` is pinned with, or (with
/// `--trust-publisher`) the ones the signed index offers.
fn publisher_keys(ctx: &Ctx, index: &Index, name: &str, publisher: &str, trust: bool) -> Result<(Vec<String>, bool), MarketError> {
    if let Some(pinned) = ctx.config.publishers.get(publisher) {
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
async fn obtain(ctx: &Ctx, source: &IndexSource, index: &Index, base: &Url, name: &str, plugin: &IndexPlugin, entry: &IndexVersion, trust: bool) -> Result<Candidate, MarketError> {
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
fn check_artifact(name: &str, version: &str, publisher: &str, keys: &[String], bytes: &[u8], sha256: &str, signature: &str) -> Result<sign::Verified, MarketError> {
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
        return Err(MarketError::CommentMismatch { name: name.into(), version: version.into(), signed: chitin::text::clip_for_terminal(&verified.trusted_comment, 512, "comment"), expected });
    }
    Ok(verified)
}

/// Reads the manifest and world, audits the imports, refuses collisions and
/// compiles and links the component (nothing of it runs).
fn review_component(ctx: &Ctx, what: &str, name: &str, version: &str, bytes: Arc<[u8]>) -> Result<(LoadedPlugin, Snapshot, Vec<String>), MarketError> {
    let world = World::detect(&bytes).map_err(|e| MarketError::UnsupportedWorld { what: what.into(), message: e.message.clone() })?;
    let manifest = Manifest::from_component(&bytes).map_err(|source| chitin::plugins::PluginError::Manifest { plugin: what.into(), source })?;
    if manifest.name != name || manifest.version != version {
        return Err(MarketError::ManifestMismatch { what: what.into(), expected: format!("{name} {version}"), got: format!("{} {}", shown(&manifest.name, 64, "name"), shown(&manifest.version, 64, "version")) });
    }
    let found = audit::audit(&bytes, &manifest).map_err(|message| MarketError::Audit { what: what.into(), message })?;
    let snapshot = Snapshot::of(&manifest, &format!("chitin:plugin/{world}"), &found);
    let dir = ctx.data.plugins_dir();
    let dest = store::file(&dir, name, &sha256_hex(&bytes));
    check_install(&manifest, &dir, &dest)?;
    let grant = ctx.config.plugins.get(name).cloned().unwrap_or_else(|| snapshot.grant());
    let plugin = ctx.runtime.load(PluginSource::File(dest), bytes, &grant)?;
    Ok((plugin, snapshot, found.notes))
}

/// Compiles and links into the cache, so the first call does not compile,
/// and instantiates it once (no export is called).
async fn compile(ctx: &Ctx, candidate: &Candidate) -> Result<(), MarketError> {
    ctx.runtime.check_instantiate(&candidate.plugin).await?;
    Ok(())
}

fn print_review(candidate: &Candidate, before: Option<&Locked>) -> std::io::Result<()> {
    let from = match before {
        Some(old) => format!(" (installed: {})", shown(&old.version, 64, "version")),
        None => String::new(),
    };
    outln!("{} {}{from}", candidate.name, shown(&candidate.version, 64, "version"))?;
    outln!("  from {}, published by {} (key {}), {} KiB, sha256 {}", candidate.source, shown(&candidate.publisher, 64, "publisher"), candidate.key_id, candidate.bytes.len() / 1024, candidate.sha256)?;
    if !candidate.plugin.manifest.description.is_empty() {
        outln!("  {}", shown(candidate.plugin.manifest.description.lines().next().unwrap_or(""), 512, "description"))?;
    }
    let tools: Vec<&str> = candidate.plugin.manifest.tools.iter().map(|t| t.name.as_str()).collect();
    if !tools.is_empty() {
        outln!("  tools: {}", shown(&tools.join(", "), 2048, "tools"))?;
    }
    match before {
        None => {
            outln!("  it may:")?;
            for line in candidate.snapshot.describe() {
                outln!("    {line}")?;
            }
        }
        Some(old) => {
            outln!("  before:")?;
            for line in old.approved.describe() {
                outln!("    {line}")?;
            }
            outln!("  after:")?;
            for line in candidate.snapshot.describe() {
                outln!("    {line}")?;
            }
            let more = old.approved.escalations(&candidate.snapshot);
            if more.is_empty() {
                outln!("  no new capabilities")?;
            } else {
                for e in more {
                    outln!("  NEW: {e}")?;
                }
            }
        }
    }
    for note in &candidate.notes {
        outln!("  note: {note}")?;
    }
    if let Some(key) = &candidate.trust {
        outln!("  publisher `{}` is new: its key {key} will be pinned in config.toml", shown(&candidate.publisher, 64, "publisher"))?;
    }
    Ok(())
}

/// The user's yes: `--yes`, or an answer on a terminal.
fn approve(what: &str, yes: bool) -> Result<(), MarketError> {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(MarketError::NeedsApproval { what: what.into() });
    }
    errln!("{what}? [y/N] ");
    let mut answer = String::new();
    let _ = std::io::stdin().lock().read_line(&mut answer);
    if matches!(answer.trim(), "y" | "Y" | "yes") { Ok(()) } else { Err(MarketError::NeedsApproval { what: what.into() }) }
}

/// Appends `[publishers.<name>] keys = [key]` to the config, keeping the
/// rest of the file as written; the file must still load afterwards.
fn pin_publisher(config_file: &Path, name: &str, key: &str) -> anyhow::Result<()> {
    let old = match std::fs::read_to_string(config_file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", config_file.display())),
    };
    let mut table = toml::Table::new();
    table.insert("keys".into(), toml::Value::Array(vec![toml::Value::String(key.into())]));
    let mut publishers = toml::Table::new();
    publishers.insert(name.into(), toml::Value::Table(table));
    let mut root = toml::Table::new();
    root.insert("publishers".into(), toml::Value::Table(publishers));
    let added = toml::to_string(&root)?;
    let new = format!("{old}{}\n# pinned by `chitin plugin install --trust-publisher`\n{added}", if old.ends_with('\n') || old.is_empty() { "" } else { "\n" });
    Config::parse(&new, config_file).with_context(|| format!("cannot pin publisher `{name}` in {}: edit it by hand", config_file.display()))?;
    if let Some(dir) = config_file.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    chitin::fsutil::write_atomic(config_file, new.as_bytes()).map_err(|(step, e)| anyhow::anyhow!("cannot write {}: {step}: {e}", config_file.display()))?;
    Ok(())
}

/// Writes the candidate's file and lock entry, and drops its other files.
fn commit(ctx: &Ctx, lock: &mut Lock, candidate: &Candidate) -> anyhow::Result<PathBuf> {
    // The publisher first: if its key cannot be pinned, nothing is installed.
    if let Some(key) = &candidate.trust {
        pin_publisher(&ctx.config_file, &candidate.publisher, key)?;
    }
    let dir = ctx.data.plugins_dir();
    let path = store::write(&dir, &candidate.name, &candidate.sha256, &candidate.bytes)?;
    lock.staged.remove(&candidate.name);
    lock.plugins.insert(candidate.name.clone(), candidate.locked());
    lock.save(&ctx.lock_path)?;
    store::prune(&dir, &candidate.name, &[&candidate.sha256])?;
    Ok(path)
}

/// `NAME[@REQ]`.
fn parse_target(target: &str) -> Result<(String, semver::VersionReq), MarketError> {
    let (name, req) = target.split_once('@').unwrap_or((target, "*"));
    let req = semver::VersionReq::parse(req).map_err(|e| MarketError::BadRequirement { given: target.into(), message: e.to_string() })?;
    check_name(name).map_err(|message| MarketError::BadRequirement { given: target.into(), message })?;
    Ok((name.to_string(), req))
}

/// A plugin name as manifests spell them; it becomes a directory name
/// under plugins/, so nothing else (no `/`, no `..`) is accepted.
fn check_name(name: &str) -> Result<(), String> {
    let ok = name.chars().next().is_some_and(|c| c.is_ascii_lowercase()) && name.len() <= 64 && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if ok { Ok(()) } else { Err(format!("`{}` is not a plugin name (a lowercase letter, then letters, digits, `-` or `_`)", shown(name, 64, "name"))) }
}

/// `chitin plugin install NAME[@REQ] | URL`.
pub async fn install(target: &str, index_name: Option<&str>, yes: bool, trust: bool, frozen: bool, data: &DataDir, options: &AppOptions) -> anyhow::Result<ExitCode> {
    let ctx = Ctx::open(data, options)?;
    let mut lock = Lock::load(&ctx.lock_path)?;
    if target.contains("://") {
        return install_url(&ctx, &mut lock, target, yes, frozen).await;
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
        let path = store::file(&ctx.data.plugins_dir(), &name, &old.sha256);
        if store::read_checked(&path, &name, old).is_ok() {
            outln!("{name} {} is already installed", shown(&old.version, 64, "version"))?;
            return Ok(ExitCode::SUCCESS);
        }
    }
    let candidate = obtain(&ctx, &source, &index, &base, &name, plugin, entry, trust).await?;
    if frozen && locked.as_ref().is_some_and(|l| l.sha256 != candidate.sha256) {
        return Err(MarketError::Frozen { change: format!("{name} {} in the index has SHA-256 {}, the lock {}", candidate.version, candidate.sha256, locked.as_ref().map(|l| l.sha256.as_str()).unwrap_or("")) }.into());
    }
    compile(&ctx, &candidate).await?;
    print_review(&candidate, locked.as_ref())?;
    // Reinstalling what is locked (a new machine, `--frozen`) needs no new
    // approval: the lock is the approval.
    let already_approved = locked.as_ref().is_some_and(|l| l.sha256 == candidate.sha256 && l.approved == candidate.snapshot);
    if !already_approved {
        approve(&format!("install {name} {}", candidate.version), yes)?;
    }
    let path = commit(&ctx, &mut lock, &candidate)?;
    outln!("installed {name} {} to {}", candidate.version, path.display())?;
    Ok(ExitCode::SUCCESS)
}

/// `install https://…/x.wasm`: the signature beside it (`.minisig`), by a
/// pinned publisher key; the name and version come from the signed comment.
async fn install_url(ctx: &Ctx, lock: &mut Lock, target: &str, yes: bool, frozen: bool) -> anyhow::Result<ExitCode> {
    let url = fetch::parse(target)?;
    let timeout = Duration::from_secs(60);
    let bytes = fetch::get(&url, ctx.max_component(), timeout).await?;
    let sig = fetch::get(&fetch::parse(&format!("{}.minisig", url.as_str()))?, MAX_SIGNATURE_BYTES, timeout).await?;
    let sig = String::from_utf8_lossy(&sig).into_owned();
    let sha256 = sha256_hex(&bytes);
    let signed_by = sign::signature_key_id(&sig).unwrap_or_default();
    let Some((publisher, keys)) = ctx.config.publishers.iter().find(|(_, p)| p.keys.iter().any(|k| sign::key_id(k).as_deref() == Some(signed_by.as_str()))) else {
        return Err(MarketError::PublisherKey { name: target.into(), version: String::new(), publisher: "(any)".into(), key_id: signed_by, pinned: ctx.config.publishers.keys().cloned().collect::<Vec<_>>().join(", ") }.into());
    };
    let manifest = Manifest::from_component(&bytes).map_err(|source| chitin::plugins::PluginError::Manifest { plugin: target.into(), source })?;
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
    print_review(&candidate, locked.as_ref())?;
    approve(&format!("install {what}"), yes)?;
    let path = commit(ctx, lock, &candidate)?;
    outln!("installed {what} to {}", path.display())?;
    Ok(ExitCode::SUCCESS)
}

/// `chitin plugin search QUERY`.
pub async fn search(query: &str, index_name: Option<&str>, data: &DataDir, options: &AppOptions) -> anyhow::Result<ExitCode> {
    let ctx = Ctx::open(data, options)?;
    let needle = query.to_lowercase();
    let mut hits = 0;
    for source in ctx.sources(index_name)? {
        let (index, _) = ctx.index(&source).await?;
        for (name, plugin) in &index.plugins {
            if !name.to_lowercase().contains(&needle) && !plugin.description.to_lowercase().contains(&needle) {
                continue;
            }
            let Ok((_, latest)) = index.pick(name, &semver::VersionReq::STAR) else { continue };
            hits += 1;
            outln!("{} {}  ({}, by {})", shown(name, 64, "name"), shown(&latest.version, 64, "version"), source.name, shown(&plugin.publisher, 64, "publisher"))?;
            if !plugin.description.is_empty() {
                outln!("  {}", shown(plugin.description.lines().next().unwrap_or(""), 512, "description"))?;
            }
            let c = &latest.capabilities;
            let network = if c.network.is_empty() { "none".to_string() } else { c.network.join(", ") };
            let host = if c.host.is_empty() { String::new() } else { format!(", host interfaces: {}", c.host.join(", ")) };
            outln!("  asks: workspace {}, network {}{}", c.workspace, shown(&network, 1024, "network"), shown(&host, 1024, "host"))?;
        }
    }
    if hits == 0 {
        errln!("no plugin matches `{}`", shown(query, 256, "query"));
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// `chitin plugin update [NAME...]`.
pub async fn update(names: &[String], yes: bool, frozen: bool, data: &DataDir, options: &AppOptions) -> anyhow::Result<ExitCode> {
    let ctx = Ctx::open(data, options)?;
    let mut lock = Lock::load(&ctx.lock_path)?;
    let names: Vec<String> = if names.is_empty() { lock.plugins.keys().cloned().collect() } else { names.to_vec() };
    let mut indexes: BTreeMap<String, (IndexSource, Index, Url)> = BTreeMap::new();
    let mut failed = false;
    for name in names {
        let Some(locked) = lock.plugins.get(&name).cloned() else {
            errln!("error: {name} is not installed from an index (not in {})", ctx.lock_path.display());
            failed = true;
            continue;
        };
        let Some(index_name) = locked.source.strip_prefix("index:") else {
            outln!("{name}: installed from {}, not from an index; reinstall it from its URL to update", locked.source)?;
            continue;
        };
        if !indexes.contains_key(index_name) {
            let source = ctx.sources(Some(index_name))?.remove(0);
            let (index, base) = ctx.index(&source).await?;
            indexes.insert(index_name.to_string(), (source, index, base));
        }
        let (source, index, base) = &indexes[index_name];
        let result = async {
            let (plugin, entry) = index.pick(&name, &semver::VersionReq::STAR)?;
            let newer = semver::Version::parse(&entry.version).ok() > semver::Version::parse(&locked.version).ok();
            if !newer {
                return Ok::<_, anyhow::Error>(None);
            }
            let candidate = obtain(&ctx, source, index, base, &name, plugin, entry, false).await?;
            Ok(Some(candidate))
        }
        .await;
        let candidate = match result {
            Ok(None) => {
                outln!("{name} {} is up to date", shown(&locked.version, 64, "version"))?;
                continue;
            }
            Ok(Some(candidate)) => candidate,
            Err(e) => {
                errln!("error: {name}: {e:#}");
                failed = true;
                continue;
            }
        };
        if frozen {
            errln!("error: {}", MarketError::Frozen { change: format!("{name} {} → {}", locked.version, candidate.version) });
            failed = true;
            continue;
        }
        if let Err(e) = compile(&ctx, &candidate).await {
            errln!("error: {name}: {e}");
            failed = true;
            continue;
        }
        print_review(&candidate, Some(&locked))?;
        let escalations = locked.approved.escalations(&candidate.snapshot);
        if escalations.is_empty() || yes {
            let path = commit(&ctx, &mut lock, &candidate)?;
            outln!("updated {name} {} → {} ({})", locked.version, candidate.version, path.display())?;
            continue;
        }
        // Staged: the file is kept beside the installed one, unused, until
        // `approve`; the installed version keeps running.
        store::write(&ctx.data.plugins_dir(), &name, &candidate.sha256, &candidate.bytes)?;
        // An older staged update is replaced.
        store::prune(&ctx.data.plugins_dir(), &name, &[&locked.sha256, &candidate.sha256])?;
        let mut staged = candidate.locked();
        staged.escalations = escalations.clone();
        lock.staged.insert(name.clone(), staged);
        lock.save(&ctx.lock_path)?;
        errln!("error: {}", MarketError::AwaitingApproval { name: name.clone(), version: candidate.version.clone(), changes: escalations.join("; ") });
        failed = true;
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// `chitin plugin approve NAME`: applies a staged update.
pub fn approve_staged(name: &str, data: &DataDir, options: &AppOptions) -> anyhow::Result<ExitCode> {
    check_name(name).map_err(anyhow::Error::msg)?;
    let ctx = Ctx::open(data, options)?;
    let mut lock = Lock::load(&ctx.lock_path)?;
    let Some(mut staged) = lock.staged.remove(name) else {
        bail!("no update of `{name}` is waiting for approval (see `chitin plugin update`)");
    };
    let dir = ctx.data.plugins_dir();
    let path = store::file(&dir, name, &staged.sha256);
    store::read_checked(&path, name, &staged).with_context(|| format!("the staged update of {name} changed since it was verified; run `chitin plugin update {name}` again"))?;
    let old = lock.plugins.get(name).map(|l| l.version.clone()).unwrap_or_default();
    let escalations = std::mem::take(&mut staged.escalations);
    staged.approved_at = Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let sha = staged.sha256.clone();
    let version = staged.version.clone();
    lock.plugins.insert(name.to_string(), staged);
    lock.save(&ctx.lock_path)?;
    store::prune(&dir, name, &[&sha])?;
    outln!("approved {name} {old} → {version}: {}", escalations.join("; "))?;
    Ok(ExitCode::SUCCESS)
}

/// `chitin plugin remove NAME [--purge]`.
pub fn remove(name: &str, purge: bool, data: &DataDir, options: &AppOptions) -> anyhow::Result<ExitCode> {
    check_name(name).map_err(anyhow::Error::msg)?;
    let ctx = Ctx::open(data, options)?;
    let mut lock = Lock::load(&ctx.lock_path)?;
    let dir = ctx.data.plugins_dir();
    let mut files: Vec<PathBuf> = lock.plugins.get(name).into_iter().chain(lock.staged.get(name)).map(|l| store::file(&dir, name, &l.sha256)).collect();
    let legacy = dir.join(format!("{name}.wasm"));
    if legacy.is_file() {
        files.push(legacy.clone());
    }
    let in_lock = lock.plugins.remove(name).is_some() | lock.staged.remove(name).is_some();
    if !in_lock && !legacy.is_file() {
        bail!("no installed plugin named `{name}`");
    }
    if purge {
        // What compiling it left: its cache entries.
        for file in &files {
            if let Ok(bytes) = std::fs::read(file) {
                ctx.runtime.forget_compiled(&bytes);
            }
        }
    }
    if in_lock {
        lock.save(&ctx.lock_path)?;
        store::prune(&dir, name, &[])?;
    }
    if legacy.is_file() {
        std::fs::remove_file(&legacy).with_context(|| format!("cannot remove {}", legacy.display()))?;
    }
    outln!("removed {name}{}", if purge { " and its compiled code" } else { "" })?;
    if ctx.config.plugins.contains_key(name) {
        outln!("its [plugins.{name}] table in {} is left as you wrote it", ctx.config_file.display())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `chitin plugin verify [--frozen]`: every installed file against the lock.
pub fn verify(frozen: bool, data: &DataDir, options: &AppOptions) -> anyhow::Result<ExitCode> {
    let ctx = Ctx::open(data, options)?;
    let lock = Lock::load(&ctx.lock_path)?;
    let dir = ctx.data.plugins_dir();
    let mut bad = 0;
    for (kind, entries) in [("", &lock.plugins), (" (staged)", &lock.staged)] {
        for (name, locked) in entries {
            let path = store::file(&dir, name, &locked.sha256);
            match store::read_checked(&path, name, locked) {
                Ok(bytes) if bytes.len() as u64 == locked.size => outln!("ok      {name} {}{kind}", locked.version)?,
                Ok(bytes) => {
                    bad += 1;
                    outln!("FAILED  {name} {}{kind}: {} bytes, locked {}", locked.version, bytes.len(), locked.size)?;
                }
                Err(e) => {
                    bad += 1;
                    outln!("FAILED  {name} {}{kind}: {e}", locked.version)?;
                }
            }
        }
    }
    // Files the lock does not name: never loaded, but not what the lock says.
    let mut unlocked = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                let name = entry.file_name().to_string_lossy().into_owned();
                for file in std::fs::read_dir(&path).into_iter().flatten().filter_map(Result::ok).map(|e| e.path()) {
                    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
                    let known = lock.plugins.get(&name).into_iter().chain(lock.staged.get(&name)).any(|l| l.sha256 == stem);
                    if file.extension().is_some_and(|e| e == "wasm") && !known {
                        unlocked.push(file);
                    }
                }
            } else if path.extension().is_some_and(|e| e == "wasm") {
                unlocked.push(path);
            }
        }
    }
    unlocked.sort();
    for path in &unlocked {
        outln!("{}  {}: not in {}", if frozen { "FAILED " } else { "note   " }, path.display(), ctx.lock_path.display())?;
    }
    if frozen {
        bad += unlocked.len();
    }
    if bad > 0 {
        errln!("error: {bad} installed file(s) do not match {}", ctx.lock_path.display());
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn password() -> String {
    std::env::var(sign::PASSWORD_VAR).unwrap_or_default()
}

/// `chitin plugin keygen PREFIX`: PREFIX.key and PREFIX.pub.
pub fn keygen(prefix: &Path) -> anyhow::Result<ExitCode> {
    let secret_path = prefix.with_extension("key");
    let public_path = prefix.with_extension("pub");
    for path in [&secret_path, &public_path] {
        if path.exists() {
            bail!("{} exists; keygen never overwrites a key", path.display());
        }
    }
    let password = password();
    let (public, secret) = sign::generate(&password).map_err(|e| anyhow::anyhow!("cannot generate a key: {e}"))?;
    let id = sign::key_id(&public).unwrap_or_default();
    write_private(&secret_path, secret.as_bytes())?;
    std::fs::write(&public_path, format!("untrusted comment: minisign public key {id}\n{public}\n")).with_context(|| format!("cannot write {}", public_path.display()))?;
    outln!("secret key: {}{}", secret_path.display(), if password.is_empty() { format!(" (not protected: set {} to protect it)", sign::PASSWORD_VAR) } else { String::new() })?;
    outln!("public key: {} (id {id})", public_path.display())?;
    outln!("{public}")?;
    Ok(ExitCode::SUCCESS)
}

fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(bytes).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// `chitin plugin sign FILE.wasm --key KEY`: FILE.wasm.minisig, whose
/// signed comment binds the manifest's name and version and the digest.
pub fn sign_file(file: &Path, key: &Path, output: Option<&Path>) -> anyhow::Result<ExitCode> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let manifest = Manifest::from_component(&bytes).with_context(|| format!("{} (pack it first: `chitin plugin pack`)", file.display()))?;
    let sha256 = sha256_hex(&bytes);
    let comment = sign::artifact_comment(&manifest.name, &manifest.version, &sha256);
    let signature = sign::sign(key, &password(), &bytes, &comment)?;
    let out = output.map(Path::to_path_buf).unwrap_or_else(|| signature_path(file));
    std::fs::write(&out, &signature).with_context(|| format!("cannot write {}", out.display()))?;
    outln!("signed {} {} (sha256 {sha256}) with key {}: {}", manifest.name, manifest.version, sign::signature_key_id(&signature).unwrap_or_default(), out.display())?;
    Ok(ExitCode::SUCCESS)
}

fn signature_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".minisig");
    PathBuf::from(name)
}

/// `chitin plugin index ...`.
pub fn index_command(cmd: IndexCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        IndexCommand::Add { dir, file, publisher, publisher_key, description } => index_add(&dir, &file, &publisher, &publisher_key, &description),
        IndexCommand::Yank { dir, target } => index_yank(&dir, &target),
        IndexCommand::Sign { dir, key, name, expires_days } => index_sign(&dir, &key, &name, expires_days),
    }
}

fn load_index_doc(dir: &Path) -> anyhow::Result<Index> {
    let path = dir.join("index.json");
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).with_context(|| format!("{} is not a valid index", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Ok(Index { schema: index::SCHEMA, name: String::new(), version: 0, expires: Utc::now(), publishers: BTreeMap::new(), plugins: BTreeMap::new() })
        }
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn save_index_doc(dir: &Path, index: &Index) -> anyhow::Result<Vec<u8>> {
    let path = dir.join("index.json");
    let mut bytes = serde_json::to_vec_pretty(index)?;
    bytes.push(b'\n');
    chitin::fsutil::write_atomic(&path, &bytes).map_err(|(step, e)| anyhow::anyhow!("cannot write {}: {step}: {e}", path.display()))?;
    Ok(bytes)
}

fn index_add(dir: &Path, file: &Path, publisher: &str, publisher_key: &str, description: &str) -> anyhow::Result<ExitCode> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let manifest = Manifest::from_component(&bytes).with_context(|| format!("{}", file.display()))?;
    let world = World::detect(&bytes).with_context(|| format!("{}", file.display()))?;
    let found = audit::audit(&bytes, &manifest).map_err(|e| anyhow::anyhow!("{}: import audit failed: {e}", file.display()))?;
    let sig_path = signature_path(file);
    let signature = std::fs::read_to_string(&sig_path).with_context(|| format!("cannot read {} (sign it first: `chitin plugin sign`)", sig_path.display()))?;
    let key = match std::fs::read_to_string(publisher_key) {
        Ok(text) => text.lines().rfind(|l| !l.trim().is_empty()).unwrap_or_default().trim().to_string(),
        Err(_) => publisher_key.trim().to_string(),
    };
    if sign::key_id(&key).is_none() {
        bail!("--publisher-key: `{publisher_key}` is neither a minisign public key file nor a key");
    }
    let sha256 = sha256_hex(&bytes);
    // The index refuses to list what its users would refuse.
    check_artifact(&manifest.name, &manifest.version, publisher, std::slice::from_ref(&key), &bytes, &sha256, &signature)?;
    std::fs::create_dir_all(dir.join("artifacts")).with_context(|| format!("cannot create {}", dir.join("artifacts").display()))?;
    let artifact = format!("artifacts/{}-{}.wasm", manifest.name, manifest.version);
    std::fs::write(dir.join(&artifact), &bytes).with_context(|| format!("cannot write {}", dir.join(&artifact).display()))?;
    let mut index = load_index_doc(dir)?;
    let keys = &mut index.publishers.entry(publisher.to_string()).or_insert_with(PublisherConfig::default).keys;
    if !keys.contains(&key) {
        keys.push(key);
    }
    let entry = index.plugins.entry(manifest.name.clone()).or_insert_with(|| IndexPlugin { publisher: publisher.into(), description: String::new(), versions: Vec::new() });
    if entry.publisher != publisher {
        bail!("{} is published by `{}` in this index, not `{publisher}`", manifest.name, entry.publisher);
    }
    if !description.is_empty() || entry.description.is_empty() {
        entry.description = if description.is_empty() { manifest.description.lines().next().unwrap_or("").to_string() } else { description.to_string() };
    }
    entry.versions.retain(|v| v.version != manifest.version);
    entry.versions.push(IndexVersion {
        version: manifest.version.clone(),
        world: format!("chitin:plugin/{world}"),
        artifact: index::Artifact { url: artifact.clone(), sha256, size: bytes.len() as u64 },
        signature,
        capabilities: manifest.capabilities.clone(),
        imports: found.families.into_iter().collect(),
        yanked: false,
    });
    save_index_doc(dir, &index)?;
    outln!("added {} {} to {} ({artifact}); sign the index next: `chitin plugin index sign`", manifest.name, manifest.version, dir.join("index.json").display())?;
    Ok(ExitCode::SUCCESS)
}

fn index_yank(dir: &Path, target: &str) -> anyhow::Result<ExitCode> {
    let Some((name, version)) = target.split_once('@') else { bail!("`{target}` is not NAME@VERSION") };
    let mut index = load_index_doc(dir)?;
    let Some(entry) = index.plugins.get_mut(name).and_then(|p| p.versions.iter_mut().find(|v| v.version == version)) else {
        bail!("{name} {version} is not in {}", dir.join("index.json").display());
    };
    entry.yanked = true;
    save_index_doc(dir, &index)?;
    outln!("yanked {name} {version}; sign the index next: `chitin plugin index sign`")?;
    Ok(ExitCode::SUCCESS)
}

fn index_sign(dir: &Path, key: &Path, name: &str, expires_days: i64) -> anyhow::Result<ExitCode> {
    let mut index = load_index_doc(dir)?;
    index.name = name.to_string();
    index.version += 1;
    index.expires = Utc::now() + chrono::Duration::days(expires_days);
    let bytes = save_index_doc(dir, &index)?;
    let signature = sign::sign(key, &password(), &bytes, &sign::index_comment(name, index.version))?;
    let sig_path = dir.join("index.json.minisig");
    std::fs::write(&sig_path, &signature).with_context(|| format!("cannot write {}", sig_path.display()))?;
    outln!("signed index `{name}` version {} (expires {}) with key {}", index.version, index.expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true), sign::signature_key_id(&signature).unwrap_or_default())?;
    Ok(ExitCode::SUCCESS)
}
