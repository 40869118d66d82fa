"""Runs: what one turn's root run and every specialist run share, and their bookkeeping.

A `TurnScope` is what all the runs of one turn share: the bundle it started
on, storage, models, the event log, the channel that streams specialists'
events through the root run, the delegation budget and the observers. A run
is recorded the same way at every depth (`recorded_run`): its record is
written when it starts and closed, shielded from cancellation, when it ends.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import anyio

from runtime import events
from runtime.engine.budget import Budget, SubtreeBudget, TurnBudget
from runtime.engine.log import (
    ProposalEntry,
    Recorder,
    SessionLog,
    SpecialistEndEntry,
    SpecialistStartEntry,
)
from runtime.engine.loop import (
    Continuation,
    Conversation,
    EventSink,
    PendingCall,
    Resume,
    RunOutcome,
    RunSpec,
    RunTranscript,
    run_loop,
)
from runtime.engine.services import Services
from runtime.events import Event, Usage
from runtime.exceptions import RecordExistsError
from runtime.models import ModelTier
from runtime.observe.hooks import RunEnded, RunStarted
from runtime.outside.mcp import NO_SERVERS, McpSnapshot
from runtime.outside.rest import Connections
from runtime.repo.bundle import AgentDefinition, Bundle
from runtime.repo.model_bindings import model_card
from runtime.repo.registry import CALL_SUBAGENT, MEMORY_ADD, REQUEST, SESSION_SEARCH
from runtime.storage import AgentRunRecord, RunEnd, RunStatus, Storage, utc_now
from runtime.surface.prompt import memory_prompt, system_prompt
from runtime.surface.resolution import Surface, SurfaceContext, read_only, resolve
from runtime.tools import Tool, ToolContext, ToolError
from runtime.tools.builtin import build_tools
from runtime.tools.custom import custom_tool
from runtime.tools.delegation import (
    DEFAULT_SPECIALIST_BUDGET,
    LABEL_CHARS,
    DelegationBudget,
    call_subagent_tool,
    task_message,
)
from runtime.tools.memory import memory_owner, memory_tools, owned_entries, session_search_tool
from runtime.tools.remote import mcp_tools, request_tool

_CANCELLED = "cancelled: the run ended before it finished"


@dataclass(frozen=True, slots=True)
class RunResult:
    """How a recorded run ended: the loop's outcome, or the failure that ended it, and the
    usage of the run's own model calls (a failed run's calls count too)."""

    outcome: RunOutcome | None
    usage: Usage
    failure: Exception | None = None

    @property
    def error(self) -> str | None:
        if self.failure is not None:
            return str(self.failure) or type(self.failure).__name__
        return None if self.outcome is not None else _CANCELLED

    @property
    def status(self) -> RunStatus:
        if self.outcome is None:
            return "error"
        return "partial" if self.outcome.reason in ("max_tool_calls", "budget_exhausted") else "ok"

    @property
    def pending(self) -> PendingCall | None:
        return self.outcome.pending if self.outcome is not None else None

    def end(self, run_id: str) -> RunEnd:
        """The run's record as it ends now."""
        return RunEnd(run_id, self.status, self.usage.as_json(), self.error, utc_now())


