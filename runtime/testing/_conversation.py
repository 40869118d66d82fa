"""A recorded request's conversation in the runtime's own model-neutral messages, whichever
wire it came over: one responder can then answer for both scripted servers."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from runtime.models.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    Part,
    SystemMessage,
    TextPart,
    ToolCallRequest,
    ToolResultMessage,
    UserMessage,
)
from runtime.testing._steps import content_text


def conversation(body: Mapping[str, Any], provider: str) -> list[Message]:
    if provider == "anthropic":
        return _from_messages_api(body)
    return _from_chat_completions(body)


def _from_chat_completions(body: Mapping[str, Any]) -> list[Message]:
    found: list[Message] = []
    names: dict[str, str] = {}
    for message in body.get("messages") or ():
        role, content = message.get("role"), message.get("content")
        if role == "system":
            found.append(SystemMessage(content_text(content)))
        elif role == "user":
            found.append(UserMessage(_chat_parts(content)))
        elif role == "assistant":
            calls = tuple(
                ToolCallRequest(
                    str(call.get("id", "")),
                    str(call.get("function", {}).get("name", "")),
                    str(call.get("function", {}).get("arguments", "")),
                )
                for call in message.get("tool_calls") or ()
            )
            names.update((call.id, call.name) for call in calls)
            found.append(AssistantMessage(content_text(content), calls))
        elif role == "tool":
            call_id = str(message.get("tool_call_id", ""))
            found.append(ToolResultMessage(call_id, names.get(call_id, ""), content_text(content)))
    return found


def _chat_parts(content: object) -> tuple[Part, ...]:
    if isinstance(content, str):
        return (TextPart(content),)
    parts: list[Part] = []
    for part in content if isinstance(content, list) else ():
        if part.get("type") == "text":
            parts.append(TextPart(str(part.get("text", ""))))
        elif part.get("type") == "image_url":
            url = str(part.get("image_url", {}).get("url", ""))
            kind, _, data = url.removeprefix("data:").partition(";base64,")
            parts.append(ImagePart(kind, data))
    return tuple(parts)


def _from_messages_api(body: Mapping[str, Any]) -> list[Message]:
    found: list[Message] = []
    system = content_text(body.get("system"))
    if system:
        found.append(SystemMessage(system))
    names: dict[str, str] = {}
    for message in body.get("messages") or ():
        content = message.get("content")
        blocks: list[dict[str, Any]] = (
            [{"type": "text", "text": content}] if isinstance(content, str) else list(content or ())
        )
        if message.get("role") == "assistant":
            calls = tuple(
                ToolCallRequest(str(b.get("id")), str(b.get("name")), json.dumps(b.get("input")))
                for b in blocks
                if b.get("type") == "tool_use"
            )
            names.update((call.id, call.name) for call in calls)
            found.append(AssistantMessage(content_text(blocks), calls))
            continue
        parts: list[Part] = []
        for block in blocks:
            if block.get("type") == "tool_result":
                call_id = str(block.get("tool_use_id"))
                inner = block.get("content")
                found.append(
                    ToolResultMessage(
                        call_id,
                        names.get(call_id, ""),
                        content_text(inner),
                        is_error=bool(block.get("is_error")),
                    )
                )
            elif block.get("type") == "text":
                parts.append(TextPart(str(block.get("text", ""))))
            elif block.get("type") == "image":
                source = block.get("source") or {}
                parts.append(ImagePart(str(source.get("media_type")), str(source.get("data"))))
        if parts:
            found.append(UserMessage(tuple(parts)))
    return found
