"""Starts a call through `mesh mcp` with the official MCP Python SDK, gives it up after a
second (the SDK sends notifications/cancelled), and prints JSON when it has.

usage: cancel_call.py MODE MESH_BINARY TOOL ARGUMENTS_JSON [MESH_ARG...]
  MODE  legacy (2025-11-25) or 2026-07-28
"""

import asyncio
import json
import os
import sys

from mcp.client import Client
from mcp.client.stdio import StdioServerParameters


async def main(mode, binary, tool, arguments, args):
    server = StdioServerParameters(command=binary, args=args + ["mcp"], env=dict(os.environ))
    async with Client(server, mode=mode) as client:
        await client.list_tools()
        call = asyncio.create_task(client.call_tool(tool, json.loads(arguments)))
        await asyncio.sleep(1)
        call.cancel()
        try:
            await call
        except asyncio.CancelledError:
            pass
        # A moment for the notification to leave before the session closes.
        await asyncio.sleep(0.5)
        print(json.dumps({"cancelled": True}))


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]))
