"""Chats over durable sessions: who may see a session, starting turns and confirmations.

`ChatService.start_turn` does everything that can refuse a request (unknown
agent, unknown session, busy session) before a byte is streamed, so the HTTP
layer can answer 404/409 with a status code; the returned `Turn` then streams
its events. The service never reads repo files: it asks `bundle()` for the
newest bundle at the start of each turn.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import anyio

from runtime.engine.compaction import compactor_for
from runtime.engine.leases import LeaseKeeper, recover
from runtime.engine.log import (
    CompactionEntry,
    DoneEntry,
    PastTurn,
    append,
    past_turns,
    read,
    wire_events,
)
from runtime.engine.loop import PendingCall, Resume
from runtime.engine.rooting import Rooting, choose_root
from runtime.engine.services import Services
from runtime.engine.turn import Turn
from runtime.engine.view import estimate
from runtime.events import Event
from runtime.exceptions import (
    ConfirmationNotFoundError,
    InvalidRequestError,
    RecordExistsError,
    SessionNotFoundError,
)
from runtime.models import ToolCallRequest
from runtime.repo.bundle import Bundle
from runtime.repo.templates import clean_context
from runtime.storage import AgentRunRecord, SessionRecord, StoredEvent, utc_now
from runtime.surface.caller import Caller, ChatRequest

WAITING = ("awaiting_confirmation", "awaiting_choice")


def thread_session_id(caller: Caller, thread: str) -> str:
    """The session id of a caller's named conversation: derived from the caller's scope and
    owner and the name, so two callers' threads of one name never meet."""
    key = json.dumps([caller.scope_id, caller.owner, thread], ensure_ascii=False)
    return "thread-" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:40]


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
        new_id = uuid.uuid4().hex
        if request.thread is not None:
            if request.session_id is not None:
                raise InvalidRequestError("name a session or a thread, not both")
            new_id = thread_session_id(caller, request.thread)
            session = await self._session_if_any(new_id, caller)
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
            session = await self._create(new_id, caller, rooting.agent, request.metadata)
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
            history=request.history if created else (),
            face=request.face,
        )

    async def _create(
        self, session_id: str, caller: Caller, agent: str, metadata: Mapping[str, Any]
    ) -> SessionRecord:
        now = utc_now()
        session = SessionRecord(
            session_id, caller.scope_id, caller.owner, agent, now, now, dict(metadata)
        )
        try:
            await self.storage.create_session(session)
        except RecordExistsError:  # a thread's first two turns at once: the other one won
            return await self._session(session_id, caller)
        return session

    async def start_confirmation(
        self, session_id: str, call_id: str, approve: bool, caller: Caller, face: str = "chat"
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
            face=face,
        )

    async def start_withdrawal(self, session_id: str, caller: Caller, face: str) -> Turn | None:
        """Claim the session to withdraw what its last turn waits for (a confirmation is
        declined, a choice no longer asked) without calling the model; None when it waits
        for nothing. `SessionBusyError` while a turn runs."""
        bundle = self.bundle()
        session = await self._session(session_id, caller)
        lease = await self.leases.acquire(session.id)
        ends = [
            e.entry for e in await read(self.storage, session_id) if isinstance(e.entry, DoneEntry)
        ]
        if not ends or ends[-1].reason not in WAITING:
            await lease.release()
            return None
        return Turn(
            self.services,
            bundle,
            session,
            caller,
            lease,
            False,
            message=None,
            rooting=Rooting(session.root_agent),
            context={},
            face=face,
            withdrawing=True,
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

    async def get_turns(self, session_id: str, caller: Caller) -> list[PastTurn]:
        await self._session(session_id, caller)
        return past_turns(await read(self.storage, session_id))

    async def check_session(self, session_id: str, caller: Caller) -> SessionRecord:
        """The session, or `SessionNotFoundError` when the caller may not see it."""
        return await self._session(session_id, caller)

    async def get_runs(self, session_id: str, caller: Caller) -> list[AgentRunRecord]:
        await self._session(session_id, caller)
        return await self.storage.list_runs(session_id)

    async def delete_session(self, session_id: str, caller: Caller) -> None:
        await self._session(session_id, caller)
        await self.storage.delete_session(session_id)
        self.services.prompts.pop(session_id, None)
        self.services.views.drop(session_id)

    async def _session_if_any(self, session_id: str, caller: Caller) -> SessionRecord | None:
        try:
            return await self._session(session_id, caller)
        except SessionNotFoundError:
            return None

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
