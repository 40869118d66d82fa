"""`amodal serve` killed with SIGKILL at random points mid-turn, then started again (SPEC 12).

Each round kills the server while a turn runs (a slow model streaming, tool rounds, a
delegation, or an approved confirmation running), starts a new server on the same
database, and checks what must hold after any crash: every session reads; every
event a client saw is in the log, the same; no run is left `running`; the session
takes a new turn within the lease; a confirmed call never runs twice. The kill
points come from a seeded random generator (`AMODAL_CRASH_SEED`, printed on
failure); `AMODAL_CRASH_ROUNDS` runs more rounds than CI's bounded few.
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
