"""Two real `amodal serve` processes on one PostgreSQL database (SPEC 10; docs/deploy.md).

What a load balancer in front of several servers needs: any server continues any
session, resumes any pending confirmation, sees every store document, and one
session never runs two turns at once, whichever servers the requests reach.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg

from runtime.engine.resume import SWEEP_SECONDS
from runtime.testing import ScriptedModel
from tests.server.conftest import ServeProcess, parse_sse
from tests.server.test_durability import SLOW, follow, read_until_tool_call

REPO = {
    "tools/charge/tool.json": {"description": "Charge a card.", "confirm": True},
    "tools/charge/handler.py": "async def handler(args, ctx):\n    return {'charged': True}\n",
    "stores/cache.json": {
        "entity": {"name": "Entry", "key": "{id}", "schema": {"id": {"type": "string"}}},
        "ttl": 1,
    },
    "agents/default/agent.json": {"tools": ["charge"], "stores": {"cache": "rw"}},
}


def chat(server: ServeProcess, **body: Any) -> list[dict[str, Any]]:
    response = httpx.post(f"{server.url}/chat", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return parse_sse(response.text)


def two_servers(
    make_repo: Callable[..., Path], serve: Callable[..., ServeProcess], postgres_url: str
) -> tuple[ServeProcess, ServeProcess]:
    repo = make_repo(REPO)
    env = {
        "DATABASE_URL": postgres_url,
        "AMODAL_STORE_PURGE_SECONDS": "0.2",
        "MODEL_MAIN": "scripted",  # a model must be named to start; the fixtures pick the endpoint
    }
    first, second = serve(repo, env, "--no-reload"), serve(repo, env, "--no-reload")
    first.wait_ready()
    second.wait_ready()
    return first, second


def test_a_session_started_on_one_server_continues_on_the_other(
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    postgres_url: str,
    scripted_model: ScriptedModel,
) -> None:
    a, b = two_servers(make_repo, serve, postgres_url)
    scripted_model.reply("Noted.")
    session = chat(a, message="remember 42")[0]["session_id"]

    scripted_model.reply("You said 42.")
    events = chat(b, message="what did I say?", session_id=session)

    assert events[0]["created"] is False
    users = [m["content"] for m in scripted_model.requests[-1].messages if m["role"] == "user"]
    assert users == ["remember 42", "what did I say?"]
    history = httpx.get(f"{a.url}/sessions/{session}", timeout=10).json()
    replies = [e["text"] for e in history["events"] if e["type"] == "assistant"]
    assert replies == ["Noted.", "You said 42."]


def test_a_confirmation_left_pending_by_one_server_is_resumed_through_the_other(
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    postgres_url: str,
    scripted_model: ScriptedModel,
) -> None:
    a, b = two_servers(make_repo, serve, postgres_url)
    scripted_model.tool_call("charge", {}, id="call_1")
    paused = chat(a, message="charge it")
    assert paused[-1]["reason"] == "awaiting_confirmation"
    session = paused[0]["session_id"]

    scripted_model.reply("Charged.")
    resumed = httpx.post(
        f"{b.url}/sessions/{session}/confirmations/call_1", json={"approve": True}, timeout=30
    )
    again = httpx.post(
        f"{a.url}/sessions/{session}/confirmations/call_1", json={"approve": True}, timeout=30
    )

    events = parse_sse(resumed.text)
    assert next(e for e in events if e["type"] == "tool_result")["result"] == {"charged": True}
    assert events[-1]["reason"] == "model_stop"
    assert again.status_code == 404  # resumed once, by whichever server got it first


def test_two_turns_for_one_session_on_two_servers_at_once_give_one_409(
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    postgres_url: str,
    scripted_model: ScriptedModel,
) -> None:
    a, b = two_servers(make_repo, serve, postgres_url)
    scripted_model.reply("first")
    session = chat(a, message="one")[0]["session_id"]
    scripted_model.latency = 2.0  # the winner holds the session while the loser arrives
    scripted_model.reply("slow")
    statuses: list[int] = []
    start = threading.Barrier(2)

    def send(server: ServeProcess) -> None:
        start.wait()
        response = httpx.post(
            f"{server.url}/chat", json={"message": "two", "session_id": session}, timeout=30
        )
        statuses.append(response.status_code)
        if response.status_code == 409:
            assert response.json()["error"]["code"] == "session_busy"

    threads = [threading.Thread(target=send, args=(server,)) for server in (a, b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(statuses) == [200, 409]
    history = httpx.get(f"{b.url}/sessions/{session}", timeout=10).json()
    assert [e["text"] for e in history["events"] if e["type"] == "user"] == ["one", "two"]


def test_store_documents_are_shared_and_purged_by_the_servers(
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    postgres_url: str,
) -> None:
    a, b = two_servers(make_repo, serve, postgres_url)
    put = httpx.put(f"{a.url}/stores/cache/k1", json={"id": "k1"}, timeout=10)
    assert put.status_code == 200

    assert httpx.get(f"{b.url}/stores/cache/k1", timeout=10).json()["document"] == {"id": "k1"}

    deadline = time.monotonic() + 10
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        while time.monotonic() < deadline:
            row = connection.execute("SELECT count(*) FROM store_documents").fetchone()
            if row is not None and row[0] == 0:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the expired document was never purged")
    assert httpx.get(f"{b.url}/stores/cache/k1", timeout=10).status_code == 404


def test_a_turn_running_on_one_server_is_followed_live_from_the_other(
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    postgres_url: str,
    scripted_model: ScriptedModel,
) -> None:
    repo = make_repo(SLOW)
    env = {"DATABASE_URL": postgres_url, "MODEL_MAIN": "scripted"}
    a, b = serve(repo, env, "--no-reload"), serve(repo, env, "--no-reload")
    a.wait_ready()
    b.wait_ready()
    scripted_model.tool_call("slow", {}, id="call_slow").reply("Done, slowly.")
    first = read_until_tool_call(a.url, {"message": "go"})
    session_id = first[0]["session_id"]

    rest = follow(b.url, session_id, first[-1]["_id"])  # the turn still runs on a

    everything = follow(a.url, session_id, "0")
    assert first + rest == everything
    assert rest[-1]["type"] == "done" and rest[-1]["reason"] == "model_stop"


def test_workers_serve_one_port_and_still_run_one_turn_per_session(
    make_repo: Callable[..., Path], serve: Callable[..., ServeProcess]
) -> None:
    with ScriptedModel(latency=2.0) as slow:
        slow.respond(lambda request: "done")
        env = {"OPENAI_BASE_URL": slow.base_url, "MODEL_MAIN": "scripted"}
        server = serve(make_repo(), env, "--no-reload", "--workers", "2")
        server.wait_ready()
        _worker_processes(server)

        first = httpx.post(
            f"{server.url}/chat", json={"message": "one", "stream": False}, timeout=30
        )
        session = first.json()["session_id"]
        results: list[int] = []

        def turn() -> None:
            response = httpx.post(
                f"{server.url}/chat",
                json={"message": "again", "session_id": session, "stream": False},
                headers={"Connection": "close"},
                timeout=30,
            )
            results.append(response.status_code)

        threads = [threading.Thread(target=turn) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(results) == [200] + [409] * 5


def _workers_server(
    make_repo: Callable[..., Path], serve: Callable[..., ServeProcess], *args: str
) -> ServeProcess:
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "MODEL_MAIN": "scripted"}
    return serve(make_repo(), env, "--no-reload", "--workers", "2", *args)


def _worker_processes(server: ServeProcess) -> set[int]:
    """The pids of a two-worker server's workers, once both answer (the second may still be
    starting when the first does: the deadline bounds a busy machine's start-up)."""
    answered: set[int] = set()
    deadline = time.monotonic() + 120
    while len(answered) < 2 and time.monotonic() < deadline:
        # A new connection each time: any worker may take it.
        response = httpx.get(f"{server.url}/health", headers={"Connection": "close"})
        answered.add(response.json()["process"])
    assert len(answered) == 2 and server.pid not in answered
    return answered


