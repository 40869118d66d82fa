"""What a scripted model answers: one `Step` per model call."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from runtime.events import Usage


@dataclass(frozen=True, slots=True)
class ScriptedToolCall:
    """One tool call a step answers with. `arguments` is the raw JSON text sent."""

    name: str
    arguments: str
    id: str | None = None
    """None: the server numbers it (`call_1`, `call_2`, ... per server)."""


@dataclass(frozen=True, slots=True)
class Step:
    """One scripted answer to one chat-completions request.

    A success (`status` 200) carries text, tool calls or both; an error step
    carries an HTTP status and a message, sent as an OpenAI-style error body.
    The other fields inject the faults of real providers (build them with
    `cut_stream`, `cut_in_tool_call`, `unfinished`, `hang`, `stall` and `junk_chunk`, or vary any
    step with `dataclasses.replace(reply("hi"), model="gpt-x-2025")`).
    """

    text: str = ""
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    status: int = 200
    message: str = ""
    cut: bool = False
    """Stream the text, then drop the connection without ending the response."""
    cut_in_call: bool = False
    """Stream the text and the first tool call up to the middle of its arguments, then drop
    the connection (a stream cut inside a tool-use block)."""
    unfinished: bool = False
    """End the response cleanly after the text and tool-call chunks, but without the
    finish reason, the usage and `[DONE]` (a stream closed early by a proxy)."""
    delay: float = 0.0
    """Seconds of silence before the status line (a provider that hangs)."""
    stall: float = 0.0
    """Seconds of silence after the text chunks, before the rest of the stream."""
    junk: str | None = None
    """A `data:` line sent verbatim after the text chunks (e.g. one that is not JSON)."""
    cached_tokens: int = 0
    model: str | None = None
    """The model name the response reports; None: the one requested."""

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.tool_calls else "stop"


def reply(text: str, *, cached_tokens: int = 0) -> Step:
    """A plain text answer."""
    return Step(text=text, cached_tokens=cached_tokens)


def tool_call(
    name: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    id: str | None = None,
    text: str = "",
    cached_tokens: int = 0,
) -> Step:
    """An answer with one tool call (and optionally some text before it)."""
    call = ScriptedToolCall(name, json.dumps(dict(arguments or {})), id)
    return Step(text=text, tool_calls=(call,), cached_tokens=cached_tokens)


def tool_calls(
    calls: Iterable[tuple[str, Mapping[str, Any]] | ScriptedToolCall],
    *,
    text: str = "",
    cached_tokens: int = 0,
) -> Step:
    """An answer with several tool calls, in this order."""
    built = tuple(
        call
        if isinstance(call, ScriptedToolCall)
        else ScriptedToolCall(call[0], json.dumps(dict(call[1])))
        for call in calls
    )
    if not built:
        raise ValueError("tool_calls() needs at least one call")
    return Step(text=text, tool_calls=built, cached_tokens=cached_tokens)


def raw_arguments(name: str, arguments: str, *, id: str | None = None) -> Step:
    """A tool call whose arguments are sent verbatim, e.g. malformed JSON."""
    return Step(tool_calls=(ScriptedToolCall(name, arguments, id),))


def error(status: int, message: str = "scripted error") -> Step:
    """An HTTP error answer (429, 500, 503, 400, ...) with an OpenAI-style body."""
    if not 400 <= status <= 599:
        raise ValueError(f"error status must be 4xx or 5xx, got {status}")
    return Step(status=status, message=message)


def cut_stream(text: str) -> Step:
    """Stream `text`, then drop the connection before the response is complete."""
    return Step(text=text, cut=True)


def cut_in_tool_call(step: Step) -> Step:
    """`step`'s text and its first tool call up to the middle of the call's arguments, then
    the connection drops: a call that must never run half-sent."""
    if not step.tool_calls:
        raise ValueError("cut_in_tool_call() needs a step with a tool call")
    return replace(step, cut_in_call=True)


def unfinished(step: Step) -> Step:
    """`step`'s text and tool-call chunks, then a clean end of the response with no
    finish reason, no usage and no `[DONE]`: an answer that only looks complete."""
    return replace(step, unfinished=True)


def hang(seconds: float, then: Step | None = None) -> Step:
    """Say nothing for `seconds` (no status line, no headers), then answer with `then`
    (default: an empty reply). Closing the server ends the wait."""
    return replace(then or reply(""), delay=seconds)


def stall(text: str, seconds: float) -> Step:
    """Stream `text`, say nothing for `seconds` (a stream that hangs midway), then finish
    the answer. Closing the server ends the wait."""
    return Step(text=text, stall=seconds)


def junk_chunk(text: str = "", junk: str = "{this is not json") -> Step:
    """Stream `text`, then a `data:` line holding `junk` (not JSON by default)."""
    return Step(text=text, junk=junk)


def token_counts(messages: Sequence[Mapping[str, Any]], step: Step) -> Usage:
    """Deterministic token counts of a scripted answer: characters // 4 (input at least 1,
    output at least 1), cached as the step says (at most the input)."""
    characters = 0
    for message in messages:
        characters += len(content_text(message.get("content")))
        for call in message.get("tool_calls") or []:
            characters += len(str(call.get("function", {}).get("arguments", "")))
    prompt = max(1, characters // 4)
    produced = len(step.text) + sum(len(c.name) + len(c.arguments) for c in step.tool_calls)
    return Usage(prompt, max(1, produced // 4), min(step.cached_tokens, prompt))


def content_text(content: object) -> str:
    """The text of a message's content: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""
