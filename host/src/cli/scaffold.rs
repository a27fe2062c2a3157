//! `chitin plugin new`, `chitin plugin build` and `chitin plugin wit`: from
//! nothing to a packed component in Rust, Python or JavaScript.
//!
//! A plugin directory is recognised by its main file: `Cargo.toml` (Rust,
//! the `chitin-sdk` crate), `plugin.py` (Python, `chitin_sdk.py`, built with
//! componentize-py) or `plugin.js` (JavaScript, `chitin-sdk.js`, built with
//! componentize-js). For Python and JavaScript the build writes the manifest
//! itself: it runs the module natively to read the tools the SDK
//! registered, builds the component, then packs the manifest into it (the
//! same code as `chitin plugin pack`). Everything lands in `DIR/dist/`.
//!
//! The SDK files and the WIT are compiled into this binary and written next
//! to the plugin, so a plugin directory needs nothing from this repository
//! (except the Rust SDK crate, by path).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::{Context, bail};
use clap::ValueEnum;

use super::shown;
use chitin::plugins::manifest::{self, Manifest};

/// The WIT package a tool plugin is built against (`chitin:plugin@0.1.0`).
pub(super) const WIT: &str = include_str!("../../../wit/chitin.wit");
/// The Python SDK, one module.
pub(super) const PYTHON_SDK: &str = include_str!("../../../sdk/python/chitin_sdk.py");
/// The JavaScript SDK, one module.
pub(super) const JS_SDK: &str = include_str!("../../../sdk/js/chitin-sdk.js");

/// The componentize-py release this host's SDK is tested with.
const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";
/// The componentize-js release this host's SDK is tested with.
const COMPONENTIZE_JS: &str = "@bytecodealliance/componentize-js@0.23.0";

/// The language of a plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum Lang {
    Rust,
    Python,
    Js,
}

/// `(path in the plugin dir, contents)` of a new plugin, `{{name}}` and
/// `{{sdk_path}}` still in them.
fn template(lang: Lang) -> Vec<(&'static str, &'static str)> {
    match lang {
        Lang::Rust => vec![
            ("Cargo.toml", include_str!("../../../sdk/templates/rust/Cargo.toml")),
            ("src/lib.rs", include_str!("../../../sdk/templates/rust/src/lib.rs")),
            (".gitignore", include_str!("../../../sdk/templates/rust/gitignore")),
        ],
        Lang::Python => vec![
            ("plugin.py", include_str!("../../../sdk/templates/python/plugin.py")),
            ("test_plugin.py", include_str!("../../../sdk/templates/python/test_plugin.py")),
            (".gitignore", include_str!("../../../sdk/templates/python/gitignore")),
        ],
        Lang::Js => vec![
            ("plugin.js", include_str!("../../../sdk/templates/js/plugin.js")),
            ("plugin.test.js", include_str!("../../../sdk/templates/js/plugin.test.js")),
            ("package.json", include_str!("../../../sdk/templates/js/package.json")),
            (".gitignore", include_str!("../../../sdk/templates/js/gitignore")),
        ],
    }
}

/// `chitin plugin new NAME --lang L [--dir DIR]`.
pub(super) fn new(name: &str, lang: Lang, dir: Option<&Path>) -> anyhow::Result<ExitCode> {
    check_plugin_name(name)?;
    let dir = dir.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from(name));
    if dir.exists() && std::fs::read_dir(&dir).with_context(|| format!("cannot read {}", dir.display()))?.next().is_some() {
        bail!("{} already exists and is not empty: pick another name or --dir", dir.display());
    }
    let sdk_path = if lang == Lang::Rust { rust_sdk_path()? } else { String::new() };
    for (path, text) in template(lang) {
        let text = text.replace("{{name}}", name).replace("{{sdk_path}}", &sdk_path);
        write_file(&dir.join(path), &text)?;
    }
    write_support_files(&dir, lang)?;
    outln!("created {} plugin `{name}` in {}", lang_name(lang), dir.display())?;
    let d = dir.display();
    match lang {
        Lang::Rust => outln!("next: cargo test --manifest-path {d}/Cargo.toml && chitin plugin build {d}")?,
        Lang::Python => outln!("next: (cd {d} && python3 -m unittest) && chitin plugin build {d}")?,
        Lang::Js => outln!("next: (cd {d} && npm install && node --test) && chitin plugin build {d}")?,
    }
    outln!("then: chitin tool call greet --args '{{\"name\":\"Ada\"}}' --plugin {d}/dist/{name}.wasm")?;
    Ok(ExitCode::SUCCESS)
}

