//! `chitin plugin inspect | list | pack | install`; `new | build | wit` are
//! in [`super::scaffold`].

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Subcommand;
use serde_json::{Value, json};

use super::{for_terminal, json_for_terminal, shown};

use chitin::app::AppOptions;
use chitin::config::{Config, DataDir};
use chitin::plugins::catalog::{check_install, grant_for};
use chitin::plugins::manifest;
use chitin::plugins::{GrantConfig, LoadedPlugin, PluginRuntime, PluginSource, RuntimeConfig};

#[derive(Debug, Subcommand)]
pub(super) enum PluginCommand {
    /// Show a plugin's manifest and what it is granted.
    Inspect {
        /// A `.wasm` file, or the name of a loaded plugin.
        plugin: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the loaded plugins (built-in and installed).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Embed a manifest into a component built in any language.
    Pack {
        /// The manifest, as TOML (see wit/README.md).
        #[arg(long, value_name = "plugin.toml")]
        manifest: PathBuf,
        /// The component to pack.
        input: PathBuf,
        /// Where to write the packed component.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Install a plugin: NAME[@VERSION-REQ] from a configured index, an
    /// https:// URL (signature at URL.minisig), or a local FILE.wasm. Verified,
    /// audited, compiled and linked before anything is written; refused when
    /// its name is a built-in's or another installed plugin's, or a tool of
    /// it is already another plugin's.
    Install {
        /// NAME[@REQ], URL or FILE.wasm.
        target: String,
        /// Only this index (a `name` of [[plugin_index]]).
        #[arg(long, value_name = "NAME")]
        index: Option<String>,
        /// Approve what the review shows without asking.
        #[arg(long)]
        yes: bool,
        /// Pin the publisher's key from the signed index when the publisher
        /// is not in [publishers] yet.
        #[arg(long)]
        trust_publisher: bool,
        /// Install exactly what chitin.lock says, or fail.
        #[arg(long)]
        frozen: bool,
    },
    /// Search the configured indexes by name and description.
    Search {
        /// Text to look for.
        query: String,
        /// Only this index.
        #[arg(long, value_name = "NAME")]
        index: Option<String>,
    },
    /// Update plugins installed from an index (all without NAME): more
    /// capabilities wait for `approve`, anything else is applied.
    Update {
        /// Plugins to update.
        names: Vec<String>,
        /// Approve new capabilities too.
        #[arg(long)]
        yes: bool,
        /// Fail instead of changing chitin.lock.
        #[arg(long)]
        frozen: bool,
    },
    /// Apply a staged update that asked for more capabilities.
    Approve {
        /// The plugin.
        name: String,
    },
    /// Remove an installed plugin.
    Remove {
        /// The plugin.
        name: String,
        /// Also delete its compiled code from the cache.
        #[arg(long)]
        purge: bool,
    },
    /// Check every installed file against chitin.lock.
    Verify {
        /// Files the lock does not name are failures too.
        #[arg(long)]
        frozen: bool,
    },
    /// Make a signing key pair: PREFIX.key (secret) and PREFIX.pub.
    Keygen {
        /// Path prefix of the two files.
        prefix: PathBuf,
    },
    /// Sign a packed component (writes FILE.wasm.minisig).
    Sign {
        /// The packed component.
        file: PathBuf,
        /// The secret key (`keygen`'s .key).
        #[arg(long)]
        key: PathBuf,
        /// Where to write the signature (default FILE.minisig).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Build and sign a static plugin index (for index operators).
    Index {
        #[command(subcommand)]
        cmd: super::market::IndexCommand,
    },
    /// Create a plugin that builds and passes its test: Rust, Python or JavaScript.
    New {
        /// The plugin name ([a-z][a-z0-9_-]*); also the directory, unless --dir.
        name: String,
        /// The plugin's language.
        #[arg(long, value_enum)]
        lang: super::scaffold::Lang,
        /// Where to create it (default: ./NAME).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Build a plugin directory with its language's toolchain and pack its
    /// manifest, into DIR/dist/NAME.wasm.
    Build {
        /// The plugin directory (default: the current one).
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Write the WIT package (chitin.wit) for other component toolchains.
    Wit {
        /// Where to write it (default: ./wit).
        #[arg(default_value = "wit")]
        dir: PathBuf,
    },
}

pub(super) async fn run(cmd: PluginCommand, data: DataDir, options: AppOptions) -> anyhow::Result<ExitCode> {
    match cmd {
        PluginCommand::Inspect { plugin, json } => inspect(&plugin, json, data, options),
        PluginCommand::List { json } => list(json, data, options),
        PluginCommand::Pack { manifest, input, output } => pack(&manifest, &input, &output),
        PluginCommand::Install { target, index, yes, trust_publisher, frozen } => {
            let path = Path::new(&target);
            if !target.contains("://") && (path.is_file() || path.extension().is_some_and(|e| e == "wasm")) {
                install(path, &data, &options).await
            } else {
                super::market::install(&target, index.as_deref(), yes, trust_publisher, frozen, &data, &options).await
            }
        }
        PluginCommand::Search { query, index } => super::market::search(&query, index.as_deref(), &data, &options).await,
        PluginCommand::Update { names, yes, frozen } => super::market::update(&names, yes, frozen, &data, &options).await,
        PluginCommand::Approve { name } => super::market::approve_staged(&name, &data, &options),
        PluginCommand::Remove { name, purge } => super::market::remove(&name, purge, &data, &options),
        PluginCommand::Verify { frozen } => super::market::verify(frozen, &data, &options),
        PluginCommand::Keygen { prefix } => super::market::keygen(&prefix),
        PluginCommand::Sign { file, key, output } => super::market::sign_file(&file, &key, output.as_deref()),
        PluginCommand::Index { cmd } => super::market::index_command(cmd),
        PluginCommand::New { name, lang, dir } => super::scaffold::new(&name, lang, dir.as_deref()),
        PluginCommand::Build { dir } => super::scaffold::build(&dir),
        PluginCommand::Wit { dir } => super::scaffold::wit(&dir),
    }
}

fn load_config(data: &DataDir, options: &AppOptions) -> anyhow::Result<Config> {
    Ok(Config::load(&options.config_file.clone().unwrap_or_else(|| data.config_file()))?)
}

fn inspect(target: &str, as_json: bool, data: DataDir, options: AppOptions) -> anyhow::Result<ExitCode> {
    let path = Path::new(target);
    let plugin = if path.extension().is_some_and(|e| e == "wasm") || path.is_file() {
        // A file is inspected alone, with the grants the config would give it.
        let config = load_config(&data, &options)?;
        let runtime = PluginRuntime::new(RuntimeConfig { workspace: data.default_workspace(), cache_dir: None, limits: config.limits.clone() })?;
        std::sync::Arc::new(runtime.load_file(path, |name| grant_for(&config.plugins, name))?)
    } else {
        let app = super::open_app(data, options)?;
        match app.catalog.get(target) {
            Some(p) => p.clone(),
            None => bail!("no plugin named `{target}` (loaded: {})", app.catalog.iter().map(|p| p.name().to_string()).collect::<Vec<_>>().join(", ")),
        }
    };
    if as_json {
        outln!("{}", json_for_terminal(&serde_json::to_string_pretty(&describe(&plugin))?))?;
    } else {
        print_plugin(&plugin)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn list(as_json: bool, data: DataDir, options: AppOptions) -> anyhow::Result<ExitCode> {
    let app = super::open_app_quietly(data, options)?;
    let problems = super::load_problems(&app);
    if as_json {
        // stdout stays an array of the loaded plugins; the skipped ones are
        // reported on stderr.
        for line in &problems {
            errln!("warning: {line}");
        }
        let all: Vec<Value> = app.catalog.iter().map(|p| describe(p)).collect();
        outln!("{}", json_for_terminal(&serde_json::to_string_pretty(&all)?))?;
        return Ok(ExitCode::SUCCESS);
    }
    for p in app.catalog.iter() {
        let tools: Vec<&str> = p.manifest.tools.iter().map(|t| t.name.as_str()).collect();
        outln!(
            "{:<12} {:<8} {:<10} workspace={:<10} tools: {}",
            shown(p.name(), 64, "name"),
            shown(&p.manifest.version, 64, "version"),
            for_terminal(&p.source.to_string()),
            p.grant.workspace.as_str(),
            shown(&tools.join(", "), 4096, "tools")
        )?;
        for note in &p.grant_notes {
            outln!("{:<12} note: {}", "", shown(note, 1024, "note"))?;
        }
    }
    for line in &problems {
        outln!("{line}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The JSON form of `inspect`: the manifest plus what was granted.
fn describe(p: &LoadedPlugin) -> Value {
    json!({
        "manifest": p.manifest,
        "source": p.source.to_string(),
        "size_bytes": p.size(),
        "granted": {
            "workspace": p.grant.workspace,
            "network": p.grant.network.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "host": p.grant.host.iter().map(|i| i.name()).collect::<Vec<_>>(),
            "chats": p.grant.chats,
        },
        "notes": p.grant_notes,
        // Each secret with where it goes: its audience and the exact places
        // (`path`, `header NAME`, `query NAME`, `field NAME`, `frame`).
        "secrets": p.secret_status().into_iter().zip(&p.manifest.secrets)
            .map(|((name, missing), spec)| json!({"name": name, "configured": missing.is_none(), "audience": spec.audience, "inject": places(&spec.inject)}))
            .chain(p.manifest.channel.iter().flat_map(|c| c.secrets.iter()).map(|spec| json!({"name": spec.name, "audience": spec.audience, "inject": places(&spec.inject)})))
            .collect::<Vec<_>>(),
    })
}

/// Injection places as reviews show them.
fn places(inject: &[chitin::plugins::manifest::channel::Injection]) -> Vec<String> {
    inject.iter().map(ToString::to_string).collect()
}

/// The human form of `inspect`. Every manifest field is the plugin's own
/// text: shown escaped and bounded.
fn print_plugin(p: &LoadedPlugin) -> std::io::Result<()> {
    let m = &p.manifest;
    outln!("{} {} ({}, {} KiB)", shown(&m.name, 64, "name"), shown(&m.version, 64, "version"), for_terminal(&p.source.to_string()), p.size() / 1024)?;
    if !m.description.is_empty() {
        for line in m.description.lines() {
            outln!("  {}", shown(line, 4096, "description"))?;
        }
    }
    outln!("world: {}", p.world)?;
    outln!("capabilities:")?;
    outln!("  workspace: asks {}, granted {}", m.capabilities.workspace, p.grant.workspace)?;
    let asked = if m.capabilities.network.is_empty() { "none".to_string() } else { m.capabilities.network.join(", ") };
    let granted: Vec<String> = p.grant.network.iter().map(ToString::to_string).collect();
    let granted = if granted.is_empty() { "none".to_string() } else { granted.join(", ") };
    outln!("  network:   asks {}, granted {}", shown(&asked, 4096, "network"), shown(&granted, 4096, "network"))?;
    // Privileged interfaces, each in words: what the plugin could do to the
    // user's chats is the part a reviewer must not miss.
    for name in &m.capabilities.host {
        let Ok(interface) = chitin::plugins::HostInterface::parse(name) else { continue };
        let verdict = if p.grant.host.contains(&interface) { "granted" } else { "NOT granted" };
        outln!("  host:      asks {interface} ({}), {verdict}", interface.describe())?;
    }
    if !p.grant.chats.is_empty() {
        outln!("  chats:     may also send to {}", shown(&p.grant.chats.join(", "), 4096, "chats"))?;
    }
    for note in &p.grant_notes {
        outln!("  note: {}", shown(note, 1024, "note"))?;
    }
    for ((name, missing), secret) in p.secret_status().into_iter().zip(&m.secrets) {
        let inject = places(&secret.inject);
        let state = match missing {
            None => "configured".to_string(),
            Some(reason) => reason,
        };
        let line = format!("{name}: to {}, in {}; {state}", secret.audience.as_deref().unwrap_or("none"), inject.join(", "));
        outln!("  secret:    {}", shown(&line, 1024, "secret"))?;
    }
    if let Some(channel) = &m.channel {
        let receive: Vec<String> = channel.receive.iter().map(|r| format!("{r:?}").to_lowercase()).collect();
        outln!("channel:")?;
        outln!("  receive:  {}", receive.join(", "))?;
        for secret in &channel.secrets {
            let inject = places(&secret.inject);
            let audience = secret.audience.as_deref().unwrap_or("none (host-side only)");
            let line = format!("{}: to {audience}, in {}", secret.name, if inject.is_empty() { "nothing".into() } else { inject.join(", ") });
            outln!("  secret:   {}", shown(&line, 1024, "secret"))?;
        }
        if let Some(webhook) = &channel.webhook {
            outln!("  webhook:  {}", shown(&webhook.route, 128, "route"))?;
        }
        let l = &channel.limits;
        outln!(
            "  limits:   {} chars, edit every {} ms, typing every {} ms, {} per chat/min",
            l.max_text, l.edit_interval_ms, l.typing_refresh_ms, l.rate_per_chat_per_min
        )?;
        return Ok(());
    }
    outln!("tools:")?;
    for t in &m.tools {
        let mut flags = Vec::new();
        if t.read_only {
            flags.push("read-only");
        }
        if t.concurrency_safe {
            flags.push("concurrency-safe");
        }
        let flags = if flags.is_empty() { String::new() } else { format!(" [{}]", flags.join(", ")) };
        outln!("  {}{flags}", shown(&t.name, 64, "name"))?;
        for line in t.description.lines() {
            outln!("      {}", shown(line, 4096, "description"))?;
        }
        outln!("      parameters: {}", shown(&summarize_parameters(&t.parameters), 4096, "parameters"))?;
    }
    Ok(())
}

/// `path (string, required), offset (integer)`.
fn summarize_parameters(schema: &Value) -> String {
    let required: Vec<&str> = schema.get("required").and_then(Value::as_array).map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let Some(props) = schema.get("properties").and_then(Value::as_object) else { return "none".into() };
    if props.is_empty() {
        return "none".into();
    }
    props
        .iter()
        .map(|(name, prop)| {
            let kind = prop.get("type").map(|t| t.as_str().map(str::to_string).unwrap_or_else(|| t.to_string())).unwrap_or_else(|| "any".into());
            let req = if required.contains(&name.as_str()) { ", required" } else { "" };
            format!("{name} ({kind}{req})")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn pack(manifest_path: &Path, input: &Path, output: &Path) -> anyhow::Result<ExitCode> {
    let manifest = manifest::from_toml(manifest_path)?;
    let component = std::fs::read(input).with_context(|| format!("cannot read {}", input.display()))?;
    let packed = manifest::pack(&component, &manifest).with_context(|| format!("cannot pack {}", input.display()))?;
    std::fs::write(output, &packed).with_context(|| format!("cannot write {}", output.display()))?;
    outln!("packed {} ({} tools) into {}", manifest.name, manifest.tools.len(), output.display())?;
    Ok(ExitCode::SUCCESS)
}

/// Validates a plugin as loading would (manifest, a name no built-in has,
/// tools no other plugin has), compiles and links it (no plugin code runs),
/// and only then writes it, atomically, to `plugins/<name>.wasm`. Installing
/// a plugin of the same name again replaces it.
async fn install(file: &Path, data: &DataDir, options: &AppOptions) -> anyhow::Result<ExitCode> {
    let config = load_config(data, options)?;
    // Compiled as every later load would: in the limited child process.
    let runtime = PluginRuntime::with_isolation(
        RuntimeConfig { workspace: data.default_workspace(), cache_dir: Some(data.cache_dir()), limits: config.limits.clone() },
        options.compile_child.clone(),
    )?;
    // One read: the bytes checked, compiled and linked are the bytes written.
    let bytes: std::sync::Arc<[u8]> = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?.into();
    let source = PluginSource::File(file.to_path_buf());
    let name = runtime.load(source.clone(), bytes.clone(), &GrantConfig::default())?.name().to_string();
    let plugin = runtime.load(source, bytes.clone(), &grant_for(&config.plugins, &name))?;
    let dir = data.plugins_dir();
    let dest = dir.join(format!("{name}.wasm"));
    check_install(&plugin.manifest, &dir, &dest)?;
    // Instantiated once (no export called): one that links but cannot
    // start (a data segment past its memory) is refused here, not at its
    // first call.
    runtime.check_instantiate(&plugin).await.with_context(|| format!("{} cannot be installed", file.display()))?;
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    write_atomically(&dir, &dest, &bytes)?;
    outln!("installed {} {} to {}", name, shown(&plugin.manifest.version, 64, "version"), dest.display())?;
    for note in &plugin.grant_notes {
        outln!("note: {}", shown(note, 1024, "note"))?;
    }
    outln!("grant it capabilities under [plugins.{name}] in {}", data.config_file().display())?;
    Ok(ExitCode::SUCCESS)
}

/// Writes `bytes` to `dest` through a temporary file in `dir` (not named
/// `*.wasm`, so a concurrent load never sees it) and a rename: a reader sees
/// the old file or the new one, never half of one.
fn write_atomically(dir: &Path, dest: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let mut temp = tempfile::Builder::new()
        .prefix(".install-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
    temp.write_all(bytes).with_context(|| format!("cannot write {}", temp.path().display()))?;
    temp.as_file().sync_all().with_context(|| format!("cannot write {}", temp.path().display()))?;
    temp.persist(dest).map_err(|e| e.error).with_context(|| format!("cannot write {}", dest.display()))?;
    Ok(())
}