async def recorded_run(
    storage: Storage,
    record: AgentRunRecord,
    prepare: Callable[[], Awaitable[RunSpec]],
    conversation: Conversation,
    recorder: Recorder,
    *,
    resume: Resume | None = None,
    continuation: Continuation | None = None,
    started: bool = False,
    ended: Callable[[RunResult], None] | None = None,
) -> AsyncGenerator[Event | RunResult]:
    """One run with its record kept: start it, build its spec (`prepare`: tools, prompt,
    model), run the loop, and close the record whatever happens; the events, then one
    `RunResult`. A failure (an Exception) ends the run and is reported in the result, not
    raised; cancellation closes the record and propagates. A `continuation` goes on with a
    run a dead process recorded already (its record is closed again at the end).

    `started`: the record was written already (with the turn's first entries); `ended`:
    told of the result instead of closing the record, which its caller then writes with
    an entry of its own (the turn's `done`), whether the run ended or was cancelled.
    """
    if not started:
        try:
            await storage.start_run(record)
        except RecordExistsError:
            if continuation is None:
                raise  # a continued run was recorded by its dead process (unless it died first)
    usage = Usage()
    outcome: RunOutcome | None = None
    failure: Exception | None = None
    try:
        spec = await prepare()
        async with aclosing(
            run_loop(spec, conversation, recorder, resume=resume, continuation=continuation)
        ) as loop:
            async for item in loop:
                if isinstance(item, RunOutcome):
                    outcome = item
                    continue
                if isinstance(item, events.ModelUsage) and item.run_id == record.id:
                    usage += item.usage
                yield item
    except Exception as error:
        failure, outcome = error, None
    finally:
        result = RunResult(outcome, usage, failure)
        if ended is not None:
            ended(result)
        else:
            with anyio.CancelScope(shield=True):
                await storage.end_run(
                    record.id, result.status, usage.as_json(), result.error, utc_now()
                )
    yield result


