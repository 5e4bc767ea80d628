"""The official MCP Python SDK's own stdio server answering `echo` in its process: the peer
`mesh mcp` is measured against in `cargo bench --bench relay -- mcp`.

usage: target/py/bin/python benches/py/stdio_echo.py
"""

from mcp.server.mcpserver import MCPServer

server = MCPServer("echo")


@server.tool(name="echo", description="Returns the text it is given")
def echo(text: str) -> str:
    return text


server.run("stdio")
