"""A turn through the chat service (SPEC 6): the events it streams and how it ends."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from runtime import Runtime, events
from runtime.testing import ScriptedModel
from tests._harness import Harness, done, of_type, types

pytestmark = pytest.mark.anyio


async def test_a_turn_streams_text_and_ends_with_done(
    harness: Harness, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("Hello there!")
    streamed = await harness.chat("hi")
    assert types(streamed)[0] == "session"
    assert "".join(e.text for e in of_type(streamed, events.TextDelta)) == "Hello there!"
    assert done(streamed).reason == "model_stop"
    request = scripted_model.requests[0]
    assert request.last_user == "hi"
    assert "You are" in (request.system or "")


async def test_turns_leave_no_stream_unclosed(
    make_repo: Callable[..., Path], scripted_model: ScriptedModel
) -> None:
    files = {
        "agents/default/agent.json": {"subagents": ["helper"]},
        "agents/helper/AGENT.md": "You help.\n",
    }
    scripted_model.tool_call("call_subagent", {"calls": [{"subagent": "helper", "task": "t"}]})
    scripted_model.reply("helped").reply("done").reply("plain").reply("cut short")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        async with Runtime.open(make_repo(files)) as rt:
            await rt.chat("delegate")
            await rt.chat("plain")
            stream = rt.stream("stop early")
            async for event in stream:
                if isinstance(event, events.TextDelta):
                    break  # the consumer goes away mid-turn
            await stream.aclose()  # type: ignore[attr-defined]
        gc.collect()
    leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert not leaks, leaks


async def test_a_process_keeps_a_bounded_number_of_sessions_and_their_prompts_stay_byte_stable(
    make_repo: Callable[..., Path], scripted_model: ScriptedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server runs sessions by the million: it keeps the views and prompts of the newest
    # few only. A session it dropped is read back from its log, its system prompt too, so
    # the model sees the same bytes (the AGENT.md scope of the session's first turn).
    from runtime.engine import view
    from runtime.surface.prompt import SessionPrompt

    monkeypatch.setattr(view, "KEPT_SESSIONS", 2)
    repo = make_repo({"agents/default/AGENT.md": "You started on the {{ scope.page }} page.\n"})
    for _ in range(7):
        scripted_model.reply("ok")

    def prompts() -> int:
        gc.collect()
        return sum(isinstance(o, SessionPrompt) for o in gc.get_objects())

    before = prompts()  # what earlier tests of this process left, if anything
    async with Runtime.open(repo) as rt:
        first = await rt.chat("hi", context={"page": "review"})
        for page in ("a", "b", "c", "d", "e"):  # other sessions push the first one out
            await rt.chat("hi", context={"page": page})
        assert prompts() - before <= 2
        await rt.chat("again", session_id=first.session_id, context={"page": "home"})
    requests = scripted_model.requests
    assert "You started on the review page." in (requests[0].system or "")
    assert requests[6].last_user == "again"
    assert requests[6].system == requests[0].system


async def test_a_sessions_prompt_is_kept_from_its_first_turn_even_when_its_model_call_failed(
    make_repo: Callable[..., Path], scripted_model: ScriptedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The prompt is written with the run's first step, here its error: a later turn that
    # reads the session back from its log sends the model the same bytes.
    from runtime.engine import view

    monkeypatch.setattr(view, "KEPT_SESSIONS", 1)
    repo = make_repo({"agents/default/AGENT.md": "You started on the {{ scope.page }} page.\n"})
    scripted_model.error(400, "refused").reply("elsewhere").reply("ok")
    async with Runtime.open(repo) as rt:
        failed = await rt.chat("hi", context={"page": "review"})
        await rt.chat("hi", context={"page": "other"})  # pushes the first session out
        await rt.chat("again", session_id=failed.session_id, context={"page": "home"})
        logged = await rt.storage.list_events(failed.session_id)
    assert failed.reason == "error"
    assert [e.type for e in logged][:5] == ["turn", "user", "prompt", "error", "done"]
    first, _, again = scripted_model.requests
    assert "You started on the review page." in (first.system or "")
    assert again.last_user == "again" and again.system == first.system
