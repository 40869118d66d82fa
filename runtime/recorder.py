"""Where a run writes what must survive: the session's append-only event log."""

from __future__ import annotations

from typing import Any, Protocol

import anyio

from runtime.storage import Storage, StoredEvent


class Recorder(Protocol):
    async def record(self, type: str, data: dict[str, Any], *, run_id: str, agent: str) -> None:
        """Append one durable event; must complete even if the caller is cancelled."""
        ...


class EventLog:
    """A turn's recorder: appends to the session's log in storage, shielded from cancellation,
    and keeps what it appended so the turn never reads its own events back."""

    def __init__(self, storage: Storage, session_id: str, bundle_version: str) -> None:
        self._storage = storage
        self._session_id = session_id
        self._version = bundle_version
        self.appended: list[StoredEvent] = []

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
