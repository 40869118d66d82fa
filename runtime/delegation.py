"""Delegation: `call_subagent`, its hard bounds, isolated specialist runs and the run tree.

Bounds that hold, each answered with an error result and never a hang:
- at most 12 tasks a call (a 13th fails the whole call; nothing runs);
- at most 5 specialists at once per call;
- nesting stops at depth 5 (the root is depth 0);
- tree-wide, at most `delegation.maxRunsPerTurn` runs a turn and
  `delegation.maxConcurrent` at once.

A specialist sees only its own layered prompt (no CONTEXT.md) and the task, with
`input` as a fenced JSON block: never its parent's prompt, skills or history. It
runs without a person: confirmations and `ask_choice` are denied.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from runtime.bundle import Bundle
from runtime.events import Event, Usage
from runtime.loop._run import EventSink, Recorder, RunOutcome, RunSpec, run
from runtime.models import ModelError
from runtime.prompt import system_prompt
from runtime.registry import CALL_SUBAGENT
from runtime.storage import RunRecord, RunStatus, Storage, utc_now
from runtime.surface import Surface, SurfaceContext, resolve
from runtime.tools import Tool, ToolContext, ToolError
from runtime.tools.builtin import build_tools

MAX_TASKS_PER_CALL = 12
MAX_PARALLEL_PER_CALL = 5
MAX_DEPTH = 5
DEFAULT_SPECIALIST_BUDGET = 10
LABEL_CHARS = 80


@dataclass
class Tree:
    """What all the runs of one turn share: the tree-wide bounds and the usage total."""

    bundle: Bundle
    session_id: str
    root_agent: str
    storage: Storage
    models: Any  # runtime.chat.ModelRouter (kept loose to avoid an import cycle)
    recorder: Recorder
    sink: EventSink
    max_runs: int
    max_concurrent: int
    runs: int = 0
    active: int = 0
    usage: Usage = field(default_factory=Usage)

    async def propose(self, proposal: dict[str, Any], context: ToolContext) -> None:
        """Keep a proposed source change in the session's log for a person to review."""
        await self.recorder.record("proposal", proposal, run_id=context.run_id, agent=context.agent)

    @classmethod
    def for_turn(
        cls,
        bundle: Bundle,
        session_id: str,
        root_agent: str,
        storage: Storage,
        models: Any,
        recorder: Recorder,
        sink: EventSink,
    ) -> Tree:
        limits = bundle.config.delegation
        return cls(
            bundle,
            session_id,
            root_agent,
            storage,
            models,
            recorder,
            sink,
            limits.max_runs_per_turn,
            limits.max_concurrent,
        )


def call_subagent_tool(
    tree: Tree, surface: Surface, caller: SurfaceContext, run_id: str, depth: int
) -> Tool:
    """The `call_subagent` tool of one run at `depth`, over the specialists its surface allows."""
    callable_ = {name: tree.bundle.agents[name] for name in surface.subagents}

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
                results[index] = await _specialist(tree, callable_, caller, run_id, depth + 1, task)

        async with anyio.create_task_group() as group:
            for index, task in enumerate(calls):
                group.start_soon(one, index, task)
        return results[0] if len(results) == 1 else {"results": results}

    descriptions = "\n".join(
        f"- {name}: {agent.description or agent.display_name}" for name, agent in callable_.items()
    )
    return Tool(
        CALL_SUBAGENT,
        f"{tree.bundle.registry[CALL_SUBAGENT].description} At most {MAX_TASKS_PER_CALL} tasks "
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
    )


