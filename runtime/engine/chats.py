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

from runtime.engine.budget import Spender, turn_budget
from runtime.engine.compaction import compactor_for
from runtime.engine.leases import LeaseKeeper, recover
from runtime.engine.log import (
    CompactionEntry,
    DoneEntry,
    PastTurn,
    TurnEntry,
    append,
    past_turns,
    read,
    wire_events,
)
from runtime.engine.loop import PendingCall, Resume
from runtime.engine.rooting import Rooting, choose_root
from runtime.engine.services import Services
from runtime.engine.turn import Turn, new_run_id
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
from runtime.storage import (
    AgentRunRecord,
    ExpiredTurn,
    JSONObject,
    QueuedTurn,
    SessionRecord,
    Spend,
    StoredEvent,
    utc_now,
)
from runtime.surface.caller import Caller, ChatRequest

WAITING = ("awaiting_confirmation", "awaiting_choice")


def thread_session_id(caller: Caller, thread: str) -> str:
    """The session id of a caller's named conversation: derived from the caller's scope and
    owner and the name, so two callers' threads of one name never meet."""
    key = json.dumps([caller.scope_id, caller.owner, thread], ensure_ascii=False)
    return "thread-" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def turn_note(bundle: Bundle, run_id: str, caller: Caller, face: str) -> JSONObject:
    """What a turn's lease keeps of it: enough for another process to continue it. A claim
    that a connection injects into its requests is a secret and never stored (SPEC 12): a
    continued or background turn runs without it, and its calls that need it are refused
    (a refused call sends nothing)."""
    secret = {i.claim for c in bundle.connections.values() for i in c.injections}
    return {
        "run_id": run_id,
        "face": face,
        "caller": {
            "claims": {k: v for k, v in caller.claims.items() if k not in secret},
            "operator": caller.operator,
            "human_present": caller.human_present,
        },
    }


FIRST_MESSAGE = "first_message"
"""The session metadata key holding the session's first message, shortened: kept when the
session is created so a listing of sessions names each one without reading its log."""
FIRST_MESSAGE_LENGTH = 80


def first_message(message: str) -> str:
    """`message` on one line, cut to `FIRST_MESSAGE_LENGTH` characters with an ellipsis."""
    line = " ".join(message.split())
    if len(line) <= FIRST_MESSAGE_LENGTH:
        return line
    return line[: FIRST_MESSAGE_LENGTH - 1].rstrip() + "…"


def request_json(request: ChatRequest) -> JSONObject:
    """A queued request as the queue keeps it (`request_of_json` reads it back)."""
    return {
        "message": request.message,
        "agent": request.agent,
        "context": dict(request.context),
        "session_id": request.session_id,
        "autonomous": request.autonomous,
        "face": request.face,
        "metadata": dict(request.metadata),
    }


def request_of_json(data: JSONObject) -> ChatRequest:
    return ChatRequest(
        message=str(data["message"]),
        agent=data.get("agent"),
        context={str(k): str(v) for k, v in (data.get("context") or {}).items()},
        session_id=data.get("session_id"),
        autonomous=bool(data.get("autonomous", False)),
        face=str(data.get("face", "chat")),
        metadata=dict(data.get("metadata") or {}),
    )


def _check_queued(request: ChatRequest) -> None:
    if request.history:
        raise InvalidRequestError("a background turn continues a session: it takes no history")


