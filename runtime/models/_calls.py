"""What every model client shares: bounded retries with backoff, and errors that name the
model and the endpoint and never the key.

A client makes one *attempt* at a time (an async iterator of text deltas, then one
`ModelReply`) and says what each failure of its provider means (`explain` gives a
`Failure`, or None for an exception that is not the provider's). `with_retries` tries
again while the failure is transient and nothing has reached the caller, then raises
`ModelError`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, cast

import anyio

from runtime.exceptions import ModelError
from runtime.models import ModelReply
from runtime.models.endpoints import ModelEndpoint, display_url

logger = logging.getLogger("amodal")

NO_KEY = "amodal-no-key"
"""Sent when an endpoint has no key: the SDKs refuse an empty one; local servers ignore it."""
MAX_BACKOFF = 30.0
MAX_REASON = 300
READ_TO_END_SECONDS = 0.1  # after the end of an answer, see `read_to_end`


@dataclass(frozen=True, slots=True)
class Failure:
    """What a failed attempt means: why (for a person), its HTTP status, and whether another
    try (or another endpoint) may succeed."""

    reason: str
    status: int | None = None
    transient: bool = False


class StreamFailure(Exception):
    """A failure a client finds in a 200 stream (an error event, a chunk that is not JSON,
    an answer that ended before it said it was complete)."""

    def __init__(self, reason: str, *, transient: bool) -> None:
        super().__init__(reason)
        self.failure = Failure(reason, None, transient)


Attempt = Callable[[], AsyncGenerator["str | ModelReply", None]]
Explain = Callable[[Exception], "Failure | None"]


async def with_retries(
    endpoint: ModelEndpoint,
    attempt: Attempt,
    explain: Explain,
    *,
    max_retries: int,
    backoff: float,
) -> AsyncIterator[str | ModelReply]:
    """Run `attempt` until it gives its reply: a transient failure is tried again (up to
    `max_retries` times, waiting `backoff` seconds doubled each time, with jitter) while
    none of its text has been yielded, since a retry would repeat it."""
    attempts = 0
    while True:
        attempts += 1
        yielded = False
        try:
            # Closed at once when the caller stops early: the response goes back to the pool.
            async with contextlib.aclosing(attempt()) as items:
                async for item in items:
                    yielded = yielded or not isinstance(item, ModelReply)
                    yield item
            return
        except Exception as error:
            failure = explain(error)
            if failure is None:
                raise
            reason = scrub(failure.reason, endpoint)[:MAX_REASON]
            if yielded or not failure.transient or attempts > max_retries:
                raise ModelError(
                    model=endpoint.model,
                    endpoint=endpoint.display_url,
                    reason=reason,
                    status=failure.status,
                    attempts=attempts,
                    transient=failure.transient,
                ) from error
            delay = min(MAX_BACKOFF, backoff * 2.0 ** (attempts - 1)) * random.uniform(0.5, 1.0)
            logger.warning(
                "model_retry",
                extra={
                    "event": "model_retry",
                    "model": endpoint.model,
                    "endpoint": endpoint.display_url,
                    "attempt": attempts,
                    "reason": reason,
                    "delay": round(delay, 3),
                },
            )
            await anyio.sleep(delay)


def scrub(text: str, endpoint: ModelEndpoint) -> str:
    """`text` without anything secret a server or library may have echoed back: the key,
    and the base URL's credentials or query string."""
    key = endpoint.api_key
    if key:
        # An HTTP client's error quotes a header it refuses as a repr (`b'Bearer k\\n'`).
        shown = {key, repr(key)[1:-1], repr(key.encode())[2:-1]}
        for form in sorted(shown, key=len, reverse=True):
            text = text.replace(form, "***")
    if endpoint.base_url != display_url(endpoint.base_url):
        text = text.replace(endpoint.base_url, endpoint.display_url)
    return text


async def sse_data(body: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The `data:` payloads of an event stream, from the response body's bytes (comments,
    `event:` lines and the blank lines between events skipped: every payload names its own
    type). Lines end in LF or CRLF, as every model server sends them; they are split on the
    bytes, so a character cut between two network reads is whole when it is decoded (the
    SDKs' line iterators decode, then split, through two more layers per read)."""
    rest = b""
    async for piece in body:
        *lines, rest = (rest + piece if rest else piece).split(b"\n")
        for line in lines:
            if line.startswith(b"data:"):
                yield line[5:].strip().decode(errors="replace")
    if rest.startswith(b"data:"):
        yield rest[5:].strip().decode(errors="replace")


def chunk(data: str) -> dict[str, Any]:
    """One `data:` payload as a JSON object; `StreamFailure` for anything else."""
    try:
        value = json.loads(data)
    except json.JSONDecodeError as error:
        raise StreamFailure(
            f"malformed response: a chunk is not JSON ({error})", transient=False
        ) from error
    if not isinstance(value, dict):
        raise StreamFailure("malformed response: a chunk is not a JSON object", transient=False)
    return cast(dict[str, Any], value)


async def read_to_end(body: AsyncIterator[bytes]) -> None:
    """Reads what follows the end of an answer: normally only the end of the chunked body,
    already received. A response read to its end leaves its connection in the client's pool
    for the next call; one closed early takes the connection with it, and every model call
    would open a new one (a TCP and a TLS handshake). Bounded: a server that holds the
    stream open after the end costs `READ_TO_END_SECONDS`, then loses the connection."""
    with anyio.move_on_after(READ_TO_END_SECONDS):
        async for _ in body:
            pass


def text(piece: object) -> str:
    """A piece of the model's output as text: JSON lets a model send an unpaired surrogate
    (`"\\ud800"`), which no UTF-8 stream, log or database takes; it becomes U+FFFD."""
    value = str(piece)
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return value


def encode(body: dict[str, Any]) -> bytes:
    """A request body as UTF-8 JSON; a string that is no text (a tool's result, say) is
    sent as the `\\u` escape JSON allows rather than failing every call of the session."""
    encoded = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    try:
        return encoded.encode()
    except UnicodeEncodeError:
        return json.dumps(body, separators=(",", ":")).encode()


def body_message(body: object) -> str:
    """The `error.message` of an error body (OpenAI's and Anthropic's have one), or ""."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return cast(str, inner["message"])
    return ""


def seconds(timeout: object) -> str:
    """A client's read timeout for a message: `60s`."""
    read = getattr(timeout, "read", timeout)
    return f"{read:g}s" if isinstance(read, int | float) else "the client's timeout"


RAW_STREAM_HEADERS = {"X-Stainless-Raw-Response": "stream", "Content-Type": "application/json"}
"""Ask an SDK's client for the raw, unread streaming response (the SDKs' own
`with_streaming_response` sets the same header)."""
