"""A custom tool's `ctx` (SPEC 9.3): the runtime's powers, within the caller's surface."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime import events
from runtime.surface.caller import Caller
from runtime.testing import RecordedRequest, ScriptedModel, reply, tool_call
from tests._harness import done, of_type
from tests._http_api import LoopbackApi

pytestmark = pytest.mark.anyio

NOTES = {
    "entity": {
        "name": "Note",
        "key": "{id}",
        "schema": {"id": {"type": "string"}, "text": {"type": "string"}},
    }
}

COMPOSE = """
async def handler(args, ctx):
    book = await ctx.request("library", "GET", "/items/1")
    notes = ctx.store("notes")
    await notes.put({"id": "n1", "text": book["body"]["title"]})
    kept = await notes.get("n1")
    found = await ctx.call_tool("store__notes__query", {})
    review = await ctx.call_subagent(
        "writer", "Summarise the book.", input={"id": 1},
        attachments=[{"type": "text", "text": "the draft text"},
                     {"type": "image", "mime_type": "image/png", "data": "iVBORw0KGgo="}])
    again = await ctx.call_subagent("writer", "And once more.")
    ctx.log.info("composed for %s", ctx.agent)
    return {"kept": kept, "total": found["total"], "review": review, "again": again,
            "who": [ctx.agent, dict(ctx.claims), dict(ctx.context), ctx.scope_id]}
"""

PROBE = """
async def attempt(call):
    try:
        await call()
    except PermissionError as error:
        return "PermissionError: " + str(error)
    return "allowed"


async def handler(args, ctx):
    async def archive_put():
        await ctx.store("archive").put({"id": "a", "text": "t"})

    async def hidden_store():
        ctx.store("hidden")

    checks = {
        "other connection": lambda: ctx.request("elsewhere", "GET", "/items"),
        "confirm endpoint": lambda: ctx.request("library", "POST", "/items/1/holds", body={}),
        "unlisted endpoint": lambda: ctx.request("library", "DELETE", "/items/1"),
        "hidden store": hidden_store,
        "read-only store": archive_put,
        "other specialist": lambda: ctx.call_subagent("lead2", "x"),
        "ungranted tool": lambda: ctx.call_tool("word_count", {"text": "a b"}),
        "confirm tool": lambda: ctx.call_tool("approve", {}),
    }
    return {name: await attempt(call) for name, call in checks.items()}
"""


def files(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "amodal.json": {"name": "t", "version": "1", "delegation": {"maxRunsPerTurn": 1}},
        "agents/default/AGENT.md": "You are the lead.\n",
        "agents/default/agent.json": {
            "tools": ["compose", "probe", "approve"],
            "connections": ["library"],
            "stores": {"notes": "rw", "archive": "read"},
            "subagents": ["writer"],
        },
        "agents/writer/AGENT.md": "You are the writer.\n",
        "agents/writer/agent.json": {"modelTier": "advanced"},
        "agents/lead2/AGENT.md": "Another lead.\n",
        "stores/notes.json": NOTES,
        "stores/archive.json": NOTES,
        "stores/hidden.json": NOTES,
        "connections/library/spec.json": {"baseUrl": url},
        "connections/library/access.json": {
            "endpoints": [{"method": "POST", "path": "/items/{id}/holds", "confirm": True}]
        },
        "connections/elsewhere/spec.json": {"baseUrl": url},
        "tools/compose/tool.json": {"description": "Compose a summary."},
        "tools/compose/handler.py": COMPOSE,
        "tools/probe/tool.json": {"description": "Try what is not allowed."},
        "tools/probe/handler.py": PROBE,
        "tools/approve/tool.json": {"description": "Needs a person.", "confirm": True},
        "tools/approve/handler.py": "async def handler(args, ctx):\n    return 'approved'\n",
        "tools/word_count/tool.json": {"description": "Count words."},
        "tools/word_count/handler.py": "async def handler(args, ctx):\n    return 0\n",
        **extra,
    }


def lead_or_writer(first: Any) -> Callable[[RecordedRequest], Any]:
    def respond(request: RecordedRequest) -> Any:
        if "You are the writer." in (request.system or ""):
            return reply("a fine summary")
        if any(m["role"] == "tool" for m in request.messages):
            return reply("done")
        return first

    return respond


async def test_a_composite_tool_uses_the_callers_connection_store_and_specialists(
    make_repo: Callable[..., Path],
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
    http_api: LoopbackApi,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    database_url: str | None,
) -> None:
    monkeypatch.setattr(logging.getLogger("amodal"), "propagate", True)
    monkeypatch.setenv("MODEL_ADVANCED", "big-model")  # the writer's own tier, not used here
    caplog.set_level(logging.INFO)
    lab = await harness_for(make_repo(files(http_api.url)), database_url)
    scripted_model.respond(lead_or_writer(tool_call("compose", {})))
    caller = Caller(claims={"sub": "u1", "scope": "acme"})
    streamed = await lab.chat("compose", caller, context={"page": "books"})
    assert done(streamed).reason == "model_stop"
    [result] = [e for e in of_type(streamed, events.ToolResult) if e.name == "compose"]
    assert result.status == "ok", result.error
    value = result.result
    assert value["kept"] == {"id": "n1", "text": "On Sources"}
    assert value["total"] == 1
    assert value["review"] == {"subagent": "writer", "result": "a fine summary"}
    # The second specialist run is over the turn's bound (maxRunsPerTurn: 1).
    assert "delegation limit" in value["again"]["error"]
    assert value["who"] == ["default", {"sub": "u1", "scope": "acme"}, {"page": "books"}, "acme"]
    # The specialist's events streamed live, under the custom tool's call.
    [start] = of_type(streamed, events.SubagentStart)
    assert (start.subagent, start.depth) == ("writer", 1)
    assert of_type(streamed, events.SubagentEnd)
    writer = next(r for r in scripted_model.requests if "You are the writer." in (r.system or ""))
    assert writer.model == "scripted"  # the session model, not the writer's `advanced` tier
    content = writer.messages[-1]["content"]
    assert content[0]["text"].startswith("Summarise the book.\n\n```json")
    assert content[1] == {"type": "text", "text": "the draft text"}
    assert '"mime_type": "image/png"' in content[2]["text"] and '"bytes": 8' in content[2]["text"]
    assert "iVBORw0KGgo" not in str(content)
    assert "composed for default" in caplog.text


async def test_anything_outside_the_callers_surface_raises_permission_error(
    make_repo: Callable[..., Path],
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
    http_api: LoopbackApi,
) -> None:
    lab = await harness_for(make_repo(files(http_api.url)))
    scripted_model.enqueue(tool_call("probe", {}), reply("done"))
    streamed = await lab.chat("probe")
    [result] = of_type(streamed, events.ToolResult)
    outcomes = result.result
    assert all(text.startswith("PermissionError") for text in outcomes.values()), outcomes
    assert "'elsewhere' is not in 'default'" in outcomes["other connection"]
    assert "needs a person's approval" in outcomes["confirm endpoint"]
    assert "DELETE /items/1 is not allowed" in outcomes["unlisted endpoint"]
    assert "store 'archive' is read-only" in outcomes["read-only store"]
    assert "it has: archive, notes" in outcomes["hidden store"]
    assert "callable: writer" in outcomes["other specialist"]
    assert "'word_count' is not callable" in outcomes["ungranted tool"]
    assert "tool 'approve' needs a person's approval" in outcomes["confirm tool"]
    assert http_api.requests == []
