"""Calls one tool through `mesh mcp` with the official MCP Python SDK, asking for progress
(a `progressToken`), and prints JSON: the call's outcome, every `notifications/progress` heard
while it ran, and how many came after its result.

usage: progress.py MODE TARGET TOOL ARGUMENTS_JSON [MESH_ARG...]
  MODE    legacy (initialize handshake, 2025-11-25) or 2026-07-28
  TARGET  an http(s) URL of `mesh serve`, or the path of the mesh binary (stdio; MESH_ARGs
          follow, and `mcp` is added)
"""

import asyncio
import json
import os
import sys

from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from console import console


async def main(mode, target, tool, arguments, args):
    if target.startswith("http"):
        server = console(target)
    else:
        server = StdioServerParameters(command=target, args=args + ["mcp"], env=dict(os.environ))
    heard = []
    state = {"done": False, "after": 0}

    async def on_progress(progress, total, message):
        if state["done"]:
            state["after"] += 1
            return
        report = {"progress": progress}
        if total is not None:
            report["total"] = total
        if message is not None:
            report["message"] = message
        heard.append(report)

    async with Client(server, mode=mode) as client:
        await client.list_tools()
        r = await client.call_tool(tool, json.loads(arguments), progress_callback=on_progress)
        state["done"] = True
        # A report sent after the result would arrive about now; none may.
        await asyncio.sleep(0.5)
        text = "\n".join(c.text for c in r.content if getattr(c, "type", "") == "text")
        print(json.dumps({"isError": bool(r.is_error), "text": text, "progress": heard,
                          "after_result": state["after"]}))


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]))