/// `chitin plugin wit [DIR]`: the WIT package, for any component toolchain.
pub(super) fn wit(dir: &Path) -> anyhow::Result<ExitCode> {
    let path = dir.join("chitin.wit");
    write_file(&path, WIT)?;
    outln!("wrote {} (package chitin:plugin@0.1.0, world tool-plugin)", path.display())?;
    Ok(ExitCode::SUCCESS)
}

/// `chitin plugin build [DIR]`.
pub(super) fn build(dir: &Path) -> anyhow::Result<ExitCode> {
    let lang = detect(dir)?;
    let dist = dir.join("dist");
    let (manifest, component) = match lang {
        Lang::Rust => build_rust(dir)?,
        Lang::Python => build_python(dir)?,
        Lang::Js => build_js(dir)?,
    };
    std::fs::create_dir_all(&dist).with_context(|| format!("cannot create {}", dist.display()))?;
    let out = dist.join(format!("{}.wasm", manifest.name));
    std::fs::write(&out, &component).with_context(|| format!("cannot write {}", out.display()))?;
    let tools: Vec<&str> = manifest.tools.iter().map(|t| t.name.as_str()).collect();
    outln!(
        "built {} {} ({}, {} KiB, tools: {}) into {}",
        manifest.name,
        shown(&manifest.version, 64, "version"),
        lang_name(lang),
        component.len() / 1024,
        shown(&tools.join(", "), 4096, "tools"),
        out.display()
    )?;
    Ok(ExitCode::SUCCESS)
}

fn detect(dir: &Path) -> anyhow::Result<Lang> {
    if !dir.is_dir() {
        bail!("{} is not a directory (give the plugin's directory, made by `chitin plugin new`)", dir.display());
    }
    let found: Vec<Lang> = [("Cargo.toml", Lang::Rust), ("plugin.py", Lang::Python), ("plugin.js", Lang::Js)]
        .into_iter()
        .filter(|(file, _)| dir.join(file).is_file())
        .map(|(_, lang)| lang)
        .collect();
    match found.as_slice() {
        [lang] => Ok(*lang),
        [] => bail!("{} has no Cargo.toml, plugin.py or plugin.js: not a plugin directory (`chitin plugin new NAME --lang rust|python|js` makes one)", dir.display()),
        _ => bail!("{} has more than one of Cargo.toml, plugin.py and plugin.js: keep the one of the plugin's language", dir.display()),
    }
}

fn lang_name(lang: Lang) -> &'static str {
    match lang {
        Lang::Rust => "Rust",
        Lang::Python => "Python",
        Lang::Js => "JavaScript",
    }
}

/// The SDK and WIT a Python or JavaScript plugin builds against, refreshed
/// to this chitin's version (they are not the author's files).
fn write_support_files(dir: &Path, lang: Lang) -> anyhow::Result<()> {
    match lang {
        Lang::Rust => {}
        Lang::Python => {
            write_if_changed(&dir.join("chitin_sdk.py"), PYTHON_SDK)?;
            write_if_changed(&dir.join("wit/chitin.wit"), WIT)?;
        }
        Lang::Js => {
            write_if_changed(&dir.join("chitin-sdk.js"), JS_SDK)?;
            write_if_changed(&dir.join("wit/chitin.wit"), WIT)?;
        }
    }
    Ok(())
}

// --- Rust ------------------------------------------------------------------

/// `cargo build --target wasm32-wasip2 --profile plugin`; the manifest is in
/// the component already (the SDK's `plugin!`), or in `plugin.toml`.
fn build_rust(dir: &Path) -> anyhow::Result<(Manifest, Vec<u8>)> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    require_tool(&cargo, &["--version"], "cargo (the Rust toolchain) is not installed: install it with rustup (https://rustup.rs)")?;
    if let Ok(out) = Command::new("rustup").args(["target", "list", "--installed"]).output()
        && out.status.success()
        && !String::from_utf8_lossy(&out.stdout).lines().any(|l| l.trim() == "wasm32-wasip2")
    {
        bail!("the Rust target wasm32-wasip2 is not installed: rustup target add wasm32-wasip2");
    }
    let manifest_path = dir.join("Cargo.toml");
    let metadata = Command::new(&cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--manifest-path"])
        .arg(&manifest_path)
        .output()
        .context("cannot run cargo metadata")?;
    if !metadata.status.success() {
        bail!("cargo metadata failed for {}: {}", manifest_path.display(), String::from_utf8_lossy(&metadata.stderr).trim());
    }
    let metadata: serde_json::Value = serde_json::from_slice(&metadata.stdout).context("cargo metadata printed no JSON")?;
    let target_dir = metadata["target_directory"].as_str().context("cargo metadata has no target_directory")?;
    let root = std::fs::canonicalize(&manifest_path).with_context(|| format!("cannot resolve {}", manifest_path.display()))?;
    let package = metadata["packages"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["manifest_path"].as_str().map(Path::new) == Some(root.as_path())))
        .context("cargo metadata does not list the package of Cargo.toml")?;
    let crate_name = package["name"].as_str().unwrap_or_default().replace('-', "_");
    run_toolchain(
        Command::new(&cargo).args(["build", "--target", "wasm32-wasip2", "--profile", "plugin", "--manifest-path"]).arg(&manifest_path),
        "cargo build",
    )?;
    let built = Path::new(target_dir).join("wasm32-wasip2/plugin").join(format!("{crate_name}.wasm"));
    let component = std::fs::read(&built).with_context(|| format!("cargo built no {} (is the crate a cdylib?)", built.display()))?;
    let toml = dir.join("plugin.toml");
    if toml.is_file() {
        let manifest = manifest::from_toml(&toml)?;
        let packed = manifest::pack(&component, &manifest).with_context(|| format!("cannot pack {}", built.display()))?;
        return Ok((manifest, packed));
    }
    let manifest = Manifest::from_component(&component).with_context(|| format!("{}", built.display()))?;
    Ok((manifest, component))
}

