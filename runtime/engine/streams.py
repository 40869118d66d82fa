"""A turn's events as streams a client can lose and pick up again (SPEC 12, 14).

Over HTTP a turn belongs to its session, not to the connection that started it:
it runs in a task of the runtime (`TurnStreams.start`), streams to whoever follows
it, and finishes even when its client has gone. A client that lost its stream
asks for the events after the last id it saw (`TurnStreams.follow`): the
session's log from there, then the running turn live until its `done`, whether
it runs in this process (its events as they happen) or on another server of the
same database (its log, read every `POLL_SECONDS`).

A turn whose server died leaves no `done` until some runtime's sweep continues it
(`runtime.engine.resume`): the follower reads the continuation from the log like any
turn on another server, and its `done` ends the stream. A dead turn without a note
(see `leases`) is closed by the follower that finds its lease free (`recover`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import anyio
from anyio.abc import TaskGroup

from runtime.engine.leases import LeaseKeeper, recover
from runtime.engine.log import (
    DoneEntry,
    Position,
    TurnEntry,
    after,
    open_turn,
    position,
    read,
)
from runtime.engine.turn import Turn
from runtime.engine.view import SessionView
from runtime.events import Event

POLL_SECONDS = 0.05
"""How often a follower reads the log of a turn that runs on another server."""


class LiveTurn:
    """A turn running in this process: the events it has streamed so far, and more to come."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.events: list[Event] = []
        self.finished = False
        self._changed = anyio.Event()
        self._scope = anyio.CancelScope()
        self._ended = anyio.Event()

    async def run(self) -> None:
        try:
            with self._scope:  # cancelled: the turn closes itself (`done`, reason cancelled)
                async for event in self.turn.events():
                    self.events.append(event)
                    self._wake()
            self.events.extend(self.turn.closing)  # a cancelled turn's `done`, for followers
        finally:
            self.finished = True
            self._wake()
            self._ended.set()

    async def cancel(self) -> None:
        """Stop the turn and wait until it has closed itself."""
        self._scope.cancel()
        await self._ended.wait()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def tail(self, seen: Position = (0, 0)) -> AsyncIterator[Event]:
        """Every event after `seen`, as it happens, until the turn ends."""
        index = 0
        while True:
            while index < len(self.events):
                event = self.events[index]
                index += 1
                if position(event.id) > seen:
                    yield event
            if self.finished:
                return
            await self._changed.wait()


class TurnStreams:
    """The turns this process runs for clients, by session; and following any session."""

    def __init__(self, leases: LeaseKeeper, group: TaskGroup) -> None:
        self._leases = leases
        self._group = group
        self._live: dict[str, LiveTurn] = {}

    def start(self, turn: Turn) -> LiveTurn:
        """Run `turn` in the background: clients follow it, none of them drives it."""
        live = LiveTurn(turn)
        self._live[turn.session_id] = live
        self._group.start_soon(self._run, live)
        return live

    async def cancel(self, session_id: str) -> bool:
        """Stop the session's turn if it runs in this process (False when it does not)."""
        live = self._live.get(session_id)
        if live is None or live.finished:
            return False
        await live.cancel()
        return True

    async def _run(self, live: LiveTurn) -> None:
        try:
            await live.run()
        finally:
            if self._live.get(live.turn.session_id) is live:
                del self._live[live.turn.session_id]

    async def follow(self, session_id: str, seen: Position = (0, 0)) -> AsyncIterator[Event]:
        """The session's events after `seen`, then its running turn's until its `done` (or,
        when none runs, its queued background turn's, once it has run)."""
        live = self._live.get(session_id)  # looked up before reading the log: no gap between
        storage = self._leases.storage
        entries = await read(storage, session_id)
        for event in after(entries, seen):
            seen = position(event.id)
            yield event
        if live is not None:
            async for event in live.tail(seen):
                yield event
            return
        running = open_turn(entries)
        awaited = running.run_id if running is not None else await self._queued(session_id)
        read_to = entries[-1].seq if entries else 0  # read so far (some stand for no event)
        quiet_since = time.monotonic()
        while awaited is not None:
            await anyio.sleep(POLL_SECONDS)
            entries = await read(storage, session_id, read_to)
            for event in after(entries, seen):
                seen = position(event.id)
                yield event
            if any(isinstance(e.entry, DoneEntry) and e.run_id == awaited for e in entries):
                return
            if entries:
                read_to, quiet_since = entries[-1].seq, time.monotonic()
                running = running or next(
                    (e for e in entries if isinstance(e.entry, TurnEntry) and e.run_id == awaited),
                    None,
                )
            elif time.monotonic() - quiet_since > self._leases.seconds / 3:
                quiet_since = time.monotonic()
                if running is not None:
                    await self._close_if_dead(session_id)
                elif await self._queued(session_id) != awaited:
                    if not await read(storage, session_id, read_to):
                        return  # the queued turn was refused before it began
                    # else it began meanwhile: the next read has its entries

    async def _queued(self, session_id: str) -> str | None:
        """The id of the session's oldest background turn not started yet (SPEC 23)."""
        waiting = await self._leases.storage.waiting_turns(session_id)
        return waiting[0].turn_id if waiting else None

    async def _close_if_dead(self, session_id: str) -> None:
        """A turn silent for a while may have lost its server: if nobody holds its session,
        close it (its `done` then ends the stream)."""
        storage = self._leases.storage
        probe = f"follower:{uuid.uuid4().hex[:8]}"
        if await storage.try_acquire_turn(session_id, probe, self._leases.seconds):
            try:
                view = SessionView(session_id)
                await view.catch_up(storage)
                await recover(storage, view)
            finally:
                await storage.release_turn(session_id, probe)
