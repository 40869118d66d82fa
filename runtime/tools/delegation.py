"""Delegation: the `call_subagent` tool and its hard bounds (SPEC 7).

Bounds that hold, each answered with an error result and never a hang:
- at most 12 tasks a call (a 13th fails the whole call; nothing runs);
- at most 5 specialists at once per call;
- nesting stops at depth 5 (the root is depth 0);
- turn-wide (`DelegationBudget`), at most `delegation.maxRunsPerTurn` runs a turn
  and `delegation.maxConcurrent` at once.

A specialist sees only its own layered prompt (no CONTEXT.md) and the task, with
`input` as a fenced JSON block: never its parent's prompt, skills or history. It
runs without a person: confirmations and `ask_choice` are denied. Running one is
the turn's business (`runtime.engine.runs.TurnScope.run_specialist`); this module decides
whether a task may run at all.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import anyio

from runtime.exceptions import ToolError
from runtime.models import ModelTier
from runtime.models.messages import TextPart, UserMessage
from runtime.repo.bundle import Bundle
from runtime.repo.registry import CALL_SUBAGENT
from runtime.surface.prompt import list_item
from runtime.surface.resolution import Surface, SurfaceContext
from runtime.tools import Tool, ToolContext

MAX_TASKS_PER_CALL = 12
MAX_PARALLEL_PER_CALL = 5
MAX_DEPTH = 5
DEFAULT_SPECIALIST_BUDGET = 10
LABEL_CHARS = 80


@dataclass
class DelegationBudget:
    """The turn-wide bounds: how many specialist runs a turn may start, and at once."""

    max_runs: int
    max_concurrent: int
    runs: int = 0
    active: int = 0

    @classmethod
    def for_bundle(cls, bundle: Bundle) -> DelegationBudget:
        limits = bundle.config.delegation
        return cls(limits.max_runs_per_turn, limits.max_concurrent)

    def refusal(self) -> str | None:
        """Why one more specialist may not start now, or None (then call `started`)."""
        if self.runs >= self.max_runs:
            return (
                f"delegation limit: at most {self.max_runs} specialist runs per turn; "
                "this task did not run"
            )
        # Refuse rather than wait: parents hold their slots while their children run, so
        # waiting for a slot could wait forever.
        if self.active >= self.max_concurrent:
            return (
                f"delegation limit: {self.max_concurrent} specialists are already running "
                "in this turn; this task did not run"
            )
        return None


class Specialists(Protocol):
    """What runs a specialist for this tool: the turn (`runtime.engine.runs.TurnScope`)."""

    @property
    def bundle(self) -> Bundle: ...

    @property
    def budget(self) -> DelegationBudget: ...

    async def run_specialist(
        self,
        name: str,
        parent: SurfaceContext,
        parent_run_id: str,
        parent_call_id: str,
        depth: int,
        task: Mapping[str, Any],
        *,
        attachments: Sequence[Mapping[str, Any]] = (),
        tier: ModelTier | None = None,
    ) -> dict[str, Any]: ...


async def delegate(
    turn: Specialists,
    callable_: frozenset[str] | tuple[str, ...],
    caller: SurfaceContext,
    parent_run_id: str,
    parent_call_id: str,
    depth: int,
    task: Mapping[str, Any],
    *,
    attachments: Sequence[Mapping[str, Any]] = (),
    tier: ModelTier | None = None,
) -> dict[str, Any]:
    """One task within every bound: `{"subagent", "result"}` or `{"subagent", "error"}`.
    `attachments` (text parts, or descriptors of binary ones) join the task message; `tier`
    overrides the specialist's own `modelTier` (a composite tool's use the session model)."""
    name = task["subagent"]
    if name not in callable_:
        return {
            "subagent": name,
            "error": f"unknown specialist {name!r}; callable: " + ", ".join(sorted(callable_)),
        }
    if depth > MAX_DEPTH:
        return {
            "subagent": name,
            "error": f"delegation depth limit: specialists nest at most {MAX_DEPTH} levels "
            "deep; do this task yourself",
        }
    refusal = turn.budget.refusal()
    if refusal is not None:
        return {"subagent": name, "error": refusal}
    turn.budget.runs += 1
    turn.budget.active += 1
    try:
        return await turn.run_specialist(
            name,
            caller,
            parent_run_id,
            parent_call_id,
            depth,
            task,
            attachments=attachments,
            tier=tier,
        )
    finally:
        turn.budget.active -= 1


def call_subagent_tool(
    turn: Specialists, surface: Surface, caller: SurfaceContext, run_id: str, depth: int
) -> Tool:
    """The `call_subagent` tool of one run at `depth`, over the specialists its surface allows."""
    callable_ = surface.subagents
    agents = turn.bundle.agents

    async def call_subagent(arguments: dict[str, Any], context: ToolContext) -> Any:
        calls = arguments["calls"]
        if len(calls) > MAX_TASKS_PER_CALL:
            raise ToolError(
                f"at most {MAX_TASKS_PER_CALL} tasks per call_subagent call (got {len(calls)}); "
                "nothing ran. Split the work into several calls."
            )
        if depth >= MAX_DEPTH:
            raise ToolError(
                f"delegation depth limit: specialists nest at most {MAX_DEPTH} levels deep; "
                "do this task yourself"
            )
        results: list[dict[str, Any]] = [{} for _ in calls]
        per_call = anyio.CapacityLimiter(MAX_PARALLEL_PER_CALL)

        async def one(index: int, task: Mapping[str, Any]) -> None:
            async with per_call:
                results[index] = await delegate(
                    turn, callable_, caller, run_id, context.call_id, depth + 1, task
                )

        async with anyio.create_task_group() as group:
            for index, task in enumerate(calls):
                group.start_soon(one, index, task)
        return results[0] if len(results) == 1 else {"results": results}

    descriptions = "\n".join(
        list_item(name, agents[name].description or agents[name].display_name) for name in callable_
    )
    return Tool(
        CALL_SUBAGENT,
        f"{turn.bundle.registry[CALL_SUBAGENT].description} At most {MAX_TASKS_PER_CALL} tasks "
        f"a call; they run concurrently. Specialists:\n{descriptions}",
        {
            "type": "object",
            "properties": {
                "calls": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "properties": {
                            "subagent": {"type": "string", "enum": sorted(callable_)},
                            "task": {
                                "type": "string",
                                "minLength": 1,
                                "description": "Everything the specialist needs to know.",
                            },
                            "input": {
                                "type": "object",
                                "description": "Structured data for the task.",
                            },
                        },
                        "required": ["subagent", "task"],
                        "additionalProperties": False,
                    },
                }
            },
            "required": ["calls"],
            "additionalProperties": False,
        },
        call_subagent,
        timeout=3600,  # the specialists' own budgets and model timeouts bound it
        nests=True,
    )


def task_message(
    task: Mapping[str, Any], attachments: Sequence[Mapping[str, Any]] = ()
) -> UserMessage:
    """The specialist's only user message: the task, its input as a fenced JSON block, and
    any attachments a composite tool forwards as extra parts (text inline, other kinds as
    descriptors: their bytes never enter a prompt)."""
    text = str(task["task"])
    if task.get("input") is not None:
        text += "\n\n```json\n" + json.dumps(task["input"], indent=2, ensure_ascii=False) + "\n```"
    parts = [TextPart(text)]
    for item in attachments:
        if item["type"] == "text":
            parts.append(TextPart(item["text"]))
        else:
            described = json.dumps(dict(item), ensure_ascii=False)
            parts.append(TextPart(f"Attachment (content not shown): {described}"))
    return UserMessage(tuple(parts))
