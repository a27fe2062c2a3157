use std::{fmt, io};

use crate::bindings::chitin::plugin::types::ToolError as WitToolError;

/// Why a tool call failed; mirrors the WIT `tool-error` variant.
///
/// The host turns each case into text for the model, so a message should say
/// what went wrong and what to try.
///
/// `?` converts into it from [`std::io::Error`] (permission denied becomes
/// [`ToolError::Denied`], everything else [`ToolError::Failed`]), from
/// `String`/`&str` and from [`serde_json::Error`] (both [`ToolError::Failed`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ToolError {
    /// The plugin does not have a tool of this name.
    UnknownTool(String),
    /// The arguments did not fit the tool's parameters.
    InvalidArgs(String),
    /// The tool ran and failed (file not found, no match, ...).
    Failed(String),
    /// The tool was refused something by the sandbox (a path outside the
    /// workspace, a host that was not granted, ...).
    Denied(String),
}

impl ToolError {
    /// [`ToolError::Failed`] with `msg`.
    pub fn failed(msg: impl Into<String>) -> Self {
        ToolError::Failed(msg.into())
    }

    /// [`ToolError::Denied`] with `msg`.
    pub fn denied(msg: impl Into<String>) -> Self {
        ToolError::Denied(msg.into())
    }

    /// [`ToolError::InvalidArgs`] with `msg`.
    pub fn invalid_args(msg: impl Into<String>) -> Self {
        ToolError::InvalidArgs(msg.into())
    }

    /// [`ToolError::UnknownTool`] with `msg`.
    pub fn unknown_tool(msg: impl Into<String>) -> Self {
        ToolError::UnknownTool(msg.into())
    }

    /// The message, without the kind of error.
    pub fn message(&self) -> &str {
        match self {
            ToolError::UnknownTool(m)
            | ToolError::InvalidArgs(m)
            | ToolError::Failed(m)
            | ToolError::Denied(m) => m,
        }
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolError::UnknownTool(m) => write!(f, "unknown tool: {m}"),
            ToolError::InvalidArgs(m) => write!(f, "invalid arguments: {m}"),
            ToolError::Failed(m) => f.write_str(m),
            ToolError::Denied(m) => write!(f, "denied: {m}"),
        }
    }
}

impl std::error::Error for ToolError {}

impl From<io::Error> for ToolError {
    fn from(err: io::Error) -> Self {
        let msg = io_message(&err);
        if err.kind() == io::ErrorKind::PermissionDenied {
            ToolError::Denied(msg)
        } else {
            ToolError::Failed(msg)
        }
    }
}

/// `err` as text for the model: the OS message without its
/// `(os error N)` suffix.
fn io_message(err: &io::Error) -> String {
    let text = err.to_string();
    match (err.raw_os_error(), text.rfind(" (os error ")) {
        (Some(_), Some(at)) if text.ends_with(')') => text[..at].to_string(),
        _ => text,
    }
}

impl From<String> for ToolError {
    fn from(msg: String) -> Self {
        ToolError::Failed(msg)
    }
}

impl From<&str> for ToolError {
    fn from(msg: &str) -> Self {
        ToolError::Failed(msg.to_string())
    }
}

impl From<serde_json::Error> for ToolError {
    fn from(err: serde_json::Error) -> Self {
        ToolError::Failed(err.to_string())
    }
}

impl From<ToolError> for WitToolError {
    fn from(err: ToolError) -> Self {
        match err {
            ToolError::UnknownTool(m) => WitToolError::UnknownTool(m),
            ToolError::InvalidArgs(m) => WitToolError::InvalidArgs(m),
            ToolError::Failed(m) => WitToolError::Failed(m),
            ToolError::Denied(m) => WitToolError::Denied(m),
        }
    }
}

/// What a `#[tool]` function may return on success: the text the model
/// reads.
#[diagnostic::on_unimplemented(
    message = "a #[tool] function cannot return `Result<{Self}, _>`",
    note = "return `Result<String, ToolError>`; `&str` and `serde_json::Value` work too"
)]
pub trait ToolOutput {
    /// The result text for the model.
    fn into_text(self) -> String;
}

impl ToolOutput for String {
    fn into_text(self) -> String {
        self
    }
}

impl ToolOutput for &str {
    fn into_text(self) -> String {
        self.to_string()
    }
}

impl ToolOutput for serde_json::Value {
    fn into_text(self) -> String {
        self.to_string()
    }
}
