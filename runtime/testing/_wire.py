"""What a scripted server's wire format provides: one per API (`_chat_wire.ChatWire` for
OpenAI's Chat Completions, `_messages_wire.MessagesWire` for Anthropic's Messages), so
the server, its scripting and its faults are the same for every provider."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from runtime.testing._steps import Step

if TYPE_CHECKING:
    from runtime.testing._requests import RecordedRequest

_MAX_TEXT_DELTAS = 8
ARGUMENT_FRAGMENTS = 3
_WORDS = re.compile(r"\s*\S+\s*|\s+")

Call = tuple[str, str, str]
"""One tool call a step answers with, numbered: (id, name, arguments)."""


@dataclass(frozen=True, slots=True)
class StreamPlan:
    """The SSE events of one streamed answer, and where the faults cut it: after the text
    (`cut_stream`, and where `junk_chunk` goes), in the middle of the first tool call's
    arguments (`cut_in_tool_call`), after the last tool-call event (`unfinished`: what
    follows says the answer is over)."""

    events: list[bytes]
    text_end: int
    mid_call: int
    calls_end: int


class Wire(Protocol):
    provider: str
    route: str
    """The path of the chat request (POST)."""
    models_route: str
    """The path that lists the models (GET)."""

    def models(self) -> dict[str, Any]: ...

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """The provider's error body for an HTTP error."""
        ...

    def refusal(self, body: Mapping[str, Any]) -> str | None:
        """Why the real API would refuse this request (400), or None."""
        ...

    def stream(self, request: RecordedRequest, step: Step, calls: list[Call]) -> StreamPlan: ...

    def completion(
        self, request: RecordedRequest, step: Step, calls: list[Call]
    ) -> dict[str, Any]: ...


def split_text(text: str) -> list[str]:
    """Text as up to eight deltas, cut at word boundaries (the way models stream)."""
    words = _WORDS.findall(text)
    if not words:
        return []
    size = -(-len(words) // _MAX_TEXT_DELTAS)
    return ["".join(words[i : i + size]) for i in range(0, len(words), size)]


def split_evenly(text: str, parts: int = ARGUMENT_FRAGMENTS) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)]
