"""OpenTelemetry traces of a turn (SPEC 16), read from the SDK's in-memory span exporter."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime import Runtime
from runtime.otel import OpenTelemetryObserver
from runtime.testing import FunctionModel
from tests.test_observe import TEAM, delegating

pytestmark = pytest.mark.anyio


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exported = InMemorySpanExporter()
    yield exported
    exported.clear()


def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    traced = TracerProvider()
    traced.add_span_processor(SimpleSpanProcessor(exporter))
    return traced


async def traced_turn(
    root: Path, exporter: InMemorySpanExporter, *, record_content: bool | None = None
) -> dict[str, ReadableSpan]:
    observer = OpenTelemetryObserver(provider(exporter), record_content=record_content)
    async with Runtime.open(root, model=FunctionModel(delegating), observers=[observer]) as rt:
        await rt.chat("go")
    spans = exporter.get_finished_spans()
    return {f"{span.name}#{index}": span for index, span in enumerate(spans)}


def by_name(spans: dict[str, ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for key, span in spans.items() if key.split("#")[0] == name]


async def test_a_turn_is_a_span_tree_of_model_calls_tools_and_specialists(
    make_repo: Callable[..., Path], exporter: InMemorySpanExporter
) -> None:
    spans = await traced_turn(make_repo(TEAM), exporter)
    (turn,) = by_name(spans, "invoke_agent default")
    (helper,) = by_name(spans, "invoke_agent helper")
    (delegate,) = by_name(spans, "execute_tool call_subagent")
    (load,) = by_name(spans, "execute_tool load_knowledge")
    chats = by_name(spans, "chat function-model")
    assert len(chats) == 4  # three calls of the lead, one of the helper
    assert turn.parent is None
    # Each span hangs where it happened: the specialist under its call_subagent call.
    assert delegate.parent.span_id == turn.context.span_id  # type: ignore[union-attr]
    assert load.parent.span_id == turn.context.span_id  # type: ignore[union-attr]
    assert helper.parent.span_id == delegate.context.span_id  # type: ignore[union-attr]
    parents = sorted(chat.parent.span_id for chat in chats)  # type: ignore[union-attr]
    assert parents == sorted([turn.context.span_id] * 3 + [helper.context.span_id])
    assert {span.context.trace_id for span in spans.values()} == {turn.context.trace_id}


async def test_spans_carry_the_genai_attributes(
    make_repo: Callable[..., Path], exporter: InMemorySpanExporter
) -> None:
    spans = await traced_turn(make_repo(TEAM), exporter)
    (turn,) = by_name(spans, "invoke_agent default")
    chat = by_name(spans, "chat function-model")[0]
    (load,) = by_name(spans, "execute_tool load_knowledge")
    session = turn.attributes["gen_ai.conversation.id"]  # type: ignore[index]
    assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"  # type: ignore[index]
    assert turn.attributes["gen_ai.agent.name"] == "default"  # type: ignore[index]
    assert turn.attributes["gen_ai.usage.input_tokens"] > 0  # type: ignore[index,operator]
    assert chat.attributes["gen_ai.operation.name"] == "chat"  # type: ignore[index]
    assert chat.attributes["gen_ai.request.model"] == "function-model"  # type: ignore[index]
    assert chat.attributes["gen_ai.response.model"] == "function-model"  # type: ignore[index]
    assert chat.attributes["gen_ai.usage.output_tokens"] > 0  # type: ignore[index,operator]
    assert chat.attributes["gen_ai.conversation.id"] == session  # type: ignore[index]
    assert load.attributes["gen_ai.tool.name"] == "load_knowledge"  # type: ignore[index]
    assert load.attributes["gen_ai.tool.call.id"] == "k1"  # type: ignore[index]


async def test_no_content_is_recorded_unless_asked(
    make_repo: Callable[..., Path], exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    content_keys = {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
    }
    monkeypatch.delenv("AMODAL_TRACE_CONTENT", raising=False)
    quiet = await traced_turn(make_repo(TEAM), exporter)
    for span in quiet.values():
        assert not content_keys & set(span.attributes or {}), span.name
        assert "Ask." not in json.dumps(dict(span.attributes or {}))
    exporter.clear()
    monkeypatch.setenv("AMODAL_TRACE_CONTENT", "1")
    loud = await traced_turn(make_repo(TEAM), exporter)
    (load,) = by_name(loud, "execute_tool load_knowledge")
    assert json.loads(load.attributes["gen_ai.tool.call.arguments"]) == {"name": "faq"}  # type: ignore[arg-type,index]
    assert "Ask." in load.attributes["gen_ai.tool.call.result"]  # type: ignore[index,operator]
    chat = by_name(loud, "chat function-model")[0]
    messages = json.loads(chat.attributes["gen_ai.input.messages"])  # type: ignore[arg-type,index]
    assert messages[-1] == {"role": "user", "parts": [{"type": "text", "content": "go"}]}


async def test_no_span_is_made_when_no_exporter_is_configured(
    make_repo: Callable[..., Path], exporter: InMemorySpanExporter
) -> None:
    from opentelemetry import trace

    from runtime.observe.tracing import tracing_from_environment

    # Even with an SDK provider installed globally, the CLI's default adds no observer.
    trace.set_tracer_provider(provider(exporter))
    observers = tracing_from_environment({})
    async with Runtime.open(
        make_repo(TEAM), model=FunctionModel(delegating), observers=observers
    ) as rt:
        await rt.chat("go")
    assert exporter.get_finished_spans() == ()


async def test_a_summariser_call_is_a_model_span_under_the_turn_that_compacted(
    make_repo: Callable[..., Path], exporter: InMemorySpanExporter, scripted_model: Any
) -> None:
    from runtime.engine.compaction import SUMMARY_PROMPT
    from tests.test_compaction import desk, repo

    observer = OpenTelemetryObserver(provider(exporter), record_content=True)
    scripted_model.respond(desk())
    async with Runtime.open(make_repo(repo(1_900)), observers=[observer]) as rt:
        session_id = None
        for number in range(1, 12):
            result = await rt.chat(f"read page {number}", session_id=session_id, operator=True)
            session_id = result.session_id
    spans = exporter.get_finished_spans()
    turns = {span.context.span_id for span in spans if span.name.startswith("invoke_agent")}
    summarising = [
        span
        for span in spans
        if span.name == "chat scripted"
        and SUMMARY_PROMPT[:40] in str(span.attributes.get("gen_ai.input.messages"))
    ]
    assert summarising
    assert all(span.parent is not None and span.parent.span_id in turns for span in summarising)


async def test_spans_carry_the_cost_of_priced_models(
    make_repo: Callable[..., Path], exporter: InMemorySpanExporter
) -> None:
    price = {"input": 3.0, "output": 15.0}
    priced = {
        **TEAM,
        "amodal.json": {
            "name": "priced",
            "version": "1",
            "models": {"main": {"model": "function-model", "price": price}},
        },
    }
    spans = await traced_turn(make_repo(priced), exporter)
    chats = by_name(spans, "chat function-model")
    for chat in chats:
        attributes = chat.attributes or {}
        expected = (
            attributes["gen_ai.usage.input_tokens"] * 3.0  # type: ignore[operator]
            + attributes["gen_ai.usage.output_tokens"] * 15.0  # type: ignore[operator]
        ) / 1e6
        assert attributes["amodal.usage.cost_usd"] == pytest.approx(expected)
    (turn,) = by_name(spans, "invoke_agent default")
    total = sum(chat.attributes["amodal.usage.cost_usd"] for chat in chats)  # type: ignore[index,misc]
    assert turn.attributes["amodal.usage.cost_usd"] == pytest.approx(total)  # type: ignore[index]


async def test_an_unpriced_model_gives_no_cost_attribute(
    make_repo: Callable[..., Path], exporter: InMemorySpanExporter
) -> None:
    spans = await traced_turn(make_repo(TEAM), exporter)
    for span in spans.values():
        assert "amodal.usage.cost_usd" not in (span.attributes or {})
