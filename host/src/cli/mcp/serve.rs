//! `chitin mcp serve`.

use std::process::ExitCode;

use chitin::app::AppOptions;
use chitin::config::DataDir;

/// `chitin mcp serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {}

pub(super) async fn run(_args: ServeArgs, _data: DataDir, _options: AppOptions) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`chitin mcp serve` is not built yet")
}
