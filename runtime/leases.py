"""One turn per session: a turn holds its session's lease in the database while it runs.

The lease is a row in storage, so it holds across processes and servers. A turn
takes it before anything streams (or the request is refused as busy), renews it
while it runs, and gives it up when it ends; a holder that crashed stops renewing,
so its lease lapses after `LEASE_SECONDS`.
"""

from __future__ import annotations

import time
import uuid

from runtime.exceptions import SessionBusyError
from runtime.storage import Storage

LEASE_SECONDS = 60.0
RENEW_AFTER_SECONDS = 15.0


class TurnLease:
    """A held lease on one session's turn."""

    def __init__(self, storage: Storage, session_id: str, holder: str) -> None:
        self.storage = storage
        self.session_id = session_id
        self.holder = holder
        self._renewed = time.monotonic()

    @classmethod
    async def acquire(cls, storage: Storage, session_id: str, instance: str) -> TurnLease:
        """Take the session's lease, or `SessionBusyError` while another turn holds it."""
        holder = f"{instance}:{uuid.uuid4().hex[:8]}"
        if not await storage.try_acquire_turn(session_id, holder, LEASE_SECONDS):
            raise SessionBusyError(session_id)
        return cls(storage, session_id, holder)

    async def keep(self) -> None:
        """Renew the lease when it is due (called as the turn makes progress)."""
        now = time.monotonic()
        if now - self._renewed > RENEW_AFTER_SECONDS:
            self._renewed = now
            await self.storage.renew_turn(self.session_id, self.holder, LEASE_SECONDS)

    async def release(self) -> None:
        await self.storage.release_turn(self.session_id, self.holder)
