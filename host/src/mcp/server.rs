//! The MCP server: chitin's plugin tools for any MCP client.
