"""`OpenAIModel`: any OpenAI-compatible Chat Completions endpoint, through the `openai` SDK.

It streams one call through the SDK's async client: text deltas as they arrive,
then one `ModelReply` with the assembled tool calls, the usage and the model
that actually answered. The neutral messages are sent in Chat Completions' shape
(`runtime.models.chat_completions`). Provider failures are retried with bounded
exponential backoff, then raised as `ModelError`, which names the model and the
endpoint and never the API key (`runtime.models._calls`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import httpx2
import openai

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
from runtime.models.chat_completions import chat_messages, chat_tools
from runtime.models.endpoints import ModelEndpoint, accepts_prompt_cache_key


@dataclass(slots=True)
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    extra: dict[str, Any] | None = None  # Gemini's `extra_content`, sent back with the call


class _Assembler:
    """Builds a `ModelReply` from stream chunks; tool calls are keyed by delta index."""

    def __init__(self, requested_model: str) -> None:
        self.model = ""
        self.requested_model = requested_model
        self.text: list[str] = []
        self.calls: dict[int, _PartialCall] = {}
        self.finish_reason: str | None = None
        self.done = False  # `[DONE]` arrived
        self.usage = Usage()

    @property
    def complete(self) -> bool:
        """The stream said it was over: a finish reason, or `[DONE]`."""
        return self.finish_reason is not None or self.done

    def add(self, chunk: dict[str, Any]) -> str:
        """Take one chunk (a parsed `data:` line) in; return its text (empty if none)."""
        if chunk.get("model") and not self.model:
            self.model = str(chunk["model"])
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            details = usage.get("prompt_tokens_details") or {}
            self.usage = Usage(
                usage.get("prompt_tokens") or 0,
                usage.get("completion_tokens") or 0,
                (details.get("cached_tokens") or 0) if isinstance(details, dict) else 0,
            )
        delta_text = ""
        for choice in chunk.get("choices") or ():
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
            delta = choice.get("delta") or {}
            if delta.get("content"):
                delta_text += text(delta["content"])
            for fragment in delta.get("tool_calls") or ():
                self._add_fragment(fragment)
        if delta_text:
            self.text.append(delta_text)
        return delta_text

    def _add_fragment(self, fragment: dict[str, Any]) -> None:
        index = fragment.get("index")
        fragment_id = fragment.get("id")
        if index is None:
            # Some servers omit the index: a new id starts a new call, else it continues.
            last = max(self.calls, default=-1)
            current = self.calls[last].id if last >= 0 else ""
            starts = last < 0 or bool(fragment_id and current and fragment_id != current)
            index = last + 1 if starts else last
        call = self.calls.setdefault(index, _PartialCall())
        if fragment_id and not call.id:
            call.id = fragment_id
        function = fragment.get("function") or {}
        if function.get("name") and not call.name:
            call.name = text(function["name"])
        if function.get("arguments"):
            call.arguments.append(text(function["arguments"]))
        extra = fragment.get("extra_content")
        if isinstance(extra, dict):
            call.extra = {**(call.extra or {}), **extra}

    def reply(self) -> ModelReply:
        calls = tuple(
            ToolCallRequest(
                call.id or f"call_{index}", call.name, "".join(call.arguments), call.extra
            )
            for index, call in sorted(self.calls.items())
        )
        return ModelReply(
            text="".join(self.text),
            tool_calls=calls,
            usage=self.usage,
            model=self.model or self.requested_model,
            finish_reason=self.finish_reason,
            provider="openai",
        )


# ---------------------------------------------------------------- the client


class OpenAIModel:
    """A `Model` on one OpenAI-compatible endpoint, with bounded retries.

    Build it from an endpoint (`OpenAIModel.for_endpoint`, how the runtime builds
    models from amodal.json), or from your own `openai.AsyncOpenAI` client
    (`OpenAIModel(client, "gpt-4.1-mini")`); a client you pass stays yours to close.

    The SDK's own retries are off: this model retries 429, 5xx, timeouts,
    connection errors and streams that break or end before their finish reason
    (or `[DONE]`) up to `max_retries` times (exponential backoff from `backoff`
    seconds, with jitter), and only while nothing has been yielded to the
    caller, so a retry never repeats text already streamed. Other 4xx are never
    retried. A stream that ends early is never an answer: its partial text and
    tool calls are dropped, and the call fails with `ModelError` if it cannot
    be retried.
    """

    provider = "openai"

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        model: str,
        *,
        max_retries: int = 3,
        backoff: float = 0.5,
        owns_client: bool = False,
    ) -> None:
        self.endpoint = ModelEndpoint(model, str(client.base_url), client.api_key)
        self.max_retries = max_retries
        self.backoff = backoff
        self._owns_client = owns_client
        # Our retries, not the SDK's: with both, a failing call would be tried 12 times.
        self._client = client.with_options(max_retries=0) if client.max_retries else client
        self._send_cache_key = accepts_prompt_cache_key(self.endpoint.base_url)

    @classmethod
    def for_endpoint(
        cls,
        endpoint: ModelEndpoint,
        *,
        max_retries: int = 3,
        timeout: float = 60.0,
        backoff: float = 0.5,
    ) -> OpenAIModel:
        """A model with a client of its own (closed by `aclose`); `timeout` bounds connecting
        and each read."""
        client = openai.AsyncOpenAI(
            base_url=endpoint.base_url,
            api_key=endpoint.api_key or NO_KEY,
            max_retries=0,
            timeout=timeout,
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
        return f"OpenAIModel({self.endpoint!r})"

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

        `cache_key` is sent as `prompt_cache_key` where the endpoint accepts it
        (`accepts_prompt_cache_key`). Raises `ModelError` when the call fails for good.
        """
        body: dict[str, Any] = {
            "model": self.endpoint.model,
            "messages": chat_messages(messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = chat_tools(tools)
        if settings.temperature is not None:
            body["temperature"] = settings.temperature
        if settings.max_tokens is not None:
            body["max_tokens"] = settings.max_tokens
        if cache_key is not None and self._send_cache_key:
            body["prompt_cache_key"] = cache_key
        # Encoded once here: the SDK's typed `create` re-walks every message of the
        # transcript on every call (its cost grows with the session), then parses each
        # chunk into models; its client's `post` with a raw streaming response does neither.
        content = encode(body)
        return with_retries(
            self.endpoint,
            lambda: self._attempt(content),
            self._explain,
            max_retries=self.max_retries,
            backoff=self.backoff,
        )

    async def _attempt(self, content: bytes) -> AsyncGenerator[str | ModelReply, None]:
        """One try: the text deltas, then the reply; a stream that did not say it was over is
        a failure (its partial text and tool calls are never used)."""
        assembler = _Assembler(self.endpoint.model)
        response = await self._client.post(
            "/chat/completions",
            content=content,
            cast_to=httpx2.Response,
            options={"headers": RAW_STREAM_HEADERS},
        )
        body = response.aiter_bytes()
        try:
            async for data in sse_data(body):
                if data == "[DONE]":
                    assembler.done = True
                    await read_to_end(body)
                    break
                delta = assembler.add(_checked(chunk(data)))
                if delta:
                    yield delta
        finally:
            await response.aclose()
        reply = assembler.reply()
        if not assembler.complete and (reply.text or reply.tool_calls):
            raise StreamFailure(
                "the stream ended before the answer was complete (no finish reason and no "
                "[DONE]); its partial answer is not used",
                transient=True,
            )
        if reply.finish_reason is None and not reply.text and not reply.tool_calls:
            # An empty stream is no answer (llama.cpp does this past its context window):
            # treating it as success would end the turn silently with nothing said.
            raise StreamFailure(
                "the stream ended without an answer (no finish reason); the prompt may exceed "
                "the model's context window",
                transient=False,
            )
        yield reply

    def _explain(self, error: Exception) -> Failure | None:
        """What a failure of this endpoint means; None for an exception that is not one."""
        if isinstance(error, StreamFailure):
            return error.failure
        if isinstance(error, openai.APIStatusError):
            detail = body_message(error.body) or error.response.reason_phrase
            status = error.status_code
            return Failure(f"HTTP {status}: {detail}", status, status == 429 or status >= 500)
        if isinstance(error, openai.APITimeoutError):
            return Failure(f"timed out (timeout {seconds(self._client.timeout)})", transient=True)
        if isinstance(error, openai.APIConnectionError):
            cause = error.__cause__
            detail = f"{type(cause).__name__}: {cause}" if cause is not None else error.message
            return Failure(f"connection failed ({detail})", transient=True)
        if isinstance(error, httpx2.TimeoutException):
            reason = f"the stream stalled (timeout {seconds(self._client.timeout)})"
            return Failure(reason, transient=True)
        if isinstance(error, httpx2.HTTPError):
            return Failure(f"the stream broke ({type(error).__name__}: {error})", transient=True)
        return None


def _checked(chunk: dict[str, Any]) -> dict[str, Any]:
    """A chunk, unless it is an error event inside the stream (reported as it is)."""
    if chunk.get("error"):
        message = body_message(chunk) or json.dumps(chunk["error"])[:200]
        raise StreamFailure(f"error in the stream: {message}", transient=False)
    return chunk