/// Where the Rust SDK crate is: `CHITIN_SDK_PATH`, else this checkout's `sdk/`.
fn rust_sdk_path() -> anyhow::Result<String> {
    let path = match std::env::var_os("CHITIN_SDK_PATH") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk"),
    };
    let path = std::fs::canonicalize(&path)
        .with_context(|| format!("the Rust SDK (chitin-sdk) is not at {}: set CHITIN_SDK_PATH to the `sdk` directory of a chitin checkout", path.display()))?;
    // Cargo.toml is TOML: a path with a quote or backslash would break it.
    let text = path.to_str().filter(|p| !p.contains(['"', '\\'])).with_context(|| format!("{}: the SDK path cannot be written into Cargo.toml", path.display()))?;
    Ok(text.to_string())
}

// --- Python ----------------------------------------------------------------

/// The entry module componentize-py builds: the author's module registers
/// its tools, the SDK exports them.
const PYTHON_ENTRY: &str = "import chitin_sdk\nimport plugin  # noqa: F401 (registers the tools)\n\nTool = chitin_sdk._export()\n";

fn build_python(dir: &Path) -> anyhow::Result<(Manifest, Vec<u8>)> {
    let python = std::env::var_os("CHITIN_PYTHON").unwrap_or_else(|| "python3".into());
    let componentize = std::env::var_os("CHITIN_COMPONENTIZE_PY").unwrap_or_else(|| "componentize-py".into());
    require_tool(&python, &["--version"], "python3 is not installed: the Python SDK reads the plugin's tools with python3 (3.10 or later)")?;
    require_tool(&componentize, &["--version"], &format!("componentize-py is not installed: pip install {COMPONENTIZE_PY}"))?;
    write_support_files(dir, Lang::Python)?;
    let out = Command::new(&python)
        .args(["-c", "import json, chitin_sdk, plugin; print(json.dumps(chitin_sdk.manifest()))"])
        .current_dir(dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .context("cannot run python3")?;
    let manifest = manifest_from_output("python3 plugin.py", &out)?;
    let build = dir.join(".chitin-build");
    write_file(&build.join("chitin_entry.py"), PYTHON_ENTRY)?;
    let component = build.join("component.wasm");
    run_toolchain(
        Command::new(&componentize)
            .args(["-d", "wit", "-w", "tool-plugin", "componentize", "-p", ".", "-p", ".chitin-build", "chitin_entry", "-o"])
            .arg(".chitin-build/component.wasm")
            .current_dir(dir)
            .env("PYTHONDONTWRITEBYTECODE", "1"),
        "componentize-py",
    )?;
    pack(&component, manifest)
}

// --- JavaScript ------------------------------------------------------------

/// The entry module componentize-js builds (next to `plugin.js`: it resolves
/// imports relative to the entry's directory).
const JS_ENTRY: &str = "import { log, progress } from \"chitin:plugin/host@0.1.0\";\nimport { __export } from \"./chitin-sdk.js\";\nimport \"./plugin.js\";\n\nexport const tool = __export({ log, progress });\n";
const JS_ENTRY_FILE: &str = ".chitin-entry.js";

/// Reads the manifest: `node manifest.mjs DIR`.
const JS_MANIFEST: &str = r#"import { pathToFileURL } from "node:url";
import { join } from "node:path";
const dir = process.argv[2];
const sdk = await import(pathToFileURL(join(dir, "chitin-sdk.js")).href);
await import(pathToFileURL(join(dir, "plugin.js")).href);
process.stdout.write(JSON.stringify(sdk.manifest()) + "\n");
"#;

/// Builds the component: `node componentize.mjs COMPONENTIZE_JS ENTRY WIT OUT`.
const JS_COMPONENTIZE: &str = r#"import { pathToFileURL } from "node:url";
import { writeFile } from "node:fs/promises";
const [pkg, sourcePath, witPath, out] = process.argv.slice(2);
const { componentize } = await import(pathToFileURL(pkg + "/src/componentize.js").href);
const { component } = await componentize({ sourcePath, witPath, worldName: "tool-plugin" });
await writeFile(out, component);
"#;

fn build_js(dir: &Path) -> anyhow::Result<(Manifest, Vec<u8>)> {
    let node = std::env::var_os("CHITIN_NODE").unwrap_or_else(|| "node".into());
    require_tool(&node, &["--version"], "node is not installed: JavaScript plugins are built with Node.js 18 or later (apt-get install nodejs)")?;
    let Some(package) = find_componentize_js(dir) else {
        bail!(
            "componentize-js is not installed: run `npm install` in {} (its package.json lists it), or `npm install {COMPONENTIZE_JS}` there, or set CHITIN_NODE_MODULES to a node_modules directory that has it",
            dir.display()
        );
    };
    write_support_files(dir, Lang::Js)?;
    let dir = std::fs::canonicalize(dir).with_context(|| format!("cannot resolve {}", dir.display()))?;
    let build = dir.join(".chitin-build");
    write_file(&build.join("manifest.mjs"), JS_MANIFEST)?;
    write_file(&build.join("componentize.mjs"), JS_COMPONENTIZE)?;
    let out = Command::new(&node).arg(build.join("manifest.mjs")).arg(&dir).output().context("cannot run node")?;
    let manifest = manifest_from_output("node plugin.js", &out)?;
    let entry = dir.join(JS_ENTRY_FILE);
    write_file(&entry, JS_ENTRY)?;
    let component = build.join("component.wasm");
    let result = run_toolchain(
        Command::new(&node).arg(build.join("componentize.mjs")).arg(&package).arg(&entry).arg(dir.join("wit")).arg(&component),
        "componentize-js",
    );
    let _ = std::fs::remove_file(&entry);
    result?;
    pack(&component, manifest)
}

/// `@bytecodealliance/componentize-js` under `CHITIN_NODE_MODULES`, or in a
/// `node_modules` of `dir` or one of its parents (where node would look).
fn find_componentize_js(dir: &Path) -> Option<PathBuf> {
    let rel = Path::new("@bytecodealliance/componentize-js");
    let mut candidates: Vec<PathBuf> = std::env::var_os("CHITIN_NODE_MODULES").map(|p| PathBuf::from(p).join(rel)).into_iter().collect();
    let start = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    candidates.extend(start.ancestors().map(|d| d.join("node_modules").join(rel)));
    candidates.into_iter().find(|p| p.join("src/componentize.js").is_file())
}

// --- shared ----------------------------------------------------------------

/// The manifest the SDK printed (the last line of stdout), validated.
fn manifest_from_output(what: &str, out: &std::process::Output) -> anyhow::Result<Manifest> {
    if !out.status.success() {
        bail!("{what} failed while reading the plugin's tools:\n{}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
    Manifest::from_json(line.as_bytes()).with_context(|| format!("the manifest {what} produced is not valid"))
}

fn pack(component: &Path, manifest: Manifest) -> anyhow::Result<(Manifest, Vec<u8>)> {
    let bytes = std::fs::read(component).with_context(|| format!("cannot read {}", component.display()))?;
    let packed = manifest::pack(&bytes, &manifest).with_context(|| format!("cannot pack {}", component.display()))?;
    Ok((manifest, packed))
}

/// Fails naming the tool and how to install it when `program` cannot run.
fn require_tool(program: &std::ffi::OsStr, args: &[&str], missing: &str) -> anyhow::Result<()> {
    match Command::new(program).args(args).stdout(Stdio::null()).stderr(Stdio::null()).status() {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => bail!("{missing} ({} {} exited with {status})", program.to_string_lossy(), args.join(" ")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!("{missing}"),
        Err(e) => bail!("{missing} (cannot run {}: {e})", program.to_string_lossy()),
    }
}

/// Runs a toolchain step with its output on our stderr (stdout stays ours).
fn run_toolchain(command: &mut Command, what: &str) -> anyhow::Result<()> {
    let status = command.stdin(Stdio::null()).stdout(std::io::stderr()).status().with_context(|| format!("cannot run {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status}); its output is above");
    }
    Ok(())
}

fn check_plugin_name(name: &str) -> anyhow::Result<()> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if !ok {
        bail!("`{}` is not a plugin name: use [a-z][a-z0-9_-]*, at most 64 characters", shown(name, 64, "name"));
    }
    Ok(())
}

fn write_file(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

fn write_if_changed(path: &Path, text: &str) -> anyhow::Result<()> {
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    write_file(path, text)
}
