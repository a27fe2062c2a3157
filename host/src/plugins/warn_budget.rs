//! A bound on the warning lines one plugin can make the host write.
//!
//! A refused request is worth one log line, but a component that fires
//! 25 000 requests at an ungranted host would make 25 000 lines: the log is
//! a host resource a plugin must not be able to fill. A [`WarnBudget`] lets
//! the first `limit` lines through and counts the rest; the count is written
//! as one summary line (`… and 24 990 more refused requests`) when the
//! budget ends: at the end of the call (the budget is dropped with the
//! call's store) or, for a long-lived budget (a channel's), at the end of
//! each window.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Warning lines one tool or channel call may write about refused requests
/// before the rest are summed up.
pub const PER_CALL: u32 = 20;

/// Warning lines a channel's host-run requests may write per minute.
pub const PER_MINUTE: u32 = 20;

/// Counts the warning lines of one source; see the module docs.
#[derive(Debug)]
pub struct WarnBudget {
    plugin: Arc<str>,
    /// What a suppressed line was about, plural (`refused requests`).
    what: &'static str,
    limit: u32,
    window: Option<Duration>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    started: Instant,
    written: u32,
    suppressed: u64,
}

impl WarnBudget {
    /// A budget of `limit` lines for as long as it lives (one call).
    pub fn per_call(plugin: Arc<str>, what: &'static str, limit: u32) -> WarnBudget {
        WarnBudget::new(plugin, what, limit, None)
    }

    /// A budget of `limit` lines per `window`.
    pub fn per_window(plugin: Arc<str>, what: &'static str, limit: u32, window: Duration) -> WarnBudget {
        WarnBudget::new(plugin, what, limit, Some(window))
    }

    fn new(plugin: Arc<str>, what: &'static str, limit: u32, window: Option<Duration>) -> WarnBudget {
        WarnBudget { plugin, what, limit, window, state: Mutex::new(State { started: Instant::now(), written: 0, suppressed: 0 }) }
    }

    /// Whether the next line may be written; `false` counts it for the
    /// summary instead.
    pub fn admit(&self) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(window) = self.window
            && state.started.elapsed() >= window
        {
            self.summarise(state.suppressed);
            *state = State { started: Instant::now(), written: 0, suppressed: 0 };
        }
        if state.written < self.limit {
            state.written += 1;
            true
        } else {
            state.suppressed += 1;
            false
        }
    }

    /// Lines suppressed so far (in this window).
    pub fn suppressed(&self) -> u64 {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).suppressed
    }

    fn summarise(&self, suppressed: u64) {
        if suppressed > 0 {
            tracing::warn!(plugin = &*self.plugin, "… and {} more {}", group_thousands(suppressed), self.what);
        }
    }
}

impl Drop for WarnBudget {
    fn drop(&mut self) {
        let suppressed = self.state.get_mut().map(|s| s.suppressed).unwrap_or_else(|p| p.into_inner().suppressed);
        self.summarise(suppressed);
    }
}

/// `24990` as `24 990`.
fn group_thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_lines_pass_and_the_rest_are_counted() {
        let budget = WarnBudget::per_call("p".into(), "refused requests", 3);
        let admitted = (0..25_000).filter(|_| budget.admit()).count();
        assert_eq!(admitted, 3);
        assert_eq!(budget.suppressed(), 24_997);
        assert_eq!(group_thousands(24_997), "24 997");
        assert_eq!(group_thousands(7), "7");
        assert_eq!(group_thousands(1_000_000), "1 000 000");
    }

    #[test]
    fn a_window_budget_starts_again_each_window() {
        let budget = WarnBudget::per_window("p".into(), "dropped", 2, Duration::from_millis(30));
        assert!(budget.admit() && budget.admit() && !budget.admit());
        std::thread::sleep(Duration::from_millis(40));
        assert!(budget.admit(), "a new window");
        assert_eq!(budget.suppressed(), 0);
    }
}
