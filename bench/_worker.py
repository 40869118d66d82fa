"""One contender of `bench.peers` in a process of its own, driven over a pipe.

    python -m bench._worker NAME --urls JSON [--cpu 1]

A process per contender, so each one's peak memory (ru_maxrss) is its own and
no framework's imports or caches slow another. The driver writes one JSON
command a line on stdin and reads one JSON answer a line:

    {"op": "turns", "n": 30}      -> {"seconds": s, "cpu_seconds": c}   (workload a)
                                     ("gc": false: no gc.collect() first, for profiling)
    {"op": "delegation"}          -> {"seconds": s, "cpu_seconds": c}   (workload b)
    {"op": "session", "n": 60}    -> {"cpu_ms": [CPU ms of each of n turns of one session]}
    {"op": "profile", "n": 100}   -> {"text": pyinstrument's tree of n turns}
    {"op": "rss"}                 -> {"maxrss_kib": peak resident set so far}

The answers go to a private copy of the original stdout; the process's own
stdout is pointed at stderr, so nothing a framework prints can break the protocol.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import time
from typing import IO, Any

import anyio
import anyio.to_thread

from bench._contenders import CONTENDERS, make

WARMUP_TURNS = 5


def _maxrss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


async def _serve(name: str, urls: dict[str, str], out: IO[str]) -> None:
    def answer(payload: dict[str, Any]) -> None:
        out.write(json.dumps(payload) + "\n")
        out.flush()

    contender = make(name)
    await contender.setup(urls)
    try:
        for _ in range(WARMUP_TURNS):  # connections, caches, lazy imports
            await contender.turn()
        answer({"ready": True, "maxrss_kib": _maxrss_kib()})
        while True:
            line = await anyio.to_thread.run_sync(sys.stdin.readline)
            if not line:
                return
            command = json.loads(line)
            op = command["op"]
            if command.get("gc", True):
                gc.collect()  # every batch starts from a similar heap, outside the timing
            if op == "turns":
                start, cpu = time.perf_counter(), time.process_time()
                for _ in range(int(command["n"])):
                    await contender.turn()
                answer(
                    {
                        "seconds": time.perf_counter() - start,
                        "cpu_seconds": time.process_time() - cpu,
                    }
                )
            elif op == "delegation":
                start, cpu = time.perf_counter(), time.process_time()
                await contender.delegation()
                answer(
                    {
                        "seconds": time.perf_counter() - start,
                        "cpu_seconds": time.process_time() - cpu,
                    }
                )
            elif op == "session":
                answer({"cpu_ms": await contender.session_turns(int(command["n"]))})
            elif op == "profile":
                answer({"text": await _profile(contender, int(command["n"]))})
            elif op == "rss":
                answer({"maxrss_kib": _maxrss_kib()})
            else:
                answer({"error": f"unknown op {op!r}"})
    finally:
        await contender.aclose()


async def _profile(contender: Any, turns: int) -> str:
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.0002, async_mode="disabled")
    profiler.start()
    for _ in range(turns):
        await contender.turn()
    profiler.stop()
    return str(profiler.output_text(unicode=False, color=False, show_all=False))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench._worker")
    parser.add_argument("name", choices=sorted(CONTENDERS))
    parser.add_argument("--urls", required=True, help="JSON: workload -> model base URL")
    parser.add_argument("--cpu", type=int, help="pin the process to this CPU")
    args = parser.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    try:
        anyio.run(_serve, args.name, json.loads(args.urls), out)
    except Exception as error:
        out.write(json.dumps({"error": f"{type(error).__name__}: {error}"}) + "\n")
        out.flush()
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
