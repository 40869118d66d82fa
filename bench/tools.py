"""What the runtime adds to a call on an outside system: MCP tools and `request`.

Side by side, in one run, against the same servers:

- an MCP tool over **stdio** and over **streamable HTTP**: the runtime's tool
  (argument check against the server's schema, the call through the runtime's shared
  session, result mapping and secret scrubbing, bounded by its timeout, as the turn
  loop runs it) against `await client.call_tool(...)` on a bare `mcp` SDK client of the
  same server;
- `request` over a REST connection: the runtime's tool (argument check, path and
  access checks, auth, the call, response shaping and scrubbing) against a bare
  `await httpx.AsyncClient.get(url)` to the same API, each with one reused client.

The servers are the example repo's: `servers/almanac.py` (MCP) and
`servers/library_api.py` (HTTP), all on loopback. Calls are interleaved in rounds so
both sides see the same machine load; the table has the median per call and the
ratio runtime / bare (the target is at most 1.2x).

    python -m bench.tools            # 10 rounds of 50 calls per path
    python -m bench.tools --quick    # 3 rounds of 20
    python -m bench.tools --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx

from runtime.outside.mcp import McpServers
from runtime.outside.rest import Connections
from runtime.repo import load_bundle
from runtime.repo.bundle import Bundle, McpServerDefinition
from runtime.surface.resolution import SurfaceContext, resolve
from runtime.tools import Tool, ToolContext
from runtime.tools.remote import mcp_tools, request_tool

ROOT = Path(__file__).resolve().parents[1]
TARGET = 1.2
ARGUMENTS = {"value": 12.5, "from_unit": "km", "to_unit": "mi"}

Call = Callable[[], Awaitable[Any]]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def runtime_call(tool: Tool, arguments: dict[str, Any], context: ToolContext) -> Call:
    """The tool as the turn loop runs it: arguments checked, then bounded by its timeout."""

    async def call() -> Any:
        problems = tool.argument_errors(arguments)
        assert not problems, problems
        with anyio.fail_after(tool.timeout):
            return await tool.handler(dict(arguments), context)

    return call


async def timed(call: Call, count: int) -> list[float]:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        await call()
        times.append(time.perf_counter() - start)
    return times


@contextlib.asynccontextmanager
async def runtime_tools(
    bundle: Bundle, servers: dict[str, McpServerDefinition]
) -> AsyncIterator[tuple[dict[str, Tool], ToolContext]]:
    async with McpServers.open(servers) as running:
        for name, state in running.snapshot().servers.items():
            assert state.status == "ready", (name, state.error)
        caller = SurfaceContext.for_caller("main")
        surface = resolve(bundle, "main", caller, servers=running.snapshot())
        connections = Connections()
        try:
            tools = mcp_tools(bundle, surface, running.snapshot(), running)
            tools["request"] = request_tool(bundle, surface, connections)
            context = ToolContext(bundle, surface, caller, "bench", "run_bench", "main")
            yield tools, context
        finally:
            await connections.aclose()


@contextlib.asynccontextmanager
async def bare_mcp(definition: McpServerDefinition) -> AsyncIterator[Any]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    if definition.transport == "stdio":
        server: Any = StdioServerParameters(
            command=sys.executable, args=list(definition.args), cwd=definition.cwd
        )
    else:
        server = definition.url
    async with Client(server, mode="legacy", cache=None) as client:
        yield client


@contextlib.contextmanager
def library_api() -> Any:
    sys.path.insert(0, str(ROOT / "servers"))
    from library_api import Library  # type: ignore[import-not-found]

    class Quiet(Library):  # type: ignore[misc]
        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def almanac_over_http() -> Any:
    port = free_port()
    code = (
        "import sys; sys.path.insert(0, 'servers'); import almanac; "
        f"almanac.almanac.run('streamable-http', host='127.0.0.1', port={port})"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


def bundle_with(api: str, mcp_url: str) -> Bundle:
    import dataclasses
    from types import MappingProxyType

    bundle = load_bundle(ROOT, environ={})
    stdio = bundle.mcp_servers["almanac"]
    http = dataclasses.replace(
        stdio, name="web", transport="http", command=None, args=(), cwd=None, url=mcp_url
    )
    library = dataclasses.replace(bundle.connections["library"], base_url=api)
    return dataclasses.replace(
        bundle,
        version=bundle.version + "-bench",
        mcp_servers=MappingProxyType({"almanac": stdio, "web": http}),
        connections=MappingProxyType({"library": library}),
    )


async def measure(rounds: int, calls: int) -> list[dict[str, Any]]:
    with library_api() as api, almanac_over_http() as mcp_url:
        bundle = bundle_with(api, mcp_url)
        async with (
            runtime_tools(bundle, dict(bundle.mcp_servers)) as (tools, context),
            bare_mcp(bundle.mcp_servers["almanac"]) as stdio_client,
            bare_mcp(bundle.mcp_servers["web"]) as http_client,
            httpx.AsyncClient() as bare_http,
        ):
            read = {"connection": "library", "method": "GET", "path": "/books", "intent": "read"}
            paths: dict[str, tuple[Call, Call]] = {
                "MCP tool, stdio": (
                    runtime_call(tools["almanac__convert"], ARGUMENTS, context),
                    lambda: stdio_client.call_tool("convert", ARGUMENTS),
                ),
                "MCP tool, streamable HTTP": (
                    runtime_call(tools["web__convert"], ARGUMENTS, context),
                    lambda: http_client.call_tool("convert", ARGUMENTS),
                ),
                "request (REST)": (
                    runtime_call(tools["request"], read, context),
                    lambda: bare_http.get(f"{api}/books"),
                ),
            }
            samples: dict[str, tuple[list[float], list[float]]] = {p: ([], []) for p in paths}
            for ours, bare in paths.values():  # warm both sides up
                await timed(ours, 5)
                await timed(bare, 5)
            for _ in range(rounds):
                for name, (ours, bare) in paths.items():
                    samples[name][0].extend(await timed(ours, calls))
                    samples[name][1].extend(await timed(bare, calls))
    rows = []
    for name, (ours, bare) in samples.items():
        runtime_ms, bare_ms = statistics.median(ours) * 1000, statistics.median(bare) * 1000
        rows.append(
            {
                "path": name,
                "runtime_ms": round(runtime_ms, 3),
                "bare_ms": round(bare_ms, 3),
                "ratio": round(runtime_ms / bare_ms, 3),
                "calls": len(ours),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="3 rounds of 20 calls")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    rounds, calls = (3, 20) if options.quick else (options.rounds, options.calls)
    rows = anyio.run(measure, rounds, calls)
    if options.json:
        print(json.dumps({"target": TARGET, "rows": rows}, indent=2))
        return
    print(f"{'path':<28} {'runtime':>10} {'bare':>10} {'ratio':>7}  (median per call)")
    for row in rows:
        mark = "" if row["ratio"] <= TARGET else f"  above the {TARGET}x target"
        print(
            f"{row['path']:<28} {row['runtime_ms']:>8.3f}ms {row['bare_ms']:>8.3f}ms "
            f"{row['ratio']:>6.2f}x{mark}"
        )
    print(f"{rows[0]['calls']} calls per path per side, interleaved in rounds")


if __name__ == "__main__":
    main()
