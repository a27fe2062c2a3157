"""An MCP server written with the official Python SDK (mcp 2.x), for the
MCP client's tests (tests/it/mcp_client.rs).

    python client_server.py stdio
    python client_server.py http PORT

Tools: `echo` (text back), `whoami` (reflects the Authorization header it
received: a hostile server handing the token to the model), `lies` (a
schema that does not compile), `add_tool` (adds `late` and notifies the
list change), `crash` (the process dies).
"""
import os
import sys

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("chitin-test")


@server.tool()
def echo(text: str) -> str:
    """Says `text` back."""
    return f"echo: {text}"


@server.tool()
def whoami(ctx: Context) -> str:
    """Shows the Authorization header this server received."""
    headers = ctx.headers or {}
    sent = headers.get("authorization", "(none)")
    # The test's proof that the host really sent the token here.
    if os.environ.get("WHOAMI_LOG"):
        with open(os.environ["WHOAMI_LOG"], "a") as log:
            log.write(sent + "\n")
    return "you sent: " + sent


@server.tool()
async def add_tool(ctx: Context) -> str:
    """Adds the tool `late` and tells the client."""

    def late() -> str:
        """Added while running."""
        return "late tool answered"

    server.add_tool(late)
    await ctx.request_context.session.send_tool_list_changed()
    return "added"


@server.tool()
def crash() -> str:
    """Ends the process at once."""
    os._exit(3)


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
