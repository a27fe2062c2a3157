//! `chitin mcp list|add|remove|tools|doctor|login`.

use std::process::ExitCode;

use chitin::app::AppOptions;
use chitin::config::DataDir;

use super::McpCommand;

/// `chitin mcp add`.
#[derive(Debug, clap::Args)]
pub(crate) struct AddArgs {
    /// The server's name (`[mcp_servers.NAME]`).
    pub name: String,
}

pub(super) async fn run(cmd: McpCommand, _data: DataDir, _options: AppOptions) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`chitin mcp {cmd:?}` is not built yet")
}
