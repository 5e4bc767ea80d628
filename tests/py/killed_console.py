"""Connects to a `mesh serve` console with the official MCP Python SDK, starts a slow call, and
reports how it ended once the console is killed: an exception (a transport error) or a result.

usage: killed_console.py MODE URL     (MODE: legacy or 2026-07-28)
Prints {"ready": true} once connected, then one JSON line about the call.
"""

import asyncio
import json
import sys
import time

from mcp.client import Client

from console import console


async def main(mode, url):
    ended = None
    started = None
    try:
        async with Client(console(url), mode=mode) as client:
            await client.list_tools()
            print(json.dumps({"ready": True}), flush=True)
            started = time.monotonic()
            try:
                r = await client.call_tool("echo_sleep", {"ms": 30000})
                ended = {"outcome": "result", "isError": bool(r.is_error)}
            except BaseException as e:  # the transport error, whatever its class
                ended = {"outcome": "error", "type": type(e).__name__, "message": str(e)[:300]}
    except BaseException as e:
        if ended is None:
            ended = {"outcome": "error", "type": type(e).__name__, "message": str(e)[:300]}
    if started is not None:
        ended["seconds"] = round(time.monotonic() - started, 2)
    print(json.dumps(ended), flush=True)


asyncio.run(main(sys.argv[1], sys.argv[2]))
