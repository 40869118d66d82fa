"""Processes killed with SIGKILL at random points mid-turn (SPEC 12, 23).

The first test kills `amodal serve` while a turn runs (a slow model streaming, tool
rounds, a delegation, or an approved confirmation running), starts a new server on the
same database, and checks what must hold after any crash: every session reads; every
event a client saw is in the log, the same; the killed turn is continued to its end;
no run is left `running`; the session takes a new turn; a confirmed call never runs
twice. The second kills `amodal worker`s while they drain queued background turns (two
workers at a time, a replacement started after each kill) and checks that no turn is
lost, no event is duplicated and no non-idempotent tool runs twice. The kill points
come from a seeded random generator (`AMODAL_CRASH_SEED`, printed on failure);
`AMODAL_CRASH_ROUNDS` runs more rounds than CI's bounded few.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime.testing import RecordedRequest, ScriptedModel, Step, reply, tool_call
from runtime.testing.server_process import WorkerProcess
from tests.server.conftest import ServeProcess

LEASE_SECONDS = 2.0
ROUNDS = int(os.environ.get("AMODAL_CRASH_ROUNDS", "3"))
SEED = int(os.environ.get("AMODAL_CRASH_SEED", str(random.SystemRandom().randrange(10**6))))

REPO: dict[str, Any] = {
    "agents/default/AGENT.md": "You lead.\n",
    "agents/default/agent.json": {"tools": ["slow", "charge"], "subagents": ["helper"]},
    "agents/helper/AGENT.md": "You help.\n",
    "tools/slow/tool.json": {"description": "Slow."},
    "tools/slow/handler.py": (
        "import anyio\n\nasync def handler(args, ctx):\n"
        "    await anyio.sleep(0.3)\n    return {'slept': True}\n"
    ),
    "tools/charge/tool.json": {"description": "Charge a card.", "confirm": True},
    "tools/charge/handler.py": (
        "import os, anyio\n\nasync def handler(args, ctx):\n"
        "    with open(os.environ['CHARGES_FILE'], 'a') as charges:\n"
        "        charges.write(args.get('order', '?') + '\\n')\n"
        "    await anyio.sleep(0.3)\n    return {'charged': True}\n"
    ),
}


def answer(request: RecordedRequest) -> Step:
    """Deterministic answers, so a restarted server finds the same model."""
    if "You help." in (request.system or ""):
        return reply("Here is my part of the work, in several words.")
    last = request.messages[-1]
    if last["role"] == "user":
        if last["content"].startswith("charge"):
            return tool_call("charge", {"order": last["content"]})
        return tool_call("slow", {})
    if last["role"] == "tool":
        called = {
            call["id"]: call["function"]["name"]
            for message in request.messages
            if message["role"] == "assistant"
            for call in message.get("tool_calls") or ()
        }
        if called.get(last["tool_call_id"]) == "slow":
            return tool_call("call_subagent", {"calls": [{"subagent": "helper", "task": "t"}]})
    return reply("All done now, and that is the whole answer.")


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel(stream_delay=0.03) as scripted:
        scripted.respond(answer)
        yield scripted


def stream_in_background(
    url: str, body: dict[str, Any]
) -> tuple[list[dict[str, Any]], threading.Thread]:
    """POST a streamed request in a thread; the events it saw (with `_id`) grow as they come."""
    seen: list[dict[str, Any]] = []

    def read() -> None:
        event_id = ""
        try:
            with httpx.stream(
                "POST", f"{url}{body.pop('_path', '/chat')}", json=body, timeout=30
            ) as response:
                for line in response.iter_lines():
                    if line.startswith("id: "):
                        event_id = line[4:]
                    elif line.startswith("data: "):
                        seen.append({**json.loads(line[6:]), "_id": event_id})
        except httpx.HTTPError:
            pass  # the server died under us: that is the point

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return seen, thread


def log(url: str, session_id: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{url}/sessions/{session_id}/events", params={"after": "0"}, timeout=30)
    assert response.status_code == 200, response.text
    found = []
    for frame in response.text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.splitlines())
        found.append({**json.loads(lines["data"]), "_id": lines["id"]})
    return found


def new_turn_within(url: str, session_id: str, seconds: float) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        response = httpx.post(
            f"{url}/chat",
            json={"message": "after the crash", "session_id": session_id, "stream": False},
            timeout=30,
        )
        if response.status_code != 409 or time.monotonic() > deadline:
            assert response.status_code == 200, response.text
            return response.json()  # type: ignore[no-any-return]
        time.sleep(0.2)


def started(serve: Callable[..., ServeProcess], repo: Path, env: dict[str, str]) -> ServeProcess:
    """A server that has answered one turn: the model client is loaded, so the kill points
    fall in the turn's own work (model calls, tools, specialists), not in start-up."""
    server = serve(repo, env, "--no-reload")
    server.wait_ready()
    warm = httpx.post(
        f"{server.url}/chat", json={"message": "warm up", "stream": False}, timeout=60
    )
    assert warm.status_code == 200, warm.text
    return server


