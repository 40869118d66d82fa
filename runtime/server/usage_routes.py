"""`/usage`: what model calls spent (SPEC 22; docs/budgets.md).

- `GET /usage?since=ISO&until=ISO&group_by=agent|model|owner|scope|day|session|kind&limit=`:
  `{"rows": [{<key>, "input_tokens", "output_tokens", "cached_tokens", "cost_usd",
  "model_calls", "turns"}], "total": {...}}`. An end user sees only their own calls (their
  scope and `sub`); the operator sees every caller's. Rows by `day` come in time order,
  the others most expensive first.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query

from runtime.exceptions import InvalidRequestError
from runtime.server.dependencies import CallerDep, RuntimeDep
from runtime.server.errors import runtime_call
from runtime.storage import UsageGroup

MAX_ROWS = 10_000
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$")
"""A time with its zone, as RFC 3339 writes it (a number is no time: FastAPI would take
`0.5` as seconds since 1970)."""
TIME = Query(json_schema_extra={"format": "date-time", "pattern": RFC3339.pattern})

router = APIRouter()


@router.get("/usage")
async def usage(
    who: CallerDep,
    runtime: RuntimeDep,
    since: Annotated[str | None, TIME] = None,
    until: Annotated[str | None, TIME] = None,
    group_by: UsageGroup | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_ROWS)] = 1000,
) -> dict[str, Any]:
    """Spend from `since` (inclusive) to `until` (exclusive), grouped; the caller's own
    (every caller's for an operator). Times carry their zone (`2025-01-02T00:00:00Z`)."""
    report = await runtime_call(
        runtime.usage(
            since=_time(since, "since"),
            until=_time(until, "until"),
            group_by=group_by,
            claims=who.claims,
            operator=who.operator,
            limit=limit,
        )
    )
    return report.as_json()


def _time(text: str | None, name: str) -> datetime | None:
    """A query's time; 422 unless it is an RFC 3339 date and time with its zone."""
    if text is None:
        return None
    if RFC3339.match(text) is not None:
        date, _, clock = text.replace("t", "T").replace(" ", "T").partition("T")
        clock = clock.upper().replace("Z", "+00:00")
        whole, dot, rest = clock.partition(".")
        if dot:  # Python reads at most microseconds
            digits = re.match(r"\d+", rest)
            assert digits is not None
            clock = f"{whole}.{digits.group()[:6].ljust(6, '0')}{rest[digits.end() :]}"
        try:
            return datetime.fromisoformat(f"{date}T{clock}")
        except ValueError:
            pass
    raise InvalidRequestError(
        f"`{name}` must be a date and time with its zone, e.g. 2025-01-02T00:00:00Z; got {text!r}"
    )


__all__ = ["router"]
