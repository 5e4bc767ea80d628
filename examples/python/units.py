#!/usr/bin/env python3
"""units: a mesh module written in Python with nats-py, nobody's code but its own.

It serves one tool, `units_convert`, the way subjects/README.md says a module must:

- each tool on `mesh.<module>.<tool>` in queue group `<module>`, the arguments a JSON
  object, the reply an MCP CallToolResult; a tool error also sets the NATS services error
  headers (nats-py's micro services do that, and answer $SRV.PING|INFO|STATS);
- the `tools` verb on `mesh.<module>.tools`;
- a registration with the catalogue (`mesh.catalog.register`) at start and every 30 s, and
  `mesh.catalog.unregister` when it stops.

Run it with the credentials `mesh up` wrote for it (a `nats` context named mesh-units):

    python3 examples/python/units.py --context mesh-units

It needs nats-py (`pip install nats-py`).
"""

import argparse
import asyncio
import json
import os
import signal
import sys
import time

import nats
from nats.errors import NoRespondersError, TimeoutError
from nats.micro import add_service

MODULE = "units"
VERSION = "1.0.0"
DESCRIPTION = "Converts a measurement between units of length, mass, time or temperature"
REFRESH_SECONDS = 30

# Factors to the base unit of each dimension (temperature is handled apart).
FACTORS = {
    "length": {"km": 1000.0, "m": 1.0, "cm": 0.01, "mm": 0.001, "um": 1e-6, "in": 0.0254, "ft": 0.3048},
    "mass": {"kg": 1.0, "g": 1e-3, "mg": 1e-6, "lb": 0.45359237},
    "time": {"d": 86400.0, "h": 3600.0, "min": 60.0, "s": 1.0, "ms": 1e-3},
}
TEMPERATURE = {"C", "F", "K"}
UNITS = sorted(TEMPERATURE | {u for d in FACTORS.values() for u in d})

