"""Drives the relay's search (mesh_find, mesh_describe, mesh_call) with the official MCP Python
SDK and prints what it saw as JSON.

usage: mcp_search.py MODE TARGET [ARG...]
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
    seen = {"isError": bool(result.is_error), "text": text}
    if result.structured_content is not None:
        seen["structured"] = result.structured_content
    meta = getattr(result, "meta", None) or {}
    if "mesh/outcome" in meta:
        seen["outcome"] = meta["mesh/outcome"]
    return seen


async def main(mode, target, args):
    server = console(target) if target.startswith("http") else StdioServerParameters(command=target, args=args)
    seen = {}
    async with Client(server, mode=mode, elicitation_callback=answer_pick_b) as client:
        seen["protocol"] = client.protocol_version
        listed = await client.list_tools()
        seen["tools"] = sorted(t.name for t in listed.tools)
        calls = {
            "find": ("mesh_find", {"words": "text echo"}),
            "find_all": ("mesh_find", {}),
            "describe": ("mesh_describe", {"tool": "echo"}),
            "describe_not_yours": ("mesh_describe", {"tool": "echo_whoami"}),
            "result": ("mesh_call", {"tool": "echo", "arguments": {"text": "hello"}}),
            "tool_error": ("mesh_call", {"tool": "echo_fail", "arguments": {"text": "said no"}}),
            "nobody_serves": ("mesh_call", {"tool": "gone_ping"}),
            "denied": ("mesh_call", {"tool": "echo_whoami", "arguments": {}}),
            "slow": ("mesh_call", {"tool": "echo_sleep", "arguments": {"ms": 5000}}),
            "asks": ("mesh_call", {"tool": "echo_choose", "arguments": {"options": ["a", "b"], "question": "which?"}}),
            "unknown": ("mesh_call", {"tool": "nosuch_tool", "arguments": {}}),
            "outside": ("mesh_call", {"tool": "catalog_modules", "arguments": {}}),
            "no_tool": ("mesh_call", {"arguments": {}}),
        }
        for key, (name, arguments) in calls.items():
            try:
                seen[key] = outcome(await client.call_tool(name, arguments))
            except MCPError as e:
                seen[key] = {"error_code": e.error.code, "message": e.error.message}
    print(json.dumps(seen))


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
