"""Workload (a) of this tree against another checkout, side by side in one run (issue 21).

One turn with three sequential tool calls (four model calls), as `bench.peers` runs it,
on the same scripted model server, by `bench._worker` processes of each tree: several
processes per tree, so that no tree's figure rests on one process's luck (its memory
layout and hash seed move a process's speed by a few per cent, which a single pair of
processes reads as a difference between the trees). A round runs one short batch on
every process, in the reverse order on every other round; the machine's speed drifts by
tens of per cent within seconds on a shared host, so the figure that counts is the ratio
within each round (this tree's batches against the other's, a fraction of a second
apart), and the median of those ratios over the run.

    python -m bench.turn_against /work/previous-main                 # 2 processes a tree
    python -m bench.turn_against /work/previous-main --processes 3 --rounds 300
    python -m bench.turn_against /work/previous-main --json

Each tree runs its own `bench._worker` and `runtime` (PYTHONPATH and the working
directory set to the tree), on this interpreter, with bytecode cached. The model server
is this tree's, as `bench.peers` runs it, on CPU 0; the workers share CPU 1. The
collector runs as it would (no collection forced between batches). It prints the CPU
milliseconds a turn (`time.process_time` over each batch: median and minimum over every
batch of the tree) and the ratios this / other: the median of the rounds' ratios, and
the ratio of the medians.
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
    answer = worker.ask(op="turns", n=turns, gc=False)
    return float(answer["cpu_seconds"]) * 1000 / turns


def measure(
    trees: dict[str, Path], contender: str, processes: int, rounds: int, turns: int
) -> list[dict[str, list[float]]]:
    """Each round's CPU ms a turn of every batch, by tree name."""
    cpus = Cpus()
    measured: list[dict[str, list[float]]] = []
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
                batches: dict[str, list[float]] = {name: [] for name in trees}
                for name, worker in workers if round_ % 2 == 0 else workers[::-1]:
                    batches[name].append(_cpu_ms_a_turn(worker, turns))
                measured.append(batches)
        finally:
            for _, worker in workers:
                worker.stop()
    return measured


def summary(rounds: list[dict[str, list[float]]]) -> dict[str, Any]:
    every = {name: [b for round_ in rounds for b in round_[name]] for name in rounds[0]}
    ratios = [statistics.mean(r["this"]) / statistics.mean(r["other"]) for r in rounds]
    half = len(ratios) // 2
    return {
        name: {"median": statistics.median(values), "min": min(values), "batches": values}
        for name, values in every.items()
    } | {
        "ratio": statistics.median(ratios),
        "ratio_halves": [statistics.median(ratios[:half]), statistics.median(ratios[half:])],
        "ratio_median": statistics.median(every["this"]) / statistics.median(every["other"]),
        "ratio_min": min(every["this"]) / min(every["other"]),
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
    first, second = result["ratio_halves"]
    lines += [
        "",
        f"this / other: {result['ratio']:.3f} (median of the rounds' ratios; "
        f"{first:.3f} in the first half of the run, {second:.3f} in the second)",
        f"              {result['ratio_median']:.3f} (ratio of the medians), "
        f"{result['ratio_min']:.3f} (of the minimums)",
        f"load average (1 min) {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.turn_against", description=__doc__)
    parser.add_argument("other", type=Path, help="the other checkout (a git worktree)")
    parser.add_argument("--processes", type=int, default=2, help="worker processes a tree")
    parser.add_argument("--rounds", type=int, default=200, help="batches each process runs")
    parser.add_argument("--turns", type=int, default=10, help="turns a batch")
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
