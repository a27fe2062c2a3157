//! `chitin plugin inspect | list | pack | install`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Subcommand;
use serde_json::{Value, json};

use chitin::app::AppOptions;
use chitin::config::{Config, DataDir};
use chitin::plugins::catalog::grant_for;
use chitin::plugins::manifest::{self, Manifest};
use chitin::plugins::{LoadedPlugin, PluginRuntime, RuntimeConfig};

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
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
    /// Validate a component and copy it into the data dir's plugins/.
    Install {
        /// The component to install.
        file: PathBuf,
    },
}

pub fn run(cmd: PluginCommand, data: DataDir, options: AppOptions) -> anyhow::Result<ExitCode> {
    match cmd {
        PluginCommand::Inspect { plugin, json } => inspect(&plugin, json, data, options),
        PluginCommand::List { json } => list(json, data, options),
        PluginCommand::Pack { manifest, input, output } => pack(&manifest, &input, &output),
        PluginCommand::Install { file } => install(&file, &data),
    }
}

fn inspect(target: &str, as_json: bool, data: DataDir, options: AppOptions) -> anyhow::Result<ExitCode> {
    let path = Path::new(target);
    let plugin = if path.extension().is_some_and(|e| e == "wasm") || path.is_file() {
        // A file is inspected alone, with the grants the config would give it.
        let config = Config::load(&options.config_file.clone().unwrap_or_else(|| data.config_file()))?;
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
        println!("{}", serde_json::to_string_pretty(&describe(&plugin))?);
    } else {
        print_plugin(&plugin);
    }
    Ok(ExitCode::SUCCESS)
}

fn list(as_json: bool, data: DataDir, options: AppOptions) -> anyhow::Result<ExitCode> {
    let app = super::open_app(data, options)?;
    if as_json {
        let all: Vec<Value> = app.catalog.iter().map(|p| describe(p)).collect();
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(ExitCode::SUCCESS);
    }
    for p in app.catalog.iter() {
        let tools: Vec<&str> = p.manifest.tools.iter().map(|t| t.name.as_str()).collect();
        println!("{:<12} {:<8} {:<10} workspace={:<10} tools: {}", p.name(), p.manifest.version, p.source.to_string(), p.grant.workspace.as_str(), tools.join(", "));
        for note in &p.grant_notes {
            println!("{:<12} note: {note}", "");
        }
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
        },
        "notes": p.grant_notes,
    })
}

fn print_plugin(p: &LoadedPlugin) {
    let m = &p.manifest;
    println!("{} {} ({}, {} KiB)", m.name, m.version, p.source, p.size() / 1024);
    if !m.description.is_empty() {
        println!("  {}", m.description);
    }
    println!("capabilities:");
    println!("  workspace: asks {}, granted {}", m.capabilities.workspace, p.grant.workspace);
    let asked = if m.capabilities.network.is_empty() { "none".to_string() } else { m.capabilities.network.join(", ") };
    let granted: Vec<String> = p.grant.network.iter().map(ToString::to_string).collect();
    let granted = if granted.is_empty() { "none".to_string() } else { granted.join(", ") };
    println!("  network:   asks {asked}, granted {granted}");
    for note in &p.grant_notes {
        println!("  note: {note}");
    }
    println!("tools:");
    for t in &m.tools {
        let mut flags = Vec::new();
        if t.read_only {
            flags.push("read-only");
        }
        if t.concurrency_safe {
            flags.push("concurrency-safe");
        }
        let flags = if flags.is_empty() { String::new() } else { format!(" [{}]", flags.join(", ")) };
        println!("  {}{flags}", t.name);
        for line in t.description.lines() {
            println!("      {line}");
        }
        println!("      parameters: {}", summarize_parameters(&t.parameters));
    }
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
    let text = std::fs::read_to_string(manifest_path).with_context(|| format!("cannot read {}", manifest_path.display()))?;
    let mut table: toml::Table = toml::from_str(&text).with_context(|| format!("{} is not valid TOML", manifest_path.display()))?;
    table.entry("manifest_version").or_insert(toml::Value::Integer(manifest::MANIFEST_VERSION.into()));
    let value = serde_json::to_value(&table)?;
    let manifest: Manifest = serde_json::from_value(value).with_context(|| format!("{}: not a valid manifest", manifest_path.display()))?;
    let component = std::fs::read(input).with_context(|| format!("cannot read {}", input.display()))?;
    let packed = manifest::pack(&component, &manifest)?;
    std::fs::write(output, &packed).with_context(|| format!("cannot write {}", output.display()))?;
    println!("packed {} ({} tools) into {}", manifest.name, manifest.tools.len(), output.display());
    Ok(ExitCode::SUCCESS)
}

fn install(file: &Path, data: &DataDir) -> anyhow::Result<ExitCode> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let manifest = Manifest::from_component(&bytes)?;
    let dir = data.plugins_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let dest = dir.join(format!("{}.wasm", manifest.name));
    std::fs::write(&dest, &bytes).with_context(|| format!("cannot write {}", dest.display()))?;
    println!("installed {} {} to {}", manifest.name, manifest.version, dest.display());
    println!("grant it capabilities under [plugins.{}] in {}", manifest.name, data.config_file().display());
    Ok(ExitCode::SUCCESS)
}
