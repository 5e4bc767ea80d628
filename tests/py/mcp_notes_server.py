"""An MCP server written with the official Python SDK (MCPServer) whose one resource,
notes://today, changes when its tool `touch` is called, and says so: on a
`subscriptions/listen` stream that asked for the uri (2026-07-28), as the SDK's context
publishes it. For tests/it/subscriptions.rs (the bridge subscribing for the mesh).

Usage: mcp_notes_server.py   (stdio)
"""

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("notes")
notes = {"today": "the first note"}


@server.resource("notes://today")
def today() -> str:
    """Today's note."""
    return notes["today"]


@server.tool()
async def touch(ctx: Context) -> str:
    """Changes today's note, and says so to whoever listens."""
    notes["today"] = "a changed note"
    await ctx.notify_resource_updated("notes://today")
    return "touched"


server.run()
