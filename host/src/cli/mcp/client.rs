//! `chitin mcp list|tools|doctor`.

use std::process::ExitCode;
use std::time::Duration;

use chitin::app::AppOptions;
use chitin::config::DataDir;
use chitin::mcp::client::ServerState;
use chitin::text::for_terminal;

use super::McpCommand;

pub(super) async fn run(cmd: McpCommand, data: DataDir, options: AppOptions) -> anyhow::Result<ExitCode> {
    let app = super::super::open_app(data, options)?;
    let (servers, errors) = chitin::mcp::config::parse_all(&app.config.mcp_servers);
    match cmd {
        McpCommand::List => {
            if servers.is_empty() && errors.is_empty() {
                outln!("no MCP servers configured (add [mcp_servers.NAME] to config.toml)")?;
            }
            for line in super::server_lines(&servers, &errors, "") {
                outln!("{line}")?;
            }
            Ok(if errors.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        McpCommand::Tools { name } | McpCommand::Doctor { name } if name.as_ref().is_some_and(|n| !servers.iter().any(|(s, _)| s == n)) => {
            anyhow::bail!("no MCP server `{}` in the config", for_terminal(name.as_deref().unwrap_or_default()))
        }
        McpCommand::Tools { name } | McpCommand::Doctor { name } => {
            let chosen: Vec<_> = servers.into_iter().filter(|(n, c)| c.enabled && name.as_ref().is_none_or(|wanted| wanted == n)).collect();
            let settings = app.mcp_client_settings();
            let limit = chosen.iter().map(|(_, c)| c.startup_timeout()).max().unwrap_or(Duration::from_secs(1)) + Duration::from_secs(5);
            let clients = chitin::mcp::client::McpClients::start(chosen, settings);
            clients.first_attempts(limit).await;
            let mut failed = !errors.is_empty();
            for error in &errors {
                outln!("{}", for_terminal(&error.to_string()))?;
            }
            for server in clients.servers() {
                match server.state() {
                    ServerState::Connected { tools, protocol } => {
                        outln!("{}: connected (MCP {}), {tools} tools", server.name(), for_terminal(&protocol))?;
                        for (shown, own, spec) in server.tool_list() {
                            let flags = if spec.read_only { " (read-only)" } else { "" };
                            outln!("  {:<32} {}{flags}", for_terminal(&shown), for_terminal(&own))?;
                        }
                    }
                    ServerState::Down { reason } => {
                        failed = true;
                        outln!("{}: FAILED: {}", server.name(), for_terminal(&reason))?;
                    }
                    ServerState::Starting => {
                        failed = true;
                        outln!("{}: FAILED: no answer within {} s", server.name(), limit.as_secs())?;
                    }
                }
            }
            Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
        }
        McpCommand::Login { .. } | McpCommand::Serve(_) | McpCommand::Add(_) | McpCommand::Remove { .. } => unreachable!("routed elsewhere"),
    }
}
