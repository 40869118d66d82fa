"""What a continued turn does with what its dead process left (SPEC 23), rule by rule.

Each test leaves a session the way a process killed mid-turn leaves it: the turn's
entries in the log up to some step, and its lease expired with the turn's note on it.
The runtime's sweep then takes the turn over and continues it; the test follows the
session as a client would. (tests/server/test_resume.py kills a real server instead.)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import events
from runtime.engine.chats import turn_note
from runtime.engine.log import (
    AnswerEntry,
    LogEntry,
    ResumedEntry,
    TextEntry,
    TurnEntry,
    UserEntry,
    append,
)
from runtime.events import Event, Usage
from runtime.models import ToolCallRequest
from runtime.storage import SessionRecord, utc_now
from runtime.surface.caller import Caller
from runtime.testing import ScriptedModel
from tests._harness import Harness
from tests._http_api import LoopbackApi
from tests.test_connections import TOKEN, api_repo
from tests.test_mcp import repo_files, stdio

pytestmark = pytest.mark.anyio

EFFECT = (
    "import json, os\n\nasync def handler(args, ctx):\n"
    "    with open(os.environ['EFFECTS_FILE'], 'a') as effects:\n"
    "        effects.write('%s\\n')\n"
    "    return {'ran': True}\n"
)


@pytest.fixture
def repo(make_repo: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AMODAL_LEASE_SECONDS", "1")
    monkeypatch.setenv("EFFECTS_FILE", str(tmp_path / "effects.txt"))
    files: dict[str, Any] = {"agents/default/agent.json": {"tools": ["look", "charge", "pay"]}}
    for name, extra in (
        ("look", {"idempotent": True}),
        ("charge", {}),
        ("pay", {"idempotent": True, "confirm": True}),  # approved once, never run twice
    ):
        files[f"tools/{name}/tool.json"] = {"description": name.title() + ".", **extra}
        files[f"tools/{name}/handler.py"] = EFFECT % name
    return make_repo(files)


def effects(tmp_path: Path) -> list[str]:
    path = tmp_path / "effects.txt"
    return path.read_text().splitlines() if path.exists() else []


async def dead_turn(harness: Harness, entries: Sequence[LogEntry]) -> tuple[str, int]:
    """A session whose turn's process died after writing `entries`: (its id, last seq)."""
    storage = harness.runtime.storage
    session_id, run_id = f"s-{utc_now().timestamp()}", "run_dead0000001"
    now = utc_now()
    await storage.create_session(SessionRecord(session_id, "", None, "default", now, now))
    note = turn_note(harness.bundle, run_id, Caller(), "chat")
    assert await storage.try_acquire_turn(session_id, "dead:1", 0.2, note)
    seq = 0
    for entry in [TurnEntry("default", "", {}, True), UserEntry("go"), *entries]:
        logged = await append(
            storage, session_id, entry, run_id=run_id, agent="default", bundle_version="v"
        )
        seq = logged.seq
    return session_id, seq


async def continuation(harness: Harness, session_id: str, after: int) -> list[Event]:
    """What a client following the session sees after event `after`, to the turn's end."""
    with anyio.fail_after(20):
        stream = await harness.runtime.follow(session_id, after=str(after), operator=True)
        return [event async for event in stream]


def asked(*calls: tuple[str, str]) -> AnswerEntry:
    requests = tuple(ToolCallRequest(call_id, name, "{}") for call_id, name in calls)
    return AnswerEntry("", requests, "scripted", Usage())


