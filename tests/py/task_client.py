"""Drives a tool as a task (MCP's tasks extension, SEP-2663) through mesh's MCP surface with
the official MCP Python SDK at 2026-07-28, and prints what it saw as JSON.

The SDK has no tasks client of its own: this is one, written on its extension interface
(`ClientExtension`, a `ResultClaim` for `resultType: "task"` that polls `tasks/get`).

usage: task_client.py MODE TARGET [ARG...] [-- TOOL ARGUMENTS_JSON | -- TASK_ID]
  MODE    wait    call TOOL and wait for its task's result
          start   call TOOL, print the task's id, and leave it running
          get     read task TASK_ID (from another process than the one that started it)
          cancel  cancel task TASK_ID
          plain   call TOOL without declaring the extension
  TARGET  an http(s) URL of `mesh serve`, or the path of the mesh binary (stdio; ARGs follow)
"""

import asyncio
import json
import sys
from typing import Any, ClassVar, Literal

from mcp.client import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, Request, RequestParams, Result
from pydantic import ConfigDict

from console import console

TASKS = "io.modelcontextprotocol/tasks"
TERMINAL = ("completed", "failed", "cancelled")


class TaskCreated(Result):
    """`CreateTaskResult`: the call became a task."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"]  # type: ignore[assignment]
    task_id: str
    status: str
    poll_interval_ms: int | None = None


class TaskParams(RequestParams):
    task_id: str


class GetTask(Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams
    name_param: ClassVar[str | None] = "taskId"


class CancelTask(Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskParams
    name_param: ClassVar[str | None] = "taskId"


class Detailed(Result):
    """`tasks/get`'s answer: the task and what goes with its status."""

    model_config = ConfigDict(extra="allow")
    task_id: str
    status: str
    status_message: str | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class Acked(Result):
    model_config = ConfigDict(extra="allow")


async def get(session, task_id: str) -> Detailed:
    return await session.send_request(GetTask(params=TaskParams(task_id=task_id)), Detailed)


class Tasks(ClientExtension):
    """Declares the tasks extension and waits on a task a call became."""

    identifier = TASKS

    def __init__(self) -> None:
        self.statuses: list[str] = []

    def claims(self):
        return [ResultClaim(result_type="task", model=TaskCreated, resolve=self.resolve)]

    async def resolve(self, created: TaskCreated, ctx: ClaimContext) -> CallToolResult:
        poll = (created.poll_interval_ms or 250) / 1000
        while True:
            task = await get(ctx.session, created.task_id)
            if not self.statuses or self.statuses[-1] != task.status:
                self.statuses.append(task.status)
            if task.status == "completed":
                return CallToolResult.model_validate(task.result)
            if task.status in TERMINAL:
                raise RuntimeError(f"task {task.status}: {task.error}")
            await asyncio.sleep(poll)


def text_of(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def main(mode: str, target: str, rest: list[str]) -> None:
    split = rest.index("--") if "--" in rest else len(rest)
    args, after = rest[:split], rest[split + 1 :]
    server = console(target) if target.startswith("http") else StdioServerParameters(command=target, args=args)
    tasks = Tasks()
    extensions = [] if mode == "plain" else [tasks]
    seen: dict[str, Any] = {}
    async with Client(server, mode="2026-07-28", extensions=extensions) as client:
        if mode in ("wait", "plain"):
            tool, arguments = after[0], json.loads(after[1])
            try:
                result = await client.call_tool(tool, arguments)
                seen = {"isError": bool(result.is_error), "text": text_of(result), "statuses": tasks.statuses}
            except MCPError as e:
                seen = {"error_code": e.error.code, "message": e.error.message, "data": e.error.data}
        elif mode == "start":
            tool, arguments = after[0], json.loads(after[1])
            created = await client.session.call_tool(tool, arguments, allow_claimed=True)
            seen = {"resultType": getattr(created, "result_type", None), "taskId": getattr(created, "task_id", None)}
        elif mode == "get":
            try:
                task = await get(client.session, after[0])
                seen = {"status": task.status, "text": text_of(CallToolResult.model_validate(task.result)) if task.result else None}
            except MCPError as e:
                seen = {"error_code": e.error.code, "message": e.error.message}
        elif mode == "cancel":
            try:
                await client.session.send_request(CancelTask(params=TaskParams(task_id=after[0])), Acked)
                seen = {"cancelled": True}
            except MCPError as e:
                seen = {"error_code": e.error.code, "message": e.error.message}
    print(json.dumps(seen))


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
