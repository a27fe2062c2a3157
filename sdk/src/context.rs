use std::fmt;

/// Where a tool call comes from, and the host services a tool may use while
/// it runs.
///
/// The fields identify the call; they grant nothing. A plugin may use them to
/// key its own output (file names, log lines).
///
/// Outside WebAssembly (unit tests of a plugin's logic), [`Context::progress`]
/// and [`Context::log`] print to standard error instead of calling the host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Context {
    /// The conversation this call belongs to, e.g. `telegram:12345`.
    pub session_key: String,
    /// The channel the conversation arrived on, e.g. `cli`, `telegram`.
    pub channel: String,
    /// The chat on that channel.
    pub chat_id: String,
    /// The model's id for this tool call; unique within a turn.
    pub call_id: String,
}

impl Context {
    /// A context with the given identifiers, for tests.
    pub fn new(
        session_key: impl Into<String>,
        channel: impl Into<String>,
        chat_id: impl Into<String>,
        call_id: impl Into<String>,
    ) -> Self {
        Context {
            session_key: session_key.into(),
            channel: channel.into(),
            chat_id: chat_id.into(),
            call_id: call_id.into(),
        }
    }

    /// Shows a short status text to the user while the call runs
    /// ("reading 3 of 10 files..."). It is never sent to the model.
    pub fn progress(&self, text: &str) {
        #[cfg(target_arch = "wasm32")]
        crate::bindings::chitin::plugin::host::progress(text);
        #[cfg(not(target_arch = "wasm32"))]
        eprintln!("[progress] {text}");
    }

    /// Writes a line to the host's log, under the plugin's name. Lines beyond
    /// a per-call budget are dropped.
    pub fn log(&self, level: LogLevel, msg: &str) {
        #[cfg(target_arch = "wasm32")]
        crate::bindings::chitin::plugin::host::log(level.into(), msg);
        #[cfg(not(target_arch = "wasm32"))]
        eprintln!("[{level}] {msg}");
    }
}

impl From<crate::bindings::chitin::plugin::types::CallContext> for Context {
    fn from(ctx: crate::bindings::chitin::plugin::types::CallContext) -> Self {
        Context {
            session_key: ctx.session_key,
            channel: ctx.channel,
            chat_id: ctx.chat_id,
            call_id: ctx.call_id,
        }
    }
}

/// Severity of a log line (see [`Context::log`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal operation.
    Info,
    /// Something looks wrong, the call goes on.
    Warn,
    /// Something failed.
    Error,
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        })
    }
}

impl From<LogLevel> for crate::bindings::chitin::plugin::host::LogLevel {
    fn from(level: LogLevel) -> Self {
        use crate::bindings::chitin::plugin::host::LogLevel as Wit;
        match level {
            LogLevel::Trace => Wit::Trace,
            LogLevel::Debug => Wit::Debug,
            LogLevel::Info => Wit::Info,
            LogLevel::Warn => Wit::Warn,
            LogLevel::Error => Wit::Error,
        }
    }
}
