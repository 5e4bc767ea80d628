"""An MCP server written with the official Python SDK (MCPServer) whose one resource,
notes://today, changes when its tool `touch` is called, and says so: on a
`subscriptions/listen` stream that asked for the uri (2026-07-28), as the SDK's context
publishes it; and a prompt, `recall`, that asks for its context first (input_required). For
tests/it/subscriptions.rs (the bridge subscribing for the mesh, and relaying the question).

Usage: mcp_notes_server.py   (stdio)
"""

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import InputRequiredResult

server = MCPServer("notes")
notes = {"today": "the first note"}


@server.resource("notes://today")
def today() -> str:
    """Today's note."""
    return notes["today"]


@server.tool()
async def touch(ctx: Context) -> str:
    """Changes today's note, and says so to whoever listens."""
    notes["today"] = "a changed note"
    await ctx.notify_resource_updated("notes://today")
    return "touched"


@server.prompt()
async def recall(ctx: Context) -> str | InputRequiredResult:
    """A prompt that asks for its context first, keeping a state of the server's own."""
    answer = (ctx.input_responses or {}).get("user_context")
    if answer is not None:
        if not isinstance(answer, dict):
            answer = answer.model_dump(by_alias=True, exclude_none=True)
        return f"A prompt for the context: {answer['content']['context']} (state {ctx.request_state})"
    schema = {"type": "object", "properties": {"context": {"type": "string"}}, "required": ["context"]}
    return InputRequiredResult(
        input_requests={"user_context": {"method": "elicitation/create", "params": {"message": "What context should the prompt use?", "requestedSchema": schema}}},
        request_state="the-server-s-own-state",
    )


@server.resource("notes://about/{topic}")
async def about(topic: str, ctx: Context) -> str | InputRequiredResult:
    """A note about a topic, which asks for its context first."""
    answer = (ctx.input_responses or {}).get("user_context")
    if answer is not None:
        if not isinstance(answer, dict):
            answer = answer.model_dump(by_alias=True, exclude_none=True)
        return f"A prompt for the context: {answer['content']['context']} (state {ctx.request_state})"
    schema = {"type": "object", "properties": {"context": {"type": "string"}}, "required": ["context"]}
    return InputRequiredResult(
        input_requests={"user_context": {"method": "elicitation/create", "params": {"message": "What context should the prompt use?", "requestedSchema": schema}}},
        request_state="the-server-s-own-state",
    )


server.run()
