"""Calls one tool through the console with the official MCP Python SDK, carrying a W3C trace
context in the request's `_meta` (SEP-414), and prints the call's outcome as JSON.

usage: traced_call.py CONSOLE_URL TOOL ARGUMENTS_JSON TRACEPARENT
"""

import asyncio
import json
import sys

from mcp import ClientSession

from console import console


async def main(url, tool, arguments, traceparent):
    async with console(url) as (read, write, *_):
        async with ClientSession(read, write) as session:
            await session.initialize()
            r = await session.call_tool(tool, json.loads(arguments), meta={"traceparent": traceparent})
            text = "\n".join(c.text for c in r.content if getattr(c, "type", "") == "text")
            print(json.dumps({"isError": bool(r.is_error), "text": text}))


asyncio.run(main(*sys.argv[1:5]))