CONVERT = {
    "name": "convert",
    "title": "Convert units",
    "description": "Converts a value from one unit to another of the same dimension "
    "(length, mass, time or temperature)",
    "inputSchema": {
        "type": "object",
        "properties": {
            "value": {"type": "number", "description": "the measurement"},
            "from": {"type": "string", "enum": UNITS, "description": "its unit"},
            "to": {"type": "string", "enum": UNITS, "description": "the unit wanted"},
        },
        "required": ["value", "from", "to"],
        "additionalProperties": False,
    },
    "outputSchema": {
        "type": "object",
        "properties": {"value": {"type": "number"}, "unit": {"type": "string"}},
        "required": ["value", "unit"],
    },
    "annotations": {"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False},
}


def convert(value, src, dst):
    """The converted value, or a ValueError saying why not."""
    if src in TEMPERATURE or dst in TEMPERATURE:
        if not (src in TEMPERATURE and dst in TEMPERATURE):
            raise ValueError(f"cannot convert {src} to {dst}: one is a temperature and the other is not")
        kelvin = {"C": value + 273.15, "F": (value - 32) * 5 / 9 + 273.15, "K": value}[src]
        return {"C": kelvin - 273.15, "F": (kelvin - 273.15) * 9 / 5 + 32, "K": kelvin}[dst]
    for units in FACTORS.values():
        if src in units and dst in units:
            return value * units[src] / units[dst]
    raise ValueError(f"cannot convert {src} to {dst}: they measure different things")


def arguments(data):
    """The checked arguments of a call, or a ValueError naming what is wrong."""
    try:
        args = json.loads(data or b"{}")
    except ValueError as e:
        raise ValueError(f"the arguments are not JSON: {e}")
    if not isinstance(args, dict):
        raise ValueError("the arguments must be a JSON object")
    for key in ("requestState", "inputResponses"):
        args.pop(key, None)  # this tool never asks, so a continuation carries nothing
    unknown = sorted(set(args) - {"value", "from", "to"})
    if unknown:
        raise ValueError(f"unknown argument(s): {', '.join(unknown)}")
    value = args.get("value")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("value: a number is required")
    for key in ("from", "to"):
        if args.get(key) not in UNITS:
            raise ValueError(f"{key}: one of {', '.join(UNITS)} is required")
    return value, args["from"], args["to"]


def result(text, structured=None, error=False):
    body = {"content": [{"type": "text", "text": text}]}
    if structured is not None:
        body["structuredContent"] = structured
    if error:
        body["isError"] = True
    return json.dumps(body).encode()


async def on_convert(req):
    try:
        value, src, dst = arguments(req.data)
        out = convert(value, src, dst)
    except ValueError as e:
        # The body carries the whole result; the headers tell NATS tooling it failed.
        await req.respond_error("400", str(e), data=result(str(e), error=True))
        return
    await req.respond(result(f"{value} {src} = {out:g} {dst}", {"value": out, "unit": dst}))


async def on_tools(req):
    reply = {"module": MODULE, "version": VERSION, "description": DESCRIPTION, "tools": [CONVERT]}
    await req.respond(json.dumps(reply).encode())


def context(name):
    """A `nats` context: a file (a name ending in .json or holding a /, as the credential
    `mesh up` writes for the module in <state>/credentials/units.json, or systemd hands it),
    else as natscli keeps them (`$XDG_CONFIG_HOME/nats/context/<name>.json`)."""
    if name.endswith(".json") or "/" in name:
        path = name
    else:
        base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
        path = os.path.join(base, "nats", "context", f"{name}.json")
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        sys.exit(f"units: cannot read the nats context {name} ({path}): {e}")


async def register(nc, registration, subject="mesh.catalog.register"):
    """One registration; says why when it did not take (the catalogue may not be up yet)."""
    try:
        reply = await nc.request(subject, json.dumps(registration).encode(), timeout=5)
    except NoRespondersError:
        return "no catalogue is answering yet"
    except TimeoutError:
        return "the catalogue did not answer"
    answer = json.loads(reply.data)
    if answer.get("isError"):
        return answer["content"][0]["text"]
    return None


async def main():
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument(
        "--context",
        default=os.environ.get("NATS_CONTEXT") or "mesh-units",
        help="the nats context to connect with: a name, or a file ($NATS_CONTEXT)",
    )
    opts = parser.parse_args()
    ctx = context(opts.context)
    nc = await nats.connect(
        servers=ctx["url"],
        user=ctx.get("user"),
        password=ctx.get("password"),
        inbox_prefix=ctx.get("inbox_prefix") or "_INBOX",
        name=f"{MODULE} module",
    )
    service = await add_service(nc, name=MODULE, version=VERSION, description=DESCRIPTION, queue_group=MODULE)
    await service.add_endpoint(name="convert", subject=f"mesh.{MODULE}.convert", handler=on_convert)
    await service.add_endpoint(name="tools", subject=f"mesh.{MODULE}.tools", handler=on_tools)
    await nc.flush()

    registration = {
        "module": MODULE,
        "version": VERSION,
        "description": DESCRIPTION,
        "tools": [CONVERT["name"]],
        "instance": service.id,
        "started_ms": int(time.time() * 1000),
    }
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"units: serving mesh.{MODULE}.convert as {ctx.get('user')}", file=sys.stderr, flush=True)
    wait = 0
    while not stop.is_set():
        why = await register(nc, registration)
        if why:
            print(f"units: not registered: {why}; retrying", file=sys.stderr, flush=True)
            wait = min(max(wait * 2, 1), REFRESH_SECONDS)
        else:
            wait = REFRESH_SECONDS
        try:
            await asyncio.wait_for(stop.wait(), timeout=wait)
        except asyncio.TimeoutError:
            pass
    await service.stop()
    await register(nc, {"module": MODULE, "instance": service.id}, "mesh.catalog.unregister")
    await nc.drain()


if __name__ == "__main__":
    asyncio.run(main())
