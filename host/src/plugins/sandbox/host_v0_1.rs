//! `chitin:plugin/host` of package version 0.1.0.

use super::StoreState;
use crate::plugins::bindings::v0_1;

impl v0_1::chitin::plugin::types::Host for StoreState {}

impl v0_1::chitin::plugin::host::Host for StoreState {
    fn log(&mut self, level: v0_1::LogLevel, message: String) {
        use v0_1::LogLevel as L;
        let level = match level {
            L::Trace => tracing::Level::TRACE,
            L::Debug => tracing::Level::DEBUG,
            L::Info => tracing::Level::INFO,
            L::Warn => tracing::Level::WARN,
            L::Error => tracing::Level::ERROR,
        };
        self.host_log(level, &message);
    }

    fn progress(&mut self, text: String) {
        self.host_progress(&text);
    }
}
