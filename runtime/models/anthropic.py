"""`AnthropicModel`: Anthropic's Messages API through the official `anthropic` SDK (extra
`anthropic`), streaming, with tool use and prompt caching.

The neutral messages are translated here (`messages_request`):

- the first message, the system prompt, is the `system` parameter; a later system message
  (the per-turn context, the out-of-budget notice) is a text block of the user turn it
  stands in, since the Messages API has no system role inside the conversation;
- user parts, tool results and those notes that follow one another form one user message
  (tool results first, as the API requires); an assistant answer is its text and
  `tool_use` blocks; empty text is left out (the API refuses an empty block);
- **prompt caching**: the last tool, the system prompt and the last block of the
  conversation carry `cache_control: {"type": "ephemeral"}`, so the stable prefix (tool
  schemas and system prompt) is read from the cache on every call after the first, and a
  run's conversation so far on every call after the one that wrote it;
- a call that offers no tools over a conversation with tool calls (a run's last call once
  its budget is spent) still names the tools used, with `tool_choice: none`: the API
  refuses tool blocks in a request that defines no tools.

The stream (`message_start`, `content_block_start` / `_delta` (`text_delta`,
`input_json_delta`) / `_stop`, `message_delta`, `message_stop`) is parsed here from the
SDK's raw response, as `OpenAIModel` does. An answer is complete only when `message_stop`
(or a `message_delta` with its stop reason) arrived and every tool-use block was closed: a
stream cut inside a tool-use block is a failed call, retried, never a half tool call.
Usage: `input_tokens` counts every input token (Anthropic's uncached ones plus cache reads
and writes), `cached_tokens` the cache reads, `cache_write_tokens` the writes.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import anthropic
import httpx2

from runtime.events import Usage
from runtime.models import Message, ModelReply, ModelSettings, ToolCallRequest, ToolSpec
from runtime.models._calls import (
    NO_KEY,
    RAW_STREAM_HEADERS,
    Failure,
    StreamFailure,
    body_message,
    chunk,
    encode,
    read_to_end,
    seconds,
    sse_data,
    text,
    with_retries,
)
from runtime.models.endpoints import ModelEndpoint
from runtime.models.messages import (
    AssistantMessage,
    ImagePart,
    Part,
    SystemMessage,
    TextPart,
    ToolResultMessage,
    UserMessage,
    parsed_arguments,
)

DEFAULT_MAX_TOKENS = 8192
"""`max_tokens` when the agent's `modelSettings` gives none: the API requires one."""

CACHED = {"type": "ephemeral"}
# Stop reasons in the neutral (Chat Completions) words of `ModelReply.finish_reason`.
_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}
# Error events inside a 200 stream that another try may not get.
_TRANSIENT_STREAM_ERRORS = {"overloaded_error", "api_error", "rate_limit_error"}
_INVALID_ID = re.compile(r"[^a-zA-Z0-9_-]")


# ---------------------------------------------------------------- the request


def messages_request(
    messages: Sequence[Message], tools: Sequence[ToolSpec] | None
) -> dict[str, Any]:
    """The `system`, `messages`, `tools` (and `tool_choice`) of a Messages API request."""
    body: dict[str, Any] = {}
    conversation = messages
    if messages and isinstance(messages[0], SystemMessage):
        body["system"] = [{"type": "text", "text": messages[0].text, "cache_control": CACHED}]
        conversation = messages[1:]
    turns = _turns(conversation)
    if turns:
        turns[-1]["content"][-1]["cache_control"] = CACHED
    body["messages"] = turns
    if tools:
        body["tools"] = [
            {
                "name": tool.name,
                "description": tool.description,
                "input_schema": dict(tool.parameters),
            }
            for tool in tools
        ]
    else:
        used = dict.fromkeys(
            call.name
            for message in conversation
            if isinstance(message, AssistantMessage)
            for call in message.tool_calls
        )
        if used:
            body["tools"] = [
                {"name": name, "description": "", "input_schema": {"type": "object"}}
                for name in used
            ]
            body["tool_choice"] = {"type": "none"}
    if "tools" in body:
        body["tools"][-1] = {**body["tools"][-1], "cache_control": CACHED}
    return body


