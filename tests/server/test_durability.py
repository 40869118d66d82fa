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


def test_a_client_that_disconnects_mid_turn_leaves_a_valid_transcript(
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    scripted_model: ScriptedModel,
) -> None:
    repo = make_repo(
        {
            "tools/slow/tool.json": {"description": "Slow.", "timeout": 60},
            "tools/slow/handler.py": (
                "import anyio\n\nasync def handler(args, ctx):\n    await anyio.sleep(30)\n"
            ),
            "agents/default/agent.json": {"tools": ["slow"]},
        }
    )
    server = serve(repo, {}, "--no-reload")
    server.wait_ready()
    scripted_model.tool_call("slow", {}, id="call_slow")
    session_id = None
    with httpx.stream("POST", f"{server.url}/chat", json={"message": "go"}, timeout=30) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                session_id = event["session_id"]
                if event["type"] == "tool_call":
                    break  # the client goes away while the slow tool runs
    assert session_id is not None
    scripted_model.reply("fresh start")
    for _ in range(50):  # the server notices the disconnect and releases the session
        response = httpx.post(
            f"{server.url}/chat", json={"message": "again", "session_id": session_id}, timeout=30
        )
        if response.status_code != 409:
            break
        time.sleep(0.1)
    events = parse_sse(response.text)
    assert events[-1]["reason"] == "model_stop"
    messages = scripted_model.requests[-1].messages
    tool = next(m for m in messages if m["role"] == "tool")
    assert tool["tool_call_id"] == "call_slow" and "interrupted" in tool["content"]
    history = httpx.get(f"{server.url}/sessions/{session_id}").json()["events"]
    assert [e["reason"] for e in history if e["type"] == "done"] == ["cancelled", "model_stop"]
