//! `[mcp_servers.NAME]`: one MCP server the agent uses (parsed here from the
//! raw table `crate::config::Config::mcp_servers` keeps, as channels do).
