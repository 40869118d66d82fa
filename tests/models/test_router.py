"""Model tiers through real chats: the agent rooting a chat picks the model its tier binds.

Chats run in process (a Runtime over SQLite in tmp_path) against the scripted
model over loopback; the runtime resolves its endpoint from the process
environment, as in production, so tiers are bound with MODEL_* variables or
amodal.json's `models`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime.events import Event
from runtime.testing import ScriptedModel, reply
from tests._harness import Harness, done

pytestmark = pytest.mark.anyio

TIERED = {
    "agents/quick/AGENT.md": "You answer quick questions.\n",
    "agents/quick/agent.json": {"modelTier": "simple", "tools": ["load_knowledge"]},
    "agents/deep/AGENT.md": "You think hard.\n",
    "agents/deep/agent.json": {"modelTier": "advanced"},
    "agents/plain/AGENT.md": "You are plain.\n",
    "agents/plain/agent.json": {"modelTier": "default"},
    "knowledge/refunds.md": "# Refunds\n\nRefunds take five days.\n",
}


class Chats:
    """Turns over one repo that must end well; `chat` returns their events."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness

    async def chat(self, message: str, **request: Any) -> list[Event]:
        events = await self.harness.chat(message, **request)
        assert done(events).reason == "model_stop", events
        return events


@pytest.fixture
def chats_for(harness_for: Callable[..., Any]) -> Callable[[Path], Any]:
    async def make(root: Path) -> Chats:
        return Chats(await harness_for(root))

    return make


@pytest.fixture
async def chats(make_repo: Callable[..., Path], chats_for: Callable[[Path], Any]) -> Chats:
    return await chats_for(make_repo(TIERED))  # type: ignore[no-any-return]


@pytest.fixture
def tiers_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_SIMPLE", "small-model")
    monkeypatch.setenv("MODEL_ADVANCED", "large-model")


def usage_models(events: list[Event]) -> list[str]:
    return [event.model for event in events if event.type == "usage"]


@pytest.mark.usefixtures("tiers_bound")
async def test_a_simple_tier_agent_rooting_the_chat_uses_model_simple(
    chats: Chats, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("Quick answer.")
    events = await chats.chat("hi", agent="quick")
    assert scripted_model.requests[0].model == "small-model"
    assert usage_models(events) == ["small-model"]


@pytest.mark.usefixtures("tiers_bound")
async def test_an_advanced_tier_agent_rooting_the_chat_uses_model_advanced(
    chats: Chats, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("Deep answer.")
    events = await chats.chat("hi", agent="deep")
    assert scripted_model.requests[0].model == "large-model"
    assert usage_models(events) == ["large-model"]


@pytest.mark.usefixtures("tiers_bound")
@pytest.mark.parametrize("agent", ["plain", "default"])
async def test_the_default_tier_uses_model_main_even_when_other_tiers_are_bound(
    chats: Chats, scripted_model: ScriptedModel, agent: str
) -> None:
    scripted_model.reply("Plain answer.")
    events = await chats.chat("hi", agent=agent)
    assert scripted_model.requests[0].model == "scripted"  # MODEL_MAIN of scripted_model
    assert usage_models(events) == ["scripted"]


async def test_an_unbound_tier_uses_model_main(chats: Chats, scripted_model: ScriptedModel) -> None:
    scripted_model.reply("Quick answer.").reply("Deep answer.")
    quick = await chats.chat("hi", agent="quick")
    deep = await chats.chat("hi", agent="deep")
    assert [request.model for request in scripted_model.requests] == ["scripted", "scripted"]
    assert usage_models(quick) == usage_models(deep) == ["scripted"]


async def test_tier_names_in_amodal_json_are_used_and_env_overrides_them(
    make_repo: Callable[..., Path],
    chats_for: Callable[[Path], Any],
    scripted_model: ScriptedModel,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    models = {"main": "file-main", "simple": "file-small", "advanced": {"model": "file-large"}}
    repo = make_repo({**TIERED, "amodal.json": {"name": "r", "version": "1", "models": models}})
    monkeypatch.delenv("MODEL_MAIN")
    chats = await chats_for(repo)
    scripted_model.reply("a").reply("b").reply("c").reply("d")
    await chats.chat("hi", agent="plain")
    await chats.chat("hi", agent="quick")
    await chats.chat("hi", agent="deep")
    monkeypatch.setenv("MODEL_SIMPLE", "env-small")
    await chats.chat("hi", agent="quick")
    assert [request.model for request in scripted_model.requests] == [
        "file-main",
        "file-small",
        "file-large",
        "env-small",
    ]


@pytest.mark.usefixtures("tiers_bound")
async def test_the_usage_event_names_the_model_that_answered(
    chats: Chats, scripted_model: ScriptedModel
) -> None:
    # The endpoint may answer with a more precise name than the one asked for.
    scripted_model.enqueue(dataclasses.replace(reply("Quick."), model="small-model-2025-06-01"))
    events = await chats.chat("hi", agent="quick")
    assert scripted_model.requests[0].model == "small-model"
    assert usage_models(events) == ["small-model-2025-06-01"]
    session = events[0].session_id
    stored = (await chats.harness.session(session)).entries
    assistant = [event.data["model"] for event in stored if event.type == "assistant"]
    assert assistant == ["small-model-2025-06-01"]


@pytest.mark.usefixtures("tiers_bound")
async def test_every_model_call_of_a_turn_reports_its_model(
    chats: Chats, scripted_model: ScriptedModel
) -> None:
    scripted_model.tool_call("load_knowledge", {"name": "refunds"}).reply("Five days.")
    events = await chats.chat("How long do refunds take?", agent="quick")
    assert [e.type for e in events if e.type in ("usage", "tool_result")] == [
        "usage",
        "tool_result",
        "usage",
    ]
    assert usage_models(events) == ["small-model", "small-model"]
    assert [request.model for request in scripted_model.requests] == ["small-model"] * 2


@pytest.mark.usefixtures("tiers_bound")
async def test_rerooting_to_an_agent_of_another_tier_switches_the_model(
    chats: Chats, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("Quick.").reply("Deep.").reply("Still deep.")
    first = await chats.chat("one", agent="quick")
    session_id = first[0].session_id
    second = await chats.chat("two", agent="deep", session_id=session_id)
    third = await chats.chat("three", session_id=session_id)  # the root is sticky
    assert [request.model for request in scripted_model.requests] == [
        "small-model",
        "large-model",
        "large-model",
    ]
    assert usage_models(second) == usage_models(third) == ["large-model"]


async def test_no_prompt_cache_key_is_sent_to_an_endpoint_other_than_openai(
    chats: Chats, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("One.").reply("Two.")
    first = await chats.chat("one", agent="quick")
    await chats.chat("two", session_id=first[0].session_id)
    for request in scripted_model.requests:
        assert "prompt_cache_key" not in request.body
        assert request.stream is True