def caller_of_note(note: JSONObject) -> Caller:
    """The caller a turn's note was written for (`turn_note`)."""
    caller = note.get("caller") or {}
    claims = caller.get("claims") or {}
    return Caller(
        claims={str(key): str(value) for key, value in claims.items()},
        operator=bool(caller.get("operator", False)),
        human_present=bool(caller.get("human_present", True)),
    )


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

    async def start_turn(
        self, request: ChatRequest, caller: Caller, *, run_id: str | None = None
    ) -> Turn:
        """Check and claim everything a turn needs; raises before anything streams.
        `run_id`: the id its root run gets (a queued turn's `turn_id`)."""
        bundle = self.bundle()
        session, created, rooting, caller = await self._open(bundle, request, caller)
        run_id = run_id or new_run_id()
        lease = await self.leases.acquire(
            session.id, turn_note(bundle, run_id, caller, request.face)
        )
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
            run_id=run_id,
        )

    async def enqueue(self, request: ChatRequest, caller: Caller) -> QueuedTurn:
        """Put a turn in the durable queue for some process to run (SPEC 23): everything
        that can refuse it is checked now, and its session is created if it is new."""
        _check_queued(request)
        bundle = self.bundle()
        session, _, _, caller = await self._open(bundle, request, caller)
        stored = dataclasses.replace(request, session_id=session.id, thread=None)
        queued = QueuedTurn(
            new_run_id(),
            session.id,
            request_json(stored),
            turn_note(bundle, "", caller, request.face)["caller"],
            "queued",
            utc_now(),
        )
        await self.storage.enqueue_turn(queued)
        return queued

    async def _open(
        self, bundle: Bundle, request: ChatRequest, caller: Caller
    ) -> tuple[SessionRecord, bool, Rooting, Caller]:
        """The request's session (created when new), whether this call created it, its root,
        and the caller as the turn sees it; raises what refuses the request."""
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
        created = False
        if session is None:
            metadata = {**request.metadata, FIRST_MESSAGE: first_message(request.message)}
            session, created = await self._create(new_id, caller, rooting.agent, metadata)
        return session, created, rooting, caller

    async def _create(
        self, session_id: str, caller: Caller, agent: str, metadata: Mapping[str, Any]
    ) -> tuple[SessionRecord, bool]:
        """The new session, and whether this call created it."""
        now = utc_now()
        session = SessionRecord(
            session_id, caller.scope_id, caller.owner, agent, now, now, dict(metadata)
        )
        try:
            await self.storage.create_session(session)
        except RecordExistsError:  # a thread's first two turns at once: the other one won
            return await self._session(session_id, caller), False
        return session, True

    async def take_over(self, expired: ExpiredTurn) -> Turn | None:
        """Take over the lease of a turn whose process died and return the turn that
        continues it from its log (SPEC 23); None when another process was first, or when
        there is nothing to continue (the lease is then given up)."""
        lease = await self.leases.take_over(expired.session_id)
        if lease is None:
            return None
        try:
            session = await self.storage.get_session(expired.session_id)
            view = self.services.views.get(expired.session_id)
            await view.catch_up(self.storage)
            dead = view.open_turn
            if session is None or dead is None or not isinstance(dead.entry, TurnEntry):
                await lease.release()  # it died after its `done`, or before its first entry
                return None
            caller = caller_of_note(expired.turn)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await lease.release()
            raise
        return Turn(
            self.services,
            self.bundle(),
            session,
            caller,
            lease,
            False,
            message=None,
            rooting=Rooting(dead.entry.agent),
            context=dict(dead.entry.context),
            face=str(expired.turn.get("face", "chat")),
            run_id=dead.run_id,
            continuing=True,
        )

    async def start_confirmation(
        self, session_id: str, call_id: str, approve: bool, caller: Caller, face: str = "chat"
    ) -> Turn:
        """Claim the session to answer a pending confirmation; the turn resumes the run."""
        bundle = self.bundle()
        session = await self._session(session_id, caller)
        pending = await self.storage.get_pending(session_id, call_id)
        if pending is None:
            raise ConfirmationNotFoundError(session_id, call_id)
        run_id = new_run_id()
        lease = await self.leases.acquire(session.id, turn_note(bundle, run_id, caller, face))
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
            run_id=run_id,
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

        # Spent like a turn of its own, against the session's limits (SPEC 22).
        spender = Spender(session.id, last.run_id, session.owner, session.scope_id)
        budget = turn_budget(bundle, last.agent, services.storage, spender)
        budget.session_before(Spend(view.spent_tokens, view.spent_usd))
        compactor = compactor_for(services, bundle, view, last.run_id, last.agent, record, budget)
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
