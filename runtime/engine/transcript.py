"""What the model is shown of a session: its transcript, rebuilt from the session's log as
model-neutral messages (`runtime.models.messages`; each model client translates them).

Only the root runs' entries form the conversation (a specialist's work reaches
it as a tool result). The rebuilt transcript is always valid for the next model
call: a tool call left without a result (a crash, a cancelled turn) gets an
`interrupted` result, except the one call a person is still asked to approve.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence, Set

from runtime.engine.log import (
    INTERRUPTED_CONTENT,
    AnswerEntry,
    HandoffEntry,
    Logged,
    ToolResultEntry,
    TurnEntry,
    UserEntry,
    read,
)
from runtime.models.messages import AssistantMessage, Message, ToolResultMessage, UserMessage
from runtime.storage import Storage


def assistant_message(answer: AnswerEntry) -> AssistantMessage:
    """A model's answer as the model is shown it on the next call."""
    return AssistantMessage(answer.text, answer.calls)


def tool_message(result: ToolResultEntry) -> ToolResultMessage:
    return ToolResultMessage(
        result.call_id, result.name, result.content, is_error=result.status != "ok"
    )


def rebuild(
    entries: Iterable[Logged], pending: Set[str] = frozenset(), *, repair: bool = True
) -> list[Message]:
    """The conversation as model-neutral messages; `pending` are call ids awaiting approval.

    With `repair`, calls left without a result get an `interrupted` one.
    """
    root_runs: set[str] = set()
    messages: list[Message] = []
    for logged in entries:
        entry = logged.entry
        if isinstance(entry, TurnEntry):
            root_runs.add(logged.run_id)
        elif logged.run_id not in root_runs:
            continue
        elif isinstance(entry, UserEntry | HandoffEntry):
            messages.append(UserMessage.of(entry.text))
        elif isinstance(entry, AnswerEntry):
            messages.append(assistant_message(entry))
        elif isinstance(entry, ToolResultEntry):
            messages.append(tool_message(entry))
    return _close_open_calls(messages, pending) if repair else messages


def open_calls(messages: Sequence[Message]) -> list[tuple[str, str]]:
    """(id, tool name) of the tool calls that have no result yet."""
    answered = {m.call_id for m in messages if isinstance(m, ToolResultMessage)}
    return [
        (call.id, call.name)
        for m in messages
        if isinstance(m, AssistantMessage)
        for call in m.tool_calls
        if call.id not in answered
    ]


async def unanswered_calls(storage: Storage, session_id: str) -> list[tuple[str, str]]:
    """(id, tool name) of the session's tool calls left without a result, except those a
    person is asked to approve: what a turn that was cut off must close."""
    pending = {p.call_id for p in await storage.list_pending(session_id)}
    messages = rebuild(await read(storage, session_id), repair=False)
    return [(call_id, name) for call_id, name in open_calls(messages) if call_id not in pending]


def _close_open_calls(messages: list[Message], pending: Set[str]) -> list[Message]:
    missing = {call_id for call_id, _ in open_calls(messages)} - set(pending)
    if not missing:
        return messages
    repaired: list[Message] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        repaired.append(message)
        index += 1
        if not isinstance(message, AssistantMessage) or not message.tool_calls:
            continue
        # Results must directly follow their assistant message: keep those that arrived,
        # then fill in the rest.
        while index < len(messages) and isinstance(messages[index], ToolResultMessage):
            repaired.append(messages[index])
            index += 1
        repaired.extend(
            ToolResultMessage(call.id, call.name, INTERRUPTED_CONTENT, is_error=True)
            for call in message.tool_calls
            if call.id in missing
        )
    return repaired