def _turns(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The conversation as alternating user and assistant messages of content blocks."""
    turns: list[dict[str, Any]] = []
    for message in messages:
        role, blocks = _blocks(message)
        if not blocks:
            continue
        if not turns or turns[-1]["role"] != role:
            turns.append({"role": role, "content": blocks})
            continue
        content = turns[-1]["content"]
        if role == "user" and blocks[0]["type"] == "tool_result":
            # Tool results open their user message: before any note or text gathered so far.
            first_other = next(
                (i for i, block in enumerate(content) if block["type"] != "tool_result"),
                len(content),
            )
            content[first_other:first_other] = blocks
        else:
            content.extend(blocks)
    return turns


def _blocks(message: Message) -> tuple[str, list[dict[str, Any]]]:
    if isinstance(message, ToolResultMessage):
        result: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": _tool_id(message.call_id),
            "content": [
                {"type": "text", "text": message.content or "(empty)"},
                *map(_image, message.images),
            ],
        }
        if message.is_error:
            result["is_error"] = True
        return "user", [result]
    if isinstance(message, AssistantMessage):
        blocks: list[dict[str, Any]] = (
            [{"type": "text", "text": message.text}] if message.text else []
        )
        for call in message.tool_calls:
            arguments = parsed_arguments(call.arguments)
            blocks.append(
                {
                    "type": "tool_use",
                    "id": _tool_id(call.id),
                    "name": call.name,
                    # A model's malformed arguments, kept for it to read: the API takes objects.
                    "input": {"_unparsed": call.arguments} if arguments is None else arguments,
                }
            )
        return "assistant", blocks
    if isinstance(message, UserMessage):
        return "user", [_part(part) for part in message.parts if _shown(part)]
    if isinstance(message, SystemMessage):
        return "user", [{"type": "text", "text": message.text}] if message.text else []
    raise TypeError(
        "a model is sent runtime.models messages (SystemMessage, UserMessage, "
        f"AssistantMessage, ToolResultMessage), not {type(message).__name__}"
    )


def _shown(part: Part) -> bool:
    return not isinstance(part, TextPart) or bool(part.text)


def _part(part: Part) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    return _image(part)


def _image(image: ImagePart) -> dict[str, Any]:
    source = {"type": "base64", "media_type": image.media_type, "data": image.data}
    return {"type": "image", "source": source}


def _tool_id(call_id: str) -> str:
    """A call id as the API accepts it (`^[a-zA-Z0-9_-]+$`): ids another provider made may
    hold other characters, and a session can move between providers (a fallback)."""
    return _INVALID_ID.sub("_", call_id) or "call"


# ---------------------------------------------------------------- the stream


@dataclass(slots=True)
class _ToolBlock:
    id: str
    name: str
    json: list[str] = field(default_factory=list)
    start_input: Any = None
    closed: bool = False


class _Assembler:
    """Builds a `ModelReply` from the stream's events, in the order they arrive."""

    def __init__(self, requested_model: str) -> None:
        self.requested_model = requested_model
        self.model = ""
        self.text: list[str] = []
        self.tools: dict[int, _ToolBlock] = {}
        self.stop_reason: str | None = None
        self.stopped = False  # `message_stop` arrived
        self.usage: dict[str, int] = {}

    @property
    def complete(self) -> bool:
        ended = self.stopped or self.stop_reason is not None
        return ended and all(block.closed for block in self.tools.values())

    def add(self, event: dict[str, Any]) -> str:
        """Take one event in; return its text (empty if none)."""
        kind = event.get("type")
        if kind == "content_block_delta":
            return self._delta(event)
        if kind == "content_block_start":
            return self._start(event)
        if kind == "content_block_stop":
            tool = self.tools.get(event.get("index", -1))
            if tool is not None:
                tool.closed = True
        elif kind == "message_start":
            message = event.get("message") or {}
            self.model = str(message.get("model") or "")
            self._take_usage(message.get("usage"))
        elif kind == "message_delta":
            self.stop_reason = (event.get("delta") or {}).get("stop_reason") or self.stop_reason
            self._take_usage(event.get("usage"))
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error":
            error = event.get("error") or {}
            message = body_message(event) or json.dumps(error)[:200]
            transient = error.get("type") in _TRANSIENT_STREAM_ERRORS
            raise StreamFailure(f"error in the stream: {message}", transient=transient)
        return ""  # ping, and what this client does not use (thinking blocks, ...)

    def _delta(self, event: dict[str, Any]) -> str:
        delta = event.get("delta") or {}
        if delta.get("type") == "text_delta" and delta.get("text"):
            piece = text(delta["text"])
            self.text.append(piece)
            return piece
        tool = self.tools.get(event.get("index", -1))
        if delta.get("type") == "input_json_delta" and tool is not None:
            tool.json.append(text(delta.get("partial_json") or ""))
        return ""

    def _start(self, event: dict[str, Any]) -> str:
        block = event.get("content_block") or {}
        if block.get("type") == "tool_use":
            index = event.get("index", len(self.tools))
            self.tools[index] = _ToolBlock(
                str(block.get("id") or ""), text(block.get("name") or ""), [], block.get("input")
            )
        elif block.get("type") == "text" and block.get("text"):
            piece = text(block["text"])
            self.text.append(piece)
            return piece
        return ""

    def _take_usage(self, usage: object) -> None:
        """`message_delta`'s counts are cumulative: each one present replaces the last."""
        if isinstance(usage, dict):
            for key, value in usage.items():
                if isinstance(value, int):
                    self.usage[key] = value

    def reply(self) -> ModelReply:
        calls = tuple(
            ToolCallRequest(
                block.id or f"call_{index}",
                block.name,
                "".join(block.json) or json.dumps(block.start_input or {}),
            )
            for index, block in sorted(self.tools.items())
        )
        read = self.usage.get("cache_read_input_tokens", 0)
        written = self.usage.get("cache_creation_input_tokens", 0)
        usage = Usage(
            self.usage.get("input_tokens", 0) + read + written,
            self.usage.get("output_tokens", 0),
            read,
            written,
        )
        finish = _FINISH.get(self.stop_reason or "", self.stop_reason)
        return ModelReply(
            "".join(self.text),
            calls,
            usage,
            self.model or self.requested_model,
            finish,
            provider="anthropic",
        )


# ---------------------------------------------------------------- the client


class AnthropicModel:
    """A `Model` on Anthropic's Messages API (or a server that speaks it), with retries.

    Build it from an endpoint (`AnthropicModel.for_endpoint`, how the runtime builds models
    from amodal.json), or from your own `anthropic.AsyncAnthropic` client
    (`AnthropicModel(client, "claude-sonnet-4-5")`); a client you pass stays yours to close.

    Retries are the same as `OpenAIModel`'s: 429, 5xx (529 "overloaded" included),
    timeouts, connection errors, an `overloaded_error` event inside the stream, and streams
    that end before the answer is complete, up to `max_retries` times while no text has
    been yielded; other 4xx never.
    """

    provider = "anthropic"

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        model: str,
        *,
        max_retries: int = 3,
        backoff: float = 0.5,
        owns_client: bool = False,
        max_tokens: int = DEFAULT_MAX_TOKENS,
    ) -> None:
        self.endpoint = ModelEndpoint(
            model, str(client.base_url), client.api_key, provider="anthropic"
        )
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_tokens = max_tokens
        self._owns_client = owns_client
        # Our retries, not the SDK's, and no spans of the SDK's: the runtime makes its own.
        self._client = client.with_options(max_retries=0) if client.max_retries else client

    @classmethod
    def for_endpoint(
        cls,
        endpoint: ModelEndpoint,
        *,
        max_retries: int = 3,
        timeout: float = 60.0,
        backoff: float = 0.5,
    ) -> AnthropicModel:
        """A model with a client of its own (closed by `aclose`); `timeout` bounds connecting
        and each read. The key and base URL are passed explicitly, so the SDK reads no
        credential of its own (environment, profiles on disk)."""
        client = anthropic.AsyncAnthropic(
            api_key=endpoint.api_key or NO_KEY,
            base_url=endpoint.base_url,
            max_retries=0,
            timeout=timeout,
            open_telemetry={"traces": False, "propagation": False},
        )
        model = cls(
            client, endpoint.model, max_retries=max_retries, backoff=backoff, owns_client=True
        )
        model.endpoint = endpoint  # keeps "no key" as None, not the placeholder sent
        return model

    @property
    def name(self) -> str:
        return self.endpoint.model

    def __repr__(self) -> str:
        return f"AnthropicModel({self.endpoint!r})"

    async def aclose(self) -> None:
        """Close the client this model made (a client passed in is left to its owner)."""
        if self._owns_client:
            await self._client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def stream(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] | None,
        settings: ModelSettings = ModelSettings(),  # noqa: B008 (frozen: safe to share)
        *,
        cache_key: str | None = None,
    ) -> AsyncIterator[str | ModelReply]:
        """Yield the reply's text deltas as they arrive, then one `ModelReply`.

        `cache_key` is not sent: Anthropic's cache is keyed by the prefix itself, which
        `messages_request` marks. Raises `ModelError` when the call fails for good.
        """
        body: dict[str, Any] = {
            "model": self.endpoint.model,
            "max_tokens": settings.max_tokens or self.max_tokens,
            "stream": True,
            **messages_request(messages, tools),
        }
        if settings.temperature is not None:
            # Anthropic's range is 0..1; an agent may say up to 2 (OpenAI's range).
            body["temperature"] = min(settings.temperature, 1.0)
        content = encode(body)
        return with_retries(
            self.endpoint,
            lambda: self._attempt(content),
            self._explain,
            max_retries=self.max_retries,
            backoff=self.backoff,
        )

    async def _attempt(self, content: bytes) -> AsyncGenerator[str | ModelReply, None]:
        assembler = _Assembler(self.endpoint.model)
        response = await self._client.post(
            "/v1/messages",
            content=content,
            cast_to=httpx2.Response,
            options={"headers": RAW_STREAM_HEADERS},
        )
        body = response.aiter_bytes()
        try:
            async for data in sse_data(body):
                piece = assembler.add(chunk(data))
                if piece:
                    yield piece
                if assembler.stopped:
                    await read_to_end(body)
                    break
        finally:
            await response.aclose()
        if not assembler.complete:
            raise StreamFailure(
                "the stream ended before the answer was complete (no message_stop, or a "
                "tool-use block left open); its partial answer is not used",
                transient=True,
            )
        yield assembler.reply()

    def _explain(self, error: Exception) -> Failure | None:
        """What a failure of this endpoint means; None for an exception that is not one."""
        if isinstance(error, StreamFailure):
            return error.failure
        if isinstance(error, anthropic.APIStatusError):
            detail = body_message(error.body) or error.response.reason_phrase
            status = error.status_code
            return Failure(f"HTTP {status}: {detail}", status, status == 429 or status >= 500)
        if isinstance(error, anthropic.APITimeoutError):
            return Failure(f"timed out (timeout {seconds(self._client.timeout)})", transient=True)
        if isinstance(error, anthropic.APIConnectionError):
            cause = error.__cause__
            detail = f"{type(cause).__name__}: {cause}" if cause is not None else error.message
            return Failure(f"connection failed ({detail})", transient=True)
        if isinstance(error, httpx2.TimeoutException):
            reason = f"the stream stalled (timeout {seconds(self._client.timeout)})"
            return Failure(reason, transient=True)
        if isinstance(error, httpx2.HTTPError):
            return Failure(f"the stream broke ({type(error).__name__}: {error})", transient=True)
        return None


__all__ = ["DEFAULT_MAX_TOKENS", "AnthropicModel", "messages_request"]
