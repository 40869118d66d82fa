"""Where a run writes what must survive: the session's append-only event log."""

from __future__ import annotations

from typing import Any, Protocol

import anyio

from runtime.engine.replay import wire_events
from runtime.events import Event
from runtime.storage import Storage, StoredEvent


class Recorder(Protocol):
    async def record(
        self, type: str, data: dict[str, Any], *, run_id: str, agent: str
    ) -> StoredEvent:
        """Append one durable entry and return it with its seq; must complete even if the
        caller is cancelled."""
        ...


class EventLog:
    """A turn's recorder: appends to the session's log in storage, shielded from cancellation,
    and keeps what it appended so the turn never reads its own events back.

    Specialists' entries (`stream_run`) are also published to `sink`, the channel their
    events reach the client through, in the same step as their append: concurrent
    specialists then stream in the order of their entries, so what a client saw is
    always a prefix of the log it can replay from.
    """

    def __init__(
        self, storage: Storage, session_id: str, bundle_version: str, sink: Publisher
    ) -> None:
        self._storage = storage
        self._session_id = session_id
        self._version = bundle_version
        self._sink = sink
        self._streamed: set[str] = set()
        self._lock = anyio.Lock(fast_acquire=True)  # no checkpoint when nobody waits
        self.appended: list[StoredEvent] = []

    def stream_run(self, run_id: str) -> None:
        """Publish the entries of this (specialist) run to the sink from now on."""
        self._streamed.add(run_id)

    async def record(
        self, type: str, data: dict[str, Any], *, run_id: str, agent: str
    ) -> StoredEvent:
        with anyio.CancelScope(shield=True):
            async with self._lock:
                stored = await self._storage.append_event(
                    self._session_id,
                    type,
                    data,
                    run_id=run_id,
                    agent=agent,
                    bundle_version=self._version,
                )
                if run_id in self._streamed:
                    for event in wire_events(stored):
                        self._sink.publish(event)
        self.appended.append(stored)
        return stored


class Publisher(Protocol):
    def publish(self, event: Event) -> None:
        """Hand an event on without waiting."""
        ...
