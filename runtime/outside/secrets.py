"""Keeping configured secrets out of everything an agent, a client or a log sees.

Connections and MCP servers hold values that must never leave the runtime: auth
tokens, passwords, header values, everything written as `env:NAME`, and the
claim values a connection injects. The calls that use them put them on the wire
only; whatever comes back (a result, an error message) is scrubbed here before
it reaches a tool result, an event, the session log or a log line, so even an
API that echoes its request headers cannot leak them.

A secret comes back in more forms than the one configured: an API that echoes the
URL gives it percent-encoded (`qk%2FEy` for `qk/Ey`) or form-encoded, a JSON body
escapes it, and an error message of the HTTP client shows its `repr()` (a token
ending in `\\r` reads `tok\\\\r` there). `scrubbed` expands every secret into all of
these forms, so each of them is replaced. A text cut at a size limit is cut so that
no part of a secret survives at the cut (`cut_clean`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus

REDACTED = "[redacted]"
MIN_SCRUBBED = 4
"""Values shorter than this are not scrubbed from text: replacing every `42` or `eu` in
a response would mangle it, and a value that short protects nothing."""
_ESCAPE = re.compile(r"%[0-9A-F]{2}")


def wire_forms(secret: str) -> set[str]:
    """`secret` as it may come back: literal, percent- and form-encoded (upper- and
    lower-case hex), JSON-escaped, and as the `repr()` of the text and of its bytes."""
    encoded = {quote(secret, safe=""), quote(secret, safe="/"), quote_plus(secret)}
    encoded |= {_ESCAPE.sub(lambda m: m.group().lower(), form) for form in encoded}
    escaped = {json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
    shown = {repr(secret)[1:-1], repr(secret.encode())[2:-1]}
    return {secret, *encoded, *escaped, *shown}


def scrubbed(secrets: Iterable[str]) -> tuple[str, ...]:
    """Every form of the values worth scrubbing, longest first (a secret containing another
    goes whole)."""
    forms = {
        form for secret in secrets if len(secret) >= MIN_SCRUBBED for form in wire_forms(secret)
    }
    return tuple(sorted((f for f in forms if len(f) >= MIN_SCRUBBED), key=len, reverse=True))


def scrub_text(text: str, secrets: tuple[str, ...]) -> str:
    """`text` with every one of `secrets` (from `scrubbed`) replaced by `[redacted]`."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def scrub(value: Any, secrets: tuple[str, ...]) -> Any:
    """`value` (JSON-like) with every secret replaced in its strings and keys."""
    if not secrets:
        return value
    if isinstance(value, str):
        return scrub_text(value, secrets)
    if isinstance(value, dict):
        return {scrub_text(str(k), secrets): scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(item, secrets) for item in value]
    return value


def cut_clean(text: str, end: int, secrets: tuple[str, ...]) -> int:
    """`end`, moved back to the start of any secret that runs across it: cutting `text`
    there leaves no part of one. `text` must reach past `end` by the longest secret."""
    moved = True
    while moved:
        moved = False
        for secret in secrets:
            start = text.find(secret, max(0, end - len(secret) + 1))
            if start != -1 and start < end < start + len(secret):
                end, moved = start, True
    return end


def scrubbed_prefix(text: str, limit: int, secrets: tuple[str, ...]) -> str:
    """The first `limit` characters of `text` (fewer when a secret runs across the cut),
    scrubbed."""
    return scrub_text(text[: cut_clean(text, limit, secrets)], secrets)


def longest(secrets: tuple[str, ...]) -> int:
    """The length in UTF-8 bytes of the longest form: how far past a cut to read."""
    return max((len(secret.encode()) for secret in secrets), default=0)
