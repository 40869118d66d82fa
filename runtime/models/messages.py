"""The model-neutral form of what a model is shown: messages and the tools it is offered.

The engine builds these from a session's log (`runtime.engine.transcript`) and the loop
adds the system prompt and its notes; each model client translates them at its own edge
(`runtime.models.chat_completions` for OpenAI-compatible endpoints,
`runtime.models.anthropic` for Anthropic's Messages API). Nothing between the log and a
client knows which provider will answer.

Four kinds of message, frozen (a transcript is shared by every call of a run):

- `SystemMessage`: the first message of a call is the system prompt, the stable prefix a
  provider may cache; a later one is a note of the runtime's inside the conversation (the
  per-turn context, the out-of-budget notice);
- `UserMessage`: text and attachment parts (`TextPart`, `ImagePart`);
- `AssistantMessage`: a model's answer, its text and the tool calls it asked for;
- `ToolResultMessage`: what one call came to, as the text the model reads (and images).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """A tool call the model asked for. `arguments` is the raw JSON text, unparsed.

    `provider_data` is what a provider attached to the call and wants back with it on the
    next request (Gemini's `extra_content`, holding its thought signature), kept opaque."""

    id: str
    name: str
    arguments: str
    provider_data: Mapping[str, Any] | None = field(default=None, hash=False)


@dataclass(frozen=True, slots=True)
class TextPart:
    text: str


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image the model is shown: `data` is its bytes in base64, `media_type` its type
    (`image/png`, `image/jpeg`, `image/gif`, `image/webp`)."""

    media_type: str
    data: str = field(repr=False)


Part = TextPart | ImagePart


@dataclass(frozen=True, slots=True)
class SystemMessage:
    text: str


@dataclass(frozen=True, slots=True)
class UserMessage:
    parts: tuple[Part, ...]

    @classmethod
    def of(cls, text: str) -> UserMessage:
        """A user message of one text part."""
        return cls((TextPart(text),))

    @property
    def text(self) -> str:
        """The text parts, joined."""
        return "".join(part.text for part in self.parts if isinstance(part, TextPart))


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    text: str
    tool_calls: tuple[ToolCallRequest, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolResultMessage:
    """The result of tool call `call_id` (of tool `name`): `content` is what the model reads;
    `is_error` when the call failed, was denied or timed out."""

    call_id: str
    name: str
    content: str
    is_error: bool = False
    images: tuple[ImagePart, ...] = ()


Message = SystemMessage | UserMessage | AssistantMessage | ToolResultMessage


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as a model is offered it: its name, what it does, and its JSON Schema."""

    name: str
    description: str
    parameters: Mapping[str, Any] = field(hash=False)


def parsed_arguments(arguments: str) -> dict[str, Any] | None:
    """A call's arguments as a JSON object, or None when they are not one."""
    try:
        value = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def trace_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The messages as OpenTelemetry's GenAI conventions record them (`gen_ai.input.messages`:
    a role and its parts). An image is named by its type and size, never its bytes."""
    return [_traced(message) for message in messages]


def _traced(message: Message) -> dict[str, Any]:
    if isinstance(message, SystemMessage):
        return {"role": "system", "parts": [{"type": "text", "content": message.text}]}
    if isinstance(message, UserMessage):
        return {"role": "user", "parts": [_traced_part(part) for part in message.parts]}
    if isinstance(message, AssistantMessage):
        parts: list[dict[str, Any]] = []
        if message.text:
            parts.append({"type": "text", "content": message.text})
        for call in message.tool_calls:
            arguments = parsed_arguments(call.arguments)
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.id,
                    "name": call.name,
                    "arguments": call.arguments if arguments is None else arguments,
                }
            )
        return {"role": "assistant", "parts": parts}
    response = {"type": "tool_call_response", "id": message.call_id, "response": message.content}
    return {"role": "tool", "parts": [response, *map(_traced_part, message.images)]}


def _traced_part(part: Part) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "content": part.text}
    return {
        "type": "blob",
        "modality": "image",
        "mime_type": part.media_type,
        "size": len(part.data),
    }


__all__ = [
    "AssistantMessage",
    "ImagePart",
    "Message",
    "Part",
    "SystemMessage",
    "TextPart",
    "ToolCallRequest",
    "ToolResultMessage",
    "ToolSpec",
    "UserMessage",
    "parsed_arguments",
    "trace_messages",
]
