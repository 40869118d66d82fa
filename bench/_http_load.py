"""Workload (c) of `bench.peers`: concurrent streaming chats through `amodal serve`.

A deliberately thin HTTP/1.1 client (one TCP connection per turn, `Connection:
close`, the SSE body read to its end): the client shares a CPU with the model
server, so it must cost far less than the server it measures. Loopback only;
every burst is bounded in count and time.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from bench import _scenario as s
from runtime.testing.server_process import ServeProcess

HOST = "127.0.0.1"
# Bounds a hang, never a speed: a turn that ends late did its work. Every turn of a burst
# queues on one core the server shares with the rest of the machine: the last of 200 ended
# after 18 s here while other jobs kept both cores busy (load average 7).
TURN_TIMEOUT = 300.0


@dataclass
class Burst:
    """N new sessions, one turn each, all started at once."""

    sessions: int
    wall_seconds: float
    latencies: list[float]  # seconds, successful turns only
    first_event: list[float]  # seconds to the first SSE frame, successful turns only
    errors: list[str] = field(default_factory=list)
    server_cpu_seconds: float = 0.0
    others_cpu_seconds: float = 0.0  # the model server's and this load client's


def percentile(values: list[float], fraction: float) -> float:
    """Nearest rank: p99 of 200 values is the second slowest."""
    ordered = sorted(values)
    return ordered[max(math.ceil(fraction * len(ordered)) - 1, 0)]


def _request(port: int) -> bytes:
    body = json.dumps({"message": s.CHAT_PROMPT}).encode()
    head = (
        f"POST /chat HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


async def one_turn(port: int, request: bytes) -> tuple[float, float, str | None]:
    """(seconds to the end of the stream, seconds to its first frame, error or None)."""
    start = time.perf_counter()
    first = 0.0
    chunks: list[bytes] = []
    try:
        with anyio.fail_after(TURN_TIMEOUT):
            async with await anyio.connect_tcp(HOST, port) as stream:
                await stream.send(request)
                while True:
                    try:
                        chunk = await stream.receive()
                    except anyio.EndOfStream:
                        break
                    if not first and b"event: " in chunk:
                        first = time.perf_counter() - start
                    chunks.append(chunk)
    except TimeoutError:
        return 0.0, 0.0, f"no end of stream within {TURN_TIMEOUT:g} s"
    except OSError as error:
        return 0.0, 0.0, f"{type(error).__name__}: {error}"
    elapsed = time.perf_counter() - start
    data = b"".join(chunks)
    if not data.startswith(b"HTTP/1.1 200"):
        return 0.0, 0.0, data.split(b"\r\n", 1)[0].decode(errors="replace") or "no response"
    if b"event: error" in data or b'"reason":"model_stop"' not in data:
        return 0.0, 0.0, "the stream did not end with done/model_stop"
    return elapsed, first, None


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def family(pid: int) -> list[int]:
    """The process and its descendants (the worker processes of `--workers N`)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                parents[int(entry.name)] = int(_stat(int(entry.name))[1])
    found, frontier = [pid], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


