"""Fallback chains (SPEC 25): when a model fails after its retries with a rate limit, a 5xx,
a timeout or a connection error, the next entry answers; never after a 400-class error, and
never once text has been streamed. The model that answered and `fallback_from` are on the
usage event, the session log, the OpenTelemetry span, and the turn's usage."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime import Runtime, events
from runtime.engine.log import AnswerEntry
from runtime.events import Usage
from runtime.exceptions import ModelError
from runtime.models import ModelReply, ModelSettings, UserMessage
from runtime.models.anthropic import AnthropicModel
from runtime.models.endpoints import ModelEndpoint
from runtime.models.fallback import FallbackModel
from runtime.models.openai import OpenAIModel
from runtime.otel import OpenTelemetryObserver
from runtime.testing import (
    ScriptedAnthropic,
    ScriptedModel,
    cut_in_tool_call,
    cut_stream,
    error,
    hang,
    tool_call,
)

pytestmark = pytest.mark.anyio

ASK = [UserMessage.of("Where is order 7?")]
KEY = "sk-test-fallback-key"


@contextlib.asynccontextmanager
async def chain(
    primary: ScriptedAnthropic, backup: ScriptedModel, read_timeout: float = 60.0
) -> AsyncIterator[FallbackModel]:
    """Claude first (one fast retry), then an OpenAI-compatible backup."""
    first = AnthropicModel.for_endpoint(
        ModelEndpoint("claude-main", primary.base_url, KEY, "anthropic"),
        max_retries=1,
        backoff=0.01,
        timeout=read_timeout,
    )
    second = OpenAIModel.for_endpoint(
        ModelEndpoint("gpt-backup", backup.base_url, KEY), max_retries=1, backoff=0.01
    )
    async with first, second:
        yield FallbackModel([first, second])


async def answer(model: FallbackModel) -> tuple[list[str], ModelReply]:
    deltas: list[str] = []
    final = None
    async for item in model.stream(ASK, None, ModelSettings()):
        if isinstance(item, ModelReply):
            final = item
        else:
            deltas.append(item)
    assert final is not None
    return deltas, final


@pytest.mark.parametrize(
    "failure",
    [error(503, "overloaded"), error(429, "slow down"), error(529, "overloaded"), cut_stream("")],
    ids=["503", "429", "529", "connection dropped"],
)
async def test_a_transient_failure_after_the_retries_is_answered_by_the_fallback(
    failure: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="amodal")
    with ScriptedAnthropic() as primary, ScriptedModel() as backup:
        primary.enqueue(failure, failure)  # the first try and its one retry
        backup.reply("Order 7 has shipped.")
        async with chain(primary, backup) as model:
            deltas, final = await answer(model)
        primary.assert_done()
        backup.assert_done()
    assert "".join(deltas) == final.text == "Order 7 has shipped."
    assert (final.model, final.fallback_from, final.provider) == (
        "gpt-backup",
        "claude-main",
        "openai",
    )
    (fell,) = [r for r in caplog.records if r.msg == "model_fallback"]
    assert (fell.model, fell.next) == ("claude-main", "gpt-backup")  # type: ignore[attr-defined]


async def test_a_model_that_times_out_after_its_retries_is_answered_by_the_fallback() -> None:
    with ScriptedAnthropic() as primary, ScriptedModel() as backup:
        primary.enqueue(hang(30), hang(30))  # no status line: the client's timeout ends it
        backup.reply("Answered in time.")
        async with chain(primary, backup, read_timeout=0.2) as model:
            _, final = await answer(model)
    assert (final.text, final.fallback_from) == ("Answered in time.", "claude-main")


async def test_a_400_class_error_is_raised_and_the_fallback_never_asked() -> None:
    with ScriptedAnthropic() as primary, ScriptedModel() as backup:
        primary.error(400, "prompt is too long")
        async with chain(primary, backup) as model:
            with pytest.raises(ModelError, match="prompt is too long") as caught:
                await answer(model)
        assert backup.requests == []
    assert caught.value.status == 400 and caught.value.model == "claude-main"


async def test_no_fallback_once_text_was_streamed() -> None:
    with ScriptedAnthropic() as primary, ScriptedModel() as backup:
        primary.cut_stream("Order 7 is")
        async with chain(primary, backup) as model:
            with pytest.raises(ModelError, match="the stream broke"):
                await answer(model)  # the backup would repeat what was already shown
        assert backup.requests == []


async def test_a_tool_call_cut_off_at_every_try_is_answered_by_the_fallback() -> None:
    with ScriptedAnthropic() as primary, ScriptedModel() as backup:
        cut = cut_in_tool_call(tool_call("charge", {"amount": 5}))
        primary.enqueue(cut, cut)
        backup.reply("I have not charged anything.")
        async with chain(primary, backup) as model:
            _, final = await answer(model)
    assert final.tool_calls == () and final.fallback_from == "claude-main"


async def test_when_every_model_fails_the_error_names_each() -> None:
    with ScriptedAnthropic() as primary, ScriptedModel() as backup:
        primary.respond(lambda request: error(503, "claude is overloaded"))
        backup.respond(lambda request: error(502, "bad gateway"))
        async with chain(primary, backup) as model:
            with pytest.raises(ModelError) as caught:
                await answer(model)
        where = (f"127.0.0.1:{backup.port}/v1", f"127.0.0.1:{primary.port}")
    message = str(caught.value)
    assert message.startswith(f"model 'gpt-backup' at {where[0]} failed after 2 attempts")
    assert "bad gateway" in message
    assert f"after the fallback from 'claude-main' at {where[1]}" in message
    assert "claude is overloaded" in message


async def test_the_span_and_the_events_record_the_model_that_answered(
    make_repo: Callable[..., Path],
) -> None:
    exporter = InMemorySpanExporter()
    traced = TracerProvider()
    traced.add_span_processor(SimpleSpanProcessor(exporter))
    observer = OpenTelemetryObserver(traced)
    with ScriptedAnthropic() as primary, ScriptedModel() as backup:
        primary.respond(lambda request: error(503, "overloaded"))
        backup.reply("Hello.")
        async with (
            chain(primary, backup) as model,
            Runtime.open(make_repo(), model=model, observers=[observer]) as rt,
        ):
            result = await rt.chat("hi")
    (usage,) = [e for e in result.events if isinstance(e, events.ModelUsage)]
    assert (usage.model, usage.fallback_from) == ("gpt-backup", "claude-main")
    assert usage.to_json()["fallback_from"] == "claude-main"
    (span,) = [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
    attributes = dict(span.attributes or {})
    assert span.name == "chat claude-main"  # the model asked for
    assert attributes["gen_ai.request.model"] == "claude-main"
    assert attributes["gen_ai.response.model"] == "gpt-backup"  # the model that answered
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["amodal.fallback_from"] == "claude-main"


def test_fallback_from_is_stored_only_when_set_and_old_entries_decode() -> None:
    usage = Usage(10, 2, 0, 4)
    fell = AnswerEntry("hi", (), "gpt-backup", usage, "claude-main")
    assert AnswerEntry.decode(fell.data()) == fell
    assert fell.data()["fallback_from"] == "claude-main"
    assert fell.data()["usage"] == {"input": 10, "output": 2, "cached": 0, "cache_write": 4}
    older = {
        "text": "hi",
        "tool_calls": [],
        "model": "m",
        "usage": {"input": 1, "output": 1, "cached": 0},
    }
    decoded = AnswerEntry.decode(older)
    assert decoded.fallback_from is None and decoded.usage == Usage(1, 1, 0, 0)
    assert "fallback_from" not in decoded.data()
    assert decoded.data()["usage"] == older["usage"]  # no key that was not there


async def test_a_repo_whose_main_model_answers_503_keeps_answering_through_its_fallback(
    make_repo: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ScriptedAnthropic() as primary, ScriptedModel() as backup:
        primary.respond(lambda request: error(503, "overloaded"))
        backup.respond(lambda request: "Answered by the backup.")
        models = {
            "main": {
                "model": "claude-main",
                "provider": "anthropic",
                "baseUrl": primary.base_url,
                "fallback": [{"tier": "simple"}],
            },
            "simple": {"model": "gpt-backup", "baseUrl": backup.base_url, "apiKey": "k"},
        }
        repo = make_repo({"amodal.json": {"name": "r", "version": "1", "models": models}})
        monkeypatch.delenv("ANTHROPIC_BASE_URL")  # the guard's: the entry's own URL is used
        async with Runtime.open(repo, database=str(tmp_path / "a.db")) as rt:
            first = await rt.chat("hi")
            again = await rt.chat("and again?", session_id=first.session_id)
            history = await rt.session(first.session_id, operator=True)
        assert len(primary.requests) == 8  # each turn: the first try and three retries
        assert len(backup.requests) == 2
    for result in (first, again):
        assert result.reason == "model_stop" and result.text == "Answered by the backup."
        (usage,) = [e for e in result.events if isinstance(e, events.ModelUsage)]
        assert (usage.model, usage.fallback_from) == ("gpt-backup", "claude-main")
    stored = [e.data for e in history.entries if e.type == "assistant"]
    assert [entry["fallback_from"] for entry in stored] == ["claude-main", "claude-main"]
    assert json.dumps(stored[0]["model"]) == '"gpt-backup"'