def _answering_process(connection: socket.socket) -> int:
    with connection:
        connection.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        response = b"".join(iter(lambda: connection.recv(65536), b""))
    return int(json.loads(response.split(b"\r\n\r\n", 1)[1])["process"])


def test_workers_share_a_burst_of_new_connections(
    make_repo: Callable[..., Path], serve: Callable[..., ServeProcess]
) -> None:
    # Each worker listens on a socket of its own (SO_REUSEPORT): the kernel spreads new
    # connections over them, where on one shared socket the first to wake takes them all.
    server = _workers_server(make_repo, serve)
    server.wait_ready()
    _worker_processes(server)  # both listen
    opened = [socket.create_connection(("127.0.0.1", server.port or 0)) for _ in range(40)]
    shares = Counter(_answering_process(connection) for connection in opened)
    assert len(shares) == 2 and server.pid not in shares
    assert min(shares.values()) >= 8, shares  # an even split is 20 each; 8 is 4 sd below


def _gone(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status  # a zombie serves nothing


def test_workers_stop_when_their_server_is_killed(
    make_repo: Callable[..., Path], serve: Callable[..., ServeProcess]
) -> None:
    server = _workers_server(make_repo, serve)
    server.wait_ready()
    workers = _worker_processes(server)

    os.kill(server.pid, signal.SIGKILL)
    server.wait(timeout=10)
    deadline = time.monotonic() + 15
    while not all(_gone(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(_gone(pid) for pid in workers), "orphaned workers still serve the port"
    try:
        socket.create_connection(("127.0.0.1", server.port or 0), timeout=2).close()
    except ConnectionRefusedError:
        pass
    else:
        raise AssertionError("something still listens on the killed server's port")


def test_workers_on_a_taken_port_exit_1_naming_it(
    make_repo: Callable[..., Path], serve: Callable[..., ServeProcess]
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        server = _workers_server(make_repo, serve, "--port", str(port))
        assert server.wait(timeout=60) == 1
    assert f"could not serve on 127.0.0.1:{port}" in server.output
    assert "in use" in server.output


def test_workers_restart_on_the_port_a_server_just_left(
    make_repo: Callable[..., Path], serve: Callable[..., ServeProcess]
) -> None:
    # The server closes each `Connection: close` request first, which leaves the port's
    # connections in TIME_WAIT for a minute after it stops.
    first = serve(make_repo(), {"MODEL_MAIN": "scripted"}, "--no-reload")
    first.wait_ready()
    port = first.port or 0
    for _ in range(5):
        httpx.get(f"{first.url}/health", headers={"Connection": "close"})
    first.stop()

    again = _workers_server(make_repo, serve, "--port", str(port))
    again.wait_ready()
    assert again.port == port
    _worker_processes(again)


def test_a_killed_servers_turn_is_continued_on_a_fresh_server_within_the_lease_and_a_sweep(
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    postgres_url: str,
    scripted_model: ScriptedModel,
) -> None:
    """The promise is measured from the dead holder's last heartbeat: the lease lapses then,
    a server that never ran a turn continues the dead turn at its next sweep (SPEC 23;
    its model client was loaded when it started, not on this first turn), and the session
    then takes a new turn."""
    lease = 3.0
    repo = make_repo(SLOW)
    env = {"DATABASE_URL": postgres_url, "MODEL_MAIN": "scripted", "AMODAL_LEASE_SECONDS": "3"}
    a, b = serve(repo, env, "--no-reload"), serve(repo, env, "--no-reload")
    a.wait_ready()
    b.wait_ready()
    scripted_model.tool_call("slow", {}, id="call_slow")
    session_id = read_until_tool_call(a.url, {"message": "go"})[0]["session_id"]
    a.process.kill()  # in the slow tool: its model is never called again
    a.process.wait()
    with psycopg.connect(postgres_url) as connection:
        (expires,) = connection.execute(
            "SELECT extract(epoch FROM expires_at) FROM turn_leases WHERE session_id = %s",
            (session_id,),
        ).fetchone() or (None,)
    assert expires is not None
    last_heartbeat = float(expires) - lease
    scripted_model.reply("Taken over.").reply("Again.")
    while True:
        with httpx.stream(
            "POST", f"{b.url}/chat", json={"message": "again", "session_id": session_id}
        ) as response:
            if response.status_code != 409:
                assert response.status_code == 200
                assert '"reason":"model_stop"' in response.read().decode()
                answered = time.time()  # the new turn ran whole: its model answers at once
                continued = httpx.get(f"{b.url}/sessions/{session_id}/events").text
                break
        time.sleep(0.05)
    assert '"reason":"error"' not in continued  # the dead turn ended model_stop, continued
    assert continued.count('"type":"done"') == 2
    # The lease, at most one sweep's wait, then two short turns (the continuation, the new
    # one) and a few polls, 0.75 s each as before; the model SDK's import (1-3 s on a busy
    # machine) is paid when a server starts, not by the first turn it takes over.
    assert answered - last_heartbeat <= lease + min(SWEEP_SECONDS, lease / 2) + 2 * 0.75
