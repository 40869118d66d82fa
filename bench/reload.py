"""Hot reload latency: from a file write to the first turn that sees it (SPEC 13, workload e).

Starts `amodal serve` (watching, as a person runs it) against a copy of the example
repo, or the large generated repo of `bench.load` with `--large`, with a scripted model
(`runtime.testing.ScriptedModel`) on loopback. Then, N times: writes a changed
`agents/default/AGENT.md` carrying a fresh marker and sends chats back to back, as
fast as they complete, until the system prompt the model receives contains the marker.

Two times per edit, both from just before the write:

- `model sees it`: when the scripted model received the first request whose system
  prompt has the marker (the reload landed and a turn was built on it);
- `turn done`: when that turn's reply reached the client.

The polling chats bound the resolution: a chat already past building its prompt when
the reload lands cannot see it, so expect up to one chat round trip (printed) on top
of the watcher's debounce and the reload itself (the repo's load time, printed).

Run from the project root:

    python -m bench.reload            # 20 edits
    python -m bench.reload --quick    # 5 edits
    python -m bench.reload --json     # one JSON object, for machines
    python -m bench.reload --large    # the 50-agent generated repo of bench.load
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from runtime.testing import RecordedRequest, ScriptedModel
from runtime.testing.server_process import ServeProcess

TARGET_MS = 300.0
DEFAULT_EDITS = 20
QUICK_EDITS = 5
WARMUP_CHATS = 5
EDIT_TIMEOUT_S = 30.0
PROJECT_ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_FILES = (
    "amodal.json",
    *("agents", "skills", "stores", "knowledge", "tools", "connections", "servers", "evals"),
)
AGENT_MD = "agents/default/AGENT.md"
PROMPT_HEADING = "## Prompt\n"


# ---------------------------------------------------------------- the repo


def copy_example(root: Path) -> None:
    for name in EXAMPLE_FILES:
        source = PROJECT_ROOT / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif source.is_file():
            shutil.copy(source, root / name)


def load_time_ms(repo: Path, runs: int = 5) -> float:
    """The median in-process `load_repo` time: the floor of any reload."""
    import runtime

    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        if not runtime.load_repo(repo).ok:
            raise SystemExit(f"the repo at {repo} does not validate")
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def with_marker(agent_md: str, marker: str) -> str:
    """AGENT.md with `marker` in its prompt (under `## Prompt` when the file has one: the
    rest of such a file is notes for maintainers, never sent to the model)."""
    line = f"Marker: {marker}\n"
    if PROMPT_HEADING in agent_md:
        return agent_md.replace(PROMPT_HEADING, f"{PROMPT_HEADING}\n{line}", 1)
    return f"{agent_md}\n{line}"


# ---------------------------------------------------------------- the model


class MarkerModel:
    """A scripted model answering "ok" to every request, noting when a marker first arrives."""

    def __init__(self) -> None:
        self.model = ScriptedModel()
        self._lock = threading.Lock()
        self._marker: str | None = None
        self._seen_at: float | None = None
        self.model.respond(self._answer)

    def _answer(self, request: RecordedRequest) -> str:
        now = time.perf_counter()
        with self._lock:
            marker = self._marker
            if marker is not None and self._seen_at is None and marker in (request.system or ""):
                self._seen_at = now
        return "ok"

    def expect(self, marker: str) -> None:
        with self._lock:
            self._marker, self._seen_at = marker, None

    @property
    def seen_at(self) -> float | None:
        with self._lock:
            return self._seen_at


# ---------------------------------------------------------------- the server


def _pin(pid: int, cpu: int) -> None:
    """Keep the server and the benchmark (client and model) off each other's core."""
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) >= 2:
        os.sched_setaffinity(pid, {cpu})


def server(repo: Path, data: Path, model: ScriptedModel) -> ServeProcess:
    """`amodal serve`, watching the repo, on the other core than the benchmark's."""
    env = {
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "sk-bench-dummy",
        "MODEL_MAIN": "scripted",
        "AMODAL_DATA_DIR": str(data),
    }
    two_cores = hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) >= 2
    return ServeProcess(repo, env, cpu=1 if two_cores else None)


# ---------------------------------------------------------------- measuring


def nearest_rank(samples: list[float], quantile: float) -> float:
    ordered = sorted(samples)
    return ordered[math.ceil(quantile * len(ordered)) - 1]


@dataclass
class Result:
    seen_ms: list[float] = field(default_factory=list)
    done_ms: list[float] = field(default_factory=list)
    chats_per_edit: list[int] = field(default_factory=list)
    chat_ms: list[float] = field(default_factory=list)  # every polling chat's round trip

    @staticmethod
    def summary(samples: list[float]) -> dict[str, float]:
        return {
            "median_ms": round(statistics.median(samples), 2),
            "p95_ms": round(nearest_rank(samples, 0.95), 2),
            "min_ms": round(min(samples), 2),
            "max_ms": round(max(samples), 2),
        }


