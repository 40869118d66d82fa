"""`OpenAIModel`: any OpenAI-compatible Chat Completions endpoint, through the `openai` SDK.

It streams one call through the SDK's async client: text deltas as they arrive,
then one `ModelReply` with the assembled tool calls, the usage and the model
that actually answered. Provider failures are retried with bounded exponential
backoff, then raised as `ModelError`, which names the model and the endpoint and
never the API key.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self, cast

import anyio
import httpx2
import openai

from runtime.events import Usage
from runtime.exceptions import ModelError
from runtime.models import Message, ModelReply, ModelSettings, ToolCallRequest, ToolSchema
from runtime.models.endpoints import ModelEndpoint, accepts_prompt_cache_key, display_url

logger = logging.getLogger("amodal")

# The SDK refuses an empty key; local servers ignore whatever is sent.
_NO_KEY = "amodal-no-key"
_MAX_BACKOFF = 30.0
_MAX_REASON = 300
_READ_TO_END_SECONDS = 0.1  # after `[DONE]`, see `_read_to_end`


@dataclass(slots=True)
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


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
        text = ""
        for choice in chunk.get("choices") or ():
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
            delta = choice.get("delta") or {}
            if delta.get("content"):
                text += _text(delta["content"])
            for fragment in delta.get("tool_calls") or ():
                self._add_fragment(fragment)
        if text:
            self.text.append(text)
        return text

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
            call.name = _text(function["name"])
        if function.get("arguments"):
            call.arguments.append(_text(function["arguments"]))

    def reply(self) -> ModelReply:
        calls = tuple(
            ToolCallRequest(call.id or f"call_{index}", call.name, "".join(call.arguments))
            for index, call in sorted(self.calls.items())
        )
        return ModelReply(
            text="".join(self.text),
            tool_calls=calls,
            usage=self.usage,
            model=self.model or self.requested_model,
            finish_reason=self.finish_reason,
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
            api_key=endpoint.api_key or _NO_KEY,
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

    async def stream(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema] | None,
        settings: ModelSettings = ModelSettings(),  # noqa: B008 (frozen: safe to share)
        *,
        cache_key: str | None = None,
    ) -> AsyncIterator[str | ModelReply]:
        """Yield the reply's text deltas as they arrive, then one `ModelReply`.

        `cache_key` is sent as `prompt_cache_key` where the endpoint accepts it
        (`accepts_prompt_cache_key`). Assistant messages with tool calls and
        null content are sent with content "" (some servers reject null).
        Raises `ModelError` when the call fails for good.
        """
        body: dict[str, Any] = {
            "model": self.endpoint.model,
            "messages": _normalize_messages(messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = list(tools)
        if settings.temperature is not None:
            body["temperature"] = settings.temperature
        if settings.max_tokens is not None:
            body["max_tokens"] = settings.max_tokens
        if cache_key is not None and self._send_cache_key:
            body["prompt_cache_key"] = cache_key
        # Encoded once here: the SDK's typed `create` re-walks every message of the
        # transcript on every call (its cost grows with the session), then parses each
        # chunk into models; its client's `post` with a raw streaming response does neither.
        content = _encode(body)
        attempt = 0
        while True:
            attempt += 1
            assembler = _Assembler(self.endpoint.model)
            yielded = False
            try:
                response = await self._client.post(
                    "/chat/completions",
                    content=content,
                    cast_to=httpx2.Response,
                    options={"headers": _RAW_STREAM_HEADERS},
                )
                lines = response.aiter_lines()
                try:
                    async for chunk in _sse_chunks(lines):
                        if chunk is None:  # [DONE]
                            assembler.done = True
                            break
                        text = assembler.add(chunk)
                        if text:
                            yielded = True
                            yield text
                    if assembler.done:
                        await _read_to_end(lines)
                finally:
                    await response.aclose()
                reply = assembler.reply()
                if not assembler.complete and (reply.text or reply.tool_calls):
                    raise _CutStream(
                        "the stream ended before the answer was complete (no finish reason "
                        "and no [DONE]); its partial answer is not used"
                    )
            except (
                openai.APIStatusError,
                openai.APIConnectionError,
                httpx2.HTTPError,
                _CutStream,
            ) as e:
                # A stream that broke or ended early is a failed call like any other: tried
                # again while none of its text has reached the caller (a retry would
                # repeat it), and its partial text and tool calls are never used.
                if yielded or not _retryable(e) or attempt > self.max_retries:
                    raise self._error(e, attempt) from e
                delay = self._delay(attempt)
                logger.warning(
                    "model_retry",
                    extra={
                        "event": "model_retry",
                        "model": self.endpoint.model,
                        "endpoint": self.endpoint.display_url,
                        "attempt": attempt,
                        "reason": self._reason(e),
                        "delay": round(delay, 3),
                    },
                )
                await anyio.sleep(delay)
                continue
            except _StreamError as e:
                # An error event inside the stream, or a chunk that is not JSON: reported as
                # it is, never retried.
                raise self._error(e, attempt) from e
            if reply.finish_reason is None and not reply.text and not reply.tool_calls:
                # An empty stream is no answer (llama.cpp does this past its context window):
                # treating it as success would end the turn silently with nothing said.
                raise ModelError(
                    model=self.endpoint.model,
                    endpoint=self.endpoint.display_url,
                    reason="the stream ended without an answer (no finish reason); the prompt "
                    "may exceed the model's context window",
                    status=None,
                    attempts=attempt,
                )
            yield reply
            return

    def _delay(self, attempt: int) -> float:
        base = min(_MAX_BACKOFF, self.backoff * 2.0 ** (attempt - 1))
        return base * random.uniform(0.5, 1.0)

    def _error(self, error: Exception, attempts: int) -> ModelError:
        status = error.status_code if isinstance(error, openai.APIStatusError) else None
        return ModelError(
            model=self.endpoint.model,
            endpoint=self.endpoint.display_url,
            reason=self._reason(error),
            status=status,
            attempts=attempts,
        )

    def _reason(self, error: Exception) -> str:
        if isinstance(error, openai.APIStatusError):
            detail = _body_message(error.body) or error.response.reason_phrase
            reason = f"HTTP {error.status_code}: {detail}"
        elif isinstance(error, openai.APITimeoutError):
            reason = f"timed out (timeout {_seconds(self._client.timeout)})"
        elif isinstance(error, openai.APIConnectionError):
            cause = error.__cause__
            detail = f"{type(cause).__name__}: {cause}" if cause is not None else error.message
            reason = f"connection failed ({detail})"
        elif isinstance(error, _StreamError | _CutStream):
            reason = str(error)
        elif isinstance(error, httpx2.TimeoutException):
            reason = f"the stream stalled (timeout {_seconds(self._client.timeout)})"
        elif isinstance(error, httpx2.HTTPError):
            reason = f"the stream broke ({type(error).__name__}: {error})"
        else:
            reason = f"malformed response: {error}"
        return self._scrub(reason)[:_MAX_REASON]

    def _scrub(self, text: str) -> str:
        """Remove anything secret a server or library may have echoed back."""
        key = self.endpoint.api_key
        if key:
            # An HTTP client's error quotes a header it refuses as a repr (`b'Bearer k\\n'`).
            shown = {key, repr(key)[1:-1], repr(key.encode())[2:-1]}
            for form in sorted(shown, key=len, reverse=True):
                text = text.replace(form, "***")
        if self.endpoint.base_url != display_url(self.endpoint.base_url):
            text = text.replace(self.endpoint.base_url, self.endpoint.display_url)
        return text


# Asks the SDK's client for the raw, unread streaming response (the SDK's own
# `with_streaming_response` sets the same header).
_RAW_STREAM_HEADERS = {"X-Stainless-Raw-Response": "stream", "Content-Type": "application/json"}


class _StreamError(Exception):
    """An error event, or a chunk that is not JSON, inside a 200 stream."""


class _CutStream(Exception):
    """A 200 stream that ended (cleanly or not) before it said it was complete."""


async def _sse_chunks(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, Any] | None]:
    """The JSON objects of a Chat Completions event stream; None for `[DONE]`, the end."""
    async for line in lines:
        if not line.startswith("data:"):
            continue  # comments, `event:` lines and the blank lines between events
        data = line[5:].strip()
        if data == "[DONE]":
            yield None
            return
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError as error:
            raise _StreamError(f"malformed response: a chunk is not JSON ({error})") from error
        if not isinstance(chunk, dict):
            raise _StreamError("malformed response: a chunk is not a JSON object")
        if chunk.get("error"):
            message = _body_message(chunk) or json.dumps(chunk["error"])[:200]
            raise _StreamError(f"error in the stream: {message}")
        yield chunk


async def _read_to_end(lines: AsyncIterator[str]) -> None:
    """Reads what follows `[DONE]`: normally only the end of the chunked body, already
    received. A response read to its end leaves its connection in the client's pool for
    the next call; one closed early takes the connection with it, and every model call
    would open a new one (a TCP and a TLS handshake). Bounded: a server that holds the
    stream open after `[DONE]` costs `_READ_TO_END_SECONDS`, then loses the connection."""
    with anyio.move_on_after(_READ_TO_END_SECONDS):
        async for _ in lines:
            pass


def _text(piece: object) -> str:
    """A piece of the model's output as text: JSON lets a model send an unpaired surrogate
    (`"\\ud800"`), which no UTF-8 stream, log or database takes; it becomes U+FFFD."""
    text = str(piece)
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def _encode(body: dict[str, Any]) -> bytes:
    """The request body as UTF-8 JSON; a string that is no text (a tool's result, say) is
    sent as the `\\u` escape JSON allows rather than failing every call of the session."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode()
    except UnicodeEncodeError:
        return json.dumps(body, separators=(",", ":")).encode()


def _retryable(error: Exception) -> bool:
    if isinstance(error, openai.APIStatusError):
        return error.status_code == 429 or error.status_code >= 500
    return True  # timeouts, connection errors, streams that broke or ended early


def _body_message(body: object) -> str:
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return cast(str, inner["message"])
    return ""


def _seconds(timeout: object) -> str:
    read = getattr(timeout, "read", timeout)
    return f"{read:g}s" if isinstance(read, int | float) else "the client's timeout"


def _normalize_messages(messages: Sequence[Message]) -> list[Message]:
    """Assistant messages with tool calls get content "" instead of null (or missing)."""
    normalized = []
    for message in messages:
        if (
            message.get("role") == "assistant"
            and message.get("tool_calls")
            and message.get("content") is None
        ):
            message = {**message, "content": ""}
        normalized.append(message)
    return normalized
