"""Tools a run can call: their schemas for the model, argument checks, and their results.

A session's tools are built from its resolved surface and the bundle, never from
prompt text: a tool the surface does not grant is not built, so the model cannot
call it whatever it is told.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime._jsonschema import ArgumentCheck, argument_check
from runtime.exceptions import ToolError
from runtime.models.messages import ToolSpec
from runtime.repo.bundle import Bundle
from runtime.surface.resolution import Surface, SurfaceContext

DEFAULT_RESULT_LIMIT = 20_000
BUDGET_NOTICE_FROM = 0.65


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool handler may know about the call: never more than the caller's surface."""

    bundle: Bundle
    surface: Surface
    caller: SurfaceContext
    session_id: str
    run_id: str
    agent: str
    call_id: str = ""
    """The tool call being answered (set per call by the loop)."""
    depth: int = 0
    """The run's depth: 0 for the root, 1 for its specialists, ..."""
    owner: str | None = None
    """Who the caller of the turn is as an owner of sessions and memory (its `sub`, "" for
    the operator, None for a caller without one); from credentials, never from a prompt."""


Handler = Callable[[dict[str, Any], ToolContext], Awaitable[Any]]
Confirm = bool | Callable[[dict[str, Any]], bool]
"""Whether a call needs a person's approval: always, never, or depending on its arguments
(a `request` to an endpoint whose access rule says `confirm`)."""


@dataclass(frozen=True, slots=True)
class Tool:
    """One callable tool: its name, schema and handler, and whether a person must approve it."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    handler: Handler
    confirm: Confirm = False
    timeout: float = 30.0
    nests: bool = False
    """True when the tool may run specialists (`call_subagent`, a custom tool's
    `ctx.call_subagent`): the root run then streams their events while it runs."""
    _check: list[ArgumentCheck] = field(default_factory=list, compare=False, repr=False)

    def spec(self) -> ToolSpec:
        """The tool as a model is offered it (each model client puts it in its own shape)."""
        return ToolSpec(self.name, self.description, self.parameters)

    def needs_confirmation(self, arguments: object) -> bool:
        """True when this call waits for a person (arguments that do not fit never do: the
        call runs and gets its argument error)."""
        if isinstance(self.confirm, bool):
            return self.confirm
        if not isinstance(arguments, dict) or self.argument_errors(arguments):
            return False
        return self.confirm(arguments)

    def argument_errors(self, arguments: object) -> list[str]:
        """Why `arguments` do not fit the schema (empty when they do). Never raises: the
        schema's references stay inside it and its patterns run on RE2
        (`runtime._jsonschema`), and a schema that cannot be applied is one problem."""
        if not self._check:
            self._check.append(argument_check(self.parameters, self.name))
        if not isinstance(arguments, dict):
            return ["arguments must be a JSON object"]
        return self._check[0](arguments)


def encode_result(result: Any, limit: int = DEFAULT_RESULT_LIMIT) -> str:
    """A tool result as the text the model reads, cut to head and tail above `limit`."""
    text = (
        result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
    )
    if len(text) <= limit:
        return text
    keep = limit // 2
    cut = len(text) - 2 * keep
    return f"{text[:keep]}\n[... {cut} characters cut ...]\n{text[-keep:]}"


__all__ = ["Confirm", "Handler", "Tool", "ToolContext", "ToolError", "encode_result", "with_budget"]


def with_notice(result: Any, notice: str) -> Any:
    """A result that carries `_notice`: something the model should know besides it."""
    if isinstance(result, dict):
        return {**result, "_notice": notice}
    return {"result": result, "_notice": notice}


def with_budget(result: Any, used: int, limit: int) -> Any:
    """From 65% of the budget on, each result carries `_budget` so the model can plan."""
    if used < BUDGET_NOTICE_FROM * limit:
        return result
    remaining = max(limit - used, 0)
    budget = {
        "used": used,
        "limit": limit,
        "remaining": remaining,
        "notice": f"{remaining} tool call(s) left in this run; finish with what you have"
        if remaining
        else "no tool calls left: answer now with what you have",
    }
    if isinstance(result, dict):
        return {**result, "_budget": budget}
    return {"result": result, "_budget": budget}