def chat(client: httpx.Client) -> None:
    response = client.post("/chat", json={"message": "ping", "stream": False})
    if response.status_code != 200 or response.json()["done_reason"] != "model_stop":
        raise SystemExit(f"a chat failed: {response.status_code} {response.text[:500]}")


def measure(repo: Path, server: ServeProcess, model: MarkerModel, edits: int) -> Result:
    result = Result()
    original = (repo / AGENT_MD).read_text()
    with httpx.Client(base_url=server.url, timeout=EDIT_TIMEOUT_S) as client:
        for _ in range(WARMUP_CHATS):
            chat(client)
        for number in range(edits):
            marker = f"reload-marker-{number}-{uuid.uuid4().hex[:8]}"
            model.expect(marker)
            start = time.perf_counter()
            (repo / AGENT_MD).write_text(with_marker(original, marker))
            chats = 0
            while model.seen_at is None:
                if time.perf_counter() - start > EDIT_TIMEOUT_S:
                    raise SystemExit(f"edit {number}: no turn saw it in {EDIT_TIMEOUT_S} s")
                sent = time.perf_counter()
                chat(client)
                result.chat_ms.append((time.perf_counter() - sent) * 1000)
                chats += 1
            done = time.perf_counter()
            seen = model.seen_at
            assert seen is not None
            result.seen_ms.append((seen - start) * 1000)
            result.done_ms.append((done - start) * 1000)
            result.chats_per_edit.append(chats)
        health = client.get("/health").json()
    if health["reload_error"] is not None:
        raise SystemExit(f"the server reports a reload error: {health['reload_error']}")
    return result


def _table(repo: str, load_ms: float, result: Result, edits: int) -> str:
    lines = [
        f"repo: {repo}; in-process load_repo median {load_ms:.1f} ms",
        f"{edits} edits of {AGENT_MD}, times in ms from just before the write",
        "",
        f"{'measurement':<28} {'median':>8} {'p95':>8} {'min':>8} {'max':>8}",
    ]
    rows = [
        ("model sees it", result.seen_ms),
        ("turn done (client)", result.done_ms),
        ("one polling chat", result.chat_ms),
    ]
    for label, samples in rows:
        summary = Result.summary(samples)
        lines.append(
            f"{label:<28} {summary['median_ms']:>8.1f} {summary['p95_ms']:>8.1f} "
            f"{summary['min_ms']:>8.1f} {summary['max_ms']:>8.1f}"
        )
    verdict = "met" if statistics.median(result.done_ms) < TARGET_MS else "MISSED"
    lines += [
        "",
        f"chats per edit: median {statistics.median(result.chats_per_edit):.0f}, "
        f"max {max(result.chats_per_edit)}",
        f"target: write to the first turn that sees it, median under {TARGET_MS:.0f} ms "
        f"(turn done): {verdict}",
        f"load average (1 min) {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.reload", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--edits", type=int, default=None, help=f"edits to time (default {DEFAULT_EDITS})"
    )
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_EDITS} edits")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--large", action="store_true", help="the generated 50-agent repo of bench.load"
    )
    args = parser.parse_args(argv)
    edits = args.edits or (QUICK_EDITS if args.quick else DEFAULT_EDITS)
    if edits < 1:
        parser.error("--edits must be at least 1")

    workdir = Path(tempfile.mkdtemp(prefix="amodal-bench-reload-"))
    repo = workdir / "repo"
    repo.mkdir()
    if args.large:
        from bench.load import generate_repo

        generate_repo(repo)
        described = "generated by bench.load (50 agents, 200 skills, 50 stores)"
    else:
        copy_example(repo)
        described = "the example repo"
    _pin(0, 0)
    model = MarkerModel()
    serving: ServeProcess | None = None
    try:
        load_ms = load_time_ms(repo)
        model.model.start()
        serving = server(repo, workdir / "data", model.model)
        serving.wait_ready()
        result = measure(repo, serving, model, edits)
        serving.stop()
        log = serving.output
    finally:
        if serving is not None:
            serving.stop()
        model.model.close()
        shutil.rmtree(workdir, ignore_errors=True)
    failed = [line for line in log.splitlines() if "reload_failed" in line]

    if args.json:
        report = {
            "benchmark": "reload",
            "edits": edits,
            "repo": described,
            "python": sys.version.split()[0],
            "load_average": os.getloadavg()[0],
            "load_repo_median_ms": round(load_ms, 2),
            "target_ms": TARGET_MS,
            "target_met": statistics.median(result.done_ms) < TARGET_MS,
            "results": {
                "model_sees_it": Result.summary(result.seen_ms),
                "turn_done": Result.summary(result.done_ms),
                "polling_chat": Result.summary(result.chat_ms),
            },
            "samples_ms": {
                "model_sees_it": [round(s, 2) for s in result.seen_ms],
                "turn_done": [round(s, 2) for s in result.done_ms],
            },
            "chats_per_edit": result.chats_per_edit,
            "reload_failed_lines": failed,
        }
        print(json.dumps(report, indent=2))
    else:
        print(_table(described, load_ms, result, edits))
        if failed:
            print(f"\n{len(failed)} reload_failed line(s) in the server's log:")
            print("\n".join(failed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
