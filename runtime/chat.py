"""Running chats: sessions, rooting, the turn, confirmations (SPEC 3, 6, 10).

`ChatRuntime.start_turn` does everything that can refuse a request (unknown
agent, unknown session, busy session) before a byte is streamed, so the HTTP
layer can answer 404/409 with a status code; the returned `Turn` then streams
its events. The runtime never reads repo files: it asks `bundle()` for the
newest bundle at the start of each turn, and a turn finishes on the bundle it
started with.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from runtime.bundle import MAIN_AGENT, AgentDefinition, Bundle, ModelTier
from runtime.delegation import LABEL_CHARS, Tree, call_subagent_tool
from runtime.events import DoneReason, Event, Usage
from runtime.exceptions import AmodalError
from runtime.local_model import NO_MODEL
from runtime.loop._run import EventSink, PendingCall, Resume, RunOutcome, RunSpec, run
from runtime.models import ModelClient, ModelEndpoint, ModelError, ToolCall, resolve_endpoint
from runtime.prompt import SessionPrompt, context_prompt
from runtime.registry import CALL_SUBAGENT
from runtime.rooting import Rooting, choose_root, handoff_note
from runtime.storage import (
    PendingConfirmation,
    RunRecord,
    RunStatus,
    SessionRecord,
    Storage,
    StoredEvent,
    utc_now,
)
from runtime.surface import DEFAULT_SCOPE, Surface, SurfaceContext, resolve
from runtime.templates import clean_context
from runtime.tools import Tool, ToolContext
from runtime.tools.builtin import build_tools
from runtime.transcript import INTERRUPTED, open_calls, rebuild

logger = logging.getLogger("amodal")

# A turn holds its session's lease for LEASE_SECONDS and renews it as events flow, so a
# crashed server frees its sessions quickly while a long turn keeps its claim.
LEASE_SECONDS = 60.0
OPERATOR_OWNER = "@operator"
RENEW_AFTER_SECONDS = 15.0


class SessionNotFoundError(AmodalError):
    """No such session for this caller (another scope's session is not found either)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"unknown session {session_id!r}")


class SessionBusyError(AmodalError):
    """The session has a turn running; one turn at a time per session."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} has a turn running; retry when it is done")


class ConfirmationNotFoundError(AmodalError):
    def __init__(self, session_id: str, call_id: str) -> None:
        super().__init__(f"no pending confirmation {call_id!r} in session {session_id!r}")


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is asking, from verified credentials only."""

    claims: Mapping[str, str] = field(default_factory=dict)
    operator: bool = False
    human_present: bool = True

    @property
    def scope_id(self) -> str:
        return self.claims.get("scope", DEFAULT_SCOPE)

    @property
    def owner(self) -> str | None:
        """Who owns the sessions this caller starts: its `sub` claim; operators' sessions are
        marked so no credential without a `sub` can ever match them."""
        return self.claims.get("sub") or (OPERATOR_OWNER if self.operator else None)

    def surface_context(self, agent: str, context: Mapping[str, str]) -> SurfaceContext:
        return SurfaceContext.for_caller(
            agent, self.claims, context, human_present=self.human_present
        )


@dataclass(frozen=True, slots=True)
class ChatRequest:
    message: str
    agent: str | None = None
    context: Mapping[str, str] = field(default_factory=dict)
    session_id: str | None = None
    autonomous: bool = False  # no human present (a scheduled or API-started task)


class ModelRouter:
    """One model client per endpoint, made on first use and kept (clients are costly to build)."""

    def __init__(self, environ: Mapping[str, str], fallback: ModelEndpoint | None = None) -> None:
        self._environ = environ
        self._fallback = fallback
        self._clients: dict[object, ModelClient] = {}

    def client(self, bundle: Bundle, tier: ModelTier) -> ModelClient:
        endpoint = resolve_endpoint(bundle.config, tier, self._environ) or self._fallback
        if endpoint is None:
            raise AmodalError(NO_MODEL)
        key = (endpoint.model, endpoint.base_url, endpoint.api_key)
        if key not in self._clients:
            self._clients[key] = ModelClient(endpoint)
        return self._clients[key]

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()


class ChatRuntime:
    """Chats over the newest bundle, with durable sessions in `storage`."""

    def __init__(
        self,
        bundle: Callable[[], Bundle],
        storage: Storage,
        models: ModelRouter,
        *,
        instance: str | None = None,
    ) -> None:
        self._bundle = bundle
        self.storage = storage
        self.models = models
        self._instance = instance or uuid.uuid4().hex[:8]
        self._prompts: dict[str, SessionPrompt] = {}

    async def start_turn(self, request: ChatRequest, caller: Caller) -> Turn:
        """Check and claim everything a turn needs; raises before anything streams."""
        bundle = self._bundle()
        session = None
        if request.session_id is not None:
            session = await self._session(request.session_id, caller)
        if request.autonomous:
            caller = dataclasses.replace(caller, human_present=False)
        rooting = choose_root(
            bundle,
            request.agent,
            session.root_agent if session else None,
            operator=caller.operator,
            human_present=caller.human_present,
        )
        created = session is None
        if session is None:
            now = utc_now()
            session = SessionRecord(
                uuid.uuid4().hex, caller.scope_id, caller.owner, rooting.agent, now, now
            )
            await self.storage.create_session(session)
        holder = await self._acquire(session.id)
        return Turn(
            self,
            bundle,
            session,
            caller,
            holder,
            created,
            message=request.message,
            rooting=rooting,
            context=clean_context(request.context),
        )

    async def start_confirmation(
        self, session_id: str, call_id: str, approve: bool, caller: Caller
    ) -> Turn:
        bundle = self._bundle()
        session = await self._session(session_id, caller)
        pending = await self.storage.get_pending(session_id, call_id)
        if pending is None:
            raise ConfirmationNotFoundError(session_id, call_id)
        holder = await self._acquire(session.id)
        # Deleting is the claim: only one request gets True, so an approval runs once.
        if not await self.storage.delete_pending(session_id, call_id):
            await self.storage.release_turn(session.id, holder)
            raise ConfirmationNotFoundError(session_id, call_id)  # another request took it
        call = ToolCall(pending.call_id, pending.tool, json.dumps(pending.arguments))
        resume = Resume(PendingCall(call, int(pending.state.get("used", 0))), approve)
        return Turn(
            self,
            bundle,
            session,
            caller,
            holder,
            False,
            message=None,
            rooting=Rooting(session.root_agent),
            context=dict(pending.state.get("context", {})),
            resume=resume,
        )

    async def get_session(
        self, session_id: str, caller: Caller
    ) -> tuple[SessionRecord, list[StoredEvent]]:
        session = await self._session(session_id, caller)
        return session, await self.storage.list_events(session_id)

    async def get_runs(self, session_id: str, caller: Caller) -> list[RunRecord]:
        await self._session(session_id, caller)
        return await self.storage.list_runs(session_id)

    async def delete_session(self, session_id: str, caller: Caller) -> None:
        await self._session(session_id, caller)
        await self.storage.delete_session(session_id)
        self._prompts.pop(session_id, None)

    async def _session(self, session_id: str, caller: Caller) -> SessionRecord:
        session = await self.storage.get_session(session_id)
        scope = caller.scope_id
        # Another scope's or owner's session is "not found", never "forbidden": its id is
        # not even confirmed to exist.
        if session is None or (
            not caller.operator and (session.scope_id != scope or session.owner != caller.owner)
        ):
            raise SessionNotFoundError(session_id)
        return session

    async def _acquire(self, session_id: str) -> str:
        holder = f"{self._instance}:{uuid.uuid4().hex[:8]}"
        if not await self.storage.try_acquire_turn(session_id, holder, LEASE_SECONDS):
            raise SessionBusyError(session_id)
        return holder

    def prompt_cache(self, session_id: str) -> SessionPrompt:
        return self._prompts.setdefault(session_id, SessionPrompt())


class _Recorder:
    """Appends a turn's durable events; writes finish even when the turn is cancelled."""

    def __init__(self, storage: Storage, session_id: str, bundle_version: str) -> None:
        self._storage = storage
        self._session_id = session_id
        self._version = bundle_version
        self.appended: list[StoredEvent] = []  # this turn's events, so it never re-reads them

    async def record(self, type: str, data: dict[str, Any], *, run_id: str, agent: str) -> None:
        with anyio.CancelScope(shield=True):
            stored = await self._storage.append_event(
                self._session_id,
                type,
                data,
                run_id=run_id,
                agent=agent,
                bundle_version=self._version,
            )
        self.appended.append(stored)


class Turn:
    """One claimed turn of a session; iterate `events()` exactly once."""

    def __init__(
        self,
        runtime: ChatRuntime,
        bundle: Bundle,
        session: SessionRecord,
        caller: Caller,
        holder: str,
        created: bool,
        *,
        message: str | None,
        rooting: Rooting,
        context: Mapping[str, str],
        resume: Resume | None = None,
    ) -> None:
        self.runtime = runtime
        self.bundle = bundle
        self.session = session
        self.caller = caller
        self.holder = holder
        self.created = created
        self.message = message
        self.rooting = rooting
        self.context = dict(context)
        self.resume = resume
        self.run_id = f"run_{uuid.uuid4().hex[:12]}"
        self.outcome = RunOutcome()
        self._recorder = _Recorder(runtime.storage, session.id, bundle.version)
        self.tree = Tree.for_turn(
            bundle,
            session.id,
            rooting.agent,
            runtime.storage,
            runtime.models,
            self._recorder,
            EventSink(),
        )
        self._renewed = time.monotonic()

    @property
    def session_id(self) -> str:
        return self.session.id

    @property
    def agent(self) -> str:
        return self.rooting.agent

    async def events(self) -> AsyncIterator[Event]:
        """The turn's events, always ending with `done` (unless the consumer went away)."""
        storage = self.runtime.storage
        reason: DoneReason = "error"
        try:
            async for event in self._events():
                await self._keep_lease()
                yield event
            reason = self.outcome.reason
        except ModelError as error:
            yield self._event("error", code="model_error", message=str(error))
        except AmodalError as error:
            yield self._event("error", code="runtime_error", message=str(error))
        except Exception as error:  # a bug must still end the stream with error and done
            logger.exception(
                "turn_failed", extra={"event": "turn_failed", "session": self.session.id}
            )
            yield self._event(
                "error", code="internal_error", message=f"{type(error).__name__}: {error}"
            )
        except BaseException:
            reason = "cancelled"
            with anyio.CancelScope(shield=True):
                await self._close_interrupted()
                await self._record("done", reason=reason, usage=self.usage.as_json())
                await storage.release_turn(self.session.id, self.holder)
            raise
        with anyio.CancelScope(shield=True):
            await self._record("done", reason=reason, usage=self.usage.as_json())
            await storage.release_turn(self.session.id, self.holder)
        yield self._event("done", reason=reason, usage=self.usage.as_json())

    async def _events(self) -> AsyncIterator[Event]:
        bundle, storage, session = self.bundle, self.runtime.storage, self.session
        yield self._event(
            "session", agent=self.agent, bundle_version=bundle.version, created=self.created
        )
        history = await storage.list_events(session.id)
        definition = bundle.agents.get(self.agent) if self.agent != MAIN_AGENT else None
        caller = self.caller.surface_context(self.agent, self.context)
        surface = resolve(bundle, self.agent, caller, root=self.agent)

        await self._record(
            "turn", agent=self.agent, surface=surface.fingerprint, context=self.context
        )
        waiting = await storage.list_pending(session.id)
        if self.message is not None:
            # A new message instead of a decision: the waiting call is not approved. Its
            # result must follow its assistant message, so it is written first.
            for pending in waiting:
                if await storage.delete_pending(session.id, pending.call_id):
                    denial = "not approved: the person sent a new message instead"
                    await self._record(
                        "tool_result",
                        call_id=pending.call_id,
                        name=pending.tool,
                        status="denied",
                        error=denial,
                        content=json.dumps({"error": denial}),
                    )
        if self.rooting.changed and self.rooting.previous is not None:
            async for event in self._reroot(self.rooting.previous, surface):
                yield event
        changed = _surface_changed(history, self.agent, surface)
        if changed is not None:
            await self._record("surface_changed", **changed)
            yield self._event("surface_changed", **changed)
        if self.message is not None:
            await self._record("user", text=self.message)

        events = [*history, *self._recorder.appended]
        pending_ids = {p.call_id for p in waiting} if self.message is None else set()
        if self.resume is not None:
            pending_ids.add(self.resume.pending.call.id)
        transcript = rebuild(events, pending_ids)
        spec = RunSpec(
            session_id=session.id,
            run_id=self.run_id,
            agent=self.agent,
            system_prompt=await self._system_prompt(definition, surface, events),
            context_prompt=context_prompt(definition, self.context),
            tools=self._tools(surface, caller),
            max_tool_calls=_budget(bundle, definition),
            client=self.runtime.models.client(
                bundle, definition.model_tier if definition else "default"
            ),
            cache_key=f"amodal:{bundle.config.name}:{self.agent}",
            tool_context=ToolContext(bundle, surface, caller, session.id, self.run_id, self.agent),
            result_limit=bundle.config.limits.max_tool_result_chars,
            nested=self.tree.sink,
        )
        label = " ".join((self.message or "(confirmation)").split())[:LABEL_CHARS]
        await storage.start_run(
            RunRecord(self.run_id, session.id, None, 0, self.agent, label, utc_now())
        )
        status: RunStatus = "error"
        error: str | None = "the turn ended early (cancelled or failed)"
        try:
            async for event in run(
                spec, transcript, self._recorder, self.outcome, resume=self.resume
            ):
                yield event
            status = "partial" if self.outcome.reason == "max_tool_calls" else "ok"
            error = None
        finally:
            with anyio.CancelScope(shield=True):
                await storage.end_run(
                    self.run_id, status, self.outcome.usage.as_json(), error, utc_now()
                )
        if self.outcome.pending is not None:
            call = self.outcome.pending.call
            await storage.save_pending(
                PendingConfirmation(
                    session.id,
                    call.id,
                    self.run_id,
                    self.agent,
                    call.name,
                    _arguments(call.arguments),
                    {"used": self.outcome.pending.used, "context": self.context},
                    utc_now(),
                )
            )

    def _tools(self, surface: Surface, caller: SurfaceContext) -> dict[str, Tool]:
        tools = build_tools(
            self.bundle, surface, propose=self.tree.propose, storage=self.runtime.storage
        )
        if surface.subagents:
            tools[CALL_SUBAGENT] = call_subagent_tool(self.tree, surface, caller, self.run_id, 0)
        return dict(sorted(tools.items()))

    @property
    def usage(self) -> Usage:
        """The turn's usage: its own model calls and every specialist's."""
        return self.outcome.usage + self.tree.usage

    async def _reroot(self, previous: str, surface: Surface) -> AsyncIterator[Event]:
        bundle = self.bundle
        if previous == MAIN_AGENT or previous in bundle.agents:
            before = resolve(
                bundle, previous, self.caller.surface_context(previous, self.context), root=previous
            )
        else:  # the old root was removed by a reload: it offered nothing we can name
            before = surface
        await self.runtime.storage.set_root(self.session.id, self.agent)
        await self._record("agent", **{"from": previous, "to": self.agent})
        await self._record("handoff", text=handoff_note(previous, self.agent, before, surface))
        yield self._event("agent", **{"from": previous, "to": self.agent})

    async def _system_prompt(
        self, agent: AgentDefinition | None, surface: Surface, events: list[StoredEvent]
    ) -> str:
        """The session's prompt: the stored one while its key holds (byte-stable across turns
        and restarts), else a new one, recorded for the next turns."""
        cache = self.runtime.prompt_cache(self.session.id)
        if not cache.key:
            stored = next((e for e in reversed(events) if e.type == "prompt"), None)
            if stored is not None:
                cache.text, cache.key = stored.data["text"], tuple(stored.data["key"])
        before = cache.key
        text = cache.get(self.bundle, agent, surface, self.context)
        if cache.key != before:
            await self._record("prompt", text=text, key=list(cache.key))
        return text

    async def _close_interrupted(self) -> None:
        """Give every call left without a result an `interrupted` one (a cancelled turn)."""
        storage = self.runtime.storage
        pending = {p.call_id for p in await storage.list_pending(self.session.id)}
        messages = rebuild(await storage.list_events(self.session.id), repair=False)
        for call_id in open_calls(messages):
            if call_id not in pending:
                await self._record(
                    "tool_result",
                    call_id=call_id,
                    name="",
                    status="error",
                    error="interrupted",
                    content=INTERRUPTED,
                )

    async def _record(self, type: str, **data: Any) -> None:
        await self._recorder.record(type, data, run_id=self.run_id, agent=self.agent)

    async def _keep_lease(self) -> None:
        now = time.monotonic()
        if now - self._renewed > RENEW_AFTER_SECONDS:
            self._renewed = now
            await self.runtime.storage.renew_turn(self.session.id, self.holder, LEASE_SECONDS)

    def _event(self, type: Any, **data: Any) -> Event:
        return Event(type, self.session.id, self.run_id, data)


def _surface_changed(
    history: list[StoredEvent], agent: str, surface: Surface
) -> dict[str, Any] | None:
    last = next((e for e in reversed(history) if e.type == "turn"), None)
    if last is None or last.agent != agent or last.data.get("surface") == surface.fingerprint:
        return None
    return {"agent": agent, "fingerprint": surface.fingerprint}


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


__all__ = [
    "Caller",
    "ChatRequest",
    "ChatRuntime",
    "ConfirmationNotFoundError",
    "ModelRouter",
    "SessionBusyError",
    "SessionNotFoundError",
    "Turn",
    "Usage",
]
