"""A long session: 200 turns with 5,000-character tool results (SPEC 20, issue 23).

Starts the scripted model of `bench._model_server` in its own process, opens the
runtime in this one on a SQLite file, and runs one session of N turns, each a tool call
returning 5,000 characters and an answer, on a model whose window is 32,000 tokens. It
prints:

- whether every model call's input stayed inside the window (the endpoint's own count:
  the scripted server counts the characters it received, divided by four);
- the compactions, by stage;
- the runtime's CPU per turn at turn 10 and at turn N (medians of the five turns around
  each), and their ratio: rebuilding the view must not grow with the log; and the
  costliest five turns after turn 10 (the view grows between compactions and shrinks at
  a summary, so the turns just before a summary are the dearest);
- the same ratio measured side by side: turn 10 of a new session, then the long
  session's next turn, in alternation (load drifts over a run on a shared machine);
- how many messages the view holds at turn 10, at turn N and at its longest;
- one compaction's own CPU (a stub summariser: the model's call excluded).

    python -m bench.long_session            # 200 turns
    python -m bench.long_session --turns 50 --quick
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from bench._scenario import LONG_RESULT_CHARS

WINDOW = 32_000
ROUNDS = 9
ANSWER = 2_000


def write_repo(root: Path) -> Path:
    files: dict[str, Any] = {
        "amodal.json": {
            "name": "long",
            "version": "1",
            "models": {
                "main": {"model": "scripted", "contextWindow": WINDOW, "maxOutputTokens": ANSWER}
            },
        },
        "agents/default/AGENT.md": "You read pages for the person.\n",
        "agents/default/agent.json": {"tools": ["fetch"]},
        "tools/fetch/tool.json": {
            "description": "Fetch a page.",
            "parameters": {"type": "object", "properties": {"page": {"type": "integer"}}},
        },
        "tools/fetch/handler.py": (
            "async def handler(args, ctx):\n"
            f"    return 'page %d ' % args['page'] + 'w' * {LONG_RESULT_CHARS}\n"
        ),
    }
    for name, body in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body if isinstance(body, str) else json.dumps(body))
    return root


async def session(root: Path, url: str, turns: int) -> dict[str, Any]:
    import os

    from runtime import Runtime, events

    os.environ.update({"OPENAI_BASE_URL": url, "OPENAI_API_KEY": "bench", "MODEL_MAIN": "scripted"})
    cpu: list[float] = []
    inputs: list[int] = []
    stages: dict[str, int] = {}
    lengths: list[int] = []
    async with Runtime.open(root, database=str(root / "long.db")) as rt:
        session_id = None
        for number in range(turns):
            started = time.process_time()
            result = await rt.chat(f"read page {number}", session_id=session_id, operator=True)
            cpu.append(time.process_time() - started)
            assert result.reason == "model_stop", result.error
            session_id = result.session_id
            lengths.append(len(rt._services.views.get(session_id).items))
            for event in result.events:
                if isinstance(event, events.ModelUsage):
                    inputs.append(event.usage.input_tokens)
                elif isinstance(event, events.Compaction):
                    stages[event.stage] = stages.get(event.stage, 0) + 1
        assert session_id is not None
        fresh, long = await side_by_side(rt, session_id)
        own = await compaction_cpu(rt, session_id)
    return {
        "cpu": cpu,
        "inputs": inputs,
        "stages": stages,
        "lengths": lengths,
        "fresh": fresh,
        "long": long,
        "compaction_cpu": own,
    }


async def side_by_side(rt: Any, long_id: str) -> tuple[list[float], list[float]]:
    """Turn 10 of a new session and the next turn of the long one, in alternation: the
    same ratio as the run's, with the machine's load (shared, and it drifts over a run)
    weighing on both sides alike."""
    fresh: list[float] = []
    long: list[float] = []
    for _ in range(ROUNDS):
        session_id = None
        for number in range(10):
            started = time.process_time()
            result = await rt.chat(f"read page {number}", session_id=session_id, operator=True)
            spent = time.process_time() - started
            session_id = result.session_id
        fresh.append(spent)
        started = time.process_time()
        result = await rt.chat("read page 0", session_id=long_id, operator=True)
        long.append(time.process_time() - started)
        assert result.reason == "model_stop", result.error
    return fresh, long


async def compaction_cpu(rt: Any, session_id: str) -> float:
    """One summary compaction of the session's view with a summariser that answers at
    once: the compaction's own work (view, estimates, rendering, the log write)."""
    from runtime.engine.compaction import Compactor, Summariser
    from runtime.engine.log import append, wire_events
    from runtime.engine.view import SessionView
    from runtime.models.catalog import ModelCard
    from runtime.observe import NO_OBSERVERS
    from runtime.testing import FunctionModel

    view = SessionView(session_id)
    await view.catch_up(rt.storage)
    last = view.last_turn

    async def summariser() -> Summariser:
        model = FunctionModel(lambda messages, tools: "A record.")
        return Summariser(model, ModelCard(), NO_OBSERVERS, session_id, last.run_id, last.agent)

    async def record(entry: Any) -> Any:
        logged = await append(
            rt.storage, session_id, entry, run_id=last.run_id, agent=last.agent, bundle_version=None
        )
        view.add(logged)
        return wire_events(logged)

    compactor = Compactor(view, None, summariser, record, NO_OBSERVERS)
    started = time.process_time()
    done = await compactor.compact(0, summary=True)
    spent = time.process_time() - started
    assert done, "nothing to compact"
    return spent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.long_session")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="50 turns")
    args = parser.parse_args(argv)
    turns = 50 if args.quick else args.turns
    server = subprocess.Popen(
        [sys.executable, "-m", "bench._model_server", "--cpu", "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        urls = json.loads(server.stdout.readline())
        with tempfile.TemporaryDirectory(prefix="amodal-bench-long-") as folder:
            import os

            os.sched_setaffinity(0, {1})
            found = anyio.run(session, write_repo(Path(folder)), urls["long"], turns)
    finally:
        server.stdin.close()  # type: ignore[union-attr]
        server.wait()
    cpu = found["cpu"]
    early = statistics.median(cpu[7:12]) * 1000
    late = statistics.median(cpu[-5:]) * 1000
    room = WINDOW - ANSWER
    largest = max(found["inputs"])
    fit = "every call fit" if largest <= room else "OVER THE WINDOW"
    print(f"long session: {turns} turns, results of {LONG_RESULT_CHARS:,} characters")
    print(f"model calls: {len(found['inputs'])}, largest input {largest:,} tokens")
    print(f"  (window {WINDOW:,}, room {room:,}): {fit}")
    print(f"compactions: {found['stages']}")
    print(f"runtime CPU per turn: turn 10 {early:.2f} ms, turn {turns} {late:.2f} ms")
    print(f"  ratio {late / early:.2f}x (target under 1.2x)")
    stretches = [statistics.median(cpu[i : i + 5]) * 1000 for i in range(10, len(cpu) - 4)]
    if stretches:
        worst = max(stretches)
        print(f"  costliest five turns after turn 10: {worst:.2f} ms, {worst / early:.2f}x")
    fresh = statistics.median(found["fresh"]) * 1000
    long = statistics.median(found["long"]) * 1000
    print(
        f"  side by side ({ROUNDS} rounds of turn 10 of a new session, then turn {turns}+ of this"
        f" one): {fresh:.2f} ms, {long:.2f} ms, ratio {long / fresh:.2f}x"
    )
    # Another load only ever adds CPU time (cache misses, a shared core): the fastest of
    # each side is its cost with the least of it.
    fastest = min(found["long"]) / min(found["fresh"])
    print(f"  the fastest of each side: ratio {fastest:.2f}x")
    lengths = found["lengths"]
    print(
        f"view: {lengths[min(9, turns - 1)]} messages at turn 10, {lengths[-1]} at turn {turns},"
        f" at most {max(lengths)}"
    )
    spent = found["compaction_cpu"] * 1000
    print(f"one compaction's own CPU (summary stage, no model call): {spent:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
