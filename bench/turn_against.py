"""Workload (a) of this tree against another checkout, side by side in one run (issue 21).

One turn with three sequential tool calls (four model calls), as `bench.peers` runs it,
on the same scripted model server, by `bench._worker` processes of each tree: several
processes per tree, so that no tree's figure rests on one process's luck (its memory
layout and hash seed move a process's speed by a few per cent, which a single pair of
processes reads as a difference between the trees), and every round visits every
process, in the reverse order on every other round, so drift on a shared machine falls
on both trees alike.

    python -m bench.turn_against /work/previous-main                 # 3 processes a tree, 6 rounds
    python -m bench.turn_against /work/previous-main --processes 4 --rounds 8
    python -m bench.turn_against /work/previous-main --json

Each tree runs its own `bench._worker` and `runtime` (PYTHONPATH and the working
directory set to the tree), on this interpreter, with bytecode cached. The model server
is this tree's, on CPU 0; the workers share CPU 1. It prints the CPU milliseconds a turn
(`time.process_time` over each batch, median and minimum over every batch of the tree)
and the ratios this / other.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parents[1]


def _environment(tree: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(tree)
    return env


@contextmanager
def _model_server() -> Iterator[str]:
    """This tree's scripted model servers; their URLs as the JSON line they print."""
    server = subprocess.Popen(
        [sys.executable, "-m", "bench._model_server", "--cpu", "0"],
        cwd=HERE,
        env=_environment(HERE),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdin is not None and server.stdout is not None
    try:
        yield server.stdout.readline().strip()
    finally:
        server.stdin.close()  # it serves until its stdin closes
        server.wait()


class Worker:
    """One `bench._worker` process of a tree, warmed up, answering one batch at a time."""

    def __init__(self, tree: Path, contender: str, urls: str) -> None:
        self.tree = tree
        self._process = subprocess.Popen(
            [sys.executable, "-m", "bench._worker", contender, "--urls", urls, "--cpu", "1"],
            cwd=tree,
            env=_environment(tree),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        if not self._answer().get("ready"):  # it warms up, then says so
            raise SystemExit(f"{self.tree}: the worker did not start")

    def _answer(self) -> dict[str, Any]:
        out: IO[str] | None = self._process.stdout
        assert out is not None
        line = out.readline()
        if not line:
            raise SystemExit(f"{self.tree}: the worker exited (code {self._process.wait()})")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise SystemExit(f"{self.tree}: {answer['error']}")
        return answer

    def cpu_ms_a_turn(self, turns: int) -> float:
        stdin = self._process.stdin
        assert stdin is not None
        stdin.write(json.dumps({"op": "turns", "n": turns}) + "\n")
        stdin.flush()
        return float(self._answer()["cpu_seconds"]) * 1000 / turns

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait()


def measure(
    trees: dict[str, Path], contender: str, processes: int, rounds: int, turns: int
) -> dict[str, list[float]]:
    """CPU ms a turn of every batch, by tree name."""
    batches: dict[str, list[float]] = {name: [] for name in trees}
    with _model_server() as urls:
        # Started alternately, so neither tree's processes are all the older ones.
        workers = [
            (name, Worker(tree, contender, urls))
            for _ in range(processes)
            for name, tree in trees.items()
        ]
        try:
            for round_ in range(rounds):
                for name, worker in workers if round_ % 2 == 0 else workers[::-1]:
                    batches[name].append(worker.cpu_ms_a_turn(turns))
        finally:
            for _, worker in workers:
                worker.close()
    return batches


def summary(batches: dict[str, list[float]]) -> dict[str, Any]:
    this, other = batches["this"], batches["other"]
    return {
        name: {"median": statistics.median(values), "min": min(values), "batches": values}
        for name, values in batches.items()
    } | {
        "ratio_median": statistics.median(this) / statistics.median(other),
        "ratio_min": min(this) / min(other),
    }


def _table(result: dict[str, Any], trees: dict[str, Path], processes: int, turns: int) -> str:
    lines = [
        f"workload (a), {processes} processes a tree, batches of {turns} turns; "
        "CPU ms a turn (median / min over every batch)",
        "",
    ]
    for name, tree in trees.items():
        row = result[name]
        lines.append(
            f"{name:6s} {row['median']:7.3f} / {row['min']:7.3f}   "
            f"({len(row['batches'])} batches)  {tree}"
        )
    lines += [
        "",
        f"this / other: {result['ratio_median']:.3f} (medians), "
        f"{result['ratio_min']:.3f} (minimums)",
        f"load average (1 min) {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.turn_against", description=__doc__)
    parser.add_argument("other", type=Path, help="the other checkout (a git worktree)")
    parser.add_argument("--processes", type=int, default=3, help="worker processes a tree")
    parser.add_argument("--rounds", type=int, default=6, help="batches each process runs")
    parser.add_argument("--turns", type=int, default=200, help="turns a batch")
    parser.add_argument("--contender", default="amodal", help="a name of bench._contenders")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args(argv)
    if not (args.other / "bench" / "_worker.py").is_file():
        parser.error(f"{args.other} has no bench/_worker.py: is it a checkout of this project?")
    trees = {"this": HERE, "other": args.other.resolve()}
    result = summary(measure(trees, args.contender, args.processes, args.rounds, args.turns))
    if args.json:
        print(json.dumps(result | {"load_average": os.getloadavg()[0]}))
    else:
        print(_table(result, trees, args.processes, args.turns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
