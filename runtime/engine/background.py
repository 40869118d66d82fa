"""Background turns (SPEC 23): a durable queue in the database, and the workers that drain it.

`ChatService.enqueue` checks a request as a chat would and adds it to the queue; any
process of the database that takes background work (each `amodal serve` process unless
`--no-background`, each `amodal worker`) runs `Workers`: while one of its `concurrency`
slots is free it claims the oldest ready turn (`Storage.claim_turn`: `FOR UPDATE SKIP
LOCKED` on PostgreSQL, one write transaction on SQLite) and runs it like a turn an HTTP
client started (`TurnStreams.start`, so followers on this process see it live).

A claim lapses like a lease. A turn is marked `started` once its `turn` entry is in the
session's log: from then on the log is its record, and a crash is the resume sweep's to
handle (`runtime.engine.resume`). A worker that dies between its claim and that entry
leaves a claim that lapses; the next worker to claim the turn checks the log first, so
the turn runs once. A turn whose session is busy goes back to the queue for a moment.
"""

from __future__ import annotations

import logging
import time
import uuid

import anyio

from runtime.engine.chats import ChatService, caller_of_note, request_of_json
from runtime.engine.log import TurnEntry, read
from runtime.engine.streams import TurnStreams
from runtime.exceptions import AmodalError, SessionBusyError
from runtime.storage import QueuedTurn

logger = logging.getLogger("amodal")

IDLE_SECONDS = 0.5
"""How long an idle worker waits before it asks the queue again."""
BUSY_RETRY_SECONDS = 1.0
"""How long a turn whose session is busy waits before it is claimed again."""


class Workers:
    """The loops of one process that run queued turns."""

    def __init__(self, chats: ChatService, streams: TurnStreams, concurrency: int = 1) -> None:
        if concurrency < 1:
            raise ValueError(f"a worker runs at least one turn at a time, not {concurrency}")
        self.chats = chats
        self.streams = streams
        self.concurrency = concurrency
        self.name = f"{chats.instance}:{uuid.uuid4().hex[:6]}"
        self.ran = 0
        """Turns this process ran to their end."""

    async def run(self, stop: anyio.Event | None = None) -> None:
        """Run queued turns, `concurrency` at a time, until cancelled, or until `stop` is
        set and the turns running have ended. One loop asks the queue, and only while a
        slot is free: an idle process asks every `IDLE_SECONDS`."""
        storage, seconds = self.chats.storage, self.chats.leases.seconds
        slots = anyio.Semaphore(self.concurrency)
        stopping = stop or anyio.Event()
        async with anyio.create_task_group() as group:
            while not stopping.is_set():
                await slots.acquire()
                if stopping.is_set():
                    break
                try:
                    queued = await storage.claim_turn(self.name, seconds)
                except Exception:  # a storage fault: logged, and the loop goes on
                    logger.exception("background_failed", extra={"event": "background_failed"})
                    queued = None
                if queued is None:
                    slots.release()
                    with anyio.move_on_after(IDLE_SECONDS):
                        await stopping.wait()
                    continue
                group.start_soon(self._run_in_slot, queued, slots)

    async def _run_in_slot(self, queued: QueuedTurn, slots: anyio.Semaphore) -> None:
        try:
            await self.run_one(queued)
        except Exception:
            logger.exception(
                "background_failed", extra={"event": "background_failed", "turn": queued.turn_id}
            )
        finally:
            slots.release()

    async def run_one(self, queued: QueuedTurn) -> None:
        """Run one claimed turn to its end (or hand it back while its session is busy)."""
        storage, chats = self.chats.storage, self.chats
        request = request_of_json(queued.request)
        try:
            turn = await chats.start_turn(
                request, caller_of_note({"caller": queued.caller}), run_id=queued.turn_id
            )
        except SessionBusyError:
            await storage.defer_turn(queued.turn_id, self.name, BUSY_RETRY_SECONDS)
            return
        except AmodalError as refusal:  # its session was deleted, its agent removed...
            logger.warning(
                "background_refused",
                extra={"event": "background_refused", "turn": queued.turn_id,
                       "error": str(refusal)},
            )  # fmt: skip
            await storage.mark_turn(queued.turn_id, "done")
            return
        if queued.attempts > 1 and await _in_log(chats, queued):
            await turn.aclose()  # a worker that died after starting it: the sweep continues it
            await storage.mark_turn(queued.turn_id, "started")
            return
        clock = time.monotonic()
        live = self.streams.start(turn)
        started = False
        async for event in live.tail():
            if not started and event.type == "session":
                started = True
                await storage.mark_turn(queued.turn_id, "started")
        await storage.mark_turn(queued.turn_id, "done")
        self.ran += 1
        logger.info(
            "background_turn",
            extra={"event": "background_turn", "turn": queued.turn_id,
                   "seconds": round(time.monotonic() - clock, 3)},
        )  # fmt: skip


async def _in_log(chats: ChatService, queued: QueuedTurn) -> bool:
    """Whether an earlier claim of this turn got as far as its `turn` entry."""
    return any(
        isinstance(logged.entry, TurnEntry) and logged.run_id == queued.turn_id
        for logged in await read(chats.storage, queued.session_id)
    )


__all__ = ["BUSY_RETRY_SECONDS", "IDLE_SECONDS", "Workers"]
