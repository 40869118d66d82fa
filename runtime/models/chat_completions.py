"""The neutral messages and tool specs in Chat Completions' shape: what an OpenAI-compatible
endpoint is sent (`OpenAIModel`), and what a `FunctionModel`'s function is given.

- a system message is `{"role": "system", "content"}` wherever it stands;
- a user message of one text part has a string `content`, else a list of parts
  (`{"type": "text"}`, `{"type": "image_url", "image_url": {"url": "data:..."}}`);
- an assistant message with tool calls has `content` "" rather than null (some servers
  reject null) and `tool_calls` of `{"id", "type": "function", "function": {name,
  arguments}}` (and the `extra_content` a provider attached to the call, such as
  Gemini's thought signature, sent back as it came);
- a tool result is `{"role": "tool", "tool_call_id", "content"}`. A `tool` message can
  carry only text, so a result's images follow the results of that answer in one user
  message that says whose they are.
"""

from __future__ import annotations

from collections.abc import Sequence
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
    ToolSpec,
    UserMessage,
)

ChatMessage = dict[str, Any]


def chat_messages(messages: Sequence[Message]) -> list[ChatMessage]:
    """`messages` as Chat Completions messages, in order."""
    sent: list[ChatMessage] = []
    with_images: list[ToolResultMessage] = []
    for message in messages:
        if isinstance(message, ToolResultMessage):
            sent.append(
                {"role": "tool", "tool_call_id": message.call_id, "content": message.content}
            )
            if message.images:
                with_images.append(message)
            continue
        if with_images:
            sent.append(_result_images(with_images))
            with_images = []
        sent.append(_chat_message(message))
    if with_images:
        sent.append(_result_images(with_images))
    return sent


def chat_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Tool specs as Chat Completions `tools` entries."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": dict(tool.parameters),
            },
        }
        for tool in tools
    ]


def _chat_message(message: Message) -> ChatMessage:
    if isinstance(message, AssistantMessage):
        if not message.tool_calls:
            return {"role": "assistant", "content": message.text}
        return {
            "role": "assistant",
            "content": message.text,
            "tool_calls": [_call(call) for call in message.tool_calls],
        }
    if isinstance(message, UserMessage):
        parts = message.parts
        if len(parts) == 1 and isinstance(parts[0], TextPart):
            return {"role": "user", "content": parts[0].text}
        return {"role": "user", "content": [_part(part) for part in parts]}
    if isinstance(message, SystemMessage):
        return {"role": "system", "content": message.text}
    raise TypeError(
        "a model is sent runtime.models messages (SystemMessage, UserMessage, "
        f"AssistantMessage, ToolResultMessage), not {type(message).__name__}"
    )


def _call(call: ToolCallRequest) -> dict[str, Any]:
    sent: dict[str, Any] = {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }
    if call.provider_data:
        sent["extra_content"] = dict(call.provider_data)  # back where the provider put it
    return sent


def _part(part: Part) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    return _image(part)


def _image(image: ImagePart) -> dict[str, Any]:
    return {
        "type": "image_url",
        "image_url": {"url": f"data:{image.media_type};base64,{image.data}"},
    }


def _result_images(results: list[ToolResultMessage]) -> ChatMessage:
    parts: list[dict[str, Any]] = []
    for result in results:
        parts.append(
            {"type": "text", "text": f"Images of the result of {result.name} ({result.call_id}):"}
        )
        parts.extend(_image(image) for image in result.images)
    return {"role": "user", "content": parts}


__all__ = ["ChatMessage", "chat_messages", "chat_tools"]
