"""Typed events are exactly the wire: every event type of SPEC 6.2, as SSE sends it, parses to
its dataclass and back to the same JSON."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime import events
from runtime.testing import ScriptedModel, error, tool_call
from tests.server.conftest import Api

pytestmark = pytest.mark.anyio

REPO: dict[str, Any] = {
    "agents/default/AGENT.md": "You lead.\n",
    "agents/default/agent.py": (
        "def on_page_b(ctx):\n    return ctx.context.get('page') == 'b'\n\n"
        "agent = {\n"
        "    'tools': ['charge', {'name': 'load_knowledge', 'conditional': on_page_b}],\n"
        "    'subagents': ['helper'],\n"
        "}\n"
    ),
    "agents/helper/AGENT.md": "You help.\n",
    "agents/writer/AGENT.md": "You write.\n",
    "knowledge/faq.md": "# FAQ\n\nAnswers.\n",
    "tools/charge/tool.json": {"description": "Charge a card.", "confirm": True},
    "tools/charge/handler.py": "async def handler(args, ctx):\n    return {'charged': True}\n",
}


async def test_every_event_type_round_trips_between_the_wire_and_its_dataclass(
    make_repo: Callable[..., Path], api_for: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    api: Api = await api_for(make_repo(REPO))
    scripted_model.tool_call("call_subagent", {"calls": [{"subagent": "helper", "task": "t"}]})
    scripted_model.reply("helper's part")
    scripted_model.reply("All done.")
    wire = await api.chat(message="go", context={"page": "a"})
    session = wire[0]["session_id"]
    scripted_model.tool_call("charge", {"amount": 5}, id="c1")
    wire += await api.chat(message="charge", session_id=session, context={"page": "b"})
    scripted_model.enqueue(tool_call("ask_choice", {"question": "Which?", "options": ["x", "y"]}))
    wire += await api.chat(message="ask me", session_id=session, agent="writer")
    scripted_model.enqueue(error(400, "bad request"))
    wire += await api.chat(message="fail", session_id=session)
    scripted_model.reply("A record of it.")  # the summary of a compaction by hand
    compacted = await api.client.post(f"/sessions/{session}/compact", json={})
    wire.append(compacted.json()["compaction"])

    assert {body["type"] for body in wire} == set(events.EVENT_TYPES)
    for body in wire:
        typed = events.parse(body)
        assert type(typed).type == body["type"]
        assert typed.to_json() == body


async def test_a_non_streamed_reply_lists_the_same_events(
    make_repo: Callable[..., Path], api_for: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    api: Api = await api_for(make_repo(REPO))
    scripted_model.reply("Hello.")
    response = await api.client.post("/chat", json={"message": "hi", "stream": False})
    body = response.json()
    parsed = [events.parse(event) for event in body["events"]]
    assert isinstance(parsed[0], events.Session) and isinstance(parsed[-1], events.Done)
    assert body["reply"] == "Hello." and body["done_reason"] == "model_stop"
    assert body["usage"] == parsed[-1].usage.as_json()


def test_parse_refuses_what_is_not_an_event() -> None:
    with pytest.raises(ValueError, match="unknown event type"):
        events.parse({"type": "nope", "session_id": "s", "run_id": "r"})
    with pytest.raises(ValueError, match="not a 'text_delta' event"):
        events.parse({"type": "text_delta", "session_id": "s", "run_id": "r"})
