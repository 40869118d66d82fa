"""What survives: a real `amodal serve` process stopped and started again, and cancelled turns."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from runtime.testing import ScriptedModel
from tests.server.conftest import ServeProcess, parse_sse

TOOLS = {
    "tools/charge/tool.json": {"description": "Charge a card.", "confirm": True},
    "tools/charge/handler.py": "async def handler(args, ctx):\n    return {'charged': True}\n",
    "agents/default/agent.json": {"tools": ["charge"]},
}


def chat(server: ServeProcess, **body: Any) -> list[dict[str, Any]]:
    response = httpx.post(f"{server.url}/chat", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return parse_sse(response.text)


def test_a_restarted_server_continues_sessions_and_resumes_pending_confirmations(
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    scripted_model: ScriptedModel,
) -> None:
    repo = make_repo(TOOLS)
    first = serve(repo, {}, "--no-reload")
    first.wait_ready()
    scripted_model.reply("Noted.")
    session = chat(first, message="remember 42")[0]["session_id"]
    scripted_model.tool_call("charge", {}, id="call_1")
    paused = chat(first, message="charge it", session_id=session)
    assert paused[-1]["reason"] == "awaiting_confirmation"
    first.stop()

    second = serve(repo, {}, "--no-reload")
    second.wait_ready()
    history = httpx.get(f"{second.url}/sessions/{session}").json()
    assert [e["text"] for e in history["events"] if e["type"] == "user"] == [
        "remember 42",
        "charge it",
    ]
    scripted_model.reply("Charged.")
    resumed = httpx.post(
        f"{second.url}/sessions/{session}/confirmations/call_1",
        json={"approve": True},
        timeout=30,
    )
    events = parse_sse(resumed.text)
    assert next(e for e in events if e["type"] == "tool_result")["result"] == {"charged": True}
    assert events[-1]["reason"] == "model_stop"
    messages = scripted_model.requests[-1].messages
    assert [m["content"] for m in messages if m["role"] == "user"] == ["remember 42", "charge it"]
    again = httpx.post(
        f"{second.url}/sessions/{session}/confirmations/call_1", json={"approve": True}
    )
    assert again.status_code == 404  # approved once, run once


SLOW = {
    "tools/slow/tool.json": {"description": "Slow.", "timeout": 60},
    "tools/slow/handler.py": (
        "import anyio\n\nasync def handler(args, ctx):\n    await anyio.sleep(1.5)\n"
        "    return {'slept': True}\n"
    ),
    "agents/default/agent.json": {"tools": ["slow"]},
}


def read_until_tool_call(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """Stream a chat, and go away (close the connection) at its first tool call; the events
    seen, each with its SSE id as `_id`."""
    seen: list[dict[str, Any]] = []
    with httpx.stream("POST", f"{url}/chat", json=body, timeout=30) as response:
        event_id = ""
        for line in response.iter_lines():
            if line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("data: "):
                seen.append({**json.loads(line[6:]), "_id": event_id})
                if seen[-1]["type"] == "tool_call":
                    break
    return seen


def follow(url: str, session_id: str, last_id: str) -> list[dict[str, Any]]:
    """Reconnect as EventSource does: the events after `Last-Event-ID`, until the stream ends."""
    response = httpx.get(
        f"{url}/sessions/{session_id}/events", headers={"Last-Event-ID": last_id}, timeout=30
    )
    assert response.status_code == 200, response.text
    return [{**event, "_id": event_id} for event_id, event in parse_sse_with_ids(response.text)]


def parse_sse_with_ids(text: str) -> list[tuple[str, dict[str, Any]]]:
    frames = []
    for frame in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.splitlines())
        frames.append((lines["id"], json.loads(lines["data"])))
    return frames


def test_a_client_that_loses_its_stream_reconnects_and_sees_every_event_once(
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    scripted_model: ScriptedModel,
) -> None:
    server = serve(make_repo(SLOW), {}, "--no-reload")
    server.wait_ready()
    scripted_model.tool_call("slow", {}, id="call_slow").reply("Done, slowly.")
    first = read_until_tool_call(server.url, {"message": "go"})
    session_id = first[0]["session_id"]
    # The turn belongs to the session, not to the connection: it is still running.
    busy = httpx.post(f"{server.url}/chat", json={"message": "x", "session_id": session_id})
    assert busy.status_code == 409

    rest = follow(server.url, session_id, first[-1]["_id"])

    everything = follow(server.url, session_id, "0")  # the whole log, replayed
    assert [e["_id"] for e in first + rest] == [e["_id"] for e in everything]
    assert first + rest == everything
    assert [e["type"] for e in rest][-3:] == ["text_delta", "usage", "done"]
    assert rest[0]["type"] == "tool_result" and rest[0]["result"] == {"slept": True}
    assert rest[-1]["reason"] == "model_stop"
    scripted_model.reply("And again.")
    assert (
        parse_sse(
            httpx.post(
                f"{server.url}/chat", json={"message": "more", "session_id": session_id}, timeout=30
            ).text
        )[-1]["reason"]
        == "model_stop"
    )


def test_an_event_id_that_is_not_one_is_refused(
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    scripted_model: ScriptedModel,
) -> None:
    server = serve(make_repo(), {}, "--no-reload")
    server.wait_ready()
    scripted_model.reply("hi")
    session_id = parse_sse(httpx.post(f"{server.url}/chat", json={"message": "hi"}).text)[0][
        "session_id"
    ]
    for bad in ("x", "-1", "3:y", "1:2:3", "99999999999999999999999:1x"):
        response = httpx.get(f"{server.url}/sessions/{session_id}/events", params={"after": bad})
        assert response.status_code == 422, (bad, response.text)
        assert response.json()["error"]["code"] == "invalid_event_id"
    unknown = httpx.get(f"{server.url}/sessions/nope/events")
    assert unknown.status_code == 404


def test_a_turn_keeps_its_session_while_its_model_is_silent_for_longer_than_a_lease(
    make_repo: Callable[..., Path], serve: Callable[..., ServeProcess]
) -> None:
    lease = 1.0
    with ScriptedModel(latency=4 * lease) as silent:  # nothing streams for four leases
        silent.reply("Finally.").reply("Second.")
        env = {
            "OPENAI_BASE_URL": silent.base_url,
            "MODEL_MAIN": "scripted",
            "AMODAL_LEASE_SECONDS": str(lease),
        }
        server = serve(make_repo(), env, "--no-reload")
        server.wait_ready()
        with httpx.stream(
            "POST", f"{server.url}/chat", json={"message": "one"}, timeout=30
        ) as turn:
            lines = turn.iter_lines()
            session_id = next(json.loads(x[6:]) for x in lines if x.startswith("data: "))[
                "session_id"
            ]
            time.sleep(2.5 * lease)  # the model is still silent
            second = httpx.post(
                f"{server.url}/chat", json={"message": "two", "session_id": session_id}
            )
            assert second.status_code == 409, second.text
            rest = [json.loads(x[6:]) for x in lines if x.startswith("data: ")]
        assert rest[-1]["type"] == "done" and rest[-1]["reason"] == "model_stop"
        history = httpx.get(f"{server.url}/sessions/{session_id}").json()["events"]
        assert [e["text"] for e in history if e["type"] == "user"] == ["one"]
        assert len(silent.requests) == 1 and silent.pending == 1  # "two" never reached it
