"""What a session's log means on the wire: the streamed events each log entry stands for.

A turn streams exactly the events this module derives from the entries it writes,
with the same ids (`runtime.engine.loop`, `runtime.engine.turn` and `runtime.engine.runs` call
`wire_events` on every entry they record), so a client that replays the log from
an id sees the same events, once each, as one that never lost its stream.

An entry stands for zero or more events: `assistant` (a model's answer) for the
`usage` event and one `tool_call` per call it asked for, ids `SEQ`, `SEQ:1`,
`SEQ:2`...; `user`, `prompt`, `handoff` and `proposal` for none.
"""

from __future__ import annotations

import json
from typing import Any

from runtime import events
from runtime.events import Event, Usage
from runtime.storage import StoredEvent

Position = tuple[int, int]
"""Where an event sits in a log: (entry seq, index of the event within the entry)."""


def wire_events(entry: StoredEvent) -> list[Event]:
    """The streamed events a log entry stands for, in order, with their ids."""
    build = _BUILDERS.get(entry.type)
    return [] if build is None else build(entry, entry.data)


def position(event_id: str) -> Position:
    """The position an event id names; `ValueError` for anything else."""
    seq, _, index = event_id.partition(":")
    parsed = (int(seq), int(index) if index else 0)
    if parsed[0] < 0 or parsed[1] < 0 or not seq.isdigit() or (index and not index.isdigit()):
        raise ValueError(f"not an event id: {event_id!r} (expected SEQ or SEQ:K)")
    return parsed


def after(entries: list[StoredEvent], seen: Position) -> list[Event]:
    """The events of `entries` that come after position `seen`."""
    found: list[Event] = []
    for entry in entries:
        if entry.seq < seen[0]:
            continue
        for event in wire_events(entry):
            if position(event.id) > seen:
                found.append(event)
    return found


def _id(seq: int, index: int) -> str:
    return str(seq) if index == 0 else f"{seq}:{index}"


def _common(entry: StoredEvent, index: int = 0) -> dict[str, str]:
    """The fields every event of `entry` has: its session, its run, and its own id."""
    return {
        "session_id": entry.session_id,
        "run_id": entry.run_id or "",
        "id": _id(entry.seq, index),
    }


def _turn(entry: StoredEvent, data: dict[str, Any]) -> list[Event]:
    return [
        events.Session(
            **_common(entry),
            agent=data["agent"],
            bundle_version=entry.bundle_version or "",
            created=bool(data.get("created", False)),
        )
    ]


def _assistant(entry: StoredEvent, data: dict[str, Any]) -> list[Event]:
    found: list[Event] = [
        events.ModelUsage(
            **_common(entry), model=data.get("model", ""), usage=Usage.from_json(data.get("usage"))
        )
    ]
    for index, call in enumerate(data.get("tool_calls") or (), 1):
        function = call.get("function", {})
        found.append(
            events.ToolCall(
                **_common(entry, index),
                call_id=call["id"],
                name=function.get("name", ""),
                arguments=shown_arguments(function.get("arguments", "")),
            )
        )
    return found


def _tool_result(entry: StoredEvent, data: dict[str, Any]) -> list[Event]:
    return [
        events.ToolResult(
            **_common(entry),
            call_id=data["call_id"],
            name=data.get("name", ""),
            status=data["status"],
            duration_ms=int(data.get("duration_ms", 0)),
            result=data.get("result"),
            error=data.get("error"),
        )
    ]


def _same_fields(kind: type[Any]) -> Any:
    """An entry whose data are the event's own fields."""

    def build(entry: StoredEvent, data: dict[str, Any]) -> list[Event]:
        return [events.parse({**data, "type": kind.type, **_common(entry)})]

    return build


_BUILDERS: dict[str, Any] = {
    "turn": _turn,
    "assistant": _assistant,
    "tool_result": _tool_result,
    "agent": _same_fields(events.AgentChange),
    "surface_changed": _same_fields(events.SurfaceChanged),
    "text": _same_fields(events.TextDelta),
    "subagent_start": _same_fields(events.SubagentStart),
    "subagent_end": _same_fields(events.SubagentEnd),
    "choice": _same_fields(events.Choice),
    "confirmation_required": _same_fields(events.ConfirmationRequired),
    "error": _same_fields(events.Error),
    "done": _same_fields(events.Done),
}


def shown_arguments(arguments: str) -> Any:
    """Tool-call arguments as events show them: parsed, or the raw text when not JSON."""
    try:
        return json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return arguments
