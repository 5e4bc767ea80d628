"""The official MCP Python SDK's client calling one server's tool three ways, in alternating
blocks of one run: the server driven directly over stdio (as the SDK's own docs do), through
`mesh mcp` (stdio, relayed over the bus to the server joined with `mesh run --mcp`), and
through the console (streamable HTTP, the same relay in `mesh up`). Prints, per path, the
latency of a sequential `tools/call` (p50, p99), calls a second, and the CPU per call of each
process on the way, then the ratio of each mesh path to the direct one.

usage: target/py/bin/python benches/py/sdk_paths.py CONFIG_JSON

CONFIG_JSON: {"direct": [cmd, args...], "direct_tool": name, "mesh": [cmd, args...],
"mesh_tool": name, "console": url, "token": token, "arguments": {...}, "calls": n,
"rounds": r, "warmup": n, "processes": {"nats-server": pid, "mesh up": pid}}
"""

import asyncio
import json
import os
import resource
import sys
import time

import httpx2
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """User and system CPU of one process, in seconds (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def children(pid):
    """Every process whose parent is `pid`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            found.append(int(entry))
    return found


def tree_cpu(pid, apart=()):
    """CPU of a process and all its descendants, in seconds; the trees of `apart` (counted
    on rows of their own, as nats-server, which `mesh up` starts) left out."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        if p in apart and p != pid:
            continue
        total += cpu_seconds(p)
        todo.extend(children(p))
    return total


def tree_cpu_by_process(pid, apart=()):
    """CPU of a process and each of its descendants, in seconds, keyed by pid and name (the
    trees of `apart` left out)."""
    found, todo = {}, [pid]
    while todo:
        p = todo.pop()
        if p in apart and p != pid:
            continue
        try:
            with open(f"/proc/{p}/cmdline") as f:
                argv = f.read().split("\0")
        except OSError:
            argv = ["?"]
        # The program and its first words: `mesh run --layout accounts --mcp pyecho`.
        name = " ".join([os.path.basename(argv[0])] + [a for a in argv[1:6] if a])[:40]
        found[(p, name)] = cpu_seconds(p)
        todo.extend(children(p))
    return found


def own_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Path:
    def __init__(self, name, server, tool):
        self.name, self.server, self.tool = name, server, tool
        self.latencies = []
        self.wall = 0.0
        self.cpu = {}

    def add_cpu(self, key, seconds):
        self.cpu[key] = self.cpu.get(key, 0.0) + seconds


async def block(path, config, calls, measure):
    """A client session on `path`: warmed up, then `calls` sequential calls timed."""
    async with Client(path.server) as client:
        for _ in range(config["warmup"]):
            await client.call_tool(path.tool, config["arguments"])
        # The process the client started (the server, or `mesh mcp`): ours to count.
        started = [c for c in children(os.getpid())]
        # Each row its own process tree, less the others' (mesh up starts nats-server).
        apart = set(config["processes"].values())
        before = {k: tree_cpu(p, apart) for k, p in config["processes"].items()}
        # Each process of the trees apart too: where a tree's CPU goes.
        before_each = {
            k: tree_cpu_by_process(p, apart) for k, p in config["processes"].items()
        }
        before_started = sum(tree_cpu(p) for p in started)
        before_own = own_cpu()
        t0 = time.perf_counter()
        for _ in range(calls):
            s = time.perf_counter_ns()
            result = await client.call_tool(path.tool, config["arguments"])
            if measure:
                path.latencies.append(time.perf_counter_ns() - s)
            if result.is_error:
                raise SystemExit(f"{path.name}: the call failed: {result}")
        if measure:
            path.wall += time.perf_counter() - t0
            path.add_cpu("client (python)", own_cpu() - before_own)
            if started:
                label = "server (stdio)" if path.name == "direct" else "mesh mcp"
                path.add_cpu(label, sum(tree_cpu(p) for p in started) - before_started)
            for k, p in config["processes"].items():
                path.add_cpu(k, tree_cpu(p, apart) - before[k])
                if len(before_each[k]) > 1:
                    for (pid, name), cpu in tree_cpu_by_process(p, apart).items():
                        spent = cpu - before_each[k].get((pid, name), 0.0)
                        if spent > 0:
                            path.add_cpu(f"  of which {name}", spent)


def percentile(sorted_ns, p):
    return sorted_ns[min(len(sorted_ns) - 1, int(len(sorted_ns) * p))] / 1000.0


async def main(config):
    direct = StdioServerParameters(command=config["direct"][0], args=config["direct"][1:])
    mesh = StdioServerParameters(command=config["mesh"][0], args=config["mesh"][1:])
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {config['token']}"}, timeout=httpx2.Timeout(30.0)
    )
    console = streamable_http_client(config["console"], http_client=http)
    paths = [
        Path("direct", direct, config["direct_tool"]),
        Path("mesh mcp", mesh, config["mesh_tool"]),
        Path("console", console, config["mesh_tool"]),
    ]
    for p in paths:
        await block(p, config, config["warmup"], False)
    for r in range(config["rounds"]):
        for k in range(len(paths)):
            p = paths[(r + k) % len(paths)]
            if p.name == "console":
                # A session of its own each block, as the stdio paths get a process each.
                p.server = streamable_http_client(config["console"], http_client=http)
            await block(p, config, config["calls"], True)
    calls = config["calls"] * config["rounds"]
    out = {}
    for p in paths:
        lat = sorted(p.latencies)
        out[p.name] = {
            "p50_us": percentile(lat, 0.5),
            "p99_us": percentile(lat, 0.99),
            "calls_per_s": calls / p.wall,
            "cpu_per_call_us": {k: v * 1e6 / calls for k, v in p.cpu.items()},
        }
    base = out["direct"]
    print(f"{calls} sequential tools/call per path ({config['rounds']} alternating blocks)")
    print(f"{'':<52}{'direct':>12}{'mesh mcp':>12}{'ratio':>8}{'console':>12}{'ratio':>8}")
    for key, label in [("p50_us", "p50 (us)"), ("p99_us", "p99 (us)"), ("calls_per_s", "calls/s")]:
        d, m, c = base[key], out["mesh mcp"][key], out["console"][key]
        print(f"{label:<52}{d:>12.1f}{m:>12.1f}{m / d:>8.2f}{c:>12.1f}{c / d:>8.2f}")
    print("cpu per call (us), by process:")
    keys = []
    for p in out.values():
        keys.extend(k for k in p["cpu_per_call_us"] if k not in keys)
    for k in keys:
        row = [out[n]["cpu_per_call_us"].get(k) for n in ("direct", "mesh mcp", "console")]
        cells = [f"{'-' if v is None else f'{v:.1f}':>12}" for v in row]
        print(f"{k:<52}{cells[0]}{cells[1]}{'':>8}{cells[2]}")
    total = {
        n: sum(v for k, v in out[n]["cpu_per_call_us"].items() if not k.startswith("  of which"))
        for n in out
    }
    print(
        f"{'all of them':<52}{total['direct']:>12.1f}{'':>8}{total['mesh mcp']:>12.1f}"
        f"{total['mesh mcp'] / total['direct']:>8.2f}{total['console']:>12.1f}{total['console'] / total['direct']:>8.2f}"
    )
    print("sdk_paths " + json.dumps(out))


asyncio.run(main(json.loads(sys.argv[1])))
