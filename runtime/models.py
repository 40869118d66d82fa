"""The model client (SPEC 8): which endpoint a call goes to, and the streaming call itself.

`resolve_endpoint` turns amodal.json's `models` plus the environment into a
`ModelEndpoint` (or None: nothing configured, the caller starts the offline
model). `ModelClient` streams one Chat Completions call through the `openai`
SDK's async client: text deltas as they arrive, then one `ModelReply` with the
assembled tool calls, the usage and the model that actually answered.
Provider failures are retried with bounded exponential backoff, then raised as
`ModelError`, which names the model and the endpoint and never the API key.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self, cast
from urllib.parse import urlsplit

import anyio
import httpx2
import openai

from runtime.bundle import ModelTier
from runtime.events import Usage
from runtime.exceptions import AmodalError
from runtime.formats import ModelBinding, RepoConfig

logger = logging.getLogger("amodal")

OPENAI_BASE_URL = "https://api.openai.com/v1"
"""Where a key without a base URL goes: OpenAI's own API."""

# The SDK refuses an empty key; local servers ignore whatever is sent.
_NO_KEY = "amodal-no-key"
_MAX_BACKOFF = 30.0
_MAX_REASON = 300


class ModelConfigError(AmodalError):
    """The model configuration is incomplete: an endpoint is set but no model name."""


class ModelError(AmodalError):
    """A model call failed (after any retries). Names the model and endpoint, never the key."""

    def __init__(
        self, *, model: str, endpoint: str, reason: str, status: int | None, attempts: int
    ) -> None:
        self.model = model
        self.endpoint = endpoint
        self.reason = reason
        self.status = status
        self.attempts = attempts
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        super().__init__(f"model {model!r} at {endpoint} failed{tries}: {reason}")


@dataclass(frozen=True, slots=True)
class ModelEndpoint:
    """Where one model call goes. The key is left out of repr and str."""

    model: str
    base_url: str
    api_key: str | None = field(default=None, repr=False)

    @property
    def display_url(self) -> str:
        """The base URL as host and path: no scheme, credentials or query string."""
        return display_url(self.base_url)

    def __str__(self) -> str:
        return f"{self.model} at {self.display_url}"


