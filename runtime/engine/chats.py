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

from runtime.engine.leases import LeaseKeeper
from runtime.engine.loop import PendingCall, Resume
from runtime.engine.model_pool import ModelRouter
from runtime.engine.rooting import Rooting, choose_root
from runtime.engine.turn import Turn
from runtime.exceptions import ConfirmationNotFoundError, SessionNotFoundError
from runtime.models import ToolCall
from runtime.observe.hooks import NO_OBSERVERS, Observers
from runtime.outside.mcp import McpServers
from runtime.outside.rest import Connections
from runtime.repo.bundle import Bundle
from runtime.repo.templates import clean_context
from runtime.storage import AgentRunRecord, SessionRecord, Storage, StoredEvent, utc_now
from runtime.surface.caller import Caller, ChatRequest
from runtime.surface.prompt import SessionPrompt


class ChatService:
    """Chats over the newest bundle, with durable sessions in `storage`."""

    def __init__(
        self,
        bundle: Callable[[], Bundle],
        storage: Storage,
        models: ModelRouter,
        *,
        observers: Observers = NO_OBSERVERS,
        instance: str | None = None,
        connections: Connections | None = None,
        mcp: McpServers | None = None,
    ) -> None:
        self.bundle = bundle
        self.storage = storage
        self.models = models
        self.observers = observers
        self.connections = connections or Connections()
        """The HTTP client of REST connections."""
        self.mcp = mcp
        """The MCP servers (None: no server runs, so none is ready)."""
        self.instance = instance or uuid.uuid4().hex[:8]
        self.leases = LeaseKeeper(storage, self.instance)
        """Takes sessions' leases and renews them; its `run()` must be running (Runtime.open
        runs it) for a turn to keep its session past `lease_seconds`."""
        self._prompts: dict[str, SessionPrompt] = {}

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
            self,
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
        call = ToolCall(pending.call_id, pending.tool, json.dumps(pending.arguments))
        resume = Resume(PendingCall(call, int(pending.state.get("used", 0))), approve)
        return Turn(
            self,
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

    async def get_runs(self, session_id: str, caller: Caller) -> list[AgentRunRecord]:
        await self._session(session_id, caller)
        return await self.storage.list_runs(session_id)

    async def delete_session(self, session_id: str, caller: Caller) -> None:
        await self._session(session_id, caller)
        await self.storage.delete_session(session_id)
        self._prompts.pop(session_id, None)

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

    def prompt_cache(self, session_id: str) -> SessionPrompt:
        return self._prompts.setdefault(session_id, SessionPrompt())
