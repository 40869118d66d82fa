"""One turn per session: a turn holds its session's lease in the database while it runs.

The lease is a row in storage, so it holds across processes and servers. A turn
takes it before anything streams (or the request is refused as busy) and gives
it up when it ends. While it runs, the runtime's `LeaseKeeper` renews every lease
this process holds every `lease_seconds / 3`, whatever the turn is waiting on (a
model silent for minutes keeps its session). A process that dies stops renewing:
its leases lapse within `lease_seconds` (15 s; `AMODAL_LEASE_SECONDS` changes it).
A turn's lease carries a note of the turn: such a lapsed lease is taken over only to
continue the turn (`runtime.engine.resume`); what a dead holder without a note left
open is closed by whoever takes the session next (`recover`).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Mapping, Set

import anyio

from runtime.engine.log import (
    DoneEntry,
    ErrorEntry,
    LogEntry,
    Logged,
    ToolResultEntry,
    append,
)
from runtime.engine.view import SessionView
from runtime.exceptions import SessionBusyError
from runtime.storage import JSONObject, Storage

logger = logging.getLogger("amodal")

DEFAULT_LEASE_SECONDS = 15.0
LEASE_SECONDS_ENV = "AMODAL_LEASE_SECONDS"
INTERRUPTED_RUN = "interrupted: the server running this turn stopped before it finished"


def lease_seconds(environ: Mapping[str, str] | None = None) -> float:
    """How long a lease lives without renewal: how long a dead server's sessions stay locked."""
    text = (os.environ if environ is None else environ).get(LEASE_SECONDS_ENV, "")
    if not text:
        return DEFAULT_LEASE_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not 0.5 <= seconds <= 3600:
        raise ValueError(f"{LEASE_SECONDS_ENV} must be 0.5 to 3600 seconds, got {text!r}")
    return seconds


class TurnLease:
    """A held lease on one session's turn; renewed by its keeper until released."""

    def __init__(self, keeper: LeaseKeeper, session_id: str, holder: str) -> None:
        self.keeper = keeper
        self.session_id = session_id
        self.holder = holder
        self.lost = False
        """Set when a renewal found another holder (this process could not renew in time)."""

    async def release(self) -> None:
        self.released()
        await self.keeper.storage.release_turn(self.session_id, self.holder)

    def released(self) -> None:
        """Stop renewing it: it was released with the turn's last entry (`releases_turn`)."""
        self.keeper.forget(self)


class LeaseKeeper:
    """Takes sessions' leases for this process and keeps them alive while their turns run."""

    def __init__(self, storage: Storage, instance: str, seconds: float | None = None) -> None:
        self.storage = storage
        self.instance = instance
        self.seconds = lease_seconds() if seconds is None else seconds
        self._held: dict[str, TurnLease] = {}

    async def acquire(self, session_id: str, note: JSONObject | None = None) -> TurnLease:
        """Take the session's lease, or `SessionBusyError` while another turn holds it (or
        a dead turn waits to be continued). `note` says which turn holds it, so that the
        process that takes it over after a crash can continue the turn (SPEC 23); what a
        dead holder without one left open is the new holder's to close (`recover`)."""
        holder = f"{self.instance}:{uuid.uuid4().hex[:8]}"
        if not await self.storage.try_acquire_turn(session_id, holder, self.seconds, note):
            raise SessionBusyError(session_id)
        return self._keep(session_id, holder)

    async def take_over(self, session_id: str) -> TurnLease | None:
        """Take the expired lease of a dead turn to continue it (its note stays); None when
        another process was first."""
        holder = f"{self.instance}:{uuid.uuid4().hex[:8]}"
        storage = self.storage
        if not await storage.try_acquire_turn(session_id, holder, self.seconds, take_over=True):
            return None
        return self._keep(session_id, holder)

    def _keep(self, session_id: str, holder: str) -> TurnLease:
        lease = TurnLease(self, session_id, holder)
        self._held[holder] = lease
        return lease

    def forget(self, lease: TurnLease) -> None:
        self._held.pop(lease.holder, None)

    async def run(self) -> None:
        """Renew every held lease a few times a lease, until cancelled."""
        while True:
            await anyio.sleep(self.seconds / 3)
            for lease in list(self._held.values()):
                if lease.lost:
                    continue
                if not await self.storage.renew_turn(lease.session_id, lease.holder, self.seconds):
                    lease.lost = lease.holder in self._held  # released meanwhile: not lost
                    if lease.lost:
                        logger.error(
                            "lease_lost",
                            extra={"event": "lease_lost", "session": lease.session_id},
                        )


async def recover(
    storage: Storage, view: SessionView, awaiting: Set[str] = frozenset()
) -> list[Logged]:
    """Close what a dead holder of the session left open; the caller holds the lease now and
    `view` has caught up with the log. The entries this appended (the view has them too).
    A call a person is asked to approve (pending, or in `awaiting`: being answered now) is
    left open.

    A turn whose log has no `done` died with its holder, whether or not its run was ever
    recorded: its runs still `running` become `interrupted`, its tool calls without a
    result get an interrupted one, and it gets the `error` and `done` it never wrote, so
    anyone following it sees it end.
    """
    dead = view.open_turn
    if dead is None:
        return []
    session_id = view.session_id
    closed = await storage.interrupt_runs(session_id, INTERRUPTED_RUN)
    logger.warning("turn_interrupted", extra={"event": "turn_interrupted", "session": session_id})
    roots = [(run.id, run.agent) for run in closed if run.depth == 0 and run.id != dead.run_id]
    roots.insert(0, (dead.run_id, dead.agent))
    appended: list[Logged] = []

    async def write(entry: LogEntry, run_id: str, agent: str) -> None:
        logged = await append(
            storage, session_id, entry, run_id=run_id, agent=agent, bundle_version=None
        )
        view.add(logged)
        appended.append(logged)

    pending = {p.call_id for p in await storage.list_pending(session_id)} | awaiting
    for call_id, name in view.unanswered(pending):
        await write(ToolResultEntry.interrupted(call_id, name), dead.run_id, dead.agent)
    for run_id, agent in roots:
        await write(ErrorEntry("interrupted", INTERRUPTED_RUN), run_id, agent)
        await write(DoneEntry("error"), run_id, agent)
    return appended


__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "LEASE_SECONDS_ENV",
    "LeaseKeeper",
    "TurnLease",
    "lease_seconds",
    "recover",
]