async def test_an_idempotent_call_runs_again_and_any_other_gets_the_interrupted_result(
    repo: Path, harness_for: Callable[..., Any], scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    harness = await harness_for(repo)
    scripted_model.reply("I will check whether the charge went through.")
    session_id, seq = await dead_turn(harness, [asked(("c1", "look"), ("c2", "charge"))])

    streamed = await continuation(harness, session_id, seq)

    results = {e.call_id: e for e in streamed if isinstance(e, events.ToolResult)}
    assert results["c1"].status == "ok" and results["c1"].result == {"ran": True}
    assert results["c2"].status == "error"
    assert results["c2"].error == (
        "interrupted: the call did not complete and may or may not have taken effect"
    )
    assert effects(tmp_path) == ["look"]  # the charge is never run again
    tool_messages = [m for m in scripted_model.requests[0].messages if m["role"] == "tool"]
    assert json.loads(tool_messages[1]["content"]) == {
        "status": "interrupted",
        "error": "the call did not complete and may or may not have taken effect",
    }
    assert isinstance(streamed[-1], events.Done) and streamed[-1].reason == "model_stop"
    runs = await harness.runs(session_id)
    assert [run.status for run in runs] == ["ok"]


async def test_a_committed_answer_is_not_asked_for_again(
    repo: Path, harness_for: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    harness = await harness_for(repo)
    answer = AnswerEntry("All done.", (), "scripted", Usage())
    session_id, seq = await dead_turn(harness, [TextEntry("All done."), answer])

    streamed = await continuation(harness, session_id, seq)

    assert [e.type for e in streamed] == ["done"]
    assert isinstance(streamed[-1], events.Done) and streamed[-1].reason == "model_stop"
    assert scripted_model.requests == []


async def test_a_confirmed_call_cut_short_is_never_run_twice(
    repo: Path, harness_for: Callable[..., Any], scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    harness = await harness_for(repo)
    scripted_model.reply("The payment may not have gone through.")
    session_id, seq = await dead_turn(harness, [asked(("c1", "pay"))])

    streamed = await continuation(harness, session_id, seq)

    [result] = [e for e in streamed if isinstance(e, events.ToolResult)]
    assert result.status == "error" and (result.error or "").startswith("interrupted")
    assert effects(tmp_path) == []
    assert isinstance(streamed[-1], events.Done) and streamed[-1].reason == "model_stop"


async def test_a_turn_continued_three_times_ends_with_resume_limit(
    repo: Path, harness_for: Callable[..., Any], scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    harness = await harness_for(repo)
    earlier = [ResumedEntry(count, f"dead:{count}") for count in (1, 2, 3)]
    session_id, seq = await dead_turn(harness, [asked(("c1", "look")), *earlier])

    streamed = await continuation(harness, session_id, seq)

    error = next(e for e in streamed if isinstance(e, events.Error))
    assert error.code == "resume_limit"
    assert isinstance(streamed[-1], events.Done) and streamed[-1].reason == "error"
    assert effects(tmp_path) == [] and scripted_model.requests == []
    # The session takes a new turn at once.
    scripted_model.reply("Fresh start.")
    again = await harness.runtime.chat("again", session_id=session_id, operator=True)
    assert again.reason == "model_stop"


async def test_the_continuation_goes_on_calling_tools_and_counts_each_continuation(
    repo: Path, harness_for: Callable[..., Any], scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    harness = await harness_for(repo)
    scripted_model.tool_call("charge", {}).reply("Charged.")
    session_id, seq = await dead_turn(harness, [asked(("c1", "look"))])

    streamed = await continuation(harness, session_id, seq)

    assert [e.name for e in streamed if isinstance(e, events.ToolResult)] == ["look", "charge"]
    assert effects(tmp_path) == ["look", "charge"]
    session = await harness.session(session_id)
    assert [e.data["count"] for e in session.entries if e.type == "resumed"] == [1]


async def test_a_get_request_runs_again_and_a_post_does_not(
    make_repo: Callable[..., Path],
    http_api: LoopbackApi,
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AMODAL_LEASE_SECONDS", "1")
    monkeypatch.setenv("LIBRARY_TOKEN", TOKEN)
    harness = await harness_for(make_repo(api_repo(http_api.url, spec={"contextInjection": []})))
    read = {"connection": "library", "method": "GET", "path": "/items", "intent": "read"}
    write = {"connection": "library", "method": "POST", "path": "/items", "intent": "write"}
    calls = (
        ToolCallRequest("c1", "request", json.dumps(read)),
        ToolCallRequest("c2", "request", json.dumps({**write, "body": {"title": "x"}})),
    )
    scripted_model.reply("Listed; the new item may or may not exist.")
    session_id, seq = await dead_turn(harness, [AnswerEntry("", calls, "scripted", Usage())])

    streamed = await continuation(harness, session_id, seq)

    assert [(seen.method, seen.path) for seen in http_api.requests] == [("GET", "/items")]
    results = {e.call_id: e for e in streamed if isinstance(e, events.ToolResult)}
    assert results["c1"].status == "ok"
    assert (results["c2"].error or "").startswith("interrupted")


async def test_an_mcp_tool_its_server_marks_idempotent_runs_again_and_another_does_not(
    make_repo: Callable[..., Path],
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AMODAL_LEASE_SECONDS", "1")
    harness = await harness_for(make_repo(repo_files({"desk": stdio()})))
    calls = (
        ToolCallRequest("c1", "desk__add", json.dumps({"a": 2, "b": 3})),
        ToolCallRequest("c2", "desk__shout", json.dumps({"text": "hi"})),
    )
    scripted_model.reply("Added; the shout may or may not have been heard.")
    session_id, seq = await dead_turn(harness, [AnswerEntry("", calls, "scripted", Usage())])

    streamed = await continuation(harness, session_id, seq)

    results = {e.call_id: e for e in streamed if isinstance(e, events.ToolResult)}
    assert results["c1"].status == "ok" and "5" in json.dumps(results["c1"].result)
    assert (results["c2"].error or "").startswith("interrupted")
