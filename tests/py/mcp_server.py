"""An MCP server written with the official Python SDK (MCPServer), for tests/it/bridge.rs:
tools that say who called (the `mesh/caller` _meta the bridge passes), report progress,
run long (and write whether they were cancelled), die, write garbage on stdout, answer with
a large result, and add a tool of their own (tools/list_changed).

Usage: mcp_server.py MARKER_DIR            (stdio)
       mcp_server.py MARKER_DIR http PORT  (streamable HTTP on 127.0.0.1:PORT/mcp)
"""

import json
import os
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import InputRequiredResult

MARKERS = sys.argv[1]
server = MCPServer("faulty")


def meta_of(ctx: Context) -> dict:
    meta = ctx.request_context.meta
    if meta is None:
        return {}
    if isinstance(meta, dict):
        return meta
    return meta.model_dump(by_alias=True, exclude_none=True)


@server.tool()
async def whoami(ctx: Context) -> str:
    """Says who the mesh says is calling."""
    return json.dumps(meta_of(ctx).get("mesh/caller"))


@server.tool()
async def pid() -> int:
    """This server's process id."""
    return os.getpid()


@server.tool()
async def token() -> str:
    """The backend token this process was started with (by the bridge's credential helper)."""
    return os.environ.get("BACKEND_TOKEN", "")


@server.tool(name="files.read")
async def files_read(path: str) -> str:
    """A tool whose name is no subject token."""
    return f"read {path}"


@server.tool()
async def count(n: int, ctx: Context) -> str:
    """Reports progress n times."""
    for i in range(n):
        await ctx.report_progress(i + 1, n, f"step {i + 1}")
        await anyio.sleep(0.05)
    return f"counted {n}"


@server.tool()
async def slow(seconds: float, marker: str) -> str:
    """Sleeps, then writes MARKER_DIR/marker: finished, or cancelled if it was."""
    path = os.path.join(MARKERS, marker)
    try:
        await anyio.sleep(seconds)
    except BaseException:
        with open(path, "w") as f:
            f.write("cancelled")
        raise
    with open(path, "w") as f:
        f.write("finished")
    return "slept"


@server.tool()
async def crash() -> str:
    """Dies mid-call."""
    os._exit(3)


@server.tool()
async def garbage() -> str:
    """Writes what is no JSON-RPC on stdout, then answers."""
    os.write(1, b"this is not JSON-RPC\n{\"half\": \n")
    return "wrote garbage"


@server.tool()
async def big(megabytes: int) -> str:
    """A text result of that many megabytes."""
    return "x" * (megabytes * 1024 * 1024)


@server.tool()
async def grow(ctx: Context) -> str:
    """Adds a tool, `grown`, and says the tools changed."""

    def grown() -> str:
        """A tool added while the server runs."""
        return "grown"

    server.add_tool(grown, name="grown")
    # 2026-07-28 tells subscribers (subscriptions/listen); earlier versions, the session.
    if ctx.protocol_version == "2026-07-28":
        await ctx.notify_tools_changed()
    else:
        await ctx.session.send_tool_list_changed()
    return "grew"


@server.tool()
async def ask(ctx: Context) -> str | InputRequiredResult:
    """Asks which colour, the 2026-07-28 way (input_required), then says what was chosen."""
    answers = ctx.input_responses or {}
    answer = answers.get("color")
    if answer is not None:
        if not isinstance(answer, dict):
            answer = answer.model_dump(by_alias=True, exclude_none=True)
        return f"you chose {answer['content']['color']} with state {ctx.request_state}"
    schema = {
        "type": "object",
        "properties": {"color": {"type": "string", "enum": ["red", "blue"]}},
        "required": ["color"],
    }
    return InputRequiredResult(
        input_requests={"color": {"method": "elicitation/create", "params": {"message": "Which colour?", "requestedSchema": schema}}},
        request_state="the-server-s-own-state",
    )


@server.tool()
async def authorization(ctx: Context) -> str:
    """The Authorization header the request came with (over HTTP), or nothing."""
    request = ctx.request_context.request
    headers = getattr(request, "headers", None)
    return (headers.get("authorization") if headers is not None else None) or ""


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[2] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[3]))
    else:
        server.run("stdio")
