"""What the budget check costs (SPEC 22: at most 2% CPU on workload (a)).

Workload (a) of SPEC 13 (one turn with three sequential tool calls, four model calls) run
in process against the scripted model, on three runtimes over their own SQLite files:
no limits; the turn and session limits (tokens, dollars, seconds: checked in memory, the
session's earlier spend read once a turn); and every limit, the daily per-owner one
included (one read of the owner's day from the database before each model call). Every
runtime records each call's usage either way, so the difference is the check. Rounds
alternate between the three so drift on a shared machine falls on all; the table gives
the median process CPU per turn and its ratio to no limits.

    python -m bench.budget_check            # 8 rounds of 20 turns each
    python -m bench.budget_check --quick    # 3 rounds
    python -m bench.budget_check --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from bench import _scenario as s
from runtime.api import Runtime
from runtime.testing import ScriptedModel

ROUND_TURNS = 20
TARGET = 0.02
PRICE = {"input": 0.4, "output": 1.6}
TURN_LIMITS = {
    "maxTurnTokens": 10_000_000,
    "maxTurnCostUsd": 1_000,
    "maxTurnSeconds": 600,
    "maxSessionTokens": 10**12,
    "maxSessionCostUsd": 100_000,
}
CONFIGS: dict[str, dict[str, Any]] = {
    "no limits": {},
    "turn and session limits": TURN_LIMITS,
    "every limit (daily included)": {**TURN_LIMITS, "maxDailyCostUsdPerOwner": 100_000},
}


def write(root: Path, limits: dict[str, Any]) -> Path:
    repo = s.write_repo(root)
    config = json.loads((repo / "amodal.json").read_text())
    config["models"] = {"main": {"model": s.MODEL, "price": PRICE}}
    config["limits"] = limits
    (repo / "amodal.json").write_text(json.dumps(config, indent=2))
    return repo


async def measure(folder: Path, rounds: int) -> dict[str, dict[str, float]]:
    cpu: dict[str, list[float]] = {name: [] for name in CONFIGS}
    async with contextlib.AsyncExitStack() as stack:
        runtimes = {}
        for index, (name, limits) in enumerate(CONFIGS.items()):
            repo = write(folder / f"repo{index}", limits)
            runtimes[name] = await stack.enter_async_context(
                Runtime.open(repo, database=str(folder / f"db{index}.db"))
            )

        async def turns(runtime: Runtime, count: int) -> None:
            for _ in range(count):
                result = await runtime.chat(s.PROMPT, claims={"sub": "bench"})
                if result.reason != "model_stop":
                    raise RuntimeError(f"a turn ended {result.reason}: {result.error}")

        for runtime in runtimes.values():  # warm up
            await turns(runtime, 3)
        for index in range(rounds):
            order = list(runtimes) if index % 2 == 0 else list(reversed(runtimes))
            for name in order:
                before = time.process_time()
                await turns(runtimes[name], ROUND_TURNS)
                cpu[name].append((time.process_time() - before) / ROUND_TURNS)
    base = statistics.median(cpu["no limits"])
    return {
        name: {
            "cpu_ms_per_turn": statistics.median(values) * 1000,
            "ratio": statistics.median(values) / base,
        }
        for name, values in cpu.items()
    }


def run(rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder, ScriptedModel() as model:
        model.respond(s.answer_tools)
        os.environ["OPENAI_BASE_URL"] = model.base_url
        os.environ["OPENAI_API_KEY"] = s.API_KEY
        os.environ["MODEL_MAIN"] = s.MODEL
        rows = anyio.run(measure, Path(folder), rounds)
    return {"rows": rows, "target": 1 + TARGET, "load_average": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.budget_check")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="3 rounds")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args(argv)
    result = run(3 if args.quick else args.rounds)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{'workload (a), in process':<32}{'CPU ms/turn':>13}{'ratio':>8}")
    for name, row in result["rows"].items():
        print(f"{name:<32}{row['cpu_ms_per_turn']:>13.2f}{row['ratio']:>8.3f}")
    print(f"target: at most {result['target']:.2f}x; load average {result['load_average']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
