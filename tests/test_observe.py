"""Run observers (SPEC 16): every hook fires in order with the ids that tie the tree together,
and an observer that fails changes nothing."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime import RunObserver, Runtime
from runtime.exceptions import ConfigurationError
from runtime.observe.hooks import (
    ModelCallEnded,
    ModelCallStarted,
    RunEnded,
    RunStarted,
    ToolCallEnded,
    ToolCallStarted,
    TurnEnded,
    TurnStarted,
)
from runtime.observe.tracing import tracing_from_environment
from runtime.testing import FunctionModel, tool_call

pytestmark = pytest.mark.anyio

TEAM: dict[str, Any] = {
    "agents/default/AGENT.md": "You lead.\n",
    "agents/default/agent.json": {"subagents": ["helper"], "tools": ["load_knowledge"]},
    "agents/helper/AGENT.md": "You help.\n",
    "knowledge/faq.md": "# FAQ\n\nAsk.\n",
}


def delegating(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
    """The lead loads a document, then delegates once, then answers; the helper answers."""
    system = messages[0]["content"]
    if "You help." in system:
        return "helped"
    results = [m for m in messages if m["role"] == "tool"]
    if not results:
        return tool_call("load_knowledge", {"name": "faq"}, id="k1")
    if len(results) == 1:
        return tool_call("call_subagent", {"calls": [{"subagent": "helper", "task": "t"}]}, id="d1")
    return "all done"


class Recorder(RunObserver):
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any, Any]] = []

    def turn_started(self, turn: TurnStarted) -> None:
        self.seen.append(("turn_started", turn, None))

    def turn_ended(self, turn: TurnStarted, ended: TurnEnded) -> None:
        self.seen.append(("turn_ended", turn, ended))

    def run_started(self, run: RunStarted) -> None:
        self.seen.append(("run_started", run, None))

    def run_ended(self, run: RunStarted, ended: RunEnded) -> None:
        self.seen.append(("run_ended", run, ended))

    def model_call_started(self, call: ModelCallStarted) -> None:
        self.seen.append(("model_call_started", call, None))

    def model_call_ended(self, call: ModelCallStarted, ended: ModelCallEnded) -> None:
        self.seen.append(("model_call_ended", call, ended))

    def tool_call_started(self, call: ToolCallStarted) -> None:
        self.seen.append(("tool_call_started", call, None))

    def tool_call_ended(self, call: ToolCallStarted, ended: ToolCallEnded) -> None:
        self.seen.append(("tool_call_ended", call, ended))

    def hooks(self) -> list[str]:
        return [hook for hook, _, _ in self.seen]


async def test_every_hook_fires_with_ids_timings_usage_and_status(
    make_repo: Callable[..., Path],
) -> None:
    recorder = Recorder()
    async with Runtime.open(
        make_repo(TEAM), model=FunctionModel(delegating), observers=[recorder]
    ) as rt:
        result = await rt.chat("go")
    root = result.events[0].run_id
    assert recorder.hooks()[0] == "turn_started" and recorder.hooks()[-1] == "turn_ended"
    for hook in ("run", "model_call", "tool_call"):
        assert recorder.hooks().count(f"{hook}_started") == recorder.hooks().count(f"{hook}_ended")
    turn, ended = recorder.seen[-1][1:]
    assert (turn.run_id, turn.session_id, turn.agent) == (root, result.session_id, "default")
    assert ended.reason == "model_stop" and ended.usage == result.usage and ended.duration_s > 0
    specialist = next(run for hook, run, _ in recorder.seen if hook == "run_started")
    # The specialist names its parent run and the call_subagent call that started it.
    assert (specialist.parent_run_id, specialist.parent_call_id, specialist.depth) == (
        root,
        "d1",
        1,
    )
    tools = {call.tool: ended for hook, call, ended in recorder.seen if hook == "tool_call_ended"}
    assert tools["load_knowledge"].status == "ok" and tools["call_subagent"].status == "ok"
    models = [(call, end) for hook, call, end in recorder.seen if hook == "model_call_ended"]
    assert {call.run_id for call, _ in models} == {root, specialist.run_id}
    assert all(end.usage.input_tokens > 0 and end.model == "function-model" for _, end in models)


async def test_a_failing_observer_is_logged_and_changes_nothing(
    make_repo: Callable[..., Path], events: Callable[[str], list[logging.LogRecord]]
) -> None:
    class Broken(RunObserver):
        def model_call_started(self, call: ModelCallStarted) -> None:
            raise RuntimeError("observer bug")

    async with Runtime.open(
        make_repo(TEAM), model=FunctionModel(delegating), observers=[Broken()]
    ) as rt:
        result = await rt.chat("go")
    assert (result.reason, result.text) == ("model_stop", "all done")
    assert events("observer_failed") and events("observer_failed")[0].observer == "Broken"  # type: ignore[attr-defined]


def test_no_tracing_without_an_exporter_and_none_when_asked_for_none() -> None:
    assert tracing_from_environment({}) == []
    assert tracing_from_environment({"OTEL_TRACES_EXPORTER": "none"}) == []
    assert tracing_from_environment({"OTEL_SERVICE_NAME": "x"}) == []


def test_an_exporter_named_by_the_environment_gets_a_tracing_observer() -> None:
    from runtime.otel import OpenTelemetryObserver

    (console,) = tracing_from_environment({"OTEL_TRACES_EXPORTER": "console"})
    (otlp,) = tracing_from_environment({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
    assert isinstance(console, OpenTelemetryObserver) and isinstance(otlp, OpenTelemetryObserver)
    console.close()
    otlp.close()


def test_tracing_without_the_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as if the extra were missing
    monkeypatch.delitem(sys.modules, "runtime.observe.spans", raising=False)
    with pytest.raises(ConfigurationError, match=r"amodal-runtime\[otel\]"):
        tracing_from_environment({"OTEL_TRACES_EXPORTER": "console"})
