"""An agent on an older protocol (2025-11-25, elicitation declared) applying a decide run
through `mesh mcp`: every question the relay forwards as elicitation/create is answered with
its first option. Prints JSON: how many questions came, and the final result.

usage: apply_elicitation.py MESH_BINARY RUN_ID PATH [MESH_ARG...]
"""

import asyncio
import json
import sys

import mcp.types as types
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

asked = []


async def first_option(context, params):
    schema = params.requested_schema
    field = next(iter(schema["properties"].values()))
    asked.append(params.message)
    return types.ElicitResult(action="accept", content={next(iter(schema["properties"])): field["oneOf"][0]["const"]})


async def main(binary, run_id, path, args):
    server = StdioServerParameters(command=binary, args=args + ["mcp"])
    async with Client(server, mode="legacy", elicitation_callback=first_option) as client:
        r = await client.call_tool(
            "decide_apply", {"run_id": run_id, "path": path, "accept": "proposed", "dry_run": False}
        )
        text = "\n".join(c.text for c in r.content if getattr(c, "type", "") == "text")
        print(json.dumps({"questions": len(asked), "isError": bool(r.is_error), "text": text,
                          "structured": r.structured_content}))


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]))
