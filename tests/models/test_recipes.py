"""The provider recipes of docs/models.md (section 3.2), run as written: each `models` entry
goes into a repo, its base URL's host is swapped for a scripted server answering at the
same path with that provider's documented quirks, and a turn with a tool call checks the
request shape the provider expects."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from runtime import Runtime, events
from runtime.testing import ScriptedModel, reply, tool_call
from tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.anyio

RECIPE = re.compile(r"^```json recipe=(\w+)\n(.*?)^```", re.M | re.S)
QUIRKS = {
    "gemini": ("tool_calls_without_index", "stop_after_tool_calls", "thought_signatures"),
    "ollama": ("whole_tool_calls",),
    "vllm": (),
    "openrouter": ("keepalive_comments",),
    "lmstudio": (),
}
LOOKUP = {
    "tools/lookup/tool.json": {
        "description": "Look an order up.",
        "parameters": {
            "type": "object",
            "properties": {"id": {"type": "integer"}},
            "required": ["id"],
        },
    },
    "tools/lookup/handler.py": (
        "async def handler(args, ctx):\n    return {'id': args['id'], 'status': 'shipped'}\n"
    ),
    "agents/default/agent.json": {"tools": ["lookup"]},
}


def recipes() -> dict[str, dict[str, Any]]:
    text = (PROJECT_ROOT / "docs/models.md").read_text(encoding="utf-8")
    return {name: json.loads(block) for name, block in RECIPE.findall(text)}


def test_every_provider_has_a_recipe_and_every_recipe_a_test() -> None:
    assert set(recipes()) == set(QUIRKS)


@pytest.mark.parametrize("name", sorted(QUIRKS))
async def test_a_recipe_works_as_written(
    name: str,
    make_repo: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entry = recipes()[name]["main"]
    url = urlsplit(entry["baseUrl"])
    for variable in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(variable)  # the guard's: the recipe's own entry is what counts
    key = None
    if str(entry.get("apiKey", "")).startswith("env:"):
        key = f"sk-{name}-test-key"
        monkeypatch.setenv(entry["apiKey"].removeprefix("env:"), key)
    with ScriptedModel(path=url.path, quirks=QUIRKS[name]) as server:
        local = {**entry, "baseUrl": server.base_url + ("/" if url.path.endswith("/") else "")}
        amodal = {"name": "recipes", "version": "1", "models": {"main": local}}
        repo = make_repo({**LOOKUP, "amodal.json": amodal})
        server.tool_call("lookup", {"id": 7}).reply("Order 7 has shipped.")
        async with Runtime.open(repo, database=str(tmp_path / "a.db")) as rt:
            result = await rt.chat("Where is order 7?")
        server.assert_done()  # with `thought_signatures`, the second call was not refused
        requests = server.requests
    assert result.reason == "model_stop" and result.text == "Order 7 has shipped."
    ran = [e for e in result.events if isinstance(e, events.ToolResult)]
    assert [(e.status, e.result) for e in ran] == [("ok", {"id": 7, "status": "shipped"})]
    for request in requests:
        assert request.path == url.path.rstrip("/") + "/chat/completions"
        assert request.headers["authorization"] == f"Bearer {key or 'amodal-no-key'}"
        assert request.model == entry["model"]
        assert request.body["stream_options"] == {"include_usage": True}
        assert "prompt_cache_key" not in request.body  # only OpenAI's own API takes it
    answered = requests[1].messages[-2]
    assert answered["role"] == "assistant" and answered["content"] == ""
    if "thought_signatures" in QUIRKS[name]:  # sent back on the call, as it came
        (call,) = answered["tool_calls"]
        assert call["extra_content"] == {"google": {"thought_signature": f"sig-{call['id']}"}}


def test_gemini_refuses_a_call_sent_back_without_its_thought_signature() -> None:
    # What the scripted Gemini holds the runtime to (without the signature, 400).
    import httpx

    with ScriptedModel(path="/v1beta/openai", quirks=QUIRKS["gemini"]) as server:
        server.respond(lambda request: reply("never"))
        call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        body = {
            "model": "gemini-2.5-flash",
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "{}"},
            ],
        }
        response = httpx.post(f"{server.base_url}/chat/completions", json=body)
        assert response.status_code == 400
        assert "thought_signature" in response.json()["error"]["message"]
        with pytest.raises(AssertionError, match="the real API would refuse it"):
            server.assert_done()


def test_unknown_quirks_are_refused_with_the_known_ones() -> None:
    with pytest.raises(
        ValueError, match=r"unknown quirks \['gemni'\]; known: .*thought_signatures"
    ):
        ScriptedModel(quirks=["gemni"])


async def test_quirky_streams_still_give_one_whole_tool_call_each() -> None:
    from runtime.models import UserMessage
    from runtime.models.endpoints import ModelEndpoint
    from runtime.models.openai import OpenAIModel

    quirks = [q for names in QUIRKS.values() for q in names]
    with ScriptedModel(quirks=quirks) as server:
        server.enqueue(tool_call("lookup", {"id": 1}), tool_call("lookup", {"id": 2}))
        async with OpenAIModel.for_endpoint(ModelEndpoint("m", server.base_url)) as client:
            replies = []
            for _ in range(2):
                async for item in client.stream([UserMessage.of("hi")], None):
                    replies.append(item)
    calls = [call for item in replies if not isinstance(item, str) for call in item.tool_calls]
    assert [json.loads(call.arguments) for call in calls] == [{"id": 1}, {"id": 2}]
    assert all(call.provider_data for call in calls)
