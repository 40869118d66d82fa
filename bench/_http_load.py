"""Workload (c) of `bench.peers`: concurrent streaming chats through `amodal serve`.

A deliberately thin HTTP/1.1 client (one TCP connection per turn, `Connection:
close`, the SSE body read to its end): the client shares a CPU with the model
server, so it must cost far less than the server it measures. Loopback only;
every burst is bounded in count and time.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from bench import _scenario as s
from bench._ports import listening_port

HOST = "127.0.0.1"
# Bounds a hang, never a speed: a turn that ends late did its work. Every turn of a burst
# queues on one core the server shares with the rest of the machine: the last of 200 ended
# after 18 s here while other jobs kept both cores busy (load average 7).
TURN_TIMEOUT = 300.0
READY_TIMEOUT = 120.0


@dataclass
class Burst:
    """N new sessions, one turn each, all started at once."""

    sessions: int
    wall_seconds: float
    latencies: list[float]  # seconds, successful turns only
    first_event: list[float]  # seconds to the first SSE frame, successful turns only
    errors: list[str] = field(default_factory=list)
    server_cpu_seconds: float = 0.0


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


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


async def burst(port: int, sessions: int, pid: int) -> Burst:
    request = _request(port)
    results: list[tuple[float, float, str | None]] = []

    async def run_one() -> None:
        results.append(await one_turn(port, request))

    cpu = _cpu_seconds(pid)
    start = time.perf_counter()
    async with anyio.create_task_group() as group:
        for _ in range(sessions):
            group.start_soon(run_one)
    wall = time.perf_counter() - start
    return Burst(
        sessions,
        wall,
        [r[0] for r in results if r[2] is None],
        [r[1] for r in results if r[2] is None],
        [r[2] for r in results if r[2] is not None],
        _cpu_seconds(pid) - cpu,
    )


async def paced(port: int, sessions: int, rate: float, pid: int) -> Burst:
    """N new sessions started evenly at `rate` a second: latency under a load the server can
    sustain, where a burst measures the queue."""
    request = _request(port)
    results: list[tuple[float, float, str | None]] = []

    async def run_one() -> None:
        results.append(await one_turn(port, request))

    cpu = _cpu_seconds(pid)
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
        _cpu_seconds(pid) - cpu,
    )


async def sequential(port: int, turns: int, pid: int) -> Burst:
    """One session at a time: the server's added latency with nothing else going on."""
    request = _request(port)
    latencies, first, errors = [], [], []
    cpu = _cpu_seconds(pid)
    start = time.perf_counter()
    for _ in range(turns):
        elapsed, to_first, error = await one_turn(port, request)
        if error is None:
            latencies.append(elapsed)
            first.append(to_first)
        else:
            errors.append(error)
    return Burst(1, time.perf_counter() - start, latencies, first, errors, _cpu_seconds(pid) - cpu)


class ServeProcess:
    """`amodal serve` over the benchmark repo, pinned to `cpu`, on a loopback port the kernel
    picks as it binds (bench._ports)."""

    def __init__(
        self,
        repo: Path,
        data_dir: Path,
        model_url: str,
        cpu: int | None,
    ) -> None:
        self._port: int | None = None  # known once it listens (wait_ready)
        amodal = Path(sys.executable).with_name("amodal")
        env = {
            **os.environ,
            "AMODAL_DATA_DIR": str(data_dir),
            "OPENAI_BASE_URL": model_url,
            "OPENAI_API_KEY": s.API_KEY,
            "MODEL_MAIN": s.MODEL,
        }
        env.pop("AMODAL_OPERATOR_TOKEN", None)
        self.log = (data_dir / "serve.log").open("a")

        def pin() -> None:
            if cpu is not None:
                os.sched_setaffinity(0, {cpu})

        command = [str(amodal), "--repo", str(repo), "serve", "--port", "0"]
        command.append("--no-reload")
        self.process = subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            preexec_fn=pin,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("amodal serve is not listening yet: await wait_ready() first")
        return self._port

    async def wait_ready(self) -> None:
        """Until /health answers 200. The deadline only bounds a server that hangs: one that
        fails exits, and that is seen at once; a start takes seconds on a busy machine."""
        health = f"GET /health HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode()
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"amodal serve exited ({self.process.returncode}); see log")
            if self._port is None:
                self._port = listening_port(self.pid)
            if self._port is not None:
                try:
                    with anyio.fail_after(10):
                        async with await anyio.connect_tcp(HOST, self._port) as stream:
                            await stream.send(health)
                            if (await stream.receive()).startswith(b"HTTP/1.1 200"):
                                return
                except (OSError, TimeoutError, anyio.EndOfStream):
                    pass  # not answering yet
            await anyio.sleep(0.05)
        raise RuntimeError(f"amodal serve did not answer /health within {READY_TIMEOUT:g} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


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
    }
