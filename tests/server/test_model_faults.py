"""A model that fails in every way a provider does, through real turns over HTTP: every turn
ends with exactly one `done` (after one `error` when it failed), a partial answer is never
used, no tool runs on a half-sent call, and the session stays usable (SPEC 6.2, 8, 12)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime.api import Runtime
from runtime.models.endpoints import ModelEndpoint
from runtime.models.openai import OpenAIModel
from runtime.server import Authenticator, create_app
from runtime.testing import (
    ScriptedModel,
    Step,
    cut_in_tool_call,
    cut_stream,
    error,
    hang,
    junk_chunk,
    raw_arguments,
    reply,
    stall,
    tool_call,
    unfinished,
)
from tests.server.conftest import Api

pytestmark = pytest.mark.anyio

MARKING_HANDLER = (
    "from pathlib import Path\n\n"
    "async def handler(args, ctx):\n"
    "    with Path(__file__).with_name('ran.log').open('a') as log:\n"
    "        log.write('ran\\n')\n"
    "    return {'charged': args.get('amount')}\n"
)

REPO: dict[str, Any] = {
    "tools/charge/tool.json": {
        "description": "Charge a card.",
        "parameters": {"type": "object", "properties": {"amount": {"type": "number"}}},
    },
    "tools/charge/handler.py": MARKING_HANDLER,
    "agents/default/agent.json": {"tools": ["charge"]},
}

# A short timeout and one fast retry, passed to the model client the runtime uses: a hang
# costs a fraction of a second, and every timeout comes from the client's configuration.
TIMEOUT = 0.5
CHARGE = tool_call("charge", {"amount": 5})


@pytest.fixture
async def faulty(
    make_repo: Callable[..., Path], tmp_path: Path, scripted_model: ScriptedModel
) -> AsyncIterator[Api]:
    endpoint = ModelEndpoint("scripted", scripted_model.base_url, None)
    async with contextlib.AsyncExitStack() as stack:
        model = await stack.enter_async_context(
            OpenAIModel.for_endpoint(endpoint, timeout=TIMEOUT, max_retries=1, backoff=0.01)
        )
        runtime = await stack.enter_async_context(
            Runtime.open(make_repo(REPO), database=str(tmp_path / "amodal.db"), model=model)
        )
        app = create_app(runtime, Authenticator(runtime.bundle.config.auth, os.environ))
        client = await stack.enter_async_context(
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
        )
        yield Api(runtime, client)


FAULTS: list[tuple[str, list[Step], str, str]] = [
    # id, what the model answers (one step per attempt), done reason, the error's words
    ("429", [error(429, "slow down"), error(429, "slow down")], "error", "HTTP 429: slow down"),
    ("500", [error(500, "boom"), error(500, "boom")], "error", "HTTP 500: boom"),
    ("503-then-ok", [error(503, "overloaded"), reply("Recovered.")], "model_stop", ""),
    ("400", [error(400, "bad temperature")], "error", "HTTP 400: bad temperature"),
    ("hang-before-headers", [hang(30), hang(30)], "error", "timed out"),
    ("hang-mid-stream", [stall("partial answer", 30)], "error", "stalled"),
    ("cut-stream", [cut_stream("partial answer")], "error", "the stream broke"),
    ("closed-after-text", [unfinished(reply("partial answer"))], "error", "was complete"),
    ("closed-after-tool-call", [unfinished(CHARGE)] * 2, "error", "was complete"),
    ("closed-after-tool-call-then-ok", [unfinished(CHARGE), reply("Recovered.")], "model_stop", ""),
    ("cut-inside-tool-call", [cut_in_tool_call(CHARGE)] * 2, "error", "the stream broke"),
    (
        "cut-inside-tool-call-then-ok",
        [cut_in_tool_call(CHARGE), reply("Recovered.")],
        "model_stop",
        "",
    ),
    ("non-json-chunk", [junk_chunk("partial answer")], "error", "a chunk is not JSON"),
    (
        "error-event-in-stream",
        [junk_chunk("partial answer", junk='{"error": {"message": "overloaded"}}')],
        "error",
        "error in the stream: overloaded",
    ),
    (
        "malformed-tool-call-json",
        [raw_arguments("charge", '{"amount": '), reply("Recovered.")],
        "model_stop",
        "",
    ),
]


@pytest.mark.parametrize(
    ("steps", "reason", "words"),
    [fault[1:] for fault in FAULTS],
    ids=[fault[0] for fault in FAULTS],
)
async def test_every_turn_ends_with_one_clear_done_and_uses_no_partial_answer(
    faulty: Api,
    scripted_model: ScriptedModel,
    tmp_path: Path,
    steps: list[Step],
    reason: str,
    words: str,
) -> None:
    scripted_model.enqueue(*steps)

    events = await faulty.chat(message="Charge the card, please.")

    kinds = [e["type"] for e in events]
    assert kinds.count("done") == 1 and kinds[-1] == "done", kinds
    assert events[-1]["reason"] == reason
    errors = [e for e in events if e["type"] == "error"]
    if reason == "error":
        assert kinds[-2] == "error" and len(errors) == 1
        assert errors[0]["code"] == "model_error"
        assert "model 'scripted'" in errors[0]["message"] and words in errors[0]["message"]
    else:
        assert errors == [] and events[-2]["type"] == "usage"
    assert len(scripted_model.requests) == len(steps)
    assert not (tmp_path / "repo/tools/charge/ran.log").exists()  # no half-sent call ran

    # Nothing partial was kept, and the session goes on.
    session_id = events[0]["session_id"]
    log = (await faulty.client.get(f"/sessions/{session_id}")).json()["events"]
    assert "partial answer" not in str([e for e in log if e["type"] == "assistant"])
    scripted_model.reply("Next answer.")
    again = await faulty.chat(message="Next?", session_id=session_id)
    assert again[-1]["reason"] == "model_stop"
    assert "partial answer" not in str(scripted_model.requests[-1].messages)


# ---------------------------------------------------------------- with the default client


async def test_a_stream_closed_after_text_is_a_model_error_never_the_reply(
    api: Api, scripted_model: ScriptedModel
) -> None:
    scripted_model.enqueue(unfinished(reply("It is sunny and")))

    events = await api.chat(message="Weather?")

    assert [e["type"] for e in events][-2:] == ["error", "done"]
    assert events[-1]["reason"] == "error" and events[-2]["code"] == "model_error"
    log = (await api.client.get(f"/sessions/{events[0]['session_id']}")).json()["events"]
    assert [e for e in log if e["type"] == "assistant"] == []


async def test_a_complete_tool_call_in_a_stream_closed_early_never_runs(
    make_repo: Callable[..., Path],
    api_for: Callable[..., Any],
    scripted_model: ScriptedModel,
    tmp_path: Path,
) -> None:
    api = await api_for(make_repo(REPO))
    scripted_model.enqueue(unfinished(CHARGE), reply("I charged nothing."))

    events = await api.chat(message="Charge 5.")

    assert not (tmp_path / "repo/tools/charge/ran.log").exists()
    assert [e for e in events if e["type"] in ("tool_call", "tool_result")] == []
    assert events[-1]["reason"] == "model_stop"  # retried: nothing had reached the client
    assert "".join(e["text"] for e in events if e["type"] == "text_delta") == "I charged nothing."


async def test_a_model_that_streams_an_unpaired_surrogate_leaves_the_session_usable(
    make_repo: Callable[..., Path],
    api_for: Callable[..., Any],
    scripted_model: ScriptedModel,
    database_url: str | None,
) -> None:
    # JSON lets a model send "\ud800": no text, which once broke the SSE frame, the stored
    # transcript and every later request of the session.
    api = await api_for(make_repo(REPO), {"DATABASE_URL": database_url} if database_url else {})
    scripted_model.enqueue(reply("Odd \ud800 reply, emoji \U0001f600 kept."))

    events = await api.chat(message="Hi")

    assert events[-1]["reason"] == "model_stop"
    text = "".join(e["text"] for e in events if e["type"] == "text_delta")
    assert text == "Odd \ufffd reply, emoji \U0001f600 kept."
    scripted_model.reply("Fine.")
    again = await api.chat(message="Again", session_id=events[0]["session_id"])
    assert again[-1]["reason"] == "model_stop"
    assert scripted_model.requests[-1].messages[-2]["content"] == text


async def test_a_tool_result_that_is_no_text_does_not_break_the_next_model_call(
    make_repo: Callable[..., Path],
    api_for: Callable[..., Any],
    scripted_model: ScriptedModel,
    database_url: str | None,
) -> None:
    files = {
        **REPO,
        "tools/charge/handler.py": (
            "async def handler(args, ctx):\n    return {'note': 'x\\ud800'}\n"
        ),
    }
    api = await api_for(make_repo(files), {"DATABASE_URL": database_url} if database_url else {})
    scripted_model.enqueue(CHARGE, reply("Charged."))

    events = await api.chat(message="Charge 5.")

    kinds = [e["type"] for e in events]
    assert kinds.count("done") == 1 and events[-1]["reason"] == "model_stop", events[-2:]
    assert len(scripted_model.requests) == 2
