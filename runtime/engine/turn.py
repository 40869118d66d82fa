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
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

import anyio

from runtime import events
from runtime.engine.leases import TurnLease
from runtime.engine.loop import EventSink, Resume, RunSpec
from runtime.engine.recorder import EventLog
from runtime.engine.replay import wire_events
from runtime.engine.rooting import Rooting, handoff_note
from runtime.engine.runs import RunResult, TurnScope, recorded_run
from runtime.engine.transcript import INTERRUPTED, rebuild, unanswered_calls
from runtime.events import DoneReason, Event, Usage
from runtime.exceptions import AmodalError, ModelError
from runtime.models import ModelSettings, ToolCall
from runtime.observe.hooks import TurnEnded, TurnStarted
from runtime.repo.bundle import MAIN_AGENT, AgentDefinition, Bundle
from runtime.storage import AgentRunRecord, PendingConfirmation, SessionRecord, StoredEvent, utc_now
from runtime.surface.caller import Caller
from runtime.surface.prompt import context_prompt
from runtime.surface.resolution import Surface, resolve
from runtime.tools import ToolContext
from runtime.tools.delegation import LABEL_CHARS

if TYPE_CHECKING:
    from runtime.engine.chats import ChatService

logger = logging.getLogger("amodal")


class Turn:
    """One claimed turn of a session; iterate `events()` exactly once."""

    def __init__(
        self,
        service: ChatService,
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
    ) -> None:
        self.service = service
        self.bundle = bundle
        self.session = session
        self.caller = caller
        self.lease = lease
        self.created = created
        self.message = message
        self.rooting = rooting
        self.context = dict(context)
        self.resume = resume
        self.run_id = f"run_{uuid.uuid4().hex[:12]}"
        self.usage = Usage()
        """The turn's usage so far: its own model calls and every specialist's."""
        self.reason: DoneReason | None = None
        """Why the turn ended, once it has."""
        sink = EventSink()
        self._log = EventLog(service.storage, session.id, bundle.version, sink)
        self._scope = TurnScope(
            bundle,
            session.id,
            rooting.agent,
            service.storage,
            service.models,
            self._log,
            service.observers,
            sink,
            service.connections,
            service.mcp,
        )
        self._consumed = False

    @property
    def session_id(self) -> str:
        return self.session.id

    @property
    def agent(self) -> str:
        return self.rooting.agent

    async def events(self) -> AsyncGenerator[Event]:
        """The turn's events, always ending with `done` (unless the consumer went away)."""
        if self._consumed:
            raise RuntimeError("a turn's events can be read once")
        self._consumed = True
        observers = self.service.observers
        started = TurnStarted(self.session.id, self.run_id, self.agent, self.bundle.version)
        observers.notify("turn_started", started)
        clock = time.monotonic()
        reason: DoneReason = "error"
        error: str | None = None
        try:
            try:
                async for event in self._events():
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
                for event in await self._logged("error", code=code, message=error):
                    yield event
        except BaseException:
            reason, error = "cancelled", "cancelled"
            with anyio.CancelScope(shield=True):
                await self._close_interrupted()
                await self._finish(reason)
            raise
        finally:
            self.reason = reason
            observers.notify(
                "turn_ended",
                started,
                TurnEnded(reason, self.usage, time.monotonic() - clock, error),
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
        done = await self._logged("done", reason=reason, usage=self.usage.as_json())
        await self.lease.release()
        self._scope.sink.close()
        return done

    async def _events(self) -> AsyncIterator[Event]:
        bundle, storage, session = self.bundle, self.service.storage, self.session
        history = await storage.list_events(session.id)
        definition = bundle.agents.get(self.agent) if self.agent != MAIN_AGENT else None
        caller = self.caller.surface_context(self.agent, self.context)
        surface = self._scope.resolve(self.agent, caller)
        for event in await self._logged(
            "turn",
            agent=self.agent,
            surface=surface.fingerprint,
            context=self.context,
            created=self.created,
        ):
            yield event  # `session`, first of every turn
        waiting = await storage.list_pending(session.id)
        if self.message is not None:
            for event in await self._deny_waiting(waiting):
                yield event
        if self.rooting.changed and self.rooting.previous is not None:
            for event in await self._reroot(self.rooting.previous, surface):
                yield event
        changed = _surface_changed(history, self.agent, surface)
        if changed is not None:
            for event in await self._logged(
                "surface_changed", agent=self.agent, fingerprint=changed
            ):
                yield event
        if self.message is not None:
            await self._record("user", text=self.message)

        logged = [*history, *self._log.appended]
        pending_ids = {p.call_id for p in waiting} if self.message is None else set()
        if self.resume is not None:
            pending_ids.add(self.resume.pending.call.id)
        transcript = rebuild(logged, pending_ids)
        label = " ".join((self.message or "(confirmation)").split())[:LABEL_CHARS]
        record = AgentRunRecord(self.run_id, session.id, None, 0, self.agent, label, utc_now())

        async def prepare() -> RunSpec:
            return RunSpec(
                session_id=session.id,
                run_id=self.run_id,
                agent=self.agent,
                system_prompt=await self._system_prompt(definition, surface, logged),
                context_prompt=context_prompt(definition, self.context),
                tools=self._scope.tools_for(surface, caller, self.run_id, 0),
                max_tool_calls=_budget(bundle, definition),
                model=await self.service.models.model(
                    bundle, definition.model_tier if definition else "default"
                ),
                settings=definition.model_settings if definition else ModelSettings(),
                cache_key=f"amodal:{bundle.config.name}:{self.agent}",
                tool_context=ToolContext(
                    bundle, surface, caller, session.id, self.run_id, self.agent
                ),
                result_limit=bundle.config.limits.max_tool_result_chars,
                nested=self._scope.sink,
                observers=self.service.observers,
            )

        result: RunResult | None = None
        async for item in recorded_run(
            storage, record, prepare, transcript, self._log, resume=self.resume
        ):
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

    async def _deny_waiting(self, waiting: list[PendingConfirmation]) -> list[Event]:
        """A new message instead of a decision: the waiting call is not approved. Its result
        must follow its assistant message, so it is written before the new message."""
        denied: list[Event] = []
        for pending in waiting:
            if await self.service.storage.delete_pending(self.session.id, pending.call_id):
                denial = "not approved: the person sent a new message instead"
                denied += await self._logged(
                    "tool_result",
                    call_id=pending.call_id,
                    name=pending.tool,
                    status="denied",
                    duration_ms=0,
                    error=denial,
                    content=json.dumps({"error": denial}),
                )
        return denied

    async def _save_pending(self, call: ToolCall, used: int) -> None:
        await self.service.storage.save_pending(
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
        await self.service.storage.set_root(self.session.id, self.agent)
        changed = await self._logged("agent", **{"from": previous, "to": self.agent})
        await self._record("handoff", text=handoff_note(previous, self.agent, before, surface))
        return changed

    async def _system_prompt(
        self, agent: AgentDefinition | None, surface: Surface, logged: list[StoredEvent]
    ) -> str:
        """The session's prompt: the stored one while its key holds (byte-stable across turns
        and restarts), else a new one, recorded for the next turns."""
        cache = self.service.prompt_cache(self.session.id)
        if not cache.key:
            stored = next((e for e in reversed(logged) if e.type == "prompt"), None)
            if stored is not None:
                cache.text, cache.key = stored.data["text"], tuple(stored.data["key"])
        before = cache.key
        text = cache.get(self.bundle, agent, surface, self.context)
        if cache.key != before:
            await self._record("prompt", text=text, key=list(cache.key))
        return text

    async def _close_interrupted(self) -> None:
        """Give every call left without a result an `interrupted` one (a cancelled turn)."""
        for call_id, name in await unanswered_calls(self.service.storage, self.session.id):
            await self._record(
                "tool_result",
                call_id=call_id,
                name=name,
                status="error",
                duration_ms=0,
                error="interrupted",
                content=INTERRUPTED,
            )

    async def _record(self, type: str, **data: Any) -> None:
        await self._log.record(type, data, run_id=self.run_id, agent=self.agent)

    async def _logged(self, type: str, **data: Any) -> list[Event]:
        """Write an entry of the root run; the events it stands for on the wire."""
        return wire_events(await self._log.record(type, data, run_id=self.run_id, agent=self.agent))


def _failure(failure: Exception) -> tuple[str, str]:
    """The `error` event's code and message for what ended a turn."""
    if isinstance(failure, ModelError):
        return "model_error", str(failure)
    if isinstance(failure, AmodalError):
        return "runtime_error", str(failure)
    return "internal_error", f"{type(failure).__name__}: {failure}"


def _surface_changed(history: list[StoredEvent], agent: str, surface: Surface) -> str | None:
    """The new fingerprint when the same root's surface changed since its last turn."""
    last = next((e for e in reversed(history) if e.type == "turn"), None)
    if last is None or last.agent != agent or last.data.get("surface") == surface.fingerprint:
        return None
    return surface.fingerprint


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
