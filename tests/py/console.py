"""The console (`mesh serve`) as an MCP transport for the official Python SDK, with the bearer
token the test hands over in $MESH_CONSOLE_TOKEN."""

import os

import httpx2
from mcp.client.streamable_http import streamable_http_client


def console(url):
    token = os.environ.get("MESH_CONSOLE_TOKEN", "")
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        timeout=httpx2.Timeout(30.0, read=300.0),
    )
    return streamable_http_client(url, http_client=http)
