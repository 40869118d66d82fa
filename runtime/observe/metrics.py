"""`GET /metrics`: what a server has done, in Prometheus' text format (SPEC 16).

A `Metrics` observer counts turns, model calls, tool calls and tokens as they
happen, in a registry of its own (several runtimes in one process never mix
their numbers); the repo's reload failures (and, with MCP servers, their states)
are read when Prometheus scrapes.

    amodal_turns_total{reason,face}              turns by done reason and by the face that
                                                 started them (chat, openai_chat, responses,
                                                 mcp, a2a, ag_ui)
    amodal_turn_duration_seconds                 histogram
    amodal_model_call_duration_seconds{model}    histogram, by the model asked for
    amodal_tool_calls_total{tool,status}         ok, error, denied, timeout; a name the
                                                 run has no tool for is `(unknown)`
    amodal_tokens_total{kind}                    input, output, cached, cache_write
    amodal_model_tokens_total{agent,model,kind}  the same, by agent and answering model
    amodal_model_cost_usd_total{agent,model}     USD of the calls whose price is known
    amodal_running_turns                         sessions with a turn running here
    amodal_reload_failures_total                 reloads that kept the last good bundle
    amodal_mcp_servers{status}                   MCP servers by status (ready, starting, failed)
    amodal_automation_runs_total{automation,status}  automation runs this process ended (ok,
                                                 error, awaiting_confirmation) and cron slots
                                                 it recorded missed or skipped
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import generate_latest as _generate
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from runtime.observe.hooks import (
    Compacted,
    ModelCallEnded,
    ModelCallStarted,
    RunObserver,
    ToolCallEnded,
    ToolCallStarted,
    TurnEnded,
    TurnStarted,
)
from runtime.outside.mcp import McpSnapshot

UNKNOWN_TOOL = "(unknown)"
"""The `tool` label of calls to a name the run has no tool for: the model writes those
names, and each new label value would be a new time series (one of 3,000 characters was
seen). No tool can have this name, so it never hides a real one."""
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

# Turns wait on models: seconds to minutes.
_TURN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_CALL_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics(RunObserver):
    """Counts what turns do; `render()` is the `/metrics` body."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._turns = Counter(
            "amodal_turns",
            "Turns by done reason and by the face that started them.",
            ["reason", "face"],
            registry=self.registry,
        )
        self._turn_seconds = Histogram(
            "amodal_turn_duration_seconds",
            "Wall time of a turn.",
            buckets=_TURN_BUCKETS,
            registry=self.registry,
        )
        self._model_seconds = Histogram(
            "amodal_model_call_duration_seconds",
            "Wall time of a model call, by the model asked for.",
            ["model"],
            buckets=_CALL_BUCKETS,
            registry=self.registry,
        )
        self._tools = Counter(
            "amodal_tool_calls",
            "Tool calls by tool and status.",
            ["tool", "status"],
            registry=self.registry,
        )
        self._tokens = Counter(
            "amodal_tokens", "Tokens of model calls, by kind.", ["kind"], registry=self.registry
        )
        self._running = Gauge(
            "amodal_running_turns", "Sessions with a turn running.", registry=self.registry
        )
        self._automation_runs = Counter(
            "amodal_automation_runs",
            "Automation runs ended here, and cron slots recorded missed or skipped, by status.",
            ["automation", "status"],
            registry=self.registry,
        )
        self._model_tokens = Counter(
            "amodal_model_tokens",
            "Tokens of model calls, by agent, answering model and kind.",
            ["agent", "model", "kind"],
            registry=self.registry,
        )
        self._cost = Counter(
            "amodal_model_cost_usd",
            "USD spent on model calls whose price is known, by agent and answering model.",
            ["agent", "model"],
            registry=self.registry,
        )
        self._compactions = Counter(
            "amodal_compactions",
            "Compactions of sessions' views, by stage (mask, summary).",
            ["stage"],
            registry=self.registry,
        )

    def automation_run_ended(self, automation: str, status: str) -> None:
        """Count one run of `automation` (names are the repo's: a bounded label)."""
        self._automation_runs.labels(automation=automation, status=status).inc()

    def count_reload_failures(self, count: Callable[[], int]) -> None:
        """Expose the failed reloads `count()` returns at each scrape."""
        self.registry.register(_ReloadFailures(count))

    def count_mcp_servers(self, snapshot: Callable[[], McpSnapshot]) -> None:
        """Expose the MCP servers by status, read from `snapshot()` at each scrape."""
        self.registry.register(_McpServers(snapshot))

    def add_collector(self, collector: Collector) -> None:
        """Expose more numbers read at scrape time (e.g. MCP servers by status)."""
        self.registry.register(collector)

    def render(self) -> bytes:
        return _generate(self.registry)

    def turn_started(self, turn: TurnStarted) -> None:
        self._running.inc()

    def turn_ended(self, turn: TurnStarted, ended: TurnEnded) -> None:
        self._running.dec()
        self._turns.labels(ended.reason, turn.face).inc()
        self._turn_seconds.observe(ended.duration_s)

    def model_call_ended(self, call: ModelCallStarted, ended: ModelCallEnded) -> None:
        model = ended.model or call.model
        spent = self._model_tokens
        spent.labels(call.agent, model, "input").inc(ended.usage.input_tokens)
        spent.labels(call.agent, model, "output").inc(ended.usage.output_tokens)
        spent.labels(call.agent, model, "cached").inc(ended.usage.cached_tokens)
        if ended.cost_usd is not None:
            self._cost.labels(call.agent, model).inc(ended.cost_usd)
        self._model_seconds.labels(call.model).observe(ended.duration_s)
        self._tokens.labels("input").inc(ended.usage.input_tokens)
        self._tokens.labels("output").inc(ended.usage.output_tokens)
        self._tokens.labels("cached").inc(ended.usage.cached_tokens)
        if ended.usage.cache_write_tokens:
            self._tokens.labels("cache_write").inc(ended.usage.cache_write_tokens)

    def tool_call_ended(self, call: ToolCallStarted, ended: ToolCallEnded) -> None:
        self._tools.labels(tool_label(call, ended), ended.status).inc()

    def compacted(self, compaction: Compacted) -> None:
        self._compactions.labels(compaction.stage).inc()


def tool_label(call: ToolCallStarted, ended: ToolCallEnded) -> str:
    """The call's tool name, or `UNKNOWN_TOOL` when the run had no such tool: the loop
    answers such a call with "unknown tool 'name'; ..." and runs nothing."""
    unknown = ended.status == "error" and (ended.error or "").startswith(
        f"unknown tool {call.tool!r}"
    )
    return UNKNOWN_TOOL if unknown or not _TOOL_NAME.match(call.tool) else call.tool


class _ReloadFailures(Collector):
    def __init__(self, count: Callable[[], int]) -> None:
        self._count = count

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "amodal_reload_failures", "Reloads that failed and kept the last good bundle."
        )
        family.add_metric([], self._count())
        yield family


class _McpServers(Collector):
    def __init__(self, snapshot: Callable[[], McpSnapshot]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "amodal_mcp_servers", "MCP servers by status.", labels=["status"]
        )
        states = [state.status for state in self._snapshot().servers.values()]
        for status in ("ready", "starting", "failed"):
            family.add_metric([status], states.count(status))
        yield family


__all__ = ["Metrics"]
