"""Follows mesh's tool list with the official MCP Python SDK: prints the list, then after each
`notifications/tools/list_changed` the list again, one JSON line each, until it has seen
CHANGES changes.

usage: list_changed.py MODE CHANGES TARGET [ARG...]
  MODE    legacy (initialize handshake, 2025-11-25: the notification comes on the session) or
          2026-07-28 (the notification comes on a subscriptions/listen stream)
  TARGET  an http(s) URL of `mesh serve`, or the path of the mesh binary (stdio; ARGs follow)
"""

import asyncio
import json
import sys

import anyio
import mcp.types as types
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from console import console


def show(listed):
    print(json.dumps({"tools": sorted(t.name for t in listed.tools)}), flush=True)


async def legacy(server, changes):
    heard = anyio.Event()
    box = {"heard": heard}

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification):
            box["heard"].set()

    async with Client(server, mode="legacy", message_handler=on_message) as client:
        show(await client.list_tools())
        for _ in range(changes):
            await box["heard"].wait()
            box["heard"] = anyio.Event()
            show(await client.list_tools())


async def modern(server, changes):
    async with Client(server, mode="2026-07-28") as client:
        async with client.listen(tools_list_changed=True) as sub:
            show(await client.list_tools())
            seen = 0
            async for _event in sub:
                show(await client.list_tools())
                seen += 1
                if seen == changes:
                    return


async def main(mode, changes, target, args):
    server = console(target) if target.startswith("http") else StdioServerParameters(command=target, args=args)
    await (legacy if mode == "legacy" else modern)(server, changes)


asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]))
