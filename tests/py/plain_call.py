"""Calls mesh tools with nats-py and nothing else, as any NATS user could."""

import asyncio
import json
import sys

import nats


async def main(url: str) -> None:
    nc = await nats.connect(url)
    msg = await nc.request("mesh.echo.echo", json.dumps({"text": "from python"}).encode(), timeout=10)
    result = json.loads(msg.data)
    print("echo=" + result["content"][0]["text"])
    msg = await nc.request("mesh.echo.fail", b"{}", timeout=10)
    result = json.loads(msg.data)
    print(f"fail={msg.headers['Nats-Service-Error-Code']} isError={result['isError']}")
    await nc.close()


asyncio.run(main(sys.argv[1]))
