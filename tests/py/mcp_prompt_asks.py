"""Gets a prompt that asks before it answers (the conformance suite's
test_input_required_result_prompt) with the official MCP Python SDK, the person's answer
given by its elicitation callback, and prints what it was asked and the prompt's messages.

usage: [MESH_PROMPT=NAME | MESH_READ=URI] mcp_prompt_asks.py MODE TARGET [ARG...]
  (MESH_READ: a resource whose read asks the same, read in place of the prompt)
  MODE    legacy (2025-11-25: the relay asks the client by elicitation) or 2026-07-28 (the
          question comes back as input_required; the SDK asks and gets the prompt again)
  TARGET  an http(s) URL of `mesh serve`, or the path of the mesh binary (stdio; ARGs follow)
"""

import asyncio
import json
import os
import sys

import mcp.types as types
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from console import console


async def main(mode, target, args):
    server = console(target) if target.startswith("http") else StdioServerParameters(command=target, args=args)
    asked = []

    async def answer(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"context": "the mesh"})

    async with Client(server, mode=mode, elicitation_callback=answer) as client:
        if os.environ.get("MESH_READ"):
            read = await client.read_resource(os.environ["MESH_READ"], cache_mode="bypass")
            texts = [c.text for c in read.contents if getattr(c, "text", None) is not None]
        else:
            got = await client.get_prompt(os.environ.get("MESH_PROMPT", "test_input_required_result_prompt"))
            texts = [m.content.text for m in got.messages if getattr(m.content, "type", "") == "text"]
    print(json.dumps({"asked": asked, "texts": texts}))


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
