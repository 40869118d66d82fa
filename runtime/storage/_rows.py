"""The tables' columns and how a row becomes a record, shared by both backends.

The backends share their SQL (`_sql.py`), so they agree on the columns and their
order; they differ only in how a database hands back a time and a JSON value
(SQLite: ISO text and JSON text; PostgreSQL: `timestamptz` and `jsonb` already
decoded), which each dialect gives as a `Decoders`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from runtime.storage.records import (
    AgentRunRecord,
    AutomationRunRecord,
    AutomationRunStatus,
    JSONObject,
    MemoryEntry,
    MemoryKind,
    MemoryOwner,
    PendingConfirmation,
    RunStatus,
    SessionRecord,
    StoredEvent,
    StoreDocument,
)

SESSION_COLUMNS = "id, scope_id, owner, root_agent, created_at, updated_at, metadata"
EVENT_COLUMNS = "session_id, seq, type, run_id, agent, bundle_version, created_at, data"
PENDING_COLUMNS = "session_id, call_id, run_id, agent, tool, arguments, state, created_at"
RUN_COLUMNS = (
    "id, session_id, parent_run_id, depth, agent, label, started_at, ended_at, status, usage, error"
)
AUTOMATION_RUN_COLUMNS = (
    "id, automation, trigger, slot, delivery_id, session_id, status, done_reason, error, "
    "reply, created_at, ended_at, deliveries"
)
DOCUMENT_COLUMNS = "scope_id, store, key, body, version, created_at, updated_at, expires_at"
MEMORY_COLUMNS = "id, agent, kind, scope_id, owner, text, created_at"

Row = Sequence[Any]


@dataclass(frozen=True, slots=True)
class Decoders:
    """How one database's values become Python's: a time (aware, UTC) and a JSON object
    (`metadata`, `data`, `arguments`, `state`, `usage`); `body` is a document's JSON."""

    time: Callable[[Any], datetime]
    json: Callable[[Any], JSONObject]
    body: Callable[[Any], JSONObject]

    def session(self, row: Row) -> SessionRecord:
        return SessionRecord(
            id=row[0],
            scope_id=row[1],
            owner=row[2],
            root_agent=row[3],
            created_at=self.time(row[4]),
            updated_at=self.time(row[5]),
            metadata=self.json(row[6]),
        )

    def event(self, row: Row) -> StoredEvent:
        return StoredEvent(
            session_id=row[0],
            seq=int(row[1]),
            type=row[2],
            run_id=row[3],
            agent=row[4],
            bundle_version=row[5],
            created_at=self.time(row[6]),
            data=self.json(row[7]),
        )

    def pending(self, row: Row) -> PendingConfirmation:
        return PendingConfirmation(
            session_id=row[0],
            call_id=row[1],
            run_id=row[2],
            agent=row[3],
            tool=row[4],
            arguments=self.json(row[5]),
            state=self.json(row[6]),
            created_at=self.time(row[7]),
        )

    def run(self, row: Row) -> AgentRunRecord:
        return AgentRunRecord(
            id=row[0],
            session_id=row[1],
            parent_run_id=row[2],
            depth=int(row[3]),
            agent=row[4],
            label=row[5],
            started_at=self.time(row[6]),
            ended_at=None if row[7] is None else self.time(row[7]),
            status=cast(RunStatus, row[8]),
            usage=self.json(row[9]),
            error=row[10],
        )

    def automation_run(self, row: Row) -> AutomationRunRecord:
        deliveries = json.loads(row[12]) if isinstance(row[12], str) else row[12]
        return AutomationRunRecord(
            id=row[0],
            automation=row[1],
            trigger=row[2],
            slot=None if row[3] is None else self.time(row[3]),
            delivery_id=row[4],
            session_id=row[5],
            status=cast(AutomationRunStatus, row[6]),
            done_reason=row[7],
            error=row[8],
            reply=row[9],
            created_at=self.time(row[10]),
            ended_at=None if row[11] is None else self.time(row[11]),
            deliveries=list(deliveries),
        )

    def document(self, row: Row) -> StoreDocument:
        return StoreDocument(
            scope_id=row[0],
            store=row[1],
            key=row[2],
            data=self.body(row[3]),
            version=int(row[4]),
            created_at=self.time(row[5]),
            updated_at=self.time(row[6]),
            expires_at=None if row[7] is None else self.time(row[7]),
        )

    def memory(self, row: Row) -> MemoryEntry:
        """A row of MEMORY_COLUMNS (optionally prefixed by a table alias in the SELECT)."""
        owner = MemoryOwner(cast(MemoryKind, row[2]), row[3], row[4])
        return MemoryEntry(row[0], row[1], owner, row[5], self.time(row[6]))