async def _specialist(
    tree: Tree,
    callable_: Mapping[str, Any],
    caller: SurfaceContext,
    parent_run_id: str,
    depth: int,
    task: Mapping[str, Any],
) -> dict[str, Any]:
    """One specialist run; every failure is this task's error, never the batch's."""
    name = task["subagent"]
    if name not in callable_:
        return {
            "subagent": name,
            "error": f"unknown specialist {name!r}; callable: " + ", ".join(sorted(callable_)),
        }
    if tree.runs >= tree.max_runs:
        return {
            "subagent": name,
            "error": f"delegation limit: at most {tree.max_runs} "
            "specialist runs per turn; this task did not run",
        }
    # Refuse rather than wait: parents hold their slots while their children run, so
    # waiting for a slot could wait forever.
    if tree.active >= tree.max_concurrent:
        return {
            "subagent": name,
            "error": f"delegation limit: {tree.max_concurrent} "
            "specialists are already running in this turn; this task did not run",
        }
    tree.runs += 1
    tree.active += 1
    try:
        return await _run_specialist(tree, name, caller, parent_run_id, depth, task)
    finally:
        tree.active -= 1


async def _run_specialist(
    tree: Tree,
    name: str,
    parent: SurfaceContext,
    parent_run_id: str,
    depth: int,
    task: Mapping[str, Any],
) -> dict[str, Any]:
    bundle, agent = tree.bundle, tree.bundle.agents[name]
    run_id = f"run_{uuid.uuid4().hex[:12]}"
    label = " ".join(str(task["task"]).split())[:LABEL_CHARS]
    started = time.monotonic()
    caller = parent.for_specialist(name)
    outcome = RunOutcome()
    await tree.storage.start_run(
        RunRecord(run_id, tree.session_id, parent_run_id, depth, name, label, utc_now())
    )
    await tree.sink.emit(
        Event(
            "subagent_start",
            tree.session_id,
            run_id,
            {"parent_run_id": parent_run_id, "depth": depth, "subagent": name, "label": label},
        )
    )
    error: str | None = None
    try:
        surface = resolve(bundle, name, caller, root=tree.root_agent)
        tools = build_tools(bundle, surface, propose=tree.propose, storage=tree.storage)
        if surface.subagents:
            tools[CALL_SUBAGENT] = call_subagent_tool(tree, surface, caller, run_id, depth)
        spec = RunSpec(
            session_id=tree.session_id,
            run_id=run_id,
            agent=name,
            system_prompt=system_prompt(bundle, agent, surface, caller.context),
            context_prompt=None,  # CONTEXT.md is for the agent that roots the chat only
            tools=dict(sorted(tools.items())),
            max_tool_calls=agent.max_tool_calls or DEFAULT_SPECIALIST_BUDGET,
            client=tree.models.client(bundle, agent.model_tier),
            cache_key=f"amodal:{bundle.config.name}:{name}",
            tool_context=ToolContext(bundle, surface, caller, tree.session_id, run_id, name),
            interactive=False,
            result_limit=bundle.config.limits.max_tool_result_chars,
        )
        transcript = [{"role": "user", "content": task_message(task)}]
        async for event in run(spec, transcript, tree.recorder, outcome):
            await tree.sink.emit(event)
    except ModelError as failure:
        error = str(failure)
    except Exception as failure:  # a specialist's failure is its task's error, not the batch's
        error = f"{type(failure).__name__}: {failure}"
    finally:
        tree.usage += outcome.usage
        status: RunStatus = (
            "error" if error else ("partial" if outcome.reason == "max_tool_calls" else "ok")
        )
        with anyio.CancelScope(shield=True):
            await tree.storage.end_run(run_id, status, outcome.usage.as_json(), error, utc_now())
            await tree.sink.emit(
                Event(
                    "subagent_end",
                    tree.session_id,
                    run_id,
                    {
                        "status": "error" if error else "ok",
                        "duration_ms": round((time.monotonic() - started) * 1000),
                        "usage": outcome.usage.as_json(),
                    },
                )
            )
    if error is not None:
        return {"subagent": name, "error": error}
    result: dict[str, Any] = {"subagent": name, "result": outcome.text}
    if outcome.reason == "max_tool_calls":
        result["partial"] = True
    return result


def task_message(task: Mapping[str, Any]) -> str:
    """The specialist's only user message: the task, and its input as a fenced JSON block."""
    text = str(task["task"])
    if task.get("input") is not None:
        text += "\n\n```json\n" + json.dumps(task["input"], indent=2, ensure_ascii=False) + "\n```"
    return text
