"""Turns that outlive their process (SPEC 23): every runtime sweeps for dead turns.

A turn holds its session's lease with a note of itself (`chats.turn_note`). When its
process dies, the lease stops being renewed and expires with the note still on it; no
new turn may take such a lease. `Resumer.sweep` finds them (`Storage.expired_turns`),
takes each one over (one process wins) and runs the turn's continuation in the
background like any turn an HTTP client started (`TurnStreams.start`), so anyone
following the session sees it go on and end. What the continuation does is the turn's
own (`Turn._continued`): it reuses what the log committed and decides, call by call,
what a crash left unfinished.
"""

from __future__ import annotations

import logging

import anyio

from runtime.engine.chats import ChatService
from runtime.engine.streams import TurnStreams

logger = logging.getLogger("amodal")

SWEEP_SECONDS = 2.0
"""How often a runtime looks for dead turns (SPEC 23: at least every 5 s)."""


class Resumer:
    """Finds the turns whose process died and continues them in this process."""

    def __init__(
        self, chats: ChatService, streams: TurnStreams, seconds: float | None = None
    ) -> None:
        self.chats = chats
        self.streams = streams
        # Never slower than half a lease: a dead turn waits at most a lease and a sweep.
        self.seconds = seconds or min(SWEEP_SECONDS, chats.leases.seconds / 2)

    async def run(self) -> None:
        """Sweep every `seconds`, until cancelled; a failed sweep is logged and retried."""
        while True:
            try:
                await self.sweep()
            except Exception:
                logger.exception("resume_sweep_failed", extra={"event": "resume_sweep_failed"})
            await anyio.sleep(self.seconds)

    async def sweep(self) -> int:
        """Continue every dead turn this process wins; how many it started."""
        started = 0
        for expired in await self.chats.storage.expired_turns():
            turn = await self.chats.take_over(expired)
            if turn is not None:
                self.streams.start(turn)
                started += 1
        return started


__all__ = ["SWEEP_SECONDS", "Resumer"]
