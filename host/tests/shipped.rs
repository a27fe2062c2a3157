//! The shipped binary holds no test code (issue 20): built the way a user
//! builds it (`cargo build --release`: no dev-dependencies, so neither
//! `chitin-testing` nor the `test-support` feature), it contains none of the
//! mock servers' names and none of the crash hooks' variables, which the
//! binary the tests run does contain (shown first, so the search can fail).
//!
//! A test binary of its own, apart from `e2e`, and one that links no
//! `chitin`: building the shipped binary replaces `target/release/chitin`,
//! which is the binary `e2e` runs. Cargo runs test binaries one after the
//! other, never side by side, and this test puts the tested binary back
//! before it ends.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Names that exist only in test code: the mocks (`chitin-testing`), the
/// crash points' variables (`durable::crash`, behind `test-support`), and
/// the environment variable of the channels' old crash hook.
const TEST_ONLY: &[&str] = &[
    "MockLlm",
    "MockTelegram",
    "MockWeb",
    "MockIndex",
    "MockServer",
    "WebhookReceiver",
    "chitin_testing",
    "mock-sig-",
    "CHITIN_TEST_CRASH_AT",
    "CHITIN_TEST_CRASH_MATCH",
    "CHITIN_TEST_CRASH_BEFORE_COMMIT",
    "crash point ",
];

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn the_shipped_binary_has_no_crash_points_and_no_mocks() {
    let tested = PathBuf::from(env!("CARGO_BIN_EXE_chitin"));
    let tested_bytes = std::fs::read(&tested).unwrap_or_else(|e| panic!("reading {}: {e}", tested.display()));
    // The search sees what it looks for: the tested binary is built with
    // `test-support` (the self dev-dependency) and has the crash points.
    assert!(contains(&tested_bytes, "CHITIN_TEST_CRASH_AT"), "the tested binary has the crash points");

    // `<target>/release/chitin`: build the shipped binary in the same
    // target dir (so nothing but the `chitin` crates is compiled again),
    // keeping the tested one aside and putting it back afterwards.
    let profile_dir = tested.parent().expect("profile dir");
    let target_dir = profile_dir.parent().expect("target dir");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root");
    let kept = profile_dir.join("chitin.tested");
    std::fs::copy(&tested, &kept).unwrap_or_else(|e| panic!("keeping {}: {e}", tested.display()));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(workspace)
        .args(["build", "--release", "--bin", "chitin", "--message-format=json"])
        .env("CARGO_TARGET_DIR", target_dir)
        .output()
        .expect("cargo runs");
    let shipped_bytes = std::fs::read(&tested);
    std::fs::rename(&kept, &tested).unwrap_or_else(|e| panic!("putting back {}: {e}", tested.display()));
    assert!(out.status.success(), "cargo build --release --bin chitin failed: {}", String::from_utf8_lossy(&out.stderr));
    // The build's own word on which file it made.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let executable = stdout
        .lines()
        .filter_map(|line| line.split("\"executable\":\"").nth(1))
        .filter_map(|rest| rest.split('"').next())
        .find(|path| path.ends_with("/chitin"))
        .unwrap_or_else(|| panic!("cargo named no chitin executable: {stdout}"));
    assert_eq!(Path::new(executable), tested, "the shipped binary is where the tested one was");
    let shipped = shipped_bytes.unwrap_or_else(|e| panic!("reading the shipped binary: {e}"));
    assert_ne!(shipped, tested_bytes, "the shipped build differs from the test build");

    let found: Vec<&str> = TEST_ONLY.iter().copied().filter(|name| contains(&shipped, name)).collect();
    assert!(found.is_empty(), "the shipped binary holds test code: {found:?}");
}
