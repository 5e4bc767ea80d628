"""Drives mesh's MCP surface with the official MCP Python SDK and prints what it saw as JSON.

usage: mcp_client.py MODE TARGET [ARG...]
  MODE    legacy (initialize handshake, 2025-11-25) or 2026-07-28
  TARGET  an http(s) URL of `mesh serve`, or the path of the mesh binary (stdio; ARGs follow)
"""

import asyncio
import json
import sys

import mcp.types as types
from mcp.shared.exceptions import MCPError
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from console import console


async def answer_pick_b(context, params):
    """The person picks the second option."""
    return types.ElicitResult(action="accept", content={"pick": "b"})


def outcome(result):
    text = "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")
    return {"isError": bool(result.is_error), "text": text}


async def main(mode, target, args):
    server = console(target) if target.startswith("http") else StdioServerParameters(command=target, args=args)
    seen = {}
    async with Client(server, mode=mode, elicitation_callback=answer_pick_b) as client:
        seen["protocol"] = client.protocol_version
        listed = await client.list_tools()
        seen["tools"] = sorted(t.name for t in listed.tools)
        echo = next(t for t in listed.tools if t.name == "echo")
        seen["echo_schema_required"] = echo.input_schema.get("required")
        calls = {
            "result": ("echo", {"text": "hello"}),
            "tool_error": ("echo_fail", {"text": "said no"}),
            "nobody_serves": ("gone_ping", {}),
            "denied": ("echo_whoami", {}),
            "slow": ("echo_sleep", {"ms": 5000}),
            "asks": ("echo_choose", {"options": ["a", "b"], "question": "which?"}),
            "unknown": ("nosuch_tool", {}),
        }
        for key, (name, arguments) in calls.items():
            try:
                seen[key] = outcome(await client.call_tool(name, arguments))
            except MCPError as e:
                seen[key] = {"error_code": e.error.code, "message": e.error.message}
    print(json.dumps(seen))


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