def kill(server: ServeProcess) -> None:
    os.kill(server.process.pid, signal.SIGKILL)
    server.process.wait()


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_a_server_killed_mid_turn_loses_nothing_committed_and_frees_its_sessions(
    database: str,
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    model: ScriptedModel,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    rng = random.Random(SEED)
    charges = tmp_path / "charges.txt"
    env = {
        "OPENAI_BASE_URL": model.base_url,
        "MODEL_MAIN": "scripted",
        "AMODAL_LEASE_SECONDS": str(LEASE_SECONDS),
        "CHARGES_FILE": str(charges),
    }
    if database == "postgres":
        env["DATABASE_URL"] = request.getfixturevalue("postgres_url")
    repo = make_repo(REPO)
    server = started(serve, repo, env)
    for round_number in range(ROUNDS):
        where = f"seed {SEED}, round {round_number} ({database})"
        confirming = round_number % 3 == 2
        if confirming:  # a turn that waits for a person, then an approval killed mid-run
            order = f"charge order-{round_number}"
            paused = httpx.post(
                f"{server.url}/chat", json={"message": order, "stream": False}
            ).json()
            session_id = paused["session_id"]
            call_id = next(e for e in paused["events"] if e["type"] == "confirmation_required")[
                "call_id"
            ]
            body = {"approve": True, "_path": f"/sessions/{session_id}/confirmations/{call_id}"}
            seen, thread = stream_in_background(server.url, body)
            time.sleep(rng.uniform(0.0, 0.5))
        else:
            seen, thread = stream_in_background(server.url, {"message": "go"})
            time.sleep(rng.uniform(0.05, 1.5))
        kill(server)
        thread.join(timeout=10)
        server = started(serve, repo, env)
        if not seen:
            continue  # killed before the first event: nothing was promised
        session_id = seen[0]["session_id"]
        # Every event the client saw is in the log, exactly as it was streamed.
        logged = {event["_id"]: event for event in log(server.url, session_id)}
        for event in seen:
            assert logged.get(event["_id"]) == event, (where, event)
        after = new_turn_within(server.url, session_id, LEASE_SECONDS + 10)
        # The killed turn was continued to its end by the new server (SPEC 23), not cut off.
        ends = [e for e in log(server.url, session_id) if e["type"] == "done"]
        assert len(ends) == 3 if confirming else 2, (where, ends)
        assert all(e["reason"] == "model_stop" for e in ends[-2:]), (where, ends)
        assert after["done_reason"] == "model_stop", where
        runs = httpx.get(f"{server.url}/sessions/{session_id}/runs").json()
        assert runs["summary"]["running"] == 0, where

        def statuses(nodes: list[dict[str, Any]]) -> list[str]:
            return [s for n in nodes for s in [n["status"], *statuses(n["children"])]]

        assert "running" not in statuses(runs["runs"]), (where, runs)
        if confirming:
            ran = charges.read_text().splitlines().count(order) if charges.exists() else 0
            assert ran <= 1, (where, ran)
            again = httpx.post(
                f"{server.url}/sessions/{session_id}/confirmations/{call_id}",
                json={"approve": True},
            )
            assert again.status_code == 404, where  # never twice


STEP_HANDLER = (
    "import json, os, anyio\n\nasync def handler(args, ctx):\n"
    "    with open(os.environ['EFFECTS_FILE'], 'a') as effects:\n"
    "        effects.write(json.dumps([ctx.session_id, args['n']]) + '\\n')\n"
    "    await anyio.sleep(0.25)\n    return {'done': args['n']}\n"
)
BACKGROUND_REPO: dict[str, Any] = {
    "agents/default/AGENT.md": "You work step by step.\n",
    "agents/default/agent.json": {"tools": ["step"]},
    "tools/step/tool.json": {
        "description": "Do a step (not idempotent).",
        "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
    },
    "tools/step/handler.py": STEP_HANDLER,
}
BACKGROUND_TURNS = 8
BACKGROUND_KILLS = 2
BACKGROUND_STEPS = 3


def three_steps(request: RecordedRequest) -> Step:
    messages = request.messages
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    results = sum(1 for m in messages[last_user:] if m["role"] == "tool")
    if results >= BACKGROUND_STEPS:
        return reply("Three steps done.")
    return tool_call("step", {"n": results + 1})


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_workers_killed_mid_queue_lose_no_background_turn_and_run_no_step_twice(
    database: str,
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    rng = random.Random(SEED)
    effects = tmp_path / "effects.jsonl"
    started_workers: list[WorkerProcess] = []
    with ScriptedModel(stream_delay=0.01) as scripted:
        scripted.respond(three_steps)
        env = {
            "OPENAI_BASE_URL": scripted.base_url,
            "MODEL_MAIN": "scripted",
            "AMODAL_LEASE_SECONDS": str(LEASE_SECONDS),
            "EFFECTS_FILE": str(effects),
            "AMODAL_DATA_DIR": str(tmp_path / "data"),
        }
        if database == "postgres":
            env["DATABASE_URL"] = request.getfixturevalue("postgres_url")
        repo = make_repo(BACKGROUND_REPO)

        def worker() -> WorkerProcess:
            started_workers.append(WorkerProcess(repo, env, "--no-reload", "--concurrency", "2"))
            return started_workers[-1]

        try:
            front = serve(repo, env, "--no-reload", "--no-background")
            working = [worker(), worker()]
            front.wait_ready()
            queued = [
                httpx.post(
                    f"{front.url}/chat",
                    json={"message": f"job {i}", "background": True},
                    timeout=30,
                ).json()
                for i in range(BACKGROUND_TURNS)
            ]
            for each in working:
                each.wait_ready()
            for _ in range(BACKGROUND_KILLS):
                time.sleep(rng.uniform(0.3, 2.0))
                victim = working.pop(rng.randrange(len(working)))
                os.kill(victim.process.pid, signal.SIGKILL)
                victim.process.wait()
                working.append(worker())
                working[-1].wait_ready()
            where = f"seed {SEED} ({database})"
            ran: dict[tuple[str, int], int] = {}
            for line in _wait_for_every_turn(front.url, queued, where, effects):
                key = (line[0], line[1])
                ran[key] = ran.get(key, 0) + 1
            assert all(count == 1 for count in ran.values()), (where, ran)  # never twice
        finally:
            for each in started_workers:
                each.stop()


def _wait_for_every_turn(
    url: str, queued: list[dict[str, Any]], where: str, effects: Path
) -> list[list[Any]]:
    """Until every queued turn has ended; checks each one's log, returns the side effects."""
    deadline = time.monotonic() + 120
    for turn in queued:
        while not _ended(url, turn):
            assert time.monotonic() < deadline, (where, turn)
            time.sleep(0.3)
        events = log(url, turn["session_id"])
        ends = [e for e in events if e["type"] == "done" and e["run_id"] == turn["turn_id"]]
        ids = [e["_id"] for e in events]
        assert len(ids) == len(set(ids)), (where, ids)  # no event twice
        assert len(ends) == 1 and ends[0]["reason"] == "model_stop", (where, ends)
        starts = [e for e in events if e["type"] == "session"]
        assert [e["run_id"] for e in starts] == [turn["turn_id"]], (where, starts)  # ran once
        results = [e for e in events if e["type"] == "tool_result"]
        assert len(results) == BACKGROUND_STEPS, (where, results)
    lines = [json.loads(line) for line in effects.read_text().splitlines()]
    # Every step the log records as done ran (its side effect is there).
    for turn in queued:
        events = log(url, turn["session_id"])
        for n, result in enumerate((e for e in events if e["type"] == "tool_result"), 1):
            if result["status"] == "ok":
                assert [turn["session_id"], n] in lines, (where, turn, n)
    return lines


def _ended(url: str, turn: dict[str, Any]) -> bool:
    """Whether the turn's `done` is in its session's log (read without following it)."""
    session = httpx.get(f"{url}/sessions/{turn['session_id']}", timeout=30).json()
    return any(e["type"] == "done" and e["run_id"] == turn["turn_id"] for e in session["events"])
