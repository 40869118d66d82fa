"""Keeping configured secrets out of everything an agent, a client or a log sees.

Connections and MCP servers hold values that must never leave the runtime: auth
tokens, passwords, header values, everything written as `env:NAME`, and the
claim values a connection injects. The calls that use them put them on the wire
only; whatever comes back (a result, an error message) is scrubbed here before
it reaches a tool result, an event, the session log or a log line, so even an
API that echoes its request headers cannot leak them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

REDACTED = "[redacted]"
MIN_SCRUBBED = 4
"""Values shorter than this are not scrubbed from text: replacing every `42` or `eu` in
a response would mangle it, and a value that short protects nothing."""


def scrubbed(secrets: Iterable[str]) -> tuple[str, ...]:
    """The values worth scrubbing, longest first (a secret containing another goes whole)."""
    return tuple(sorted({s for s in secrets if len(s) >= MIN_SCRUBBED}, key=len, reverse=True))


def scrub_text(text: str, secrets: tuple[str, ...]) -> str:
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
