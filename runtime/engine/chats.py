"""Chats over durable sessions: who may see a session, starting turns and confirmations.

`ChatService.start_turn` does everything that can refuse a request (unknown
agent, unknown session, busy session) before a byte is streamed, so the HTTP
layer can answer 404/409 with a status code; the returned `Turn` then streams
its events. The service never reads repo files: it asks `bundle()` for the
newest bundle at the start of each turn.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable

import anyio

from runtime.engine.compaction import compactor_for
from runtime.engine.leases import LeaseKeeper, recover
from runtime.engine.log import CompactionEntry, append, wire_events
from runtime.engine.loop import PendingCall, Resume
from runtime.engine.rooting import Rooting, choose_root
from runtime.engine.services import Services
from runtime.engine.turn import Turn
from runtime.engine.view import estimate
from runtime.events import Event
from runtime.exceptions import ConfirmationNotFoundError, SessionNotFoundError
from runtime.models import ToolCallRequest
from runtime.repo.bundle import Bundle
from runtime.repo.templates import clean_context
from runtime.storage import RunRecord, SessionRecord, StoredEvent, utc_now
from runtime.surface.caller import Caller, ChatRequest


class ChatService:
    """Chats over the newest bundle, with durable sessions in `services.storage`."""

    def __init__(
        self, bundle: Callable[[], Bundle], services: Services, *, instance: str | None = None
    ) -> None:
        self.bundle = bundle
        self.services = services
        self.storage = services.storage
        self.instance = instance or uuid.uuid4().hex[:8]
        self.leases = LeaseKeeper(services.storage, self.instance)
        """Takes sessions' leases and renews them; its `run()` must be running (Runtime.open
        runs it) for a turn to keep its session past `lease_seconds`."""

    async def start_turn(self, request: ChatRequest, caller: Caller) -> Turn:
        """Check and claim everything a turn needs; raises before anything streams."""
        bundle = self.bundle()
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
        lease = await self.leases.acquire(session.id)
        return Turn(
            self.services,
            bundle,
            session,
            caller,
            lease,
            created,
            message=request.message,
            rooting=rooting,
            context=clean_context(request.context),
        )

    async def start_confirmation(
        self, session_id: str, call_id: str, approve: bool, caller: Caller
    ) -> Turn:
        """Claim the session to answer a pending confirmation; the turn resumes the run."""
        bundle = self.bundle()
        session = await self._session(session_id, caller)
        pending = await self.storage.get_pending(session_id, call_id)
        if pending is None:
            raise ConfirmationNotFoundError(session_id, call_id)
        lease = await self.leases.acquire(session.id)
        # Deleting is the claim: only one request gets True, so an approval runs once.
        if not await self.storage.delete_pending(session_id, call_id):
            await lease.release()
            raise ConfirmationNotFoundError(session_id, call_id)  # another request took it
        call = ToolCallRequest(pending.call_id, pending.tool, json.dumps(pending.arguments))
        resume = Resume(PendingCall(call, int(pending.state.get("used", 0))), approve)
        return Turn(
            self.services,
            bundle,
            session,
            caller,
            lease,
            False,
            message=None,
            rooting=Rooting(session.root_agent),
            context=dict(pending.state.get("context", {})),
            resume=resume,
        )

    async def compact(
        self, session_id: str, caller: Caller, focus: str | None = None
    ) -> list[Event]:
        """Summarise the session's older turns now (SPEC 20), as a turn would when its model's
        window fills; `SessionBusyError` while a turn runs. Its `compaction` event, or none
        when there is nothing older than the turns compaction keeps whole."""
        session = await self._session(session_id, caller)
        lease = await self.leases.acquire(session.id)
        try:
            return await self._compacted(session, focus)
        finally:
            with anyio.CancelScope(shield=True):
                await lease.release()

    async def _compacted(self, session: SessionRecord, focus: str | None) -> list[Event]:
        bundle, services = self.bundle(), self.services
        view = services.views.get(session.id)
        await view.catch_up(services.storage)
        await recover(services.storage, view)
        last = view.last_turn
        if last is None:
            return []

        async def record(entry: CompactionEntry) -> list[Event]:
            logged = await append(
                services.storage,
                session.id,
                entry,
                run_id=last.run_id,
                agent=last.agent,
                bundle_version=bundle.version,
            )
            view.add(logged)
            return wire_events(logged)

        compactor = compactor_for(services, bundle, view, last.run_id, last.agent, record)
        base = estimate(view.prompt.text) if view.prompt is not None else 0
        return await compactor.compact(base, focus=focus, summary=True)

    async def get_session(
        self, session_id: str, caller: Caller
    ) -> tuple[SessionRecord, list[StoredEvent]]:
        session = await self._session(session_id, caller)
        return session, await self.storage.list_events(session_id)

    async def list_sessions(
        self, caller: Caller, *, limit: int = 20, offset: int = 0
    ) -> list[SessionRecord]:
        """The sessions `_session` would let this caller see, most recently updated first:
        its own (scope and owner), or every session for an operator."""
        if caller.operator:
            return await self.storage.list_sessions(limit=limit, offset=offset)
        return await self.storage.list_sessions(
            caller.scope_id, caller.owner, limit=limit, offset=offset
        )

    async def get_runs(self, session_id: str, caller: Caller) -> list[RunRecord]:
        await self._session(session_id, caller)
        return await self.storage.list_runs(session_id)

    async def delete_session(self, session_id: str, caller: Caller) -> None:
        await self._session(session_id, caller)
        await self.storage.delete_session(session_id)
        self.services.prompts.pop(session_id, None)
        self.services.views.drop(session_id)

    async def _session(self, session_id: str, caller: Caller) -> SessionRecord:
        session = await self.storage.get_session(session_id)
        # Another scope's or owner's session is "not found", never "forbidden": its id is
        # not even confirmed to exist.
        if session is None or (
            not caller.operator
            and (session.scope_id != caller.scope_id or session.owner != caller.owner)
        ):
            raise SessionNotFoundError(session_id)
        return session
