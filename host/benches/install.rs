//! Marketplace install benchmark. Prints figures; asserts nothing.
//!
//! Run: `cargo bench -p chitin --bench install`. The component is the
//! built-in `web` plugin (~0.9 MB of real code) renamed `webx` with its
//! tools renamed (the built-in names are reserved), or any packed component
//! named by `CHITIN_BENCH_COMPONENT=path.wasm` (e.g. an 18 MB Python one),
//! called with `CHITIN_BENCH_TOOL` / `CHITIN_BENCH_ARGS` (JSON).
//!
//! Figures: verify (SHA-256 + minisign), audit (manifest, world, imports),
//! compile in the compile child, each in process; then the whole
//! `chitin plugin install NAME --yes` from a file:// index, and the first
//! `chitin tool call` after it (which must hit the compile cache).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chitin::market::{audit, sha256_hex, sign};
use chitin::plugins::manifest::{self, Manifest};
use chitin::plugins::world::World;
use chitin::plugins::{PluginRuntime, PluginSource, RuntimeConfig};

const CHITIN_BIN: &str = env!("CARGO_BIN_EXE_chitin");

fn main() {
    let work = tempfile::tempdir().unwrap();
    let (bytes, tool, args) = component(work.path());
    let manifest = Manifest::from_component(&bytes).unwrap();
    println!("chitin install benchmark ({} {}, {} KiB)", manifest.name, manifest.version, bytes.len() / 1024);

    let chitin = |home: &Path, args: &[&str]| {
        let out = Command::new(CHITIN_BIN).args(args).env("CHITIN_HOME", home).env("RUST_LOG", "chitin::plugins=debug").env("NO_COLOR", "1").output().unwrap();
        assert!(out.status.success(), "{args:?}: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        out
    };
    // Publisher and index operator, as in the README walkthrough.
    let w = work.path();
    let file = w.join("component.wasm");
    std::fs::write(&file, &bytes).unwrap();
    for key in ["pub", "idx"] {
        chitin(w, &["plugin", "keygen", w.join(key).to_str().unwrap()]);
    }
    chitin(w, &["plugin", "sign", file.to_str().unwrap(), "--key", w.join("pub.key").to_str().unwrap()]);
    let site = w.join("site");
    chitin(w, &["plugin", "index", "add", site.to_str().unwrap(), file.to_str().unwrap(), "--publisher", "bench", "--publisher-key", w.join("pub.pub").to_str().unwrap()]);
    chitin(w, &["plugin", "index", "sign", site.to_str().unwrap(), "--key", w.join("idx.key").to_str().unwrap(), "--name", "bench"]);
    let public = |name: &str| std::fs::read_to_string(w.join(format!("{name}.pub"))).unwrap().lines().nth(1).unwrap().to_string();

    // In process, step by step.
    let signature = std::fs::read_to_string(format!("{}.minisig", file.display())).unwrap();
    let verify = median((0..5).map(|_| {
        let started = Instant::now();
        let digest = sha256_hex(&bytes);
        let ok = sign::verify(&[public("pub")], &bytes, &signature).unwrap();
        assert!(ok.trusted_comment.contains(&digest));
        started.elapsed()
    }));
    let audit_time = median((0..5).map(|_| {
        let started = Instant::now();
        let m = Manifest::from_component(&bytes).unwrap();
        World::detect(&bytes).unwrap();
        audit::audit(&bytes, &m).unwrap();
        started.elapsed()
    }));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let compile = median((0..3).map(|i| {
        let cache = w.join(format!("cache-{i}"));
        let runtime = PluginRuntime::new(RuntimeConfig { workspace: w.to_path_buf(), cache_dir: Some(cache), limits: Default::default() }).unwrap().with_compile_child(CHITIN_BIN.into());
        let plugin = runtime.load(PluginSource::Builtin, Arc::from(&bytes[..]), &Default::default()).unwrap();
        let started = Instant::now();
        rt.block_on(runtime.prepare(&plugin)).unwrap();
        started.elapsed()
    }));
    println!("verify (sha256 + signature): {:.2} ms", ms(verify));
    println!("audit (manifest + world + imports): {:.2} ms", ms(audit_time));
    println!("compile + link (compile child, no cache): {:.0} ms", ms(compile));

    // The whole command, then the first call.
    let home = w.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let config = format!(
        "[[plugin_index]]\nname = \"bench\"\nurl = \"file://{}\"\nkeys = [\"{}\"]\n\n[publishers.bench]\nkeys = [\"{}\"]\n",
        site.join("index.json").display(),
        public("idx"),
        public("pub")
    );
    std::fs::write(home.join("config.toml"), config).unwrap();
    let started = Instant::now();
    chitin(&home, &["plugin", "install", &manifest.name, "--yes"]);
    let install = started.elapsed();
    println!("`chitin plugin install {} --yes` (file:// index, whole process): {:.0} ms", manifest.name, ms(install));
    let started = Instant::now();
    let out = Command::new(CHITIN_BIN).args(["tool", "call", &tool, "--args", &args]).env("CHITIN_HOME", &home).env("RUST_LOG", "chitin::plugins=debug").env("NO_COLOR", "1").output().unwrap();
    let first_call = started.elapsed();
    let log = String::from_utf8_lossy(&out.stderr);
    let hit = log.lines().find(|l| l.contains("plugin prepared")).map(|l| if l.contains("cache_hit=true") { "cache hit, no compile" } else { "COMPILED (cache miss)" }).unwrap_or("not prepared");
    let result = String::from_utf8_lossy(&out.stdout).lines().chain(log.lines().filter(|l| l.starts_with("error"))).next().unwrap_or("").chars().take(80).collect::<String>();
    println!("first `chitin tool call {tool}` after install (whole process): {:.0} ms, {hit}; result: {result}", ms(first_call));
    println!("ratio compile / first call: {:.0}x", compile.as_secs_f64() / first_call.as_secs_f64());
}

/// The component to install, the tool to call and its arguments.
fn component(work: &Path) -> (Vec<u8>, String, String) {
    if let Ok(path) = std::env::var("CHITIN_BENCH_COMPONENT") {
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("CHITIN_BENCH_COMPONENT={path}: {e}"));
        let manifest = Manifest::from_component(&bytes).unwrap();
        let tool = std::env::var("CHITIN_BENCH_TOOL").unwrap_or_else(|_| manifest.tools[0].name.clone());
        let args = std::env::var("CHITIN_BENCH_ARGS").unwrap_or_else(|_| "{}".into());
        return (bytes, tool, args);
    }
    // The built-in names are reserved, so the web plugin is renamed; its
    // code still knows only its own tool names, so the call is answered by
    // the guest with an unknown-tool error: an instantiate + call all the
    // same, which is what "no compile on the first call" is about.
    let web = chitin::plugins::builtin("web").expect("web is built in").bytes;
    let mut manifest = Manifest::from_component(web).unwrap();
    manifest.name = "webx".into();
    manifest.version = "1.0.0".into();
    for tool in &mut manifest.tools {
        tool.name = tool.name.replace("web_", "webx_");
    }
    let tool = manifest.tools[0].name.clone();
    let _ = work;
    (manifest::pack(web, &manifest).unwrap(), tool, r#"{"url":"https://example.com/","query":"x"}"#.into())
}

fn median(samples: impl Iterator<Item = Duration>) -> Duration {
    let mut v: Vec<Duration> = samples.collect();
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
