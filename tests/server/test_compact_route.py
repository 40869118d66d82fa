"""POST /sessions/{id}/compact (SPEC 20) on a real `amodal serve`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from runtime.testing import ScriptedModel
from tests.test_compaction import desk, repo


def test_a_compaction_over_http_is_refused_while_a_turn_runs(
    make_repo: Callable[..., Path], serve: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    files = repo(100)
    files["tools/fetch/handler.py"] = (
        "import anyio\n\nasync def handler(args, ctx):\n    await anyio.sleep(2)\n    return 'x'\n"
    )
    server = serve(make_repo(files), {"MODEL_MAIN": "scripted"}, "--no-reload")
    server.wait_ready()
    scripted_model.respond(desk())
    with httpx.stream("POST", f"{server.url}/chat", json={"message": "read page 1"}) as running:
        lines = running.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        session_id = json.loads(first[6:])["session_id"]
        busy = httpx.post(f"{server.url}/sessions/{session_id}/compact", json={})
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "session_busy"
        for _ in lines:  # the turn to its end
            pass
    free = httpx.post(f"{server.url}/sessions/{session_id}/compact", json={"focus": "pages"})
    assert free.status_code == 200 and free.json() == {"compaction": None}  # one turn: all recent
    bad = httpx.post(f"{server.url}/sessions/{session_id}/compact", json={"focus": 3})
    assert bad.status_code == 422


def test_a_compaction_over_http_is_the_event_and_is_counted_in_metrics(
    make_repo: Callable[..., Path], serve: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    server = serve(make_repo(repo(1_900)), {"MODEL_MAIN": "scripted"}, "--no-reload")
    server.wait_ready()
    scripted_model.respond(desk())
    session_id = None
    for number in range(1, 4):
        body: dict[str, Any] = {"message": f"read page {number}", "stream": False}
        if session_id is not None:
            body["session_id"] = session_id
        turn = httpx.post(f"{server.url}/chat", json=body, timeout=30)
        session_id = turn.json()["session_id"]
    compacted = httpx.post(
        f"{server.url}/sessions/{session_id}/compact", json={"focus": "page numbers"}
    )
    assert compacted.status_code == 200, compacted.text
    event = compacted.json()["compaction"]
    assert event["type"] == "compaction" and event["stage"] == "summary"
    assert event["before_tokens"] > event["after_tokens"] and event["covered"] == 4
    metrics = httpx.get(f"{server.url}/metrics").text
    assert 'amodal_compactions_total{stage="summary"} 1.0' in metrics
    logged = httpx.get(f"{server.url}/sessions/{session_id}").json()["events"]
    assert [e["type"] for e in logged].count("tool_result") == 3  # the log keeps everything
