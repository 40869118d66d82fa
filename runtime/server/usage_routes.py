"""`/usage`: what model calls spent (SPEC 22; docs/budgets.md).

- `GET /usage?since=ISO&until=ISO&group_by=agent|model|owner|scope|day|session&limit=`:
  `{"rows": [{<key>, "input_tokens", "output_tokens", "cached_tokens", "cost_usd",
  "model_calls", "turns"}], "total": {...}}`. An end user sees only their own calls (their
  scope and `sub`); the operator sees every caller's. Rows by `day` come in time order,
  the others most expensive first.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query

from runtime.server.dependencies import CallerDep, RuntimeDep
from runtime.server.errors import runtime_call
from runtime.storage import UsageGroup

MAX_ROWS = 10_000

router = APIRouter()


@router.get("/usage")
async def usage(
    who: CallerDep,
    runtime: RuntimeDep,
    since: datetime | None = None,
    until: datetime | None = None,
    group_by: UsageGroup | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_ROWS)] = 1000,
) -> dict[str, Any]:
    """Spend from `since` (inclusive) to `until` (exclusive), grouped; the caller's own
    (every caller's for an operator). Times carry their zone (`2025-01-02T00:00:00Z`)."""
    report = await runtime_call(
        runtime.usage(
            since=since,
            until=until,
            group_by=group_by,
            claims=who.claims,
            operator=who.operator,
            limit=limit,
        )
    )
    return report.as_json()


__all__ = ["router"]
