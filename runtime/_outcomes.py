"""How turns, tool calls and specialists end: the words the events use for it.

In a module of their own so that a file format can name them (an eval suite expects a
turn's `done_reason`) without importing every event class: `amodal validate` reads
eval suites and never builds an event. `runtime.events` is where they are public.
"""

from __future__ import annotations

from typing import Literal

DoneReason = Literal[
    "model_stop",
    "stop_execution",
    "max_tool_calls",
    "budget_exhausted",
    "awaiting_choice",
    "awaiting_confirmation",
    "cancelled",
    "error",
]
"""Why a turn ended (SPEC 15, the `done` event)."""
ToolStatus = Literal["ok", "error", "denied", "timeout"]
SpecialistStatus = Literal["ok", "error"]

__all__ = ["DoneReason", "SpecialistStatus", "ToolStatus"]
