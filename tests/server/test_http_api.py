"""The HTTP API of SPEC 14 through the real ASGI app, with the scripted model over loopback."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime.testing import ScriptedModel
from tests.server.conftest import Api, parse_sse

pytestmark = pytest.mark.anyio

TEAM = {
    "agents/default/agent.json": {"tools": ["load_knowledge"], "subagents": ["helper"]},
    "agents/helper/AGENT.md": "You help.\n",
    "agents/helper/agent.json": {"description": "Helps out.", "role": "Researcher"},
    "knowledge/facts.md": "# Facts\n\nWater is wet.\n",
}


async def test_chat_streams_sse_events_ending_with_done(
    api: Api, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("Hi!")
    events = await api.chat(message="hello")
    assert events[0]["type"] == "session" and events[0]["created"] is True
    assert events[-1]["type"] == "done" and events[-1]["reason"] == "model_stop"
    assert set(events[-1]["usage"]) == {"input", "output", "cached"}
    assert {e["session_id"] for e in events} == {events[0]["session_id"]}


async def test_chat_without_streaming_returns_one_json_document(
    api: Api, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("Plain reply")
    response = await api.client.post("/chat", json={"message": "hi", "stream": False})
    body = response.json()
    assert response.status_code == 200
    assert body["reply"] == "Plain reply" and body["done_reason"] == "model_stop"
    assert body["agent"] == "default" and body["events"][-1]["type"] == "done"


async def test_unknown_agent_is_404_and_no_model_call_is_made(api: Api) -> None:
    response = await api.client.post("/chat", json={"message": "hi", "agent": "ghost"})
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "unknown_agent" and "default" in error["message"]


async def test_unknown_session_is_404_never_a_new_session(api: Api) -> None:
    response = await api.client.post("/chat", json={"message": "hi", "session_id": "nope"})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "unknown_session"


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"message": "hi", "context": {"page": 3}}, "context.page"),
        ({}, "message"),
        ({"message": "hi", "agnet": "x"}, "agnet"),
        ({"message": ""}, "message"),
    ],
)
async def test_invalid_bodies_are_422_with_a_clear_error(
    api: Api, body: dict[str, Any], fragment: str
) -> None:
    response = await api.client.post("/chat", json=body)
    assert response.status_code == 422
    assert fragment in response.json()["error"]["message"]


async def test_malformed_json_is_422(api: Api) -> None:
    response = await api.client.post(
        "/chat", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_request"


async def test_oversized_bodies_are_refused_with_413(
    make_repo: Callable[..., Path], api_for: Callable[..., Any]
) -> None:
    api = await api_for(
        make_repo(
            {"amodal.json": {"name": "t", "version": "1", "limits": {"maxRequestBytes": 2048}}}
        )
    )
    response = await api.client.post("/chat", json={"message": "x" * 5000})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "body_too_large"


async def test_invalid_session_id_is_422(api: Api) -> None:
    response = await api.client.get("/sessions/bad%20id!")
    assert response.status_code == 422


async def test_session_shows_events_with_the_agent_that_wrote_each_reply(
    api: Api, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("First")
    session_id = (await api.chat(message="one"))[0]["session_id"]
    response = await api.client.get(f"/sessions/{session_id}")
    body = response.json()
    assistant = [e for e in body["events"] if e["type"] == "assistant"]
    assert assistant[0]["agent"] == "default" and assistant[0]["text"] == "First"
    user = [e for e in body["events"] if e["type"] == "user"]
    assert user[0]["text"] == "one" and user[0]["bundle_version"]
    deleted = await api.client.delete(f"/sessions/{session_id}")
    assert deleted.status_code == 204
    assert (await api.client.get(f"/sessions/{session_id}")).status_code == 404


async def test_agents_lists_and_filters_by_role(
    make_repo: Callable[..., Path], api_for: Callable[..., Any]
) -> None:
    api = await api_for(make_repo(TEAM))
    everyone = (await api.client.get("/agents")).json()
    assert [a["name"] for a in everyone] == ["default", "helper"]
    researchers = (await api.client.get("/agents", params={"role": "RESEARCHER"})).json()
    assert [a["name"] for a in researchers] == ["helper"]
    one = (await api.client.get("/agents/helper")).json()
    assert one["role"] == "researcher" and one["default"] is False
    assert (await api.client.get("/agents/ghost")).status_code == 404


async def test_surface_route_shows_the_resolved_surface(
    make_repo: Callable[..., Path], api_for: Callable[..., Any]
) -> None:
    api = await api_for(make_repo(TEAM))
    surface = (await api.client.get("/agents/default/surface")).json()
    assert "load_knowledge" in surface["tools"] and surface["subagents"] == ["helper"]
    assert surface["context_prompt"] is None


async def test_health_reports_the_bundle_version(api: Api) -> None:
    body = (await api.client.get("/health")).json()
    assert body["status"] == "ok" and body["reload_error"] is None
    assert body["bundle_version"] == api.runtime.live().version


async def test_openapi_document_is_served(api: Api) -> None:
    spec = (await api.client.get("/openapi.json")).json()
    assert "/chat" in spec["paths"]


async def test_a_second_turn_on_a_busy_session_is_409(
    api: Api, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("first")
    session_id = (await api.chat(message="one"))[0]["session_id"]
    scripted_model.latency = 1.0
    scripted_model.reply("slow")
    statuses: list[int] = []

    async def send() -> None:
        response = await api.client.post("/chat", json={"message": "two", "session_id": session_id})
        statuses.append(response.status_code)
        if response.status_code == 409:
            assert response.json()["error"]["code"] == "session_busy"

    async with anyio.create_task_group() as group:
        group.start_soon(send)
        await anyio.sleep(0.3)
        group.start_soon(send)
    assert sorted(statuses) == [200, 409]


async def test_rerooting_inserts_the_handoff_note(
    make_repo: Callable[..., Path], api_for: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    api = await api_for(make_repo(TEAM))
    scripted_model.reply("from default")
    session_id = (await api.chat(message="one"))[0]["session_id"]
    scripted_model.reply("from helper")
    events = await api.chat(message="two", agent="helper", session_id=session_id)
    assert {"type": "agent", "from": "default", "to": "helper"}.items() <= next(
        e for e in events if e["type"] == "agent"
    ).items()
    users = [m["content"] for m in scripted_model.requests[-1].messages if m["role"] == "user"]
    note = users[-2].splitlines()
    assert note[0] == "[Agent handoff] default -> helper"
    assert note[1] == "default had tools that helper lacks: call_subagent, load_knowledge"
    assert "written by default" in note[2]
    assert users[-1] == "two"
    scripted_model.reply("still helper")
    sticky = await api.chat(message="three", session_id=session_id)
    assert sticky[0]["agent"] == "helper"


def test_parse_sse_checks_event_names() -> None:
    with pytest.raises(AssertionError):
        parse_sse('event: done\ndata: {"type": "session"}\n\n')


async def test_runs_route_returns_the_tree_and_a_roster_summary(
    make_repo: Callable[..., Path], api_for: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    api = await api_for(make_repo(TEAM))
    scripted_model.tool_call("call_subagent", {"calls": [{"subagent": "helper", "task": "Dig."}]})
    scripted_model.reply("helper's findings")
    scripted_model.reply("combined")
    session_id = (await api.chat(message="go"))[0]["session_id"]
    body = (await api.client.get(f"/sessions/{session_id}/runs")).json()
    (root,) = body["runs"]
    assert root["agent"] == "default" and root["depth"] == 0 and root["label"] == "go"
    (child,) = root["children"]
    assert child["agent"] == "helper" and child["depth"] == 1 and child["status"] == "ok"
    assert child["started_at"] <= child["ended_at"]
    assert body["summary"] == {"running": 0, "recent_labels": ["Dig."]}
