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


class ChatWire:
    provider = "openai"
    route = "/v1/chat/completions"
    models_route = "/v1/models"

    def models(self) -> dict[str, Any]:
        entry = {"id": "scripted", "object": "model", "created": 0, "owned_by": "amodal-testing"}
        return {"object": "list", "data": [entry]}

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = "rate_limit_error" if status == 429 else "scripted_error"
        return {"error": {"message": message, "type": kind, "param": None, "code": None}}

    def refusal(self, body: Mapping[str, Any]) -> str | None:
        return None  # OpenAI-compatible servers differ too much to hold them to one rule

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
        events.extend(delta({"content": piece}) for piece in split_text(step.text))
        text_end = mid_call = len(events)
        for index, (call_id, fn, arguments) in enumerate(calls):
            first = {"name": fn, "arguments": ""}
            head = {"index": index, "id": call_id, "type": "function", "function": first}
            events.append(delta({"tool_calls": [head]}))
            fragments = split_evenly(arguments)
            for number, piece in enumerate(fragments):
                if index == 0 and number == len(fragments) // 2:
                    mid_call = len(events)
                events.append(
                    delta({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                )
        if mid_call == text_end and calls:
            mid_call = text_end + 1  # a call with no arguments: cut after its head
        calls_end = len(events)
        events.append(delta({}, step.finish_reason))
        if (request.body.get("stream_options") or {}).get("include_usage"):
            events.append(event([], usage=self._usage(request, step)))
        events.append(b"data: [DONE]\n\n")
        return StreamPlan(events, text_end, mid_call, calls_end)

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
