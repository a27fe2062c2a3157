//! Builds this workspace's plugin crates as WebAssembly components, from a
//! build script.
//!
//! `host/build.rs` uses it for the first-party plugins (embedded in the
//! binary) and `testing/build.rs` (chitin-testing) for the example and hostile
//! test guests, so
//! `cargo run` and `cargo test` need no separate plugin build step.
//!
//! The nested `cargo build` uses its own target dir (`<target>/wasm`): the
//! outer cargo holds the lock of its own build dir while build scripts run,
//! so sharing it would deadlock. Both builds still live under one target dir.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The target plugins are built for.
pub const TARGET: &str = "wasm32-wasip2";

/// The cargo profile plugins are built with (see the root `Cargo.toml`).
pub const PROFILE: &str = "plugin";

/// Builds `packages` (cargo package names) and returns, in order, the path of
/// each package's `.wasm`. Panics with a readable message on failure, which
/// is how a build script reports errors.
pub fn build_components(packages: &[&str]) -> Vec<PathBuf> {
    let manifest_dir = PathBuf::from(env("CARGO_MANIFEST_DIR"));
    let root = workspace_root(&manifest_dir);
    let target_dir = outer_target_dir().join("wasm");
    ensure_target_installed();

    for dir in ["wit", "sdk", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(&root)
        .args(["build", "--target", TARGET, "--profile", PROFILE, "--target-dir"])
        .arg(&target_dir)
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"));
    for package in packages {
        cmd.args(["-p", package]);
        // The whole package: sources, Cargo.toml, and files they embed
        // (a guest's `manifest.json`).
        let dir = package_dir(&root, package);
        println!("cargo:rerun-if-changed={}", dir.display());
    }
    // Flags meant for the outer (native) build must not leak into this one.
    for var in ["CARGO_ENCODED_RUSTFLAGS", "RUSTFLAGS", "CARGO_TARGET_DIR", "CARGO_BUILD_TARGET", "RUSTC_WORKSPACE_WRAPPER"] {
        cmd.env_remove(var);
    }
    let output = cmd.output().unwrap_or_else(|e| panic!("cannot run cargo to build plugins: {e}"));
    if !output.status.success() {
        panic!(
            "building the plugin components failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    packages
        .iter()
        .map(|p| target_dir.join(TARGET).join(PROFILE).join(format!("{}.wasm", p.replace('-', "_"))))
        .collect()
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set; call this from a build script"))
}

/// The directory holding the workspace `Cargo.lock`.
fn workspace_root(start: &Path) -> PathBuf {
    start
        .ancestors()
        .find(|d| d.join("Cargo.lock").exists() || d.join("wit").is_dir())
        .unwrap_or_else(|| panic!("no workspace root above {}", start.display()))
        .to_path_buf()
}

/// `OUT_DIR` is `<target>/<profile>/build/<pkg>-<hash>/out` (or with a
/// `<triple>/` level when cross-compiling); the target dir is the ancestor
/// that holds `CACHEDIR.TAG`, which cargo writes into every target dir.
fn outer_target_dir() -> PathBuf {
    let out = PathBuf::from(env("OUT_DIR"));
    out.ancestors()
        .find(|d| d.join("CACHEDIR.TAG").exists())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| out.ancestors().nth(4).expect("OUT_DIR is deep enough").to_path_buf())
}

/// Where a workspace package lives: found by its `name = "..."` line.
fn package_dir(root: &Path, package: &str) -> PathBuf {
    let needle = format!("name = \"{package}\"");
    ["plugins", "examples", "tests/guests", "tests", "sdk"]
        .iter()
        .flat_map(|parent| std::fs::read_dir(root.join(parent)).into_iter().flatten())
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|dir| std::fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|t| t.contains(&needle)))
        .unwrap_or_else(|| panic!("package `{package}` not found in the workspace"))
}

/// Installs the wasm target through rustup when it is missing, so a fresh
/// machine needs no manual step.
fn ensure_target_installed() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let installed = Command::new(&rustc)
        .args(["--print", "target-libdir", "--target", TARGET])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .is_some_and(|dir| dir.is_dir());
    if installed {
        return;
    }
    println!("cargo:warning=installing the {TARGET} target with rustup (one time)");
    let status = Command::new("rustup").args(["target", "add", TARGET]).status();
    if !status.is_ok_and(|s| s.success()) {
        panic!("the {TARGET} target is missing and `rustup target add {TARGET}` failed; install it and build again");
    }
}
