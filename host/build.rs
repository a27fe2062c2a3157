//! Builds the first-party plugins (`plugins/*`) as components and generates
//! `BUILTIN_PLUGINS`, which embeds them in the `chitin` binary: a fresh build
//! finds them without an install step.

fn main() {
    let plugins = [("fs", "chitin-plugin-fs"), ("telegram", "chitin-plugin-telegram"), ("agent", "chitin-plugin-agent"), ("web", "chitin-plugin-web")];
    // Only what the binary embeds: the test guests (the SDK example, the
    // hostile guest, the echo channel) are built by chitin-testing's
    // `build.rs`, for the tests and benchmarks alone.
    let packages: Vec<&str> = plugins.iter().map(|(_, package)| *package).collect();
    let paths = chitin_xbuild::build_components(&packages);
    let entries: String = plugins
        .iter()
        .zip(&paths)
        .map(|((name, _), path)| {
            // The content hash (the compile cache's key) is taken here, once,
            // so a process never reads the embedded bytes just to name them.
            let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            let hash = blake3::hash(&bytes);
            format!("    Builtin {{ name: {name:?}, bytes: include_bytes!({:?}), hash: {:?} }},\n", path.display().to_string(), hash.as_bytes())
        })
        .collect();
    let code = format!("/// First-party plugins compiled into the binary.\npub static BUILTIN_PLUGINS: &[Builtin] = &[\n{entries}];\n");
    let out = std::path::Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("builtin_plugins.rs");
    std::fs::write(&out, code).expect("writing builtin_plugins.rs");
    // A position-dependent executable: the loader then applies none of the
    // ~106 000 relative relocations a PIE needs at every start (about 2 MB
    // of `.data.rel.ro` made private and dirty, ~1 ms), which a one-shot
    // `chitin agent -m` pays in full. The code is PIC either way.
    println!("cargo:rustc-link-arg-bins=-no-pie");
    println!("cargo:rerun-if-changed=build.rs");
}
