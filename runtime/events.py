"""The events a turn streams (SPEC 6.2): one shape for SSE, `amodal chat --json` and storage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

EventType = Literal[
    "session",
    "agent",
    "text_delta",
    "tool_call",
    "tool_result",
    "subagent_start",
    "subagent_end",
    "choice",
    "confirmation_required",
    "surface_changed",
    "usage",
    "error",
    "done",
]

DoneReason = Literal[
    "model_stop",
    "stop_execution",
    "max_tool_calls",
    "awaiting_choice",
    "awaiting_confirmation",
    "cancelled",
    "error",
]


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts; added up across the model calls of a turn and its specialists."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_tokens + other.cached_tokens,
        )

    def as_json(self) -> dict[str, int]:
        return {
            "input": self.input_tokens,
            "output": self.output_tokens,
            "cached": self.cached_tokens,
        }


@dataclass(frozen=True, slots=True)
class Event:
    """One streamed event: `type`, the session, the run it belongs to, and its fields."""

    type: EventType
    session_id: str
    run_id: str
    data: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "session_id": self.session_id,
            "run_id": self.run_id,
            **self.data,
        }
