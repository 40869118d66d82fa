"""One claimed turn of a session: re-rooting, the surface, the prompt, the root run (SPEC 3-6).

A `Turn` is made by `runtime.engine.chats.ChatService` once everything that can refuse
the request has passed and the session's lease is held. Iterating `events()`
runs it: the events of the root run and of every specialist, always ending with
`done` (unless the consumer goes away, which cancels the turn cleanly). The turn
finishes on the bundle it started with, whatever a reload does meanwhile.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from typing import Any

import anyio

from runtime import events
from runtime.engine.budget import Spender, turn_budget
from runtime.engine.compaction import Compactor, SessionConversation, compactor_for
from runtime.engine.leases import INTERRUPTED_RUN, TurnLease, recover
from runtime.engine.log import (
    NO_BOOKKEEPING,
    AnswerEntry,
    Bookkeeping,
    ChoiceEntry,
    CompactionEntry,
    DoneEntry,
    ErrorEntry,
    HandoffEntry,
    LogEntry,
    Logged,
    PromptEntry,
    ResumedEntry,
    RootChangeEntry,
    SeedEntry,
    SessionLog,
    SurfaceChangeEntry,
    ToolResultEntry,
    TurnEntry,
    UserEntry,
    read,
)
from runtime.engine.loop import Continuation, EventSink, Resume, RunSpec
from runtime.engine.rooting import Rooting, handoff_note
from runtime.engine.runs import RunResult, TurnScope, recorded_run
from runtime.engine.services import Services
from runtime.events import DoneReason, Event, Usage
from runtime.exceptions import AmodalError, ContextOverflowError, ModelError
from runtime.models import ModelSettings, ToolCallRequest
from runtime.observe.hooks import TurnEnded, TurnStarted
from runtime.repo.bundle import MAIN_AGENT, AgentDefinition, Bundle
from runtime.repo.model_bindings import model_card
from runtime.storage import AgentRunRecord, PendingConfirmation, SessionRecord, Spend, utc_now
from runtime.surface.caller import Caller, EarlierMessage
from runtime.surface.prompt import context_prompt, per_turn_prompt
from runtime.surface.resolution import Surface, SurfaceContext, resolve
from runtime.tools import ToolContext
from runtime.tools.delegation import LABEL_CHARS

logger = logging.getLogger("amodal")

WITHDRAWN = "not approved: the request was cancelled"
RESUME_LIMIT = 3
"""How many times one turn is continued after its process died (SPEC 23)."""


class Turn:
    """One claimed turn of a session; iterate `events()` exactly once."""

    def __init__(
        self,
        services: Services,
        bundle: Bundle,
        session: SessionRecord,
        caller: Caller,
        lease: TurnLease,
        created: bool,
        *,
        message: str | None,
        rooting: Rooting,
        context: Mapping[str, str],
        resume: Resume | None = None,
        history: Sequence[EarlierMessage] = (),
        face: str = "chat",
        withdrawing: bool = False,
        run_id: str | None = None,
        continuing: bool = False,
    ) -> None:
        self.services = services
        self.bundle = bundle
        self.session = session
        self.caller = caller
        self.lease = lease
        self.created = created
        self.message = message
        self.rooting = rooting
        self.context = dict(context)
        self.resume = resume
        self.history = tuple(history)
        self.face = face
        self.withdrawing = withdrawing
        """Withdraw what the last turn waits for (decline its confirmation), then end."""
        self.continuing = continuing
        """Continue the session's open turn, run `run_id`, whose process died (SPEC 23)."""
        self.run_id = run_id or new_run_id()
        self.usage = Usage()
        """The turn's usage so far: its own model calls and every specialist's."""
        self.reason: DoneReason | None = None
        """Why the turn ended, once it has."""
        self.closing: list[Event] = []
        """The events a cancelled turn wrote as it closed (its `done`), never streamed."""
        sink = EventSink()
        self._view = services.views.get(session.id)
        self._log = SessionLog(services.storage, session.id, bundle.version, sink, self._view.add)
        self.spend = turn_budget(
            bundle,
            rooting.agent,
            services.storage,
            Spender(session.id, self.run_id, session.owner, session.scope_id),
        )
        """What the turn spends, against its limits (SPEC 22)."""
        # A session started read-only (an automation's) stays so for every turn, confirmations
        # answered later included: the flag lives on the session, not on the request.
        self._scope = TurnScope(
            bundle,
            session.id,
            rooting.agent,
            services,
            self._log,
            sink,
            owner=caller.owner,
            read_only=bool(session.metadata.get("read_only")),
            spend=self.spend,
        )
        self._consumed = False
        self._root_started = False
        """The root run's record was written with the turn's first entries."""
        self._root_result: RunResult | None = None
        """How the root run ended: its record is closed with the turn's `done`."""

    @property
    def session_id(self) -> str:
        return self.session.id

    @property
    def spent(self) -> Usage:
        """What the whole turn took: its runs' calls and its summaries' (SPEC 20, 22)."""
        return self.usage + self.spend.compaction

    @property
    def agent(self) -> str:
        return self.rooting.agent

    async def events(self) -> AsyncGenerator[Event]:
        """The turn's events, always ending with `done` (unless the consumer went away)."""
        if self._consumed:
            raise RuntimeError("a turn's events can be read once")
        self._consumed = True
        observers = self.services.observers
        started = TurnStarted(
            self.session.id, self.run_id, self.agent, self.bundle.version, self.face
        )
        observers.notify("turn_started", started)
        clock = time.monotonic()
        reason: DoneReason = "error"
        error: str | None = None
        try:
            try:
                # aclosing at every level: a consumer that leaves closes each run (its record,
                # the model's stream) now, before the runtime may close, not when collected.
                async with aclosing(self._events()) as running:
                    async for event in running:
                        if isinstance(event, events.ModelUsage):
                            self.usage += event.usage
                        yield event
                assert self.reason is not None
                reason = self.reason
            except Exception as failure:  # ends with an `error` event, then `done`
                code, error = _failure(failure)
                if code == "internal_error":  # a bug: the log needs its traceback
                    logger.exception(
                        "turn_failed", extra={"event": "turn_failed", "session": self.session.id}
                    )
                for event in await self._logged(ErrorEntry(code, error)):
                    yield event
        except BaseException:
            reason, error = "cancelled", "cancelled"
            with anyio.CancelScope(shield=True):
                await self._close_interrupted()
                self.closing = await self._finish(reason)
            raise
        finally:
            self.reason = reason
            observers.notify(
                "turn_ended",
                started,
                TurnEnded(
                    reason, self.spent, time.monotonic() - clock, error, self.spend.turn_cost
                ),
            )
        with anyio.CancelScope(shield=True):
            ended = await self._finish(reason)
        for event in ended:
            yield event

    async def aclose(self) -> None:
        """Give the session back without running the turn (it was never consumed)."""
        if not self._consumed:
            self._consumed = True
            self._scope.sink.close()
            await self.lease.release()

    async def _finish(self, reason: DoneReason) -> list[Event]:
        spend = self.spend
        limit = (
            spend.exhausted.as_json() if spend.exhausted and reason == "budget_exhausted" else None
        )
        result = self._root_result
        if result is None and self._root_started:  # the run never got going
            result = RunResult(None, Usage())
        kept = Bookkeeping(
            ends_run=None if result is None else result.end(self.run_id),
            releases_turn=self.lease.holder,
        )
        done = await self._logged(DoneEntry(reason, self.spent, spend.turn_cost, limit), kept=kept)
        self.lease.released()
        self._scope.sink.close()
        return done

    async def _events(self) -> AsyncGenerator[Event]:
        bundle, storage, session = self.bundle, self.services.storage, self.session
        view = self._view
        if not self.created:  # a session this turn created has no log to read yet
            await view.catch_up(storage)
        self.spend.session_before(Spend(view.spent_tokens, view.spent_usd))
        if self.continuing:
            async with aclosing(self._continued()) as continued:
                async for event in continued:
                    yield event
            return
        answering = {self.resume.pending.call.id} if self.resume is not None else set()
        await recover(storage, view, answering)  # what a dead turn left open
        previous_turn = view.last_turn
        definition = bundle.agents.get(self.agent) if self.agent != MAIN_AGENT else None
        caller = self.caller.surface_context(self.agent, self.context)
        surface = self._scope.resolve(self.agent, caller)
        waiting = [] if self.created else await storage.list_pending(session.id)
        rerooting = self.rooting.changed and self.rooting.previous is not None
        # The turn's opening entries are written in one step, up to its message; what is
        # written between them (a denial, a handoff) first needs the turn's start logged.
        opening: list[LogEntry] = [
            TurnEntry(self.agent, surface.fingerprint, self.context, self.created)
        ]
        if waiting or self.withdrawing or rerooting:
            for event in await self._logged(*opening):
                yield event  # `session`, first of every turn
            opening = []
        if self.withdrawing:
            for event in await self._deny_waiting(
                waiting, "not approved: the request was cancelled"
            ):
                yield event
            self.reason = "cancelled"
            return
        if self.message is not None:
            for event in await self._deny_waiting(waiting):
                yield event
        if rerooting:
            assert self.rooting.previous is not None
            for event in await self._reroot(self.rooting.previous, surface):
                yield event
        changed = _surface_changed(previous_turn, self.agent, surface)
        if changed is not None:
            opening.append(SurfaceChangeEntry(self.agent, changed))
        if self.message is not None:
            opening += [SeedEntry(earlier.role, earlier.text) for earlier in self.history]
            opening.append(UserEntry(self.message))
        record = self._root_record(" ".join((self.message or "(confirmation)").split()))
        if opening:
            for event in await self._logged(*opening, kept=Bookkeeping(starts_run=record)):
                yield event  # the seeds and the message stream nothing
            self._root_started = True

        pending_ids = {p.call_id for p in waiting} if self.message is None else set()
        pending_ids |= answering
        conversation = SessionConversation(view, pending_ids, self._compactor())
        async with aclosing(
            self._root_run(definition, surface, caller, conversation, record)
        ) as run:
            async for event in run:
                yield event

    async def _continued(self) -> AsyncGenerator[Event]:
        """Go on with the turn a dead process left open, from its last committed step: what
        it recorded is reused, its calls without a result are run again or closed
        (`Continuation`), and the run goes on; a turn continued `RESUME_LIMIT` times ends
        instead, and so does one whose last step ended it (its `done` alone was lost)."""
        storage, view = self.services.storage, self._view
        dead = view.open_turn
        assert dead is not None and dead.run_id == self.run_id  # `ChatService.take_over` saw it
        span = await read(storage, self.session.id, dead.seq - 1)
        root = [logged for logged in span if logged.run_id == self.run_id]
        count = sum(isinstance(logged.entry, ResumedEntry) for logged in root)
        await storage.interrupt_runs(self.session.id, INTERRUPTED_RUN)  # the dead specialists
        if count >= RESUME_LIMIT:
            logger.warning(
                "turn_resume_limit",
                extra={"event": "turn_resume_limit", "session": dead.session_id},
            )
            await self._close_interrupted()
            raise ResumeLimitError(count)
        await self._logged(ResumedEntry(count + 1, self.lease.holder))
        logger.warning(
            "turn_resumed",
            extra={"event": "turn_resumed", "session": dead.session_id, "count": count + 1},
        )
        last = next(
            (
                logged.entry
                for logged in reversed(root)
                if isinstance(logged.entry, AnswerEntry | ChoiceEntry | ToolResultEntry)
            ),
            None,
        )
        if isinstance(last, ChoiceEntry):
            self.reason = "awaiting_choice"
            return
        if isinstance(last, AnswerEntry) and not last.calls:
            self.reason = "model_stop"  # the answer is committed: never asked for again
            return
        answered = {e.entry.call_id for e in root if isinstance(e.entry, ToolResultEntry)}
        asked = [
            call
            for logged in root
            if isinstance(logged.entry, AnswerEntry)
            for call in logged.entry.calls
        ]
        continuation = Continuation(
            tuple(call for call in asked if call.id not in answered), len(answered)
        )
        definition = self.bundle.agents.get(self.agent) if self.agent != MAIN_AGENT else None
        caller = self.caller.surface_context(self.agent, self.context)
        surface = self._scope.resolve(self.agent, caller)
        conversation = SessionConversation(view, set(), self._compactor())
        record = self._root_record("(continued)")
        async with aclosing(
            self._root_run(definition, surface, caller, conversation, record, continuation)
        ) as run:
            async for event in run:
                yield event

    async def _root_run(
        self,
        definition: AgentDefinition | None,
        surface: Surface,
        caller: SurfaceContext,
        conversation: SessionConversation,
        record: AgentRunRecord,
        continuation: Continuation | None = None,
    ) -> AsyncGenerator[Event]:
        """The turn's root run, to its end; `self.reason` says how it ended."""
        bundle, storage, session = self.bundle, self.services.storage, self.session

        async def prepare() -> RunSpec:
            model = await self.services.models.model(
                bundle, definition.model_tier if definition else "default"
            )
            return RunSpec(
                session_id=session.id,
                run_id=self.run_id,
                agent=self.agent,
                system_prompt=self._system_prompt(definition, surface),
                context_prompt=per_turn_prompt(
                    await self._scope.memory_prompt(definition, caller),
                    context_prompt(definition, self.context),
                ),
                tools=self._scope.tools_for(surface, caller, self.run_id, 0),
                max_tool_calls=_budget(bundle, definition),
                model=model,
                card=model_card(bundle.config, model.name),
                settings=definition.model_settings if definition else ModelSettings(),
                cache_key=f"amodal:{bundle.config.name}:{self.agent}",
                tool_context=ToolContext(
                    bundle,
                    surface,
                    caller,
                    session.id,
                    self.run_id,
                    self.agent,
                    owner=self.caller.owner,
                ),
                result_limit=bundle.config.limits.max_tool_result_chars,
                repeat_limit=bundle.config.limits.repeated_call_limit,
                nested=self._scope.sink,
                observers=self.services.observers,
                budget=self.spend,
                root=True,
            )

        result: RunResult | None = None
        async with aclosing(
            recorded_run(
                storage,
                record,
                prepare,
                conversation,
                self._log,
                resume=self.resume,
                continuation=continuation,
                started=self._root_started,
                ended=self._root_ended,
            )
        ) as run:
            async for item in run:
                if isinstance(item, RunResult):
                    result = item
                else:
                    yield item
        assert result is not None
        if result.failure is not None:
            raise result.failure
        assert result.outcome is not None
        self.reason = result.outcome.reason
        if result.pending is not None:
            await self._save_pending(result.pending.call, result.pending.used)

    def _root_record(self, label: str) -> AgentRunRecord:
        """The record of the turn's root run as it starts."""
        return AgentRunRecord(
            self.run_id, self.session.id, None, 0, self.agent, label[:LABEL_CHARS], utc_now()
        )

    def _root_ended(self, result: RunResult) -> None:
        self._root_result = result

    async def _deny_waiting(
        self,
        waiting: list[PendingConfirmation],
        denial: str = "not approved: the person sent a new message instead",
    ) -> list[Event]:
        """A new message instead of a decision (or a withdrawal): the waiting call is not
        approved. Its result must follow its assistant message, so it is written before the
        new message."""
        denied: list[Event] = []
        for pending in waiting:
            if await self.services.storage.delete_pending(self.session.id, pending.call_id):
                denied += await self._logged(
                    ToolResultEntry.denied(pending.call_id, pending.tool, denial)
                )
        return denied

    async def _save_pending(self, call: ToolCallRequest, used: int) -> None:
        await self.services.storage.save_pending(
            PendingConfirmation(
                self.session.id,
                call.id,
                self.run_id,
                self.agent,
                call.name,
                _arguments(call.arguments),
                {"used": used, "context": self.context},
                utc_now(),
            )
        )

    async def _reroot(self, previous: str, surface: Surface) -> list[Event]:
        bundle = self.bundle
        if previous == MAIN_AGENT or previous in bundle.agents:
            before = resolve(
                bundle,
                previous,
                self.caller.surface_context(previous, self.context),
                root=previous,
                servers=self._scope.servers,
            )
        else:  # the old root was removed by a reload: it offered nothing we can name
            before = surface
        await self.services.storage.set_root(self.session.id, self.agent)
        changed = await self._logged(RootChangeEntry(previous, self.agent))
        note = handoff_note(previous, self.agent, before, surface)
        await self._logged(HandoffEntry(note))
        return changed

    def _system_prompt(self, agent: AgentDefinition | None, surface: Surface) -> str:
        """The session's prompt: the stored one while its key holds (byte-stable across turns
        and restarts), else a new one, recorded for the next turns with the run's first
        step (a turn that dies before it renders the same prompt again)."""
        cache = self._view.rendered
        stored = self._view.prompt
        if not cache.key and stored is not None:
            cache.text, cache.key = stored.text, stored.key
        before = cache.key
        text = cache.get(self.bundle, agent, surface, self.context)
        if cache.key != before:
            self._log.stage(PromptEntry(text, cache.key), self.run_id)
        return text

    def _compactor(self) -> Compactor:
        """What keeps this session inside its model's window (SPEC 20)."""

        async def record(entry: CompactionEntry) -> list[Event]:
            return await self._logged(entry)

        view, bundle = self._view, self.bundle
        return compactor_for(
            self.services, bundle, view, self.run_id, self.agent, record, self.spend
        )

    async def _close_interrupted(self) -> None:
        """Give every call left without a result an `interrupted` one (a cancelled turn)."""
        pending = {p.call_id for p in await self.services.storage.list_pending(self.session.id)}
        for call_id, name in self._view.unanswered(pending):
            await self._logged(ToolResultEntry.interrupted(call_id, name))

    async def _logged(self, *entries: LogEntry, kept: Bookkeeping = NO_BOOKKEEPING) -> list[Event]:
        """Write entries of the root run in one step (with what it `kept`); the events they
        stand for on the wire."""
        if not entries:
            return []
        return await self._log.record(*entries, run_id=self.run_id, agent=self.agent, kept=kept)


