//! Builds the guest components the tests load: the hostile guest that attacks
//! the sandbox and the SDK example.

fn main() {
    let paths = chitin_xbuild::build_components(&["hostile-guest", "hello-tool"]);
    println!("cargo:rustc-env=CHITIN_HOSTILE_WASM={}", paths[0].display());
    println!("cargo:rustc-env=CHITIN_HELLO_WASM={}", paths[1].display());
    println!("cargo:rerun-if-changed=build.rs");
}
