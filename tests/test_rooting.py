"""Rooting a conversation (SPEC 3): which agent answers, and what happens when that changes."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime.exceptions import UnknownAgentError
from runtime.surface.caller import Caller
from runtime.testing import ScriptedModel
from tests._harness import Harness, done

pytestmark = pytest.mark.anyio

TEAM = {
    "agents/default/AGENT.md": "You are the desk lead.\n",
    "agents/default/agent.json": {"tools": ["load_knowledge"], "subagents": ["writer"]},
    "agents/writer/AGENT.md": "You are the writer.\n",
    "agents/writer/agent.json": {"name": "Writer", "description": "Writes."},
    "agents/main/AGENT.md": "You are the operator console.\n",
    "knowledge/facts.md": "# Facts\n\nWater is wet.\n",
}


@pytest.fixture
async def team(make_repo: Callable[..., Path], harness_for: Callable[[Path], Any]) -> Any:
    return await harness_for(make_repo(TEAM))


async def test_a_named_agent_roots_the_conversation(
    team: Harness, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("ok")
    events = await team.chat("hi", agent="writer")
    assert events[0].agent == "writer"
    assert "You are the writer." in (scripted_model.requests[0].system or "")
    assert "desk lead" not in (scripted_model.requests[0].system or "")


async def test_an_unknown_agent_fails_without_fallback_or_model_call(team: Harness) -> None:
    with pytest.raises(UnknownAgentError, match="known agents: default, main, writer"):
        await team.chat("hi", agent="ghost")


async def test_without_an_agent_default_roots_a_new_session(
    team: Harness, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("ok")
    events = await team.chat("hi")
    assert events[0].agent == "default"


async def test_without_default_the_chat_is_unscoped_with_main_and_every_resource(
    make_repo: Callable[..., Path],
    harness_for: Callable[[Path], Any],
    scripted_model: ScriptedModel,
) -> None:
    files = {**TEAM, "agents/default": None}
    h = await harness_for(make_repo(files))
    scripted_model.reply("ok")
    events = await h.chat("hi")
    assert events[0].agent == "main"
    request = scripted_model.requests[0]
    assert "You are the operator console." in (request.system or "")
    assert {"call_subagent", "load_knowledge", "stop_execution"} <= set(request.tools)


async def test_base_prompt_replaces_every_layer_of_unscoped_chat(
    make_repo: Callable[..., Path],
    harness_for: Callable[[Path], Any],
    scripted_model: ScriptedModel,
) -> None:
    files = {
        **TEAM,
        "agents/default": None,
        "amodal.json": {"name": "t", "version": "1", "basePrompt": "Only this."},
    }
    h = await harness_for(make_repo(files))
    scripted_model.reply("ok")
    await h.chat("hi")
    assert scripted_model.requests[0].system == "Only this."


async def test_the_root_is_sticky_when_a_later_turn_names_no_agent(
    team: Harness, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("one")
    first = await team.chat("hi", agent="writer")
    scripted_model.reply("two")
    second = await team.chat("again", session_id=first[0].session_id)
    assert second[0].agent == "writer"
    assert not any(e.type == "agent" for e in second)


async def test_rerooting_keeps_the_transcript_and_says_who_wrote_what(
    team: Harness, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("lead reply")
    first = await team.chat("hi")
    scripted_model.reply("writer reply")
    second = await team.chat("write it", agent="writer", session_id=first[0].session_id)
    agent_event = next(e for e in second if e.type == "agent")
    assert (agent_event.from_agent, agent_event.to_agent) == ("default", "writer")
    messages = scripted_model.requests[-1].messages
    assert [m["content"] for m in messages if m["role"] == "assistant"] == ["lead reply"]
    note = [m["content"] for m in messages if m["role"] == "user"][-2].splitlines()
    assert note == [
        "[Agent handoff] default -> writer",
        "default had tools that writer lacks: call_subagent, load_knowledge",
        "You are writer now. Earlier assistant replies in this conversation were written by "
        "default, not by you; check them before relying on them.",
    ]
    events = (await team.session(first[0].session_id)).entries
    writers = [(e.type, e.agent) for e in events if e.type == "assistant"]
    assert writers == [("assistant", "default"), ("assistant", "writer")]


async def test_handoff_from_unscoped_chat_names_main(
    make_repo: Callable[..., Path],
    harness_for: Callable[[Path], Any],
    scripted_model: ScriptedModel,
) -> None:
    h = await harness_for(make_repo({**TEAM, "agents/default": None}))
    scripted_model.reply("console")
    first = await h.chat("hi")
    scripted_model.reply("writer")
    await h.chat("go", agent="writer", session_id=first[0].session_id)
    users = [m["content"] for m in scripted_model.requests[-1].messages if m["role"] == "user"]
    assert users[-2].startswith("[Agent handoff] main -> writer\n")


async def test_a_root_removed_by_a_reload_re_roots_as_if_none_was_named(
    make_repo: Callable[..., Path],
    harness_for: Callable[[Path], Any],
    scripted_model: ScriptedModel,
) -> None:
    root = make_repo(TEAM)
    h = await harness_for(root)
    scripted_model.reply("writer here")
    first = await h.chat("hi", agent="writer")
    shutil.rmtree(root / "agents" / "writer")
    (root / "agents/default/agent.json").write_text('{"tools": ["load_knowledge"]}')
    h.reload()
    scripted_model.reply("lead here")
    second = await h.chat("still there?", session_id=first[0].session_id)
    assert second[0].agent == "default"
    change = next(e for e in second if e.type == "agent")
    assert (change.from_agent, change.to_agent) == ("writer", "default")
    users = [m["content"] for m in scripted_model.requests[-1].messages if m["role"] == "user"]
    assert users[-2].startswith("[Agent handoff] writer -> default")


async def test_an_end_users_autonomous_run_uses_default_and_an_operators_stays_unscoped(
    team: Harness, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("user run")
    user = await team.chat("nightly", caller=Caller(claims={"sub": "u1"}), autonomous=True)
    assert user[0].agent == "default"
    scripted_model.reply("operator run")
    operator = await team.chat("nightly", caller=Caller(operator=True), autonomous=True)
    assert operator[0].agent == "main"


async def test_each_turn_records_the_bundle_version_that_served_it(
    make_repo: Callable[..., Path],
    harness_for: Callable[[Path], Any],
    scripted_model: ScriptedModel,
) -> None:
    root = make_repo(TEAM)
    h = await harness_for(root)
    scripted_model.reply("one")
    first = await h.chat("hi")
    (root / "agents/default/AGENT.md").write_text("You are the new desk lead.\n")
    new = h.reload()
    scripted_model.reply("two")
    second = await h.chat("again", session_id=first[0].session_id)
    assert second[0].bundle_version == new.version != first[0].bundle_version
    assert "new desk lead" in (scripted_model.requests[-1].system or "")
    events = (await h.session(first[0].session_id)).entries
    versions = [e.bundle_version for e in events if e.type == "user"]
    assert versions == [first[0].bundle_version, new.version]
    assert done(second).reason == "model_stop"
