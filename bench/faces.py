"""What a protocol face costs: workload (a) through `/v1/chat/completions` against `/chat`.

Workload (a) of SPEC 13 (a turn with three sequential tool calls, then the answer),
streamed, one turn at a time, through `amodal serve`: once as the runtime's own
`POST /chat` (SSE of its events) and once as an OpenAI client sends it,
`POST /v1/chat/completions` with `stream: true` (`chat.completion.chunk` events). The
two run in alternating rounds against one server, so drift on a shared machine falls
on both. It prints the server's CPU time per turn for each and their ratio: what the
face adds to a turn (SPEC 24's target: under 10%).

    python -m bench.faces            # 8 rounds of 10 turns each way
    python -m bench.faces --quick    # 3 rounds
    python -m bench.faces --json     # one JSON object

The server is pinned to CPU 1 and this process (the client and the scripted model,
`bench._scenario.answer_tools`, in a thread) to CPU 0.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from bench import _scenario as s
from bench._http_load import HOST, TURN_TIMEOUT, _cpu_seconds, serve
from runtime.testing import ScriptedModel

ROUND_TURNS = 10
TARGET = 0.10
ROUTES = {
    "/chat": ({"message": s.PROMPT}, b'"reason":"model_stop"'),
    "/v1/chat/completions": (
        {"model": "default", "stream": True, "messages": [{"role": "user", "content": s.PROMPT}]},
        b"data: [DONE]",
    ),
}


def _request(port: int, path: str, body: dict[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + data


async def one_turn(port: int, request: bytes, ended: bytes) -> float:
    """Seconds to the end of one streamed turn; raises when it did not end as it should."""
    start = time.perf_counter()
    chunks: list[bytes] = []
    with anyio.fail_after(TURN_TIMEOUT):
        async with await anyio.connect_tcp(HOST, port) as stream:
            await stream.send(request)
            while True:
                try:
                    chunks.append(await stream.receive())
                except anyio.EndOfStream:
                    break
    data = b"".join(chunks)
    if not data.startswith(b"HTTP/1.1 200") or ended not in data or b"error" in data:
        raise RuntimeError(f"a turn did not end well: {data[:300]!r}")
    return time.perf_counter() - start


async def measure(port: int, pid: int, rounds: int) -> dict[str, dict[str, float]]:
    """Server CPU and wall time per turn of each route, over alternating rounds."""
    requests = {path: (_request(port, path, body), end) for path, (body, end) in ROUTES.items()}
    for request, end in requests.values():  # warm both paths up
        for _ in range(3):
            await one_turn(port, request, end)
    cpu: dict[str, list[float]] = {path: [] for path in ROUTES}
    wall: dict[str, list[float]] = {path: [] for path in ROUTES}
    for index in range(rounds):
        order = list(requests) if index % 2 == 0 else list(reversed(requests))
        for path in order:
            request, end = requests[path]
            before = _cpu_seconds(pid)
            for _ in range(ROUND_TURNS):
                wall[path].append(await one_turn(port, request, end))
            cpu[path].append((_cpu_seconds(pid) - before) / ROUND_TURNS)
    return {
        path: {
            "server_cpu_ms_per_turn": statistics.median(cpu[path]) * 1000,
            "wall_ms_p50": statistics.median(wall[path]) * 1000,
            "turns": len(wall[path]),
        }
        for path in ROUTES
    }


def run(rounds: int) -> dict[str, Any]:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    with tempfile.TemporaryDirectory() as folder, ScriptedModel() as model:
        model.respond(s.answer_tools)
        repo = s.write_repo(Path(folder) / "repo")
        server = serve(repo, Path(folder) / "data", model.base_url, 1, cpu=1)
        try:
            server.wait_ready()
            assert server.port is not None
            rows = anyio.run(measure, server.port, server.pid, rounds)
        finally:
            server.stop()
    ours, face = rows["/chat"], rows["/v1/chat/completions"]
    ratio = face["server_cpu_ms_per_turn"] / ours["server_cpu_ms_per_turn"]
    return {
        "rows": rows,
        "cpu_ratio": ratio,
        "target": 1 + TARGET,
        "load_average": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.faces")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="3 rounds")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args(argv)
    result = run(3 if args.quick else args.rounds)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{'route':<24}{'server CPU ms/turn':>20}{'wall p50 ms':>14}{'turns':>8}")
    for path, row in result["rows"].items():
        print(
            f"{path:<24}{row['server_cpu_ms_per_turn']:>20.2f}"
            f"{row['wall_ms_p50']:>14.1f}{row['turns']:>8}"
        )
    verdict = "within" if result["cpu_ratio"] <= result["target"] else "above"
    print(
        f"\n/v1/chat/completions / /chat, server CPU a turn: {result['cpu_ratio']:.3f} "
        f"({verdict} the target {result['target']:.2f}); load average "
        f"{result['load_average']:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
