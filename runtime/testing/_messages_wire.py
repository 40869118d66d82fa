"""Anthropic's Messages API as the scripted server speaks it: `POST /v1/messages`.

Streamed as the real API streams: `message_start` (with the input usage),
`content_block_start` / `content_block_delta` (`text_delta`, `input_json_delta`) /
`content_block_stop` per block (text first, then one `tool_use` block per call),
`message_delta` (the stop reason and the cumulative usage), `message_stop`; a `ping`
after the first block starts. Errors are `{"type": "error", "error": {"type",
"message"}}`.

It refuses (400, recorded as unexpected) what the real API refuses and a client could
get wrong: no `max_tokens`, a first message that is not the user's, an empty text block,
tool results that do not answer the calls just before them or do not open their
message, tool blocks in a request that defines no tools, a tool-use id the API does not
accept, more than four `cache_control` breakpoints, a temperature above 1.

**Prompt caching** is simulated: each block marked `cache_control` ends a prefix (tools,
then system, then messages); the first request with a prefix writes it
(`cache_creation_input_tokens`), a later one with the same prefix reads it
(`cache_read_input_tokens`), and the longest prefix read wins. Token counts are the
scripted ones (characters // 4 of the text, as `ScriptedModel` counts), so one
conversation costs the same tokens on both servers.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from runtime.testing._steps import Step
from runtime.testing._wire import Call, StreamPlan, split_evenly, split_text

if TYPE_CHECKING:
    from runtime.testing._requests import RecordedRequest

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_TOOL_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
_MAX_BREAKPOINTS = 4


class MessagesWire:
    provider = "anthropic"
    route = "/v1/messages"
    models_route = "/v1/models"

    def __init__(self, cache_min_tokens: int = 0) -> None:
        self.cache_min_tokens = cache_min_tokens
        self._cached: set[str] = set()
        self._lock = threading.Lock()

    def models(self) -> dict[str, Any]:
        entry = {"type": "model", "id": "scripted", "display_name": "Scripted", "created_at": ""}
        return {"data": [entry], "has_more": False, "first_id": "scripted", "last_id": "scripted"}

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = _ERROR_TYPES.get(status, "api_error")
        return {
            "type": "error",
            "error": {"type": kind, "message": message},
            "request_id": "req_scripted",
        }

    def refusal(self, body: Mapping[str, Any]) -> str | None:
        return _refusal(body)

    # ------------------------------------------------------------ answers

    def stream(self, request: RecordedRequest, step: Step, calls: list[Call]) -> StreamPlan:
        usage = self.usage(request, step)
        name = step.model or request.model or "scripted"
        start = {**usage, "output_tokens": 1}
        message: dict[str, Any] = {
            "id": f"msg_{id(step):x}",
            "type": "message",
            "role": "assistant",
            "model": name,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": start,
        }
        events = [_event("message_start", {"message": message})]
        index = 0
        if step.text:
            events.append(_block_start(index, {"type": "text", "text": ""}))
            events.append(_event("ping", {}))
            events.extend(
                _delta(index, {"type": "text_delta", "text": piece})
                for piece in split_text(step.text)
            )
        text_end = len(events)
        if step.text:
            events.append(_event("content_block_stop", {"index": index}))
            index += 1
        mid_call = text_end
        for number, (call_id, fn, arguments) in enumerate(calls):
            head = {"type": "tool_use", "id": call_id, "name": fn, "input": {}}
            events.append(_block_start(index, head))
            fragments = split_evenly(arguments)
            for part, piece in enumerate(fragments):
                if number == 0 and part == len(fragments) // 2:
                    mid_call = len(events)
                events.append(_delta(index, {"type": "input_json_delta", "partial_json": piece}))
            if number == 0 and mid_call == text_end:
                mid_call = len(events)  # no arguments to cut: cut before the block's stop
            events.append(_event("content_block_stop", {"index": index}))
            index += 1
        calls_end = len(events)
        stop = {"stop_reason": _stop_reason(step), "stop_sequence": None}
        final = {**usage, "output_tokens": _output_tokens(step)}
        events.append(_event("message_delta", {"delta": stop, "usage": final}))
        events.append(_event("message_stop", {}))
        return StreamPlan(events, text_end, mid_call, calls_end)

    def completion(self, request: RecordedRequest, step: Step, calls: list[Call]) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"type": "text", "text": step.text}] if step.text else []
        for call_id, fn, arguments in calls:
            try:
                given = json.loads(arguments or "{}")
            except json.JSONDecodeError:
                given = {"_unparsed": arguments}
            content.append({"type": "tool_use", "id": call_id, "name": fn, "input": given})
        return {
            "id": f"msg_{id(step):x}",
            "type": "message",
            "role": "assistant",
            "model": step.model or request.model or "scripted",
            "content": content,
            "stop_reason": None if step.unfinished else _stop_reason(step),
            "stop_sequence": None,
            "usage": {**self.usage(request, step), "output_tokens": _output_tokens(step)},
        }

    # ------------------------------------------------------------ the prompt cache

    def usage(self, request: RecordedRequest, step: Step) -> dict[str, int]:
        """The input usage of a request, with the prompt cache's reads and writes."""
        counted, breakpoints = _prefixes(request.body)
        total = max(1, sum(counted) // 4)
        read = written = 0
        if step.cached_tokens:
            read = min(step.cached_tokens, total)
        elif breakpoints:
            cacheable = [
                (key, sum(counted[: end + 1]) // 4)
                for key, end in breakpoints
                if sum(counted[: end + 1]) // 4 >= max(1, self.cache_min_tokens)
            ]
            with self._lock:
                hits = [tokens for key, tokens in cacheable if key in self._cached]
                read = max(hits, default=0)
                if cacheable and cacheable[-1][0] not in self._cached:
                    written = cacheable[-1][1] - read
                self._cached.update(key for key, _ in cacheable)
        return {
            "input_tokens": total - read - written,
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
        }


def _prefixes(body: Mapping[str, Any]) -> tuple[list[int], list[tuple[str, int]]]:
    """The request as one sequence of pieces (each tool, each system block, each message
    block): the characters each counts, and (key of the prefix, index of its last piece)
    for every piece marked `cache_control`."""
    pieces: list[Any] = []
    counted: list[int] = []
    breakpoints: list[tuple[str, int]] = []

    def add(piece: Mapping[str, Any], characters: int, where: Any) -> None:
        marked = "cache_control" in piece
        pieces.append([where, {k: v for k, v in piece.items() if k != "cache_control"}])
        counted.append(characters)
        if marked:
            canonical = json.dumps(pieces, sort_keys=True, ensure_ascii=False)
            breakpoints.append((hashlib.sha256(canonical.encode()).hexdigest(), len(pieces) - 1))

    for tool in body.get("tools") or ():
        add(tool, 0, "tool")
    for block in _system_blocks(body.get("system")):
        add(block, len(block.get("text") or ""), "system")
    for number, message in enumerate(body.get("messages") or ()):
        for block in _content(message.get("content")):
            add(block, _characters(block), (number, message.get("role")))
    return counted, breakpoints


def _characters(block: Mapping[str, Any]) -> int:
    kind = block.get("type")
    if kind == "text":
        return len(block.get("text") or "")
    if kind == "tool_use":
        return len(json.dumps(block.get("input") or {}))
    if kind == "tool_result":
        return sum(_characters(inner) for inner in _content(block.get("content")))
    return 0


def _system_blocks(system: object) -> list[dict[str, Any]]:
    if isinstance(system, str):
        return [{"type": "text", "text": system}] if system else []
    return [block for block in system or () if isinstance(block, dict)]  # type: ignore[attr-defined]


def _content(content: object) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [block for block in content or () if isinstance(block, dict)]  # type: ignore[attr-defined]


# ---------------------------------------------------------------- the API's rules


def _refusal(body: Mapping[str, Any]) -> str | None:
    """Why the real Messages API would answer 400, or None."""
    if not isinstance(body.get("model"), str):
        return "model: Field required"
    tokens = body.get("max_tokens")
    if not isinstance(tokens, int) or tokens < 1:
        return "max_tokens: Field required (an integer of at least 1)"
    temperature = body.get("temperature")
    if isinstance(temperature, int | float) and not 0 <= temperature <= 1:
        return "temperature: Input should be less than or equal to 1"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    if messages[0].get("role") != "user":
        return 'messages: first message must use the "user" role'
    problem = _blocks_refusal(body, messages)
    if problem is not None:
        return problem
    marked = sum(1 for tool in body.get("tools") or () if "cache_control" in tool)
    marked += sum(1 for block in _system_blocks(body.get("system")) if "cache_control" in block)
    marked += sum(
        1 for m in messages for block in _content(m.get("content")) if "cache_control" in block
    )
    if marked > _MAX_BREAKPOINTS:
        return f"A maximum of {_MAX_BREAKPOINTS} blocks with cache_control may be provided"
    return None


def _blocks_refusal(body: Mapping[str, Any], messages: Sequence[Mapping[str, Any]]) -> str | None:
    uses_tools = False
    asked: list[str] = []  # the tool-use ids of the assistant message just before
    for number, message in enumerate(messages):
        blocks = _content(message.get("content"))
        if not blocks:
            return f"messages.{number}: content must not be empty"
        for block in blocks:
            if block.get("type") == "text" and not block.get("text"):
                return f"messages.{number}: text content blocks must be non-empty"
        results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
        if message.get("role") == "assistant":
            if asked:
                return _unanswered(number - 1, asked)
            asked = [str(b.get("id")) for b in blocks if b.get("type") == "tool_use"]
            if any(not _TOOL_ID.match(call_id) for call_id in asked):
                return f"messages.{number}: tool_use ids must match ^[a-zA-Z0-9_-]+$"
            uses_tools = uses_tools or bool(asked)
            continue
        leading = 0
        while leading < len(blocks) and blocks[leading].get("type") == "tool_result":
            leading += 1
        if leading < len(results):
            return f"messages.{number}: tool_result blocks must come first in the content"
        if set(results) - set(asked):
            return (
                f"messages.{number}: unexpected tool_use_id found in tool_result blocks: "
                f"each tool_result must answer a tool_use of the previous message"
            )
        if set(asked) - set(results):
            return _unanswered(number - 1, [a for a in asked if a not in results])
        asked = []
        uses_tools = uses_tools or bool(results)
    if asked:
        return _unanswered(len(messages) - 1, asked)
    if uses_tools and not body.get("tools"):
        return "Requests which include `tool_use` or `tool_result` blocks must define tools."
    return None


def _unanswered(number: int, ids: list[str]) -> str:
    return (
        f"messages.{number}: `tool_use` ids were found without `tool_result` blocks "
        f"immediately after: {', '.join(ids)}"
    )


# ---------------------------------------------------------------- events


def _event(kind: str, data: dict[str, Any]) -> bytes:
    body = json.dumps({"type": kind, **data})
    return f"event: {kind}\ndata: {body}\n\n".encode()


def _block_start(index: int, block: dict[str, Any]) -> bytes:
    return _event("content_block_start", {"index": index, "content_block": block})


def _delta(index: int, delta: dict[str, Any]) -> bytes:
    return _event("content_block_delta", {"index": index, "delta": delta})


def _stop_reason(step: Step) -> str:
    return "tool_use" if step.tool_calls else "end_turn"


def _output_tokens(step: Step) -> int:
    produced = len(step.text) + sum(len(c.name) + len(c.arguments) for c in step.tool_calls)
    return max(1, produced // 4)
