"""A `Storage` in Python dicts, for the benchmark only: what a turn costs without durability.

Not a backend: nothing survives the process, nothing is shared across processes,
and it skips most checks the real backends make (aware datetimes, JSON-able data).
It keeps the ordering promises a turn relies on (seqs, leases, exactly-once
pending deletes, document versions) because everything runs on one event loop
without awaiting in between. Store documents follow the SQLite backend's rules:
expiry, kept versions, and queries filtered, sorted and paged the same way (the
arguments are checked by the backends' own `runtime.storage._values`).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from runtime.storage import (
    AgentRunRecord,
    DocumentPage,
    DocumentQuery,
    FilterValue,
    JSONObject,
    NewEvent,
    PendingConfirmation,
    RecordExistsError,
    RecordNotFoundError,
    RunStatus,
    SessionRecord,
    Spend,
    StoredEvent,
    StoreDocument,
    UsageRecord,
    utc_now,
)
from runtime.storage._values import check_document, check_query

DocumentKey = tuple[str, str, str]  # (scope_id, store, key)


class MemoryStorage:
    """Sessions, events, runs, pending calls and leases in dicts (see the module docstring)."""

    def __init__(self) -> None:
        self._sessions: dict[str, SessionRecord] = {}
        self._events: dict[str, list[StoredEvent]] = {}
        self._pending: dict[str, dict[str, PendingConfirmation]] = {}
        self._runs: dict[str, AgentRunRecord] = {}
        self._running: dict[str, set[str]] = {}  # session -> its runs still running
        self._leases: dict[str, tuple[str, float]] = {}
        self._documents: dict[DocumentKey, StoreDocument] = {}
        self._history: dict[DocumentKey, list[StoreDocument]] = {}  # newest first
        self._usage: list[UsageRecord] = []

    async def migrate(self) -> list[str]:
        return []

    async def close(self) -> None:
        return None

    # sessions

    async def create_session(self, record: SessionRecord) -> None:
        if record.id in self._sessions:
            raise RecordExistsError("session", record.id)
        self._sessions[record.id] = record
        self._events[record.id] = []
        self._pending[record.id] = {}

    async def get_session(self, session_id: str) -> SessionRecord | None:
        return self._sessions.get(session_id)

    async def set_root(self, session_id: str, agent: str) -> None:
        self._update(session_id, root_agent=agent)

    async def touch_session(self, session_id: str) -> None:
        self._update(session_id)

    def _update(self, session_id: str, **changes: str) -> None:
        record = self._sessions.get(session_id)
        if record is None:
            raise RecordNotFoundError("session", session_id)
        self._sessions[session_id] = dataclasses.replace(record, updated_at=utc_now(), **changes)

    async def delete_session(self, session_id: str) -> bool:
        self._events.pop(session_id, None)
        self._pending.pop(session_id, None)
        self._leases.pop(session_id, None)
        for run_id in [r.id for r in self._runs.values() if r.session_id == session_id]:
            del self._runs[run_id]
        return self._sessions.pop(session_id, None) is not None

    # the event log

    async def append_event(
        self,
        session_id: str,
        type: str,
        data: JSONObject,
        *,
        run_id: str | None,
        agent: str | None,
        bundle_version: str | None,
        search_text: str | None = None,
        usage: UsageRecord | None = None,
    ) -> StoredEvent:
        # Nothing is searchable here: the benchmark's turns never search.
        (stored,) = await self.append_events(
            session_id, (NewEvent(type, data, run_id, agent, bundle_version, None, usage),)
        )
        return stored

    async def append_events(self, session_id: str, events: Sequence[NewEvent]) -> list[StoredEvent]:
        log = self._events.get(session_id)
        if log is None:
            raise RecordNotFoundError("session", session_id)
        now = utc_now()
        stored = [
            StoredEvent(
                session_id,
                len(log) + 1 + i,
                e.type,
                e.run_id,
                e.agent,
                e.bundle_version,
                now,
                e.data,
            )
            for i, e in enumerate(events)
        ]
        log.extend(stored)
        self._usage.extend(e.usage for e in events if e.usage is not None)
        for e in events:  # not atomic with the append, as nothing here is
            if e.starts_run is not None:
                await self.start_run(e.starts_run)
            if e.ends_run is not None:
                end = e.ends_run
                await self.end_run(end.run_id, end.status, end.usage, end.error, end.ended_at)
            if e.releases_turn is not None:
                await self.release_turn(session_id, e.releases_turn)
        return stored

    async def list_events(self, session_id: str, after_seq: int = 0) -> list[StoredEvent]:
        return list(self._events.get(session_id, [])[after_seq:])

    # pending confirmations

    async def save_pending(self, confirmation: PendingConfirmation) -> None:
        pending = self._pending.get(confirmation.session_id)
        if pending is None:
            raise RecordNotFoundError("session", confirmation.session_id)
        if confirmation.call_id in pending:
            raise RecordExistsError("pending confirmation", confirmation.call_id)
        pending[confirmation.call_id] = confirmation

    async def get_pending(self, session_id: str, call_id: str) -> PendingConfirmation | None:
        return self._pending.get(session_id, {}).get(call_id)

    async def list_pending(self, session_id: str) -> list[PendingConfirmation]:
        return list(self._pending.get(session_id, {}).values())

    async def delete_pending(self, session_id: str, call_id: str) -> bool:
        return self._pending.get(session_id, {}).pop(call_id, None) is not None

    # runs

    async def start_run(self, record: AgentRunRecord) -> None:
        if record.session_id not in self._sessions:
            raise RecordNotFoundError("session", record.session_id)
        if record.id in self._runs:
            raise RecordExistsError("run", record.id)
        self._runs[record.id] = record
        self._running.setdefault(record.session_id, set()).add(record.id)

    async def end_run(
        self,
        run_id: str,
        status: RunStatus,
        usage: JSONObject,
        error: str | None = None,
        ended_at: datetime | None = None,
    ) -> None:
        record = self._runs.get(run_id)
        if record is None:
            raise RecordNotFoundError("run", run_id)
        self._runs[run_id] = dataclasses.replace(
            record, status=status, usage=usage, error=error, ended_at=ended_at or utc_now()
        )
        self._running.get(record.session_id, set()).discard(run_id)

    async def list_runs(self, session_id: str) -> list[AgentRunRecord]:
        return [r for r in self._runs.values() if r.session_id == session_id]

    async def interrupt_runs(
        self, session_id: str, error: str, ended_at: datetime | None = None
    ) -> list[AgentRunRecord]:
        running = [self._runs[run_id] for run_id in self._running.pop(session_id, set())]
        for run in running:
            self._runs[run.id] = dataclasses.replace(
                run, status="interrupted", error=error, ended_at=ended_at or utc_now()
            )
        return running

    async def list_sessions(
        self,
        scope_id: str | None = None,
        owner: str | None = None,
        *,
        limit: int = 20,
        offset: int = 0,
    ) -> list[SessionRecord]:
        found = [
            s
            for s in self._sessions.values()
            if scope_id is None or (s.scope_id == scope_id and s.owner == owner)
        ]
        found.sort(key=lambda s: (s.updated_at, s.id), reverse=True)
        return found[offset : offset + limit]

    # leases

    async def try_acquire_turn(
        self,
        session_id: str,
        holder: str,
        ttl_seconds: float,
        turn: dict[str, Any] | None = None,
        *,
        take_over: bool = False,
    ) -> bool:
        # One process: a lease never outlives its holder here, so no note is kept and no
        # turn is ever left to continue (`expired_turns` finds none).
        now = time.time()
        current = self._leases.get(session_id)
        if current is not None and current[0] != holder and current[1] > now:
            return False
        self._leases[session_id] = (holder, now + ttl_seconds)
        return True

    async def expired_turns(self, limit: int = 20) -> list[Any]:
        return []

    # the turn queue: the benchmarks run no background turns

    async def claim_turn(self, worker: str, ttl_seconds: float) -> None:
        return None

    async def waiting_turns(self, session_id: str) -> list[Any]:
        return []

    async def renew_turn(self, session_id: str, holder: str, ttl_seconds: float) -> bool:
        current = self._leases.get(session_id)
        if current is None or current[0] != holder:
            return False
        self._leases[session_id] = (holder, time.time() + ttl_seconds)
        return True

    async def release_turn(self, session_id: str, holder: str) -> bool:
        current = self._leases.get(session_id)
        if current is None or current[0] != holder:
            return False
        del self._leases[session_id]
        return True

    # store documents

    def _live(self, key: DocumentKey) -> StoreDocument | None:
        """The document, or None when there is none or it expired (it stays until a put
        replaces it or `purge_expired` deletes it, as in the SQL backends)."""
        document = self._documents.get(key)
        if document is None or _expired(document):
            return None
        return document

    async def get_document(self, scope_id: str, store: str, key: str) -> StoreDocument | None:
        document = self._live((scope_id, store, key))
        return None if document is None else _copy(document)

    async def query_documents(
        self, scope_id: str, store: str, query: DocumentQuery
    ) -> DocumentPage:
        filters, sort, descending = check_query(query)
        keys = [k for k in self._documents if k[0] == scope_id and k[1] == store]
        found = [d for d in (self._live(k) for k in keys) if d is not None]
        found = [d for d in found if all(_matches(d.data, n, v) for n, v in filters)]
        found.sort(key=lambda d: d.key)
        if sort is not None:
            present = [d for d in found if d.data.get(sort) is not None]
            absent = [d for d in found if d.data.get(sort) is None]
            # A stable sort (reverse=True too): ties stay in key order, as "ORDER BY ..., key".
            present.sort(key=lambda d: _order(d.data[sort]), reverse=descending)
            found = present + absent
        page = found[query.offset : query.offset + query.limit]
        return DocumentPage([_copy(d) for d in page], len(found))

    async def put_document(
        self,
        scope_id: str,
        store: str,
        key: str,
        data: JSONObject,
        *,
        ttl_seconds: float | None = None,
        keep_versions: int = 0,
    ) -> StoreDocument:
        text = check_document(scope_id, store, key, data, ttl_seconds, keep_versions)
        ids = (scope_id, store, key)
        now = utc_now()
        expires = None if ttl_seconds is None else now + timedelta(seconds=ttl_seconds)
        previous = self._live(ids)
        if previous is None:
            version, created = 1, now
            self._history.pop(ids, None)
        else:
            version, created = previous.version + 1, previous.created_at
            history = self._history.setdefault(ids, [])
            if keep_versions > 0:
                history.insert(0, dataclasses.replace(previous, expires_at=None))
            self._history[ids] = [d for d in history if d.version >= version - keep_versions]
        data = json.loads(text)
        stored = StoreDocument(scope_id, store, key, data, version, created, now, expires)
        self._documents[ids] = stored
        return _copy(stored)

    async def delete_document(self, scope_id: str, store: str, key: str) -> bool:
        ids = (scope_id, store, key)
        if self._live(ids) is None:
            return False
        del self._documents[ids]
        self._history.pop(ids, None)
        return True

    async def document_history(self, scope_id: str, store: str, key: str) -> list[StoreDocument]:
        ids = (scope_id, store, key)
        if self._live(ids) is None:
            return []
        return [_copy(d) for d in self._history.get(ids, [])]

    # --- usage (SPEC 22): what a turn's budget check reads ---------------------------------

    async def record_usage(self, record: UsageRecord) -> None:
        self._usage.append(record)

    async def session_spent(self, session_id: str) -> Spend:
        return _spent(u for u in self._usage if u.session_id == session_id)

    async def owner_spent(self, owner: str | None, day: str) -> Spend:
        return _spent(u for u in self._usage if u.owner == owner and u.at.date().isoformat() == day)

    async def purge_expired(self) -> int:
        expired = [ids for ids, document in self._documents.items() if _expired(document)]
        for ids in expired:
            del self._documents[ids]
            self._history.pop(ids, None)
        return len(expired)


def _spent(records: Any) -> Spend:
    tokens, cost = 0, 0.0
    for record in records:
        tokens += record.input_tokens + record.output_tokens
        cost += record.cost_usd or 0.0
    return Spend(tokens, cost)


def _expired(document: StoreDocument) -> bool:
    return document.expires_at is not None and document.expires_at <= utc_now()


def _copy(document: StoreDocument) -> StoreDocument:
    """A caller may change the data it gets; the stored version must not change with it."""
    return dataclasses.replace(document, data=copy.deepcopy(document.data))


def _matches(data: JSONObject, name: str, value: FilterValue) -> bool:
    """JSON equality of a top-level field: 1 equals 1.0, true is not 1, None matches absent."""
    field = data.get(name)
    if value is None:
        return field is None
    if isinstance(value, bool) or isinstance(field, bool):
        return isinstance(value, bool) and isinstance(field, bool) and field == value
    if isinstance(value, int | float):
        return isinstance(field, int | float) and field == value
    return isinstance(field, str) and field == value


def _order(value: Any) -> tuple[int, Any]:
    """SQLite's order of json_each values: numbers (false 0, true 1) before text; objects and
    arrays compare as their JSON text."""
    if isinstance(value, bool | int | float):
        return 0, float(value) if isinstance(value, bool) else value
    if isinstance(value, str):
        return 1, value
    return 1, json.dumps(value, ensure_ascii=False, separators=(",", ":"))
