"""Watching turns without changing them: `RunObserver` hooks (`hooks.py`), Prometheus
metrics (`metrics.py`); OpenTelemetry spans are `runtime.otel` (extra `otel`)."""

from runtime.observe.hooks import (
    NO_OBSERVERS,
    Compacted,
    ModelCallEnded,
    ModelCallStarted,
    Observers,
    RunEnded,
    RunObserver,
    RunStarted,
    ToolCallEnded,
    ToolCallStarted,
    TurnEnded,
    TurnStarted,
)

__all__ = [
    "NO_OBSERVERS",
    "Compacted",
    "ModelCallEnded",
    "ModelCallStarted",
    "Observers",
    "RunEnded",
    "RunObserver",
    "RunStarted",
    "ToolCallEnded",
    "ToolCallStarted",
    "TurnEnded",
    "TurnStarted",
]
