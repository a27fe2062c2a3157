//! `chitin mcp login NAME`.

use std::process::ExitCode;

use chitin::app::AppOptions;
use chitin::config::DataDir;

pub(super) async fn run(_name: &str, _data: DataDir, _options: AppOptions) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`chitin mcp login` is not built yet")
}
