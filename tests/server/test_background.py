"""Background turns over real HTTP and real worker processes (SPEC 23).

`POST /chat` with `"background": true` answers 202 {session_id, turn_id} at once; the
turn runs from the database's queue on a server that takes background work, or on an
`amodal worker`, and is followed with `GET /sessions/{id}/events`. Each queued turn runs
once, however many processes take work; bad requests are refused before anything is
queued.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime.testing import RecordedRequest, ScriptedModel, Step, reply, tool_call
from runtime.testing.server_process import WorkerProcess
from tests.server.conftest import ServeProcess
from tests.server.test_resume import follow_to_done

REPO: dict[str, Any] = {
    "agents/default/AGENT.md": "You work in the background.\n",
    "agents/default/agent.json": {"tools": ["note"]},
    "tools/note/tool.json": {
        "description": "Note the task.",
        "parameters": {"type": "object", "properties": {"task": {"type": "string"}}},
    },
    "tools/note/handler.py": (
        "import os, anyio\n\nasync def handler(args, ctx):\n"
        "    if args['task'].startswith('slow'):\n"
        "        await anyio.sleep(2)\n"
        "    with open(os.environ['NOTES_FILE'], 'a') as notes:\n"
        "        notes.write(args['task'] + '\\n')\n"
        "    return {'noted': args['task']}\n"
    ),
}


def note_then_answer(request: RecordedRequest) -> Step:
    last = request.messages[-1]
    if last["role"] == "user":
        return tool_call("note", {"task": last["content"]})
    return reply("Noted.")


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel() as scripted:
        scripted.respond(note_then_answer)
        yield scripted


@pytest.fixture
def env(model: ScriptedModel, tmp_path: Path, postgres_url: str) -> dict[str, str]:
    return {
        "OPENAI_BASE_URL": model.base_url,
        "MODEL_MAIN": "scripted",
        "NOTES_FILE": str(tmp_path / "notes.txt"),
        "DATABASE_URL": postgres_url,
        "AMODAL_LEASE_SECONDS": "2",
    }


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(repo: Path, env: dict[str, str], *args: str) -> WorkerProcess:
        worker = WorkerProcess(repo, {"AMODAL_DATA_DIR": str(tmp_path / "data"), **env}, *args)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


def queue(url: str, message: str, **body: Any) -> dict[str, Any]:
    response = httpx.post(
        f"{url}/chat", json={"message": message, "background": True, **body}, timeout=30
    )
    assert response.status_code == 202, response.text
    queued = response.json()
    assert set(queued) == {"session_id", "turn_id"}
    return queued  # type: ignore[no-any-return]


def notes(tmp_path: Path) -> list[str]:
    path = tmp_path / "notes.txt"
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.postgres
def test_a_background_chat_answers_202_at_once_and_runs_on_the_server(
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    env: dict[str, str],
    tmp_path: Path,
) -> None:
    server = serve(make_repo(REPO), env, "--no-reload")
    server.wait_ready()

    queued = queue(server.url, "water the plants")
    streamed = follow_to_done(server.url, queued["session_id"], "0", 60)

    assert streamed[0]["type"] == "session"
    assert streamed[0]["run_id"] == queued["turn_id"]
    assert streamed[-1]["reason"] == "model_stop"
    assert notes(tmp_path) == ["water the plants"]


@pytest.mark.postgres
def test_a_server_without_background_leaves_queued_turns_to_a_worker(
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    workers: Callable[..., WorkerProcess],
    env: dict[str, str],
    tmp_path: Path,
) -> None:
    repo = make_repo(REPO)
    server = serve(repo, env, "--no-reload", "--no-background")
    server.wait_ready()
    queued = queue(server.url, "file the report")
    time.sleep(1.5)
    assert notes(tmp_path) == []  # nobody took it
    session = httpx.get(f"{server.url}/sessions/{queued['session_id']}").json()
    assert session["events"] == []  # the session is there, its turn not begun

    workers(repo, env, "--no-reload").wait_ready()
    streamed = follow_to_done(server.url, queued["session_id"], "0", 60)

    assert streamed[-1]["reason"] == "model_stop"
    assert notes(tmp_path) == ["file the report"]


@pytest.mark.postgres
def test_two_workers_run_every_queued_turn_exactly_once(
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    workers: Callable[..., WorkerProcess],
    env: dict[str, str],
    tmp_path: Path,
) -> None:
    repo = make_repo(REPO)
    server = serve(repo, env, "--no-reload", "--no-background")
    two = [workers(repo, env, "--no-reload", "--concurrency", "2") for _ in range(2)]
    server.wait_ready()
    queued = [queue(server.url, f"task {i}") for i in range(12)]
    for worker in two:
        worker.wait_ready()

    for turn in queued:
        done = follow_to_done(server.url, turn["session_id"], "0", 90)[-1]
        assert done["reason"] == "model_stop", turn

    assert Counter(notes(tmp_path)) == Counter(f"task {i}" for i in range(12))


@pytest.mark.postgres
def test_a_background_turn_continues_a_session_after_its_chat_turn(
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    env: dict[str, str],
) -> None:
    server = serve(make_repo(REPO), env, "--no-reload")
    server.wait_ready()
    first = httpx.post(f"{server.url}/chat", json={"message": "first", "stream": False})
    session_id = first.json()["session_id"]

    queued = queue(server.url, "second", session_id=session_id)
    assert queued["session_id"] == session_id
    follow_to_done(server.url, session_id, "0", 60)

    session = httpx.get(f"{server.url}/sessions/{session_id}").json()
    users = [e["text"] for e in session["events"] if e["type"] == "user"]
    assert users == ["first", "second"]


@pytest.mark.postgres
def test_a_bad_background_request_is_refused_and_queues_nothing(
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    env: dict[str, str],
    tmp_path: Path,
) -> None:
    server = serve(make_repo(REPO), env, "--no-reload", "--no-background")
    server.wait_ready()
    url = f"{server.url}/chat"

    unknown_agent = httpx.post(url, json={"message": "x", "agent": "nobody", "background": True})
    unknown_session = httpx.post(
        url, json={"message": "x", "session_id": "nope", "background": True}
    )
    not_a_flag = httpx.post(url, json={"message": "x", "background": "yes"})
    empty = httpx.post(url, json={"message": "", "background": True})

    assert unknown_agent.status_code == 404, unknown_agent.text
    assert unknown_session.status_code == 404, unknown_session.text
    assert not_a_flag.status_code == 422 and empty.status_code == 422
    assert httpx.get(f"{server.url}/sessions").json()["sessions"] == []  # none was created


@pytest.mark.postgres
def test_a_worker_told_to_stop_finishes_the_turn_it_runs_and_takes_no_more(
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    workers: Callable[..., WorkerProcess],
    env: dict[str, str],
    tmp_path: Path,
) -> None:
    repo = make_repo(REPO)
    server = serve(repo, env, "--no-reload", "--no-background")
    worker = workers(repo, env, "--no-reload", "--concurrency", "1")
    server.wait_ready()
    worker.wait_ready()
    running = queue(server.url, "slow job")
    deadline = time.monotonic() + 60
    while not httpx.get(f"{server.url}/sessions/{running['session_id']}").json()["events"]:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    waiting = queue(server.url, "next job")

    worker.stop()  # SIGTERM: drain

    assert worker.process.returncode == 0, worker.output
    done = follow_to_done(server.url, running["session_id"], "0", 30)[-1]
    assert done["reason"] == "model_stop"
    assert notes(tmp_path) == ["slow job"]
    left = httpx.get(f"{server.url}/sessions/{waiting['session_id']}").json()
    assert left["events"] == []  # still queued, for the next worker
