//! A Python plugin's costs, through the binary. Prints figures; asserts nothing.
//!
//! Run: `cargo bench -p chitin --bench python_plugin` (needs componentize-py 0.25.1 on
//! PATH). Builds `examples/python-tool` with `chitin plugin build` (~18 MB
//! component), then times: the build; `chitin plugin install` into a fresh
//! data dir (validate, compile in the compile child, link, write); the
//! first `tool call` after the install and later ones (process start to the
//! tool's result, cache warm: no compile); and a cold call of the same file
//! in another fresh data dir (compile on the call path) for comparison.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const CHITIN_BIN: &str = env!("CARGO_BIN_EXE_chitin");
const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/python-tool/plugin.py");

fn chitin(home: &Path, args: &[&str]) -> (Duration, std::process::Output) {
    let started = Instant::now();
    let out = Command::new(CHITIN_BIN).args(args).env("CHITIN_HOME", home).output().expect("chitin runs");
    let took = started.elapsed();
    assert!(out.status.success(), "chitin {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    (took, out)
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    if !Command::new("componentize-py").arg("--version").output().is_ok_and(|o| o.status.success()) {
        println!("componentize-py is missing: pip install componentize-py==0.25.1");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wordcount");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(EXAMPLE, dir.join("plugin.py")).unwrap();
    let home = tmp.path().join("home");
    let ws = home.join("workspace");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("notes.txt"), "the cat and the hat\nthe end\n".repeat(100)).unwrap();
    std::fs::write(home.join("config.toml"), "[plugins.wordcount]\nworkspace = \"read\"\n").unwrap();

    let (build, _) = chitin(&home, &["plugin", "build", dir.to_str().unwrap()]);
    let wasm = dir.join("dist/wordcount.wasm");
    let size = std::fs::metadata(&wasm).unwrap().len();
    println!("chitin Python plugin benchmark (examples/python-tool, {:.1} MB)", size as f64 / 1e6);
    println!("  chitin plugin build (componentize-py + manifest + pack): {}", ms(build));

    let (install, _) = chitin(&home, &["plugin", "install", wasm.to_str().unwrap()]);
    println!("  chitin plugin install, cold cache (validate + compile in the child + link + write): {}", ms(install));

    let args = ["tool", "call", "count_words", "--args", r#"{"path":"notes.txt"}"#];
    let mut calls: Vec<Duration> = (0..6).map(|_| chitin(&home, &args).0).collect();
    let first = calls.remove(0);
    calls.sort();
    println!("  first tool call after install, process start to result: {}", ms(first));
    println!("  later calls, process start to result: median {}, min {} (5 runs)", ms(calls[2]), ms(calls[0]));

    let cold_home = tmp.path().join("cold");
    std::fs::create_dir_all(cold_home.join("workspace")).unwrap();
    std::fs::copy(ws.join("notes.txt"), cold_home.join("workspace/notes.txt")).unwrap();
    std::fs::copy(home.join("config.toml"), cold_home.join("config.toml")).unwrap();
    let mut cold_args = args.to_vec();
    cold_args.extend(["--plugin", wasm.to_str().unwrap()]);
    let (cold, _) = chitin(&cold_home, &cold_args);
    println!("  tool call --plugin without install, cold cache (compile on the call): {}", ms(cold));
}
