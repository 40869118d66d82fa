"""`FunctionModel`: a `Model` that answers with a Python function, in process, for unit tests.

    def answer(messages, tools):
        if not any(m["role"] == "tool" for m in messages):
            return tool_call("lookup", {"id": 7})
        return "Found it."

    async with Runtime.open(repo, model=FunctionModel(answer)) as rt:
        assert (await rt.chat("Find 7")).text == "Found it."

No HTTP and no server: `fn` gets each call's messages and offered tools in Chat
Completions' shape, exactly what an OpenAI-compatible endpoint would be sent
(`runtime.models.chat_completions`: `{"role", "content", "tool_calls",
"tool_call_id"}` dicts, and `{"type": "function", "function": {name, description,
parameters}}`), whichever provider the repo configures, and returns a string (a text
reply) or one of the steps `ScriptedModel` takes (`reply`, `tool_call`, `tool_calls`,
`raw_arguments`, `error`). It may be async. Every call is kept in `calls` (the same
dicts; `neutral` holds the runtime's own messages); token counts are the scripted
model's (characters // 4).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from runtime.exceptions import ModelError
from runtime.models import Message, ModelReply, ModelSettings, ToolCallRequest, ToolSpec
from runtime.models.chat_completions import ChatMessage, chat_messages, chat_tools
from runtime.testing._steps import Step, reply, token_counts

ToolSchema = dict[str, Any]
"""A Chat Completions `tools` entry."""
Answer = Callable[[list[ChatMessage], list[ToolSchema]], "str | Step | Awaitable[str | Step]"]


@dataclass(frozen=True, slots=True)
class FunctionCall:
    """One call a FunctionModel answered: what it was sent (in Chat Completions' shape)."""

    messages: list[ChatMessage]
    tools: list[ToolSchema]
    settings: ModelSettings
    neutral: tuple[Message, ...] = ()
    """The same messages as the runtime made them (`runtime.models.messages`)."""

    @property
    def tool_names(self) -> list[str]:
        return [tool["function"]["name"] for tool in self.tools]


class FunctionModel:
    """A model whose every answer is `fn(messages, tools)`."""

    def __init__(self, fn: Answer, *, name: str = "function-model") -> None:
        self._fn = fn
        self._name = name
        self.calls: list[FunctionCall] = []

    @property
    def name(self) -> str:
        return self._name

    async def stream(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] | None,
        settings: ModelSettings,
        *,
        cache_key: str | None = None,
    ) -> AsyncIterator[str | ModelReply]:
        sent = chat_messages(messages)
        offered = copy.deepcopy(chat_tools(tools or ()))  # the tools' schemas stay theirs
        self.calls.append(FunctionCall(sent, offered, settings, tuple(messages)))
        answer = self._fn(copy.deepcopy(sent), copy.deepcopy(offered))
        if inspect.isawaitable(answer):
            answer = await answer
        step = reply(answer) if isinstance(answer, str) else answer
        if not isinstance(step, Step):
            raise TypeError(
                f"{self._name}: the function returned {type(step).__name__}; return a string or "
                "a step (reply, tool_call, tool_calls, raw_arguments, error)"
            )
        if step.status != 200:
            raise ModelError(
                model=self._name,
                endpoint="in process",
                reason=f"HTTP {step.status}: {step.message}",
                status=step.status,
                attempts=1,
                transient=step.status == 429 or step.status >= 500,
            )
        if step.text:
            yield step.text
        number = len(self.calls)
        calls = tuple(
            ToolCallRequest(call.id or f"call_{number}_{index}", call.name, call.arguments)
            for index, call in enumerate(step.tool_calls, 1)
        )
        yield ModelReply(
            text=step.text,
            tool_calls=calls,
            usage=token_counts(sent, step),
            model=step.model or self._name,
            finish_reason=step.finish_reason,
        )


__all__ = ["Answer", "FunctionCall", "FunctionModel"]
