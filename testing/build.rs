//! Builds the guest components the tests and benchmarks load (none is
//! embedded in the `chitin` binary, whose `build.rs` builds only the
//! plugins it ships): the hostile guest that attacks the sandbox, the SDK
//! example, the echo channel (a 0.2.0 channel plugin with hostile
//! behaviours) and a 0.2.0 tool plugin. Their paths reach the code as
//! `CHITIN_*_WASM`, read once in `src/harness.rs`.

fn main() {
    let paths = chitin_xbuild::build_components(&["hostile-guest", "hello-tool", "echo-channel", "echo-tool-v2"]);
    println!("cargo:rustc-env=CHITIN_HOSTILE_WASM={}", paths[0].display());
    println!("cargo:rustc-env=CHITIN_HELLO_WASM={}", paths[1].display());
    println!("cargo:rustc-env=CHITIN_ECHO_CHANNEL_WASM={}", paths[2].display());
    println!("cargo:rustc-env=CHITIN_ECHO_TOOL_V2_WASM={}", paths[3].display());
    println!("cargo:rerun-if-changed=build.rs");
}