def new_run_id() -> str:
    return f"run_{uuid.uuid4().hex[:12]}"


class ResumeLimitError(AmodalError):
    """A turn whose processes died `RESUME_LIMIT` times is not continued again."""

    code = "resume_limit"

    def __init__(self, count: int) -> None:
        super().__init__(
            f"the turn was continued {count} times after its server stopped and is not "
            "continued again; send the message again to retry"
        )


def _failure(failure: Exception) -> tuple[str, str]:
    """The `error` event's code and message for what ended a turn."""
    if isinstance(failure, ResumeLimitError):
        return failure.code, str(failure)
    if isinstance(failure, ContextOverflowError):
        return "context_overflow", str(failure)
    if isinstance(failure, ModelError):
        return "model_error", str(failure)
    if isinstance(failure, AmodalError):
        return "runtime_error", str(failure)
    return "internal_error", f"{type(failure).__name__}: {failure}"


def _surface_changed(previous: Logged | None, agent: str, surface: Surface) -> str | None:
    """The new fingerprint when the same root's surface changed since its last turn."""
    last = previous.entry if previous is not None else None
    if not isinstance(last, TurnEntry) or last.agent != agent:
        return None
    return None if last.surface == surface.fingerprint else surface.fingerprint


def _budget(bundle: Bundle, agent: AgentDefinition | None) -> int:
    if agent is not None and agent.max_tool_calls is not None:
        return agent.max_tool_calls
    return bundle.config.limits.max_tool_calls


def _arguments(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