@dataclass
class TurnScope:
    """What every run of one turn shares: the bundle it started on, the runtime's services,
    the session's log, the channel specialists' events stream through, the delegation
    budget, and the MCP servers as this turn sees them, from its start to its end."""

    bundle: Bundle
    session_id: str
    root_agent: str
    services: Services
    recorder: SessionLog
    sink: EventSink
    owner: str | None = None
    """The turn's caller as an owner (`Caller.owner`): whose memory and sessions its
    runs' tools reach, a specialist's too."""
    read_only: bool = False
    """Every run of the turn is without write power (`resolution.read_only`)."""
    spend: TurnBudget | None = None
    """The turn's token, cost and time budget, shared by every run of the tree (SPEC 22)."""
    budget: DelegationBudget = field(init=False)
    servers: McpSnapshot = field(init=False)
    _spends: dict[str, Budget] = field(init=False, default_factory=dict)
    """The budget of each specialist run still running: what its own specialists spend
    under (its own limits, when it has any, over the turn's)."""

    def __post_init__(self) -> None:
        self.budget = DelegationBudget.for_bundle(self.bundle)
        mcp = self.services.mcp
        self.servers = mcp.snapshot() if mcp is not None else NO_SERVERS

    @property
    def storage(self) -> Storage:
        return self.services.storage

    @property
    def connections(self) -> Connections:
        return self.services.connections

    def resolve(self, agent: str, caller: SurfaceContext) -> Surface:
        """`agent`'s surface for this caller in this turn (against its MCP snapshot)."""
        surface = resolve(self.bundle, agent, caller, root=self.root_agent, servers=self.servers)
        return read_only(surface) if self.read_only else surface

    async def propose(self, proposal: dict[str, Any], context: ToolContext) -> None:
        """Keep a proposed source change in the session's log for a person to review."""
        await self.recorder.record(
            ProposalEntry(proposal), run_id=context.run_id, agent=context.agent
        )

    async def memory_prompt(
        self, agent: AgentDefinition | None, caller: SurfaceContext
    ) -> str | None:
        """The notes `agent` keeps for this turn's caller, for the per-turn layer; None when
        it keeps none (or the caller, for a memory of each person, is nobody)."""
        config = self.bundle.memory(agent)
        if agent is None or config is None:
            return None
        try:
            owner = memory_owner(config, caller, self.owner)
        except ToolError:
            return None
        entries = await owned_entries(self.storage, agent.name, owner)
        return memory_prompt(entries, owner.kind)

    def tools_for(
        self, surface: Surface, caller: SurfaceContext, run_id: str, depth: int
    ) -> dict[str, Tool]:
        """The tools of one run: exactly what its surface grants, sorted by name."""
        bundle = self.bundle
        tools = build_tools(bundle, surface, propose=self.propose, storage=self.storage)
        tools.update(mcp_tools(bundle, surface, self.servers, self.services.mcp))
        memory = bundle.memory(bundle.agents.get(surface.agent))
        if memory is not None and MEMORY_ADD in surface.tools:
            tools.update(memory_tools(bundle, self.storage, memory))
        if SESSION_SEARCH in surface.tools:
            tools[SESSION_SEARCH] = session_search_tool(bundle, self.storage)
        if surface.connections:
            tools[REQUEST] = request_tool(bundle, surface, self.connections)
        if surface.subagents:
            tools[CALL_SUBAGENT] = call_subagent_tool(self, surface, caller, run_id, depth)
        run_tools: dict[str, Tool] = {}  # what a custom tool's ctx.call_tool reaches
        for name in surface.tools & set(bundle.tools):
            tools[name] = custom_tool(
                bundle.tools[name], self, run_tools, delegates=bool(surface.subagents)
            )
        run_tools.update(sorted(tools.items()))
        return run_tools

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
    ) -> dict[str, Any]:
        """One specialist run (its bounds already checked); every failure is this task's
        error, never the batch's. `tier` overrides the agent's `modelTier`."""
        bundle, agent = self.bundle, self.bundle.agents[name]
        run_id = f"run_{uuid.uuid4().hex[:12]}"
        label = " ".join(str(task["task"]).split())[:LABEL_CHARS]
        clock = time.monotonic()
        caller = parent.for_specialist(name)
        started = RunStarted(
            self.session_id, run_id, name, depth, parent_run_id, parent_call_id, label
        )
        result = RunResult(None, Usage())
        record = AgentRunRecord(
            run_id, self.session_id, parent_run_id, depth, name, label, utc_now()
        )
        spend = self._spends.get(parent_run_id, self.spend)
        if spend is not None:
            spend = self._spends[run_id] = SubtreeBudget.over(spend, agent.limits, name)

        async def prepare() -> RunSpec:
            surface = self.resolve(name, caller)
            model = await self.services.models.model(bundle, tier or agent.model_tier)
            return RunSpec(
                session_id=self.session_id,
                run_id=run_id,
                agent=name,
                system_prompt=system_prompt(bundle, agent, surface, caller.context),
                # CONTEXT.md is for the agent that roots the chat only; its own notes are its.
                context_prompt=await self.memory_prompt(agent, caller),
                tools=self.tools_for(surface, caller, run_id, depth),
                max_tool_calls=agent.max_tool_calls or DEFAULT_SPECIALIST_BUDGET,
                model=model,
                card=model_card(bundle.config, model.name),
                settings=agent.model_settings,
                cache_key=f"amodal:{bundle.config.name}:{name}",
                tool_context=ToolContext(
                    bundle,
                    surface,
                    caller,
                    self.session_id,
                    run_id,
                    name,
                    depth=depth,
                    owner=self.owner,
                ),
                interactive=False,
                result_limit=bundle.config.limits.max_tool_result_chars,
                repeat_limit=bundle.config.limits.repeated_call_limit,
                observers=self.services.observers,
                budget=spend,
            )

        self.recorder.stream_run(run_id)  # its events reach the client through the sink
        await self.recorder.record(
            SpecialistStartEntry(parent_run_id, depth, name, label), run_id=run_id, agent=name
        )
        self.services.observers.notify("run_started", started)
        transcript = RunTranscript(task_message(task, attachments))
        try:  # a specialist's failure is its task's error (in `result`), never the batch's
            async for item in recorded_run(
                self.storage, record, prepare, transcript, self.recorder
            ):
                if isinstance(item, RunResult):
                    result = item  # its events were streamed as they were logged
        finally:
            self._spends.pop(run_id, None)
            with anyio.CancelScope(shield=True):
                await self._end_specialist(started, result, time.monotonic() - clock)
        if result.error is not None:
            return {"subagent": name, "error": result.error}
        text = result.outcome.text if result.outcome is not None else ""
        answer: dict[str, Any] = {"subagent": name, "result": text}
        if result.status == "partial":
            answer["partial"] = True
        return answer

    async def _end_specialist(self, started: RunStarted, result: RunResult, elapsed: float) -> None:
        ended = SpecialistEndEntry(
            "error" if result.error else "ok", round(elapsed * 1000), result.usage
        )
        await self.recorder.record(ended, run_id=started.run_id, agent=started.agent)
        self.services.observers.notify(
            "run_ended", started, RunEnded(result.status, result.usage, elapsed, result.error)
        )
