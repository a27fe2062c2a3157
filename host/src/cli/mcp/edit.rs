//! `chitin mcp add` and `chitin mcp remove`: one `[mcp_servers.NAME]`
//! entry of `config.toml`, the rest of the file kept as it is.

use std::path::PathBuf;
use std::process::ExitCode;

use chitin::app::AppOptions;
use chitin::config::DataDir;
use chitin::mcp::config::{McpServerConfig, RemoteTransport, SandboxMode};
use chitin::text::for_terminal;

/// `chitin mcp add NAME (--url URL | -- COMMAND [ARGS...]) [options]`
#[derive(Debug, clap::Args)]
pub(crate) struct AddArgs {
    /// The server's name: a-z, 0-9, `-`, `_` (its tools become `mcp_NAME_TOOL`).
    name: String,
    /// A remote server's endpoint (`https://…/mcp`).
    #[arg(long, conflicts_with = "command")]
    url: Option<String>,
    /// The older HTTP+SSE transport, for servers that predate streamable HTTP.
    #[arg(long, requires = "url")]
    sse: bool,
    /// A header sent to a remote server, `NAME: VALUE` (repeatable); the value
    /// may hold `{{secret:NAME}}`.
    #[arg(long = "header", value_name = "NAME: VALUE", requires = "url")]
    headers: Vec<String>,
    /// A secret for the headers, `NAME=VALUE` (repeatable); write the value as
    /// `${ENV_VAR}` to keep it out of the file.
    #[arg(long = "secret", value_name = "NAME=VALUE")]
    secrets: Vec<String>,
    /// An environment variable for a stdio server, `KEY=VALUE` (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// A path the sandboxed server may read (repeatable): its install
    /// directory, a virtualenv.
    #[arg(long = "read-only-path", value_name = "PATH")]
    read_only_paths: Vec<PathBuf>,
    /// Let the sandboxed server use the network.
    #[arg(long)]
    network: bool,
    /// Run the server WITHOUT the OS sandbox, with your rights.
    #[arg(long)]
    no_sandbox: bool,
    /// Offer only these of the server's tools (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "TOOL,...")]
    tools: Option<Vec<String>>,
    /// Seconds one call may take (default 60).
    #[arg(long, value_name = "SECS")]
    timeout: Option<u64>,
    /// Replace an entry of the same name.
    #[arg(long)]
    force: bool,
    /// A stdio server's program and its arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND [ARGS]...")]
    command: Vec<String>,
}

pub(super) fn add(args: AddArgs, data: &DataDir, options: &AppOptions) -> anyhow::Result<ExitCode> {
    let mut entry = match (&args.url, args.command.split_first()) {
        (Some(url), _) => McpServerConfig::remote(url),
        (None, Some((command, rest))) => McpServerConfig::stdio(command, rest.to_vec()),
        (None, None) => anyhow::bail!("give --url URL for a remote server, or `-- COMMAND [ARGS]...` for a local one"),
    };
    if args.sse {
        entry.transport = RemoteTransport::Sse;
    }
    for header in &args.headers {
        let (name, value) = header.split_once(':').ok_or_else(|| anyhow::anyhow!("--header {header:?}: write it as `NAME: VALUE`"))?;
        entry.headers.insert(name.trim().to_string(), value.trim().to_string());
    }
    for (flag, list, into) in [("--secret", &args.secrets, &mut entry.secrets), ("--env", &args.env, &mut entry.env)] {
        for pair in list {
            let (key, value) = pair.split_once('=').ok_or_else(|| anyhow::anyhow!("{flag} {pair:?}: write it as `NAME=VALUE`"))?;
            into.insert(key.to_string(), value.to_string());
        }
    }
    entry.read_only_paths = args.read_only_paths;
    entry.network = args.network;
    if args.no_sandbox {
        entry.sandbox = SandboxMode::None;
    }
    entry.tools = args.tools;
    if let Some(secs) = args.timeout {
        entry.timeout_secs = secs;
    }
    let path = config_path(data, options);
    chitin::mcp::edit::add(&path, &args.name, &entry, args.force)?;
    outln!("added [mcp_servers.{}] to {}: {}", args.name, path.display(), for_terminal(&entry.describe()))?;
    if entry.command.is_some() && entry.sandbox == SandboxMode::None {
        outln!("{}", super::super::status::red("it runs WITHOUT the OS sandbox, with your rights"))?;
    }
    if entry.oauth.is_none() && entry.url.is_some() && entry.headers.is_empty() {
        outln!("if it needs a login: chitin mcp login {}", args.name)?;
    }
    outln!("check it: chitin mcp doctor {}", args.name)?;
    Ok(ExitCode::SUCCESS)
}

pub(super) fn remove(name: &str, data: &DataDir, options: &AppOptions) -> anyhow::Result<ExitCode> {
    let path = config_path(data, options);
    chitin::mcp::edit::remove(&path, name)?;
    outln!("removed [mcp_servers.{}] from {}", for_terminal(name), path.display())?;
    Ok(ExitCode::SUCCESS)
}

fn config_path(data: &DataDir, options: &AppOptions) -> PathBuf {
    options.config_file.clone().unwrap_or_else(|| data.config_file())
}
