//! Crash points for the crash tests (`host/tests/e2e/exactly_once.rs`, and
//! `channel_commit` for `host/tests/e2e/channels.rs`).
//!
//! Compiled only with the cargo feature `test-support` (the host's tests
//! enable it through a self dev-dependency); without it
//! [`crash_point!`](crate::crash_point) expands to nothing, so the shipped
//! binary holds neither the names nor the check.
//!
//! With the feature, `CHITIN_TEST_CRASH_AT=<point>` makes the process kill
//! itself with `SIGKILL` (as `kill -9` would) the first time it reaches
//! `<point>`; `CHITIN_TEST_CRASH_MATCH=<text>` narrows it to turns whose
//! inbound text contains `<text>`.

/// Kills the process at crash point `$name` when the test environment asks
/// for it (see the module docs). `$text` is the inbound text of the turn.
#[macro_export]
macro_rules! crash_point {
    ($name:literal, $text:expr) => {
        #[cfg(feature = "test-support")]
        $crate::durable::crash::hit($name, $text);
    };
}

/// The environment variable naming the crash point.
#[cfg(feature = "test-support")]
pub const CRASH_AT_VAR: &str = "CHITIN_TEST_CRASH_AT";

/// The environment variable narrowing it to texts that contain its value.
#[cfg(feature = "test-support")]
pub const CRASH_MATCH_VAR: &str = "CHITIN_TEST_CRASH_MATCH";

/// Dies here if the environment names `point` (and `text` matches).
#[cfg(feature = "test-support")]
pub fn hit(point: &str, text: &str) {
    let Ok(at) = std::env::var(CRASH_AT_VAR) else { return };
    if at != point {
        return;
    }
    if std::env::var(CRASH_MATCH_VAR).is_ok_and(|m| !text.contains(&m)) {
        return;
    }
    eprintln!("crash point {point}: SIGKILL");
    // SAFETY: kill(2) on our own pid; SIGKILL, as a crash would.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
}