def display_url(url: str) -> str:
    """`https://user:pw@host:8443/v1?key=x` -> `host:8443/v1`: safe for messages and logs."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:
        port = None
    where = f"{host}:{port}" if port is not None else host
    return f"{where}{parts.path.rstrip('/')}" or "(no URL)"


def accepts_prompt_cache_key(base_url: str | None) -> bool:
    """Whether the endpoint takes `prompt_cache_key`: only OpenAI's own API does.

    Other OpenAI-compatible servers may reject an unknown field, so it is sent
    only when the base URL is unset (the SDK's default) or its host is
    `api.openai.com`.
    """
    if not base_url:
        return True
    return urlsplit(base_url).hostname == "api.openai.com"


def resolve_endpoint(
    config: RepoConfig, tier: ModelTier, environ: Mapping[str, str]
) -> ModelEndpoint | None:
    """The endpoint a call at `tier` goes to, or None when no endpoint is configured.

    Precedence, field by field (an empty environment variable counts as unset):

    The session model (tier `default`, and `simple`/`advanced` when unbound):
      - base URL: `OPENAI_BASE_URL`, else `models.main.base_url`, else
        https://api.openai.com/v1;
      - API key: `OPENAI_API_KEY`, else `models.main.api_key`, else none;
      - model: `MODEL_MAIN`, else `models.main.model`, else `ModelConfigError`;
      - configured only if at least one of `OPENAI_BASE_URL`, `OPENAI_API_KEY`,
        `models.main.base_url`, `models.main.api_key` is set. Otherwise the
        result is None (the caller may start the offline model), even when
        `models.main` names a model.

    Tier `simple` / `advanced` is bound when `models.<tier>` or `MODEL_<TIER>`
    is set; an unbound tier resolves as the session model. A bound tier:
      - model: `MODEL_<TIER>`, else `models.<tier>.model`;
      - with its own `models.<tier>.base_url`: that URL and only
        `models.<tier>.api_key` (the session key is never sent to another
        endpoint; `OPENAI_BASE_URL` does not move it);
      - otherwise the session endpoint's base URL, with `models.<tier>.api_key`
        or else the session key; None when the session endpoint is not
        configured. The session model name is not needed here.
    """
    env = {key: value for key, value in environ.items() if value}
    if tier != "default":
        binding: ModelBinding | None = getattr(config.models, tier)
        override = env.get(f"MODEL_{tier.upper()}")
        if binding is not None or override is not None:
            return _resolve_tier(config, tier, binding, override, env)
    return _resolve_main(config, env)


def _resolve_main(config: RepoConfig, env: Mapping[str, str]) -> ModelEndpoint | None:
    main = config.models.main
    base_url, api_key = _main_location(main, env)
    if base_url is None:
        return None
    model = env.get("MODEL_MAIN") or (main.model if main is not None else None)
    if not model:
        raise ModelConfigError(
            f"a model endpoint is configured ({display_url(base_url)}) but no model name: "
            'set MODEL_MAIN, or "models": {"main": "<model name>"} in amodal.json'
        )
    return ModelEndpoint(model, base_url, api_key)


def _main_location(
    main: ModelBinding | None, env: Mapping[str, str]
) -> tuple[str | None, str | None]:
    """The session endpoint's (base URL, key); base URL None when nothing is configured."""
    config_url = main.base_url if main is not None else None
    config_key = _secret(main.api_key) if main is not None else None
    base_url = env.get("OPENAI_BASE_URL") or config_url
    api_key = env.get("OPENAI_API_KEY") or config_key
    if base_url is None and api_key is None:
        return None, None
    return base_url or OPENAI_BASE_URL, api_key


def _resolve_tier(
    config: RepoConfig,
    tier: ModelTier,
    binding: ModelBinding | None,
    override: str | None,
    env: Mapping[str, str],
) -> ModelEndpoint | None:
    model = override or (binding.model if binding is not None else "")
    own_key = _secret(binding.api_key) if binding is not None else None
    if binding is not None and binding.base_url:
        return ModelEndpoint(model, binding.base_url, own_key)
    base_url, main_key = _main_location(config.models.main, env)
    if base_url is None:
        return None
    return ModelEndpoint(model, base_url, own_key or main_key)


def _secret(value: Any) -> str | None:
    secret = value.get_secret_value() if value is not None else None
    return secret if isinstance(secret, str) and secret else None


# ---------------------------------------------------------------- replies


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model asked for. `arguments` is the raw JSON text, unparsed."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ModelReply:
    """The whole answer of one model call, yielded last by `ModelClient.stream`."""

    text: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage
    model: str
    """The model that answered, as the response names it (else the one requested)."""
    finish_reason: str | None


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
        self.usage = Usage()

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
                text += delta["content"]
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
            call.name = function["name"]
        if function.get("arguments"):
            call.arguments.append(function["arguments"])

    def reply(self) -> ModelReply:
        calls = tuple(
            ToolCall(call.id or f"call_{index}", call.name, "".join(call.arguments))
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


class ModelClient:
    """Streams Chat Completions calls to one endpoint, with bounded retries.

    The SDK's own retries are off: this client retries 429, 5xx, timeouts and
    connection errors up to `max_retries` times (exponential backoff from
    `backoff` seconds, with jitter), and only while nothing has been yielded
    to the caller, so a retry never repeats text already streamed. Other
    4xx are never retried. `timeout` bounds connecting and each read.
    """

    def __init__(
        self,
        endpoint: ModelEndpoint,
        *,
        max_retries: int = 3,
        timeout: float = 60.0,
        backoff: float = 0.5,
    ) -> None:
        self.endpoint = endpoint
        self.max_retries = max_retries
        self.timeout = timeout
        self.backoff = backoff
        self._send_cache_key = accepts_prompt_cache_key(endpoint.base_url)
        self._client = openai.AsyncOpenAI(
            base_url=endpoint.base_url,
            api_key=endpoint.api_key or _NO_KEY,
            max_retries=0,
            timeout=timeout,
        )

    def __repr__(self) -> str:
        return f"ModelClient({self.endpoint!r})"

    async def aclose(self) -> None:
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
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        *,
        cache_key: str | None = None,
        tool_choice: str | dict[str, Any] | None = None,
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
            body["tools"] = tools
        if tool_choice is not None:
            body["tool_choice"] = tool_choice
        if cache_key is not None and self._send_cache_key:
            body["prompt_cache_key"] = cache_key
        # Encoded once here: the SDK's typed `create` re-walks every message of the
        # transcript on every call (its cost grows with the session), then parses each
        # chunk into models; its client's `post` with a raw streaming response does neither.
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
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
                try:
                    async for chunk in _sse_chunks(response):
                        text = assembler.add(chunk)
                        if text:
                            yielded = True
                            yield text
                finally:
                    await response.aclose()
            except (openai.APIStatusError, openai.APIConnectionError) as e:
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
            except (httpx2.HTTPError, _StreamError) as e:
                # The connection broke mid-stream, an error event arrived inside the stream,
                # or a chunk was not JSON: reported, never retried.
                raise self._error(e, attempt) from e
            reply = assembler.reply()
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
            reason = f"timed out (timeout {self.timeout:g}s)"
        elif isinstance(error, openai.APIConnectionError):
            cause = error.__cause__
            detail = f"{type(cause).__name__}: {cause}" if cause is not None else error.message
            reason = f"connection failed ({detail})"
        elif isinstance(error, _StreamError):
            reason = str(error)
        elif isinstance(error, httpx2.HTTPError):
            reason = f"the stream broke ({type(error).__name__}: {error})"
        else:
            reason = f"malformed response: {error}"
        return self._scrub(reason)[:_MAX_REASON]

    def _scrub(self, text: str) -> str:
        """Remove anything secret a server or library may have echoed back."""
        if self.endpoint.api_key:
            text = text.replace(self.endpoint.api_key, "***")
        if self.endpoint.base_url != display_url(self.endpoint.base_url):
            text = text.replace(self.endpoint.base_url, self.endpoint.display_url)
        return text


# Asks the SDK's client for the raw, unread streaming response (the SDK's own
# `with_streaming_response` sets the same header).
_RAW_STREAM_HEADERS = {"X-Stainless-Raw-Response": "stream", "Content-Type": "application/json"}


class _StreamError(Exception):
    """An error event, or a chunk that is not JSON, inside a 200 stream."""


async def _sse_chunks(response: Any) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects of a Chat Completions event stream, until `[DONE]`."""
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue  # comments, `event:` lines and the blank lines between events
        data = line[5:].strip()
        if data == "[DONE]":
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


def _retryable(error: openai.APIStatusError | openai.APIConnectionError) -> bool:
    if isinstance(error, openai.APIStatusError):
        return error.status_code == 429 or error.status_code >= 500
    return True  # timeouts and connection errors


def _body_message(body: object) -> str:
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return cast(str, inner["message"])
    return ""


def _normalize_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
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
