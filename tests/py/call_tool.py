"""Calls one tool through `mesh mcp` with the official MCP Python SDK (2026-07-28) and prints
JSON: the tools listed and the call's outcome.

usage: call_tool.py MESH_BINARY TOOL ARGUMENTS_JSON [MESH_ARG...]
"""

import asyncio
import json
import os
import sys

from mcp.client import Client
from mcp.client.stdio import StdioServerParameters


async def main(binary, tool, arguments, args):
    # The whole environment, so mesh finds the nats contexts the test wrote.
    server = StdioServerParameters(command=binary, args=args + ["mcp"], env=dict(os.environ))
    async with Client(server, mode="2026-07-28") as client:
        listed = await client.list_tools()
        r = await client.call_tool(tool, json.loads(arguments))
        text = "\n".join(c.text for c in r.content if getattr(c, "type", "") == "text")
        print(json.dumps({"tools": sorted(t.name for t in listed.tools), "isError": bool(r.is_error),
                          "text": text, "structured": r.structured_content}))


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]))
