"""OpenTelemetry traces of turns (SPEC 16), with the GenAI semantic conventions. Extra `otel`.

    async with Runtime.open(repo, observers=[OpenTelemetryObserver()]) as rt: ...

One span per turn (`invoke_agent <agent>`), per model call (`chat <model>`), per
tool call (`execute_tool <tool>`) and per specialist run (`invoke_agent
<specialist>`, nested under the `call_subagent` call that started it). Spans are
parented explicitly by the ids the hooks carry (never through context variables,
which an async generator's consumer does not share). Messages, tool arguments and
results are recorded only with `AMODAL_TRACE_CONTENT=1`: they may hold personal data.

`amodal serve` and `amodal chat` add this observer when the standard `OTEL_*`
variables name an exporter (`runtime.observe.tracing.tracing_from_environment`); otherwise
no span is made.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider

from runtime._version import __version__
from runtime.models.messages import trace_messages
from runtime.observe.hooks import (
    ModelCallEnded,
    ModelCallStarted,
    RunEnded,
    RunObserver,
    RunStarted,
    ToolCallEnded,
    ToolCallStarted,
    TurnEnded,
    TurnStarted,
)

TRACE_CONTENT_ENV = "AMODAL_TRACE_CONTENT"


class OpenTelemetryObserver(RunObserver):
    """Spans of every turn, model call, tool call and specialist run."""

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        record_content: bool | None = None,
        owns_provider: bool = False,
    ) -> None:
        provider = tracer_provider or trace.get_tracer_provider()
        self._provider = provider if owns_provider else None
        self._tracer: Tracer = provider.get_tracer("amodal", __version__)
        self._content = (
            os.environ.get(TRACE_CONTENT_ENV) == "1" if record_content is None else record_content
        )
        self._spans: dict[tuple[str, ...], Span] = {}

    def close(self) -> None:
        """Flush and stop the provider this observer made (one passed in stays its owner's)."""
        shutdown = getattr(self._provider, "shutdown", None)
        if shutdown is not None:
            shutdown()

    # turns and runs

    def turn_started(self, turn: TurnStarted) -> None:
        self._open(
            ("run", turn.run_id),
            f"invoke_agent {turn.agent}",
            None,
            SpanKind.INTERNAL,
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": turn.agent,
                "gen_ai.conversation.id": turn.session_id,
                "amodal.run_id": turn.run_id,
                "amodal.bundle_version": turn.bundle_version,
            },
        )

    def turn_ended(self, turn: TurnStarted, ended: TurnEnded) -> None:
        self._close(
            ("run", turn.run_id),
            {
                "gen_ai.usage.input_tokens": ended.usage.input_tokens,
                "gen_ai.usage.output_tokens": ended.usage.output_tokens,
                "amodal.done_reason": ended.reason,
                **_cost(ended.cost_usd),
            },
            ended.error if ended.reason == "error" else None,
        )

    def run_started(self, run: RunStarted) -> None:
        parent = self._spans.get(
            ("tool", run.parent_run_id, run.parent_call_id)
        ) or self._spans.get(("run", run.parent_run_id))
        self._open(
            ("run", run.run_id),
            f"invoke_agent {run.agent}",
            parent,
            SpanKind.INTERNAL,
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": run.agent,
                "gen_ai.conversation.id": run.session_id,
                "amodal.run_id": run.run_id,
                "amodal.depth": run.depth,
                "amodal.label": run.label,
            },
        )

    def run_ended(self, run: RunStarted, ended: RunEnded) -> None:
        self._close(
            ("run", run.run_id),
            {
                "gen_ai.usage.input_tokens": ended.usage.input_tokens,
                "gen_ai.usage.output_tokens": ended.usage.output_tokens,
                "amodal.status": ended.status,
            },
            ended.error,
        )

    # model calls

    def model_call_started(self, call: ModelCallStarted) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": call.provider or "openai",
            "gen_ai.request.model": call.model,
            "gen_ai.agent.name": call.agent,
            "gen_ai.conversation.id": call.session_id,
        }
        if self._content:
            attributes["gen_ai.input.messages"] = _json(trace_messages(call.messages))
        self._open(
            ("model", call.call_id),
            f"chat {call.model}",
            self._spans.get(("run", call.run_id)),
            SpanKind.CLIENT,
            attributes,
        )

    def model_call_ended(self, call: ModelCallStarted, ended: ModelCallEnded) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.usage.input_tokens": ended.usage.input_tokens,
            "gen_ai.usage.output_tokens": ended.usage.output_tokens,
        }
        attributes.update(_cost(ended.cost_usd))
        if ended.model is not None:
            attributes["gen_ai.response.model"] = ended.model
        if ended.provider is not None:
            attributes["gen_ai.provider.name"] = ended.provider  # a fallback's may differ
        if ended.fallback_from is not None:
            attributes["amodal.fallback_from"] = ended.fallback_from
        if ended.usage.cached_tokens:
            attributes["gen_ai.usage.cache_read.input_tokens"] = ended.usage.cached_tokens
        if ended.usage.cache_write_tokens:
            attributes["gen_ai.usage.cache_creation.input_tokens"] = ended.usage.cache_write_tokens
        if ended.finish_reason is not None:
            attributes["gen_ai.response.finish_reasons"] = [ended.finish_reason]
        if self._content and ended.error is None:
            attributes["gen_ai.output.messages"] = _json(
                [{"role": "assistant", "parts": [{"type": "text", "content": ended.text}]}]
            )
        self._close(("model", call.call_id), attributes, ended.error)

    # tool calls

    def tool_call_started(self, call: ToolCallStarted) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.tool,
            "gen_ai.tool.call.id": call.call_id,
            "gen_ai.agent.name": call.agent,
            "gen_ai.conversation.id": call.session_id,
        }
        if self._content:
            attributes["gen_ai.tool.call.arguments"] = _json(call.arguments)
        self._open(
            ("tool", call.run_id, call.call_id),
            f"execute_tool {call.tool}",
            self._spans.get(("run", call.run_id)),
            SpanKind.INTERNAL,
            attributes,
        )

    def tool_call_ended(self, call: ToolCallStarted, ended: ToolCallEnded) -> None:
        attributes: dict[str, Any] = {"amodal.tool.status": ended.status}
        if self._content and ended.status == "ok":
            attributes["gen_ai.tool.call.result"] = _json(ended.result)
        self._close(("tool", call.run_id, call.call_id), attributes, ended.error)

    # spans

    def _open(
        self,
        key: tuple[str, ...],
        name: str,
        parent: Span | None,
        kind: SpanKind,
        attributes: Mapping[str, Any],
    ) -> None:
        context = trace.set_span_in_context(parent) if parent is not None else None
        self._spans[key] = self._tracer.start_span(
            name, context=context, kind=kind, attributes=attributes
        )

    def _close(
        self, key: tuple[str, ...], attributes: Mapping[str, Any], error: str | None
    ) -> None:
        span = self._spans.pop(key, None)
        if span is None:
            return
        span.set_attributes(attributes)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
            span.set_attribute("error.type", error.split(":", 1)[0][:100])
        span.end()


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def exporting_observer(environ: Mapping[str, str]) -> OpenTelemetryObserver:
    """An observer with a tracer provider of its own, exporting as the `OTEL_*` variables say
    (`runtime.observe.tracing.tracing_from_environment` decides whether to make one)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SpanExporter,
    )

    exporter: SpanExporter
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "console":
        exporter = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()  # endpoint, headers and protocol from OTEL_EXPORTER_OTLP_*
    service = environ.get("OTEL_SERVICE_NAME") or "amodal"
    provider = SdkTracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return OpenTelemetryObserver(provider, owns_provider=True)


__all__ = ["TRACE_CONTENT_ENV", "OpenTelemetryObserver", "exporting_observer"]


def _cost(cost_usd: float | None) -> dict[str, float]:
    """The span attribute of a cost (SPEC 22), when the price is known."""
    return {} if cost_usd is None else {"amodal.usage.cost_usd": cost_usd}
