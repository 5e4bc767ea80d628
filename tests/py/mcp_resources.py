"""Reads a mesh's resources, templates, prompts and completions with the official MCP Python
SDK and prints what it saw as JSON.

usage: mcp_resources.py MODE TARGET [ARG...]
  MODE    legacy (initialize handshake, 2025-11-25) or 2026-07-28
  TARGET  an http(s) URL of `mesh serve`, or the path of the mesh binary (stdio; ARGs follow)
"""

import asyncio
import json
import sys

import mcp.types as types
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from console import console


def dumped(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def failure(coro):
    try:
        await coro
        return None
    except MCPError as e:
        return {"code": e.error.code, "message": e.error.message, "data": e.error.data}


async def main(mode, target, args):
    server = console(target) if target.startswith("http") else StdioServerParameters(command=target, args=args)
    seen = {}
    async with Client(server, mode=mode) as client:
        caps = client.server_capabilities
        seen["capabilities"] = {
            "resources": caps.resources is not None,
            "prompts": caps.prompts is not None,
            "completions": caps.completions is not None,
        }
        resources, cursor, pages = [], None, 0
        while True:
            page = await client.list_resources(cursor=cursor, cache_mode="bypass")
            pages += 1
            resources += [dumped(r) for r in page.resources]
            cursor = page.next_cursor
            if not cursor:
                break
        seen["resources"] = resources
        seen["resource_pages"] = pages
        seen["templates"] = [dumped(t) for t in (await client.list_resource_templates(cache_mode="bypass")).resource_templates]
        static = next(r["uri"] for r in resources if r["uri"].startswith("demo://resource/static/document/"))
        seen["static_uri"] = static
        seen["static"] = dumped(await client.read_resource(static, cache_mode="bypass"))
        seen["template_read"] = dumped(await client.read_resource("demo://resource/dynamic/text/1", cache_mode="bypass"))
        seen["echo_readme"] = dumped(await client.read_resource("echo://readme", cache_mode="bypass"))
        seen["missing"] = await failure(client.read_resource("demo://no/such/thing", cache_mode="bypass"))
        seen["prompts"] = [dumped(p) for p in (await client.list_prompts()).prompts]
        seen["simple"] = dumped(await client.get_prompt("everything_simple_prompt"))
        seen["args"] = dumped(await client.get_prompt("everything_args_prompt", {"city": "Paris"}))
        seen["echo_say"] = dumped(await client.get_prompt("echo_say", {"text": "hi"}))
        seen["no_prompt"] = await failure(client.get_prompt("everything_no_such_prompt"))
        seen["completion"] = dumped(
            await client.complete(
                types.PromptReference(type="ref/prompt", name="everything_completable_prompt"),
                {"name": "department", "value": "Eng"},
            )
        )
        seen["template_completion"] = await failure(
            client.complete(
                types.ResourceTemplateReference(type="ref/resource", uri="demo://resource/dynamic/text/{resourceId}"),
                {"name": "resourceId", "value": "1"},
            )
        )
    print(json.dumps(seen))


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
