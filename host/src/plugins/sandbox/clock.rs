//! The call's clock: host waits that move the deadline.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Time a call spends in host calls that wait on the agent rather than
/// compute (a `wait` subagent): it moves the call's deadline, both the
/// epoch check and the wall-clock timeout, so `[limits] timeout_ms` keeps
/// bounding the plugin's own work without cutting a subagent short. The
/// subagent is bounded by its own limits (iterations, model timeout).
#[derive(Debug, Default)]
pub struct CallClock {
    state: Mutex<(Duration, Option<Instant>)>,
}

impl CallClock {
    /// A wait starts now; it ends when the guard is dropped.
    pub fn pause(self: &Arc<Self>) -> PauseGuard {
        self.state.lock().expect("clock lock").1 = Some(Instant::now());
        PauseGuard(self.clone())
    }

    /// How far the deadline has moved: finished waits plus the current one.
    pub fn extension(&self) -> Duration {
        let (done, since) = *self.state.lock().expect("clock lock");
        done + since.map(|s| s.elapsed()).unwrap_or_default()
    }
}

/// Ends a [`CallClock::pause`].
pub struct PauseGuard(Arc<CallClock>);

impl Drop for PauseGuard {
    fn drop(&mut self) {
        let mut state = self.0.state.lock().expect("clock lock");
        if let Some(since) = state.1.take() {
            state.0 += since.elapsed();
        }
    }
}

/// `tokio::time::timeout` whose limit grows by what `clock` says was spent
/// waiting on the host.
pub async fn timeout_with_pauses<F: std::future::Future>(limit: Duration, clock: &CallClock, fut: F) -> Result<F::Output, tokio::time::error::Elapsed> {
    let start = tokio::time::Instant::now();
    tokio::pin!(fut);
    loop {
        match tokio::time::timeout_at(start + limit + clock.extension(), &mut fut).await {
            Ok(value) => return Ok(value),
            // Still past the deadline with the waits counted: a real timeout.
            Err(elapsed) if tokio::time::Instant::now() >= start + limit + clock.extension() => return Err(elapsed),
            Err(_) => continue,
        }
    }
}
