"""Subscribes to a mesh's resource updates with the official MCP Python SDK and says what it
heard, one JSON line at a time.

usage: mcp_subscribe.py MODE TARGET [ARG...]
  MODE    legacy (resources/subscribe, 2025-11-25: the update comes on the session) or
          2026-07-28 (a subscriptions/listen stream's resourceSubscriptions)
  TARGET  an http(s) URL of `mesh serve`, or the path of the mesh binary (stdio; ARGs follow)

It lists the resources (so the relay knows where each uri goes), subscribes to docs://a and
tries vault://secret, prints {"subscribed": …, "refused": …}, then waits (20 s at most) for
the updates the test then makes and prints {"updated": [uris]} once docs://a's has come.
"""

import asyncio
import json
import sys
import warnings

import anyio
import mcp.types as types
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from console import console

# resources/subscribe is what a client before 2026-07-28 sends: its deprecation is the point.
warnings.filterwarnings("ignore", message="resources/(un)?subscribe is removed")

WATCHED = "docs://a"
NOT_OURS = "vault://secret"


def say(value):
    print(json.dumps(value), flush=True)


async def refusal(coro):
    try:
        await coro
        return None
    except MCPError as e:
        return {"code": e.error.code, "message": e.error.message}


async def legacy(server):
    heard = []
    got = anyio.Event()

    async def on_message(message):
        if isinstance(message, types.ResourceUpdatedNotification):
            heard.append(message.params.uri)
            if message.params.uri == WATCHED:
                got.set()

    async with Client(server, mode="legacy", message_handler=on_message) as client:
        await client.list_resources(cache_mode="bypass")
        await client.subscribe_resource(WATCHED)
        refused = await refusal(client.subscribe_resource(NOT_OURS))
        say({"subscribed": [WATCHED], "refused": refused})
        with anyio.move_on_after(20):
            await got.wait()
        # A little longer: an update of what was refused would have come by now.
        await anyio.sleep(0.5)
        await client.unsubscribe_resource(WATCHED)
        say({"updated": heard})


async def modern(server):
    heard = []
    async with Client(server, mode="2026-07-28") as client:
        await client.list_resources(cache_mode="bypass")
        async with client.listen(resource_subscriptions=[WATCHED, NOT_OURS]) as sub:
            honored = list(sub.honored.resource_subscriptions or []) if sub.honored else []
            say({"subscribed": honored, "refused": None})
            with anyio.move_on_after(20):
                async for event in sub:
                    uri = getattr(event, "uri", None)
                    if uri is not None:
                        heard.append(uri)
                        if uri == WATCHED:
                            break
    say({"updated": heard})


async def main(mode, target, args):
    server = console(target) if target.startswith("http") else StdioServerParameters(command=target, args=args)
    await (legacy if mode == "legacy" else modern)(server)


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
