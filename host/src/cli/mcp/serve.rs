//! `chitin mcp serve`: the plugins' tools for an MCP client, on stdio.

use std::path::PathBuf;
use std::process::ExitCode;

use chitin::app::AppOptions;
use chitin::config::DataDir;
use chitin::mcp::server::{DEFAULT_MAX_CALLS, ToolServer, serve_stdio, served_tools};

/// `chitin mcp serve [--tools a,b] [--workspace DIR] [--plugin FILE.wasm]`
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// Serve only these tools (comma-separated; default: every tool of the
    /// installed and built-in plugins that runs without the agent).
    #[arg(long, value_delimiter = ',', value_name = "TOOL,...")]
    tools: Vec<String>,
    /// Workspace directory the plugins see (default: the configured one).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Also load this plugin component (repeatable).
    #[arg(long = "plugin", value_name = "FILE.wasm")]
    plugins: Vec<PathBuf>,
    /// How many calls run at once; the others wait.
    #[arg(long, default_value_t = DEFAULT_MAX_CALLS, value_name = "N")]
    max_calls: usize,
}

pub(super) async fn run(args: ServeArgs, data: DataDir, mut options: AppOptions) -> anyhow::Result<ExitCode> {
    options.workspace = args.workspace;
    options.extra_plugins = args.plugins;
    // Warnings go to stderr: stdout carries the protocol and nothing else.
    let app = super::super::open_app(data, options)?;
    let tools = served_tools(&app.tools, &args.tools)?;
    let server = ToolServer::new(tools, args.max_calls, "stdio");
    tracing::info!(tools = %server.tool_names().collect::<Vec<_>>().join(","), "MCP: serving on stdio");
    serve_stdio(server).await?;
    Ok(ExitCode::SUCCESS)
}
