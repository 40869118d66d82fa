"""OpenAI's Chat Completions as the scripted server speaks it: `POST /v1/chat/completions`,
streamed as `data:` chunks (a role chunk, text deltas, tool-call deltas, the finish
reason, the usage when `stream_options.include_usage` asks, `[DONE]`), errors as
`{"error": {"message", "type", "param", "code"}}`."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runtime.testing._steps import Step, token_counts
from runtime.testing._wire import Call, StreamPlan, split_evenly, split_text

if TYPE_CHECKING:
    from runtime.testing._requests import RecordedRequest


QUIRKS = {
    "tool_calls_without_index": "tool-call deltas carry no `index` (Gemini)",
    "stop_after_tool_calls": "an answer with tool calls finishes with `stop` (Gemini)",
    "thought_signatures": (
        "each call carries `extra_content.google.thought_signature`, and a request whose "
        "earlier calls lack theirs is refused (Gemini 3)"
    ),
    "keepalive_comments": "SSE comment lines `: OPENROUTER PROCESSING` in the stream (OpenRouter)",
    "whole_tool_calls": "each tool call arrives whole, in one delta (Ollama)",
    "no_usage": "no usage is reported, even when `stream_options.include_usage` asks (some "
    "self-hosted servers and gateways)",
}
"""What an OpenAI-compatible provider does differently, as `ScriptedModel(quirks=...)` plays
it; each is documented by its provider or in its issue tracker (docs/models.md)."""

_KEEPALIVE = b": OPENROUTER PROCESSING\n\n"


class ChatWire:
    provider = "openai"
    models_route = "/v1/models"

    def __init__(self, path: str = "/v1", quirks: frozenset[str] = frozenset()) -> None:
        unknown = quirks - set(QUIRKS)
        if unknown:
            raise ValueError(f"unknown quirks {sorted(unknown)}; known: {sorted(QUIRKS)}")
        self.path = "/" + path.strip("/") if path.strip("/") else ""
        self.route = f"{self.path}/chat/completions"
        self.models_route = f"{self.path}/models"
        self.quirks = quirks

    def models(self) -> dict[str, Any]:
        entry = {"id": "scripted", "object": "model", "created": 0, "owned_by": "amodal-testing"}
        return {"object": "list", "data": [entry]}

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = "rate_limit_error" if status == 429 else "scripted_error"
        return {"error": {"message": message, "type": kind, "param": None, "code": None}}

    def refusal(self, body: Mapping[str, Any]) -> str | None:
        """OpenAI-compatible servers differ too much to hold them to one rule; a quirk may add
        its provider's."""
        if "thought_signatures" in self.quirks:
            for message in body.get("messages") or ():
                for call in message.get("tool_calls") or ():
                    google = (call.get("extra_content") or {}).get("google") or {}
                    if not google.get("thought_signature"):
                        return (
                            "Function call is missing a thought_signature in functionCall "
                            f"parts (call {call.get('id')!r})"
                        )
        return None

    def stream(self, request: RecordedRequest, step: Step, calls: list[Call]) -> StreamPlan:
        """Role, text deltas, tool-call deltas, finish, usage (when asked for), `[DONE]`."""
        name = step.model or request.model or "scripted"
        created = int(time.time())
        ident = f"chatcmpl-{id(step):x}"

        def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            chunk = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": name,
                "choices": choices,
                **extra,
            }
            return b"data: " + json.dumps(chunk).encode() + b"\n\n"

        def delta(content: dict[str, Any], finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": content, "finish_reason": finish, "logprobs": None}
            return event([choice])

        events = [delta({"role": "assistant", "content": ""})]
        if "keepalive_comments" in self.quirks:
            events = [_KEEPALIVE, events[0], _KEEPALIVE]
        events.extend(delta({"content": piece}) for piece in split_text(step.text))
        text_end = len(events)
        mid_call = text_end + 1  # after the first call's head (a call with no arguments)
        for index, call in enumerate(calls):
            for number, piece in enumerate(self._call_deltas(index, call)):
                if index == 0 and number == 1 + len(split_evenly(call[2])) // 2:
                    mid_call = len(events)
                events.append(delta({"tool_calls": [piece]}))
        calls_end = len(events)
        finish = step.finish_reason
        if "stop_after_tool_calls" in self.quirks:
            finish = "stop"
        events.append(delta({}, finish))
        asked = (request.body.get("stream_options") or {}).get("include_usage")
        if asked and "no_usage" not in self.quirks:
            events.append(event([], usage=self._usage(request, step)))
        events.append(b"data: [DONE]\n\n")
        return StreamPlan(events, text_end, mid_call, calls_end)

    def _call_deltas(self, index: int, call: Call) -> list[dict[str, Any]]:
        """One tool call as deltas: its head (id, name), then its arguments in fragments."""
        call_id, fn, arguments = call
        whole = "whole_tool_calls" in self.quirks
        head: dict[str, Any] = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": fn, "arguments": arguments if whole else ""},
        }
        if "thought_signatures" in self.quirks:
            head["extra_content"] = {"google": {"thought_signature": f"sig-{call_id}"}}
        pieces = [head]
        if not whole:
            pieces += [
                {"index": index, "function": {"arguments": piece}}
                for piece in split_evenly(arguments)
            ]
        if "tool_calls_without_index" in self.quirks:
            for piece in pieces:
                del piece["index"]
        return pieces

    def completion(self, request: RecordedRequest, step: Step, calls: list[Call]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": step.text or None}
        if calls:
            message["tool_calls"] = [
                {"id": call_id, "type": "function", "function": {"name": fn, "arguments": args}}
                for call_id, fn, args in calls
            ]
        return {
            "id": f"chatcmpl-{id(step):x}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": step.model or request.model or "scripted",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": None if step.unfinished else step.finish_reason,
                    "logprobs": None,
                }
            ],
            "usage": self._usage(request, step),
        }

    def _usage(self, request: RecordedRequest, step: Step) -> dict[str, Any]:
        usage = token_counts(request.messages, step)
        return {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        }
