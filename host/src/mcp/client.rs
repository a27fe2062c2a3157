//! The MCP client: `[mcp_servers.NAME]` servers as tool sources.
