"""Where a run's outcome goes (SPEC 23): signed webhooks retried with backoff, and store
documents; and the failure alert.

A webhook gets the outcome as JSON with an `X-Amodal-Delivery` id that stays the same
across its retries, also by another process after this one died (the receiver drops
duplicates: delivery is at least once); a store target is written once (a retry finds
its document there). A target that is down is retried and its failure recorded; it never
blocks another target or another run, because each run delivers in its own task.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import httpx

from runtime.automations.signing import DELIVERY_HEADER, signed_headers
from runtime.exceptions import AmodalError
from runtime.repo.automations import Target
from runtime.repo.bundle import Bundle
from runtime.storage import JSONObject, Storage
from runtime.stores import document_key, partition, validate_document

logger = logging.getLogger("amodal")

BACKOFF_SECONDS: tuple[float, ...] = (1.0, 4.0, 15.0)
"""The pauses between a webhook's attempts: four attempts in about 20 s."""
_RETRIED = frozenset({408, 425, 429, 500, 502, 503, 504})


class Deliverer:
    """Sends outcomes. `backoff` and `clock` are the tests' to shorten."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        storage: Storage,
        *,
        backoff: Sequence[float] = BACKOFF_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.http = http
        self.storage = storage
        self.backoff = tuple(backoff)
        self.clock = clock

    async def send(
        self,
        bundle: Bundle,
        target: Target,
        outcome: JSONObject,
        scope_id: str,
        delivery: str,
    ) -> JSONObject:
        """Deliver `outcome` to one target under the id `delivery`: how it went."""
        if target.kind == "webhook":
            assert target.url is not None
            return await self.post(target.url, target.secret, outcome, delivery)
        return await self._store(bundle, target, outcome, scope_id)

    async def post(
        self, url: str, secret: str | None, document: JSONObject, delivery: str
    ) -> JSONObject:
        """POST `document` until it is taken (2xx) or the attempts run out."""
        body = json.dumps(document, ensure_ascii=False).encode()
        error = ""
        for attempt in range(len(self.backoff) + 1):
            if attempt:
                await anyio.sleep(self.backoff[attempt - 1])
            headers = signed_headers(secret, body, self.clock())
            headers[DELIVERY_HEADER] = delivery
            try:
                response = await self.http.post(url, content=body, headers=headers)
            except httpx.HTTPError as failure:
                error = f"{type(failure).__name__}: {failure}"
                continue
            if 200 <= response.status_code < 300:
                return {"status": "delivered", "attempts": attempt + 1}
            error = f"HTTP {response.status_code}"
            if response.status_code not in _RETRIED:
                return {"status": "failed", "attempts": attempt + 1, "error": error}
        logger.warning(
            "automation_delivery_failed",
            extra={"event": "automation_delivery_failed", "url": url, "error": error},
        )
        return {"status": "failed", "attempts": len(self.backoff) + 1, "error": error}

    async def _store(
        self, bundle: Bundle, target: Target, outcome: JSONObject, scope_id: str
    ) -> JSONObject:
        store = bundle.stores.get(target.store or "")
        if store is None:
            return {"status": "failed", "attempts": 1, "error": f"no store {target.store!r}"}
        # The document is the outcome's fields that the store's schema has.
        fields = {name: value for name, value in outcome.items() if name in store.schema}
        try:
            document = validate_document(store, fields)
            key = (
                target.key.render_with(_key_variables(outcome)).strip()
                if target.key is not None
                else document_key(store, document)
            )
            if not key:
                raise ValueError("the key template rendered empty")
            space = partition(store, scope_id)
            earlier = await self.storage.get_document(space, store.name, key)
            if earlier is not None and earlier.data == document:
                # Written already (a process that died before recording it did): a retry
                # of the same delivery writes nothing twice, no second version.
                return {"status": "delivered", "attempts": 1, "key": key}
            await self.storage.put_document(
                space,
                store.name,
                key,
                document,
                ttl_seconds=store.ttl,
                keep_versions=store.history_versions,
            )
        except (AmodalError, ValueError, TypeError) as failure:
            return {"status": "failed", "attempts": 1, "error": str(failure)}
        return {"status": "delivered", "attempts": 1, "key": key}


def _key_variables(outcome: JSONObject) -> dict[str, Any]:
    return {
        "automation": outcome["automation"],
        "run_id": outcome["run_id"],
        "now": outcome["at"],
        "slot": outcome.get("slot") or "",
        "trigger": outcome.get("trigger", ""),
        "payload": "",
    }
