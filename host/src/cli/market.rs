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
//! `chitin.lock`. The pipeline is `chitin::market::install` and the
//! publisher tools are `chitin::market::publish`; this module glues them to
//! the config, the terminal and the prompt.

use std::collections::BTreeMap;
use std::io::{BufRead as _, IsTerminal as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use chrono::Utc;
use clap::Subcommand;
use reqwest::Url;

use super::shown;
use chitin::app::AppOptions;
use chitin::config::{Config, DataDir};
use chitin::market::index::{Index, IndexSource};
use chitin::market::install::{Approve, Candidate, Installed, Installer, check_name, commit, compile, obtain};
use chitin::market::lock::{self, Lock, Locked};
use chitin::market::{MarketError, publish, sign, store};
use chitin::plugins::{PluginRuntime, RuntimeConfig};


/// `chitin plugin index ...`: for index operators.
#[derive(Debug, Subcommand)]
pub(super) enum IndexCommand {
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

/// The installer over the config `options` name (or the data dir's).
fn open(data: &DataDir, options: &AppOptions) -> anyhow::Result<Installer> {
    let config_file = options.config_file.clone().unwrap_or_else(|| data.config_file());
    let config = Config::load(&config_file)?;
    let runtime = PluginRuntime::with_isolation(
        RuntimeConfig { workspace: data.default_workspace(), cache_dir: Some(data.cache_dir()), limits: config.limits.clone() },
        options.compile_child.clone(),
    )?;
    let lock_path = lock::path_for(&config_file);
    Ok(Installer {
        data_root: data.root().to_path_buf(),
        plugins_dir: data.plugins_dir(),
        config_file,
        lock_path,
        limits: config.limits,
        plugin_index: config.plugin_index,
        publishers: config.publishers,
        grants: config.plugins,
        runtime,
    })
}

/// The terminal side of an install: the review printed, the `[y/N]`
/// prompt (or `--yes`), and a new publisher pinned in config.toml.
struct Prompt<'a> {
    yes: bool,
    config_file: &'a Path,
}

impl Approve for Prompt<'_> {
    type Error = anyhow::Error;

    fn review(&mut self, candidate: &Candidate, before: Option<&Locked>) -> anyhow::Result<()> {
        Ok(print_review(candidate, before)?)
    }

    fn approve(&mut self, what: &str) -> anyhow::Result<()> {
        Ok(approve(what, self.yes)?)
    }

    fn pin_publisher(&mut self, publisher: &str, key: &str) -> anyhow::Result<()> {
        pin_publisher(self.config_file, publisher, key)
    }
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

/// `chitin plugin install NAME[@REQ] | URL`.
pub(super) async fn install(target: &str, index_name: Option<&str>, yes: bool, trust: bool, frozen: bool, data: &DataDir, options: &AppOptions) -> anyhow::Result<ExitCode> {
    let ctx = open(data, options)?;
    let mut lock = Lock::load(&ctx.lock_path)?;
    let mut prompt = Prompt { yes, config_file: &ctx.config_file };
    match chitin::market::install::install(&ctx, &mut lock, target, index_name, trust, frozen, &mut prompt).await? {
        Installed::Already { name, version } => outln!("{name} {} is already installed", shown(&version, 64, "version"))?,
        Installed::New { name, version, path } => outln!("installed {name} {version} to {}", path.display())?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `chitin plugin search QUERY`.
pub(super) async fn search(query: &str, index_name: Option<&str>, data: &DataDir, options: &AppOptions) -> anyhow::Result<ExitCode> {
    let ctx = open(data, options)?;
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
pub(super) async fn update(names: &[String], yes: bool, frozen: bool, data: &DataDir, options: &AppOptions) -> anyhow::Result<ExitCode> {
    let ctx = open(data, options)?;
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
            let path = commit(&ctx, &mut lock, &candidate, &mut Prompt { yes, config_file: &ctx.config_file })?;
            outln!("updated {name} {} → {} ({})", locked.version, candidate.version, path.display())?;
            continue;
        }
        // Staged: the file is kept beside the installed one, unused, until
        // `approve`; the installed version keeps running.
        store::write(&ctx.plugins_dir.clone(), &name, &candidate.sha256, &candidate.bytes)?;
        // An older staged update is replaced.
        store::prune(&ctx.plugins_dir.clone(), &name, &[&locked.sha256, &candidate.sha256])?;
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
pub(super) fn approve_staged(name: &str, data: &DataDir, options: &AppOptions) -> anyhow::Result<ExitCode> {
    check_name(name).map_err(anyhow::Error::msg)?;
    let ctx = open(data, options)?;
    let mut lock = Lock::load(&ctx.lock_path)?;
    let Some(mut staged) = lock.staged.remove(name) else {
        bail!("no update of `{name}` is waiting for approval (see `chitin plugin update`)");
    };
    let dir = ctx.plugins_dir.clone();
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
pub(super) fn remove(name: &str, purge: bool, data: &DataDir, options: &AppOptions) -> anyhow::Result<ExitCode> {
    check_name(name).map_err(anyhow::Error::msg)?;
    let ctx = open(data, options)?;
    let mut lock = Lock::load(&ctx.lock_path)?;
    let dir = ctx.plugins_dir.clone();
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
    if ctx.grants.contains_key(name) {
        outln!("its [plugins.{name}] table in {} is left as you wrote it", ctx.config_file.display())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `chitin plugin verify [--frozen]`: every installed file against the lock.
pub(super) fn verify(frozen: bool, data: &DataDir, options: &AppOptions) -> anyhow::Result<ExitCode> {
    let ctx = open(data, options)?;
    let lock = Lock::load(&ctx.lock_path)?;
    let dir = ctx.plugins_dir.clone();
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
pub(super) fn keygen(prefix: &Path) -> anyhow::Result<ExitCode> {
    let password = password();
    let key = publish::keygen(prefix, &password)?;
    outln!("secret key: {}{}", key.secret_path.display(), if password.is_empty() { format!(" (not protected: set {} to protect it)", sign::PASSWORD_VAR) } else { String::new() })?;
    outln!("public key: {} (id {})", key.public_path.display(), key.id)?;
    outln!("{}", key.public)?;
    Ok(ExitCode::SUCCESS)
}

/// `chitin plugin sign FILE.wasm --key KEY`: FILE.wasm.minisig, whose
/// signed comment binds the manifest's name and version and the digest.
pub(super) fn sign_file(file: &Path, key: &Path, output: Option<&Path>) -> anyhow::Result<ExitCode> {
    let signed = publish::sign_file(file, key, output, &password())?;
    outln!("signed {} {} (sha256 {}) with key {}: {}", signed.name, signed.version, signed.sha256, signed.key_id, signed.signature_path.display())?;
    Ok(ExitCode::SUCCESS)
}

/// `chitin plugin index ...`.
pub(super) fn index_command(cmd: IndexCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        IndexCommand::Add { dir, file, publisher, publisher_key, description } => {
            let added = publish::index_add(&dir, &file, &publisher, &publisher_key, &description)?;
            outln!("added {} {} to {} ({}); sign the index next: `chitin plugin index sign`", added.name, added.version, dir.join("index.json").display(), added.artifact)?;
        }
        IndexCommand::Yank { dir, target } => {
            let Some((name, version)) = target.split_once('@') else { bail!("`{target}` is not NAME@VERSION") };
            publish::index_yank(&dir, name, version)?;
            outln!("yanked {name} {version}; sign the index next: `chitin plugin index sign`")?;
        }
        IndexCommand::Sign { dir, key, name, expires_days } => {
            let signed = publish::index_sign(&dir, &key, &name, expires_days, &password())?;
            outln!("signed index `{name}` version {} (expires {}) with key {}", signed.version, signed.expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true), signed.key_id)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
