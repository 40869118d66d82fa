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
is this tree's, as `bench.peers` runs it, on CPU 0; the workers share CPU 1. It prints
the CPU milliseconds a turn (`time.process_time` over each batch, median and minimum
over every batch of the tree) and the ratios this / other.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from bench.peers import Cpus, Worker, model_servers

HERE = Path(__file__).resolve().parents[1]


def _cpu_ms_a_turn(worker: Worker, turns: int) -> float:
    return float(worker.ask(op="turns", n=turns)["cpu_seconds"]) * 1000 / turns


def measure(
    trees: dict[str, Path], contender: str, processes: int, rounds: int, turns: int
) -> dict[str, list[float]]:
    """CPU ms a turn of every batch, by tree name."""
    batches: dict[str, list[float]] = {name: [] for name in trees}
    cpus = Cpus()
    with model_servers(cpus) as (urls, _):
        # Started alternately, so neither tree's processes are all the older ones.
        workers = [
            (name, Worker(contender, urls, cpus.client, sys.stderr, tree=tree))
            for _ in range(processes)
            for name, tree in trees.items()
        ]
        try:
            for _, worker in workers:
                worker.ready = worker.read()  # warmed up
            for round_ in range(rounds):
                for name, worker in workers if round_ % 2 == 0 else workers[::-1]:
                    batches[name].append(_cpu_ms_a_turn(worker, turns))
        finally:
            for _, worker in workers:
                worker.stop()
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
