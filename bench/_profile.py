"""Where a process's CPU time goes, by py-spy samples sorted into the runtime's layers.

py-spy samples another process from outside (no instrumentation, so no distortion
of short calls), all its threads; a sample whose innermost frame is a known wait
(the event loop's select, an idle worker thread) is idle and left out. Each busy
sample goes to the innermost frame that matches a layer below, so time spent in
`json` or `httpx` under the storage counts as storage, and so on.
"""

from __future__ import annotations

import collections
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

IDLE_LEAVES = ("EpollSelector.select", "Condition.wait", "_worker (concurrent")

# (layer, patterns in a frame "function (file:line)"), the first layer that matches wins.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("storage: SQLite statements, JSON", ("SqliteStorage.", "runtime/storage/")),
    ("openai SDK: request params transform", ("openai/_utils/_transform",)),
    ("openai SDK: SSE parse, chunk models", ("openai/_streaming", "openai/_models")),
    ("openai SDK: other (build request, response)", ("openai/",)),
    ("httpx/httpcore/h11: the HTTP client", ("httpx", "httpcore")),
    ("model clients (runtime/models/)", ("runtime/models/",)),
    ("surface resolution", ("runtime/surface/resolution.py",)),
    ("prompt rendering", ("runtime/surface/prompt.py", "runtime/repo/templates.py", "jinja2/")),
    ("session view, transcript", ("runtime/engine/view.py", "runtime/engine/transcript.py")),
    ("tools: build, schema, argument validation", ("runtime/tools/", "jsonschema/")),
    ("delegation", ("runtime/tools/delegation.py",)),
    ("SSE encoding (runtime/server/sse.py)", ("runtime/server/sse.py",)),
    ("HTTP app (runtime/server)", ("runtime/server/",)),
    ("the turn engine (runtime/engine/, events)", ("runtime/",)),
    ("uvicorn (HTTP protocol, h11 server side)", ("uvicorn/",)),
    ("fastapi (routing, body validation)", ("fastapi/",)),
    ("starlette (StreamingResponse, middleware)", ("starlette/",)),
)  # fmt: skip
LOOP = "event loop, task switches, other"


def available() -> str | None:
    """The py-spy executable next to this Python, or on PATH; None when not installed."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


@contextmanager
def recording(pid: int, output: Path, rate: int = 250) -> Iterator[None]:
    """Sample `pid` (all threads) while the block runs; raw collapsed stacks to `output`."""
    executable = available()
    if executable is None:
        raise RuntimeError("py-spy is not installed (pip install -e '.[bench]')")
    command = [executable, "record", "-p", str(pid), "--rate", str(rate), "--threads"]
    spy = subprocess.Popen(
        [*command, "--format", "raw", "--output", str(output)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            spy.wait(timeout=30)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait()


def layers(raw: Path) -> tuple[int, list[tuple[str, float]]]:
    """(busy samples, [(layer, share of busy samples)]) of a py-spy raw file, largest first."""
    counts: collections.Counter[str] = collections.Counter()
    busy = 0
    for line in raw.read_text().splitlines():
        stack, _, number = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")[1:]  # the first is the thread
        if not frames or frames[-1].startswith(IDLE_LEAVES):
            continue
        samples = int(number)
        busy += samples
        counts[_layer(frames)] += samples
    return busy, [(layer, count / max(busy, 1)) for layer, count in counts.most_common()]


def _layer(frames: list[str]) -> str:
    for frame in reversed(frames):
        for layer, patterns in LAYERS:
            if any(pattern in frame for pattern in patterns):
                return layer
    return LOOP