class _Meter:
    """CPU seconds spent from its start: by the server (a process and its descendants), and
    by everything else a turn needs here (other processes, such as the model server, and
    this load client)."""

    def __init__(self, pid: int, others: tuple[int, ...]) -> None:
        self._pid, self._others = pid, others
        self._server, self._rest = self._read()

    def _read(self) -> tuple[float, float]:
        rest = time.process_time() + sum(_cpu_seconds(other) for other in self._others)
        return _cpu_seconds(self._pid), rest

    def spent(self) -> tuple[float, float]:
        server, rest = self._read()
        return server - self._server, rest - self._rest


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its descendants (all their threads), from /proc."""
    total = 0
    for member in family(pid):
        with contextlib.suppress(OSError):
            fields = _stat(member)
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def peak_rss_kib(pid: int) -> int:
    """The largest peak resident memory of the process and its descendants."""
    peaks = [0]
    for member in family(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peaks.append(int(line.split()[1]))
    return max(peaks)


async def burst(port: int, sessions: int, pid: int, others: tuple[int, ...] = ()) -> Burst:
    """N new sessions, one turn each, all started at once (`pid`: the server's process,
    `others`: processes whose CPU counts as the rest of the work, as `Burst` says)."""
    return await paced(port, sessions, math.inf, pid, others)


async def paced(
    port: int, sessions: int, rate: float, pid: int, others: tuple[int, ...] = ()
) -> Burst:
    """N new sessions started evenly at `rate` a second: latency under a load the server can
    sustain, where a burst measures the queue."""
    request = _request(port)
    results: list[tuple[float, float, str | None]] = []

    async def run_one() -> None:
        results.append(await one_turn(port, request))

    meter = _Meter(pid, others)
    start = time.perf_counter()
    async with anyio.create_task_group() as group:
        for index in range(sessions):
            delay = start + index / rate - time.perf_counter()
            if delay > 0:
                await anyio.sleep(delay)
            group.start_soon(run_one)
    wall = time.perf_counter() - start
    return Burst(
        sessions,
        wall,
        [r[0] for r in results if r[2] is None],
        [r[1] for r in results if r[2] is None],
        [r[2] for r in results if r[2] is not None],
        *meter.spent(),
    )


async def sequential(port: int, turns: int, pid: int, others: tuple[int, ...] = ()) -> Burst:
    """One session at a time: the server's added latency with nothing else going on."""
    request = _request(port)
    latencies, first, errors = [], [], []
    meter = _Meter(pid, others)
    start = time.perf_counter()
    for _ in range(turns):
        elapsed, to_first, error = await one_turn(port, request)
        if error is None:
            latencies.append(elapsed)
            first.append(to_first)
        else:
            errors.append(error)
    return Burst(1, time.perf_counter() - start, latencies, first, errors, *meter.spent())


def serve(
    repo: Path, data_dir: Path, model_url: str, workers: int, cpu: int | None
) -> ServeProcess:
    """`amodal serve` over the benchmark repo with `workers` processes, pinned to `cpu`."""
    env = {
        "AMODAL_DATA_DIR": str(data_dir),
        "OPENAI_BASE_URL": model_url,
        "OPENAI_API_KEY": s.API_KEY,
        "MODEL_MAIN": s.MODEL,
        "AMODAL_OPERATOR_TOKEN": "",
    }
    return ServeProcess(repo, env, "--no-reload", "--workers", str(workers), cpu=cpu)


def summary(kind: str, bursts: list[Burst], model_latency: float) -> dict[str, Any]:
    """Pooled latencies of the bursts of one kind and size, minus the model's own latency."""
    latencies = [value for b in bursts for value in b.latencies]
    first = [value for b in bursts for value in b.first_event]
    turns = sum(len(b.latencies) for b in bursts)
    added = [(value - model_latency) * 1000 for value in latencies] or [math.nan]
    return {
        "kind": kind,
        "sessions": bursts[0].sessions,
        "bursts": len(bursts),
        "turns": turns,
        "errors": sum(len(b.errors) for b in bursts),
        "error_samples": sorted({e for b in bursts for e in b.errors})[:3],
        "turns_per_s": statistics.median(len(b.latencies) / b.wall_seconds for b in bursts),
        "added_p50_ms": statistics.median(added),
        "added_p99_ms": percentile(added, 0.99),
        "added_max_ms": max(added),
        "first_event_p50_ms": statistics.median(first) * 1000 if first else math.nan,
        "server_cpu_ms_per_turn": sum(b.server_cpu_seconds for b in bursts) / max(turns, 1) * 1000,
        "others_cpu_ms_per_turn": sum(b.others_cpu_seconds for b in bursts) / max(turns, 1) * 1000,
    }
