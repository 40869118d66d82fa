"""A session's model transcript, rebuilt from its append-only event log.

Only the root runs' events form the conversation (a specialist's work reaches
it as a tool result). The rebuilt transcript is always valid for the next model
call: a tool call left without a result (a crash, a cancelled turn) gets an
`interrupted` result, except the one call a person is still asked to approve.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Set
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from runtime.storage import Storage

INTERRUPTED = json.dumps({"error": "interrupted: the turn ended before this call finished"})


class LoggedEvent(Protocol):
    @property
    def type(self) -> str: ...
    @property
    def run_id(self) -> str | None: ...
    @property
    def data(self) -> dict[str, Any]: ...


def rebuild(
    events: Iterable[LoggedEvent], pending: Set[str] = frozenset(), *, repair: bool = True
) -> list[dict[str, Any]]:
    """OpenAI chat messages of the conversation; `pending` are call ids awaiting approval.

    With `repair`, calls left without a result get an `interrupted` one.
    """
    root_runs: set[str | None] = set()
    messages: list[dict[str, Any]] = []
    for event in events:
        if event.type == "turn":
            root_runs.add(event.run_id)
        elif event.run_id not in root_runs:
            continue
        elif event.type in ("user", "handoff"):
            messages.append({"role": "user", "content": event.data["text"]})
        elif event.type == "assistant":
            message: dict[str, Any] = {"role": "assistant", "content": event.data["text"] or ""}
            if event.data.get("tool_calls"):
                message["tool_calls"] = event.data["tool_calls"]
            messages.append(message)
        elif event.type == "tool_result":
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": event.data["call_id"],
                    "content": event.data["content"],
                }
            )
    return _close_open_calls(messages, pending) if repair else messages


def open_calls(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(id, tool name) of the tool calls that have no result yet."""
    answered = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
    return [
        (call["id"], call.get("function", {}).get("name", ""))
        for m in messages
        if m["role"] == "assistant"
        for call in m.get("tool_calls", ())
        if call["id"] not in answered
    ]


async def unanswered_calls(storage: Storage, session_id: str) -> list[tuple[str, str]]:
    """(id, tool name) of the session's tool calls left without a result, except those a
    person is asked to approve: what a turn that was cut off must close."""
    pending = {p.call_id for p in await storage.list_pending(session_id)}
    messages = rebuild(await storage.list_events(session_id), repair=False)
    return [(call_id, name) for call_id, name in open_calls(messages) if call_id not in pending]


def _close_open_calls(messages: list[dict[str, Any]], pending: Set[str]) -> list[dict[str, Any]]:
    missing = {call_id for call_id, _ in open_calls(messages)} - set(pending)
    if not missing:
        return messages
    repaired: list[dict[str, Any]] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        repaired.append(message)
        index += 1
        if message["role"] != "assistant" or not message.get("tool_calls"):
            continue
        # Results must directly follow their assistant message: keep those that arrived,
        # then fill in the rest.
        while index < len(messages) and messages[index]["role"] == "tool":
            repaired.append(messages[index])
            index += 1
        repaired.extend(
            {"role": "tool", "tool_call_id": call["id"], "content": INTERRUPTED}
            for call in message["tool_calls"]
            if call["id"] in missing
        )
    return repaired
