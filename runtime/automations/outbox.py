"""A run's outcome reaches its targets at least once, whatever process dies (SPEC 23).

The step that ends a run (`AutomationStorage.end_automation_run`) writes its outcome and
one `pending` entry per delivery, each with its delivery id, and takes a delivery lease
(expiring as a turn's lease does, `AMODAL_LEASE_SECONDS`). `Outbox.send` then delivers
the pending entries, records each as it goes and renews the lease while it works; when
its process dies the lease lapses and the next sweep of any `amodal serve` or `amodal
worker` (`Outbox.retake`) takes it over and sends what is still pending, under the same
delivery ids, with the same outcome (it is rebuilt from the run's record). A webhook
receiver drops the ids it has seen; a store target writes nothing twice.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import anyio

from runtime.automations.delivery import Deliverer
from runtime.repo.automations import AutomationDefinition
from runtime.repo.bundle import Bundle
from runtime.storage import AlertClaim, AutomationRunRecord, JSONObject, Storage, utc_now

logger = logging.getLogger("amodal")

PENDING = "pending"
ALERT_TARGET = "failureAlert"


def outcome_of(run: AutomationRunRecord) -> JSONObject:
    """What every target of an ended run gets: the same document on every retry."""
    return {
        "automation": run.automation,
        "run_id": run.id,
        "session_id": run.session_id,
        "status": run.status,
        "reply": run.reply,
        "done_reason": run.done_reason,
        "error": run.error,
        "trigger": run.trigger,
        "slot": run.slot.isoformat() if run.slot else None,
        "at": (run.ended_at or utc_now()).isoformat(),
    }


def pending_entries(
    definition: AutomationDefinition, run: AutomationRunRecord, status: str
) -> list[JSONObject]:
    """The run's deliveries with this end's added as `pending`. The first end of a run
    delivers under `<run_id>-<index>`; a run that waited for a confirmation ends again
    when its confirmed turn does, and that end's ids are `<run_id>-<index>-2` (and so
    on), so a receiver that drops seen ids still gets the final outcome. An earlier
    end's delivery still pending is superseded: the newer outcome is the one to send."""
    earlier = run.deliveries
    kept = [
        {**entry, "status": "failed", "error": "superseded by the run's later end"}
        if entry.get("status") == PENDING
        else entry
        for entry in earlier
    ]
    added: list[JSONObject] = []
    for index, target in enumerate(definition.deliver):
        before = sum(1 for entry in earlier if entry.get("index") == index)
        suffix = f"-{before + 1}" if before else ""
        added.append(
            {
                "target": target.describe(),
                "index": index,
                "delivery_id": f"{run.id}-{index}{suffix}",
                "for_status": status,
                "status": PENDING,
            }
        )
    return kept + added


def alert_claim(definition: AutomationDefinition, run_id: str) -> AlertClaim | None:
    """What the end of a failed run needs to take its failure alert, if it has one."""
    alert = definition.failure_alert
    if alert is None:
        return None
    delivery: JSONObject = {
        "target": ALERT_TARGET,
        "delivery_id": f"{run_id}-alert",
        "for_status": "error",
        "status": PENDING,
    }
    return AlertClaim(alert.after, alert.cooldown_minutes * 60, utc_now(), delivery)


class Outbox:
    """Sends ended runs' pending deliveries under a lease, and takes over the ones whose
    process died."""

    def __init__(
        self,
        storage: Storage,
        deliverer: Deliverer,
        bundle: Callable[[], Bundle],
        definitions: Callable[[], Mapping[str, AutomationDefinition]],
        lease_seconds: float,
    ) -> None:
        self.storage = storage
        self.deliverer = deliverer
        self.bundle = bundle
        self.definitions = definitions
        self.lease_seconds = lease_seconds
        self.sending: set[str] = set()
        """The runs this process delivers now."""

    @staticmethod
    def holder() -> str:
        """A new holder for one run's deliveries: each sending task holds its own lease, so
        a run's later end takes the lease from an earlier end's task of the same process."""
        return f"delivery_{uuid.uuid4().hex[:16]}"

    async def retake(self, start: Callable[[AutomationRunRecord, str], object]) -> list[str]:
        """Claim the runs whose delivery lease lapsed (its holder died) and `start` sending
        each (in a task of the caller's); the ids of the runs claimed."""
        claimed: list[str] = []
        for run in await self.storage.due_automation_deliveries():
            if run.id in self.sending:
                continue
            holder = self.holder()
            taken = await self.storage.claim_automation_deliveries(
                run.id, holder, self.lease_seconds
            )
            if taken is not None:
                claimed.append(taken.id)
                start(taken, holder)
        return claimed

    async def send(self, run: AutomationRunRecord, holder: str) -> None:
        """Deliver the run's pending entries, recording each as it is done; give the lease
        up at the end. Stops when another holder took the lease."""
        entries = [dict(entry) for entry in run.deliveries]
        self.sending.add(run.id)
        try:
            async with anyio.create_task_group() as group:

                async def save(final: bool = False) -> None:
                    ttl = None if final else self.lease_seconds
                    if not await self.storage.save_automation_deliveries(
                        run.id, holder, entries, ttl
                    ):
                        group.cancel_scope.cancel()  # a later end or a sweep has it now

                async def one(index: int) -> None:
                    entries[index] = {**entries[index], **await self._one(run, entries[index])}
                    await save()

                async def renew() -> None:
                    while True:
                        await anyio.sleep(self.lease_seconds / 3)
                        await save()

                group.start_soon(renew)
                async with anyio.create_task_group() as sends:
                    for index, entry in enumerate(entries):
                        if entry.get("status") == PENDING:
                            sends.start_soon(one, index)
                with anyio.CancelScope(shield=True):
                    await save(final=True)
                group.cancel_scope.cancel()
        finally:
            self.sending.discard(run.id)

    async def _one(self, run: AutomationRunRecord, entry: JSONObject) -> dict[str, Any]:
        outcome = outcome_of(run)
        delivery = str(entry["delivery_id"])
        definition = self.definitions().get(run.automation)
        if entry.get("target") == ALERT_TARGET:
            alert = definition.failure_alert if definition is not None else None
            if alert is None:
                return _failed("the automation no longer has a failure alert")
            document = {
                **outcome,
                "consecutive_failures": entry.get("consecutive_failures"),
                "alert": True,
            }
            return await self.deliverer.post(alert.url, alert.secret, document, delivery)
        index = entry.get("index")
        targets = definition.deliver if definition is not None else ()
        if not isinstance(index, int) or index >= len(targets):
            return _failed("the automation no longer has this delivery target")
        target = targets[index]
        if target.describe() != entry.get("target"):
            return _failed("the automation's delivery target changed")
        assert definition is not None
        scope = definition.claims.get("scope", "default")
        return await self.deliverer.send(self.bundle(), target, outcome, scope, delivery)


def _failed(error: str) -> JSONObject:
    return {"status": "failed", "attempts": 0, "error": error}
